"""Runs for the training tests: a tiny MQAR run that learns; synthetic runs for the store and report tests (real
RunConfigs of tiny MQAR / LM tasks, fake training)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from seqdyn.train.config import RunConfig, SweepConfig
from seqdyn.train.store import Store

MQAR = {
    "name": "mqar",
    "params": {"seq_len": 16, "num_kv_pairs": 2, "vocab_size": 64},
    "train_examples": 64,
    "test_examples": 16,
}


def tiny(**changes) -> dict:
    """A tiny MQAR run that a 2-layer softmax model learns in a few hundred steps (the setting of
    tests/models/test_learning.py: init_std 0.1, no MLP, constant learning rate)."""
    config = {
        "name": "tiny",
        "model": {"mixer": "softmax_attention", "d_model": 32, "layers": 2, "mlp": "none", "init_std": 0.1},
        "task": {
            "name": "mqar",
            "params": {"seq_len": 16, "num_kv_pairs": 2, "vocab_size": 32},
            "train_examples": 4096,
            "test_examples": 256,
        },
        "optimizer": {"lr": 3e-3, "weight_decay": 0.1},
        "schedule": {"kind": "constant"},
        "train": {"steps": 400, "batch_size": 64, "eval_every": 50, "early_stop": {"threshold": 0.95}},
    }
    for path, value in changes.items():
        node = config
        *keys, last = path.split(".")
        for key in keys:
            node = node.setdefault(key, {})
        node[last] = value
    return config


def sweep_configs(
    axes: dict[str, list[Any]], task: dict[str, Any] | None = None, name: str = "demo"
) -> list[RunConfig]:
    """The runs of a sweep over ``axes`` on ``task`` (tiny MQAR by default)."""
    data = {"name": name, "task": task or MQAR, "model": {"layers": 1}, "train": {"steps": 20}, "sweep": axes}
    return SweepConfig.model_validate(data).expand()


def add_finished(
    store: Store,
    config: RunConfig,
    final: float,
    *,
    sweep: str | None = "demo",
    metric: str = "accuracy",
    status: str = "finished",
    steps: int = 20,
) -> str:
    """Add ``config`` as a run that evaluated twice and ended with ``final``; returns its id."""
    run_id = config.run_id
    store.add_run(run_id, config.name, config.canonical(), sweep=sweep)
    assert store.claim(run_id, "tester")
    store.log_metrics(run_id, steps // 2, 0.5, "test", {metric: final / 2, "loss": 2.0}, 1.0)
    store.log_metrics(run_id, steps, 1.0, "test", {metric: final, "loss": 1.0}, 2.0)
    store.finish(
        run_id, "tester", status, step=steps, final_metric=final, best_metric=final, metric_name=metric, wall_time=2.5
    )
    return run_id


def worker(path: str, owner: str, run_ids: list[str], configs: list[dict], barrier: Any, steps: int) -> None:
    """A sweep process: add every run, then claim what it can and log its metrics; both workers race."""
    store = Store(path)
    for run_id, config in zip(run_ids, configs):
        store.add_run(run_id, config["name"], config, sweep="race")
    barrier.wait()
    for run_id in run_ids:
        if not store.claim(run_id, owner):
            continue
        for step in range(1, steps + 1):
            store.log_metrics(run_id, step, step / steps, "test", {"accuracy": step / steps, "loss": 1 / step}, 0.1)
            store.log_metrics(run_id, step, step / steps, "train", {"loss": 1 / step}, 0.1)
            store.heartbeat(run_id, owner)
        store.finish(
            run_id,
            owner,
            "finished",
            step=steps,
            final_metric=1.0,
            best_metric=1.0,
            metric_name="accuracy",
            wall_time=0.1,
        )
    store.close()


def unprivileged(command: list[str], locked: Path) -> list[str]:
    """``command`` as a process that file permissions bind (to read a store on read-only media, simulated by a
    read-only folder ``locked``): as root, without the capabilities that override them (``setpriv``); skips
    where that cannot be had."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner"] if setpriv else []
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", f"open({str(locked / 'probe')!r}, 'w')"], capture_output=True
    )
    if not prefix or probe.returncode == 0:
        (locked / "probe").unlink(missing_ok=True)
        pytest.skip("running as root without a way to drop the capabilities that ignore file permissions")
    return [*prefix, *command]


def quick_run(**train) -> dict:
    """A run of a few milliseconds a step: one small softmax layer on a short MQAR (``train`` overrides)."""
    return {
        "name": "tiny",
        "model": {"mixer": "softmax_attention", "d_model": 16, "layers": 1, "mlp": "none"},
        "task": {
            "name": "mqar",
            "params": {"seq_len": 16, "num_kv_pairs": 2, "vocab_size": 32},
            "train_examples": 256,
            "test_examples": 32,
        },
        "train": {"steps": 20, "batch_size": 16, "eval_every": 5, **train},
    }


def metrics(store: Store) -> dict:
    """Every metric of the store by (step, split, name)."""
    return {(m.step, m.split, m.name): m.value for m in store.metrics()}


def time_up_after(monkeypatch, steps: int) -> None:
    """Make the time limit (seqdyn.train.timelimit) reached once ``steps`` training steps are done, the check before
    the run starts included."""
    from seqdyn.train import loop

    checks = {"count": 0}

    def time_is_up(moment=None):
        checks["count"] += 1
        return checks["count"] > steps

    monkeypatch.setattr(loop, "time_is_up", time_is_up)
