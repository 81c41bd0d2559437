"""The comparisons every claim is built from, on a 95 % confidence interval over seeds (Welch's for a difference,
Student's for a mean): held, did not hold, and inconclusive where the interval straddles the line or runs are
missing; and the safety rules :meth:`Claim.decide` applies to every verdict."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from seqdyn.reproduce.base import Results, score_cell
from seqdyn.reproduce.claims import (
    FAILED,
    HELD,
    INCONCLUSIVE,
    Claim,
    Control,
    Outcome,
    Plateau,
    Score,
    at_least,
    at_most,
    control_value,
    difference_interval,
    every,
    mean_interval,
    reaches,
    still_improving,
    t_quantile,
    weakest,
    within,
)


def score(*values: float, missing: tuple[str, ...] = (), label: str = "a", exact: bool = False) -> Score:
    return Score(label, values, missing, exact=exact)


def exact(value: float, label: str = "a") -> Score:
    return Score(label, (value,), exact=True)


# --- the intervals, against scipy's own Welch test and Student's formula -----------------------------------------
@pytest.mark.parametrize(
    ("a", "b"), [((0.8, 0.82, 0.79), (0.5, 0.52)), ((0.1, 0.4, 0.3, 0.2), (0.35, 0.3, 0.5)), ((1.0, 3.0), (2.0, 2.5))]
)
def test_the_difference_interval_is_welchs(a, b):
    interval = difference_interval(score(*a), score(*b, label="b"))
    reference = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (interval.low, interval.high) == pytest.approx((reference.low, reference.high), rel=1e-12)


def test_the_mean_interval_is_students_and_an_exact_score_is_a_point():
    values = (0.9, 0.95, 0.97, 0.91)
    interval = mean_interval(score(*values))
    reference = stats.t.interval(0.95, len(values) - 1, loc=sum(values) / 4, scale=stats.sem(values))
    assert (interval.low, interval.high) == pytest.approx(reference, rel=1e-12)
    assert (mean_interval(exact(0.3)).low, mean_interval(exact(0.3)).high) == (0.3, 0.3)
    assert mean_interval(score(0.5, 0.5)).half == 0.0  # identical seeds: no spread to widen it
    assert t_quantile(1) == pytest.approx(12.706, abs=1e-3) and t_quantile(math.inf) == pytest.approx(1.960, abs=1e-3)


# --- each rule just inside and just outside its line -----------------------------------------------------------
def _half(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return difference_interval(score(*a), score(*b, label="b")).half


A, B = (0.80, 0.84, 0.82), (0.50, 0.52)  # difference 0.31


@pytest.mark.parametrize(
    ("offset", "verdict"),
    [(-0.001, HELD), (+0.001, INCONCLUSIVE)],  # the margin just below / above the interval's low end
)
def test_at_least_holds_when_the_interval_clears_the_margin(offset, verdict):
    margin = 0.31 - _half(A, B) + offset
    assert at_least(score(*A), score(*B, label="b"), margin).verdict == verdict


@pytest.mark.parametrize(("offset", "verdict"), [(+0.001, FAILED), (-0.001, INCONCLUSIVE)])
def test_at_least_fails_when_the_interval_lies_below_the_margin(offset, verdict):
    margin = 0.31 + _half(A, B) + offset
    outcome = at_least(score(*A), score(*B, label="b"), margin)
    assert outcome.verdict == verdict and outcome.numbers["margin"] == margin
    assert outcome.numbers["difference"] == pytest.approx(0.31)


@pytest.mark.parametrize(
    ("tolerance_offset", "verdict"),
    [(+0.001, HELD), (-0.001, INCONCLUSIVE)],  # |interval| just inside / outside ±tolerance
)
def test_within_holds_when_the_interval_lies_inside_the_tolerance(tolerance_offset, verdict):
    a, b = (0.52, 0.54, 0.53), (0.50, 0.51)  # difference 0.025
    tolerance = 0.025 + _half(a, b) + tolerance_offset
    assert within(score(*a), score(*b, label="b"), tolerance).verdict == verdict


@pytest.mark.parametrize(("tolerance_offset", "verdict"), [(-0.001, FAILED), (+0.001, INCONCLUSIVE)])
def test_within_fails_when_the_interval_lies_outside_the_tolerance(tolerance_offset, verdict):
    tolerance = 0.31 - _half(A, B) + tolerance_offset
    assert within(score(*B, label="b"), score(*A), tolerance).verdict == verdict  # either sign


@pytest.mark.parametrize(
    ("offset", "reached", "stayed"), [(-0.001, HELD, FAILED), (+0.001, INCONCLUSIVE, INCONCLUSIVE)]
)
def test_reaches_and_at_most_on_the_interval_of_the_mean(offset, reached, stayed):
    values = (0.80, 0.84, 0.82)
    threshold = 0.82 - mean_interval(score(*values)).half + offset
    reach, stay = reaches(score(*values), threshold), at_most(score(*values), threshold)
    assert (reach.verdict, stay.verdict) == (reached, stayed)
    assert reach.numbers["lowest seed"] == 0.80 and reach.numbers["highest seed"] == 0.84
    high = 0.82 + mean_interval(score(*values)).half
    assert at_most(score(*values), high + 0.001).verdict == HELD
    assert reaches(score(*values), high + 0.001).verdict == FAILED


@pytest.mark.parametrize(
    ("at_target", "threshold", "verdict"),
    [
        ((True, True, True), 0.99, HELD),  # each seed stopped at its target: the values are censored there
        ((True, True, True), 0.9925, INCONCLUSIVE),  # a threshold above the lowest seed: the interval decides
        ((True, False, True), 0.99, INCONCLUSIVE),  # one seed ran to the end: the interval decides
        ((), 0.99, INCONCLUSIVE),
    ],
)
def test_seeds_stopped_early_at_their_target_reach_it_where_no_interval_can(at_target, threshold, verdict):
    """Zoology stops a run once it reaches 0.99: 0.991, 1.0 and 0.992 reach 0.99, but Student's interval around
    them (0.994 ± 0.012) crosses it, and no number of such seeds would ever clear it."""
    values = (0.991, 1.0, 0.992)
    assert mean_interval(score(*values)).low < 0.99
    assert reaches(Score("a", values, at_target=at_target), threshold).verdict == verdict


def test_the_weakest_of_scores_stopped_at_their_target_is_the_one_with_the_lowest_known_value():
    at_target = Score("a", (0.991, 1.0, 0.992), at_target=(True, True, True))
    still_open = Score("b", (0.995, 0.996, 0.994))
    assert weakest([at_target, still_open]).label == "a"  # 0.991 known, the interval of b reaches down to 0.9915
    assert weakest([Score("a", (0.999, 1.0, 0.999), at_target=(True,) * 3), still_open]).label == "b"


def test_a_score_knows_which_seeds_stopped_early_in_every_cell():
    rows = [
        {
            "name": f"{seed}-{lr}",
            "run_id": f"{seed}{lr}",
            "status": status,
            "best": best,
            "train.seed": seed,
            "optimizer.lr": lr,
        }
        for seed, lr, status, best in [
            (0, 1, "stopped_early", 0.99),
            (0, 2, "finished", 0.5),  # the best over the rates stopped early
            (1, 1, "finished", 0.995),
            (1, 2, "stopped_early", 0.99),  # the best ran to the end
        ]
    ]
    assert Results("cpu", tuple(rows)).score("m", rows).at_target == (True, False)


@pytest.mark.parametrize(
    ("a", "b", "margin", "verdict"),
    [
        (0.75, 0.5, 0.25, HELD),  # a tie holds (≥; exact in binary)
        (0.74, 0.5, 0.25, FAILED),
        (0.46, 0.5, -0.05, HELD),  # a negative margin: a ≥ b − 0.05
        (0.44, 0.5, -0.05, FAILED),
    ],
)
def test_exact_scores_decide_on_their_values(a, b, margin, verdict):
    assert at_least(exact(a), exact(b, "b"), margin).verdict == verdict
    assert within(exact(0.75), exact(0.5, "b"), 0.25).verdict == HELD
    assert within(exact(0.76), exact(0.5, "b"), 0.25).verdict == FAILED
    assert reaches(exact(0.75), 0.75).verdict == at_most(exact(0.75), 0.75).verdict == HELD


def test_identical_seeds_decide_on_their_values():
    assert at_least(score(1.0, 1.0), score(0.5, 0.5, label="b"), 0.25).verdict == HELD
    assert reaches(score(0.5, 0.5), 0.5).verdict == HELD


def test_adding_seeds_from_the_same_distribution_settles_what_the_range_rule_could_not():
    """A real difference of 0.10 (seed noise 0.05): two seeds leave it open; twenty decide it under the interval
    rule, where the old rule (the difference must clear the larger seed range) stays open — the range grows with
    the seeds."""
    rng = random.Random(7)
    draws_a = [rng.gauss(0.60, 0.05) for _ in range(20)]
    draws_b = [rng.gauss(0.50, 0.05) for _ in range(20)]
    two = at_least(score(*draws_a[:2]), score(*draws_b[:2], label="b"))
    twenty = at_least(score(*draws_a), score(*draws_b, label="b"))
    assert two.verdict == INCONCLUSIVE and two.cause == "seeds"
    assert twenty.verdict == HELD and twenty.seeds == {"a": 20, "b": 20}
    spread = max(max(draws_a) - min(draws_a), max(draws_b) - min(draws_b))
    assert twenty.numbers["difference"] <= spread  # the range rule: inconclusive at twenty seeds


# --- what a rule cannot compute is inconclusive, never held --------------------------------------------------------
def test_one_seed_of_a_trained_setting_is_inconclusive_seeds():
    outcome = at_least(score(0.9), score(0.1, 0.12, label="b"), 0.05)
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == "seeds"
    assert outcome.reason == "one seed of a: the rule needs two"
    assert reaches(score(0.99), 0.5).cause == "seeds"


def test_a_non_finite_value_is_inconclusive():
    outcome = at_least(score(math.nan, 0.9), score(0.1, 0.12, label="b"), 0.05)
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == "missing" and "non-finite" in outcome.reason
    assert reaches(score(math.inf, 1.0), 0.5).verdict == INCONCLUSIVE


def test_a_missing_run_makes_a_claim_inconclusive_and_names_it():
    outcome = at_least(score(0.9, missing=("run-7 (failed: out of memory)",)), score(0.1, label="b"), 0.05)
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == "missing"
    assert "run-7 (failed: out of memory)" in outcome.reason
    assert within(score(), score(0.5, label="b"), 0.1).verdict == INCONCLUSIVE  # no run at all
    outcome = at_least(score(0.5, missing=("run-1 (failed)", "run-2 (killed)")), score(label="b"), 0.1)
    assert outcome.reason == "runs missing or failed (a: run-1 (failed), run-2 (killed); b: no finished run)"
    assert outcome.numbers == {"a": 0.5}


def test_each_reason_names_the_interval_that_left_a_claim_open():
    a, b = score(0.75, 0.25), score(0.25, 0.3, label="b")
    half = difference_interval(a, b).half
    outcome = at_least(a, b, 0.25)
    assert (
        outcome.reason == f"the difference +0.225 ± {half:.3g} (95%, Welch, 2 and 2 seeds) includes the margin +0.250"
    )
    assert outcome.numbers == {
        "a": 0.5,
        "b": 0.275,
        "difference": pytest.approx(0.225),
        "interval half-width": half,
        "margin": 0.25,
    }
    assert "is not inside nor outside the tolerance ±0.125" in within(a, b, 0.125).reason
    assert "does not reach 0.5" in reaches(score(0.25, 0.75, 1.0), 0.5).reason
    assert "does not stay at or below 0.5" in at_most(score(0.25, 0.75, 1.0), 0.5).reason


def test_a_score_of_no_seed_has_no_mean_and_no_spread():
    empty = score()
    assert math.isnan(empty.mean) and math.isnan(empty.spread) and not empty.complete
    assert score(0.25, 0.75).mean == 0.5 and score(0.25, 0.75).spread == 0.5 and score(0.25, 0.75).complete
    assert not score(0.5, missing=("run x",)).complete
    assert math.isnan(score(0.5).standard_error) and exact(0.5).standard_error == 0.0


# --- every, causes, outcomes ---------------------------------------------------------------------------------------
def test_every_of_nothing_is_inconclusive():
    outcome = every({})
    assert outcome.verdict == INCONCLUSIVE and outcome.reason == "no results to decide on" and outcome.numbers == {}
    assert outcome.cause == "missing"
    held = every({"t1": Outcome(HELD, {"x": 1.0}), "t2": Outcome(HELD, {"y": 2.0})})
    assert held.verdict == HELD and held.numbers == {"t1: x": 1.0, "t2: y": 2.0}


def test_every_fails_on_one_failure_and_is_inconclusive_on_one_open_part():
    held, failed = Outcome(HELD, {"x": 1.0}), Outcome(FAILED, {"x": 0.0, "y": 2.0})
    open_ = Outcome(INCONCLUSIVE, {"x": 0.5}, "inside the interval", cause="seeds")
    assert every({"t1": held, "t2": held}).verdict == HELD
    assert every({"t1": held, "t2": failed, "t3": open_}).verdict == FAILED
    outcome = every({"t1": held, "t2": open_})
    assert outcome.verdict == INCONCLUSIVE and "t2: inside the interval" in outcome.reason
    assert outcome.numbers == {"t1: x": 1.0, "t2: x": 0.5}
    assert every({"t1": failed, "t2": held, "t3": failed}).reason == "did not hold on t1, t3"
    assert every({"t1": open_, "t2": open_}).reason == "t1: inside the interval; t2: inside the interval"
    parts = {"t1": reaches(score(0.9, 0.91), 0.5), "t2": reaches(score(0.8, 0.82, 0.81, label="b"), 0.5)}
    assert every(parts).seeds == {"a": 2, "b": 3}


def test_an_unknown_verdict_is_refused():
    with pytest.raises(ValueError, match=r"^verdict: expected one of held, did not hold, inconclusive, got 'maybe'$"):
        Outcome("maybe")


@pytest.mark.parametrize(
    ("verdict", "cause"), [(INCONCLUSIVE, None), (INCONCLUSIVE, "luck"), (HELD, "seeds"), (FAILED, "budget")]
)
def test_only_an_inconclusive_verdict_has_a_cause_and_it_is_one_of_the_causes(verdict, cause):
    with pytest.raises(ValueError, match="cause: an inconclusive verdict takes one of control, budget, ceiling"):
        Outcome(verdict, {}, "why", cause=cause)


def test_each_comparison_sets_the_cause_that_left_it_open_and_every_keeps_the_first_cause():
    missing = at_least(score(0.5, missing=("run-1 (failed)",)), score(0.2, label="b"), 0.1)
    seeds = at_least(score(0.75, 0.25), score(0.25, 0.3, label="b"), 0.25)
    ceiling = at_least(score(0.999, 1.0), score(0.995, 0.997, label="b"), 0.0, ceiling=1.0)
    assert [missing.cause, seeds.cause, ceiling.cause] == ["missing", "seeds", "ceiling"]
    assert every({"t1": missing, "t2": seeds}).cause == "seeds"
    assert every({"t1": missing, "t2": seeds, "t3": ceiling}).cause == "ceiling"
    assert every({"t1": missing, "t2": Outcome(HELD)}).cause == "missing"
    assert at_least(exact(0.5), exact(0.25, "b")).cause is None and every({"t1": Outcome(FAILED)}).cause is None


def test_the_record_of_an_outcome_names_the_seeds_that_decided_it():
    outcome = at_least(score(0.9, 0.92, 0.91), score(0.5, 0.52, label="b"), 0.1)
    assert outcome.record() == {
        "verdict": HELD,
        "numbers": outcome.numbers,
        "reason": "",
        "control": {},
        "cause": None,
        "seeds": {"a": 3, "b": 2},
        "rule": "Welch's 95% interval of the difference above +0.1",
    }


def test_each_rule_says_its_interval_and_where_it_must_lie_whatever_the_verdict():
    seeds, other = score(0.9, 0.92, 0.91), score(0.5, 0.52, label="b")
    welch = "Welch's 95% interval of the difference"
    assert at_least(seeds, other, 0.05).rule == f"{welch} above +0.05"
    assert at_least(other, seeds).rule == f"{welch} above +0"  # did not hold: the same rule
    assert within(seeds, other, 0.02).rule == f"{welch} inside ±0.02"
    assert reaches(seeds, 0.95).rule == "Student's 95% interval of the mean ≥ 0.95"
    assert at_most(seeds, 0.2).rule == "Student's 95% interval of the mean ≤ 0.2"
    assert at_least(exact(0.3), exact(0.1, "b"), 0.1).rule == "the exact difference above +0.1"
    assert reaches(exact(0.3), 0.1).rule == "the exact value ≥ 0.1"
    # open for want of seeds or runs, the rule that would decide it is still named
    assert reaches(score(0.9), 0.5).rule == "Student's 95% interval of the mean ≥ 0.5"
    assert at_least(score(0.9, missing=("seed 1",)), other).rule == f"{welch} above +0"
    # every part under the same rule names it once; different rules each once, in order
    parts = {"x": at_least(seeds, other, 0.1), "y": at_least(seeds, other, 0.1), "z": reaches(seeds, 0.5)}
    assert every(parts).rule == f"{welch} above +0.1; Student's 95% interval of the mean ≥ 0.5"


# --- the ceiling: any comparison there, held or not, is inconclusive ---------------------------------------------
def test_a_comparison_at_the_ceiling_is_inconclusive_whatever_it_says():
    """Both within 0.05 of the best score 1: the task does not separate them; below that band it decides."""
    top = at_least(score(0.999, 1.0), score(0.995, 0.997, label="b"), 0.05, ceiling=1.0)
    assert top.verdict == INCONCLUSIVE and top.cause == "ceiling"
    assert top.reason == "at the ceiling: a 1 and b 0.996 both within 0.05 of the best score 1"
    assert at_least(score(0.999, 1.0), score(0.995, 0.997, label="b"), 0.05).verdict == FAILED  # no ceiling given
    held_at_top = at_least(score(0.999, 1.0), score(0.96, 0.961, label="b"), 0.0)
    assert held_at_top.verdict == HELD
    assert at_least(score(0.999, 1.0), score(0.96, 0.961, label="b"), 0.0, ceiling=1.0).cause == "ceiling"
    assert at_least(score(0.999, 1.0), score(0.90, 0.91, label="b"), 0.0, ceiling=1.0).verdict == HELD


def test_a_within_claim_at_the_ceiling_is_never_held():
    agree = (score(0.99, 0.995), score(0.992, 0.994, label="b"))
    assert within(*agree, 0.05).verdict == HELD
    outcome = within(*agree, 0.05, ceiling=1.0)
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == "ceiling"
    assert every({"selective_copying": outcome}).cause == "ceiling"


# --- the convergence rule --------------------------------------------------------------------------------------
def curve(values, start=100, every_=100):
    return tuple((start + i * every_, value) for i, value in enumerate(values))


def learning(values_per_seed, label="a", higher_is_better=True):
    curves = tuple(curve(values) for values in values_per_seed)
    best = tuple((max if higher_is_better else min)(values) for values in values_per_seed)
    return Score(label, best, curves=curves, higher_is_better=higher_is_better)


def test_a_model_still_rising_at_its_last_evaluations_has_not_converged():
    rising = learning([(0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7), (0.3, 0.42, 0.49, 0.56, 0.61, 0.66, 0.69)])
    (found,) = still_improving(rising)
    assert found.startswith("a gained 0.2") and "last 5 evaluations (steps 300–700)" in found


def test_a_flat_noisy_or_tiny_rise_has_converged():
    noisy = learning([(0.5, 0.9, 0.88, 0.91, 0.89, 0.9, 0.905)])  # the last five move with noise, not a trend
    assert still_improving(noisy) == []
    tiny = learning([(0.5, 0.9, 0.901, 0.902, 0.903, 0.904, 0.905)])  # significant but 0.004 < 0.01 over the window
    assert still_improving(tiny) == []
    short = learning([(0.1, 0.2, 0.3)])  # three evaluations: too few to test
    assert still_improving(short) == []
    stopped = Score("a", (0.99,), curves=((),))  # stopped early at its target: no curve to test
    assert still_improving(stopped) == []


def test_just_significant_and_just_not():
    """The slope's t statistic against the one-sided 95 % quantile with three degrees of freedom (2.353)."""
    base = (0.50, 0.52, 0.54, 0.56, 0.58)  # slope 0.0002 per step, gain 0.08 over the window

    def with_noise(amount):
        return learning([(0.1, 0.2, *(v + n for v, n in zip(base, (0, amount, -2 * amount, amount, 0))))])

    # residuals (0, a, −2a, a, 0): Σr² = 6a², slope SE = √(6a²/3 / 10⁵) → t = 0.0002 / SE
    critical = stats.t.ppf(0.95, 3)
    boundary = 0.0002 / critical / math.sqrt(2 / 1e5)
    assert still_improving(with_noise(boundary * 0.99)) != []
    assert still_improving(with_noise(boundary * 1.01)) == []


def test_a_falling_perplexity_is_still_improving():
    falling = learning([(400, 300, 250, 220, 200, 185, 172)], higher_is_better=False)
    assert still_improving(falling) != []
    assert still_improving(learning([(400, 300, 250, 220, 200, 185, 172)], higher_is_better=True)) == []


def test_a_score_keeps_the_curve_of_each_seeds_best_run_unless_it_stopped_early():
    rows = [
        {"name": "r0", "status": "finished", "best": 0.6, "steps": 700, "train.seed": 0, "curve": curve((0.5, 0.6))},
        {"name": "r1", "status": "stopped_early", "best": 0.99, "steps": 300, "train.seed": 1, "curve": curve((0.99,))},
    ]
    result = Results("cpu", tuple(rows)).score("mqar", rows)
    assert result.curves == (curve((0.5, 0.6)), ())
    assert result.higher_is_better


def _claim_with_control(control_values: tuple[float, ...], test_verdict: str):
    from seqdyn.reproduce.claims import Claim, Control

    control = Control("the control learns the task", lambda results: score(*control_values, label="softmax + PE"), 0.9)
    return Claim("c", "a ≥ b", "quote", lambda results: Outcome(test_verdict, {"a": 0.3}), control=control)


@pytest.mark.parametrize("test_verdict", [HELD, FAILED])
def test_a_claim_whose_control_fails_is_inconclusive_naming_the_control(test_verdict):
    outcome = _claim_with_control((0.49, 0.51), test_verdict).decide(None)
    assert outcome.verdict == INCONCLUSIVE and outcome.numbers == {"a": 0.3} and outcome.cause == "control"
    assert outcome.reason == "control softmax + PE 0.5 < 0.9 (the control learns the task)"
    assert outcome.control == {
        "description": "the control learns the task",
        "setting": "softmax + PE",
        "value": 0.5,
        "threshold": 0.9,
        "passed": False,
    }
    half = _claim_with_control((0.95, 0.5), test_verdict).decide(None)  # one seed of two: not a working control
    assert half.verdict == INCONCLUSIVE and half.control["passed"] is False


def test_a_control_its_seeds_leave_open_makes_the_claim_inconclusive_seeds_naming_its_weakest_seed():
    """Mean 0.92 ≥ 0.9 but the interval of the mean reaches below 0.9 (a seed at 0.89): more seeds decide it — the
    claim is *inconclusive (seeds)*, and the record says which seed fell short."""
    outcome = _claim_with_control((0.95, 0.89, 0.92), HELD).decide(None)
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == "seeds"
    assert outcome.reason.startswith("control softmax + PE undecided: the mean +0.92 ± 0.0745 (95%, Student, 3 seeds)")
    assert outcome.reason.endswith("(the control learns the task)")
    assert outcome.control["weakest_seed"] == 0.89 and outcome.control["value"] == pytest.approx(0.92)
    kept = Claim(
        "c",
        "a ≥ 0.5",
        "quote",
        lambda results: reaches(score(0.6, 0.7), 0.5),
        control=Control(
            "the control learns the task", lambda results: score(0.95, 0.89, 0.92, label="softmax + PE"), 0.9
        ),
    )
    assert kept.decide(None).rule == "Student's 95% interval of the mean ≥ 0.5"  # open for its control: rule kept
    assert "weakest_seed" not in _claim_with_control((0.49, 0.51), HELD).decide(None).control  # the mean fails
    perplexity = Control(
        "below the unigram model", lambda results: results, 1.0, level=lambda results: 28.0, higher_is_better=False
    )
    checked = perplexity.check(score(20.0, 29.0, label="softmax"))  # mean 24.5 ≤ 27, one seed 29 above it
    assert checked["passed"] is False and checked["weakest_seed"] == 29.0
    assert control_value(checked) == "24.5, weakest seed 29"


@pytest.mark.parametrize("test_verdict", [HELD, FAILED])
def test_a_claim_whose_control_passes_keeps_its_verdict_and_records_the_control(test_verdict):
    outcome = _claim_with_control((0.95, 0.97, 0.96), test_verdict).decide(None)
    assert outcome.verdict == test_verdict and outcome.control["passed"]
    assert outcome.control["value"] == pytest.approx(0.96)


def test_a_control_without_runs_makes_the_claim_inconclusive():
    outcome = _claim_with_control((), HELD).decide(None)
    assert outcome.verdict == INCONCLUSIVE and "control softmax + PE no result < 0.9" in outcome.reason


def test_a_control_counted_from_a_measured_level_beats_it_by_its_margin():
    """``level``: the threshold is the measured level (a constant answer's 0.12) plus the control's margin."""
    control = Control("beats the constant answer", lambda results: results, 0.05, level=lambda results: 0.12)
    assert control.check(score(0.19, 0.2, 0.21, label="x")) == {
        "description": "beats the constant answer",
        "setting": "x",
        "value": pytest.approx(0.2),
        "threshold": pytest.approx(0.17),
        "level": 0.12,
        "passed": True,
    }
    assert control.check(score(0.16, 0.9, label="x"))["passed"] is False  # one seed short of 0.17
    unmeasured = Control("beats it", lambda results: results, 0.05, level=lambda results: None)
    assert unmeasured.check(score(0.9, label="x"))["passed"] is False


def test_a_lower_is_better_control_stays_at_or_below_its_level():
    """Perplexity: the control must stay at or below the level less its margin; a failed one says ">"."""
    control = Control(
        "below the unigram model",
        lambda results: results["ctl"],
        1.0,
        level=lambda results: 28.0,
        higher_is_better=False,
    )
    assert control.check({"ctl": score(6.3, 6.4, label="softmax")})["passed"]
    assert control.check({"ctl": score(26.0, 27.5, label="softmax")})["passed"] is False  # 27.5 > 27
    claim = Claim("c", "a ≤ b", "quote", lambda results: Outcome(HELD), control=control)
    outcome = claim.decide({"ctl": score(29.0, 29.2, 29.4, label="softmax")})
    assert outcome.verdict == INCONCLUSIVE and outcome.reason == "control softmax 29.2 > 27 (below the unigram model)"


def _claim_with_plateau(test, level: float = 0.25, margin: float = 0.05, control=None):
    """A claim comparing models "a" and "b" of hand-made results ``{label: Score}``, with MQAR's plateau."""
    plateau = Plateau(
        "copying a value from the context", margin, lambda results: [(results["a"], level), (results["b"], level)]
    )
    return Claim("c", "a ≥ b", "quote", test, control=control, plateau=plateau)


def test_a_model_that_never_left_the_plateau_cannot_make_a_claim_fail():
    claim = _claim_with_plateau(lambda results: at_least(results["a"], results["b"], 0.05))
    stuck = {
        "a": Score("a", (0.25, 0.27), stops=("seed 0: step 4,000, 0.25", "seed 1: step 4,000, 0.27")),
        "b": score(0.9, 0.95, label="b"),
    }
    outcome = claim.decide(stuck)
    assert outcome.verdict == INCONCLUSIVE
    assert outcome.reason.startswith("budget: a best seed 0.27 within 0.05 of the plateau 0.25")
    assert outcome.cause == "budget"
    assert "seed 0: step 4,000, 0.25" in outcome.reason and "(copying a value from the context)" in outcome.reason
    # one seed that left the plateau (0.31 > 0.25 + 0.05): the comparison decides
    left = {"a": score(0.25, 0.31, label="a"), "b": score(0.9, 0.95, label="b")}
    assert claim.decide(left).verdict == FAILED
    # a claim that held on a model that never left the plateau is open too: it held on the budget
    held = {"a": score(0.9, 0.95, label="a"), "b": score(0.25, 0.26, label="b")}
    outcome = claim.decide(held)
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == "budget" and "b best seed 0.26" in outcome.reason
    learned = {"a": score(0.9, 0.95, label="a"), "b": score(0.5, 0.52, label="b")}
    assert claim.decide(learned).verdict == HELD


def test_a_claim_the_seeds_left_undecided_with_a_model_on_the_plateau_is_open_for_the_budget_first():
    """More seeds of a model that never learned say little: the cause is the budget, the seeds' reason follows."""
    claim = _claim_with_plateau(lambda results: at_least(results["a"], results["b"]))
    outcome = claim.decide({"a": score(0.25, 0.27, label="a"), "b": score(0.24, 0.30, label="b")})
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == "budget"
    assert outcome.reason.startswith("budget: a best seed 0.27 within 0.05 of the plateau 0.25")
    assert "b best seed 0.3 within 0.05" in outcome.reason
    assert "; and the difference -0.01 ± " in outcome.reason


def test_a_failed_control_outranks_the_plateau_rule():
    control = Control("softmax with positions", lambda results: results["control"], 0.9)
    claim = _claim_with_plateau(lambda results: at_least(results["a"], results["b"], 0.05), control=control)
    outcome = claim.decide(
        {"a": score(0.25, label="a"), "b": score(0.9, label="b"), "control": score(0.5, 0.5, label="ctl")}
    )
    assert outcome.verdict == INCONCLUSIVE and outcome.reason.startswith("control ctl 0.5 < 0.9")
    assert outcome.cause == "control"


def test_lower_is_better_plateaus_count_from_above():
    plateau = Plateau("a unigram model", 2.0, lambda results: [(results["a"], 60.0)], higher_is_better=False)
    assert plateau.stuck({"a": score(57.0, 61.0, label="a")}) == []  # the best seed (57) left the band above 58
    assert plateau.stuck({"a": score(59.0, 63.0, label="a")})[0].startswith("a best seed 59 within 2 of the plateau 60")


def test_a_score_says_where_each_seeds_best_run_stopped():
    rows = [
        {"name": f"r{i}", "status": "finished", "best": best, "steps": steps, "train.seed": seed}
        for i, (seed, best, steps) in enumerate([(0, 0.25, 4000), (0, 0.31, 3500), (1, 0.26, 4000)])
    ]
    result = Results("cpu", tuple(rows)).score("mqar", rows)
    assert result.values == (0.31, 0.26)
    assert result.stops == ("seed 0: step 3,500, 0.31", "seed 1: step 4,000, 0.26")


def test_the_weakest_score_is_the_one_with_the_lowest_seed_and_an_incomplete_one_comes_first():
    from seqdyn.reproduce.claims import weakest

    high_mean_low_seed = Score("a", (0.99, 0.85))
    steady = Score("b", (0.9, 0.9))
    assert weakest([steady, high_mean_low_seed]) is high_mean_low_seed  # means 0.92 > 0.9, but a seed at 0.85
    unfinished = Score("c", (0.99, 0.99), missing=("run 3 (failed)",))
    assert weakest([steady, unfinished, high_mean_low_seed]) is unfinished
    assert weakest([steady, Score("d", ())]).label == "d"
    with pytest.raises(ValueError, match="scores"):
        weakest([])


def test_a_held_claim_on_a_model_still_improving_is_inconclusive_budget():
    """The convergence rule applies to every verdict: "a ≥ b" held, but b still rises at its last evaluations."""
    claim = Claim("c", "a ≥ b", "quote", lambda results: at_least(results["a"], results["b"], 0.05))
    b_rising = learning([(0.2, 0.3, 0.4, 0.5, 0.55, 0.6), (0.2, 0.31, 0.41, 0.49, 0.56, 0.61)], label="b")
    a_flat = learning([(0.5, 0.9, 0.91, 0.9, 0.91, 0.9), (0.5, 0.9, 0.9, 0.91, 0.9, 0.91)])
    outcome = claim.decide({"a": a_flat, "b": b_rising})
    assert at_least(a_flat, b_rising, 0.05).verdict == HELD
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == "budget"
    assert outcome.rule == "Welch's 95% interval of the difference above +0.05"  # the rule it would have decided on
    assert (
        outcome.reason.startswith("budget: b gained") and "(still improving at its last evaluations)" in outcome.reason
    )
    b_flat = learning([(0.2, 0.5, 0.6, 0.61, 0.6, 0.61), (0.2, 0.5, 0.61, 0.6, 0.61, 0.6)], label="b")
    assert claim.decide({"a": a_flat, "b": b_flat}).verdict == HELD
    failed = Claim("c", "b ≥ a", "quote", lambda results: at_least(results["b"], results["a"], 0.05))
    assert failed.decide({"a": a_flat, "b": b_rising}).cause == "budget"  # and to a claim that did not hold


def test_a_claim_whose_rule_cannot_be_computed_is_inconclusive_naming_the_error():
    def divides_by_nothing(results):
        return reaches(score(sum(results) / len(results), sum(results) / len(results)), 0.5)

    outcome = Claim("c", "mean ≥ 0.5", "quote", divides_by_nothing).decide([])
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == "missing"
    assert outcome.reason == "the rule cannot be computed: ZeroDivisionError: division by zero"
    assert Claim("c", "mean ≥ 0.5", "quote", divides_by_nothing).decide([0.9, 0.9]).verdict == HELD


def test_a_table_cell_and_an_error_bar_give_the_standard_error_the_rules_decide_on():
    """Three seeds 0.1 apart: the cell says the mean ± s/√3 (not half the range); one seed or an exact score has
    no error bar."""
    three = score(0.5, 0.6, 0.7)
    assert math.isclose(three.error_bar, 0.1 / math.sqrt(3)) and three.error_bar != three.spread / 2
    assert score_cell(three, "{:.3f}".format) == "0.600 ± 0.058"
    assert score(0.5).error_bar == 0.0 and score_cell(score(0.5), "{:.3f}".format) == "0.500"
    exact = Score("exact", (0.5, 0.7), exact=True)
    assert exact.error_bar == 0.0 and score_cell(exact, "{:.1f}".format) == "0.6"
