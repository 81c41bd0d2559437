"""Sweeps: expand a sweep config, record every run in the store, and train what is not done yet.

Runs are trained in this process (``workers=1``), in a pool of local processes (``workers > 1``) or as Ray
tasks (``use_ray``: ``RAY_ADDRESS`` picks a cluster, otherwise a local Ray instance starts; one GPU per task
where GPUs exist).  Every worker claims a run in the store before training it, so concurrent sweeps never train
the same run twice; a sweep started again skips finished runs and resumes interrupted ones from their last
checkpoint.  On a cluster, the store and the checkpoint directory must be on a file system every node sees.

Every run is checked before the first one starts (:func:`check_before_start`); a run that fails while it trains
is recorded ``failed`` with its error (``diverged`` where its loss stopped being finite) and the sweep goes on,
while an error of the machine (a full disk, an unreadable store, Ctrl-C) stops the sweep and leaves the run
resumable.

Local workers share the cores: each gets ``max(1, cores // workers)`` torch threads and a passive OpenMP wait
policy, set in its environment before torch starts its thread pool (the count is recorded with each run). Ctrl-C
or SIGTERM stops the sweep and its workers within a step, their runs released as ``interrupted``; a worker whose
sweep died (even by SIGKILL) releases its run and ends too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import active_children, get_context
from pathlib import Path

import torch

from seqdyn import mixers
from seqdyn.train.checkpoint import checkpoint_dir_for
from seqdyn.train.config import RunConfig, SweepConfig, validated_run
from seqdyn.train.interrupt import Interrupted, exit_on_signals, exit_with_parent, signals_interrupt
from seqdyn.train.loop import RunResult, resolve_device, train_run
from seqdyn.train.ownership import default_owner
from seqdyn.train.store import FINAL_STATUSES

DONE = FINAL_STATUSES

log = logging.getLogger("seqdyn")


def expand(config: RunConfig | SweepConfig) -> list[RunConfig]:
    return config.expand() if isinstance(config, SweepConfig) else [config]


def check_before_start(
    runs: list[RunConfig], checkpoint_dir: str | Path, *, use_ray: bool = False, workers: int = 1
) -> None:
    """What a config cannot say about itself, checked before the store is touched: every run's device exists
    on this machine (unless Ray places the runs on a cluster, ``RAY_ADDRESS``), the checkpoint folder can be
    made, and where other processes train (``workers > 1``, Ray) no mixer is a name only this process knows
    (``seqdyn.mixers.register``).  Raises ``ValueError`` naming the run and the field."""
    if use_ray or workers > 1:
        _check_portable_mixers(runs)
    elsewhere = use_ray and os.environ.get("RAY_ADDRESS")
    for run in () if elsewhere else runs:
        try:
            resolve_device(run.train.device)
        except ValueError as error:
            raise ValueError(f"run {run.name!r}: {error}" if len(runs) > 1 else str(error)) from None
    folder = Path(checkpoint_dir)
    existing = next(path for path in (folder, *folder.parents) if path.exists())
    if not existing.is_dir():
        raise ValueError(
            f"checkpoint folder {folder}: {existing} is a file, not a folder; move it away or "
            f"choose another store (checkpoints live beside it)"
        )


def _check_portable_mixers(runs: list[RunConfig]) -> None:
    for run in runs:
        for name, _ in run.model.layer_mixers():
            if mixers.known_here_only(name):
                raise ValueError(
                    f"run {run.name!r}: model.mixer: {name!r} was registered in this process "
                    "(seqdyn.mixers.register), which worker processes do not see; name it by its "
                    "import path (mixer: my_package.my_module:MyMixer) or train with one worker"
                )


def register(runs: list[RunConfig], sweep: str, store) -> None:
    """Add the runs of sweep ``sweep`` (:func:`expand`) to the store, pending unless already known."""
    for run in runs:
        store.add_run(run.run_id, run.name, run.canonical(), sweep)


def train_or_record_failure(config: RunConfig, store, **options) -> RunResult:
    """:func:`train_run`, except that an error of the run itself (anything but the machine's: ``OSError``, the
    store's ``sqlite3.Error``, Ctrl-C) is recorded as the run's ``failed`` reason, so that the sweep goes on."""
    owner = default_owner()
    try:
        return train_run(config, store, owner=owner, **options)
    except (OSError, sqlite3.Error):
        raise
    except Exception as error:
        reason = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
        record = store.run(config.run_id)
        if store.claim(config.run_id, owner, stale_after=float("inf")):  # not while another process trains it
            store.finish(config.run_id, owner, "failed", step=record.step or 0, reason=reason)
        return _from_record(store.run(config.run_id))


def train_group(configs: list[RunConfig], store, **options) -> list[RunResult]:
    """Train the runs of one group of :func:`~seqdyn.train.stacked.stacks`: a run alone by
    :func:`train_or_record_failure`, several stacked (:func:`~seqdyn.train.stacked.train_stack`).  A stack that
    fails as a stack (a model ``vmap`` cannot batch) is released and its runs trained one at a time, with a
    warning naming the error."""
    from seqdyn.train.stacked import train_stack

    if len(configs) > 1:
        try:
            return train_stack(configs, store, **options)
        except (OSError, sqlite3.Error):
            raise
        except Exception as error:
            log.warning(
                "runs %s could not train stacked (%s: %s); training them one at a time",
                ", ".join(config.name for config in configs),
                type(error).__name__,
                (str(error).splitlines() or [""])[0],
            )
    return [train_or_record_failure(config, store, **options) for config in configs]


def _train_in_worker(
    configs_data: list[dict], store_path: str, checkpoint_dir: str, threads: int, sweep: str
) -> list[RunResult]:
    from seqdyn.train.store import Store

    torch.set_num_threads(threads)
    configs = [validated_run(data, f"run {data.get('name')!r}") for data in configs_data]
    return train_group(configs, Store(store_path), checkpoint_dir=checkpoint_dir, progress=False, sweep=sweep)


@dataclass(frozen=True)
class PlannedRun:
    """What a sweep would do with one of its runs: ``action`` is ``"train"`` (new or pending), ``"resume"``
    (interrupted or left running), ``"retry"`` (failed, with ``retry_failed``) or ``"done"`` (skipped)."""

    run_id: str
    name: str
    action: str
    status: str | None  # in the store; None: not in it yet


def plan_sweep(config: RunConfig | SweepConfig, store_path: str | Path, retry_failed: bool = False) -> list[PlannedRun]:
    """What :func:`run_sweep` would do with each run of ``config``, read from the store without writing to it
    (``seqdyn sweep --dry-run``, and the summary of what a sweep trained)."""
    from seqdyn.train.store import Store

    store = Store(store_path, readonly=True) if Path(store_path).exists() else None
    planned = []
    for run in expand(config):
        record = store.run(run.run_id) if store is not None else None
        status = record.status if record is not None else None
        if status in DONE and not (retry_failed and _retried(record)):
            action = "done"
        elif status == "failed":
            action = "retry"
        elif status in (None, "pending"):
            action = "train"
        else:
            action = "resume"
        planned.append(PlannedRun(run.run_id, run.name, action, status))
    return planned


def _retried(record) -> bool:
    """Whether ``retry_failed`` trains this run again: it failed (a diverged run did not fail: it is ``diverged``)."""
    return record.status == "failed"


@signals_interrupt()
def run_sweep(
    config: RunConfig | SweepConfig,
    store_path: str | Path,
    *,
    workers: int = 1,
    use_ray: bool = False,
    checkpoint_dir: str | Path | None = None,
    progress: bool = True,
    on_result=None,
    retry_failed: bool = False,
    stack: int = 1,
) -> list[RunResult]:
    """Train every run of ``config`` that is not done; returns one result per run of the sweep (in order).
    ``retry_failed``: train again the runs that failed for another reason than a diverged loss (which the same
    config would repeat).  ``stack``: up to that many runs that differ only in their seed and learning rate train
    as one batched model (:mod:`seqdyn.train.stacked`), each group on one worker."""
    from seqdyn.train.stacked import stacks
    from seqdyn.train.store import Store

    if workers < 1:
        raise ValueError(f"workers: expected at least 1, got {workers}")
    if stack < 1:
        raise ValueError(f"stack: expected at least 1 run per batched model, got {stack}")
    checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else checkpoint_dir_for(store_path)
    runs = expand(config)
    check_before_start(runs, checkpoint_dir, use_ray=use_ray, workers=workers if len(runs) > 1 else 1)
    store = Store(store_path)
    register(runs, config.name, store)
    if retry_failed:
        for run in runs:
            if _retried(store.run(run.run_id)):
                store.requeue(run.run_id)
    groups = stacks([run for run in runs if store.run(run.run_id).status not in DONE], stack)
    results: dict[str, RunResult] = {}
    if use_ray:
        results = _run_ray(groups, str(store_path), str(checkpoint_dir), config.name, on_result)
    elif workers > 1 and len(groups) > 1:
        results = _run_processes(groups, str(store_path), str(checkpoint_dir), config.name, workers, on_result)
    else:
        for group in groups:
            for result in train_group(
                group, store, checkpoint_dir=checkpoint_dir, progress=progress, sweep=config.name
            ):
                results[result.run_id] = result
                if on_result is not None:
                    on_result(result)
    return [results.get(run.run_id) or _from_record(store.run(run.run_id)) for run in runs]


def available_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def worker_threads(workers: int, cores: int | None = None) -> int:
    """Torch threads per local worker: the cores this process may run on, shared out, at least one."""
    return max(1, (available_cores() if cores is None else cores) // workers)


@contextlib.contextmanager
def worker_environment(threads: int) -> Iterator[None]:
    """``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` = ``threads`` and ``OMP_WAIT_POLICY=PASSIVE`` (idle OpenMP
    threads sleep instead of spinning against the other workers) in ``os.environ`` while worker processes
    start: they inherit it and read it before torch starts its thread pool. Restored afterwards."""
    values = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _start_worker(parent_pid: int, threads: int) -> None:
    """A local worker's set-up: end with the sweep, use ``threads`` threads, stop at once while idle."""
    exit_with_parent(parent_pid)
    exit_on_signals()
    torch.set_num_threads(threads)


def _train_in_local_worker(*args) -> RunResult:
    try:
        return _train_in_worker(*args)
    except Interrupted as interrupted:  # the run is released: end the worker rather than take the next run
        os._exit(interrupted.exit_status)


def _run_processes(groups, store_path, checkpoint_dir, sweep, workers, on_result) -> dict[str, RunResult]:
    threads = worker_threads(workers)
    results, futures = {}, []
    started_before = set(active_children())
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=get_context("spawn"), initializer=_start_worker, initargs=(os.getpid(), threads)
    )
    try:
        with worker_environment(threads):
            futures += [
                pool.submit(
                    _train_in_local_worker,
                    [run.canonical() for run in group],
                    store_path,
                    checkpoint_dir,
                    threads,
                    sweep,
                )
                for group in groups
            ]
            for future in as_completed(futures):
                for result in future.result():
                    results[result.run_id] = result
                    if on_result is not None:
                        on_result(result)
    except BaseException:  # Ctrl-C, SIGTERM or an error: the workers release their runs and end
        for future in futures:
            future.cancel()
        _stop_workers(set(active_children()) - started_before)
        raise
    finally:
        pool.shutdown()
    return results


def _stop_workers(workers, grace: float = 5.0) -> None:
    """SIGTERM to each worker (it releases its run as interrupted and ends), SIGKILL to one still alive after
    ``grace`` seconds (its run, held by a dead process, is taken over by the next sweep)."""
    for worker in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            worker.kill()
            worker.join()


def _run_ray(groups, store_path, checkpoint_dir, sweep, on_result) -> dict[str, RunResult]:
    try:
        import ray
    except ImportError:
        raise ValueError("--ray: install the 'ray' extra (pip install 'seqdyn[ray]')") from None
    address = os.environ.get("RAY_ADDRESS") or None
    cpus = os.environ.get("SEQDYN_RAY_NUM_CPUS")  # size of a local instance (tests, laptops)
    ray.init(
        address=address,
        num_cpus=int(cpus) if cpus and not address else None,
        ignore_reinit_error=True,
        log_to_driver=False,
    )
    gpus = 1 if torch.cuda.is_available() or (address and ray.cluster_resources().get("GPU", 0) > 0) else 0
    remote = ray.remote(num_cpus=1, num_gpus=gpus)(_train_in_worker)
    refs = [remote.remote([run.canonical() for run in group], store_path, checkpoint_dir, 1, sweep) for group in groups]
    results = {}
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        try:
            finished = ray.get(ready[0])
        except ray.exceptions.RayTaskError as error:
            raise error.cause from None  # the machine's error in the worker (a full disk), not Ray's wrapper of it
        for result in finished:
            results[result.run_id] = result
            if on_result is not None:
                on_result(result)
    return results


def _from_record(record) -> RunResult:
    return RunResult(
        record.id,
        record.name,
        record.status,
        record.step or 0,
        record.metric_name or "",
        record.final_metric,
        record.best_metric,
        {},
        record.wall_time or 0.0,
        record.reason,
    )
