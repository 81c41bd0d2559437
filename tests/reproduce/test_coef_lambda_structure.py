"""seed 001 Principle 4 (``seqdyn.reproduce.coef_lambda_structure``): each row maps to one variant, and each claim
on hand-made results where it must hold, must fail and must be inconclusive."""

from __future__ import annotations

import pytest

from seqdyn.reproduce import coef_lambda_structure as fig
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE
from seqdyn.reproduce.protocols.mad import CONTROL_ENTRY
from tests.reproduce.helpers import assert_verdict, entry_keys, results, row


def options(variant: fig.Variant) -> dict:
    entry = fig.model_entry(variant)["mixer_options"]
    return {f"model__mixer_options__{key}": value for key, value in entry.items()}


def test_every_variant_is_recognized_from_its_row():
    for variant in fig.VARIANTS:
        assert fig.variant_of(row(0.5, **options(variant))) == variant
    with pytest.raises(ValueError, match="match 0 of the variants"):
        fig.variant_of(row(0.5, model__mixer_options__decay="constant"))


def table(accuracy: dict[str, list[float]], control: tuple[float, ...] = (0.95, 0.97, 0.96)):
    """Per task, variant and seed: the given accuracy of the structure for its first parameterization, 0.1 less
    for the second; weight decay 0.1, and 0.2 less at weight decay 0.  Softmax, the control, scores ``control``."""
    rows = []
    for task in fig.TASKS:
        for seed, value in enumerate(control):
            rows.append(
                row(value, task__name=task, optimizer__weight_decay=0.1, train__seed=seed, **entry_keys(CONTROL_ENTRY))
            )
        for variant in fig.VARIANTS:
            second = variant.parameterization in ("Mamba-2", "β = 2")
            for seed, value in enumerate(accuracy[variant.structure]):
                for wd, lower in ((0.1, 0.0), (0.0, 0.2)):
                    rows.append(
                        row(
                            value - lower - (0.1 if second else 0.0),
                            task__name=task,
                            optimizer__weight_decay=wd,
                            train__seed=seed,
                            **options(variant),
                        )
                    )
    return results(rows)


def verdicts(data) -> list[str]:
    return [claim.decide(data).verdict for claim in fig.CLAIMS]


def test_the_papers_picture_holds():
    rising = {
        "scalar": [0.4, 0.42],
        "diagonal": [0.6, 0.61],
        "Householder, w = k": [0.8, 0.8],
        "Householder, learned w": [0.9, 0.92],
    }
    assert verdicts(table(rising)) == [HELD, HELD]


def test_the_opposite_fails():
    falling = {
        "scalar": [0.9, 0.92],
        "diagonal": [0.6, 0.61],
        "Householder, w = k": [0.5, 0.5],
        "Householder, learned w": [0.4, 0.41],
    }
    assert verdicts(table(falling)) == [FAILED, FAILED]


def test_a_control_that_did_not_learn_leaves_both_claims_inconclusive():
    rising = {
        "scalar": [0.4, 0.42],
        "diagonal": [0.6, 0.61],
        "Householder, w = k": [0.8, 0.8],
        "Householder, learned w": [0.9, 0.92],
    }
    for claim in fig.CLAIMS:
        outcome = claim.decide(table(rising, control=(0.5, 0.52)))
        assert outcome.verdict == INCONCLUSIVE and outcome.cause == "control"
        assert "control softmax on fuzzy_in_context_recall 0.51 < 0.9" in outcome.reason
        split = claim.decide(table(rising, control=(0.95, 0.5)))  # one seed learnt: more seeds decide the control
        assert split.verdict == INCONCLUSIVE and split.cause == "seeds"
        assert split.reason.startswith("control softmax on fuzzy_in_context_recall undecided: the mean +0.725")


def test_the_control_has_its_row_in_the_table():
    rising = {
        "scalar": [0.4, 0.42],
        "diagonal": [0.6, 0.61],
        "Householder, w = k": [0.8, 0.8],
        "Householder, learned w": [0.9, 0.92],
    }
    # the control's seeds 0.95, 0.97, 0.96: mean 0.96, standard error 0.01/√3
    assert "| softmax (control) | Type 1 block | 96.0 ± 0.6 | 96.0 ± 0.6 |" in fig.REPRODUCTION.table(table(rising))


def test_the_cpu_scale_runs_selective_copying_at_its_ladders_choice_and_shows_the_ladder():
    """The ladder's rule (mad.choose_rung): one rung harder than where every Λ sat at the ceiling (L = 32, 4 tokens:
    0.998-0.999), to L = 64 with 8 tokens; the table prints the ladder's numbers under the results."""
    assert fig.SCALES["cpu"]["tasks"] == {
        "selective_copying": {"vocab_size": 16, "seq_len": 64, "num_tokens_to_copy": 8}
    }
    rising = {
        "scalar": [0.4, 0.4],
        "diagonal": [0.6, 0.6],
        "Householder, w = k": [0.8, 0.8],
        "Householder, learned w": [0.9, 0.9],
    }
    shown = fig.REPRODUCTION.table(table(rising))
    assert "Difficulty ladder of selective_copying" in shown and "0.872 / 0.914" in shown
    assert "Difficulty ladder of fuzzy_in_context_recall" not in shown  # fuzzy recall has no ladder


def test_overlapping_seeds_are_inconclusive():
    overlapping = {
        "scalar": [0.4, 0.9],
        "diagonal": [0.5, 0.8],
        "Householder, w = k": [0.6, 0.6],
        "Householder, learned w": [0.5, 0.95],
    }
    assert verdicts(table(overlapping)) == [INCONCLUSIVE, INCONCLUSIVE]


RISING = {
    "scalar": [0.4, 0.42],
    "diagonal": [0.6, 0.61],
    "Householder, w = k": [0.8, 0.8],
    "Householder, learned w": [0.9, 0.92],
}


LOW_W_K = {"Householder, w = k": [0.5, 0.5]}


@pytest.mark.parametrize(
    ("claim", "changed", "verdict"),
    [
        # "performance increases as more transformations are allowed": the best Householder variant ≥ scalar + 0.05
        ("Householder > scalar", {"scalar": [0.6, 0.6], **LOW_W_K, "Householder, learned w": [0.66, 0.66]}, HELD),
        ("Householder > scalar", {"scalar": [0.6, 0.6], **LOW_W_K, "Householder, learned w": [0.64, 0.64]}, FAILED),
        (
            "Householder > scalar",
            {"scalar": [0.6, 0.6], **LOW_W_K, "Householder, learned w": [0.68, 0.62]},
            INCONCLUSIVE,
        ),
        # the best of each structure: w = k counts as much as a learned w
        (
            "Householder > scalar",
            {"scalar": [0.6, 0.6], "Householder, w = k": [0.66, 0.66], "Householder, learned w": [0.3, 0.3]},
            HELD,
        ),
        (
            "Householder > scalar",
            {"scalar": [0.6, 0.6], "Householder, w = k": [0.64, 0.64], "Householder, learned w": [0.3, 0.3]},
            FAILED,
        ),
        # diagonal ≥ scalar, no margin
        ("diagonal ≥ scalar", {"scalar": [0.6, 0.6], "diagonal": [0.61, 0.61]}, HELD),
        ("diagonal ≥ scalar", {"scalar": [0.6, 0.6], "diagonal": [0.59, 0.59]}, FAILED),
    ],
)
def test_coef_lambda_structure_claims_just_above_and_below_their_thresholds(claim, changed, verdict):
    """Principle 4's claims one structure past the margin 0.05 or the order (the paper's picture elsewhere)."""
    assert_verdict(fig.CLAIMS, claim, table({**RISING, **changed}), verdict)
