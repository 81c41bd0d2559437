"""What every chunked algorithm shares: the chunk size, the chunked layout, the decays inside a chunk and the
state passed from chunk to chunk.

Layout: ``[B, H, T, ...]`` is split into ``N`` chunks of ``C`` steps, ``[B, H, N, C, ...]``, the last chunk
zero-padded (:func:`to_chunks`).  Inside a chunk ``γ_t = Σ_{s≤t} g_s`` and ``Γ = γ_{C−1}``; every factor is
``e^{γ_t − γ_j}`` with ``j ≤ t`` (:func:`decay_matrix`), or for diagonal decays a product of factors around the
chunk's middle log decay (:func:`diagonal_factors`), for which :func:`safe_chunk_size` sizes the chunks.  Between
chunks ``E_{n+1} = P_n E_n + ΔS_n`` (:func:`pass_states`).
"""

from __future__ import annotations

import math
import os

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from seqdyn.core import stacking
from seqdyn.core.evolution import HARD_RESET, bounded_log_decay, causal_mask, cumulative_log_decay, subnormal_cutoff
from seqdyn.core.precision import float32_under_autocast
from seqdyn.core.problem import shared_over_heads


# ---------------------------------------------------------------------------------------------------- chunk size
def safe_chunk_size(log_decay: Tensor, chunk_size: int, largest_step: float | None = None) -> int:
    """Largest ``C' ≤ C`` (halving) for which every chunk's range of diagonal log decays fits the float range.

    Inside a chunk the factors ``e^{γ − r}`` and ``e^{r − γ}`` around the middle ``r`` stay below
    ``e^{range/2}``; ``range < 0.75·log(float max)`` keeps their products finite.  Hard resets count as
    :data:`~seqdyn.core.evolution.HARD_RESET`; other non-finite decays are ignored here (they propagate as NaN/Inf
    like any other input).  ``largest_step``: ``max |g|`` when the caller has it.
    """
    limit = 0.75 * math.log(torch.finfo(product_dtype(log_decay)).max)
    if largest_step is None:
        largest_step = _largest_step(log_decay)
    if largest_step * chunk_size < limit:  # the common case: no chunk can span the limit
        return chunk_size
    with torch.no_grad():
        return _halve_until_safe(log_decay, chunk_size, limit)


def product_dtype(x: Tensor) -> torch.dtype:
    """The dtype matrix products of ``x``'s factors are formed in: autocast's where it is on for ``x``'s device (its
    float16 reaches only ``e^{11}``, so under it the chunks are sized for that), else ``x``'s own."""
    device = x.device.type
    if torch.amp.is_autocast_available(device) and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype


def _largest_step(log_decay: Tensor) -> float:
    """``max |g|`` (of every run while runs are stacked: :func:`~seqdyn.core.stacking.amax`)."""
    if stacking.runs_stacked():
        return stacking.amax(log_decay.detach().abs()).item()
    return torch.linalg.vector_norm(log_decay.detach(), ord=float("inf")).item()


def diagonal_chunking(log_decay: Tensor, chunk_size: int) -> tuple[Tensor, int]:
    """Diagonal log decays with hard resets bounded (:func:`~seqdyn.core.evolution.bounded_log_decay`, only where
    ``max |g|``, read to size the chunks anyway, is infinite) and the chunk size for them (:func:`safe_chunk_size`)."""
    largest_step = _largest_step(log_decay)
    if largest_step == math.inf:
        log_decay = bounded_log_decay(log_decay)
    return log_decay, safe_chunk_size(log_decay, chunk_size, largest_step)


def _halve_until_safe(log_decay: Tensor, chunk_size: int, limit: float) -> int:
    length = log_decay.shape[2]
    cumulative = cumulative_log_decay(log_decay)
    cumulative = torch.cat([torch.zeros_like(cumulative[:, :, :1]), cumulative], dim=2)  # G_{-1} = 0: [B, H, T + 1, K]
    while chunk_size > 1:
        chunks = -(-length // chunk_size)
        pad = chunks * chunk_size + 1 - cumulative.shape[2]  # padded steps have g = 0: G stays constant
        padded = torch.cat([cumulative, cumulative[:, :, -1:].expand(-1, -1, pad, -1)], dim=2)  # [B, H, N·C + 1, K]
        windows = padded.unfold(2, chunk_size + 1, chunk_size)  # [B, H, N, K, C + 1]: each chunk and G before it
        spread = torch.nan_to_num(windows.amax(-1) - windows.amin(-1), nan=0.0, posinf=0.0, neginf=0.0)
        if stacking.amax(spread).item() < limit:
            break
        chunk_size //= 2
    return chunk_size


# -------------------------------------------------------------------------------------------------------- layout
def to_chunks(x: Tensor | None, chunks: int, size: int) -> Tensor | None:
    """``[B, H, T, ...]`` → ``[B, H, N, C, ...]``, zero-padding the end (zero input, Λ = I: the state is unchanged)."""
    if x is None:
        return None
    pad = chunks * size - x.shape[2]
    if pad:
        x = torch.cat([x, x.new_zeros(*x.shape[:2], pad, *x.shape[3:])], dim=2)  # [B, H, N·C, ...]
    return x.reshape(*x.shape[:2], chunks, size, *x.shape[3:])  # [B, H, N, C, ...]


def dense(x: Tensor | None) -> Tensor | None:
    """A chunked ``[B, H, N, C, D]`` operand for batched products: contiguous (copied once here rather than in
    every product that batches over heads and chunks), and of one head when it is shared by all heads (expanded
    with stride 0), so that products with it are formed once."""
    if x is None:
        return None
    return x[:, :1].contiguous() if shared_over_heads(x) else x.contiguous()  # [B, 1 or H, N, C, D]


def unchunked(out: Tensor, length: int) -> Tensor:
    """``[B, H, N, C, V]`` → ``[B, H, T, V]``, dropping the padding."""
    out = out.flatten(2, 3)  # [B, H, N·C, V]
    return out if out.shape[2] == length else out[:, :, :length]


def along_keys(x: Tensor, diagonal: bool) -> Tensor:
    """Shape a (log) decay to multiply ``[..., K]`` rows: scalar ``[...]`` gains a trailing axis."""
    return x if diagonal else x.unsqueeze(-1)


# ----------------------------------------------------------------------------------------- decays inside a chunk
def decay_matrix(g: Tensor) -> Tensor:
    """``L[t, j] = e^{γ_t − γ_j}`` for ``j ≤ t``, 0 above the diagonal and where the factor is below
    :func:`~seqdyn.core.evolution.decay_factor`'s cutoff: ``[..., C, C]`` from ``g`` ``[..., C]``.

    ``γ`` is summed in float64 and split into the input dtype's leading part and remainder, ``γ = h + l``:
    ``h_t − h_j`` is rounded once, so every difference keeps the digits of its own segment — as summing each
    segment does (Mamba-2's "segsum"), where the difference of two long float32 sums would lose the digits of
    the short segments, which matter most — in half the passes over ``[C, C]`` of segment sums.  A hard reset
    (``g ≤ −10⁴``, e.g. ``−∞``; the starts of packed sequences) splits the chunk: each part is summed on its own
    and every factor across a reset is exactly 0, so the factors after a reset keep all their digits.
    """
    size = g.shape[-1]
    bounded = bounded_log_decay(g.to(torch.float64))
    resets = bounded <= HARD_RESET
    across = None
    if stacking.anywhere(resets):
        part = resets.cumsum(-1)  # [..., C]: the resets up to each step
        across = part.unsqueeze(-1) != part.unsqueeze(-2)  # [..., C, C]: a reset in (j, t]
        bounded = bounded.masked_fill(resets, 0.0)
    gamma = bounded.cumsum(-1)
    lead = gamma.to(g.dtype)
    exponent = lead.unsqueeze(-1) - lead.unsqueeze(-2)  # [..., C, C]
    if g.dtype != torch.float64:
        rest = (gamma - lead.to(torch.float64)).to(g.dtype)
        exponent.add_(rest.unsqueeze(-1)).sub_(rest.unsqueeze(-2))
    dropped = (exponent < subnormal_cutoff(g.dtype)).logical_or_(~causal_mask(size, size, g.device))
    if across is not None:
        dropped.logical_or_(across)
    return exponent.masked_fill_(dropped, float("-inf")).exp_()


def suffix_sums(x: Tensor) -> Tensor:
    """``Σ_{s≥t} x_s`` within each chunk (axis 3 of ``[B, H, N, C, ...]``): the adjoint of ``γ = cumsum(g)``."""
    return x.flip(3).cumsum(3).flip(3)


def sum_after(g: Tensor) -> Tensor:
    """``Γ − γ_t = Σ_{s>t} g_s`` within each chunk (axis 3 of ``[B, H, N, C, ...]``), summed from the end."""
    shifted = torch.cat([g[:, :, :, 1:], torch.zeros_like(g[:, :, :, :1])], dim=3)  # g_{t+1} [B, H, N, C, ...]
    return suffix_sums(shifted)


def middle_of_range(log_decays: Tensor) -> Tensor:
    """The middle of each chunk's range of log decays (per key), ``[..., 1, K]``; 0 where it is not finite."""
    middle = 0.5 * (log_decays.amax(dim=-2, keepdim=True) + log_decays.amin(dim=-2, keepdim=True))
    return torch.nan_to_num(middle.detach(), nan=0.0, posinf=0.0, neginf=0.0)


def diagonal_factors(q: Tensor, k: Tensor, gamma: Tensor, total: Tensor, differentiable: bool = False):
    """Diagonal decays inside each chunk, factorized once around the chunk's middle log decay ``r``.

    With ``Q_r = q ⊙ e^{γ − r}`` and ``K_r = k ⊙ e^{r − γ}`` (every factor below ``e^{range/2}``, exact for any
    r, so r carries no gradient): the intra-chunk coefficients ``A = tril(Q_r K_rᵀ)``, the queries reading the
    entering state ``Q̃ = Q_r ⊙ e^{r} = q ⊙ e^{γ}``, and the keys carried to the chunk's end
    ``K̃ = K_r ⊙ e^{Γ − r} = k ⊙ e^{Γ − γ}``.  A chunk of one step has ``r = γ``: its factors are 1 for any decay.
    ``gamma`` ``[B, H, N, C, K]``, ``total`` Γ ``[B, H, N, 1, K]``.  Returns ``(A, Q̃, K̃)`` and the factors
    ``(e^{γ − r}, e^{r}, e^{Γ − r})`` for a hand-written backward (``e^{γ − r}`` is ``None`` when
    ``differentiable``: then autograd goes through :class:`OppositeDecays`).
    """
    middle = middle_of_range(gamma)
    if differentiable:
        inner, (grown, shrunk) = None, OppositeDecays.apply(q, k, gamma - middle)
    else:
        inner, grown, shrunk = opposite_decays(q, k, gamma - middle)
    coefficients = torch.tril(grown @ shrunk.transpose(-1, -2))
    up, down = torch.exp(middle), torch.exp(total - middle)
    return coefficients, grown * up, shrunk * down, (inner, up, down)


def opposite_decays(q: Tensor, k: Tensor, exponent: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(e^{d}, q ⊙ e^{d}, k ⊙ e^{−d})`` with one exponential."""
    factor = torch.exp(exponent)
    return factor, q * factor, k / factor


@float32_under_autocast
class OppositeDecays(torch.autograd.Function):
    """``(q ⊙ e^{d}, k ⊙ e^{−d})`` with one exponential: the forward and the backward each take a few elementwise
    passes fewer than autograd through ``exp``, ``mul`` and ``sub`` (these passes over ``[B, H, T, K]`` are most of
    the diagonal-decay chunk's time besides its matrix products).  Inputs broadcast against each other."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, exponent: Tensor) -> tuple[Tensor, Tensor]:
        factor, grown, shrunk = opposite_decays(q, k, exponent)
        ctx.save_for_backward(factor, grown, shrunk)
        ctx.shapes = (q.shape, k.shape, exponent.shape)
        return grown, shrunk

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_grown: Tensor, grad_shrunk: Tensor):
        factor, grown, shrunk = ctx.saved_tensors
        q_shape, k_shape, exponent_shape = ctx.shapes
        grad_q = (grad_grown * factor).sum_to_size(q_shape)
        grad_k = (grad_shrunk / factor).sum_to_size(k_shape)
        if grown.shape == shrunk.shape:
            grad_exponent = torch.addcmul(grad_grown * grown, grad_shrunk, shrunk, value=-1).sum_to_size(exponent_shape)
        else:  # q and k broadcast differently: reduce each term over its own broadcast axes
            grad_exponent = (grad_grown * grown).sum_to_size(exponent_shape) - (grad_shrunk * shrunk).sum_to_size(
                exponent_shape
            )
        return grad_q, grad_k, grad_exponent


# ---------------------------------------------------------------------------------------------- segments
#: tokens × batch × heads per segment of chunks, at most: the fast paths' forward and backward keep one segment's
#: blocks at a time, the backward computing the others again from the inputs and the states entering the chunks
#: (``SEQDYN_CHUNK_SEGMENT`` sets another; ``0``: one segment, every block kept — more memory, less time).  A forward
#: that no backward follows (inference, prefill) keeps no block and runs segments of this size.
SEGMENT_TOKEN_HEADS = 4096
#: where a backward follows, a segment is at most this share of all the chunks' tokens × batch × heads, but not less
#: than :data:`SEGMENT_LEAST_TOKEN_HEADS`: a segment's blocks and their gradients, about 10× a segment's inputs, then
#: stay within about the inputs' size (Gated DeltaNet, GLA and Mamba-2 at 4k tokens, B = 1, H = 4: 10–35 % less
#: peak memory, forward + backward in the same time within 5 %; at 1k tokens, B = 4, the same; 2026-12-03)
SEGMENT_SHARE = 8
SEGMENT_LEAST_TOKEN_HEADS = 2048
SEGMENT_MIN_CHUNKS = 4


def segment_token_heads(total: int, backward: bool = True) -> int:
    """Tokens × batch × heads per segment of a problem of ``total`` of them: :data:`SEGMENT_TOKEN_HEADS`, or with a
    ``backward`` to follow its :data:`SEGMENT_SHARE`-th part within ``[SEGMENT_LEAST_TOKEN_HEADS,
    SEGMENT_TOKEN_HEADS]``; ``$SEQDYN_CHUNK_SEGMENT`` where it is set (``0``: no limit)."""
    text = os.environ.get("SEQDYN_CHUNK_SEGMENT", "").strip()
    if not text:
        if not backward:
            return SEGMENT_TOKEN_HEADS
        return min(SEGMENT_TOKEN_HEADS, max(SEGMENT_LEAST_TOKEN_HEADS, total // SEGMENT_SHARE))
    if not text.isdigit():
        raise ValueError(
            f"SEQDYN_CHUNK_SEGMENT: got {text!r}; give tokens × batch × heads per segment (e.g. 4096), or 0 for one "
            "segment"
        )
    return int(text)


def segments(full: tuple[int, ...], size: int, backward: bool = True) -> list[slice]:
    """The chunks of ``full`` = ``(B, H, N)`` in segments of at most :func:`segment_token_heads` tokens times batch
    and heads (at least :data:`SEGMENT_MIN_CHUNKS` chunks of ``size`` steps; all of them for a limit of 0);
    ``backward``: whether a backward follows the forward."""
    batch, heads, chunks = full
    limit = segment_token_heads(batch * heads * chunks * size, backward)
    per = max(SEGMENT_MIN_CHUNKS, limit // (batch * heads * size)) if limit else chunks
    return [slice(first, min(first + per, chunks)) for first in range(0, chunks, per)]


def segment_of(x: Tensor | None, chunks: slice) -> Tensor | None:
    """The chunks ``chunks`` of a chunked ``[B, H, N, ...]`` (``None`` stays ``None``)."""
    return None if x is None else x[:, :, chunks]


def backward_in_segments(ctx, inputs: tuple, entering: list, grad_out: Tensor, grad_state, blocks_of, backward_of):
    """The backward of a forward run in ``ctx.segments``, the last segment first: each segment's blocks are
    ``ctx.last_blocks`` (the forward's last, let go here once used) or ``blocks_of(segment's inputs)``, its gradients
    ``backward_of(inputs, blocks, its entering states, its ∂Y, ∂S leaving it)`` → ``(gradients, ∂S entering it)``.
    Returns the inputs' gradients (``None`` where every segment gave none) and ``∂S`` of the initial state."""
    grads = [torch.empty_like(x) for x in inputs]
    given = [False] * len(inputs)
    grad_out = grad_out.contiguous()
    for chunks, states in reversed(list(zip(ctx.segments, entering))):
        segment = [segment_of(x, chunks) for x in inputs]
        if ctx.last_blocks is not None:
            blocks, ctx.last_blocks = ctx.last_blocks, None
        else:
            blocks = blocks_of(segment)
        # one copy of ∂Y's slice for the several products that take it
        segment_grads, grad_state = backward_of(
            segment, blocks, states, grad_out[:, :, chunks].contiguous(), grad_state
        )
        for index, segment_grad in enumerate(segment_grads):
            if segment_grad is not None:
                grads[index][:, :, chunks], given[index] = segment_grad, True
    return [grad if was_given else None for grad, was_given in zip(grads, given)], grad_state


# ---------------------------------------------------------------------------------------- states between chunks
def pass_states(
    increments: Tensor, transitions: Tensor, initial: Tensor | None, shape: tuple[int, ...], matrix: bool = False
):
    """``E_{n+1} = P_n E_n + ΔS_n`` from ``E_0`` (``initial`` or zero), with ``P_n`` a decay multiplying
    elementwise (``e^{Γ_n}``, broadcast against ``[K, V]``) or, with ``matrix``, a ``[K, K]`` transition: the
    entering states stacked ``[B, H, N, K, V]`` and the final state.  Chunks are taken by ``unbind``, not by
    indexing: under autograd one unbind stacks the chunks' gradients once, where indexing chunk n would add a
    zero-filled gradient of the whole tensor for every chunk."""
    state = initial.expand(shape) if initial is not None else increments.new_zeros(shape)
    entering = []
    for increment, transition in zip(increments.unbind(2), transitions.unbind(2)):
        entering.append(state)
        state = transition @ state + increment if matrix else torch.addcmul(increment, transition, state)
    return torch.stack(entering, dim=2), state  # [B, H, N, K, V], [B, H, K, V]


def pass_state_gradients(grad_entering: Tensor, transitions: Tensor, grad_final: Tensor | None):
    """The reverse of :func:`pass_states` for an elementwise decay: ``∂ΔS_n = ∂E_{n+1}`` and
    ``∂E_n = ∂_direct E_n + P_n ⊙ ∂E_{n+1}``; returns ``(∂ΔS [B, H, N, K, V], ∂E_0)``."""
    grad_after = (
        torch.zeros_like(grad_entering[:, :, 0])
        if grad_final is None
        else grad_final.expand_as(grad_entering[:, :, 0]).clone()
    )
    grad_increments = torch.empty_like(grad_entering)
    for n in range(grad_entering.shape[2] - 1, -1, -1):
        grad_increments[:, :, n] = grad_after
        grad_after = torch.addcmul(grad_entering[:, :, n], transitions[:, :, n], grad_after)
    return grad_increments, grad_after
