"""Checkpoint files that survive a crash: written durably beside the previous one, checked before a resume.

A checkpoint is written to a temporary file, flushed to disk (``fsync``) and checked; only then is the last one
kept as ``<run>.prev.safetensors`` (a hard link) and the new one renamed into its place (an atomic rename, then
an ``fsync`` of the folder). The caller records its SHA-256 in the store with its path. Before a resume the
file is checked: it is not empty, its safetensors header is readable and its tensors fill the file exactly, and
its SHA-256 is the one recorded. A bad file is named in one warning line and the run resumes from the previous
checkpoint when that one is intact, otherwise from step 0.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("seqdyn")

_CHUNK = 1 << 20


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


def checkpoint_problem(path: Path, sha256: str | None = None) -> str | None:
    """What is wrong with the checkpoint file ``path`` (missing, empty, an unreadable or incomplete safetensors
    header, a SHA-256 other than ``sha256`` when one is given), or None when it is intact."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        return "missing"
    if path.stat().st_size == 0:
        return "empty (0 bytes)"
    try:
        with safe_open(str(path), framework="pt") as handle:
            handle.metadata()
    except (SafetensorError, OSError) as error:
        return f"unreadable ({str(error).splitlines()[0]})"
    if sha256 is not None and sha256_of(path) != sha256:
        return "its SHA-256 differs from the one the store recorded when it was written"
    return None


def usable_checkpoint(path: Path, sha256: str | None) -> Path | None:
    """The checkpoint to resume from: ``path`` when intact (see :func:`checkpoint_problem`), else the previous
    checkpoint when that one is intact, else None (start from step 0); a bad ``path`` is named in one warning.

    The previous file is taken without a word when its SHA-256 is the recorded one: the store is one write
    behind the files (a writer renamed a new checkpoint in and is about to record it, or died in between).
    """
    problem = checkpoint_problem(path, sha256)
    if problem is None:
        return path
    previous = previous_path(path)
    if sha256 is not None and checkpoint_problem(previous, sha256) is None:
        return previous  # the store describes the previous file: a newer one was renamed in but not recorded yet
    fallback = previous if checkpoint_problem(previous) is None else None
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
