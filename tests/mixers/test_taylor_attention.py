"""Taylor attention against seed 000 Lemma 1 / appendix C (the degree-2 feature map of Based, Arora et al. 2024),
written as its recurrence on explicit features."""

from __future__ import annotations

import math

import pytest
import torch

from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS, N = 16, 2, 3


def taylor_attention_layer(mixer, x):
    """``φ(x) = [1, x, x⊗x/√2]`` on ``q/n^¼``, ``k/n^¼`` (``φ(q)ᵀφ(k) = 1 + s + s²/2`` with ``s = qᵀk/√n``)::

        S_i = S_{i-1} + φ(k_i) v_iᵀ,   z_i = z_{i-1} + φ(k_i),   y_i = S_iᵀ φ(q_i) / z_iᵀ φ(q_i),   output W_O y

    Returns ``(y, (S, z), A)`` with ``A_ij = (1 + s_ij + s_ij²/2) / Σ_{j'≤i} (…)`` from the scores themselves."""
    batch, length, _ = x.shape
    w_q, w_k = mixer.qk.weight.chunk(2, dim=0)
    q, k = ((x @ w.T).view(batch, length, HEADS, N) / N**0.25 for w in (w_q, w_k))

    def features(t: torch.Tensor) -> torch.Tensor:
        """``φ(t) = [1, t, t⊗t/√2]`` over the last dimension."""
        return torch.cat(
            [torch.ones_like(t[..., :1]), t, (t[..., :, None] * t[..., None, :]).flatten(-2) / math.sqrt(2)], dim=-1
        )

    fq, fk = features(q), features(k)
    v = (x @ mixer.v.weight.T).view(batch, length, HEADS, -1)
    S, z, outputs = x.new_zeros(batch, HEADS, fk.shape[-1], v.shape[-1]), x.new_zeros(batch, HEADS, fk.shape[-1]), []
    for i in range(length):
        S = S + fk[:, i, :, :, None] * v[:, i, :, None, :]
        z = z + fk[:, i]
        outputs.append(torch.einsum("bhn,bhnv->bhv", fq[:, i], S) / torch.einsum("bhn,bhn->bh", fq[:, i], z)[..., None])
    y = torch.stack(outputs, dim=1).reshape(batch, length, -1) @ mixer.out.weight.T
    s = torch.einsum("bihn,bjhn->bhij", q, k)
    taylor_exp = (1 + s + s**2 / 2).tril()
    return y, (S, z), taylor_exp / taylor_exp.sum(-1, keepdim=True)


@pytest.mark.parametrize("part", PARTS)
def test_taylor_attention_matches_its_paper(part):
    mixer = double_mixer("taylor_attention", D, heads=HEADS, state_dim=N, degree=2)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), taylor_attention_layer)
