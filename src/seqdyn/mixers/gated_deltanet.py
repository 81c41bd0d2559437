"""Gated DeltaNet (Yang et al. 2025; Sieber et al. 2025 Table 1): the delta rule with a Mamba-2 decay gate.

As :mod:`seqdyn.mixers.deltanet`, with a scalar decay per head in front of the Householder factor::

    α_t = exp(−exp(A_log) softplus(w_αᵀ u_t + b_Δ))            (Mamba-2 parameterization)
    S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,   y_t = W_O (RMSNorm(o_t) ⊙ SiLU(W_g u_t))

Coefficient form: φ = identity, Λ_t = α_t (I − β_t k_t k_tᵀ), b_t = β_t K^-½, η = 1.
"""

from __future__ import annotations

from torch import Tensor, nn

from seqdyn.layers.gates import MambaDecay
from seqdyn.mixers.deltanet import DeltaNet


class GatedDeltaNet(DeltaNet):
    """Gated DeltaNet: DeltaNet with Mamba-2's scalar decay α_t per head in front of the Householder factor.

    Args:
        dt_min: the smallest step Δ of the decay gate at initialization: b_Δ is set so that softplus(b_Δ) is
            log-uniform in [dt_min, dt_max] (Mamba-2's initialization).
        dt_max: the largest step Δ at initialization.
        a_init_range: (low, high) of A's initialization, A ~ U(low, high) per head (the decay is
            α_t = exp(−A·Δ_t)); Mamba-2 uses (1, 16).
    """

    name = "gated_deltanet"
    ssm_parameter_names = ("dt_bias", "a_log")  # the decay's Δ and A (Mamba-2's)

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        expand_v: float = 2.0,
        short_conv: bool = True,
        conv_size: int = 4,
        output_gate: bool = True,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        a_init_range: tuple[float, float] = (1.0, 16.0),
        chunk_size: int | None = None,
        key_heads: int | None = None,
        key_dim: int | None = None,
        qk_norm_eps: float | None = None,
        conv_bias: bool = True,
        negative_eigenvalues: bool = False,
        output_norm_eps: float = 1e-6,
        householders: int = 1,
    ):
        super().__init__(
            d_model,
            heads,
            expand_v,
            short_conv,
            conv_size,
            output_gate,
            chunk_size,
            key_heads,
            key_dim,
            qk_norm_eps,
            conv_bias,
            negative_eigenvalues,
            output_norm_eps,
            householders,
        )
        self.decay = MambaDecay(d_model, heads, dt_min, dt_max, a_init_range)

    def log_decay(self, u: Tensor) -> Tensor:
        return self.decay(u)[0]

    def output_projection(self) -> nn.Linear:
        return self.output.out  # the decay's projection is registered after it


MIXER = GatedDeltaNet
