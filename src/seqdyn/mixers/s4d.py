"""S4D — diagonal S4 (Gu et al. 2022b, "On the parameterization and initialization of diagonal SSMs").

Per channel h, a diagonal continuous system ``x' = diag(A) x + B u``, ``y = 2 Re(C x)`` over N/2 complex states
(the conjugate halves of a real N-state system), discretized by zero-order hold::

    Ā = exp(ΔA),  B̄ = (exp(ΔA) − 1)/A · B,   x_k = Ā x_{k-1} + B̄ u_k,   y_k = 2 Re(C x_k)

kernel K_j = 2 Re(Σ_n C_n B̄_n exp(jΔA_n)), computed by FFT convolution.  Re A = −exp(·) < 0.
Init: S4D-Lin ``A_n = −½ + iπn`` or S4D-Inv ``A_n = −½ + i(N/π)(N/(2n+1) − 1)``; B = 1; C ~ 𝒩_ℂ(0, 1)
(Re, Im ~ N(0, ½)); Δ log-uniform in [dt_min, dt_max].  Layer (S4D): ``GLU(W GELU(y + D ⊙ u))``, D ~ N(0, 1).

Coefficient form: per channel, φ = identity with the LTI coefficients α_ij = K_{i-j}.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import nn

from seqdyn.core import lti
from seqdyn.mixers._lti import (
    Activation,
    LTIMixer,
    Output,
    OutputHead,
    as_complex,
    check_dt,
    check_even,
    complex_normal,
    log_uniform,
    s4d_init,
)
from seqdyn.mixers.base import check_choice

Init = Literal["lin", "inv"]
INITS = get_args(Init)


class S4D(LTIMixer):
    """S4D: a diagonal complex SSM per channel (S4 without the low-rank term), by FFT convolution.

    Args:
        state_dim: the number N of real states per channel (even: N/2 complex ones of a conjugate pair).
        init: the initialization of A: lin (S4D-Lin, A_n = −½ + iπn) or inv (S4D-Inv, −½ + i(N/π)(N/(2n+1) − 1)).
    """

    name = "s4d"

    def __init__(
        self,
        d_model: int,
        state_dim: int = 64,
        init: Init = "lin",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        skip: bool = True,
        activation: Activation = "gelu",
        output: Output = "glu",
    ):
        super().__init__(d_model)
        self.state_dim = check_even("state_dim", state_dim)
        self.init = check_choice("init", init, INITS)
        dt_min, dt_max = check_dt(dt_min, dt_max)
        check_choice("skip", skip, (False, True))
        real_dtype = torch.get_default_dtype()
        modes = state_dim // 2
        A = s4d_init(modes, init).expand(d_model, -1)
        self.log_neg_re = nn.Parameter(torch.log(-A.real).to(real_dtype))  # [H, N/2]
        self.im = nn.Parameter(A.imag.clone().to(real_dtype))
        B = torch.zeros(d_model, modes, 2, dtype=real_dtype)
        B[..., 0] = 1.0
        self.B = nn.Parameter(B)
        self.C = nn.Parameter(complex_normal(d_model, modes, std=math.sqrt(0.5)).to(real_dtype))
        self.log_dt = nn.Parameter(log_uniform((d_model,), dt_min, dt_max).to(real_dtype))
        self.head = OutputHead(d_model, "learned" if skip else "none", activation, output)

    def system(self) -> lti.DiagonalSISO:
        A = torch.complex(-torch.exp(self.widened(self.log_neg_re)), self.widened(self.im))
        log_lam, factor = lti.zoh(A, torch.exp(self.widened(self.log_dt))[:, None])
        return lti.DiagonalSISO(
            log_lam, as_complex(self.widened(self.B)) * factor, 2 * as_complex(self.widened(self.C))
        )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, state_dim={self.state_dim}, init={self.init!r}"


MIXER = S4D
