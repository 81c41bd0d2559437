"""The Forgetting Transformer's attention (FoX; Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a
Forget Gate", https://arxiv.org/abs/2503.02130): softmax attention whose weights a data-dependent forget gate per
head decays, outside the exponential.

Per head (K = V = D/H)::

    f_t = σ(w_fᵀ u_t + b_f),   D_ij = Σ_{l=j+1}^{i} log f_l                                  (eq. 3)
    o_i = Σ_{j≤i} exp(q_iᵀ k_j / √K + D_ij) v_j / Σ_{j≤i} exp(q_iᵀ k_j / √K + D_ij)
    y_i = W_O o_i   (FoX Pro's options: q, k RMS-normalized per head; σ(W_g u_i) ⊙ o_i before W_O)

Coefficient form: φ = exp, Λ = I, b = K^-½, η = Σ_j α_ij, and the decay ``h_t = log f_t`` outside the readout
(``outer_log_decay``) — an additive bias inside the exponential that no Λ inside it can give.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import rms_norm
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, split_heads


class ForgettingAttention(CoefficientMixer):
    """Forgetting attention: softmax attention with a forget gate f_t ∈ (0, 1) per head outside the exponential.

    Args:
        heads: the number of heads H (a divisor of d_model).
        qk_norm: RMS-normalize q and k per head with a learned weight (FoX Pro); False: as projected.
        output_gate: multiply the heads' output by σ(W_g u_t) before W_O (FoX Pro); False: W_O alone.
        qkv_bias: biases in the q, k and v projections.
    """

    name = "forgetting_attention"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        qk_norm: bool = False,
        output_gate: bool = False,
        qkv_bias: bool = False,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=qkv_bias)  # W_Q, W_K, W_V stacked: one product
        self.forget = nn.Linear(d_model, heads, bias=True)
        self.qk_norm = nn.Parameter(torch.ones(2, heads, d_model // heads)) if qk_norm else None
        self.gate = nn.Linear(d_model, d_model, bias=False) if output_gate else None
        self.out = nn.Linear(d_model, d_model, bias=False)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))
        if self.qk_norm is not None:
            q, k = rms_norm(q, self.qk_norm[0], 1e-5), rms_norm(k, self.qk_norm[1], 1e-5)
        log_forget = F.logsigmoid(self.forget(x))  # [B, T, H]
        return Dynamics(q, k, v, readout="exp", normalizer="sum", outer_log_decay=log_forget), x

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        o = core.flatten(-2)
        return self.out(o if self.gate is None else torch.sigmoid(self.gate(extras)) * o)

    def output_projection(self) -> nn.Linear:
        return self.out

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}"


MIXER = ForgettingAttention
