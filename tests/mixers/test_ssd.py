"""SSD as seed 000 ran it on MQAR (§4.2, appendix I.1), pinned to its definition: the bare S6 block with one
input-dependent step per token (dt_rank 1) and one learned scalar A, written out as a plain loop in float64 on the
mixer's own weights — forward, state after stepping, coefficient matrix — and its initialization (|A| = 1)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqdyn import mixers
from tests.mixers.paper_helpers import PARTS, assert_close, compare_with_paper, double_mixer, inputs
from tests.mixers.paper_helpers_ssm import decay_products

D = 4


def bare_ssd(m, u):
    """Per channel c, with one scalar a (seed 000 eq. 4 with A = aI)::

    r_t = w_r · u_t,   Δ_t^c = softplus(w_Δ^c r_t + b_Δ^c),   (B_t, C_t) = W_BC u_t
    h_t^c = exp(Δ_t^c a) h_{t−1}^c + Δ_t^c B_t u_t^c,   y_t^c = C_t · h_t^c + D^c u_t^c,   out = W_out y
    """
    a = -torch.exp(m.a_log)
    assert a.ndim == 0, "one scalar A"
    N = m.state_dim
    projected = u @ m.x_proj.weight.T  # [B, T, 1 + 2N]: no input projection, x = u
    r, B, C = projected[..., :1], projected[..., 1 : 1 + N], projected[..., 1 + N :]
    delta = F.softplus(r * m.dt_proj.weight[:, 0] + m.dt_proj.bias)  # [B, T, D]: one step per token, per channel
    h = u.new_zeros(u.shape[0], D, N)
    ys = []
    for t in range(u.shape[1]):
        h = torch.exp(delta[:, t, :, None] * a) * h + delta[:, t, :, None] * B[:, t, None, :] * u[:, t, :, None]
        ys.append((h * C[:, t, None, :]).sum(-1) + m.skip * u[:, t])
    out = torch.stack(ys, dim=1) @ m.out_proj.weight.T
    # α_ij^c = (C_i · B_j) exp(a Σ_{j<l≤i} Δ_l^c) Δ_j^c: a scalar decay per channel
    alpha = torch.einsum("bin,bijc,bjc,bjn->bcij", C, decay_products(delta * a), delta, B)
    return out, h.unsqueeze(-1), alpha


@pytest.mark.parametrize("part", PARTS)
def test_ssd_is_the_bare_s6_block_with_a_scalar_a(part):
    mixer, x = double_mixer("ssd", D, state_dim=3, chunk_size=4), inputs(2, 9, D, seed=2)
    compare_with_paper(part, mixer, x, bare_ssd)


def test_ssd_shares_one_decay_over_the_state_and_has_no_input_projection():
    torch.manual_seed(0)
    m = mixers.build("ssd", 8, state_dim=5)
    assert m.a_log.shape == () and float(m.A.detach()) == -1.0  # |A| = 1 at the start
    assert m.dt_rank == 1 and m.dt_proj.weight.shape == (8, 1) and m.dt_proj.bias.shape == (8,)
    assert not isinstance(m.in_proj, torch.nn.Linear) and not m.convs and not m.gate
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    system = m.double().dsf(x)  # Λ_t^c = exp(Δ_t^c a) I: the same factor on every state of a channel
    Lambda = torch.diagonal(system.Lambda, dim1=-2, dim2=-1)  # [B, D, T, N]
    assert_close(Lambda, Lambda[..., :1].expand_as(Lambda), "Λ is a scalar per channel")
    assert_close(system.Lambda, torch.diag_embed(Lambda), "Λ is diagonal")


def test_s6_refuses_no_input_projection_with_a_gate_or_expansion():
    with pytest.raises(ValueError, match="input_projection"):
        mixers.build("s6", 8, input_projection=False, gate=True, expand=1)
    with pytest.raises(ValueError, match="input_projection"):
        mixers.build("s6", 8, input_projection=False, gate=False, expand=2)
