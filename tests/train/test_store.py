"""The results store: run life cycle, claims, concurrency across processes, bad paths, export."""

from __future__ import annotations

import csv
import gc
import json
import math
import multiprocessing
import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from seqdyn.train.config import SweepConfig
from seqdyn.train.store import STATUSES, MetricRow, MissingDependencyError, RunRecord, Store
from seqdyn.train.sweep import run_sweep
from tests.train._helpers import MQAR, add_finished, sweep_configs, unprivileged, worker


class Clock:
    """A settable time source."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def configs():
    return sweep_configs({"model.mixer": ["softmax_attention", "mamba2"], "optimizer.lr": [1e-3, 3e-3]})


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(tmp_path, clock):
    with Store(tmp_path / "runs.db", clock=clock) as store:
        yield store


def add(store: Store, config, sweep: str | None = "demo") -> str:
    store.add_run(config.run_id, config.name, config.canonical(), sweep=sweep)
    return config.run_id


# --- schema and records ----------------------------------------------------------------------------------------
def test_statuses_and_wal(store):
    assert STATUSES == ("pending", "running", "interrupted", "finished", "failed", "stopped_early", "diverged")
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.integrity_check() == "ok"


def test_add_run_inserts_pending_once(store, configs, clock):
    config = configs[0]
    assert store.add_run(config.run_id, config.name, config.canonical(), sweep="demo") is True
    assert store.add_run(config.run_id, config.name, config.canonical(), sweep="demo") is False
    record = store.run(config.run_id)
    assert isinstance(record, RunRecord)
    assert (record.id, record.name, record.sweep, record.status) == (config.run_id, config.name, "demo", "pending")
    assert record.config == config.canonical()
    assert (record.step, record.attempts, record.created) == (0, 0, clock.now)
    assert store.run("000000000000") is None


def test_add_run_same_id_other_config_is_an_error(store, configs):
    add(store, configs[0])
    other = configs[1].canonical()
    with pytest.raises(ValueError, match=configs[0].run_id):
        store.add_run(configs[0].run_id, "x", other)
    renamed = {**configs[0].canonical(), "name": "another sweep's name"}  # the id ignores the name
    assert store.add_run(configs[0].run_id, "another", renamed, sweep="other") is False
    assert store.run(configs[0].run_id).sweep == "demo"


def test_runs_filters_in_insertion_order(store, configs):
    ids = [add(store, c, sweep="a" if i < 3 else "b") for i, c in enumerate(configs)]
    assert [r.id for r in store.runs()] == ids
    assert [r.id for r in store.runs(sweep="b")] == ids[3:]
    store.claim(ids[0], "me")
    assert [r.id for r in store.runs(status="running")] == ids[:1]
    assert [r.id for r in store.runs(sweep="a", status=["pending", "running"])] == ids[:3]
    assert store.sweeps() == ["a", "b"]
    assert store.status_counts() == {**dict.fromkeys(STATUSES, 0), "pending": 3, "running": 1}
    assert store.status_counts(sweep="b")["pending"] == 1
    with pytest.raises(ValueError, match="unknown status done"):
        store.runs(status="done")


# --- claims ----------------------------------------------------------------------------------------------------
def test_claim_pending_once_then_only_when_stale(store, configs, clock):
    run_id = add(store, configs[0])
    assert store.claim(run_id, "a") is True
    assert store.claim(run_id, "b") is False
    assert store.claim(run_id, "a") is False  # no double claim by the holder either
    clock.now += 100
    assert store.heartbeat(run_id, "a") is True
    clock.now += 119
    assert store.claim(run_id, "b", stale_after=120) is False  # heartbeat 119 s old: alive
    clock.now += 2
    assert store.claim(run_id, "b", stale_after=120) is True  # 121 s: its process died
    record = store.run(run_id)
    assert (record.status, record.owner, record.attempts, record.heartbeat) == ("running", "b", 2, clock.now)
    assert store.heartbeat(run_id, "a") is False  # the old owner learns it lost the run
    assert store.finish(run_id, "a", "finished", step=5) is False
    assert store.release(run_id, "a") is False
    assert store.run(run_id).status == "running"


def test_interrupted_is_reclaimable(store, configs):
    run_id = add(store, configs[0])
    store.claim(run_id, "a")
    store.set_checkpoint(run_id, "/ckpt/a.safetensors", 40)
    assert store.release(run_id, "a") is True
    record = store.run(run_id)
    assert (record.status, record.checkpoint, record.checkpoint_step) == ("interrupted", "/ckpt/a.safetensors", 40)
    assert store.claim(run_id, "b") is True
    assert store.run(run_id).attempts == 2


@pytest.mark.parametrize("status", ["finished", "failed", "stopped_early", "diverged"])
def test_final_runs_are_never_claimed(store, configs, clock, status):
    run_id = add(store, configs[0])
    store.claim(run_id, "a")
    store.finish(run_id, "a", status, step=7, reason="NaN loss at step 7" if status in ("failed", "diverged") else None)
    clock.now += 1e6
    assert store.claim(run_id, "b", stale_after=0.0) is False
    assert store.run(run_id).status == status


def test_claim_unknown_run(store):
    with pytest.raises(ValueError, match="abcdefabcdef: not in the results store"):
        store.claim("abcdefabcdef", "a")


def test_finish_records_the_outcome(store, configs, clock):
    run_id = add(store, configs[0])
    store.claim(run_id, "a")
    clock.now += 30
    assert store.finish(run_id, "a", "failed", step=120, reason="NaN loss at step 120", wall_time=30.0)
    record = store.run(run_id)
    assert (record.status, record.reason, record.step) == ("failed", "NaN loss at step 120", 120)
    assert record.wall_time == 30.0
    assert (record.finished, record.heartbeat) == (clock.now, None)

    other = add(store, configs[1])
    store.claim(other, "a")
    store.finish(other, "a", "stopped_early", step=60, final_metric=0.995, best_metric=0.996, metric_name="accuracy")
    record = store.run(other)
    assert (record.final_metric, record.best_metric, record.metric_name) == (0.995, 0.996, "accuracy")


def test_finish_rejects_bad_status(store, configs):
    run_id = add(store, configs[0])
    store.claim(run_id, "a")
    with pytest.raises(ValueError, match="status 'done'"):
        store.finish(run_id, "a", "done", step=1)
    with pytest.raises(ValueError, match="without a reason"):
        store.finish(run_id, "a", "failed", step=1)
    with pytest.raises(ValueError, match="diverged without a reason"):
        store.finish(run_id, "a", "diverged", step=1)
    assert store.run(run_id).status == "running"


#: the tables of a store of schema 4, as seqdyn created them before runs could be ``diverged``
SCHEMA_4 = """
CREATE TABLE runs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, sweep TEXT, config TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending', 'running', 'interrupted', 'finished', 'failed', 'stopped_early')),
    reason TEXT, step INTEGER NOT NULL DEFAULT 0, epoch REAL, metric_name TEXT, final_metric REAL, best_metric REAL,
    checkpoint TEXT, checkpoint_step INTEGER, created REAL NOT NULL, started REAL, finished REAL, wall_time REAL,
    owner TEXT, heartbeat REAL, attempts INTEGER NOT NULL DEFAULT 0, checkpoint_sha256 TEXT, threads INTEGER,
    backends TEXT, backend_reasons TEXT
);
CREATE INDEX runs_by_sweep ON runs (sweep);
CREATE INDEX runs_by_status ON runs (status);
CREATE TABLE metrics (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE, step INTEGER NOT NULL, epoch REAL,
    split TEXT NOT NULL, name TEXT NOT NULL, value REAL, wall_time REAL, PRIMARY KEY (run_id, step, split, name)
) WITHOUT ROWID;
PRAGMA user_version = 4;
"""


def _store_of_schema_4(path: Path) -> None:
    """A store of schema 4 holding a run that diverged (``failed``, its reason saying so, with its metrics), one that
    failed for another reason and one that finished."""
    connection = sqlite3.connect(path)
    connection.executescript(SCHEMA_4)
    rows = (
        ("r1", "failed", "non-finite loss (nan) at step 12"),
        ("r2", "failed", "ValueError: a bug"),
        ("r3", "finished", None),
    )
    for run_id, status, reason in rows:
        connection.execute(
            "INSERT INTO runs (id, name, sweep, config, status, reason, created, best_metric) "
            "VALUES (?, ?, 'demo', '{}', ?, ?, 1.0, 0.5)",
            (run_id, f"run-{run_id}", status, reason),
        )
        connection.execute("INSERT INTO metrics VALUES (?, 10, NULL, 'test', 'accuracy', 0.5, 1.0)", (run_id,))
    connection.commit()
    connection.close()


def test_a_store_of_schema_4_reads_its_diverged_runs_as_diverged_and_migrates_them_when_opened_to_write(tmp_path):
    path = tmp_path / "v4.db"
    _store_of_schema_4(path)
    with Store(path, readonly=True) as store:  # not migrated: read as the migration would make them
        assert [record.status for record in store.runs()] == ["diverged", "failed", "finished"]
        assert store.run("r1").status == "diverged" and [r.id for r in store.runs(status="diverged")] == ["r1"]
        assert store.status_counts() == {**dict.fromkeys(STATUSES, 0), "diverged": 1, "failed": 1, "finished": 1}
        assert store.conn.execute("SELECT status FROM runs WHERE id = 'r1'").fetchone()[0] == "failed"
    with Store(path) as store:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert store.conn.execute("SELECT id, status FROM runs ORDER BY rowid").fetchall() == [
            ("r1", "diverged"),
            ("r2", "failed"),
            ("r3", "finished"),
        ]
        assert store.run("r1").reason == "non-finite loss (nan) at step 12" and store.run("r1").best_metric == 0.5
        assert [row.run_id for row in store.metrics()] == ["r1", "r2", "r3"]  # the copy of runs kept every metric
        assert store.integrity_check() == "ok"
        assert store.conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert store.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        indexes = {row[1] for row in store.conn.execute("PRAGMA index_list(runs)")}
        assert {"runs_by_sweep", "runs_by_status"} <= indexes
        assert not store.requeue("r1") and store.requeue("r2")  # a diverged run is not retried
        store.add_run("r4", "run-r4", {"x": 1})
        assert store.claim("r4", "a") and store.finish("r4", "a", "diverged", step=3, reason="non-finite loss (inf)")
        assert store.run("r4").status == "diverged"
        store.conn.execute("DELETE FROM runs WHERE id = 'r3'")  # the metrics still belong to the runs table
        assert [row.run_id for row in store.metrics()] == ["r1", "r2"]
    with Store(path) as store:  # opened again: nothing left to migrate
        assert [record.status for record in store.runs()] == ["diverged", "pending", "diverged"]


# --- metrics ---------------------------------------------------------------------------------------------------
def test_log_metrics_rows(store, configs):
    run_id = add(store, configs[0])
    store.log_metrics(run_id, 10, 0.5, "test", {"accuracy": 0.25, "loss": 3.0}, 1.5)
    store.log_metrics(run_id, 10, 0.5, "train", {"loss": float("nan")}, 1.5)
    store.log_metrics(run_id, 20, 1, "test", {"accuracy": 0.5}, 3.0)
    store.log_metrics(run_id, 20, 1, "test", {"accuracy": 0.75}, 3.1)  # the same (step, split, name) replaces
    rows = store.metrics(run_id)
    assert all(isinstance(r, MetricRow) for r in rows)
    assert [(r.step, r.split, r.name) for r in rows] == [
        (10, "test", "accuracy"),
        (10, "test", "loss"),
        (10, "train", "loss"),
        (20, "test", "accuracy"),
    ]
    assert math.isnan(rows[2].value) and rows[3].value == 0.75 and rows[3].wall_time == 3.1
    assert [r.name for r in store.metrics(split="test")] == ["accuracy", "loss", "accuracy"]
    assert (store.run(run_id).step, store.run(run_id).epoch) == (20, 1)
    with pytest.raises(ValueError, match="not in the results store"):
        store.log_metrics("ffffffffffff", 1, 0, "test", {"loss": 1.0}, 0.0)


# --- paths -----------------------------------------------------------------------------------------------------
def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_unwritable_paths_raise_and_create_nothing(tmp_path):
    before = _listing(tmp_path)
    with pytest.raises(ValueError, match=r"missing/runs.db: directory .*missing does not exist"):
        Store(tmp_path / "missing" / "runs.db")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match=r"afile/runs.db: .*afile is not a directory"):
        Store(tmp_path / "afile" / "runs.db")
    with pytest.raises(ValueError, match="is a directory"):
        Store(tmp_path)
    assert _listing(tmp_path) == sorted([*before, "afile"])


def test_read_only_directory(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.geteuid() == 0:  # root may write anyway: let os.access answer as for anyone else
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: real_access(p, mode) and Path(p) != locked)
    try:
        with pytest.raises(ValueError, match=r"locked/runs.db: directory .*locked is not writable"):
            Store(locked / "runs.db")
        assert _listing(locked) == []
    finally:
        locked.chmod(0o700)


def test_foreign_files_are_left_untouched(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("not a database")
    with pytest.raises(ValueError, match="notes.db: not a SQLite database"):
        Store(text)
    with pytest.raises(ValueError, match="notes.db: not a SQLite database"):
        Store(text, readonly=True)
    assert text.read_text() == "not a database"
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    data = other.read_bytes()
    with pytest.raises(ValueError, match="other.db: a SQLite database that is not a seqdyn store"):
        Store(other)
    assert other.read_bytes() == data
    assert _listing(tmp_path) == ["notes.db", "other.db"]


def test_read_only_store(tmp_path, configs):
    with pytest.raises(ValueError, match="no such file"):
        Store(tmp_path / "absent.db", readonly=True)
    assert _listing(tmp_path) == []
    with Store(tmp_path / "runs.db") as store:
        run_id = add(store, configs[0])
    with Store(tmp_path / "runs.db", readonly=True) as reader:
        assert reader.run(run_id).status == "pending"
        with pytest.raises(ValueError, match="read-only"):
            reader.claim(run_id, "a")


_READ_EACH = """
import sys
from seqdyn.train.store import Store
for path in sys.argv[1:]:
    try:
        print(len(Store(path, readonly=True).runs()))
    except ValueError as error:
        print(error)
"""


def test_a_store_on_read_only_media_is_read_or_refused_in_one_line(tmp_path, configs):
    """Issue 18.1: a store copied to read-only media is readable; a copy whose -wal holds writes that SQLite cannot
    read there (no -shm can be made) is refused in one line instead of being read without them."""
    clean, dirty = tmp_path / "clean", tmp_path / "dirty"
    with Store(tmp_path / "runs.db") as store:
        add(store, configs[0])
        dirty.mkdir()
        for name in ("runs.db", "runs.db-wal"):  # the run is in the -wal only
            shutil.copy(tmp_path / name, dirty / name)
    clean.mkdir()
    shutil.copy(tmp_path / "runs.db", clean / "runs.db")
    for folder in (clean, dirty):
        for path in folder.iterdir():
            path.chmod(0o444)
        folder.chmod(0o555)
    try:
        command = unprivileged(
            [sys.executable, "-c", _READ_EACH, str(clean / "runs.db"), str(dirty / "runs.db")], clean
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    finally:
        for folder in (clean, dirty):
            folder.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "1",
        f"results store {dirty / 'runs.db'}: runs.db-wal holds writes that SQLite reads only with a -shm file "
        "beside it, and the folder is read-only; copy the store's files to a writable one",
    ]
    assert _listing(clean) == ["runs.db"] and _listing(dirty) == ["runs.db", "runs.db-wal"]


def test_store_pickles_to_another_process(store, configs):
    run_id = add(store, configs[0])
    copy = pickle.loads(pickle.dumps(store))
    assert copy.run(run_id).id == run_id
    copy.close()


# --- two processes ---------------------------------------------------------------------------------------------
def test_two_processes_share_one_store(tmp_path):
    configs = sweep_configs(
        {"model.mixer": ["softmax_attention", "mamba2", "linear_attention"], "optimizer.lr": [1e-4, 3e-4, 1e-3, 3e-3]}
    )
    ids, data = [c.run_id for c in configs], [c.canonical() for c in configs]
    path, steps = str(tmp_path / "race.db"), 8
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    workers = [context.Process(target=worker, args=(path, owner, ids, data, barrier, steps)) for owner in ("p1", "p2")]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=120)
    assert [p.exitcode for p in workers] == [0, 0]

    with Store(path) as store:
        assert store.integrity_check() == "ok"
        runs = store.runs()
        assert sorted(r.id for r in runs) == sorted(ids)
        assert all(r.status == "finished" and r.attempts == 1 for r in runs)  # each run claimed exactly once
        assert {r.owner for r in runs} <= {"p1", "p2"}
        rows = store.metrics()
        assert len(rows) == len(ids) * steps * 3
        assert len({(r.run_id, r.step, r.split, r.name) for r in rows}) == len(rows)
        assert {(r.run_id, r.step) for r in rows} == {(i, s) for i in ids for s in range(1, steps + 1)}


def _sqlite_in_another_process(path: Path, sql: str) -> list:
    """Run ``sql`` in a fresh process with a plain SQLite connection (as the ``sqlite3`` shell or a report would:
    open, read, close) and return its rows."""
    script = (
        f"import json, sqlite3; c = sqlite3.connect({str(path)!r}); "
        f"print(json.dumps(c.execute({sql!r}).fetchall())); c.close()"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_a_second_store_in_one_process_keeps_the_wal_alive(tmp_path, configs):
    """Issue 18.1: a sweep's second Store on the file must not drop the first one's locks, or another process's
    open/close checkpoints and deletes the live -wal and every later write is lost."""
    path = tmp_path / "runs.db"
    first = Store(path)
    add(first, configs[0])
    second = Store(path)
    assert _sqlite_in_another_process(path, "SELECT COUNT(*) FROM runs") == [[1]]
    add(second, configs[1])
    add(first, configs[2])
    seen = _sqlite_in_another_process(path, "SELECT id FROM runs ORDER BY rowid")
    assert seen == [[c.run_id] for c in configs[:3]]
    first.close()
    second.close()
    assert _sqlite_in_another_process(path, "SELECT COUNT(*) FROM runs") == [[3]]


def test_a_sweep_keeps_every_run_while_other_processes_read(tmp_path):
    """Issue 18.1 as a user met it: ``seqdyn sweep`` opens the store, then ``run_sweep`` opens it again; a report
    between two runs must not cost the runs after it (they stayed "running" at their first step)."""
    sweep = SweepConfig.model_validate(
        {
            "name": "demo",
            "task": MQAR,
            "model": {"layers": 1, "d_model": 16},
            "train": {"steps": 4, "eval_every": 2},
            "sweep": {"optimizer.lr": [1e-3, 1e-2]},
        }
    )
    path = tmp_path / "runs.db"
    opened = Store(path)
    finished = []
    run_sweep(
        sweep,
        path,
        progress=False,
        on_result=lambda result: finished.append(
            _sqlite_in_another_process(path, "SELECT COUNT(*) FROM runs WHERE status = 'finished'")[0][0]
        ),
    )
    assert finished == [1, 2]
    assert _sqlite_in_another_process(path, "SELECT status, step FROM runs") == [["finished", 4]] * 2
    opened.close()


def test_stores_of_one_process_share_one_connection(tmp_path, configs):
    path = tmp_path / "runs.db"
    first, second = Store(path), Store(str(path))
    reader = Store(path, readonly=True)
    assert first.conn is second.conn is reader.conn
    first.close()
    first.close()  # closing twice is harmless
    with pytest.raises(ValueError, match="runs.db: closed"):
        first.run(configs[0].run_id)
    add(second, configs[0])  # the others keep the connection
    assert reader.run(configs[0].run_id).status == "pending"
    conn = second.conn
    second.close()
    reader.close()
    with pytest.raises(sqlite3.ProgrammingError):  # the last store closed it
        conn.execute("SELECT 1")
    with Store(path) as again:
        assert again.conn is not conn and again.run(configs[0].run_id).status == "pending"
    dropped = Store(path)
    conn = dropped.conn
    del dropped  # a store nobody closed leaves when it is collected
    gc.collect()
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")


def test_stores_on_one_connection_write_from_many_threads(tmp_path):
    configs = sweep_configs({"optimizer.lr": [i * 1e-4 for i in range(1, 41)]})
    path = tmp_path / "runs.db"
    Store(path).close()

    def add_half(half: int) -> None:
        with Store(path) as store:
            for config in configs[half::2]:
                add(store, config)
                assert store.claim(config.run_id, f"thread {half}")

    threads = [threading.Thread(target=add_half, args=(half,)) for half in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    with Store(path) as store:
        assert store.status_counts()["running"] == len(configs)


def test_a_forked_child_opens_its_own_connection(store, configs):
    add(store, configs[0])
    context = multiprocessing.get_context("fork")
    child = context.Process(target=add, args=(store, configs[1]))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    add(store, configs[2])  # the parent's connection is intact
    assert [r.id for r in store.runs()] == [c.run_id for c in configs[:3]]


def _snapshot(path: Path) -> tuple[bytes, int, list[str]]:
    return path.read_bytes(), path.stat().st_mtime_ns, _listing(path.parent)


@pytest.mark.parametrize("readonly", [False, True])
def test_opening_a_store_does_not_rewrite_it(tmp_path, configs, readonly):
    """Issue 18.1: opening an existing store (and closing it without writes) leaves its bytes and mtime as they
    were; before, every writable open rewrote the schema and version."""
    path = tmp_path / "runs.db"
    with Store(path) as store:
        add(store, configs[0])
    before = _snapshot(path)
    with Store(path, readonly=readonly) as store:
        assert store.run(configs[0].run_id).status == "pending"
    after = _snapshot(path)
    assert after[:2] == before[:2]
    if not readonly:  # a read-only connection may leave empty -wal and -shm files beside it
        assert after[2] == before[2]


# --- export ----------------------------------------------------------------------------------------------------
def test_export_csv_round_trips(store, configs, tmp_path):
    for final, config in zip([0.5, 0.75, 0.25, 1.0], configs):
        add_finished(store, config, final)
    store.log_metrics(configs[0].run_id, 30, 1.5, "train", {"loss": float("nan")}, 9.0)
    paths = store.export(tmp_path / "out")
    assert paths == {"runs": tmp_path / "out" / "runs.csv", "metrics": tmp_path / "out" / "metrics.csv"}

    with open(paths["runs"], newline="") as handle:
        runs = list(csv.DictReader(handle))
    assert [r["id"] for r in runs] == [c.run_id for c in configs]
    for row, record in zip(runs, store.runs()):
        assert (row["name"], row["status"]) == (record.name, record.status)
        assert float(row["final_metric"]) == record.final_metric
        assert row["model.mixer"] == record.config["model"]["mixer"]
        assert float(row["optimizer.lr"]) == record.config["optimizer"]["lr"]
        assert int(row["model.d_model"]) == record.config["model"]["d_model"]
        assert row["task.name"] == "mqar" and int(row["task.params.seq_len"]) == 16
        assert "config" not in row and "name" in row

    with open(paths["metrics"], newline="") as handle:
        exported = list(csv.DictReader(handle))
    stored = store.metrics()
    assert len(exported) == len(stored)
    for row, metric in zip(exported, stored):
        assert (row["run_id"], int(row["step"]), row["split"], row["name"]) == (
            metric.run_id,
            metric.step,
            metric.split,
            metric.name,
        )
        value = float(row["value"])
        assert value == metric.value or (math.isnan(value) and math.isnan(metric.value))


def test_export_parquet_or_a_clear_error(store, configs, tmp_path):
    add_finished(store, configs[0], 0.5)
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        with pytest.raises(MissingDependencyError, match="pyarrow.*seqdyn\\[parquet\\]"):
            store.export(tmp_path / "out", format="parquet")
        assert not (tmp_path / "out").exists()
        return
    paths = store.export(tmp_path / "out", format="parquet")
    assert pyarrow.parquet.read_table(paths["runs"]).column("model.mixer").to_pylist() == ["softmax_attention"]
    assert pyarrow.parquet.read_table(paths["metrics"]).num_rows == len(store.metrics())


def test_export_rejects_unknown_format(store, tmp_path):
    with pytest.raises(ValueError, match="unknown format 'xlsx'"):
        store.export(tmp_path / "out", format="xlsx")
    assert isinstance(MissingDependencyError("x"), ValueError)


def test_a_run_stored_before_a_field_was_added_is_the_same_run(tmp_path):
    """A sweep's main process and its workers may run two versions of the config (the source changed between
    their starts): a field added later, at its default, is no difference; any other field is."""
    from seqdyn.train.config import ADDED_FIELDS

    config = sweep_configs({"optimizer.lr": [1e-3]})[0]
    current = config.canonical()
    oldest, with_first_moe = json.loads(json.dumps(current)), json.loads(json.dumps(current))
    for section, key, _ in ADDED_FIELDS:
        *path, last = section.split(".")
        holder = oldest
        for part in path:
            holder = holder[part]
        holder[last].pop(key, None)
        if section == "model.moe":  # a run stored when the experts had only their first fields
            with_first_moe["model"]["moe"].pop(key)
    store = Store(tmp_path / "runs.db")
    assert store.add_run(config.run_id, config.name, oldest)
    assert not store.add_run(config.run_id, config.name, current)  # the same run, nothing raised
    assert not store.add_run(config.run_id, config.name, with_first_moe)
    routed = json.loads(json.dumps(current))
    routed["model"]["moe"]["router"] = "sigmoid"
    with pytest.raises(ValueError, match="different config"):
        store.add_run(config.run_id, config.name, routed)
    changed = json.loads(json.dumps(current))
    changed["optimizer"]["lr"] *= 2
    with pytest.raises(ValueError, match="different config"):
        store.add_run(config.run_id, config.name, changed)


def test_retry_failed_trains_failed_runs_again_but_not_diverged_ones(tmp_path):
    """A run that failed by accident (killed worker, a bug since fixed) is trained again with
    ``retry_failed``; one whose loss diverged keeps its result (the same config would diverge again)."""
    from seqdyn.train.config import SweepConfig

    sweep = SweepConfig.model_validate(
        {
            "name": "demo",
            "task": MQAR,
            "model": {"layers": 1, "d_model": 8},
            "train": {"steps": 2},
            "sweep": {"optimizer.lr": [1e-3, 2e-3]},
        }
    )
    accident, diverged = sweep.expand()
    path = tmp_path / "runs.db"
    store = Store(path)
    for config, status, reason in (
        (accident, "failed", "ValueError: a bug"),
        (diverged, "diverged", "non-finite loss (nan) at step 1"),
    ):
        store.add_run(config.run_id, config.name, config.canonical(), sweep="demo")
        assert store.claim(config.run_id, "tester")
        store.finish(config.run_id, "tester", status, step=1, reason=reason)
    run_sweep(sweep, path, progress=False)
    assert [store.run(c.run_id).status for c in (accident, diverged)] == ["failed", "diverged"]  # done: skipped
    run_sweep(sweep, path, progress=False, retry_failed=True)
    assert store.run(accident.run_id).status == "finished" and store.run(accident.run_id).reason is None
    assert store.run(diverged.run_id).status == "diverged"
    assert not store.requeue(diverged.run_id)
    assert not store.requeue(accident.run_id)  # only a failed run goes back
