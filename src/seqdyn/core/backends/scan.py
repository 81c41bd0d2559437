"""The ``scan`` backend: the pairs ``(Λ_t, b_t k_t v_tᵀ)`` scanned in blocks, with a hand-written adjoint.

The states of the identity readout satisfy ``S_t = Λ_t S_{t-1} + X_t`` with ``X_t = b_t k_t v_tᵀ`` and Λ scalar
or diagonal, so every state element follows its own first-order linear recurrence (as in S5, Smith et al. 2023; the
"selective scan" of Mamba).  The sequence is taken in blocks of :data:`BLOCK` steps: a block's decays and ``X``
are formed at once, its steps applied one after another — each one multiply-add over every batch, head and
state element — and its outputs read at once (:func:`scan_block`).  Only the state entering each block is kept;
the backward recomputes a block's states from it and runs the adjoint recurrence
``∂X_t = q_t ∂y_tᵀ + Λ_{t+1} ∂X_{t+1}`` backwards through the block (:func:`adjoint_block`).  ``O(T·K·V)`` work,
``O((T/L + L)·K·V)`` memory.  A factored decay ``g_t = Δ_t ⊗ A`` (Mamba-1, ``decay_rate``) is formed block by
block from its factors and its gradient returned to them, so nothing of size ``T·K`` besides the states' own
block is ever formed.

On a CPU this keeps each block's tensors in cache: several times faster than a log-depth associative scan, which
streams all ``T·K·V`` states through memory ``log T`` times.  Where a C++ compiler is at hand (float32 or float64
on the CPU), the same recurrence and adjoint run in a native kernel instead (:mod:`~seqdyn.kernels.scan`,
``scan_kernel.cpp``), which holds each head's state in cache for all ``T`` steps — Mamba's selective-scan kernel
for the CPU; ``SEQDYN_KERNELS=off`` keeps the torch blocks.  Λ must be scalar or diagonal (a Householder factor
would make every element a ``[K, K]`` matrix).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from seqdyn.core import stacking
from seqdyn.core.precision import float32_under_autocast
from seqdyn.core.problem import Problem, shared_over_heads, spread_over_heads
from seqdyn.kernels import scan as scan_kernel

NAME = "scan"
#: the scan forms a factored decay ``Δ ⊗ A`` itself, block by block
FACTORED_DECAY = True

#: steps per block: long enough to amortize a block's vectorized work, short enough to stay in cache
BLOCK = 16


def unsupported(problem: Problem) -> str | None:
    if stacking.runs_stacked():
        return stacking.unstackable("scan")
    if not problem.readout.linear:
        return f"readout={problem.readout.name!r} has no finite state to scan; scan needs readout='identity'"
    if problem.householder:
        part = "a Householder factor" if problem.written is None else "a low-rank part"
        return f"Λ with {part} is not scalar or diagonal; scan needs Λ without one"
    return None


def linear(problem: Problem, want_state: bool) -> tuple[Tensor, Tensor]:
    """All outputs ``y_t = S_tᵀ q_t`` and the final state ``S_T``: by the native kernel where it runs (CPU, float32
    or float64, a C++ compiler), else by :class:`BlockScan`."""
    problem = problem.with_scale_applied()
    g, rate = problem.log_decay, problem.decay_rate
    if scan_kernel.available(problem.q, problem.k, problem.v, g, rate, problem.initial_state):
        return scan_kernel.scan(
            problem.q, problem.k, problem.v, g, rate, problem.initial_state, _one_head(problem.q), _one_head(problem.k)
        )
    if g is not None:  # [B, H, T, K|1, 1], broadcasting against the states [B, H, T, K, V]
        g = g.unsqueeze(-1) if problem.diagonal and rate is None else g[..., None, None]
    return BlockScan.apply(problem.q, problem.k, problem.v, g, rate, problem.initial_state)


# ----------------------------------------------------------------------------------------- one block of steps
def block_decays(step: Tensor | None, rate: Tensor | None) -> Tensor | None:
    """``a_t = exp(g_t)``: ``g = step`` or, factored, ``g = step · rate`` (Mamba-1's ``Δ_t A``)."""
    if step is None:
        return None
    return torch.exp(step if rate is None else step * rate)


#: where a block's axes lie: states ``[L, B, H, K, V]``, time first (contiguous copies, so that each step reads
#: one stretch of memory)
TIME, KEY, VALUE = 0, -2, -1


def recur(
    impulses: Tensor, decays: Tensor | None, entering: Tensor, reverse: bool = False, carried: list | None = None
) -> Tensor:
    """``S_j = a_j ⊙ S_{j-1} + X_j`` along the time axis of a block from ``S_{-1}`` = ``entering`` (``a = 1`` when
    ``decays`` is ``None``), overwriting ``impulses`` (a fresh tensor) step by step; ``reverse``: the adjoint
    ``G_j = a_{j+1} ⊙ G_{j+1} + X_j`` from ``a_L ⊙ G_L`` = ``entering``.  ``carried`` collects the terms
    ``a_j ⊙ S_{j-1}`` (forward)."""
    length = impulses.shape[TIME]
    previous = entering
    for j in range(length - 1, -1, -1) if reverse else range(length):
        impulse = impulses[j]
        if decays is None or (reverse and j == length - 1):
            previous = impulse.add_(previous)
        elif carried is not None:
            carried.append(decays[j] * previous)
            previous = impulse.add_(carried[-1])
        else:
            previous = impulse.addcmul_(decays[j + 1 if reverse else j], previous)
    return impulses


def scan_block(q: Tensor, k: Tensor, v: Tensor, step: Tensor | None, rate: Tensor | None, entering: Tensor):
    """Outputs ``y_j = Σ_k q_jk S_j,kv`` and the last state of one block.  Each input broadcasts against the
    states ``[L, B, H, K, V]``: q, k with a unit V axis, v with a unit K axis, one head when shared, step with a
    unit V axis (and K axis for a scalar decay); rate ``A`` as ``[H, K, 1]``, or ``None``; ``entering`` a state
    ``[B, H, K, V]``."""
    states = recur(k * v, block_decays(step, rate), entering)
    return (q * states).sum(KEY), states[-1]


def adjoint_block(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    step: Tensor | None,
    rate: Tensor | None,
    entering: Tensor,
    grad_y: Tensor,
    grad_leaving: Tensor,
):
    """Gradients of one block (see :class:`BlockScan`; inputs as in :func:`scan_block`), recomputing its states
    from ``entering``; ``grad_y`` like the outputs, ``grad_leaving`` = ``∂S`` of the block's last state from after
    it.  Returns ``(∂q, ∂k, ∂v, ∂step, ∂rate, ∂S_{-1})``, each summed to its input's shape."""
    decays = block_decays(step, rate)
    carried = None if decays is None else []
    states = recur(k * v, decays, entering, carried=carried)
    grad_y = grad_y.unsqueeze(KEY)
    grads = recur(q * grad_y, decays, grad_leaving, reverse=True)  # ∂X_j = ∂S_j
    grad_q = (states * grad_y).sum(VALUE, keepdim=True).sum_to_size(q.shape)
    grad_k = (grads * v).sum(VALUE, keepdim=True).sum_to_size(k.shape)
    grad_v = (grads * k).sum(KEY, keepdim=True).sum_to_size(v.shape)
    grad_step = grad_rate = None
    if decays is not None:  # ∂g_j = ⟨∂X_j, a_j ⊙ S_{j-1}⟩
        grad_log = (grads * torch.stack(carried)).sum(VALUE, keepdim=True)
        if rate is None:
            grad_step = grad_log.sum_to_size(step.shape)
        else:
            grad_step = (grad_log * rate).sum_to_size(step.shape)
            grad_rate = (grad_log * step).sum_to_size(rate.shape)
    grad_entering = grads[0] if decays is None else decays[0] * grads[0]
    return grad_q, grad_k, grad_v, grad_step, grad_rate, grad_entering


# ---------------------------------------------------------------------------------------------- whole sequence
def _one_head(x: Tensor | None) -> bool:
    """Whether ``x`` ``[B, H, ...]`` is one head expanded over all (stride 0) and can be scanned as one: its
    gradient is then returned split evenly over the heads, which only a view (not a leaf) may receive."""
    return x is not None and x.shape[1] > 1 and shared_over_heads(x) and (x.grad_fn is not None or not x.requires_grad)


def _arranged(x: Tensor | None, one_head: bool, kind: str) -> Tensor | None:
    """A head-major input ``[B, H, T, ...]`` as the block functions take it: one head when shared by all, time
    first and contiguous (each step then reads one stretch of memory), and with the unit axis it broadcasts along
    (``kind``: ``"key"`` for q and k — a V axis; ``"value"`` for v — a K axis)."""
    if x is None:
        return None
    x = (x[:, :1] if one_head else x).movedim(2, 0).contiguous()
    return x.unsqueeze(_unit_axis(kind)) if kind != "decay" else x


def _unit_axis(kind: str) -> int:
    return VALUE if kind == "key" else KEY


def _restored(grad: Tensor | None, shape: torch.Size | None, one_head: bool, kind: str):
    """The inverse of :func:`_arranged` for the gradient of an input of ``shape``; one head's gradient is split
    evenly over the heads (only their sum reaches the tensor they were expanded from)."""
    if grad is None or shape is None:
        return None
    if kind != "decay":
        grad = grad.squeeze(_unit_axis(kind))
    grad = grad.movedim(0, 2)
    return spread_over_heads(grad, shape) if one_head else grad


def _blocks(length: int, size: int) -> list[tuple[int, int]]:
    """``(start, length)`` of each block of ``size`` steps (the last one may be shorter)."""
    return [(start, min(size, length - start)) for start in range(0, length, size)]


#: the kinds of BlockScan's inputs q, k, v, g, which fix the unit axis each broadcasts along
_KINDS = ("key", "key", "value", "decay")


@float32_under_autocast
class BlockScan(torch.autograd.Function):
    """``(y, S_T)`` of ``S_t = a_t ⊙ S_{t-1} + k_t v_tᵀ``, ``y_t = S_tᵀ q_t``, ``a = e^g`` (``g = Δ ⊗ A`` with a
    ``rate``; ``g`` ``None``: no decay).  Its adjoint: ``∂X_t = q_t ∂y_tᵀ + a_{t+1} ⊙ ∂X_{t+1}`` with ``∂S_T``
    flowing into ``∂X_{T-1}``; ``∂q_t = S_t ∂y_t``, ``∂k_t = ∂X_t v_t``, ``∂v_t = ∂X_tᵀ k_t``,
    ``∂g_t = a_t ⊙ ⟨∂X_t, S_{t-1}⟩`` (``∂Δ = ∂g A``, ``∂A = Σ ∂g Δ``) and ``∂S_{-1} = a_0 ⊙ ∂X_0``, each summed
    over the axes its input broadcasts along.  Inputs head-major ``[B, H, T, ...]`` (``g`` ``[B, H, T, K|1, 1]``,
    ``rate`` ``[H, K]``), heads shared by all (expanded) scanned once, blocks of :data:`BLOCK` steps."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, rate: Tensor | None, initial: Tensor | None):
        inputs = (q, k, v, g)
        one_head = [_one_head(x) for x in inputs]
        arranged = [_arranged(x, shared, kind) for x, shared, kind in zip(inputs, one_head, _KINDS)]
        rate = None if rate is None else rate.unsqueeze(-1)
        state_shape = (q.shape[0], q.shape[1], q.shape[3], v.shape[3])
        state = v.new_zeros(state_shape) if initial is None else initial.expand(state_shape).contiguous()
        entering, outputs = [], []
        for start, length in _blocks(q.shape[2], BLOCK):
            entering.append(state)
            block = [None if x is None else x[start : start + length] for x in arranged]
            y, state = scan_block(*block, rate, state)
            outputs.append(y)
        ctx.one_head = one_head
        ctx.shapes = [None if x is None else x.shape for x in (*inputs, initial)]
        ctx.save_for_backward(*arranged, rate, *entering)
        return torch.cat(outputs).movedim(0, 2), state

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y: Tensor, grad_final: Tensor | None):
        q, k, v, g, rate, *entering = ctx.saved_tensors
        grad_y = grad_y.movedim(2, 0).contiguous()
        flowing = torch.zeros_like(entering[0]) if grad_final is None else grad_final.contiguous()
        grads = [None if x is None else torch.empty_like(x) for x in (q, k, v, g)]
        grad_rate = None
        for (start, length), state in reversed(list(zip(_blocks(grad_y.shape[0], BLOCK), entering))):
            block = [None if x is None else x[start : start + length] for x in (q, k, v, g)]
            *block_grads, rate_part, flowing = adjoint_block(
                *block, rate, state, grad_y[start : start + length], flowing
            )
            for full, part in zip(grads, block_grads):
                if full is not None:
                    full[start : start + length].copy_(part)
            if rate_part is not None:
                grad_rate = rate_part if grad_rate is None else grad_rate + rate_part
        *shapes, initial_shape = ctx.shapes
        grad_q, grad_k, grad_v, grad_g = (
            _restored(grad, shape, shared, kind)
            for grad, shape, shared, kind in zip(grads, shapes, ctx.one_head, _KINDS)
        )
        grad_initial = None if initial_shape is None else flowing.sum_to_size(initial_shape)
        grad_rate = None if grad_rate is None else grad_rate.squeeze(-1)
        return grad_q, grad_k, grad_v, grad_g, grad_rate, grad_initial
