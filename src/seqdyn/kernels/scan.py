"""The selective scan's native CPU kernel (``scan_kernel.cpp``) as the operators ``seqdyn::scan`` and
``seqdyn::scan_backward``.

``(y, S_T)`` of ``S_t = a_t ⊙ S_{t-1} + k_t v_tᵀ``, ``y_t = S_tᵀ q_t``, ``a_t = exp(g_t)`` (``g_t = Δ_t A`` with a
``rate``), and its adjoint ``∂S_{t-1} = a_t ⊙ (∂S_t + q_t ∂y_tᵀ)``.  The kernel scans a group of up to
:data:`GROUP` neighbouring heads of one batch element step by step, each head's state ``[K, V]`` held in cache for
all ``T`` steps — what the selective-scan kernels of Mamba do on a GPU — and runs the adjoint backwards from states
saved every :data:`INTERVAL` steps.  Its torch definition is ``BlockScan`` of the ``scan`` backend
(``seqdyn/core/backends/scan.py``), which runs wherever :func:`available` is false.  Each operator has a fake
(meta) implementation, so ``torch.compile`` and other devices see its shapes through it, and the forward its
autograd formula.
"""

import ctypes
from typing import NamedTuple

import torch
from torch import Tensor

from seqdyn.kernels import build

NAME = "scan_kernel"
#: steps between the states the forward saves for the backward (which recomputes the steps between)
INTERVAL = 64
#: bytes of a group's recomputed block of states that the backward keeps in cache
BLOCK_BYTES = 1 << 17
#: heads scanned together at most, and state elements of such a group at most
GROUP, GROUP_ELEMENTS = 16, 4096

_STRIDES = ctypes.c_int64 * 3


class ScanArgs(ctypes.Structure):
    """Mirror of ``struct ScanArgs`` in ``scan_kernel.cpp`` (checked against it when the kernel is loaded)."""

    _fields_ = (build.fields(ctypes.c_int64, "batch", "heads", "length", "key_dim", "value_dim", "interval", "group")
                + build.fields(ctypes.c_void_p, "q", "k", "v", "g", "rate", "initial")
                + build.fields(_STRIDES, "q_stride", "k_stride", "v_stride", "g_stride")
                + build.fields(ctypes.c_int64, "g_per_key", "rate_head_stride")
                + build.fields(ctypes.c_void_p, "y", "final", "saved") + build.fields(_STRIDES, "y_stride")
                + build.fields(ctypes.c_void_p, "grad_y", "grad_final") + build.fields(_STRIDES, "grad_y_stride")
                + build.fields(ctypes.c_void_p, "grad_q", "grad_k", "grad_v", "grad_g", "grad_rate", "grad_initial")
                + build.fields(_STRIDES, "grad_q_stride", "grad_k_stride", "grad_v_stride", "grad_g_stride")
                + build.fields(ctypes.c_int64, "grad_q_part_stride", "grad_k_part_stride"))


build.KERNELS[NAME] = ("seqdyn_scan", ScanArgs)


def available(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, rate: Tensor | None,
              initial: Tensor | None) -> bool:
    """Whether the kernel takes this problem: CPU, float32 or float64, one dtype, the kernel built, and states of
    more than one element per head (``K·V > 1``; for scalar states, as in qLSTM and RG-LRU, torch's blocks are
    faster: see ``docs/kernels.md``)."""
    return q.shape[-1] * v.shape[-1] > 1 and build.available(NAME, q, k, v, g, rate, initial)


def scan(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, rate: Tensor | None, initial: Tensor | None,
         shared_q: bool, shared_k: bool) -> tuple[Tensor, Tensor]:
    """``(y, S_T)`` by the kernel: head-major ``q, k`` ``[B, H, T, K]``, ``v`` ``[B, H, T, V]``, ``g``
    ``[B, H, T, K]`` (diagonal) or ``[B, H, T]`` (scalar, or ``Δ`` with ``rate`` ``[H|1, K]``) or ``None``,
    ``initial`` broadcasting to ``[B, H, K, V]`` or ``None``; any strides (``y`` comes out time-major in memory,
    as the operator returns it).  ``shared_q``, ``shared_k``: q or k is one head expanded over all, whose gradient
    is summed over the heads in the kernel (split evenly over them on return) instead of being formed per head."""
    q, k, v, g = (_unit_last(x) for x in (q, k, v, g))
    rate = None if rate is None else rate.contiguous()
    batch, heads, _, key_dim = q.shape
    if initial is not None:
        initial = initial.expand(batch, heads, key_dim, v.shape[-1]).contiguous()
    keep = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (q, k, v, g, rate, initial))
    y, final, _ = scan_op(q, k, v, g, rate, initial, shared_q, shared_k, keep)
    return y, final


# ------------------------------------------------------------------------------------------------ operators
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
    return Plan(group, interval, build.split_items(batch * -(-heads // group)))


def _outputs(q: Tensor, v: Tensor, keep: bool) -> tuple[Tensor, Tensor, Tensor, Plan]:
    """``y`` (time-major in memory), the final states and the saved states (empty unless ``keep``)."""
    batch, heads, length, key_dim = q.shape
    value_dim = v.shape[-1]
    cut = plan(batch, heads, key_dim, value_dim, q.element_size())
    y = q.new_empty(batch, length, heads, value_dim).transpose(1, 2)  # [B, H, T, V], time-major in memory
    final = q.new_empty(batch, heads, key_dim, value_dim)
    saves = -(-length // cut.interval)
    saved = q.new_empty(batch, heads, saves, key_dim, value_dim) if keep else q.new_empty(0)
    return y, final, saved, cut


@torch.library.custom_op("seqdyn::scan", mutates_args=())
def scan_op(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, rate: Tensor | None, initial: Tensor | None,
            shared_q: bool, shared_k: bool, keep: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``(y, S_T, saved)``: the kernel's forward (inputs as :func:`scan` makes them: unit stride along the last
    axis, ``initial`` ``[B, H, K, V]`` contiguous); ``saved`` the states every ``interval`` steps where ``keep``."""
    y, final, saved, cut = _outputs(q, v, keep)
    args = _arguments(q, k, v, g, rate, cut)
    args.initial = _address(initial)
    args.y, args.y_stride, args.final = y.data_ptr(), _strides(y), final.data_ptr()
    args.saved = saved.data_ptr() if keep else None
    build.run(NAME, "forward", args, q.dtype, cut.ranges)
    return y, final, saved


@scan_op.register_fake
def _(q, k, v, g, rate, initial, shared_q, shared_k, keep):
    y, final, saved, _ = _outputs(q, v, keep)
    return y, final, saved


def _gradients(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, rate: Tensor | None, shared: tuple[bool, bool],
               parts: int) -> list[Tensor]:
    """Empty gradients ``∂q, ∂k`` (``[parts, B, T, K]`` to sum when shared), ``∂v, ∂g`` (empty without ``g``),
    ``∂rate`` ``[B, H, K]`` (empty without a rate) and ``∂S_0`` ``[B, H, K, V]``."""
    batch, heads, length, key_dim = q.shape
    grads = [x.new_zeros(parts, batch, length, key_dim) if one else torch.empty_like(x)
             for x, one in zip((q, k), shared)]
    grads.append(torch.empty_like(v))
    grads.append(q.new_empty(0) if g is None else torch.empty_like(g))
    grads.append(q.new_empty(0) if rate is None else q.new_empty(batch, heads, key_dim))
    grads.append(q.new_empty(batch, heads, key_dim, v.shape[-1]))
    return grads


def _summed(grads: list[Tensor], shared: tuple[bool, bool], rate: Tensor | None) -> tuple[Tensor, ...]:
    """The gradients as :func:`scan_backward_op` returns them: a shared q's or k's summed over the parts
    ``[B, 1, T, K]``, the rate's over the batch ``[H, K]``."""
    grad_q, grad_k, grad_v, grad_g, grad_rate, grad_initial = grads
    grad_q, grad_k = (grad.sum(0).unsqueeze(1) if one else grad for grad, one in zip((grad_q, grad_k), shared))
    grad_rate = grad_rate if rate is None else grad_rate.sum(0)
    return grad_q, grad_k, grad_v, grad_g, grad_rate, grad_initial


@torch.library.custom_op("seqdyn::scan_backward", mutates_args=())
def scan_backward_op(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, rate: Tensor | None, saved: Tensor,
                     grad_y: Tensor, grad_final: Tensor, shared_q: bool,
                     shared_k: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """``(∂q, ∂k, ∂v, ∂g, ∂rate, ∂S_0)`` by the kernel's adjoint from the states ``saved`` by :func:`scan_op`
    (``∂g``, ``∂rate`` empty where ``g``, ``rate`` are ``None``; a shared q's or k's gradient ``[B, 1, T, K]``)."""
    batch, heads, length, key_dim = q.shape
    cut = plan(batch, heads, key_dim, v.shape[-1], q.element_size())
    shared = (shared_q, shared_k)
    grad_y, grad_final = _unit_last(grad_y), grad_final.contiguous()
    args = _arguments(q, k, v, g, rate, cut)
    args.saved, args.grad_y, args.grad_y_stride = saved.data_ptr(), grad_y.data_ptr(), _strides(grad_y)
    args.grad_final = grad_final.data_ptr()
    grads = _gradients(q, k, v, g, rate, shared, len(cut.ranges))
    for name, grad, one in zip(("q", "k"), grads, shared):
        setattr(args, f"grad_{name}", grad.data_ptr())
        setattr(args, f"grad_{name}_stride", _STRIDES(length * key_dim, 0, key_dim) if one else _strides(grad))
        setattr(args, f"grad_{name}_part_stride", batch * length * key_dim if one else 0)
    args.grad_v, args.grad_v_stride = grads[2].data_ptr(), _strides(grads[2])
    if g is not None:
        args.grad_g, args.grad_g_stride = grads[3].data_ptr(), _strides(grads[3])
    args.grad_rate = None if rate is None else grads[4].data_ptr()
    args.grad_initial = grads[5].data_ptr()
    build.run(NAME, "backward", args, q.dtype, cut.ranges)
    return _summed(grads, shared, rate)


@scan_backward_op.register_fake
def _(q, k, v, g, rate, saved, grad_y, grad_final, shared_q, shared_k):
    return _summed(_gradients(q, k, v, g, rate, (shared_q, shared_k), 1), (shared_q, shared_k), rate)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, g, rate, initial, shared_q, shared_k, _ = inputs
    ctx.save_for_backward(q, k, v, g, rate, output[2])
    ctx.shared, ctx.has_initial = (shared_q, shared_k), initial is not None


def _backward(ctx, grad_y: Tensor | None, grad_final: Tensor | None, _grad_saved):
    """The gradients of :func:`scan_op`'s inputs; a shared q's or k's split evenly over the heads (only their sum
    reaches the tensor they were expanded from)."""
    q, k, v, g, rate, saved = ctx.saved_tensors
    batch, heads, length, key_dim = q.shape
    grad_y = q.new_zeros(batch, heads, length, v.shape[-1]) if grad_y is None else grad_y
    grad_final = q.new_zeros(batch, heads, key_dim, v.shape[-1]) if grad_final is None else grad_final
    grad_q, grad_k, grad_v, grad_g, grad_rate, grad_initial = scan_backward_op(
        q, k, v, g, rate, saved, grad_y, grad_final, *ctx.shared)
    grad_q, grad_k = ((grad / heads).expand(x.shape) if one else grad
                      for grad, x, one in zip((grad_q, grad_k), (q, k), ctx.shared))
    return (grad_q, grad_k, grad_v, None if g is None else grad_g,
            None if rate is None else grad_rate.sum_to_size(rate.shape),
            grad_initial if ctx.has_initial else None, None, None, None)


scan_op.register_autograd(_backward, setup_context=_setup_context)
torch.library.register_autocast("seqdyn::scan", "cpu", torch.float32)


# ------------------------------------------------------------------------------------------------ arguments
def _address(x: Tensor | None) -> int | None:
    return None if x is None else x.data_ptr()


def _strides(x: Tensor) -> _STRIDES:
    return _STRIDES(x.stride(0), x.stride(1), x.stride(2))


def _unit_last(x: Tensor | None) -> Tensor | None:
    """``x`` with a unit stride along its last (key or value) axis, as the kernel reads it."""
    if x is None or x.dim() < 4 or x.shape[-1] == 1 or x.stride(-1) == 1:
        return x
    return x.contiguous()


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
