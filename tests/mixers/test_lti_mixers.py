"""The LTI mixers dlr, dss_exp, s4d, s4, s5, lru: backends agree, streaming equals forward, coefficients and the DSF
reproduce the core, long sequences give finite gradients, parameter counts and state sizes match formulas, bad
options are named, and HiPPO-LegS and its NPLR form (the initialization S4 and S5 share) follow seed 004.  Each
mixer's paper (its layer written out, its initialization) is in ``tests/mixers/test_<name>.py``."""

from __future__ import annotations

import math

import pytest
import torch

from seqdyn import mixers
from seqdyn.mixers._lti import hippo_legs, hippo_legs_nplr
from tests.mixers.parameter_counts import LTI_PARAMETERS

F64 = torch.float64
D = 6
#: (name, options): small configurations, and the variants of each paper's options
CONFIGS = [
    ("dlr", dict(state_dim=4)),
    ("dlr", dict(state_dim=3, prod=True, output="none", activation="none")),
    ("dss_exp", dict(state_dim=4)),
    ("dss_exp", dict(state_dim=3, init="inv", skip=False, output="linear")),
    ("s4d", dict(state_dim=4)),
    ("s4d", dict(state_dim=6, init="inv", output="half_glu")),
    ("s4", dict(state_dim=4)),
    ("s4", dict(state_dim=6, n_ssm=2)),
    ("s5", dict(state_dim=4)),
    ("s5", dict(state_dim=8, blocks=2, clip_eigs=True, output="glu")),
    ("lru", dict(state_dim=3)),
    ("lru", dict(state_dim=5, r_min=0.5, r_max=0.99, max_phase=1.0, activation="gelu", output="linear")),
]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in options.items())}" for name, options in CONFIGS]


def build(name: str, **options) -> mixers.Mixer:
    torch.manual_seed(0)
    return mixers.build(name, D, **options).double()


def inputs(length: int = 9, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, length, D, generator=torch.Generator().manual_seed(seed), dtype=F64)


def close(actual, expected, what, tol=1e-10):
    scale = max(1.0, float(expected.detach().abs().max()))
    error = float((actual - expected).detach().abs().max())
    assert error <= tol * scale, f"{what}: {error:.2e}"


def test_the_six_lti_mixers_are_registered_with_the_lti_backends():
    for name in ("dlr", "dss_exp", "s4d", "s4", "s5", "lru"):
        mixer = mixers.build(name, 8)
        assert mixer.name == name and mixer.backends == ("auto", "fft", "scan", "recurrent")
        assert mixer.reference_backend == "recurrent"
        assert mixer.scalar_coefficients == (name not in ("s5", "lru"))


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
@pytest.mark.parametrize("length", [1, 8, 9])
def test_backends_agree_values_and_gradients(name, options, length):
    mixer = build(name, **options)
    results = {}
    for backend in ("auto", "fft", "scan", "recurrent"):
        x = inputs(length).requires_grad_(True)
        y = mixer(x, backend=backend)
        weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(2), dtype=F64)
        grads = torch.autograd.grad((y * weights).sum(), [x, *mixer.parameters()], allow_unused=True)
        results[backend] = (y, [torch.zeros(1, dtype=F64) if g is None else g for g in grads])
    y_ref, grads_ref = results["recurrent"]
    for backend, (y, grads) in results.items():
        close(y, y_ref, f"{backend} output")
        for (parameter, _), g, g_ref in zip([("x", None), *mixer.named_parameters()], grads, grads_ref):
            close(g, g_ref, f"{backend} gradient of {parameter}")


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_step_equals_forward_and_the_state_has_state_size_floats(name, options):
    mixer = build(name, **options)
    x = inputs()
    state = mixer.init_state(2)
    outputs = []
    for t in range(x.shape[1]):
        y, state = mixer.step(x[:, t], state)
        outputs.append(y)
    close(torch.stack(outputs, dim=1), mixer(x), "step")
    floats = state.numel() * (2 if state.is_complex() else 1) // 2
    assert floats == mixer.state_size(9) == STATE_SIZES[name](**options)


#: real floats of the streaming state per sequence (complex counts twice), from the papers' state definitions
STATE_SIZES = {
    "dlr": lambda state_dim, prod=False, **_: D * (state_dim * (state_dim + 1) if prod else 2 * state_dim),
    "dss_exp": lambda state_dim, **_: D * 2 * state_dim,
    "s4d": lambda state_dim, **_: D * state_dim,  # N/2 complex states of a real N-state system
    "s4": lambda state_dim, **_: D * state_dim,  # N real states (dense)
    "s5": lambda state_dim, **_: state_dim,  # P/2 complex states
    "lru": lambda state_dim, **_: 2 * state_dim,
}


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_coefficients_and_dsf_reproduce_the_core(name, options):
    mixer = build(name, **options)
    x = inputs(length=7)
    core, values = mixer.core(x)
    assert core.shape == values.shape == ((2, 7, D, 1) if mixer.scalar_coefficients else (2, 7, 1, D))
    close(values, x.reshape(values.shape), "values are the inputs")
    for backend in ("fft", "scan"):
        close(mixer.core(x, backend)[0], core, f"core by {backend}")
    close(mixer.dsf(x).apply(values), core, "DSF Φ u")
    close(mixer.dsf(x).simulate(values), core, "DSF recurrence")
    assert not mixer.dsf(x).Lambda.is_complex()
    if not mixer.scalar_coefficients:
        with pytest.raises(ValueError, match="no scalar coefficients"):
            mixer.coefficients(x)
        return
    A = mixer.coefficients(x)
    assert A.shape == (2, D, 7, 7) and torch.all(A.triu(1) == 0)
    assert torch.all(A[:, :, 3:, 3:] == A[:, :, :4, :4])  # time invariant: a Toeplitz matrix
    close(torch.einsum("bhij,bjhv->bihv", A, values), core, "A·v")


@pytest.mark.parametrize(("name", "options", "formula"), LTI_PARAMETERS, ids=[f"{n}-{o}" for n, o, _ in LTI_PARAMETERS])
def test_parameter_count_matches_the_formula(name, options, formula):
    mixer = mixers.build(name, 16, **options)
    assert sum(p.numel() for p in mixer.parameters()) == formula(16)


BAD_OPTIONS = [
    ("dlr", dict(state_dim=0), "state_dim: expected a positive integer"),
    ("dlr", dict(prod="yes"), "prod: got 'yes'"),
    ("dlr", dict(bidirectional=2), "bidirectional: got 2"),
    ("dlr", dict(r_range=(0.5, 0.1)), "r_range"),
    ("dlr", dict(activation="relu"), "activation: got 'relu'.*gelu"),
    ("dlr", dict(output="mlp"), "output: got 'mlp'.*glu"),
    ("dss_exp", dict(init="legs"), "init: got 'legs'.*lin2pi"),
    ("dss_exp", dict(dt_min=0.2, dt_max=0.1), "dt_min, dt_max"),
    ("dss_exp", dict(dt_min=-1.0), "dt_min"),
    ("s4d", dict(state_dim=5), "state_dim: got 5; it must be even"),
    ("s4d", dict(init="diag"), "init: got 'diag'"),
    ("s4d", dict(skip="yes"), "skip: got 'yes'"),
    ("s4", dict(n_ssm=5), "n_ssm: 5 does not divide d_model=16"),
    ("s4", dict(state_dim=3), "state_dim"),
    ("s5", dict(blocks=3), "blocks: 3 blocks"),
    ("s5", dict(state_dim=12, blocks=4), "blocks: 4 blocks of state_dim=12"),
    ("s5", dict(clip_eigs=2), "clip_eigs"),
    ("lru", dict(r_min=0.9, r_max=0.5), "r_min, r_max"),
    ("lru", dict(r_max=1.5), r"r_max: got 1.5; allowed: \[0.0, 1.0\]"),
    ("lru", dict(max_phase=0.0), "max_phase"),
    ("lru", dict(state_dim=-2), "state_dim"),
]


@pytest.mark.parametrize(("name", "options", "match"), BAD_OPTIONS, ids=[f"{n}-{o}" for n, o, _ in BAD_OPTIONS])
def test_bad_options_raise_value_errors_naming_the_option(name, options, match):
    with pytest.raises(ValueError, match=match):
        mixers.build(name, 16, **options)


def test_bad_backend_state_and_input_are_named():
    mixer = build("s4d", state_dim=4)
    x = inputs()
    with pytest.raises(ValueError, match=r"backend: s4d computes with \['auto', 'fft', 'scan', 'recurrent'\]"):
        mixer(x, backend="chunk")
    with pytest.raises(ValueError, match=r"state: expected s4d.init_state\(batch\)"):
        mixer.step(x[:, 0], torch.zeros(2, D, 3, dtype=torch.complex128))
    with pytest.raises(ValueError, match=r"x: expected \[B, T, D\] with D=6"):
        mixer(torch.randn(2, 5, 4, dtype=F64))


# ---------------------------------------------------------------------------------------------------------------
# initializations


def test_hippo_legs_matches_the_formula_of_seed_004():
    N = 7
    A, B = hippo_legs(N)
    for n in range(N):
        assert B[n] == math.sqrt(2 * n + 1)
        for k in range(N):
            expected = -math.sqrt(2 * n + 1) * math.sqrt(2 * k + 1) if n > k else (-(n + 1) if n == k else 0.0)
            assert abs(A[n, k] - expected) < 1e-12


def test_nplr_form_reconstructs_hippo_legs():
    """A = V (diag Λ − p p*) V* with V = [V_h, conj V_h] unitary and Λ = −½ + iω (S4 §3)."""
    N = 12
    lam, p, b, half = hippo_legs_nplr(N)
    V = torch.cat([half, half.conj()], dim=1)
    close(V.conj().T @ V, torch.eye(N, dtype=torch.complex128), "V unitary")
    lam_full, p_full = torch.cat([lam, lam.conj()]), torch.cat([p, p.conj()])
    A, B = hippo_legs(N)
    rebuilt = V @ (torch.diag(lam_full) - p_full[:, None] * p_full.conj()[None, :]) @ V.conj().T
    close(rebuilt, A.to(torch.complex128), "V (Λ − pp*) V*")
    close(torch.cat([b, b.conj()]), V.conj().T @ B.to(torch.complex128), "b = V* B")
    assert torch.all(lam.real == -0.5) and torch.all(lam.imag > 0)


@pytest.mark.parametrize("name", ["s4d", "lru"])
def test_auto_measures_the_lti_backends_and_leaves_the_gradients_alone(name, monkeypatch):
    """``auto`` of an LTI mixer times ``fft``, ``scan`` and (T ≤ 64) ``recurrent`` once per shape; measuring
    accumulates no gradient into the parameters, and the forward computes with the chosen backend."""
    from seqdyn.core import autotune

    monkeypatch.setenv("SEQDYN_AUTOTUNE", "memory")
    autotune.clear_cache()
    mixer = mixers.build(name, 8)
    x = torch.randn(2, 24, 8)
    choice = mixer.backend_for(x)
    assert choice.source == "measured" and set(choice.times_ms) == {"fft", "scan", "recurrent"}
    assert f"forward + backward of {name}, B=2" in choice.why and "T=24" in choice.why
    assert all(p.grad is None for p in mixer.parameters())
    torch.testing.assert_close(mixer(x), mixer(x, backend=str(choice)), rtol=0, atol=0)
    assert mixer.backend_for(torch.randn(2, 65, 8)).times_ms.keys() == {"fft", "scan"}  # recurrent: T ≤ 64 only
    autotune.clear_cache()


def test_auto_does_not_time_a_scan_that_materializes_more_than_the_limit(monkeypatch):
    """``scan`` keeps every step's state, ``B·T`` times the state's floats: beyond ``QUADRATIC_AUTO_LIMIT`` (2^26)
    entries ``auto`` does not time it (the DLR tasks' N = 256 at B = 16, T = 256: 2^27 entries, whose scan took
    28 s to time where fft takes 30 ms); one entry fewer and it is timed."""
    from seqdyn.core import autotune
    from seqdyn.core.choice import QUADRATIC_AUTO_LIMIT

    monkeypatch.setenv("SEQDYN_AUTOTUNE", "memory")
    autotune.clear_cache()
    mixer = mixers.build("dlr", 64, state_dim=256)
    x = torch.randn(16, 256, 64)
    states = 16 * 256 * mixer.state_size(256)
    assert states == 2 * QUADRATIC_AUTO_LIMIT
    assert mixer.auto_timing(x).ruled_out()["scan"] == f"{states:,} entries materialized"
    with torch.no_grad():
        choice = mixer.explain_backend(x)
    assert choice == "fft" and choice.source == "only" and "not timed: scan (134,217,728 entries" in choice.why
    at_limit = mixers.build("dlr", 32, state_dim=256)  # 16·256·(32·256·2) = 2^26 entries: timed
    assert "scan" not in at_limit.auto_timing(torch.randn(16, 256, 32)).ruled_out()
    autotune.clear_cache()


COMPLEX_MIXERS = ("dlr", "dss_exp", "lru", "s4", "s4d", "s5")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", COMPLEX_MIXERS)
def test_half_precision_weights_compute_their_kernels_in_complex64_and_return_their_dtype(name, dtype):
    """With bfloat16 or float16 weights the forward and the steps give the float32 model's outputs (its weights the
    half ones, widened) to within 4 roundings of the dtype, in the weights' dtype, with finite gradients; the state
    is complex64 (float32 for S4's real state)."""
    torch.manual_seed(0)
    half = mixers.build(name, 16).to(dtype)
    exact = mixers.build(name, 16)
    exact.load_state_dict({key: value.float() for key, value in half.state_dict().items()})
    x = torch.randn(2, 12, 16).to(dtype)
    expected = exact(x.float())
    y = half(x)
    state, steps = half.init_state(2), []
    for position in range(x.shape[1]):
        out, state = half.step(x[:, position], state)
        steps.append(out)
    tolerance = 4 * torch.finfo(dtype).eps * expected.abs().max()
    assert y.dtype == dtype and (y.float() - expected).abs().max() <= tolerance
    assert (torch.stack(steps, 1).float() - expected).abs().max() <= tolerance
    assert state.dtype in (torch.complex64, torch.float32)
    y.float().square().sum().backward()
    assert all(bool(torch.isfinite(p.grad).all()) for p in half.parameters() if p.grad is not None)


def test_s4_in_a_float16_model_gives_finite_logits():
    from seqdyn.models import build_model
    from seqdyn.models.config import ModelConfig
    from seqdyn.tasks.base import TaskSpec

    spec = TaskSpec("tokens", 32, 24, "lm", 32, 24, "loss", False)
    torch.manual_seed(0)
    model = build_model(ModelConfig(mixer="s4", d_model=16, layers=2), spec).to(torch.float16)
    logits = model(torch.randint(0, 32, (2, 24)))
    assert logits.dtype == torch.float16 and bool(torch.isfinite(logits).all())
