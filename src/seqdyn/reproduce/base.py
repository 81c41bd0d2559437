"""What a reproduction is: sweeps per scale, claims, a table in the paper's layout and a figure.

A reproduction is a module of :mod:`seqdyn.reproduce` defining ``REPRODUCTION``, an instance of a
:class:`Reproduction` subclass.  Its runs are ordinary sweep configs (:class:`~seqdyn.train.config.SweepConfig`),
trained by the sweep machinery into the results store; :class:`Results` reads them back as one row per run, and
:meth:`Results.score` turns the rows of one setting into a :class:`~seqdyn.reproduce.claims.Score` (per seed, the
best over the learning-rate grid), which the claims compare.

Scales: ``paper`` (the paper's own hyper-parameters, for a GPU or a Ray cluster; its runs train on the GPU where
there is one), ``gpu`` (for a claim the ``cpu`` scale cannot decide, the smallest setting of the paper's own budgets
that would: minutes to an hour of one GPU; only the reproductions that have such a claim define it, see
:attr:`Reproduction.scales`; its runs train on ``cuda``), ``cpu`` (a faithful reduction that finishes within
:data:`CPU_BUDGET_S` on a 2-core CPU; :attr:`Reproduction.reductions` says what was reduced and why) and ``smoke``
(a minute or less: the whole pipeline, no verdict to trust).
"""

from __future__ import annotations

import json
import math
import operator
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from seqdyn.reproduce.claims import Claim, Score
from seqdyn.train.config import SweepConfig
from seqdyn.train.store import DIVERGED

SCALES = ("smoke", "cpu", "gpu", "paper")
#: the scales every reproduction has; ``gpu`` only those whose module defines it
EVERY_SCALE = ("smoke", "cpu", "paper")
#: the longest a ``cpu`` reproduction may take on the project's 2-core machine, and a ``smoke`` one
CPU_BUDGET_S, SMOKE_BUDGET_S = 45 * 60, 60
#: the run statuses that give a result; a run that diverged (non-finite loss) gives its best value before that
RESULT_STATUSES = ("finished", "stopped_early")
LR = "optimizer.lr"
SEED = "train.seed"
#: where the reproductions' outputs are published (a source checkout's ``docs/reproductions``): each one's folder
#: holds its :data:`TIMING` file beside its verdict
PUBLISHED = Path(__file__).resolve().parents[3] / "docs" / "reproductions"
#: the measured wall time per scale (``scales``: ``seconds``, ``date``, ``commit``, ``workers``, ``runs_before``, a
#: ``note``) and the paper scale's GPU estimate (``paper_gpu_estimate``: ``estimate``, ``date``, ``note``) of a
#: reproduction, which the runner writes beside its verdict
TIMING = "timing.json"


def read_timing(folder: Path) -> dict[str, Any]:
    """A reproduction's :data:`TIMING` in ``folder`` (empty where there is none: nothing measured)."""
    try:
        return json.loads((folder / TIMING).read_text())
    except FileNotFoundError:
        return {}


def check_scale(scale: str) -> str:
    if scale not in SCALES:
        raise ValueError(f"--scale: expected one of {', '.join(SCALES)}, got {scale!r}")
    return scale


@dataclass(frozen=True)
class Results:
    """The runs of one reproduction at one scale: one row per run (the flattened resolved config, dotted keys
    such as ``model.mixer``, plus ``run_id``, ``name``, ``status``, ``reason``, ``best``, ``final``, ``steps``,
    ``wall_time``)."""

    scale: str
    rows: tuple[dict[str, Any], ...]

    def select(self, **where: Any) -> list[dict[str, Any]]:
        """The rows whose dotted keys (``__`` for ``.`` in the keyword) have these values."""
        wanted = {key.replace("__", "."): value for key, value in where.items()}
        return [row for row in self.rows if all(row.get(key) == value for key, value in wanted.items())]

    def values(self, key: str) -> list[Any]:
        """The distinct values of ``key`` over the rows, in order of first appearance."""
        seen: list[Any] = []
        for row in self.rows:
            if row.get(key) not in seen:
                seen.append(row.get(key))
        return seen

    def score(
        self, label: str, rows: Iterable[dict[str, Any]], cells: Sequence[str] = (), higher_is_better: bool = True
    ) -> Score:
        """Per seed: the best result over the rows of each cell (rows that agree on the keys ``cells``; what is
        left to vary is the learning-rate grid), averaged over the cells.  Runs without a result (failed for
        another reason than divergence, unfinished, not run) are named as missing."""
        rows = list(rows)
        by_seed: dict[Any, dict[tuple, list[float]]] = {}
        cell_best: dict[tuple, tuple[float, bool]] = {}  # (seed, cell) → the best value and whether it stopped early
        best_rows: dict[Any, dict[str, Any]] = {}
        missing = []
        pick = max if higher_is_better else min
        better = operator.gt if higher_is_better else operator.lt
        for row in rows:
            value = result_value(row, higher_is_better)
            if value is None:
                missing.append(f"{row['name']} ({row['status']}{': ' + row['reason'] if row.get('reason') else ''})")
                continue
            cell = tuple(row.get(key) for key in cells)
            by_seed.setdefault(row.get(SEED), {}).setdefault(cell, []).append(value)
            earlier = cell_best.get((row.get(SEED), cell))
            if earlier is None or better(value, earlier[0]):
                cell_best[(row.get(SEED), cell)] = (value, row["status"] == "stopped_early")
            seed_best = best_rows.get(row.get(SEED))
            if seed_best is None or better(value, seed_best["value"]):
                best_rows[row.get(SEED)] = {"value": value, "steps": row.get("steps"), "curve": _open_curve(row)}
        values = tuple(sum(pick(v) for v in seed_cells.values()) / len(seed_cells) for seed_cells in by_seed.values())
        stops = tuple(f"seed {seed}: {_stopped(best)}" for seed, best in best_rows.items())
        curves = tuple(best["curve"] for best in best_rows.values())
        runs = tuple(row["run_id"] for row in rows if row.get("run_id"))
        at_target = tuple(
            all(cell_best[(seed, cell)][1] for cell in seed_cells) for seed, seed_cells in by_seed.items()
        )
        return Score(label, values, tuple(missing), stops, False, curves, higher_is_better, runs, at_target)


def _open_curve(row: dict[str, Any]) -> tuple[tuple[int, float], ...]:
    """A run's evaluations, ``(step, value)``, for the convergence rule — none where it stopped early at its target
    (it stopped because it had arrived) or diverged."""
    return tuple(row.get("curve") or ()) if row["status"] == "finished" else ()


def _stopped(best: dict[str, Any]) -> str:
    """Where a seed's best run stopped: "step 4,000, 0.251" (the step where the results give it)."""
    steps = best.get("steps")
    at = f"step {int(steps):,}, " if isinstance(steps, (int, float)) and not math.isnan(steps) else ""
    return f"{at}{best['value']:.3g}"


def result_value(row: dict[str, Any], higher_is_better: bool = True) -> float | None:
    """A run's result: its best metric when it finished (or stopped early), or diverged (the worst possible value
    where it diverged before its first evaluation); None where it gave none."""
    best = row.get("best")
    if row["status"] in RESULT_STATUSES and best is not None and not math.isnan(best):
        return best
    if row["status"] == DIVERGED:
        if best is not None and not math.isnan(best):
            return best
        return 0.0 if higher_is_better else math.inf
    return None


class Reproduction:
    """One experiment of a source document.  Subclasses set the class attributes and implement :meth:`sweeps`,
    :meth:`table` and :meth:`plot`."""

    #: the module's name (``seqdyn reproduce NAME``), the paper and its figure or table
    name: ClassVar[str]
    paper: ClassVar[str]
    figure: ClassVar[str]
    summary: ClassVar[str]
    claims: ClassVar[tuple[Claim, ...]]
    #: per scale: what differs from the paper's setup and why (``table.md`` prints it)
    reductions: ClassVar[dict[str, str]]
    higher_is_better: ClassVar[bool] = True
    #: trains on a local corpus, which ``sweeps`` takes as ``data`` (``--data``) at every scale but ``smoke``
    corpus: ClassVar[bool] = False
    #: what ``--data`` must be, in words (for a ``corpus`` reproduction)
    data_help: ClassVar[str] = ""
    #: False: it trains nothing — its sweeps are empty at every scale and :meth:`measure` computes its rows
    trains: ClassVar[bool] = True
    #: the ``gpu`` scale's estimated wall time on one H200 in minutes, one run at a time (None: no gpu scale); its
    #: ``reductions["gpu"]`` says what the estimate rests on
    gpu_minutes: ClassVar[float | None] = None

    @property
    def scales(self) -> tuple[str, ...]:
        """The scales this reproduction has, in the order of :data:`SCALES`: those its module's ``SCALES`` names
        (every one of :data:`EVERY_SCALE` where the module defines no ``SCALES``)."""
        defined = getattr(sys.modules[type(self).__module__], "SCALES", None)
        return tuple(scale for scale in SCALES if (scale in defined if defined is not None else scale in EVERY_SCALE))

    @property
    def wall_time(self) -> dict[str, float | None]:
        """Per scale it has (:attr:`scales`): the measured wall time in seconds, as published beside the verdict
        (:data:`PUBLISHED`; None: not measured yet)."""
        measured = read_timing(PUBLISHED / self.name).get("scales", {})
        return {scale: measured[scale]["seconds"] if scale in measured else None for scale in self.scales}

    @property
    def paper_gpu_estimate(self) -> str:
        """The paper scale's wall time on one H200 GPU, estimated from timed training steps of three of its runs
        (``examples/pilots/paper_step_times.py``), as published beside the verdict; empty: not estimated."""
        return read_timing(PUBLISHED / self.name).get("paper_gpu_estimate", {}).get("estimate", "")

    def sweeps(self, scale: str) -> list[SweepConfig]:
        """The sweep configs of this scale; their names must be distinct.  A ``corpus`` reproduction's take a second
        argument, ``data``: the corpus (None at ``smoke``)."""
        raise NotImplementedError

    def table(self, results: Results) -> str:
        """The results in the paper's layout (markdown), the paper's numbers beside ours where it prints them."""
        raise NotImplementedError

    def plot(self, results: Results, path: Path) -> Path:
        """The paper's figure style (accuracy grids, bars, curves) into ``path`` (a PNG)."""
        raise NotImplementedError

    def measure(self, results: Results, store_path: str | Path) -> Results:
        """What a reproduction measures on its trained models after training (decoding cost, say), added to the
        rows as further keys; by default nothing.  A reproduction that ``trains`` nothing computes its rows here,
        one per computation (``name``, ``run_id``, ``status`` and ``wall_time`` as a run's row has them)."""
        return results


class Computation(Reproduction):
    """A reproduction that trains nothing (``trains`` False): its sweeps are empty and its rows are what
    :meth:`compute` computes at a scale, one per computation (:func:`computed_row`)."""

    trains = False

    def sweeps(self, scale: str) -> list[SweepConfig]:
        return []

    def compute(self, scale: str) -> list[dict[str, Any]]:
        """The rows of ``scale``: one per computation."""
        raise NotImplementedError

    def measure(self, results: Results, store_path: str | Path) -> Results:
        return Results(results.scale, tuple(self.compute(results.scale)))


def computed_row(name: str, run_id: str, wall_time: float, values: dict[str, Any]) -> dict[str, Any]:
    """One computation of a :class:`Computation` as a result row: a finished run's keys (so ``results.csv`` and the
    provenance read it) and its own ``values`` (dotted keys)."""
    return {
        "name": name,
        "run_id": run_id,
        "status": "finished",
        "reason": None,
        "best": None,
        "final": None,
        "steps": 0,
        "wall_time": wall_time,
        **values,
    }


def sweep_name(reproduction: Reproduction, scale: str, sweep: SweepConfig) -> str:
    """The name a reproduction's sweep has in the store: ``NAME/SCALE/PART``."""
    return f"{reproduction.name}/{scale}/{sweep.name}"


def score_cell(score: Score, number: Callable[[float], str]) -> str:
    """A table cell of a score: the mean over seeds ± its standard error (each written by ``number``), marked
    "(incomplete)" where runs are missing; "missing" where none gave a result, blank where there was no run."""
    if not score.values:
        return "missing" if score.missing else ""
    text = number(score.mean)
    if score.error_bar:
        text += f" ± {number(score.error_bar)}"
    return text + (" (incomplete)" if score.missing else "")


def percent(value: float | None) -> str:
    """An accuracy in % for a table (blank where there is none)."""
    return "" if value is None or math.isnan(value) else f"{100 * value:.1f}"
