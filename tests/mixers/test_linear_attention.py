"""Linear attention against Katharopoulos et al. 2020 (seed 000 eq. 16), written as its recurrence."""

from __future__ import annotations

import pytest
import torch

from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS, N = 16, 2, 4


def linear_attention_layer(mixer, x):
    """``ψ = elu + 1`` on ``q = W_Q u``, ``k = W_K u`` (n features per head), ``v = W_V u``::

        S_i = S_{i-1} + ψ(k_i) v_iᵀ,   z_i = z_{i-1} + ψ(k_i),   y_i = S_iᵀ ψ(q_i) / z_iᵀ ψ(q_i),   output W_O y

    Returns ``(y, (S, z), A)`` with ``A_ij = ψ(q_i)ᵀψ(k_j) / Σ_{j'≤i} ψ(q_i)ᵀψ(k_j')``."""
    batch, length, _ = x.shape
    w_q, w_k = mixer.qk.weight.chunk(2, dim=0)
    elu1 = lambda t: torch.where(t > 0, t + 1, torch.exp(t))  # noqa: E731  (elu(t) + 1)
    q, k = (elu1(x @ w.T).view(batch, length, HEADS, N) for w in (w_q, w_k))
    v = (x @ mixer.v.weight.T).view(batch, length, HEADS, -1)
    S, z, outputs = x.new_zeros(batch, HEADS, N, v.shape[-1]), x.new_zeros(batch, HEADS, N), []
    for i in range(length):
        S = S + k[:, i, :, :, None] * v[:, i, :, None, :]
        z = z + k[:, i]
        outputs.append(torch.einsum("bhn,bhnv->bhv", q[:, i], S) / torch.einsum("bhn,bhn->bh", q[:, i], z)[..., None])
    y = torch.stack(outputs, dim=1).reshape(batch, length, -1) @ mixer.out.weight.T
    scores = torch.einsum("bihn,bjhn->bhij", q, k).tril()
    return y, (S, z), scores / scores.sum(-1, keepdim=True)


def faint_start(mixer, x, tokens=3):
    """``x`` whose first tokens project to ``q, k ≈ −3`` everywhere, so ``ψ(q)ᵀψ(k) ≈ n e^{-6} < 1``: rows whose
    sums are below 1, where ``Σ_j`` and another normalizer such as ``max(|Σ_j|, 1)`` differ."""
    faint = torch.linalg.lstsq(mixer.qk.weight, torch.full((mixer.qk.weight.shape[0], 1), -3.0, dtype=x.dtype))
    x = x.clone()
    x[:, :tokens] = faint.solution.T + 0.1 * x[:, :tokens]
    return x


@pytest.mark.parametrize("part", PARTS)
def test_linear_attention_matches_its_paper(part):
    mixer = double_mixer("linear_attention", D, heads=HEADS, state_dim=N)
    compare_with_paper(part, mixer, faint_start(mixer, inputs(2, 9, D, seed=1)), linear_attention_layer)
