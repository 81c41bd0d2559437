"""HGRN2 (Qin et al. 2024, "HGRN2: Gated Linear RNNs with State Expansion", https://arxiv.org/abs/2404.07904): a
gated linear RNN whose input gate is tied to its forget gate, its state expanded to a matrix per head.

Per head (K = expand_ratio forget channels, V = D/H input channels)::

    q_t = SiLU(W_q u_t),   f_t = σ(W_f u_t),   i_t = W_i u_t                  (the forget gate f, the input i)
    S_t = Diag(f_t) S_{t−1} + (1 − f_t) i_tᵀ,   o_t = S_tᵀ q_t / √K               (eq. 6: outer-product expansion)
    y_t = W_O RMSNorm(o_t)                                                      (RMSNorm over all heads)

Coefficient form: φ = identity, Λ_t = Diag(f_t) (diagonal decay), the impulse b k_t with k_t = 1 − f_t and
b = K^-½ (flash-linear-attention's GLA kernel scales the query by K^-½), η = 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import RMSNorm, ShortConv
from seqdyn.layers.params import check_positive, check_positive_eps
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, split_heads


class HGRN2(CoefficientMixer):
    """HGRN2: per head a matrix state decayed by the forget gate f_t and written with the tied input gate 1 − f_t.

    Args:
        heads: the number of heads H (a divisor of d_model): V = d_model / H input channels per head.
        expand_ratio: K, the forget (key) channels per head — the state expansion; None: d_model / H (HGRN2's
            language models: 128).
        short_conv: a short causal convolution without activation on q, f and i (flash-linear-attention's option).
        conv_size: its width.
        output_norm_eps: the ε of the output RMSNorm (1e-5).
    """

    name = "hgrn2"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        expand_ratio: int | None = None,
        short_conv: bool = False,
        conv_size: int = 4,
        output_norm_eps: float = 1e-5,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.expand_ratio = d_model // heads if expand_ratio is None else check_positive("expand_ratio", expand_ratio)
        forget_width = heads * self.expand_ratio
        self.widths = [forget_width, forget_width, d_model]  # of q, f and i
        self.qfi = nn.Linear(d_model, sum(self.widths), bias=False)  # W_q, W_f, W_i stacked: one product
        if short_conv:
            self.convs["qfi"] = ShortConv(sum(self.widths), conv_size, activation=False, bias=False)
        self.norm = RMSNorm(d_model, check_positive_eps("output_norm_eps", output_norm_eps))
        self.out = nn.Linear(d_model, d_model, bias=False)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        qfi = self.qfi(x)
        q, f, i = (self.convolve("qfi", qfi, state) if self.convs else qfi).split(self.widths, dim=-1)
        log_forget = F.logsigmoid(f)  # log f_t
        key = -torch.expm1(log_forget)  # 1 − f_t
        heads = self.heads
        return Dynamics(
            split_heads(F.silu(q), heads),
            split_heads(key, heads),
            split_heads(i, heads),
            log_decay=split_heads(log_forget, heads),
        ), x

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        return self.out(self.norm(core.flatten(-2)))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, expand_ratio={self.expand_ratio}"


MIXER = HGRN2
