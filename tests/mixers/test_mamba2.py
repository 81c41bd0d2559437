"""Mamba-2 pinned to its reference: the whole block written out from Dao & Gu 2024 as ``mamba_ssm``'s ``Mamba2``
computes it (in-projection to [z | x, B, C | Δ], SiLU short convolution over (x, B, C), Δ = softplus(Δ + b_Δ),
A = −exp(A_log), SSD recurrence, D skip, gated RMSNorm, out-projection; seed 000 §4.2, seed 003 "SSD") as a plain
loop in float64 on the mixer's own weights, compared with its output, state after stepping and coefficients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs
from tests.mixers.paper_helpers_ssm import causal_conv, conv_states, core_and_convs, decay_products

D = 8
CONFIGS = [dict(state_dim=4, head_dim=4), dict(state_dim=3, head_dim=8, short_conv=False, gate=False),
           dict(state_dim=3, head_dim=2, groups=2, norm_eps=0.5), dict(state_dim=4, head_dim=4, dt_floor=0.01,
                                                                         dt_ceiling=0.05)]  # both clamps bite


def mamba2_block(m, u):
    """``mamba_ssm.Mamba2`` with ``ngroups`` = G: ``(out, (S_T [B, H, N, P], conv state), α [B, H, T, T])``::

        z, xBC, Δ = W_in u;   x, B, C = SiLU(conv(xBC));   Δ = clamp(softplus(Δ + b_Δ));   A_h = −exp(A_log_h)
        S_t = exp(Δ_t A_h) S_{t−1} + Δ_t B_t^g x_tᵀ;   y_t = S_tᵀ C_t^g + D_h x_t    (g: the group of head h)
        out = W_out RMSNorm(y ⊙ SiLU(z)),   RMSNorm(g) = g / √(mean(g²) + ε) ⊙ w   (the mean within each group)
    """
    inner, n, heads, groups = m.inner, m.state_dim, m.heads, m.groups
    z, xbc, dt = (u @ m.in_proj.weight.T).split([inner if m.gate else 0, inner + 2 * groups * n, heads], dim=-1)
    conv_in = xbc
    if "xbc" in m.convs:
        xbc = causal_conv(xbc, m.convs["xbc"].weight, m.convs["xbc"].bias, silu=True)
    x, B, C = xbc.split([inner, groups * n, groups * n], dim=-1)
    x = x.unflatten(-1, (heads, m.head_dim))  # [B, T, H, P]
    group_of = torch.arange(heads) // (heads // groups)  # head h reads the B and C of group h // (H / G)
    B, C = (t.unflatten(-1, (groups, n))[:, :, group_of] for t in (B, C))  # [B, T, H, N]
    delta = F.softplus(dt + m.decay.dt_bias)  # [B, T, H]
    delta = torch.clamp(delta, min=m.decay.floor, max=m.decay.ceiling)  # mamba_ssm's dt_limit
    A = -torch.exp(m.decay.a_log)  # [H]
    S = u.new_zeros(u.shape[0], heads, n, m.head_dim)
    ys = []
    for t in range(u.shape[1]):
        dA, dt_t = torch.exp(delta[:, t] * A)[..., None, None], delta[:, t, :, None, None]
        S = dA * S + dt_t * B[:, t, :, :, None] * x[:, t, :, None, :]
        ys.append(torch.einsum("bhn,bhnp->bhp", C[:, t], S) + m.skip[:, None] * x[:, t])
    y = torch.stack(ys, dim=1).flatten(2)
    if m.gate:
        g = (y * F.silu(z)).unflatten(-1, (groups, -1))
        eps = m.norm.eps  # mamba_ssm's RMSNormGated: 1e-5 (item 9 of issue 18), or the norm_eps given
        y = (g / torch.sqrt(g.square().mean(-1, keepdim=True) + eps)).flatten(-2) * m.norm.weight
    alpha = torch.einsum("bihn,bjhn,bijh,bjh->bhij", C, B, decay_products(delta * A), delta)
    return y @ m.out_proj.weight.T, (S, *conv_states(m, {"xbc": conv_in})), alpha


@pytest.mark.parametrize("options", CONFIGS, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_mamba2_is_the_mamba_ssm_block(options, part):
    """Output, state S_T and the coefficients α_ij = (C_i · B_j) exp(A_h Σ_{j<l≤i} Δ_l) Δ_j: SSD's semiseparable
    matrix (seed 003)."""
    mixer, x = double_mixer("mamba2", D, chunk_size=4, **options), inputs(2, 9, D, seed=1)
    compare_with_paper(part, mixer, x, mamba2_block, state_of=core_and_convs)


def test_groups_must_divide_the_heads():
    import seqdyn.mixers

    with pytest.raises(ValueError, match="groups: 3 does not divide the 4 heads"):
        seqdyn.mixers.build("mamba2", D, state_dim=4, head_dim=4, groups=3)
    assert seqdyn.mixers.build("mamba2", D, state_dim=4, head_dim=4, groups=4).norm.groups == 4
