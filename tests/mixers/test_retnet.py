"""Retention (RetNet, Sun et al. 2023) against its recurrent form, written as a loop over time."""

from __future__ import annotations

import pytest
import torch

from tests.mixers.paper_blocks import head_output
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS = 16, 2


def retnet_layer(mixer, x):
    """Per head h, the fixed decay ``γ_h = 1 − 2^{−5−h}``::

        S_t = γ_h S_{t-1} + (k_t / √K) v_tᵀ,   o_t = S_tᵀ q_t,   y_t = W_O (RMSNorm(o_t) ⊙ SiLU(W_G u_t))

    RetNet normalizes each head with GroupNorm; the mixer uses an RMSNorm per head with a learned weight, as its
    docstring and ``seqdyn.layers.HeadOutput`` say (so does flash-linear-attention).  No xPos rotation (docstring).
    Returns ``(y, S, A)`` with ``A_ij = γ_h^{i−j} q_iᵀk_j / √K``."""
    batch, length, _ = x.shape
    w_q, w_k = mixer.qk.weight.chunk(2, dim=0)
    q, k = ((x @ w.T).view(batch, length, HEADS, -1) for w in (w_q, w_k))
    k = k / k.shape[-1] ** 0.5  # RetNet scales the keys (torchscale's MultiScaleRetention)
    v = (x @ mixer.v.weight.T).view(batch, length, HEADS, -1)
    gamma = torch.tensor([1 - 2.0 ** (-5 - h) for h in range(HEADS)], dtype=x.dtype)
    S, outputs = x.new_zeros(batch, HEADS, q.shape[-1], v.shape[-1]), []
    for t in range(length):
        S = gamma[:, None, None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    o = torch.stack(outputs, dim=1)  # [B, T, H, V]
    y = head_output(mixer.output, o, x)
    distance = torch.arange(length)[:, None] - torch.arange(length)[None, :]
    decay = gamma[:, None, None] ** distance.clamp(min=0) * (distance >= 0)
    return y, S, torch.einsum("bihk,bjhk->bhij", q, k) * decay


@pytest.mark.parametrize("part", PARTS)
def test_retnet_matches_its_paper(part):
    mixer = double_mixer("retnet", D, heads=HEADS)
    # the mixer's log γ buffer is made in float32 (torch.tensor of Python floats) and only then cast by .double(),
    # so its decays carry float32 rounding (~1e-9 relative): the tolerance is 1e-7 here, not the default 1e-10
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), retnet_layer, tol=1e-7)
