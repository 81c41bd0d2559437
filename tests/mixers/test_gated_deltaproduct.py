"""Gated DeltaProduct (Siems et al. 2025) against its layer written as a loop over tokens and Householder factors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_blocks import head_output, short_conv
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D, HEADS, CONV, FACTORS = 16, 2, 4, 3


def gated_deltaproduct_layer(mixer, x):
    """Siems et al. 2025, eq. 5, with flash-linear-attention's layer around it (the authors' code)::

        q = SiLU(ShortConv(W_Q u)), [k_t1 … k_tn] = SiLU(ShortConv(W_K u)), [v_t1 … v_tn] = SiLU(ShortConv(W_V u))
        q, k ← q/‖q‖, k/‖k‖ per head,   β_ts = 2σ(w_βsᵀ u_t),   α_t = exp(−exp(A_log) softplus(w_αᵀ u_t + b_Δ))
        S_t,0 = α_t S_{t−1},   S_t,s = (I − β_ts k_ts k_tsᵀ) S_t,s−1 + β_ts k_ts v_tsᵀ,   S_t = S_t,n
        o_t = S_tᵀ q_t / √K,   y_t = W_O (RMSNorm_head(o_t) ⊙ SiLU(W_g u_t))

    Returns ``(y, (S / √K, last w − 1 projections), A)`` with ``A[b, h, i, j·n + s]`` the coefficient of
    ``v_j,s+1`` in ``o_i``: ``q_iᵀ Λ_i ⋯ Λ_{j+1} (I − β_jn k_jn k_jnᵀ) ⋯ (I − β_j,s+2 …) β_j,s+1 k_j,s+1 / √K``."""
    batch, length, _ = x.shape
    n, heads = mixer.householders, mixer.heads
    projected = x @ mixer.qkv.weight.T  # W_Q, W_K, W_V stacked
    q, k, v = short_conv(projected, mixer.convs["qkv"]).split(mixer.widths, dim=-1)
    q = q.view(batch, length, heads, -1)
    k = k.view(batch, length, n, heads, -1)  # the factor outermost in the channels, as the authors'
    v = v.view(batch, length, n, heads, -1)
    q, k = (t / t.norm(dim=-1, keepdim=True) for t in (q, k))
    q = q / q.shape[-1] ** 0.5
    beta = 2 * torch.sigmoid(x @ mixer.beta.weight.T).view(batch, length, n, heads)
    gate = mixer.decay
    alpha = torch.exp(-torch.exp(gate.a_log) * F.softplus(x @ gate.proj.weight.T + gate.dt_bias))  # [B, T, H]

    def factor(t, s, state):  # (I − β_ts k_ts k_tsᵀ) applied to a state [B, H, K, ·]
        k_ts = k[:, t, s, :, :, None]
        return (
            state
            - beta[:, t, s, :, None, None] * k_ts * torch.einsum("bhk,bhk...->bh...", k[:, t, s], state)[:, :, None]
        )

    S, outputs = x.new_zeros(batch, heads, k.shape[-1], v.shape[-1]), []
    for t in range(length):
        S = alpha[:, t, :, None, None] * S
        for s in range(n):
            S = factor(t, s, S) + beta[:, t, s, :, None, None] * k[:, t, s, :, :, None] * v[:, t, s, :, None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    y = head_output(mixer.output, torch.stack(outputs, dim=1), x)
    A = x.new_zeros(batch, heads, length, length * n)
    for j in range(length):
        for s in range(n):
            impulse = (beta[:, j, s, :, None] * k[:, j, s])[..., None]  # [B, H, K, 1]
            for later in range(s + 1, n):
                impulse = factor(j, later, impulse)
            for i in range(j, length):
                if i > j:
                    impulse = alpha[:, i, :, None, None] * impulse
                    for later in range(n):
                        impulse = factor(i, later, impulse)
                A[:, :, i, j * n + s] = torch.einsum("bhk,bhk->bh", q[:, i], impulse[..., 0])
    return y, (S / k.shape[-1] ** 0.5, projected[:, length - mixer.convs["qkv"].width + 1 :]), A


@pytest.mark.parametrize("part", PARTS)
def test_gated_deltaproduct_matches_its_paper(part):
    mixer = double_mixer("gated_deltaproduct", D, heads=HEADS, conv_size=CONV, householders=FACTORS)
    compare_with_paper(
        part,
        mixer,
        inputs(2, 9, D, seed=1),
        gated_deltaproduct_layer,
        state_of=lambda state: (state.core, state.conv["qkv"]),
    )


def test_one_factor_is_gated_deltanet_with_negative_eigenvalues():
    product = double_mixer("gated_deltaproduct", D, heads=HEADS, conv_size=CONV, householders=1)
    gated = double_mixer(
        "gated_deltanet",
        D,
        heads=HEADS,
        conv_size=CONV,
        negative_eigenvalues=True,
        conv_bias=False,
        output_norm_eps=1e-5,
    )
    gated.load_state_dict(product.state_dict())
    x = inputs(2, 9, D, seed=2)
    torch.testing.assert_close(product(x), gated(x), rtol=1e-12, atol=1e-12)


def test_the_spectral_radius_is_that_of_each_tokens_product_of_factors():
    """``evolution_radii`` reads ``Λ_t = α_t Π_s (I − β_ts k_ts k_tsᵀ)``, formed here from the operator's arguments."""
    from seqdyn.analysis.mixers import evolution_radii
    from seqdyn.mixers.base import MixerState

    mixer = double_mixer("gated_deltaproduct", D, heads=HEADS, conv_size=CONV, householders=FACTORS)
    x = inputs(1, 6, D, seed=3)
    dynamics, _ = mixer.core_inputs(x, MixerState())
    eye = torch.eye(dynamics.k.shape[-1], dtype=torch.float64)
    radii = []
    for t in range(x.shape[1]):
        matrix = torch.exp(dynamics.log_decay[0, t])[:, None, None] * eye  # [H, K, K]
        for s in range(FACTORS):
            k_ts = dynamics.k[0, t, :, s]
            matrix = (eye - dynamics.householder[0, t, :, s, None, None] * k_ts[:, :, None] * k_ts[:, None, :]) @ matrix
        radii.append(torch.linalg.eigvals(matrix).abs().amax(-1))
    torch.testing.assert_close(evolution_radii(mixer, x), torch.stack(radii).amax(0), rtol=1e-12, atol=1e-12)


def test_householders_must_be_positive():
    from seqdyn import mixers

    with pytest.raises(ValueError, match="householders: expected a positive integer"):
        mixers.build("gated_deltaproduct", D, householders=0)
