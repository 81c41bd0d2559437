"""Mixers of one's own (issue 36, deliverable 3): by import path, by ``seqdyn.mixers.register``, and
``seqdyn.mixers.check`` on them (the example of docs/writing-a-mixer.md, the ``example_mixer`` fixture)."""

from __future__ import annotations

import importlib

import pytest
import torch
from typer.testing import CliRunner

from seqdyn import mixers
from seqdyn.cli import app
from seqdyn.models.config import ModelConfig
from seqdyn.train.config import ConfigError, parse_config
from tests.train._helpers import tiny


def test_a_mixer_named_by_its_import_path_builds_documents_itself_and_validates_in_a_config(example_mixer):
    cls = importlib.import_module("my_mixer").DecayedAttention
    assert mixers.get(example_mixer) is cls and mixers.options(example_mixer) == {"heads": 2, "chunk_size": 64}
    mixer = mixers.build(example_mixer, 16, heads=4)
    assert type(mixer) is cls and mixer.name == "decayed_attention" and mixer.heads == 4
    assert "heads: int; default 2" in mixers.describe(example_mixer).text()
    documented = CliRunner().invoke(app, ["mixers", example_mixer])
    assert documented.exit_code == 0 and "heads: int; default 2" in documented.output
    model = ModelConfig(mixer=example_mixer, mixer_options={"heads": 4})
    assert model.layer_mixers() == [(example_mixer, {"heads": 4})] * 2
    run = parse_config(tiny(**{"model.mixer": example_mixer, "model.mixer_options": {"heads": 4}}))
    assert run.model.mixer == example_mixer
    with pytest.raises(ConfigError, match=r"mixer_options: my_mixer:DecayedAttention has no option\(s\) \['head'\]"):
        parse_config(tiny(**{"model.mixer": example_mixer, "model.mixer_options": {"head": 4}}))


@pytest.mark.parametrize(
    "path, message",
    [
        ("absent_module:Mixer", r"cannot import 'absent_module:Mixer': No module named 'absent_module'.*PYTHONPATH"),
        ("my_mixer:Absent", r"cannot import 'my_mixer:Absent': module 'my_mixer' has no 'Absent'"),
        ("my_mixer:torch", r"'my_mixer:torch' is not a Mixer class"),
        (
            "my_mixer.DecayedAttention",
            r"unknown name 'my_mixer.DecayedAttention'.*did you mean my_mixer:DecayedAttention",
        ),
    ],
)
def test_a_wrong_import_path_is_one_line_naming_it(example_mixer, path, message):
    with pytest.raises(ValueError, match=message):
        mixers.build(path, 16)
    with pytest.raises(ConfigError, match=message) as error:
        parse_config(tiny(**{"model.mixer": path}), "run.yaml")
    assert str(error.value).startswith("run.yaml: model: mixer: ") and "\n" not in str(error.value)


def test_register_by_call_and_as_decorator_and_a_clash_is_an_error(example_mixer):
    cls = mixers.get(example_mixer)
    assert mixers.register(cls) is cls and "decayed_attention" in mixers.names()
    assert type(mixers.build("decayed_attention", 16)) is cls
    assert mixers.register(cls) is cls  # registering a class again (a notebook cell run twice) is no clash

    @mixers.register(name="faded")
    class Faded(cls):
        pass

    assert mixers.get("faded") is Faded and Faded.name == "Faded"  # a subclass that sets no name is not its base
    assert parse_config(tiny(**{"model.mixer": "faded"})).model.mixer == "faded"
    with pytest.raises(ValueError, match=r"register: 'gla' is a built-in mixer \(seqdyn/mixers/gla.py\)"):
        mixers.register(cls, name="gla")
    with pytest.raises(ValueError, match=r"register: 'faded' is already .*Faded; register Other under another"):
        mixers.register(type("Other", (cls,), {}), name="faded")
    with pytest.raises(ValueError, match=r"register: .* needs a name without ':'"):
        mixers.register(cls, name="my:name")
    with pytest.raises(ValueError, match="is not a Mixer class"):
        mixers.register(torch.nn.Linear)


def test_check_passes_the_example_mixer_and_reports_each_check(example_mixer):
    report = mixers.check(example_mixer, d_model=16, heads=2)
    assert list(report.passed) == ["backends", "step", "coefficients", "dsf"] and not report.skipped
    assert "quadratic, recurrent, chunk, scan against quadratic" in report.passed["backends"]
    built = mixers.build(example_mixer, 8)
    assert mixers.check(built).mixer == "decayed_attention"
    assert next(built.parameters()).dtype == torch.float32  # the check ran on a float64 copy


def test_check_names_the_check_a_broken_mixer_fails(example_mixer):
    cls = mixers.get(example_mixer)

    class Drifting(cls):
        """step drifts away from forward: each token's output is off by 1e-3."""

        def step(self, x_t, state):
            y, state = super().step(x_t, state)
            return y + 1e-3, state

    failed = r"Drifting: 1 of 4 checks failed: step — Drifting step: [0-9.]+e-0[34] \(tolerance 1e-10\)$"
    with pytest.raises(AssertionError, match=failed):
        mixers.check(Drifting, d_model=16)

    class Scaled(cls):
        """Coefficients that do not reproduce the output."""

        def coefficients(self, x):
            return 2 * super().coefficients(x)

    with pytest.raises(AssertionError, match=r"1 of 4 checks failed: coefficients — Scaled A·v"):
        mixers.check(Scaled, d_model=16)
