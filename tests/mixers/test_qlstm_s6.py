"""qLSTM with the S6 state transition pinned to its paper: seed 000 eq. 22 (appendix G), the qLSTM layer of
:mod:`tests.mixers.paper_qlstm` with only the forget gate replaced by the reversed sigmoid raised to a learned power,
``f_t = σ_rev(W_Δ u_t)^a = (1 + exp(W_Δ u_t))^(−a)``, compared with the mixer's output, state after stepping and
coefficients; its DSF form (eq. 19 with eq. 22's Λ)."""

from __future__ import annotations

import pytest
import torch

from tests.mixers.paper_helpers import PARTS
from tests.mixers.paper_qlstm import check_dsf_form, compare_with_qlstm

CONFIGS = [dict(), dict(dsf_form=True, short_conv=True, gate=True, expand=2)]


def reversed_sigmoid_forget(m, pre):
    """``log f_t = a · log σ_rev(W_Δ u_t)``, σ_rev(x) = 1 / (1 + eˣ), a = exp(a_log) (eq. 22)."""
    return torch.exp(m.a_log) * torch.log(1 / (1 + torch.exp(pre)))


@pytest.mark.parametrize("options", CONFIGS, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_qlstm_s6_is_eq_22_in_the_qlstm_layer(options, part):
    compare_with_qlstm("qlstm_s6", options, reversed_sigmoid_forget, part, seed=2)


def test_qlstm_s6_dsf_form_is_eq_19_with_the_transition_of_eq_22():
    check_dsf_form("qlstm_s6", reversed_sigmoid_forget)
