"""seed 001 Figs. 8 / 9 (``seqdyn.reproduce.coef_kernel_maps``): each claim on hand-made results where it must hold,
must fail and must be inconclusive."""

from __future__ import annotations

import pytest

from seqdyn.reproduce import coef_kernel_maps as fig
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE
from seqdyn.reproduce.protocols.mad import MAX_ZEROS, NEAR_ZERO, ZERO_BOUND
from tests.reproduce.helpers import assert_verdict, entry_keys, results, row


def table(
    values: dict[str, tuple[list[float], list[float]]], zeros: list[float], kernel_zeros: list[float] | None = None
):
    """Per task, model and seed one run: ``values[group] = (accuracies, near-zero fractions)`` by seed for the
    groups softmax, linear and kernels; the identity-readout models count ``zeros[seed]`` mean zeros against the
    bound 15 (the kernel approximations ``kernel_zeros[seed]``, else the same).  A second run per cell (weight
    decay 0) is worse and unmeasured."""
    rows = []
    for task in fig.TASKS:
        for label, readout, feature in fig.MODELS:
            group = label if label in ("softmax", "linear") else "kernels"
            accuracies, fractions = values[group]
            for seed, (accuracy, fraction) in enumerate(zip(accuracies, fractions)):
                keys = dict(task__name=task, **entry_keys(fig.model_entry(readout, feature)), train__seed=seed)
                measured = {NEAR_ZERO: fraction}
                if readout == "identity":
                    counted = zeros if feature is None or kernel_zeros is None else kernel_zeros
                    measured |= {MAX_ZEROS: counted[seed], ZERO_BOUND: 15}
                rows.append(row(accuracy, optimizer__weight_decay=0.1, **keys) | measured)
                rows.append(row(accuracy / 2, optimizer__weight_decay=0.0, **keys))
    return results(rows)


def verdicts(data) -> list[str]:
    return [claim.decide(data).verdict for claim in fig.CLAIMS]


def test_the_papers_picture_holds():
    data = table(
        {
            "softmax": ([0.9, 0.92], [0.8, 0.82]),
            "linear": ([0.3, 0.31], [0.05, 0.06]),
            "kernels": ([0.5, 0.52], [0.3, 0.32]),
        },
        zeros=[3.0, 2.5],
    )
    assert verdicts(data) == [HELD, HELD, HELD, HELD]


def test_the_opposite_fails():
    data = table(
        {
            "softmax": ([0.9, 0.91], [0.1, 0.11]),
            "linear": ([0.3, 0.31], [0.6, 0.61]),
            "kernels": ([0.95, 0.96], [0.3, 0.32]),
        },
        zeros=[20.0, 17.5],
    )
    assert verdicts(data) == [FAILED, FAILED, FAILED, FAILED]


def test_seeds_on_both_sides_are_inconclusive():
    data = table(
        {
            "softmax": ([0.95, 0.91], [0.8, 0.2]),
            "linear": ([0.3, 0.31], [0.05, 0.4]),
            "kernels": ([0.93, 0.6], [0.3, 0.3]),
        },
        zeros=[3.0, 17.0],
    )
    assert verdicts(data) == [INCONCLUSIVE] * 4


PAPERLIKE = {
    "softmax": ([0.9, 0.92], [0.8, 0.82]),
    "linear": ([0.3, 0.31], [0.05, 0.06]),
    "kernels": ([0.5, 0.52], [0.3, 0.32]),
}


@pytest.mark.parametrize(
    ("claim", "changed", "zeros", "verdict"),
    [
        # "deteriorating performance": softmax ≥ the kernels + 0.05
        (
            "kernels < softmax",
            {"softmax": ([0.95, 0.95], [0.8, 0.8]), "kernels": ([0.89, 0.89], [0.3, 0.3])},
            2.0,
            HELD,
        ),
        (
            "kernels < softmax",
            {"softmax": ([0.95, 0.95], [0.8, 0.8]), "kernels": ([0.91, 0.91], [0.3, 0.3])},
            2.0,
            FAILED,
        ),
        # "a smaller fraction of coefficients in the near-zero set" than softmax, no margin
        (
            "kernels suppress less than softmax",
            {"softmax": ([0.9, 0.9], [0.5, 0.5]), "kernels": ([0.5, 0.5], [0.49, 0.49])},
            2.0,
            HELD,
        ),
        (
            "kernels suppress less than softmax",
            {"softmax": ([0.9, 0.9], [0.5, 0.5]), "kernels": ([0.5, 0.5], [0.51, 0.51])},
            2.0,
            FAILED,
        ),
        # "more efficient at setting coefficients close to zero than the identity", no margin
        (
            "kernels suppress more than identity",
            {"linear": ([0.3, 0.3], [0.3, 0.3]), "kernels": ([0.5, 0.5], [0.31, 0.31])},
            2.0,
            HELD,
        ),
        (
            "kernels suppress more than identity",
            {"linear": ([0.3, 0.3], [0.3, 0.3]), "kernels": ([0.5, 0.5], [0.29, 0.29])},
            2.0,
            FAILED,
        ),
        # Corollary 2.2: Fig. 9's count ≤ K − 1 = 15 (a tie holds)
        ("zeros per row ≤ K − 1", {}, 15.0, HELD),
        ("zeros per row ≤ K − 1", {}, 15.25, FAILED),
    ],
)
def test_coef_kernel_maps_claims_just_above_and_below_their_thresholds(claim, changed, zeros, verdict):
    """Figs. 8 / 9's claims one group past the accuracy margin 0.05, the order of the near-zero fractions or the
    bound K − 1."""
    assert_verdict(fig.CLAIMS, claim, table({**PAPERLIKE, **changed}, [zeros, zeros]), verdict)


def test_vanishing_features_do_not_count_against_corollary_2_2():
    """ReLU(k) = 0 zeroes a coefficient whatever the query: the bound K − 1 is held against linear attention only."""
    data = table(PAPERLIKE, zeros=[3.0, 2.5], kernel_zeros=[40.0, 47.0])
    assert_verdict(fig.CLAIMS, "zeros per row ≤ K − 1", data, HELD)
    assert_verdict(
        fig.CLAIMS, "zeros per row ≤ K − 1", table(PAPERLIKE, zeros=[16.0, 16.5], kernel_zeros=[0.0, 0.0]), FAILED
    )
