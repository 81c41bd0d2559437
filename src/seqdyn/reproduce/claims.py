"""Claims as predicates over a reproduction's results, each decided *held*, *did not hold* or *inconclusive*.

A claim tests one sentence of a paper with a threshold written once, beside the sentence.  Its predicate reads
:class:`Score` s (one number per setting: the mean over seeds of the best over the learning-rate grid, with the
seeds' spread) and returns an :class:`Outcome`: the verdict, the numbers that decided it, and for an
*inconclusive* verdict the reason (a run failed or is missing, or the margin lies inside the seed spread).

The comparisons every claim is built from:

- :func:`at_least` — ``a ≥ b + margin``: *held* when the difference clears the margin by more than the spread,
  *did not hold* when it misses the margin by more than the spread, else *inconclusive*;
- :func:`within` — ``|a − b| ≤ tolerance``: *held* when the difference is inside the tolerance, *did not hold*
  when it exceeds the tolerance by more than the spread, else *inconclusive*;
- :func:`reaches` and :func:`at_most` — one setting against a threshold: *held* when every seed is on the right
  side, *did not hold* when none is, else *inconclusive*.

The spread of a comparison is the larger of its two settings' seed ranges (max − min over seeds), so one seed
has none and decides on the numbers alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

HELD, FAILED, INCONCLUSIVE = "held", "did not hold", "inconclusive"
VERDICTS = (HELD, FAILED, INCONCLUSIVE)

#: why a claim is *inconclusive*, in one word: its positive control failed; a compared model never left the task's
#: plateau (the training budget); the compared models are all at the metric's ceiling; the seeds' spread or split
#: leaves the comparison open; runs are missing or failed
Cause = Literal["control", "budget", "ceiling", "seeds", "missing"]
CONTROL, BUDGET, CEILING, SEEDS, MISSING = "control", "budget", "ceiling", "seeds", "missing"
#: the causes, the one that decides first: a claim whose parts are open for several causes is open for the first
CAUSES: tuple[Cause, ...] = (CONTROL, BUDGET, CEILING, SEEDS, MISSING)


@dataclass(frozen=True)
class Score:
    """One setting's result: the value of each seed (best over the learning rates), and the runs that did not
    give one (failed, or not run yet)."""

    label: str
    values: tuple[float, ...]
    missing: tuple[str, ...] = ()
    #: per seed, where its best run stopped ("seed 1: step 4,000, 0.251"), where the results say
    stops: tuple[str, ...] = ()

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else math.nan

    @property
    def spread(self) -> float:
        """The range over seeds (0 for one seed)."""
        return max(self.values) - min(self.values) if self.values else math.nan

    @property
    def complete(self) -> bool:
        return bool(self.values) and not self.missing


def weakest(scores: Sequence[Score]) -> Score:
    """Of several scores (one per task, say), the one whose lowest seed is lowest — an incomplete or empty one
    first: every seed of every score reaches a threshold exactly when every seed of this one does."""
    if not scores:
        raise ValueError("scores: expected at least one score to pick the weakest of")
    return min(scores, key=lambda score: (score.complete, min(score.values) if score.values else -math.inf))


@dataclass(frozen=True)
class Outcome:
    """A claim's verdict, the numbers that decided it (name → value), and why, where it is inconclusive: in words
    (``reason``) and as one of :data:`CAUSES` (``cause``, set where the verdict is decided)."""

    verdict: str
    numbers: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    #: the claim's positive control as it was checked (:meth:`Control.check`); empty for a claim without one
    control: dict[str, Any] = field(default_factory=dict)
    cause: Cause | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict: expected one of {', '.join(VERDICTS)}, got {self.verdict!r}")
        if (self.cause is None) != (self.verdict != INCONCLUSIVE) or (
            self.cause is not None and self.cause not in CAUSES
        ):
            raise ValueError(
                f"cause: an inconclusive verdict takes one of {', '.join(CAUSES)} and no other verdict "
                f"takes one, got {self.cause!r} for {self.verdict!r}"
            )


@dataclass(frozen=True)
class Control:
    """A positive control, named in code before any run: a setting (``score``: results → its :class:`Score`) that
    must reach ``threshold`` on every seed for the claim's comparison to mean anything — a task the compared models
    fail says nothing where no model learns it.  With ``level`` (results → a level the reproduction measures, such as
    the score of a constant answer) the threshold counts from that level: the setting must beat it by ``threshold``.
    ``higher_is_better=False`` (perplexity): the setting must stay at or below the threshold (``level −
    threshold``)."""

    description: str
    score: Callable[[Any], Score]
    threshold: float
    level: Callable[[Any], float | None] | None = None
    higher_is_better: bool = True

    def check(self, results: Any) -> dict[str, Any]:
        """``{"description", "setting", "value", "threshold", "passed"}`` (value: the mean over seeds, None where
        no run gave one; threshold: counted from the measured level where there is one, which is recorded too)."""
        score = self.score(results)
        level = None if self.level is None else self.level(results)
        if self.level is not None and level is None:
            return {
                "description": self.description,
                "setting": score.label,
                "value": None,
                "threshold": self.threshold,
                "level": None,
                "passed": False,
            }
        sign = 1.0 if self.higher_is_better else -1.0
        threshold = self.threshold if level is None else level + sign * self.threshold
        outcome = reaches(score, threshold) if self.higher_is_better else at_most(score, threshold)
        checked = {
            "description": self.description,
            "setting": score.label,
            "value": score.mean if score.values else None,
            "threshold": threshold,
            "passed": outcome.verdict == HELD,
        }
        if not checked["passed"] and score.values and sign * (score.mean - threshold) >= 0:
            # the mean is on the right side: a seed is not, and that seed is what failed the control
            checked["weakest_seed"] = min(score.values) if self.higher_is_better else max(score.values)
        return checked if level is None else checked | {"level": level}

    @property
    def short_of(self) -> str:
        """How a failed control's value stands to its threshold, in one sign."""
        return "<" if self.higher_is_better else ">"


def control_value(checked: dict[str, Any]) -> str:
    """A checked control's value in words: the mean over seeds, and the weakest seed where that seed alone failed it
    ("0.921, weakest seed 0.896")."""
    if checked["value"] is None:
        return "no result"
    weakest_seed = checked.get("weakest_seed")
    return f"{checked['value']:.3g}" + ("" if weakest_seed is None else f", weakest seed {weakest_seed:.3g}")


#: a compared model within this of its task's plateau (5 points of accuracy, or of R²) has not left it
PLATEAU_MARGIN = 0.05
#: the best value of an accuracy, an R² or a macro F1: the ceiling of :func:`at_least`
BEST_SCORE = 1.0


@dataclass(frozen=True)
class Plateau:
    """What a model scores before it learns a task — MQAR's level of copying a value from the context, a constant or
    context-copying predictor on MAD and atomic tasks — as the reproduction measures it, and the ``margin`` within
    which a compared model has not left it.  ``compared``: results → each compared model's score with the plateau of
    its task.  A claim that did not hold while one of them never left its plateau speaks of the training budget, not
    of the model: it is *inconclusive (budget)*."""

    description: str
    margin: float
    compared: Callable[[Any], Sequence[tuple[Score, float]]]
    higher_is_better: bool = True

    def stuck(self, results: Any) -> list[str]:
        """The compared models whose best seed stays within the margin of their plateau, each with where its seeds
        stopped."""
        found = []
        for score, level in self.compared(results):
            if not score.values:
                continue
            best = max(score.values) if self.higher_is_better else min(score.values)
            if (best <= level + self.margin) if self.higher_is_better else (best >= level - self.margin):
                stops = f" [{'; '.join(score.stops)}]" if score.stops else ""
                found.append(
                    f"{score.label} best seed {best:.3g} within {self.margin:g} of the plateau {level:.3g}{stops}"
                )
        return found


@dataclass(frozen=True)
class Claim:
    """What a paper says (``quote``, its own sentence, and ``paper_value``, its number where it prints one), what we
    test (``statement``, with the threshold), the predicate that tests it on a reproduction's results, and the
    positive ``control`` that must pass first (None where the claim compares nothing that can fail to learn)."""

    name: str
    statement: str
    quote: str
    test: Callable[[Any], Outcome]
    paper_value: str = ""
    control: Control | None = None
    plateau: Plateau | None = None

    def decide(self, results: Any) -> Outcome:
        """The predicate's outcome — *inconclusive* instead where the control did not pass, with its value as the
        reason ("control softmax with positions 0.49 < 0.9"), and *inconclusive (budget)* where it did not hold
        while a compared model never left the task's plateau (:class:`Plateau`); a claim the seeds' spread left
        undecided says so too, after its own reason."""
        outcome = self.test(results)
        checked = {} if self.control is None else self.control.check(results)
        if checked and not checked["passed"]:
            return Outcome(
                INCONCLUSIVE,
                outcome.numbers,
                f"control {checked['setting']} {control_value(checked)} "
                f"{self.control.short_of} {checked['threshold']:.3g} ({checked['description']})",
                checked,
                CONTROL,
            )
        undecided = outcome.verdict in (FAILED, INCONCLUSIVE)
        stuck = self.plateau.stuck(results) if self.plateau is not None and undecided else []
        if stuck:
            budget = f"{BUDGET}: " + "; ".join(stuck) + f" ({self.plateau.description})"
            if outcome.verdict == FAILED:
                return Outcome(INCONCLUSIVE, outcome.numbers, budget, checked, BUDGET)
            return replace(outcome, reason=f"{outcome.reason}; and {budget}", control=checked)
        return replace(outcome, control=checked)


def _incomplete(scores: Sequence[Score]) -> Outcome | None:
    """*Inconclusive* when a score lacks a run, naming what is missing; None when every score is complete."""
    missing = [
        f"{score.label}: {', '.join(score.missing) or 'no finished run'}" for score in scores if not score.complete
    ]
    if not missing:
        return None
    numbers = {score.label: score.mean for score in scores if score.values}
    return Outcome(INCONCLUSIVE, numbers, "runs missing or failed (" + "; ".join(missing) + ")", cause=MISSING)


def _numbers(a: Score, b: Score, difference: float, spread: float) -> dict[str, float]:
    return {a.label: a.mean, b.label: b.mean, "difference": difference, "seed spread": spread}


def at_least(a: Score, b: Score, margin: float = 0.0, ceiling: float | None = None) -> Outcome:
    """Whether ``a ≥ b + margin`` (means over seeds), decided only where the seeds' spread cannot overturn it.
    ``ceiling``: the metric's best value (1 for an accuracy or R²); where both means lie within ``PLATEAU_MARGIN``
    of it, the task does not separate the two, and a comparison that did not hold is *inconclusive* — the mirror of
    the plateau rule (:class:`Plateau`)."""
    incomplete = _incomplete((a, b))
    if incomplete is not None:
        return incomplete
    difference, spread = a.mean - b.mean, max(a.spread, b.spread)
    numbers = _numbers(a, b, difference, spread) | {"margin": margin}
    if difference - margin > spread or (spread == 0 and difference >= margin):
        return Outcome(HELD, numbers)
    if ceiling is not None and min(a.mean, b.mean) >= ceiling - PLATEAU_MARGIN:
        reason = (
            f"at the ceiling: {a.label} {a.mean:.3g} and {b.label} {b.mean:.3g} both within {PLATEAU_MARGIN:g} "
            f"of the best score {ceiling:g}"
        )
        return Outcome(INCONCLUSIVE, numbers, reason, cause=CEILING)
    if margin - difference > spread:
        return Outcome(FAILED, numbers)
    return Outcome(
        INCONCLUSIVE,
        numbers,
        f"the difference {difference:+.3f} is within the seed spread {spread:.3f} of the margin {margin:+.3f}",
        cause=SEEDS,
    )


def within(a: Score, b: Score, tolerance: float) -> Outcome:
    """Whether ``|a − b| ≤ tolerance`` (means over seeds); a larger difference fails only beyond the spread."""
    incomplete = _incomplete((a, b))
    if incomplete is not None:
        return incomplete
    difference, spread = a.mean - b.mean, max(a.spread, b.spread)
    numbers = _numbers(a, b, difference, spread) | {"tolerance": tolerance}
    if abs(difference) <= tolerance:
        return Outcome(HELD, numbers)
    if abs(difference) - tolerance > spread:
        return Outcome(FAILED, numbers)
    return Outcome(
        INCONCLUSIVE,
        numbers,
        f"|difference| {abs(difference):.3f} exceeds the tolerance {tolerance:.3f} "
        f"by less than the seed spread {spread:.3f}",
        cause=SEEDS,
    )


def reaches(score: Score, threshold: float) -> Outcome:
    """Whether ``score ≥ threshold`` on every seed (*held*), on none (*did not hold*) or on some (*inconclusive*)."""
    return _every_seed(score, threshold, "reach", lambda value: value >= threshold)


def at_most(score: Score, threshold: float) -> Outcome:
    """Whether ``score ≤ threshold`` on every seed (*held*), on none (*did not hold*) or on some (*inconclusive*):
    a model that fails a task stays at or below it."""
    return _every_seed(score, threshold, "stay at or below", lambda value: value <= threshold)


def _every_seed(score: Score, threshold: float, verb: str, passes: Callable[[float], bool]) -> Outcome:
    incomplete = _incomplete((score,))
    if incomplete is not None:
        return incomplete
    numbers = {
        score.label: score.mean,
        "lowest seed": min(score.values),
        "highest seed": max(score.values),
        "threshold": threshold,
    }
    passed = [passes(value) for value in score.values]
    if all(passed):
        return Outcome(HELD, numbers)
    if not any(passed):
        return Outcome(FAILED, numbers)
    return Outcome(INCONCLUSIVE, numbers, f"{sum(passed)} of {len(passed)} seeds {verb} {threshold}", cause=SEEDS)


def every(outcomes: dict[str, Outcome]) -> Outcome:
    """All of several outcomes (one per task, say): *held* when every one held, *did not hold* when one did not,
    else *inconclusive* (also when there is no part at all: nothing was run to decide on, its runs are missing) for
    the first of :data:`CAUSES` that leaves a part open; the numbers keep each part's under its key."""
    if not outcomes:
        return Outcome(INCONCLUSIVE, {}, "no results to decide on", cause=MISSING)
    numbers = {f"{key}: {name}": value for key, outcome in outcomes.items() for name, value in outcome.numbers.items()}
    failed = [key for key, outcome in outcomes.items() if outcome.verdict == FAILED]
    if failed:
        return Outcome(FAILED, numbers, "did not hold on " + ", ".join(failed))
    open_ = {key: outcome for key, outcome in outcomes.items() if outcome.verdict == INCONCLUSIVE}
    if open_:
        cause = min((outcome.cause for outcome in open_.values()), key=CAUSES.index)
        return Outcome(
            INCONCLUSIVE, numbers, "; ".join(f"{key}: {outcome.reason}" for key, outcome in open_.items()), cause=cause
        )
    return Outcome(HELD, numbers)
