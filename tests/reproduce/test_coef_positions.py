"""seed 001 Fig. 2 (``seqdyn.reproduce.coef_positions``): each claim on hand-made results where it must hold, must
fail and must be inconclusive."""

from __future__ import annotations

import pytest

from seqdyn.reproduce import coef_positions as fig
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE, SEEDS
from tests.reproduce.helpers import assert_verdict, results, row


def table(accuracy: dict[str, list[float]], params: dict | None = None):
    """Every readout with the given accuracy per setting and seed, at weight decay 0.1 (and 0.3 less at 0); the
    rows carry the task parameters ``params`` where given."""
    keys = {f"task__params__{key}": value for key, value in (params or {}).items()}
    rows = []
    for readout in fig.READOUTS:
        for label, positions, decay in fig.SETTINGS:
            for seed, value in enumerate(accuracy[label]):
                for wd, lower in ((0.1, 0.0), (0.0, 0.3)):
                    rows.append(
                        row(
                            value - lower,
                            model__mixer_options__readout=readout,
                            model__mixer_options__decay=decay,
                            model__positions=positions,
                            task__name=fig.TASK,
                            optimizer__weight_decay=wd,
                            train__seed=seed,
                            **keys,
                        )
                    )
    return results(rows)


def verdicts(data) -> list[str]:
    return [claim.decide(data).verdict for claim in fig.CLAIMS]


def test_the_papers_picture_holds():
    data = table({"PE, Λ = I": [0.99, 1.0], "no PE, Λ = λI": [0.97, 0.98], "no PE, Λ = I": [0.3, 0.35]})
    assert verdicts(data) == [HELD, HELD, HELD]


def test_the_opposite_fails():
    # Λ = I without positions above 0.9 on its interval (0.975 ± 0.064)
    data = table({"PE, Λ = I": [0.99, 1.0], "no PE, Λ = λI": [0.3, 0.31], "no PE, Λ = I": [0.97, 0.98]})
    assert verdicts(data) == [FAILED, FAILED, FAILED]


def test_a_control_that_never_learned_decides_nothing():
    """The published cpu run: softmax with positions at 0.49 — every claim inconclusive, naming the control."""
    data = table({"PE, Λ = I": [0.48, 0.5], "no PE, Λ = λI": [0.3, 0.31], "no PE, Λ = I": [0.95, 0.96]})
    outcomes = [claim.decide(data) for claim in fig.CLAIMS]
    assert [outcome.verdict for outcome in outcomes] == [INCONCLUSIVE] * 3
    assert all(outcome.reason.startswith("control exp (softmax), PE, Λ = I 0.49 < 0.9") for outcome in outcomes)


def test_seeds_on_both_sides_are_inconclusive():
    data = table({"PE, Λ = I": [0.99, 1.0], "no PE, Λ = λI": [0.95, 0.5], "no PE, Λ = I": [0.95, 0.4]})
    outcomes = [claim.decide(data) for claim in fig.CLAIMS]
    assert [outcome.verdict for outcome in outcomes] == [INCONCLUSIVE, INCONCLUSIVE, INCONCLUSIVE]
    # the compared seeds leave the claims open, not the control (softmax with positions, which passes)
    assert all(outcome.cause == SEEDS and not outcome.reason.startswith("control") for outcome in outcomes)


PAPERLIKE = {"PE, Λ = I": [0.99, 1.0], "no PE, Λ = λI": [0.97, 0.98], "no PE, Λ = I": [0.3, 0.35]}


@pytest.mark.parametrize(
    ("claim", "changed", "verdict"),
    [
        # "solved": every seed ≥ 0.9
        ("PE and λI both solve", {"no PE, Λ = λI": [0.91, 0.91]}, HELD),
        ("PE and λI both solve", {"PE, Λ = I": [0.9, 0.9]}, HELD),
        ("PE and λI both solve", {"no PE, Λ = λI": [0.89, 0.89]}, FAILED),
        ("PE and λI both solve", {"PE, Λ = I": [0.89, 0.91]}, INCONCLUSIVE),  # softmax's: the control undecided
        ("PE and λI both solve", {"no PE, Λ = λI": [0.89, 0.91]}, INCONCLUSIVE),  # the claim's own interval
        # "replaces": Λ = λI ≥ Λ = I + 0.05 without positions
        ("λI replaces PE", {"no PE, Λ = λI": [0.96, 0.96], "no PE, Λ = I": [0.9, 0.9]}, HELD),
        ("λI replaces PE", {"no PE, Λ = λI": [0.96, 0.96], "no PE, Λ = I": [0.92, 0.92]}, FAILED),
        ("λI replaces PE", {"no PE, Λ = λI": [0.97, 0.95], "no PE, Λ = I": [0.91, 0.91]}, INCONCLUSIVE),
        # "does not perform perfectly": Λ = I without positions stays ≤ 0.9
        ("no positions, Λ = I fails", {"no PE, Λ = I": [0.89, 0.89]}, HELD),
        ("no positions, Λ = I fails", {"no PE, Λ = I": [0.91, 0.91]}, FAILED),
    ],
)
def test_coef_positions_claims_just_above_and_below_their_thresholds(claim, changed, verdict):
    """Fig. 2's claims one setting past the threshold 0.9 or the margin 0.05 (the paper's picture elsewhere)."""
    assert_verdict(fig.CLAIMS, claim, table({**PAPERLIKE, **changed}), verdict)


def test_lambda_follows_the_length_so_the_oldest_token_keeps_its_weight():
    """λ^(L−1) is 0.99^127 ≈ 0.28 at every scale's length (0.99 at MAD's L = 128)."""
    for scale in ("smoke", "cpu", "paper"):
        runs = [run for sweep in fig.REPRODUCTION.sweeps(scale) for run in sweep.expand()]
        decays = {
            (run.task.params["seq_len"], run.model.mixer_options["constant_decay"])
            for run in runs
            if run.model.mixer_options["decay"] == "constant"
        }
        assert len(decays) == 1
        ((length, decay),) = decays
        assert decay ** (length - 1) == pytest.approx(0.99**127)
    assert fig.decay_for(128) == pytest.approx(0.99)


def test_a_readout_that_stayed_on_the_plateau_leaves_the_claims_inconclusive_for_the_budget():
    """The cpu run's ReLU with Λ = λI sat at 0.578 on both seeds, the noisy-recall setting's plateau (a constant or
    a copied context value: 0.53) + 0.05: its not reaching 0.9 says nothing about Λ = λI."""
    from seqdyn.reproduce.protocols import mad

    params = fig.SCALES["cpu"]["tasks"][fig.TASK]
    level = mad.plateau_level(fig.TASK, **params) + mad.PLATEAU_MARGIN
    stuck = table({"PE, Λ = I": [0.99, 1.0], "no PE, Λ = λI": [level - 0.01] * 2, "no PE, Λ = I": [0.7, 0.72]}, params)
    outcome = fig.CLAIMS[0].decide(stuck)
    assert outcome.verdict == INCONCLUSIVE and outcome.reason.startswith("budget: ") and "plateau" in outcome.reason
    above = table({"PE, Λ = I": [0.99, 1.0], "no PE, Λ = λI": [level + 0.05] * 2, "no PE, Λ = I": [0.7, 0.72]}, params)
    assert fig.CLAIMS[0].decide(above).verdict == FAILED  # above the plateau and below 0.9: a real failure
