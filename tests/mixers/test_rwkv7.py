"""RWKV-7 (Peng et al. 2025) against its time mixing written as a loop over time, in the paper's row layout."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqdyn import mixers
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS = 16, 2


def rwkv7_layer(mixer, x):
    """Peng et al. 2025 (and flash-linear-attention's ``RWKV7Attention``, its first layer), the state ``S`` ``[V, K]``
    per head as the paper writes it::

        x^c = x + μ_c (x_{t−1} − x_t);   r, k, v = W_r x^r, W_k x^k, W_v x^v
        w = −e^{−½} σ(W_w2 tanh(W_w1 x^w) + b_w);   a = σ(W_a2 W_a1 x^a + b_a);   g = W_g2 σ(W_g1 x^g)
        κ̂ = normalize(k ⊙ ξ);   k ← k ⊙ (1 + (a − 1) α)
        S_t = S_{t−1} (diag(e^{w_t}) − κ̂_t (a_t ⊙ κ̂_t)ᵀ) + v_t k_tᵀ;   o_t = S_t r_t
        y = W_o ((GroupNorm(o) + (r ⋅ (ρ ⊙ k)) v) ⊙ g)

    Returns ``(y, (Sᵀ, x_{T−1}), A)`` with ``A_ij = r_iᵀ Λ_i ⋯ Λ_{j+1} k_j``, ``Λ_t`` the transposed transition."""
    batch, length, width = x.shape
    heads, dim = mixer.heads, width // mixer.heads
    previous = torch.cat([x.new_zeros(batch, 1, width), x[:, :-1]], dim=1)
    mixed = [x + mu * (previous - x) for mu in mixer.mix]
    w_r, w_k, w_v = mixer.rkv.weight.chunk(3)
    r, k, v = mixed[0] @ w_r.T, mixed[2] @ w_k.T, mixed[3] @ w_v.T
    down, _, up = mixer.decay
    w = -math.exp(-0.5) * torch.sigmoid(torch.tanh(mixed[1] @ down.weight.T) @ up.weight.T + up.bias)
    down, _, up = mixer.rate
    a = torch.sigmoid((mixed[4] @ down.weight.T) @ up.weight.T + up.bias)
    down, _, up = mixer.gate
    g = torch.sigmoid(mixed[5] @ down.weight.T) @ up.weight.T
    heads_of = lambda t: t.view(batch, length, heads, dim)  # noqa: E731
    removal = heads_of(k * mixer.removal_scale)
    removal = removal / removal.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    k = k * (1 + (a - 1) * mixer.rate_key_mix)
    r, k, v, w, a = (heads_of(t) for t in (r, k, v, w, a))

    def transition(t):  # diag(e^{w_t}) − κ̂_t (a_t ⊙ κ̂_t)ᵀ  [B, H, K, K], acting on the right of S
        return torch.diag_embed(torch.exp(w[:, t])) - removal[:, t, :, :, None] * (a[:, t] * removal[:, t])[:, :, None]

    S, outputs = x.new_zeros(batch, heads, dim, dim), []
    for t in range(length):
        S = S @ transition(t) + v[:, t, :, :, None] * k[:, t, :, None, :]
        outputs.append(torch.einsum("bhvk,bhk->bhv", S, r[:, t]))
    o = torch.stack(outputs, dim=1)  # [B, T, H, V]
    mean, var = o.mean(-1, keepdim=True), o.var(-1, unbiased=False, keepdim=True)
    normed = ((o - mean) / torch.sqrt(var + mixer.norm.eps)).flatten(2) * mixer.norm.weight + mixer.norm.bias
    bonus = ((r * mixer.bonus * k).sum(-1, keepdim=True) * v).flatten(2)
    y = ((normed + bonus) * g) @ mixer.out.weight.T
    A = x.new_zeros(batch, heads, length, length)
    for j in range(length):
        row = k[:, j, :, None, :]  # k_jᵀ as a row [B, H, 1, K], carried to the right by the transitions
        for i in range(j, length):
            row = row if i == j else row @ transition(i)
            A[:, :, i, j] = torch.einsum("bhk,bhk->bh", row[:, :, 0], r[:, i])
    return y, (S.transpose(-1, -2), x[:, -1:]), A


@pytest.mark.parametrize("part", PARTS)
def test_rwkv7_matches_its_paper(part):
    mixer = double_mixer("rwkv7", D, heads=HEADS, decay_low_rank=8, rate_low_rank=8, gate_low_rank=8)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), rwkv7_layer, state_of=lambda s: (s.core, s.conv["shift"]))


def test_the_transition_is_diagonal_plus_rank_one_with_decays_below_one():
    from seqdyn.mixers.base import MixerState

    mixer = double_mixer("rwkv7", D, heads=HEADS, decay_low_rank=8, rate_low_rank=8, gate_low_rank=8)
    dynamics, _ = mixer.core_inputs(inputs(1, 7, D, seed=2), MixerState())
    assert dynamics.householder is None and dynamics.low_rank_write.shape == (1, 7, HEADS, D // HEADS)
    decays = torch.exp(dynamics.log_decay)
    assert bool((decays > math.exp(-math.exp(-0.5)) - 1e-12).all() and (decays < 1).all())
    torch.testing.assert_close(dynamics.low_rank_read.norm(dim=-1), torch.ones(1, 7, HEADS, dtype=torch.float64))


def test_the_first_layer_starts_as_its_authors_do():
    """flash-linear-attention's initialization: the first channel's decay bias −5.5 + 2.5 ζ_0 (ζ_0 = −1 at a head's
    first channel), the mixes 1 − (n/D)^p, the learning rate's and the bonus's constants."""
    torch.manual_seed(0)
    mixer = mixers.build("rwkv7", D, heads=HEADS)
    assert bool((mixer.rate_key_mix == 1.02).all()) and bool((mixer.bonus == -0.04).all())
    torch.testing.assert_close(mixer.decay[2].bias[0].double(), torch.tensor(-5.5 - 2.5, dtype=torch.float64))
    torch.testing.assert_close(mixer.mix[0, 0], torch.tensor(1.0))
    torch.testing.assert_close(mixer.mix[1, D // 2], torch.tensor(1 - 0.5**0.9))
    assert mixer.decay[0].in_features == D and mixer.decay[0].out_features == 32  # LoRA widths of at least 32


def test_the_token_shift_restarts_in_packed_sequences():
    mixer = double_mixer("rwkv7", D, heads=HEADS, decay_low_rank=8, rate_low_rank=8, gate_low_rank=8)
    first, second = inputs(1, 5, D, seed=3), inputs(1, 4, D, seed=4)
    packed = mixer(torch.cat([first, second], dim=1), cu_seqlens=torch.tensor([0, 5, 9]))
    torch.testing.assert_close(packed, torch.cat([mixer(first), mixer(second)], dim=1), rtol=1e-10, atol=1e-10)
    assert F.mse_loss(mixer(second), mixer(torch.cat([first, second], 1))[:, 5:]) > 0  # the shift reads x_{t−1}
