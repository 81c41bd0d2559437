"""The delta rule of DeltaNet (Yang et al. 2024) and Gated DeltaNet (Yang et al. 2025) written as a loop over time,
for their paper tests (``test_deltanet``, ``test_gated_deltanet``)."""

from __future__ import annotations

import torch

from tests.mixers.paper_blocks import head_output, short_conv

D, HEADS, CONV = 16, 2, 4


def delta_rule_layer(mixer, x, log_alpha=None):
    """Yang et al. 2024 (and, with ``log α_t`` ``[B, T, H]``, Gated DeltaNet, Yang et al. 2025)::

        q, k, v = SiLU(ShortConv(W_Q u, W_K u, W_V u)),   q, k ← q/‖q‖, k/‖k‖ per head,   β_t = σ(w_βᵀ u_t)
        S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t / √K
        y_t = W_O (RMSNorm_head(o_t) [⊙ SiLU(W_g u_t)])

    Returns ``(y, (S / √K, last w − 1 projections), A)``: the mixer keeps the query scale K^-½ in its state (b =
    β K^-½), and its convolution's state is the inputs it has not finished with.
    ``A_ij = q_iᵀ α_i(I − β_i k_i k_iᵀ) ⋯ α_{j+1}(I − β_{j+1} k_{j+1} k_{j+1}ᵀ) β_j k_j / √K``."""
    batch, length, _ = x.shape
    projected = x @ mixer.qkv.weight.T  # W_Q, W_K, W_V stacked
    q, k, v = (t.view(batch, length, HEADS, -1) for t in short_conv(projected, mixer.convs["qkv"]).split(
        [D, D, mixer.value_width], dim=-1))
    q, k = q / q.norm(dim=-1, keepdim=True) / q.shape[-1] ** 0.5, k / k.norm(dim=-1, keepdim=True)
    beta = torch.sigmoid(x @ mixer.beta.weight.T)[..., None]  # [B, T, H, 1]
    alpha = torch.ones_like(beta) if log_alpha is None else torch.exp(log_alpha)[..., None]

    def transition(t, state):  # α_t (I − β_t k_t k_tᵀ) applied to a state [B, H, K, ·]
        return alpha[:, t, :, :, None] * (state - beta[:, t, :, :, None] * k[:, t, :, :, None]
                                          * torch.einsum("bhk,bhk...->bh...", k[:, t], state)[:, :, None])

    S, outputs = x.new_zeros(batch, HEADS, k.shape[-1], v.shape[-1]), []
    for t in range(length):
        S = transition(t, S) + beta[:, t, :, :, None] * k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    y = head_output(mixer.output, torch.stack(outputs, dim=1), x, gated=log_alpha is not None)
    A = x.new_zeros(batch, HEADS, length, length)
    for j in range(length):
        impulse = (beta[:, j] * k[:, j])[..., None]  # x_j^(j) = β_j k_j  [B, H, K, 1]
        for i in range(j, length):
            impulse = impulse if i == j else transition(i, impulse)
            A[:, :, i, j] = torch.einsum("bhk,bhk->bh", q[:, i], impulse[..., 0])
    return y, (S / k.shape[-1] ** 0.5, projected[:, length - CONV + 1:]), A
