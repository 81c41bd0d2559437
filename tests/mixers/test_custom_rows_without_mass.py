"""Seed 001's relu readout with ``normalizer="sum"``, whose rows can lack mass (no positive score): the convention
of 0 output for such rows lets it train."""

from __future__ import annotations

import torch

from seqdyn import mixers


def test_custom_mixer_with_relu_readout_and_sum_normalizer_trains():
    torch.manual_seed(0)
    mixer = mixers.build("custom", 16, heads=2, readout="relu", normalizer="sum")
    optimizer = torch.optim.Adam(mixer.parameters(), lr=1e-2)
    x = torch.randn(4, 32, 16, generator=torch.Generator().manual_seed(1))
    target = torch.randn(4, 32, 16, generator=torch.Generator().manual_seed(2))
    losses = []
    for _ in range(5):
        loss = (mixer(x) - target).square().mean()
        optimizer.zero_grad()
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in mixer.parameters() if p.grad is not None)
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
