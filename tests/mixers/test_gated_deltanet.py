"""Gated DeltaNet (Yang et al. 2025) against the gated delta rule, written as a loop over time."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_delta_rule import CONV, HEADS, D, delta_rule_layer
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
    compare_with_paper(
        part,
        mixer,
        inputs(2, 9, D, seed=1),
        gated_deltanet_layer,
        state_of=lambda state: (state.core, state.conv["qkv"]),
    )


#: Qwen3.5's Gated DeltaNet (transformers' ``Qwen3_5GatedDeltaNet``): 4 value heads sharing 2 query/key heads of width
#: 6, value heads of width 8, flash-linear-attention's L2 norm, a convolution without bias
QWEN3_5 = dict(heads=4, key_heads=2, key_dim=6, expand_v=2.0, qk_norm_eps=1e-6, conv_bias=False)


@pytest.mark.parametrize("part", PARTS)
def test_gated_deltanet_with_grouped_value_heads_matches_qwen3_5(part):
    mixer = double_mixer("gated_deltanet", D, conv_size=CONV, **QWEN3_5)
    compare_with_paper(
        part,
        mixer,
        inputs(2, 9, D, seed=1),
        gated_deltanet_layer,
        state_of=lambda state: (state.core, state.conv["qkv"]),
    )


#: OLMo-hybrid's (transformers' ``OlmoHybridGatedDeltaNet``): Qwen3.5's with β ∈ (0, 2) and the output norm's own ε
#: (here large, to show)
OLMO_HYBRID = dict(QWEN3_5, negative_eigenvalues=True, output_norm_eps=0.5)


@pytest.mark.parametrize("part", PARTS)
def test_gated_deltanet_with_negative_eigenvalues_matches_olmo_hybrid(part):
    mixer = double_mixer("gated_deltanet", D, conv_size=CONV, **OLMO_HYBRID)
    assert mixer.output.norm.eps == 0.5
    compare_with_paper(
        part,
        mixer,
        inputs(2, 9, D, seed=1),
        gated_deltanet_layer,
        state_of=lambda state: (state.core, state.conv["qkv"]),
    )


def test_grouped_value_heads_share_their_query_and_key():
    """Value heads 0 and 1 read the same query/key head: with equal value inputs their coefficients agree."""
    mixer = double_mixer("gated_deltanet", D, conv_size=CONV, **QWEN3_5)
    with torch.no_grad():
        mixer.decay.dt_bias[1] = mixer.decay.dt_bias[0]
        mixer.decay.proj.weight[1] = mixer.decay.proj.weight[0]
        mixer.decay.a_log[1] = mixer.decay.a_log[0]
        mixer.beta.weight[1] = mixer.beta.weight[0]
    A = mixer.coefficients(inputs(1, 7, D, seed=2))
    torch.testing.assert_close(A[:, 0], A[:, 1], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(A[:, 0], A[:, 2]), "value heads of different key heads agree"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(heads=4, key_heads=3), "key_heads: 3 does not divide heads=4"),
        (dict(heads=4, key_dim=0), "key_dim: expected a positive integer"),
    ],
)
def test_grouped_options_are_checked(options, message):
    from seqdyn import mixers

    with pytest.raises(ValueError, match=message):
        mixers.build("gated_deltanet", D, **options)


@pytest.mark.parametrize("part", PARTS)
def test_gated_deltanet_with_negative_eigenvalues_matches_grazzi_et_al(part):
    """β_t = 2σ(·) (Grazzi et al. 2025, §4): the Householder factor's eigenvalue along k_t, 1 − β_t, may be negative."""
    mixer = double_mixer("gated_deltanet", D, heads=HEADS, conv_size=CONV, negative_eigenvalues=True)
    compare_with_paper(
        part,
        mixer,
        inputs(2, 9, D, seed=1),
        gated_deltanet_layer,
        state_of=lambda state: (state.core, state.conv["qkv"]),
    )


def test_negative_eigenvalues_reach_below_zero():
    """With β_t > 1 the transition flips the state's component along k_t: some β exceeds 1 on random inputs."""
    mixer = double_mixer("gated_deltanet", D, heads=HEADS, conv_size=CONV, negative_eigenvalues=True)
    with torch.no_grad():
        mixer.beta.weight.mul_(10)
        dynamics, _ = mixer.core_inputs(inputs(1, 30, D, seed=4), mixer.init_state(1))
    assert dynamics.householder.max() > 1.5 and dynamics.householder.max() < 2.0
