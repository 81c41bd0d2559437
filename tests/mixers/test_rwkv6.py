"""RWKV-6 (Peng et al. 2024) against its time mixing written as a loop over time."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS = 16, 2
OPTIONS = dict(heads=HEADS, mix_low_rank=4, decay_low_rank=8)


def rwkv6_layer(mixer, x):
    """Peng et al. 2024 eqs. 14–18 (and flash-linear-attention's ``RWKV6Attention``, ``naive_recurrent_rwkv6``)::

        δ = x_{t−1} − x_t;   m_c = W_c2 tanh(W_1 (x + μ δ))_c + λ_c;   x^c = x + m_c δ
        r, k, v, g = W_r x^r, W_k x^k, W_v x^v, W_g x^g;   w = −exp(W_w2 tanh(W_w1 x^w) + b_w)
        o_t = r_tᵀ (S_{t−1} + Diag(u) k_t v_tᵀ),   S_t = Diag(e^{w_t}) S_{t−1} + k_t v_tᵀ
        y = W_o (GroupNorm(o) ⊙ SiLU(g))

    Returns ``(y, (S_T, x_{T−1}), A)`` with ``A_tj = r_tᵀ Diag(e^{w_{t−1}} ⋯ e^{w_{j+1}}) k_j`` (j < t) and
    ``A_tt = r_tᵀ Diag(u) k_t``."""
    batch, length, width = x.shape
    heads = mixer.heads
    previous = torch.cat([x.new_zeros(batch, 1, width), x[:, :-1]], dim=1)
    delta = previous - x
    hidden = torch.tanh((x + delta * mixer.shift_mix) @ mixer.mix_down.weight.T).view(batch, length, 5, -1)
    mixed = {
        name: x + delta * (hidden[:, :, c] @ mixer.mix_up[c].T + mixer.mix_bias[c])
        for c, name in enumerate(("r", "w", "k", "v", "g"))
    }
    r, k, v, g = (mixed[name] @ mixer.projections[name].weight.T for name in ("r", "k", "v", "g"))
    down, _, up = mixer.decay
    w = -torch.exp(torch.tanh(mixed["w"] @ down.weight.T) @ up.weight.T + up.bias)
    r, k, w = (t.view(batch, length, heads, -1) for t in (r, k, w))
    v = v.view(batch, length, heads, -1)
    u = mixer.bonus
    S, outputs = x.new_zeros(batch, heads, k.shape[-1], v.shape[-1]), []
    for t in range(length):
        kv = k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", r[:, t], S + u[None, :, :, None] * kv))
        S = torch.exp(w[:, t])[..., None] * S + kv
    o = torch.stack(outputs, dim=1)
    mean, var = o.mean(-1, keepdim=True), o.var(-1, unbiased=False, keepdim=True)
    normed = ((o - mean) / torch.sqrt(var + mixer.norm.eps)).flatten(2) * mixer.norm.weight + mixer.norm.bias
    y = (normed * torch.nn.functional.silu(g)) @ mixer.out.weight.T
    A = x.new_zeros(batch, heads, length, length)
    for t in range(length):
        A[:, :, t, t] = torch.einsum("bhk,hk,bhk->bh", r[:, t], u, k[:, t])
        carried = r[:, t]  # r_tᵀ decayed back step by step: r_t ⊙ e^{w_{t−1}} ⋯ e^{w_{j+1}}
        for j in range(t - 1, -1, -1):
            A[:, :, t, j] = torch.einsum("bhk,bhk->bh", carried, k[:, j])
            carried = carried * torch.exp(w[:, j])
    return y, (S, x[:, -1:]), A


@pytest.mark.parametrize("part", PARTS)
def test_rwkv6_matches_its_paper(part):
    mixer = double_mixer("rwkv6", D, **OPTIONS)
    compare_with_paper(part, mixer, inputs(2, 9, D, seed=1), rwkv6_layer, state_of=lambda s: (s.core, s.conv["shift"]))


def test_the_output_reads_the_state_before_the_token_with_its_bonus():
    """Without the bonus (u = 0) the current token is not in its own output: the coefficient matrix has a zero
    diagonal; with it, the diagonal is r_tᵀ Diag(u) k_t."""
    mixer = double_mixer("rwkv6", D, **OPTIONS)
    x = inputs(1, 6, D, seed=2)
    with torch.no_grad():
        mixer.bonus.zero_()
    assert bool((torch.diagonal(mixer.coefficients(x), dim1=-2, dim2=-1) == 0).all())


def test_the_widths_and_initialization_are_the_authors():
    torch.manual_seed(0)
    mixer = mixers.build("rwkv6", 32, heads=4)
    assert mixer.key_width == 16 and mixer.value_width == 32 and mixer.bonus.shape == (4, 4)
    assert bool((mixer.bonus == 0).all()) and bool((mixer.decay[2].bias == 0).all())
    bound = 2**-2.5 * (6 / (32 + 16)) ** 0.5  # Xavier-uniform of W_r [16, 32], gain 2^-2.5
    assert float(mixer.projections["r"].weight.detach().abs().max()) <= bound
    with pytest.raises(ValueError, match="heads: 3 does not divide expand_k·d_model"):
        mixers.build("rwkv6", 32, heads=3)
