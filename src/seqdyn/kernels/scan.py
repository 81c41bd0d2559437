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


def available(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, rate: Tensor | None, initial: Tensor | None) -> bool:
    """Whether the kernel takes this problem: CPU, float32 or float64, one dtype, the kernel built, and states of
    more than one element per head (``K·V > 1``; for scalar states, as in qLSTM and RG-LRU, torch's blocks are
    faster: see ``docs/kernels.md``)."""
    return q.shape[-1] * v.shape[-1] > 1 and build.available(NAME, q, k, v, g, rate, initial)


def scan(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor | None,
    rate: Tensor | None,
    initial: Tensor | None,
    shared_q: bool,
    shared_k: bool,
) -> tuple[Tensor, Tensor]:
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


def scan_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor | None,
    rate: Tensor | None,
    initial: Tensor | None,
    shared_q: bool,
    shared_k: bool,
    keep: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(y, S_T, saved)`` by the operator ``seqdyn::scan`` (inputs as :func:`scan` makes them: unit stride along
    the last axis, ``initial`` ``[B, H, K, V]`` contiguous); ``saved`` the states every ``interval`` steps where
    ``keep``, else empty."""
    cut = plan(*q.shape[:2], q.shape[-1], v.shape[-1], q.element_size())
    return torch.ops.seqdyn.scan(q, k, v, g, rate, initial, shared_q, shared_k, keep, cut.group, cut.interval)


def scan_backward_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor | None,
    rate: Tensor | None,
    saved: Tensor,
    grad_y: Tensor,
    grad_final: Tensor,
    shared_q: bool,
    shared_k: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """``(∂q, ∂k, ∂v, ∂g, ∂rate, ∂S_0)`` by the operator ``seqdyn::scan_backward``, the adjoint from the states
    ``saved`` by :func:`scan_op` (``∂g``, ``∂rate`` empty where ``g``, ``rate`` are ``None``; a shared q's or k's
    gradient ``[B, 1, T, K]``, ``∂rate`` summed over the batch)."""
    cut = plan(*q.shape[:2], q.shape[-1], v.shape[-1], q.element_size())
    return torch.ops.seqdyn.scan_backward(
        q,
        k,
        v,
        g,
        rate,
        saved,
        _unit_last(grad_y),
        grad_final.contiguous(),
        shared_q,
        shared_k,
        cut.group,
        cut.interval,
    )


# ------------------------------------------------------------------------------------------------ operators
class Plan(NamedTuple):
    """How a problem is cut: ``group`` heads scanned together (so that the steps of neighbouring heads, which
    a time-major layout ``[B, T, H]`` stores side by side, are read together) and states saved every
    ``interval`` steps; the kernel splits the ``(batch, group)`` items over torch's threads."""

    group: int
    interval: int


def plan(batch: int, heads: int, key_dim: int, value_dim: int, element_size: int) -> Plan:
    state = key_dim * value_dim
    group = max(1, min(GROUP, heads, GROUP_ELEMENTS // state))
    return Plan(group, max(1, min(INTERVAL, BLOCK_BYTES // (group * state * element_size))))


def _fake_scan(q, k, v, g, rate, initial, shared_q, shared_k, keep, group, interval):
    """The shapes, strides and dtypes of ``seqdyn::scan``'s outputs (``y`` time-major in memory)."""
    batch, heads, length, key_dim = q.shape
    value_dim = v.shape[-1]
    y = q.new_empty(batch, length, heads, value_dim).transpose(1, 2)  # [B, H, T, V], time-major in memory
    saves = -(-length // interval)
    saved = q.new_empty(batch, heads, saves, key_dim, value_dim) if keep else q.new_empty(0)
    return y, q.new_empty(batch, heads, key_dim, value_dim), saved


def _fake_scan_backward(q, k, v, g, rate, saved, grad_y, grad_final, shared_q, shared_k, group, interval):
    """The shapes, strides and dtypes of ``seqdyn::scan_backward``'s gradients."""
    batch, heads, length, key_dim = q.shape
    grad_q, grad_k = (
        q.new_empty(batch, 1, length, key_dim) if one else torch.empty_like(x)
        for x, one in ((q, shared_q), (k, shared_k))
    )
    grad_g = q.new_empty(0) if g is None else torch.empty_like(g)
    grad_rate = q.new_empty(0) if rate is None else q.new_empty(heads, key_dim)
    return grad_q, grad_k, torch.empty_like(v), grad_g, grad_rate, q.new_empty(batch, heads, key_dim, v.shape[-1])


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, g, rate, initial, shared_q, shared_k = inputs[:8]
    ctx.save_for_backward(q, k, v, g, rate, output[2])
    ctx.shared, ctx.has_initial = (shared_q, shared_k), initial is not None


def _backward(ctx, grad_y: Tensor | None, grad_final: Tensor | None, _grad_saved):
    """The gradients of ``seqdyn::scan``'s inputs; a shared q's or k's split evenly over the heads (only their sum
    reaches the tensor they were expanded from)."""
    q, k, v, g, rate, saved = ctx.saved_tensors
    batch, heads, length, key_dim = q.shape
    grad_y = q.new_zeros(batch, heads, length, v.shape[-1]) if grad_y is None else grad_y
    grad_final = q.new_zeros(batch, heads, key_dim, v.shape[-1]) if grad_final is None else grad_final
    grad_q, grad_k, grad_v, grad_g, grad_rate, grad_initial = scan_backward_op(
        q, k, v, g, rate, saved, grad_y, grad_final, *ctx.shared
    )
    grad_q, grad_k = (
        (grad / heads).expand(x.shape) if one else grad for grad, x, one in zip((grad_q, grad_k), (q, k), ctx.shared)
    )
    return (
        grad_q,
        grad_k,
        grad_v,
        None if g is None else grad_g,
        None if rate is None else grad_rate.sum_to_size(rate.shape),
        grad_initial if ctx.has_initial else None,
        None,
        None,
        None,
        None,
        None,
    )


def _register() -> None:
    """The Python half of the operators, once their library is loaded: fake implementations, the forward's
    autograd formula, and float32 under CPU autocast (the kernel has no bfloat16)."""
    torch.library.register_fake("seqdyn::scan")(_fake_scan)
    torch.library.register_fake("seqdyn::scan_backward")(_fake_scan_backward)
    torch.library.register_autograd("seqdyn::scan", _backward, setup_context=_setup_context)
    torch.library.register_autocast("seqdyn::scan", "cpu", torch.float32)


build.KERNELS[NAME] = _register


def _unit_last(x: Tensor | None) -> Tensor | None:
    """``x`` with a unit stride along its last (key or value) axis, as the kernel reads it."""
    if x is None or x.dim() < 4 or x.shape[-1] == 1 or x.stride(-1) == 1:
        return x
    return x.contiguous()
