"""The ``scan`` backend: the pairs ``(Λ_t, b_t k_t v_tᵀ)`` scanned in blocks, with a hand-written adjoint.

The states of the identity readout satisfy ``S_t = Λ_t S_{t-1} + X_t`` with ``X_t = b_t k_t v_tᵀ`` and Λ scalar
or diagonal, so every state element follows its own first-order linear recurrence (textbook seed 004, S5; the
"selective scan" of Mamba).  The sequence is taken in blocks of :data:`BLOCK` steps: a block's decays and ``X``
are formed at once, its steps applied one after another — each one multiply-add over every batch, head and
state element — and its outputs read at once (:func:`scan_block`).  Only the state entering each block is kept;
the backward recomputes a block's states from it and runs the adjoint recurrence
``∂X_t = q_t ∂y_tᵀ + Λ_{t+1} ∂X_{t+1}`` backwards through the block (:func:`adjoint_block`).  ``O(T·K·V)`` work,
``O((T/L + L)·K·V)`` memory.  A factored decay ``g_t = Δ_t ⊗ A`` (Mamba-1, ``decay_rate``) is formed block by
block from its factors and its gradient returned to them, so nothing of size ``T·K`` besides the states' own
block is ever formed.

On a CPU this keeps each block's tensors in cache: several times faster than a log-depth associative scan, which
streams all ``T·K·V`` states through memory ``log T`` times.  With a C++ compiler at hand, large problems run
the two block functions compiled by ``torch.compile`` (:func:`_run_block`), which fuses a block's steps
into one loop over the state elements — the selective scan kernel of Mamba written as torch code.  Set
``SEQDYN_COMPILE=0`` to never compile.  Λ must be scalar or diagonal (a Householder factor would make every
element a ``[K, K]`` matrix).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from seqdyn.core.problem import Problem, shared_over_heads

NAME = "scan"
#: the scan forms a factored decay ``Δ ⊗ A`` itself, block by block
FACTORED_DECAY = True

#: steps per block: long enough to amortize a block's vectorized work, short enough to stay in cache
BLOCK = 16
#: steps per block of the compiled block functions (fused loops; longer blocks compile longer)
COMPILED_BLOCK = 32
#: state elements × steps (B·H·K·V·T) from which the compiled block functions pay for their compilation; only
#: diagonal decays (selective scans) compile — with a scalar decay the eager blocks were faster
COMPILE_MIN_WORK = 1 << 24

log = logging.getLogger("seqdyn")


def unsupported(problem: Problem) -> str | None:
    if not problem.readout.linear:
        return f"readout={problem.readout.name!r} has no finite state to scan; scan needs readout='identity'"
    if problem.householder:
        return "householder is not scalar or diagonal; scan needs Λ without a Householder factor"
    return None


def linear(problem: Problem, want_state: bool) -> tuple[Tensor, Tensor]:
    """All outputs ``y_t = S_tᵀ q_t`` and the final state ``S_T`` by :class:`BlockScan`."""
    g, rate = problem.log_decay, problem.decay_rate
    if g is not None:  # [B, H, T, K|1, 1], broadcasting against the states [B, H, T, K, V]
        g = g.unsqueeze(-1) if problem.diagonal and rate is None else g[..., None, None]
    batch, heads, length, key_dim, value_dim = problem.shape
    compiled = problem.diagonal and batch * heads * key_dim * value_dim * length >= COMPILE_MIN_WORK
    return BlockScan.apply(problem.q, problem.k, problem.v, g, rate, problem.initial_state, compiled)


# ----------------------------------------------------------------------------------------- one block of steps
def block_decays(step: Tensor | None, rate: Tensor | None) -> Tensor | None:
    """``a_t = exp(g_t)``: ``g = step`` or, factored, ``g = step · rate`` (Mamba-1's ``Δ_t A``)."""
    if step is None:
        return None
    return torch.exp(step if rate is None else step * rate)


class Layout(NamedTuple):
    """Where a block's axes lie: states ``[L, B, H, K, V]`` (time-major, contiguous copies: the eager blocks) or
    ``[B, H, L, K, V]`` (head-major views of the inputs: the compiled blocks, which read strided memory well)."""

    time: int
    key: int
    value: int


TIME_MAJOR, HEAD_MAJOR = Layout(0, -2, -1), Layout(2, -2, -1)


def recur(impulses: Tensor, decays: Tensor | None, entering: Tensor, time: int, reverse: bool = False,
          carried: list | None = None) -> Tensor:
    """``S_j = a_j ⊙ S_{j-1} + X_j`` along axis ``time`` of a block from ``S_{-1}`` = ``entering`` (``a = 1`` when
    ``decays`` is ``None``); ``reverse``: the adjoint ``G_j = a_{j+1} ⊙ G_{j+1} + X_j`` from
    ``a_L ⊙ G_L`` = ``entering``.  ``carried`` collects the terms ``a_j ⊙ S_{j-1}`` (forward).

    Eagerly the states overwrite ``impulses`` (a fresh tensor) step by step; under ``torch.compile`` the steps
    are functional, so that inductor fuses them."""
    in_place = not torch.compiler.is_compiling()
    length = impulses.shape[time]
    out = [None] * length
    previous = entering
    for j in (range(length - 1, -1, -1) if reverse else range(length)):
        impulse = impulses.select(time, j)
        if decays is None or (reverse and j == length - 1):
            previous = impulse.add_(previous) if in_place else impulse + previous
        elif carried is not None:
            carried.append(decays.select(time, j) * previous)
            previous = impulse.add_(carried[-1]) if in_place else impulse + carried[-1]
        else:
            decay = decays.select(time, j + 1 if reverse else j)
            previous = impulse.addcmul_(decay, previous) if in_place else torch.addcmul(impulse, decay, previous)
        out[j] = previous
    return impulses if in_place else torch.stack(out, dim=time)


def scan_block(q: Tensor, k: Tensor, v: Tensor, step: Tensor | None, rate: Tensor | None, entering: Tensor,
               layout: Layout):
    """Outputs ``y_j = Σ_k q_jk S_j,kv`` and the last state of one block.  Each input broadcasts against the
    states of the ``layout``: q, k with a unit V axis, v with a unit K axis, one head when shared, step with a
    unit V axis (and K axis for a scalar decay); rate ``A`` ``[H, K]`` placed for the layout, or ``None``;
    ``entering`` a state ``[B, H, K, V]``."""
    states = recur(k * v, block_decays(step, rate), entering, layout.time)
    return (q * states).sum(layout.key), states.select(layout.time, -1)


def adjoint_block(q: Tensor, k: Tensor, v: Tensor, step: Tensor | None, rate: Tensor | None, entering: Tensor,
                  layout: Layout, grad_y: Tensor, grad_leaving: Tensor):
    """Gradients of one block (see :class:`BlockScan`; layouts as in :func:`scan_block`), recomputing its states
    from ``entering``; ``grad_y`` like the outputs, ``grad_leaving`` = ``∂S`` of the block's last state from after
    it.  Returns ``(∂q, ∂k, ∂v, ∂step, ∂rate, ∂S_{-1})``, each summed to its input's shape."""
    time, key, value = layout.time, layout.key, layout.value
    decays = block_decays(step, rate)
    carried = None if decays is None else []
    states = recur(k * v, decays, entering, time, carried=carried)
    grad_y = grad_y.unsqueeze(key)
    grads = recur(q * grad_y, decays, grad_leaving, time, reverse=True)  # ∂X_j = ∂S_j
    grad_q = (states * grad_y).sum(value, keepdim=True).sum_to_size(q.shape)
    grad_k = (grads * v).sum(value, keepdim=True).sum_to_size(k.shape)
    grad_v = (grads * k).sum(key, keepdim=True).sum_to_size(v.shape)
    grad_step = grad_rate = None
    if decays is not None:  # ∂g_j = ⟨∂X_j, a_j ⊙ S_{j-1}⟩
        grad_log = (grads * torch.stack(carried, dim=time)).sum(value, keepdim=True)
        if rate is None:
            grad_step = grad_log.sum_to_size(step.shape)
        else:
            grad_step = (grad_log * rate).sum_to_size(step.shape)
            grad_rate = (grad_log * step).sum_to_size(rate.shape)
    grad_entering = grads.select(time, 0) if decays is None else decays.select(time, 0) * grads.select(time, 0)
    return grad_q, grad_k, grad_v, grad_step, grad_rate, grad_entering


@functools.cache
def _compiled_kernels():
    """``(scan_block, adjoint_block)`` compiled by ``torch.compile`` (once per process; inductor keeps the
    generated code on disk, so a later process compiles faster)."""
    return tuple(torch.compile(fn, dynamic=False) for fn in (scan_block, adjoint_block))


_COMPILE_FAILED = []


def _compiling() -> bool:
    """Whether large scans run compiled: not with ``SEQDYN_COMPILE=0``, and not after the compiler failed once."""
    return os.environ.get("SEQDYN_COMPILE", "1") != "0" and not _COMPILE_FAILED


def _run_block(index: int, compiled: bool, *args):
    """Block function ``index`` (0: forward, 1: adjoint) on ``args``; a failing compiler (no C++ compiler, an
    unsupported platform) switches compiling off for the process, with a warning, and the block runs eagerly."""
    if compiled and _compiling():
        try:  # detached: the compiled functions are plain (inference) graphs inside BlockScan's own autograd
            return _compiled_kernels()[index](*(x.detach() if isinstance(x, Tensor) else x for x in args))
        except Exception as error:  # noqa: BLE001 — whatever the compiler stack raises, the eager code is exact
            _COMPILE_FAILED.append(error)
            log.warning("scan: torch.compile failed (%s: %s); scanning eagerly from now on",
                        type(error).__name__, str(error).splitlines()[0] if str(error) else "")
    return (scan_block, adjoint_block)[index](*args)


# ---------------------------------------------------------------------------------------------- whole sequence
def _one_head(x: Tensor | None) -> bool:
    """Whether ``x`` ``[B, H, ...]`` is one head expanded over all (stride 0) and can be scanned as one: its
    gradient is then returned split evenly over the heads, which only a view (not a leaf) may receive."""
    return (x is not None and x.shape[1] > 1 and shared_over_heads(x)
            and (x.grad_fn is not None or not x.requires_grad))


def _arranged(x: Tensor | None, one_head: bool, kind: str, layout: Layout) -> Tensor | None:
    """A head-major input ``[B, H, T, ...]`` in the block functions' ``layout``: one head when shared by all,
    time-major and contiguous for :data:`TIME_MAJOR` (each eager step then reads one stretch of memory), and with
    the unit axis it broadcasts along (``kind``: ``"key"`` for q and k — a V axis; ``"value"`` for v — a K axis)."""
    if x is None:
        return None
    if one_head:
        x = x[:, :1]
    if layout is TIME_MAJOR:
        x = x.movedim(2, 0).contiguous()
    return x.unsqueeze(_unit_axis(kind, layout)) if kind != "decay" else x


def _unit_axis(kind: str, layout: Layout) -> int:
    return layout.value if kind == "key" else layout.key


def _restored(grad: Tensor | None, shape: torch.Size | None, one_head: bool, kind: str, layout: Layout):
    """The inverse of :func:`_arranged` for the gradient of an input of ``shape``; one head's gradient is split
    evenly over the heads (only their sum reaches the tensor they were expanded from)."""
    if grad is None or shape is None:
        return None
    if kind != "decay":
        grad = grad.squeeze(_unit_axis(kind, layout))
    if layout is TIME_MAJOR:
        grad = grad.movedim(0, 2)
    return (grad / shape[1]).expand(shape) if one_head else grad


def _rate_arranged(rate: Tensor | None, layout: Layout) -> Tensor | None:
    """``A`` ``[H, K]`` placed against the layout's states: ``[H, K, 1]`` or ``[H, 1, K, 1]``."""
    if rate is None:
        return None
    return rate.unsqueeze(-1) if layout is TIME_MAJOR else rate[:, None, :, None]


def _rate_restored(grad: Tensor | None, layout: Layout) -> Tensor | None:
    if grad is None:
        return None
    return grad.squeeze(-1) if layout is TIME_MAJOR else grad[:, 0, :, 0]


def _blocks(length: int, size: int) -> list[tuple[int, int]]:
    """``(start, length)`` of each block of ``size`` steps (the last one may be shorter)."""
    return [(start, min(size, length - start)) for start in range(0, length, size)]


#: the kinds of BlockScan's inputs q, k, v, g, which fix the unit axis each broadcasts along
_KINDS = ("key", "key", "value", "decay")


class BlockScan(torch.autograd.Function):
    """``(y, S_T)`` of ``S_t = a_t ⊙ S_{t-1} + k_t v_tᵀ``, ``y_t = S_tᵀ q_t``, ``a = e^g`` (``g = Δ ⊗ A`` with a
    ``rate``; ``g`` ``None``: no decay).  Its adjoint: ``∂X_t = q_t ∂y_tᵀ + a_{t+1} ⊙ ∂X_{t+1}`` with ``∂S_T``
    flowing into ``∂X_{T-1}``; ``∂q_t = S_t ∂y_t``, ``∂k_t = ∂X_t v_t``, ``∂v_t = ∂X_tᵀ k_t``,
    ``∂g_t = a_t ⊙ ⟨∂X_t, S_{t-1}⟩`` (``∂Δ = ∂g A``, ``∂A = Σ ∂g Δ``) and ``∂S_{-1} = a_0 ⊙ ∂X_0``, each summed
    over the axes its input broadcasts along.  Inputs head-major ``[B, H, T, ...]`` (``g`` ``[B, H, T, K|1, 1]``,
    ``rate`` ``[H, K]``), heads shared by all (expanded) scanned once.  ``compiled``: whole blocks run the
    compiled block functions on head-major views; else the eager ones on time-major copies."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, rate: Tensor | None,
                initial: Tensor | None, compiled: bool):
        layout = HEAD_MAJOR if compiled and _compiling() else TIME_MAJOR
        inputs = (q, k, v, g)
        one_head = [_one_head(x) for x in inputs]
        arranged = [_arranged(x, shared, kind, layout) for x, shared, kind in zip(inputs, one_head, _KINDS)]
        rate = _rate_arranged(rate, layout)
        state_shape = (q.shape[0], q.shape[1], q.shape[3], v.shape[3])
        state = v.new_zeros(state_shape) if initial is None else initial.expand(state_shape).contiguous()
        entering, outputs = [], []
        size = BLOCK if layout is TIME_MAJOR else COMPILED_BLOCK
        for start, length in _blocks(q.shape[2], size):
            entering.append(state)
            block = [None if x is None else x.narrow(layout.time, start, length) for x in arranged]
            y, state = _run_block(0, layout is not TIME_MAJOR and length == size, *block, rate, state, layout)
            outputs.append(y)
        ctx.one_head, ctx.layout = one_head, layout
        ctx.shapes = [None if x is None else x.shape for x in (*inputs, initial)]
        ctx.save_for_backward(*arranged, rate, *entering)
        y = torch.cat(outputs, dim=layout.time)
        return (y.movedim(0, 2) if layout is TIME_MAJOR else y), state

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y: Tensor, grad_final: Tensor | None):
        q, k, v, g, rate, *entering = ctx.saved_tensors
        layout = ctx.layout
        time = layout.time
        if layout is TIME_MAJOR:
            grad_y = grad_y.movedim(2, 0).contiguous()
        flowing = torch.zeros_like(entering[0]) if grad_final is None else grad_final.contiguous()
        grads = [None if x is None else torch.empty_like(x) for x in (q, k, v, g)]
        grad_rate = None
        size = BLOCK if layout is TIME_MAJOR else COMPILED_BLOCK
        for (start, length), state in reversed(list(zip(_blocks(grad_y.shape[time], size), entering))):
            block = [None if x is None else x.narrow(time, start, length) for x in (q, k, v, g)]
            *block_grads, rate_part, flowing = _run_block(
                1, layout is not TIME_MAJOR and length == size, *block, rate, state, layout,
                grad_y.narrow(time, start, length), flowing)
            for full, part in zip(grads, block_grads):
                if full is not None:
                    full.narrow(time, start, length).copy_(part)
            if rate_part is not None:
                grad_rate = rate_part if grad_rate is None else grad_rate + rate_part
        *shapes, initial_shape = ctx.shapes
        grad_q, grad_k, grad_v, grad_g = (_restored(grad, shape, shared, kind, layout) for grad, shape, shared, kind
                                          in zip(grads, shapes, ctx.one_head, _KINDS))
        grad_initial = None if initial_shape is None else flowing.sum_to_size(initial_shape)
        return grad_q, grad_k, grad_v, grad_g, _rate_restored(grad_rate, layout), grad_initial, None
