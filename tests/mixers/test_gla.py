"""Gated Linear Attention (Yang et al. 2023) against its recurrent form, written as a loop over time."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_blocks import head_output
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS = 16, 2
TEMPERATURE = 16.0  # τ of the gate, Yang et al. 2023 §4.4


def gla_layer(mixer, x):
    """Per head, with the low-rank gate ``α_t = sigmoid(W_α² W_α¹ u_t + b_α)^{1/τ}`` per key channel::

        S_t = diag(α_t) S_{t-1} + (k_t / √K) v_tᵀ,   o_t = S_tᵀ q_t,   y_t = W_O (RMSNorm(o_t) ⊙ SiLU(W_r u_t))

    (the mixer's per-head norm is an RMSNorm with a learned weight, as in flash-linear-attention's GLA).
    Returns ``(y, S, A)`` with ``A_ij = Σ_c q_ic k_jc Π_{j<t≤i} α_tc / √K``."""
    batch, length, _ = x.shape
    q, k, v = ((x @ proj.weight.T).view(batch, length, HEADS, -1) for proj in (mixer.q, mixer.k, mixer.v))
    k = k / k.shape[-1] ** 0.5
    gate = mixer.decay
    log_alpha = F.logsigmoid(x @ gate.down.weight.T @ gate.up.weight.T + gate.up.bias).view(q.shape) / TEMPERATURE
    S, outputs = x.new_zeros(batch, HEADS, q.shape[-1], v.shape[-1]), []
    for t in range(length):
        S = torch.exp(log_alpha[:, t, :, :, None]) * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    o = torch.stack(outputs, dim=1)  # [B, T, H, V]
    y = head_output(mixer.output, o, x)
    cumulative = log_alpha.cumsum(1)  # Σ_{t≤i} log α_t  [B, T, H, K]
    decay = torch.exp(cumulative[:, :, None] - cumulative[:, None, :])  # [B, i, j, H, K]
    A = torch.einsum("bihc,bijhc,bjhc->bhij", q, decay, k).tril()
    return y, S, A


@pytest.mark.parametrize("part", PARTS)
def test_gla_matches_its_paper(part):
    mixer = double_mixer("gla", D, heads=HEADS, gate_low_rank=4)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), gla_layer)
