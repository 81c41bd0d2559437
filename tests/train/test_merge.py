"""Merging a visit's store into the local one: runs further along are copied with their metrics and checkpoints
(and resume from them exactly), a second merge changes nothing, and self-merges and disagreeing results are one
line each with nothing merged."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from seqdyn.cli import app
from seqdyn.train import timelimit
from seqdyn.train.checkpoint import checkpoint_dir_for
from seqdyn.train.config import parse_config
from seqdyn.train.loop import train_run
from seqdyn.train.merge import merge_stores
from seqdyn.train.store import Store
from tests.train._helpers import add_finished, sweep_configs, time_up_after
from tests.train._helpers import quick_run as tiny


def _snapshot(path) -> tuple:
    with Store(path, readonly=True) as store:
        runs = sorted((r.id, r.status, r.step, r.best_metric, r.checkpoint_step) for r in store.runs())
        return runs, [(m.run_id, m.step, m.split, m.name, m.value) for m in store.metrics()]


def _visit(tmp_path, monkeypatch, steps: int):
    """A visit's folder: one run stopped by the time limit after ``steps`` steps, one finished (fake) run."""
    config = parse_config(tiny(eval_every=5))
    visit = tmp_path / "visit" / "seqdyn.db"
    visit.parent.mkdir()
    with monkeypatch.context() as patch, timelimit.time_limit(3600):
        time_up_after(patch, steps)
        with Store(visit) as store:
            assert train_run(config, store, checkpoint_dir=checkpoint_dir_for(visit), progress=False).status == (
                "interrupted"
            )
    with Store(visit) as store:
        add_finished(store, sweep_configs({"train.seed": [7]})[0], 0.8)
    return config, visit


def test_a_visits_runs_are_copied_and_the_stopped_one_resumes_exactly_here(tmp_path, monkeypatch):
    config, visit = _visit(tmp_path, monkeypatch, 13)
    moved = tmp_path / "brought" / "seqdyn.db"  # the folder brought home: the recorded checkpoint path is gone
    shutil.move(str(visit.parent), str(moved.parent))
    local = tmp_path / "local.db"
    report = merge_stores(moved, local)
    assert len(report.added) == 2 and report.advanced == [] and report.kept == 0
    with Store(local) as store:
        record = store.run(config.run_id)
        assert record.status == "interrupted" and record.checkpoint_step == 13
        assert record.checkpoint == str(checkpoint_dir_for(local) / f"{config.run_id}.safetensors")
        assert set(store.merged_from().values()) == {str(moved.resolve())}
        assert train_run(config, store, checkpoint_dir=checkpoint_dir_for(local), progress=False).status == "finished"
        resumed = _run_metrics(store, config.run_id)
    with Store(tmp_path / "whole.db") as whole:
        train_run(config, whole, checkpoint_dir=tmp_path / "whole", progress=False)
        assert resumed == _run_metrics(whole, config.run_id)


def _run_metrics(store: Store, run_id: str) -> dict:
    return {(m.step, m.split, m.name): m.value for m in store.metrics(run_id)}


def test_a_second_merge_changes_nothing_and_a_local_run_further_along_is_kept(tmp_path, monkeypatch):
    config, visit = _visit(tmp_path, monkeypatch, 13)
    local = tmp_path / "local.db"
    merge_stores(visit, local)
    before = _snapshot(local)
    again = merge_stores(visit, local)
    assert again.added == [] and again.advanced == [] and again.kept == 2 and _snapshot(local) == before
    with Store(local) as store:  # the local run goes on to the end: the visit's stopped one is behind it
        train_run(config, store, checkpoint_dir=checkpoint_dir_for(local), progress=False)
    finished = _snapshot(local)
    assert merge_stores(visit, local).kept == 2 and _snapshot(local) == finished


def test_a_later_checkpoint_of_the_visit_advances_the_local_run(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    config, early = _visit(tmp_path / "a", monkeypatch, 6)
    _, late = _visit(tmp_path / "b", monkeypatch, 13)
    local = tmp_path / "local.db"
    merge_stores(early, local)
    report = merge_stores(late, local)
    assert report.advanced == [config.run_id] and report.kept == 1
    with Store(local) as store:
        assert store.run(config.run_id).checkpoint_step == 13


def test_a_store_merged_into_itself_is_one_line_and_the_cli_says_what_it_merged(tmp_path, monkeypatch):
    _, visit = _visit(tmp_path, monkeypatch, 13)
    with pytest.raises(ValueError, match="is --store itself"):
        merge_stores(visit, visit)
    result = CliRunner().invoke(app, ["merge", str(visit), "--store", str(visit)])
    assert result.exit_code == 2 and "is --store itself" in result.output
    result = CliRunner().invoke(app, ["merge", str(visit), "--store", str(tmp_path / "local.db")])
    assert result.exit_code == 0 and "2 new runs, 0 further along, 0 kept as they were" in result.output
    result = CliRunner().invoke(app, ["merge", str(tmp_path / "absent.db"), "--store", str(tmp_path / "local.db")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_two_stores_that_disagree_on_a_finished_run_merge_nothing(tmp_path):
    run = sweep_configs({"train.seed": [7]})[0]
    other = sweep_configs({"train.seed": [8]})[0]
    with Store(tmp_path / "visit.db") as visit:
        add_finished(visit, run, 0.8)
        add_finished(visit, other, 0.5)
    with Store(tmp_path / "local.db") as local:
        add_finished(local, run, 0.7)
    before = _snapshot(tmp_path / "local.db")
    with pytest.raises(ValueError, match=rf"^merge: run {run.run_id} \(.*\) has another result"):
        merge_stores(tmp_path / "visit.db", tmp_path / "local.db")
    assert _snapshot(tmp_path / "local.db") == before  # not even the other run
