"""The DSF view: every identity-readout mixer as a linear time-varying system (Sieber et al. 2024 §3, eq. 12,
appendix B).

``h_i = Λ_i h_{i-1} + B_i u_i``, ``y_i = C_i h_i + D_i u_i`` with kernel ``Φ_ij = C_i Λ_i ⋯ Λ_{j+1} B_j``
(``+ D_i`` on the diagonal), so ``y = Φ u``.  For the coefficient form the state is ``h = vec(S)/η``
(N = K·V per head, row-major ``h[k·V + a] = S[k, a]``), the input is the value ``u_i = v_i`` (``W_V = I``) and
(Sieber et al. 2024 eq. 15)::

    Λ_i^DSF = (η_{i-1}/η_i) (Λ_i ⊗ I_V),   B_i = (b_i/η_i) (k_i ⊗ I_V),   C_i = q_iᵀ ⊗ I_V,   D_i = 0.

Nonlinear readouts have no finite DSF (Sieber et al. 2024 Lemma 1); Taylor features (:func:`seqdyn.features.taylor`)
give a finite approximation of softmax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from seqdyn.core.backends import quadratic
from seqdyn.core.bonus import bonus_reduced
from seqdyn.core.dynamics import Dynamics, dynamics_of_call
from seqdyn.core.evolution import evolution_matrix
from seqdyn.core.operator import coefficients
from seqdyn.core.outer import outer_decayed
from seqdyn.core.problem import prepare
from seqdyn.core.products import SubSteps, expanded, sub_steps

__all__ = ["DSF", "dsf", "from_coefficients"]


@dataclass
class DSF:
    """Per-step DSF matrices of every batch element and head (Sieber et al. 2024 eq. 12).

    Attributes:
        Lambda: ``[B, H, T, N, N]`` state transitions Λ_i.
        B: ``[B, H, T, N, U]`` input matrices B_i (``U = V``; ``n·V`` for the ``n`` values per step of several
            Householder factors per step, ``u_i = [v_i1, …, v_in]``).
        C: ``[B, H, T, V, N]`` output matrices C_i.
        D: ``[B, H, T, V, U]`` feedthrough D_i.
    """

    Lambda: Tensor
    B: Tensor
    C: Tensor
    D: Tensor

    def kernel(self) -> Tensor:
        """``Φ`` ``[B, H, T, T, V, V]``: block ``(i, j)`` is ``C_i Λ_i ⋯ Λ_{j+1} B_j`` (+ ``D_i`` if i = j), 0 if
        j > i."""
        batch, heads, length, state_dim, width = self.B.shape
        blocks = self.B.new_zeros(batch, heads, length, length, self.C.shape[-2], width)
        carried = self.B.new_zeros(batch, heads, length, state_dim, width)  # Λ_i ⋯ Λ_{j+1} B_j for every j ≤ i
        for i in range(length):
            carried = self.Lambda[:, :, i].unsqueeze(2) @ carried
            carried[:, :, i] = self.B[:, :, i]
            blocks[:, :, i, : i + 1] = self.C[:, :, i].unsqueeze(2) @ carried[:, :, : i + 1]
            blocks[:, :, i, i] = blocks[:, :, i, i] + self.D[:, :, i]
        return blocks

    def apply(self, u: Tensor) -> Tensor:
        """``y = Φ u`` for inputs ``u`` ``[B, T, H, U]``; returns ``[B, T, H, V]``."""
        return torch.einsum("bhijac,bjhc->biha", self.kernel(), u.to(self.B.dtype))

    def simulate(self, u: Tensor) -> Tensor:
        """Run ``h_i = Λ_i h_{i-1} + B_i u_i``, ``y_i = C_i h_i + D_i u_i`` step by step; ``u`` ``[B, T, H, U]``."""
        u = u.to(self.B.dtype).transpose(1, 2)
        state = self.B.new_zeros(*self.B.shape[:2], self.B.shape[3], 1)
        outputs = []
        for i in range(u.shape[2]):
            state = self.Lambda[:, :, i] @ state + self.B[:, :, i] @ u[:, :, i].unsqueeze(-1)
            outputs.append((self.C[:, :, i] @ state + self.D[:, :, i] @ u[:, :, i].unsqueeze(-1)).squeeze(-1))
        return torch.stack(outputs, dim=1)


def dsf(
    q: Tensor | Dynamics,
    k: Tensor | None = None,
    v: Tensor | None = None,
    readout: Any = "identity",
    log_decay: Tensor | None = None,
    householder: Tensor | None = None,
    householder_dir: Tensor | None = None,
    scale: Any = None,
    normalizer: Any = "none",
    log_scale: Tensor | None = None,
    decay_rate: Tensor | None = None,
    decay_first: bool = False,
    outer_log_decay: Tensor | None = None,
    low_rank_write: Tensor | None = None,
    low_rank_read: Tensor | None = None,
    bonus: Tensor | None = None,
    normalizer_log_offset: Tensor | None = None,
) -> DSF:
    """The DSF matrices of ``coefficient_dynamics(q, k, v, ...)`` (Sieber et al. 2024 eq. 15); ``DSF.apply(v)``
    equals it.

    The keywords are those of :class:`~seqdyn.core.dynamics.Dynamics` (or ``q`` a ``Dynamics`` alone).  ``v`` only
    fixes the value width V (the values are the DSF's inputs).  For small sizes: Λ is ``[N, N]`` with
    ``N = K·V``.  η for ``"sum"``/``"abs_max1"`` is computed from the coefficients, which depend on q, k and Λ only.
    """
    dynamics = dynamics_of_call(locals())
    reduced = bonus_reduced(dynamics)
    if reduced is not None:
        return _with_bonus(dsf(dynamics.replace(bonus=None)), reduced[1].current)
    outer = outer_decayed(dynamics)
    dynamics = dynamics if outer is None else outer[0]
    plan = sub_steps(dynamics)
    problem = prepare(dynamics if plan is None else expanded(dynamics.replace(normalizer="none"), plan)).folded()
    if not problem.readout.linear:
        raise ValueError(
            f"readout: {problem.readout.name!r} has no finite DSF (Sieber et al. 2024, Lemma 1); use "
            "readout='identity', e.g. on seqdyn.features.taylor(q, p) and taylor(k, p) for a degree-p approximation "
            "of softmax"
        )
    if plan is not None:
        return _token_realization(dynamics, problem, plan)
    return _realization(problem, _transitions(problem), _eta(problem))


def _token_realization(dynamics: Dynamics, steps, plan: SubSteps) -> DSF:
    """The DSF per token of several Householder factors per step (:mod:`seqdyn.core.products`) from the DSF of its
    sub-steps ``steps`` (a folded problem, η = 1): ``Λ̄_t = Λ_t,m ⋯ Λ_t,1``, ``B̄_t = [Λ_t,m ⋯ Λ_t,s+1 B_t,s]_s``
    over the factors' sub-steps (``u_t = [v_t1, …, v_tn]``), ``C̄_t = C_t,m``; then the tokens' η as
    :func:`_realization` applies it."""
    plain = _realization(steps, _transitions(steps), steps.q.new_ones(steps.q.shape[:3]))
    m = plan.per_token
    lam = plain.Lambda.unflatten(2, (-1, m))  # [B, H, T, m, N, N]
    inputs = plain.B.unflatten(2, (-1, m))  # [B, H, T, m, N, V]
    total, columns = lam[:, :, :, 0], [inputs[:, :, :, 0]]
    for s in range(1, m):
        total = lam[:, :, :, s] @ total
        columns = [lam[:, :, :, s] @ column for column in columns] + [inputs[:, :, :, s]]
    B = torch.cat(columns[plan.lead :], dim=-1)  # [B, H, T, N, n·V]
    eta = _token_eta(dynamics)
    eta_before = torch.cat([torch.ones_like(eta[:, :, :1]), eta[:, :, :-1]], dim=2)
    C = plain.C[:, :, m - 1 :: m]
    D = C.new_zeros(*C.shape[:-1], B.shape[-1])
    return DSF(Lambda=total * (eta_before / eta)[..., None, None], B=B / eta[..., None, None], C=C, D=D)


def _with_bonus(plain: DSF, current: Tensor) -> DSF:
    """The DSF of a current-token bonus (:mod:`seqdyn.core.bonus`): the state ``[h_i; h_{i−1}]`` keeps the one
    before the step, which the output reads, and the bonus ``c_i`` ``[B, T, H]`` is the feedthrough::

        Λ'_i = [[Λ_i, 0], [I, 0]],   B'_i = [B_i; 0],   C'_i = [0, C_i],   D'_i = c_i I_V
    """
    lam, inputs, outputs = plain.Lambda, plain.B, plain.C
    eye = torch.eye(lam.shape[-1], dtype=lam.dtype, device=lam.device).expand_as(lam)
    zeros = torch.zeros_like(lam)
    transition = torch.cat([torch.cat([lam, zeros], -1), torch.cat([eye, zeros], -1)], -2)  # [B, H, T, 2N, 2N]
    feedthrough = current.transpose(1, 2)[..., None, None] * torch.eye(plain.D.shape[-1], dtype=lam.dtype)
    return DSF(
        Lambda=transition,
        B=torch.cat([inputs, torch.zeros_like(inputs)], dim=-2),
        C=torch.cat([torch.zeros_like(outputs), outputs], dim=-1),
        D=feedthrough.to(plain.D.dtype),
    )


def _token_eta(dynamics: Dynamics) -> Tensor:
    """η ``[B, H, T]`` of each token of several factors per step: given, 1, or from its coefficient rows."""
    normalizer, (batch, length, heads) = dynamics.normalizer, dynamics.q.shape[:3]
    if isinstance(normalizer, Tensor):
        return normalizer.transpose(1, 2).expand(batch, heads, length)
    if normalizer == "none":
        return dynamics.q.new_ones(batch, heads, length)
    sums = coefficients(dynamics.replace(normalizer="none", normalizer_log_offset=None)).sum(-1)
    eta = sums if normalizer == "sum" else sums.abs().clamp(min=1.0)
    offset = dynamics.normalizer_log_offset
    return eta if offset is None else eta + torch.exp(offset).transpose(1, 2)


def _transitions(problem) -> Tensor:
    """The evolution matrices Λ_i ``[B, H, T, K, K]`` of a prepared problem, one per step."""
    key_dim, length = problem.shape[3], problem.shape[2]
    return torch.stack(
        [
            evolution_matrix(
                tuple(None if x is None else x[:, :, t] for x in problem.transition),
                problem.diagonal,
                key_dim,
                problem.q,
            )
            for t in range(length)
        ],
        dim=2,
    )


def _realization(problem, transitions: Tensor, eta: Tensor) -> DSF:
    """The DSF of a folded problem (``b`` in its keys) with evolution matrices ``transitions`` ``[B, H, T, K, K]``
    and normalizer η ``[B, H, T]``, on the state ``h = vec(S)/η``: ``Λ_i^DSF = (η_{i-1}/η_i) (Λ_i ⊗ I_V)``,
    ``B_i = (b_i k_i ⊗ I_V)/η_i``, ``C_i = q_iᵀ ⊗ I_V``, ``D_i = 0``."""
    batch, heads, length, key_dim, value_dim = problem.shape
    eta_before = torch.cat([torch.ones_like(eta[:, :, :1]), eta[:, :, :-1]], dim=2)
    eye_v = torch.eye(value_dim, dtype=problem.q.dtype, device=problem.q.device)
    state_dim = key_dim * value_dim
    lam = torch.einsum("bhtij,ac->bhtiajc", transitions, eye_v).reshape(batch, heads, length, state_dim, state_dim)
    inputs = torch.einsum("bhtk,ac->bhtkac", problem.k, eye_v).reshape(batch, heads, length, state_dim, value_dim)
    outputs = torch.einsum("bhtk,ac->bhtakc", problem.q, eye_v).reshape(batch, heads, length, value_dim, state_dim)
    return DSF(
        Lambda=lam * (eta_before / eta)[..., None, None],
        B=inputs / eta[..., None, None],
        C=outputs,
        D=torch.zeros(batch, heads, length, value_dim, value_dim, dtype=problem.q.dtype, device=problem.q.device),
    )


def _eta(problem) -> Tensor:
    """η_i ``[B, H, T]`` of the problem's normalizer (1 for ``"none"``)."""
    if isinstance(problem.normalizer, Tensor):
        return problem.normalizer
    if problem.normalizer == "none":
        return problem.q.new_ones(problem.q.shape[:3])
    sums = quadratic.coefficient_scores(problem).sum(-1)
    eta = sums if problem.normalizer == "sum" else torch.clamp(sums.abs(), min=1.0)
    return eta if problem.normalizer_offset is None else eta + torch.exp(problem.normalizer_offset)


def from_coefficients(coefficients: Tensor, value_dim: int) -> DSF:
    """A DSF realization of a given coefficient matrix ``A`` ``[B, H, T, T]``: ``y_i = Σ_j A_ij v_j``.

    The state keeps every past value, ``h_i = [v_0, …, v_i, 0, …]`` (N = T·V): ``Λ_i = I``,
    ``B_i = e_i ⊗ I_V``, ``C_i = A_i ⊗ I_V``.  For a nonlinear readout this is the only kind of realization there
    is — the state grows with T (Sieber et al. 2024 Lemma 1) — and it serves to inspect such mixers on a fixed input.
    """
    batch, heads, length, _ = coefficients.shape
    eye_v = torch.eye(value_dim, dtype=coefficients.dtype, device=coefficients.device)
    state_dim = length * value_dim
    slots = torch.eye(length, dtype=coefficients.dtype, device=coefficients.device)
    inputs = torch.einsum("tj,ac->tjac", slots, eye_v).reshape(length, state_dim, value_dim)
    outputs = torch.einsum("bhtj,ac->bhtajc", coefficients, eye_v).reshape(batch, heads, length, value_dim, state_dim)
    return DSF(
        Lambda=torch.eye(state_dim, dtype=coefficients.dtype, device=coefficients.device).expand(
            batch, heads, length, state_dim, state_dim
        ),
        B=inputs.expand(batch, heads, length, state_dim, value_dim),
        C=outputs,
        D=coefficients.new_zeros(batch, heads, length, value_dim, value_dim),
    )
