"""RWKV's channel mixing (Peng et al. 2023, "RWKV: Reinventing RNNs for the Transformer Era",
https://arxiv.org/abs/2305.13048, eqs. 17–19; transformers' ``RwkvFeedForward``): the feed-forward half of an RWKV
block, which reads the previous token through the token shift.

With ``x'_t = x_{t−1}`` (0 before the start)::

    k_t = W_k (μ_k ⊙ x_t + (1 − μ_k) ⊙ x'_t),   r_t = W_r (μ_r ⊙ x_t + (1 − μ_r) ⊙ x'_t)
    y_t = σ(r_t) ⊙ W_v ReLU(k_t)²

It mixes two tokens, the current and the previous one, through a pointwise nonlinearity: there are no coefficients
on values and no DSF. In an RWKV model it is the second of each block's two residual branches (a layer of its own
here, after the ``rwkv4`` time mixing); its streaming state is the last input.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dsf import DSF
from seqdyn.layers import TokenShift
from seqdyn.layers.params import check_positive
from seqdyn.mixers.base import ConvolutionMixer
from seqdyn.mixers.rwkv4 import shift_mixed


class RWKVChannelMix(ConvolutionMixer):
    """RWKV's channel mixing: ``σ(W_r x^r) ⊙ W_v ReLU(W_k x^k)²`` on the token-shifted inputs.

    Args:
        hidden_width: the width of W_k's output (None: 4·d_model, RWKV-4's ``intermediate_size``).
    """

    name = "rwkv_channel_mix"
    scalar_coefficients = False

    def __init__(self, d_model: int, hidden_width: int | None = None):
        super().__init__(d_model)
        hidden = 4 * d_model if hidden_width is None else check_positive("hidden_width", hidden_width)
        self.hidden_width = hidden
        self.conv = TokenShift(d_model)  # x_{t−1}
        self.time_mix_key = nn.Parameter(torch.arange(d_model) / d_model)  # μ_k: the authors' first layer
        self.time_mix_receptance = nn.Parameter(torch.arange(d_model) / d_model)  # μ_r
        self.key = nn.Linear(d_model, hidden, bias=False)
        self.receptance = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(hidden, d_model, bias=False)

    def before(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return x, x

    def after(self, convolved: Tensor, extras: Tensor) -> Tensor:
        """``σ(W_r x^r) ⊙ W_v ReLU(W_k x^k)²`` of the inputs ``extras`` and their shift ``convolved``."""
        x, previous = extras, convolved
        k = F.relu(self.key(shift_mixed(x, previous, self.time_mix_key))).square()
        return torch.sigmoid(self.receptance(shift_mixed(x, previous, self.time_mix_receptance))) * self.value(k)

    def output_projection(self) -> nn.Linear:
        return self.value

    def dsf(self, x: Tensor) -> DSF:
        raise ValueError(
            f"{self.name} has no DSF: it mixes the current and the previous token through a pointwise "
            "nonlinearity (σ(r) ⊙ W_v ReLU(k)²), not a linear system on values"
        )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, hidden_width={self.hidden_width}"


MIXER = RWKVChannelMix
