"""How fast the task generators are on one CPU core (``seqdyn bench tasks`` prints it).

Times, with torch limited to one thread unless ``--threads`` says more (these generators use numpy's element-wise
kernels, which run on one core, and no BLAS): 100,000 MQAR examples at L = 512 with 64 pairs
(target < 10 s), 1,000 ``listops_subtrees`` expressions of 7,000–8,192 tokens (target < 30 s), 100
``pathfinder_segmentation`` images at M = 256 (target < 30 s) and at M = 512 (no target). ``--scale`` multiplies
every count, and the targets with them, for a quick run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Case:
    label: str
    task: str
    params: dict
    count: int
    target_s: float | None


CASES = [
    Case("MQAR, L=512, 64 pairs", "mqar", {"seq_len": 512, "num_kv_pairs": 64}, 100_000, 10.0),
    Case("ListOps-SubTrees, 7000–8192 tokens", "listops_subtrees", {}, 1_000, 30.0),
    Case("Pathfinder-Segmentation, M=256", "pathfinder_segmentation", {"seq_len": 256 * 256}, 100, 30.0),
    Case("Pathfinder-Segmentation, M=512", "pathfinder_segmentation", {"seq_len": 512 * 512}, 100, None),
]


def run(scale: float = 1.0, skip_512: bool = False, seed: int = 0) -> list[dict]:
    """Time every case single-threaded; returns one row per case (label, count, seconds, target, met)."""
    from seqdyn.bench.measure import pinned_threads
    from seqdyn.tasks import build

    rows = []
    with pinned_threads():
        for case in CASES:
            if skip_512 and "512" in case.label and case.task == "pathfinder_segmentation":
                continue
            count = max(1, round(case.count * scale))
            task = build(case.task, **case.params)
            start = time.perf_counter()
            task.generate(count, seed)
            seconds = time.perf_counter() - start
            target = None if case.target_s is None else case.target_s * count / case.count
            met = None if target is None else seconds < target
            rows.append({"case": case.label, "count": count, "seconds": seconds, "target_s": target, "met": met})
    return rows
