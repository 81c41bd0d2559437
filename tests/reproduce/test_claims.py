"""The comparisons every claim is built from: held, did not hold, and inconclusive inside the seed spread or with
runs missing."""

from __future__ import annotations

import pytest

from seqdyn.reproduce.claims import (FAILED, HELD, INCONCLUSIVE, Outcome, Score, at_least, at_most, every, reaches,
                                     within)


def score(*values: float, missing: tuple[str, ...] = (), label: str = "a") -> Score:
    return Score(label, values, missing)


@pytest.mark.parametrize(("a", "b", "margin", "verdict"), [
    ((0.9, 0.92), (0.5, 0.52), 0.05, HELD),           # 0.40 above the margin, spread 0.02
    ((0.5, 0.52), (0.9, 0.92), 0.05, FAILED),          # 0.45 below
    ((0.60, 0.70), (0.52, 0.60), 0.05, INCONCLUSIVE),  # difference 0.09: 0.04 above the margin, spread 0.10
    ((0.51, 0.59), (0.55, 0.57), 0.05, INCONCLUSIVE),  # 0.06 below the margin, inside the spread 0.08
    ((0.75,), (0.65,), 0.05, HELD),                    # one seed: no spread, the numbers alone decide
    ((0.7,), (0.66,), 0.05, FAILED),
])
def test_at_least(a, b, margin, verdict):
    outcome = at_least(score(*a, label="a"), score(*b, label="b"), margin)
    assert outcome.verdict == verdict, outcome
    assert outcome.numbers["difference"] == pytest.approx(sum(a) / len(a) - sum(b) / len(b))
    assert (outcome.reason != "") == (verdict == INCONCLUSIVE)


@pytest.mark.parametrize(("a", "b", "verdict"), [
    ((0.80, 0.82), (0.78, 0.80), HELD),
    ((0.90, 0.92), (0.50, 0.52), FAILED),
    ((0.90, 0.70), (0.70, 0.72), INCONCLUSIVE),  # |0.09| > 0.05 by 0.04, inside the spread 0.20
])
def test_within(a, b, verdict):
    assert within(score(*a), score(*b, label="b"), 0.05).verdict == verdict


def test_reaches_needs_every_seed():
    assert reaches(score(0.995, 1.0), 0.99).verdict == HELD
    assert reaches(score(0.5, 0.6), 0.99).verdict == FAILED
    assert reaches(score(0.995, 0.6), 0.99).verdict == INCONCLUSIVE


def test_every_of_nothing_is_inconclusive():
    outcome = every({})
    assert outcome.verdict == INCONCLUSIVE and "no results" in outcome.reason


def test_at_most_needs_every_seed_below():
    assert at_most(score(0.01, 0.2), 0.2).verdict == HELD
    assert at_most(score(0.5, 0.9), 0.2).verdict == FAILED
    outcome = at_most(score(0.1, 0.3), 0.2)
    assert outcome.verdict == INCONCLUSIVE and "1 of 2 seeds" in outcome.reason
    assert outcome.numbers["highest seed"] == 0.3
    assert at_most(Score("x", (0.1,), ("run a (failed)",)), 0.2).verdict == INCONCLUSIVE


def test_a_missing_run_makes_a_claim_inconclusive_and_names_it():
    outcome = at_least(score(0.9, missing=("run-7 (failed: out of memory)",)), score(0.1, label="b"), 0.05)
    assert outcome.verdict == INCONCLUSIVE
    assert "run-7 (failed: out of memory)" in outcome.reason
    assert within(score(), score(0.5, label="b"), 0.1).verdict == INCONCLUSIVE  # no run at all


def test_every_fails_on_one_failure_and_is_inconclusive_on_one_open_part():
    held, failed = Outcome(HELD, {"x": 1.0}), Outcome(FAILED, {"x": 0.0})
    open_ = Outcome(INCONCLUSIVE, {"x": 0.5}, "inside the spread")
    assert every({"t1": held, "t2": held}).verdict == HELD
    assert every({"t1": held, "t2": failed, "t3": open_}).verdict == FAILED
    outcome = every({"t1": held, "t2": open_})
    assert outcome.verdict == INCONCLUSIVE and "t2: inside the spread" in outcome.reason
    assert outcome.numbers == {"t1: x": 1.0, "t2: x": 0.5}


def test_an_unknown_verdict_is_refused():
    with pytest.raises(ValueError, match="verdict: expected one of held"):
        Outcome("maybe")
