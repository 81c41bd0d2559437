"""TTT-Linear (Sun et al. 2024; textbook seed 004) against its inner loop: one gradient step per token."""

from __future__ import annotations

import pytest
import torch

from tests.mixers.paper_blocks import head_output
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS, INNER_LR = 16, 2, 0.7


def ttt_linear_layer(mixer, x):
    """The hidden state is the weight ``W`` of the inner model ``f(k) = Wᵀk``, trained online on the views
    ``k_t = W_K u_t`` (L2-normalized: the mixer's choice, per its docstring, for a stable step), ``v_t = W_V u_t``::

        W_t = W_{t-1} − η ∇_W ½‖Wᵀk_t − v_t‖² |_{W_{t-1}},   o_t = f(q_t / √K; W_t),   y_t = W_O RMSNorm_head(o_t)

    with the gradient taken by autograd.  As the docstring says, η is fixed and there is no inner LayerNorm or
    mini-batch.  Returns ``(y, W / √K, A)`` (the mixer keeps the query scale in its state) with ``A`` read off
    the outputs for one-hot values: ``o_i = Σ_j A_ij v_j`` is linear in the values."""

    def run(k, v, q):
        W, outputs = v.new_zeros(*v.shape[:2], k.shape[-1], v.shape[-1]), []  # [B, H, K, V]
        for t in range(k.shape[2]):
            with torch.enable_grad():
                weight = W.detach().requires_grad_(True)
                loss = 0.5 * (torch.einsum("bhkv,bhk->bhv", weight, k[:, :, t]) - v[:, :, t]).pow(2).sum()
                (gradient,) = torch.autograd.grad(loss, weight)
            W = W - INNER_LR * gradient
            outputs.append(torch.einsum("bhkv,bhk->bhv", W, q[:, :, t]) / q.shape[-1] ** 0.5)
        return torch.stack(outputs, dim=2), W  # [B, H, T, V]

    batch, length, _ = x.shape
    w_q, w_k, w_v = mixer.qkv.weight.detach().chunk(3, dim=0)
    q, k, v = ((x @ w.T).view(batch, length, HEADS, -1).transpose(1, 2) for w in (w_q, w_k, w_v))
    k = k / k.norm(dim=-1, keepdim=True)
    o, W = run(k, v, q)
    one_hot = torch.eye(length, dtype=x.dtype).expand(batch, HEADS, length, length)
    A = run(k, one_hot, q)[0]  # column j of the values is e_j: o_i = row i of A
    return head_output(mixer.output, o.transpose(1, 2), x, gated=False), W / k.shape[-1] ** 0.5, A


@pytest.mark.parametrize("part", PARTS)
def test_ttt_linear_matches_its_paper(part):
    mixer = double_mixer("ttt_linear", D, heads=HEADS, inner_lr=INNER_LR)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), ttt_linear_layer)
