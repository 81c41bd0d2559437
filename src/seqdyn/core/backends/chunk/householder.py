"""The general Householder factor ``Λ_t = D_t (I − β_t w_t w_tᵀ)``: a given direction, or any factor with a
diagonal decay; autograd through every head, a segment of chunks at a time (the fast paths of :mod:`.decayed` and
:mod:`.delta_rule` cover the rest).

Per chunk, with the state ``E`` entering it, the corrections ``u_t = S_{t−1}ᵀ w_t`` solve the unit
lower-triangular system ``(I + M_e) U = W̃ E + M_k V`` (the UT transform; the matrices as in
:func:`seqdyn.core.backends.quadratic.scores`, inside the chunk), and::

    Y = A_k V + Q̃ E − A_e U,     E_next = e^{Γ} ⊙ E + K̃ᵀ V − Ẽᵀ U,

with ``Q̃_t = q_t ⊙ e^{γ_t}``, ``K̃_j = k_j ⊙ e^{Γ − γ_j}``, ``W̃_t = w_t ⊙ e^{γ_{t−1}}`` and
``Ẽ_j = β_j w_j ⊙ e^{Γ − γ_{j−1}}``.  Written with ``U = U_E E + U_V`` the hand-over is a ``[K, K]`` transition:
``E_next = (diag(e^{Γ}) − Ẽᵀ U_E) E + K̃ᵀ V − Ẽᵀ U_V``.  :mod:`.minimal` computes the same step by step.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from seqdyn.core.backends.chunk.chunking import (
    OppositeDecays,
    along_keys,
    diagonal_factors,
    middle_of_range,
    pass_states,
    segments,
)
from seqdyn.core.backends.chunk.triangular import unit_lower_solve
from seqdyn.core.evolution import bounded_log_decay, causal_mask, decay_factor, pairwise_gram

#: the blocks autograd keeps for the backward, per token × batch × head × key channel (KDA, 4k tokens, B = 4, H = 4,
#: K = V = 64: 265 MB, 15.8 floats; 2026-12-03)
BLOCK_FLOATS_PER_KEY = 16
#: the general Householder path keeps every block for the backward while they take at most this much; beyond it, the
#: backward computes them again a segment at a time (KDA at 4k tokens, B = 4: peak 292 MB instead of 557, forward +
#: backward about a forward's time longer)
KEPT_BLOCKS_BYTES = 128 * 2**20


def householder_chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    direction: Tensor,
    g: Tensor | None,
    beta: Tensor,
    initial: Tensor | None,
    diagonal: bool,
    batch_heads: tuple[int, int],
    written: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``(Y [B, H, N, C, V], S_T [B, H, K, V])`` of chunked ``q``, ``k``, ``direction`` ``[B, H, N, C, K]``, ``v``
    ``[B, H, N, C, V]``, ``g`` ``[B, H, N, C]``, ``[B, H, N, C, K]`` (``diagonal``) or ``None`` and β
    ``[B, H, N, C]`` from the state ``initial`` ``[B, H, K, V]`` (or zero); ``batch_heads`` is ``(B, H)``, inputs
    with a batch or head axis of size 1 broadcast.  ``written`` ``[B, H, N, C, K]``: the diagonal-plus-low-rank
    ``Λ_t = D_t − ũ_t w_tᵀ``, whose ``ũ_t`` takes the place of ``D_t β_t w_t`` (its log factor ``γ_t``, not
    ``γ_{t−1}``).

    The chunks run a segment at a time (:func:`~.chunking.segments`).  Where a backward follows and the blocks
    would take more than :data:`KEPT_BLOCKS_BYTES`, each segment is checkpointed: autograd keeps its inputs and the
    state entering it, and the backward computes its blocks again, one segment's at a time
    (:func:`torch.utils.checkpoint.checkpoint`)."""
    (batch, heads), key_dim, value_dim = batch_heads, q.shape[-1], v.shape[-1]
    inputs = (q, k, v, direction, g, beta, written)
    backward = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (*inputs, initial))
    shape = (batch, heads, key_dim, value_dim)
    state = q.new_zeros(shape) if initial is None else initial.expand(shape)
    full = (batch, heads, q.shape[2])
    sizes = [chunks.stop - chunks.start for chunks in segments(full, q.shape[3], backward)]
    recompute = backward and len(sizes) > 1 and _blocks_bytes(q, full) > KEPT_BLOCKS_BYTES
    outs = []
    # split, not sliced: under autograd one split gathers the segments' gradients once, where each slice would add a
    # zero-filled gradient of the whole input
    for segment in zip(*(_split(x, sizes) for x in inputs)):
        if recompute:
            out, state = checkpoint(_segment, state, segment, diagonal, use_reentrant=False, preserve_rng_state=False)
        else:
            out, state = _segment(state, segment, diagonal)
        outs.append(out)
    return torch.cat(outs, dim=2), state


def _blocks_bytes(q: Tensor, full: tuple[int, int, int]) -> int:
    """About the memory the blocks of every chunk would take for the backward: :data:`BLOCK_FLOATS_PER_KEY` floats
    per token × batch × head × key channel of ``q`` ``[B, H, N, C, K]`` (``full`` = ``(B, H, N)``)."""
    batch, heads, chunks = full
    return BLOCK_FLOATS_PER_KEY * batch * heads * chunks * q.shape[3] * q.shape[4] * q.element_size()


def _split(x: Tensor | None, sizes: list[int]) -> list[Tensor | None]:
    """``x`` ``[B, H, N, ...]`` split along its chunks into segments of ``sizes`` chunks (``None`` for each)."""
    return [None] * len(sizes) if x is None else list(x.split(sizes, dim=2))


def _segment(entering: Tensor, segment: tuple, diagonal: bool) -> tuple[Tensor, Tensor]:
    """:func:`householder_chunks` of one segment of chunks (its ``q``, ``k``, ``v``, ``direction``, ``g``, β and
    ``written``), from the state ``entering`` it ``[B, H, K, V]``."""
    q, k, v, direction, g, beta, written = segment
    (batch, heads, key_dim, value_dim) = entering.shape
    q, k, direction = (x.expand(batch, heads, *x.shape[2:]) for x in (q, k, direction))
    written = None if written is None else written.expand(batch, heads, *written.shape[2:])
    decayed = g is not None
    if decayed and not diagonal:  # scalar γ in float64: a chunk of strong decays sums to large γ whose differences
        g = bounded_log_decay(g.to(torch.float64))  # matter; diagonal chunks are sized so their γ range fits
    gamma = g.cumsum(dim=3) if decayed else None  # γ_t, inclusive, within each chunk
    total = gamma[:, :, :, -1] if decayed else None  # Γ [B, H, N(, K)]
    before = gamma - g if decayed else None  # γ_{t-1}
    chunk_decay = _chunk_decay(total, diagonal, q)  # diag(e^{Γ}) [B, H, N, K, K]
    weighted = beta.unsqueeze(-1) * direction if written is None else written
    written_log = before if written is None else gamma
    if diagonal and q.shape[-2] > 1:
        terms = _shared_diagonal_terms(q, k, v, direction, weighted, gamma, before, written_log, total)
    else:
        terms = _chunk_terms(q, k, v, direction, weighted, gamma, before, written_log, total, diagonal)
    out, query_in, delta_state, a_e, m_k, m_e, direction_in, e_out = terms
    rhs = torch.cat([direction_in, m_k @ v], dim=-1)  # [W̃, M_k V] [B, H, N, C, K + V]
    from_state, from_values = unit_lower_solve(m_e, rhs).split([key_dim, value_dim], dim=-1)  # U_E, U_V
    e_out = e_out.transpose(-1, -2)  # Ẽᵀ [B, H, N, K, C]
    query_in = query_in - a_e @ from_state
    out = out - a_e @ from_values
    delta_state = delta_state - e_out @ from_values
    transition = chunk_decay - e_out @ from_state  # [B, H, N, K, K]
    entering, state = pass_states(delta_state, transition, entering, entering.shape, matrix=True)
    return out + query_in @ entering, state


class ChunkTerms(NamedTuple):
    """What a chunk's Householder step is made of: ``A_k V``, ``Q̃``, ``K̃ᵀ V``, the grams ``A_e``, ``M_k``, ``M_e``,
    ``W̃`` and ``Ẽ`` (module docstring), each ``[B, H, N, C, ·]``."""

    out: Tensor
    query_in: Tensor
    delta_state: Tensor
    a_e: Tensor
    m_k: Tensor
    m_e: Tensor
    direction_in: Tensor
    written_out: Tensor


def _chunk_terms(q, k, v, direction, weighted, gamma, before, written_log, total, diagonal: bool) -> ChunkTerms:
    """Each term with its own factors (scalar decays, no decay, or chunks of one step)."""
    out, query_in, delta_state = _decayed_terms(q, k, v, gamma, total, diagonal)
    return ChunkTerms(
        out,
        query_in,
        delta_state,
        _chunk_gram(q, weighted, gamma, written_log, False, diagonal),
        _chunk_gram(direction, k, before, gamma, True, diagonal),
        _chunk_gram(direction, weighted, before, written_log, True, diagonal),
        _grown(direction, before, diagonal),
        _grown(weighted, _to_end(total, written_log), diagonal),
    )


def _shared_diagonal_terms(q, k, v, direction, weighted, gamma, before, written_log, total) -> ChunkTerms:
    """Diagonal decays: every term from four decayed factors around one middle ``r`` of the chunk's range of
    ``[γ_{t−1}, γ_t]`` (each factor below ``e^{range/2}``; exact for any r, which carries no gradient)::

        Q_r = q ⊙ e^{γ − r},  K_r = k ⊙ e^{r − γ},  W_r = w ⊙ e^{γ_{t−1} − r},  E_r = βw ⊙ e^{r − γ_{t−1}}

    ``A_k = tril(Q_r K_rᵀ)``, ``A_e = Q_r E_rᵀ`` below the diagonal (its diagonal pairwise), ``M_k = W_r K_rᵀ`` and
    ``M_e = W_r E_rᵀ`` strictly below; ``Q̃ = Q_r e^{r}``, ``K̃ = K_r e^{Γ − r}``, ``W̃ = W_r e^{r}`` and
    ``Ẽ = E_r e^{Γ − r}`` (``E_r`` with the written vector's own log factor in the diagonal-plus-low-rank form)."""
    middle = middle_of_range(torch.cat([before, gamma], dim=-2))  # [B, H, N, 1, K]
    q_r, k_r = OppositeDecays.apply(q, k, gamma - middle)
    if written_log is before:  # βw: both factors of one exponent
        w_r, e_r = OppositeDecays.apply(direction, weighted, before - middle)
    else:
        w_r, e_r = direction * torch.exp(before - middle), weighted * torch.exp(middle - written_log)
    size = q.shape[-2]
    strict = causal_mask(size, size, q.device, strict=True)
    lower = lambda a, b: torch.where(strict, a @ b.transpose(-1, -2), 0.0)  # noqa: E731
    up, down = torch.exp(middle), torch.exp(total.unsqueeze(3) - middle)
    return ChunkTerms(
        torch.tril(q_r @ k_r.transpose(-1, -2)) @ v,
        q_r * up,
        (k_r * down).transpose(-1, -2) @ v,
        lower(q_r, e_r) + torch.diag_embed(_own_pairs(q, weighted, gamma, written_log)),
        lower(w_r, k_r),
        lower(w_r, e_r),
        w_r * up,
        e_r * down,
    )


def _grown(x: Tensor, log_factor: Tensor | None, diagonal: bool) -> Tensor:
    """``x ⊙ e^{log_factor}`` along the keys (:func:`~seqdyn.core.evolution.decay_factor`); ``x`` without decay."""
    return x if log_factor is None else x * decay_factor(along_keys(log_factor, diagonal).to(x.dtype))


def _to_end(total: Tensor | None, log_decay: Tensor | None) -> Tensor | None:
    """``Γ − log_decay`` within each chunk (``None`` without decay), ``total`` Γ ``[B, H, N(, K)]``."""
    return None if total is None else total.unsqueeze(3) - log_decay  # [B, H, N, C(, K)]


def _chunk_decay(total: Tensor | None, diagonal: bool, like: Tensor) -> Tensor:
    """``diag(e^{Γ})`` ``[B, H, N, K, K]`` of each chunk (``I`` ``[K, K]`` without decay)."""
    key_dim = like.shape[-1]
    if total is None:
        return torch.eye(key_dim, dtype=like.dtype, device=like.device)
    factors = along_keys(decay_factor(total.to(like.dtype)), diagonal).expand(*total.shape[:3], key_dim)  # [B, H, N, K]
    return torch.diag_embed(factors)  # [B, H, N, K, K]


def _decayed_terms(
    q: Tensor, k: Tensor, v: Tensor, gamma: Tensor | None, total: Tensor | None, diagonal: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """The terms without the Householder factor, with autograd: ``(A_k V, Q̃, K̃ᵀ V)`` of every chunk."""
    if diagonal:
        gram, query_in, keys_to_end, _ = diagonal_factors(q, k, gamma, total.unsqueeze(3), differentiable=True)
    else:
        gram = _chunk_gram(q, k, gamma, gamma, False, False)
        query_in, keys_to_end = _grown(q, gamma, False), _grown(k, _to_end(total, gamma), False)
    return gram @ v, query_in, keys_to_end.transpose(-1, -2) @ v


def _chunk_gram(a: Tensor, b: Tensor, la: Tensor | None, lb: Tensor | None, strict: bool, diagonal: bool) -> Tensor:
    """``Σ_k a_tk b_jk e^{la_tk − lb_jk}`` for ``j ≤ t`` (``j < t`` when ``strict``) inside each chunk, else 0.

    Scalar decays are formed pairwise (:func:`~seqdyn.core.evolution.pairwise_gram`).  Diagonal decays are
    factorized as ``(a ⊙ e^{la − r})(b ⊙ e^{r − lb})ᵀ`` with ``r`` the middle of the chunk's range of both (exact
    for any r, :func:`~.chunking.middle_of_range`); the diagonal ``t = j`` is formed pairwise so that a chunk of one
    step is exact for any decay.
    """
    size = a.shape[-2]
    valid = causal_mask(size, size, a.device, strict=strict)
    if not diagonal:
        return pairwise_gram(a, b, la, lb, valid)
    if size == 1:  # no pair below the diagonal, whose factors e^{±range/2} would overflow for a step beyond the range
        own = _own_pairs(a, b, la, lb).unsqueeze(-1)
        return torch.zeros_like(own) if strict else own
    middle = middle_of_range(torch.cat([la, lb], dim=-2))  # of both: [..., 2C, K] -> [..., 1, K]
    lower = (a * torch.exp((la - middle).to(a.dtype))) @ (b * torch.exp((middle - lb).to(b.dtype))).transpose(-1, -2)
    gram = torch.where(causal_mask(size, size, a.device, strict=True), lower, torch.zeros_like(lower))
    if not strict:
        gram = gram + torch.diag_embed(_own_pairs(a, b, la, lb))  # [..., C] -> [..., C, C]
    return gram


def _own_pairs(a: Tensor, b: Tensor, la: Tensor, lb: Tensor) -> Tensor:
    """``Σ_k a_tk b_tk e^{la_tk − lb_tk}`` ``[..., C]``: the pairs ``t = j``, formed pairwise."""
    return (a * b * torch.exp((la - lb).to(a.dtype))).sum(-1)
