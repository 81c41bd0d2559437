"""DeltaNet: linear attention trained by the delta rule (Schlag et al. 2021; Yang et al. 2024; seed 004).

Per head (K = D/H, V = expand_v·D/H), keys and queries L2-normalized after a short convolution with SiLU::

    β_t = σ(w_βᵀ u_t)
    S_t = (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,   o_t = S_tᵀ (q_t K^-½)
    y_t = W_O RMSNorm(o_t)

— one step of online regression ``min_S ½‖Sᵀk_t − v_t‖²`` with step size β_t (textbook seed 004).
Coefficient form: φ = identity, Λ_t = I − β_t k_t k_tᵀ (Householder factor with w = k), b_t = β_t K^-½, η = 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, scaled_width, split_heads
from seqdyn.layers import HeadOutput, ShortConv
from seqdyn.layers.norms import l2_normalize


class DeltaNet(CoefficientMixer):
    """DeltaNet: linear attention whose state is updated by the delta rule, one regression step per token.

    Args:
        heads: the number of heads H; keys and queries have K = d_model / H channels per head.
        expand_v: the value width is expand_v·d_model, V = expand_v·d_model / H per head (the state is K × V).
        short_conv: a short causal depthwise convolution with SiLU on q, k and v before the delta rule (Yang et
            al. 2024); False: the projections go straight in.
        conv_size: the width of that convolution (taps, the current token included).
        output_gate: multiply the per-head RMS-normalized output by SiLU(W_g u_t) before W_O; False: RMSNorm only.
    """

    name = "deltanet"

    def __init__(self, d_model: int, heads: int = 4, expand_v: float = 1.0, short_conv: bool = True,
                 conv_size: int = 4, output_gate: bool = False, chunk_size: int = 64):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.value_width = scaled_width("expand_v", d_model, expand_v)
        check_heads(heads, self.value_width, "expand_v·d_model")
        self.widths = [d_model, d_model, self.value_width]  # of q, k and v
        self.qkv = nn.Linear(d_model, sum(self.widths), bias=False)  # W_Q, W_K, W_V stacked: one product
        self.beta = nn.Linear(d_model, heads, bias=False)
        if short_conv:  # the three convolutions of q, k and v as one over their stacked channels
            self.convs["qkv"] = ShortConv(sum(self.widths), conv_size)
        self.output = HeadOutput(d_model, heads, self.value_width // heads, gate=output_gate)

    def log_decay(self, u: Tensor) -> Tensor | None:
        """The decay multiplying the Householder factor: none for DeltaNet."""
        return None

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        qkv = self.qkv(x)
        if self.convs:
            q, k, v = self.convolve("qkv", qkv, state).split(self.widths, dim=-1)
        else:
            q, k, v = qkv.split(self.widths, dim=-1)
            q, k = F.silu(q), F.silu(k)
        q, k = (l2_normalize(split_heads(t, self.heads)) for t in (q, k))
        beta = torch.sigmoid(self.beta(x))
        inputs = Dynamics(q, k, split_heads(v, self.heads), householder=beta, scale=beta * q.shape[-1] ** -0.5,
                          log_decay=self.log_decay(x))
        return inputs, x

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        return self.output(core, extras)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, value_width={self.value_width}"


MIXER = DeltaNet
