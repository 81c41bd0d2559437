"""Seeds added until a verdict is decided: the sequential part of the decision rules.

A claim whose confidence interval straddles its line (*inconclusive (seeds)*, :mod:`seqdyn.reproduce.claims`) is
decided by more seeds from the same distribution: the interval narrows as ``1/√n``.  After a reproduction's runs,
:func:`needing_seeds` names the runs behind every claim the seeds left open (its compared settings and, where the
control is what is open, the control's), and :func:`with_one_more_seed` adds the next seed to the ``train.seed``
axis of the sweeps that hold them — up to a cap (``--max-seeds``; by default :func:`default_max_seeds`, and at
``cpu`` only while the next seed fits in the reproduction's budget, :func:`affords_one_more_seed`).  The runs of an
added seed are ordinary runs of the sweep, so a store keeps them and the next call reads them back
(:func:`with_stored_seeds`).

Looking at the verdict after each seed and stopping once it is decided is optional stopping: each look is a 95 %
interval, so over ``m`` looks the chance that some look decides wrongly is at most ``m × 5 %`` (Bonferroni); the
cap bounds ``m``, and the verdict records the seeds that decided it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from seqdyn.reproduce.base import CPU_BUDGET_S, SEED, Reproduction, Results
from seqdyn.reproduce.claims import SEEDS, Outcome
from seqdyn.train.config import SweepConfig
from seqdyn.train.store import Store

__all__ = [
    "MIN_SEEDS",
    "affords_one_more_seed",
    "check_max_seeds",
    "default_max_seeds",
    "needing_seeds",
    "seed_count",
    "with_one_more_seed",
    "with_stored_seeds",
]

#: the fewest seeds a rule decides on (a trained setting's standard error needs two)
MIN_SEEDS = 2
#: the most seeds the default cap allows, however cheap the runs
MOST_SEEDS = 10


def check_max_seeds(max_seeds: int) -> int:
    if max_seeds < MIN_SEEDS:
        raise ValueError(
            f"--max-seeds: the decision rules need at least {MIN_SEEDS} seeds per setting, got {max_seeds}"
        )
    return max_seeds


def seed_count(sweeps: Iterable[SweepConfig]) -> int:
    """The most seeds any sweep runs (1 for a sweep without a ``train.seed`` axis)."""
    return max((len(sweep.sweep.get(SEED, [None])) for sweep in sweeps), default=0)


def default_max_seeds(scale: str, sweeps: list[SweepConfig]) -> int:
    """The cap on seeds where ``--max-seeds`` is not given: at ``cpu`` and ``gpu``, :data:`MOST_SEEDS` (at ``cpu`` each
    added seed also has to fit in the budget, :func:`affords_one_more_seed`); at other scales today's seeds (no seed
    is added)."""
    today = seed_count(sweeps)
    if scale not in ("cpu", "gpu") or today == 0:
        return today
    return max(today, MOST_SEEDS)


def affords_one_more_seed(
    results: Results, sweeps: list[SweepConfig], growing: list[str], workers: int, budget_s: float = CPU_BUDGET_S
) -> bool:
    """Whether one more seed of the sweeps named ``growing`` keeps the reproduction within ``budget_s``: the stored
    runs' summed wall time over the ``workers`` (what the reproduction took so far, whichever call trained them),
    plus one seed's share of the growing sweeps' runs — their summed wall time over their seeds, over the workers,
    and no less than their longest run — is at most the budget.  Measured on the runs themselves, so a changed
    setting or an earlier call's runs are counted as they are."""
    seconds = {row["run_id"]: float(row["wall_time"] or 0.0) for row in results.rows}
    so_far = sum(seconds.values()) / workers
    share, longest = 0.0, 0.0
    for sweep in sweeps:
        if sweep.name not in growing:
            continue
        times = [seconds.get(run.run_id, 0.0) for run in sweep.expand()]
        share += sum(times) / max(1, len(sweep.sweep.get(SEED, [None])))
        longest = max([longest, *times])
    return so_far + max(share / workers, longest) <= budget_s


def with_stored_seeds(store: Store, sweeps: list[SweepConfig]) -> list[SweepConfig]:
    """The sweeps with their ``train.seed`` axes widened to the seeds the store already holds runs of (seeds added
    by an earlier call), so that those runs are read back rather than refused as another config's."""
    widened = []
    for sweep in sweeps:
        seeds = sweep.sweep.get(SEED)
        if seeds is None:
            widened.append(sweep)
            continue
        stored = {record.config.get("train", {}).get("seed") for record in store.runs(sweep=sweep.name)}
        extra = sorted(seed for seed in stored if isinstance(seed, int) and seed not in seeds)
        widened.append(_with_seeds(sweep, [*seeds, *extra]) if extra else sweep)
    return widened


def needing_seeds(reproduction: Reproduction, results: Results, outcomes: Mapping[str, Outcome]) -> set[str] | None:
    """The run ids behind every claim its seeds left open (its compared scores, and its control's where the
    control is what is open); None where such a claim read a score that does not say its runs (more seeds for
    every sweep, then)."""
    runs: set[str] = set()
    for claim in reproduction.claims:
        outcome = outcomes[claim.name]
        if outcome.cause != SEEDS:
            continue
        scores = list(outcome.scores)
        if claim.control is not None and "undecided" in outcome.control:
            scores.append(claim.control.score(results))
        if not scores or any(not score.runs for score in scores):
            return None
        runs.update(run for score in scores for run in score.runs)
    return runs


def with_one_more_seed(
    sweeps: list[SweepConfig], runs: set[str] | None, max_seeds: int
) -> tuple[list[SweepConfig], list[str]]:
    """The sweeps with the next seed added to the ``train.seed`` axis of each sweep that holds one of ``runs`` (every
    sweep where ``runs`` is None) and runs fewer than ``max_seeds`` seeds; and the names of those sweeps."""
    grown, names = [], []
    for sweep in sweeps:
        seeds = sweep.sweep.get(SEED)
        wanted = runs is None or any(run.run_id in runs for run in sweep.expand())
        if seeds is None or not wanted or len(seeds) >= max_seeds:
            grown.append(sweep)
            continue
        grown.append(_with_seeds(sweep, [*seeds, max(seeds) + 1]))
        names.append(sweep.name)
    return grown, names


def _with_seeds(sweep: SweepConfig, seeds: list[Any]) -> SweepConfig:
    return sweep.model_copy(update={"sweep": {**sweep.sweep, SEED: seeds}})
