"""S6, the selective SSM of Mamba-1 (Gu & Dao 2023; Sieber et al. 2024 eqs. 4 and 18, appendix D).

Per channel c of the inner width I (state dim N, B and C shared by all channels)::

    Δ_t = softplus(W_Δ (W_r x_t) + b_Δ)              (low-rank dt projection, rank R = ceil(D/16))
    h_t^c = exp(Δ_t^c A^c) ⊙ h_{t-1}^c + Δ_t^c B_t x_t^c,   A^c = −exp(A_log^c) ∈ R^N (diagonal, < 0)
    y_t^c = C_tᵀ h_t^c + D^c x_t^c                                                  (Sieber et al. 2024 eq. 4)

Coefficient form, one head per channel (H = I, K = N, V = 1): φ = identity, Λ_t = diag(exp(Δ_t^c A^c))
(diagonal log decay ``Δ ⊗ A``), b_t = Δ_t^c, η = 1, q = C_t and k = B_t shared by every channel (by every channel
of its head, with ``heads``), v = x^c; the skip D stays outside the core.  The DSF is Sieber et al. 2024 eq. 18:
Λ_i = exp((Δ_i ⊗ I_N) ⊙ A), B_i = Δ_i ⊗ b_i, C_i = I ⊗ c_iᵀ.

The block around it is Mamba-1's (``mamba_simple.Mamba``)::

    x, z = W_in u                          (x: I = expand·D channels; z only with ``gate``;
                                            x = u without ``input_projection``)
    x = SiLU(conv(x))                      (``short_conv``: depthwise causal conv of width 4)
    Δ, B, C from W_x x;  y = S6(x) + D ⊙ x
    y = y ⊙ SiLU(z)                        (``gate``)
    out = W_out y

``short_conv=False, gate=False`` is the bare S6 block of Sieber et al. 2024's experiments (appendix I: "we do not
implement the pre-convolution on the input or the SiLU activations").  ``scalar_decay=True`` learns one A = a·1
for every channel and state (A = −exp(a_log), a_log = 0: |A| = 1 at the start), so that Λ_t^c = exp(Δ_t^c a)·I is
a scalar decay per channel (Sieber et al. 2024 eq. 22's A = aI); with ``dt_rank=1`` this is the SSD of the
experiments of Sieber et al. 2024, :mod:`seqdyn.mixers.ssd`.  Initialization as in Mamba-1: S4D-Real
A^c_n = −(n + 1), Δ = softplus(b_Δ) log-uniform in [dt_min, dt_max] (floor 1e-4), W_Δ ~ U(±R^-½), D = 1.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import ShortConv
from seqdyn.layers.gates import init_dt_bias
from seqdyn.layers.headwise import HeadwiseLinear
from seqdyn.mixers.base import (
    CoefficientMixer,
    MixerState,
    check_choice,
    check_heads,
    check_positive,
    keep_init,
    scaled_width,
)


def s4d_real(channels: int, state_dim: int) -> Tensor:
    """``log(−A)`` of the S4D-Real initialization ``A_n = −(n + 1)``, the same for every channel ``[I, N]``."""
    return torch.log(torch.arange(1, state_dim + 1, dtype=torch.get_default_dtype())).repeat(channels, 1)


def check_dt_rank(dt_rank, d_model: int) -> int:
    """``"auto"`` is Mamba's ``ceil(d_model / 16)``."""
    if dt_rank == "auto":
        return math.ceil(d_model / 16)
    return check_positive("dt_rank", dt_rank)


class S6(CoefficientMixer):
    """S6, Mamba-1's selective SSM: a diagonal decay Δ_t ⊗ A per channel, with Mamba-1's block around it.

    Args:
        state_dim: the state size N per channel: the dimension of B_t (keys) and C_t (queries) (Mamba: 16).
        expand: the inner width is expand·d_model channels, each an SSM of N states.
        dt_rank: the rank R of the low-rank Δ projection; "auto": ceil(d_model / 16), as Mamba.
        short_conv: a short causal depthwise convolution with SiLU on x before the SSM, as Mamba-1.
        conv_size: the width of that convolution (taps, the current token included).
        gate: multiply y by SiLU(z) with z from the input projection, as Mamba-1; False: y goes straight to the
            output projection.
        dt_min: the smallest step Δ at initialization: b_Δ is set so that softplus(b_Δ) is log-uniform in
            [dt_min, dt_max].
        dt_max: the largest step Δ at initialization.
        input_projection: x = W_in u (and z, with ``gate``), as Mamba-1; False: x = u itself (needs expand = 1 and
            no gate; Sieber et al. 2024's SSD).
        scalar_decay: one learned A = a·1 shared by every channel and state (a = −1 at the start), so each
            channel decays by the scalar exp(Δ_t^c a) (Sieber et al. 2024's SSD); False: Mamba-1's diagonal A
            per channel.
        bcdt_rms_eps: B_t, C_t and the low-rank Δ input W_r x_t each divided by √(mean of its squares + ε) before
            use — weightless RMS norms — with this ε (e.g. Falcon-Mamba, transformers' ``mixer_rms_eps``, 1e-6);
            None: none, as Mamba-1.
        bcdt_norm_weights: those RMS norms each with a learned weight per channel (Jamba's ``dt_layernorm``,
            ``b_layernorm``, ``c_layernorm``); needs bcdt_rms_eps.
        heads: the inner channels in this many equal groups, each with its own Δ, B and C projected from its own
            channels (a block-diagonal W_x and W_Δ: Zamba's Mamba heads, Glorioso et al. 2024); 1: Mamba-1's one
            B and C for all channels.
    """

    name = "s6"
    ssm_parameter_names = ("dt_proj.weight", "dt_proj.bias", "a_log")  # Δ and A

    def __init__(
        self,
        d_model: int,
        state_dim: int = 16,
        expand: float = 2,
        dt_rank: int | Literal["auto"] = "auto",
        short_conv: bool = True,
        conv_size: int = 4,
        gate: bool = True,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        input_projection: bool = True,
        scalar_decay: bool = False,
        chunk_size: int = 64,
        bcdt_rms_eps: float | None = None,
        bcdt_norm_weights: bool = False,
        heads: int = 1,
    ):
        super().__init__(d_model, chunk_size)
        self.bcdt_rms_eps = _check_bcdt_norms(bcdt_rms_eps, bcdt_norm_weights)
        self.scalar_decay = check_choice("scalar_decay", scalar_decay, (True, False))
        self.state_dim = check_positive("state_dim", state_dim)
        self.inner = scaled_width("expand", d_model, expand)
        self.dt_rank = check_dt_rank(dt_rank, d_model)
        self.gate = check_choice("gate", gate, (True, False))
        check_choice("short_conv", short_conv, (True, False))
        check_positive("conv_size", conv_size)
        if not check_choice("input_projection", input_projection, (True, False)) and (gate or self.inner != d_model):
            raise ValueError(
                "input_projection: False takes x = u, which leaves no gate z and no room for an "
                f"expanded width (gate={gate}, expand={expand}); set gate=False and expand=1, or keep "
                "the projection"
            )
        self.in_proj = (
            nn.Linear(d_model, self.inner * (2 if gate else 1), bias=False) if input_projection else nn.Identity()
        )
        if short_conv:
            self.convs["x"] = ShortConv(self.inner, conv_size)  # with SiLU
        self.heads = check_heads(heads, self.inner, "expand·d_model")
        self.x_proj, self.dt_proj = self._projections(self.heads)
        self.a_log = nn.Parameter(torch.zeros(()) if scalar_decay else s4d_real(self.inner, state_dim))
        widths = (self.dt_rank, state_dim, state_dim)
        self.bcdt_norms = nn.ParameterList([nn.Parameter(torch.ones(w)) for w in widths]) if bcdt_norm_weights else None
        self.skip = nn.Parameter(torch.ones(self.inner))  # D
        self.out_proj = nn.Linear(self.inner, d_model, bias=False)
        with torch.no_grad():
            nn.init.uniform_(self.dt_proj.weight, -(self.dt_rank**-0.5), self.dt_rank**-0.5)
            self.dt_proj.bias.copy_(init_dt_bias(self.inner, dt_min, dt_max).view_as(self.dt_proj.bias))
        keep_init(self.dt_proj.weight, self.dt_proj.bias, self.a_log, self.skip)

    def _projections(self, heads: int) -> tuple[nn.Module, nn.Module]:
        """``W_x`` (channels → Δ's rank, B, C) and ``W_Δ`` (rank → Δ per channel): Linear maps, or one per head."""
        width = self.dt_rank + 2 * self.state_dim
        if heads == 1:
            return nn.Linear(self.inner, width, bias=False), nn.Linear(self.dt_rank, self.inner, bias=True)
        channels = self.inner // heads
        return HeadwiseLinear(heads, channels, width), HeadwiseLinear(heads, self.dt_rank, channels, bias=True)

    @property
    def A(self) -> Tensor:  # noqa: N802 — the paper's name
        """The diagonal state matrices ``A`` ``[I, N]`` (negative); with ``scalar_decay`` the one scalar ``a``."""
        return -torch.exp(self.a_log)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, tuple[Tensor, Tensor | None]]:
        x, z = self.in_proj(x).split([self.inner, self.inner if self.gate else 0], dim=-1)
        if self.convs:
            x = self.convolve("x", x, state)
        projected = self.x_proj(x).unflatten(-1, (self.heads, -1))  # [B, T, heads, R + 2N]
        dt, b, c = projected.split([self.dt_rank, self.state_dim, self.state_dim], dim=-1)
        if self.bcdt_rms_eps is not None:  # RMS norms of Δ's input, B and C (with weights, or without)
            dt, b, c = (t * torch.rsqrt(t.square().mean(-1, keepdim=True) + self.bcdt_rms_eps) for t in (dt, b, c))
            if self.bcdt_norms is not None:
                dt, b, c = (t * weight for t, weight in zip((dt, b, c), self.bcdt_norms))
        step = F.softplus(self.dt_proj(dt.flatten(-2)))  # Δ [B, T, I]
        if self.scalar_decay:  # g = Δ a, one scalar per channel
            decay = dict(log_decay=step * self.A)
        else:  # g = Δ ⊗ A, never formed by the scan
            decay = dict(log_decay=step, decay_rate=self.A)
        if self.heads > 1:  # [B, T, heads, N] -> [B, T, I, N]: each channel its head's B and C
            b, c = (t.repeat_interleave(self.inner // self.heads, dim=2) for t in (b, c))
        inputs = Dynamics(q=c, k=b, v=x.unsqueeze(-1), scale=step, **decay)
        return inputs, (x, z if self.gate else None)

    def core_output(self, core: Tensor, extras: tuple[Tensor, Tensor | None]) -> Tensor:
        x, z = extras
        y = core.squeeze(-1) + self.skip * x
        return self.out_proj(y * F.silu(z) if self.gate else y)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, inner={self.inner}, state_dim={self.state_dim}, dt_rank={self.dt_rank}, "
            f"gate={self.gate}"
            + (", scalar_decay=True" if self.scalar_decay else "")
            + (f", heads={self.heads}" if self.heads > 1 else "")
        )


def _check_bcdt_norms(eps: float | None, weights: bool) -> float | None:
    """The ε of the RMS norms of Δ's input, B and C (None: none), and whether they have weights (only with an ε)."""
    if eps is not None and not eps > 0:
        raise ValueError(f"bcdt_rms_eps: expected an ε > 0 or None, got {eps!r}")
    if check_choice("bcdt_norm_weights", weights, (True, False)) and eps is None:
        raise ValueError("bcdt_norm_weights: weights of the RMS norms of Δ, B and C need bcdt_rms_eps (their ε)")
    return eps


MIXER = S6
