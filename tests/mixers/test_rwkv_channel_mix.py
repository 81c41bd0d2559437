"""RWKV's channel mixing (Peng et al. 2023) against its equations written out."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from tests.mixers.paper_helpers import assert_close, double_mixer, inputs, step_through

D, HIDDEN = 16, 24


def channel_mix_layer(mixer, x):
    """Peng et al. 2023 eqs. 17–19 (transformers' ``RwkvFeedForward``)::

        x'_t = x_{t−1};   k = W_k (μ_k ⊙ x + (1 − μ_k) ⊙ x');   r = W_r (μ_r ⊙ x + (1 − μ_r) ⊙ x')
        y = σ(r) ⊙ W_v max(k, 0)²

    Returns ``(y, x_{T−1})``."""
    previous = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)
    k = (x * mixer.time_mix_key + previous * (1 - mixer.time_mix_key)) @ mixer.key.weight.T
    r = (x * mixer.time_mix_receptance + previous * (1 - mixer.time_mix_receptance)) @ mixer.receptance.weight.T
    return torch.sigmoid(r) * (torch.clamp(k, min=0) ** 2 @ mixer.value.weight.T), x[:, -1:]


def test_rwkv_channel_mix_matches_its_paper():
    mixer = double_mixer("rwkv_channel_mix", D, hidden_width=HIDDEN)
    x = inputs(2, 9, D, seed=1)
    y, last = channel_mix_layer(mixer, x)
    assert_close(mixer(x), y, "forward")
    stepped, state = step_through(mixer, x)
    assert_close(stepped, y, "step outputs")
    assert_close(state, last, "state: the last input")


def test_packed_sequences_restart_the_token_shift():
    mixer = double_mixer("rwkv_channel_mix", D, hidden_width=HIDDEN)
    x = inputs(1, 7, D, seed=2)
    packed = mixer(x, cu_seqlens=torch.tensor([0, 3, 7]))
    alone = torch.cat([channel_mix_layer(mixer, x[:, :3])[0], channel_mix_layer(mixer, x[:, 3:])[0]], dim=1)
    assert_close(packed, alone, "packed")


def test_widths_defaults_and_what_it_does_not_have():
    mixer = mixers.build("rwkv_channel_mix", 8)
    assert mixer.key.weight.shape == (32, 8) and mixer.output_projection() is mixer.value
    with pytest.raises(ValueError, match="no DSF"):
        mixer.dsf(torch.zeros(1, 2, 8))
    with pytest.raises(ValueError, match="no scalar coefficients"):
        mixer.coefficients(torch.zeros(1, 2, 8))
    with pytest.raises(ValueError, match="hidden_width"):
        mixers.build("rwkv_channel_mix", 8, hidden_width=0)
