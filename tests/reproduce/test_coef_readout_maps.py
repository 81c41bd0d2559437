"""seed 001 Figs. 1 / 6 (``seqdyn.reproduce.coef_readout_maps``): the split of the readouts by their near-zero set,
and each claim on hand-made results where it must hold, must fail and must be inconclusive."""

from __future__ import annotations

import math

import pytest

from seqdyn.reproduce import coef_readout_maps as fig
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE, SEEDS
from seqdyn.reproduce.protocols.mad import NEAR_ZERO
from tests.reproduce.helpers import entry_keys, results, row

TASKS = ("fuzzy_in_context_recall", "selective_copying")


def test_the_identity_and_the_square_have_the_thin_near_zero_sets():
    assert [r for r in fig.ORDER if fig.is_thin(r)] == ["identity", "square"]
    assert fig.near_zero_share("relu") == pytest.approx(0.5, abs=1e-3)  # x < 1e-3 on [-10, 10]


@pytest.mark.parametrize(("share", "thin"), [(0.0099, True), (0.0101, False)])
def test_coef_readout_maps_a_near_zero_set_is_thin_below_one_percent_of_the_window(monkeypatch, share, thin):
    """The thin/large split at its threshold (1 % of the score window [−10, 10]); and the shares themselves by hand:
    |x| < 10⁻³ for the identity, |x| < √10⁻³ for the square, x < ln 10⁻³ for exp."""
    assert fig.near_zero_share("identity") == pytest.approx(2e-3 / 20, rel=0.05)
    assert fig.near_zero_share("square") == pytest.approx(2 * 1e-3**0.5 / 20, rel=0.05)
    assert fig.near_zero_share("exp") == pytest.approx((10 + math.log(1e-3)) / 20, rel=0.05)
    monkeypatch.setattr(fig, "readout_near_zero_set", lambda readout: share * 20)
    assert fig.is_thin("any") is thin


def table(
    thin: list[float],
    large: list[float],
    thin_zeros: list[float],
    large_zeros: list[float],
    control: list[float] | None = None,
):
    """Per task, readout and seed two runs over the weight-decay grid: the better one (wd 0.1) carries the given
    accuracy and near-zero fraction, the other (wd 0) half the accuracy and no measurement.  The exp readout, a
    large set and the control, scores ``control`` where given."""
    rows = []
    for task in TASKS:
        for readout in fig.ORDER:
            values, zeros = (thin, thin_zeros) if fig.is_thin(readout) else (large, large_zeros)
            if readout == "exp" and control is not None:
                values = control
            for seed, (value, zero) in enumerate(zip(values, zeros)):
                keys = dict(
                    task__name=task, **entry_keys(fig.model_entry(readout)), optimizer__lr=1e-3, train__seed=seed
                )
                rows.append(row(value, optimizer__weight_decay=0.1, **keys) | {NEAR_ZERO: zero})
                rows.append(row(value / 2, optimizer__weight_decay=0.0, **keys))
    return results(rows)


def verdicts(data) -> list[str]:
    return [claim.decide(data).verdict for claim in fig.CLAIMS]


#: the paper's picture (thin accuracies, large ones, thin near-zero fractions, large ones); the large sets' two seeds
#: (0.97, 0.98), the control's among them, reach 0.9 on their 95 % interval (0.975 ± 0.064)
PAPERLIKE = ([0.4, 0.42], [0.97, 0.98], [0.05, 0.06], [0.7, 0.72])


def test_the_papers_picture_holds():
    assert verdicts(table(*PAPERLIKE)) == [HELD, HELD]


def test_the_opposite_fails():
    assert verdicts(table([0.9, 0.92], [0.4, 0.41], [0.7, 0.72], [0.05, 0.06], control=[0.97, 0.98])) == [
        FAILED,
        FAILED,
    ]


def test_a_control_below_its_threshold_leaves_both_claims_inconclusive():
    """The picture of the paper, but softmax (the exp readout) reaches 0.9 on one seed only: nothing is decided."""
    data = table(*PAPERLIKE, control=[0.95, 0.85])
    for claim in fig.CLAIMS:
        outcome = claim.decide(data)
        assert outcome.verdict == INCONCLUSIVE and outcome.reason.startswith("control softmax on ")
        assert outcome.control["passed"] is False and outcome.control["threshold"] == 0.9


def test_overlapping_seeds_are_inconclusive():
    data = table([0.5, 0.9], [0.6, 0.9], [0.1, 0.6], [0.3, 0.5], control=[0.97, 0.98])
    outcomes = [claim.decide(data) for claim in fig.CLAIMS]
    assert [outcome.verdict for outcome in outcomes] == [INCONCLUSIVE, INCONCLUSIVE]
    # the compared seeds leave the comparisons open, not the control (which passes)
    assert all(outcome.cause == SEEDS and not outcome.reason.startswith("control") for outcome in outcomes)


def test_a_best_run_without_its_measurement_leaves_the_first_claim_open():
    data = table(*PAPERLIKE)
    data = results(
        [
            {k: v for k, v in r.items() if k != NEAR_ZERO} if r.get("model.mixer_options.readout") == "exp" else r
            for r in data.rows
        ]
    )
    outcome = fig.CLAIMS[0].decide(data)
    assert outcome.verdict == INCONCLUSIVE and "not measured" in outcome.reason


@pytest.mark.parametrize(
    ("claim", "thin", "large", "thin_zeros", "large_zeros", "verdict"),
    [
        # "more coefficients are set close to zero": the large sets' near-zero fraction ≥ the thin ones', no margin
        ("near-zero set → near-zero coefficients", [0.4, 0.4], [0.9, 0.9], [0.5, 0.5], [0.51, 0.51], HELD),
        ("near-zero set → near-zero coefficients", [0.4, 0.4], [0.9, 0.9], [0.5, 0.5], [0.5, 0.5], HELD),  # a tie
        ("near-zero set → near-zero coefficients", [0.4, 0.4], [0.9, 0.9], [0.5, 0.5], [0.49, 0.49], FAILED),
        # "this increases performance": the large sets ≥ the thin ones + 0.05
        # (the exp readout, a large set, is also the control: it must reach 0.9)
        ("near-zero set → accuracy", [0.9, 0.9], [0.96, 0.96], [0.05, 0.05], [0.7, 0.7], HELD),
        ("near-zero set → accuracy", [0.9, 0.9], [0.94, 0.94], [0.05, 0.05], [0.7, 0.7], FAILED),
        # 0.07 ± 0.064 includes the margin, while the large sets' seeds (the control's) reach 0.9 (0.97 ± 0.064)
        ("near-zero set → accuracy", [0.9, 0.9], [0.975, 0.965], [0.05, 0.05], [0.7, 0.7], INCONCLUSIVE),
    ],
)
def test_coef_readout_maps_claims_just_above_and_below_their_thresholds(
    claim, thin, large, thin_zeros, large_zeros, verdict
):
    """Figs. 1 / 6's claims one group past the order of the near-zero fractions or the accuracy margin 0.05."""
    outcome = next(c for c in fig.CLAIMS if c.name == claim).decide(table(thin, large, thin_zeros, large_zeros))
    assert outcome.verdict == verdict, outcome
    assert not outcome.reason.startswith("control"), outcome  # the comparison decides, not the control


def test_readouts_on_the_plateau_with_the_control_there_too_are_inconclusive_for_the_control():
    """Fuzzy recall's plateau (a constant answer or a value copied from the context) is about 0.15: with every
    readout there, the exp one (the control) too, the control's failure is the reason given, before the plateau's."""
    outcome = fig.CLAIMS[1].decide(table([0.16, 0.16], [0.14, 0.15], [0.1, 0.1], [0.3, 0.3]))
    assert outcome.verdict == INCONCLUSIVE and outcome.reason.startswith("control softmax on ")


def test_memorization_does_not_decide_the_near_zero_claim():
    """Fig. 1's sentence is about its two tasks: memorization (Fig. 6) suppressing nothing with the large sets, or
    everything with the thin ones, leaves the verdict of fuzzy recall and selective copying as it is."""
    data = table(*PAPERLIKE)

    def memorization(thin_zeros: float, large_zeros: float) -> list[dict]:
        copied = [r | {"task.name": "memorization", "run_id": "m" + r["run_id"]} for r in data.rows]
        return [
            r | {NEAR_ZERO: thin_zeros if fig.is_thin(r["model.mixer_options.readout"]) else large_zeros}
            if NEAR_ZERO in r
            else r
            for r in copied
        ]

    for thin_zeros, large_zeros in ((0.0, 0.0), (0.9, 0.0)):
        outcome = fig.CLAIMS[0].decide(results([*data.rows, *memorization(thin_zeros, large_zeros)]))
        assert outcome.verdict == HELD and not any(key.startswith("memorization") for key in outcome.numbers)
    outcome = fig.CLAIMS[0].decide(results(memorization(0.0, 0.9)))
    assert outcome.verdict == INCONCLUSIVE and outcome.numbers == {}
