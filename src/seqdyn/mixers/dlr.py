"""DLR — diagonal linear RNN (Gupta et al. 2022 §2; the sections and equations below are that paper's).

Per channel h, with λ and w complex (eqs. 1-4)::

    x_k = diag(λ) x_{k-1} + 1·u_k,      y_k = Re⟨w_h, x_k⟩ = Σ_{j≤k} K_j u_{k-j},   K_j = Re(Σ_n w_{h,n} λ_n^j)
    λ = exp(−(logΛ)_re² + i·(logΛ)_im)                                                  (§2.3)

computed by FFT convolution with the materialized kernel (§A.1).  ``real=True`` is DLR-ℝ (§3.3, "Restricting
DLR parameters to reals"): Λ = exp(−(logΛ)_re²) ∈ (0, 1]^N and w ∈ ℝ^{H×N}, the phases fixed at 0.
``prod=True`` is DLR-prod: the kernel ``Re(K̃_j)·Im(K̃_j)``, itself a DLR of N(N+1)/2 states (§A.2).
``bidirectional=True`` sums a second, independent DLR run right to left (eqs. 5-6) — the mixer is then not causal:
``coefficients`` returns the full (non-causal) Toeplitz matrix, and ``step``, ``init_state``, ``state_size`` and
``dsf`` raise ``ValueError``.

Layer (§2.3): ``y = W_out GELU(DLR(u) + u)`` — the residual from u, GELU, a position-wise linear map (no bias).
Parameters (logΛ)_re, (logΛ)_im ∈ ℝ^N are shared by the H channels, W ∈ ℂ^{H×N}.  Init (§2.3):
(logΛ)_im = 2πn/N; (logΛ)_re = (e^r/2)^½ with r ~ U(log r_range[0], log r_range[1]) = U(log .0005, log .5), so
|λ| = exp(−e^r/2) ∈ [0.78, 0.9997]; Re W, Im W ~ N(0, N⁻²).

Coefficient form: φ = identity, per channel (K = V = 1) with the LTI coefficients α_ij = K_{i-j} (a Toeplitz
matrix); DSF: N complex states = 2N real ones in 2×2 rotation-scaling blocks.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from seqdyn.core import lti
from seqdyn.core.dsf import DSF
from seqdyn.mixers._lti import (
    ACTIVATIONS,
    OUTPUTS,
    Activation,
    LTIMixer,
    Output,
    OutputHead,
    as_complex,
    check_number,
    complex_normal,
    log_uniform,
)
from seqdyn.mixers.base import check_choice, check_positive


class DLR(LTIMixer):
    """DLR: a diagonal linear RNN with complex λ, computed as a convolution with its materialized kernel.

    Args:
        state_dim: the number N of complex states (λ_n and w_{h,n}); λ is shared by the channels, w is per channel.
        prod: DLR-prod, the kernel Re(K̃_j)·Im(K̃_j) (Gupta et al. 2022 §A.2); False: K_j = Re(K̃_j).
        bidirectional: sum a second, independent DLR run right to left (non-causal: no step(), state or DSF).
        residual: the residual DLR(u) + u before the activation (Gupta et al. 2022 §2.3); False: DLR(u) alone.
        activation: gelu (GELU after the residual, as the paper) or none.
        output: the position-wise map after the activation: linear (a linear map without bias, as the paper),
            glu (Linear(H, 2H) then GLU), half_glu (y ⊙ σ(W y + b)) or none.
        r_range: (low, high) of the initialization of |λ|: r ~ U(log low, log high) and |λ| = exp(−e^r / 2), so the
            default (0.0005, 0.5) gives |λ| ∈ [0.78, 0.9997].
        real: DLR-ℝ: real λ ∈ (0, 1] and real w, the phases fixed at 0 (Gupta et al. 2022 §3.3); cannot be combined with
            prod.
    """

    name = "dlr"

    def __init__(
        self,
        d_model: int,
        state_dim: int = 64,
        prod: bool = False,
        bidirectional: bool = False,
        residual: bool = True,
        activation: Activation = "gelu",
        output: Output = "linear",
        r_range: tuple[float, float] = (0.0005, 0.5),
        real: bool = False,
    ):
        super().__init__(d_model)
        self.state_dim = check_positive("state_dim", state_dim)
        self.prod = check_choice("prod", prod, (False, True))
        self.real = check_choice("real", real, (False, True))
        if real and prod:
            raise ValueError(
                "real: DLR-prod's kernel Re(K)·Im(K) is 0 for a real DLR; use real=True or prod=True, not both"
            )
        self.bidirectional = check_choice("bidirectional", bidirectional, (False, True))
        check_choice("residual", residual, (False, True))
        check_choice("activation", activation, ACTIVATIONS)
        check_choice("output", output, OUTPUTS)
        if not (isinstance(r_range, (tuple, list)) and len(r_range) == 2):
            raise ValueError(f"r_range: expected (low, high) with 0 < low ≤ high, got {r_range!r}")
        low, high = (check_number("r_range", value) for value in r_range)
        if not 0 < low <= high:
            raise ValueError(f"r_range: expected (low, high) with 0 < low ≤ high, got {r_range!r}")
        self.r_range = (low, high)
        directions = 2 if bidirectional else 1
        self.log_re = nn.Parameter(self._init_log_re(directions))  # (logΛ)_re [directions, N]
        W = complex_normal(directions, d_model, state_dim, std=1 / state_dim)  # [directions, H, N, 2]
        if real:  # DLR-ℝ: the phases are 0 (a buffer) and w is its real part [directions, H, N]
            self.register_buffer("log_im", torch.zeros(directions, state_dim))
            self.W = nn.Parameter(W[..., 0].to(torch.get_default_dtype()))
        else:
            phase = 2 * math.pi * torch.arange(state_dim, dtype=torch.float64) / state_dim
            self.log_im = nn.Parameter(phase.expand(directions, -1).clone().to(torch.get_default_dtype()))
            self.W = nn.Parameter(W.to(torch.get_default_dtype()))
        self.head = OutputHead(d_model, "identity" if residual else "none", activation, output, bias=False)

    def _init_log_re(self, directions: int) -> Tensor:
        r = log_uniform((directions, self.state_dim), *self.r_range)  # r ~ U(log low, log high)
        return torch.sqrt(torch.exp(r) / 2).to(torch.get_default_dtype())

    def direction(self, index: int) -> lti.DiagonalSISO:
        """The DLR of direction ``index`` (0: left to right; 1: right to left when bidirectional)."""
        log_re, log_im, W = (self.widened(p)[index] for p in (self.log_re, self.log_im, self.W))
        log_lam = torch.complex(-(log_re**2), log_im)
        W = torch.complex(W, torch.zeros_like(W)) if self.real else as_complex(W)
        return lti.DiagonalSISO(log_lam, None, W, prod=self.prod)

    def system(self) -> lti.DiagonalSISO:
        if self.bidirectional:
            raise ValueError(
                "bidirectional: a bidirectional DLR is not causal, so it has no recurrent state, "
                "streaming step or causal DSF; build it with bidirectional=False for those"
            )
        return self.direction(0)

    def compute_core(self, u: Tensor, backend: str, state: Tensor | None, output_final_state: bool):
        if not self.bidirectional:
            return super().compute_core(u, backend, state, output_final_state)
        return lti.bidirectional(self.direction(0), self.direction(1), u, backend)

    def coefficients(self, x: Tensor) -> Tensor:
        """Toeplitz ``[B, H, T, T]``: causal, or with the anticausal kernel above the diagonal
        (Gupta et al. 2022 eq. 6)."""
        if not self.bidirectional:
            return super().coefficients(x)
        self.check_input(x)
        batch, length = x.shape[:2]
        matrix = lti.toeplitz(self.direction(0).kernel(length), self.direction(1).kernel(length))
        return matrix.expand(batch, -1, -1, -1)

    def dsf(self, x: Tensor) -> DSF:
        self.system()  # raises when bidirectional
        return super().dsf(x)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, state_dim={self.state_dim}, prod={self.prod}, "
            f"bidirectional={self.bidirectional}, real={self.real}"
        )


MIXER = DLR
