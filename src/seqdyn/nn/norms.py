"""Normalization layers shared by mixers and models."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + ε) ⊙ w`` over the last axis (Zhang & Sennrich 2019)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class GatedRMSNorm(RMSNorm):
    """``RMSNorm(x ⊙ SiLU(z))``, the gated output normalization of Mamba-2 and Gated DeltaNet."""

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:  # type: ignore[override]
        return super().forward(x * F.silu(gate))


class HeadOutput(nn.Module):
    """``W_O (RMSNorm_head(o) ⊙ SiLU(W_g u))``: per-head normalized core output, gated by the input, projected.

    The output stage of GLA, RetNet, DeltaNet and Gated DeltaNet (Yang et al. 2023–2025; Sun et al. 2023);
    ``gate=False`` drops the gate.  ``o`` is ``[B, T, H, V]`` and ``u`` the block input ``[B, T, D]``.
    """

    def __init__(self, d_model: int, heads: int, head_dim: int, gate: bool = True, bias: bool = False):
        super().__init__()
        self.norm = RMSNorm(head_dim)
        self.gate = nn.Linear(d_model, heads * head_dim, bias=bias) if gate else None
        self.out = nn.Linear(heads * head_dim, d_model, bias=bias)

    def forward(self, o: Tensor, u: Tensor) -> Tensor:
        y = self.norm(o).flatten(2)
        if self.gate is not None:
            y = y * F.silu(self.gate(u))
        return self.out(y)
