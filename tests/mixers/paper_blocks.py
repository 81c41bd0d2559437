"""Building blocks that several papers' layers share, written out for the paper tests (no seqdyn code)."""

from __future__ import annotations

import torch
from torch import Tensor


def silu(x: Tensor) -> Tensor:
    """``x σ(x)`` (Swish)."""
    return x * torch.sigmoid(x)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """``x / sqrt(mean(x²) + ε) ⊙ w`` over the last axis (Zhang & Sennrich 2019)."""
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def gated_head_output(output, o: Tensor, u: Tensor) -> Tensor:
    """``W_O (RMSNorm_head(o) ⊙ SiLU(W_g u))`` — the output stage of GLA, RetNet and (Gated) DeltaNet — from the
    weights of a ``seqdyn.nn.HeadOutput`` ``output``; ``o`` ``[B, T, H, V]``, ``u`` ``[B, T, D]``.  Without a gate
    (``output.gate`` is ``None``) ``W_O RMSNorm_head(o)``."""
    normed = rms_norm(o, output.norm.weight, output.norm.eps).flatten(2)
    if output.gate is not None:
        normed = normed * silu(u @ output.gate.weight.T)
    return normed @ output.out.weight.T
