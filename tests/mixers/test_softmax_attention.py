"""Softmax attention against Vaswani et al. 2017 (seed 000 eq. 2), written out as dense matrices."""

from __future__ import annotations

import pytest
import torch

from tests.mixers.paper_helpers import (
    PARTS,
    compare_with_paper,
    double_mixer,
    inputs,
    rope_by_complex_numbers,
    rotary_attention_layer,
    softmax_attention_layer,
)

D, HEADS = 16, 2


@pytest.mark.parametrize("part", PARTS)
def test_softmax_attention_matches_its_paper(part):
    mixer = double_mixer("softmax_attention", D, heads=HEADS)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), softmax_attention_layer)


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


def gated_attention_layer(mixer, x):
    """The attention layer of Qwen3-Next / Qwen3.5 (transformers' ``Qwen3_5Attention``; Qiu et al. 2025 for the
    gate), per query head h with its key–value head g = ⌊h / (H / H_kv)⌋::

        q_h = RMSNorm(W_Q^h u) ⊙ w_q,  k_g = RMSNorm(W_K^g u) ⊙ w_k,  v_g = W_V^g u   (ε = 1e-6; with
        qk_norm_scope="projection", OLMo 2's: RMSNorm(W_Q u) over all heads at once, then split, and so for K)
        q_h, k_g ← rope of their first r = ⌊K · rotary_fraction⌋ channels (RoFormer eq. 34 with d = r)
        A_h = softmax(q_h k_gᵀ / √K + causal mask),  y = W_O [(A_h v_g)_h ⊙ σ(W_G u)]
    """
    batch, length, _ = x.shape
    heads, kv_heads, dim, rotated = mixer.heads, mixer.kv_heads, mixer.head_dim, mixer.rotary_dims
    w_q, w_k, w_v = mixer.qkv.weight.split(mixer.widths, dim=0)

    def rms(t, weight):  # over each head, or (OLMo 2's scope) over the whole projection first
        if mixer.qk_norm_scope == "projection":
            t = t.flatten(-2)
        normed = t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
        return normed.view(batch, length, -1, dim)

    def rope(t):
        turned = rope_by_complex_numbers(t[..., :rotated], torch.arange(length))
        return torch.cat([turned, t[..., rotated:]], dim=-1)

    q = rope(rms((x @ w_q.T).view(batch, length, heads, dim), mixer.q_norm.weight).transpose(1, 2))
    k = rope(rms((x @ w_k.T).view(batch, length, kv_heads, dim), mixer.k_norm.weight).transpose(1, 2))
    v = (x @ w_v.T).view(batch, length, kv_heads, dim).transpose(1, 2)
    group = torch.arange(heads) // (heads // kv_heads)  # the key–value head of each query head
    k, v = k[:, group], v[:, group]  # [B, H, T, K]
    scores = q @ k.transpose(-1, -2) / dim**0.5
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    A = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    gated = (A @ v).transpose(1, 2).reshape(batch, length, -1) * torch.sigmoid(x @ mixer.gate.weight.T)
    return gated @ mixer.out.weight.T, (k / dim**0.5, v), A


GATED = dict(heads=4, kv_heads=2, head_dim=8, qk_norm=True, rotary=True, rotary_fraction=0.5, output_gate=True)


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("scope", ["head", "projection"])
def test_gated_attention_with_grouped_heads_matches_qwen3_5(part, scope):
    """Every option of today's hybrid models at once: grouped key–value heads, a head width other than D / H, q/k
    norms (per head as Qwen3, or over the projection as OLMo 2), partial rotary embeddings and the sigmoid output
    gate."""
    mixer = double_mixer("softmax_attention", D, **GATED, qk_norm_scope=scope)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), gated_attention_layer)


def test_partial_rotary_leaves_the_other_channels_alone():
    from seqdyn.layers.rotary import rotary

    x = inputs(1, 5, 8, seed=4).view(1, 5, 1, 8)
    turned = rotary(x, 3, dims=4)
    torch.testing.assert_close(turned[..., 4:], x[..., 4:], rtol=0, atol=0)
    torch.testing.assert_close(turned[..., :4], rotary(x[..., :4], 3), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(heads=4, kv_heads=3), "kv_heads: 3 does not divide heads=4"),
        (dict(heads=4, head_dim=6, rotary=True, rotary_fraction=0.25), "rotated head dimension 1 .* even"),
        (dict(heads=2, rotary_fraction=1.5), "rotary_fraction: expected a fraction"),
        (dict(heads=2, head_dim=0), "head_dim: expected a positive integer"),
    ],
)
def test_attention_options_are_checked(options, message):
    from seqdyn import mixers

    with pytest.raises(ValueError, match=message):
        mixers.build("softmax_attention", D, **options)
