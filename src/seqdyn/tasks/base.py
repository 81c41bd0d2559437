"""The task interface, its parameter validation and the registry.

A task is built by name with keyword parameters, ``seqdyn.tasks.build("mqar", seq_len=256)``, and then
generates data on demand: ``inputs, targets = task.generate(num_examples, seed, split="train")``.

Layouts:

- token inputs: int64 ``[n, T]``; token targets int64 ``[n, T]`` with ``IGNORE_INDEX`` (−100) where nothing is
  predicted;
- channel inputs: float32 ``[n, T_in, C_in]``, data channels first and the two positional channels
  ``cos(2πi/T_in), sin(2πi/T_in)`` last (regression tasks); regression targets float32 ``[n, T_out, C_out]``
  for the ``T_out`` rightmost positions.

Seeds and splits: the random stream of ``generate(n, seed, split)`` is keyed by the pair ``(seed, split)``
(``numpy.random.SeedSequence([seed, split_code])`` feeding PCG64), so train and test data never come from
the same stream, even for equal integer seeds. ``task.split_seed(seed, split)`` returns that stream's key as
one integer, for logging. Fixed structures that must be shared by train and test (the matrix of
``solve_fixed``, the positions of ``select_fixed``, the key→value map of ``memorization``) come from their
own parameter seeds, not from the data seed.
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

import numpy as np
import torch
import torch.nn.functional as F

from seqdyn.core.names import did_you_mean

IGNORE_INDEX = -100
SPLIT_CODES = {"train": 0, "test": 1, "valid": 2}
HEADS = ("lm", "regression", "tagging", "classification", "autoencoder")
CACHE_ENV = "SEQDYN_TASK_CACHE"

_REGISTRY: dict[str, type[Task]] = {}


@dataclass(frozen=True)
class Param:
    """One task parameter: its default, its type and the range it must lie in."""

    default: Any
    kind: type  # int | float | bool | str
    doc: str = ""
    low: float | None = None  # inclusive lower bound
    high: float | None = None  # inclusive upper bound
    below: float | None = None  # exclusive upper bound
    choices: tuple | None = None
    optional: bool = False  # None is allowed

    def check(self, task: str, name: str, value: Any) -> Any:
        """Return ``value`` normalized to ``kind`` or raise a ValueError naming the parameter."""
        if value is None:
            if self.optional:
                return None
            raise ValueError(f"{task}: parameter {name}=None is not allowed; expected {self.kind.__name__}")
        value = self._coerce(task, name, value)
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{task}: parameter {name}={value!r} must be one of {', '.join(map(repr, self.choices))}")
        if self.low is not None and value < self.low:
            raise ValueError(f"{task}: parameter {name}={value!r} must be >= {self.low}")
        if self.high is not None and value > self.high:
            raise ValueError(f"{task}: parameter {name}={value!r} must be <= {self.high}")
        if self.below is not None and value >= self.below:
            raise ValueError(f"{task}: parameter {name}={value!r} must be < {self.below}")
        return value

    def _coerce(self, task: str, name: str, value: Any) -> Any:
        wrong = f"{task}: parameter {name}={value!r} must be of type {self.kind.__name__}"
        if self.kind is bool:
            if isinstance(value, (bool, np.bool_)):
                return bool(value)
            raise ValueError(wrong)
        if isinstance(value, (bool, np.bool_)):
            raise ValueError(wrong)
        if self.kind is int:
            if isinstance(value, (int, np.integer)):
                return int(value)
            raise ValueError(wrong)
        if self.kind is float:
            if isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(float(value)):
                return float(value)
            raise ValueError(wrong + " (finite)")
        if self.kind is str:
            if isinstance(value, (str, os.PathLike)):
                return os.fspath(value)
            raise ValueError(wrong)
        raise TypeError(f"unsupported parameter kind {self.kind}")

    def parse(self, task: str, name: str, text: str) -> Any:
        """Convert a command-line string to this parameter's type (then validated by ``check``)."""
        if self.optional and text.strip().lower() in ("none", "null", ""):
            return None
        try:
            if self.kind is bool:
                lowered = text.strip().lower()
                if lowered in ("1", "true", "yes", "on"):
                    return True
                if lowered in ("0", "false", "no", "off"):
                    return False
                raise ValueError
            if self.kind is int:
                return int(text)
            if self.kind is float:
                return float(text)
        except ValueError:
            raise ValueError(f"{task}: parameter {name}={text!r} is not a valid {self.kind.__name__}") from None
        return text


@dataclass(frozen=True)
class TaskSpec:
    """What a training loop needs to know about a task without knowing the task.

    ``input_kind`` is ``"tokens"`` (``input_size`` = vocabulary size) or ``"channels"`` (``input_size`` = C_in,
    positional channels included). The model output is ``[n, input_len, output_size]``; the loss and metrics
    read its ``output_len`` rightmost positions (``output_len == input_len`` except for regression tasks whose
    targets cover fewer positions).
    """

    input_kind: str
    input_size: int
    input_len: int
    head: str
    output_size: int
    output_len: int
    primary_metric: str
    higher_is_better: bool = True
    ignore_index: int = IGNORE_INDEX


class Task(ABC):
    """A data-generating task: parameters, ``generate``, loss, metrics and a human rendering.

    Subclasses declare ``name``, ``family``, ``reference`` and ``PARAMS``; implement ``_check`` (constraints
    between parameters), ``_spec`` and ``_generate(n, rng, split) -> (inputs, targets)`` as numpy arrays;
    and ``render``.
    """

    name: ClassVar[str]
    family: ClassVar[str]
    reference: ClassVar[str] = ""
    head_kind: ClassVar[str] = "lm"  # one of HEADS; also ``spec.head``
    PARAMS: ClassVar[dict[str, Param]] = {}
    splits: ClassVar[tuple[str, ...]] = ("train", "test")

    def __init__(self, **params: Any) -> None:
        unknown = sorted(set(params) - set(self.PARAMS))
        if unknown:
            allowed = ", ".join(sorted(self.PARAMS)) or "(none)"
            raise ValueError(
                f"{self.name}: unknown parameter(s) {', '.join(unknown)}"
                f"{did_you_mean(unknown, self.PARAMS)}; allowed: {allowed}"
            )
        resolved = {key: spec.check(self.name, key, params.get(key, spec.default)) for key, spec in self.PARAMS.items()}
        self.params: dict[str, Any] = resolved
        for key, value in resolved.items():
            setattr(self, key, value)
        self._check()
        self.spec: TaskSpec = self._spec()

    # --- to implement -------------------------------------------------------------------------------
    def _check(self) -> None:
        """Raise a ValueError if the parameters cannot be satisfied together."""

    @abstractmethod
    def _spec(self) -> TaskSpec: ...

    @abstractmethod
    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]: ...

    @abstractmethod
    def render(self, inputs: torch.Tensor, targets: torch.Tensor, index: int = 0) -> str:
        """A short human-readable rendering of example ``index``."""

    # --- shared behaviour -----------------------------------------------------------------------------
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {key: spec.default for key, spec in cls.PARAMS.items()}

    def _fail(self, message: str) -> NoReturn:
        raise ValueError(f"{self.name}: {message}")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"

    @property
    def input_kind(self) -> str:
        return self.spec.input_kind

    @property
    def input_size(self) -> int:
        return self.spec.input_size

    @property
    def input_len(self) -> int:
        return self.spec.input_len

    @property
    def head(self) -> str:
        return self.spec.head

    @property
    def output_size(self) -> int:
        return self.spec.output_size

    @property
    def output_len(self) -> int:
        return self.spec.output_len

    @property
    def primary_metric(self) -> str:
        return self.spec.primary_metric

    def split_seed(self, seed: int, split: str = "train") -> int:
        """The integer key of the random stream used by ``generate(n, seed, split)``; distinct per split."""
        self._check_seed_split(seed, split)
        words = np.random.SeedSequence([seed, SPLIT_CODES[split]]).generate_state(4, np.uint32)
        return int(sum(int(w) << (32 * i) for i, w in enumerate(words)))

    def rng(self, seed: int, split: str = "train") -> np.random.Generator:
        """The numpy generator behind ``generate(n, seed, split)``."""
        return np.random.Generator(np.random.PCG64(self.split_seed(seed, split)))

    def _check_seed_split(self, seed: int, split: str) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"{self.name}: seed={seed!r} must be a non-negative integer")
        if split not in self.splits:
            raise ValueError(f"{self.name}: split={split!r} must be one of {', '.join(map(repr, self.splits))}")

    def generate(
        self, num_examples: int, seed: int, split: str = "train", cache_dir: str | os.PathLike | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Generate ``num_examples`` examples from the stream ``(seed, split)``.

        With ``cache_dir`` (or the environment variable ``SEQDYN_TASK_CACHE``) the result is stored on disk
        under a hash of (name, parameters, seed, split, num_examples) and read back on the next call.
        """
        if isinstance(num_examples, bool) or not isinstance(num_examples, (int, np.integer)) or num_examples < 1:
            raise ValueError(f"{self.name}: num_examples={num_examples!r} must be a positive integer")
        self._check_seed_split(seed, split)
        num_examples = int(num_examples)
        seed = int(seed)
        cache_dir = cache_dir if cache_dir is not None else os.environ.get(CACHE_ENV) or None
        if cache_dir is not None:
            from seqdyn.tasks.cache import cached

            return cached(self, num_examples, seed, split, cache_dir, lambda: self._make(num_examples, seed, split))
        return self._make(num_examples, seed, split)

    def _make(self, n: int, seed: int, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = self._generate(n, self.rng(seed, split), split)
        return _to_tensor(inputs), _to_tensor(targets)

    # --- loss and metrics by head kind ------------------------------------------------------------------
    def _output_window(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The rightmost positions of ``outputs [n, T, out]`` that ``targets [n, T_out(, C)]`` refer to."""
        if outputs.shape[0] != targets.shape[0] or outputs.shape[1] < targets.shape[1]:
            self._fail(f"outputs of shape {tuple(outputs.shape)} do not cover targets of shape {tuple(targets.shape)}")
        return outputs[:, outputs.shape[1] - targets.shape[1] :]

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over labelled positions (token heads) or mean squared error (regression)."""
        outputs = self._output_window(outputs, targets)
        if outputs.dtype != torch.float64:  # half-precision logits: the loss in float32; a float64 model keeps it
            outputs = outputs.float()
        if self.head == "regression":
            return F.mse_loss(outputs, targets.to(outputs.device).to(outputs.dtype))
        return F.cross_entropy(
            outputs.reshape(-1, outputs.shape[-1]),
            targets.to(outputs.device).reshape(-1),
            ignore_index=IGNORE_INDEX,
        )

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """Accuracy over labelled positions (token heads); R² and MSE (regression)."""
        outputs = self._output_window(outputs.detach(), targets)
        targets = targets.to(outputs.device)
        if self.head == "regression":
            return regression_metrics(outputs, targets)
        return {"accuracy": token_accuracy(outputs, targets), "loss": float(self.loss(outputs, targets))}

    def metric_names(self) -> list[str]:
        """The names :meth:`metrics` reports, sorted (from one labelled position of zeros; no data generated)."""
        outputs = torch.zeros(1, 1, self.output_size)
        regression = self.head == "regression"
        targets = torch.zeros(1, 1, self.output_size) if regression else torch.zeros(1, 1, dtype=torch.long)
        return sorted(self.metrics(outputs, targets))


def _to_tensor(array: np.ndarray) -> torch.Tensor:
    if array.dtype.kind in "iub":
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


def token_accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of labelled positions (target != −100) whose argmax prediction equals the target."""
    mask = targets != IGNORE_INDEX
    if not bool(mask.any()):
        return float("nan")
    return float((outputs.argmax(-1)[mask] == targets[mask]).float().mean())


def per_example_accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Accuracy over each example's labelled positions, averaged over the examples that have labels."""
    mask = targets != IGNORE_INDEX
    hits = ((outputs.argmax(-1) == targets) & mask).sum(1).float()
    counts = mask.sum(1).float()
    has = counts > 0
    if not bool(has.any()):
        return float("nan")
    return float((hits[has] / counts[has]).mean())


def regression_metrics(outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """R² = 1 − MSE / Var(targets) with the mean taken over the whole batch (Gupta et al. 2022 §3.3), and the MSE."""
    outputs, targets = outputs.double(), targets.double()
    mse = float(((outputs - targets) ** 2).mean())
    var = float(((targets - targets.mean()) ** 2).mean())
    return {"r2": 1.0 - mse / var if var > 0 else float("nan"), "mse": mse}


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: make a task buildable by its ``name``."""
    if cls.name in _REGISTRY:
        raise ValueError(f"task {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    """All task names, sorted."""
    return sorted(_REGISTRY)


def task_class(name: str) -> type[Task]:
    """The class registered under ``name``; a ValueError listing the known names otherwise."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}{did_you_mean(name, names())}; known tasks: {', '.join(names())}")
    return _REGISTRY[name]


def build(name: str, **params: Any) -> Task:
    """Build the task ``name`` with ``params`` (validated; unspecified ones take the papers' defaults)."""
    return task_class(name)(**params)


# --- sampling helpers shared by the families ------------------------------------------------------------
def distinct_rows(rng: np.random.Generator, n: int, k: int, low: int, high: int) -> np.ndarray:
    """``[n, k]`` int64: each row a uniformly random ordered k-tuple of distinct integers in ``[low, high)``.

    Rows with a repeated value are redrawn whole (exact rejection sampling) when repeats are rare; otherwise
    each row takes the k smallest of ``high − low`` uniform keys, in increasing order of key.
    """
    size = high - low
    if not 0 <= k <= size:
        raise ValueError(f"cannot draw {k} distinct values from [{low}, {high})")
    if k * k <= 4 * size:
        out = rng.integers(low, high, size=(n, k))
        bad = np.arange(n)[_has_repeat(out)]
        while bad.size:
            out[bad] = rng.integers(low, high, size=(bad.size, k))
            bad = bad[_has_repeat(out[bad])]
        return out
    out = np.empty((n, k), dtype=np.int64)
    chunk = max(1, (1 << 22) // size)
    for start in range(0, n, chunk):
        keys = rng.random((min(chunk, n - start), size))
        smallest = np.argpartition(keys, k - 1, axis=1)[:, :k] if k < size else np.tile(np.arange(size), (len(keys), 1))
        order = np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1)
        out[start : start + len(keys)] = np.take_along_axis(smallest, order, axis=1) + low
    return out


def _has_repeat(rows: np.ndarray) -> np.ndarray:
    ordered = np.sort(rows, axis=1)
    return (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)


def first_index(codes: np.ndarray) -> np.ndarray:
    """For ``codes [n, m]`` (non-negative ints), the column of the first occurrence of each entry's value in its
    row: ``out[r, j] = min{i : codes[r, i] == codes[r, j]}``."""
    n, m = codes.shape
    flat = np.arange(n, dtype=np.int64)[:, None] * (int(codes.max(initial=0)) + 1) + codes
    order = np.argsort(flat, axis=None, kind="stable")
    ordered = flat.reshape(-1)[order]
    starts = np.ones(ordered.size, dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    group_first = order[np.maximum.accumulate(np.where(starts, np.arange(ordered.size), 0))]
    out = np.empty(n * m, dtype=np.int64)
    out[order] = group_first % m
    return out.reshape(n, m)


def positional_channels(length: int) -> np.ndarray:
    """``[length, 2]``: cos(2πi/T), sin(2πi/T) for i = 0..T−1 (Gupta et al. 2022 §3.1)."""
    angle = 2 * np.pi * np.arange(length) / length
    return np.stack([np.cos(angle), np.sin(angle)], axis=1)


# --- rendering helpers -----------------------------------------------------------------------------------
def render_tokens(
    inputs: torch.Tensor,
    targets: torch.Tensor,
    index: int,
    token_str=str,
    max_tokens: int = 96,
) -> str:
    """One example as ``tok`` or ``tok→target`` per position; long sequences keep their two ends."""
    x = inputs[index].tolist()
    y = targets[index].tolist()
    cells = [token_str(t) + (f"→{token_str(v)}" if v != IGNORE_INDEX else "") for t, v in zip(x, y)]
    if len(cells) > max_tokens:
        half = max_tokens // 2
        cells = cells[:half] + [f"… ({len(cells) - 2 * half} more) …"] + cells[-half:]
    labelled = sum(v != IGNORE_INDEX for v in y)
    return f"T={len(x)}, {labelled} labelled positions (tok→target)\n" + " ".join(cells)
