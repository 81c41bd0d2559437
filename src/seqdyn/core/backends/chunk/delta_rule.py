"""The delta rule: DeltaNet's Householder factor (direction = key, ``k_j = s_j d_j``) with no or scalar decay
(Gated DeltaNet), with a hand-written backward.

Per chunk, with the one decay matrix ``L[t, j] = e^{γ_t − γ_j}`` (:func:`~.chunking.decay_matrix`, ``j ≤ t``),
``F_t = e^{γ_t}``, ``Q̃ = Q ⊙ F`` and ``D̂ = D ⊙ e^{Γ − γ}``::

    A = (Q Dᵀ) ⊙ L,   N = tril₋₁((D Dᵀ) ⊙ L),   [U, W] = (I + β N)^{-1} [s ⊙ V, β F ⊙ D]   (the UT transform)
    V' = U − W S,     Y = Q̃ S + A V',     S_next = e^{Γ} S + D̂ᵀ V'

(Yang et al. 2024's chunkwise delta rule, with the decay of Gated DeltaNet).  ``β N`` is the WY matrix
``c_t (d_t·d_j) e^{γ_{t−1} − γ_j}`` with ``c_t = β_t e^{g_t}``, and ``β F ⊙ D`` is ``c ⊙ D e^{γ_{t−1}}``:
folding ``e^{g_t}`` in leaves one decay matrix, shared by A and N, whose two grams are one product of the
stacked ``[Q; D]`` with ``Dᵀ``.  Only ``V'`` and the states are sequential (the corrected values ``V'`` are
carried from chunk to chunk instead of a ``[K, K]`` transition); the output is one product ``[Q̃, A] [S; V']``
per chunk.  :mod:`.minimal` computes the same with autograd.

Memory: the chunks run in segments of about :data:`~.chunking.SEGMENT_TOKEN_HEADS` tokens × batch × heads.  The forward
keeps its inputs, the state entering each chunk (``K·V`` numbers per chunk) and the last segment's blocks; the
backward computes each other segment's blocks again from those (flash-linear-attention's kernels keep the same),
so that forward + backward holds one segment's ``C²`` and ``C (K + V)`` blocks at a time instead of every chunk's.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from seqdyn.core.backends.chunk.chunking import (
    backward_in_segments,
    decay_matrix,
    segment_of,
    segments,
    suffix_sums,
    sum_after,
)
from seqdyn.core.backends.chunk.triangular import unit_lower_inverse
from seqdyn.core.evolution import decay_factor
from seqdyn.core.precision import float32_under_autocast


def delta_rule_chunks(
    q: Tensor, d: Tensor, v: Tensor, g: Tensor | None, beta: Tensor, s: Tensor, initial: Tensor | None
) -> tuple[Tensor, Tensor]:
    """``(Y [B, H, N, C, V], S_T [B, H, K, V])`` of chunked ``q``, ``d`` ``[B, H, N, C, K]``, ``v``
    ``[B, H, N, C, V]`` and ``g`` (or ``None``), β, ``s`` ``[B, H, N, C]`` (batch and heads of size 1 broadcast)
    from the state ``initial`` ``[B, H, K, V]`` (or zero)."""
    return _DeltaRuleChunks.apply(q, d, v, g, beta, s, initial)


def _delta_rule_states(
    u: Tensor, w: Tensor, to_end: Tensor, chunk_decay: Tensor, initial: Tensor | None, states: Tensor
) -> tuple[Tensor, Tensor]:
    """The chunks' sequential part, ``V'_n = U_n − W_n S_n`` and ``S_{n+1} = e^{Γ_n} S_n + D̂_nᵀ V'_n`` from
    ``S_0`` (``initial`` or zero), writing each ``S_n`` into ``states`` ``[B, H, N, K, V]`` (a view whose batch and
    heads merge).  Returns ``V'`` ``[B, H, N, C, V]`` and the final state; every input has the full batch and
    heads."""
    batch, heads, chunks, key_dim, value_dim = states.shape
    corrected = u.new_empty(batch, heads, chunks, u.shape[-2], value_dim)
    final = u.new_empty(batch * heads, key_dim, value_dim)
    flat_states, flat_corrected = states.flatten(0, 1), corrected.flatten(0, 1)  # [B·H, N, ·, V] views
    u, w, to_end = (x.flatten(0, 1) for x in (u, w, to_end))  # [B·H, N, C, ·]
    decays = chunk_decay.expand(batch, heads, chunks, 1, 1).flatten(0, 1)  # [B·H, N, 1, 1]
    if initial is None:
        flat_states[:, 0].zero_()
    else:
        flat_states[:, 0] = initial.expand(batch, heads, key_dim, value_dim).flatten(0, 1)
    for n in range(chunks):
        state, following = flat_states[:, n], (flat_states[:, n + 1] if n + 1 < chunks else final)
        torch.baddbmm(u[:, n], w[:, n], state, alpha=-1, out=flat_corrected[:, n])  # V'_n = U_n − W_n S_n
        torch.mul(state, decays[:, n], out=following).baddbmm_(to_end[:, n].transpose(-1, -2), flat_corrected[:, n])
    return corrected, final.view(batch, heads, key_dim, value_dim)


def _delta_rule_state_gradients(
    grad_out: Tensor,
    query_in: Tensor,
    coefficients: Tensor,
    w: Tensor,
    to_end: Tensor,
    chunk_decay: Tensor,
    grad_final: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The reverse of :func:`_delta_rule_states`, given ``∂Y`` of ``Y = Q̃ S + A V'`` (``query_in`` Q̃, ``coefficients``
    A): with the direct gradients ``∂_direct S_n = Q̃ᵀ ∂Y`` and ``∂_direct V'_n = Aᵀ ∂Y``, ``∂V'_n = ∂_direct V'_n +
    D̂_n ∂S_{n+1}`` and ``∂S_n = ∂_direct S_n + e^{Γ_n} ∂S_{n+1} − W_nᵀ ∂V'_n``.  Returns ``(∂S_{n+1} [B, H, N, K,
    V], ∂V' [B, H, N, C, V], ∂S_0)``."""
    direct_states, direct_corrected = query_in.transpose(-1, -2) @ grad_out, coefficients.transpose(-1, -2) @ grad_out
    batch, heads, chunks, key_dim, value_dim = direct_states.shape
    size = direct_corrected.shape[3]
    grad_after = direct_states.new_empty(batch, heads, chunks, key_dim, value_dim)
    grad_corrected = direct_states.new_empty(batch, heads, chunks, size, value_dim)
    grad_initial = direct_states.new_empty(batch * heads, key_dim, value_dim)
    after, corrected = grad_after.flatten(0, 1), grad_corrected.flatten(0, 1)  # [B·H, N, ·, V] views
    direct_states, direct_corrected = direct_states.flatten(0, 1), direct_corrected.flatten(0, 1)
    w, to_end = w.flatten(0, 1), to_end.flatten(0, 1)  # [B·H, N, C, K]
    decays = chunk_decay.expand(batch, heads, chunks, 1, 1).flatten(0, 1)  # [B·H, N, 1, 1]
    if grad_final is None:
        after[:, -1].zero_()
    else:
        after[:, -1] = grad_final.expand(batch, heads, key_dim, value_dim).flatten(0, 1)
    for n in range(chunks - 1, -1, -1):
        grad_next, earlier = after[:, n], (after[:, n - 1] if n > 0 else grad_initial)  # ∂S_{n+1}, where ∂S_n goes
        torch.baddbmm(direct_corrected[:, n], to_end[:, n], grad_next, out=corrected[:, n])  # ∂V'_n
        torch.addcmul(direct_states[:, n], decays[:, n], grad_next, out=earlier).baddbmm_(
            w[:, n].transpose(-1, -2), corrected[:, n], alpha=-1
        )  # ∂S_n
    return grad_after, grad_corrected, grad_initial.view(batch, heads, key_dim, value_dim)


def _decay_factors(g: Tensor, full: tuple[int, ...]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The decays of each chunk from its log decays ``g`` ``[B, H, N, C]``, with ``γ = cumsum(g)``: the decay
    matrix ``L`` ``[B, H, N, C, C]``, ``F = e^{γ}`` and ``e^{Γ − γ}`` ``[B, H, N, C, 1]``, and ``e^{Γ}``
    ``[B, H, N, 1, 1]`` expanded to the batch, heads and chunks ``full``."""
    gamma = g.cumsum(dim=3)
    decay = decay_matrix(g)  # L
    query_factor = decay_factor(gamma).unsqueeze(-1)  # F
    end_factor = decay_factor(sum_after(g)).unsqueeze(-1)  # e^{Γ − γ}
    chunk_decay = decay_factor(gamma[:, :, :, -1]).unsqueeze(-1).unsqueeze(-1).expand(*full, 1, 1)  # e^{Γ}
    return decay, query_factor, end_factor, chunk_decay


def _through_ut_transform(
    grad_corrected: Tensor, entering: Tensor, inverse: Tensor, solved: Tensor
) -> tuple[Tensor, Tensor]:
    """The backward of ``V' = U − W S`` and of the UT transform ``[U, W] = T R``, given ``∂V'`` and the entering
    states ``S``: with ``∂[U, W] = [∂V', −∂V' Sᵀ]`` returns ``∂R = Tᵀ ∂[U, W]`` ``[B, H, N, C, V + K]`` (``R = [s ⊙ V,
    β F ⊙ D]``) and ``∂R [U, W]ᵀ`` ``[B, H, N, C, C]``, whose ``−tril₋₁`` is ``∂(βN)``."""
    grad_solved = torch.cat([grad_corrected, -(grad_corrected @ entering.transpose(-1, -2))], dim=-1)
    grad_rhs = inverse.transpose(-1, -2) @ grad_solved
    return grad_rhs, grad_rhs @ solved.transpose(-1, -2)


def _through_grams(
    grad_coefficients: Tensor, products: Tensor, decay: Tensor, beta: Tensor, grams: Tensor, stacked: Tensor
) -> tuple[Tensor, Tensor]:
    """The backward of the grams ``[A; N] = ([Q; D] Dᵀ) ⊙ L``, given ``∂A`` and ``∂(βN) = −tril₋₁(products)``:
    with ``G = [∂A ⊙ L; ∂N ⊙ L]`` (``∂N ⊙ L = −β tril₋₁(products) ⊙ L``) returns ``G D`` ``[B, H, N, 2C, K]``
    (``∂Q`` and a term of ``∂D``) and ``Gᵀ [Q; D]`` (the other term of ``∂D``)."""
    size = grams.shape[-1]
    grad_grams = torch.empty(
        torch.broadcast_shapes(grams.shape, products.shape[:3] + grams.shape[3:]),
        dtype=grams.dtype,
        device=grams.device,
    )  # [B, H, N, 2, C, C]
    grad_of_queries, grad_of_keys = grad_grams.unbind(-3)
    torch.mul(grad_coefficients, decay, out=grad_of_queries)
    torch.mul(products, decay, out=grad_of_keys).mul_(-beta.unsqueeze(-1))
    grad_of_keys.diagonal(dim1=-2, dim2=-1).zero_()
    grad_grams = grad_grams.sum_to_size(grams.shape).flatten(-3, -2)  # [B, H|1, N, 2C, C], stacked as [Q; D]
    return grad_grams @ stacked[..., size:, :], grad_grams.transpose(-1, -2) @ stacked


class SegmentBlocks(NamedTuple):
    """A segment's intra-chunk blocks (everything of the module docstring but the sequential part), computed in the
    forward and again in the backward from the inputs."""

    factors: tuple[Tensor, Tensor, Tensor, Tensor]  # L, F, e^{Γ − γ}, e^{Γ}
    stacked: Tensor  # [Q; D] [B, H, n, 2C, K]
    grams: Tensor  # [A; N] [B, H, n, 2, C, C] (N's diagonal zeroed)
    inverse: Tensor  # T = (I + βN)^{-1} [B, H, n, C, C]
    solved: Tensor  # [U, W] [B, H, n, C, V + K]
    to_end: Tensor  # D̂ [B, H, n, C, K]
    query_in: Tensor  # Q̃ [B, H, n, C, K]


def segment_blocks(
    q: Tensor, d: Tensor, v: Tensor, g: Tensor, beta: Tensor, s: Tensor, full: tuple[int, ...]
) -> SegmentBlocks:
    """The intra-chunk blocks of the chunks of ``q``, ``d``, … (a segment of them), ``full`` = ``(B, H, n)``."""
    size, key_dim, value_dim = d.shape[-2], d.shape[-1], v.shape[-1]
    factors = _decay_factors(g, full)
    decay, query_factor, end_factor, _ = factors
    pair = torch.broadcast_shapes(q.shape, d.shape)
    stacked = torch.cat([q.expand(pair), d.expand(pair)], dim=-2)  # [Q; D] [B, H, n, 2C, K]
    # [A; N] = ([Q; D] Dᵀ) ⊙ L, unflattened [B, H, n, 2C, C] -> [B, H, n, 2, C, C]
    grams = (stacked @ d.transpose(-1, -2)).unflatten(-2, (2, size)) * decay.unsqueeze(-3)
    coefficients, overlaps = grams.unbind(-3)
    overlaps.diagonal(dim1=-2, dim2=-1).zero_()
    beta_rows = beta.unsqueeze(-1)
    inverse = unit_lower_inverse(beta_rows * overlaps)  # T
    scaled_keys = beta_rows * query_factor  # β F
    rows = torch.broadcast_shapes(s.shape, v.shape[:-1], scaled_keys.shape[:-1], d.shape[:-1])
    rhs = v.new_empty(rows + (value_dim + key_dim,))  # [B, H, n, C, V + K]
    torch.mul(s.unsqueeze(-1).expand(*rows, 1), v.expand(*rows, value_dim), out=rhs[..., :value_dim])
    torch.mul(scaled_keys.expand(*rows, 1), d.expand(*rows, key_dim), out=rhs[..., value_dim:])
    solved = (inverse @ rhs).expand(*full, *rhs.shape[3:])  # [U, W] = T [s ⊙ V, β F ⊙ D]
    to_end = (d * end_factor).expand(*full, size, key_dim)  # D̂
    query_in = (q * query_factor).expand(*full, size, key_dim)  # Q̃
    return SegmentBlocks(factors, stacked, grams, inverse, solved, to_end, query_in)


def _segment_backward(
    blocks: SegmentBlocks, inputs: tuple[Tensor, ...], entering: Tensor, grad_out: Tensor, grad_next: Tensor | None
) -> tuple[tuple[Tensor | None, ...], Tensor]:
    """The gradients of one segment's inputs ``(q, d, v, g, β, s)`` (``∂g`` ``None`` when ``g`` is), given the
    states entering its chunks ``[B, H, n, K, V]``, ``∂Y`` and ``∂S`` of the state leaving it; returns them and
    ``∂S`` of the state entering it."""
    q, d, v, g, beta, s = inputs
    (decay, query_factor, end_factor, chunk_decay), stacked, grams, inverse, solved, to_end, query_in = blocks
    size, key_dim, value_dim = d.shape[-2], d.shape[-1], v.shape[-1]
    coefficients, overlaps = grams.unbind(-3)
    corrected = torch.baddbmm(
        solved[..., :value_dim].flatten(0, 2), solved[..., value_dim:].flatten(0, 2), entering.flatten(0, 2), alpha=-1
    ).view(entering.shape[:3] + (size, value_dim))  # V' = U − W S [B, H, n, C, V]
    grad_after, grad_corrected, grad_entering = _delta_rule_state_gradients(
        grad_out, query_in, coefficients, solved[..., value_dim:], to_end, chunk_decay, grad_next
    )
    grad_query_in = grad_out @ entering.transpose(-1, -2)  # ∂Q̃ of Y = Q̃ S + A V'
    grad_coefficients = grad_out @ corrected.transpose(-1, -2)  # ∂A
    grad_to_end = corrected @ grad_after.transpose(-1, -2)  # ∂D̂ = V' ∂S_nextᵀ
    # ∂R of the UT transform's right side R = [s ⊙ V, β F ⊙ D], and ∂(βN) = −tril₋₁(products)
    grad_rhs, products = _through_ut_transform(grad_corrected, entering, inverse, solved)
    grad_values, grad_scaled_keys = grad_rhs.split([value_dim, key_dim], dim=-1)
    grad_v = (s.unsqueeze(-1) * grad_values).sum_to_size(v.shape)
    grad_s = (v * grad_values).sum(-1).sum_to_size(s.shape)
    from_keys = (d * grad_scaled_keys).sum(-1) * query_factor.squeeze(-1)  # ∂β of β F ⊙ D
    weighted_overlaps = products * overlaps  # −∂(βN) ⊙ N: N is strictly lower, so is this
    overlap_rows = weighted_overlaps.sum(-1)
    grad_beta = (from_keys - overlap_rows).sum_to_size(beta.shape)
    through_keys, through_stacked = _through_grams(grad_coefficients, products, decay, beta, grams, stacked)
    grad_q = through_keys[..., :size, :].sum_to_size(q.shape) + (grad_query_in * query_factor).sum_to_size(q.shape)
    grad_d = (through_keys[..., size:, :] + through_stacked).sum_to_size(d.shape) + (
        (beta.unsqueeze(-1) * query_factor) * grad_scaled_keys + grad_to_end * end_factor
    ).sum_to_size(d.shape)
    grad_g = None
    if g is not None:  # every decay is a difference of γ's: L[t, j] = e^{γ_t − γ_j}, F_t = e^{γ_t}, e^{Γ − γ_t}
        grad_segments = grad_coefficients * coefficients  # ∂σ[t, j] through A
        from_end = (grad_to_end * to_end).sum(-1)  # ∂(Γ − γ_t)
        grad_gamma = (
            grad_segments.sum(-1)
            - grad_segments.sum(-2)
            - beta * overlap_rows
            + weighted_overlaps.mul_(beta.unsqueeze(-1)).sum(-2)
            + (grad_query_in * q * query_factor).sum(-1)
            + beta * from_keys
            - from_end
        )
        carried = (grad_after * entering).sum((-2, -1)) * chunk_decay.squeeze(-1).squeeze(-1)  # ∂Γ through e^{Γ}
        grad_gamma[..., -1] += from_end.sum(-1) + carried
        grad_g = suffix_sums(grad_gamma).sum_to_size(g.shape)
    return (grad_q, grad_d, grad_v, grad_g, grad_beta, grad_s), grad_entering


@float32_under_autocast
class _DeltaRuleChunks(torch.autograd.Function):
    """The delta rule of the module docstring, a segment of chunks at a time (:func:`~.chunking.segments`,
    :func:`~.chunking.backward_in_segments`).  The forward keeps its inputs, the state entering each chunk and the
    last segment's blocks; the backward computes the other segments' blocks again from them (the same operations:
    the gradients are those of keeping them), runs the two recurrences in reverse and returns through the
    unit-triangular solve with its explicit inverse ``T`` (``∂R = Tᵀ ∂X``, ``∂(βN) = −tril₋₁(∂R Xᵀ)``); ``∂g`` goes
    through ``γ = cumsum(g)``."""

    @staticmethod
    def forward(
        ctx, q: Tensor, d: Tensor, v: Tensor, g: Tensor | None, beta: Tensor, s: Tensor, initial: Tensor | None
    ):
        has_decay = g is not None
        if g is None:
            g = q.new_zeros(1, 1, *q.shape[2:4])
        size, key_dim, value_dim = d.shape[-2], d.shape[-1], v.shape[-1]
        full = torch.broadcast_shapes(q.shape[:2], d.shape[:2], v.shape[:2], g.shape[:2], beta.shape[:2], s.shape[:2])
        out = v.new_empty(*full, d.shape[2], size, value_dim)  # [B, H, N, C, V]
        entering = []  # the states entering each chunk, a [B, H, n, K, V] per segment
        state, ctx.segments = initial, segments((*full, d.shape[2]), size, backward=any(ctx.needs_input_grad))
        for chunks in ctx.segments:
            inputs = [segment_of(x, chunks) for x in (q, d, v, g, beta, s)]
            blocks = segment_blocks(*inputs, (*full, chunks.stop - chunks.start))
            states = v.new_empty(*full, chunks.stop - chunks.start, key_dim, value_dim)
            entering.append(states)
            corrected, state = _delta_rule_states(
                blocks.solved[..., :value_dim],
                blocks.solved[..., value_dim:],
                blocks.to_end,
                blocks.factors[3],
                state,
                states,
            )
            coefficients = blocks.grams[..., 0, :, :]  # A
            out[:, :, chunks] = torch.matmul(coefficients, corrected).add_(blocks.query_in @ states)  # Y = Q̃ S + A V'
        ctx.save_for_backward(q, d, v, g, beta, s, initial, *entering)
        # the last segment's blocks, which the backward begins with (on ctx, so that it can let them go after)
        ctx.last_blocks = blocks
        ctx.has_decay = has_decay and ctx.needs_input_grad[3]
        return out, state

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor, grad_state: Tensor | None):
        q, d, v, g, beta, s, initial, *entering = ctx.saved_tensors

        def backward_of(segment: list, blocks: SegmentBlocks, states: Tensor, grad_out: Tensor, grad_next):
            inputs = (*segment[:3], segment[3] if ctx.has_decay else None, *segment[4:])
            return _segment_backward(blocks, inputs, states, grad_out, grad_next)

        grads, grad_state = backward_in_segments(
            ctx,
            (q, d, v, g, beta, s),
            entering,
            grad_out,
            grad_state,
            lambda segment: segment_blocks(*segment, (*entering[0].shape[:2], segment[0].shape[2])),
            backward_of,
        )
        grad_initial = None if initial is None else grad_state.sum_to_size(initial.shape)
        return (*grads, grad_initial)
