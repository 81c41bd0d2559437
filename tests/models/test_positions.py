"""Learned positions: softmax attention (Λ = I) sees a set, not a sequence, without them (seed 001 Lemma 3).

Without positions every layer of a softmax-attention model computes, at position i, a function of the token x_i
and the multiset {x_0 … x_i}: so (a) two equal tokens at the first two positions give equal outputs at every
depth, and (b) a one-layer model's last output does not depend on the order of the prefix.  Learned positions
break both; so does a mixer with Λ ≠ I (RetNet's constant decay) without positions.
"""

from __future__ import annotations

import pytest
import torch

from seqdyn.models import build_model
from tests.models.helpers import config, inputs, spec


def _model(positions: bool, mixer: str = "softmax_attention", layers: int = 2):
    torch.manual_seed(0)
    return build_model(
        config(positions=positions, mixer=mixer, layers=layers, mixer_options={"heads": 2}), spec()
    ).double()


def _repeat_first(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[:, 1] = x[:, 0]
    return x


@pytest.mark.parametrize("positions", [False, True])
def test_equal_tokens_at_the_first_two_positions(positions):
    x = _repeat_first(inputs(spec()))
    out = _model(positions)(x)
    same = torch.allclose(out[:, 0], out[:, 1], rtol=1e-12, atol=1e-12)
    assert same is (not positions)


@pytest.mark.parametrize(
    "positions, mixer, invariant",
    [(False, "softmax_attention", True), (True, "softmax_attention", False), (False, "retnet", False)],
)
def test_last_output_and_the_order_of_the_prefix(positions, mixer, invariant):
    model = _model(positions, mixer, layers=1)
    x = inputs(spec(), batch=2)
    shuffled = x.clone()
    shuffled[:, :-1] = x[:, :-1][:, torch.randperm(x.shape[1] - 1, generator=torch.Generator().manual_seed(1))]
    last, last_shuffled = model(x)[:, -1], model(shuffled)[:, -1]
    assert torch.allclose(last, last_shuffled, rtol=1e-10, atol=1e-12) is invariant
