"""Forgetting attention (Lin et al. 2025) against its attention written out as a masked softmax."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS = 16, 2


def forgetting_attention_layer(mixer, x):
    """Lin et al. 2025, eq. 3 (FoX Pro's options as the mixer has them)::

        q, k, v = W_Q u, W_K u, W_V u per head   (q, k ← RMSNorm_head(q), RMSNorm_head(k) with qk_norm)
        f_t = σ(w_fᵀ u_t + b_f),   D_ij = Σ_{l=j+1}^{i} log f_l  (−∞ above the diagonal)
        O = softmax(Q Kᵀ / √K + D) V,   y = W_O O   (σ(W_g u) ⊙ O with the output gate)

    Returns ``(y, (K', V), A)`` with the key cache ``K'_j = [k_j / √K, 1, −(G_j − G_T)]`` (``G = Σ log f``: the
    decay's two channels, relative to the end) and ``A = softmax(…)``."""
    batch, length, _ = x.shape
    q, k, v = ((x @ w.T).view(batch, length, HEADS, -1).transpose(1, 2) for w in mixer.qkv.weight.chunk(3, dim=0))
    if mixer.qk_norm is not None:
        norm = lambda t, w: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * w[:, None]  # noqa: E731
        q, k = norm(q, mixer.qk_norm[0]), norm(k, mixer.qk_norm[1])
    G = F.logsigmoid(x @ mixer.forget.weight.T + mixer.forget.bias).cumsum(1).transpose(1, 2)  # [B, H, T]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    bias = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf"))
    A = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias, dim=-1)  # [B, H, T, T]
    o = (A @ v).transpose(1, 2).flatten(2)
    if mixer.gate is not None:
        o = torch.sigmoid(x @ mixer.gate.weight.T) * o
    ends = (G - G[..., -1:]).unsqueeze(-1)  # [B, H, T, 1]
    keys = torch.cat([k / k.shape[-1] ** 0.5, torch.ones_like(ends), -ends], dim=-1)
    return o @ mixer.out.weight.T, (keys, v), A


@pytest.mark.parametrize("options", [{}, {"qk_norm": True, "output_gate": True}], ids=["fox", "fox_pro"])
@pytest.mark.parametrize("part", PARTS)
def test_forgetting_attention_matches_its_paper(part, options):
    mixer = double_mixer("forgetting_attention", D, heads=HEADS, **options)
    if mixer.qk_norm is not None:
        with torch.no_grad():
            mixer.qk_norm.uniform_(0.5, 1.5)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), forgetting_attention_layer, state_of=lambda s: s.core)


def test_a_gate_that_never_forgets_is_softmax_attention():
    """f → 1 (a large forget bias): FoX's weights are softmax attention's."""
    mixer = double_mixer("forgetting_attention", D, heads=HEADS)
    with torch.no_grad():
        mixer.forget.weight.zero_()
        mixer.forget.bias.fill_(60.0)
    x = inputs(1, 9, D, seed=2)
    A = mixer.coefficients(x)
    q, k, _ = ((x @ w.T).view(1, 9, HEADS, -1).transpose(1, 2) for w in mixer.qkv.weight.chunk(3, dim=0))
    scores = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).masked_fill(
        ~torch.ones(9, 9, dtype=torch.bool).tril(), -torch.inf
    )
    torch.testing.assert_close(A, scores.softmax(-1), rtol=1e-12, atol=1e-12)
