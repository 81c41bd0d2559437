"""Low-rank adapters per use (LoRA, Hu et al. 2021 eq. 3): ``W x + b + [B_p A_p x]_p`` for the chosen use only."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from seqdyn.layers.adapters import AdaptedLinear, adapted_as


def test_each_use_adds_its_own_low_rank_term_to_each_part_and_no_use_adds_none():
    torch.manual_seed(0)
    layer = AdaptedLinear(nn.Linear(6, 7), uses=[2, 5], rank=3, parts=[4, 3]).double()
    base = layer.base
    for parameter in layer.adapters.parameters():
        nn.init.normal_(parameter)
    x = torch.randn(2, 6, dtype=torch.float64)
    plain = x @ base.weight.T + base.bias
    torch.testing.assert_close(layer(x), plain, rtol=0, atol=0)
    for use in (2, 5):
        (a1, b1), (a2, b2) = [(part[0].weight, part[1].weight) for part in layer.adapters[str(use)]]
        expected = plain + torch.cat([x @ a1.T @ b1.T, x @ a2.T @ b2.T], dim=-1)
        with adapted_as(layer, use):
            torch.testing.assert_close(layer(x), expected, rtol=1e-12, atol=1e-12)
    with adapted_as(layer, 3):  # a use without an adapter
        torch.testing.assert_close(layer(x), plain, rtol=0, atol=0)
    assert layer.use is None  # the use ends with the block


def test_gradients_reach_only_the_adapters_of_the_use_that_ran():
    layer = AdaptedLinear(nn.Linear(4, 4), uses=[0, 1], rank=2)
    with adapted_as(layer, 1):
        layer(torch.randn(3, 4)).square().sum().backward()
    assert all(p.grad is not None for p in layer.adapters["1"].parameters())
    assert all(p.grad is None for p in layer.adapters["0"].parameters())


@pytest.mark.parametrize(("parts", "rank", "message"), [([3, 3], 2, "parts: widths"), (None, 0, "rank: expected")])
def test_bad_parts_or_rank_are_refused_by_name(parts, rank, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        AdaptedLinear(nn.Linear(4, 5), uses=[0], rank=rank, parts=parts)
