"""The comparisons every claim is built from: held, did not hold, and inconclusive inside the seed spread or with
runs missing."""

from __future__ import annotations

import math

import pytest

from seqdyn.reproduce.base import Results
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
    every,
    reaches,
    within,
)


def score(*values: float, missing: tuple[str, ...] = (), label: str = "a") -> Score:
    return Score(label, values, missing)


@pytest.mark.parametrize(
    ("a", "b", "margin", "verdict"),
    [
        ((0.9, 0.92), (0.5, 0.52), 0.05, HELD),  # 0.40 above the margin, spread 0.02
        ((0.5, 0.52), (0.9, 0.92), 0.05, FAILED),  # 0.45 below
        ((0.60, 0.70), (0.52, 0.60), 0.05, INCONCLUSIVE),  # difference 0.09: 0.04 above the margin, spread 0.10
        ((0.51, 0.59), (0.55, 0.57), 0.05, INCONCLUSIVE),  # 0.06 below the margin, inside the spread 0.08
        ((0.75,), (0.65,), 0.05, HELD),  # one seed: no spread, the numbers alone decide
        ((0.7,), (0.66,), 0.05, FAILED),
    ],
)
def test_at_least(a, b, margin, verdict):
    outcome = at_least(score(*a, label="a"), score(*b, label="b"), margin)
    assert outcome.verdict == verdict, outcome
    assert outcome.numbers["difference"] == pytest.approx(sum(a) / len(a) - sum(b) / len(b))
    assert (outcome.reason != "") == (verdict == INCONCLUSIVE)


@pytest.mark.parametrize(
    ("a", "b", "verdict"),
    [
        ((0.80, 0.82), (0.78, 0.80), HELD),
        ((0.90, 0.92), (0.50, 0.52), FAILED),
        ((0.90, 0.70), (0.70, 0.72), INCONCLUSIVE),  # |0.09| > 0.05 by 0.04, inside the spread 0.20
    ],
)
def test_within(a, b, verdict):
    assert within(score(*a), score(*b, label="b"), 0.05).verdict == verdict


def test_reaches_needs_every_seed():
    assert reaches(score(0.995, 1.0), 0.99).verdict == HELD
    assert reaches(score(0.5, 0.6), 0.99).verdict == FAILED
    split = reaches(score(0.995, 0.6), 0.99)
    assert split.verdict == INCONCLUSIVE and split.reason == "1 of 2 seeds reach 0.99"
    assert split.cause == "seeds"
    assert every({"ReLU": split}).cause == "seeds"


def test_every_of_nothing_is_inconclusive():
    outcome = every({})
    assert outcome.verdict == INCONCLUSIVE and outcome.reason == "no results to decide on" and outcome.numbers == {}
    assert outcome.cause == "missing"
    held = every({"t1": Outcome(HELD, {"x": 1.0}), "t2": Outcome(HELD, {"y": 2.0})})
    assert held.verdict == HELD and held.numbers == {"t1: x": 1.0, "t2: y": 2.0}


def test_at_most_needs_every_seed_below():
    assert at_most(score(0.01, 0.2), 0.2).verdict == HELD
    assert at_most(score(0.5, 0.9), 0.2).verdict == FAILED
    outcome = at_most(score(0.1, 0.3), 0.2)
    assert outcome.verdict == INCONCLUSIVE and "1 of 2 seeds" in outcome.reason and outcome.cause == "seeds"
    assert outcome.numbers["highest seed"] == 0.3
    assert at_most(Score("x", (0.1,), ("run a (failed)",)), 0.2).verdict == INCONCLUSIVE


def test_a_missing_run_makes_a_claim_inconclusive_and_names_it():
    outcome = at_least(score(0.9, missing=("run-7 (failed: out of memory)",)), score(0.1, label="b"), 0.05)
    assert outcome.verdict == INCONCLUSIVE
    assert "run-7 (failed: out of memory)" in outcome.reason
    assert within(score(), score(0.5, label="b"), 0.1).verdict == INCONCLUSIVE  # no run at all


def test_every_fails_on_one_failure_and_is_inconclusive_on_one_open_part():
    held, failed = Outcome(HELD, {"x": 1.0}), Outcome(FAILED, {"x": 0.0})
    open_ = Outcome(INCONCLUSIVE, {"x": 0.5}, "inside the spread", cause="seeds")
    assert every({"t1": held, "t2": held}).verdict == HELD
    assert every({"t1": held, "t2": failed, "t3": open_}).verdict == FAILED
    outcome = every({"t1": held, "t2": open_})
    assert outcome.verdict == INCONCLUSIVE and "t2: inside the spread" in outcome.reason
    assert outcome.numbers == {"t1: x": 1.0, "t2: x": 0.5}


def test_an_unknown_verdict_is_refused():
    with pytest.raises(ValueError, match="verdict: expected one of held"):
        Outcome("maybe")


@pytest.mark.parametrize(
    ("verdict", "cause"), [(INCONCLUSIVE, None), (INCONCLUSIVE, "luck"), (HELD, "seeds"), (FAILED, "budget")]
)
def test_only_an_inconclusive_verdict_has_a_cause_and_it_is_one_of_the_causes(verdict, cause):
    with pytest.raises(ValueError, match="cause: an inconclusive verdict takes one of control, budget, ceiling"):
        Outcome(verdict, {}, "why", cause=cause)


def test_each_comparison_sets_the_cause_that_left_it_open_and_every_keeps_the_first_cause():
    missing = at_least(score(0.5, missing=("run-1 (failed)",)), score(0.2, label="b"), 0.1)
    spread = at_least(score(0.75, 0.25), score(0.25, label="b"), 0.25)
    ceiling = at_least(score(0.999, 1.0), score(0.995, 0.997, label="b"), 0.05, ceiling=1.0)
    assert [missing.cause, spread.cause, ceiling.cause] == ["missing", "seeds", "ceiling"]
    assert within(score(0.75, 0.25), score(0.25, label="b"), 0.125).cause == "seeds"
    assert every({"t1": missing, "t2": spread}).cause == "seeds"
    assert every({"t1": missing, "t2": spread, "t3": ceiling}).cause == "ceiling"
    assert every({"t1": missing, "t2": Outcome(HELD)}).cause == "missing"
    assert [at_least(score(0.5), score(0.25, label="b")).cause, every({"t1": Outcome(FAILED)}).cause] == [None, None]


# --- at the threshold: each comparison just above, at and just below its margin, inside and outside the spread --
@pytest.mark.parametrize(
    ("a", "b", "margin", "verdict"),
    [
        ((0.76,), (0.5,), 0.25, HELD),  # one seed: 0.26 ≥ 0.25
        ((0.75,), (0.5,), 0.25, HELD),  # a tie holds (≥; the three numbers are exact in binary)
        ((0.74,), (0.5,), 0.25, FAILED),  # 0.24 < 0.25
        ((0.5,), (0.5,), 0.0, HELD),  # equal, no margin
        ((0.49,), (0.5,), 0.0, FAILED),
        ((0.46,), (0.5,), -0.05, HELD),  # a negative margin: a ≥ b − 0.05
        ((0.44,), (0.5,), -0.05, FAILED),
        ((0.81, 0.79), (0.5, 0.5), 0.25, HELD),  # 0.30 clears 0.25 by 0.05, more than the spread 0.02
        ((0.775, 0.755), (0.5, 0.5), 0.25, INCONCLUSIVE),  # 0.265 clears it by 0.015, inside the spread
        ((0.745, 0.725), (0.5, 0.5), 0.25, INCONCLUSIVE),  # 0.235 misses it by 0.015, inside the spread
        ((0.71, 0.69), (0.5, 0.5), 0.25, FAILED),  # 0.20 misses it by 0.05, more than the spread
        ((0.8, 0.8), (0.6, 0.4), 0.25, INCONCLUSIVE),  # the spread is the larger of the two settings' (0.2)
        ((0.75, 0.5), (0.25, 0.25), 0.125, INCONCLUSIVE),  # clears the margin by exactly the spread 0.25: not more
        ((0.5, 0.25), (0.25, 0.25), 0.375, INCONCLUSIVE),  # misses it by exactly the spread 0.25: not more
    ],
)
def test_at_least_at_its_margin_and_the_seed_spread(a, b, margin, verdict):
    """``a ≥ b + margin``: held when the difference clears the margin by more than the spread (a tie holds with
    one seed), did not hold when it misses the margin by more than the spread, else inconclusive."""
    outcome = at_least(score(*a, label="a"), score(*b, label="b"), margin)
    assert outcome.verdict == verdict, outcome
    assert outcome.numbers["margin"] == margin
    assert outcome.numbers["seed spread"] == pytest.approx(max(max(a) - min(a), max(b) - min(b)))
    assert outcome.numbers["a"] == pytest.approx(sum(a) / len(a)) and outcome.numbers["b"] == pytest.approx(
        sum(b) / len(b)
    )


@pytest.mark.parametrize(
    ("a", "b", "verdict"),
    [
        ((0.5,), (0.5,), HELD),
        ((0.54,), (0.5,), HELD),  # |0.04| ≤ 0.05
        ((0.46,), (0.5,), HELD),
        ((0.75,), (0.5,), FAILED),
        ((0.56,), (0.5,), FAILED),  # 0.06 > 0.05, no spread
        ((0.44,), (0.5,), FAILED),  # either sign
        ((0.57, 0.55), (0.5, 0.5), INCONCLUSIVE),  # 0.06 exceeds 0.05 by 0.01, inside the spread 0.02
        ((0.59, 0.57), (0.5, 0.5), FAILED),  # 0.08 exceeds it by 0.03, more than the spread
    ],
)
def test_within_at_its_tolerance_and_the_seed_spread(a, b, verdict):
    """``|a − b| ≤ tolerance`` (0.05) holds; a larger difference fails only beyond the spread."""
    outcome = within(score(*a), score(*b, label="b"), 0.05)
    assert outcome.verdict == verdict, outcome
    assert outcome.numbers["tolerance"] == 0.05


def test_within_ties_and_missing_runs():
    """Exact binary numbers: a difference equal to the tolerance holds; one exceeding it by exactly the spread stays
    open; a missing run leaves it open even where the numbers agree."""
    assert within(score(0.75), score(0.5, label="b"), 0.25).verdict == HELD
    assert within(score(0.75, 0.5), score(0.25, 0.25, label="b"), 0.125).verdict == INCONCLUSIVE
    outcome = within(score(0.5, missing=("run-3 (failed)",)), score(0.5, label="b"), 0.125)
    assert outcome.verdict == INCONCLUSIVE and "run-3 (failed)" in outcome.reason
    assert at_least(score(0.5), score(0.5, label="b")).verdict == HELD  # the default margin is 0


@pytest.mark.parametrize(
    ("values", "reached", "stayed"),
    [
        ((0.75,), HELD, HELD),  # a tie reaches 0.75 and stays at it (exact in binary)
        ((0.76, 0.8), HELD, FAILED),
        ((0.74, 0.7), FAILED, HELD),
        ((0.74, 0.76), INCONCLUSIVE, INCONCLUSIVE),
        ((0.7, 0.75), INCONCLUSIVE, HELD),  # one seed reaches only by the tie
    ],
)
def test_reaches_and_at_most_at_the_threshold(values, reached, stayed):
    """``reaches``: every seed ≥ 0.75; ``at_most``: every seed ≤ 0.75 (a tie is on both sides); the numbers name
    the lowest and highest seed and the threshold."""
    reach, stay = reaches(score(*values), 0.75), at_most(score(*values), 0.75)
    assert (reach.verdict, stay.verdict) == (reached, stayed)
    for outcome in (reach, stay):
        assert outcome.numbers == {
            "a": pytest.approx(sum(values) / len(values)),
            "lowest seed": min(values),
            "highest seed": max(values),
            "threshold": 0.75,
        }


def test_a_score_of_no_seed_has_no_mean_and_no_spread():
    empty = score()
    assert math.isnan(empty.mean) and math.isnan(empty.spread) and not empty.complete
    assert score(0.25, 0.75).mean == 0.5 and score(0.25, 0.75).spread == 0.5 and score(0.25, 0.75).complete
    assert not score(0.5, missing=("run x",)).complete


def test_each_reason_names_the_numbers_that_left_a_claim_open():
    """The reasons ``verdict.json`` prints, word for word: the runs missing per setting, the difference against the
    margin or tolerance and the spread, the seeds on the right side, the parts that did not hold or stayed open."""
    outcome = at_least(score(0.5, missing=("run-1 (failed)", "run-2 (killed)")), score(label="b"), 0.1)
    assert outcome.reason == "runs missing or failed (a: run-1 (failed), run-2 (killed); b: no finished run)"
    assert outcome.numbers == {"a": 0.5}
    outcome = at_least(score(0.75, 0.25), score(0.25, label="b"), 0.25)
    assert outcome.reason == "the difference +0.250 is within the seed spread 0.500 of the margin +0.250"
    assert outcome.numbers == {"a": 0.5, "b": 0.25, "difference": 0.25, "seed spread": 0.5, "margin": 0.25}
    outcome = within(score(0.75, 0.25), score(0.25, label="b"), 0.125)
    assert outcome.reason == "|difference| 0.250 exceeds the tolerance 0.125 by less than the seed spread 0.500"
    assert outcome.numbers == {"a": 0.5, "b": 0.25, "difference": 0.25, "seed spread": 0.5, "tolerance": 0.125}
    assert reaches(score(0.25, 0.75, 1.0), 0.5).reason == "2 of 3 seeds reach 0.5"
    assert at_most(score(0.25, 0.75, 1.0), 0.5).reason == "1 of 3 seeds stay at or below 0.5"
    held, failed = Outcome(HELD, {"x": 1.0}), Outcome(FAILED, {"x": 0.0, "y": 2.0})
    opened = Outcome(INCONCLUSIVE, {}, "inside the spread", cause="seeds")
    outcome = every({"t1": failed, "t2": held, "t3": failed})
    assert outcome.reason == "did not hold on t1, t3"
    assert outcome.numbers == {"t1: x": 0.0, "t1: y": 2.0, "t2: x": 1.0, "t3: x": 0.0, "t3: y": 2.0}
    assert every({"t1": opened, "t2": opened}).reason == "t1: inside the spread; t2: inside the spread"
    assert every({"t1": held}).reason == "" and at_least(score(0.5), score(0.25, label="b")).reason == ""
    with pytest.raises(ValueError, match=r"^verdict: expected one of held, did not hold, inconclusive, got 'maybe'$"):
        Outcome("maybe")


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


def test_a_control_failed_by_one_seed_names_that_seed_not_only_the_mean():
    """Mean 0.92 ≥ 0.9 but a seed at 0.89: the reason and the record say which seed fell short (a reason reading
    "0.92 < 0.9" would contradict itself)."""
    outcome = _claim_with_control((0.95, 0.89, 0.92), HELD).decide(None)
    assert outcome.verdict == INCONCLUSIVE
    assert outcome.reason == "control softmax + PE 0.92, weakest seed 0.89 < 0.9 (the control learns the task)"
    assert outcome.control["weakest_seed"] == 0.89 and outcome.control["value"] == pytest.approx(0.92)
    assert "weakest_seed" not in _claim_with_control((0.49, 0.51), HELD).decide(None).control  # the mean fails
    perplexity = Control(
        "below the unigram model", lambda results: results, 1.0, level=lambda results: 28.0, higher_is_better=False
    )
    checked = perplexity.check(score(20.0, 29.0, label="softmax"))  # mean 24.5 ≤ 27, one seed 29 above it
    assert checked["passed"] is False and checked["weakest_seed"] == 29.0
    assert control_value(checked) == "24.5, weakest seed 29"


@pytest.mark.parametrize("test_verdict", [HELD, FAILED])
def test_a_claim_whose_control_passes_keeps_its_verdict_and_records_the_control(test_verdict):
    outcome = _claim_with_control((0.95, 0.97), test_verdict).decide(None)
    assert outcome.verdict == test_verdict and outcome.control["passed"] and outcome.control["value"] == 0.96


def test_a_control_without_runs_makes_the_claim_inconclusive():
    outcome = _claim_with_control((), HELD).decide(None)
    assert outcome.verdict == INCONCLUSIVE and "control softmax + PE no result < 0.9" in outcome.reason


def test_a_comparison_at_the_ceiling_that_did_not_hold_is_inconclusive():
    """Both within 0.05 of the best score 1: the task does not separate them; below that band it decides."""
    top = at_least(score(0.999, 1.0), score(0.995, 0.997, label="b"), 0.05, ceiling=1.0)
    assert top.verdict == INCONCLUSIVE
    assert top.reason == "at the ceiling: a 1 and b 0.996 both within 0.05 of the best score 1"
    assert at_least(score(0.999, 1.0), score(0.995, 0.997, label="b"), 0.05).verdict == FAILED  # no ceiling given
    assert at_least(score(0.94, 0.94), score(0.99, 0.99, label="b"), 0.0, ceiling=1.0).verdict == FAILED
    assert at_least(score(0.999, 1.0), score(0.96, 0.96, label="b"), 0.0, ceiling=1.0).verdict == HELD
    assert top.cause == "ceiling" and every({"selective_copying": top}).cause == "ceiling"


def test_a_control_counted_from_a_measured_level_beats_it_by_its_margin():
    """``level``: the threshold is the measured level (a constant answer's 0.12) plus the control's margin."""
    control = Control("beats the constant answer", lambda results: results, 0.05, level=lambda results: 0.12)
    assert control.check(score(0.18, 0.2, label="x")) == {
        "description": "beats the constant answer",
        "setting": "x",
        "value": pytest.approx(0.19),
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
    outcome = claim.decide({"ctl": score(29.0, 30.0, label="softmax")})
    assert outcome.verdict == INCONCLUSIVE and outcome.reason == "control softmax 29.5 > 27 (below the unigram model)"


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
    # a claim that held stands whatever the plateau (the control guards against empty successes)
    held = {"a": score(0.9, 0.95, label="a"), "b": score(0.25, 0.26, label="b")}
    assert claim.decide(held).verdict == HELD


def test_a_claim_the_seeds_left_undecided_also_names_a_model_on_the_plateau():
    claim = _claim_with_plateau(lambda results: at_least(results["a"], results["b"]))
    outcome = claim.decide({"a": score(0.25, 0.27, label="a"), "b": score(0.24, 0.30, label="b")})
    assert outcome.verdict == INCONCLUSIVE
    assert outcome.reason.startswith("the difference -0.010 is within the seed spread") and outcome.cause == "seeds"
    assert "; and budget: a best seed 0.27 within 0.05 of the plateau 0.25" in outcome.reason
    assert "b best seed 0.3 within 0.05" in outcome.reason


def test_a_failed_control_outranks_the_plateau_rule():
    control = Control("softmax with positions", lambda results: results["control"], 0.9)
    claim = _claim_with_plateau(lambda results: at_least(results["a"], results["b"], 0.05), control=control)
    outcome = claim.decide(
        {"a": score(0.25, label="a"), "b": score(0.9, label="b"), "control": score(0.5, label="ctl")}
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
