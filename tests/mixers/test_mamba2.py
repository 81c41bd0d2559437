"""Mamba-2 pinned to its reference: the whole block written out from Dao & Gu 2024 as ``mamba_ssm``'s ``Mamba2``
computes it (in-projection to [z | x, B, C | Δ], SiLU short convolution over (x, B, C), Δ = softplus(Δ + b_Δ),
A = −exp(A_log), SSD recurrence, D skip, gated RMSNorm, out-projection; seed 000 §4.2, seed 003 "SSD") as a plain
loop in float64 on the mixer's own weights, compared with its output, state after stepping and coefficients."""

from __future__ import annotations

import pytest

from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs
from tests.mixers.paper_helpers_ssm import core_and_convs, mamba2_block

D = 8
CONFIGS = [
    dict(state_dim=4, head_dim=4),
    dict(state_dim=3, head_dim=8, short_conv=False, gate=False),
    dict(state_dim=3, head_dim=2, groups=2, norm_eps=0.5),
    dict(state_dim=4, head_dim=4, dt_floor=0.01, dt_ceiling=0.05),  # both clamps bite
    dict(state_dim=4, head_dim=4, expand=1.5, gate_norm=False),
]  # Falcon-H1's: 12 channels, no norm


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
