"""LFM2's gated short convolution (Liquid AI 2025) against its layer written as a loop over time."""

from __future__ import annotations

import pytest
import torch

from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, TAPS = 8, 3


def lfm2_short_conv(mixer, x):
    """transformers' ``Lfm2ShortConv``: ``[B; C; x] = W_in u``, ``u' = B ⊙ x``, a depthwise ``nn.Conv1d`` of L taps
    padded by L − 1 on the left (``y_t = Σ_s W[:, s] u'_{t−L+1+s}``), ``out = W_out (C ⊙ y)``.

    Returns ``(out, last L − 1 inputs u', A)`` with ``A[c, t, j] = C_t W[c, L−1−(t−j)] B_j`` on the band."""
    batch, length, width = x.shape
    projected = x @ mixer.in_proj.weight.T
    b, c, v = projected[..., :width], projected[..., width : 2 * width], projected[..., 2 * width :]
    gated = b * v
    taps = mixer.conv.weight  # [D, L]
    y = torch.zeros_like(gated)
    for t in range(length):
        for s in range(TAPS):
            source = t - TAPS + 1 + s
            if source >= 0:
                y[:, t] += taps[:, s] * gated[:, source]
    out = (c * y) @ mixer.out_proj.weight.T
    A = x.new_zeros(batch, width, length, length)
    for t in range(length):
        for j in range(max(0, t - TAPS + 1), t + 1):
            A[:, :, t, j] = c[:, t] * taps[:, TAPS - 1 - (t - j)] * b[:, j]
    return out, gated[:, length - TAPS + 1 :], A


@pytest.mark.parametrize("part", PARTS)
def test_gated_conv_matches_lfm2s_layer(part):
    mixer = double_mixer("gated_conv", D, conv_size=TAPS)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), lfm2_short_conv, state_of=lambda state: state)


def test_the_coefficients_are_a_band_of_the_taps_width():
    mixer = double_mixer("gated_conv", D, conv_size=TAPS)
    A = mixer.coefficients(inputs(1, 7, D, seed=2))
    lag = torch.arange(7)[:, None] - torch.arange(7)[None, :]
    assert bool((A[..., (lag < 0) | (lag >= TAPS)] == 0).all()) and bool((A[..., lag == 2] != 0).any())
