"""The chunk backend's general Householder path (KDA, RWKV-7, Gated DeltaProduct) in chunks of 16, 32 and 64: which
chunk the operator should choose where the caller names none (``HOUSEHOLDER_CHUNK_SIZE`` in ``seqdyn.core.problem``).

The three chunk sizes are timed in turn in one process: after a warm-up of each, ``--rounds`` rounds of one forward
+ backward each, the best kept; B sequences of T = 4096, H = 4, keys and values of ``--dim``, the arguments of
``seqdyn bench operator``.  The results do not depend on the chunk (the float64 suites check every size).

Run: python examples/pilots/householder_chunk_size.py [--kinds kda,rwkv7,deltaproduct] [--batch 4] [--dim 64]
[--threads 1] [--rounds 3] (one JSON line per kind: milliseconds per chunk size, and 32's time over 64's).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from seqdyn.bench.operator import make_arguments
from seqdyn.core.operator import coefficient_dynamics

SIZES = (16, 32, 64)


def timed_step(kind: str, batch: int, dim: int):
    """A function of the chunk size that times one forward + backward of ``kind``'s arguments in such chunks."""
    args, options = make_arguments(kind, batch, 4, 4096, dim, torch.device("cpu"))
    leaves = [x for x in (*args, *options.values()) if isinstance(x, torch.Tensor)]

    def seconds(size: int) -> float:
        for x in leaves:
            x.grad = None
        start = time.perf_counter()
        coefficient_dynamics(*args, backend="chunk", chunk_size=size, **options).sum().backward()
        return time.perf_counter() - start

    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="kda,rwkv7,deltaproduct")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for kind in args.kinds.split(","):
        seconds = timed_step(kind, args.batch, args.dim)
        for size in SIZES:
            seconds(size)  # warm-up
        best = {size: float("inf") for size in SIZES}
        for _ in range(args.rounds):
            for size in SIZES:
                best[size] = min(best[size], seconds(size))
        line = {"kind": kind, "batch": args.batch, "dim": args.dim, "threads": args.threads}
        line.update({f"chunk_{size}_ms": round(value * 1e3, 1) for size, value in best.items()})
        print(json.dumps({**line, "32_over_64": round(best[32] / best[64], 3)}))


if __name__ == "__main__":
    main()
