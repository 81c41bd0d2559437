"""The analysis of trained runs in a results store (``seqdyn inspect``; Sieber et al. 2025 §5 and Fig. 1
on trained models).

report = inspect_run("seqdyn.db", "3f2a9c01d4e7")        # per layer and head, on a batch of its test set
points = principle_points("seqdyn.db", sweep="mqar-main")  # (mixer, near-zero fraction, best accuracy) per run
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from seqdyn.analysis.coefficients import NEAR_ZERO_EPS
from seqdyn.analysis.model import HeadReport, inspect_model, layer_coefficients

__all__ = ["RunInspection", "inspect_run", "load_inputs", "principle_points"]


@dataclass
class RunInspection:
    """What :func:`inspect_run` measured on one run: the run's record, its inputs and the per-head rows."""

    run_id: str
    name: str
    status: str
    metric_name: str | None
    best_metric: float | None
    inputs: Tensor
    rows: list[HeadReport]
    coefficients: dict[str, Tensor]
    backends: list[str] | None = None  # the backend each layer trained with, when the run recorded it
    backend_reasons: list[str] | None = None  # why each layer's backend was chosen, when the run recorded it

    def mean_near_zero_fraction(self) -> float | None:
        values = [row.near_zero_fraction for row in self.rows if row.near_zero_fraction is not None]
        return sum(values) / len(values) if values else None


def load_inputs(path: str | os.PathLike) -> Tensor:
    """Token ids ``[B, T]`` (or ``[T]``, made ``[1, T]``) or channels ``[B, T, C]`` from a ``.pt`` tensor or a
    ``.npy`` array."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"--input: no file {path}")
    if path.suffix not in (".npy", ".pt"):
        raise ValueError(f"--input: {path.name} must be a .pt tensor or a .npy array of token ids")
    try:
        tensor = _read_tensor(path)
    except Exception as error:  # whatever a file that is not a tensor makes numpy's or torch's reader raise
        writer = "numpy.save(path, array)" if path.suffix == ".npy" else "torch.save(tensor, path)"
        raise ValueError(
            f"--input: {path} holds no numeric {path.suffix} tensor ({type(error).__name__}); "
            f"write token ids with {writer}"
        ) from None
    if not isinstance(tensor, Tensor) or tensor.dim() not in (1, 2, 3):
        raise ValueError(
            f"--input: expected [B, T] token ids or [B, T, C] channels, got {getattr(tensor, 'shape', type(tensor))}"
        )
    return tensor.unsqueeze(0) if tensor.dim() == 1 else tensor


def _read_tensor(path: Path) -> Tensor:
    if path.suffix == ".npy":
        import numpy as np

        return torch.from_numpy(np.load(path))
    return torch.load(path, weights_only=True)


def _check_inputs(inputs: Tensor, task) -> Tensor:
    spec = task.spec
    tokens = spec.input_kind == "tokens"
    if inputs.dtype.is_floating_point == tokens:
        raise ValueError(f"--input: this run's task {task.name!r} takes {spec.input_kind} inputs, got {inputs.dtype}")
    if inputs.dim() != (2 if tokens else 3):
        raise ValueError(
            f"--input: task {task.name!r} takes {'[B, T]' if tokens else '[B, T, C]'} inputs, "
            f"got shape {tuple(inputs.shape)}"
        )
    if tokens:
        inputs = inputs.long()
        if inputs.numel() and (int(inputs.min()) < 0 or int(inputs.max()) >= spec.input_size):
            raise ValueError(f"--input: token ids must lie in [0, {spec.input_size}) for task {task.name!r}")
    return inputs


def inspect_run(
    store, run_id: str, inputs: Tensor | None = None, examples: int = 8, eps: float = NEAR_ZERO_EPS
) -> RunInspection:
    """Load run ``run_id`` from ``store`` (a :class:`~seqdyn.train.store.Store` or a path) at its last checkpoint
    and measure every layer and head (:func:`~seqdyn.analysis.inspect_model`) on ``inputs``, by default the first
    ``examples`` sequences of its task's test set.  Unknown run ids raise ``ValueError``."""
    from seqdyn.train.checkpoint import load_trained
    from seqdyn.train.store import Store

    if not isinstance(store, Store):
        store = Store(store, readonly=True)
    config, task, model = load_trained(store, run_id)
    if inputs is None:
        inputs = task.generate(examples, config.task.seed, "test")[0]
    inputs = _check_inputs(inputs, task)
    record = store.run(run_id)
    return RunInspection(
        run_id,
        record.name,
        record.status,
        record.metric_name,
        record.best_metric,
        inputs,
        inspect_model(model, inputs, eps=eps),
        layer_coefficients(model, inputs),
        record.backends,
        record.backend_reasons,
    )


def principle_points(
    store, sweep: str | None = None, examples: int = 8, eps: float = NEAR_ZERO_EPS
) -> list[tuple[str, float, float]]:
    """``(label, mean near-zero fraction, best metric)`` for every run with a checkpoint (of ``sweep``, if given),
    the points of Sieber et al. 2025 Fig. 1 (accuracy against the fraction of near-zero coefficients).  A run's label is
    what varies across these runs besides the learning rate and seeds (:func:`seqdyn.train.report.run_labels`), e.g.
    ``"readout=relu"`` for two ``custom`` mixers."""
    from seqdyn.train.report import LR_KEY, run_labels
    from seqdyn.train.store import Store

    if not isinstance(store, Store):
        store = Store(store, readonly=True)
    records = [record for record in store.runs(sweep=sweep) if record.checkpoint and record.best_metric is not None]
    points = []
    for record, label in zip(records, run_labels([record.config for record in records], exclude=[LR_KEY])):
        fraction = inspect_run(store, record.id, examples=examples, eps=eps).mean_near_zero_fraction()
        if fraction is not None:
            points.append((label, fraction, record.best_metric))
    return points
