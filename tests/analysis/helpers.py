"""Shared helpers of the analysis tests: float64 mixers on fixed random inputs."""

from __future__ import annotations

import torch

from seqdyn import mixers


def mixer(name: str, d_model: int = 16, seed: int = 0, **options) -> torch.nn.Module:
    """Mixer ``name`` with parameters from ``seed``, in float64."""
    torch.manual_seed(seed)
    return mixers.build(name, d_model, **options).double()


def inputs(batch: int = 2, length: int = 12, d_model: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, length, d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def key_dim(m: torch.nn.Module, x: torch.Tensor) -> int:
    """K of a coefficient mixer: the last axis of its queries (after feature maps)."""
    from seqdyn.mixers.base import MixerState

    core, _ = m.core_inputs(x, MixerState())
    return core.q.shape[-1]
