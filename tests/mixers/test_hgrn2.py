"""HGRN2 (Qin et al. 2024) against its recurrence written as a loop over time."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS, EXPAND = 16, 2, 3


def hgrn2_layer(mixer, x):
    """Qin et al. 2024, eq. 6, with flash-linear-attention's layer around it (no convolution)::

        q_t = SiLU(W_q u_t),   f_t = σ(W_f u_t),   i_t = W_i u_t
        S_t = Diag(f_t) S_{t−1} + (1 − f_t) i_tᵀ   per head,   o_t = S_tᵀ q_t / √K
        y_t = W_O RMSNorm([o_t1, …, o_tH])

    Returns ``(y, S / √K, A)`` with ``A_ij = q_iᵀ (f_i ⊙ ⋯ ⊙ f_{j+1} ⊙ (1 − f_j)) / √K``."""
    batch, length, _ = x.shape
    heads = mixer.heads
    q, f, i = (x @ mixer.qfi.weight.T).split(mixer.widths, dim=-1)
    q = F.silu(q).view(batch, length, heads, -1) / EXPAND**0.5
    forget = torch.sigmoid(f).view(batch, length, heads, -1)  # [B, T, H, K]
    i = i.view(batch, length, heads, -1)
    S, outputs = x.new_zeros(batch, heads, EXPAND, i.shape[-1]), []
    for t in range(length):
        S = forget[:, t, :, :, None] * S + (1 - forget[:, t, :, :, None]) * i[:, t, :, None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    o = torch.stack(outputs, dim=1).flatten(2)
    normed = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + mixer.norm.eps) * mixer.norm.weight
    y = normed @ mixer.out.weight.T
    A = x.new_zeros(batch, heads, length, length)
    for j in range(length):
        carried = 1 - forget[:, j]  # [B, H, K]
        for t in range(j, length):
            carried = carried if t == j else forget[:, t] * carried
            A[:, :, t, j] = (q[:, t] * carried).sum(-1)
    return y, S / EXPAND**0.5, A


@pytest.mark.parametrize("part", PARTS)
def test_hgrn2_matches_its_paper(part):
    mixer = double_mixer("hgrn2", D, heads=HEADS, expand_ratio=EXPAND)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), hgrn2_layer)


def test_the_input_gate_is_tied_to_the_forget_gate():
    """k_t = 1 − f_t: a channel that forgets nothing (f → 1) takes no input."""
    from seqdyn.mixers.base import MixerState

    mixer = double_mixer("hgrn2", D, heads=HEADS, expand_ratio=EXPAND)
    dynamics, _ = mixer.core_inputs(inputs(1, 5, D, seed=2), MixerState())
    torch.testing.assert_close(dynamics.k, 1 - torch.exp(dynamics.log_decay), rtol=1e-12, atol=1e-12)
