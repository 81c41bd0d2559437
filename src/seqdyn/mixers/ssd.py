"""SSD as Sieber et al. 2024 (the DSF paper) ran it on MQAR (§4.2, appendix I.1): the bare S6 block with one scalar A.

Per channel c of the width d (each channel its own state of N, B and C shared by all channels)::

    Δ_t = softplus(w_Δ (w_r · x_t) + b_Δ)         (dt_rank 1: one input-dependent step per token, mapped to every
                                                   channel by a per-channel weight w_Δ^c and bias b_Δ^c)
    h_t^c = exp(Δ_t^c a) h_{t-1}^c + Δ_t^c B_t x_t^c,   a = −exp(a_log) one learned scalar (a = −1 at the start)
    y_t^c = C_tᵀ h_t^c + D^c x_t^c,   out = W_out y                 (Sieber et al. 2024 eq. 4 with A = aI, eq. 22)

No input projection, convolution or gate ("we do not implement the pre-convolution on the input or the SiLU
activations; but just the S6 and SSD blocks", I.1).  This is :mod:`seqdyn.mixers.s6` with ``expand=1,
short_conv=False, gate=False, dt_rank=1, input_projection=False, scalar_decay=True``; Mamba-2's whole block (heads
sharing a decay, its convolution, gate and norm) is :mod:`seqdyn.mixers.mamba2`.  Coefficient form: one head per
channel (H = d, K = N, V = 1), Λ_t = exp(Δ_t^c a)·I (a scalar decay per head), b_t = Δ_t^c, q = C_t, k = B_t, v = x^c.
"""

from __future__ import annotations

from seqdyn.mixers.s6 import S6


class SSD(S6):
    """SSD as the DSF paper's MQAR experiments ran it: the bare S6 block with dt_rank 1 and one learned scalar A.

    Args:
        state_dim: the state size N per channel: the dimension of B_t (keys) and C_t (queries).
        dt_min: the smallest step Δ at initialization (softplus(b_Δ) log-uniform in [dt_min, dt_max]).
        dt_max: the largest step Δ at initialization.
    """

    name = "ssd"

    def __init__(
        self, d_model: int, state_dim: int = 16, dt_min: float = 0.001, dt_max: float = 0.1, chunk_size: int = 64
    ):
        super().__init__(
            d_model,
            state_dim,
            expand=1,
            dt_rank=1,
            short_conv=False,
            gate=False,
            dt_min=dt_min,
            dt_max=dt_max,
            input_projection=False,
            scalar_decay=True,
            chunk_size=chunk_size,
        )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, state_dim={self.state_dim}"


MIXER = SSD
