"""Every registered mixer, automatically: backends agree, streaming equals forward, coefficients and the DSF
reproduce the mixing core (the checks of ``seqdyn.mixers.checks``, which ``seqdyn.mixers.check`` runs on a mixer
of one's own), long sequences give finite gradients, parameters and state sizes match formulas."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from seqdyn.analysis.decoding import state_tensors
from seqdyn.mixers import checks
from tests.mixers.helpers import NAMES, D, small
from tests.mixers.parameter_counts import LTI_PARAMETERS, qlstm_parameters, rglru_parameters, s6_parameters

DESIGN_NAMES = {
    "softmax_attention",
    "linear_attention",
    "normalized_attention",
    "taylor_attention",
    "gla",
    "retnet",
    "mamba2",
    "s6",
    "deltanet",
    "gated_deltanet",
    "mlstm",
    "ttt_linear",
    "qlstm",
    "qlstm_s6",
    "rglru",
    "dlr",
    "dss_exp",
    "s4d",
    "s4",
    "s5",
    "lru",
    "local_attention",
    "custom",
}


def inputs(length: int = 11, batch: int = 2) -> torch.Tensor:
    return checks.inputs(D, length, batch)


def run(check, mixer, x):
    """One check of ``seqdyn.mixers.checks`` (the definition ``seqdyn.mixers.check`` runs too); a check that does
    not apply to the mixer is skipped."""
    try:
        check(mixer, x)
    except checks.NotApplicable as reason:
        pytest.skip(str(reason))


def test_every_mixer_of_the_design_is_registered():
    missing = DESIGN_NAMES - set(NAMES)
    assert not missing, f"not yet registered: {sorted(missing)}"


@pytest.mark.parametrize("name", NAMES)
def test_every_backend_gives_the_same_output_and_gradients(name):
    run(checks.backends_agree, small(name), inputs())


@pytest.mark.parametrize("name", NAMES)
def test_step_token_by_token_equals_forward(name):
    run(checks.step_equals_forward, small(name), inputs())


@pytest.mark.parametrize("name", NAMES)
def test_coefficients_are_causal_and_reproduce_the_core(name):
    mixer = small(name)
    if not mixer.scalar_coefficients:
        with pytest.raises(ValueError, match="no scalar coefficients"):
            mixer.coefficients(inputs())
        return
    run(checks.coefficients_reproduce_core, mixer, inputs())


@pytest.mark.parametrize("name", NAMES)
def test_dsf_kernel_reproduces_the_core(name):
    run(checks.dsf_reproduces_core, small(name), inputs(length=6))


@pytest.mark.parametrize("name", NAMES)
def test_gradients_are_finite_at_T_2048_in_float32_with_default_init(name):
    torch.manual_seed(0)
    mixer = mixers.build(name, 32)
    x = torch.randn(1, 2048, 32, generator=torch.Generator().manual_seed(3))
    mixer(x).square().mean().backward()
    for parameter_name, parameter in mixer.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), parameter_name


def _floats(state) -> int:
    """Real floats held in a state made of tensors, containers and dataclasses (complex counts twice)."""
    return sum(t.numel() * (2 if t.is_complex() else 1) for t in state_tensors(state))


@pytest.mark.parametrize("name", NAMES)
def test_state_size_counts_the_floats_of_the_streaming_state(name):
    mixer = small(name)
    if getattr(mixer, "bidirectional", False):
        pytest.skip("a bidirectional mixer is not causal")
    x = inputs(length=9, batch=1)
    state = mixer.init_state(1)
    for t in range(x.shape[1]):
        _, state = mixer.step(x[:, t], state)
    assert _floats(state) == mixer.state_size(9)


def test_unknown_names_options_and_backends_are_named():
    with pytest.raises(ValueError, match="unknown name 'mamba3'.*mamba2"):
        mixers.build("mamba3", 16)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['head'\].*heads"):
        mixers.build("softmax_attention", 16, head=2)
    with pytest.raises(ValueError, match="heads: 3 does not divide d_model=16"):
        mixers.build("softmax_attention", 16, heads=3)
    with pytest.raises(ValueError, match="feature_map: got 'cosine'"):
        mixers.build("linear_attention", 16, feature_map="cosine")
    with pytest.raises(ValueError, match="backend: softmax_attention computes with .*got 'scan'"):
        mixers.build("softmax_attention", 16)(torch.randn(1, 4, 16), backend="scan")
    with pytest.raises(ValueError, match=r"x: expected \[B, T, D\] with D=16"):
        mixers.build("gla", 16)(torch.randn(1, 4, 8))
    with pytest.raises(ValueError, match="d_model"):
        mixers.build("gla", 0)


def _head_output(d, value_width, heads, gate):
    """Per-head RMSNorm weight, optional gate projection, output projection (seqdyn.layers.HeadOutput)."""
    return value_width // heads + (d * value_width if gate else 0) + value_width * d


#: parameter counts at d_model = D with the SMALL options, from the papers' layer definitions
PARAMETERS = {
    "softmax_attention": lambda d: 3 * d * d + d * d,
    "local_attention": lambda d: 3 * d * d + d * d,
    "linear_attention": lambda d: d * 2 * (2 * 4) + d * d + d * d,
    "normalized_attention": lambda d: d * 2 * (2 * 4) + d * d + (d * 2 + 2) + d * d,
    "taylor_attention": lambda d: d * 2 * (2 * 2) + d * d + d * d,
    "gla": lambda d: 2 * d * (d // 2) + d * d + (d * 4 + 4 * (d // 2) + d // 2) + _head_output(d, d, 2, True),
    "retnet": lambda d: 2 * d * d + d * 2 * d + _head_output(d, 2 * d, 2, True),
    "mamba2": lambda d: (
        d * (2 * d + 2 * d + 2 * 4 + (2 * d) // 8) + (2 * d + 2 * 4) * 5 + 3 * ((2 * d) // 8) + 2 * d + 2 * d * d
    ),
    "deltanet": lambda d: 3 * d * d + d * 2 + 3 * d * 5 + _head_output(d, d, 2, False),
    "gated_deltanet": lambda d: (
        2 * d * d + d * 2 * d + d * 2 + (d + d + 2 * d) * 5 + (d * 2 + 2 + 2) + _head_output(d, 2 * d, 2, True)
    ),
    "mlstm": lambda d: 3 * d * d + 2 * (d * 2 + 2) + (d * d + d) + d // 2 + d * d,
    "ttt_linear": lambda d: 3 * d * d + _head_output(d, d, 2, False),
    "custom": lambda d: 2 * d * d + d * d + (d * 2 + 2 + 2) + (d * 2 + 2) + _head_output(d, d, 2, False),
    "s6": lambda d: s6_parameters(d, n=4),
    "qlstm": qlstm_parameters,
    "qlstm_s6": lambda d: qlstm_parameters(d, s6=True),
    "rglru": rglru_parameters,
    # the LTI mixers at their defaults (state_dim 64), from the papers' layer definitions in parameter_counts.py
    **{name: formula for name, options, formula in LTI_PARAMETERS if not options},
}


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_parameter_count_matches_the_formula(name):
    mixer = small(name)
    assert sum(p.numel() for p in mixer.parameters()) == PARAMETERS[name](D)
