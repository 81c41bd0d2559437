"""seed 000 Fig. 3 (``seqdyn.reproduce.dsf_qlstm_transition``): its claim on hand-made results where it must hold,
must fail and must be inconclusive."""

from __future__ import annotations

import pytest

from seqdyn.reproduce import dsf_qlstm_transition as fig
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE
from tests.reproduce.helpers import assert_verdict, results, row


def table(qlstm: list[float], s6: list[float], softmax: float = 1.0):
    """Both variants per seed on two tasks and widths, and softmax attention (the control) at ``softmax``."""
    rows = [
        row(
            value,
            model__mixer=mixer,
            model__d_model=d,
            task__params__seq_len=seq_len,
            task__params__num_kv_pairs=pairs,
            optimizer__lr=1e-3,
            train__seed=seed,
        )
        for mixer, values in (("qlstm", qlstm), ("qlstm_s6", s6), ("softmax_attention", [softmax] * len(qlstm)))
        for seq_len, pairs in ((64, 4), (128, 8))
        for d in (64, 128)
        for seed, value in enumerate(values)
    ]
    return results(rows)


@pytest.mark.parametrize(
    ("qlstm", "s6", "verdict"),
    [
        ([0.5, 0.52], [0.8, 0.81], HELD),
        ([0.8, 0.81], [0.5, 0.52], FAILED),
        ([0.5, 0.9], [0.6, 0.7], INCONCLUSIVE),
    ],
)
def test_the_s6_transition_claim(qlstm, s6, verdict):
    assert fig.CLAIMS[0].decide(table(qlstm, s6)).verdict == verdict


@pytest.mark.parametrize(
    ("qlstm", "s6", "verdict"),
    [([0.5, 0.5], [0.51, 0.51], HELD), ([0.5, 0.5], [0.5, 0.5], HELD), ([0.5, 0.5], [0.49, 0.49], FAILED)],
)
def test_dsf_qlstm_transition_claim_just_above_and_below_its_order(qlstm, s6, verdict):
    """ "qLSTM with the S6 transition > qLSTM", no margin: one point either side (two identical seeds: an interval
    of width 0, the line itself), a tie holds."""
    assert_verdict(fig.CLAIMS, "S6 transition > qLSTM's", table(qlstm, s6), verdict)


def test_a_control_that_did_not_solve_the_task_leaves_the_claim_inconclusive():
    outcome = fig.CLAIMS[0].decide(table([0.8, 0.81], [0.5, 0.52], softmax=0.6))
    assert outcome.verdict == INCONCLUSIVE and outcome.reason.startswith("control softmax attention 0.6 < 0.99")
    assert outcome.control["passed"] is False


def test_variants_on_the_plateau_leave_the_claim_inconclusive_for_the_budget():
    """Both variants at MQAR's copy-a-value level (1/P: 0.25 with 4 pairs, 0.125 with 8) decide nothing."""
    outcome = fig.CLAIMS[0].decide(table([0.27, 0.27], [0.26, 0.26]))
    assert outcome.verdict == INCONCLUSIVE and "budget" in outcome.reason and "plateau" in outcome.reason


@pytest.mark.parametrize("scale", ["smoke", "cpu", "gpu", "paper"])
def test_the_softmax_control_shares_its_runs_with_dsf_mqar_models(scale):
    """The same model on the same task is one run: a store that ran dsf_mqar_models holds this control."""
    from seqdyn.reproduce import dsf_mqar_models
    from seqdyn.reproduce.runner import named_sweeps

    def softmax_ids(reproduction) -> set[str]:
        return {
            run.run_id
            for sweep in named_sweeps(reproduction, scale)
            for run in sweep.expand()
            if run.model.mixer == "softmax_attention"
        }

    control = softmax_ids(fig.REPRODUCTION)
    assert control and control <= softmax_ids(dsf_mqar_models.REPRODUCTION)


def test_both_forget_gates_start_at_a_zero_bias_as_in_the_authors_runs():
    """The authors' qLSTM (IntelligentControlSystems/dsf-mqar at 7c5aff8, zoology/mixers/lstm.py, line 17) computes
    its gates with ``nn.Linear(hidden, 3*hidden, bias=True)``, whose bias Zoology's ``_init_weights``
    (zoology/model.py, lines 79-82) zeroes: both variants start with f = σ(0) = 0.5, where the mixers alone start
    at a forget bias of +1 (qLSTM) and −1 (σ_rev)."""
    from seqdyn.models import build_model
    from seqdyn.tasks import build as build_task

    for scale in ("paper", "cpu", "smoke"):
        assert {sweep.model.keep_mixer_init for sweep in fig.REPRODUCTION.sweeps(scale)} == {False}
    for run in (run for sweep in fig.REPRODUCTION.sweeps("smoke") for run in sweep.expand()):
        model = build_model(run.model, build_task(run.task.name, **run.task.params))
        for block in model.blocks:
            if block.mixer.name in ("qlstm", "qlstm_s6"):
                assert float(block.mixer.gates.bias.detach().abs().max()) == 0
