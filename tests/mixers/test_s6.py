"""S6, Mamba-1's selective SSM, pinned to its paper: the whole Mamba block written out from Gu & Dao 2023 (Alg. 2,
``mamba_simple.Mamba`` and ``selective_scan_ref``; seed 000 eq. 4) as a plain loop in float64 on the mixer's own
weights, compared with the mixer's output, its state after stepping and its coefficient matrix; its DSF (seed 000
eq. 18) and its initialization (Mamba-1's)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqdyn import mixers
from tests.mixers.paper_helpers import PARTS, assert_close, compare_with_paper, double_mixer, inputs
from tests.mixers.paper_helpers_ssm import causal_conv, conv_states, core_and_convs, decay_products

D = 4
CONFIGS = [
    dict(state_dim=4),
    dict(state_dim=3, short_conv=False, gate=False, dt_rank=3, expand=1),
    dict(state_dim=4, dt_rank=2, bcdt_rms_eps=1e-6),
    dict(state_dim=4, dt_rank=2, bcdt_rms_eps=1e-6, bcdt_norm_weights=True),
    dict(state_dim=4, dt_rank=2, heads=2),
]


def _rms_normed(m, low, B, C):
    if m.bcdt_rms_eps is not None:  # Falcon-Mamba (transformers' FalconMambaMixer): weightless RMS norms
        low, B, C = (t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + m.bcdt_rms_eps) for t in (low, B, C))
    if m.bcdt_norms is not None:  # Jamba (JambaMambaMixer's dt_layernorm, b_layernorm, c_layernorm): with weights
        low, B, C = (t * w for t, w in zip((low, B, C), m.bcdt_norms))
    return low, B, C


def _selective_parameters(m, x):
    """``Δ`` ``[b, T, I]`` and each channel's ``B``, ``C`` ``[b, T, I, N]``: one ``W_x``, ``W_Δ`` for all channels
    (Mamba-1), or, with heads, head h's from its own channels by its own ``W_x[h]``, ``W_Δ[h]`` (Zamba's
    ``ZambaMambaMixer``: "each head undergoes an independent forward pass")."""
    split = [m.dt_rank, m.state_dim, m.state_dim]
    if m.heads == 1:
        low, B, C = _rms_normed(m, *(x @ m.x_proj.weight.T).split(split, dim=-1))
        delta = F.softplus(low @ m.dt_proj.weight.T + m.dt_proj.bias)
        return delta, *(t[:, :, None, :].expand(-1, -1, m.inner, -1) for t in (B, C))
    width, deltas, Bs, Cs = m.inner // m.heads, [], [], []
    for h in range(m.heads):
        x_h = x[..., h * width : (h + 1) * width]
        low, B, C = _rms_normed(m, *(x_h @ m.x_proj.weight[h].T).split(split, dim=-1))
        deltas.append(F.softplus(low @ m.dt_proj.weight[h].T + m.dt_proj.bias[h]))
        Bs.append(B[:, :, None, :].expand(-1, -1, width, -1))
        Cs.append(C[:, :, None, :].expand(-1, -1, width, -1))
    return torch.cat(deltas, -1), torch.cat(Bs, 2), torch.cat(Cs, 2)


def mamba_inputs(m, u):
    """Mamba-1 up to the scan: ``x, z = W_in u``; ``x = SiLU(conv(x))``; ``Δ, B, C = W_x x``;
    ``Δ = softplus(W_Δ Δ + b_Δ)``; ``A = −exp(A_log)``.  Returns (x, z, Δ [B,T,I], A [I,N], B, C [B,T,I,N], conv
    input)."""
    projected = u @ m.in_proj.weight.T
    x, z = projected[..., : m.inner], projected[..., m.inner :]
    conv_in = x
    if "x" in m.convs:
        x = causal_conv(x, m.convs["x"].weight, m.convs["x"].bias, silu=True)
    delta, B, C = _selective_parameters(m, x)
    return x, z, delta, -torch.exp(m.a_log), B, C, conv_in


def mamba_block(m, u):
    """The Mamba block (seed 000 eq. 4), ZOH for A and Euler for B (Gu & Dao §3.5); ``(out, (h_T, conv state), α)``::

    h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t,   y_t = C_t · h_t + D ⊙ x_t,   out = W_out (y ⊙ SiLU(z))
    """
    x, z, delta, A, B, C, conv_in = mamba_inputs(m, u)
    h = u.new_zeros(u.shape[0], m.inner, m.state_dim)
    ys = []
    for t in range(u.shape[1]):
        h = torch.exp(delta[:, t, :, None] * A) * h + delta[:, t, :, None] * B[:, t] * x[:, t, :, None]
        ys.append((h * C[:, t]).sum(-1) + m.skip * x[:, t])
    y = torch.stack(ys, dim=1)
    out = (y * F.silu(z) if m.gate else y) @ m.out_proj.weight.T
    # α_ij^c = Σ_n C_i^c[n] exp(A^c_n Σ_{j<l≤i} Δ_l^c) Δ_j^c B_j^c[n]
    alpha = torch.einsum("bicn,bijcn,bjc,bjcn->bcij", C, decay_products(delta[..., None] * A), delta, B)
    return out, (h.unsqueeze(-1), *conv_states(m, {"x": conv_in})), alpha


@pytest.mark.parametrize("options", CONFIGS, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_s6_is_the_mamba_block(options, part):
    mixer, x = double_mixer("s6", D, chunk_size=4, **options), inputs(2, 9, D, seed=1)
    compare_with_paper(part, mixer, x, mamba_block, state_of=core_and_convs)


@pytest.mark.parametrize("heads", [1, 2])
def test_s6_dsf_is_seed_000_eq_18(heads):
    """Λ_i = exp(Δ_i^c A^c) (diagonal), B_i = Δ_i^c b_i, C_i = c_iᵀ per channel c (b, c of c's head)."""
    m, x = double_mixer("s6", D, state_dim=3, heads=heads), inputs(2, 5, D, seed=4)
    _, _, delta, A, b, c, _ = mamba_inputs(m, x)
    system = m.dsf(x)
    assert system.Lambda.shape == (2, m.inner, 5, 3, 3)
    assert_close(system.Lambda, torch.diag_embed(torch.exp(delta.unsqueeze(-1) * A)).transpose(1, 2), "Λ")
    assert_close(system.B[..., 0], (delta.unsqueeze(-1) * b).transpose(1, 2), "B")
    assert_close(system.C[..., 0, :], c.transpose(1, 2), "C")


def test_s6_initialization_is_mamba_1s():
    torch.manual_seed(0)
    m = mixers.build("s6", 64, dt_min=0.002, dt_max=0.05)
    assert m.inner == 128 and m.dt_rank == 4  # expand 2, ceil(64 / 16)
    expected_A = -torch.arange(1, 17, dtype=torch.float32).expand(128, 16)
    assert_close(m.A, expected_A, "S4D-Real A_n = −(n+1)", tol=1e-6)
    step = F.softplus(m.dt_proj.bias.detach())
    assert step.min() >= 0.002 * (1 - 1e-5) and step.max() <= 0.05 * (1 + 1e-5)
    spread = torch.log(step)  # log-uniform: the logs fill the interval
    assert spread.min() < math.log(0.002) + 0.5 and spread.max() > math.log(0.05) - 0.5
    assert m.dt_proj.weight.abs().max() <= 4**-0.5
    assert torch.all(m.skip == 1)


def test_weights_of_the_rms_norms_need_their_epsilon():
    with pytest.raises(ValueError, match="bcdt_norm_weights: weights of the RMS norms of Δ, B and C need bcdt_rms_eps"):
        mixers.build("s6", D, bcdt_norm_weights=True)
