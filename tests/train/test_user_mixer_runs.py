"""A mixer of one's own trains, sweeps, reports and inspects like a built-in one, and a store whose run names a
mixer that no longer imports says so in one line (issue 36, deliverable 3). The mixer is the example of
docs/writing-a-mixer.md (the ``example_mixer`` fixture)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from seqdyn import mixers
from seqdyn.cli import app
from seqdyn.train.checkpoint import load_trained
from seqdyn.train.config import parse_config
from seqdyn.train.store import Store
from seqdyn.train.sweep import run_sweep
from tests.train._helpers import tiny

ROOT = Path(__file__).resolve().parents[2]


def few_steps(mixer: str, **changes) -> dict:
    """The tiny MQAR run with ``mixer``, for four steps: it runs, it need not learn."""
    return tiny(
        **{
            "model.mixer": mixer,
            "model.positions": False,
            "train.steps": 4,
            "train.eval_every": 2,
            "task.train_examples": 256,
            "task.test_examples": 32,
            **changes,
        }
    )


def test_a_mixer_by_import_path_trains_reports_inspects_and_steps(example_mixer, tmp_path):
    store = tmp_path / "runs.db"
    [result] = run_sweep(parse_config(few_steps(example_mixer)), store, progress=False)
    assert result.status == "finished" and result.step == 4, result
    report = CliRunner().invoke(app, ["report", "--store", str(store)])
    assert report.exit_code == 0 and result.run_id in report.output and "note:" not in report.output
    inspect = CliRunner().invoke(app, ["inspect", result.run_id, "--store", str(store), "--examples", "2"])
    assert inspect.exit_code == 0, inspect.output
    assert "decayed_attention" in inspect.output
    with Store(store, readonly=True) as opened:  # the trained model streams token by token as it computes at once
        _, task, model = load_trained(opened, result.run_id)
    inputs = task.generate(2, seed=0, split="test")[0]
    state, outputs = model.init_state(2), []
    for t in range(inputs.shape[1]):
        out, state = model.step(inputs[:, t], state)
        outputs.append(out)
    torch.testing.assert_close(torch.stack(outputs, dim=1), model(inputs), rtol=1e-4, atol=1e-5)


def test_a_run_whose_mixer_no_longer_imports_is_one_line_in_inspect_and_report(example_mixer, tmp_path):
    store = tmp_path / "runs.db"
    [result] = run_sweep(parse_config(few_steps(example_mixer)), store, progress=False)
    (tmp_path / "my_mixer.py").unlink()  # the module is gone
    sys.modules.pop("my_mixer")
    importlib.invalidate_caches()
    inspect = CliRunner().invoke(app, ["inspect", result.run_id, "--store", str(store)])
    assert inspect.exit_code == 2
    assert inspect.stderr.strip().splitlines() == [
        f"error: run {result.run_id}: model: mixer: cannot import 'my_mixer:DecayedAttention': No module named "
        "'my_mixer' (is its folder on sys.path? e.g. PYTHONPATH=.)"
    ]
    report = CliRunner().invoke(app, ["report", "--store", str(store)])
    assert report.exit_code == 0 and result.run_id in report.output
    notes = [line for line in report.output.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: run {result.run_id}: mixer: cannot import 'my_mixer:DecayedAttention': No module named "
        "'my_mixer' (is its folder on sys.path? e.g. PYTHONPATH=.); `seqdyn inspect` cannot load it"
    ]
    as_csv = CliRunner().invoke(app, ["report", "--store", str(store), "--format", "csv"])
    assert as_csv.exit_code == 0 and "note:" not in as_csv.stdout and as_csv.stderr.startswith("note: run")


def test_a_registered_mixer_trains_in_this_process_and_workers_refuse_it(example_mixer, tmp_path):
    mixers.register(mixers.get(example_mixer))
    [result] = run_sweep(parse_config(few_steps("decayed_attention")), tmp_path / "one.db", progress=False)
    assert result.status == "finished"
    two_runs = parse_config(few_steps("decayed_attention", sweep={"optimizer.lr": [1e-3, 3e-3]}))
    with pytest.raises(ValueError, match="'decayed_attention' was registered in this process .* import path"):
        run_sweep(two_runs, tmp_path / "two.db", workers=2, progress=False)
    assert not (tmp_path / "two.db").exists()


@pytest.mark.slow
def test_a_sweep_with_two_workers_imports_the_mixer_by_its_path(example_mixer, tmp_path):
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(few_steps(example_mixer, sweep={"optimizer.lr": [1e-3, 3e-3]})))
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "seqdyn",
            "sweep",
            str(config),
            "--store",
            str(tmp_path / "runs.db"),
            "--workers",
            "2",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    with Store(tmp_path / "runs.db", readonly=True) as store:
        assert [record.status for record in store.runs()] == ["finished", "finished"]


@pytest.mark.slow
def test_a_ray_sweep_imports_the_mixer_by_its_path(example_mixer, tmp_path):
    pytest.importorskip("ray", reason="install the 'ray' extra to run the Ray path")
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(few_steps(example_mixer, sweep={"optimizer.lr": [1e-3, 3e-3]})))
    environment = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "src")]),
        RAY_ADDRESS="",
        SEQDYN_RAY_NUM_CPUS="2",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "seqdyn",
            "sweep",
            str(config),
            "--store",
            str(tmp_path / "runs.db"),
            "--ray",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with Store(tmp_path / "runs.db", readonly=True) as store:
        assert [record.status for record in store.runs()] == ["finished", "finished"]
