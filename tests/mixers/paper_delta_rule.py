"""The delta rule of DeltaNet (Yang et al. 2024) and Gated DeltaNet (Yang et al. 2025) written as a loop over time,
for their paper tests (``test_deltanet``, ``test_gated_deltanet``)."""

from __future__ import annotations

import torch

from tests.mixers.paper_blocks import head_output, short_conv

D, HEADS, CONV = 16, 2, 4


def delta_rule_layer(mixer, x, log_alpha=None):
    """Yang et al. 2024 (and, with ``log α_t`` ``[B, T, H]``, Gated DeltaNet, Yang et al. 2025)::

        q, k, v = SiLU(ShortConv(W_Q u, W_K u, W_V u)),   q, k ← q/‖q‖, k/‖k‖ per head,   β_t = σ(w_βᵀ u_t)
        (q, k ← q (‖q‖² + ε)^-½ with the mixer's qk_norm_eps, as flash-linear-attention; query/key head
         ⌊h / (H / H_k)⌋ for value head h with its key_heads H_k; β_t = 2σ(w_βᵀ u_t) with negative_eigenvalues)
        S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t / √K
        y_t = W_O (RMSNorm_head(o_t) [⊙ SiLU(W_g u_t)])

    Returns ``(y, (S / √K, last w − 1 projections), A)``: the mixer keeps the query scale K^-½ in its state (b =
    β K^-½), and its convolution's state is the inputs it has not finished with.
    ``A_ij = q_iᵀ α_i(I − β_i k_i k_iᵀ) ⋯ α_{j+1}(I − β_{j+1} k_{j+1} k_{j+1}ᵀ) β_j k_j / √K``."""
    batch, length, _ = x.shape
    heads, eps = mixer.heads, mixer.qk_norm_eps
    projected = x @ mixer.qkv.weight.T  # W_Q, W_K, W_V stacked
    q, k, v = short_conv(projected, mixer.convs["qkv"]).split(mixer.widths, dim=-1)
    q, k = (t.view(batch, length, mixer.key_heads, -1) for t in (q, k))
    q, k = (
        (t / t.norm(dim=-1, keepdim=True)) if eps is None else t / (t.pow(2).sum(-1, keepdim=True) + eps).sqrt()
        for t in (q, k)
    )
    group = torch.arange(heads) // (heads // mixer.key_heads)  # the query/key head of each value head
    q, k, v = q[:, :, group] / q.shape[-1] ** 0.5, k[:, :, group], v.view(batch, length, heads, -1)
    beta = torch.sigmoid(x @ mixer.beta.weight.T)[..., None]  # [B, T, H, 1]
    beta = 2 * beta if mixer.negative_eigenvalues else beta  # β ∈ (0, 2): eigenvalue 1 − β < 0 possible
    alpha = torch.ones_like(beta) if log_alpha is None else torch.exp(log_alpha)[..., None]

    def transition(t, state):  # α_t (I − β_t k_t k_tᵀ) applied to a state [B, H, K, ·]
        return alpha[:, t, :, :, None] * (
            state
            - beta[:, t, :, :, None]
            * k[:, t, :, :, None]
            * torch.einsum("bhk,bhk...->bh...", k[:, t], state)[:, :, None]
        )

    S, outputs = x.new_zeros(batch, heads, k.shape[-1], v.shape[-1]), []
    for t in range(length):
        S = transition(t, S) + beta[:, t, :, :, None] * k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    y = head_output(mixer.output, torch.stack(outputs, dim=1), x, gated=log_alpha is not None)
    A = x.new_zeros(batch, heads, length, length)
    for j in range(length):
        impulse = (beta[:, j] * k[:, j])[..., None]  # x_j^(j) = β_j k_j  [B, H, K, 1]
        for i in range(j, length):
            impulse = impulse if i == j else transition(i, impulse)
            A[:, :, i, j] = torch.einsum("bhk,bhk->bh", q[:, i], impulse[..., 0])
    return y, (S / k.shape[-1] ** 0.5, projected[:, length - mixer.convs["qkv"].width + 1 :]), A
