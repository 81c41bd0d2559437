"""Gated Linear Attention (Yang et al. 2023) against its recurrent form, written as a loop over time."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_blocks import head_output, short_conv
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS, CONV = 16, 2, 3
TEMPERATURE = 16.0  # τ of the gate, Yang et al. 2023 §4.4


def gla_layer(mixer, x, conv=False):
    """Per head, with the low-rank gate ``α_t = sigmoid(W_α² W_α¹ u_t + b_α)^{1/τ}`` per key channel and, with
    ``conv``, ``q, k, v ← SiLU(ShortConv(q, k, v))`` each (flash-linear-attention's GLA option)::

        S_t = diag(α_t) S_{t-1} + (k_t / √K) v_tᵀ,   o_t = S_tᵀ q_t,   y_t = W_O (RMSNorm(o_t) ⊙ SiLU(W_r u_t))

    (the mixer's per-head norm is an RMSNorm with a learned weight, as in flash-linear-attention's GLA).
    Returns ``(y, (S, the convolutions' last w − 1 inputs), A)`` with ``A_ij = Σ_c q_ic k_jc Π_{j<t≤i} α_tc / √K``."""
    batch, length, _ = x.shape
    raw = {name: x @ getattr(mixer, name).weight.T for name in "qkv"}
    projected = {name: short_conv(t, mixer.convs[name]) for name, t in raw.items()} if conv else raw
    q, k, v = (projected[name].view(batch, length, HEADS, -1) for name in "qkv")
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
    conv_states = tuple(raw[name][:, length - CONV + 1 :] for name in "qkv") if conv else ()
    return y, (S, *conv_states), A


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("conv", [False, True])
def test_gla_matches_its_paper(conv, part):
    mixer = double_mixer("gla", D, heads=HEADS, gate_low_rank=4, short_conv=conv, conv_size=CONV)
    compare_with_paper(
        part,
        mixer,
        inputs(2, 9, D, seed=1),
        lambda mixer, x: gla_layer(mixer, x, conv),
        state_of=lambda state: (state.core, *state.conv.values()),
    )
