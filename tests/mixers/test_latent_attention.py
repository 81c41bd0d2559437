"""Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2 eqs. 9–19) against its equations written out."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs, rope_by_complex_numbers

D, HEADS = 16, 2
OPTIONS = {
    "nope": dict(kv_rank=6, nope_dim=5, rope_dim=4, value_dim=3),
    "query_latent": dict(kv_rank=6, q_rank=7, nope_dim=4, rope_dim=2),
    "rotary": dict(kv_rank=5, q_rank=6, nope_dim=3, rope_dim=4, value_dim=6, rotary=True),
    "head_gate": dict(kv_rank=5, nope_dim=3, rope_dim=4, rotary=True, head_gate=True),
}


def rms(t, weight):
    return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def latent_attention_layer(mixer, x):
    """DeepSeek-V2 §2.1.2–2.1.3 per head h (K = nope + rope)::

        c_t = RMSNorm(W_DKV u_t)  (9);  k^C_t,h = W_UK,h c_t  (10);  v_t,h = W_UV,h c_t  (11)
        q^C_t,h = W_UQ,h RMSNorm(W_DQ u_t), or W_Q,h u_t without the query latent  (12–13)
        q^R_t,h, k^R_t = RoPE(W_QR …), RoPE(W_KR u_t), the key part one for all heads  (14–15; no RoPE: unrotated)
        q = [q^C ; q^R], k = [k^C ; k^R]  (16–17);  o_t,h = Σ_j softmax_j(q_t,hᵀ k_j,h / √K) v_j,h  (18);  W_O o  (19)

    Returns ``(y, (k / √K, v), A)``."""
    batch, length, _ = x.shape
    heads, nope, rope, value = HEADS, mixer.nope_dim, mixer.rope_dim, mixer.value_dim
    rank = mixer.kv_rank
    w_dkv, w_kr = mixer.kv_down.weight[:rank], mixer.kv_down.weight[rank:]
    c = rms(x @ w_dkv.T, mixer.kv_norm.weight)  # [B, T, r]
    w_up = mixer.kv_up.weight.view(heads, nope + value, rank)
    k_c = torch.einsum("btr,hkr->bhtk", c, w_up[:, :nope])
    v = torch.einsum("btr,hvr->bhtv", c, w_up[:, nope:])
    q_in = x if mixer.q_down is None else rms(x @ mixer.q_down.weight.T, mixer.q_norm.weight)
    q = (q_in @ mixer.q_up.weight.T).view(batch, length, heads, nope + rope).transpose(1, 2)  # [B, H, T, K]
    q_c, q_r = q[..., :nope], q[..., nope:]
    k_r = (x @ w_kr.T)[:, None].expand(batch, heads, length, rope)
    if mixer.rotary:
        positions = torch.arange(length)
        q_r, k_r = rope_by_complex_numbers(q_r, positions), rope_by_complex_numbers(k_r, positions)
    q, k = torch.cat([q_c, q_r], dim=-1), torch.cat([k_c, k_r], dim=-1)
    scores = q @ k.transpose(-1, -2) / (nope + rope) ** 0.5
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    A = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    o = (A @ v).transpose(1, 2)  # [B, T, H, V]
    if mixer.gate is not None:  # Ling 3's head-wise gate
        o = o * torch.sigmoid(x @ mixer.gate.weight.T)[..., None]
    y = o.reshape(batch, length, -1) @ mixer.out.weight.T
    return y, (k / (nope + rope) ** 0.5, v), A


@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
@pytest.mark.parametrize("part", PARTS)
def test_latent_attention_matches_its_paper(part, options):
    mixer = double_mixer("latent_attention", D, heads=HEADS, **options)
    with torch.no_grad():
        for norm in (mixer.kv_norm, mixer.q_norm):
            if norm is not None:
                norm.weight.uniform_(0.5, 1.5)
    x = inputs(2, 9, D, seed=3)
    compare_with_paper(part, mixer, x, latent_attention_layer)


def test_every_head_reads_the_same_shared_key_part():
    """Eq. 15: k^R is one projection for every head: queries with only their rope channels, equal across heads, give
    every head the same coefficients."""
    mixer = double_mixer("latent_attention", D, heads=HEADS, kv_rank=6, nope_dim=4, rope_dim=4)
    with torch.no_grad():
        w = mixer.q_up.weight.view(HEADS, 8, D)
        w[:, :4] = 0
        w[1, 4:] = w[0, 4:]
    A = mixer.coefficients(inputs(1, 7, D, seed=4))
    torch.testing.assert_close(A[:, 0], A[:, 1], rtol=0, atol=1e-12)


def test_bad_options_name_themselves():
    with pytest.raises(ValueError, match="rope_dim"):
        mixers.build("latent_attention", D, rotary=True, rope_dim=3)
    with pytest.raises(ValueError, match="kv_rank"):
        mixers.build("latent_attention", D, kv_rank=0)
    with pytest.raises(ValueError, match="q_rank"):
        mixers.build("latent_attention", D, q_rank=0)
