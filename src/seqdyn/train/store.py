"""The embedded results store: one SQLite file holding runs, their configs, metrics and checkpoints.

A store is safe for several processes at once (two sweeps on one file, a sweep's workers, a report reading while
a sweep writes):

- the file is in WAL mode, so readers never block the writer and the writer never blocks readers;
- every write is one transaction opened with ``BEGIN IMMEDIATE`` (the write lock is taken before anything is
  read, so a read-modify-write cannot interleave with another writer's), and waiting writers retry for
  ``busy_timeout`` instead of failing;
- :meth:`Store.claim` is a single conditional ``UPDATE``: of two processes claiming one run, exactly one sees a
  changed row. A claim that finds the run ``running`` takes it over only when the owner's heartbeat is older
  than ``stale_after`` seconds (its process died without a word).

Run life cycle (``STATUSES``)::

    add_run -> pending --claim--> running --finish--> finished | failed | diverged | stopped_early
                                    |  ^
                            release |  | claim (or a stale heartbeat)
                                    v  |
                                 interrupted

A process holds one SQLite connection per file, shared by every :class:`Store` it opens on that file (a
store object passed to another process, or inherited by a fork, opens that process's own). Nothing but SQLite
ever opens the file: closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
included, and another process could then checkpoint and delete the ``-wal`` that this one still writes into.
A writable open writes nothing unless the file lacks the current schema; a read-only open (``readonly=True``)
never writes and also reads a store on read-only media.
A run whose loss stopped being finite is ``diverged`` (its reason says at which step), not ``failed``: it gave a result
(its best before), and the same config would diverge again.
Times are seconds since the epoch (``time.time()``); NaN metric values are stored as NULL and read back as NaN.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

STATUSES = ("pending", "running", "interrupted", "finished", "failed", "stopped_early", "diverged")
FINAL_STATUSES = ("finished", "failed", "stopped_early", "diverged")
CLAIMABLE_STATUSES = ("pending", "interrupted")
DIVERGED = "diverged"
EXPORT_FORMATS = ("csv", "parquet")
SCHEMA_VERSION = 5
#: the schema that first knew the ``diverged`` status; before it a diverged run was ``failed`` with a reason
#: containing :data:`DIVERGED_REASON`
DIVERGED_SCHEMA = 5
#: what the reason of a diverged run says: its loss was not finite
DIVERGED_REASON = "non-finite loss"
#: the split of what was measured of a trained model from its checkpoint (:meth:`Store.record_measurements`)
MEASURED_SPLIT = "measured"
#: a run of a store written before :data:`DIVERGED_SCHEMA` that diverged
_DIVERGED_BEFORE = f"status = 'failed' AND instr(COALESCE(reason, ''), '{DIVERGED_REASON}') > 0"


def _status_check(statuses: Iterable[str]) -> str:
    """The runs table's check that a status is one of ``statuses``."""
    quoted = ", ".join(f"'{status}'" for status in statuses)
    return f"CHECK (status IN ({quoted}))"


BUSY_TIMEOUT_S = 60.0

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    sweep           TEXT,
    config          TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending'
                    {_status_check(STATUSES)},
    reason          TEXT,
    step            INTEGER NOT NULL DEFAULT 0,
    epoch           REAL,
    metric_name     TEXT,
    final_metric    REAL,
    best_metric     REAL,
    checkpoint      TEXT,
    checkpoint_step INTEGER,
    created         REAL NOT NULL,
    started         REAL,
    finished        REAL,
    wall_time       REAL,
    owner           TEXT,
    heartbeat       REAL,
    attempts        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_sweep ON runs (sweep);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status);
CREATE TABLE IF NOT EXISTS metrics (
    run_id    TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step      INTEGER NOT NULL,
    epoch     REAL,
    split     TEXT NOT NULL,
    name      TEXT NOT NULL,
    value     REAL,
    wall_time REAL,
    PRIMARY KEY (run_id, step, split, name)
) WITHOUT ROWID;
"""

#: the statements that bring a store of schema ``version - 1`` to ``version`` (a function of the connection where
#: a statement cannot)
_MIGRATIONS = {
    2: ("ALTER TABLE runs ADD COLUMN checkpoint_sha256 TEXT", "ALTER TABLE runs ADD COLUMN threads INTEGER"),
    3: ("ALTER TABLE runs ADD COLUMN backends TEXT",),
    4: ("ALTER TABLE runs ADD COLUMN backend_reasons TEXT",),
    5: lambda conn: _add_diverged_status(conn),
}


class MissingDependencyError(ImportError, ValueError):
    """An optional package a feature needs is not installed (catchable as ImportError or ValueError)."""


@dataclass
class RunRecord:
    """One row of the ``runs`` table; ``config`` is the resolved run config as plain data."""

    id: str
    name: str
    sweep: str | None
    config: dict[str, Any]
    status: str
    reason: str | None
    step: int
    epoch: float | None
    best_metric: float | None
    final_metric: float | None
    metric_name: str | None
    checkpoint: str | None
    checkpoint_step: int | None
    created: float
    started: float | None
    finished: float | None
    wall_time: float | None
    owner: str | None
    heartbeat: float | None
    attempts: int
    checkpoint_sha256: str | None = None
    threads: int | None = None
    backends: list[str] | None = None  # the backend each layer computed with (JSON in the file)
    backend_reasons: list[str] | None = None  # why: what decided each layer's backend (JSON in the file)


@dataclass
class MetricRow:
    """One evaluation value: ``name`` on ``split`` at ``step`` of run ``run_id``."""

    run_id: str
    step: int
    epoch: float | None
    split: str
    name: str
    value: float
    wall_time: float | None


_RUN_COLUMNS = tuple(f.name for f in fields(RunRecord))
#: where each run copied in from another store came from (:meth:`Store.copy_runs`)
_MERGED_TABLE = (
    "CREATE TABLE IF NOT EXISTS merged_runs (run_id TEXT PRIMARY KEY, source TEXT NOT NULL, merged REAL NOT NULL)"
)
_METRIC_COLUMNS = tuple(f.name for f in fields(MetricRow))
_INSERT_METRIC = f"INSERT INTO metrics ({', '.join(_METRIC_COLUMNS)}) VALUES ({', '.join('?' * len(_METRIC_COLUMNS))})"


@dataclass
class _Shared:
    """One SQLite connection of this process to one file, the lock that serializes its use, and its users."""

    conn: sqlite3.Connection
    lock: threading.RLock
    users: int = 0


# (pid, st_dev, st_ino, readonly) -> the connection; the pid keeps a forked child off its parent's connections.
# Reentrant: the garbage collector may finalize an unclosed store (and release its share) while the lock is held.
_CONNECTIONS: dict[tuple[int, int, int, bool], _Shared] = {}
_CONNECTIONS_LOCK = threading.RLock()


def _reset_lock_in_child() -> None:
    global _CONNECTIONS_LOCK
    _CONNECTIONS_LOCK = threading.RLock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_reset_lock_in_child)


class Store:
    """A results store in the SQLite file ``path`` (created with its tables when absent).

    Args:
        path: the database file. Its directory must exist and be writable (WAL mode keeps ``-wal`` and ``-shm``
            files beside it); otherwise a ``ValueError`` names the path and the reason, and nothing is created.
        readonly: open an existing store for reading only (reports); a missing file is a ``ValueError``.
        clock: the time source (seconds); tests pass a fake one.
    """

    def __init__(self, path: str | os.PathLike, *, readonly: bool = False, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.readonly = readonly
        self.clock = clock
        self._attach()

    # --- connection ---------------------------------------------------------------------------------
    def _attach(self) -> None:
        """Join this process's connection to the file, opening (and checking) it if there is none yet."""
        self._key, self._shared = _acquire(self.path, self.readonly)
        self._pid = os.getpid()
        self._release = weakref.finalize(self, _release, self._key)  # also when a store is dropped unclosed

    @property
    def conn(self) -> sqlite3.Connection:
        """This process's connection to the file, shared with its other stores (joined anew after a fork or in
        a process the store was pickled to)."""
        return self._handle().conn

    def _handle(self) -> _Shared:
        if not self._release.alive:
            raise ValueError(f"results store {self.path}: closed")
        if self._pid != os.getpid():
            self._release.detach()  # the parent's connection stays the parent's
            self._attach()
        return self._shared

    def close(self) -> None:
        """Leave the shared connection; the last store of the process to leave closes it (and SQLite
        checkpoints the WAL when no other process has the file open)."""
        if self._pid == os.getpid():
            self._release()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "readonly": self.readonly, "clock": self.clock}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], readonly=state["readonly"], clock=state["clock"])

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, the write lock taken up front (``BEGIN IMMEDIATE``)."""
        if self.readonly:
            raise ValueError(f"results store {self.path}: opened read-only")
        shared = self._handle()
        with shared.lock:
            conn = shared.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        shared = self._handle()
        with shared.lock:
            return shared.conn.execute(sql, tuple(params)).fetchall()

    # --- runs -----------------------------------------------------------------------------------------
    def add_run(self, run_id: str, name: str, config: dict[str, Any], sweep: str | None = None) -> bool:
        """Insert a run as ``pending`` unless present; True if it is new.

        The id identifies the resolved config: re-adding an id with a config that differs (other than in its
        ``name``) is a ``ValueError``. A re-added run keeps its name, sweep, status and history.
        """
        text = _config_json(config)
        with self._write() as conn:
            row = conn.execute("SELECT config FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is not None:
                from seqdyn.train.config import identity

                if identity(json.loads(row[0])) != identity(json.loads(text)):
                    raise ValueError(f"run {run_id}: already in {self.path} with a different config")
                return False
            conn.execute(
                "INSERT INTO runs (id, name, sweep, config, created) VALUES (?, ?, ?, ?, ?)",
                (run_id, name, sweep, text, self.clock()),
            )
            return True

    def claim(self, run_id: str, owner: str, stale_after: float = 120.0) -> bool:
        """Mark the run ``running`` by ``owner`` if it is pending, interrupted, or running with a heartbeat older
        than ``stale_after`` seconds; True if this caller got it. Each successful claim counts an attempt."""
        now = self.clock()
        with self._write() as conn:
            cursor = conn.execute(
                """UPDATE runs SET status = 'running', owner = ?, heartbeat = ?, started = COALESCE(started, ?),
                          reason = NULL, attempts = attempts + 1
                   WHERE id = ? AND (status IN ('pending', 'interrupted')
                                     OR (status = 'running' AND (heartbeat IS NULL OR heartbeat < ?)))""",
                (owner, now, now, run_id, now - stale_after),
            )
            if cursor.rowcount == 0:
                self._require(conn, run_id)
            return cursor.rowcount == 1

    def heartbeat(self, run_id: str, owner: str) -> bool:
        """Refresh the owner's heartbeat; False if ``owner`` no longer holds the run (another process took it)."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE runs SET heartbeat = ? WHERE id = ? AND owner = ? AND status = 'running'",
                (self.clock(), run_id, owner),
            )
            return cursor.rowcount == 1

    def release(self, run_id: str, owner: str) -> bool:
        """Give the run back as ``interrupted`` (stopped by Ctrl-C, resumable); False if ``owner`` did not hold it."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = 'interrupted', heartbeat = NULL "
                "WHERE id = ? AND owner = ? AND status = 'running'",
                (run_id, owner),
            )
            return cursor.rowcount == 1

    def requeue(self, run_id: str) -> bool:
        """Put a ``failed`` run back as ``pending`` (its reason cleared, its history and checkpoint kept), so that a
        sweep trains it again; False if it is not failed."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = 'pending', reason = NULL WHERE id = ? AND status = 'failed'", (run_id,)
            )
            return cursor.rowcount == 1

    def finish(
        self,
        run_id: str,
        owner: str,
        status: str,
        *,
        step: int,
        reason: str | None = None,
        final_metric: float | None = None,
        best_metric: float | None = None,
        metric_name: str | None = None,
        wall_time: float | None = None,
    ) -> bool:
        """Record the end of a run held by ``owner``: ``finished``, ``failed`` (with a ``reason`` such as
        "ValueError: ..."), ``diverged`` (with a reason such as "non-finite loss (nan) at step 120") or
        ``stopped_early``. False if ``owner`` no longer holds the run."""
        if status not in FINAL_STATUSES:
            raise ValueError(f"finish: status {status!r} is not one of {', '.join(FINAL_STATUSES)}")
        if status in ("failed", DIVERGED) and not reason:
            raise ValueError(f"finish: run {run_id} {status} without a reason")
        with self._write() as conn:
            cursor = conn.execute(
                """UPDATE runs SET status = ?, step = ?, reason = ?, final_metric = ?, best_metric = ?,
                          metric_name = COALESCE(?, metric_name), wall_time = ?, finished = ?, heartbeat = NULL
                   WHERE id = ? AND owner = ? AND status = 'running'""",
                (
                    status,
                    step,
                    reason,
                    _real(final_metric),
                    _real(best_metric),
                    metric_name,
                    wall_time,
                    self.clock(),
                    run_id,
                    owner,
                ),
            )
            if cursor.rowcount == 0:
                self._require(conn, run_id)
            return cursor.rowcount == 1

    def set_checkpoint(self, run_id: str, path: str | os.PathLike, step: int, sha256: str | None = None) -> None:
        """Record the run's latest checkpoint file (as an absolute path), the step it holds and its SHA-256."""
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET checkpoint = ?, checkpoint_step = ?, checkpoint_sha256 = ? WHERE id = ?",
                (str(Path(path).resolve()), step, sha256, run_id),
            )
            self._require(conn, run_id)

    def set_backends(self, run_id: str, backends: list[str], reasons: list[str] | None = None) -> None:
        """Record the backend each layer of the run computes with (what ``auto`` picked, or the one asked for) and,
        where given, why (``reasons``, one per layer: see :class:`~seqdyn.core.autotune.BackendChoice`)."""
        if reasons is not None and len(reasons) != len(backends):
            raise ValueError(f"reasons: one per layer's backend ({len(backends)}), got {len(reasons)}")
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET backends = ?, backend_reasons = ? WHERE id = ?",
                (
                    json.dumps([str(name) for name in backends]),
                    None if reasons is None else json.dumps(list(reasons)),
                    run_id,
                ),
            )
            self._require(conn, run_id)

    def set_threads(self, run_id: str, threads: int) -> None:
        """Record how many CPU threads the run trains with (results can differ in the last bits across counts)."""
        with self._write() as conn:
            conn.execute("UPDATE runs SET threads = ? WHERE id = ?", (threads, run_id))
            self._require(conn, run_id)

    def log_metrics(
        self,
        run_id: str,
        step: int,
        epoch: float | None,
        split: str,
        metrics: dict[str, float],
        wall_time: float | None,
    ) -> None:
        """Record one evaluation (one row per metric; logging a (step, split, name) again replaces it) and
        advance the run's step and epoch."""
        rows = [(run_id, step, epoch, split, name, _real(value), wall_time) for name, value in metrics.items()]
        with self._write() as conn:
            self._require(conn, run_id)
            conn.executemany(
                "INSERT OR REPLACE INTO metrics (run_id, step, epoch, split, name, value, wall_time) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            conn.execute("UPDATE runs SET step = ?, epoch = ? WHERE id = ?", (step, epoch, run_id))

    def retrain(self, run_ids: Iterable[str]) -> None:
        """Put runs back as ``pending`` with nothing of their training kept (result, metrics, checkpoint), so that a
        sweep trains them again from the start: for finished runs whose model must be measured again and whose
        checkpoint is gone."""
        with self._write() as conn:
            for run_id in run_ids:
                self._require(conn, run_id)
                conn.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
                conn.execute(_RETRAIN, (run_id,))

    def record_measurements(self, run_id: str, kind: str, values: dict[str, float | None]) -> None:
        """Keep ``values``, measured of run ``run_id``'s trained model by the measurement ``kind`` (a name that
        changes with its parameters), under split :data:`MEASURED_SPLIT` at the run's step, so that the store
        answers again without the checkpoint; the run's step stays as it is."""
        record = self.run(run_id)
        if record is None:
            raise ValueError(f"run {run_id}: not in the results store {self.path}")
        names = {"": 1.0, **values}  # the empty name marks the measurement as kept, whatever it found
        rows = [
            (run_id, record.step, None, MEASURED_SPLIT, f"{kind}{_KIND}{name}", _real(v), None)
            for name, v in names.items()
        ]
        with self._write() as conn:
            conn.executemany(_INSERT_METRIC.replace("INSERT", "INSERT OR REPLACE", 1), rows)

    def measurements(self, run_id: str, kind: str) -> dict[str, float | None] | None:
        """What :meth:`record_measurements` kept of run ``run_id`` for ``kind`` at the run's current step (NaN read
        back as None); None where nothing was."""
        record, prefix = self.run(run_id), f"{kind}{_KIND}"
        if record is None:
            return None
        kept = {
            row.name.removeprefix(prefix): None if math.isnan(row.value) else row.value
            for row in self.metrics(run_id, split=MEASURED_SPLIT)
            if row.step == record.step and row.name.startswith(prefix)
        }
        return None if "" not in kept else {name: value for name, value in kept.items() if name}

    def _require(self, conn: sqlite3.Connection, run_id: str) -> None:
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise ValueError(f"run {run_id}: not in the results store {self.path}")

    def copy_runs(self, source: Store, checkpoints: dict[str, str | None], origin: str) -> None:
        """Copy the runs named by ``checkpoints`` from ``source`` — their rows and metrics, replacing this store's —
        in one transaction, each run's checkpoint path replaced by its value there (where the file now is, None:
        none); a run ``running`` there becomes ``interrupted`` here (its process is not this machine's).  Each is
        recorded in ``merged_runs`` with ``origin`` and the time."""
        columns = self._run_columns()
        if source._run_columns() != columns:
            raise ValueError(f"{source.path}: another schema than {self.path}; open it once with `seqdyn report`")
        rows = {
            run_id: source._read(f"SELECT {', '.join(columns)} FROM runs WHERE id = ?", (run_id,))[0]
            for run_id in checkpoints
        }
        metrics = {
            run_id: source._read(f"SELECT {', '.join(_METRIC_COLUMNS)} FROM metrics WHERE run_id = ?", (run_id,))
            for run_id in checkpoints
        }
        with self._write() as conn:
            conn.execute(_MERGED_TABLE)
            for run_id, path in checkpoints.items():
                values = dict(zip(columns, rows[run_id]))
                values["checkpoint"] = path
                if values["status"] == "running":
                    values["status"], values["heartbeat"] = "interrupted", None
                conn.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
                conn.execute(
                    f"INSERT OR REPLACE INTO runs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                    tuple(values.values()),
                )
                conn.executemany(_INSERT_METRIC, [tuple(row) for row in metrics[run_id]])
                conn.execute("INSERT OR REPLACE INTO merged_runs VALUES (?, ?, ?)", (run_id, origin, self.clock()))

    def merged_from(self) -> dict[str, str]:
        """The runs copied in from another store (:meth:`copy_runs`) and where each came from, the latest copy."""
        if not self._read("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'merged_runs'"):
            return {}
        return dict(self._read("SELECT run_id, source FROM merged_runs ORDER BY run_id"))

    # --- queries --------------------------------------------------------------------------------------
    def run(self, run_id: str) -> RunRecord | None:
        """The run with this id, or None."""
        columns = self._run_columns()
        rows = self._read(f"SELECT {self._selected(columns)} FROM runs WHERE id = ?", (run_id,))
        return _run_record(rows[0], columns) if rows else None

    def runs(self, sweep: str | None = None, status: str | Iterable[str] | None = None) -> list[RunRecord]:
        """Runs in the order they were added, optionally of one sweep and with one status (or several)."""
        where, params = [], []
        if sweep is not None:
            where.append("sweep = ?")
            params.append(sweep)
        if status is not None:
            wanted = [status] if isinstance(status, str) else list(status)
            unknown = sorted(set(wanted) - set(STATUSES))
            if unknown:
                raise ValueError(f"runs: unknown status {', '.join(unknown)}; statuses: {', '.join(STATUSES)}")
            where.append(f"{self._status()} IN ({', '.join('?' * len(wanted))})")
            params.extend(wanted)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        columns = self._run_columns()
        rows = self._read(f"SELECT {self._selected(columns)} FROM runs{clause} ORDER BY rowid", params)
        return [_run_record(row, columns) for row in rows]

    def _run_columns(self) -> tuple[str, ...]:
        """The run fields the file holds: a store of an older schema opened read-only lacks the newest."""
        present = {row[1] for row in self._read("PRAGMA table_info(runs)")}
        return tuple(name for name in _RUN_COLUMNS if name in present)

    def _status(self) -> str:
        """The SQL of a run's status: the column, or in a store of a schema before :data:`DIVERGED_SCHEMA` opened
        read-only (so not migrated), the status the migration would give it."""
        if self._read("PRAGMA user_version")[0][0] >= DIVERGED_SCHEMA:
            return "status"
        return f"(CASE WHEN {_DIVERGED_BEFORE} THEN '{DIVERGED}' ELSE status END)"

    def _selected(self, columns: tuple[str, ...]) -> str:
        status = self._status()
        return ", ".join(status if name == "status" else name for name in columns)

    def sweeps(self) -> list[str]:
        """The sweep names in the store, in the order their first run was added."""
        rows = self._read("SELECT sweep FROM runs WHERE sweep IS NOT NULL GROUP BY sweep ORDER BY MIN(rowid)")
        return [row[0] for row in rows]

    def status_counts(self, sweep: str | None = None) -> dict[str, int]:
        """How many runs (of ``sweep``, or all) have each status; every status is a key."""
        clause, params = (" WHERE sweep = ?", (sweep,)) if sweep is not None else ("", ())
        status = self._status()
        counts = dict(self._read(f"SELECT {status}, COUNT(*) FROM runs{clause} GROUP BY {status}", params))
        return {status: counts.get(status, 0) for status in STATUSES}

    def metrics(self, run_id: str | None = None, split: str | None = None) -> list[MetricRow]:
        """Metric rows ordered by run, step, split and name, optionally of one run and one split."""
        where, params = [], []
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if split is not None:
            where.append("split = ?")
            params.append(split)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._read(
            f"SELECT {', '.join(_METRIC_COLUMNS)} FROM metrics{clause} ORDER BY run_id, step, split, name", params
        )
        return [_metric_row(row) for row in rows]

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check``: ``"ok"`` for an intact file."""
        return "; ".join(row[0] for row in self._read("PRAGMA integrity_check"))

    # --- export ---------------------------------------------------------------------------------------
    def export(self, path: str | os.PathLike, format: str = "csv") -> dict[str, Path]:
        """Write ``runs.<format>`` (one row per run, config flattened to dotted columns such as
        ``model.mixer``) and ``metrics.<format>`` into the directory ``path`` (created if needed).

        Parquet needs ``pyarrow`` (``pip install 'seqdyn[parquet]'``). Returns ``{"runs": path, "metrics": path}``.
        """
        if format not in EXPORT_FORMATS:
            raise ValueError(f"export: unknown format {format!r}; formats: {', '.join(EXPORT_FORMATS)}")
        if format == "parquet":
            _require_pyarrow()
        directory = Path(path)
        if directory.exists() and not directory.is_dir():
            raise ValueError(f"export: {directory} exists and is not a directory")
        directory.mkdir(parents=True, exist_ok=True)
        tables = {"runs": self._run_table(), "metrics": [asdict(m) for m in self.metrics()]}
        headers = {"runs": _header(tables["runs"], _run_fixed_columns()), "metrics": list(_METRIC_COLUMNS)}
        written = {}
        for table, rows in tables.items():
            written[table] = directory / f"{table}.{format}"
            writer = _write_csv if format == "csv" else _write_parquet
            writer(written[table], headers[table], rows)
        return written

    def _run_table(self) -> list[dict[str, Any]]:
        rows = []
        for record in self.runs():
            row = {key: _cell(value) for key, value in asdict(record).items() if key != "config"}
            config = dict(record.config)
            config.pop("name", None)
            row.update({key: _cell(value) for key, value in flatten(config).items()})
            rows.append(row)
        return rows


# --- helpers ----------------------------------------------------------------------------------------------
def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one mapping with dotted keys (``{"model": {"mixer": m}}`` -> ``{"model.mixer": m}``);
    empty mappings vanish, lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def _acquire(path: Path, readonly: bool) -> tuple[tuple[int, int, int, bool], _Shared]:
    """This process's connection to the store ``path``, opened and checked when it has none.

    A read-only store shares a writable connection the process already has; two connections of one process
    to one file (a read-only one and a writable one) are safe, as SQLite keeps their locks together."""
    with _CONNECTIONS_LOCK:
        _check_path(path, readonly)
        found = _registered(path, readonly) if path.exists() else None
        if found is not None:
            found[1].users += 1
            if _CONNECTIONS.get(found[0]) is found[1]:  # else a store collected meanwhile closed it
                return found
        conn = _open(path, readonly)
        stat = path.stat()
        key = (os.getpid(), stat.st_dev, stat.st_ino, readonly)
        shared = _CONNECTIONS[key] = _Shared(conn, threading.RLock(), users=1)
        return key, shared


def _registered(path: Path, readonly: bool) -> tuple[tuple[int, int, int, bool], _Shared] | None:
    stat = path.stat()
    for mode in (False, True) if readonly else (False,):
        key = (os.getpid(), stat.st_dev, stat.st_ino, mode)
        if key in _CONNECTIONS:
            return key, _CONNECTIONS[key]
    return None


def _release(key: tuple[int, int, int, bool]) -> None:
    """One store of this process leaves the connection ``key``; the last one closes it."""
    if key[0] != os.getpid():
        return
    with _CONNECTIONS_LOCK:
        shared = _CONNECTIONS[key]
        shared.users -= 1
        if shared.users == 0:
            del _CONNECTIONS[key]
            with shared.lock:
                shared.conn.close()


def _open(path: Path, readonly: bool) -> sqlite3.Connection:
    """A new checked connection to ``path``; a store that could not be made leaves no file behind."""
    existed = path.exists()
    try:
        return _connect_readonly(path) if readonly else _connect_writable(path)
    except ValueError:
        if not existed:
            for suffix in ("", "-wal", "-shm"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
        raise


def _connect_writable(path: Path) -> sqlite3.Connection:
    """Open read-write; switch to WAL and write the schema only where the file lacks them."""
    conn = _sqlite_connect(path, str(path), uri=False)
    with _closing_on_error(conn, path):
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        current = _check_schema(conn, path, readonly=False)
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            _set_wal(conn, path)
        conn.execute("PRAGMA synchronous = NORMAL")  # in WAL mode: durable across process crashes
        if not current:  # foreign keys off: a migration may copy a table and drop the old one (outside a transaction)
            _create_schema(conn)
        conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """Open read-only (``mode=ro``): nothing is written to the file, whatever the command does."""
    uri = path.resolve().as_uri()
    conn = _sqlite_connect(path, f"{uri}?mode=ro", uri=True)
    if _on_read_only_media(conn):
        conn.close()
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:  # immutable would ignore the writes it holds
            raise ValueError(
                f"results store {path}: {wal.name} holds writes that SQLite reads only with a -shm "
                f"file beside it, and the folder is read-only; copy the store's files to a writable one"
            )
        conn = _sqlite_connect(path, f"{uri}?mode=ro&immutable=1", uri=True)
    with _closing_on_error(conn, path):
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        _check_schema(conn, path, readonly=True)
    return conn


def _on_read_only_media(conn: sqlite3.Connection) -> bool:
    """True where SQLite cannot make the ``-shm`` file beside a WAL store: the folder is not writable, so no
    writer can be at work there either, and the file may be read as ``immutable`` (if no ``-wal`` holds writes)."""
    try:
        conn.execute("PRAGMA user_version").fetchone()
    except sqlite3.OperationalError as error:
        return getattr(error, "sqlite_errorname", "").startswith(("SQLITE_READONLY_DIRECTORY", "SQLITE_CANTOPEN"))
    except sqlite3.DatabaseError:
        pass  # not a database: the schema check says so
    return False


def _sqlite_connect(path: Path, target: str, uri: bool) -> sqlite3.Connection:
    try:
        return sqlite3.connect(target, uri=uri, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as error:
        raise ValueError(f"results store {path}: cannot open ({error})") from None


@contextlib.contextmanager
def _closing_on_error(conn: sqlite3.Connection, path: Path) -> Iterator[None]:
    """Close ``conn`` on any error; SQLite's errors become one-line ``ValueError``s naming the file."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        conn.close()
        if getattr(error, "sqlite_errorname", "") == "SQLITE_NOTADB":
            raise ValueError(f"results store {path}: not a SQLite database") from None
        raise ValueError(f"results store {path}: cannot use the file ({error})") from None
    except BaseException:
        conn.close()
        raise


def check_store_path(path: str | os.PathLike) -> None:
    """Raise ValueError (naming the path and the reason) unless a store can be written at ``path``: what opening
    it would check, without creating anything (``sweep --dry-run``)."""
    _check_path(Path(path), readonly=False)


def _check_path(path: Path, readonly: bool) -> None:
    """Raise ValueError (naming the path and the reason) unless ``path`` can hold a store; opens nothing (closing
    a descriptor of the file would drop this process's SQLite locks on it), so the file's header is left for
    SQLite to check."""

    def fail(reason: str) -> None:
        raise ValueError(f"results store {path}: {reason}")

    if path.is_dir():
        fail("is a directory")
    if readonly:
        if not path.exists():
            fail("no such file")
        if not os.access(path, os.R_OK):
            fail("file is not readable")
    else:
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.exists():
            fail(f"directory {parent} does not exist")
        if not parent.is_dir():
            fail(f"{parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            fail(f"directory {parent} is not writable")
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            fail("file is not writable")


def _check_schema(conn: sqlite3.Connection, path: Path, readonly: bool) -> bool:
    """Refuse a SQLite file that another program made, or a newer seqdyn; reads only. True when the file holds
    this seqdyn's schema (nothing to create or migrate)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version > SCHEMA_VERSION:
        raise ValueError(f"results store {path}: schema {version} is newer than this seqdyn's ({SCHEMA_VERSION})")
    if (tables or readonly) and not {"runs", "metrics"} <= tables:
        names = ", ".join(sorted(tables)) or "none"
        raise ValueError(f"results store {path}: a SQLite database that is not a seqdyn store (tables: {names})")
    return version == SCHEMA_VERSION and {"runs", "metrics"} <= tables


def _set_wal(conn: sqlite3.Connection, path: Path) -> None:
    """Switch to WAL (persistent in the file); retried because the switch may not wait on another's lock."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower()
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
        if mode != "wal":
            raise ValueError(f"results store {path}: the file system refuses WAL mode (journal mode stays {mode!r})")
        return


def _create_schema(conn: sqlite3.Connection) -> None:
    """Create the tables and set the version, unless another process did so since this one looked."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            conn.execute("COMMIT")
            return
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        _migrate(conn, version)
        if conn.execute("PRAGMA foreign_key_check").fetchall():
            raise ValueError("results store: a migration left metrics of runs that are not in the store")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring the tables from schema ``version`` (0: just created) to :data:`SCHEMA_VERSION`."""
    for step in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
        migration = _MIGRATIONS[step]
        if callable(migration):
            migration(conn)
            continue
        for statement in migration:
            conn.execute(statement)


def _add_diverged_status(conn: sqlite3.Connection) -> None:
    """Schema 5: the runs table's status check admits ``diverged`` (SQLite changes a check only by copying the table
    into a new one, with foreign keys off so that dropping the old one leaves the metrics be), and the runs that
    diverged before become ``diverged``."""
    (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone()
    current, before = _status_check(STATUSES), _status_check(s for s in STATUSES if s != DIVERGED)
    if current not in sql:
        if before not in sql:
            raise ValueError(f"results store: the runs table's status check is neither schema 4's nor 5's: {sql}")
        conn.execute(sql.replace("CREATE TABLE runs", "CREATE TABLE runs_of_schema_5", 1).replace(before, current))
        conn.execute("INSERT INTO runs_of_schema_5 SELECT * FROM runs")
        conn.execute("DROP TABLE runs")
        conn.execute("ALTER TABLE runs_of_schema_5 RENAME TO runs")
        for statement in _SCHEMA.split(";"):
            if "CREATE INDEX" in statement and " ON runs " in statement:
                conn.execute(statement)
    conn.execute(f"UPDATE runs SET status = '{DIVERGED}' WHERE {_DIVERGED_BEFORE}")


def _config_json(config: dict[str, Any]) -> str:
    if not isinstance(config, dict):
        raise ValueError(f"add_run: config must be a mapping (RunConfig.canonical()), got {type(config).__name__}")
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"add_run: config is not plain JSON data ({error})") from None


_RETRAIN = (
    "UPDATE runs SET status = 'pending', reason = NULL, step = 0, epoch = NULL, metric_name = NULL, "
    "final_metric = NULL, best_metric = NULL, checkpoint = NULL, checkpoint_step = NULL, checkpoint_sha256 = NULL, "
    "started = NULL, finished = NULL, wall_time = NULL, owner = NULL, heartbeat = NULL WHERE id = ?"
)
_KIND = "::"  # between a measurement's kind and a value's name in the metric name of what it kept


def _real(value: float | None) -> float | None:
    """A metric value for SQLite: floats as floats, NaN as NULL (SQLite has no NaN)."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _run_record(row: tuple, columns: tuple[str, ...] = _RUN_COLUMNS) -> RunRecord:
    data = dict(zip(columns, row))
    data["config"] = json.loads(data["config"])
    for name in ("backends", "backend_reasons"):
        if data.get(name) is not None:
            data[name] = json.loads(data[name])
    return RunRecord(**data)


def _metric_row(row: tuple) -> MetricRow:
    data = dict(zip(_METRIC_COLUMNS, row))
    if data["value"] is None:
        data["value"] = math.nan
    return MetricRow(**data)


def _cell(value: Any) -> Any:
    """A flat-table cell: lists (per-layer mixers, betas) as JSON text."""
    return json.dumps(value) if isinstance(value, (list, tuple)) else value


def _run_fixed_columns() -> list[str]:
    return [name for name in _RUN_COLUMNS if name != "config"]


def _header(rows: list[dict[str, Any]], first: list[str]) -> list[str]:
    header = list(first)
    seen = set(header)
    for row in rows:
        for key in row:
            if key not in seen:
                seen.add(key)
                header.append(key)
    return header


def _write_csv(path: Path, header: list[str], rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, restval="")
        writer.writeheader()
        writer.writerows(rows)


def _require_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            "export to parquet needs the package pyarrow, which is not installed; "
            "install it with: pip install 'seqdyn[parquet]'",
            name="pyarrow",
        ) from None


def _write_parquet(path: Path, header: list[str], rows: list[dict[str, Any]]) -> None:
    import pyarrow
    import pyarrow.parquet

    columns = {key: _arrow_column([row.get(key) for row in rows]) for key in header}
    pyarrow.parquet.write_table(pyarrow.table(columns), path)


def _arrow_column(values: list[Any]) -> Any:
    """An Arrow array; a column mixing kinds (a number in one run, text in another) becomes text."""
    import pyarrow

    try:
        return pyarrow.array(values)
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError):
        return pyarrow.array([None if v is None else v if isinstance(v, str) else json.dumps(v) for v in values])
