"""DSS-EXP — diagonal state space, zero-order hold (Gupta et al. 2022 §2.1 "Comparison with DSS").

The continuous diagonal system ``x'(t) = diag(Λ) x(t) + 1·u(t)``, ``y(t) = w·x(t)`` discretized with step Δ
(zero-order hold) is the DLR (Gupta et al. 2022 §2.1)::

    x_k = diag(exp(ΔΛ)) x_{k-1} + 1·u_k,      y_k = Re⟨w ⊙ (exp(ΔΛ) − 1)/Λ, x_k⟩

i.e. λ = exp(ΔΛ), kernel K_j = Re(Σ_n w_n (exp(ΔΛ_n) − 1)/Λ_n · exp(jΔΛ_n)), computed by FFT convolution.
Λ ∈ ℂ^N is shared by the H channels, Δ_h and w_h ∈ ℂ^N are per channel; Re Λ = −exp(·) < 0.
Init: Λ_n = −½ + 2πin (``init="lin2pi"``, Gupta et al. 2022 §A, the DSS-EXP runs), or S4D-Lin / S4D-Inv; Δ log-uniform
in [dt_min, dt_max]; Re w, Im w ~ N(0, 1).  Layer as S4's: ``GLU(W GELU(y + D ⊙ u))``, D ~ N(0, 1).

Coefficient form: per channel, φ = identity with the LTI coefficients α_ij = K_{i-j}.
"""

from __future__ import annotations

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
    complex_normal,
    log_uniform,
    s4d_init,
)
from seqdyn.mixers.base import check_choice, check_positive

Init = Literal["lin2pi", "lin", "inv"]
INITS = get_args(Init)


class DSSExp(LTIMixer):
    """DSS-EXP: a diagonal complex SSM discretized by zero-order hold, computed by FFT convolution.

    Args:
        state_dim: the number N of complex states Λ_n, shared by the channels.
        init: the initialization of Λ: lin2pi (Λ_n = −½ + 2πin, the DSS-EXP runs of Gupta et al. 2022), lin (S4D-Lin,
            −½ + iπn) or inv (S4D-Inv, −½ + i(N/π)(N/(2n+1) − 1)).
    """

    name = "dss_exp"

    def __init__(
        self,
        d_model: int,
        state_dim: int = 64,
        init: Init = "lin2pi",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        skip: bool = True,
        activation: Activation = "gelu",
        output: Output = "glu",
    ):
        super().__init__(d_model)
        self.state_dim = check_positive("state_dim", state_dim)
        self.init = check_choice("init", init, INITS)
        dt_min, dt_max = check_dt(dt_min, dt_max)
        check_choice("skip", skip, (False, True))
        real_dtype = torch.get_default_dtype()
        lam = s4d_init(state_dim, init)
        self.log_neg_re = nn.Parameter(torch.log(-lam.real).to(real_dtype))  # Re Λ = −exp(·)
        self.im = nn.Parameter(lam.imag.to(real_dtype))
        self.W = nn.Parameter(complex_normal(d_model, state_dim, std=1.0).to(real_dtype))
        self.log_dt = nn.Parameter(log_uniform((d_model,), dt_min, dt_max).to(real_dtype))
        self.head = OutputHead(d_model, "learned" if skip else "none", activation, output)

    def system(self) -> lti.DiagonalSISO:
        lam = torch.complex(-torch.exp(self.widened(self.log_neg_re)), self.widened(self.im))
        log_lam, factor = lti.zoh(lam, torch.exp(self.widened(self.log_dt))[:, None])  # [H, N]
        return lti.DiagonalSISO(log_lam, None, as_complex(self.widened(self.W)) * factor)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, state_dim={self.state_dim}, init={self.init!r}"


MIXER = DSSExp
