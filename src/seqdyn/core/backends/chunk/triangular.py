"""The unit lower-triangular solve of the UT transform, ``(I + L)^{-1}`` for a chunk's strictly lower ``L``,
shared by the delta rule (:mod:`.delta_rule`) and the general Householder factor (:mod:`.householder`)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from seqdyn.core.precision import float32_under_autocast


def unit_lower_solve(strict_lower: Tensor, rhs: Tensor) -> Tensor:
    """``(I + L)^{-1} rhs`` for strictly lower-triangular ``L`` ``[..., C, C]`` (the UT transform)."""
    return _UnitLowerSolve.apply(strict_lower, rhs)


def unit_lower_inverse(strict_lower: Tensor) -> Tensor:
    """``(I + L)^{-1}`` for strictly lower-triangular ``L`` ``[..., C, C]``, by block doubling.

    With the inverses ``A⁻¹``, ``B⁻¹`` of two neighbouring diagonal blocks of size b known, the inverse of
    ``[[A, 0], [X, B]]`` has the block ``−B⁻¹ X A⁻¹`` below them; starting from blocks of one step (inverse 1),
    each of the ``log₂ C`` levels doubles the blocks with two batched products.  ``C`` is padded to a power of
    two (the padding's inverse is I).  This is a few times faster than a batched triangular solve against I on
    CPUs, which solves matrix by matrix."""
    size = strict_lower.shape[-1]
    padded = 1 << max(size - 1, 0).bit_length()
    batch = strict_lower.shape[:-2]
    inverse = strict_lower.new_zeros(batch.numel(), padded, padded)  # [M, P, P]: every matrix of the batch
    inverse[:, :size, :size] = strict_lower.reshape(-1, size, size)  # [M, C, C]
    inverse.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    block = 1
    while block < padded:
        pairs = inverse.as_strided(
            (inverse.shape[0], padded // (2 * block), 2 * block, 2 * block),
            (padded * padded, 2 * block * (padded + 1), padded, 1),
        )  # [M, P/2b, 2b, 2b]
        below = pairs[..., block:, :block]
        below.copy_(pairs[..., block:, block:] @ (below @ pairs[..., :block, :block])).neg_()
        block *= 2
    return inverse[:, :size, :size].reshape(*batch, size, size)  # [..., C, C]


@float32_under_autocast
class _UnitLowerSolve(torch.autograd.Function):
    """``X = T R`` with the explicit inverse ``T = (I + L)^{-1}`` of a small unit lower-triangular matrix.

    Keeping ``T`` makes the backward two products, ``∂R = Tᵀ ∂X`` and ``∂L = −tril₋₁(∂R Xᵀ)``, instead of a
    second batched triangular solve (on CPUs batched products run several times faster than batched solves).
    """

    @staticmethod
    def forward(ctx, strict_lower: Tensor, rhs: Tensor) -> Tensor:
        inverse = unit_lower_inverse(strict_lower)
        solved = inverse @ rhs
        ctx.save_for_backward(inverse, solved)
        return solved

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_solved: Tensor) -> tuple[Tensor, Tensor]:
        inverse, solved = ctx.saved_tensors
        grad_rhs = inverse.transpose(-1, -2) @ grad_solved
        return -(grad_rhs @ solved.transpose(-1, -2)).tril(-1), grad_rhs
