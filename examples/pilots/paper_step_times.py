"""How long a reproduction's scale would take on this machine, from timed training steps of three of its runs.

For each reproduction named (default: all but the language models, which need a corpus), it builds the first, the
middle and the last run of the scale (default ``paper``) on a small slice of their data, trains 3 steps to warm up,
times 10 more, and estimates the scale's wall time as the mean seconds per step × the steps of all its runs, one
run at a time. The device is the runs' own: ``auto`` at the paper scale, so the GPU where there is one.

Run: python examples/pilots/paper_step_times.py [NAME ...] [--scale paper] (one JSON line per timed run, then one
``RESULT`` line per reproduction).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from seqdyn import reproduce
from seqdyn.reproduce.runner import named_sweeps
from seqdyn.train.config import RunConfig
from seqdyn.train.loop import Plan, Trainer

WARMUP_STEPS, TIMED_STEPS = 3, 10


def seconds_per_step(config: RunConfig) -> dict:
    """Seconds per training step of ``config`` on a data slice of 8 batches, and the seconds its set-up took."""
    batch = config.train.batch_size
    task = config.task.model_copy(update={"train_examples": batch * 8, "test_examples": batch})
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        trainer = Trainer(config.model_copy(update={"task": task}), checkpoint_dir=folder, progress=False)
        setup = time.perf_counter() - start
        for _ in range(WARMUP_STEPS):
            trainer.train_step()
        sync()
        start = time.perf_counter()
        for _ in range(TIMED_STEPS):
            trainer.train_step()
        sync()
        per_step = (time.perf_counter() - start) / TIMED_STEPS
    return {
        "device": str(trainer.device),
        "backends": trainer.backends,
        "mixer": config.model.mixer,
        "d_model": config.model.d_model,
        "batch": batch,
        "params": config.task.params,
        "s_per_step": round(per_step, 4),
        "setup_s": round(setup, 2),
    }


def estimate(name: str, scale: str) -> dict:
    """The runs, their steps and the estimated hours of ``name`` at ``scale``, from three timed runs."""
    runs = [config for sweep in named_sweeps(reproduce.get(name), scale) for config in sweep.expand()]
    steps = [Plan.of(config).total_steps for config in runs]
    timed = []
    for index in sorted({0, len(runs) // 2, len(runs) - 1}):
        timed.append({"run": index, "steps": steps[index], **seconds_per_step(runs[index])})
        print(json.dumps(timed[-1]), flush=True)
    mean = sum(run["s_per_step"] for run in timed) / len(timed)
    return {
        "name": name,
        "scale": scale,
        "runs": len(runs),
        "total_steps": sum(steps),
        "devices": sorted({config.train.device for config in runs}),
        "timed": timed,
        "estimate_h": round(mean * sum(steps) / 3600, 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="reproductions (default: every one without a corpus)")
    parser.add_argument("--scale", default="paper", choices=("smoke", "cpu", "paper"))
    args = parser.parse_args(argv)
    names = args.names or [name for name in reproduce.names() if not reproduce.get(name).corpus]
    for name in names:
        print("RESULT " + json.dumps(estimate(name, args.scale)), flush=True)


if __name__ == "__main__":
    main()
