"""LRU — linear recurrent unit (Orvieto et al. 2023, "Resurrecting recurrent neural networks for long sequences").

One MIMO complex diagonal system over N complex states, input and output the D channels::

    x_k = diag(λ) x_{k-1} + γ ⊙ (B u_k),     y_k = Re(C x_k) + D ⊙ u_k
    λ = exp(−exp(ν_log) + i·exp(θ_log)),     γ = exp(γ_log), initialized to √(1 − |λ|²)

with B, C complex and D real.  Ring init: |λ|² ~ U[r_min², r_max²] (uniform on the ring r_min ≤ |λ| ≤ r_max),
arg λ ~ U[0, max_phase]; Re B, Im B ~ N(0, 1/(2D)); Re C, Im C ~ N(0, 1/N); D ~ N(0, 1).  The γ normalization
keeps E|x_k|² of white-noise input independent of |λ|.
Computed by a parallel scan or a per-state FFT convolution (:class:`seqdyn.core.lti.DiagonalMIMO`).  The paper's
block puts an MLP/GLU after the LRU; here the mixer is the LRU (``activation="none"``, ``output="none"``).
MIMO: no scalar coefficients per channel; the DSF has one head with V = D.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from seqdyn.core import lti
from seqdyn.mixers._lti import Activation, LTIMixer, Output, OutputHead, as_complex, check_number, complex_normal
from seqdyn.mixers.base import check_choice, check_positive


class LRU(LTIMixer):
    """LRU: one complex diagonal MIMO recurrence with a ring initialization and γ normalization.

    Args:
        state_dim: the number N of complex states, shared by all channels (B: N × D, C: D × N).
        r_min: the smallest |λ| at initialization; |λ|² is uniform in [r_min², r_max²] (the LRU paper's
            long-range runs: r_min = 0.9, r_max = 0.999).
        r_max: the largest |λ| at initialization (≤ 1).
        max_phase: the largest phase arg λ at initialization, arg λ ~ U[0, max_phase] (LRU: 2π; π/10 on its
            long-range tasks).
    """

    name = "lru"
    scalar_coefficients = False

    def __init__(
        self,
        d_model: int,
        state_dim: int = 64,
        r_min: float = 0.0,
        r_max: float = 1.0,
        max_phase: float = 2 * math.pi,
        skip: bool = True,
        activation: Activation = "none",
        output: Output = "none",
    ):
        super().__init__(d_model)
        self.state_dim = check_positive("state_dim", state_dim)
        r_min, r_max = check_number("r_min", r_min, 0.0, 1.0), check_number("r_max", r_max, 0.0, 1.0)
        if not (r_min <= r_max and r_min < 1):
            raise ValueError(
                f"r_min, r_max: need 0 ≤ r_min ≤ r_max ≤ 1 and r_min < 1, got r_min={r_min}, r_max={r_max}"
            )
        self.r_min, self.r_max = r_min, r_max
        self.max_phase = check_number("max_phase", max_phase, 0.0)
        if self.max_phase <= 0:
            raise ValueError(f"max_phase: got {max_phase}; allowed: (0, inf)")
        check_choice("skip", skip, (False, True))
        real_dtype = torch.get_default_dtype()
        tiny = torch.finfo(torch.float64).tiny
        u1 = torch.rand(state_dim, dtype=torch.float64).clamp(min=tiny)
        u2 = torch.rand(state_dim, dtype=torch.float64).clamp(min=tiny)
        modulus_sq = u1 * (r_max**2 - r_min**2) + r_min**2
        self.nu_log = nn.Parameter(torch.log(-0.5 * torch.log(modulus_sq)).to(real_dtype))
        self.theta_log = nn.Parameter(torch.log(max_phase * u2).to(real_dtype))
        self.gamma_log = nn.Parameter(torch.log(torch.sqrt(1 - modulus_sq)).to(real_dtype))
        self.B = nn.Parameter(complex_normal(state_dim, d_model, std=1 / math.sqrt(2 * d_model)).to(real_dtype))
        self.C = nn.Parameter(complex_normal(d_model, state_dim, std=1 / math.sqrt(state_dim)).to(real_dtype))
        self.head = OutputHead(d_model, "learned" if skip else "none", activation, output)

    def system(self) -> lti.DiagonalMIMO:
        log_lam = torch.complex(-torch.exp(self.widened(self.nu_log)), torch.exp(self.widened(self.theta_log)))
        return lti.DiagonalMIMO(
            log_lam,
            torch.exp(self.widened(self.gamma_log))[:, None] * as_complex(self.widened(self.B)),
            as_complex(self.widened(self.C)),
        )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, state_dim={self.state_dim}, r_min={self.r_min}, r_max={self.r_max}"


MIXER = LRU
