"""seed 000 Fig. 1 (``seqdyn.reproduce.dsf_state_expansion``): each claim on hand-made results where it must hold,
must fail and must be inconclusive."""

from __future__ import annotations

import pytest

from seqdyn.reproduce import dsf_state_expansion as fig
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE
from tests.reproduce.helpers import (
    FILLERS_THEN,
    INIT_THEN,
    assert_verdict,
    pilot_and_scale_runs,
    results,
    row,
    runs_by_key,
)


def table(softmax: list[float], linear: dict[int, list[float]]):
    """Two learning rates per setting, the first reaching half of the given accuracy."""
    rows = []
    for lr in (1e-3, 1e-2):
        factor = 1.0 if lr == 1e-2 else 0.5
        rows += [
            row(
                value * factor,
                model__mixer="softmax_attention",
                task__params__seq_len=64,
                task__params__num_kv_pairs=8,
                optimizer__lr=lr,
                train__seed=seed,
            )
            for seed, value in enumerate(softmax)
        ]
        rows += [
            row(
                value * factor,
                model__mixer="linear_attention",
                model__mixer_options__state_dim=n,
                task__params__seq_len=64,
                task__params__num_kv_pairs=8,
                optimizer__lr=lr,
                train__seed=seed,
            )
            for n, values in linear.items()
            for seed, value in enumerate(values)
        ]
    return results(rows)


def verdicts(data) -> list[str]:
    return [claim.decide(data).verdict for claim in fig.CLAIMS]


def test_the_papers_picture_holds():
    """Three seeds: at two, Student's interval of softmax's (1.0, 0.995) reaches below 0.99."""
    picture = table([1.0, 1.0, 0.995], {4: [0.3, 0.32, 0.31], 16: [0.7, 0.71, 0.705], 64: [0.98, 0.97, 0.975]})
    assert verdicts(picture) == [HELD] * 3


def test_the_opposite_fails():
    opposite = table([1.0, 1.0, 0.995], {4: [0.9, 0.91, 0.905], 16: [0.5, 0.5, 0.5], 64: [0.2, 0.21, 0.205]})
    assert verdicts(opposite) == [FAILED, FAILED, HELD]


def test_a_softmax_that_did_not_solve_the_task_leaves_the_comparisons_inconclusive():
    """Softmax attention is the control: below Zoology's 0.99 the linear-attention claims decide nothing."""
    assert verdicts(table([0.6, 0.61], {4: [0.9, 0.91], 16: [0.5, 0.5], 64: [0.2, 0.21]})) == [
        INCONCLUSIVE,
        INCONCLUSIVE,
        FAILED,
    ]


def test_linear_attention_on_the_plateau_leaves_the_comparisons_inconclusive_for_the_budget():
    """Linear attention at MQAR's copy-a-value level (1/P: 0.125 with 8 pairs) at the largest n decides nothing: the
    claims that did not hold say so, naming the plateau, also where the smallest n learnt; once it left the
    plateau, a smaller score at the largest n does not hold."""
    stuck = table([1.0, 1.0], {4: [0.16, 0.16], 16: [0.13, 0.13], 64: [0.12, 0.12]})
    for claim in fig.CLAIMS[:2]:
        outcome = claim.decide(stuck)
        assert outcome.verdict == INCONCLUSIVE and outcome.reason.startswith("budget") and "plateau" in outcome.reason
    learnt_then_stuck = table([1.0, 1.0], {4: [0.6, 0.6], 16: [0.3, 0.3], 64: [0.13, 0.13]})
    assert fig.CLAIMS[0].decide(learnt_then_stuck).verdict == INCONCLUSIVE
    left = table([1.0, 1.0], {4: [0.6, 0.6], 16: [0.3, 0.3], 64: [0.4, 0.4]})
    assert verdicts(left)[:2] == [FAILED, FAILED]


def test_overlapping_seeds_are_inconclusive():
    assert verdicts(table([1.0, 0.5], {4: [0.3, 0.9], 16: [0.5, 0.5], 64: [0.4, 0.98]})) == [INCONCLUSIVE] * 3


def test_large_n_pilot_is_the_cpu_scale_at_n_64_but_its_feature_map():
    """examples/pilots/linear_attention_large_n.yaml: the cpu scale's two linear-attention runs at n = 64 with the
    ReLU feature map instead of elu + 1, on the two seeds the cpu scale had then (it has three now); nothing else
    differs."""
    pilot, cpu = pilot_and_scale_runs("linear_attention_large_n.yaml", fig.REPRODUCTION)
    key = ("model.mixer", "model.mixer_options.state_dim", "train.seed")
    relu = runs_by_key(cpu, mixer_options={"feature_map": "relu"}, key=key, task_params=FILLERS_THEN, model=INIT_THEN)
    expected = {k: run for k, run in relu.items() if k[:2] == ("linear_attention", 64) and k[2] < 2}
    assert {c.model.mixer_options["feature_map"] for c in pilot} == {"relu"}
    assert runs_by_key(pilot, key=key) == expected and len(expected) == 2


def test_small_n_pilot_is_the_cpu_scale_at_n_4_and_16_but_its_feature_map():
    """examples/pilots/linear_attention_relu_small_n.yaml: the cpu scale's linear-attention runs at n = 4 and 16 with
    the ReLU feature map instead of elu + 1, on the cpu scale's first two seeds; nothing else differs."""
    pilot, cpu = pilot_and_scale_runs("linear_attention_relu_small_n.yaml", fig.REPRODUCTION)
    key = ("model.mixer", "model.mixer_options.state_dim", "train.seed")
    relu = runs_by_key(cpu, mixer_options={"feature_map": "relu"}, key=key, task_params=FILLERS_THEN, model=INIT_THEN)
    expected = {k: run for k, run in relu.items() if k[0] == "linear_attention" and k[1] in (4, 16) and k[2] < 2}
    assert {c.model.mixer_options["feature_map"] for c in pilot} == {"relu"}
    assert runs_by_key(pilot, key=key) == expected and len(expected) == 4


@pytest.mark.parametrize(
    ("claim", "softmax", "linear", "verdict"),
    [
        # "the larger n, the more expressivity": the largest n ≥ the smallest, no margin
        ("linear rises with n", [1.0, 1.0], {4: [0.5, 0.5], 64: [0.51, 0.51]}, HELD),
        ("linear rises with n", [1.0, 1.0], {4: [0.5, 0.5], 64: [0.5, 0.5]}, HELD),  # a tie holds
        ("linear rises with n", [1.0, 1.0], {4: [0.5, 0.5], 64: [0.49, 0.49]}, FAILED),
        # "converges to softmax": within 0.05 at the largest n
        ("linear → softmax", [1.0, 1.0], {4: [0.5, 0.5], 64: [0.96, 0.96]}, HELD),
        ("linear → softmax", [1.0, 1.0], {4: [0.5, 0.5], 64: [0.94, 0.94]}, FAILED),
        ("linear → softmax", [1.0, 1.0], {4: [0.5, 0.5], 64: [0.95, 0.93]}, INCONCLUSIVE),
        # Zoology's early stop: every seed ≥ 0.99
        ("softmax ≈ 100 %", [0.99, 0.99], {4: [0.5, 0.5], 64: [0.96, 0.96]}, HELD),
        ("softmax ≈ 100 %", [0.989, 0.989], {4: [0.5, 0.5], 64: [0.96, 0.96]}, FAILED),
    ],
)
def test_dsf_state_expansion_claims_just_above_and_below_their_thresholds(claim, softmax, linear, verdict):
    """Seed 000 Fig. 1's claims one setting past the order, the tolerance 0.05 or the early stop 0.99."""
    assert_verdict(fig.CLAIMS, claim, table(softmax, linear), verdict)
