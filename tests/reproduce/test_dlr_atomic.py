"""seed 002 Table 1 (``seqdyn.reproduce.dlr_atomic``, and its reduction ``dlr_context``): each claim on hand-made
results where it must hold, must fail and must be inconclusive; the table prints the paper's numbers beside ours."""

from __future__ import annotations

import pytest

from seqdyn.reproduce import dlr_atomic as table1
from seqdyn.reproduce import dlr_context
from seqdyn.reproduce.atomic import MODELS, PAPER_R2, TASKS, r2_table
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE
from tests.reproduce.helpers import results, row

#: the paper's Table 1, seeds 0 and 1 a little apart
PAPER = {task: {model: (value, max(0.0, value - 0.01)) for model, value in models.items()}
         for task, models in PAPER_R2.items()}


def table(r2: dict[str, dict[str, tuple[float, ...]]], models=("dlr", "dss_exp", "attention")):
    """One row per (model, task, seed) with the given R² per seed."""
    rows = []
    for task, by_model in r2.items():
        for key in models:
            model = MODELS[key]
            rows += [row(value, model__mixer=model.mixer, model__layers=model.layers, task__name=task,
                         optimizer__lr=model.lr, train__seed=seed)
                     for seed, value in enumerate(by_model[key])]
    return results(rows)


def verdicts(data, claims=table1.CLAIMS) -> list[str]:
    return [claim.decide(data).verdict for claim in claims]


def test_the_papers_table_holds_every_claim():
    assert verdicts(table(PAPER)) == [HELD] * len(table1.CLAIMS)


def test_the_opposite_fails_every_claim():
    opposite = {task: {model: tuple(1.0 - v for v in values) for model, values in models.items()}
                for task, models in PAPER.items()}
    opposite["shift"]["dss_exp"] = (0.5, 0.5)  # DSS-EXP far above DLR's 0.0 on SHIFT: "DLR ≥ DSS-EXP" fails
    assert verdicts(table(opposite)) == [FAILED] * len(table1.CLAIMS)


def test_seeds_on_both_sides_are_inconclusive():
    split = {task: {model: values for model, values in models.items()} for task, models in PAPER.items()}
    split["shift"]["dlr"] = (0.95, 0.5)        # one seed solves SHIFT, one does not
    split["reverse"]["dlr"] = (0.1, 0.4)       # one seed stays below 0.2 on REVERSE, one does not
    split["select_fixed"]["dlr"] = (0.95, 0.3)
    split["mips"]["attention"] = (0.9, 0.05)   # ATTENTION's margin over DLR inside its seed spread
    split["cummax"]["dss_exp"] = (0.9, 0.1)    # DLR against DSS-EXP inside DSS-EXP's seed spread
    assert verdicts(table(split)) == [INCONCLUSIVE] * len(table1.CLAIMS)


def test_a_missing_run_is_inconclusive_and_named():
    data = table({task: PAPER[task] for task in TASKS if task != "cumsum"})
    rows = list(data.rows) + [row(None, status="failed", reason="killed", model__mixer="dlr", model__layers=1,
                                  task__name="cumsum", optimizer__lr=1e-4, train__seed=0)]
    outcome = table1.CLAIMS[0].decide(results(rows))
    assert outcome.verdict == INCONCLUSIVE and "killed" in outcome.reason


def test_the_reduced_reproduction_decides_on_dlr_and_attention_alone():
    data = table({task: PAPER[task] for task in dlr_context.TASKS}, models=dlr_context.MODELS)
    assert verdicts(data, dlr_context.CLAIMS) == [HELD] * len(dlr_context.CLAIMS)
    assert [claim.name for claim in dlr_context.CLAIMS] == [
        "SSMs solve SHIFT, CUMSUM", "SSMs fail context-dependent tasks", "attention beats SSMs on CUMMAX, MIPS"]


def test_the_table_has_a_row_per_task_and_the_papers_numbers():
    text = r2_table(table(PAPER))
    lines = text.splitlines()
    assert lines[0] == "| task | DLR | DSS-EXP | ATTENTION |" and len(lines) == 2 + len(TASKS)
    assert "| SHIFT | 0.99 ± 0.01 (1) | 0.98 ± 0.01 (0.99) | 0.71 ± 0.01 (0.72) |" in lines
    assert lines[-1].startswith("| MIPS |")


@pytest.mark.parametrize("scale", ["cpu", "paper"])
def test_the_scales_train_every_task_with_the_papers_learning_rates(scale):
    runs = [config for sweep in table1.REPRODUCTION.sweeps(scale) for config in sweep.expand()]
    assert {config.task.name for config in runs} == set(TASKS)
    for config in runs:
        assert config.model.norm_position == "post" and config.schedule.kind == "constant"
        assert config.optimizer.weight_decay == 0.0 and config.train.batch_size == 16
        lr = {"dlr": 1e-4, "dss_exp": 1e-3, "softmax_attention": 1e-3}[config.model.mixer]
        assert config.optimizer.lr == lr
        assert config.task.train_examples == config.train.steps * config.train.batch_size  # a fresh batch a step
    if scale == "paper":
        assert {(c.task.params["seq_len"], c.model.d_model, c.train.steps) for c in runs} == {(4096, 128, 40_000)}
