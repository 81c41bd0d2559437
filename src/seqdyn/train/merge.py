"""Merging one results store into another: the runs a visit to another machine trained, brought home.

``seqdyn merge VISIT.db --store LOCAL.db`` copies into the local store every run of the visit's store that is
further along there — a run only the visit has; a run with a result (finished, stopped early, diverged) where the
local one has none or failed; an unfinished run checkpointed at a later step — with its metrics and its checkpoint
file (copied beside the local store, so that the next call resumes it).  A run that both stores finished keeps the
local row when the two agree and stops the merge when they do not.  Everything is checked before anything is
written, and the copy is one transaction: merging the same store twice changes nothing the second time.  Where each
copied run came from is kept in the local store (:meth:`~seqdyn.train.store.Store.merged_from`).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from seqdyn.train.checkpoint import checkpoint_dir_for, sha256_of
from seqdyn.train.store import FINAL_STATUSES, RunRecord, Store


@dataclass
class MergeReport:
    """What a merge did: the runs it copied (new ones and ones further along than the local row) and how many it
    left because the local one was as far or further."""

    added: list[str] = field(default_factory=list)
    advanced: list[str] = field(default_factory=list)
    kept: int = 0


def merge_stores(source_path: str | Path, target_path: str | Path) -> MergeReport:
    """Merge the store ``source_path`` into ``target_path`` (created where absent); see the module."""
    source_path, target_path = Path(source_path), Path(target_path)
    if not source_path.exists():
        raise ValueError(f"merge: {source_path} does not exist")
    if target_path.exists() and source_path.resolve().samefile(target_path.resolve()):
        raise ValueError(f"merge: {source_path} is --store itself; name the other machine's store")
    source, target = Store(source_path, readonly=True), Store(target_path)
    report, chosen = MergeReport(), {}
    for run in source.runs():
        local = target.run(run.id)
        if local is not None:
            _check_agreement(run, local, source_path)
        if local is None or _further(run, local):
            chosen[run.id] = run
            (report.added if local is None else report.advanced).append(run.id)
        else:
            report.kept += 1
    found = {run_id: _located_checkpoint(run, source_path) for run_id, run in chosen.items()}
    checkpoints = {run_id: _copied(path, target_path) for run_id, path in found.items()}
    if checkpoints:
        target.copy_runs(source, checkpoints, origin=str(source_path.resolve()))
    return report


#: the statuses with a result (a failed run has none: the other machine may have trained it)
RESULTS = tuple(status for status in FINAL_STATUSES if status != "failed")


def _progress(run: RunRecord) -> tuple[int, int]:
    """How far a run got: a result, then a failure, then the step its checkpoint holds (0 without one)."""
    rank = 2 if run.status in RESULTS else 1 if run.status == "failed" else 0
    return rank, (run.checkpoint_step or 0) if run.checkpoint else 0


def _further(run: RunRecord, local: RunRecord) -> bool:
    return _progress(run) > _progress(local)


def _check_agreement(run: RunRecord, local: RunRecord, source_path: Path) -> None:
    """Raise ValueError where both stores have a result of the run and the results differ."""
    if run.status not in RESULTS or local.status not in RESULTS:
        return
    same = run.status == local.status and all(
        _same(getattr(run, name), getattr(local, name)) for name in ("best_metric", "final_metric", "step")
    )
    if not same:
        raise ValueError(
            f"merge: run {run.id} ({run.name}) has another result in {source_path} ({run.status}, best "
            f"{run.best_metric}) than in --store ({local.status}, best {local.best_metric}); nothing merged — "
            "remove it from one of the two (or merge into a fresh store) and merge again"
        )


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def _located_checkpoint(run: RunRecord, source_path: Path) -> Path | None:
    """A run's checkpoint file, checked (None where the run has none, or has a result and its file is gone): where
    the record says, else beside the source store (a visit's folder brought from another machine); its SHA-256
    must be the recorded one."""
    if not run.checkpoint:
        return None
    places = (Path(run.checkpoint), checkpoint_dir_for(source_path) / Path(run.checkpoint).name)
    found = next((path for path in places if path.is_file()), None)
    if found is None:
        if run.status in FINAL_STATUSES:
            return None
        raise ValueError(
            f"merge: the checkpoint of unfinished run {run.id} is neither at {run.checkpoint} nor beside "
            f"{source_path}; bring the store's .checkpoints folder with it"
        )
    if run.checkpoint_sha256 and sha256_of(found) != run.checkpoint_sha256:
        raise ValueError(
            f"merge: the checkpoint {found} of run {run.id} is damaged (its SHA-256 differs); nothing merged"
        )
    return found


def _copied(found: Path | None, target_path: Path) -> str | None:
    """The checkpoint ``found`` copied beside the target store: its new path (None for none)."""
    if found is None:
        return None
    destination = checkpoint_dir_for(target_path) / found.name
    if found.resolve() != destination.resolve():
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found, destination)
    return str(destination)
