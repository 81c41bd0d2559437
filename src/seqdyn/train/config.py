"""Typed run and sweep configurations (pydantic), read from YAML.

A run config::

    name: mqar-demo
    model: {block: transformer, mixer: mamba2, mixer_options: {state_dim: 16}, d_model: 64, layers: 2}
    task: {name: mqar, params: {seq_len: 64, num_kv_pairs: 4}, train_examples: 20000, test_examples: 1000}
    optimizer: {lr: 1.0e-3, weight_decay: 0.1}
    schedule: {kind: cosine, warmup: 0.1}
    train: {epochs: 8, batch_size: 64, early_stop: {threshold: 0.99}}

A sweep config is a run config plus ``sweep``: a mapping from dotted paths to lists.  The grid of all
combinations expands to runs; a value that is a mapping replaces the keys it names at its path (one level
deep), so one axis can change a mixer together with its options::

    sweep:
      model: [{mixer: softmax_attention}, {mixer: mamba2, mixer_options: {state_dim: 16}}]
      optimizer.lr: [1.0e-3, 3.0e-3]

Each run's id is a hash of its resolved config, so the same run always has the same id.  Errors name the field
and the file.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from seqdyn.core.names import did_you_mean
from seqdyn.models.config import ModelConfig, Strict, describe_errors

#: MixtureOfExperts' fields as they were when its section was added to ModelConfig (the later ones are in
#: :data:`ADDED_FIELDS` under ``model.moe``): what a run written before the section existed is compared with
FIRST_MOE = {"experts": 8, "top_k": 2, "normalize": True, "shared_ratio": 0.0, "shared_gate": True}

#: ``(section, field, default)`` of the fields added to the configs after run ids were first given; a section may be
#: nested (``"model.moe"``): its added fields are set aside before the section itself is compared with its default
ADDED_FIELDS = (
    ("model", "norm_position", "pre"),
    ("optimizer", "ssm_lr", None),
    ("optimizer", "ssm_weight_decay", None),
    ("model", "bidirectional", False),
    ("train", "pack", False),
    ("model", "norm_eps", None),
    ("model.moe", "router", "softmax"),
    ("model.moe", "groups", 1),
    ("model.moe", "top_groups", 1),
    ("model.moe", "routed_scale", 1.0),
    ("model.moe", "selection_bias", False),
    ("model.moe", "normalize_eps", 0.0),
    ("model", "moe", FIRST_MOE),
    ("model", "logit_softcap", None),
    ("model", "keep_mixer_init", True),
    ("model", "residual_scale", 1.0),
    ("model", "embedding_norm", False),
    ("model", "shared_blocks", []),
    ("model", "shared_inputs", None),
)


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """What identifies a run: its canonical config without its ``name`` and without the fields of
    :data:`ADDED_FIELDS` left at their default (a run written before such a field existed is the same run)."""
    data = copy.deepcopy({key: value for key, value in config.items() if key != "name"})
    for section, key, default in sorted(ADDED_FIELDS, key=lambda entry: -entry[0].count(".")):
        holder = _section(data, section)
        if isinstance(holder, dict) and holder.get(key, default) == default:
            holder.pop(key, None)
    return data


def _section(data: dict[str, Any], dotted: str) -> Any:
    """``data``'s sub-dict at the dotted path (None where a part is missing or not a dict)."""
    for part in dotted.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


class ConfigError(ValueError):
    """An invalid config; the message names the file and the field."""


class TaskConfig(Strict):
    """The task, its parameters and data sizes; train and test data come from disjoint seeds."""

    name: str = Field(description="a task name (`seqdyn tasks list` lists them)")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="the task's parameters, e.g. seq_len (`seqdyn tasks list` lists them with their defaults)",
    )
    train_examples: int = Field(100_000, gt=0, description="training examples generated: one epoch")
    test_examples: int = Field(3_000, gt=0, description="test examples generated; every evaluation runs them all")
    seed: int = Field(0, description="seed of the generated data (train and test examples from disjoint streams)")

    @model_validator(mode="after")
    def _check_task(self) -> TaskConfig:
        from seqdyn import tasks

        if self.name not in tasks.names():
            raise ValueError(
                f"name: unknown task {self.name!r}{did_you_mean(self.name, tasks.names())}; "
                f"known tasks: {', '.join(tasks.names())}"
            )
        tasks.build(self.name, **self.params)  # parameter errors name the parameter
        return self


class OptimizerConfig(Strict):
    """AdamW with decoupled weight decay on matrices, and gradient-norm clipping."""

    lr: float = Field(1e-3, gt=0, description="peak learning rate (the schedule scales it)")
    ssm_lr: Union[float, None] = Field(
        None,
        gt=0,
        description="peak learning rate of the mixers' state-space "
        "parameters (Λ, Δ; all of an LTI layer's B, C, W: `Mixer.ssm_parameters`), "
        "S4's convention; null: lr",
    )
    ssm_weight_decay: Union[float, None] = Field(
        None,
        ge=0,
        description="weight decay of the state-space "
        "parameters (Gupta et al. 2022: 0, 'weight decay is not applied to DLR "
        "parameters'); null: as the other parameters",
    )
    weight_decay: float = Field(
        0.1,
        ge=0,
        description="AdamW's decoupled weight decay, on matrices only (not on biases, norms or 1-D gate parameters)",
    )
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW's (β₁, β₂), each in [0, 1)")
    eps: float = Field(1e-8, gt=0, description="AdamW's ε")
    grad_clip: Union[float, None] = Field(1.0, gt=0, description="clip the gradient norm to this; null: no clipping")

    @field_validator("betas")
    @classmethod
    def _betas(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in value):
            raise ValueError(f"each beta must lie in [0, 1), got {value}")
        return value


class ScheduleConfig(Strict):
    """Learning-rate schedule: cosine decay to ``min_lr`` (or constant) after a linear warm-up fraction."""

    kind: Literal["cosine", "constant"] = Field(
        "cosine", description="after the warm-up: cosine decay from lr to min_lr at the last step, or lr constant"
    )
    warmup: float = Field(
        0.0, ge=0, lt=1, description="fraction of the training steps over which the learning rate rises linearly to lr"
    )
    min_lr: float = Field(0.0, ge=0, description="the learning rate the cosine decay ends at")


class EarlyStopConfig(Strict):
    """Stop when the test metric reaches ``threshold`` (Zoology: MQAR accuracy 0.99); ``None`` never stops."""

    metric: Union[str, None] = Field(
        None,
        description="the test metric watched (for the best value and early "
        "stopping); default: the task's primary metric",
    )
    threshold: Union[float, None] = Field(
        None,
        description="stop once the watched metric reaches this (≥ where "
        "higher is better, else ≤); null: never stop early",
    )


class TrainConfig(Strict):
    """Length of training, batching, evaluation, checkpoints, seed, device and precision."""

    epochs: Union[int, None] = Field(
        None,
        gt=0,
        description="length in passes over task.train_examples; give "
        "exactly one of epochs and steps (a run without a train section: 1 epoch)",
    )
    steps: Union[int, None] = Field(
        None, gt=0, description="length in optimizer steps; give exactly one of epochs and steps"
    )
    batch_size: int = Field(64, gt=0, description="examples per training step and per evaluation batch")
    eval_every: Union[int, None] = Field(
        None,
        gt=0,
        description="steps between evaluations on the test examples "
        "(and after the last step); default: each epoch, or a tenth of the steps "
        "with steps",
    )
    checkpoint_every: Union[int, None] = Field(
        None, gt=0, description="steps between checkpoints; default: each evaluation"
    )
    early_stop: EarlyStopConfig = Field(default_factory=EarlyStopConfig)
    seed: int = Field(0, description="seed of the model's initialization and of the order of the training batches")
    device: str = Field("cpu", description="cpu, cuda, cuda:N or auto (cuda when available)")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="precision of the forward pass: float32; bfloat16 or float16 under torch.autocast "
        "(weights and optimizer stay float32); float16 also scales the loss (torch.amp.GradScaler, its state kept "
        "in the checkpoint), skipping a step whose gradients overflow",
    )
    backend: str = Field(
        "auto",
        description="the backend every mixer computes with: auto (each picks the "
        "fastest exact one, measured once per shape on this machine and recorded with the run, "
        "with why) or one that every layer's mixer accepts (quadratic, chunk, scan, fft, ...)",
    )
    pack: bool = Field(
        False,
        description="language modelling on documents (the lm task with "
        "document_separator): each batch's documents packed end to end in one row (cu_seqlens) "
        "instead of right-padded rows — no padding computed, no document reads another, the same "
        "loss per real token",
    )

    @model_validator(mode="after")
    def _length(self) -> TrainConfig:
        if (self.epochs is None) == (self.steps is None):
            raise ValueError("give exactly one of epochs and steps")
        if not (self.device in ("cpu", "cuda", "auto") or self.device.startswith("cuda:")):
            raise ValueError(f"device: expected 'cpu', 'cuda', 'cuda:N' or 'auto', got {self.device!r}")
        return self


class LoggersConfig(Strict):
    """Optional loggers, off by default (the results store always records everything)."""

    wandb: bool = Field(False, description="log every evaluation's metrics to Weights & Biases (the wandb package)")
    tensorboard: bool = Field(
        False,
        description="write every evaluation's metrics as TensorBoard events, under logs/RUN_ID beside the checkpoints",
    )
    project: str = Field("seqdyn", description="the Weights & Biases project")


class RunConfig(Strict):
    """One training run."""

    name: str = Field(
        "run", description="the run's name (a sweep appends the values of its axes); not part of the run id"
    )
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    train: TrainConfig = Field(default_factory=lambda: TrainConfig(epochs=1))
    loggers: LoggersConfig = Field(default_factory=LoggersConfig)

    @model_validator(mode="before")
    @classmethod
    def _finite(cls, data: Any) -> Any:
        """Every number finite, in free-form sections (mixer options, task parameters, sweep axes) too."""
        found = _non_finite(data)
        if found is not None:
            raise ValueError(f"{found[0]}: expected a finite number, got {found[1]!r}")
        return data

    @model_validator(mode="after")
    def _runnable(self) -> RunConfig:
        """What only the task and the model can tell: the early-stop metric is one the task reports, and the
        model (built on the meta device: no memory, no time) accepts the mixer options and ``train.backend``.
        A sweep's base is not a run: its expanded runs are checked instead."""
        if isinstance(self, SweepConfig):
            return self
        from seqdyn import tasks

        task = tasks.build(self.task.name, **self.task.params)
        metric, reported = self.train.early_stop.metric, task.metric_names()
        if metric is not None and metric not in reported:
            raise ValueError(f"train.early_stop.metric: task {task.name} reports {', '.join(reported)}; got {metric!r}")
        if self.train.pack and getattr(task, "document_separator", None) is None:
            raise ValueError(
                "train.pack: packs documents — the lm task with task.params.document_separator (e.g. "
                f"'\\n\\n'); task {task.name} has none"
            )
        for layer, (mixer, backends) in enumerate(_layer_backends(self.model.model_dump_json(), task.spec)):
            if self.train.backend not in backends:
                raise ValueError(
                    f"train.backend: {mixer} (layer {layer}) computes with {list(backends)}, got {self.train.backend!r}"
                )
        return self

    def canonical(self) -> dict[str, Any]:
        """The resolved config as plain data (every default filled in)."""
        return self.model_dump(mode="json")

    @property
    def run_id(self) -> str:
        """A stable id: the first 12 hex digits of the SHA-256 of the canonical JSON (the name excluded).  Fields
        added after ids were first given (:data:`ADDED_FIELDS`) enter it only when they differ from their default,
        so a config written before them keeps its id, and a store its runs."""
        text = json.dumps(identity(self.canonical()), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]


class SweepConfig(RunConfig):
    """A run config plus grid axes: dotted path -> list of values (mappings merge into the base)."""

    sweep: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="grid axes: dotted path → list of "
        "values; every combination is a run; a mapping replaces the keys it names "
        "at its path",
    )

    @field_validator("sweep")
    @classmethod
    def _axes(cls, axes: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for path, values in axes.items():
            if not values:
                raise ValueError(f"{path}: an axis needs at least one value")
        return axes

    def expand(self) -> list[RunConfig]:
        """Every combination of the axes as a run config (validated), in a deterministic order."""
        base = self.model_dump(mode="json", exclude={"sweep"})
        runs = []
        for combination in itertools.product(*self.sweep.values()):
            data = copy.deepcopy(base)
            labels = []
            for path, value in zip(self.sweep, combination):
                _set_path(data, path, value)
                labels.append(_label(path, value))
            if labels:
                data["name"] = f"{base['name']}[{', '.join(labels)}]"
            runs.append(validated_run(data, f"run {data['name']!r}"))
        return runs


def validated_run(data: dict[str, Any], what: str) -> RunConfig:
    """A run config from plain data (an expanded run of a sweep, a run recorded in a store); an error is one
    :class:`ConfigError` line that starts with ``what`` (a mixer that no longer imports: its import path)."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{what}: {describe_errors(error, RunConfig)}") from None


@functools.lru_cache(maxsize=256)
def _layer_backends(model_json: str, spec) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(mixer name, backends it accepts)`` of every layer of the model ``model_json`` builds for the task
    ``spec``, built on the meta device (shapes only; the runs of a sweep that share a model build it once).  An
    option a mixer refuses raises its ``ValueError``, named ``model.…``."""
    import torch

    from seqdyn.models import build_model

    try:
        with torch.device("meta"):
            model = build_model(ModelConfig.model_validate_json(model_json), spec)
    except ValueError as error:
        raise ValueError(f"model.{error}") from None
    return tuple((block.mixer.name, tuple(block.mixer.backends)) for block in model.blocks)


def _non_finite(data: Any, path: str = "") -> tuple[str, float] | None:
    """The dotted path and value of the first NaN or infinite number in plain data, or ``None``."""
    if isinstance(data, float) and not math.isfinite(data):
        return path or "(top level)", data
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, (list, tuple)) else ()
    for key, value in items:
        found = _non_finite(value, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _set_path(data: dict, path: str, value: Any) -> None:
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        if key not in node or not isinstance(node[key], dict):
            raise ValueError(f"sweep: {path}: {key!r} is not a section of the config")
        node = node[key]
    if isinstance(value, dict) and isinstance(node.get(keys[-1]), dict):
        node[keys[-1]] = {**node[keys[-1]], **value}  # the keys a value names replace the base's
    else:
        node[keys[-1]] = value


def _label(path: str, value: Any) -> str:
    """``key=value`` for an axis value; a mapping gives all its leaves (nested ones, e.g. mixer options, too)."""
    if isinstance(value, dict):
        return ", ".join(label for key, item in value.items() if (label := _label(key, item)))
    return f"{path.split('.')[-1]}={value}"


def parse_config(data: Any, source: str = "<config>") -> RunConfig | SweepConfig:
    """Validate plain data as a run config, or as a sweep config when it has a ``sweep`` section."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        if "sweep" in data:
            sweep = SweepConfig.model_validate(data)
            sweep.expand()  # every combination must be valid too
            return sweep
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(
            f"{source}: {describe_errors(error, SweepConfig if 'sweep' in data else RunConfig)}"
        ) from None
    except ValueError as error:
        raise ConfigError(f"{source}: {error}") from None


def load_config(path: str | Path) -> RunConfig | SweepConfig:
    """Read and validate a YAML config file; every problem raises :class:`ConfigError` naming the file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the config ({error.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: line {line}: byte 0x{raw[error.start]:02x} is not UTF-8; save the file as UTF-8"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {getattr(error, 'problem', error)}") from None
    return parse_config(data, str(path))
