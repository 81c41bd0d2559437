"""Normalized attention against its definition (seed 000 eq. 21, §4.2), written as its recurrence."""

from __future__ import annotations

import pytest
import torch

from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS, N = 16, 2, 4


def normalized_attention_layer(mixer, x):
    """Identity features ``q = W_Q u``, ``k = W_K u`` (n per head), ``v = W_V u``, learned ``η_i = exp(W_η u_i)``::

        S_i = S_{i-1} + k_i v_iᵀ,   y_i = S_iᵀ q_i / η_i,   output W_O y

    Returns ``(y, S, A)`` with ``A_ij = q_iᵀk_j / η_i``.  Eq. 21 has ``W_η ∈ R^{1×d}`` without a bias; the mixer's
    ``W_η`` (one row per head) adds one (``nn.Linear(d_model, heads, bias=True)``), read here as it is."""
    batch, length, _ = x.shape
    w_q, w_k = mixer.qk.weight.chunk(2, dim=0)
    q, k = ((x @ w.T).view(batch, length, HEADS, N) for w in (w_q, w_k))
    v = (x @ mixer.v.weight.T).view(batch, length, HEADS, -1)
    eta = torch.exp(x @ mixer.eta.weight.T + mixer.eta.bias)  # [B, T, H]
    S, outputs = x.new_zeros(batch, HEADS, N, v.shape[-1]), []
    for i in range(length):
        S = S + k[:, i, :, :, None] * v[:, i, :, None, :]
        outputs.append(torch.einsum("bhn,bhnv->bhv", q[:, i], S) / eta[:, i, :, None])
    y = torch.stack(outputs, dim=1).reshape(batch, length, -1) @ mixer.out.weight.T
    A = torch.einsum("bihn,bjhn->bhij", q, k).tril() / eta.transpose(1, 2)[..., None]
    return y, S, A


@pytest.mark.parametrize("part", PARTS)
def test_normalized_attention_matches_its_paper(part):
    mixer = double_mixer("normalized_attention", D, heads=HEADS, state_dim=N)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), normalized_attention_layer)
