"""Building, loading and running the native CPU kernels (``scan_kernel.cpp``).

Each kernel is built once per machine with the system C++ compiler (``$CXX``, else ``c++``; a few seconds) into
``$SEQDYN_CACHE`` (default ``~/.cache/seqdyn``) and loaded with :mod:`ctypes`, which releases the GIL, so a pool
of :func:`torch.get_num_threads` threads splits the work items.  A kernel takes one argument structure; the C++
exports its size and field offsets, and a kernel whose structure differs from its Python mirror is refused at
load time (a drift between the two is then an error, not memory corruption).

``SEQDYN_KERNELS`` chooses: ``off`` (the torch definitions run everywhere), ``auto`` (the default: a kernel that
cannot be built is reported once by a warning, and its torch definition runs) or ``require`` (a kernel that
cannot be built raises :class:`KernelUnavailable`).  ``SEQDYN_COMPILE=0`` is the older spelling of ``off``.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import torch
from torch import Tensor

#: flags for every machine; :func:`machine_flags` adds the CPU's own vector instructions
FLAGS = ("-O3", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math",
         "-fopenmp-simd", "-fPIC", "-shared", "-std=c++17")
#: the header every kernel source includes (shipped beside it into the build)
HEADER = "native_math.h"
MODES = ("off", "auto", "require")
#: the dtypes the kernels are compiled for, and the suffix of their entry points
DTYPES = {torch.float32: "f32", torch.float64: "f64"}


class KernelUnavailable(RuntimeError):
    """A native kernel could not be built or loaded while ``SEQDYN_KERNELS=require``."""


def mode() -> str:
    """``SEQDYN_KERNELS`` (``off``, ``auto`` or ``require``; ``SEQDYN_COMPILE=0`` means ``off``)."""
    chosen = os.environ.get("SEQDYN_KERNELS", "").strip().lower()
    if not chosen:
        return "off" if os.environ.get("SEQDYN_COMPILE", "1") == "0" else "auto"
    if chosen not in MODES:
        raise ValueError(f"SEQDYN_KERNELS: expected one of {', '.join(MODES)}, got {chosen!r}")
    return chosen


def machine_flags(machine: str | None = None) -> tuple[str, ...]:
    """The flags that let the compiler use this CPU's vector instructions: ``-march=native`` with 512-bit vectors
    preferred on x86-64, ``-mcpu=native`` on 64-bit ARM, none elsewhere."""
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64"):
        return ("-march=native", "-mprefer-vector-width=512")
    if machine in ("aarch64", "arm64"):
        return ("-mcpu=native",)
    return ()


def _cache_dir() -> Path:
    return Path(os.environ.get("SEQDYN_CACHE", Path.home() / ".cache" / "seqdyn")) / "kernels"


def _cpu() -> str:
    """What ``native`` compiles for: the CPU's model and feature flags where Linux tells them."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine() + platform.processor()
    return "".join(sorted({line for line in lines if line.startswith(("model name", "flags"))}))


def _compile(compiler: str, source: str, header: str, name: str, flags: tuple[str, ...]) -> Path:
    """The shared library of kernel ``name`` from ``source`` (with :data:`HEADER`'s text ``header``), compiled
    with ``flags`` unless this machine's cache already holds it."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256("\0".join((source, header, compiler, version, *flags, _cpu())).encode()).hexdigest()[:20]
    target = _cache_dir() / f"{name}-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        source_file, built = Path(tmp) / f"{name}.cpp", Path(tmp) / target.name
        source_file.write_text(source)
        (Path(tmp) / HEADER).write_text(header)
        subprocess.run([compiler, *flags, "-o", str(built), str(source_file), "-lm"], capture_output=True,
                       text=True, check=True)
        os.replace(built, target)  # atomic: a concurrent process sees no half-written library
    return target


def _build(compiler: str, name: str) -> Path:
    """Kernel ``name`` built with this CPU's vector flags, or without them where the compiler refuses them."""
    folder = resources.files("seqdyn.kernels")
    source, header = folder.joinpath(f"{name}.cpp").read_text(), folder.joinpath(HEADER).read_text()
    extra = machine_flags()
    try:
        return _compile(compiler, source, header, name, FLAGS + extra)
    except subprocess.CalledProcessError:
        if not extra:
            raise
        return _compile(compiler, source, header, name, FLAGS)


def check_layout(lib: ctypes.CDLL, prefix: str, structure: type[ctypes.Structure]) -> None:
    """Refuse a kernel whose argument structure (size and field offsets, as ``<prefix>_layout`` reports them)
    differs from its Python mirror ``structure``."""
    fields = [name for name, _ in structure._fields_]
    reported = (ctypes.c_int64 * (len(fields) + 1))()
    layout = getattr(lib, f"{prefix}_layout")
    layout.argtypes, layout.restype = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64], ctypes.c_int64
    count = layout(reported, len(fields) + 1)
    expected = [getattr(structure, name).offset for name in fields] + [ctypes.sizeof(structure)]
    if count != len(expected) or list(reported) != expected:
        raise OSError(f"{prefix}: the C++ argument structure (offsets and size {list(reported)[:count]}) differs "
                      f"from its Python mirror {structure.__name__} ({expected})")


def _declare(lib: ctypes.CDLL, prefix: str, structure: type[ctypes.Structure]) -> None:
    """The argument and result types of the kernel's forward and backward entry points for every dtype."""
    args = ctypes.POINTER(structure)
    for suffix in DTYPES.values():
        forward, backward = getattr(lib, f"{prefix}_forward_{suffix}"), getattr(lib, f"{prefix}_backward_{suffix}")
        forward.argtypes, forward.restype = [args, ctypes.c_int64, ctypes.c_int64], ctypes.c_int
        backward.argtypes, backward.restype = [args, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64], ctypes.c_int


#: each kernel source's entry-point prefix and argument structure, filled in by the modules of the kernels
KERNELS: dict[str, tuple[str, type[ctypes.Structure]]] = {}


@functools.cache
def load(name: str) -> ctypes.CDLL | str:
    """Kernel ``name`` built and loaded, or why it could not be (once per process)."""
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not compiler:
        return "no C++ compiler found ($CXX, c++, g++, clang++)"
    prefix, structure = KERNELS[name]
    try:
        lib = ctypes.CDLL(str(_build(compiler, name)))
        check_layout(lib, prefix, structure)
        _declare(lib, prefix, structure)
    except (OSError, AttributeError, subprocess.CalledProcessError) as error:
        detail = (getattr(error, "stderr", "") or str(error)).strip()
        return detail.splitlines()[-1] if detail else type(error).__name__
    return lib


def library(name: str) -> ctypes.CDLL | None:
    """The loaded kernel ``name``, or ``None`` where ``SEQDYN_KERNELS=off`` or where it cannot be built (then
    ``auto`` warns once per kernel and ``require`` raises :class:`KernelUnavailable`)."""
    chosen = mode()
    if chosen == "off":
        return None
    loaded = load(name)
    if not isinstance(loaded, str):
        return loaded
    message = f"{name}: the native kernel could not be built ({loaded})"
    if chosen == "require":
        raise KernelUnavailable(f"{message}; SEQDYN_KERNELS=require")
    _warn_once(name, f"{message}; its torch definition runs instead (SEQDYN_KERNELS=off silences this)")
    return None


@functools.cache
def _warn_once(name: str, message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def forget() -> None:
    """Forget every kernel loaded or refused and every warning given (a later use builds or looks up again)."""
    load.cache_clear()
    _warn_once.cache_clear()


def available(name: str, *tensors: Tensor | None) -> bool:
    """Whether kernel ``name`` can take these tensors: CPU, float32 or float64, one dtype, and the kernel built."""
    present = [x for x in tensors if x is not None]
    dtype = present[0].dtype
    return (dtype in DTYPES and all(x.device.type == "cpu" and x.dtype == dtype for x in present)
            and library(name) is not None)


# -------------------------------------------------------------------------------------------------- running
@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="seqdyn-kernel")


if hasattr(os, "register_at_fork"):  # a forked child (data loader workers, process pools) has none of the threads
    os.register_at_fork(after_in_child=_pool.cache_clear)


def split_items(items: int) -> list[tuple[int, int]]:
    """The work items split into one contiguous range per thread."""
    parts = max(1, min(torch.get_num_threads(), items))
    bounds = [items * i // parts for i in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def run(kernel: str, direction: str, args: ctypes.Structure, dtype: torch.dtype,
        ranges: list[tuple[int, int]]) -> None:
    """The kernel's ``direction`` (``"forward"`` or ``"backward"``) over each range of items in its own thread; the
    backward also takes the range's index, the part of the summed gradients it writes."""
    function = getattr(library(kernel), f"{KERNELS[kernel][0]}_{direction}_{DTYPES[dtype]}")
    pointer = ctypes.byref(args)
    calls = [(pointer, begin, end) + ((part,) if direction == "backward" else ())
             for part, (begin, end) in enumerate(ranges)]
    if len(calls) == 1:
        codes = [function(*calls[0])]
    else:
        codes = list(_pool(len(calls)).map(lambda call: function(*call), calls))
    if any(codes):
        raise MemoryError(f"{kernel}: the native kernel could not allocate its work space ({direction})")


def fields(kind, *names: str) -> list[tuple[str, type]]:
    """``ctypes`` fields ``names``, all of type ``kind``."""
    return [(name, kind) for name in names]
