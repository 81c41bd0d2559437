"""DSS-EXP pinned to its paper: the diagonal state space of Gupta et al. 2022 discretized by zero-order hold as seed
002 §2.1 writes it ("Comparison with DSS"), written out per channel — the recurrence x_k = exp(ΔΛ) x_{k−1} + 1·u_k
as a plain loop, the output weights w (exp(ΔΛ) − 1)/Λ, the real part, the D skip and S4's GELU/GLU output — in
float64 on the mixer's own weights, compared with its output, its state after stepping and its Toeplitz
coefficients."""

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
CONFIGS = [dict(state_dim=5), dict(state_dim=3, init="inv")]


def dss_layer(m, u):
    """Per channel h with Λ ∈ ℂ^N shared by the channels, Δ_h and w_h ∈ ℂ^N per channel (state x ``[B, H, N]``)::

    x_k = diag(exp(Δ_h Λ)) x_{k−1} + 1·u_k,   y_k = Re⟨w_h ⊙ (exp(Δ_h Λ) − 1)/Λ, x_k⟩
    K_j = Re(Σ_n w_n (exp(ΔΛ_n) − 1)/Λ_n · exp(jΔΛ_n));   out = GLU(W GELU(y + D ⊙ u) + b)
    """
    lam = continuous_eigenvalues(m)  # [N], Re Λ < 0
    step = torch.exp(m.log_dt)[:, None]  # [H, 1]
    decay = torch.exp(step * lam)  # [H, N]
    weights = complex_parameter(m.W) * (decay - 1) / lam
    x = torch.zeros(u.shape[0], *decay.shape, dtype=decay.dtype)
    ys = []
    for k in range(u.shape[1]):
        x = decay * x + u[:, k, :, None]
        ys.append((weights * x).sum(-1).real)
    kernel = torch.stack([(weights * decay**j).sum(-1).real for j in range(u.shape[1])], dim=-1)
    return glu_layer(m.head, torch.stack(ys, dim=1), u), x, lti_coefficients(kernel, u.shape[0])


@pytest.mark.parametrize("options", CONFIGS, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_dss_exp_is_the_zoh_discretized_diagonal_state_space(options, part):
    mixer, x = double_mixer("dss_exp", D, **options), inputs(2, 9, D, seed=1)
    compare_with_paper(part, mixer, x, dss_layer, state_of=as_is)


def test_dss_exp_init_and_zoh():
    """Λ_n = −½ + 2πin (seed 002 §A); λ = exp(ΔΛ) and the output weights w (exp(ΔΛ) − 1)/Λ (002 §2.1)."""
    mixer = build64("dss_exp", D, state_dim=5)
    n = torch.arange(5, dtype=torch.float64)
    lam = continuous_eigenvalues(mixer)
    assert_close(lam, torch.complex(torch.full_like(n, -0.5), 2 * math.pi * n), "Λ")
    system = mixer.system()
    dt = torch.exp(mixer.log_dt)[:, None]
    assert_close(system.log_lam, dt * lam, "log λ = ΔΛ")
    w = torch.complex(mixer.W[..., 0], mixer.W[..., 1])
    assert_close(system.c, w * (torch.exp(dt * lam) - 1) / lam, "C̄")
