"""Runs per hour of a sweep: one run at a time against runs stacked into one batched model (``seqdyn bench sweep``).

For a reproduction's runs at a scale (by default the MQAR runs of Sieber et al. 2024 and the MAD runs of Sieber et
al. 2025 at the ``gpu`` scale where a GPU is at hand, else at ``cpu``), one run of each mixer is trained as the
sweep would train it: **one at a time** (:meth:`~seqdyn.train.loop.Trainer.train_step`, its backends chosen by
``auto`` as usual) and **stacked** R at a time (:class:`~seqdyn.train.stacked.StackedRuns`, R runs differing in
their seed).  After a warm-up step each, the settings are timed alternately, one step each per round, and the
median of the rounds kept.  The ratio is the runs per hour stacked over the runs per hour one at a time,
``R · t(one run's step) / t(stacked step)``; where it stops growing with R is where stacking stops helping.  On a
GPU the table adds the peak device memory a stacked step takes per run (``torch.cuda.max_memory_allocated`` above
what was allocated before it, divided by R, the parameters and optimizer states of every run included).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from seqdyn.bench.measure import resolve_device
from seqdyn.core.autotune import elapsed_seconds

#: the reproductions whose runs ``seqdyn bench sweep`` times by default: MQAR and MAD
DEFAULT_REPRODUCTIONS = ("dsf_mqar_models", "coef_readout_maps")


@dataclass
class SweepCell:
    """One mixer's runs: its step time one at a time and per stack size."""

    reproduction: str
    mixer: str
    config_name: str
    one_ms: float | None = None
    stacked_ms: dict[int, float] = field(default_factory=dict)
    memory_per_run_mb: dict[int, float] = field(default_factory=dict)
    status: str = "ok"
    note: str = ""

    def ratio(self, size: int) -> float | None:
        """Runs per hour stacked ``size`` at a time over runs per hour one at a time."""
        if self.one_ms is None or size not in self.stacked_ms:
            return None
        return size * self.one_ms / self.stacked_ms[size]

    def stops_helping(self) -> int | None:
        """The first stack size whose ratio is not 10 % above the one before (None: it helps up to the largest)."""
        sizes = sorted(self.stacked_ms)
        for smaller, larger in zip(sizes, sizes[1:]):
            if self.ratio(larger) < 1.1 * self.ratio(smaller):
                return larger
        return None


#: a stack size is chosen for a sweep where its median ratio over the mixers is at least this
WORTH_STACKING = 1.2


def best_stack(cells: Sequence[SweepCell]) -> int:
    """The stack size with the largest median ratio over the measured mixers, where that median is at least
    :data:`WORTH_STACKING`; otherwise 1 (one run at a time)."""
    measured = [cell for cell in cells if cell.status == "ok"]
    sizes = sorted({size for cell in measured for size in cell.stacked_ms})
    medians = {size: statistics.median(cell.ratio(size) for cell in measured) for size in sizes}
    best = max(medians, key=medians.get, default=1)
    return best if medians.get(best, 0.0) >= WORTH_STACKING else 1


def as_json(cells: Sequence[SweepCell], scale: str, device: torch.device) -> dict:
    """The measurement as plain data, with the stack size :func:`best_stack` chooses."""
    rows = [
        {
            "reproduction": cell.reproduction,
            "mixer": cell.mixer,
            "status": cell.status,
            "note": cell.note,
            "one_run_ms": cell.one_ms,
            "stacked_ms": cell.stacked_ms,
            "ratio": {size: cell.ratio(size) for size in cell.stacked_ms},
            "memory_per_run_mb": cell.memory_per_run_mb,
            "stops_helping_at": cell.stops_helping(),
        }
        for cell in cells
    ]
    return {"scale": scale, "device": str(device), "cells": rows, "best_stack": best_stack(cells)}


def sample_runs(reproduction: str, scale: str, device: torch.device, steps: int):
    """One run per mixer of ``reproduction``'s sweeps at ``scale``, on ``device``, with a training set just large
    enough for ``steps`` steps (the step time does not depend on it)."""
    import importlib

    from seqdyn.train.sweep import expand

    module = importlib.import_module(f"seqdyn.reproduce.{reproduction}")
    chosen = {}
    for sweep in module.REPRODUCTION.sweeps(scale):
        for run in expand(sweep):
            chosen.setdefault(run.model.mixer, run)
    return [_sized(run, device, steps) for run in chosen.values()]


def _sized(run, device: torch.device, steps: int):
    batch = run.train.batch_size
    task = run.task.model_copy(update={"train_examples": batch * (steps + 2), "test_examples": batch})
    train = run.train.model_copy(update={"device": str(device), "steps": 10**6})
    return run.model_copy(update={"task": task, "train": train})


def _seeded(run, seed: int):
    return run.model_copy(update={"train": run.train.model_copy(update={"seed": seed})})


def measure(reproduction: str, run, sizes: Sequence[int], device: torch.device, steps: int) -> SweepCell:
    """The step times of ``run`` one at a time and stacked ``sizes`` at a time, timed alternately."""
    from seqdyn.train.loop import Trainer
    from seqdyn.train.stacked import StackedRuns

    cell = SweepCell(reproduction, run.model.mixer, run.name)
    alone = Trainer(run, progress=False)
    stacks = {}
    for size in sizes:
        trainers = [Trainer(_seeded(run, seed), progress=False) for seed in range(size)]
        stacks[size] = (StackedRuns(trainers), trainers)
    calls: dict[int, Callable[[], object]] = {0: alone.train_step}
    calls |= {size: (lambda s=stack, t=trainers: s.step(t)) for size, (stack, trainers) in stacks.items()}
    for call in calls.values():
        call()  # warm-up: the first call chooses backends, allocates, loads kernels
    times: dict[int, list[float]] = {size: [] for size in calls}
    peaks: dict[int, float] = {}
    for _ in range(steps):
        for size, call in calls.items():
            before = _reset_peak(device)
            times[size].append(elapsed_seconds(call, device) * 1000)
            if size and before is not None:
                peaks[size] = max(peaks.get(size, 0.0), (torch.cuda.max_memory_allocated(device) - before) / 2**20)
    cell.one_ms = statistics.median(times.pop(0))
    cell.stacked_ms = {size: statistics.median(values) for size, values in times.items()}
    cell.memory_per_run_mb = {size: peak / size for size, peak in peaks.items()}
    return cell


def _reset_peak(device: torch.device) -> int | None:
    """On CUDA: reset the peak statistics and return what is allocated now; elsewhere None."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def run(
    reproductions: Sequence[str] = DEFAULT_REPRODUCTIONS,
    scale: str | None = None,
    sizes: Sequence[int] = (2, 4, 8),
    device: str = "auto",
    steps: int = 5,
    mixers: Sequence[str] | None = None,
    progress: Callable[[SweepCell], None] | None = None,
) -> tuple[list[SweepCell], str, torch.device]:
    """Measure one run of each mixer (``mixers``: only these) of each reproduction at ``scale`` (default ``gpu`` on
    a GPU, else ``cpu``); returns the cells, the scale and the device."""
    if not sizes or min(sizes) < 2:
        raise ValueError(f"--sizes: expected stack sizes of 2 or more, got {list(sizes)}")
    device_ = resolve_device(device)
    scale = scale or ("gpu" if device_.type == "cuda" else "cpu")
    cells = []
    for reproduction in reproductions:
        for sample in sample_runs(reproduction, scale, device_, steps):
            if mixers and sample.model.mixer not in mixers:
                continue
            try:
                cell = measure(reproduction, sample, sorted(sizes), device_, steps)
            except (RuntimeError, ValueError) as error:  # out of memory, a model vmap cannot batch
                cell = SweepCell(reproduction, sample.model.mixer, sample.name, status="error")
                cell.note = str(error).splitlines()[0][:100]
            cells.append(cell)
            if progress is not None:
                progress(cell)
    return cells, scale, device_
