"""S4 — structured state space with the HiPPO-LegS matrix (Gu et al. 2022a).

Per channel h, ``x'(t) = A x(t) + B u(t)``, ``y = C x`` with A initialized to HiPPO-LegS (Gu et al. 2020)::

    A_nk = −√(2n+1)√(2k+1) (n > k),   −(n+1) (n = k),   0 (n < k);      B_n = √(2n+1)

in its normal-plus-low-rank form A = V (diag Λ − p p*) V* (V unitary; S4 §3), parameterized by the N/2 values
of Λ, p, B and C of one conjugate half.  The conjugate-closed system is real; it is run in the real coordinates
r = (Re z, Im z) of the first half z (N real states):

    A_r = [[Re(X+Y), Im(Y−X)], [Im(X+Y), Re(X−Y)]],  X = diag Λ − p p*,  Y = −p pᵀ;  B_r = (Re B, Im B);
    C_r = (2 Re C, −2 Im C)

and discretized exactly by zero-order hold: Ā = exp(ΔA_r), B̄ = A_r⁻¹(Ā − I)B_r (one matrix
exponential).  The kernel K̄ = (C B̄, C Ā B̄, C Ā² B̄, …) is built from Krylov blocks and applied by FFT
(:class:`seqdyn.core.lti.DenseSISO`).  HiPPO-LegS is far from normal (its eigenvector matrix has entries ~2^{4N/3},
S4 Lemma 3.2), so a diagonalization would not be exact in floating point: the transition stays dense.

Init (S4): Λ, p, B from HiPPO-LegS (``n_ssm`` independent copies, default one per channel); C ~ 𝒩_ℂ(0, 1);
Δ log-uniform in [dt_min, dt_max].  Layer: ``GLU(W GELU(y + D ⊙ u))``, D ~ N(0, 1).
Coefficient form: per channel, φ = identity with the LTI coefficients α_ij = K̄_{i-j}.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

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
    complex_normal,
    hippo_legs_nplr,
    log_uniform,
)
from seqdyn.mixers.base import check_choice, check_heads


class S4(LTIMixer):
    """S4: an SSM with the dense HiPPO-LegS transition per channel, discretized by zero-order hold.

    Args:
        state_dim: the number N of real states per channel (even: N/2 complex ones of a conjugate pair).
        n_ssm: the number of independent copies of (Λ, p, B), each shared by d_model / n_ssm channels (a divisor
            of d_model); None: one per channel.
    """

    name = "s4"

    def __init__(
        self,
        d_model: int,
        state_dim: int = 64,
        n_ssm: int | None = None,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        skip: bool = True,
        activation: Activation = "gelu",
        output: Output = "glu",
    ):
        super().__init__(d_model)
        self.state_dim = check_even("state_dim", state_dim)
        if n_ssm is not None:
            try:
                check_heads(n_ssm, d_model)
            except ValueError as error:
                raise ValueError(str(error).replace("heads", "n_ssm", 1)) from None
        self.n_ssm = d_model if n_ssm is None else n_ssm
        dt_min, dt_max = check_dt(dt_min, dt_max)
        check_choice("skip", skip, (False, True))
        real_dtype = torch.get_default_dtype()
        lam, p, b, _ = hippo_legs_nplr(state_dim)
        copies = (self.n_ssm, 1)
        self.log_neg_re = nn.Parameter(torch.log(-lam.real).repeat(*copies).to(real_dtype))  # [n_ssm, N/2]
        self.im = nn.Parameter(lam.imag.repeat(*copies).to(real_dtype))
        self.P = nn.Parameter(as_pair(p.repeat(*copies)))
        self.B = nn.Parameter(as_pair(b.repeat(*copies)))
        self.C = nn.Parameter(complex_normal(d_model, state_dim // 2, std=math.sqrt(0.5)).to(real_dtype))
        self.log_dt = nn.Parameter(log_uniform((d_model,), dt_min, dt_max).to(real_dtype))
        self.head = OutputHead(d_model, "learned" if skip else "none", activation, output)

    def continuous(self) -> tuple[Tensor, Tensor, Tensor]:
        """The real continuous system ``(A_r [H, N, N], B_r [H, N], C_r [H, N])`` of every channel."""
        lam = torch.complex(-torch.exp(self.widened(self.log_neg_re)), self.widened(self.im))
        p, b = as_complex(self.widened(self.P)), as_complex(self.widened(self.B))
        X = torch.diag_embed(lam) - p.unsqueeze(-1) * p.conj().unsqueeze(-2)
        Y = -p.unsqueeze(-1) * p.unsqueeze(-2)
        A = torch.cat([torch.cat([(X + Y).real, (Y - X).imag], -1), torch.cat([(X + Y).imag, (X - Y).real], -1)], -2)
        B = torch.cat([b.real, b.imag], -1)
        repeats = self.d_model // self.n_ssm
        c = as_complex(self.widened(self.C))
        return A.repeat(repeats, 1, 1), B.repeat(repeats, 1), torch.cat([2 * c.real, -2 * c.imag], -1)

    def system(self) -> lti.DenseSISO:
        A, B, C = self.continuous()
        A_bar, B_bar = lti.zoh_dense(A, B, torch.exp(self.widened(self.log_dt)))
        return lti.DenseSISO(A_bar, B_bar, C)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, state_dim={self.state_dim}, n_ssm={self.n_ssm}"


MIXER = S4
