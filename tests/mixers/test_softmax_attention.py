"""Softmax attention against Vaswani et al. 2017 (seed 000 eq. 2), written out as dense matrices."""

from __future__ import annotations

import pytest
import torch

from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS = 16, 2


def softmax_attention_layer(mixer, x, rope=None):
    """``q, k, v = W_Q u, W_K u, W_V u`` per head (``q, k = rope(q), rope(k)`` when given);
    ``A = softmax(q kᵀ / √K + causal mask)``; ``y = W_O (A v)``.

    Returns ``(y, state, A)`` with the state the key cache of the scaled keys ``K^-½ k_j`` and the values."""
    batch, length, _ = x.shape
    w_q, w_k, w_v = mixer.qkv.weight.chunk(3, dim=0)
    q, k, v = ((x @ w.T).view(batch, length, HEADS, -1).transpose(1, 2) for w in (w_q, w_k, w_v))  # [B, H, T, K]
    if rope is not None:
        q, k = rope(q), rope(k)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    A = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    y = (A @ v).transpose(1, 2).reshape(batch, length, -1) @ mixer.out.weight.T
    return y, (k / k.shape[-1] ** 0.5, v), A


@pytest.mark.parametrize("part", PARTS)
def test_softmax_attention_matches_its_paper(part):
    mixer = double_mixer("softmax_attention", D, heads=HEADS)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), softmax_attention_layer)


def rope_by_complex_numbers(x, positions):
    """RoFormer §3.2.2 written with complex numbers: channel pair (m, m + d/2) is the complex number
    ``x_m + i·x_{m+d/2}``, multiplied by ``exp(i·t·θ_m)``, θ_m = 10000^(−2m/d). ``x`` ``[B, H, T, d]``, ``positions``
    ``[T]``."""
    half = x.shape[-1] // 2
    theta = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    phase = torch.polar(torch.ones(len(positions), half, dtype=torch.float64),
                        positions[:, None].double() * theta[None, :])  # [T, d/2]
    z = torch.complex(x[..., :half], x[..., half:]) * phase
    return torch.cat([z.real, z.imag], dim=-1)


def rotary_attention_layer(mixer, x):
    """Seed 002's ATTENTION block: softmax attention with rotary embeddings of q and k (RoFormer eq. 34)."""
    return softmax_attention_layer(mixer, x, rope=lambda t: rope_by_complex_numbers(t, torch.arange(x.shape[1])))


@pytest.mark.parametrize("part", PARTS)
def test_rotary_softmax_attention_matches_roformer(part):
    mixer = double_mixer("softmax_attention", D, heads=HEADS, rotary=True)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), rotary_attention_layer)


def test_rotary_scores_depend_on_relative_positions_only():
    """⟨rope(q, i), rope(k, j)⟩ is a function of i − j: shifting both positions leaves the coefficients alone."""
    from seqdyn.layers.rotary import rotary

    q, k = (inputs(1, 6, 8, seed=s).view(1, 6, 1, 8) for s in (2, 3))
    scores = [torch.einsum("bihd,bjhd->bhij", rotary(q, offset), rotary(k, offset)) for offset in (0, 37)]
    torch.testing.assert_close(scores[0], scores[1], rtol=1e-12, atol=1e-12)
    plain = torch.einsum("bihd,bjhd->bhij", q, k)
    assert not torch.allclose(scores[0], plain), "rotary left the scores unchanged"


def test_rotary_needs_an_even_head_dimension():
    from seqdyn import mixers

    with pytest.raises(ValueError, match="rotary: .*even"):
        mixers.build("softmax_attention", 6, heads=2, rotary=True)
