"""Lightning attention (Qin et al. 2024, "Lightning Attention-2", https://arxiv.org/abs/2401.04658; MiniMax 2025,
"MiniMax-01: Scaling Foundation Models with Lightning Attention", https://arxiv.org/abs/2501.08313): linear
attention with a fixed decay per head, the linear layer of MiniMax-01's hybrid.

Per head (K = V = D/H), from one SiLU-activated projection laid out per head as ``[q_h, k_h, v_h]``::

    λ_h = exp(−s_h),   s_h = 2^{−8(h+1)/H} (1 − l/(L − 1) + 10⁻⁵)       (ALiBi's slopes, smaller in deeper layers)
    S_t = λ_h S_{t−1} + k_t v_tᵀ,   o_t = S_tᵀ q_t
    y_t = W_O (σ(W_g u_t) ⊙ RMSNorm([o_t1, …, o_tH]))

Coefficient form: φ = identity, Λ = λ_h I (a constant scalar decay per head), b = 1, η = 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import RMSNorm
from seqdyn.layers.params import check_positive, check_positive_eps
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads


def lightning_log_decays(heads: int, layer: int = 0, layers: int = 1) -> Tensor:
    """``log λ_h = −s_h`` ``[H]`` with MiniMax-01's slopes ``s_h = 2^{−8(h+1)/H}·(1 − l/(L − 1 + 10⁻⁵) + 10⁻⁵)`` for
    layer ``l`` of ``L`` (transformers' ``MiniMaxLightningAttention.get_slope_rate``)."""
    depth = 1 - layer / (layers - 1 + 1e-5) + 1e-5
    return -((2.0 ** (-8.0 / heads)) ** (torch.arange(heads, dtype=torch.float64) + 1)) * depth


class LightningAttention(CoefficientMixer):
    """Lightning attention: linear attention on SiLU features with a fixed decay per head, gated and normalized.

    Args:
        heads: the number of heads H (a divisor of d_model).
        layer: this layer's index l among the model's L layers, which sets its decays (MiniMax-01's slopes shrink
            with depth: the last layer barely decays).
        layers: L, the model's number of layers; the default, one layer, has the full slopes.
        output_norm_eps: the ε of the RMSNorm over all heads (1e-6).
    """

    name = "lightning_attention"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        layer: int = 0,
        layers: int = 1,
        output_norm_eps: float = 1e-6,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        if not 0 <= layer < check_positive("layers", layers):
            raise ValueError(f"layer: expected 0 ≤ layer < layers = {layers}, got {layer}")
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)  # per head [q_h, k_h, v_h]
        self.register_buffer("log_lambda", lightning_log_decays(heads, layer, layers).float())
        self.norm = RMSNorm(d_model, check_positive_eps("output_norm_eps", output_norm_eps))
        self.gate = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        qkv = F.silu(self.qkv(x)).unflatten(-1, (self.heads, -1))  # [B, T, H, 3·D/H]
        q, k, v = qkv.chunk(3, dim=-1)
        log_decay = self.log_lambda.to(x.dtype).expand(*x.shape[:2], self.heads)
        return Dynamics(q, k, v, log_decay=log_decay, scale=1.0), x

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        return self.out(torch.sigmoid(self.gate(extras)) * self.norm(core.flatten(-2)))

    def output_projection(self) -> nn.Linear:
        return self.out

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}"


MIXER = LightningAttention
