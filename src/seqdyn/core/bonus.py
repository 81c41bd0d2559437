"""A bonus for the current token: the output reads the state *before* the token's step and adds the token itself
through ``Diag(u)``, and its reduction to the one operator.

RWKV-6 (`Peng et al. 2024 <https://arxiv.org/abs/2404.05892>`_, eq. 17; flash-linear-attention's
``naive_recurrent_rwkv6``) and RWKV-5 read::

    y_t = q_tᵀ (S_{t−1} + Diag(u_t) b_t k_t v_tᵀ),     S_t = Λ_t S_{t−1} + b_t k_t v_tᵀ

so its coefficients are ``α_tj = q_tᵀ Λ_{t−1} ⋯ Λ_{j+1} b_j k_j`` for ``j < t`` — the operator's ``α_{t−1, j}`` read
by the next token's query — and ``α_tt = q_tᵀ Diag(u_t) b_t k_t``.  The operator computes it exactly with the
queries shifted one step back, ``q'_s = q_{s+1}``: its output at ``t − 1`` is ``q_tᵀ S_{t−1}``; each sequence's first
token reads the state it starts from instead (0, or the initial state), and its states are the operator's own.  So
every backend, packed sequence, state and gradient holds unchanged.  The identity readout without a normalizer takes
it (RWKV-4's normalized form adds the bonus to the normalizer's sum as well, which no row of the operator has).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from seqdyn.core.dynamics import Dynamics
from seqdyn.core.packing import packing_of
from seqdyn.core.readouts import resolve_readout


@dataclass(frozen=True)
class Bonus:
    """What maps the shifted operator's result back to the tokens': their queries ``[B, T, H, K]``, the bonus
    coefficients ``c_t = q_tᵀ Diag(u_t) b_t k_t`` ``[B, T, H]``, the values ``[B, T, H, V]`` (None for coefficients),
    each sequence's first step ``[T]`` and the state the call starts from."""

    queries: Tensor
    current: Tensor
    values: Tensor | None
    starts: Tensor
    initial_state: Any

    def token_outputs(self, result: Any, with_state: bool) -> Any:
        """``y_t = y'_{t−1} + c_t v_t``, a start reading its initial state; the final state unchanged."""
        y, state = result if with_state else (result, None)
        return (self.outputs(y), state) if with_state else self.outputs(y)

    def outputs(self, shifted: Tensor) -> Tensor:
        """The tokens' outputs of the shifted operator's ``[B, T, H, V]``."""
        earlier = torch.cat([torch.zeros_like(shifted[:, :1]), shifted[:, :-1]], dim=1)  # y'_{t−1}
        y = torch.where(self.starts[None, :, None, None], self._starting_reads(shifted), earlier)
        return y + self.current.unsqueeze(-1).to(y.dtype) * self.values

    def coefficients(self, matrix: Tensor) -> Tensor:
        """The tokens' coefficient rows ``[B, H, T, T]`` of the shifted operator's: row ``t − 1`` as row ``t`` (0 at
        a start) and ``c_t`` on the diagonal."""
        earlier = torch.cat([torch.zeros_like(matrix[:, :, :1]), matrix[:, :, :-1]], dim=2)
        earlier = earlier.masked_fill(self.starts[None, None, :, None], 0.0)
        return earlier + torch.diag_embed(self.current.transpose(1, 2).to(matrix.dtype))

    def _starting_reads(self, like: Tensor) -> Tensor:
        """``q_tᵀ S_start`` at each sequence's first step (the state it starts from; 0 without one)."""
        state = self.initial_state
        if state is None:
            return torch.zeros_like(like)
        read = torch.zeros_like(like)
        rows = self.starts.nonzero().flatten()  # one per sequence, in order
        if state.shape[0] == like.shape[0]:  # one sequence per batch row
            read[:, 0] = torch.einsum("bhk,bhkv->bhv", self.queries[:, 0].to(state.dtype), state).to(like.dtype)
            return read
        read[0, rows] = torch.einsum("nhk,nhkv->nhv", self.queries[0, rows].to(state.dtype), state).to(like.dtype)
        return read


def bonus_reduced(
    dynamics: Dynamics, cu_seqlens: Any = None, initial_state: Any = None
) -> tuple[Dynamics, Bonus] | None:
    """``dynamics`` with its current-token ``bonus`` reduced to the operator (shifted queries) and the plan that
    maps the result back, or None without one.  Raises ``ValueError`` naming what it cannot take."""
    u = dynamics.bonus
    if u is None:
        return None
    _check_bonus(dynamics, u)
    q, k = dynamics.q, dynamics.k
    batch, length = q.shape[:2]
    bonus = u if u.dim() == 4 else u[None, None]  # [B, T, H, K] or [1, 1, H, K]
    current = (q * bonus * k).sum(-1) * _impulse_scale(dynamics)  # c_t [B, T, H]
    if cu_seqlens is None:
        starts = torch.zeros(length, dtype=torch.bool, device=q.device)
        starts[0] = True
    else:
        starts = packing_of(dynamics, cu_seqlens).starts
    shifted = torch.cat([q[:, 1:], torch.zeros_like(q[:, :1])], dim=1)  # q'_s = q_{s+1}
    plan = Bonus(q, current.expand(batch, length, current.shape[-1]), dynamics.v, starts, initial_state)
    return dynamics.replace(q=shifted, bonus=None), plan


def _impulse_scale(dynamics: Dynamics) -> Tensor | float:
    """``b_t`` ``[B, T, H]`` (or a float) of the description: ``scale``, ``exp(log_scale)``, or ``K^-½``."""
    if dynamics.log_scale is not None:
        return torch.exp(dynamics.log_scale)
    scale = dynamics.scale
    return dynamics.q.shape[-1] ** -0.5 if scale is None else scale


def _check_bonus(dynamics: Dynamics, u: Any) -> None:
    if not isinstance(u, Tensor) or u.dim() not in (2, 4):
        raise ValueError(
            f"bonus: expected u as [H, K] (per head) or [B, T, H, K], got {list(getattr(u, 'shape', [])) or u}"
        )
    if u.shape[-1] != dynamics.q.shape[-1]:
        raise ValueError(
            f"bonus: last dimension {u.shape[-1]} does not match the key dimension K={dynamics.q.shape[-1]}"
        )
    if dynamics.log_decay is None:
        raise ValueError(
            "bonus: given without log_decay; the current token's bonus goes with a decayed state (RWKV-5/6: "
            "S_t = Diag(w_t) S_{t−1} + k_t v_tᵀ): pass the decay (log_decay = 0 for Λ = I)"
        )
    readout = resolve_readout(dynamics.readout)
    if readout.name != "identity" or not (isinstance(dynamics.normalizer, str) and dynamics.normalizer == "none"):
        raise ValueError(
            f"bonus: taken with the identity readout and normalizer='none' (RWKV-5/6), not readout={readout.name!r} "
            f"with normalizer={dynamics.normalizer if isinstance(dynamics.normalizer, str) else 'a tensor'!r}: a "
            "normalized row would need the bonus in its sum as well"
        )
    several = isinstance(dynamics.householder, Tensor) and dynamics.householder.dim() == 4
    if several or dynamics.decay_first or dynamics.outer_log_decay is not None:
        raise ValueError(
            "bonus: not taken with several Householder factors per step, decay_first or outer_log_decay (their "
            "tokens are several steps of the operator, or change the readout); the bonus reads one step's state"
        )
