"""S5 pinned to its paper: the simplified state space layer of Smith et al. 2023 (seed 004 §S5) written out — one
MIMO diagonal system over P/2 complex states of a conjugate-symmetric half, zero-order hold per state, the
recurrence as a plain loop, y = 2 Re(C̃ x̃) (S5's ``conj_sym``), the D skip, GELU and the half-GLU
``y ⊙ σ(W y + b)`` — in float64 on the mixer's own weights, compared with its output, its state after stepping and
its matrix kernel (S5 mixes channels: no scalar coefficients per channel)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqdyn.mixers._lti import hippo_legs
from tests.mixers.paper_helpers import assert_close, compare_with_paper, double_mixer, inputs
from tests.mixers.paper_helpers_ssm import as_is, build64, complex_parameter, lti_matrix_coefficients

D = 4
CONFIGS = [dict(state_dim=6), dict(state_dim=8, blocks=2, clip_eigs=True)]


def s5_layer(m, u):
    """``(out, x̃_T [B, P/2], the matrix kernel [B, 1, T, T, D, D])``, inputs and outputs the D channels::

    λ̄ = exp(ΛΔ),   B̄ = (λ̄ − 1)/Λ ⊙ B̃                 (ZOH per state; clip_eigs: Re Λ ≤ −1e-4)
    x̃_k = λ̄ ⊙ x̃_{k−1} + B̄ u_k,   y_k = 2 Re(C̃ x̃_k),   K_j = 2 Re(C̃ diag(λ̄^j) B̄)
    g = GELU(y + D ⊙ u);   out = g ⊙ σ(W g + b)
    """
    real = m.lambda_re.clamp(max=-1e-4) if m.clip_eigs else m.lambda_re
    lam = torch.complex(real, m.lambda_im)
    lam_bar = torch.exp(lam * torch.exp(m.log_step))
    B_bar = ((lam_bar - 1) / lam)[:, None] * complex_parameter(m.B)  # [P/2, D]
    C = complex_parameter(m.C)  # [D, P/2]
    x = torch.zeros(u.shape[0], lam.shape[0], dtype=lam.dtype)
    ys = []
    for k in range(u.shape[1]):
        x = lam_bar * x + u[:, k].to(x.dtype) @ B_bar.T
        ys.append(2 * (x @ C.T).real)
    g = F.gelu(torch.stack(ys, dim=1) + m.head.D * u)
    out = g * torch.sigmoid(g @ m.head.proj.weight.T + m.head.proj.bias)
    kernels = torch.stack([2 * ((C * lam_bar**j) @ B_bar).real for j in range(u.shape[1])])
    return out, x, lti_matrix_coefficients(kernels, u.shape[0])


def s5_mixer(options):
    mixer = double_mixer("s5", D, **options)
    if mixer.clip_eigs:
        with torch.no_grad():
            mixer.lambda_re[0] = 0.05  # an unstable eigenvalue, which the clip moves to Re Λ = −1e-4
    return mixer


@pytest.mark.parametrize("options", CONFIGS, ids=str)
@pytest.mark.parametrize("part", ["output", "state"])
def test_s5_is_the_zoh_discretized_mimo_diagonal_layer(options, part):
    compare_with_paper(part, s5_mixer(options), inputs(2, 9, D, seed=1), s5_layer, state_of=as_is)


@pytest.mark.parametrize("options", CONFIGS, ids=str)
def test_s5_matrix_kernel_is_2_re_c_lambda_bar_to_the_j_b_bar(options):
    """S5 mixes channels (no scalar coefficients per channel): its DSF kernel is the listing's K_{i−j}."""
    mixer, x = s5_mixer(options), inputs(2, 7, D, seed=2)
    assert_close(mixer.dsf(x).kernel(), s5_layer(mixer, x)[2], "s5 matrix kernel K_ij")


def test_s5_init_uses_the_hippo_n_eigenvalues():
    """Λ: eigenvalues −½ + iω of the normal part A + PPᵀ of HiPPO-LegS, repeated per block; B̃ = V⁻¹B, C̃ = CV."""
    mixer = build64("s5", D, state_dim=8, blocks=2)
    A, _ = hippo_legs(4)
    P = torch.sqrt(torch.arange(4, dtype=torch.float64) + 0.5)
    eigenvalues = torch.linalg.eigvals(A + P[:, None] * P[None, :])
    upper = eigenvalues[eigenvalues.imag > 0]
    expected = upper[upper.imag.argsort()].repeat(2)
    assert_close(torch.complex(mixer.lambda_re, mixer.lambda_im), expected, "Λ")
    step = torch.exp(mixer.log_step)
    assert step.shape == (4,) and step.min() >= 0.001 * (1 - 1e-9) and step.max() <= 0.1 * (1 + 1e-9)
    system = mixer.system()
    lam = torch.complex(mixer.lambda_re, mixer.lambda_im)
    zoh_factor = (torch.exp(lam * step) - 1) / lam
    assert_close(system.B, zoh_factor[:, None] * complex_parameter(mixer.B), "B̄ = (λ̄ − 1)/Λ B̃")
