"""PaTH attention (Yang et al. 2025) against its attention written out with the Householder products formed."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_blocks import short_conv
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS = 16, 2


def path_attention_layer(mixer, x):
    """Yang et al. 2025, eq. 3 (PaTH-FoX with the forget gate)::

        w_t = L2(SiLU(ShortConv(W_w2 W_w1 u_t))),   β_t = 2σ(w_βᵀ u_t + b_β),   H_t = I − β_t w_t w_tᵀ per head
        s_ij = (q_iᵀ H_i ⋯ H_{j+1} k_j + Σ_{l=j+1}^{i} log f_l) / √K,   O = softmax(s) V,   y = W_O O
        (the gate scaled with the scores, as the authors' kernel)

    Returns ``(y, (K', V), A)``: the key cache of the transformed keys ``H_T ⋯ H_{j+1} k_j / √K`` (with the forget
    gate's two channels ``1, −(G_j − G_T)``), and ``A = softmax(s)``."""
    batch, length, _ = x.shape
    q, k, v = ((x @ w.T).view(batch, length, HEADS, -1) for w in mixer.qkv.weight.chunk(3, dim=0))
    w = short_conv(x @ mixer.direction[0].weight.T @ mixer.direction[1].weight.T, mixer.convs["w"])
    w = F.normalize(w.view(batch, length, HEADS, -1), dim=-1, eps=1e-12)
    beta = 2 * torch.sigmoid(x @ mixer.beta.weight.T + mixer.beta.bias)  # [B, T, H]
    size = q.shape[-1]
    eye = torch.eye(size, dtype=x.dtype)
    factors = eye - beta[..., None, None] * w[..., :, None] * w[..., None, :]  # [B, T, H, K, K]
    scores = x.new_full((batch, HEADS, length, length), -torch.inf)
    cache = torch.zeros(batch, HEADS, length, size, dtype=x.dtype)
    for j in range(length):
        key = k[:, j] / size**0.5  # [B, H, K]
        for i in range(j, length):
            key = key if i == j else torch.einsum("bhkl,bhl->bhk", factors[:, i], key)
            scores[:, :, i, j] = (q[:, i] * key).sum(-1)
        cache[:, :, j] = key
    keys = cache
    if mixer.forget is not None:
        G = F.logsigmoid(x @ mixer.forget.weight.T + mixer.forget.bias).cumsum(1).transpose(1, 2) / size**0.5
        scores = scores + (G[..., :, None] - G[..., None, :]).tril()
        ends = (G - G[..., -1:]).unsqueeze(-1)
        keys = torch.cat([cache, torch.ones_like(ends), -ends], dim=-1)
    A = torch.softmax(scores, dim=-1)
    o = torch.einsum("bhij,bjhv->bihv", A, v).flatten(2)
    return o @ mixer.out.weight.T, (keys, v.transpose(1, 2)), A


@pytest.mark.parametrize("options", [{}, {"forget_gate": True}], ids=["path", "path_fox"])
@pytest.mark.parametrize("part", PARTS)
def test_path_attention_matches_its_paper(part, options):
    mixer = double_mixer("path_attention", D, heads=HEADS, **options)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), path_attention_layer, state_of=lambda s: s.core)


def test_the_positions_come_from_the_data():
    """With β = 0 (every H_t = I) PaTH attention is softmax attention without positions: permuting the earlier
    tokens leaves the last row's weights permuted alike."""
    mixer = double_mixer("path_attention", D, heads=HEADS)
    with torch.no_grad():
        mixer.beta.weight.zero_()
        mixer.beta.bias.fill_(-60.0)
    x = inputs(1, 6, D, seed=2)
    order = torch.tensor([2, 0, 4, 1, 3, 5])
    last, permuted = mixer.coefficients(x)[0, :, -1], mixer.coefficients(x[:, order])[0, :, -1]
    torch.testing.assert_close(permuted, last[:, order], rtol=1e-10, atol=1e-12)
