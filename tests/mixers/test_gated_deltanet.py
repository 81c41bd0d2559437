"""Gated DeltaNet (Yang et al. 2025) against the gated delta rule, written as a loop over time."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_delta_rule import CONV, D, HEADS, delta_rule_layer
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs


def gated_deltanet_layer(mixer, x):
    """The delta rule of :func:`delta_rule_layer` with the Mamba-2 gate
    ``α_t = exp(−exp(A_log) softplus(w_αᵀ u_t + b_Δ))`` per head in front of the Householder factor, and the
    output gate ``SiLU(W_g u_t)`` on the normalized heads."""
    gate = mixer.decay
    log_alpha = -torch.exp(gate.a_log) * F.softplus(x @ gate.proj.weight.T + gate.dt_bias)
    return delta_rule_layer(mixer, x, log_alpha)


@pytest.mark.parametrize("part", PARTS)
def test_gated_deltanet_matches_its_paper(part):
    mixer = double_mixer("gated_deltanet", D, heads=HEADS, conv_size=CONV)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), gated_deltanet_layer,
                       state_of=lambda state: (state.core, state.conv["qkv"]))
