"""The ``chunk`` backend: chunkwise-parallel coefficient dynamics, linear in T.

Identity readout (GLA / SSD / DeltaNet chunk form; seed 003 on structured masks, Yang et al. 2024 for the UT
transform).  Split the sequence into chunks of C steps and let ``γ_t`` be the log decay accumulated inside the
chunk.  With the state ``S`` entering the chunk:
  1. intra-chunk coefficients ``A[t,j] = q_tᵀ diag(e^{γ_t − γ_j}) k_j`` (``j ≤ t``) and ``y = A V``;
  2. with a Householder factor, the corrections ``u_t = S_{t-1}ᵀ w_t`` solve the unit lower-triangular system
     ``(I + M_e) U = W̃ S + M_k V`` (see :func:`seqdyn.core.backends.quadratic.scores` for the matrices);
  3. between chunks ``S ← P S + ΔS`` and ``y += Q̃ S`` with ``P = diag(e^{Γ})`` (minus ``Ẽᵀ W`` with a
     Householder factor), ``ΔS = K̃ᵀ V`` and ``Q̃_t = q_t ⊙ e^{γ_t}``.
All exponents are differences ``γ_t − γ_j ≤ 0`` for decays.  Diagonal decays are factorized inside a chunk
around the chunk's middle log decay; the chunk is halved where that would leave the float range.  No, scalar or
diagonal decay without a Householder factor takes one function with a hand-written backward
(:class:`_DecayedChunks`), as does DeltaNet's Householder factor with no or scalar decay
(:class:`_DeltaRuleChunks`, which carries the corrected values ``V' = U − W S`` from chunk to chunk instead of a
``[K, K]`` transition); factors too small to be normal floats are 0
(:func:`~seqdyn.core.evolution.decay_factor`).

``exp`` readout with ``"sum"`` (softmax): torch's fused ``scaled_dot_product_attention`` (a blockwise online
softmax) when Λ = I, otherwise a blockwise online softmax over key blocks, one checkpointed query block at a
time, so memory stays linear in T.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from seqdyn.core.evolution import (bounded_log_decay, causal_mask, cumulative_log_decay, decay_factor, pairwise_gram,
                                  subnormal_cutoff)
from seqdyn.core.precision import float32_under_autocast
from seqdyn.core.problem import Problem, shared_over_heads

NAME = "chunk"
SOFTMAX_QUERY_BLOCK = 128
SOFTMAX_KEY_BLOCK = 1024


def unsupported(problem: Problem) -> str | None:
    if problem.readout.linear:
        return None
    if not (problem.readout.is_exp and problem.normalizer_kind == "sum"):
        return (f"readout={problem.readout.name!r} with normalizer={problem.normalizer_kind!r} has no chunked form; "
                "chunk computes readout='identity' (any normalizer) and readout='exp' with normalizer='sum'")
    if problem.householder:
        return "householder with readout='exp' has no chunked form; chunk's softmax supports no/scalar/diagonal decay"
    return None


# ----------------------------------------------------------------------------------------------- identity readout
def safe_chunk_size(log_decay: Tensor, chunk_size: int, largest_step: float | None = None) -> int:
    """Largest ``C' ≤ C`` (halving) for which every chunk's range of diagonal log decays fits the float range.

    Inside a chunk the factors ``e^{γ − r}`` and ``e^{r − γ}`` around the middle ``r`` stay below
    ``e^{range/2}``; ``range < 0.75·log(float max)`` keeps their products finite.  Hard resets count as
    :data:`~seqdyn.core.evolution.HARD_RESET`; other non-finite decays are ignored here (they propagate as NaN/Inf
    like any other input).  ``largest_step``: ``max |g|`` when the caller has it.
    """
    limit = 0.75 * math.log(torch.finfo(log_decay.dtype).max)
    if largest_step is None:
        largest_step = _largest_step(log_decay)
    if largest_step * chunk_size < limit:  # the common case: no chunk can span the limit
        return chunk_size
    with torch.no_grad():
        return _halve_until_safe(log_decay, chunk_size, limit)


def _largest_step(log_decay: Tensor) -> float:
    return torch.linalg.vector_norm(log_decay.detach(), ord=float("inf")).item()


def _diagonal_chunking(log_decay: Tensor, chunk_size: int) -> tuple[Tensor, int]:
    """Diagonal log decays with hard resets bounded (:func:`~seqdyn.core.evolution.bounded_log_decay`, only where
    ``max |g|``, read to size the chunks anyway, is infinite) and the chunk size for them (:func:`safe_chunk_size`)."""
    largest_step = _largest_step(log_decay)
    if largest_step == math.inf:
        log_decay = bounded_log_decay(log_decay)
    return log_decay, safe_chunk_size(log_decay, chunk_size, largest_step)


def _halve_until_safe(log_decay: Tensor, chunk_size: int, limit: float) -> int:
    length = log_decay.shape[2]
    cumulative = cumulative_log_decay(log_decay)
    cumulative = torch.cat([torch.zeros_like(cumulative[:, :, :1]), cumulative], dim=2)  # G_{-1} = 0
    while chunk_size > 1:
        chunks = -(-length // chunk_size)
        pad = chunks * chunk_size + 1 - cumulative.shape[2]  # padded steps have g = 0: G stays constant
        padded = torch.cat([cumulative, cumulative[:, :, -1:].expand(-1, -1, pad, -1)], dim=2)
        windows = padded.unfold(2, chunk_size + 1, chunk_size)
        spread = torch.nan_to_num(windows.amax(-1) - windows.amin(-1), nan=0.0, posinf=0.0, neginf=0.0)
        if spread.max().item() < limit:
            break
        chunk_size //= 2
    return chunk_size


def _chunk_gram(a: Tensor, b: Tensor, la: Tensor | None, lb: Tensor | None, strict: bool, diagonal: bool) -> Tensor:
    """``Σ_k a_tk b_jk e^{la_tk − lb_jk}`` for ``j ≤ t`` (``j < t`` when ``strict``) inside each chunk, else 0.

    Scalar decays are formed pairwise (:func:`pairwise_gram`).  Diagonal decays are factorized as
    ``(a ⊙ e^{la − r})(b ⊙ e^{r − lb})ᵀ`` with ``r`` the middle of the chunk's range (exact for any r); the
    diagonal ``t = j`` is formed pairwise so that a chunk of one step is exact for any decay.
    """
    size = a.shape[-2]
    valid = causal_mask(size, size, a.device, strict=strict)
    if not diagonal:
        return pairwise_gram(a, b, la, lb, valid)
    if size == 1:  # no pair below the diagonal, whose factors e^{±range/2} would overflow for a step beyond the range
        own = (a * b * torch.exp((la - lb).to(a.dtype))).sum(-1, keepdim=True)
        return torch.zeros_like(own) if strict else own
    middle = _middle(torch.cat([la, lb], dim=-2))
    lower = (a * torch.exp((la - middle).to(a.dtype))) @ (b * torch.exp((middle - lb).to(b.dtype))).transpose(-1, -2)
    gram = torch.where(causal_mask(size, size, a.device, strict=True), lower, torch.zeros_like(lower))
    if not strict:
        gram = gram + torch.diag_embed((a * b * torch.exp((la - lb).to(a.dtype))).sum(-1))
    return gram


def _middle(log_decays: Tensor) -> Tensor:
    """The middle of each chunk's range of log decays (per key), ``[..., 1, K]``; 0 where it is not finite."""
    middle = 0.5 * (log_decays.amax(dim=-2, keepdim=True) + log_decays.amin(dim=-2, keepdim=True))
    return torch.nan_to_num(middle.detach(), nan=0.0, posinf=0.0, neginf=0.0)


def _diagonal_factors(q: Tensor, k: Tensor, gamma: Tensor, total: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Diagonal decays inside each chunk, factorized once around the chunk's middle log decay ``r``.

    With ``Q_r = q ⊙ e^{γ − r}`` and ``K_r = k ⊙ e^{r − γ}`` (every factor below ``e^{range/2}``):
    the intra-chunk coefficients ``tril(Q_r K_rᵀ)``, the queries reading the entering state ``Q_r ⊙ e^{r} =
    q ⊙ e^{γ}``, and the keys carried to the chunk's end ``K_r ⊙ e^{Γ − r} = k ⊙ e^{Γ − γ}``.  A chunk of one
    step has ``r = γ``: its factors are 1 for any decay.
    """
    middle = _middle(gamma)
    queries, keys = _OppositeDecays.apply(q, k, gamma - middle)
    gram = torch.tril(queries @ keys.transpose(-1, -2))
    return gram, queries * torch.exp(middle), keys * torch.exp(total.unsqueeze(3) - middle)


@float32_under_autocast
class _OppositeDecays(torch.autograd.Function):
    """``(q ⊙ e^{d}, k ⊙ e^{−d})`` with one exponential: the forward and the backward each take a few elementwise
    passes fewer than autograd through ``exp``, ``mul`` and ``sub`` (these passes over ``[B, H, T, K]`` are most of
    the diagonal-decay chunk's time besides its matrix products).  Inputs broadcast against each other."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, exponent: Tensor) -> tuple[Tensor, Tensor]:
        factor = torch.exp(exponent)
        grown, shrunk = q * factor, k / factor
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
                exponent_shape)
        return grad_q, grad_k, grad_exponent


def _decayed_chunks(q: Tensor, k: Tensor, v: Tensor, gamma: Tensor | None, total: Tensor | None, diagonal: bool,
                    grow, to_end) -> tuple[Tensor, Tensor, Tensor]:
    """Steps 1 and 3 without a Householder factor: ``(A V, Q̃, K̃ᵀ V)`` of every chunk."""
    if diagonal:
        gram, query_in, keys_to_end = _diagonal_factors(q, k, gamma, total)
    else:
        gram, query_in, keys_to_end = _chunk_gram(q, k, gamma, gamma, False, False), grow(q, gamma), grow(
            k, to_end(gamma))
    return gram @ v, query_in, keys_to_end.transpose(-1, -2) @ v


def _decay_matrix(g: Tensor) -> Tensor:
    """``L[t, j] = e^{γ_t − γ_j}`` for ``j ≤ t``, 0 above the diagonal and where the factor is below
    :func:`~seqdyn.core.evolution.decay_factor`'s cutoff: ``[..., C, C]`` from ``g`` ``[..., C]``.

    ``γ`` is summed in float64 and split into the input dtype's leading part and remainder, ``γ = h + l``:
    ``h_t − h_j`` is rounded once, so every difference keeps the digits of its own segment — as summing each
    segment does (Mamba-2's "segsum"), where the difference of two long float32 sums would lose the digits of
    the short segments, which matter most — in half the passes over ``[C, C]`` of segment sums.  A log decay of
    ``−∞`` (a hard reset) is summed as ``−10⁴``, whose factor is as exactly 0.
    """
    size = g.shape[-1]
    gamma = bounded_log_decay(g.to(torch.float64)).cumsum(-1)
    lead = gamma.to(g.dtype)
    exponent = lead.unsqueeze(-1) - lead.unsqueeze(-2)
    if g.dtype != torch.float64:
        rest = (gamma - lead.to(torch.float64)).to(g.dtype)
        exponent.add_(rest.unsqueeze(-1)).sub_(rest.unsqueeze(-2))
    dropped = (exponent < subnormal_cutoff(g.dtype)).logical_or_(~causal_mask(size, size, g.device))
    return exponent.masked_fill_(dropped, float("-inf")).exp_()


def _suffix_sums(x: Tensor) -> Tensor:
    """``Σ_{s≥t} x_s`` within each chunk (axis 3 of ``[B, H, N, C, ...]``): the adjoint of ``γ = cumsum(g)``."""
    return x.flip(3).cumsum(3).flip(3)


def _sum_after(g: Tensor) -> Tensor:
    """``Γ − γ_t = Σ_{s>t} g_s`` within each chunk (axis 3 of ``[B, H, N, C, ...]``), summed from the end."""
    return _suffix_sums(torch.cat([g[:, :, :, 1:], torch.zeros_like(g[:, :, :, :1])], dim=3))


def _pass_states(increments: Tensor, transitions: Tensor, initial: Tensor | None, shape: tuple[int, ...],
                 matrix: bool = False):
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
    return torch.stack(entering, dim=2), state


def _pass_state_gradients(grad_entering: Tensor, transitions: Tensor, grad_final: Tensor | None):
    """The reverse of :func:`_pass_states` for an elementwise decay: ``∂ΔS_n = ∂E_{n+1}`` and
    ``∂E_n = ∂_direct E_n + P_n ⊙ ∂E_{n+1}``; returns ``(∂ΔS [B, H, N, K, V], ∂E_0)``."""
    grad_after = torch.zeros_like(grad_entering[:, :, 0]) if grad_final is None else grad_final.expand_as(
        grad_entering[:, :, 0]).clone()
    grad_increments = torch.empty_like(grad_entering)
    for n in range(grad_entering.shape[2] - 1, -1, -1):
        grad_increments[:, :, n] = grad_after
        grad_after = torch.addcmul(grad_entering[:, :, n], transitions[:, :, n], grad_after)
    return grad_increments, grad_after


@float32_under_autocast
class _DecayedChunks(torch.autograd.Function):
    """Steps 1 and 3 without a Householder factor — no, scalar or diagonal decay (linear attention, RetNet,
    Mamba-2/SSD, mLSTM, GLA) — with a hand-written backward.

    Per chunk, with the state ``E`` entering it, ``Q̃ = Q ⊙ e^{γ}`` and ``K̃ = K ⊙ e^{Γ − γ}``::

        Y = A V + Q̃ E,     E_next = e^{Γ} ⊙ E + K̃ᵀ V,

    where the intra-chunk coefficients are ``A = (Q Kᵀ) ⊙ L`` for a scalar decay (``L[t, j] = e^{γ_t − γ_j}``,
    :func:`_decay_matrix`; ``Q Kᵀ`` formed once when queries and keys are shared by all heads, as Mamba-2's single
    group) and ``A = tril(Q_r K_rᵀ)`` for a diagonal one, factorized around the chunk's middle log decay ``r``
    (``Q_r = Q ⊙ e^{γ − r}``, ``K_r = K ⊙ e^{r − γ}``; exact for any r, so r carries no gradient).  The backward
    runs the state recurrence in reverse and takes ``∂g`` through ``γ = cumsum(g)``: every exponent above is a
    difference of ``γ``'s.  Inputs are chunked ``[B, H, N, C, ...]`` (``g`` ``[B, H, N, C]``, ``[B, H, N, C, K]``
    or ``None``), batch and heads of size 1 broadcast.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, initial: Tensor | None):
        diagonal = g is not None and g.dim() == 5
        if g is None:
            g = q.new_zeros(1, 1, *q.shape[2:4])
        gamma = g.cumsum(dim=3)
        total = gamma[:, :, :, -1:]  # Γ [B, H, N, 1(, K)]
        if diagonal:  # e^{γ} = e^{γ − r} e^{r} and e^{Γ − γ} = e^{r − γ} e^{Γ − r}, every factor inside e^{±range/2}
            middle = _middle(gamma)
            inner = torch.exp(gamma - middle)
            grown, shrunk = q * inner, k / inner
            coefficients = torch.tril(grown @ shrunk.transpose(-1, -2))
            up, down = torch.exp(middle), torch.exp(total - middle)
            queries, keys = grown * up, shrunk * down
            intra = (inner, up, down)
        else:
            decay = _decay_matrix(g)
            coefficients = (q @ k.transpose(-1, -2)) * decay
            query_factor, key_factor = decay_factor(gamma).unsqueeze(-1), decay_factor(_sum_after(g)).unsqueeze(-1)
            queries, keys = q * query_factor, k * key_factor
            intra = (decay, query_factor, key_factor)
        chunk_decay = decay_factor(total.squeeze(3)).unsqueeze(-1)  # e^{Γ} [B, H, N, K|1, 1]
        if not diagonal:
            chunk_decay = chunk_decay.unsqueeze(-1)
        shape = torch.broadcast_shapes(q.shape[:2], k.shape[:2], v.shape[:2], g.shape[:2]) + (k.shape[-1],
                                                                                             v.shape[-1])
        entering, state = _pass_states(keys.transpose(-1, -2) @ v, chunk_decay, initial, shape)
        out = coefficients @ v + queries @ entering
        ctx.save_for_backward(q, k, v, g, initial, coefficients, queries, keys, entering, chunk_decay, *intra)
        ctx.diagonal, ctx.has_decay = diagonal, ctx.needs_input_grad[3]
        return out, state

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor, grad_state: Tensor | None):
        q, k, v, g, initial, coefficients, queries, keys, entering, chunk_decay, *intra = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_increments, grad_initial = _pass_state_gradients(queries.transpose(-1, -2) @ grad_out, chunk_decay,
                                                              grad_state)
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
            grad_k = (grad_gram.transpose(-1, -2) @ q).sum_to_size(k.shape) + (grad_keys * key_factor).sum_to_size(
                k.shape)
            if ctx.has_decay:
                grad_segments = grad_coefficients * coefficients  # ∂σ[i, j] with σ = γ_i − γ_j
                grad_gamma = (grad_segments.sum(-1) - grad_segments.sum(-2) + (grad_queries * queries).sum(-1)
                              - (grad_keys * keys).sum(-1))
        grad_g = None
        if ctx.has_decay:  # Γ enters e^{Γ − γ} of the keys and e^{Γ} of the state
            grad_total = (grad_keys * keys).sum(3) + (grad_increments * chunk_decay * entering).sum(-1)
            grad_gamma[:, :, :, -1] += grad_total if ctx.diagonal else grad_total.sum(-1)
            grad_g = _suffix_sums(grad_gamma).sum_to_size(g.shape)
        grad_initial = None if initial is None else grad_initial.sum_to_size(initial.shape)
        return (grad_q.sum_to_size(q.shape), grad_k.sum_to_size(k.shape), grad_v.sum_to_size(v.shape), grad_g,
                grad_initial)


def _unit_lower_solve(strict_lower: Tensor, rhs: Tensor) -> Tensor:
    """``(I + L)^{-1} rhs`` for strictly lower-triangular ``L`` ``[..., C, C]`` (the UT transform)."""
    return _UnitLowerSolve.apply(strict_lower, rhs)


def _unit_lower_inverse(strict_lower: Tensor) -> Tensor:
    """``(I + L)^{-1}`` for strictly lower-triangular ``L`` ``[..., C, C]``, by block doubling.

    With the inverses ``A⁻¹``, ``B⁻¹`` of two neighbouring diagonal blocks of size b known, the inverse of
    ``[[A, 0], [X, B]]`` has the block ``−B⁻¹ X A⁻¹`` below them; starting from blocks of one step (inverse 1),
    each of the ``log₂ C`` levels doubles the blocks with two batched products.  ``C`` is padded to a power of
    two (the padding's inverse is I).  This is a few times faster than a batched triangular solve against I on
    CPUs, which solves matrix by matrix."""
    size = strict_lower.shape[-1]
    padded = 1 << max(size - 1, 0).bit_length()
    batch = strict_lower.shape[:-2]
    inverse = strict_lower.new_zeros(batch.numel(), padded, padded)
    inverse[:, :size, :size] = strict_lower.reshape(-1, size, size)
    inverse.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    block = 1
    while block < padded:
        pairs = inverse.as_strided((inverse.shape[0], padded // (2 * block), 2 * block, 2 * block),
                                   (padded * padded, 2 * block * (padded + 1), padded, 1))
        below = pairs[..., block:, :block]
        below.copy_(pairs[..., block:, block:] @ (below @ pairs[..., :block, :block])).neg_()
        block *= 2
    return inverse[:, :size, :size].reshape(*batch, size, size)


@float32_under_autocast
class _UnitLowerSolve(torch.autograd.Function):
    """``X = T R`` with the explicit inverse ``T = (I + L)^{-1}`` of a small unit lower-triangular matrix.

    Keeping ``T`` makes the backward two products, ``∂R = Tᵀ ∂X`` and ``∂L = −tril₋₁(∂R Xᵀ)``, instead of a
    second batched triangular solve (on CPUs batched products run several times faster than batched solves).
    """

    @staticmethod
    def forward(ctx, strict_lower: Tensor, rhs: Tensor) -> Tensor:
        inverse = _unit_lower_inverse(strict_lower)
        solved = inverse @ rhs
        ctx.save_for_backward(inverse, solved)
        return solved

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_solved: Tensor) -> tuple[Tensor, Tensor]:
        inverse, solved = ctx.saved_tensors
        grad_rhs = inverse.transpose(-1, -2) @ grad_solved
        return -(grad_rhs @ solved.transpose(-1, -2)).tril(-1), grad_rhs


def _delta_rule_states(u: Tensor, w: Tensor, to_end: Tensor, chunk_decay: Tensor, initial: Tensor | None,
                       key_dim: int) -> tuple[Tensor, Tensor]:
    """The chunks' sequential part, ``V'_n = U_n − W_n S_n`` and ``S_{n+1} = e^{Γ_n} S_n + D̂_nᵀ V'_n`` from
    ``S_0`` (``initial`` or zero).  Returns ``[S_n; V'_n]`` stacked ``[B, H, N, K + C, V]`` (the right operand
    of the output ``Y = [Q̃, A] [S; V']``) and the final state; every input has the full batch and heads."""
    batch, heads, chunks, size, value_dim = u.shape
    right = u.new_empty(batch, heads, chunks, key_dim + size, value_dim)
    state = right.new_zeros(batch, heads, key_dim, value_dim) if initial is None else initial.expand(
        batch, heads, key_dim, value_dim)
    for n, chunk in enumerate(right.unbind(2)):
        chunk[:, :, :key_dim] = state
        corrected = torch.sub(u[:, :, n], w[:, :, n] @ state, out=chunk[:, :, key_dim:])
        state = _plus_product(chunk_decay[:, :, n] * state, to_end[:, :, n].transpose(-1, -2), corrected)
    return right, state


def _delta_rule_state_gradients(direct: Tensor, w: Tensor, to_end: Tensor, chunk_decay: Tensor,
                                grad_final: Tensor | None, key_dim: int) -> tuple[Tensor, Tensor, Tensor]:
    """The reverse of :func:`_delta_rule_states`, given the direct gradients ``[∂S_n; ∂V'_n]`` of the output:
    ``∂V'_n = ∂_direct V'_n + D̂_n ∂S_{n+1}`` and ``∂S_n = ∂_direct S_n + e^{Γ_n} ∂S_{n+1} − W_nᵀ ∂V'_n``.
    Returns ``(∂S_{n+1} [B, H, N, K, V], ∂V' [B, H, N, C, V], ∂S_0)``."""
    batch, heads, chunks, _, value_dim = direct.shape
    grad_after = direct.new_empty(batch, heads, chunks, key_dim, value_dim)
    grad_corrected = torch.empty_like(direct[:, :, :, key_dim:])
    grad_state = direct.new_zeros(batch, heads, key_dim, value_dim) if grad_final is None else grad_final.expand(
        batch, heads, key_dim, value_dim)
    for n in range(chunks - 1, -1, -1):
        grad_after[:, :, n] = grad_state
        values = torch.add(direct[:, :, n, key_dim:], to_end[:, :, n] @ grad_state, out=grad_corrected[:, :, n])
        grad_state = _plus_product(torch.addcmul(direct[:, :, n, :key_dim], chunk_decay[:, :, n], grad_state),
                                   w[:, :, n].transpose(-1, -2), values, alpha=-1)
    return grad_after, grad_corrected, grad_state


@float32_under_autocast
class _DeltaRuleChunks(torch.autograd.Function):
    """The Householder chunk of DeltaNet / Gated DeltaNet (direction = key, ``k_j = s_j d_j``; no or scalar decay),
    with a hand-written backward.

    Per chunk, with the one decay matrix ``L[t, j] = e^{γ_t − γ_j}`` (:func:`_decay_matrix`, ``j ≤ t``),
    ``F_t = e^{γ_t}``, ``Q̃ = Q ⊙ F`` and ``D̂ = D ⊙ e^{Γ − γ}``::

        A = (Q Dᵀ) ⊙ L,   N = tril₋₁((D Dᵀ) ⊙ L),   [U, W] = (I + β N)^{-1} [s ⊙ V, β F ⊙ D]   (the UT transform)
        V' = U − W S,     Y = Q̃ S + A V',     S_next = e^{Γ} S + D̂ᵀ V'

    (Yang et al. 2024's chunkwise delta rule, with the decay of Gated DeltaNet).  ``β N`` is the WY matrix
    ``c_t (d_t·d_j) e^{γ_{t−1} − γ_j}`` with ``c_t = β_t e^{g_t}``, and ``β F ⊙ D`` is ``c ⊙ D e^{γ_{t−1}}``:
    folding ``e^{g_t}`` in leaves one decay matrix, shared by A and N, whose two grams are one product of the
    stacked ``[Q; D]`` with ``Dᵀ``.  Only ``V'`` and the states are sequential; the output is one product
    ``[Q̃, A] [S; V']`` per chunk.  The backward runs the two recurrences in reverse and returns through the
    unit-triangular solve with its explicit inverse ``T`` (``∂R = Tᵀ ∂X``, ``∂(βN) = −tril₋₁(∂R Xᵀ)``); ``∂g``
    goes through ``γ = cumsum(g)``.  Inputs chunked ``[B, H, N, C, ...]``: q, d ``[.., K]``, v ``[.., V]``, g, β,
    s ``[B, H, N, C]`` (g may be ``None``), batch and heads of size 1 broadcast.
    """

    @staticmethod
    def forward(ctx, q: Tensor, d: Tensor, v: Tensor, g: Tensor | None, beta: Tensor, s: Tensor,
                initial: Tensor | None):
        has_decay = g is not None
        if g is None:
            g = q.new_zeros(1, 1, *q.shape[2:4])
        size, key_dim, value_dim = d.shape[-2], d.shape[-1], v.shape[-1]
        full = torch.broadcast_shapes(q.shape[:2], d.shape[:2], v.shape[:2], g.shape[:2], beta.shape[:2],
                                      s.shape[:2]) + d.shape[2:3]  # B, H, N
        gamma = g.cumsum(dim=3)
        decay = _decay_matrix(g)  # L
        query_factor = decay_factor(gamma).unsqueeze(-1)  # F
        end_factor = decay_factor(_sum_after(g)).unsqueeze(-1)  # e^{Γ − γ}
        pair = torch.broadcast_shapes(q.shape, d.shape)
        stacked = torch.cat([q.expand(pair), d.expand(pair)], dim=-2)  # [Q; D]
        grams = (stacked @ d.transpose(-1, -2)).unflatten(-2, (2, size)) * decay.unsqueeze(-3)  # [A; N]
        coefficients, overlaps = grams.unbind(-3)
        overlaps.diagonal(dim1=-2, dim2=-1).zero_()
        beta_rows = beta.unsqueeze(-1)
        inverse = _unit_lower_inverse(beta_rows * overlaps)  # T
        scaled_keys = beta_rows * query_factor  # β F
        rows = torch.broadcast_shapes(s.shape, v.shape[:-1], scaled_keys.shape[:-1], d.shape[:-1])
        rhs = v.new_empty(rows + (value_dim + key_dim,))
        torch.mul(s.unsqueeze(-1).expand(*rows, 1), v.expand(*rows, value_dim), out=rhs[..., :value_dim])
        torch.mul(scaled_keys.expand(*rows, 1), d.expand(*rows, key_dim), out=rhs[..., value_dim:])
        solved = (inverse @ rhs).expand(*full, *rhs.shape[3:])  # [U, W] = T [s ⊙ V, β F ⊙ D]
        to_end = (d * end_factor).expand(*full, size, key_dim)  # D̂
        chunk_decay = decay_factor(gamma[:, :, :, -1]).unsqueeze(-1).unsqueeze(-1).expand(*full, 1, 1)  # e^{Γ}
        right, state = _delta_rule_states(solved[..., :value_dim], solved[..., value_dim:], to_end, chunk_decay,
                                          initial, key_dim)  # [S; V']
        left = torch.cat([(q * query_factor).expand(*full, size, key_dim),
                          coefficients.expand(*full, size, size)], dim=-1)  # [Q̃, A]
        out = left @ right
        ctx.save_for_backward(stacked, v, g, beta, s, initial, decay, query_factor, end_factor, grams, inverse,
                              solved, left, right, to_end, chunk_decay)
        ctx.shapes = q.shape, d.shape
        ctx.has_decay = has_decay and ctx.needs_input_grad[3]
        return out, state

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor, grad_state: Tensor | None):
        (stacked, v, g, beta, s, initial, decay, query_factor, end_factor, grams, inverse, solved, left, right,
         to_end, chunk_decay) = ctx.saved_tensors
        q_shape, d_shape = ctx.shapes
        size, key_dim, value_dim = stacked.shape[-2] // 2, stacked.shape[-1], v.shape[-1]
        q, d = stacked[..., :size, :], stacked[..., size:, :]
        coefficients, overlaps = grams.unbind(-3)
        grad_out = grad_out.contiguous()
        grad_after, grad_corrected, grad_initial = _delta_rule_state_gradients(
            left.transpose(-1, -2) @ grad_out, solved[..., value_dim:], to_end, chunk_decay, grad_state, key_dim)
        grad_left = grad_out @ right.transpose(-1, -2)  # [∂Q̃, ∂A]
        grad_query_in, grad_coefficients = grad_left.split([key_dim, size], dim=-1)
        entering, corrected = right.split([key_dim, size], dim=-2)
        grad_to_end = corrected @ grad_after.transpose(-1, -2)  # ∂D̂ = V' ∂S_nextᵀ
        grad_solved = torch.cat([grad_corrected, -(grad_corrected @ entering.transpose(-1, -2))], dim=-1)  # ∂[U, W]
        grad_rhs = inverse.transpose(-1, -2) @ grad_solved
        products = grad_rhs @ solved.transpose(-1, -2)  # ∂(βN) = −tril₋₁(products)
        grad_values, grad_scaled_keys = grad_rhs.split([value_dim, key_dim], dim=-1)
        grad_v = s.unsqueeze(-1) * grad_values
        grad_s = (v * grad_values).sum(-1)
        from_keys = (d * grad_scaled_keys).sum(-1) * query_factor.squeeze(-1)  # ∂β of β F ⊙ D
        weighted_overlaps = products * overlaps  # −∂(βN) ⊙ N: N is strictly lower, so is this
        overlap_rows = weighted_overlaps.sum(-1)
        grad_beta = from_keys - overlap_rows
        # ∂ of the grams [Q Dᵀ; D Dᵀ]: ∂A ⊙ L and ∂N ⊙ L = −β tril₋₁(products) ⊙ L, stacked as the grams are
        grad_grams = torch.empty(torch.broadcast_shapes(grams.shape, products.shape[:3] + grams.shape[3:]),
                                 dtype=grams.dtype, device=grams.device)
        grad_of_queries, grad_of_keys = grad_grams.unbind(-3)
        torch.mul(grad_coefficients, decay, out=grad_of_queries)
        torch.mul(products, decay, out=grad_of_keys).mul_(-beta.unsqueeze(-1))
        grad_of_keys.diagonal(dim1=-2, dim2=-1).zero_()
        grad_grams = grad_grams.sum_to_size(grams.shape).flatten(-3, -2)
        through_keys = grad_grams @ d  # [(∂A ⊙ L) D; (∂N ⊙ L) D]
        through_stacked = grad_grams.transpose(-1, -2) @ stacked  # (∂A ⊙ L)ᵀ Q + (∂N ⊙ L)ᵀ D
        grad_q = through_keys[..., :size, :].sum_to_size(q_shape) + (grad_query_in * query_factor).sum_to_size(q_shape)
        grad_d = ((through_keys[..., size:, :] + through_stacked).sum_to_size(d_shape)
                  + ((beta.unsqueeze(-1) * query_factor) * grad_scaled_keys + grad_to_end * end_factor).sum_to_size(
                      d_shape))
        grad_g = None
        if ctx.has_decay:  # every decay is a difference of γ's: L[t, j] = e^{γ_t − γ_j}, F_t = e^{γ_t}, e^{Γ − γ_t}
            grad_segments = grad_coefficients * coefficients  # ∂σ[t, j] through A
            from_end = (grad_to_end * to_end).sum(-1)  # ∂(Γ − γ_t)
            grad_gamma = (grad_segments.sum(-1) - grad_segments.sum(-2) - beta * overlap_rows
                          + weighted_overlaps.mul_(beta.unsqueeze(-1)).sum(-2)
                          + (grad_query_in * q * query_factor).sum(-1) + beta * from_keys - from_end)
            carried = (grad_after * entering).sum((-2, -1)) * chunk_decay.squeeze(-1).squeeze(-1)  # ∂Γ through e^{Γ}
            grad_gamma[..., -1] += from_end.sum(-1) + carried
            grad_g = _suffix_sums(grad_gamma).sum_to_size(g.shape)
        grad_initial = None if initial is None else grad_initial.sum_to_size(initial.shape)
        return (grad_q, grad_d, grad_v.sum_to_size(v.shape), grad_g, grad_beta.sum_to_size(beta.shape),
                grad_s.sum_to_size(s.shape), grad_initial)


def _plus_product(x: Tensor, a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    """``x + alpha · a @ b``, added inside one batched product when all three have the same batch shape."""
    if x.shape[:-2] == a.shape[:-2] == b.shape[:-2]:
        return torch.baddbmm(x.flatten(0, -3), a.flatten(0, -3), b.flatten(0, -3), alpha=alpha).view(x.shape)
    return x + alpha * (a @ b)


def _to_chunks(x: Tensor | None, chunks: int, size: int) -> Tensor | None:
    """``[B, H, T, ...]`` → ``[B, H, N, C, ...]``, zero-padding the end (zero input, Λ = I: the state is unchanged)."""
    if x is None:
        return None
    pad = chunks * size - x.shape[2]
    if pad:
        x = torch.cat([x, x.new_zeros(*x.shape[:2], pad, *x.shape[3:])], dim=2)
    return x.reshape(*x.shape[:2], chunks, size, *x.shape[3:])


def _along_keys(x: Tensor, diagonal: bool) -> Tensor:
    """Shape a (log) decay to multiply ``[..., K]`` rows: scalar ``[...]`` gains a trailing axis."""
    return x if diagonal else x.unsqueeze(-1)


def linear(problem: Problem, want_state: bool) -> tuple[Tensor, Tensor]:
    """Chunkwise-parallel identity readout; returns ``y`` ``[B, H, T, V]`` and ``S_T``."""
    key_scale = problem.scale_per_step() if problem.direction_is_key else None  # DeltaNet: impulses b_t w_t
    problem = problem.with_scale_applied()
    batch, heads, length, key_dim, value_dim = problem.shape
    diagonal = problem.diagonal
    size = min(problem.chunk_size, length)
    g = problem.log_decay
    if diagonal:
        g, size = _diagonal_chunking(g, size)
    chunks = -(-length // size)
    q, k, v, direction = (_dense(_to_chunks(x, chunks, size)) for x in (problem.q, problem.k, problem.v,
                                                                         problem.direction))
    g, beta, key_scale = (_to_chunks(x, chunks, size) for x in (g, problem.beta, key_scale))
    if beta is None:
        out, state = _DecayedChunks.apply(q, k, v, g, problem.initial_state)
        return _unchunked(out, length), state
    if key_scale is not None and not diagonal:  # DeltaNet / Gated DeltaNet: the direction is the key
        out, state = _DeltaRuleChunks.apply(q, direction, v, g, beta, key_scale, problem.initial_state)
        return _unchunked(out, length), state
    # the general Householder factor (a given direction, or a diagonal decay), autograd through every head
    q, k, direction = (x.expand(batch, heads, *x.shape[2:]) for x in (q, k, direction))
    decayed = g is not None
    if decayed and not diagonal:  # scalar γ in float64: a chunk of strong decays sums to large γ whose differences
        g = bounded_log_decay(g.to(torch.float64))  # matter; diagonal chunks are sized so their γ range fits
    gamma = g.cumsum(dim=3) if decayed else None  # γ_t, inclusive, within each chunk
    total = gamma[:, :, :, -1] if decayed else None  # Γ
    grow = (lambda x, lg: x * decay_factor(_along_keys(lg, diagonal).to(x.dtype))) if decayed else (lambda x, lg: x)  # noqa: E731
    to_end = (lambda lg: total.unsqueeze(3) - lg) if decayed else (lambda lg: None)  # noqa: E731
    gamma_before = gamma - g if decayed else None  # γ_{t-1}
    decay_matrix = torch.diag_embed(_along_keys(decay_factor(total.to(q.dtype)), diagonal).expand(
        *total.shape[:3], key_dim)) if decayed else torch.eye(key_dim, dtype=q.dtype, device=q.device)
    out, query_in, delta_state = _decayed_chunks(q, k, v, gamma, total, diagonal, grow, to_end)
    weighted = beta.unsqueeze(-1) * direction
    a_e = _chunk_gram(q, weighted, gamma, gamma_before, False, diagonal)
    m_k = _chunk_gram(direction, k, gamma_before, gamma, True, diagonal)
    m_e = _chunk_gram(direction, weighted, gamma_before, gamma_before, True, diagonal)
    rhs = torch.cat([grow(direction, gamma_before), m_k @ v], dim=-1)
    from_state, from_values = _unit_lower_solve(m_e, rhs).split([key_dim, value_dim], dim=-1)
    e_out = grow(weighted, to_end(gamma_before)).transpose(-1, -2)  # Ẽᵀ
    query_in = query_in - a_e @ from_state
    out = out - a_e @ from_values
    delta_state = delta_state - e_out @ from_values
    transition = decay_matrix - e_out @ from_state  # [B, H, N, K, K]

    entering, state = _pass_states(delta_state, transition, problem.initial_state,
                                   (batch, heads, key_dim, value_dim), matrix=True)
    return _unchunked(out + query_in @ entering, length), state


def _dense(x: Tensor | None) -> Tensor | None:
    """A chunked ``[B, H, N, C, D]`` operand for batched products: contiguous (copied once here rather than in
    every product that batches over heads and chunks), and of one head when it is shared by all heads (expanded
    with stride 0), so that products with it are formed once."""
    if x is None:
        return None
    return x[:, :1].contiguous() if shared_over_heads(x) else x.contiguous()


def _unchunked(out: Tensor, length: int) -> Tensor:
    """``[B, H, N, C, V]`` → ``[B, H, T, V]``, dropping the padding."""
    out = out.flatten(2, 3)
    return out if out.shape[2] == length else out[:, :, :length]


# ------------------------------------------------------------------------------------------------------ softmax
def nonlinear(problem: Problem, want_state: bool):
    """``exp`` readout with ``"sum"``: softmax of the decayed scores, blockwise; the state is the key cache."""
    cache = problem.initial_state
    if problem.log_decay is None and cache is None:
        out = F.scaled_dot_product_attention(problem.q, problem.k, problem.v, is_causal=True, scale=1.0)
        return out, ((problem.k, problem.v) if want_state else None)
    batch, heads, length, key_dim, value_dim = problem.shape
    prefix = 0 if cache is None else cache[0].shape[2]
    keys = problem.k if cache is None else torch.cat([cache[0], problem.k], dim=2)
    values = problem.v if cache is None else torch.cat([cache[1], problem.v], dim=2)
    query_log = key_log = None
    if problem.log_decay is not None:  # cached keys sit at time -1, where G = 0
        query_log = cumulative_log_decay(problem.log_decay)
        key_log = torch.cat([query_log.new_zeros(batch, heads, prefix, *query_log.shape[3:]), query_log], dim=2)
    pieces = []
    for start in range(0, length, SOFTMAX_QUERY_BLOCK):
        stop = min(length, start + SOFTMAX_QUERY_BLOCK)
        args = (problem.q[:, :, start:stop], keys[:, :, :prefix + stop], values[:, :, :prefix + stop],
                None if query_log is None else query_log[:, :, start:stop],
                None if key_log is None else key_log[:, :, :prefix + stop])
        if torch.is_grad_enabled():
            pieces.append(checkpoint(_softmax_block, *args, prefix + start, use_reentrant=False))
        else:
            pieces.append(_softmax_block(*args, prefix + start))
    out = torch.cat(pieces, dim=2)
    if not want_state:
        return out, None
    if query_log is not None:
        final = query_log[:, :, -1:]
        keys = keys * torch.exp(_along_keys(final - key_log, problem.diagonal)).to(keys.dtype)
    return out, (keys, values)


def _softmax_block(q: Tensor, keys: Tensor, values: Tensor, query_log: Tensor | None, key_log: Tensor | None,
                   first: int) -> Tensor:
    """Online softmax of one query block (positions ``first + i``) over key blocks ``[0, first + rows)``."""
    rows = q.shape[2]
    row_max = q.new_full((*q.shape[:3],), float("-inf"))
    row_sum = q.new_zeros(q.shape[:3])
    acc = q.new_zeros(*q.shape[:3], values.shape[-1])
    for start in range(0, keys.shape[2], SOFTMAX_KEY_BLOCK):
        stop = min(keys.shape[2], start + SOFTMAX_KEY_BLOCK)
        valid = causal_mask(rows, stop - start, q.device, offset=first - start)
        scores = pairwise_gram(q, keys[:, :, start:stop], query_log,
                               None if key_log is None else key_log[:, :, start:stop], valid)
        scores = scores.masked_fill(~valid, float("-inf"))
        new_max = torch.maximum(row_max, scores.detach().amax(-1))
        safe_max = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))
        weights = torch.exp(scores - safe_max.unsqueeze(-1))
        rescale = torch.exp(row_max - safe_max)
        row_sum = row_sum * rescale + weights.sum(-1)
        acc = acc * rescale.unsqueeze(-1) + weights @ values[:, :, start:stop]
        row_max = new_max
    return acc / row_sum.unsqueeze(-1)
