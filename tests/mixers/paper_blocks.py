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


def head_output(output, o: Tensor, u: Tensor, gated: bool = True) -> Tensor:
    """``W_O (RMSNorm_head(o) ⊙ SiLU(W_g u))`` — the output stage of GLA, RetNet and (Gated) DeltaNet — from the
    weights of a ``seqdyn.layers.HeadOutput`` ``output``; ``o`` ``[B, T, H, V]``, ``u`` ``[B, T, D]``.  ``gated=False``
    (DeltaNet, TTT): ``W_O RMSNorm_head(o)``, whatever gate ``output`` holds."""
    normed = rms_norm(o, output.norm.weight, output.norm.eps).flatten(2)
    if gated:
        normed = normed * silu(u @ output.gate.weight.T)
    return normed @ output.out.weight.T


def short_conv(x: Tensor, conv) -> Tensor:
    """``SiLU(b + Σ_{s<w} W[:, s] ⊙ x_{t−w+1+s})`` per channel (b = 0 without a bias), zero before the start — the
    short causal convolution of Mamba, GLA and DeltaNet, from the weights of a ``seqdyn.layers.ShortConv`` ``conv``."""
    width, length = conv.weight.shape[1], x.shape[1]
    padded = torch.cat([x.new_zeros(x.shape[0], width - 1, x.shape[2]), x], dim=1)
    bias = 0.0 if conv.bias is None else conv.bias
    return silu(sum(conv.weight[:, s] * padded[:, s : s + length] for s in range(width)) + bias)
