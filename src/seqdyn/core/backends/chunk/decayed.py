"""Decayed chunks: the identity readout with no, scalar or diagonal decay and no Householder factor (linear
attention, RetNet, Mamba-2/SSD, mLSTM, GLA), with a hand-written backward.

Per chunk, with the state ``E`` entering it, ``Q̃ = Q ⊙ e^{γ}`` and ``K̃ = K ⊙ e^{Γ − γ}``::

    Y = A V + Q̃ E,     E_next = e^{Γ} ⊙ E + K̃ᵀ V,

where the intra-chunk coefficients are ``A = (Q Kᵀ) ⊙ L`` for a scalar decay (``L[t, j] = e^{γ_t − γ_j}``,
:func:`~.chunking.decay_matrix`; ``Q Kᵀ`` formed once when queries and keys are shared by all heads, as Mamba-2's
single group) and ``A = tril(Q_r K_rᵀ)`` for a diagonal one, factorized around the chunk's middle log decay ``r``
(:func:`~.chunking.diagonal_factors`).  :mod:`.minimal` computes the same with autograd.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from seqdyn.core import stacking
from seqdyn.core.backends.chunk.chunking import (
    backward_in_segments,
    decay_matrix,
    diagonal_factors,
    pass_state_gradients,
    pass_states,
    segment_of,
    segments,
    suffix_sums,
    sum_after,
)
from seqdyn.core.evolution import decay_factor
from seqdyn.core.precision import float32_under_autocast


def decayed_chunks(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, initial: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(Y [B, H, N, C, V], S_T [B, H, K, V])`` of chunked ``q``, ``k`` ``[B, H, N, C, K]``, ``v``
    ``[B, H, N, C, V]``, ``g`` ``[B, H, N, C]``, ``[B, H, N, C, K]`` or ``None`` (batch and heads of size 1
    broadcast) from the state ``initial`` ``[B, H, K, V]`` (or zero)."""
    return stacking.apply(_DecayedChunks, q, k, v, g, initial)


@float32_under_autocast
class _DecayedChunks(torch.autograd.Function):
    """The decayed chunks of the module docstring, a segment of chunks at a time: the forward keeps its inputs, the
    states entering the chunks and the last segment's blocks, the backward computes the other segments' blocks again
    and runs the state recurrence in reverse (:func:`~.chunking.backward_in_segments`); a scalar decay's ``∂g_l``
    sums the terms that contain ``g_l`` (:func:`_scalar_decay_gradient`), a diagonal one's goes through ``γ =
    cumsum(g)`` (every exponent a difference of ``γ``'s)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, initial: Tensor | None):
        g, diagonal = _decays(q, g)
        ctx.diagonal, ctx.has_decay = diagonal, ctx.needs_input_grad[3]
        return _forward_in_segments(ctx, q, k, v, g, initial, diagonal)

    @staticmethod
    def plain(q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, initial: Tensor | None):
        g, diagonal = _decays(q, g)
        return _forward(q, k, v, g, initial, diagonal)[:2]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor, grad_state: Tensor | None):
        q, k, v, g, initial, *entering = ctx.saved_tensors
        grads, grad_state = backward_in_segments(
            ctx,
            (q, k, v, g),
            entering,
            grad_out,
            grad_state,
            lambda segment: _intra_chunk(segment[0], segment[1], segment[3], ctx.diagonal),
            lambda *arguments: _backward(ctx, *arguments),
        )
        grad_initial = None if initial is None else grad_state.sum_to_size(initial.shape)
        return (*grads, grad_initial)


def _decays(q: Tensor, g: Tensor | None) -> tuple[Tensor, bool]:
    """``g`` as a tensor (zeros ``[1, 1, N, C]`` for no decay) and whether it is diagonal."""
    if g is None:
        return q.new_zeros(1, 1, *q.shape[2:4]), False
    return g, g.dim() == 5


def _intra_chunk(q: Tensor, k: Tensor, g: Tensor, diagonal: bool) -> tuple:
    """What each chunk computes from its own inputs: ``(A, Q̃, K̃, e^{Γ} [B, H, n, K|1, 1(, 1)], the factors the
    backward reads)``."""
    gamma = g.cumsum(dim=3)
    total = gamma[:, :, :, -1:]  # Γ [B, H, n, 1(, K)]
    if diagonal:  # e^{γ} = e^{γ − r} e^{r} and e^{Γ − γ} = e^{r − γ} e^{Γ − r}, every factor inside e^{±range/2}
        coefficients, queries, keys, intra = diagonal_factors(q, k, gamma, total)
    else:
        decay = decay_matrix(g)
        coefficients = (q @ k.transpose(-1, -2)) * decay
        query_factor, key_factor = decay_factor(gamma).unsqueeze(-1), decay_factor(sum_after(g)).unsqueeze(-1)
        queries, keys = q * query_factor, k * key_factor
        intra = (decay, query_factor, key_factor)
    chunk_decay = decay_factor(total.squeeze(3)).unsqueeze(-1)  # e^{Γ} [B, H, n, K|1, 1]
    if not diagonal:
        chunk_decay = chunk_decay.unsqueeze(-1)
    return coefficients, queries, keys, chunk_decay, intra


def _forward(q: Tensor, k: Tensor, v: Tensor, g: Tensor, initial: Tensor | None, diagonal: bool):
    """``(Y, S_T, the states entering the chunks [B, H, n, K, V], the blocks of :func:`_intra_chunk`)`` of the
    decayed chunks of ``q``, … (``g`` a tensor: zeros for no decay)."""
    blocks = _intra_chunk(q, k, g, diagonal)
    coefficients, queries, keys, chunk_decay, _ = blocks
    shape = torch.broadcast_shapes(q.shape[:2], k.shape[:2], v.shape[:2], g.shape[:2]) + (k.shape[-1], v.shape[-1])
    entering, state = pass_states(keys.transpose(-1, -2) @ v, chunk_decay, initial, shape)
    out = coefficients @ v + queries @ entering
    return out, state, entering, blocks


def _forward_in_segments(ctx, q: Tensor, k: Tensor, v: Tensor, g: Tensor, initial: Tensor | None, diagonal: bool):
    """:func:`_forward` a segment of chunks at a time (:func:`~.chunking.segments`); keeps the inputs, the states
    entering the chunks and the last segment's blocks for the backward."""
    full = torch.broadcast_shapes(q.shape[:2], k.shape[:2], v.shape[:2], g.shape[:2])
    out = v.new_empty(*full, *v.shape[2:])  # [B, H, N, C, V]
    entering, state, chunked = [], initial, segments((*full, v.shape[2]), v.shape[3], any(ctx.needs_input_grad))
    for chunks in chunked:
        segment_out, state, states, blocks = _forward(*(segment_of(x, chunks) for x in (q, k, v, g)), state, diagonal)
        out[:, :, chunks] = segment_out
        entering.append(states)
    ctx.save_for_backward(q, k, v, g, initial, *entering)
    ctx.last_blocks, ctx.segments = blocks, chunked
    return out, state


def _scalar_decay_gradient(grad_segments: Tensor, grad_queries: Tensor, grad_keys: Tensor) -> Tensor:
    """``∂g_l`` ``[B, H, N, C]`` of a scalar decay from what depends on it inside the chunk, each term summed over
    the quantities that contain ``g_l`` only: the segments ``σ_ij = Σ_{j<l≤i} g_l`` (``grad_segments`` ∂σ
    ``[.., C, C]``), the query factors ``e^{γ_i}`` (``i ≥ l``) and the key factors ``e^{Γ−γ_j}`` (``j < l``; their
    products with the factors' gradients given ``[.., C, X]``).  Differences of γ's suffix sums would give the same
    in exact arithmetic and cancel catastrophically under strong decays (a gradient ~ e^{−30} beside terms ~ 1)."""
    size = grad_segments.shape[-1]
    later = torch.ones(size, size, dtype=grad_segments.dtype, device=grad_segments.device).triu_()  # [l, i]: i ≥ l
    below = later @ grad_segments  # [l, j]: Σ_{i ≥ l} ∂σ[i, j] (a product: faster than a flipped cumsum)
    straddling = (below * later.T.tril(-1)).sum(-1)  # Σ_{i ≥ l > j} ∂σ[i, j]
    queries = suffix_sums(grad_queries.sum(-1))  # Σ_{i ≥ l}
    keys = grad_keys.sum(-1).cumsum(-1)
    keys = torch.cat([torch.zeros_like(keys[..., :1]), keys[..., :-1]], dim=-1)  # Σ_{j < l}
    return straddling + queries + keys


def _backward(ctx, inputs: list, blocks: tuple, entering: Tensor, grad_out: Tensor, grad_state: Tensor | None):
    """The gradients of one segment's inputs ``(q, k, v, g)`` (the class docstring's backward), given its blocks
    (:func:`_intra_chunk`), the states entering its chunks, ``∂Y`` and ``∂S`` of the state leaving it; returns them
    (``∂g`` ``None`` without a decay's gradient) and ``∂S`` of the state entering it."""
    q, k, v, g = inputs
    coefficients, queries, keys, chunk_decay, intra = blocks
    grad_increments, grad_initial = pass_state_gradients(queries.transpose(-1, -2) @ grad_out, chunk_decay, grad_state)
    grad_queries = grad_out @ entering.transpose(-1, -2)
    grad_keys = v @ grad_increments.transpose(-1, -2)
    grad_v = keys @ grad_increments + coefficients.transpose(-1, -2) @ grad_out
    grad_coefficients = grad_out @ v.transpose(-1, -2)
    if ctx.diagonal:
        inner, up, down = intra
        grad_coefficients = torch.tril(grad_coefficients)
        grad_q = torch.addcmul(grad_coefficients @ (k / inner), grad_queries, up) * inner
        grad_k = torch.addcmul(grad_coefficients.transpose(-1, -2) @ (q * inner), grad_keys, down) / inner
        if ctx.has_decay:  # every factor of q is e^{γ}, of k e^{−γ}: ∂γ = ∂q ⊙ q − ∂k ⊙ k
            grad_gamma = grad_q * q - grad_k * k
    else:
        decay, query_factor, key_factor = intra
        gram_shape = torch.broadcast_shapes(q.shape[:2], k.shape[:2]) + decay.shape[2:]
        grad_gram = (grad_coefficients * decay).sum_to_size(gram_shape)  # shared heads: summed first
        # terms reduced to the input's heads one by one: the gram's gradient is already summed over heads
        grad_q = (grad_gram @ k).sum_to_size(q.shape) + (grad_queries * query_factor).sum_to_size(q.shape)
        grad_k = (grad_gram.transpose(-1, -2) @ q).sum_to_size(k.shape) + (grad_keys * key_factor).sum_to_size(k.shape)
    grad_g = None
    if ctx.has_decay and not ctx.diagonal:
        grad_g = _scalar_decay_gradient(grad_coefficients * coefficients, grad_queries * queries, grad_keys * keys)
        state_part = (grad_increments * chunk_decay * entering).sum((-1, -2))  # Γ in e^{Γ} of the state [B, H, N]
        grad_g = (grad_g + state_part.unsqueeze(-1)).sum_to_size(g.shape)
    elif ctx.has_decay:  # Γ enters e^{Γ − γ} of the keys and e^{Γ} of the state
        grad_total = (grad_keys * keys).sum(3) + (grad_increments * chunk_decay * entering).sum(-1)
        grad_gamma[:, :, :, -1] += grad_total
        grad_g = suffix_sums(grad_gamma).sum_to_size(g.shape)
    grads = (grad_q.sum_to_size(q.shape), grad_k.sum_to_size(k.shape), grad_v.sum_to_size(v.shape), grad_g)
    return grads, grad_initial
