"""tools/gpu_visit.sh on the CPU at the smoke scale: a visit packs its store, checkpoints and verdicts into one
file; brought home and merged, the next visit starts from that store and trains nothing twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from seqdyn.train.merge import merge_stores
from seqdyn.train.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _visit(tmp_path: Path, home: Path, name: str) -> Path:
    """One visit of ``dlr_context`` at the smoke scale; its file unpacked into ``tmp_path/name``."""
    out = tmp_path / f"{name}-out"
    out.mkdir()
    environment = dict(
        os.environ,
        SCALE="smoke",
        ONLY="dlr_context",
        HOME_STORE=str(home),
        PYTHON=sys.executable,
        OUT=str(out),
        WORKERS="1",
        STACK="2",  # passed to every reproduce call (the smoke runs, one seed each, have nothing to stack)
        OMP_NUM_THREADS="1",
    )
    done = subprocess.run(
        ["bash", "tools/gpu_visit.sh", "10m"], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    unpacked = tmp_path / name
    with tarfile.open(out / "visit.tar.gz") as packed:
        packed.extractall(unpacked, filter="data")
    return unpacked


@pytest.mark.slow
def test_a_visit_brought_home_and_merged_is_where_the_next_visit_starts(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    first = _visit(tmp_path, home, "first")
    assert (first / "out" / "dlr_context" / "verdict.json").exists()
    report = merge_stores(first / "seqdyn.db", home / "seqdyn.db")
    with Store(home / "seqdyn.db", readonly=True) as store:
        finished = {run.id for run in store.runs(status="finished")}
    assert len(report.added) == len(finished) > 0
    second = _visit(tmp_path, home, "second")
    assert merge_stores(second / "seqdyn.db", home / "seqdyn.db").added == []  # nothing new: nothing trained twice
    with Store(second / "seqdyn.db", readonly=True) as store:
        assert {run.id for run in store.runs(status="finished")} == finished
    verdict = json.loads((second / "out" / "dlr_context" / "verdict.json").read_text())
    assert verdict["runs_before"] == verdict["runs"] == len(finished)  # every run read back from the first visit
