"""Readout near-zero sets (Principle 2), positional information (Lemma 3), spectra (Principle 6), dot-product
variance (Lemma 5), the Taylor DSF of softmax (seed 000 Lemma 1) and state expansion (seed 000 Lemma 2)."""

from __future__ import annotations

import math

import pytest
import torch

import seqdyn
from seqdyn import analysis
from tests.analysis.helpers import inputs, mixer

HALF_LINE_READOUTS = ("exp", "relu", "softplus", "sigmoid", "elu1")


# --- readout near-zero sets (seed 001 Principle 2, Example 1) -------------------------------------------------


@pytest.mark.parametrize("name", HALF_LINE_READOUTS)
def test_near_zero_set_of_half_line_readouts_grows_with_the_window(name):
    sizes = [analysis.readout_near_zero_set(name, eps=1e-3, window=(-w, w)) for w in (5.0, 10.0, 20.0, 40.0)]
    assert all(b > a for a, b in zip(sizes, sizes[1:]))
    # the set is a half-line (−∞, c): widening the window by Δ on the left adds exactly Δ
    assert sizes[3] - sizes[2] == pytest.approx(20.0) and sizes[2] - sizes[1] == pytest.approx(10.0)


def test_near_zero_set_of_the_identity_is_order_eps():
    for eps in (1e-1, 1e-3, 1e-6):
        for window in ((-5.0, 5.0), (-50.0, 50.0)):
            assert analysis.readout_near_zero_set("identity", eps=eps, window=window) == pytest.approx(2 * eps)
    assert analysis.readout_near_zero_set("identity", eps=1e-3, window=(0.0, 1.0)) == pytest.approx(1e-3)
    exp_set = analysis.readout_near_zero_set("exp", eps=1e-3, window=(-10.0, 10.0))
    assert exp_set == pytest.approx(math.log(1e-3) + 10.0) and exp_set > 1000 * 2e-3


@pytest.mark.parametrize("name", sorted(seqdyn.READOUTS))
def test_closed_form_sets_agree_with_the_grid_measure_of_a_callable(name):
    fn = seqdyn.READOUTS[name]
    window, points = (-8.0, 3.0), 200_000
    for eps in (0.05, 0.5, 2.0):
        exact = analysis.readout_near_zero_set(name, eps=eps, window=window)
        grid = analysis.readout_near_zero_set(lambda s: fn(s), eps=eps, window=window, points=points)
        assert grid == pytest.approx(exact, abs=3 * 11.0 / points)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(readout="tanh"), r"readout: .*\['elu1', 'exp', 'identity', 'relu', 'sigmoid', 'softplus', 'square'\]"),
        (dict(readout="exp", eps=0.0), "eps: "),
        (dict(readout="exp", window=(1.0, -1.0)), "window: "),
        (dict(readout="exp", window=(-math.inf, 0.0)), "window: "),
        (dict(readout=lambda s: s.sum(), window=(-1.0, 1.0)), "readout: the callable"),
    ],
)
def test_readout_near_zero_set_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        analysis.readout_near_zero_set(**kwargs)


# --- positional information (seed 001 Lemma 3) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name, options, expected",
    [
        ("softmax_attention", {}, False),
        ("linear_attention", {}, False),
        ("normalized_attention", {}, False),
        ("custom", {"short_conv": True}, False),  # a short convolution only marks the first w − 1 positions
        ("mamba2", {"state_dim": 4, "head_dim": 8}, True),
        ("gla", {}, True),
        ("retnet", {}, True),
        ("deltanet", {}, True),
        ("custom", {"decay": "constant", "constant_decay": 0.9}, True),
        ("s4d", {}, True),
    ],
)
def test_positional_information_iff_lambda_is_not_the_identity(name, options, expected):
    assert analysis.has_positional_information(mixer(name, **options)) is expected


def test_retnet_loses_positional_information_when_its_decay_is_one():
    m = mixer("retnet")
    m.log_gamma.zero_()  # γ_h = 1: Λ = I
    assert analysis.has_positional_information(m) is False


def test_positional_information_of_a_mixer_without_scalar_coefficients_uses_the_dsf():
    m = mixer("s5", state_dim=4)
    assert analysis.has_positional_information(m) is True  # Λ = diag(λ̄) ≠ I
    with pytest.raises(ValueError, match="^mixer: s5 has no scalar coefficients"):
        analysis.has_positional_information(m, method="coefficients")
    with pytest.raises(ValueError, match="^method: "):
        analysis.has_positional_information(m, method="eigen")
    with pytest.raises(ValueError, match="^mixer: expected a seqdyn mixer"):
        analysis.has_positional_information(torch.nn.Linear(4, 4))


def test_positional_probe_does_not_touch_the_mixer():
    m = mixer("gla").float()
    state = {key: value.clone() for key, value in m.state_dict().items()}
    assert analysis.has_positional_information(m) is True  # probed on a float64 copy
    assert all(p.dtype == torch.float32 for p in m.parameters())
    assert all(torch.equal(state[key], value) for key, value in m.state_dict().items())


# --- spectra of Λ_t (seed 001 Principle 6) --------------------------------------------------------------------


def test_spectral_bound_of_retnet_is_its_largest_decay():
    m = mixer("retnet")
    assert analysis.spectral_bound(m, inputs()) == pytest.approx(float(torch.exp(m.log_gamma).max()))
    assert analysis.spectral_radii(m, inputs()) == pytest.approx(torch.exp(m.log_gamma))


def test_spectral_radii_of_hand_built_transitions_are_their_largest_eigenvalue_moduli():
    """Principle 6's bound on transitions whose eigenvalues are known: a rotation by θ scaled by r (eigenvalues
    r·e^{±iθ}, modulus r, though its entries are smaller), a Jordan block [[a, 1], [0, a]] (|a|, though its norm
    is larger) and a diagonal with −1.2; per head, the largest over batch and time."""
    from seqdyn.analysis.mixers import dsf_radii
    from seqdyn.core.dsf import DSF

    def rotation(r: float, theta: float) -> list[list[float]]:
        return [[r * math.cos(theta), -r * math.sin(theta)], [r * math.sin(theta), r * math.cos(theta)]]

    lambdas = torch.tensor(
        [  # [B = 2, H = 2, T = 2, 2, 2]
            [[rotation(0.9, 1.0), rotation(0.5, 2.0)], [[[0.3, 1.0], [0.0, 0.3]], [[0.2, 0.0], [0.0, -1.2]]]],
            [[rotation(0.95, 0.1), rotation(0.1, 0.3)], [[[-0.7, 1.0], [0.0, -0.7]], [[0.0, 0.0], [0.0, 0.0]]]],
        ],
        dtype=torch.float64,
    )
    system = DSF(lambdas, *(torch.zeros(2, 2, 2, 2, 2, dtype=torch.float64) for _ in range(3)))
    assert torch.allclose(dsf_radii(system), torch.tensor([0.95, 1.2], dtype=torch.float64), rtol=1e-12, atol=0)
    constant = DSF(
        lambdas[:, :, :1].expand(2, 2, 5, 2, 2),
        *(x[:, :, :1].expand(2, 2, 5, 2, 2) for x in (system.B, system.C, system.D)),
    )
    assert torch.allclose(dsf_radii(constant), torch.tensor([0.95, 0.7], dtype=torch.float64), rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "name, options",
    [
        ("gla", {}),
        ("mamba2", {"state_dim": 4, "head_dim": 8}),
        ("deltanet", {}),  # Householder: eigenvalues of the K × K matrices
        ("gated_deltanet", {}),
        ("custom", {"heads": 4, "decay": "diagonal", "householder": "learned", "householder_beta": 1.5}),
    ],
)
def test_evolution_spectra_agree_with_the_dsf_transitions(name, options):
    m, x = mixer(name, **options), inputs(length=6)
    evolution = analysis.spectral_radii(m, x, source="evolution")
    assert evolution == pytest.approx(analysis.spectral_radii(m, x, source="dsf"), rel=1e-9)
    assert (evolution <= 1 + 1e-12).all()  # all of these are stable


def test_spectral_bound_flags_identity_and_unstable_evolutions():
    x = inputs()
    assert analysis.spectral_bound(mixer("softmax_attention"), x) == 1.0
    assert analysis.spectral_bound(mixer("custom", decay="constant", constant_decay=1.05), x) == pytest.approx(1.05)
    assert analysis.spectral_bound(mixer("s4d"), x) < 1.0
    # a reflection (β = 2) has eigenvalue −1: modulus 1
    reflect = mixer("custom", householder="learned", householder_beta=2.0)
    assert analysis.spectral_bound(reflect, x) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="^x: "):
        analysis.spectral_bound(mixer("gla"), x[0])
    with pytest.raises(ValueError, match="^source: s4d is not built on coefficient_dynamics"):
        analysis.spectral_bound(mixer("s4d"), x, source="evolution")


# --- dot-product variance (seed 001 Lemma 5) ------------------------------------------------------------------


def test_dot_product_variance_grows_linearly_in_k_without_scaling_and_is_flat_with_inverse_sqrt():
    dims = (4, 16, 64)
    plain = [analysis.dot_product_variance(K, 1.0, samples=40_000) for K in dims]
    scaled = [analysis.dot_product_variance(K, K**-0.5, samples=40_000) for K in dims]
    named = [analysis.dot_product_variance(K, "inv_sqrt", samples=40_000) for K in dims]
    for K, value in zip(dims, plain):
        assert value == pytest.approx(K, rel=0.05)
    assert plain[2] / plain[0] == pytest.approx(16, rel=0.1)
    assert scaled == pytest.approx([1.0, 1.0, 1.0], rel=0.05) and named == pytest.approx(scaled)
    assert analysis.dot_product_variance(8, 0.5, samples=40_000) == pytest.approx(0.25 * 8, rel=0.05)


def test_dot_product_variance_is_deterministic_and_validates():
    first = analysis.dot_product_variance(8, samples=1000, seed=3)
    assert first == analysis.dot_product_variance(8, samples=1000, seed=3)
    assert first != analysis.dot_product_variance(8, samples=1000, seed=4)
    for kwargs, name in ((dict(K=0), "K"), (dict(K=4, scale="sqrt"), "scale"), (dict(K=4, samples=1), "samples")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            analysis.dot_product_variance(**kwargs)


# --- the finite DSF of softmax (seed 000 Lemma 1) -------------------------------------------------------------


def test_taylor_error_decreases_with_the_degree_and_matches_the_truncated_series():
    g = torch.Generator().manual_seed(0)
    q = 0.5 * torch.randn(6, 3, generator=g, dtype=torch.float64)
    k = 0.5 * torch.randn(5, 3, generator=g, dtype=torch.float64)
    errors = [analysis.taylor_softmax_error(q, k, p) for p in range(11)]
    assert all(b < a for a, b in zip(errors, errors[1:]))
    assert errors[-1] < 1e-5
    scores = q @ k.T
    for p in (0, 2, 5):
        series = sum(scores**d / math.factorial(d) for d in range(p + 1))
        assert errors[p] == pytest.approx(float(((scores.exp() - series).abs() / scores.exp()).max()), rel=1e-9)


@pytest.mark.parametrize(
    "q, k, degree, name",
    [
        (torch.zeros(3), torch.zeros(2, 3), 2, "q"),
        (torch.zeros(2, 3), torch.zeros(2, 4), 2, "k"),
        (torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 3), 2, "q"),
        (torch.zeros(2, 3), torch.zeros(2, 3), -1, "degree"),
    ],
)
def test_taylor_error_validates_shapes(q, k, degree, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        analysis.taylor_softmax_error(q, k, degree)


# --- state expansion (seed 000 Lemma 2) -----------------------------------------------------------------------


def test_lemma2_larger_state_recovers_a_random_system():
    assert analysis.lemma2_demo() < 1e-12
    assert analysis.lemma2_demo(state_dim=2, extra_states=7, heads=1, seed=4) < 1e-12


def test_lemma2_on_the_dsf_of_a_mixer_and_the_check_is_discriminative():
    system = mixer("gla").dsf(inputs(length=8))
    larger = analysis.expand_state(system, 5)
    state_dim = system.Lambda.shape[-1]
    assert larger.Lambda.shape[-1] == state_dim + 5 and larger.Lambda[..., state_dim:, :].abs().sum() > 0
    assert analysis.larger_state_recovers(system, 5) < 1e-12
    u = torch.randn(2, 8, system.B.shape[1], system.B.shape[-1], dtype=torch.float64)
    larger.C[..., state_dim:] = 1.0  # let the extra states reach the output: no longer the same system
    assert (larger.simulate(u) - system.simulate(u)).abs().max() > 1e-3
