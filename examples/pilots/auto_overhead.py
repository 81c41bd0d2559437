"""What ``backend="auto"`` costs a training run and what it saves, for three runs of a reproduction's scale.

For the first, the middle and the last run (default: ``dsf_qlstm_transition`` at the ``cpu`` scale) it builds the
run on a small slice of its data with an empty cache of choices (``SEQDYN_AUTOTUNE=memory``), trains 3 steps and
evaluates once (where ``auto`` measures: the first training step and the first evaluation), then times 10 steps;
again with every layer pinned to ``--against`` (default ``scan``, what that reproduction pinned by hand before
``auto`` measured).  It prints the seconds ``auto`` spent measuring, the run's wall time estimated as steps × seconds
per step with each choice, and the measuring's share of the run with ``auto``.

Run: python examples/pilots/auto_overhead.py [NAME] [--scale cpu] [--against scan] (one JSON line per run, then a
``RESULT`` line).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from seqdyn import reproduce
from seqdyn.core import autotune
from seqdyn.reproduce.runner import named_sweeps
from seqdyn.train.config import RunConfig
from seqdyn.train.loop import Plan, Trainer

WARMUP_STEPS, TIMED_STEPS = 3, 10


class MeasuringClock:
    """Adds up the seconds :func:`seqdyn.core.autotune.measure` takes while installed."""

    def __init__(self):
        self.seconds, self.calls, self._measure = 0.0, 0, autotune.measure

    def __enter__(self):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return self._measure(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        autotune.measure = timed
        return self

    def __exit__(self, *exc):
        autotune.measure = self._measure


def timed_run(config: RunConfig, backend: str) -> dict:
    """Seconds per step of ``config`` with ``train.backend = backend`` and the seconds ``auto`` spent measuring."""
    batch = config.train.batch_size
    task = config.task.model_copy(update={"train_examples": batch * 8, "test_examples": batch})
    train = config.train.model_copy(update={"backend": backend})
    autotune.clear_cache()
    with tempfile.TemporaryDirectory() as folder, MeasuringClock() as clock:
        trainer = Trainer(
            config.model_copy(update={"task": task, "train": train}), checkpoint_dir=folder, progress=False
        )
        for _ in range(WARMUP_STEPS):
            trainer.train_step()
        trainer.evaluate_and_record(0.0, 0.0)
        start = time.perf_counter()
        for _ in range(TIMED_STEPS):
            trainer.train_step()
        per_step = (time.perf_counter() - start) / TIMED_STEPS
    return {
        "backends": trainer.backends,
        "s_per_step": per_step,
        "measuring_s": clock.seconds,
        "measured_shapes": clock.calls,
    }


def compare(name: str, scale: str, against: str) -> dict:
    runs = [config for sweep in named_sweeps(reproduce.get(name), scale) for config in sweep.expand()]
    steps = [Plan.of(config).total_steps for config in runs]
    rows = []
    for index in sorted({0, len(runs) // 2, len(runs) - 1}):
        auto, pinned = timed_run(runs[index], "auto"), timed_run(runs[index], against)
        rows.append(
            {
                "run": index,
                "steps": steps[index],
                "auto": auto,
                against: pinned,
                "run_s_auto": steps[index] * auto["s_per_step"],
                f"run_s_{against}": steps[index] * pinned["s_per_step"],
                "measuring_share": auto["measuring_s"] / (steps[index] * auto["s_per_step"]),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return {
        "name": name,
        "scale": scale,
        "runs": len(runs),
        "timed": len(rows),
        "mean_s_per_step_auto": sum(r["auto"]["s_per_step"] for r in rows) / len(rows),
        f"mean_s_per_step_{against}": sum(r[against]["s_per_step"] for r in rows) / len(rows),
        "max_measuring_share": max(r["measuring_share"] for r in rows),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", nargs="?", default="dsf_qlstm_transition")
    parser.add_argument("--scale", default="cpu", choices=("smoke", "cpu", "paper"))
    parser.add_argument("--against", default="scan", help="the backend to compare auto with")
    args = parser.parse_args(argv)
    os.environ["SEQDYN_AUTOTUNE"] = "memory"  # a cold cache for every run, and no file written
    print("RESULT " + json.dumps(compare(args.name, args.scale, args.against)), flush=True)


if __name__ == "__main__":
    main()
