"""Change one definition the verdicts rest on at a time, in a copy of this checkout, and list the tests that fail.

    python tools/pinned_definitions.py

The changes are those of the issue "Tests that pin what the verdicts rest on" (a readout formula, the average of
the coefficient measurements, the thresholds behind ``make main``'s verdicts, the float32 lift of half-precision
inputs).  Each must fail at least one test named after what it changed; the script exits 1 if one fails none.
The copy is a temporary git worktree of HEAD (commit first); every run uses one thread.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (file, old text, new text, the tests to run)
CHANGES = [
    ("src/seqdyn/core/readouts.py", "return s * s", "return s * s.abs()", ["tests/core/test_readouts.py"]),
    (
        "src/seqdyn/reproduce/mad.py",
        "NEAR_ZERO: sum(head.near_zero_fraction for head in heads) / len(heads)",
        "NEAR_ZERO: min(head.near_zero_fraction for head in heads)",
        ["tests/reproduce/test_mad.py"],
    ),
    (
        "src/seqdyn/reproduce/mad.py",
        "LARGE: sum(head.large_fraction for head in heads) / len(heads)",
        "LARGE: min(head.large_fraction for head in heads)",
        ["tests/reproduce/test_mad.py"],
    ),
    ("src/seqdyn/reproduce/dlr_atomic.py", "SOLVED = 0.9", "SOLVED = 0.6", ["tests/reproduce", "-k", "dlr"]),
    ("src/seqdyn/reproduce/dlr_atomic.py", "FAILS = 0.2", "FAILS = 0.3", ["tests/reproduce", "-k", "dlr"]),
    (
        "src/seqdyn/core/problem.py",
        "return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype",
        "return dtype",
        ["tests/core/test_operator_backends.py", "-k", "half_precision or compute_dtype"],
    ),
]


def failing_tests(copy: Path, tests: list[str]) -> list[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(copy / "src"), "SEQDYN_AUTOTUNE": "memory"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", *tests],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
    )
    return [line.split(" ", 1)[1].split(" - ")[0] for line in done.stdout.splitlines() if line.startswith("FAILED ")]


def main() -> int:
    unpinned = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(copy), "HEAD"], cwd=ROOT, check=True)
        try:
            for path, old, new, tests in CHANGES:
                source = copy / path
                original = source.read_text()
                if original.count(old) != 1:
                    raise SystemExit(f"{path}: {old!r} is not in the source once; update CHANGES")
                source.write_text(original.replace(old, new))
                failed = failing_tests(copy, tests)
                source.write_text(original)
                print(f"{path}: {old!r} → {new!r}: {len(failed)} failed")
                print("".join(f"    {name}\n" for name in failed), end="")
                unpinned += not failed
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(copy)], cwd=ROOT, check=True)
    return 1 if unpinned else 0


if __name__ == "__main__":
    sys.exit(main())
