"""DLR pinned to its paper: the diagonal linear RNN layer of Gupta et al. (seed 002 §2, eqs. 1–6, Fig. 4) written
out — λ = exp(−(logΛ)_re² + i(logΛ)_im), the recurrence x_k = diag(λ) x_{k−1} + 1·u_k as a plain loop, the real
part of ⟨w, x_k⟩, the residual, GELU and W_out — in float64 on the mixer's own weights, compared with its output, its
state after stepping and its Toeplitz coefficients; DLR-prod (the Re·Im kernel) and the bidirectional DLR (eq. 6)
as dense Toeplitz products."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqdyn import mixers
from seqdyn.reproduce.dlr_long_range import TABLE8_DLR_R_RANGE
from seqdyn.reproduce.protocols.atomic import TABLE7_DLR
from tests.mixers.paper_helpers import (
    PARTS,
    assert_close,
    coefficient_matrix,
    compare_with_paper,
    double_mixer,
    inputs,
    step_through,
)
from tests.mixers.paper_helpers_ssm import as_is, complex_parameter, lti_coefficients

D = 4


def eigenvalues(m, direction: int = 0):
    """λ = exp(−(logΛ)_re² + i·(logΛ)_im) ``[N]`` (002 §2.3), shared by the H channels."""
    return torch.exp(torch.complex(-(m.log_re[direction] ** 2), m.log_im[direction]))


def dlr_output(m, y, u):
    """The layer around the DLR (002 §2.3): ``W_out GELU(y + u)``, residual from u, no bias."""
    return F.gelu(y + u) @ m.head.proj.weight.T


def dlr_layer(m, u):
    """Per channel h (state x ``[B, H, N]``)::

    x_k = diag(λ) x_{k−1} + 1·u_k,   y_k = Re⟨w_h, x_k⟩ = Σ_{j≤k} Re(K_j) u_{k−j},   K_j = Σ_n w_{h,n} λ_n^j
    """
    lam, w = eigenvalues(m), complex_parameter(m.W[0])  # [N], [H, N]
    x = torch.zeros(u.shape[0], *w.shape, dtype=w.dtype)
    ys = []
    for k in range(u.shape[1]):
        x = lam * x + u[:, k, :, None]
        ys.append((w * x).sum(-1).real)
    kernel = torch.stack([(w * lam**j).sum(-1).real for j in range(u.shape[1])], dim=-1)
    return dlr_output(m, torch.stack(ys, dim=1), u), x, lti_coefficients(kernel, u.shape[0])


def dense_dlr_layer(m, u):
    """DLR-prod and bidirectional DLR as dense matrices: ``(output, α [B, H, T, T])`` with the cast
    K_j = Re(K̃_j)·Im(K̃_j) for ``prod`` (002 §2.1) and α_ij = K→_{i−j} (j ≤ i), K←_{j−i−1} (j > i) (eq. 6)."""
    length = u.shape[1]
    lags = torch.arange(length)[:, None] - torch.arange(length)[None, :]  # i − j

    def kernel(direction, lag):  # [H, T, T]
        K = (complex_parameter(m.W[direction])[:, None, None, :] * eigenvalues(m, direction) ** lag[..., None]).sum(-1)
        return K.real * K.imag if m.prod else K.real

    alpha = torch.where(lags >= 0, kernel(0, lags.clamp(min=0)), 0.0)
    if m.bidirectional:
        alpha = alpha + torch.where(lags < 0, kernel(1, (-lags - 1).clamp(min=0)), 0.0)
    y = torch.einsum("hij,bjh->bih", alpha, u)
    return dlr_output(m, y, u), alpha.expand(u.shape[0], -1, -1, -1)


@pytest.mark.parametrize("part", PARTS)
def test_dlr_is_the_diagonal_linear_rnn_layer(part):
    mixer, x = double_mixer("dlr", D, state_dim=5), inputs(2, 9, D, seed=1)
    compare_with_paper(part, mixer, x, dlr_layer, state_of=as_is)


@pytest.mark.parametrize(
    "options", [dict(prod=True), dict(bidirectional=True), dict(prod=True, bidirectional=True)], ids=str
)
def test_dlr_prod_and_bidirectional_are_the_kernels_of_section_2_1_and_eq_6(options):
    mixer, x = double_mixer("dlr", D, state_dim=4, **options), inputs(2, 9, D, seed=2)
    expected, alpha = dense_dlr_layer(mixer, x)
    for backend in mixer.backends:
        assert_close(mixer(x, backend=backend), expected, f"dlr {options} {backend} output")
    assert_close(coefficient_matrix(mixer, x), alpha, f"dlr {options} coefficients")
    if not mixer.bidirectional:
        assert_close(step_through(mixer, x)[0], expected, f"dlr {options} step outputs")


def test_bidirectional_dlr_is_not_causal_and_says_so():
    """002 eqs. 5-6: backends agree; the coefficients are the full Toeplitz matrix; no streaming, no causal DSF."""
    mixer, x = double_mixer("dlr", D, state_dim=4, bidirectional=True), inputs(2, 9, D, seed=3)
    outputs = {backend: mixer(x, backend=backend) for backend in ("fft", "scan", "recurrent")}
    for backend, y in outputs.items():
        assert_close(y, outputs["recurrent"], backend)
    A = mixer.coefficients(x)
    core, values = mixer.core(x)
    assert A.triu(1).abs().sum() > 0
    assert_close(torch.einsum("bhij,bjhv->bihv", A, values), core, "A·v")
    assert_close(A[:, :, :-1, 1:].diagonal(dim1=-2, dim2=-1), A[:, :, :1, 1:2].expand(-1, -1, 8, 1)[..., 0], "Toeplitz")
    for call in (
        lambda: mixer.init_state(2),
        lambda: mixer.step(x[:, 0], None),
        lambda: mixer.dsf(x),
        lambda: mixer.state_size(9),
    ):
        with pytest.raises(ValueError, match="bidirectional: a bidirectional DLR is not causal"):
            call()


def test_dlr_init_follows_section_2_3():
    """(logΛ)_im = 2πn/N; (logΛ)_re = (e^r/2)^½, r ~ U(log .0005, log .5); Re W, Im W ~ N(0, N⁻²); W_out no bias."""
    torch.manual_seed(0)
    mixer = mixers.build("dlr", 64, state_dim=128)
    N = 128
    phases = 2 * math.pi * torch.arange(N, dtype=torch.float64) / N
    assert_close(mixer.log_im[0].double(), phases, "(logΛ)_im", tol=1e-6)
    e_r = 2 * mixer.log_re.double() ** 2
    assert e_r.min() >= 0.0005 * (1 - 1e-5) and e_r.max() <= 0.5 * (1 + 1e-5)
    assert e_r.log().std() > 0.25 * (math.log(0.5) - math.log(0.0005))  # spread over the log range
    modulus = torch.exp(-(mixer.log_re.double() ** 2))
    assert modulus.min() >= math.exp(-0.25) - 1e-6 and modulus.max() <= 1
    assert abs(float(mixer.W.detach().std()) * N - 1) < 0.05
    assert mixer.head.proj.bias is None and mixer.head.skip == "identity" and mixer.head.activation == "gelu"


def test_dlr_init_takes_the_tables_dt_range():
    """Tables 7/8 (seed 002 §A): dt ~ U(log dt-min, log dt-max) and |λ| = exp(−dt/2). Table 7's dt-min = dt-max =
    1e-5 for Tables 1 and 2 puts every |λ| at exp(−5e-6) ≈ 1 with the phases 2πn/N, the DFT-like start of §2.3;
    Table 8's (1e-4, 1e-1) spreads |λ| over [exp(−0.05), exp(−5e-5)]. The reproductions pass these ranges."""
    torch.manual_seed(0)
    N = 256
    table7 = mixers.build("dlr", 8, state_dim=N, r_range=TABLE7_DLR["r_range"])
    modulus = eigenvalues(table7).abs().double()
    assert_close(modulus, torch.full((N,), math.exp(-0.5e-5), dtype=torch.float64), "|λ| (Table 7)", tol=1e-6)
    assert_close(table7.log_im[0].double(), 2 * math.pi * torch.arange(N, dtype=torch.float64) / N, "arg λ", tol=1e-6)
    table8 = mixers.build("dlr", 8, state_dim=N, r_range=TABLE8_DLR_R_RANGE)
    dt = -2 * eigenvalues(table8).abs().double().log()
    assert dt.min() >= 1e-4 * (1 - 1e-4) and dt.max() <= 1e-1 * (1 + 1e-4)
    assert dt.log().std() > 0.25 * (math.log(1e-1) - math.log(1e-4))  # log-uniform, not clustered at one end


def real_dlr_layer(m, u):
    """DLR-ℝ (002 §3.3): λ = exp(−(logΛ)_re²) ∈ (0, 1]^N and w ∈ ℝ^{H×N}; the real recurrence
    x_k = λ ⊙ x_{k−1} + u_k, y_k = ⟨w_h, x_k⟩, then the same layer around it."""
    lam, w = torch.exp(-(m.log_re[0] ** 2)), m.W[0]  # [N], [H, N]
    x = torch.zeros(u.shape[0], *w.shape, dtype=w.dtype)
    ys = []
    for k in range(u.shape[1]):
        x = lam * x + u[:, k, :, None]
        ys.append((w * x).sum(-1))
    kernel = torch.stack([(w * lam**j).sum(-1) for j in range(u.shape[1])], dim=-1)
    return dlr_output(m, torch.stack(ys, dim=1), u), x, lti_coefficients(kernel, u.shape[0])


@pytest.mark.parametrize("part", ["output", "coefficients"])
def test_real_dlr_is_the_real_valued_layer(part):
    mixer, x = double_mixer("dlr", D, state_dim=5, real=True), inputs(2, 9, D, seed=4)
    compare_with_paper(part, mixer, x, real_dlr_layer)


def test_real_dlr_trains_only_real_parameters_and_refuses_prod():
    mixer = mixers.build("dlr", 8, state_dim=16, real=True)
    complex_count = sum(p.numel() for p in mixers.build("dlr", 8, state_dim=16).parameters())
    names = {name for name, _ in mixer.named_parameters()}
    assert "log_im" not in names and mixer.W.shape == (1, 8, 16)
    assert complex_count - sum(p.numel() for p in mixer.parameters()) == 16 + 8 * 16  # phases and Im w
    with pytest.raises(ValueError, match="real: .*prod"):
        mixers.build("dlr", 8, real=True, prod=True)
