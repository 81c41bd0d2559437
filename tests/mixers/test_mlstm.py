"""mLSTM (xLSTM, Beck et al. 2024, §2.3 and appendix) against its stabilized recurrence, written as a loop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_blocks import rms_norm
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS = 16, 2


def mlstm_layer(mixer, x):
    """Per head, ``q, k, v = W_q u, W_k u / √K, W_v u``, ``ĩ_t = w_iᵀu_t + b_i``,
    ``log f_t = logsigmoid(w_fᵀu_t + b_f)``, ``o_t = σ(W_o u_t + b_o)``, with the max-stabilizer ``m_t``::

        m_t = max(log f_t + m_{t-1}, ĩ_t),   i'_t = exp(ĩ_t − m_t),   f'_t = exp(log f_t + m_{t-1} − m_t)
        C_t = f'_t C_{t-1} + i'_t k_t v_tᵀ,   n_t = f'_t n_{t-1} + i'_t k_t
        h̃_t = C_tᵀ q_t / max(|n_tᵀ q_t|, exp(−m_t)),   y_t = W_O (o_t ⊙ RMSNorm_head(h̃_t))

    The per-head RMSNorm stands for the multi-head norm of the xLSTM block (the mixer's docstring puts it inside
    ``h_t``).  Returns ``(y, (e^m C, e^m n), A)`` — the mixer keeps the unstabilized state — with
    ``A_ij = α_ij / max(|Σ_j α_ij|, 1)``, ``α_ij = exp(ĩ_j + Σ_{j<t≤i} log f_t) q_iᵀk_j``."""
    batch, length, _ = x.shape
    w_q, w_k, w_v = mixer.qkv.weight.chunk(3, dim=0)
    q, k, v = ((x @ w.T).view(batch, length, HEADS, -1) for w in (w_q, w_k, w_v))
    k = k / k.shape[-1] ** 0.5
    i_tilde = x @ mixer.input_gate.weight.T + mixer.input_gate.bias  # [B, T, H]
    log_f = F.logsigmoid(x @ mixer.forget_gate.weight.T + mixer.forget_gate.bias)
    o = torch.sigmoid(x @ mixer.output_gate.weight.T + mixer.output_gate.bias)  # [B, T, D]
    C, n = x.new_zeros(batch, HEADS, k.shape[-1], v.shape[-1]), x.new_zeros(batch, HEADS, k.shape[-1])
    m = x.new_zeros(batch, HEADS)
    outputs = []
    for t in range(length):
        m_next = torch.maximum(log_f[:, t] + m, i_tilde[:, t])
        i_gate, f_gate = torch.exp(i_tilde[:, t] - m_next), torch.exp(log_f[:, t] + m - m_next)
        C = f_gate[..., None, None] * C + i_gate[..., None, None] * k[:, t, :, :, None] * v[:, t, :, None, :]
        n, m = f_gate[..., None] * n + i_gate[..., None] * k[:, t], m_next
        denominator = torch.maximum(torch.einsum("bhk,bhk->bh", n, q[:, t]).abs(), torch.exp(-m))
        outputs.append(torch.einsum("bhkv,bhk->bhv", C, q[:, t]) / denominator[..., None])
    h = rms_norm(torch.stack(outputs, dim=1), mixer.norm.weight, mixer.norm.eps).flatten(2)
    y = (o * h) @ mixer.out.weight.T
    log_f_sum = log_f.cumsum(1).transpose(1, 2)  # [B, H, T]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    gates = torch.exp(log_f_sum[..., :, None] - log_f_sum[..., None, :] + i_tilde.transpose(1, 2)[..., None, :])
    alpha = torch.einsum("bihk,bjhk->bhij", q, k) * gates.masked_fill(~causal, 0.0)
    return (
        y,
        (C * torch.exp(m)[..., None, None], n * torch.exp(m)[..., None]),
        alpha / alpha.sum(-1, keepdim=True).abs().clamp(min=1.0),
    )


@pytest.mark.parametrize("part", PARTS)
def test_mlstm_matches_its_paper(part):
    mixer = double_mixer("mlstm", D, heads=HEADS)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), mlstm_layer)
