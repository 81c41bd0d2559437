"""Runs stacked: several runs of one architecture trained as one batched model, each as if it trained alone.

Tiny models leave an accelerator (and, less so, a CPU) idle while they train one at a time: a step is bound by
kernel launches and Python, not by the arithmetic.  Runs that differ only in what leaves every shape alone — their
seed (initialization and data order), learning rate, its floor and the weight decay (:data:`MAY_DIFFER`) — are
trained here as one call: their parameters are stacked along a leading run axis and the model's forward is
``torch.func.vmap``-ped over it (``functional_call`` of one model with each run's parameters).  Each run keeps its
own :class:`~seqdyn.train.loop.Trainer` — its model, AdamW state, schedule, data order, evaluations, checkpoints and
store rows — so the gradient of the summed losses is each run's own gradient, and a run trained in a stack ends
with the metrics of the same run trained alone (to round-off: batched products sum in another order; equal in
float64 to round-off, ``tests/train/test_stacked.py``).  A run that diverges, stops early or reaches its end leaves
the stack; the others go on.  While runs are stacked the library computes as :mod:`seqdyn.core.stacking` says.

Not stacked (:func:`stack_refusal` says why): packed documents (each step's shape is its own) and float16 (a loss
scale per run).  A model that draws random numbers while it trains cannot stack either: ``vmap`` could not draw
each run's own as training alone would, and says so (``randomness="error"``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.func import functional_call, vmap

from seqdyn.core.stacking import stacked_runs
from seqdyn.train.config import RunConfig
from seqdyn.train.interrupt import signals_interrupt
from seqdyn.train.loop import (
    Diverged,
    RunResult,
    Trainer,
    finish_run,
    prepared_trainer,
    release_run,
)
from seqdyn.train.ownership import Heartbeat, default_owner
from seqdyn.train.progress import RunProgress
from seqdyn.train.store import DIVERGED
from seqdyn.train.timelimit import OutOfTime

__all__ = ["MAY_DIFFER", "StackedRuns", "stack_key", "stack_refusal", "stacks", "train_stack"]

log = logging.getLogger("seqdyn")

#: the config fields in which runs of one stack may differ (dotted paths; ``name`` never enters a run's id)
MAY_DIFFER = (
    "name",
    "train.seed",
    "optimizer.lr",
    "optimizer.ssm_lr",
    "optimizer.weight_decay",
    "optimizer.ssm_weight_decay",
    "schedule.min_lr",
)


def stack_key(config: RunConfig) -> str:
    """What runs of one stack share: the canonical config without the fields of :data:`MAY_DIFFER`."""
    data = config.canonical()
    for dotted in MAY_DIFFER:
        *parents, leaf = dotted.split(".")
        node = data
        for part in parents:
            node = node.get(part, {})
        node.pop(leaf, None)
    return json.dumps(data, sort_keys=True)


def stack_refusal(config: RunConfig) -> str | None:
    """Why ``config`` cannot train in a stack (None: it can)."""
    if config.train.pack:
        return "train.pack: packed documents give each step its own shape"
    if config.train.dtype == "float16":
        return "train.dtype: float16 keeps a loss scale per run; use bfloat16 or float32"
    return None


def stacks(runs: Sequence[RunConfig], size: int) -> list[list[RunConfig]]:
    """``runs`` in groups of at most ``size`` that may train stacked (one :func:`stack_key`), in the order of
    their first run; a run that cannot stack (:func:`stack_refusal`) is a group of its own."""
    if size < 1:
        raise ValueError(f"stack: expected at least 1 run per stack, got {size}")
    groups: dict[str, list[RunConfig]] = {}
    for index, run in enumerate(runs):
        key = f"alone {index}" if size == 1 or stack_refusal(run) else stack_key(run)
        groups.setdefault(key, []).append(run)
    return [group[start : start + size] for group in groups.values() for start in range(0, len(group), size)]


class StackedRuns:
    """The trainers of one stack between steps: :meth:`step` trains every live run one step in one call."""

    def __init__(self, trainers: Sequence[Trainer]):
        first = trainers[0]
        for trainer in trainers[1:]:
            if stack_key(trainer.config) != stack_key(first.config):
                raise ValueError(
                    f"stack: run {trainer.config.name!r} differs from {first.config.name!r} in more than "
                    f"{', '.join(MAY_DIFFER[1:])}; runs of one stack share their architecture, task and budget"
                )
        self.template = first.model  # the module whose forward every run computes with its own parameters
        self.backends_recorded = False

    def step(self, live: Sequence[Trainer]) -> list[float | Diverged]:
        """One training step of each run in ``live`` (which share a step count): their losses, or the
        :class:`Diverged` of a run whose loss is not finite (its parameters are left as they were)."""
        batches = [trainer.next_batch() for trainer in live]
        for trainer in live:
            trainer.set_learning_rate()
            trainer.optimizer.zero_grad(set_to_none=True)
        inputs = torch.stack([inputs for inputs, _, _ in batches])  # [R, B, T]
        targets = torch.stack([targets for _, targets, _ in batches])
        with stacked_runs():
            losses = self._losses(live, inputs, targets)
            values = losses.detach().tolist()
            losses.sum().backward()
        outcomes: list[float | Diverged] = []
        for trainer, value in zip(live, values, strict=True):
            try:
                trainer.check_finite(value)
            except Diverged as error:
                outcomes.append(error)
                continue
            trainer.update()
            trainer.step += 1
            outcomes.append(value)
        return outcomes

    def _losses(self, live: Sequence[Trainer], inputs: Tensor, targets: Tensor) -> Tensor:
        """Each run's training loss ``[R]``: the template's forward with the run's parameters, under ``vmap``."""
        names = [dict(trainer.model.named_parameters()) for trainer in live]
        buffers = [dict(trainer.model.named_buffers()) for trainer in live]
        stacked = {name: torch.stack([run[name] for run in names]) for name in names[0]}  # [R, ...] each
        stacked_buffers = {name: torch.stack([run[name] for run in buffers]) for name in buffers[0]}
        first = live[0]
        backend, task = first.config.train.backend, first.task

        def loss(parameters, buffers_, x, y):
            with first.autocast():
                return task.loss(functional_call(self.template, (parameters, buffers_), (x,), {"backend": backend}), y)

        recording = contextlib.nullcontext() if self.backends_recorded else first.first_step_backends()
        with recording as backends:
            losses = vmap(loss, randomness="error")(stacked, stacked_buffers, inputs, targets)
        if backends is not None:
            for trainer in live:
                trainer.record_backends(backends)
            self.backends_recorded = True
        return losses


@signals_interrupt()
def train_stack(
    configs: Sequence[RunConfig],
    store=None,
    *,
    checkpoint_dir=None,
    owner: str | None = None,
    progress: bool = True,
    sweep: str | None = None,
) -> list[RunResult]:
    """Train the runs of ``configs`` (one stack: :func:`stacks`) together to their ends, each claimed, resumed,
    evaluated, checkpointed and recorded in ``store`` as :func:`~seqdyn.train.loop.train_run` does it alone.
    Runs at different steps (one resumed from a later checkpoint) train alone until they meet the others'.
    Past the command's time limit every run stops at a checkpoint and is released as ``interrupted``."""
    owner = owner or default_owner()
    results: dict[str, RunResult] = {}
    trainers = []
    for config in configs:
        prepared = prepared_trainer(config, store, checkpoint_dir, owner, False)
        if isinstance(prepared, RunResult):
            results[config.run_id] = prepared
        else:
            trainers.append(prepared)
    if trainers:
        with contextlib.ExitStack() as beats:
            for trainer in trainers:
                beats.enter_context(Heartbeat(store, trainer.run_id, owner))
            results |= _trained_together(trainers, store, owner, progress)
    return [results[config.run_id] for config in configs]


def _trained_together(trainers: list[Trainer], store, owner: str, progress: bool) -> dict[str, RunResult]:
    """Train the claimed ``trainers`` together to their ends; every run is recorded as it ends, and released as
    ``interrupted`` where the time limit or an error stops the stack."""
    results: dict[str, RunResult] = {}
    bar = RunProgress(progress, f"{trainers[0].config.name} (+{len(trainers) - 1} stacked)", _steps(trainers), 0)
    live = list(trainers)
    try:
        stack = StackedRuns(trainers)
        while live:
            ended = _stacked_step(stack, live, bar)
            for trainer, (status, reason) in ended.items():
                if status == "interrupted":
                    result = release_run(trainer.config, trainer, reason, store, owner)
                else:
                    result = finish_run(trainer.config, trainer, status, reason, store, owner)
                results[trainer.run_id] = result
                live.remove(trainer)
    except BaseException:
        for trainer in live:
            if store is not None:
                with contextlib.suppress(sqlite3.Error):
                    store.release(trainer.run_id, owner)  # the next sweep resumes it from its checkpoint
        raise
    finally:
        bar.close()
    return results


def _steps(trainers: Sequence[Trainer]) -> int:
    return sum(trainer.plan.total_steps - trainer.step for trainer in trainers)


def _stacked_step(stack: StackedRuns, live: list[Trainer], bar: RunProgress) -> dict[Trainer, tuple[str, str | None]]:
    """One step of the live runs furthest behind (together), then what follows it for each; returns the runs that
    ended at this step with their ``(status, reason)``."""
    behind = min(trainer.step for trainer in live)
    moving = [trainer for trainer in live if trainer.step == behind]
    begun = time.perf_counter()
    outcomes = stack.step(moving)
    share = (time.perf_counter() - begun) / len(moving)  # each run's share of the stacked step's wall time
    ended: dict[Trainer, tuple[str, str | None]] = {}
    for trainer, outcome in zip(moving, outcomes, strict=True):
        trainer.elapsed += share
        if isinstance(outcome, Diverged):
            ended[trainer] = (DIVERGED, str(outcome))
            continue
        trainer.losses.append(outcome)
        started = time.perf_counter()
        try:
            status = trainer.after_step(bar, lambda t=trainer, s=started: t.elapsed + time.perf_counter() - s)
            if status is not None:
                ended[trainer] = (status, None)
        except OutOfTime as out:
            ended[trainer] = ("interrupted", str(out))
        finally:
            trainer.elapsed += time.perf_counter() - started
    return ended
