"""A linear map per head: the channels in ``heads`` equal groups, each mapped by its own matrix (a block-diagonal
linear map), ``y_h = W_h x_h + b_h`` — Zamba's Mamba heads, each with its own Δ, B and C projections (Glorioso et al.
2024, https://arxiv.org/abs/2405.16712, §3)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["HeadwiseLinear"]


class HeadwiseLinear(nn.Module):
    """``[..., H·in] → [..., H·out]``, head h's slice by ``weight[h]`` (``[H, out, in]``) plus ``bias[h]``
    (``[H, out]``); initialized as ``nn.Linear`` of each head's width."""

    def __init__(self, heads: int, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        self.heads, self.in_features, self.out_features = heads, in_features, out_features
        bound = 1 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(heads, out_features, in_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(heads, out_features).uniform_(-bound, bound)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``[..., H·in]`` → ``[..., H·out]``."""
        per_head = x.unflatten(-1, (self.heads, self.in_features))  # [..., H, in]
        y = torch.einsum("...hi,hoi->...ho", per_head, self.weight)
        return (y if self.bias is None else y + self.bias).flatten(-2)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, in_features={self.in_features}, out_features={self.out_features}"
