"""Kimi Delta Attention (Kimi Team 2025) against its layer written as a loop over time."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_blocks import short_conv
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS, CONV = 16, 2, 4


def kda_layer(mixer, x):
    """Kimi Team 2025 (and flash-linear-attention's ``KimiDeltaAttention``, ``naive_recurrent_kda``)::

        q, k, v = SiLU(ShortConv(W_Q u, W_K u, W_V u)),   q, k ← q (‖q‖² + 10⁻⁶)^-½, k (‖k‖² + 10⁻⁶)^-½ per head
        β_t = σ(w_βᵀ u_t),   α_t = exp(−exp(A_log) softplus(W_2 W_1 u_t + b_Δ))  per key channel
        (bounded: α_t = exp(L σ(exp(A_log) (W_2 W_1 u_t + b_Δ))), flash-linear-attention's ``safe_gate``)
        S_t = S_{t−1} ⊙ α_t (rows),   S_t ← S_t + β_t k_t (v_t − S_tᵀ k_t)ᵀ,   o_t = S_tᵀ q_t / √K
        y_t = W_O (RMSNorm_head(o_t) ⊙ σ(W_g2 W_g1 u_t + b_g))

    Returns ``(y, (S / √K, last w − 1 projections), A)`` with
    ``A_ij = q_iᵀ Λ_i ⋯ Λ_{j+1} β_j k_j / √K``, ``Λ_t = (I − β_t k_t k_tᵀ) Diag(α_t)``."""
    batch, length, _ = x.shape
    heads = mixer.heads
    projected = x @ mixer.qkv.weight.T  # W_Q, W_K, W_V stacked
    q, k, v = short_conv(projected, mixer.convs["qkv"]).split(mixer.widths, dim=-1)
    q, k, v = (t.view(batch, length, heads, -1) for t in (q, k, v))
    q, k = (t / (t.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt() for t in (q, k))
    q = q / q.shape[-1] ** 0.5
    beta = torch.sigmoid(x @ mixer.beta.weight.T)  # [B, T, H]
    gate = mixer.decay
    raw = (x @ gate.down.weight.T) @ gate.up.weight.T + gate.dt_bias
    raw, rate = raw.view(batch, length, heads, -1), torch.exp(gate.a_log)[:, None]
    if gate.lower_bound is None:
        alpha = torch.exp(-rate * F.softplus(raw))  # [B, T, H, K]
    else:  # flash-linear-attention's safe gate: log α = L σ(A (W u + b))
        alpha = torch.exp(gate.lower_bound * torch.sigmoid(rate * raw))

    def transition(t, state):  # (I − β_t k_t k_tᵀ) Diag(α_t) applied to a state [B, H, K, ·]
        decayed = alpha[:, t, :, :, None] * state
        return (
            decayed
            - beta[:, t, :, None, None]
            * k[:, t, :, :, None]
            * torch.einsum("bhk,bhk...->bh...", k[:, t], decayed)[:, :, None]
        )

    S, outputs = x.new_zeros(batch, heads, k.shape[-1], v.shape[-1]), []
    for t in range(length):
        S = alpha[:, t, :, :, None] * S
        S = (
            S
            + beta[:, t, :, None, None]
            * k[:, t, :, :, None]
            * (v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], S))[:, :, None]
        )
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    o = torch.stack(outputs, dim=1)
    normed = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + mixer.output.norm.eps) * mixer.output.norm.weight
    down, up = mixer.gate
    output_gate = torch.sigmoid((x @ down.weight.T) @ up.weight.T + up.bias).view_as(normed)
    y = (normed * output_gate).flatten(2) @ mixer.output.out.weight.T
    A = x.new_zeros(batch, heads, length, length)
    for j in range(length):
        impulse = (beta[:, j, :, None] * k[:, j])[..., None]  # x_j^(j) = β_j k_j  [B, H, K, 1]
        for i in range(j, length):
            impulse = impulse if i == j else transition(i, impulse)
            A[:, :, i, j] = torch.einsum("bhk,bhk->bh", q[:, i], impulse[..., 0])
    return y, (S / k.shape[-1] ** 0.5, projected[:, length - mixer.convs["qkv"].width + 1 :]), A


@pytest.mark.parametrize("bound", [None, -5.0], ids=["softplus", "bounded"])
@pytest.mark.parametrize("part", PARTS)
def test_kda_matches_its_paper(part, bound):
    mixer = double_mixer("kda", D, heads=HEADS, conv_size=CONV, decay_lower_bound=bound)
    with torch.no_grad():
        mixer.decay.dt_bias.normal_()
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), kda_layer, state_of=lambda s: (s.core, s.conv["qkv"]))


def test_the_decay_comes_before_the_update():
    """The low-rank form the mixer computes is the decay before the Householder factor (its sub-steps,
    ``decay_first``); the operator's own order, ``Diag(α_t)(I − β_t k_t k_tᵀ)``, gives other outputs: the order is
    what KDA changes."""
    from seqdyn.mixers.base import MixerState

    mixer = double_mixer("kda", D, heads=HEADS, conv_size=CONV)
    x = inputs(1, 9, D, seed=2)
    dynamics, _ = mixer.core_inputs(x, MixerState())
    assert dynamics.log_decay.shape == (1, 9, HEADS, D // HEADS)
    beta = -(dynamics.low_rank_write * dynamics.k).sum(-1) / dynamics.k.square().sum(-1)  # u = −β k
    householder = dynamics.replace(low_rank_write=None, low_rank_read=None, householder=beta)
    computed = mixer.run_core(dynamics)
    torch.testing.assert_close(mixer.run_core(householder.replace(decay_first=True)), computed, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(mixer.run_core(householder), computed, atol=1e-6)


def test_the_decay_is_in_the_unit_interval_per_channel():
    mixer = double_mixer("kda", D, heads=HEADS, conv_size=CONV)
    log_alpha = mixer.decay(inputs(1, 5, D, seed=3))
    assert log_alpha.shape == (1, 5, HEADS, D // HEADS) and bool((log_alpha < 0).all())
    assert log_alpha[..., 0].ne(log_alpha[..., 1]).any(), "the decay is not channel-wise"


def test_the_bounded_decay_stays_above_its_bound_and_a_positive_bound_is_refused():
    mixer = double_mixer("kda", D, heads=HEADS, conv_size=CONV, decay_lower_bound=-2.0)
    log_alpha = mixer.decay(inputs(1, 5, D, seed=3))
    assert bool((log_alpha < 0).all() and (log_alpha > -2.0).all())
    with pytest.raises(ValueError, match="decay_lower_bound: expected a negative"):
        double_mixer("kda", D, heads=HEADS, decay_lower_bound=1.0)
