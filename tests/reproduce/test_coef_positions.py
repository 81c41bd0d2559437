"""seed 001 Fig. 2 (``seqdyn.reproduce.coef_positions``): each claim on hand-made results where it must hold, must
fail and must be inconclusive."""

from __future__ import annotations

from seqdyn.reproduce import coef_positions as fig
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE
from tests.reproduce.helpers import results, row


def table(accuracy: dict[str, list[float]]):
    """Every readout with the given accuracy per setting and seed, at weight decay 0.1 (and 0.3 less at 0)."""
    rows = []
    for readout in fig.READOUTS:
        for label, positions, decay in fig.SETTINGS:
            for seed, value in enumerate(accuracy[label]):
                for wd, lower in ((0.1, 0.0), (0.0, 0.3)):
                    rows.append(row(value - lower, model__mixer_options__readout=readout,
                                    model__mixer_options__decay=decay, model__positions=positions,
                                    task__name=fig.TASK, optimizer__weight_decay=wd, train__seed=seed))
    return results(rows)


def verdicts(data) -> list[str]:
    return [claim.decide(data).verdict for claim in fig.CLAIMS]


def test_the_papers_picture_holds():
    data = table({"PE, Λ = I": [0.99, 1.0], "no PE, Λ = λI": [0.97, 0.98], "no PE, Λ = I": [0.3, 0.35]})
    assert verdicts(data) == [HELD, HELD, HELD]


def test_the_opposite_fails():
    data = table({"PE, Λ = I": [0.5, 0.6], "no PE, Λ = λI": [0.3, 0.31], "no PE, Λ = I": [0.95, 0.96]})
    assert verdicts(data) == [FAILED, FAILED, FAILED]


def test_seeds_on_both_sides_are_inconclusive():
    data = table({"PE, Λ = I": [0.95, 0.5], "no PE, Λ = λI": [0.95, 0.5], "no PE, Λ = I": [0.95, 0.4]})
    assert verdicts(data) == [INCONCLUSIVE, INCONCLUSIVE, INCONCLUSIVE]
