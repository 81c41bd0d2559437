"""Short causal depthwise convolution, with the streaming state a recurrent step needs (Mamba, GLA, DeltaNet)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ShortConv(nn.Module):
    """``y_t = Σ_{s<w} W[:, s] ⊙ x_{t-w+1+s}`` per channel (causal, kernel width w), optionally followed by SiLU.

    ``forward(x [B, T, C], state=None)`` returns ``(y, state)`` with ``state`` the last ``w − 1`` inputs
    ``[B, w − 1, C]``, so that feeding a sequence in pieces equals feeding it whole.
    """

    def __init__(self, channels: int, width: int = 4, activation: bool = True, bias: bool = True):
        super().__init__()
        if width < 1:
            raise ValueError(f"conv_size: expected a width ≥ 1, got {width}")
        self.channels, self.width, self.activation = channels, width, activation
        self.weight = nn.Parameter(torch.empty(channels, width))
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None
        nn.init.uniform_(self.weight, -width**-0.5, width**-0.5)

    def init_state(self, batch: int, like: Tensor | None = None) -> Tensor:
        dtype = self.weight.dtype if like is None else like.dtype
        return torch.zeros(batch, self.width - 1, self.channels, dtype=dtype, device=self.weight.device)

    def forward(self, x: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if state is None:
            state = self.init_state(x.shape[0], x)
        padded = torch.cat([state.to(x.dtype), x], dim=1)  # [B, w - 1 + T, C]
        y = F.conv1d(padded.transpose(1, 2), self.weight.unsqueeze(1).to(x.dtype),
                     None if self.bias is None else self.bias.to(x.dtype), groups=self.channels).transpose(1, 2)
        if self.activation:
            y = F.silu(y)
        return y, padded[:, padded.shape[1] - (self.width - 1):]

    def extra_repr(self) -> str:
        return f"channels={self.channels}, width={self.width}, activation={self.activation}"
