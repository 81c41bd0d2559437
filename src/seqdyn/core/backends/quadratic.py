"""The ``quadratic`` backend: materialize every coefficient, the reference for all other backends.

Step by step (Sieber et al. 2025 eqs. 2–4):
  1. scores ``s_ij = q_iᵀ Λ_i ⋯ Λ_{j+1} b_j k_j`` for all pairs ``j ≤ i`` (:func:`scores`);
  2. coefficients ``α_ij = φ(s_ij)`` and their normalization ``1/η_i``;
  3. outputs ``y_i = Σ_j (α_ij/η_i) v_j`` as one matrix product.
Costs ``O(T²(K+V))`` time and ``O(T²)`` memory (``O(T³)`` for every coefficient of a nonlinear readout with
a Householder factor).  A recurrent state
enters as K virtual key/value pairs before the sequence, and the final state is read by K virtual queries after it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdyn.core.evolution import bounded_log_decay, causal_mask, cumulative_log_decay, pairwise_gram
from seqdyn.core.problem import Problem
from seqdyn.core.readouts import normalized_coefficients

NAME = "quadratic"


def unsupported(problem: Problem) -> str | None:
    """The reference computes every combination."""
    return None


def _grams(q: Tensor, k: Tensor, log_decay, beta, direction, written=None):
    """The decayed Gram matrices ``A_k`` and, with a Householder factor, ``A_e``, ``M_k``, ``M_e`` (see
    :func:`scores`); a written vector ``ũ_t`` is not decayed by its own step, so its log factor is ``G_t``."""
    length, device = q.shape[-2], q.device
    inclusive = causal_mask(length, length, device)
    cumulative = None if log_decay is None else cumulative_log_decay(log_decay)
    coupled = pairwise_gram(q, k, cumulative, cumulative, inclusive)
    if beta is None:
        return coupled, None
    strict = causal_mask(length, length, device, strict=True)
    before = None if log_decay is None else cumulative - bounded_log_decay(log_decay.to(torch.float64))  # G_{t-1}
    weighted_dir = beta.unsqueeze(-1) * direction if written is None else written
    written_log = before if written is None else cumulative  # e_t = D_t β_t w_t = e^{G_t − G_{t−1}} β_t w_t, or ũ_t
    a_e = pairwise_gram(q, weighted_dir, cumulative, written_log, inclusive)
    m_k = pairwise_gram(direction, k, before, cumulative, strict)
    m_e = pairwise_gram(direction, weighted_dir, before, written_log, strict)
    unit_lower = torch.eye(length, dtype=q.dtype, device=device) + m_e
    return coupled, (a_e, m_k, unit_lower)


def scores(q: Tensor, k: Tensor, log_decay, beta, direction, written=None) -> Tensor:
    """``s_ij = q_iᵀ Λ_i ⋯ Λ_{j+1} k_j`` ``[B, H, T, T]`` for ``j ≤ i`` (0 above the diagonal); keys carry b.

    Without a Householder factor the product of diagonal matrices is ``diag(exp(G_i − G_j))``.  With
    ``Λ_t = D_t (I − β_t w_t w_tᵀ)`` write the state as ``S_t = D_t S_{t-1} − e_t u_tᵀ + k_t v_tᵀ`` with
    ``e_t = D_t β_t w_t`` and ``u_t = S_{t-1}ᵀ w_t``.  Collecting the ``u_t`` gives the unit lower-triangular
    system ``(I + M_e) U = M_k V`` (the UT transform of the WY representation), hence
    ``s = A_k − A_e (I + M_e)^{-1} M_k`` with the decayed Gram matrices
    ``A_k[i,j] = q_iᵀ Φ_{i,j} k_j``, ``A_e[i,j] = q_iᵀ Φ_{i,j} e_j``, ``M_k[i,j] = w_iᵀ Φ_{i-1,j} k_j``,
    ``M_e[i,j] = w_iᵀ Φ_{i-1,j} e_j`` (``j < i`` for M) and ``Φ_{i,j} = D_i ⋯ D_{j+1}``.  Forming every
    coefficient with a Householder factor solves for T right-hand sides: ``O(T³)``.  A diagonal-plus-low-rank
    ``Λ_t = D_t − ũ_t w_tᵀ`` is the same with ``e_t = ũ_t`` (``written``).
    """
    coupled, householder = _grams(q, k, log_decay, beta, direction, written)
    if householder is None:
        return coupled
    a_e, m_k, unit_lower = householder
    return coupled - a_e @ torch.linalg.solve_triangular(unit_lower, m_k, upper=False, unitriangular=True)


def outputs(q: Tensor, k: Tensor, v: Tensor, log_decay, beta, direction, written=None) -> Tensor:
    """``y = s v`` for the identity readout; with a Householder factor ``y = A_k V − A_e (I + M_e)^{-1} (M_k V)``
    solves for V right-hand sides only, so the cost stays ``O(T²(K+V))``."""
    coupled, householder = _grams(q, k, log_decay, beta, direction, written)
    if householder is None:
        return coupled @ v
    a_e, m_k, unit_lower = householder
    return coupled @ v - a_e @ torch.linalg.solve_triangular(unit_lower, m_k @ v, upper=False, unitriangular=True)


def _extend(problem: Problem, prefix_keys: Tensor | None, prefix_values: Tensor | None, final_queries: bool):
    """Add virtual positions with ``Λ = I``: keys/values before the sequence and the K unit queries after it.

    Returns ``(q, k, v, log_decay, beta, direction, written)`` of the extended sequence.
    """
    batch, heads, _, key_dim, value_dim = problem.shape
    q = problem.q
    before = 0 if prefix_keys is None else prefix_keys.shape[2]
    after = key_dim if final_queries else 0

    def extended(x: Tensor | None, before_part: Tensor | None = None, after_part: Tensor | None = None):
        if x is None:
            return None
        parts = [
            before_part if before_part is not None else x.new_zeros(batch, heads, before, *x.shape[3:]),
            x,
            after_part if after_part is not None else x.new_zeros(batch, heads, after, *x.shape[3:]),
        ]
        return torch.cat(parts, dim=2)

    eye = torch.eye(key_dim, dtype=q.dtype, device=q.device).expand(batch, heads, key_dim, key_dim)
    return (
        extended(q, after_part=eye if final_queries else None),
        extended(problem.k, before_part=prefix_keys),
        extended(problem.v, before_part=prefix_values),
        extended(problem.log_decay),
        extended(problem.beta),
        extended(problem.direction),
        extended(problem.written),
    )


def linear(problem: Problem, want_state: bool) -> tuple[Tensor, Tensor | None]:
    """Identity readout: ``y = tril(s) v`` and the final state ``S_T`` ``[B, H, K, V]``.

    The initial state ``S`` enters as K virtual keys ``e_m`` with values ``S[m]``; the final state is the
    output of K virtual queries ``e_m`` placed after the sequence, ``S_Tᵀ e_m = S_T[m]``.
    """
    problem = problem.with_scale_applied()
    batch, heads, length, key_dim, value_dim = problem.shape
    if problem.initial_state is None and not want_state:
        return outputs(problem.q, problem.k, problem.v, *problem.transition), None
    eye = torch.eye(key_dim, dtype=problem.q.dtype, device=problem.q.device).expand(batch, heads, key_dim, key_dim)
    state = problem.initial_state
    if state is None:
        state = problem.v.new_zeros(batch, heads, key_dim, value_dim)
    out = outputs(*_extend(problem, eye, state, final_queries=True))
    return out[:, :, key_dim : key_dim + length], out[:, :, key_dim + length :]


def nonlinear(problem: Problem, want_state: bool):
    """Any readout: normalized coefficients ``φ(s)/η`` times values; the state is the transformed-key cache."""
    length = problem.shape[2]
    cache = problem.initial_state
    prefix = 0 if cache is None else cache[0].shape[2]
    q, k, v, *transition = _extend(problem, *(cache or (None, None)), final_queries=want_state)
    s = scores(q, k, *transition)
    rows = s[:, :, prefix : prefix + length, : prefix + length]
    valid = causal_mask(length, prefix + length, s.device, offset=prefix)
    coefficients = normalized_coefficients(rows, valid, problem.readout, problem.normalizer)
    out = coefficients @ v[:, :, : prefix + length]
    if not want_state:
        return out, None
    keys = s[:, :, prefix + length :, : prefix + length].transpose(-1, -2)
    return out, (keys, v[:, :, : prefix + length])


def coefficient_scores(problem: Problem) -> Tensor:
    """The scores ``s`` of :func:`scores` for the problem's own sequence (its keys multiplied by ``b``)."""
    problem = problem.folded()
    return scores(problem.q, problem.k, *problem.transition)
