"""On-disk cache of generated data sets, keyed by a hash of (task name, parameters, seed, split, size).

Off unless ``generate(..., cache_dir=DIR)`` is given or the environment variable ``SEQDYN_TASK_CACHE`` names a
directory. Files are ``<name>-<hash>.pt`` (a dict of the two tensors, written atomically); bump
``FORMAT_VERSION`` whenever a generator changes its output so that stale files are not read back.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import torch

FORMAT_VERSION = 1


def cache_key(name: str, params: dict, seed: int, split: str, num_examples: int) -> str:
    """Hex SHA-256 of the canonical JSON of everything that determines the generated tensors."""
    blob = json.dumps(
        {"v": FORMAT_VERSION, "task": name, "params": params, "seed": seed, "split": split, "n": num_examples},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def cache_path(task, num_examples: int, seed: int, split: str, cache_dir: str | os.PathLike) -> Path:
    key = cache_key(task.name, task.params, seed, split, num_examples)
    return Path(cache_dir) / f"{task.name}-{key[:24]}.pt"


def cached(
    task,
    num_examples: int,
    seed: int,
    split: str,
    cache_dir: str | os.PathLike,
    make: Callable[[], tuple[torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Read the tensors from ``cache_dir`` if present, else ``make()`` them and store them there."""
    path = cache_path(task, num_examples, seed, split, cache_dir)
    if path.is_file():
        stored = torch.load(path, weights_only=True)
        return stored["inputs"], stored["targets"]
    inputs, targets = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save({"inputs": inputs, "targets": targets}, tmp)
    os.replace(tmp, path)
    return inputs, targets
