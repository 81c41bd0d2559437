"""Rotary position embeddings (Su et al. 2021, "RoFormer", eq. 34), the positions of the attention
block of Gupta et al. 2022.

Each pair of channels ``(x_m, x_{m + d/2})`` of a query or key at position t is rotated by the angle
``t·θ_m`` with ``θ_m = base^(−2m/d)``, m = 0 .. d/2 − 1 (the "rotate half" pairing of GPT-NeoX)::

    rope(x)_m       = x_m cos(t θ_m) − x_{m+d/2} sin(t θ_m)
    rope(x)_{m+d/2} = x_{m+d/2} cos(t θ_m) + x_m sin(t θ_m)

so that ⟨rope(q_i), rope(k_j)⟩ depends on the positions only through i − j.  Partial rotary embeddings (GPT-NeoX's
``rotary_pct``, transformers' ``partial_rotary_factor``) rotate only the first ``dims`` channels so, with d = ``dims``
in θ_m, and pass the others through unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor

ROPE_BASE = 10_000.0


def rotary(x: Tensor, offset: int | Tensor = 0, base: float = ROPE_BASE, dims: int | None = None) -> Tensor:
    """``x`` ``[B, T, H, d]`` at positions ``offset .. offset + T − 1``, its first ``dims`` channels (even; all of
    them where None) rotated (RoFormer eq. 34); ``offset`` a tensor ``[T]``: the position of every step (packed
    sequences restart at 0)."""
    if dims is not None and dims != x.shape[-1]:
        return torch.cat([rotary(x[..., :dims], offset, base), x[..., dims:]], dim=-1)
    dim = x.shape[-1]
    if dim % 2:
        raise ValueError(
            f"rotary: the rotated head dimension must be even to rotate channel pairs, got {dim}; "
            f"choose heads (or the rotary fraction) so that it is even"
        )
    half = dim // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64, device=x.device) * 2 / dim)  # [d/2]
    positions = (
        offset.to(torch.float64)
        if isinstance(offset, Tensor)
        else torch.arange(offset, offset + x.shape[1], dtype=torch.float64, device=x.device)
    )
    angles = positions[:, None] * theta[None, :]  # [T, d/2]
    cos, sin = (f(angles).to(x.dtype)[:, None, :] for f in (torch.cos, torch.sin))  # [T, 1, d/2]: over heads
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)
