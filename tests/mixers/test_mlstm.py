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


def xlstm_7b_layer(mixer, x):
    """xLSTM 7B's mLSTM layer (Beck et al. 2025, eqs. 7–13; transformers' ``xLSTMLayer`` with its step kernel):
    ``q, k = W_q u, W_k u`` of K channels per head, ``v = W_v u`` of V, gates soft-capped, ``ĩ_t, f̃_t =
    cap·tanh(· / cap)``, the stabilized recurrence of :func:`mlstm_layer` with ``q`` scaled by ``K^-½`` and the
    normalizer ``h̃_t = C̃_tᵀ q_t / (max(|ñ_tᵀ q_t|, e^{−m_t}) + ε)``; LayerNorm per head (no bias) with a weight per
    channel, ``y_t = W_O (σ(W_o u_t) ⊙ h_t)``.  Returns ``(y, (e^m C̃ / √K, e^m ñ / √K, m), A)`` with
    ``A_ij = α_ij / (max(|Σ_j α_ij|, 1) + ε e^{m_i})``."""
    batch, length, _ = x.shape
    heads, eps, cap = mixer.heads, mixer.eps, mixer.gate_soft_cap
    w_q, w_k, w_v = mixer.qkv.weight.split([mixer.key_width, mixer.key_width, mixer.value_width], dim=0)
    q, k, v = ((x @ w.T).view(batch, length, heads, -1) for w in (w_q, w_k, w_v))
    q = q / q.shape[-1] ** 0.5
    i_tilde = cap * torch.tanh((x @ mixer.input_gate.weight.T + mixer.input_gate.bias) / cap)
    log_f = F.logsigmoid(cap * torch.tanh((x @ mixer.forget_gate.weight.T + mixer.forget_gate.bias) / cap))
    o = torch.sigmoid(x @ mixer.output_gate.weight.T + mixer.output_gate.bias)
    C, n = x.new_zeros(batch, heads, k.shape[-1], v.shape[-1]), x.new_zeros(batch, heads, k.shape[-1])
    m = x.new_zeros(batch, heads)
    outputs, levels = [], []
    for t in range(length):
        m_next = torch.maximum(log_f[:, t] + m, i_tilde[:, t])
        i_gate, f_gate = torch.exp(i_tilde[:, t] - m_next), torch.exp(log_f[:, t] + m - m_next)
        C = f_gate[..., None, None] * C + i_gate[..., None, None] * k[:, t, :, :, None] * v[:, t, :, None, :]
        n, m = f_gate[..., None] * n + i_gate[..., None] * k[:, t], m_next
        denominator = torch.maximum(torch.einsum("bhk,bhk->bh", n, q[:, t]).abs(), torch.exp(-m)) + eps
        outputs.append(torch.einsum("bhkv,bhk->bhv", C, q[:, t]) / denominator[..., None])
        levels.append(m)
    h = torch.stack(outputs, dim=1)  # [B, T, H, V]
    h = (h - h.mean(-1, keepdim=True)) / (h.var(-1, unbiased=False, keepdim=True) + mixer.norm.eps).sqrt()
    y = (o * h.flatten(2) * mixer.norm_weight) @ mixer.out.weight.T
    log_f_sum = log_f.cumsum(1).transpose(1, 2)  # [B, H, T]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    gates = torch.exp(log_f_sum[..., :, None] - log_f_sum[..., None, :] + i_tilde.transpose(1, 2)[..., None, :])
    alpha = torch.einsum("bihk,bjhk->bhij", q, k) * gates.masked_fill(~causal, 0.0)
    floor = eps * torch.exp(torch.stack(levels, dim=2))[..., None]  # ε e^{m_i} [B, H, T, 1]
    unscaled = torch.exp(m) / q.shape[-1] ** 0.5  # the mixer's state: unstabilized, K^-½ in its impulses b_t
    state = (C * unscaled[..., None, None], n * unscaled[..., None], m)
    return y, state, alpha / (alpha.sum(-1, keepdim=True).abs().clamp(min=1.0) + floor)


def xlstm_7b_mixer():
    mixer = double_mixer(
        "mlstm", D, heads=HEADS, key_width=8, value_width=24, head_norm="layer", gate_soft_cap=2.0, eps=0.05
    )
    with torch.no_grad():  # input gates up to e^3 and down to e^-2: the stabilizer moves, and ε e^m with it
        mixer.input_gate.bias.copy_(torch.tensor([3.0, -2.0], dtype=torch.float64))
    return mixer


@pytest.mark.parametrize("part", PARTS)
def test_mlstm_with_xlstm_7b_options_matches_its_paper(part):
    state_of = lambda state: (*state.core, state.scale)  # noqa: E731  (S, z) and the stabilizer m
    compare_with_paper(part, xlstm_7b_mixer(), inputs(2, 9, D, seed=3), xlstm_7b_layer, state_of=state_of)


def test_the_stabilizer_restarts_at_each_packed_sequence():
    mixer, x = xlstm_7b_mixer(), inputs(1, 12, D, seed=4)
    from seqdyn.core.packing import Packing

    packing = Packing.of(torch.tensor([0, 5, 12]), 12, 1, x.device)
    packed = mixer.forward_packed(x, packing, "chunk")
    alone = torch.cat([mixer(x[:, :5]), mixer(x[:, 5:])], dim=1)
    torch.testing.assert_close(packed, alone, rtol=1e-10, atol=1e-10)


def test_xlstm_7b_options_are_checked():
    with pytest.raises(ValueError, match="head_norm"):
        double_mixer("mlstm", D, heads=HEADS, head_norm="group")
    with pytest.raises(ValueError, match="eps"):
        double_mixer("mlstm", D, heads=HEADS, eps=-1.0)
    with pytest.raises(ValueError, match="value_width"):
        double_mixer("mlstm", D, heads=HEADS, value_width=5)
