"""Checkpoints of a run: where they live, how they are saved and loaded, and files that survive a crash.

A checkpoint (safetensors) holds the model, the optimizer state and the RNG state with the run's metadata
(:func:`save_checkpoint`, :func:`load_checkpoint`); :func:`load_trained` rebuilds a trained model from the store.
A run's checkpoint is ``<folder>/<run id>.safetensors`` (:func:`run_checkpoint_path`), and a sweep's folder lies
beside its store (:func:`checkpoint_dir_for`).

A checkpoint is written to a temporary file, flushed to disk (``fsync``) and checked; only then is the last one
kept as ``<run>.prev.safetensors`` (a hard link) and the new one renamed into its place (an atomic rename, then
an ``fsync`` of the folder). The caller records its SHA-256 in the store with its path. Before a resume the
file is checked: it is not empty, its safetensors header is readable and its tensors fill the file exactly, and
its SHA-256 is the one recorded. A bad file is named in one warning line and the run resumes from the previous
checkpoint when that one is intact, otherwise from step 0.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqdyn.train.config import validated_run

log = logging.getLogger("seqdyn")

_CHUNK = 1 << 20


def checkpoint_dir_for(store_path: str | Path) -> Path:
    """Checkpoints live beside the store: ``results.db`` -> ``results.checkpoints/``."""
    store_path = Path(store_path)
    return store_path.with_name(store_path.stem + ".checkpoints")


def run_checkpoint_path(checkpoint_dir: str | Path | None, run_id: str) -> Path:
    """The checkpoint file of run ``run_id``: ``<checkpoint_dir>/<run_id>.safetensors`` (``./checkpoints`` when no
    folder is given)."""
    return Path(checkpoint_dir or "checkpoints") / f"{run_id}.safetensors"


def recorded_checkpoint(record) -> tuple[Path | None, str | None]:
    """The checkpoint file a store record names and its recorded SHA-256 (``None, None`` without one)."""
    if record is None or not record.checkpoint:
        return None, None
    return Path(record.checkpoint), record.checkpoint_sha256


def previous_path(path: Path) -> Path:
    """Where the checkpoint before ``path`` is kept: ``run.safetensors`` -> ``run.prev.safetensors``."""
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def sha256_of(path: Path) -> str:
    """The SHA-256 of the file's bytes, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def write_durably(path: Path, write: Callable[[Path], None]) -> str:
    """Write the checkpoint ``path`` through ``write(temporary_path)``: fsync and check the new file, keep the
    current one as :func:`previous_path`, rename the new one into place and fsync the folder. Returns the new
    file's SHA-256. A file that reads back damaged raises ``OSError`` and leaves the current one in place; a
    damaged current one is not kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    try:
        write(temporary)
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        problem = checkpoint_problem(temporary)
        if problem is not None:
            raise OSError(f"checkpoint {temporary}: {problem} right after writing it")
        digest = sha256_of(temporary)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if checkpoint_problem(path) is None:
        _keep_as_previous(path)
    os.replace(temporary, path)
    _fsync_directory(path.parent)
    return digest


def checkpoint_problem(path: Path, sha256: str | None = None, run_id: str | None = None) -> str | None:
    """What is wrong with the checkpoint file ``path`` (missing, empty, an unreadable or incomplete safetensors
    header, a SHA-256 other than ``sha256`` when one is given, another run's when ``run_id`` is given), or None
    when it is intact."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        return "missing"
    if path.stat().st_size == 0:
        return "empty (0 bytes)"
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
    except (SafetensorError, OSError) as error:
        return f"unreadable ({str(error).splitlines()[0]})"
    if sha256 is not None and sha256_of(path) != sha256:
        return "its SHA-256 differs from the one the store recorded when it was written"
    if run_id is not None:
        try:
            owner = json.loads(metadata.get("seqdyn", "{}")).get("run_id")
        except json.JSONDecodeError:
            owner = None
        if owner != run_id:
            return f"it belongs to run {owner}, not {run_id}"
    return None


def usable_checkpoint(path: Path, sha256: str | None, run_id: str | None = None) -> Path | None:
    """The checkpoint to resume from: ``path`` when intact and run ``run_id``'s (see :func:`checkpoint_problem`),
    else the previous checkpoint when that one is, else None (start from step 0); a bad ``path`` is named in one
    warning — another run's file (copied over this one's before its checksum was recorded) too.

    The previous file is taken without a word when its SHA-256 is the recorded one: the store is one write
    behind the files (a writer renamed a new checkpoint in and is about to record it, or died in between).
    """
    problem = checkpoint_problem(path, sha256, run_id)
    if problem is None:
        return path
    previous = previous_path(path)
    if sha256 is not None and checkpoint_problem(previous, sha256, run_id) is None:
        return previous  # the store describes the previous file: a newer one was renamed in but not recorded yet
    fallback = previous if checkpoint_problem(previous, run_id=run_id) is None else None
    then = f"resuming from the previous checkpoint {previous}" if fallback else "restarting the run from step 0"
    log.warning("checkpoint %s: %s; %s", path, problem, then)
    return fallback


def _keep_as_previous(path: Path) -> None:
    previous = previous_path(path)
    previous.unlink(missing_ok=True)
    try:
        os.link(path, previous)
    except OSError:  # a file system without hard links
        shutil.copy2(path, previous)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


# ------------------------------------------------------------------------------------------- save and load
def save_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, meta: dict[str, Any]) -> str:
    """Model and optimizer tensors plus JSON metadata in one safetensors file, written durably (the previous
    one kept, see :func:`write_durably`); returns the file's SHA-256."""
    from safetensors.torch import save_file

    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    state = optimizer.state_dict()
    for index, values in state["state"].items():
        for key, value in values.items():
            tensors[f"optim.{index}.{key}"] = torch.as_tensor(value).contiguous().cpu()
    tensors["rng.torch"] = torch.get_rng_state()
    meta = dict(meta, param_groups=[{k: v for k, v in g.items() if k != "params"} for g in state["param_groups"]])
    try:
        return write_durably(
            path, lambda temporary: save_file(tensors, str(temporary), metadata={"seqdyn": json.dumps(meta)})
        )
    except OSError as error:  # a full disk: the partial file is gone, the last good checkpoint stays
        raise OSError(error.errno, f"cannot write the checkpoint ({error.strerror or error})", str(path)) from None


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, run_id: str
) -> dict[str, Any]:
    """Restore model, optimizer and RNG from :func:`save_checkpoint`; returns the metadata.  A checkpoint of
    another run or another architecture raises ``ValueError``."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as handle:
        meta = json.loads(handle.metadata()["seqdyn"])
    if meta.get("run_id") != run_id:
        raise ValueError(f"checkpoint {path}: belongs to run {meta.get('run_id')}, not {run_id}")
    tensors = load_file(str(path))
    _load_weights(path, model, tensors)
    state: dict[str, Any] = {"state": {}, "param_groups": []}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            state["state"].setdefault(int(index), {})[name] = value
    groups = optimizer.state_dict()["param_groups"]
    # keys a checkpoint of an older version lacks (base_lr) come from the optimizer as built now
    state["param_groups"] = [
        {**group, **saved, "params": group["params"]} for saved, group in zip(meta["param_groups"], groups)
    ]
    optimizer.load_state_dict(state)
    torch.set_rng_state(tensors["rng.torch"])
    return meta


def _load_weights(path: Path, model: torch.nn.Module, tensors: dict[str, Tensor]) -> None:
    weights = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:
        raise ValueError(
            f"checkpoint {path}: does not match the config's model ({str(error).splitlines()[0]})"
        ) from None


class MissingCheckpoint(ValueError):
    """A finished run whose checkpoint is not on disk (a store copied without its checkpoint folder)."""

    def __init__(self, run_id: str, message: str):
        super().__init__(message)
        self.run_id = run_id


def load_trained(store, run_id: str):
    """``(config, task, model)`` of run ``run_id`` in ``store`` with the weights of its last checkpoint, in
    evaluation mode on the CPU.  An unknown run id, or a run without a checkpoint or with a damaged one, raises
    ``ValueError``."""
    from safetensors.torch import load_file

    from seqdyn import tasks
    from seqdyn.models import build_model

    record = store.run(run_id)
    if record is None:
        known = ", ".join(r.id for r in store.runs()[:10]) or "none"
        raise ValueError(f"run id {run_id!r}: not in store {store.path}; runs there include: {known}")
    path = Path(record.checkpoint or "")
    if record.checkpoint and not path.exists():  # the store and its checkpoint folder moved together
        path = checkpoint_dir_for(store.path) / path.name
    if not record.checkpoint or not path.exists():
        raise MissingCheckpoint(
            run_id,
            f"run {run_id} ({record.status}): has no checkpoint on disk ({record.checkpoint or 'none recorded'})",
        )
    problem = checkpoint_problem(path, record.checkpoint_sha256)
    if problem is not None:
        raise ValueError(f"run {run_id}: checkpoint {path}: {problem}; train the run again to rewrite it")
    config = validated_run(record.config, f"run {run_id}")  # a mixer that no longer imports: one line naming it
    task = tasks.build(config.task.name, **config.task.params)
    model = build_model(config.model, task.spec)
    _load_weights(path, model, load_file(str(path)))
    return config, task, model.eval()
