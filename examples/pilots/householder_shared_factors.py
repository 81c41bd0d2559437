"""The chunk backend's general Householder path with diagonal decays (KDA, RWKV-7): each term from its own decayed
factors (as before 2026-12-03) against every term from four shared factors around one middle per chunk (now).

Both variants are the module's own functions (``_chunk_terms`` with ``diagonal=True`` and ``_shared_diagonal_terms``
in ``seqdyn.core.backends.chunk.householder``), swapped in turn in one process: after a warm-up of each, ``--rounds``
rounds of one forward + backward each, the best kept; B sequences of T = 4096, H = 4, K = V = 64, the arguments of
``seqdyn bench operator``.  Gated DeltaProduct (a scalar decay: the same path both ways) shows the noise.

Run: python examples/pilots/householder_shared_factors.py [--batch 4] [--threads 1] [--rounds 4]
(one JSON line per kind: milliseconds before and after, and their ratio).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from seqdyn.bench.operator import make_arguments
from seqdyn.core.backends.chunk import householder
from seqdyn.core.operator import coefficient_dynamics

SHARED = householder._shared_diagonal_terms


def own_factors(q, k, v, direction, weighted, gamma, before, written_log, total):
    return householder._chunk_terms(q, k, v, direction, weighted, gamma, before, written_log, total, True)


def seconds(kind: str, batch: int, variant) -> float:
    """One forward + backward of ``kind``'s arguments with ``variant`` as the diagonal terms."""
    householder._shared_diagonal_terms = variant
    try:
        (q, k, v), options = make_arguments(kind, batch, 4, 4096, 64, torch.device("cpu"))
        start = time.perf_counter()
        coefficient_dynamics(q, k, v, backend="chunk", **options).sum().backward()
        return time.perf_counter() - start
    finally:
        householder._shared_diagonal_terms = SHARED


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = {"before": own_factors, "after": SHARED}
    for kind in ("kda", "rwkv7", "deltaproduct"):
        for variant in variants.values():
            seconds(kind, args.batch, variant)  # warm-up
        best = {name: seconds(kind, args.batch, variant) for name, variant in variants.items()}
        for _ in range(args.rounds - 1):
            for name, variant in variants.items():
                best[name] = min(best[name], seconds(kind, args.batch, variant))
        line = {"kind": kind, "batch": args.batch, "threads": args.threads}
        line.update({f"{name}_ms": round(value * 1e3, 1) for name, value in best.items()})
        print(json.dumps({**line, "after_over_before": round(best["after"] / best["before"], 3)}))


if __name__ == "__main__":
    main()
