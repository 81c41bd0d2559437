"""LRU pinned to its paper: the linear recurrent unit of Orvieto et al. 2023 ("Resurrecting recurrent neural
networks for long sequences") written out — λ = exp(−exp(ν) + i exp(θ)), the γ-normalized input γ ⊙ (B u_k), the
complex diagonal recurrence as a plain loop, y = Re(C x) + D ⊙ u — in float64 on the mixer's own weights, compared
with its output, its state after stepping and its matrix kernel (the LRU mixes channels: no scalar coefficients)."""

from __future__ import annotations

import math

import pytest
import torch

from seqdyn import mixers
from tests.mixers.paper_helpers import assert_close, compare_with_paper, double_mixer, inputs
from tests.mixers.paper_helpers_ssm import as_is, complex_parameter, lti_matrix_coefficients

D = 4
CONFIGS = [dict(state_dim=5), dict(state_dim=3, r_min=0.5, r_max=0.99, max_phase=1.0)]


def lru_layer(m, u):
    """``(y, x_T [B, N], the matrix kernel [B, 1, T, T, D, D])``, inputs and outputs the D channels::

    λ = exp(−exp(ν_log) + i·exp(θ_log)),   γ = exp(γ_log)
    x_k = λ ⊙ x_{k−1} + γ ⊙ (B u_k),   y_k = Re(C x_k) + D ⊙ u_k,   K_j = Re(C diag(λ^j γ) B)
    """
    lam = torch.exp(torch.complex(-torch.exp(m.nu_log), torch.exp(m.theta_log)))
    gamma = torch.exp(m.gamma_log)
    B, C = complex_parameter(m.B), complex_parameter(m.C)  # [N, D], [D, N]
    x = torch.zeros(u.shape[0], lam.shape[0], dtype=lam.dtype)
    ys = []
    for k in range(u.shape[1]):
        x = lam * x + gamma * (u[:, k].to(x.dtype) @ B.T)
        ys.append((x @ C.T).real + m.head.D * u[:, k])
    kernels = torch.stack([((C * lam**j * gamma) @ B).real for j in range(u.shape[1])])
    return torch.stack(ys, dim=1), x, lti_matrix_coefficients(kernels, u.shape[0])


@pytest.mark.parametrize("options", CONFIGS, ids=str)
@pytest.mark.parametrize("part", ["output", "state"])
def test_lru_is_the_gamma_normalized_linear_recurrent_unit(options, part):
    compare_with_paper(part, double_mixer("lru", D, **options), inputs(2, 9, D, seed=1), lru_layer, state_of=as_is)


@pytest.mark.parametrize("options", CONFIGS, ids=str)
def test_lru_matrix_kernel_is_re_c_lambda_to_the_j_gamma_b(options):
    """The LRU mixes channels (no scalar coefficients per channel): its DSF kernel is the listing's K_{i−j}."""
    mixer, x = double_mixer("lru", D, **options), inputs(2, 7, D, seed=2)
    assert_close(mixer.dsf(x).kernel(), lru_layer(mixer, x)[2], "lru matrix kernel K_ij")


def test_lru_ring_init_and_gamma_normalization():
    """|λ| ∈ [r_min, r_max] with |λ|² uniform, arg λ ∈ [0, max_phase], γ = √(1 − |λ|²) (Orvieto et al. 2023)."""
    torch.manual_seed(0)
    r_min, r_max, max_phase = 0.4, 0.9, math.pi / 4
    mixer = mixers.build("lru", 4, state_dim=4000, r_min=r_min, r_max=r_max, max_phase=max_phase).double()
    log_lam = mixer.system().log_lam
    modulus, phase = torch.exp(log_lam.real).detach(), log_lam.imag.detach()
    assert modulus.min() >= r_min - 1e-6 and modulus.max() <= r_max + 1e-6
    assert phase.min() >= 0 and phase.max() <= max_phase + 1e-6
    assert abs(float((modulus**2).mean()) - (r_min**2 + r_max**2) / 2) < 0.02
    assert abs(float(phase.mean()) - max_phase / 2) < 0.03
    assert_close(torch.exp(mixer.gamma_log), torch.sqrt(1 - modulus**2), "γ", tol=1e-6)
    default = mixers.build("lru", 4, state_dim=2000)
    modulus = torch.exp(-torch.exp(default.nu_log.detach().double()))
    assert modulus.max() < 1 and abs(float((modulus**2).mean()) - 0.5) < 0.03
    assert abs(float(default.B.detach().std()) * math.sqrt(2 * 4) - 1) < 0.05
    assert abs(float(default.C.detach().std()) * math.sqrt(2000) - 1) < 0.05
