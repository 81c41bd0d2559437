"""Native CPU kernels: the scan backend's (``scan_kernel.cpp``), the short convolution's (``conv_kernel.cpp``) and
the RMS normalization's with its output gate (``norm_kernel.cpp``), built on first use, run by threads; the scan's
autograd op.

The scan kernel scans a group of up to :data:`GROUP` neighbouring heads of one batch element step by step, each
head's state ``[K, V]`` held in cache for all ``T`` steps — what the selective-scan kernels of Mamba do on a GPU —
and runs the adjoint backwards from states saved every :data:`INTERVAL` steps.  Each kernel is built once per
machine with the system C++ compiler (``$CXX``, else ``c++``; a few seconds) into ``$SEQDYN_CACHE`` (default
``~/.cache/seqdyn``) and loaded with :mod:`ctypes`, which releases the GIL, so a pool of
:func:`torch.get_num_threads` threads splits the work items.  Without a compiler, on other devices or dtypes, or
with ``SEQDYN_COMPILE=0``, :func:`available` is false and the torch definitions run instead — the same
operations, which the tests compare the kernels with.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from seqdyn.core.precision import float32_under_autocast
from seqdyn.core.problem import spread_over_heads

log = logging.getLogger("seqdyn")

#: steps between the states the forward saves for the backward (which recomputes the steps between)
INTERVAL = 64
#: bytes of a group's recomputed block of states that the backward keeps in cache
BLOCK_BYTES = 1 << 17
#: heads scanned together at most, and state elements of such a group at most
GROUP, GROUP_ELEMENTS = 16, 4096
FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fno-math-errno", "-fassociative-math",
         "-fno-signed-zeros", "-fno-trapping-math", "-fopenmp-simd", "-fPIC",
         "-shared", "-std=c++17")
_DTYPES = {torch.float32: "f32", torch.float64: "f64"}


def _fields(kind, *names: str) -> list[tuple[str, type]]:
    return [(name, kind) for name in names]


_STRIDES = ctypes.c_int64 * 3


class ScanArgs(ctypes.Structure):
    """Mirror of ``struct ScanArgs`` in ``scan_kernel.cpp``."""

    _fields_ = (_fields(ctypes.c_int64, "batch", "heads", "length", "key_dim", "value_dim", "interval", "group")
                + _fields(ctypes.c_void_p, "q", "k", "v", "g", "rate", "initial")
                + _fields(_STRIDES, "q_stride", "k_stride", "v_stride", "g_stride")
                + _fields(ctypes.c_int64, "g_per_key", "rate_head_stride")
                + _fields(ctypes.c_void_p, "y", "final", "saved") + _fields(_STRIDES, "y_stride")
                + _fields(ctypes.c_void_p, "grad_y", "grad_final") + _fields(_STRIDES, "grad_y_stride")
                + _fields(ctypes.c_void_p, "grad_q", "grad_k", "grad_v", "grad_g", "grad_rate", "grad_initial")
                + _fields(_STRIDES, "grad_q_stride", "grad_k_stride", "grad_v_stride", "grad_g_stride")
                + _fields(ctypes.c_int64, "grad_q_part_stride", "grad_k_part_stride"))


class ConvArgs(ctypes.Structure):
    """Mirror of ``struct ConvArgs`` in ``conv_kernel.cpp``."""

    _fields_ = (_fields(ctypes.c_int64, "batch", "length", "channels", "width", "activation", "block")
                + _fields(ctypes.c_void_p, "x", "state", "weight", "bias", "y", "grad_y", "grad_x", "grad_state",
                          "grad_weight", "grad_bias"))


class NormArgs(ctypes.Structure):
    """Mirror of ``struct NormArgs`` in ``norm_kernel.cpp``."""

    _fields_ = (_fields(ctypes.c_int64, "rows", "width") + [("eps", ctypes.c_double)]
                + _fields(ctypes.c_void_p, "x", "gate", "weight", "y", "grad_y", "grad_x", "grad_gate", "grad_weight"))


#: each kernel source's entry-point prefix and argument structure
_KERNELS = {"scan_kernel": ("seqdyn_scan", ScanArgs), "conv_kernel": ("seqdyn_conv", ConvArgs),
            "norm_kernel": ("seqdyn_norm", NormArgs)}


# ------------------------------------------------------------------------------------------------- building
def _cache_dir() -> Path:
    return Path(os.environ.get("SEQDYN_CACHE", Path.home() / ".cache" / "seqdyn")) / "kernels"


def _machine() -> str:
    """What ``-march=native`` compiles for: the CPU's model and feature flags where Linux tells them."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine() + platform.processor()
    return "".join(sorted({line for line in lines if line.startswith(("model name", "flags"))}))


#: the header every kernel source includes (shipped beside it into the build)
HEADER = "native_math.h"


def _build(compiler: str, source: str, header: str, name: str) -> Path:
    """The shared library of kernel ``name`` from ``source`` (with :data:`HEADER`'s text ``header``), compiled
    unless this machine's cache already holds it."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256("\0".join((source, header, compiler, version, *FLAGS, _machine())).encode()).hexdigest()[:20]
    target = _cache_dir() / f"{name}-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        source_file, built = Path(tmp) / f"{name}.cpp", Path(tmp) / target.name
        source_file.write_text(source)
        (Path(tmp) / HEADER).write_text(header)
        subprocess.run([compiler, *FLAGS, "-o", str(built), str(source_file), "-lm"], capture_output=True,
                       text=True, check=True)
        os.replace(built, target)  # atomic: a concurrent process sees no half-written library
    return target


@functools.cache
def library(name: str = "scan_kernel") -> ctypes.CDLL | None:
    """The loaded kernel ``name`` (a source in this folder), or ``None`` (logged once) when it cannot be built."""
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not compiler:
        log.info("%s: no C++ compiler found; torch code runs instead", name)
        return None
    folder = resources.files("seqdyn.core.backends")
    try:
        lib = ctypes.CDLL(str(_build(compiler, folder.joinpath(f"{name}.cpp").read_text(),
                                     folder.joinpath(HEADER).read_text(), name)))
    except (OSError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        log.warning("%s: the native kernel did not build (%s); torch code runs instead", name,
                    detail.strip().splitlines()[-1] if detail.strip() else type(error).__name__)
        return None
    prefix, structure = _KERNELS[name]
    args = ctypes.POINTER(structure)
    for suffix in _DTYPES.values():
        forward, backward = getattr(lib, f"{prefix}_forward_{suffix}"), getattr(lib, f"{prefix}_backward_{suffix}")
        forward.argtypes, forward.restype = [args, ctypes.c_int64, ctypes.c_int64], ctypes.c_int
        backward.argtypes, backward.restype = [args, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64], ctypes.c_int
    return lib


def enabled() -> bool:
    """Whether native kernels may be used at all (``SEQDYN_COMPILE=0`` turns off every compiled path)."""
    return os.environ.get("SEQDYN_COMPILE", "1") != "0"


def available(*tensors: Tensor | None, kernel: str = "scan_kernel") -> bool:
    """Whether ``kernel`` can take these tensors: CPU, float32 or float64, one dtype, and the kernel built."""
    present = [x for x in tensors if x is not None]
    dtype = present[0].dtype
    return (enabled() and dtype in _DTYPES and all(x.device.type == "cpu" and x.dtype == dtype for x in present)
            and library(kernel) is not None)


# -------------------------------------------------------------------------------------------------- running
@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="seqdyn-scan")


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
    function = getattr(library(kernel), f"{_KERNELS[kernel][0]}_{direction}_{_DTYPES[dtype]}")
    pointer = ctypes.byref(args)
    calls = [(pointer, begin, end) + ((part,) if direction == "backward" else ())
             for part, (begin, end) in enumerate(ranges)]
    if len(calls) == 1:
        codes = [function(*calls[0])]
    else:
        codes = list(_pool(len(calls)).map(lambda call: function(*call), calls))
    if any(codes):
        raise MemoryError(f"{kernel}: the native kernel could not allocate its work space ({direction})")


def _address(x: Tensor | None) -> int | None:
    return None if x is None else x.data_ptr()


def _strides(x: Tensor) -> _STRIDES:
    return _STRIDES(x.stride(0), x.stride(1), x.stride(2))


def _unit_last(x: Tensor | None) -> Tensor | None:
    """``x`` with a unit stride along its last (key or value) axis, as the kernel reads it."""
    if x is None or x.dim() < 4 or x.shape[-1] == 1 or x.stride(-1) == 1:
        return x
    return x.contiguous()


class Plan(NamedTuple):
    """How a problem is cut: ``group`` heads scanned together (so that the steps of neighbouring heads, which
    a time-major layout ``[B, T, H]`` stores side by side, are read together), states saved every ``interval``
    steps, and the ``(batch, group)`` items split into ``ranges``, one per thread."""

    group: int
    interval: int
    ranges: list[tuple[int, int]]


def plan(batch: int, heads: int, key_dim: int, value_dim: int, element_size: int) -> Plan:
    state = key_dim * value_dim
    group = max(1, min(GROUP, heads, GROUP_ELEMENTS // state))
    interval = max(1, min(INTERVAL, BLOCK_BYTES // (group * state * element_size)))
    return Plan(group, interval, split_items(batch * -(-heads // group)))


@float32_under_autocast
class NativeScan(torch.autograd.Function):
    """``(y, S_T)`` of ``S_t = a_t ⊙ S_{t-1} + k_t v_tᵀ``, ``y_t = S_tᵀ q_t`` by the native kernel — the recurrence
    and adjoint of :class:`~seqdyn.core.backends.scan.BlockScan`, same inputs: head-major ``q, k`` ``[B, H, T, K]``,
    ``v`` ``[B, H, T, V]``, ``g`` ``[B, H, T, K]`` (diagonal) or ``[B, H, T]`` (scalar, or ``Δ`` with ``rate``
    ``[H|1, K]``) or ``None``, ``initial`` broadcasting to ``[B, H, K, V]`` or ``None``; any strides (``y`` comes
    out time-major in memory, as the operator returns it, and each gradient strided like its input).
    ``shared_q``, ``shared_k``: q or k is one head expanded over all, whose gradient is summed over the heads in
    the kernel (split evenly over them on return) instead of being formed per head."""

    @staticmethod
    def forward(ctx, q, k, v, g, rate, initial, shared_q: bool, shared_k: bool):
        q, k, v, g = (_unit_last(x) for x in (q, k, v, g))
        rate = None if rate is None else rate.contiguous()
        batch, heads, length, key_dim = q.shape
        value_dim = v.shape[-1]
        cut = plan(batch, heads, key_dim, value_dim, q.element_size())
        y = q.new_empty(batch, length, heads, value_dim).transpose(1, 2)
        final = q.new_empty(batch, heads, key_dim, value_dim)
        keep = any(ctx.needs_input_grad)
        saved = q.new_empty(batch, heads, -(-length // cut.interval), key_dim, value_dim) if keep else None
        ctx.initial_shape = None if initial is None else initial.shape
        initial = None if initial is None else initial.expand(batch, heads, key_dim, value_dim).contiguous()
        args = _arguments(q, k, v, g, rate, cut)
        args.initial = _address(initial)
        args.y, args.y_stride, args.final, args.saved = y.data_ptr(), _strides(y), final.data_ptr(), _address(saved)
        run("scan_kernel", "forward", args, q.dtype, cut.ranges)
        ctx.save_for_backward(q, k, v, g, rate, saved)
        ctx.cut, ctx.shared = cut, (shared_q, shared_k)
        return y, final

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y: Tensor, grad_final: Tensor):
        q, k, v, g, rate, saved = ctx.saved_tensors
        cut = ctx.cut
        batch, heads, length, key_dim = q.shape
        grad_y, grad_final = _unit_last(grad_y), grad_final.contiguous()  # autograd passes zeros for unused outputs
        args = _arguments(q, k, v, g, rate, cut)
        args.saved, args.grad_y, args.grad_y_stride = saved.data_ptr(), grad_y.data_ptr(), _strides(grad_y)
        args.grad_final = grad_final.data_ptr()
        parts = len(cut.ranges)
        grads_qk = []
        for name, x, shared in (("q", q, ctx.shared[0]), ("k", k, ctx.shared[1])):
            grad = x.new_zeros(parts, batch, length, key_dim) if shared else torch.empty_like(x)
            setattr(args, f"grad_{name}", grad.data_ptr())
            setattr(args, f"grad_{name}_stride", _STRIDES(length * key_dim, 0, key_dim) if shared else _strides(grad))
            setattr(args, f"grad_{name}_part_stride", batch * length * key_dim if shared else 0)
            grads_qk.append(grad)
        grad_v = torch.empty_like(v)
        grad_g = None if g is None else torch.empty_like(g)
        grad_rate = None if rate is None else q.new_empty(batch, heads, key_dim)
        grad_initial = q.new_empty(batch, heads, *saved.shape[-2:])
        args.grad_v, args.grad_v_stride = grad_v.data_ptr(), _strides(grad_v)
        if grad_g is not None:
            args.grad_g, args.grad_g_stride = grad_g.data_ptr(), _strides(grad_g)
        args.grad_rate, args.grad_initial = _address(grad_rate), grad_initial.data_ptr()
        run("scan_kernel", "backward", args, q.dtype, cut.ranges)
        grad_q, grad_k = (spread_over_heads(grad.sum(0).unsqueeze(1), x.shape) if shared else grad
                          for grad, x, shared in zip(grads_qk, (q, k), ctx.shared))
        grad_rate = None if rate is None else grad_rate.sum(0).sum_to_size(rate.shape)
        grad_initial = None if ctx.initial_shape is None else grad_initial.sum_to_size(ctx.initial_shape)
        return grad_q, grad_k, grad_v, grad_g, grad_rate, grad_initial, None, None


def _arguments(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, rate: Tensor | None, cut: Plan) -> ScanArgs:
    """The kernel's arguments for these inputs (outputs are set by the caller)."""
    batch, heads, length, key_dim = q.shape
    args = ScanArgs(batch=batch, heads=heads, length=length, key_dim=key_dim, value_dim=v.shape[-1],
                    interval=cut.interval, group=cut.group)
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g)):
        if x is not None:
            setattr(args, name, x.data_ptr())
            setattr(args, f"{name}_stride", _strides(x))
    args.g_per_key = int(g is not None and g.dim() == 4)
    if rate is not None:
        args.rate, args.rate_head_stride = rate.data_ptr(), (rate.stride(0) if rate.shape[0] > 1 else 0)
    return args
