"""One training run: data, model, AdamW with a cosine schedule, evaluation, early stop, checkpoints, resume.

``train_run(config, store)`` trains ``config`` (a :class:`~seqdyn.train.config.RunConfig`) and records it in the
results store.  Everything that decides the result is derived from the config, so a run killed at any point and
started again resumes from its last checkpoint and ends with the same metrics as an uninterrupted run:

* the training order of epoch e is a permutation drawn from ``(seed, e)``;
* a checkpoint (safetensors) holds the model, the optimizer and scheduler state, the step and the RNG state
  (and, in float16, the loss scale);
* evaluation and checkpoints happen at fixed steps (a checkpoint between evaluations keeps the training losses
  since the last one, which the next evaluation averages).

A checkpoint is written durably and its SHA-256 recorded in the store; a damaged one is named in one warning and
the run resumes from the one before, or from step 0 (:mod:`seqdyn.train.checkpoint`). SIGINT and SIGTERM stop a
run within a step and leave it ``interrupted`` (:mod:`seqdyn.train.interrupt`). A run is claimed in the store before
it trains and keeps its claim alive with a heartbeat (:mod:`seqdyn.train.ownership`).

A non-finite loss ends the run as ``diverged`` with the step and the reason; the caller (a sweep) goes on.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from seqdyn.core.packing import pack_documents
from seqdyn.models import recording_backends
from seqdyn.tasks.base import IGNORE_INDEX
from seqdyn.train.checkpoint import (
    load_checkpoint,
    recorded_checkpoint,
    run_checkpoint_path,
    save_checkpoint,
    usable_checkpoint,
)
from seqdyn.train.config import RunConfig
from seqdyn.train.interrupt import signals_interrupt
from seqdyn.train.ownership import Heartbeat, default_owner, stale_after
from seqdyn.train.progress import RunProgress
from seqdyn.train.store import DIVERGED, DIVERGED_REASON, FINAL_STATUSES
from seqdyn.train.timelimit import OutOfTime, stop_at, time_is_up

#: evaluate on the concatenated outputs (exact for every metric) while they hold at most this many numbers
EXACT_EVAL_ELEMENTS = 1 << 25


class Diverged(RuntimeError):
    """The loss became NaN or infinite."""


@dataclass
class RunResult:
    """How a run ended."""

    run_id: str
    name: str
    status: str  # finished | stopped_early | failed | diverged | interrupted | skipped
    step: int = 0
    metric_name: str = ""
    final_metric: float | None = None
    best_metric: float | None = None
    final: dict[str, float] = field(default_factory=dict)
    wall_time: float = 0.0
    reason: str | None = None


@dataclass
class Plan:
    """Step arithmetic of a run: steps per epoch, total steps, when to evaluate and to checkpoint."""

    examples: int
    batch_size: int
    total_steps: int
    eval_every: int
    checkpoint_every: int

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.examples // self.batch_size)

    @classmethod
    def of(cls, config: RunConfig) -> Plan:
        train = config.train
        per_epoch = -(-config.task.train_examples // train.batch_size)
        total = train.steps if train.steps is not None else train.epochs * per_epoch
        eval_every = train.eval_every or (per_epoch if train.epochs is not None else max(1, total // 10))
        return cls(
            config.task.train_examples, train.batch_size, total, eval_every, train.checkpoint_every or eval_every
        )

    def batch(self, step: int, seed: int) -> Tensor:
        """The example indices of training step ``step``: epoch ``step // steps_per_epoch`` of a seeded shuffle."""
        epoch, position = divmod(step, self.steps_per_epoch)
        order = torch.randperm(self.examples, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
        return order[position * self.batch_size : (position + 1) * self.batch_size]


def learning_rate_factor(config: RunConfig, total_steps: int) -> Callable[[int], float]:
    """Linear warm-up over ``warmup·total`` steps, then cosine decay to ``min_lr`` (or constant)."""
    schedule, base = config.schedule, config.optimizer.lr
    warmup = int(schedule.warmup * total_steps)
    floor = schedule.min_lr / base

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if schedule.kind == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total_steps - warmup)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def build_optimizer(model: torch.nn.Module, config: RunConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not on biases, norms or 1-D gate parameters).  With
    ``optimizer.ssm_lr`` or ``ssm_weight_decay`` set, the mixers' state-space parameters
    (:meth:`~seqdyn.mixers.base.Mixer.ssm_parameters`) form groups of their own with that learning rate and weight
    decay.  Every group keeps its peak learning rate as ``base_lr``, which the schedule scales."""
    from seqdyn.mixers.base import Mixer

    opt = config.optimizer
    trainable = [p for p in model.parameters() if p.requires_grad]
    ssm = set()
    if opt.ssm_lr is not None or opt.ssm_weight_decay is not None:
        ssm = {id(p) for module in model.modules() if isinstance(module, Mixer) for p in module.ssm_parameters()}
    groups = _decay_groups([p for p in trainable if id(p) not in ssm], opt.lr, opt.weight_decay, 0.0)
    if ssm:
        decay = opt.ssm_weight_decay
        groups += [
            group
            for group in _decay_groups(
                [p for p in trainable if id(p) in ssm],
                opt.ssm_lr or opt.lr,
                opt.weight_decay if decay is None else decay,
                0.0 if decay is None else decay,
            )
            if group["params"]
        ]
    return torch.optim.AdamW(groups, lr=opt.lr, betas=opt.betas, eps=opt.eps)


def _decay_groups(
    params: list[torch.nn.Parameter], lr: float, matrix_decay: float, vector_decay: float
) -> list[dict[str, Any]]:
    """The matrices and the other parameters of ``params`` as two AdamW groups at peak learning rate ``lr``."""
    return [
        {"params": [p for p in params if (p.dim() >= 2) == matrices], "weight_decay": decay, "lr": lr, "base_lr": lr}
        for matrices, decay in ((True, matrix_decay), (False, vector_decay))
    ]


def resolve_device(name: str, field: str = "train.device") -> torch.device:
    """The device ``name`` means on this machine: ``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``;
    one the machine lacks raises ``ValueError`` naming ``field``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not (name.startswith("cuda:") and name[5:].isdigit()):
        raise ValueError(f"{field}: expected 'cpu', 'cuda', 'cuda:N' or 'auto', got {name!r}")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"{field}: {name!r} asked for, but no CUDA device is available; use 'cpu' or 'auto'")
    device = torch.device(name)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(
            f"{field}: {name!r} asked for, but this machine has {torch.cuda.device_count()} "
            f"CUDA device(s); use 'cuda' or one of them"
        )
    return device


# ------------------------------------------------------------------------------------------------- evaluation
def evaluate(
    model: torch.nn.Module,
    task,
    inputs: Tensor,
    targets: Tensor,
    batch_size: int,
    device: torch.device,
    backend: str,
    autocast: Callable[[], Any],
) -> dict[str, float]:
    """The task's metrics on the test set, in batches; exact (one call on all outputs) when they fit in memory,
    otherwise batch metrics weighted by their labelled positions."""
    model.eval()
    outputs, weighted, weights = [], {}, 0.0
    exact = inputs.shape[0] * task.spec.input_len * task.spec.output_size <= EXACT_EVAL_ELEMENTS
    with torch.no_grad():
        for start in range(0, inputs.shape[0], batch_size):
            batch = inputs[start : start + batch_size].to(device)
            with autocast():
                out = model(batch, backend=backend).float()
            if exact:
                outputs.append(out.cpu())
                continue
            target = targets[start : start + batch_size]
            weight = float((target != task.spec.ignore_index).sum()) if target.dtype == torch.int64 else target.numel()
            for name, value in task.metrics(out, target.to(device)).items():
                weighted[name] = weighted.get(name, 0.0) + weight * value
            weights += weight
    model.train()
    if exact:
        return task.metrics(torch.cat(outputs), targets)
    return {name: value / weights for name, value in weighted.items()}


def _better(value: float, best: float | None, higher: bool) -> bool:
    if best is None or math.isnan(best):
        return not math.isnan(value)
    return value > best if higher else value < best


def _reached(value: float, threshold: float | None, higher: bool) -> bool:
    return threshold is not None and (value >= threshold if higher else value <= threshold)


# ---------------------------------------------------------------------------------------------------- training
class _Loggers:
    """TensorBoard and Weights & Biases, when the config turns them on (off by default)."""

    def __init__(self, config: RunConfig, run_id: str, log_dir: Path):
        self.writers: list[Callable[[dict[str, float], int], None]] = []
        if config.loggers.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ValueError("loggers.tensorboard: install the 'tensorboard' package or turn it off") from None
            writer = SummaryWriter(str(log_dir / run_id))
            self.writers.append(lambda m, s: [writer.add_scalar(k, v, s) for k, v in m.items()])
        if config.loggers.wandb:
            try:
                import wandb
            except ImportError:
                raise ValueError("loggers.wandb: install the 'wandb' package or turn it off") from None
            wb_run = wandb.init(
                project=config.loggers.project, name=config.name, id=run_id, resume="allow", config=config.canonical()
            )
            self.writers.append(lambda m, s: wb_run.log(m, step=s))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for write in self.writers:
            write(metrics, step)


class Trainer:
    """The state of one run between steps; :meth:`run` trains it to the end."""

    def __init__(
        self,
        config: RunConfig,
        store=None,
        *,
        checkpoint_dir: str | Path | None = None,
        owner: str | None = None,
        progress: bool = True,
        distributed=None,
    ):
        from seqdyn import tasks
        from seqdyn.models import build_model

        self.config, self.store, self.distributed = config, store, distributed
        self.run_id, self.owner = config.run_id, owner or default_owner()
        self.lead = distributed is None or distributed.rank == 0
        self.device = resolve_device(config.train.device)
        if distributed is not None:
            self.device = distributed.device(self.device)
        self.task = tasks.build(config.task.name, **config.task.params)
        self.train_data = self.task.generate(config.task.train_examples, config.task.seed, "train")
        self.test_data = self.task.generate(config.task.test_examples, config.task.seed, "test")
        torch.manual_seed(config.train.seed)
        self.model = build_model(config.model, self.task.spec).to(self.device)
        self.optimizer = build_optimizer(self.model, config)
        self.trained = distributed.wrap(self.model) if distributed is not None else self.model
        self.plan = Plan.of(config)
        self.lr_factor = learning_rate_factor(config, self.plan.total_steps)
        self.watched = config.train.early_stop.metric or self.task.spec.primary_metric
        self.higher = self.task.spec.higher_is_better
        self.checkpoint_path = run_checkpoint_path(checkpoint_dir, self.run_id)
        self.loggers = _Loggers(config, self.run_id, self.checkpoint_path.parent / "logs") if self.lead else None
        self.progress = progress and self.lead
        self.step, self.best, self.elapsed, self.final = 0, None, 0.0, {}
        self.stop_at = stop_at()  # the command's time limit (seqdyn.train.timelimit), None where it has none
        self.losses: list[float] = []  # training losses since the last evaluation
        self.backends: list[str] | None = None  # the backend of every layer, known after the first step
        dtype = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[config.train.dtype]
        self.autocast = (lambda: torch.autocast(self.device.type, dtype=dtype)) if dtype else contextlib.nullcontext
        #: float16 only: the loss scale that keeps small gradients from flushing to zero (a step whose scaled
        #: gradients overflow is skipped and the scale halved)
        self.scaler = torch.amp.GradScaler(self.device.type) if dtype == torch.float16 else None

    def resume(self, path: Path | None, sha256: str | None = None) -> None:
        """Continue from the checkpoint ``path`` of this run (SHA-256 ``sha256`` when recorded), or from the one
        before it when it is damaged (see :func:`~seqdyn.train.checkpoint.usable_checkpoint`)."""
        if path is not None and self.lead:
            path = usable_checkpoint(path, sha256, self.run_id)
        if self.distributed is not None:
            path = self.distributed.broadcast_object(path)
        if path is not None:
            meta = load_checkpoint(path, self.model, self.optimizer, self.run_id)
            self.step, self.best, self.elapsed = meta["step"], meta["best"], meta["elapsed"]
            self.losses = list(meta.get("losses", []))
            if self.scaler is not None:
                self.scaler.load_state_dict(meta["grad_scaler"])

    def checkpoint_of(self, record) -> tuple[Path | None, str | None]:
        """The checkpoint a store record names and its SHA-256 — found in this run's checkpoint folder where the
        recorded path is gone (a store moved with its ``.checkpoints`` folder, e.g. from another machine)."""
        path, sha256 = recorded_checkpoint(record)
        if path is not None and not path.exists() and self.checkpoint_path.exists():
            path = self.checkpoint_path
        return path, sha256

    def train_step(self) -> float:
        inputs, targets, packing = self.next_batch()
        self.set_learning_rate()
        with self.autocast(), self.first_step_backends() as backends:
            loss = self.task.loss(self.trained(inputs, backend=self.config.train.backend, **packing), targets)
        if backends is not None:
            self.record_backends(backends)
        if self.distributed is not None:
            loss_value = self.distributed.mean(loss.detach())
        else:
            loss_value = float(loss.detach())
        self.check_finite(loss_value)
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is None:
            loss.backward()
            self.update()
        else:
            self.scaled_step(loss)
        self.step += 1
        return loss_value

    def next_batch(self) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """``(inputs, targets, packing)`` of the current step on the run's device (``packing``: the
        ``cu_seqlens`` of packed documents, where the run packs them)."""
        indices = self.plan.batch(self.step, self.config.train.seed)
        if self.distributed is not None:
            indices = self.distributed.shard(indices)
        inputs, targets = (t[indices].to(self.device) for t in self.train_data)
        packing = {}
        if self.config.train.pack:
            inputs, targets, packing["cu_seqlens"] = pack_documents(inputs, targets, IGNORE_INDEX)
        return inputs, targets, packing

    def set_learning_rate(self) -> None:
        """Every parameter group's learning rate at the current step of the schedule."""
        for group in self.optimizer.param_groups:
            group["lr"] = group["base_lr"] * self.lr_factor(self.step)

    def check_finite(self, loss_value: float) -> None:
        if not math.isfinite(loss_value):
            raise Diverged(f"{DIVERGED_REASON} ({loss_value}) at step {self.step}")

    def update(self) -> None:
        """The optimizer step on the gradients of the current step, clipped where the config says."""
        self.clip_gradients()
        self.optimizer.step()

    def first_step_backends(self):
        """At the first step this process trains: a list the forward pass fills with the backend each layer
        computes with (see :func:`~seqdyn.models.recording_backends`); later, nothing."""
        return recording_backends(self.model) if self.backends is None else contextlib.nullcontext()

    def record_backends(self, backends: list[str]) -> None:
        """Keep the backend of every layer and record it with the run in the store, with why each was chosen
        (rank 0 only)."""
        self.backends = [str(name) for name in backends]
        if self.lead and self.store is not None:
            self.store.set_backends(self.run_id, self.backends, [getattr(name, "why", "") for name in backends])

    def clip_gradients(self) -> None:
        if self.config.optimizer.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optimizer.grad_clip)

    def scaled_step(self, loss: Tensor) -> None:
        """float16: backward of ``scale · loss``, the gradients divided by the scale again before clipping; the
        optimizer step is skipped when they hold inf or NaN, and the scale is halved (doubled after 2000 good
        steps)."""
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        self.clip_gradients()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def evaluate_and_record(self, train_loss: float, wall: float) -> bool:
        """Test metrics and store rows; returns whether the early-stop threshold was reached."""
        self.final = evaluate(
            self.model,
            self.task,
            *self.test_data,
            self.plan.batch_size,
            self.device,
            self.config.train.backend,
            self.autocast,
        )
        value = self.final.get(self.watched, float("nan"))
        if _better(value, self.best, self.higher):
            self.best = value
        stop = _reached(value, self.config.train.early_stop.threshold, self.higher)
        if not self.lead:
            return stop
        train_metrics = {"loss": train_loss, "lr": self.optimizer.param_groups[0]["lr"]}
        _record(
            self.store, self.loggers, self.run_id, self.owner, self.step, self.plan, train_metrics, self.final, wall
        )
        return stop

    def checkpoint(self, wall: float) -> None:
        """Save the state after ``self.step`` (rank 0 only) and record the file and its SHA-256 in the store."""
        if not self.lead:
            return
        meta = {"run_id": self.run_id, "step": self.step, "best": self.best, "elapsed": wall, "losses": self.losses}
        if self.scaler is not None:
            meta["grad_scaler"] = self.scaler.state_dict()
        sha256 = save_checkpoint(self.checkpoint_path, self.model, self.optimizer, meta)
        if self.store is not None:
            self.store.set_checkpoint(self.run_id, str(self.checkpoint_path), self.step, sha256)

    def run(self) -> tuple[str, str | None]:
        """Train from ``self.step`` to the end; returns ``(status, reason)``."""
        begun = time.perf_counter()
        bar = RunProgress(self.progress, self.config.name, self.plan.total_steps, self.step)
        try:
            while self.step < self.plan.total_steps:
                self.losses.append(self.train_step())
                ended = self.after_step(bar, lambda: self.elapsed + time.perf_counter() - begun)
                if ended is not None:
                    return ended, None
            return "finished", None
        except Diverged as error:
            return DIVERGED, str(error)
        finally:
            self.elapsed += time.perf_counter() - begun
            bar.close()

    def after_step(self, bar: RunProgress, wall: Callable[[], float]) -> str | None:
        """What follows a training step: its loss on ``bar``, the evaluation and the checkpoint due now (``wall()``:
        the run's wall time so far).  Returns ``"stopped_early"`` or ``"finished"`` where the run ends here, None
        where it goes on; past the command's time limit, checkpoints and raises :class:`OutOfTime`."""
        bar.advance(self.losses[-1])
        stop, last = False, self.step == self.plan.total_steps
        if self.step % self.plan.eval_every == 0 or last:
            stop = self.evaluate_and_record(sum(self.losses) / len(self.losses), wall())
            bar.show(self.watched, self.final.get(self.watched, float("nan")))
            self.losses = []
        checkpointed = self.step % self.plan.checkpoint_every == 0 or stop or last
        if checkpointed:
            self.checkpoint(wall())
        if stop or last:
            return "stopped_early" if stop else "finished"
        if self.stop_at is not None and time_is_up(self.stop_at):
            if not checkpointed:
                self.checkpoint(wall())
            raise OutOfTime(self.step)
        return None


@signals_interrupt()
def train_run(
    config: RunConfig,
    store=None,
    *,
    checkpoint_dir: str | Path | None = None,
    owner: str | None = None,
    progress: bool = True,
    sweep: str | None = None,
    distributed=None,
) -> RunResult:
    """Train ``config`` to the end (or early stop, or failure), resuming from its checkpoint in ``store``.

    The run is claimed in the store first, so concurrent sweeps never train it twice; a run whose owner died
    (killed on this host, or silent for two minutes elsewhere) is taken over and resumed.  A checkpoint that does
    not belong to this config raises ``ValueError`` before anything in the store changes.  SIGINT and SIGTERM
    release the run as ``interrupted`` and raise :class:`~seqdyn.train.interrupt.Interrupted`.  Past the command's
    time limit (:mod:`seqdyn.train.timelimit`) the run is not started; reached while it trains, the run stops at a
    checkpoint and is released as ``interrupted`` (the result says so).
    """
    prepared = prepared_trainer(config, store, checkpoint_dir, owner, progress, sweep, distributed)
    if isinstance(prepared, RunResult):
        return prepared
    return _trained(config, prepared, store if prepared.lead else None, prepared.owner)


def prepared_trainer(
    config: RunConfig,
    store,
    checkpoint_dir: str | Path | None,
    owner: str | None,
    progress: bool,
    sweep: str | None = None,
    distributed=None,
) -> Trainer | RunResult:
    """The :class:`Trainer` of ``config``, resumed from its checkpoint and claimed in ``store`` — or the
    :class:`RunResult` of a run not to train (past the time limit, already finished, claimed by another owner)."""
    if time_is_up():
        return _not_started(config)
    run_id, owner = config.run_id, owner or default_owner()
    lead = distributed is None or distributed.rank == 0
    record = None
    if store is not None and lead:
        store.add_run(run_id, config.name, config.canonical(), sweep)
        record = store.run(run_id)
        if record.status in FINAL_STATUSES:
            return _skipped(config, record)
    trainer = Trainer(
        config, store, checkpoint_dir=checkpoint_dir, owner=owner, progress=progress, distributed=distributed
    )
    trainer.resume(*trainer.checkpoint_of(record))
    if store is not None and lead:
        if not store.claim(run_id, owner, stale_after=stale_after(record)):
            return _skipped(config, store.run(run_id))
        store.set_threads(run_id, torch.get_num_threads())
        claimed = store.run(run_id)
        if claimed.checkpoint_step != record.checkpoint_step and claimed.checkpoint:
            trainer.resume(*trainer.checkpoint_of(claimed))  # its last owner checkpointed after we looked
    return trainer


def _trained(config: RunConfig, trainer: Trainer, store, owner: str) -> RunResult:
    """Train the claimed run to its end and record how it ended in ``store`` (None: not this rank's to record);
    stopped by the time limit or a signal, the run is released as ``interrupted``."""
    try:
        with Heartbeat(store, config.run_id, owner):
            status, reason = trainer.run()
    except OutOfTime as out:
        return release_run(config, trainer, str(out), store, owner)
    except BaseException:
        if store is not None:
            store.release(config.run_id, owner)  # interrupted: the next sweep resumes it from its checkpoint
        raise
    return finish_run(config, trainer, status, reason, store, owner)


def release_run(config: RunConfig, trainer: Trainer, reason: str, store, owner: str) -> RunResult:
    """The :class:`RunResult` of ``trainer``'s run of ``config`` stopped at a checkpoint (the time limit) as
    ``interrupted`` with ``reason``; released by ``owner`` in ``store`` unless it is ``None``, for the next call to
    resume."""
    if store is not None:
        store.release(config.run_id, owner)
    return run_result(config, trainer, "interrupted", reason)


def finish_run(config: RunConfig, trainer: Trainer, status: str, reason: str | None, store, owner: str) -> RunResult:
    """The :class:`RunResult` of ``trainer``'s run of ``config`` ending with ``status`` (and ``reason``), the
    watched metric's final value taken from ``trainer.final``; also recorded as finished by ``owner`` in ``store``
    unless it is ``None``."""
    result = run_result(config, trainer, status, reason)
    if store is not None:
        store.finish(
            result.run_id,
            owner,
            status,
            step=trainer.step,
            reason=reason,
            final_metric=result.final_metric,
            best_metric=trainer.best,
            metric_name=trainer.watched,
            wall_time=trainer.elapsed,
        )
    return result


def run_result(config: RunConfig, trainer: Trainer, status: str, reason: str | None) -> RunResult:
    """The :class:`RunResult` of ``trainer``'s run of ``config`` as it stands, with ``status`` and ``reason``."""
    final_value = trainer.final.get(trainer.watched) if trainer.final else None
    return RunResult(
        config.run_id,
        config.name,
        status,
        trainer.step,
        trainer.watched,
        final_value,
        trainer.best,
        trainer.final,
        trainer.elapsed,
        reason,
    )


def _not_started(config: RunConfig) -> RunResult:
    """The result of a run the time limit left unstarted (in the store as it was)."""
    return RunResult(config.run_id, config.name, "skipped", 0, "", None, None, {}, 0.0, "time limit reached")


def _skipped(config: RunConfig, record) -> RunResult:
    return RunResult(
        record.id,
        config.name,
        "skipped",
        record.step or 0,
        record.metric_name or "",
        record.final_metric,
        record.best_metric,
        {},
        record.wall_time or 0.0,
        f"already {record.status}" + (f" by {record.owner}" if record.status == "running" else ""),
    )


def _record(store, loggers, run_id, owner, step, plan, train_metrics, test_metrics, wall) -> None:
    epoch = step / plan.steps_per_epoch
    if store is not None:
        store.log_metrics(run_id, step, epoch, "train", train_metrics, wall)
        store.log_metrics(run_id, step, epoch, "test", test_metrics, wall)
        store.heartbeat(run_id, owner)
    if loggers is not None:
        loggers.log(
            {f"train/{k}": v for k, v in train_metrics.items()} | {f"test/{k}": v for k, v in test_metrics.items()},
            step,
        )
