"""DeltaNet (Schlag et al. 2021; Yang et al. 2024) against the delta rule, written as a loop over time."""

from __future__ import annotations

import pytest

from tests.mixers.paper_delta_rule import CONV, HEADS, D, delta_rule_layer
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs


@pytest.mark.parametrize("part", PARTS)
def test_deltanet_matches_its_paper(part):
    mixer = double_mixer("deltanet", D, heads=HEADS, conv_size=CONV)
    compare_with_paper(
        part, mixer, inputs(2, 9, D, seed=1), delta_rule_layer, state_of=lambda state: (state.core, state.conv["qkv"])
    )
