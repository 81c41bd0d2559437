"""A command's time limit: durations are parsed or refused in one line, a run that reaches the limit stops at a
checkpoint and resumes to the metrics of an uninterrupted run, a sweep past the limit starts nothing, and the CLI
says what is left."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from seqdyn.cli import app
from seqdyn.train import loop, timelimit
from seqdyn.train.config import parse_config
from seqdyn.train.loop import train_run
from seqdyn.train.store import Store
from seqdyn.train.sweep import run_sweep
from tests.train._helpers import metrics, time_up_after
from tests.train._helpers import quick_run as tiny


@pytest.mark.parametrize(
    ("text", "seconds"), [("8m", 480), ("90s", 90), ("1h30m", 5400), ("1h", 3600), ("600", 600), ("1.5m", 90)]
)
def test_a_duration_is_read_in_hours_minutes_and_seconds(text, seconds):
    assert timelimit.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "0m", "-5", "abc", "", "5x", "m"])
def test_a_duration_that_is_zero_or_unreadable_is_one_line_naming_the_option(text):
    with pytest.raises(ValueError, match=r"^--time-limit: expected a positive duration such as 8m, 90s or 1h30m"):
        timelimit.parse_duration(text)


def test_the_limit_is_in_the_environment_within_the_block_only(monkeypatch):
    monkeypatch.delenv(timelimit.STOP_AT, raising=False)
    with timelimit.time_limit(60) as stop:
        assert timelimit.stop_at() == stop and not timelimit.time_is_up()
        assert os.environ[timelimit.STOP_AT]
    assert timelimit.stop_at() is None and not timelimit.time_is_up()
    with timelimit.time_limit(None) as stop:
        assert stop is None and timelimit.stop_at() is None


def test_a_run_stopped_by_the_limit_resumes_to_the_metrics_of_an_uninterrupted_run(tmp_path, monkeypatch):
    config = parse_config(tiny(eval_every=5))
    with Store(tmp_path / "whole.db") as whole:
        train_run(config, whole, checkpoint_dir=tmp_path / "whole", progress=False)
        expected = metrics(whole)
    with monkeypatch.context() as patch, timelimit.time_limit(3600):
        time_up_after(patch, 13)
        with Store(tmp_path / "cut.db") as store:
            result = train_run(config, store, checkpoint_dir=tmp_path / "cut", progress=False)
            record = store.run(config.run_id)
    assert result.status == "interrupted" and result.reason == "time limit reached at step 13"
    assert record.status == "interrupted" and record.checkpoint_step == 13  # a checkpoint between evaluations
    with Store(tmp_path / "cut.db") as store:
        assert train_run(config, store, checkpoint_dir=tmp_path / "cut", progress=False).status == "finished"
        assert metrics(store) == expected


def test_past_the_limit_a_sweep_starts_no_run_and_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    sweep = parse_config({**tiny(), "name": "two", "sweep": {"train.seed": [0, 1]}})
    with timelimit.time_limit(3600):
        monkeypatch.setattr(loop, "time_is_up", lambda moment=None: True)
        results = run_sweep(sweep, tmp_path / "s.db", progress=False)
    assert [result.reason for result in results] == ["time limit reached"] * 2
    with Store(tmp_path / "s.db") as store:
        assert {record.status for record in store.runs()} == {"pending"}


def test_the_cli_refuses_a_bad_limit_and_the_limit_with_ray_in_one_line(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("name: x\ntask: {name: mqar}\n")
    for options, words in (
        (["--time-limit", "0"], "--time-limit: expected a positive duration"),
        (["--time-limit", "8m", "--ray"], "--time-limit: not with --ray"),
    ):
        result = CliRunner().invoke(app, ["sweep", str(config), "--store", str(tmp_path / "s.db"), *options])
        assert result.exit_code == 2 and words in result.output
        result = CliRunner().invoke(app, ["reproduce", "dlr_context", "--store", str(tmp_path / "s.db"), *options])
        assert result.exit_code == 2 and words in result.output
    assert not (tmp_path / "s.db").exists()


def test_a_store_moved_with_its_checkpoints_resumes_from_them(tmp_path, monkeypatch):
    """A visit's folder — the store and its .checkpoints beside it — moved to another place (another machine) resumes
    the stopped run from its checkpoint, to the metrics of an uninterrupted run."""
    import shutil

    from seqdyn.train.checkpoint import checkpoint_dir_for

    config = parse_config(tiny(eval_every=5))
    with Store(tmp_path / "whole.db") as whole:
        train_run(config, whole, checkpoint_dir=tmp_path / "whole", progress=False)
        expected = metrics(whole)
    there = tmp_path / "there" / "visit.db"
    there.parent.mkdir()
    with monkeypatch.context() as patch, timelimit.time_limit(3600):
        time_up_after(patch, 13)
        with Store(there) as store:
            train_run(config, store, checkpoint_dir=checkpoint_dir_for(there), progress=False)
    here = tmp_path / "here" / "visit.db"
    shutil.move(str(there.parent), str(here.parent))
    started = []
    monkeypatch.setattr(loop.Trainer, "train_step", _recording(loop.Trainer.train_step, started))
    with Store(here) as store:
        assert train_run(config, store, checkpoint_dir=checkpoint_dir_for(here), progress=False).status == "finished"
        assert started[0] == 13 and metrics(store) == expected


def _recording(train_step, steps: list):
    def recorded(self):
        steps.append(self.step)
        return train_step(self)

    return recorded
