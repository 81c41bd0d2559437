"""Interrupted work recovers (issue 18, items 5 and 6): damaged checkpoints, checkpoints between evaluations,
SIGINT and SIGTERM, workers whose sweep died, threads per worker, markup in run names, the schema migration."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from seqdyn.train import loop
from seqdyn.train.config import parse_config
from seqdyn.train.loop import Trainer, train_run
from seqdyn.train.store import _SCHEMA, Store
from seqdyn.train.sweep import run_sweep
from tests.train._helpers import metrics
from tests.train._helpers import quick_run as tiny

ROOT = Path(__file__).resolve().parents[2]


def interrupt_at(monkeypatch, step: int) -> None:
    """Make training raise KeyboardInterrupt (as Ctrl-C does) when it reaches ``step``."""
    original = Trainer.train_step

    def train_step(self):
        if self.step == step:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(Trainer, "train_step", train_step)


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:  # one bit of a weight flipped: the size and the header stay valid, only the checksum tells
        path.write_bytes(data[:-9] + bytes([data[-9] ^ 1]) + data[-8:])


# --- damaged checkpoints --------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["truncated", "empty", "bit flipped"])
@pytest.mark.parametrize("previous", ["intact", "missing"])
def test_a_damaged_checkpoint_is_named_and_the_run_restarts_from_the_previous_one_or_step_0(
    tmp_path, monkeypatch, caplog, how, previous
):
    config = parse_config(tiny())
    with Store(tmp_path / "whole.db") as whole:
        assert train_run(config, whole, checkpoint_dir=tmp_path / "whole", progress=False).status == "finished"
        expected = metrics(whole)
    with monkeypatch.context() as patch:
        interrupt_at(patch, 12)
        with Store(tmp_path / "cut.db") as store, pytest.raises(KeyboardInterrupt):
            train_run(config, store, checkpoint_dir=tmp_path / "cut", progress=False)
    with Store(tmp_path / "cut.db") as store:
        record = store.run(config.run_id)
        assert (record.status, record.checkpoint_step) == ("interrupted", 10)
        checkpoint = Path(record.checkpoint)
        damage(checkpoint, how)
        if previous == "missing":
            checkpoint.with_name(f"{checkpoint.stem}.prev{checkpoint.suffix}").unlink(missing_ok=True)
        with caplog.at_level(logging.WARNING, logger="seqdyn"):
            result = train_run(config, store, checkpoint_dir=tmp_path / "cut", progress=False)
        assert result.status == "finished"
        assert metrics(store) == expected  # resumed at step 5 or 0, it ends as if never interrupted
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(checkpoint) in warning and "\n" not in warning
    assert ("previous checkpoint" if previous == "intact" else "from step 0") in warning


@pytest.mark.parametrize("previous", ["its own", "missing"])
def test_another_runs_checkpoint_in_its_place_is_refused_and_the_run_restarts(tmp_path, caplog, previous):
    """A checkpoint file replaced by another run's before the store recorded its checksum (the process died in
    between): the run resumes from its own previous checkpoint, or from step 0 — never from the other's weights."""
    from seqdyn.train.checkpoint import previous_path, usable_checkpoint

    mine, other = parse_config(tiny(steps=10)), parse_config(tiny(steps=10, seed=7))
    with Store(tmp_path / "s.db") as store:
        for config in (mine, other):
            train_run(config, store, checkpoint_dir=tmp_path / "c", progress=False)
        path, others = Path(store.run(mine.run_id).checkpoint), Path(store.run(other.run_id).checkpoint)
    if previous == "missing":
        previous_path(path).unlink()
    path.write_bytes(others.read_bytes())
    with caplog.at_level(logging.WARNING, logger="seqdyn"):
        chosen = usable_checkpoint(path, None, mine.run_id)
    assert chosen == (previous_path(path) if previous == "its own" else None)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"it belongs to run {other.run_id}, not {mine.run_id}" in warning and "\n" not in warning
    trainer = Trainer(mine, checkpoint_dir=tmp_path / "c", progress=False)
    trainer.resume(path, None)
    assert trainer.step == (5 if previous == "its own" else 0)


def test_a_checkpoint_is_recorded_with_its_checksum_and_the_previous_one_kept(tmp_path):
    config = parse_config(tiny(steps=10))
    with Store(tmp_path / "s.db") as store:
        train_run(config, store, checkpoint_dir=tmp_path / "c", progress=False)
        record = store.run(config.run_id)
    checkpoint = Path(record.checkpoint)
    from seqdyn.train.checkpoint import load_trained, previous_path, sha256_of

    assert record.checkpoint_sha256 == sha256_of(checkpoint)
    assert previous_path(checkpoint).is_file() and not checkpoint.with_suffix(".tmp").exists()
    damage(checkpoint, "bit flipped")
    with Store(tmp_path / "s.db", readonly=True) as store, pytest.raises(ValueError, match="SHA-256 differs"):
        load_trained(store, config.run_id)  # `seqdyn inspect` says so in one line


def test_checkpoint_every_is_honoured_between_evaluations_and_resumes_exactly(tmp_path, monkeypatch):
    config = parse_config(tiny(eval_every=10, checkpoint_every=7))
    saved = []
    save = loop.save_checkpoint
    monkeypatch.setattr(
        loop,
        "save_checkpoint",
        lambda path, model, opt, meta: saved.append(meta["step"]) or save(path, model, opt, meta),
    )
    with Store(tmp_path / "whole.db") as whole:
        train_run(config, whole, checkpoint_dir=tmp_path / "whole", progress=False)
        expected = metrics(whole)
    assert saved == [7, 14, 20]
    with monkeypatch.context() as patch:
        interrupt_at(patch, 17)
        with Store(tmp_path / "cut.db") as store, pytest.raises(KeyboardInterrupt):
            train_run(config, store, checkpoint_dir=tmp_path / "cut", progress=False)
    with Store(tmp_path / "cut.db") as store:
        assert store.run(config.run_id).checkpoint_step == 14
        assert train_run(config, store, checkpoint_dir=tmp_path / "cut", progress=False).status == "finished"
        assert metrics(store) == expected  # the train loss at step 20 averages steps 11-20 across the resume


def test_a_run_name_with_rich_markup_trains_with_a_progress_bar(tmp_path):
    config = parse_config(tiny(steps=3) | {"name": "a[/x] [bold]b"})
    assert train_run(config, checkpoint_dir=tmp_path, progress=True).status == "finished"


# --- signals and workers ---------------------------------------------------------------------------------------
def _environment(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", **extra}


def _default_stop_signals() -> None:
    """The sweep as started from a terminal: a test run started in the background (``cmd &``) ignores SIGINT,
    and its children inherit that, which the sweep rightly keeps (as for ``nohup``)."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


@contextlib.contextmanager
def _sweep(tmp_path: Path, *options: str, **environment) -> Iterator[tuple[subprocess.Popen, Path]]:
    """A long two-run sweep in a subprocess, killed on the way out if it still runs; yields it and its store."""
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(tiny(steps=100_000, eval_every=50) | {"sweep": {"optimizer.lr": [1e-3, 2e-3]}}))
    store = tmp_path / "s.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "seqdyn", "sweep", str(config), "--store", str(store), "--no-progress", *options],
        env=_environment(**environment),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_stop_signals,
    )
    try:
        yield process, store
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _wait_running(process: subprocess.Popen, store: Path, count: int, timeout: float = 180.0) -> list[tuple]:
    """``(id, owner, threads)`` of the runs once ``count`` of them are running and have logged an evaluation.
    One read-only connection stays open while the sweep writes, so that it never folds in the sweep's log."""
    deadline, connection = time.monotonic() + timeout, None
    try:
        while time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            try:
                connection = connection or sqlite3.connect(f"{store.as_uri()}?mode=ro", uri=True)
                running = connection.execute(
                    "SELECT id, owner, threads FROM runs WHERE status = 'running' AND step > 0"
                ).fetchall()
            except sqlite3.Error:  # not created yet
                running = []
            if len(running) == count:
                return running
            time.sleep(0.2)
    finally:
        if connection is not None:
            connection.close()
    raise AssertionError(f"{count} runs did not start")


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sigint_and_sigterm_stop_a_sweep_within_a_second_and_mark_the_run_interrupted(tmp_path, number):
    with _sweep(tmp_path, "--workers", "1") as (process, store):
        ((run_id, _, _),) = _wait_running(process, store, 1)
        sent = time.monotonic()
        process.send_signal(number)
        _, stderr = process.communicate(timeout=60)
        took = time.monotonic() - sent
    assert process.returncode == 128 + number, stderr
    assert took < 3.0, took  # within a second on an idle machine; the limit leaves room for a loaded one
    assert stderr.strip().splitlines()[-1].startswith("interrupted (")
    with Store(store, readonly=True) as opened:
        assert opened.run(run_id).status == "interrupted"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has ended


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_share_the_cores_and_end_when_their_sweep_is_killed(tmp_path):
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    with _sweep(tmp_path, "--workers", "2", OMP_NUM_THREADS="3") as (process, store):
        runs = _wait_running(process, store, 2)
        pids = [int(owner.rsplit(":", 1)[1]) for _, owner, _ in runs]
        for pid in pids:  # each worker started with its share of the cores and a passive OpenMP wait policy
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"OMP_NUM_THREADS={threads}".encode() in environment
            assert b"OMP_WAIT_POLICY=PASSIVE" in environment
        assert [recorded for _, _, recorded in runs] == [threads, threads]
        killed = time.monotonic()
        process.kill()
        process.communicate()
    while any(_alive(pid) for pid in pids) and time.monotonic() - killed < 30:
        time.sleep(0.1)
    alive = [pid for pid in pids if _alive(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive and time.monotonic() - killed < 5.0
    with Store(store, readonly=True) as opened:
        assert [r.status for r in opened.runs()] == ["interrupted", "interrupted"]


def test_worker_threads_divide_the_cores():
    from seqdyn.train.sweep import worker_threads

    assert [worker_threads(n, cores=16) for n in (1, 2, 3, 16, 32)] == [16, 8, 5, 1, 1]
    assert worker_threads(2, cores=2) == 1


def test_a_run_in_the_sweep_process_records_its_thread_count(tmp_path):
    import torch

    (result,) = run_sweep(parse_config(tiny(steps=2)), tmp_path / "s.db", progress=False)
    with Store(tmp_path / "s.db", readonly=True) as store:
        assert store.run(result.run_id).threads == torch.get_num_threads()


# --- the store's schema ------------------------------------------------------------------------------------------
def test_a_store_of_schema_1_is_read_read_only_and_migrated_when_opened_to_write(tmp_path):
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path)
    connection.executescript(_SCHEMA + "PRAGMA user_version = 1;")
    connection.execute("INSERT INTO runs (id, name, config, created) VALUES ('r1', 'old', '{}', 1.0)")
    connection.commit()
    connection.close()
    with Store(path, readonly=True) as store:
        (record,) = store.runs()
        assert (record.id, record.checkpoint_sha256, record.threads) == ("r1", None, None)
    with Store(path) as store:
        store.set_threads("r1", 4)
        store.set_checkpoint("r1", tmp_path / "r1.safetensors", 10, "ab" * 32)
        assert (store.run("r1").threads, store.run("r1").checkpoint_sha256) == (4, "ab" * 32)
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == 5


# --- DDP teardown ------------------------------------------------------------------------------------------------
def test_closing_a_process_group_frees_the_ddp_wrappers_that_hold_it_first(monkeypatch):
    import gc
    import socket
    import weakref

    import torch

    from seqdyn.train.distributed import Distributed

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    gc.disable()  # as when no collection happens to run between the end of the run and the teardown
    try:
        group = Distributed("gloo")
        wrapped = group.wrap(torch.nn.Linear(3, 3))
        wrapped(torch.randn(2, 3)).sum().backward()
        alive = weakref.ref(wrapped)
        del wrapped  # the trainer is gone, but DDP's reference cycle keeps the wrapper (and the group) alive
        group.close()
        assert alive() is None
    finally:
        gc.enable()


@pytest.mark.slow
def test_torchrun_with_two_processes_exits_0_every_time(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny(steps=6, eval_every=3)))
    for launch in range(6):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc_per_node",
                "2",
                "--master_port",
                str(29641 + launch),
                "-m",
                "seqdyn",
                "train",
                str(config),
                "--store",
                str(tmp_path / f"{launch}.db"),
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            env=_environment(),
            timeout=600,
        )
        assert result.returncode == 0, (launch, result.stderr[-3000:])
