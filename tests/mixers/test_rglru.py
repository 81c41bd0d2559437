"""RG-LRU pinned to its paper: Griffin's recurrent block (De et al. 2024; RecurrentGemma ``RecurrentBlock`` and
``RGLRU``; seed 000 eqs. 9–10) written out as a plain loop in float64 on the mixer's own weights, compared with its
output, state after stepping and coefficients; its DSF (seed 000 eq. 20) and its initialization (Griffin §2.4)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqdyn import mixers
from tests.mixers.paper_helpers import PARTS, assert_close, compare_with_paper, double_mixer, inputs
from tests.mixers.paper_helpers_ssm import causal_conv, conv_states, core_and_convs, decay_products

D = 6
#: the gate constant c of Griffin eq. 10 ("we set c = 8")
C = 8.0
CONFIGS = [dict(), dict(short_conv=False, gate=False), dict(expand=1.5, gate_blocks=3), dict(reset=True)]


def rglru_gates(m, x):
    """Griffin's block up to the recurrence: ``u = conv(W_x x + b_x)``, ``g = W_y x + b_y``, and eq. 10's
    ``a_t = exp(−c r_t ⊙ softplus(Λ))``, ``i_t``, with r_t, i_t from block-diagonal W_a, W_i (``gate_blocks``)."""
    u, g = (x @ m.in_proj.weight.T + m.in_proj.bias).split([m.width, m.width if m.gate else 0], dim=-1)
    conv_in = u
    if m.convs:
        u = causal_conv(u, m.convs["u"].weight, m.convs["u"].bias, silu=False)
    r = torch.sigmoid(u @ torch.block_diag(*m.a_gate.weight) + m.a_gate.bias.flatten())
    i = torch.sigmoid(u @ torch.block_diag(*m.input_gate.weight) + m.input_gate.bias.flatten())
    return u, g, torch.exp(-C * r * F.softplus(m.a_param)), i, conv_in


def recurrent_block(m, x):
    """Griffin's recurrent block: ``(out, (h_T, conv state), α [B, W, T, T])``::

        h_t = a_t ⊙ h_{t−1} + √(1 − a_t²) ⊙ (i_t ⊙ u_t)      (9)
        out = W_out (h ⊙ GeLU_tanh(g)) + b_out

    with ``reset`` (RecurrentGemma's ``RGLRU``: ``reset = segment_pos == 0``) the first token's factor is 1.
    """
    u, g, a, i, conv_in = rglru_gates(m, x)
    h = x.new_zeros(x.shape[0], m.width)
    ys = []
    for t in range(x.shape[1]):
        factor = 1.0 if m.reset and t == 0 else torch.sqrt(1 - a[:, t] ** 2)
        h = a[:, t] * h + factor * (i[:, t] * u[:, t])
        ys.append(h)
    y = torch.stack(ys, dim=1)
    if m.gate:
        y = y * F.gelu(g, approximate="tanh")
    # α_ij = a_{j+1} ⋯ a_i √(1 − a_j²) i_j (seed 000 eq. 20: C_i = 1)
    factors = torch.sqrt(1 - a**2)
    if m.reset:
        factors[:, 0] = 1.0
    alpha = torch.einsum("bijc,bjc->bcij", decay_products(torch.log(a)), factors * i)
    return y @ m.out_proj.weight.T + m.out_proj.bias, (h[..., None, None], *conv_states(m, {"u": conv_in})), alpha


@pytest.mark.parametrize("options", CONFIGS, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_rglru_is_griffins_recurrent_block(options, part):
    mixer, x = double_mixer("rglru", D, chunk_size=4, **options), inputs(2, 9, D, seed=1)
    compare_with_paper(part, mixer, x, recurrent_block, state_of=core_and_convs)


def test_rglru_dsf_is_seed_000_eq_20():
    """Λ_i = a_i, B_i = √(1 − a_i²) ⊙ i_i, C_i = I."""
    m, x = double_mixer("rglru", D), inputs(2, 5, D, seed=4)
    u, _, a, i, _ = rglru_gates(m, x)
    system = m.dsf(x)
    assert_close(system.Lambda[..., 0, 0], a.transpose(1, 2), "Λ")
    assert_close(system.B[..., 0, 0], (torch.sqrt(1 - a**2) * i).transpose(1, 2), "B")
    assert torch.all(system.C == 1)
    assert_close(m.core(x)[1][..., 0], u, "values u")


def test_rglru_initialization_puts_a_to_the_c_uniformly_in_0_9_to_0_999():
    torch.manual_seed(0)
    m = mixers.build("rglru", 512, expand=4)
    a_c = torch.exp(m.log_base_decay().detach().double())  # a^c = exp(−c softplus(Λ)), the decay at r_t = 1
    assert a_c.min() >= 0.9 - 1e-6 and a_c.max() <= 0.999 + 1e-6
    assert a_c.min() < 0.905 and a_c.max() > 0.994
    assert abs(float(a_c.mean()) - 0.9495) < 0.005  # uniform, not uniform on a ring or in log space
    assert m.c == C


def test_rglru_reset_restarts_at_each_packed_sequence_and_not_mid_stream():
    """Packed, every sequence's first token is unscaled as if it ran alone; a second chunk of a stream (positions
    ≥ 1) is not reset."""
    mixer, x = double_mixer("rglru", D, reset=True), inputs(1, 9, D, seed=3)
    packed = mixer(x, cu_seqlens=torch.tensor([0, 4, 9]))
    alone = torch.cat([mixer(x[:, :4]), mixer(x[:, 4:])], dim=1)
    assert_close(packed, alone, "packed against alone")
    first, state = mixer(x[:, :4], return_state=True)
    second, _ = mixer(x[:, 4:], state=state, return_state=True)
    assert_close(torch.cat([first, second], dim=1), mixer(x), "chunked prefill against one call")
