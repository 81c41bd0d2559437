"""Several Householder factors per step, and the decay before them: both as steps of the one operator.

Gated DeltaProduct (`Siems et al. 2025 <https://arxiv.org/abs/2502.10297>`_, eq. 5) takes ``n`` Householder factors
per token, each with its own key, value and step size, and writes each token's values between its factors::

    S_{t,0} = D_t S_{t−1},   S_{t,s} = (I − β_ts w_ts w_tsᵀ) S_{t,s−1} + b_ts k_ts v_tsᵀ  (s = 1 … n),   S_t = S_{t,n}

so ``Λ_t = Π_{s=n}^{1} (I − β_ts w_ts w_tsᵀ) D_t``.  Kimi Delta Attention (`Kimi Team 2025
<https://arxiv.org/abs/2510.26692>`_, eq. 1) is the case ``n = 1`` with a diagonal ``D_t`` applied *before* the
rank-one update, ``S_t = (I − β_t k_t k_tᵀ) Diag(α_t) S_{t−1} + β_t k_t v_tᵀ`` — not ``D (I − β w wᵀ)`` for any ``w``.

Both are the one operator ``x_i = D_i (I − β_i w_i w_iᵀ) x_{i−1}`` run over sub-steps: token ``t`` becomes the
steps ``(t, 1) … (t, n)``, step ``(t, s)`` with the factor ``I − β_ts w_ts w_tsᵀ``, the impulse ``b_ts k_ts`` and
the value ``v_ts``, and the decay ``D_t`` on its first step; the token's output is its last step's.  A scalar
decay commutes with the factors, so this is the order above.  A diagonal decay does not: the operator's own order
(``decay_first=False``) gives ``Λ_t = Π_{s=n}^{2} (I − β_ts w_ts w_tsᵀ) · D_t (I − β_t1 w_t1 w_t1ᵀ)``, and
``decay_first=True`` gives the order above by a first step ``(t, 0)`` that only decays (no factor, zero impulse;
the identity readout, where a zero impulse has zero coefficient).  Every backend, gradient, packed sequence and
state of the operator therefore holds for these forms unchanged: what is computed is the operator on
``T·m`` steps (``m = n`` or ``n + 1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from seqdyn.core.dynamics import Dynamics
from seqdyn.core.outer import outer_decayed
from seqdyn.core.readouts import resolve_readout

#: the fields that carry one entry per factor ``[B, T, H, n, …]`` (per sub-step once expanded)
PER_FACTOR = ("k", "v", "householder", "householder_dir", "scale", "log_scale")


@dataclass(frozen=True)
class SubSteps:
    """How a token is expanded into sub-steps: ``factors`` Householder factors, after ``lead`` decay-only steps
    (0 or 1); ``per_token = lead + factors`` steps of the operator per token."""

    factors: int
    lead: int

    @property
    def per_token(self) -> int:
        return self.lead + self.factors

    def outputs(self, y: Tensor) -> Tensor:
        """The tokens' outputs ``[B, T, H, V]`` of the sub-steps' ``[B, T·m, H, V]``: each token's last step."""
        return y.unflatten(1, (-1, self.per_token))[:, :, -1]

    def token_outputs(self, result: Any, with_state: bool) -> Any:
        """The operator's result (``y``, or ``(y, final state)``) on the sub-steps as the tokens': the final state
        is the last sub-step's, the token's own."""
        return (self.outputs(result[0]), result[1]) if with_state else self.outputs(result)

    def coefficients(self, matrix: Tensor) -> Tensor:
        """The tokens' coefficient rows ``[B, H, T, T·n]`` of the sub-steps' ``[B, H, T·m, T·m]``: each token's last
        row, without the decay-only columns; column ``j·n + s`` is the coefficient of key ``k_{j,s+1}``."""
        rows = matrix.unflatten(2, (-1, self.per_token))[:, :, :, -1]  # [B, H, T, T·m]
        columns = rows.unflatten(3, (-1, self.per_token))[..., self.lead :]  # [B, H, T, T, n]
        return columns.flatten(3)

    def offsets(self, offsets: tuple[int, ...] | list[int]) -> list[int]:
        """Packed sequences' offsets on the sub-steps."""
        return [offset * self.per_token for offset in offsets]


def sub_steps(dynamics: Dynamics) -> SubSteps | None:
    """The expansion ``dynamics`` needs, or ``None`` where it is a plain step of the operator (one factor or none,
    the decay where the operator puts it).  Raises ``ValueError`` naming the argument whose shape does not fit."""
    beta, decay_first = dynamics.householder, bool(dynamics.decay_first)
    several = isinstance(beta, Tensor) and beta.dim() == 4
    g = dynamics.log_decay  # diagonal: [B, T, H, K], or the steps Δ of a factored Δ ⊗ A
    diagonal = isinstance(g, Tensor) and (g.dim() == 4 or dynamics.decay_rate is not None)
    if not several:
        if isinstance(dynamics.k, Tensor) and dynamics.k.dim() == 5:
            raise ValueError(
                f"k: keys per factor [B, T, H, n, K] (shape {list(dynamics.k.shape)}) need householder=β "
                "[B, T, H, n], one step size per factor"
            )
        if not (decay_first and diagonal and beta is not None):
            return None  # a scalar decay commutes with the factor; without a factor the order is moot
        plan = SubSteps(1, 1)
    else:
        plan = SubSteps(beta.shape[-1], int(decay_first and diagonal))
    _check_factor_shapes(dynamics, plan.factors, several)
    if plan.lead and not resolve_readout(dynamics.readout).linear:
        raise ValueError(
            f"decay_first: a diagonal decay before the factors with the {resolve_readout(dynamics.readout).name} "
            "readout is not computed (its decay-only step would add φ(0) to every row); use the identity readout, "
            "a scalar decay, or decay_first=False"
        )
    return plan


def _check_factor_shapes(dynamics: Dynamics, factors: int, several: bool) -> None:
    """Every per-factor field ``[B, T, H, n, …]`` with the ``n`` of ``householder`` (``several``), or per token."""
    q = dynamics.q
    if not isinstance(q, Tensor) or q.dim() != 4:
        raise ValueError(f"q: expected [B, T, H, K], got {list(getattr(q, 'shape', []))}")
    if not several:
        return
    head = tuple(q.shape[:3])
    layouts = {"k": 5, "v": 5, "householder_dir": 5, "scale": 4, "log_scale": 4, "householder": 4}
    for name, rank in layouts.items():
        value = getattr(dynamics, name)
        if not isinstance(value, Tensor) or (name == "scale" and value.dim() == 0):
            continue
        shape = tuple(value.shape)
        if value.dim() != rank or shape[3] != factors or (shape[:3] != head and name != "v"):
            layout = "[B, T, H, n, K]" if rank == 5 else "[B, T, H, n]"
            raise ValueError(
                f"{name}: with householder [B, T, H, n] (n = {factors} factors per step) expects {layout} with "
                f"B, T, H = {list(head)} and n = {factors}; got shape {list(shape)}"
            )


def expanded(dynamics: Dynamics, plan: SubSteps) -> Dynamics:
    """The sub-steps of ``dynamics`` as one sequence of ``T·m`` operator steps (module docstring): the decay on each
    token's first step, the factors, impulses and values on their own, the query and normalizer repeated."""
    batch, length = dynamics.q.shape[:2]
    m = plan.per_token

    def per_step(x: Tensor) -> Tensor:  # [B, T, …] -> [B, T·m, …], the token's value on each of its steps
        return x.unsqueeze(2).expand(batch, length, m, *x.shape[2:]).flatten(1, 2)

    def per_factor(x: Tensor) -> Tensor:  # [B, T, H, n, …] -> [B, T·m, H, …], zero on the decay-only step
        x = x.movedim(3, 2)  # [B, T, n, H, …]
        if plan.lead:
            x = torch.cat([x.new_zeros(x.shape[:2] + (plan.lead,) + x.shape[3:]), x], dim=2)
        return x.flatten(1, 2)

    def first_step(x: Tensor) -> Tensor:  # [B, T, …] -> [B, T·m, …], 0 on the token's later steps
        rest = x.new_zeros(x.shape[:2] + (m - 1,) + x.shape[2:])
        return torch.cat([x.unsqueeze(2), rest], dim=2).flatten(1, 2)

    single = lambda x: x.unsqueeze(3)  # noqa: E731  a per-token field as n = 1 factor: [B, T, H, …] -> [B, T, H, 1, …]
    changes: dict[str, Any] = {"q": per_step(dynamics.q), "decay_first": False}
    for name in PER_FACTOR:
        value = getattr(dynamics, name)
        if isinstance(value, Tensor) and value.dim() > 0:
            changes[name] = per_factor(value if dynamics.householder.dim() == 4 else single(value))
    if isinstance(dynamics.log_decay, Tensor):
        changes["log_decay"] = first_step(dynamics.log_decay)
    if isinstance(dynamics.normalizer, Tensor):
        changes["normalizer"] = per_step(dynamics.normalizer)
    if dynamics.normalizer_log_offset is not None:
        changes["normalizer_log_offset"] = per_step(dynamics.normalizer_log_offset)
    return dynamics.replace(**changes)


def transition_steps(dynamics: Dynamics) -> Dynamics:
    """The steps of ``dynamics``' transitions Λ alone: its sub-steps where it has them, the decay outside the readout
    left out (it is no part of Λ) — what its spectra are read from."""
    steps = dynamics if dynamics.outer_log_decay is None else dynamics.replace(outer_log_decay=None)
    plan = sub_steps(steps)
    return steps if plan is None else expanded(steps, plan)


def operator_steps(dynamics: Dynamics) -> Dynamics:
    """The steps the operator computes for ``dynamics``: a decay outside the readout reduced
    (:func:`~seqdyn.core.outer.outer_decayed`), its sub-steps where it has them (:func:`sub_steps`), else itself —
    what a problem is prepared from, its backends chosen and ruled out on."""
    outer = outer_decayed(dynamics)
    if outer is not None:
        return outer[0]
    plan = sub_steps(dynamics)
    return dynamics if plan is None else expanded(dynamics, plan)
