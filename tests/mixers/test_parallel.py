"""Parallel hybrid heads pinned to Falcon-H1 (Zuo et al. 2025, §2.1: attention and a Mamba-2 SSM side by side in a
layer, on the same input, outputs added): the layer written out as the sum of the two listings — Mamba-2 as
``mamba_ssm`` computes it, rotary softmax attention as RoFormer — on the mixer's own parts, compared with its output,
its state after stepping (both parts' states) and its coefficients (the parts' heads side by side)."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs, rotary_attention_layer
from tests.mixers.paper_helpers_ssm import core_and_convs, mamba2_block

D = 16
FALCON_H1 = [
    ["mamba2", {"state_dim": 4, "head_dim": 8, "chunk_size": 4}],
    ["softmax_attention", {"heads": 2, "rotary": True}],
]


def falcon_h1_mixer_layer(m, u):
    """``y = SSM(u) + Attn(u)``; the state is both parts' states, the coefficients the SSM's heads then the
    attention's."""
    ssm, attention = m.parts
    y_ssm, state_ssm, alpha_ssm = mamba2_block(ssm, u)
    y_attention, state_attention, alpha_attention = rotary_attention_layer(attention, u)
    return y_ssm + y_attention, (*state_ssm, *state_attention), torch.cat([alpha_ssm, alpha_attention], dim=1)


@pytest.mark.parametrize("part", PARTS)
def test_parallel_is_falcon_h1s_attention_beside_mamba2(part):
    mixer = double_mixer("parallel", D, parts=FALCON_H1)
    compare_with_paper(
        part,
        mixer,
        inputs(2, 9, D, seed=1),
        falcon_h1_mixer_layer,
        state_of=lambda states: (*core_and_convs(states[0]), *states[1].core),
    )


def test_parallel_packs_each_part_and_checks_its_parts():
    mixer, x = double_mixer("parallel", D, parts=FALCON_H1), inputs(1, 9, D, seed=2)
    packed = mixer(x, cu_seqlens=torch.tensor([0, 4, 9]))
    torch.testing.assert_close(packed, torch.cat([mixer(x[:, :4]), mixer(x[:, 4:])], dim=1), rtol=0, atol=1e-12)
    assert mixer.state_size(9) == sum(part.state_size(9) for part in mixer.parts)
    assert [projection for projection in mixer.output_projections()] == [mixer.parts[0].out_proj, mixer.parts[1].out]
    with pytest.raises(ValueError, match=r"^parts: expected two or more \(mixer name, options\) pairs"):
        mixers.build("parallel", D, parts=[["mamba2", {}]])
    with pytest.raises(ValueError, match="mixer: unknown name 'mamba3'"):
        mixers.build("parallel", D, parts=[["mamba3", {}], ["softmax_attention", {}]])
    with pytest.raises(ValueError, match="use mixer.parts"):
        mixer.dsf(x)


def test_parallel_says_which_backend_each_part_picks():
    mixer, x = double_mixer("parallel", D, parts=FALCON_H1), inputs(1, 9, D, seed=3)
    choice = mixer.explain_backend(x)
    expected = [f"{part.name}: {part.explain_backend(x)}" for part in mixer.parts]
    assert choice == "auto" and all(words in choice.why for words in expected)
    assert mixer.explain_backend(x, "quadratic").source == "asked"
