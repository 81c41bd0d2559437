"""A reproduction's cpu-scale runs on whatever device this machine has, each reporting when it left its plateau.

Builds the ``cpu`` scale of each reproduction named (its sweeps exactly, but ``train.device: auto`` and, with
``--steps``, a step budget of its own), trains every run in one pool of ``--workers`` processes into ``--store``,
then prints one JSON line per run: mixer, options that differ, learning rate, seed, best test accuracy, the steps
trained and the first evaluated step whose test accuracy passed ``--level`` (the plateau plus its margin).  Meant
for a GPU: the MQAR models' escape from the plateau is bimodal over seeds, and a CPU cannot afford the seeds.

Run: python examples/pilots/escape_steps.py dsf_mqar_models dsf_qlstm_transition --store pilot.db --workers 16
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from pathlib import Path

from seqdyn import reproduce
from seqdyn.reproduce.protocols.zoology import escape_step as zoology_escape_step
from seqdyn.reproduce.runner import named_sweeps
from seqdyn.train.config import SweepConfig
from seqdyn.train.store import Store
from seqdyn.train.sweep import expand, run_sweep


def pilot_sweeps(name: str, steps: int | None, scale: str = "cpu") -> list[SweepConfig]:
    """The ``scale``'s sweeps of reproduction ``name`` on this machine's device (and ``steps`` where given)."""
    changes = {"device": "auto", **({"steps": steps} if steps else {})}
    return [
        sweep.model_copy(update={"name": f"pilot-{sweep.name}", "train": sweep.train.model_copy(update=changes)})
        for sweep in named_sweeps(reproduce.get(name), scale)
    ]


def escape_step(store: Store, run_id: str, level: float) -> int | None:
    """The first evaluated step whose test accuracy is above ``level``
    (:func:`seqdyn.reproduce.protocols.zoology.escape_step` on the run's test curve as the store holds it, finished or
    not); None if none was."""
    curve = tuple((row.step, row.value) for row in store.metrics(run_id, split="test") if row.name == "accuracy")
    return zoology_escape_step({"curve": curve}, level)


def summary(store: Store, sweeps: list[SweepConfig], level: float) -> list[dict]:
    lines = []
    for sweep in sweeps:
        for config in expand(sweep):
            record = store.run(config.run_id)
            lines.append(
                {
                    "sweep": sweep.name,
                    "mixer": config.model.mixer,
                    "mlp": config.model.mlp,
                    "lr": config.optimizer.lr,
                    "seed": config.train.seed,
                    "status": record.status if record else "missing",
                    "best": record.best_metric if record else None,
                    "steps": record.step if record else 0,
                    "escape_step": escape_step(store, config.run_id, level) if record else None,
                    "wall_s": record.wall_time if record else None,
                }
            )
    return lines


def worker_shares(sweeps: list[SweepConfig], workers: int) -> list[int]:
    """Workers per sweep, in proportion to its runs (at least one each)."""
    runs = [len(expand(sweep)) for sweep in sweeps]
    return [max(1, round(workers * count / sum(runs))) for count in runs]


def _train(sweep: SweepConfig, store: str, workers: int) -> None:
    run_sweep(sweep, store, workers=workers, progress=False)


def train_side_by_side(sweeps: list[SweepConfig], store: str, workers: int) -> None:
    """Every sweep in its own process with its share of the workers, all at once, into one store."""
    start = time.monotonic()
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_train, args=(sweep, store, share))
        for sweep, share in zip(sweeps, worker_shares(sweeps, workers))
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    print(json.dumps({"wall_s": round(time.monotonic() - start, 1)}), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+")
    parser.add_argument("--store", default="pilot.db")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--scale", default="cpu", help="the reproductions' scale (smoke: to try the pilot)")
    parser.add_argument("--report", action="store_true", help="train nothing: print what the store holds")
    parser.add_argument("--level", type=float, default=0.30, help="the plateau plus its margin (MQAR {64, 4}: 0.30)")
    args = parser.parse_args(argv)
    sweeps = [sweep for name in args.names for sweep in pilot_sweeps(name, args.steps, args.scale)]
    if not args.report:
        train_side_by_side(sweeps, args.store, args.workers)
    with Store(Path(args.store), readonly=True) as store:
        for line in summary(store, sweeps, args.level):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
