"""Kimi Delta Attention (KDA; Kimi Team 2025, "Kimi Linear: An Expressive, Efficient Attention Architecture",
https://arxiv.org/abs/2510.26692): the gated delta rule with a channel-wise decay applied before the update.

Per head (K = D/H or ``key_dim``, V = expand_v·K), q, k and v after a short convolution with SiLU, q and k
L2-normalized (flash-linear-attention's ε = 1e-6 inside the root)::

    β_t = σ(w_βᵀ u_t),   α_t = exp(−exp(A_log) ⊙ softplus(W_2 W_1 u_t + b_Δ)) ∈ (0, 1)^K
    (or, bounded, α_t = exp(L · σ(exp(A_log) ⊙ (W_2 W_1 u_t + b_Δ))) ∈ (e^L, 1)^K with decay_lower_bound L)
    S_t = (I − β_t k_t k_tᵀ) Diag(α_t) S_{t−1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t / √K
    y_t = W_O (RMSNorm(o_t) ⊙ σ(W_g2 W_g1 u_t + b_g))

Coefficient form: φ = identity, Λ_t = (I − β_t k_t k_tᵀ) Diag(α_t) — the decay before the Householder factor, which
is ``D (I − β w wᵀ)`` for no ``w`` — b_t = β_t K^-½, η = 1.  It is the diagonal-plus-low-rank transition
``Diag(α_t) + u_t z_tᵀ`` with ``u_t = −β_t k_t`` and ``z_t = α_t ⊙ k_t`` (:mod:`seqdyn.core.low_rank`), one operator
step per token; the same order as two sub-steps, a decay and a delta-rule step (``decay_first``,
:mod:`seqdyn.core.products`), gives the same outputs at twice the steps.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.core.low_rank import householder_as_low_rank
from seqdyn.layers import KDADecay, rms_norm
from seqdyn.mixers.base import MixerState
from seqdyn.mixers.deltanet import DeltaNet


class KimiDeltaAttention(DeltaNet):
    """Kimi Delta Attention: the delta rule after a channel-wise decay Diag(α_t), with a low-rank sigmoid output gate.

    Args:
        heads: the number of heads H.
        expand_v: V = expand_v·K per head (1 in Kimi Linear).
        key_dim: K per head; None: d_model / heads.
        short_conv, conv_size, conv_bias: the short convolution with SiLU on q, k and v (no bias in Kimi Linear).
        negative_eigenvalues: β ∈ (0, 2) (flash-linear-attention's ``allow_neg_eigval``); False: β ∈ (0, 1).
        gate_low_rank: r, the bottleneck of the decay's and of the output gate's projections; None: V.
        a_init_range: A ~ U(low, high) per head, the decay's rate (1, 16).
        output_norm_eps: the ε of the output's RMSNorm (1e-5).
        decay_lower_bound: L < 0: the bounded decay ``log α_t = L · σ(A ⊙ (W_2 W_1 u_t + b_Δ))``
            (flash-linear-attention's ``safe_gate``, Bailing-hybrid's); None: Kimi Linear's ``−A ⊙ softplus(·)``.
    """

    name = "kda"
    ssm_parameter_names = ("dt_bias", "a_log")

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        expand_v: float = 1.0,
        short_conv: bool = True,
        conv_size: int = 4,
        chunk_size: int = 64,
        key_dim: int | None = None,
        conv_bias: bool = False,
        negative_eigenvalues: bool = False,
        gate_low_rank: int | None = None,
        a_init_range: tuple[float, float] = (1.0, 16.0),
        output_norm_eps: float = 1e-5,
        decay_lower_bound: float | None = None,
    ):
        key_width = d_model if key_dim is None else heads * key_dim
        super().__init__(
            d_model,
            heads,
            expand_v * key_width / d_model,  # V = expand_v·K per head
            short_conv,
            conv_size,
            output_gate=False,
            chunk_size=chunk_size,
            key_dim=key_dim,
            qk_norm_eps=1e-6,
            conv_bias=conv_bias,
            negative_eigenvalues=negative_eigenvalues,
            output_norm_eps=output_norm_eps,
        )
        head_value = self.value_width // heads
        rank = head_value if gate_low_rank is None else gate_low_rank
        self.decay = KDADecay(d_model, heads, self.key_dim, rank, a_init_range, decay_lower_bound)
        self.gate = nn.Sequential(nn.Linear(d_model, rank, bias=False), nn.Linear(rank, self.value_width, bias=True))

    def log_decay(self, u: Tensor) -> Tensor:
        return self.decay(u)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        inputs, extras = super().core_inputs(x, state)
        write, read = householder_as_low_rank(inputs.householder, inputs.k, inputs.log_decay, decay_first=True)
        return inputs.replace(householder=None, low_rank_write=write, low_rank_read=read), extras

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        gate = torch.sigmoid(self.gate(extras)).unflatten(-1, core.shape[-2:])
        normalized = rms_norm(core, self.output.norm.weight, self.output.norm.eps) * gate
        return self.output.out(normalized.flatten(-2))

    def output_projection(self) -> nn.Linear:
        return self.output.out  # the decay's and the gate's projections are registered after it


MIXER = KimiDeltaAttention
