"""Lightning attention (MiniMax-01's linear layer) against its recurrence written as a loop over time."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqdyn.mixers.lightning_attention import lightning_log_decays
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS = 16, 2


def lightning_layer(mixer, x):
    """MiniMax 2025 (transformers' ``MiniMaxLightningAttention`` in its recurrent form)::

        [q_h, k_h, v_h] = SiLU(W_qkv u_t) per head,   S_t = λ_h S_{t−1} + k_t v_tᵀ,   o_t = S_tᵀ q_t
        y_t = W_O (σ(W_g u_t) ⊙ RMSNorm([o_t1, …, o_tH]))

    Returns ``(y, S, A)`` with ``A_ij = λ^{i−j} q_iᵀ k_j``."""
    batch, length, _ = x.shape
    q, k, v = F.silu(x @ mixer.qkv.weight.T).view(batch, length, HEADS, -1).chunk(3, dim=-1)
    decay = torch.exp(mixer.log_lambda)  # [H]
    S, outputs = x.new_zeros(batch, HEADS, q.shape[-1], v.shape[-1]), []
    for t in range(length):
        S = decay[:, None, None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    o = torch.stack(outputs, dim=1).flatten(2)
    normed = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + mixer.norm.eps) * mixer.norm.weight
    y = (torch.sigmoid(x @ mixer.gate.weight.T) * normed) @ mixer.out.weight.T
    steps = torch.arange(length)
    powers = (steps[:, None] - steps[None, :]).clamp(min=0)
    causal = (steps[:, None] >= steps[None, :]).to(x.dtype)
    A = torch.einsum("bihk,bjhk->bhij", q, k) * decay[:, None, None] ** powers * causal
    return y, S, A


@pytest.mark.parametrize("part", PARTS)
def test_lightning_attention_matches_its_paper(part):
    mixer = double_mixer("lightning_attention", D, heads=HEADS)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), lightning_layer)


def test_the_decays_are_minimax_slopes_shrinking_with_depth():
    """s_h = (2^{−8/H})^{h+1} (1 − l/(L − 1 + 10⁻⁵) + 10⁻⁵): H = 8 gives 1/2, 1/4, …; the last layer barely decays."""
    first = lightning_log_decays(8, 0, 4)
    torch.testing.assert_close(
        -first, torch.tensor([2.0 ** -(h + 1) for h in range(8)], dtype=torch.float64) * (1 + 1e-5)
    )
    last = lightning_log_decays(8, 3, 4)
    assert math.isclose(-float(last[0]), 0.5 * (1 - 3 / (3 + 1e-5) + 1e-5), rel_tol=1e-12)


def test_the_layer_must_be_one_of_the_models():
    from seqdyn import mixers

    with pytest.raises(ValueError, match="layer: expected 0 ≤ layer < layers = 2, got 2"):
        mixers.build("lightning_attention", D, layer=2, layers=2)
