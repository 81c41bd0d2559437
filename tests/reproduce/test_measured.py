"""What a reproduction measured of a trained model is kept in the store, so that a store without its checkpoint
folder decides again; a run neither kept nor measurable is trained again."""

from __future__ import annotations

import json
import shutil

import pytest

from seqdyn import reproduce
from seqdyn.reproduce.measured import collecting_missing, measured_once
from seqdyn.reproduce.runner import run
from seqdyn.train.checkpoint import MissingCheckpoint, checkpoint_dir_for
from seqdyn.train.store import Store


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "runs.db")
    store.add_run("r1", "one", {"model": {}})
    store.log_metrics("r1", 40, None, "test", {"accuracy": 0.5}, 1.0)
    yield store
    store.close()


def test_measurements_come_back_per_kind_none_included(store):
    store.record_measurements("r1", "a", {"x": 1.5, "y": None})
    store.record_measurements("r1", "b", {"x": 7.0})
    assert store.measurements("r1", "a") == {"x": 1.5, "y": None}
    assert store.measurements("r1", "b") == {"x": 7.0}
    assert store.measurements("r1", "c") is None
    assert store.run("r1").step == 40  # recording does not move the run's step


def test_an_empty_measurement_is_kept_as_measured(store):
    store.record_measurements("r1", "a", {})
    assert store.measurements("r1", "a") == {}


def test_measured_once_measures_once(store):
    calls = []

    def measure():
        calls.append(1)
        return {"x": 2.0}

    assert measured_once(store, "r1", "k", measure) == {"x": 2.0}
    assert measured_once(store, "r1", "k", measure) == {"x": 2.0}
    assert len(calls) == 1


def test_a_run_trained_again_forgets_what_was_measured_of_it(store):
    store.record_measurements("r1", "k", {"x": 2.0})
    store.retrain(["r1"])
    record = store.run("r1")
    assert (record.status, record.step, record.best_metric) == ("pending", 0, None)
    assert store.measurements("r1", "k") is None and store.metrics("r1") == []


def test_a_missing_checkpoint_is_collected_inside_and_raised_outside(store):
    def measure():
        raise MissingCheckpoint("r1", "run r1 (finished): has no checkpoint on disk")

    with collecting_missing() as missing:
        assert measured_once(store, "r1", "k", measure) == {}
    assert missing == ["r1"]
    with pytest.raises(MissingCheckpoint, match="no checkpoint"):
        measured_once(store, "r1", "k", measure)


def _claims(folder):
    verdict = json.loads((folder / "verdict.json").read_text())
    return [(claim["name"], claim["verdict"], claim["numbers"]) for claim in verdict["claims"]]


def test_a_store_without_its_checkpoints_decides_again_and_retrains_what_it_did_not_keep(tmp_path):
    """duality_decoding measures every trained model: its verdict comes back from the kept measurements with the
    checkpoint folder gone; with the measurements gone too, the runner trains those runs again."""
    reproduction, path = reproduce.get("duality_decoding"), tmp_path / "runs.db"
    first = run(reproduction, "smoke", path, tmp_path / "a", workers=1, progress=False)
    shutil.rmtree(checkpoint_dir_for(path))
    again = run(reproduction, "smoke", path, tmp_path / "b", workers=1, progress=False)
    assert _claims(again.folder) == _claims(first.folder)
    with Store(path) as store:
        ids = [record.id for record in store.runs()]
        with store._write() as conn:
            conn.execute("DELETE FROM metrics WHERE split = 'measured'")
    retrained = run(reproduction, "smoke", path, tmp_path / "c", workers=1, progress=False)
    assert [name for name, _, _ in _claims(retrained.folder)] == [name for name, _, _ in _claims(first.folder)]
    with Store(path) as store:
        assert all(
            store.run(run_id).status == "finished" and store.measurements(run_id, _kind(store, run_id))
            for run_id in ids
        )


def _kind(store, run_id):
    """The kind of the one measurement kept of ``run_id``."""
    names = {row.name.split("::")[0] for row in store.metrics(run_id, split="measured")}
    assert len(names) == 1
    return names.pop()
