"""Softmax attention against Vaswani et al. 2017 (seed 000 eq. 2), written out as dense matrices."""

from __future__ import annotations

import pytest
import torch

from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS = 16, 2


def softmax_attention_layer(mixer, x):
    """``q, k, v = W_Q u, W_K u, W_V u`` per head; ``A = softmax(q kᵀ / √K + causal mask)``; ``y = W_O (A v)``.

    Returns ``(y, state, A)`` with the state the key cache of the scaled keys ``K^-½ k_j`` and the values."""
    batch, length, _ = x.shape
    w_q, w_k, w_v = mixer.qkv.weight.chunk(3, dim=0)
    q, k, v = ((x @ w.T).view(batch, length, HEADS, -1).transpose(1, 2) for w in (w_q, w_k, w_v))  # [B, H, T, K]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    A = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    y = (A @ v).transpose(1, 2).reshape(batch, length, -1) @ mixer.out.weight.T
    return y, (k / k.shape[-1] ** 0.5, v), A


@pytest.mark.parametrize("part", PARTS)
def test_softmax_attention_matches_its_paper(part):
    mixer = double_mixer("softmax_attention", D, heads=HEADS)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), softmax_attention_layer)
