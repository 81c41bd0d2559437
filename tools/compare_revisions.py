"""Time the operator's backends and the mixers at two revisions of seqdyn side by side: new ÷ old per cell.

    python tools/compare_revisions.py --old 5cdd32b --suite mixers --seq-lens 1024,4096 --rounds 2

The old revision is checked out into a temporary git worktree; the new one is this checkout (``--new PATH`` for
another).  Each round runs one process per revision, alternating which goes first, and each process times every
cell on one thread (``OMP_NUM_THREADS=1``), freed memory kept for reuse as ``seqdyn bench`` keeps it, in CPU
seconds of the process (``time.process_time``), which another job on a shared machine disturbs far less than wall
time; a cell keeps its best time over repeats and rounds.
Cells: ``operator`` the ``chunk``, ``scan`` and ``auto`` backends of ``coefficient_dynamics`` for the argument
types of ``seqdyn bench operator`` (B = 4, H = 4, K = V = 64); ``mixers`` every mixer of the new revision with
backend ``auto`` (B = 4, D = 256), as ``seqdyn bench mixers`` runs them.  Both use only what both revisions have
(``seqdyn.coefficient_dynamics``, ``seqdyn.bench.operator.make_arguments``, ``seqdyn.mixers.build``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPERATOR_BACKENDS = ("chunk", "scan", "auto")


def _best(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def _operator_cells(seq_lens: list[int], repeats: int):
    import torch

    import seqdyn
    from seqdyn.bench.operator import KINDS, make_arguments

    for length in seq_lens:
        for kind in KINDS:
            (q, k, v), options = make_arguments(kind, 4, 4, length, 64, torch.device("cpu"))
            leaves = [q, k, v] + [x for x in options.values() if isinstance(x, torch.Tensor) and x.requires_grad]
            for backend in OPERATOR_BACKENDS:
                if backend == "scan" and kind in ("deltanet", "softmax"):
                    continue  # the scan takes no Householder factor and no exp readout

                def forward():
                    with torch.no_grad():
                        seqdyn.coefficient_dynamics(q, k, v, backend=backend, **options)

                def train_step():
                    for x in leaves:
                        x.grad = None
                    seqdyn.coefficient_dynamics(q, k, v, backend=backend, **options).square().mean().backward()

                yield f"{kind} T={length} {backend}", _best(forward, repeats), _best(train_step, repeats)


def _mixer_cells(seq_lens: list[int], repeats: int, names: list[str]):
    import torch

    from seqdyn import mixers

    for length in seq_lens:
        for name in names:
            torch.manual_seed(0)
            mixer = mixers.build(name, 256)
            x = torch.randn(4, length, 256, requires_grad=True)

            def forward():
                with torch.no_grad():
                    mixer(x, backend="auto")

            def train_step():
                mixer.zero_grad(set_to_none=True)
                x.grad = None
                mixer(x, backend="auto").square().mean().backward()

            yield f"{name} T={length}", _best(forward, repeats), _best(train_step, repeats)


def child(suite: str, seq_lens: list[int], repeats: int, names: list[str]) -> None:
    """Time every cell of ``suite`` with the seqdyn on ``sys.path``; one JSON line per cell on stdout.  glibc keeps
    freed memory for reuse (``seqdyn.bench.measure.track_allocations(False)``, as ``seqdyn bench`` does): without
    it a cell's time depends on what the process allocated before it, up to 2×."""
    from seqdyn.bench.measure import track_allocations

    track_allocations(False)
    cells = _operator_cells(seq_lens, repeats) if suite == "operator" else _mixer_cells(seq_lens, repeats, names)
    for cell, forward_s, train_s in cells:
        print(json.dumps({"cell": cell, "forward_s": forward_s, "train_s": train_s}), flush=True)


def _run(tree: Path, args: argparse.Namespace, names: list[str]) -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [
        sys.executable,
        __file__,
        "--child",
        "--suite",
        args.suite,
        "--seq-lens",
        args.seq_lens,
        "--repeats",
        str(args.repeats),
        "--names",
        ",".join(names),
    ]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return {row["cell"]: row for row in map(json.loads, out.splitlines())}


def _keep_best(best: dict[str, dict], rows: dict[str, dict]) -> None:
    for cell, row in rows.items():
        if cell in best:
            best[cell] = {key: min(best[cell][key], row[key]) for key in ("forward_s", "train_s")}
        else:
            best[cell] = {key: row[key] for key in ("forward_s", "train_s")}


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def report(old: dict[str, dict], new: dict[str, dict], old_rev: str) -> str:
    """A markdown table of each cell's best times and new ÷ old, with the geometric means and extremes."""
    lines = [
        "| cell | old fwd ms | new fwd ms | new/old | old fwd+bwd ms | new fwd+bwd ms | new/old |",
        "|---|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {"forward_s": [], "train_s": []}
    for cell in new:
        if cell not in old:
            continue
        row = [cell]
        for key in ("forward_s", "train_s"):
            ratio = new[cell][key] / old[cell][key]
            ratios[key].append(ratio)
            row += [f"{old[cell][key] * 1e3:.1f}", f"{new[cell][key] * 1e3:.1f}", f"{ratio:.3f}"]
        lines.append("| " + " | ".join(row) + " |")
    for key, label in (("forward_s", "forward"), ("train_s", "forward + backward")):
        values = ratios[key]
        lines.append(
            f"\n{label}: {len(values)} cells, new/old against {old_rev}: geomean {_geomean(values):.3f}, "
            f"min {min(values):.3f}, max {max(values):.3f}, above 1.05: {sum(v > 1.05 for v in values)}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="git revision to compare against (e.g. 5cdd32b)")
    parser.add_argument("--new", default=str(Path(__file__).resolve().parents[1]), help="checkout to time")
    parser.add_argument("--suite", choices=("operator", "mixers"), default="mixers")
    parser.add_argument("--seq-lens", default="1024,4096")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--names", default="", help="mixers (default: every mixer of the new revision)")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    seq_lens = [int(t) for t in args.seq_lens.split(",")]
    names = [n for n in args.names.split(",") if n]
    if args.child:
        child(args.suite, seq_lens, args.repeats, names)
        return
    if not args.old:
        parser.error("--old: give the git revision to compare against, e.g. --old 5cdd32b")
    new_tree = Path(args.new).resolve()
    if args.suite == "mixers" and not names:
        listing = subprocess.run(
            [sys.executable, "-c", "from seqdyn import mixers; print(','.join(mixers.names()))"],
            env={**os.environ, "PYTHONPATH": str(new_tree / "src")},
            capture_output=True,
            text=True,
            check=True,
        )
        names = listing.stdout.strip().split(",")
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp) / "old"
        subprocess.run(
            ["git", "-C", str(new_tree), "worktree", "add", "--detach", str(old_tree), args.old],
            check=True,
            capture_output=True,
        )
        try:
            best: dict[str, dict[str, dict]] = {"old": {}, "new": {}}
            for round_ in range(args.rounds):
                order = (("old", old_tree), ("new", new_tree))
                for tag, tree in order if round_ % 2 == 0 else order[::-1]:
                    start = time.monotonic()
                    _keep_best(best[tag], _run(tree, args, names))
                    print(f"round {round_ + 1}/{args.rounds} {tag}: {time.monotonic() - start:.0f} s", file=sys.stderr)
        finally:
            subprocess.run(["git", "-C", str(new_tree), "worktree", "remove", "--force", str(old_tree)], check=False)
    table = report(best["old"], best["new"], args.old)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
