"""S5 — simplified state space layer: one MIMO complex diagonal system (Smith et al. 2023).

With the state matrix diagonalized, Λ = V⁻¹AV, the P-dimensional state of one system whose input and output are
the D channels decouples into scalar recurrences::

    x̃_{k,i} = λ̄_i x̃_{k-1,i} + (B̄ u_k)_i,     y_k = Re(C̃ x̃_k) + D ⊙ u_k

discretized per state by zero-order hold: λ̄ = exp(ΛΔ), B̄ = (λ̄ − 1)/Λ ⊙ B̃.  P = ``state_dim`` counts real
dimensions: P/2 complex states of one conjugate half, read out as 2 Re(C̃ x̃) (S5's ``conj_sym``).  Computed by
a parallel scan or, equally exactly, a per-state FFT convolution (:class:`seqdyn.core.lti.DiagonalMIMO`).

Init (S5): Λ = the eigenvalues −½ + iω of the normal part of HiPPO-LegS ("HiPPO-N"), in ``blocks`` identical
diagonal blocks of size P/blocks; B̃ = V⁻¹B with B ~ N(0, 1/D) (LeCun normal), C̃ = C V with Re C, Im C ~ N(0, 1)
(S5 truncates these normals; we do not); Δ ∈ ℝ^{P/2} log-uniform in [dt_min, dt_max]; D ~ N(0, 1).  Re Λ is a
free parameter as in S5; ``clip_eigs=True`` clamps it to ≤ −1e-4.  Layer (S5 "half_glu1"): GELU, then
``y ⊙ σ(W y + b)``.  MIMO: no scalar coefficients per channel; the DSF has one head with V = D.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from seqdyn.core import lti
from seqdyn.mixers._lti import (
    Activation,
    LTIMixer,
    Output,
    OutputHead,
    as_complex,
    as_pair,
    check_dt,
    check_even,
    hippo_legs_nplr,
    log_uniform,
)
from seqdyn.mixers.base import check_choice, check_positive


class S5(LTIMixer):
    """S5: one MIMO diagonal SSM over all channels, initialized from the normal part of HiPPO-LegS.

    Args:
        state_dim: the state size P in real dimensions (even: P/2 complex states of one conjugate half).
        blocks: the number of identical diagonal blocks of size P / blocks that Λ is initialized in (S5's J).
        clip_eigs: clamp Re Λ to ≤ −1e-4, so every mode stays stable; False: Re Λ free, as S5 by default.
    """

    name = "s5"
    scalar_coefficients = False

    def __init__(
        self,
        d_model: int,
        state_dim: int = 64,
        blocks: int = 1,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        clip_eigs: bool = False,
        skip: bool = True,
        activation: Activation = "gelu",
        output: Output = "half_glu",
    ):
        super().__init__(d_model)
        self.state_dim = check_even("state_dim", state_dim)
        self.blocks = check_positive("blocks", blocks)
        if state_dim % blocks or (state_dim // blocks) % 2:
            raise ValueError(f"blocks: {blocks} blocks of state_dim={state_dim} must each have an even size")
        dt_min, dt_max = check_dt(dt_min, dt_max)
        self.clip_eigs = check_choice("clip_eigs", clip_eigs, (False, True))
        check_choice("skip", skip, (False, True))
        real_dtype = torch.get_default_dtype()
        lam, _, _, vectors = hippo_legs_nplr(state_dim // blocks)
        lam = lam.repeat(blocks)
        V = torch.block_diag(*[vectors] * blocks)  # [P, P/2]
        B = torch.randn(state_dim, d_model, dtype=torch.float64) / math.sqrt(d_model)
        C = torch.complex(
            torch.randn(d_model, state_dim, dtype=torch.float64), torch.randn(d_model, state_dim, dtype=torch.float64)
        )
        self.lambda_re = nn.Parameter(lam.real.to(real_dtype))
        self.lambda_im = nn.Parameter(lam.imag.to(real_dtype))
        self.B = nn.Parameter(as_pair(V.conj().T @ B.to(torch.complex128)))  # [P/2, D, 2]
        self.C = nn.Parameter(as_pair(C @ V))  # [D, P/2, 2]
        self.log_step = nn.Parameter(log_uniform((state_dim // 2,), dt_min, dt_max).to(real_dtype))
        self.head = OutputHead(d_model, "learned" if skip else "none", activation, output)

    def system(self) -> lti.DiagonalMIMO:
        real, imag, log_step, B, C = map(self.widened, (self.lambda_re, self.lambda_im, self.log_step, self.B, self.C))
        real = real.clamp(max=-1e-4) if self.clip_eigs else real
        log_lam, factor = lti.zoh(torch.complex(real, imag), torch.exp(log_step))
        return lti.DiagonalMIMO(log_lam, factor[:, None] * as_complex(B), 2 * as_complex(C))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, state_dim={self.state_dim}, blocks={self.blocks}"


MIXER = S5
