"""The DSF view (seed 000 §3): the kernel Φ reproduces the operator; Taylor features approximate softmax."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import seqdyn
from seqdyn.features import taylor, taylor_dim
from tests.core.cases import assert_close, build, random_case

COMBOS = [
    ("identity", "none", "none", "none"),
    ("identity", "scalar", "none", "sum"),
    ("identity", "diagonal", "keys", "none"),
    ("identity", "diagonal", "given", "abs_max1"),
    ("identity", "scalar_unstable", "none", "tensor"),
]


@pytest.mark.parametrize("combo", COMBOS, ids="-".join)
def test_dsf_kernel_reproduces_the_operator(combo):
    case = random_case(*combo, seed=11, length=7, with_state=False, key_dim=3, value_dim=2)
    leaves, options = build(case)
    leaves = {n: x.detach() for n, x in leaves.items()}
    q, k, v = leaves.pop("q"), leaves.pop("k"), leaves.pop("v")
    expected = seqdyn.coefficient_dynamics(q, k, v, backend="quadratic", **leaves, **options)
    system = seqdyn.dsf(q, k, v, **leaves, **options)
    heads = expected.shape[2]
    state_dim = case.key_dim * case.value_dim
    assert system.Lambda.shape == (case.batch, heads, case.length, state_dim, state_dim)
    assert system.B.shape == (case.batch, heads, case.length, state_dim, case.value_dim)
    v_full = v.expand(*v.shape[:2], heads, v.shape[3])
    assert_close(system.apply(v_full), expected, 1e-10, "Φ u")
    assert_close(system.simulate(v_full), expected, 1e-10, "recurrence h_i = Λ_i h_{i-1} + B_i u_i")
    kernel = system.kernel()
    rows, cols = torch.triu_indices(case.length, case.length, 1)
    assert torch.all(kernel[:, :, rows, cols] == 0)  # causal


def test_dsf_of_linear_attention_has_the_state_of_seed_000_eq_15():
    """With Λ = I and η = "sum", Λ_i^DSF = (η_{i-1}/η_i) I and B_i = (b_i/η_i)(k_i ⊗ I_V)."""
    q, k = (
        F.softplus(torch.randn(1, 5, 1, 2, dtype=torch.float64)),
        F.softplus(torch.randn(1, 5, 1, 2, dtype=torch.float64)),
    )
    v = torch.randn(1, 5, 1, 3, dtype=torch.float64)
    system = seqdyn.dsf(q, k, v, normalizer="sum", scale=1.0)
    eta = torch.stack([(q[0, i, 0] @ k[0, : i + 1, 0].T).sum() for i in range(5)])
    for i in range(1, 5):
        assert_close(system.Lambda[0, 0, i], (eta[i - 1] / eta[i]) * torch.eye(6, dtype=torch.float64), 1e-12, "Λ")
    assert_close(
        system.B[0, 0, 2], torch.kron(k[0, 2, 0, :, None], torch.eye(3, dtype=torch.float64)) / eta[2], 1e-12, "B"
    )
    assert_close(system.C[0, 0, 2], torch.kron(q[0, 2, 0, None, :], torch.eye(3, dtype=torch.float64)), 1e-12, "C")


def test_nonlinear_readouts_have_no_finite_dsf():
    q = torch.randn(1, 4, 1, 2)
    with pytest.raises(ValueError, match="no finite DSF.*taylor"):
        seqdyn.dsf(q, q, q, readout="exp", normalizer="sum")


def test_taylor_features_are_the_scaled_tensor_powers():
    x = torch.randn(3, 2, dtype=torch.float64)
    features = taylor(x, 3)
    assert features.shape == (3, taylor_dim(2, 3)) == (3, 1 + 2 + 4 + 8)
    assert_close(features[:, :1], torch.ones(3, 1, dtype=torch.float64), 0, "degree 0")
    assert_close(features[:, 1:3], x, 0, "degree 1")
    outer = (x[:, :, None] * x[:, None, :]).reshape(3, 4) / math.sqrt(2)
    assert_close(features[:, 3:7], outer, 1e-15, "degree 2")
    with pytest.raises(ValueError, match="degree"):
        taylor(x, -1)


def test_taylor_error_decreases_monotonically_with_the_degree():
    """Seed 000 Lemma 1 / appendix C: the finite DSF of degree p approximates exp(qᵀk) ever better."""
    gen = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(50, 4, generator=gen, dtype=torch.float64), dim=-1)  # |qᵀk| ≤ 1
    k = F.normalize(torch.randn(60, 4, generator=gen, dtype=torch.float64), dim=-1)
    exact = torch.exp(q @ k.T)
    errors = [float(((taylor(q, p) @ taylor(k, p).T - exact).abs() / exact).max()) for p in range(8)]
    assert all(later < earlier for earlier, later in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-4


def test_taylor_linear_attention_approaches_softmax_attention():
    gen = torch.Generator().manual_seed(1)
    q = 0.5 * torch.randn(1, 12, 2, 3, generator=gen, dtype=torch.float64)
    k = 0.5 * torch.randn(1, 12, 2, 3, generator=gen, dtype=torch.float64)
    v = torch.randn(1, 12, 2, 2, generator=gen, dtype=torch.float64)
    softmax = seqdyn.coefficient_dynamics(q, k, v, readout="exp", normalizer="sum", scale=1.0)
    errors = []
    for degree in range(1, 6):
        approx = seqdyn.coefficient_dynamics(taylor(q, degree), taylor(k, degree), v, normalizer="sum", scale=1.0)
        errors.append(float((approx - softmax).abs().max()))
    assert all(later < earlier for earlier, later in zip(errors, errors[1:])), errors


def test_elu1_feature_map_keeps_the_digits_of_e_to_the_x_below_zero():
    """``elu(x) + 1`` is ``x + 1`` above 0 and ``eˣ`` below, also where ``(eˣ − 1) + 1`` would cancel to 0."""
    from seqdyn.features import FEATURE_MAPS

    x = torch.tensor([-50.0, -20.0, -1.0, 0.0, 0.5, 3.0], dtype=torch.float64)
    expected = torch.tensor([math.exp(-50), math.exp(-20), math.exp(-1), 1.0, 1.5, 4.0], dtype=torch.float64)
    assert torch.allclose(FEATURE_MAPS["elu1"](x), expected, rtol=1e-15, atol=0)
