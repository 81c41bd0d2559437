"""RWKV-4 (Peng et al. 2023) against its time mixing written as a loop over time, without a stabilizer."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from tests.mixers.paper_helpers import PARTS, assert_close, compare_with_paper, double_mixer, inputs

D, WIDTH = 16, 12


def rwkv4_layer(mixer, x):
    """Peng et al. 2023 eqs. 11–15 (transformers' ``RwkvSelfAttention`` with ``rwkv_linear_attention_cpu``)::

        x'_t = x_{t−1};   k, v, r = W_{k,v,r} (μ ⊙ x_t + (1 − μ) ⊙ x'_t)
        wkv_t = (a_{t−1} + e^{u + k_t} v_t) / (b_{t−1} + e^{u + k_t})
        a_t = e^{−w} a_{t−1} + e^{k_t} v_t,   b_t = e^{−w} b_{t−1} + e^{k_t}        (w = e^{time_decay})
        y_t = W_o (σ(r_t) ⊙ wkv_t)

    Returns ``(y, (a_T, b_T, x_{T−1}), A)`` with ``A_tj = e^{−(t−1−j) w + k_j} / (b_{t−1} + e^{u + k_t})`` (j < t)
    and ``A_tt = e^{u + k_t} / (…)``."""
    batch, length, width = x.shape
    previous = torch.cat([x.new_zeros(batch, 1, width), x[:, :-1]], dim=1)

    def mixed(mix):
        return x * mix + previous * (1 - mix)

    k = mixed(mixer.time_mix_key) @ mixer.key.weight.T
    v = mixed(mixer.time_mix_value) @ mixer.value.weight.T
    r = torch.sigmoid(mixed(mixer.time_mix_receptance) @ mixer.receptance.weight.T)
    w, u = torch.exp(mixer.time_decay), mixer.time_first
    a = b = x.new_zeros(batch, k.shape[-1])
    outputs = []
    for t in range(length):
        now = torch.exp(u + k[:, t])
        outputs.append((a + now * v[:, t]) / (b + now))
        a = torch.exp(-w) * a + torch.exp(k[:, t]) * v[:, t]
        b = torch.exp(-w) * b + torch.exp(k[:, t])
    y = (r * torch.stack(outputs, dim=1)) @ mixer.output.weight.T
    A = x.new_zeros(batch, k.shape[-1], length, length)
    for t in range(length):
        A[:, :, t, t] = torch.exp(u + k[:, t])
        for j in range(t):
            A[:, :, t, j] = torch.exp(-(t - 1 - j) * w + k[:, j])
    A = A / A.sum(-1, keepdim=True)
    state = torch.stack([a, b], dim=-1).unsqueeze(2)  # [B, A, 1, 2]
    return y, (state, x[:, -1:]), A


def true_state(state):
    """The numerator and denominator ``[B, A, 1, 2]`` of a stored state: ``core · e^m``."""
    return state.core * torch.exp(state.scale).transpose(1, 2).unsqueeze(-1), state.conv["shift"]


@pytest.mark.parametrize("part", PARTS)
def test_rwkv4_matches_its_paper(part):
    mixer = double_mixer("rwkv4", D, attention_width=WIDTH)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), rwkv4_layer, state_of=true_state)


def test_keys_beyond_the_exponent_range_stay_exact_in_float32():
    """Keys near 200 (e^200 overflows float32, and float64 holds it): the stabilized mixer in float32 matches the
    unstabilized listing in float64, on every backend and from a state carried across two calls."""
    mixer = double_mixer("rwkv4", D, attention_width=WIDTH)
    with torch.no_grad():
        mixer.key.weight.mul_(60.0)
    x = inputs(1, 10, D, seed=2)
    expected, *_ = rwkv4_layer(mixer, x)
    expected = expected.detach()
    assert float(expected.abs().max()) < 1e6 and bool(torch.isfinite(expected).all())
    single = mixer.float()
    for backend in single.backends:
        assert_close(single(x.float(), backend=backend), expected.float(), f"rwkv4 {backend}", tol=1e-4)
    first, state = single(x[:, :4].float(), state=None, return_state=True)
    second, _ = single(x[:, 4:].float(), state=state, return_state=True)
    assert_close(torch.cat([first, second], dim=1), expected.float(), "rwkv4 in two calls", tol=1e-4)


def test_a_state_continued_by_larger_keys_is_rescaled_to_them():
    """The second call's keys exceed the first's: its stabilizer grows and the carried state follows it."""
    mixer = double_mixer("rwkv4", D, attention_width=WIDTH)
    x = inputs(2, 8, D, seed=3)
    x[:, 5:] *= 8.0
    expected, (state, _), _ = rwkv4_layer(mixer, x)
    first, carried = mixer(x[:, :5], state=None, return_state=True)
    second, carried = mixer(x[:, 5:], state=carried, return_state=True)
    assert_close(torch.cat([first, second], dim=1), expected, "rwkv4 continued")
    assert_close(true_state(carried)[0], state, "rwkv4 numerator and denominator")


def test_the_widths_and_initialization_are_the_authors():
    mixer = mixers.build("rwkv4", 8)
    assert mixer.attention_width == 8 and mixer.time_decay.shape == (8,)
    decay = mixer.time_decay.detach()
    assert float(decay[0]) == -5.0 and float(decay[-1]) == pytest.approx(3.0)
    assert bool((mixer.time_first == 1).all()) and float(mixer.time_mix_receptance.detach()[4]) == pytest.approx(
        0.5**0.5
    )
    assert mixers.build("rwkv4", 8, attention_width=4).key.weight.shape == (4, 8)
    with pytest.raises(ValueError, match="attention_width"):
        mixers.build("rwkv4", 8, attention_width=0)
