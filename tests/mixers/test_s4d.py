"""S4D pinned to its paper: the diagonal SSM layer of Gu et al. 2022b ("On the parameterization and initialization
of diagonal state space models"; seed 004) written out per channel and mode — zero-order hold, the recurrence as a
plain loop over time, the real output 2 Re(C x), the D skip and S4's GELU/GLU output — in float64 on the mixer's own
weights, compared with its output, its state after stepping and its Toeplitz coefficients."""

from __future__ import annotations

import math

import pytest
import torch

from tests.mixers.paper_helpers import PARTS, assert_close, compare_with_paper, double_mixer, inputs
from tests.mixers.paper_helpers_ssm import (
    as_is,
    build64,
    complex_parameter,
    continuous_eigenvalues,
    glu_layer,
    lti_coefficients,
)

D = 4
CONFIGS = [dict(state_dim=6), dict(state_dim=4, init="inv")]


def s4d_layer(m, u):
    """Per channel h, N/2 complex modes of a real N-state system (state x ``[B, H, N/2]``)::

    Ā = exp(ΔA),  B̄ = (exp(ΔA) − 1)/A · B                       (ZOH: B̄ = (ΔA)⁻¹(exp(ΔA) − I)·ΔB)
    x_k = Ā ⊙ x_{k−1} + B̄ u_k,   y_k = 2 Re(Σ_n C_n x_{k,n}),   K_j = 2 Re(Σ_n C_n B̄_n Ā_n^j)
    out = GLU(W GELU(y + D ⊙ u) + b)
    """
    A = continuous_eigenvalues(m)  # Re A < 0
    step = torch.exp(m.log_dt)[:, None]
    A_bar = torch.exp(step * A)
    B_bar = (A_bar - 1) / A * complex_parameter(m.B)
    C = complex_parameter(m.C)
    x = torch.zeros(u.shape[0], *A.shape, dtype=A.dtype)
    ys = []
    for k in range(u.shape[1]):
        x = A_bar * x + B_bar * u[:, k, :, None]
        ys.append(2 * (C * x).sum(-1).real)
    kernel = torch.stack([2 * (C * B_bar * A_bar**j).sum(-1).real for j in range(u.shape[1])], dim=-1)
    return glu_layer(m.head, torch.stack(ys, dim=1), u), x, lti_coefficients(kernel, u.shape[0])


@pytest.mark.parametrize("options", CONFIGS, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_s4d_is_the_zoh_diagonal_ssm_layer(options, part):
    mixer, x = double_mixer("s4d", D, **options), inputs(2, 9, D, seed=1)
    compare_with_paper(part, mixer, x, s4d_layer, state_of=as_is)


def test_s4d_lin_and_inv_inits():
    """S4D-Lin A_n = −½ + iπn; S4D-Inv A_n = −½ + i(N/π)(N/(2n+1) − 1), n < N/2; B = 1; Δ ∈ [dt_min, dt_max]."""
    N = 16
    n = torch.arange(N // 2, dtype=torch.float64)
    lin = build64("s4d", D, state_dim=N, init="lin")
    assert_close(continuous_eigenvalues(lin)[0], torch.complex(torch.full_like(n, -0.5), math.pi * n), "S4D-Lin")
    inv = build64("s4d", D, state_dim=N, init="inv")
    inverse = torch.complex(torch.full_like(n, -0.5), N / math.pi * (N / (2 * n + 1) - 1))
    assert_close(continuous_eigenvalues(inv)[3], inverse, "S4D-Inv")
    assert torch.all(lin.B[..., 0] == 1) and torch.all(lin.B[..., 1] == 0)
    dt = torch.exp(lin.log_dt)
    assert dt.min() >= 0.001 * (1 - 1e-9) and dt.max() <= 0.1 * (1 + 1e-9)
