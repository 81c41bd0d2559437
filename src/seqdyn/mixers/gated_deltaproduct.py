"""Gated DeltaProduct (Siems et al. 2025, "DeltaProduct: Improving State-Tracking in Linear RNNs via Householder
Products", https://arxiv.org/abs/2502.10297): Gated DeltaNet with n Householder factors per token.

Per head, n keys, values and step sizes per token from one projection each (factor-major channels), a short
convolution with SiLU on q, k and v, keys and queries L2-normalized::

    β_ts = 2σ(w_βsᵀ u_t)                                        (s = 1 … n; eigenvalues 1 − β_ts ∈ (−1, 1))
    α_t  = exp(−exp(A_log) softplus(w_αᵀ u_t + b_Δ))             (Mamba-2's gate, one per head and token)
    S_t,0 = α_t S_{t−1},   S_t,s = (I − β_ts k_ts k_tsᵀ) S_t,s−1 + β_ts k_ts v_tsᵀ,   S_t = S_t,n    (eq. 5)
    o_t = S_tᵀ q_t / √K,   y_t = W_O (RMSNorm(o_t) ⊙ SiLU(W_g u_t))

Coefficient form: φ = identity, Λ_t = α_t Π_{s=n}^{1} (I − β_ts k_ts k_tsᵀ) — several Householder factors per step
of the one operator — with the impulses b_ts = β_ts K^-½ written after their factors, η = 1.  n = 1 is Gated DeltaNet
with negative eigenvalues.
"""

from __future__ import annotations

from seqdyn.mixers.gated_deltanet import GatedDeltaNet


class GatedDeltaProduct(GatedDeltaNet):
    """Gated DeltaProduct: Gated DeltaNet with ``householders`` keys, values and step sizes per token, their
    Householder factors multiplied into each token's transition.

    Args:
        householders: n, the Householder factors per token (2 in the paper's language models).
        negative_eigenvalues: β ∈ (0, 2), the paper's default (its state tracking needs the negative eigenvalues);
            False: β ∈ (0, 1).
        The other options are Gated DeltaNet's (``seqdyn mixers gated_deltanet``).
    """

    name = "gated_deltaproduct"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        householders: int = 2,
        expand_v: float = 2.0,
        short_conv: bool = True,
        conv_size: int = 4,
        output_gate: bool = True,
        negative_eigenvalues: bool = True,
        chunk_size: int = 64,
        key_heads: int | None = None,
        key_dim: int | None = None,
        conv_bias: bool = False,
        output_norm_eps: float = 1e-5,
    ):
        super().__init__(
            d_model,
            heads,
            expand_v,
            short_conv,
            conv_size,
            output_gate,
            chunk_size=chunk_size,
            key_heads=key_heads,
            key_dim=key_dim,
            conv_bias=conv_bias,
            negative_eigenvalues=negative_eigenvalues,
            output_norm_eps=output_norm_eps,
            householders=householders,
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, householders={self.householders}"


MIXER = GatedDeltaProduct
