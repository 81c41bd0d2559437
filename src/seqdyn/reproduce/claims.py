"""Claims as predicates over a reproduction's results, each decided *held*, *did not hold* or *inconclusive*.

A claim tests one sentence of a paper with a threshold written once, beside the sentence.  Its predicate reads
:class:`Score` s (one number per setting: the mean over seeds of the best over the learning-rate grid, with the
seeds' standard error) and returns an :class:`Outcome`: the verdict, the numbers that decided it, and for an
*inconclusive* verdict the reason (a run failed or is missing, or the margin's interval still straddles its
threshold).

The comparisons every claim is built from decide on a 95 % confidence interval over seeds (:data:`CONFIDENCE`):

- :func:`at_least` — ``a ≥ b + margin``: Welch's interval of the difference of the means; *held* when it lies
  above the margin, *did not hold* when it lies below, else *inconclusive (seeds)*;
- :func:`within` — ``|a − b| ≤ tolerance``: *held* when that interval lies inside ``±tolerance`` (an equivalence
  test), *did not hold* when it lies outside, else *inconclusive (seeds)*;
- :func:`reaches` and :func:`at_most` — one setting against a threshold: Student's interval of the mean on the
  right side of the threshold (*held*), on the wrong side (*did not hold*), or across it (*inconclusive*).

An interval is the mean ± ``t`` standard errors with ``t`` Student's quantile (Welch–Satterthwaite degrees of
freedom for a difference): more seeds from the same distribution narrow it as ``1/√n``, so adding seeds settles a
comparison that a real difference separates.  A score computed exactly (:attr:`Score.exact`, a lemma evaluated,
no training) has no standard error and decides on its value; a trained score needs two seeds.

:meth:`Claim.decide` then applies the safety rules to every outcome, *held* included: a failed control, a compared
model that never left the task's plateau (:class:`Plateau`) or is still improving at its last evaluations
(:func:`still_improving`) make the claim *inconclusive*, whatever the comparison said.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
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
    #: computed exactly (no seed noise: a lemma evaluated, a count over fixed data): decides on its values alone
    exact: bool = False
    #: per seed, ``(step, value)`` of its best run's evaluations (empty where the run stopped early at its target)
    curves: tuple[tuple[tuple[int, float], ...], ...] = ()
    higher_is_better: bool = True
    #: the ids of the runs it was read from (where more seeds are added to decide it)
    runs: tuple[str, ...] = ()
    #: per seed, whether every best run of its cells stopped early at its target (its value censored there)
    at_target: tuple[bool, ...] = ()
    #: what one of its values is, where not a seed's result ("seed range": one setting's range over its seeds)
    unit: str = "seed"

    def counted(self) -> str:
        """How many values it has, in its unit: "3 seeds", "8 seed ranges"."""
        return counted(len(self.values), self.unit)

    @property
    def every_seed_at_target(self) -> bool:
        """Whether each seed's runs stopped early at their target: each reached it, whatever the spread above."""
        return bool(self.values) and len(self.at_target) == len(self.values) and all(self.at_target)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else math.nan

    @property
    def spread(self) -> float:
        """The range over seeds (0 for one seed)."""
        return max(self.values) - min(self.values) if self.values else math.nan

    @property
    def variance(self) -> float:
        """The seeds' sample variance (``n − 1`` in the denominator); 0 for an exact score, NaN below two seeds."""
        if self.exact:
            return 0.0
        if len(self.values) < 2:
            return math.nan
        return sum((value - self.mean) ** 2 for value in self.values) / (len(self.values) - 1)

    @property
    def standard_error(self) -> float:
        """The standard error of the mean over seeds (``s/√n``): 0 for an exact score, NaN below two seeds."""
        return math.sqrt(self.variance / len(self.values)) if self.values else math.nan

    @property
    def error_bar(self) -> float:
        """The half-height of the score's error bar in tables and figures: its standard error, 0 where it has
        none (an exact score, one seed)."""
        return self.standard_error if len(self.values) > 1 and not self.exact else 0.0

    @property
    def complete(self) -> bool:
        return bool(self.values) and not self.missing


def counted(count: int, unit: str = "seed") -> str:
    """``count`` values of ``unit`` in words: "1 seed", "3 seeds", "8 seed ranges"."""
    return f"{count} {unit}{'' if count == 1 else 's'}"


def weakest(scores: Sequence[Score]) -> Score:
    """Of several scores (one per task, say), the one whose interval of the mean (:func:`mean_interval`) reaches
    lowest — an incomplete one, or a single seed of a trained setting, first: every score reaches a threshold
    (:func:`reaches`) exactly when this one does."""
    if not scores:
        raise ValueError("scores: expected at least one score to pick the weakest of")

    def low_end(score: Score) -> tuple[bool, float]:
        computable = score.complete and (score.exact or len(score.values) > 1)
        if computable and score.every_seed_at_target:  # each seed is known to have reached at least its value
            return computable, min(score.values)
        return computable, mean_interval(score).low if computable else -math.inf

    return min(scores, key=low_end)


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
    #: the scores the comparison read: the safety rules of :meth:`Claim.decide` look at them
    scores: tuple[Score, ...] = field(default=(), repr=False, compare=False)
    #: the decision rule, in words ("Welch's 95 % interval of the difference above +0.05"); "" where none applied
    rule: str = ""

    @property
    def seeds(self) -> dict[str, int]:
        """The seeds that decided it, per compared setting (an exact score counts its computations; a score of
        other values, its :attr:`units`)."""
        return {score.label: len(score.values) for score in self.scores}

    @property
    def units(self) -> dict[str, str]:
        """The compared settings whose values are not one per seed, with what each value is."""
        return {score.label: score.unit for score in self.scores if score.unit != "seed"}

    def record(self) -> dict[str, Any]:
        """What ``verdict.json`` keeps of it: verdict, numbers, reason, control, cause, the seeds per setting and the
        rule."""
        return {
            "verdict": self.verdict,
            "numbers": self.numbers,
            "reason": self.reason,
            "control": self.control,
            "cause": self.cause,
            "seeds": self.seeds,
            **({"units": self.units} if self.units else {}),
            "rule": self.rule,
        }

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
        if outcome.cause == SEEDS:  # the seeds leave it open: more of them decide it
            checked["undecided"] = outcome.reason
        if not checked["passed"] and score.values and sign * (score.mean - threshold) >= 0:
            # the mean is on the right side: a seed is not, and that seed is what failed the control
            checked["weakest_seed"] = min(score.values) if self.higher_is_better else max(score.values)
        return checked if level is None else checked | {"level": level}

    @property
    def short_of(self) -> str:
        """How a failed control's value stands to its threshold, in one sign."""
        return "<" if self.higher_is_better else ">"


def control_state(checked: dict[str, Any]) -> str:
    """A checked control's state in a word: passed, undecided (its seeds leave it open) or failed."""
    return "passed" if checked["passed"] else "undecided" if "undecided" in checked else "failed"


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
    #: the paper's budget for this claim, where its reproduction's ``paper`` protocol covers several (one task's
    #: steps and sizes among others); "" where that protocol's first clause says it
    paper_budget: str = ""

    def decide(self, results: Any) -> Outcome:
        """The predicate's outcome, then the safety rules on every verdict, *held* included: *inconclusive
        (control)* where the control did not pass, with its value as the reason ("control softmax with positions
        0.49 < 0.9"), *inconclusive (seeds)* where its seeds leave it open, and *inconclusive (budget)* where a
        compared model never left the task's plateau (:class:`Plateau`) or is still improving at its last
        evaluations (:func:`still_improving`) — before the reason of a claim already open for its seeds or the
        ceiling."""
        outcome = self._tested(results)
        checked = {} if self.control is None else self.control.check(results)
        if checked and not checked["passed"]:
            return self._control_open(outcome, checked)
        if outcome.cause == MISSING:
            return replace(outcome, control=checked)
        stuck = self.plateau.stuck(results) if self.plateau is not None else []
        improving = [found for score in outcome.scores for found in still_improving(score)]
        if not stuck and not improving:
            return replace(outcome, control=checked)
        words = [f"{'; '.join(stuck)} ({self.plateau.description})"] if stuck else []
        words += [f"{'; '.join(improving)} (still improving at its last evaluations)"] if improving else []
        budget = f"{BUDGET}: " + "; ".join(words)
        if outcome.verdict == INCONCLUSIVE:  # the budget first: more seeds of a model that never learned say little
            budget += f"; and {outcome.reason}"
        return Outcome(INCONCLUSIVE, outcome.numbers, budget, checked, BUDGET, outcome.scores, outcome.rule)

    def _tested(self, results: Any) -> Outcome:
        """The predicate's outcome, or *inconclusive (missing)* naming the error where its numbers cannot be computed
        (an empty or non-finite result it divides by, say): never *held*, and nothing else is left unwritten."""
        try:
            return self.test(results)
        except (ArithmeticError, ValueError) as error:
            reason = f"the rule cannot be computed: {type(error).__name__}: {error}"
            return Outcome(INCONCLUSIVE, {}, reason, cause=MISSING)

    def _control_open(self, outcome: Outcome, checked: dict[str, Any]) -> Outcome:
        """*Inconclusive* for a control that did not pass: *(seeds)* where its seeds leave it open, else
        *(control)*."""
        if "undecided" in checked:
            reason = f"control {checked['setting']} undecided: {checked['undecided']} ({checked['description']})"
            return Outcome(INCONCLUSIVE, outcome.numbers, reason, checked, SEEDS, outcome.scores, outcome.rule)
        reason = (
            f"control {checked['setting']} {control_value(checked)} "
            f"{self.control.short_of} {checked['threshold']:.3g} ({checked['description']})"
        )
        return Outcome(INCONCLUSIVE, outcome.numbers, reason, checked, CONTROL, outcome.scores, outcome.rule)


#: the evaluations at the end of a run over which :func:`still_improving` fits its slope (at least four)
CONVERGENCE_WINDOW = 5
#: one-sided level of its slope test
CONVERGENCE_LEVEL = 0.95
#: the least gain over the window that counts as improving: this share of the last value, or this much (accuracy,
#: R²), whichever is larger — one point of accuracy, 1 % of a perplexity
CONVERGENCE_GAIN = 0.01


def still_improving(score: Score) -> list[str]:
    """Whether a model had not converged: over the last :data:`CONVERGENCE_WINDOW` evaluations of its seeds' mean
    curve (the steps every seed's best run evaluated), the least-squares slope points the better way, is
    significant against the window's own noise (one-sided ``t`` test of the slope, ``W − 2`` degrees of freedom,
    level :data:`CONVERGENCE_LEVEL`), and gains at least :data:`CONVERGENCE_GAIN` over the window.  Returns the
    model with its slope in words, or nothing (converged, or fewer than four common evaluations to test)."""
    curves = [dict(curve) for curve in score.curves if curve]
    if not curves:
        return []
    steps = sorted(set.intersection(*(set(curve) for curve in curves)))[-CONVERGENCE_WINDOW:]
    if len(steps) < 4:
        return []
    values = [sum(curve[step] for curve in curves) / len(curves) for step in steps]
    slope, error = _slope(steps, values)
    sign = 1.0 if score.higher_is_better else -1.0
    gain = sign * slope * (steps[-1] - steps[0])
    if gain < max(CONVERGENCE_GAIN, CONVERGENCE_GAIN * abs(values[-1])):
        return []
    from scipy import stats

    if error > 0 and sign * slope / error < stats.t.ppf(CONVERGENCE_LEVEL, len(steps) - 2):
        return []
    return [
        f"{score.label} gained {gain:.3g} over its last {len(steps)} evaluations (steps {steps[0]:,}–{steps[-1]:,})"
    ]


def _slope(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """The least-squares slope of ``y`` on ``x`` and its standard error ``√(Σr²/(n − 2) / Σ(x − x̄)²)``."""
    mean_x, mean_y = sum(x) / len(x), sum(y) / len(y)
    spread = sum((value - mean_x) ** 2 for value in x)
    slope = sum((a - mean_x) * (b - mean_y) for a, b in zip(x, y)) / spread
    residuals = sum((b - mean_y - slope * (a - mean_x)) ** 2 for a, b in zip(x, y))
    return slope, math.sqrt(residuals / (len(x) - 2) / spread)


#: the two-sided level of every interval a rule decides on
CONFIDENCE = 0.95


def t_quantile(degrees_of_freedom: float) -> float:
    """Student's ``t`` quantile of the two-sided :data:`CONFIDENCE` interval (the normal one for infinite degrees of
    freedom): 12.7 for one, 4.30 for two, 2.78 for four, 1.96 in the limit."""
    from scipy import stats

    return float(stats.t.ppf((1 + CONFIDENCE) / 2, degrees_of_freedom))


@dataclass(frozen=True)
class Interval:
    """An estimate with its :data:`CONFIDENCE` interval ``[low, high]`` (``half`` its half-width), and how it was
    made, in words."""

    estimate: float
    half: float
    method: str

    @property
    def low(self) -> float:
        return self.estimate - self.half

    @property
    def high(self) -> float:
        return self.estimate + self.half

    def words(self) -> str:
        return f"{self.estimate:+.3g} ± {self.half:.3g} ({CONFIDENCE:.0%}, {self.method})"


def _seeds_needed(scores: Sequence[Score]) -> Outcome | None:
    """*Inconclusive (seeds)* where a trained score has one seed (no standard error to decide on); else None."""
    short = [score.label for score in scores if not score.exact and len(score.values) < 2]
    if not short:
        return None
    numbers = {score.label: score.mean for score in scores}
    return Outcome(INCONCLUSIVE, numbers, f"one seed of {', '.join(short)}: the rule needs two", cause=SEEDS)


def mean_interval(score: Score) -> Interval:
    """Student's interval of the mean over seeds (``n − 1`` degrees of freedom; a point for an exact score or
    identical seeds)."""
    error = score.standard_error
    half = 0.0 if error == 0 else t_quantile(len(score.values) - 1) * error
    return Interval(score.mean, half, "exact" if score.exact else f"Student, {score.counted()}")


def difference_interval(a: Score, b: Score) -> Interval:
    """Welch's interval of ``mean(a) − mean(b)``: standard error ``√(s_a²/n_a + s_b²/n_b)``, Welch–Satterthwaite
    degrees of freedom (the settings' seeds are not paired: the models differ in their initialization)."""
    parts = [score.variance / len(score.values) for score in (a, b)]
    error = math.sqrt(sum(parts))
    if error == 0:
        return Interval(a.mean - b.mean, 0.0, "exact" if a.exact and b.exact else "identical seeds")
    freedom = sum(parts) ** 2 / sum(part**2 / (len(score.values) - 1) for part, score in zip(parts, (a, b)) if part > 0)
    sizes = f"{len(a.values)} and {b.counted()}" if a.unit == b.unit else f"{a.counted()} and {b.counted()}"
    return Interval(a.mean - b.mean, t_quantile(freedom) * error, f"Welch, {sizes}")


def _open(scores: Sequence[Score]) -> Outcome | None:
    """*Inconclusive* where a score lacks a run (:func:`_incomplete`), has a non-finite value, or is a single seed
    of a trained setting (:func:`_seeds_needed`); None where the rule can be computed."""
    incomplete = _incomplete(scores)
    if incomplete is not None:
        return replace(incomplete, scores=tuple(scores))
    broken = [score.label for score in scores if not all(math.isfinite(value) for value in score.values)]
    if broken:
        reason = f"a non-finite value in {', '.join(broken)}: the rule cannot be computed"
        return Outcome(INCONCLUSIVE, {}, reason, cause=MISSING, scores=tuple(scores))
    short = _seeds_needed(scores)
    return None if short is None else replace(short, scores=tuple(scores))


def _incomplete(scores: Sequence[Score]) -> Outcome | None:
    """*Inconclusive* when a score lacks a run, naming what is missing; None when every score is complete."""
    missing = [
        f"{score.label}: {', '.join(score.missing) or 'no finished run'}" for score in scores if not score.complete
    ]
    if not missing:
        return None
    numbers = {score.label: score.mean for score in scores if score.values}
    return Outcome(INCONCLUSIVE, numbers, "runs missing or failed (" + "; ".join(missing) + ")", cause=MISSING)


def _numbers(a: Score, b: Score, interval: Interval) -> dict[str, float]:
    return {a.label: a.mean, b.label: b.mean, "difference": interval.estimate, "interval half-width": interval.half}


def _at_ceiling(a: Score, b: Score, ceiling: float | None) -> str:
    """Why two scores cannot be told apart at the metric's best value (both means within ``PLATEAU_MARGIN`` of
    ``ceiling``); empty where they can."""
    if ceiling is None or min(a.mean, b.mean) < ceiling - PLATEAU_MARGIN:
        return ""
    return (
        f"at the ceiling: {a.label} {a.mean:.3g} and {b.label} {b.mean:.3g} both within {PLATEAU_MARGIN:g} "
        f"of the best score {ceiling:g}"
    )


def at_least(a: Score, b: Score, margin: float = 0.0, ceiling: float | None = None) -> Outcome:
    """Whether ``a ≥ b + margin``: *held* when Welch's interval of the difference (:func:`difference_interval`) lies
    above ``margin``, *did not hold* when it lies below, else *inconclusive (seeds)*.  ``ceiling``: the metric's best
    value (1 for an accuracy or R²); where both means lie within ``PLATEAU_MARGIN`` of it the task does not separate
    the two, whatever the difference: *inconclusive (ceiling)*."""
    return _compared(
        a,
        b,
        ("margin", margin),
        ceiling,
        held=lambda interval: interval.low > margin or (interval.half == 0 and interval.estimate >= margin),
        failed=lambda interval: interval.high < margin,
        open_words=f"includes the margin {margin:+.3f}",
        rule=f"above {margin:+.3g}",
    )


def within(a: Score, b: Score, tolerance: float, ceiling: float | None = None) -> Outcome:
    """Whether ``|a − b| ≤ tolerance``, as an equivalence test: *held* when Welch's interval of the difference lies
    inside ``±tolerance``, *did not hold* when it lies outside, else *inconclusive (seeds)*.  Never *held* at the
    ``ceiling`` (both means within ``PLATEAU_MARGIN`` of it: any two models agree there) — *inconclusive
    (ceiling)*."""
    return _compared(
        a,
        b,
        ("tolerance", tolerance),
        ceiling,
        held=lambda interval: -tolerance <= interval.low and interval.high <= tolerance,
        failed=lambda interval: interval.low > tolerance or interval.high < -tolerance,
        open_words=f"is not inside nor outside the tolerance ±{tolerance:.3f}",
        rule=f"inside ±{tolerance:.3g}",
    )


def _compared(
    a: Score,
    b: Score,
    line: tuple[str, float],
    ceiling: float | None,
    held: Callable[[Interval], bool],
    failed: Callable[[Interval], bool],
    open_words: str,
    rule: str,
) -> Outcome:
    """A comparison of two settings on Welch's interval of their difference: *inconclusive* where it cannot be
    computed (:func:`_open`) or both lie at the ``ceiling``; else *held* where ``held(interval)``, *did not hold*
    where ``failed(interval)``, *inconclusive (seeds)* otherwise.  ``line``: the rule's name and value (margin or
    tolerance), kept in the numbers; ``rule``: where the difference must lie, kept in the outcome in words
    (:func:`rule_words`)."""
    rule = rule_words("difference", rule, "Welch", a.exact and b.exact)
    unknown = _open((a, b))
    if unknown is not None:
        return replace(unknown, rule=rule)
    interval = difference_interval(a, b)
    name, value = line
    numbers = _numbers(a, b, interval) | {name: value}
    decided = partial(Outcome, scores=(a, b), rule=rule)
    ceiling_reason = _at_ceiling(a, b, ceiling)
    if ceiling_reason:
        return decided(INCONCLUSIVE, numbers, ceiling_reason, cause=CEILING)
    if held(interval):
        return decided(HELD, numbers)
    if failed(interval):
        return decided(FAILED, numbers)
    return decided(INCONCLUSIVE, numbers, f"the difference {interval.words()} {open_words}", cause=SEEDS)


def rule_words(estimate: str, condition: str, method: str, exact: bool) -> str:
    """A decision rule in words, with how its interval is made: "Welch's 95% interval of the difference above
    +0.05" over seeds, "the exact difference above +0.05" for scores computed exactly (no interval: the value
    decides)."""
    if exact:
        return f"the exact {estimate} {condition}"
    return f"{method}'s {CONFIDENCE:.0%} interval of the {estimate} {condition}"


def reaches(score: Score, threshold: float) -> Outcome:
    """Whether ``mean ≥ threshold``: Student's interval of the mean (:func:`mean_interval`) at or above the
    threshold (*held*), below it (*did not hold*), or across it (*inconclusive (seeds)*)."""
    return _against(score, threshold, "reach", higher=True)


def at_most(score: Score, threshold: float) -> Outcome:
    """Whether ``mean ≤ threshold`` (a model that fails a task stays at or below it): Student's interval of the mean
    at or below the threshold (*held*), above it (*did not hold*), or across it (*inconclusive (seeds)*)."""
    return _against(score, threshold, "stay at or below", higher=False)


def _against(score: Score, threshold: float, verb: str, higher: bool) -> Outcome:
    estimate = "value" if score.exact else "mean"
    rule = rule_words(estimate, f"{'≥' if higher else '≤'} {threshold:.3g}", "Student", score.exact)
    unknown = _open((score,))
    if unknown is not None:
        return replace(unknown, rule=rule)
    interval = mean_interval(score)
    numbers = {
        score.label: score.mean,
        "lowest seed": min(score.values),
        "highest seed": max(score.values),
        "interval half-width": interval.half,
        "threshold": threshold,
    }
    if higher and score.every_seed_at_target and min(score.values) >= threshold:
        # values censored at an early stop ≥ the threshold: no interval around them can clear it, each seed did
        rule = f"every seed stopped early at its target ≥ {threshold:.3g}, else {rule}"
        return Outcome(HELD, numbers, scores=(score,), rule=rule)
    passing, failing = (interval.low, interval.high) if higher else (-interval.high, -interval.low)
    bound = threshold if higher else -threshold
    decided = partial(Outcome, scores=(score,), rule=rule)
    if passing >= bound:
        return decided(HELD, numbers)
    if failing < bound:
        return decided(FAILED, numbers)
    reason = f"the mean {interval.words()} does not {verb} {threshold:g} on both sides of its interval"
    return decided(INCONCLUSIVE, numbers, reason, cause=SEEDS)


def every(outcomes: dict[str, Outcome]) -> Outcome:
    """All of several outcomes (one per task, say): *held* when every one held, *did not hold* when one did not,
    else *inconclusive* (also when there is no part at all: nothing was run to decide on, its runs are missing) for
    the first of :data:`CAUSES` that leaves a part open; the numbers keep each part's under its key, the scores
    every part's, the rule each different rule of the parts once."""
    if not outcomes:
        return Outcome(INCONCLUSIVE, {}, "no results to decide on", cause=MISSING)
    numbers = {f"{key}: {name}": value for key, outcome in outcomes.items() for name, value in outcome.numbers.items()}
    scores = tuple(score for outcome in outcomes.values() for score in outcome.scores)
    rules = "; ".join(dict.fromkeys(outcome.rule for outcome in outcomes.values() if outcome.rule))
    decided = partial(Outcome, scores=scores, rule=rules)
    failed = [key for key, outcome in outcomes.items() if outcome.verdict == FAILED]
    if failed:
        return decided(FAILED, numbers, "did not hold on " + ", ".join(failed))
    open_ = {key: outcome for key, outcome in outcomes.items() if outcome.verdict == INCONCLUSIVE}
    if open_:
        cause = min((outcome.cause for outcome in open_.values()), key=CAUSES.index)
        reason = "; ".join(f"{key}: {outcome.reason}" for key, outcome in open_.items())
        return decided(INCONCLUSIVE, numbers, reason, cause=cause)
    return decided(HELD, numbers)
