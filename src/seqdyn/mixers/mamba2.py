"""Mamba-2 / SSD (Dao & Gu 2024, "state space duality"; Sieber et al. 2025 Table 1).

(The "SSD" of Sieber et al. 2024's MQAR experiments is the bare S6 block with one scalar A: :mod:`seqdyn.mixers.ssd`.)

Per head h (head dim P, state N; B and C shared by all heads, or by each of ``groups`` groups of heads)::

    Δ_t = softplus(W_Δ u_t + b_Δ) (clamped to [dt_floor, dt_ceiling]),   A_h = −exp(A_log_h) < 0
    S_t = exp(Δ_t A_h) S_{t-1} + Δ_t B_t x_tᵀ,   y_t = S_tᵀ C_t + D_h x_t

Coefficient form: φ = identity, Λ_t = exp(Δ_t A_h)·I (scalar decay), b_t = Δ_t, η = 1, with q = C, k = B.
The block around it (all optional): a short causal convolution with SiLU on (x, B, C), and the output
``RMSNorm(y ⊙ SiLU(z))`` (ε = 1e-5 as mamba_ssm, or ``norm_eps``; with ``gate_norm=False``, ``y ⊙ SiLU(z)`` without
the RMSNorm, e.g. Falcon-H1) before the out-projection.  Head size P = 64
(the paper's) where it divides ``expand·d_model``, else the largest divisor below 64.  Initialization as in Mamba-2:
A ~ U(1, 16), Δ log-uniform in [dt_min, dt_max] through the inverse softplus of the bias, D = 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import GatedRMSNorm, ShortConv
from seqdyn.layers.gates import MambaDecay
from seqdyn.layers.params import check_positive_eps, scaled_width
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_choice, check_positive, keep_init


class Mamba2(CoefficientMixer):
    """Mamba-2 (SSD): a selective SSM with a scalar decay per head, with Mamba-2's block around it.

    Args:
        state_dim: the state size N per head: the dimension of B_t (keys) and C_t (queries), shared by the heads.
        expand: the inner width is expand·d_model (x and z; a whole number of channels), split into heads of
            head_dim channels.
        head_dim: the head size P (the values per head); None: 64 where it divides expand·d_model, else the
            largest divisor below 64.
        short_conv: a short causal depthwise convolution with SiLU on (x, B, C) before the SSM, as Mamba-2.
        conv_size: the width of that convolution (taps, the current token included).
        gate: the output RMSNorm(y ⊙ SiLU(z)) with a gate z from the input projection, as Mamba-2; False: y goes
            straight to the output projection.
        gate_norm: with the gate, RMSNorm(y ⊙ SiLU(z)); False: y ⊙ SiLU(z) without the RMSNorm (e.g. Falcon-H1).
        dt_min: the smallest step Δ at initialization: b_Δ is set so that Δ = softplus(b_Δ) is log-uniform in
            [dt_min, dt_max].
        dt_max: the largest step Δ at initialization.
        a_init_range: (low, high) of the decay rate's initialization, −A_h ~ U(low, high) per head (Mamba-2: 1 to
            16).
        groups: Mamba-2's ngroups: the heads split into this many consecutive groups, each with its own B_t and
            C_t (keys and queries), and the gated RMSNorm normalizes each group's channels on its own; 1: one B_t,
            C_t for all heads.
        norm_eps: the ε of the gated RMSNorm, RMSNorm(v) = v / √(mean(v²) + ε) (mamba_ssm's 1e-5).
        dt_floor: Δ_t ← max(Δ_t, dt_floor) (mamba_ssm's dt_limit[0], e.g. Nemotron-H's time_step_min); 0: not
            clamped.
        dt_ceiling: Δ_t ← min(Δ_t, dt_ceiling) (mamba_ssm's dt_limit[1]); None: not clamped.
    """

    name = "mamba2"
    ssm_parameter_names = ("dt_bias", "a_log")  # Δ and A

    def __init__(
        self,
        d_model: int,
        state_dim: int = 64,
        expand: float = 2,
        head_dim: int | None = None,
        short_conv: bool = True,
        conv_size: int = 4,
        gate: bool = True,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        a_init_range: tuple[float, float] = (1.0, 16.0),
        chunk_size: int = 64,
        groups: int = 1,
        norm_eps: float = 1e-5,
        dt_floor: float = 0.0,
        dt_ceiling: float | None = None,
        gate_norm: bool = True,
    ):
        super().__init__(d_model, chunk_size)
        self.state_dim = check_positive("state_dim", state_dim)
        self.inner = scaled_width("expand", d_model, expand)
        self.head_dim = _default_head_dim(self.inner) if head_dim is None else check_positive("head_dim", head_dim)
        if self.inner % self.head_dim:
            raise ValueError(
                f"head_dim: {self.head_dim} does not divide expand·d_model={self.inner}; give a divisor of it or leave "
                "head_dim unset"
            )
        self.heads = self.inner // self.head_dim
        self.groups = check_positive("groups", groups)
        if self.heads % groups:
            raise ValueError(f"groups: {groups} does not divide the {self.heads} heads; give a divisor of it")
        self.gate = gate
        conv_channels = self.inner + 2 * groups * state_dim
        self.in_proj = nn.Linear(d_model, (self.inner if gate else 0) + conv_channels + self.heads, bias=False)
        if short_conv:
            self.convs["xbc"] = ShortConv(conv_channels, conv_size)
        self.decay = MambaDecay(
            d_model, self.heads, dt_min, dt_max, a_init_range, project=False, floor=dt_floor, ceiling=dt_ceiling
        )
        self.skip = nn.Parameter(torch.ones(self.heads))  # D
        keep_init(self.skip)  # Δ bias and A: MambaDecay keeps them
        check_choice("gate_norm", gate_norm, (True, False))
        eps = check_positive_eps("norm_eps", norm_eps)
        self.norm = GatedRMSNorm(self.inner, eps=eps, groups=groups) if gate and gate_norm else None
        self.out_proj = nn.Linear(self.inner, d_model, bias=False)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, tuple[Tensor, Tensor | None]]:
        projected = self.in_proj(x)
        grouped = self.groups * self.state_dim
        z, xbc, dt = projected.split([self.inner if self.gate else 0, self.inner + 2 * grouped, self.heads], -1)
        if "xbc" in self.convs:
            xbc = self.convolve("xbc", xbc, state)
        values, keys, queries = xbc.split([self.inner, grouped, grouped], dim=-1)
        values = values.unflatten(-1, (self.heads, self.head_dim))
        # [B, T, G·N] → [B, T, G, N], each group's B and C repeated for its heads ([B, T, H, N]); G = 1 broadcasts
        keys, queries = (t.unflatten(-1, (self.groups, self.state_dim)) for t in (keys, queries))
        if self.groups > 1:
            keys, queries = (t.repeat_interleave(self.heads // self.groups, dim=2) for t in (keys, queries))
        log_decay, step = self.decay(dt)  # Δ A and Δ, [B, T, H]
        inputs = Dynamics(q=queries, k=keys, v=values, log_decay=log_decay, scale=step)
        return inputs, (values, z if self.gate else None)

    def core_output(self, core: Tensor, extras: tuple[Tensor, Tensor | None]) -> Tensor:
        values, z = extras
        y = (core + self.skip[:, None] * values).flatten(2)
        if not self.gate:
            return self.out_proj(y)
        return self.out_proj(y * F.silu(z) if self.norm is None else self.norm(y, z))

    def extra_repr(self) -> str:
        groups = f", groups={self.groups}" if self.groups > 1 else ""
        return (
            f"d_model={self.d_model}, heads={self.heads}, head_dim={self.head_dim}, state_dim={self.state_dim}{groups}"
        )


def _default_head_dim(inner: int, preferred: int = 64) -> int:
    """Mamba-2's head size P = 64 when it divides the inner width ``expand·d_model``, else the largest divisor of
    the inner width below 64 (d_model 16 → 32, 24 → 48, 48 → 48)."""
    return max(p for p in range(1, preferred + 1) if inner % p == 0)


MIXER = Mamba2
