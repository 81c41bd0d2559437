"""A config is fully checked before a run exists; a run that fails while training does not stop its sweep; a
full disk leaves the run resumable (issue 18, items 3 and 10)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from pathlib import Path

import pytest
import safetensors.torch
import torch
import yaml
from typer.testing import CliRunner

from seqdyn.cli import app
from seqdyn.train.checkpoint import checkpoint_dir_for
from seqdyn.train.config import ConfigError, parse_config
from seqdyn.train.store import Store
from seqdyn.train.sweep import run_sweep
from tests.train._helpers import tiny

SMALL = {
    "name": "small",
    "model.d_model": 16,
    "model.layers": 1,
    "task.train_examples": 64,
    "task.test_examples": 16,
    "train.steps": 8,
    "train.batch_size": 16,
    "train.eval_every": 2,
    "train.early_stop": {},
}


def small(**changes) -> dict:
    """A run of a few steps on a tiny MQAR task; ``changes`` maps dotted paths to values."""
    return tiny(**{**SMALL, **changes})


def run_cli(*args: str):
    return CliRunner().invoke(app, [*args, "--no-progress"])


def fingerprint(store_path: Path) -> dict[str, str]:
    """SHA-256 of the store and its SQLite side files."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(store_path.parent.glob(store_path.name + "*"))
    }


@pytest.fixture
def store_path(tmp_path) -> Path:
    """A store that already holds one run."""
    path = tmp_path / "results.db"
    other = parse_config(small(name="earlier"))
    with Store(path) as store:
        store.add_run(other.run_id, other.name, other.canonical())
    return path


NO_GPU = {"torch.cuda.is_available": lambda: False}
ONE_GPU = {"torch.cuda.is_available": lambda: True, "torch.cuda.device_count": lambda: 1}

BAD = {  # case: (changes to the small run, machine, words of the one-line error)
    "cuda without a GPU": ({"train.device": "cuda"}, NO_GPU, "train.device: 'cuda' asked for, but no CUDA device"),
    "a GPU the machine lacks": ({"train.device": "cuda:3"}, ONE_GPU, "train.device: 'cuda:3' asked for"),
    "unknown backend": ({"train.backend": "flash"}, {}, "train.backend: softmax_attention (layer 0) computes with"),
    "backend the mixer refuses": ({"train.backend": "scan"}, {}, "got 'scan'"),
    "zero heads": (
        {"model.mixer_options": {"heads": 0}},
        {},
        "model.mixer_options (layer 0, softmax_attention): heads",
    ),
    "heads not dividing": ({"model.mixer_options": {"heads": 3}}, {}, "heads: 3 does not divide"),
    "infinite lr": ({"optimizer.lr": float("inf")}, {}, "optimizer.lr: expected a finite number, got inf"),
    "NaN threshold": ({"train.early_stop": {"threshold": float("nan")}}, {}, "train.early_stop.threshold: expected a"),
    "infinite mixer option": (
        {"model.mixer": "custom", "model.mixer_options": {"constant_decay": float("-inf")}},
        {},
        "model.mixer_options.constant_decay: expected a finite number",
    ),
    "metric the task lacks": (
        {"train.early_stop": {"metric": "perplexity", "threshold": 2.0}},
        {},
        "train.early_stop.metric: task mqar reports accuracy, loss; got 'perplexity'",
    ),
}


def _write_bad(tmp_path: Path, case: str, monkeypatch) -> Path:
    changes, machine, _ = BAD[case]
    for target, replacement in machine.items():
        monkeypatch.setattr(target, replacement)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(small(**changes)))
    return path


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_run_config_exits_2_with_one_line_before_the_store_changes(tmp_path, store_path, case, monkeypatch):
    config = _write_bad(tmp_path, case, monkeypatch)
    before = fingerprint(store_path)
    result = run_cli("train", str(config), "--store", str(store_path))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {config}: "), result.stderr
    assert BAD[case][2] in lines[0]
    assert fingerprint(store_path) == before
    assert not checkpoint_dir_for(store_path).exists()


def test_a_config_that_is_not_utf8_is_named_with_its_line(tmp_path, store_path):
    config = tmp_path / "latin1.yaml"
    text = yaml.safe_dump(small())
    config.write_bytes(text.encode() + "# café\n".encode("latin-1"))
    line = len(text.splitlines()) + 1
    before = fingerprint(store_path)
    for command in ("train", "sweep"):
        result = run_cli(command, str(config), "--store", str(store_path))
        assert result.exit_code == 2
        assert result.stderr.strip() == f"error: {config}: line {line}: byte 0xe9 is not UTF-8; save the file as UTF-8"
    assert fingerprint(store_path) == before


def test_a_file_where_the_checkpoint_folder_goes_stops_the_run_before_it_starts(tmp_path, store_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(small()))
    checkpoint_dir_for(store_path).write_text("not a folder")
    before = fingerprint(store_path)
    for command in ("train", "sweep"):
        result = run_cli(command, str(config), "--store", str(store_path))
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "is a file, not a folder" in lines[0] and "results.checkpoints" in lines[0]
    assert fingerprint(store_path) == before


SWEEP_CASES = {  # case: what the one-line error says after the file's name
    "cuda without a GPU": "run 'small[",
    "zero heads": "run 'small[",
    "metric the task lacks": "run 'small[",
    "backend the mixer refuses": "run 'small[",
    "infinite lr": "sweep.optimizer.0.lr: expected a finite number, got inf",  # in an axis: before expanding it
}


@pytest.mark.parametrize("case", list(SWEEP_CASES))
def test_every_run_of_a_sweep_is_checked_before_the_first_starts(tmp_path, store_path, case, monkeypatch):
    config = tmp_path / "sweep.yaml"
    good, bad = small(), small(**BAD[case][0])
    for target, replacement in BAD[case][1].items():
        monkeypatch.setattr(target, replacement)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config.write_text(
        yaml.safe_dump(
            {
                **good,
                "sweep": {
                    "model": [good["model"], bad["model"]],
                    "train": [good["train"], bad["train"]],
                    "optimizer": [bad.get("optimizer", {"lr": 1e-3})],
                },
            }
        )
    )
    before = fingerprint(store_path)
    result = run_cli("sweep", str(config), "--store", str(store_path), "--ray")  # Ray never starts
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {config}: {SWEEP_CASES[case]}"), lines
    assert BAD[case][2] in lines[0] or "sweep." in lines[0]
    assert fingerprint(store_path) == before


def test_checks_hold_for_the_api_too():
    with pytest.raises(ConfigError, match=r"^<config>: train.backend: "):
        parse_config(small(**{"train.backend": "flash"}))
    with pytest.raises(ConfigError, match=r"^<config>: run 'small\[heads=0\]': model.mixer_options"):
        parse_config(small(sweep={"model.mixer_options.heads": [1, 0]}))


MISSPELLED = {
    "model.d_modl": ("model.d_modl: unknown field (did you mean 'd_model'?); fields here: block, mixer", {}),
    "trian": ("trian: unknown field (did you mean 'train'?)", {}),
    "train.batch_sise": ("train.batch_sise: unknown field (did you mean 'batch_size'?)", {}),
    "optimizer.LR": ("optimizer.LR: unknown field (did you mean 'lr'?)", {}),
    "model.mixer_options.state_dm": (
        "mamba2 has no option(s) ['state_dm'] (did you mean 'state_dim'?)",
        {"model.mixer": "mamba2"},
    ),
    "task.params.seq_ln": ("mqar: unknown parameter(s) seq_ln (did you mean 'seq_len'?)", {}),
    "colour": ("colour: unknown field; fields here:", {}),  # nothing alike: no suggestion
}


@pytest.mark.parametrize("field", list(MISSPELLED))
def test_a_misspelled_field_gets_the_closest_name_of_its_section(field):
    words, changes = MISSPELLED[field]
    with pytest.raises(ConfigError) as raised:
        parse_config(small(**changes, **{field: 16}))
    assert words in str(raised.value)
    assert "did you mean" not in str(raised.value) or field != "colour"


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"model.mixer": "gated_deltanett"}, "unknown name 'gated_deltanett' (did you mean 'gated_deltanet'?)"),
        ({"task.name": "mqr"}, "unknown task 'mqr' (did you mean 'mqar'?)"),
    ],
)
def test_a_misspelled_mixer_or_task_name_gets_the_closest_known_name(changes, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        parse_config(small(**changes))


def _foreign_checkpoint(tmp_path: Path, run_id: str) -> str:
    """A checkpoint labelled as run ``run_id``'s but of another architecture (a config edited by hand under the
    same id): loading it fails inside the run."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    other = tmp_path / "other.db"
    run_sweep(parse_config(small(**{"model.d_model": 32})), other, progress=False)
    path = Store(other, readonly=True).runs()[0].checkpoint
    with safe_open(path, framework="pt") as handle:
        meta = json.loads(handle.metadata()["seqdyn"])
    save_file(load_file(path), path, metadata={"seqdyn": json.dumps(dict(meta, run_id=run_id))})
    return path


@pytest.mark.parametrize(
    "workers", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param("ray", marks=pytest.mark.slow)]
)
def test_a_run_that_fails_while_training_is_recorded_and_the_sweep_goes_on(tmp_path, workers, monkeypatch):
    if workers == "ray" and not os.environ.get("CI"):  # CI installs the ray extra
        pytest.importorskip("ray", reason="install the 'ray' extra to run the Ray path")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("SEQDYN_RAY_NUM_CPUS", "2")
    sweep = parse_config(small(sweep={"optimizer.lr": [1e-3, 2e-3, 3e-3]}))
    broken, *rest = sweep.expand()
    store_path = tmp_path / "sweep.db"
    with Store(store_path) as store:
        store.add_run(broken.run_id, broken.name, broken.canonical(), sweep.name)
        store.set_checkpoint(broken.run_id, _foreign_checkpoint(tmp_path, broken.run_id), 2)
    try:
        results = run_sweep(
            sweep, store_path, workers=1 if workers == "ray" else workers, use_ray=workers == "ray", progress=False
        )
    finally:
        if workers == "ray":
            import ray

            ray.shutdown()
    assert [r.status for r in results] == ["failed", "finished", "finished"]
    assert (
        results[0].reason.startswith("ValueError: checkpoint ")
        and "does not match the config's model" in results[0].reason
    )
    records = {r.id: r for r in Store(store_path, readonly=True).runs()}
    assert records[broken.run_id].status == "failed" and records[broken.run_id].reason == results[0].reason
    assert all(records[run.run_id].status == "finished" for run in rest)


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_full_disk_while_checkpointing_leaves_the_run_interrupted_and_resumable(tmp_path, monkeypatch, command):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(small()))
    assert run_cli(command, str(config), "--store", str(tmp_path / "whole.db")).exit_code == 0
    saves, save_file = [], safetensors.torch.save_file

    def full_after_one(tensors, filename, metadata=None):
        saves.append(filename)
        if len(saves) > 1:
            Path(filename).write_bytes(b"\0" * 10)  # what a full disk leaves
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr(safetensors.torch, "save_file", full_after_one)
    store_path = tmp_path / "results.db"
    result = run_cli(command, str(config), "--store", str(store_path))
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0] and "the run can resume" in lines[0]
    assert str(checkpoint_dir_for(store_path)) in lines[0]
    run = Store(store_path, readonly=True).runs()[0]
    assert (run.status, run.checkpoint_step) == ("interrupted", 2)
    assert [p.suffix for p in checkpoint_dir_for(store_path).iterdir() if p.is_file()] == [".safetensors"]
    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    assert run_cli(command, str(config), "--store", str(store_path)).exit_code == 0
    resumed, whole = Store(store_path, readonly=True).runs()[0], Store(tmp_path / "whole.db", readonly=True).runs()[0]
    assert (resumed.status, resumed.step, resumed.final_metric) == ("finished", 8, whole.final_metric)
    assert torch.isfinite(torch.tensor(resumed.final_metric))
