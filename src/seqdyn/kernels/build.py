"""Building and loading the native CPU kernels (``scan_kernel.cpp``) as ``torch.library`` operators.

Each kernel is a C++ source that registers its operators with ``TORCH_LIBRARY`` and takes typed tensors.  It is
built once per machine with the system C++ compiler (``$CXX``, else ``c++``; about 20 s, mostly torch's headers)
against the running torch into ``$SEQDYN_CACHE`` (default ``~/.cache/seqdyn``) and loaded with
:func:`torch.ops.load_library`; the module beside it then registers the operators' fake implementations and
autograd formulas.  A kernel splits its work over torch's intra-op threads (:func:`torch.get_num_threads`).

``SEQDYN_KERNELS`` chooses: ``off`` (the torch definitions run everywhere), ``auto`` (the default: a kernel that
cannot be built is reported once by a warning, and its torch definition runs) or ``require`` (a kernel that
cannot be built raises :class:`KernelUnavailable`).  ``SEQDYN_COMPILE=0`` is the older spelling of ``off``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import torch
from torch import Tensor

#: flags for every machine; :func:`machine_flags` adds the CPU's own vector instructions, :func:`torch_flags`
#: the running torch's headers and libraries
FLAGS = (
    "-O3",
    "-fno-math-errno",
    "-fassociative-math",
    "-fno-signed-zeros",
    "-fno-trapping-math",
    "-fopenmp",
    "-fPIC",
    "-shared",
    "-std=c++20",
)
#: the header every kernel source includes (shipped beside it into the build)
HEADER = "native_math.h"
MODES = ("off", "auto", "require")
#: the dtypes the kernels are compiled for
DTYPES = (torch.float32, torch.float64)


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


def torch_flags() -> tuple[str, ...]:
    """The running torch's headers and C++ ABI, and its libraries (linked by path, so that the kernel uses the
    ``c10``, ``torch_cpu`` and OpenMP runtime this process has already loaded)."""
    root = Path(torch.__file__).parent
    abi = int(torch.compiled_with_cxx11_abi())
    return (
        f"-I{root / 'include'}",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-L{root / 'lib'}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{root / 'lib'}",
    )


def _compile(compiler: str, source: str, header: str, name: str, flags: tuple[str, ...]) -> Path:
    """The shared library of kernel ``name`` from ``source`` (with :data:`HEADER`'s text ``header``), compiled
    with ``flags`` against the running torch unless this machine's cache already holds it."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256("\0".join((source, header, compiler, version, torch.__version__, *flags, _cpu())).encode())
    target = _cache_dir() / f"{name}-{key.hexdigest()[:20]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        source_file, built = Path(tmp) / f"{name}.cpp", Path(tmp) / target.name
        source_file.write_text(source)
        (Path(tmp) / HEADER).write_text(header)
        subprocess.run(
            [compiler, *flags, "-o", str(built), str(source_file), *torch_flags()],
            capture_output=True,
            text=True,
            check=True,
        )
        os.replace(built, target)  # atomic: a concurrent process sees no half-written library
    return target


def _build(compiler: str, name: str) -> Path:
    """Kernel ``name`` built with this CPU's vector flags, else without them, else also without OpenMP (its work
    then runs on one thread), as far down that list as the compiler needs."""
    folder = resources.files("seqdyn.kernels")
    source, header = folder.joinpath(f"{name}.cpp").read_text(), folder.joinpath(HEADER).read_text()
    serial = tuple("-fopenmp-simd" if flag == "-fopenmp" else flag for flag in FLAGS)
    candidates = list(dict.fromkeys((FLAGS + machine_flags(), FLAGS, serial)))
    for flags in candidates[:-1]:
        try:
            return _compile(compiler, source, header, name, flags)
        except subprocess.CalledProcessError:
            pass
    return _compile(compiler, source, header, name, candidates[-1])


#: each kernel's Python registrations (its operators' fake implementations and autograd formulas), run once after
#: its library is loaded; filled in by the modules of the kernels
KERNELS: dict[str, Callable[[], None]] = {}
#: the kernels whose operators this process has registered (an operator is registered only once)
_LOADED: set[str] = set()


@functools.cache
def load(name: str) -> Path | str:
    """Kernel ``name`` built and its operators registered (the built library's path), or why it could not be
    (once per process; the operators stay those of the first library loaded)."""
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not compiler:
        return "no C++ compiler found ($CXX, c++, g++, clang++)"
    try:
        path = _build(compiler, name)
        if name not in _LOADED:
            torch.ops.load_library(str(path))
            KERNELS[name]()
            _LOADED.add(name)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as error:
        detail = (getattr(error, "stderr", "") or str(error)).strip()
        return detail.splitlines()[-1] if detail else type(error).__name__
    return path


def library(name: str) -> Path | None:
    """The loaded kernel ``name`` (its library's path), or ``None`` where ``SEQDYN_KERNELS=off`` or where it cannot
    be built (then ``auto`` warns once per kernel and ``require`` raises :class:`KernelUnavailable`)."""
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
    return (
        dtype in DTYPES
        and all(x.device.type == "cpu" and x.dtype == dtype for x in present)
        and library(name) is not None
    )
