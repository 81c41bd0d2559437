"""qLSTM pinned to its paper: the quasi LSTM of Stanić et al. 2023 as seed 000 writes it (eqs. 5 and 8; eq. 19
without the two tanh for ``dsf_form``), inside Languini's layer (optional short convolution and GeLU gate, output
projection), as a plain loop in float64 on the mixer's own weights, compared with its output, state after stepping
and coefficients; its DSF form (eq. 19) and its initialization (Languini's)."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from tests.mixers.paper_helpers import PARTS
from tests.mixers.paper_qlstm import check_dsf_form, compare_with_qlstm, sigmoid_forget

#: the last is seed 000 Fig. 3's block (expansion 2, convolution before the gates, GELU gate branch, no tanh)
CONFIGS = [
    dict(),
    dict(dsf_form=True),
    dict(expand=2, short_conv=True, gate=True),
    dict(expand=2, short_conv=True, gate=True, dsf_form=True),
]


@pytest.mark.parametrize("options", CONFIGS, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_qlstm_is_eqs_5_and_8(options, part):
    compare_with_qlstm("qlstm", options, sigmoid_forget, part, seed=1)


def test_qlstm_dsf_form_is_seed_000_eq_19():
    check_dsf_form("qlstm", sigmoid_forget)


def test_qlstm_initializations():
    torch.manual_seed(0)
    plain, reversed_ = mixers.build("qlstm", 64), mixers.build("qlstm_s6", 64)
    assert torch.all(plain.gates.bias[:64] == 1) and torch.all(plain.gates.bias[64:] == 0)  # Languini's +1
    assert torch.all(reversed_.gates.bias[:64] == -1)  # σ_rev(W u − 1) ~ σ(W u + 1) at init
    assert float(reversed_.a.detach()) == 1.0
    assert abs(float(plain.gates.weight.detach().std()) - 0.02) < 0.002
