"""A linear map with a low-rank adapter per use: one set of weights run at several places of a network, each place
adding its own low-rank term (LoRA, Hu et al. 2021, https://arxiv.org/abs/2106.09685, eq. 3; Zamba2's shared
attention and MLP, Glorioso et al. 2024, https://arxiv.org/abs/2411.15242, Fig. 2)::

    h = W x + b + [B_u,1 A_u,1 x ; … ; B_u,P A_u,P x]        (use u; P parts of the output, each its own A and B)

The parts are the output's slices (a stacked query, key and value projection adapts each of the three apart); a
use without an adapter, or no use, is ``W x + b`` alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

__all__ = ["AdaptedLinear", "adapted_as"]


class LowRank(nn.Sequential):
    """``B A x`` of rank r: ``A`` (in → r) then ``B`` (r → out), no biases (``[0]`` is A, ``[1]`` is B)."""

    def __init__(self, in_features: int, rank: int, out_features: int):
        super().__init__(nn.Linear(in_features, rank, bias=False), nn.Linear(rank, out_features, bias=False))


class AdaptedLinear(nn.Module):
    """``base`` (an ``nn.Linear``) with, for each use in ``uses``, a rank-``rank`` adapter on each output part of
    ``parts`` (widths summing to ``base.out_features``; one part by default).  :func:`adapted_as` chooses the use."""

    def __init__(self, base: nn.Linear, uses: Sequence[int], rank: int, parts: Sequence[int] | None = None):
        super().__init__()
        parts = [base.out_features] if parts is None else list(parts)
        if sum(parts) != base.out_features:
            raise ValueError(f"parts: widths {parts} must sum to the output width {base.out_features}")
        if rank < 1:
            raise ValueError(f"rank: expected a positive adapter rank, got {rank}")
        self.base, self.parts, self.rank = base, parts, rank
        self.adapters = nn.ModuleDict(
            {str(use): nn.ModuleList(LowRank(base.in_features, rank, width) for width in parts) for use in uses}
        )
        self.use: int | None = None

    def forward(self, x: Tensor) -> Tensor:
        y = self.base(x)
        if self.use is None or str(self.use) not in self.adapters:
            return y
        return y + torch.cat([adapter(x) for adapter in self.adapters[str(self.use)]], dim=-1)

    def extra_repr(self) -> str:
        return f"rank={self.rank}, parts={self.parts}, uses={list(self.adapters)}"


@contextmanager
def adapted_as(module: nn.Module, use: int) -> Iterator[None]:
    """Every :class:`AdaptedLinear` inside ``module`` runs with the adapters of ``use`` within the ``with`` block."""
    adapted = [part for part in module.modules() if isinstance(part, AdaptedLinear)]
    for part in adapted:
        part.use = use
    try:
        yield
    finally:
        for part in adapted:
            part.use = None
