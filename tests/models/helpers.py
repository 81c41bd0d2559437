"""Small specs and configs shared by the model tests."""

from __future__ import annotations

import torch

from seqdyn.models.config import ModelConfig
from seqdyn.tasks.base import TaskSpec

VOCAB, LENGTH, CHANNELS = 24, 12, 5


def spec(
    head: str = "lm",
    input_kind: str = "tokens",
    output_size: int | None = None,
    output_len: int | None = None,
    input_len: int = LENGTH,
    vocab: int = VOCAB,
) -> TaskSpec:
    """A task spec without a task: every head kind on token or channel inputs."""
    size = vocab if input_kind == "tokens" else CHANNELS
    out = output_size if output_size is not None else (vocab if head in ("lm", "autoencoder") else 3)
    return TaskSpec(input_kind, size, input_len, head, out, output_len or input_len, "accuracy")


def config(**fields) -> ModelConfig:
    base = dict(d_model=16, layers=2, mlp_ratio=2.0)
    return ModelConfig(**{**base, **fields})


def inputs(task_spec: TaskSpec, batch: int = 3, length: int | None = None, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    length = length or task_spec.input_len
    if task_spec.input_kind == "tokens":
        return torch.randint(0, task_spec.input_size, (batch, length), generator=generator)
    return torch.randn(batch, length, task_spec.input_size, generator=generator)
