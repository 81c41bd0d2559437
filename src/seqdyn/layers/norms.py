"""Normalization layers shared by mixers and models."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from seqdyn.core import stacking
from seqdyn.core.precision import float32_under_autocast


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + ε) ⊙ w`` over the last axis (Zhang & Sennrich 2019)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)


def rms_norm(x: Tensor, weight: Tensor, eps: float, gate: Tensor | None = None) -> Tensor:
    """``x / sqrt(mean(x²) + ε) ⊙ w`` over the last axis, times ``SiLU(gate)`` when a gate (shaped as ``x``) is
    given — by :class:`_RMSNorm` and torch's SiLU."""
    if gate is not None and gate.shape != x.shape:
        raise ValueError(f"gate: expected the shape of x {tuple(x.shape)}, got {tuple(gate.shape)}")
    y = stacking.apply(_RMSNorm, x, weight, eps)
    return y if gate is None else y * F.silu(gate)


@float32_under_autocast
class _RMSNorm(torch.autograd.Function):
    """``y = x r ⊙ w`` with ``r = (mean(x²) + ε)^{-½}`` per row, and its backward by hand:
    ``∂x = r (u − x r² mean(u ⊙ x))`` with ``u = ∂y ⊙ w``, ``∂w = Σ_rows ∂y ⊙ x r`` — half the elementwise
    passes of autograd through ``pow``, ``mean``, ``rsqrt`` and two products."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        normalized, rows = _rms_normalized(x, eps)
        ctx.save_for_backward(normalized, rows, weight)
        return normalized * weight

    @staticmethod
    def plain(x: Tensor, weight: Tensor, eps: float) -> Tensor:
        return _rms_normalized(x, eps)[0] * weight

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y: Tensor):
        normalized, rows, weight = ctx.saved_tensors
        grad_weight = (grad_y * normalized).sum_to_size(weight.shape) if ctx.needs_input_grad[1] else None
        weighted = grad_y * weight
        along = (weighted * normalized).mean(-1, keepdim=True)
        grad_x = (weighted - normalized * along).mul_(rows)
        return grad_x, grad_weight, None


def _rms_normalized(x: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """``(x r, r)`` with ``r = (mean(x²) + ε)^{-½}`` per row ``[..., 1]``."""
    rows = torch.rsqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True).square().div(x.shape[-1]).add(eps))
    return x * rows, rows


def l2_normalize(x: Tensor, eps: float = 1e-12, inside_root: bool = False) -> Tensor:
    """``x / max(‖x‖₂, ε)`` over the last axis (``F.normalize``), with the backward of :class:`_L2Normalize`;
    ``inside_root``: ``x (‖x‖₂² + ε)^-½`` instead, flash-linear-attention's ``l2norm`` (which transformers'
    Gated DeltaNet fallbacks copy)."""
    if inside_root:
        return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)
    return stacking.apply(_L2Normalize, x, eps)


@float32_under_autocast
class _L2Normalize(torch.autograd.Function):
    """``y = x / n`` with ``n = max(‖x‖, ε)`` per row; backward ``∂x = (∂y − y ⟨y, ∂y⟩) / n`` where ``‖x‖ > ε``
    and ``∂y / ε`` where the norm is clamped — two passes where autograd through norm, clamp and division
    takes five."""

    @staticmethod
    def forward(ctx, x: Tensor, eps: float) -> Tensor:
        norms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min_(eps)
        y = x / norms
        ctx.save_for_backward(y, norms)
        ctx.eps = eps
        return y

    @staticmethod
    def plain(x: Tensor, eps: float) -> Tensor:
        return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(eps)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y: Tensor):
        y, norms = ctx.saved_tensors
        along = (y * grad_y).sum(-1, keepdim=True).masked_fill_(norms <= ctx.eps, 0.0)
        return torch.addcmul(grad_y, y, along, value=-1).div_(norms), None


class GatedRMSNorm(RMSNorm):
    """``RMSNorm(x ⊙ SiLU(z))``, the gated output normalization of Mamba-2 and Gated DeltaNet; with ``groups`` > 1
    each of that many consecutive groups of channels is normalized on its own (``mamba_ssm``'s ``RMSNormGated``
    with ``group_size = dim / ngroups``)."""

    def __init__(self, dim: int, eps: float = 1e-6, groups: int = 1):
        super().__init__(dim, eps)
        if groups < 1 or dim % groups:
            raise ValueError(f"groups: expected a positive divisor of the width {dim}, got {groups}")
        self.groups = groups

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:  # type: ignore[override]
        if self.groups == 1:
            return super().forward(x * F.silu(gate))
        grouped = (x * F.silu(gate)).unflatten(-1, (self.groups, -1))  # [..., G, dim / G]
        unit = grouped.new_ones(grouped.shape[-1])
        return rms_norm(grouped, unit, self.eps).flatten(-2) * self.weight


class HeadOutput(nn.Module):
    """``W_O (RMSNorm_head(o) ⊙ SiLU(W_g u))``: per-head normalized core output, gated by the input, projected.

    The output stage of GLA, RetNet, DeltaNet and Gated DeltaNet (Yang et al. 2023–2025; Sun et al. 2023);
    ``gate=False`` drops the gate.  ``o`` is ``[B, T, H, V]`` and ``u`` the block input ``[B, T, D]``.
    """

    def __init__(
        self, d_model: int, heads: int, head_dim: int, gate: bool = True, bias: bool = False, norm_eps: float = 1e-6
    ):
        super().__init__()
        self.norm = RMSNorm(head_dim, norm_eps)
        self.gate = nn.Linear(d_model, heads * head_dim, bias=bias) if gate else None
        self.out = nn.Linear(heads * head_dim, d_model, bias=bias)

    def forward(self, o: Tensor, u: Tensor) -> Tensor:
        gate = None if self.gate is None else self.gate(u).unflatten(-1, o.shape[-2:])
        return self.out(rms_norm(o, self.norm.weight, self.norm.eps, gate).flatten(-2))
