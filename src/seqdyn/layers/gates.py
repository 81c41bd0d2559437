"""Decay parameterizations shared by several mixers (defined once here; each mixer file names the one it uses).

* :class:`MambaDecay` — ``g_t = Δ_t A`` with ``Δ_t = softplus(w_Δᵀ u_t + b_Δ)`` and ``A = −exp(A_log) < 0`` per
  head (Mamba-2, Gated DeltaNet; Sieber et al. 2025 §5 "Mamba-2 parameterization").
* :class:`GLADecay` — ``g_t = logsigmoid(W_2 W_1 u_t) / τ`` per key channel (GLA; Sieber et al. 2025 §5 "GLA
  parameterization").
* :class:`KDADecay` — ``g_t = −exp(A_log) softplus(W_2 W_1 u_t + b_Δ)`` per key channel, A per head (Kimi Delta
  Attention, Kimi Team 2025).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.layers.params import check_positive, keep_init


def inverse_softplus(y: Tensor) -> Tensor:
    """``x`` with ``softplus(x) = y`` (``y > 0``)."""
    return y + torch.log(-torch.expm1(-y))


def init_dt_bias(size: int, dt_min: float = 0.001, dt_max: float = 0.1, floor: float = 1e-4) -> Tensor:
    """Mamba's Δ bias: ``softplus(bias)`` log-uniform in ``[dt_min, dt_max]`` (Gu & Dao 2023, §3.6)."""
    if not 0 < dt_min <= dt_max:
        raise ValueError(f"dt_min, dt_max: expected 0 < dt_min <= dt_max, got {dt_min}, {dt_max}")
    dt = torch.exp(torch.rand(size) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    return inverse_softplus(dt.clamp(min=floor))


class MambaDecay(nn.Module):
    """``(g_t, Δ_t)`` ``[B, T, H]`` with ``g_t = −exp(A_log) Δ_t``, ``Δ_t = softplus(W_Δ u_t + b_Δ)``, clamped to
    ``[floor, ceiling]`` where they are given (``mamba_ssm``'s ``dt_limit``).

    ``A ~ U(a_init_range)`` and ``b_Δ`` from :func:`init_dt_bias` (Mamba-2).  ``project=False`` takes the
    pre-activation ``W_Δ u_t`` from the caller (Mamba-2 computes it inside its fused input projection).
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        a_init_range: tuple[float, float] = (1.0, 16.0),
        project: bool = True,
        floor: float = 0.0,
        ceiling: float | None = None,
    ):
        super().__init__()
        if not 0 < a_init_range[0] <= a_init_range[1]:
            raise ValueError(f"a_init_range: expected 0 < low <= high, got {a_init_range}")
        if floor < 0 or (ceiling is not None and ceiling <= floor):
            raise ValueError(f"dt_floor, dt_ceiling: expected 0 ≤ dt_floor < dt_ceiling, got {floor}, {ceiling}")
        self.floor, self.ceiling = floor, ceiling
        self.proj = nn.Linear(d_model, heads, bias=False) if project else None
        self.dt_bias = nn.Parameter(init_dt_bias(heads, dt_min, dt_max))
        self.a_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(*a_init_range)))
        keep_init(self.dt_bias, self.a_log)

    def forward(self, u: Tensor) -> tuple[Tensor, Tensor]:
        raw = self.proj(u) if self.proj is not None else u
        step = F.softplus(raw + self.dt_bias)
        if self.floor > 0 or self.ceiling is not None:
            step = step.clamp(min=self.floor, max=self.ceiling)
        return -torch.exp(self.a_log) * step, step


class GLADecay(nn.Module):
    """``g_t = logsigmoid(W_2 W_1 u_t) / τ`` ``[B, T, width]`` with a rank-r bottleneck (GLA, Yang et al. 2023)."""

    def __init__(self, d_model: int, width: int, low_rank: int = 16, normalizer: float = 16.0):
        super().__init__()
        if normalizer <= 0:
            raise ValueError(f"gate_normalizer: expected τ > 0, got {normalizer}")
        self.normalizer = normalizer
        self.down = nn.Linear(d_model, check_positive("gate_low_rank", low_rank), bias=False)
        self.up = nn.Linear(low_rank, width, bias=True)

    def forward(self, u: Tensor) -> Tensor:
        return F.logsigmoid(self.up(self.down(u))) / self.normalizer


class KDADecay(nn.Module):
    """``g_t = −exp(A_log) ⊙ softplus(W_2 W_1 u_t + b_Δ)`` ``[B, T, H, K]``: Mamba-2's gate made channel-wise through a
    rank-r bottleneck (Kimi Delta Attention, `Kimi Team 2025 <https://arxiv.org/abs/2510.26692>`_),
    ``A ~ U(a_init_range)`` per head and ``b_Δ`` per channel, initialized at 0 (flash-linear-attention's
    ``KimiDeltaAttention``).  With a ``lower_bound`` ``L < 0``: ``g_t = L · σ(exp(A_log) ⊙ (W_2 W_1 u_t + b_Δ))``, a
    log-decay bounded in (L, 0) (flash-linear-attention's ``safe_gate``; Ling 3 / Bailing-hybrid's KDA layers)."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        key_dim: int,
        low_rank: int,
        a_init_range=(1.0, 16.0),
        lower_bound: float | None = None,
    ):
        super().__init__()
        if not 0 < a_init_range[0] <= a_init_range[1]:
            raise ValueError(f"a_init_range: expected 0 < low <= high, got {a_init_range}")
        if lower_bound is not None and not lower_bound < 0:
            raise ValueError(f"decay_lower_bound: expected a negative log-decay bound, got {lower_bound}")
        self.heads, self.lower_bound = heads, lower_bound
        self.down = nn.Linear(d_model, check_positive("gate_low_rank", low_rank), bias=False)
        self.up = nn.Linear(low_rank, heads * key_dim, bias=False)
        self.a_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(*a_init_range)))
        self.dt_bias = nn.Parameter(torch.zeros(heads * key_dim))
        keep_init(self.a_log, self.dt_bias)

    def forward(self, u: Tensor) -> Tensor:
        shifted = (self.up(self.down(u)) + self.dt_bias).unflatten(-1, (self.heads, -1))  # [B, T, H, K]
        rate = torch.exp(self.a_log)[:, None]
        if self.lower_bound is not None:
            return self.lower_bound * torch.sigmoid(rate * shifted)
        return -rate * F.softplus(shifted)
