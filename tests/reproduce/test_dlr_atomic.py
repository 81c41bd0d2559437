"""seed 002 Table 1 (``seqdyn.reproduce.dlr_atomic``, and its reduction ``dlr_context``): each claim on hand-made
results where it must hold, must fail and must be inconclusive; the table prints the paper's numbers beside ours."""

from __future__ import annotations

import pytest

from seqdyn.reproduce import dlr_atomic as table1
from seqdyn.reproduce import dlr_context
from seqdyn.reproduce.claims import CONTROL, FAILED, HELD, INCONCLUSIVE, SEEDS
from seqdyn.reproduce.protocols.atomic import MODELS, PAPER_R2, TASKS, r2_table
from tests.reproduce.helpers import assert_verdict, pilot_and_scale_runs, results, row, runs_by_key

#: the paper's Table 1 on three seeds a little apart (the value, 0.01 and 0.005 below it, none below 0): the 95 %
#: intervals of two seeds 0.01 apart (± 0.064) would leave DLR's .01 against DSS-EXP's 0 on REVERSE open
PAPER = {
    task: {model: (value, max(0.0, value - 0.01), max(0.0, value - 0.005)) for model, value in models.items()}
    for task, models in PAPER_R2.items()
}


#: the single layers of Table 1 and the deeper models that stand as controls
ALL_MODELS = ("dlr", "dss_exp", "attention", "dlr_6", "attention_2")


def table(r2: dict[str, dict[str, tuple[float, ...]]], models=ALL_MODELS):
    """One row per (model, task, seed) with the given R² per seed (the models a task's dict names)."""
    rows = []
    for task, by_model in r2.items():
        for key in [key for key in models if key in by_model]:
            model = MODELS[key]
            rows += [
                named(
                    row(
                        value,
                        model__mixer=model.mixer,
                        model__layers=model.layers,
                        task__name=task,
                        optimizer__lr=model.lr,
                        train__seed=seed,
                    ),
                    key,
                )
                for seed, value in enumerate(by_model[key])
            ]
    return results(rows)


def named(result: dict, key: str) -> dict:
    """A row named as a reproduction's sweep names its runs: ``NAME/SCALE/PART-MODEL[...]``."""
    return {**result, "name": f"dlr_atomic/cpu/table1-{key}[{result['name']}]"}


def verdicts(data, claims=table1.CLAIMS) -> list[str]:
    return [claim.decide(data).verdict for claim in claims]


def test_the_papers_table_holds_every_claim():
    """CONTEXTSHIFT too: no model of Table 1 learns it, so its claim is agreement with Table 1's numbers, controlled
    by the SSM layers learning SHIFT (Table 1: 1, .99)."""
    assert verdicts(table(PAPER)) == [HELD] * len(table1.CLAIMS)


def with_learners(r2: dict, value: float = 1.0) -> dict:
    """``r2`` with every control's learner at ``value`` on its task."""
    return {
        task: {**models, **({table1.LEARNERS[task]: (value, value)} if task in table1.LEARNERS else {})}
        for task, models in r2.items()
    }


def test_the_opposite_fails_every_claim():
    """The paper's table turned over, with each model a claim needs to learn off the plateau (R² 0.5)."""
    opposite = {
        task: {model: tuple(1.0 - v for v in values) for model, values in models.items()}
        for task, models in PAPER.items()
    }
    for task, model in (
        ("shift", "dlr"),
        ("cumsum", "dlr"),
        ("cumsum", "dss_exp"),
        ("select_fixed", "dlr"),
        ("cummax", "attention"),
        ("mips", "attention"),
    ):
        opposite[task][model] = (0.5, 0.5)
    # the controls of the comparisons learn (DLR on SHIFT, ATTENTION on CUMSUM); DSS-EXP far above DLR's 0.5 on
    # CUMSUM: "DLR ≥ DSS-EXP" fails; DSS-EXP off the plateau on SHIFT
    opposite["shift"]["dlr"] = opposite["cumsum"]["dss_exp"] = opposite["cumsum"]["attention"] = (0.95, 0.95)
    opposite["shift"]["dss_exp"] = (0.9, 0.9)
    assert verdicts(table(with_learners(opposite))) == [FAILED] * len(table1.CLAIMS)


@pytest.mark.parametrize(
    ("claim", "task", "model"),
    [("DLR ≥ DSS-EXP", "shift", "dlr"), ("attention beats SSMs on CUMMAX, MIPS", "cumsum", "attention")],
)
def test_a_comparison_whose_layer_does_not_train_decides_nothing(claim, task, model):
    """The paper's table, but the control of the comparison — its layer on a task Table 1 says it solves — short of
    R² 0.9 on one seed (its interval across 0.9: undecided, more seeds decide it), or on both (it failed)."""
    comparison = next(c for c in table1.CLAIMS if c.name == claim)
    data = {task_: dict(models) for task_, models in PAPER.items()}
    data[task][model] = (0.97, 0.85)
    outcome = comparison.decide(table(data))
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == SEEDS
    assert outcome.reason.startswith(f"control {MODELS[model].label} undecided: the mean +0.91")
    data[task][model] = (0.85, 0.85)
    outcome = comparison.decide(table(data))
    assert outcome.verdict == INCONCLUSIVE and outcome.cause == CONTROL
    assert outcome.reason.startswith(f"control {MODELS[model].label} 0.85 < 0.9")


@pytest.mark.parametrize(
    ("claim", "task", "model"),
    [
        ("DLR solves SELECT-FIXED", "select_fixed", "dlr"),
        ("SSMs solve SHIFT, CUMSUM", "cumsum", "dss_exp"),
        ("attention beats SSMs on CUMMAX, MIPS", "mips", "attention"),
    ],
)
def test_a_model_that_never_left_r2_0_leaves_its_claim_inconclusive_for_the_budget(claim, task, model):
    """A claim that a model learns a task, where it stayed within 0.05 of the best constant prediction (R² 0):
    the budget, not the model, is what the run shows."""
    stuck = with_learners({name: dict(models) for name, models in PAPER.items()})
    stuck[task][model] = (0.04, 0.045)
    outcome = next(c for c in table1.CLAIMS if c.name == claim).decide(table(stuck))
    assert outcome.verdict == INCONCLUSIVE
    assert outcome.reason.startswith(f"budget: {MODELS[model].label} best seed 0.045 within 0.05 of the plateau 0")
    assert "best constant prediction" in outcome.reason


def test_seeds_on_both_sides_are_inconclusive():
    split = {task: {model: values for model, values in models.items()} for task, models in PAPER.items()}
    split["shift"]["dlr"] = (0.95, 0.5)  # one seed solves SHIFT, one does not
    for task in table1.CONTEXT_DEPENDENT:
        split[task]["dlr"] = (0.1, 0.4)  # one seed stays below 0.2, one does not
    split["select_fixed"]["dlr"] = (0.95, 0.3)
    split["mips"]["attention"] = (0.9, 0.05)  # ATTENTION's margin over DLR inside its seed spread
    split["cummax"]["dss_exp"] = (0.9, 0.1)  # DLR against DSS-EXP inside DSS-EXP's seed spread
    assert verdicts(table(with_learners(split))) == [INCONCLUSIVE] * len(table1.CLAIMS)


def test_a_claim_about_what_ssms_cannot_do_needs_a_model_that_can():
    """REVERSE: DLR with 6 layers; SELECT: ATTENTION with 2 layers, each at R² 0.9 on every seed."""
    for task, claim in (("reverse", "SSMs fail REVERSE"), ("select", "SSMs fail SELECT")):
        learner = table1.LEARNERS[task]
        assert_verdict(table1.CLAIMS, claim, table(with_learners(PAPER, 0.9)), HELD)
        unlearnt = with_learners(PAPER, 0.9)
        unlearnt[task][learner] = (0.95, 0.89)
        outcome = next(c for c in table1.CLAIMS if c.name == claim).decide(table(unlearnt))
        assert outcome.verdict == INCONCLUSIVE and outcome.control["passed"] is False, claim


@pytest.mark.parametrize(
    ("shift", "verdict", "cause"),
    [
        ({"dlr": (0.9, 0.9)}, HELD, None),  # the SSM layers just reach 0.9 on SHIFT: the control passes
        ({"dlr": (0.89, 0.89)}, INCONCLUSIVE, CONTROL),  # DLR just short of it: the control failed
        # DLR's second seed just short of it: the control's interval lies across 0.9, undecided
        ({"dlr": (0.9, 0.89)}, INCONCLUSIVE, SEEDS),
        ({"dss_exp": (0.91, 0.89)}, INCONCLUSIVE, SEEDS),  # DSS-EXP's, in the reproduction that trains it
    ],
)
def test_contextshift_agrees_with_table_1_where_the_ssms_learn_shift(shift, verdict, cause):
    """No model of Table 1 learns CONTEXTSHIFT (.11 at best): its control is the SSM layers learning SHIFT, the task
    it is the context-dependent version of, at the same budget — never a model that learns CONTEXTSHIFT."""
    data = with_learners(PAPER)
    data["shift"] = {**data["shift"], **shift}
    outcome = next(c for c in table1.CLAIMS if c.name == "SSMs fail CONTEXTSHIFT").decide(table(data))
    assert outcome.verdict == verdict
    assert outcome.control["setting"] in ("DLR", "DSS-EXP") and "SHIFT" in outcome.control["description"]
    assert outcome.cause == cause
    if verdict == INCONCLUSIVE:
        assert outcome.reason.startswith("control ")
    assert "context_shift" not in table1.LEARNERS


def test_a_missing_run_is_inconclusive_and_named():
    data = table({task: PAPER[task] for task in TASKS if task != "cumsum"})
    rows = list(data.rows) + [
        named(
            row(
                None,
                status="failed",
                reason="killed",
                model__mixer="dlr",
                model__layers=1,
                task__name="cumsum",
                optimizer__lr=1e-4,
                train__seed=0,
            ),
            "dlr",
        )
    ]
    outcome = table1.CLAIMS[0].decide(results(rows))
    assert outcome.verdict == INCONCLUSIVE and "killed" in outcome.reason


def test_the_reduced_reproduction_decides_on_dlr_and_attention_and_their_controls():
    data = table(
        with_learners({task: PAPER[task] for task in dlr_context.TASKS}),
        models=(*dlr_context.MODELS, "dlr_6", "attention_2"),
    )
    assert verdicts(data, dlr_context.CLAIMS) == [HELD] * len(dlr_context.CLAIMS)
    assert [claim.name for claim in dlr_context.CLAIMS] == [
        "SSMs solve SHIFT, CUMSUM",
        "SSMs fail REVERSE",
        "SSMs fail CONTEXTSHIFT",
        "attention beats SSMs on CUMMAX, MIPS",
    ]
    assert all("DSS-EXP" not in claim.statement for claim in dlr_context.CLAIMS)  # it trains DLR alone
    assert [claim.statement for claim in dlr_context.CLAIMS] == [
        "the DLR layer reaches R² ≥ 0.9 on SHIFT and CUMSUM",
        "the DLR layer stays at R² ≤ 0.2 on REVERSE",
        "the DLR layer stays at R² ≤ 0.2 on CONTEXTSHIFT, as in Table 1 (0), where no model learns it (0.11 at "
        "best): agreement with Table 1's numbers, with the layer learning the context-free task as its control",
        "ATTENTION ≥ DLR + 0.2 on CUMMAX and MIPS",
    ]
    by_name = {claim.name: claim for claim in table1.CLAIMS}  # the same sentences, numbers and controls
    for claim in dlr_context.CLAIMS:
        assert (claim.quote, claim.paper_value) == (by_name[claim.name].quote, by_name[claim.name].paper_value)
        assert (claim.control is None) == (by_name[claim.name].control is None)
    assert by_name["SSMs fail SELECT"].statement == "SSM layers (DLR, DSS-EXP) stay at R² ≤ 0.2 on SELECT"
    runs = [config for sweep in dlr_context.REPRODUCTION.sweeps("cpu") for config in sweep.expand()]
    assert {
        (config.model.mixer, config.model.layers, config.task.name) for config in runs if config.model.layers > 1
    } == {("dlr", 6, "reverse")}  # no model of Table 1 learns CONTEXTSHIFT: none is trained as its control


#: each claim of Table 1 one cell away from its threshold (seed 002's words: "highly effective", "perfect
#: performance" R² ≥ 0.9; "fail" R² ≤ 0.2; "as good as or better than" DLR ≥ DSS-EXP − 0.05; "more expressive"
#: ATTENTION ≥ DLR + 0.2), with the paper's table elsewhere: (claim, cells changed, verdict)
THRESHOLD_CASES = [
    ("SSMs solve SHIFT, CUMSUM", {"shift": {"dlr": (0.91, 0.91)}}, HELD),
    ("SSMs solve SHIFT, CUMSUM", {"cumsum": {"dlr": (0.9, 0.9)}}, HELD),  # a tie reaches
    ("SSMs solve SHIFT, CUMSUM", {"shift": {"dlr": (0.89, 0.89)}}, FAILED),
    ("SSMs solve SHIFT, CUMSUM", {"shift": {"dlr": (0.91, 0.89)}}, INCONCLUSIVE),
    ("SSMs fail REVERSE", {"reverse": {"dlr": (0.19, 0.19)}}, HELD),
    ("SSMs fail REVERSE", {"reverse": {"dlr": (0.21, 0.21)}}, FAILED),
    ("SSMs fail CONTEXTSHIFT", {"context_shift": {"dlr": (0.2, 0.2)}}, HELD),
    ("SSMs fail CONTEXTSHIFT", {"context_shift": {"dlr": (0.21, 0.21)}}, FAILED),
    ("SSMs fail CONTEXTSHIFT", {"context_shift": {"dlr": (0.19, 0.21)}}, INCONCLUSIVE),
    ("SSMs fail SELECT", {"select": {"dlr": (0.21, 0.21)}}, FAILED),
    ("DLR solves SELECT-FIXED", {"select_fixed": {"dlr": (0.91, 0.91)}}, HELD),
    ("DLR solves SELECT-FIXED", {"select_fixed": {"dlr": (0.89, 0.89)}}, FAILED),
    ("DLR ≥ DSS-EXP", {"cummax": {"dlr": (0.46, 0.46), "dss_exp": (0.5, 0.5)}}, HELD),
    ("DLR ≥ DSS-EXP", {"cummax": {"dlr": (0.44, 0.44), "dss_exp": (0.5, 0.5)}}, FAILED),
    ("DLR ≥ DSS-EXP", {"cummax": {"dlr": (0.47, 0.43), "dss_exp": (0.5, 0.5)}}, INCONCLUSIVE),  # inside 0.04
    ("attention beats SSMs on CUMMAX, MIPS", {"cummax": {"dlr": (0.5, 0.5), "attention": (0.71, 0.71)}}, HELD),
    ("attention beats SSMs on CUMMAX, MIPS", {"cummax": {"dlr": (0.5, 0.5), "attention": (0.69, 0.69)}}, FAILED),
    ("attention beats SSMs on CUMMAX, MIPS", {"mips": {"dlr": (0.25, 0.25), "attention": (0.5, 0.4)}}, INCONCLUSIVE),
]


#: the two reproductions that decide Table 1's claims, with the tasks and models each trains
TABLE1_REPRODUCTIONS = {
    "dlr_atomic": (table1, TASKS, ("dlr", "dss_exp", "attention")),
    "dlr_context": (dlr_context, dlr_context.TASKS, dlr_context.MODELS),
}


@pytest.mark.parametrize(
    ("reproduction", "claim", "cells", "verdict"),
    [
        pytest.param(name, *case, id=f"{name}-{case[0]}-{case[2]}-{index}")
        for name, (module, _, _) in TABLE1_REPRODUCTIONS.items()
        for index, case in enumerate(THRESHOLD_CASES)
        if case[0] in {claim.name for claim in module.CLAIMS}
    ],
)
def test_dlr_atomic_and_dlr_context_claims_just_above_and_below_their_thresholds(reproduction, claim, cells, verdict):
    """``make main``'s verdicts (``dlr_context``, a reduction of ``dlr_atomic``): one cell of the paper's table
    moved just past a claim's threshold or margin flips that claim, and seeds on both sides leave it open."""
    module, tasks, models = TABLE1_REPRODUCTIONS[reproduction]
    changed = with_learners({task: {**PAPER[task], **cells.get(task, {})} for task in tasks})
    assert_verdict(module.CLAIMS, claim, table(changed, models=(*models, "dlr_6", "attention_2")), verdict)


def test_the_table_has_a_row_per_task_and_the_papers_numbers():
    text = r2_table(table(PAPER, models=("dlr", "dss_exp", "attention")))
    lines = text.splitlines()
    assert lines[0] == "| task | DLR | DSS-EXP | ATTENTION |" and len(lines) == 2 + len(TASKS)
    # three seeds 0.005 apart: the mean 0.005 below the paper, its standard error 0.003
    assert "| SHIFT | 0.99 ± 0.00 (1) | 0.98 ± 0.00 (0.99) | 0.71 ± 0.00 (0.72) |" in lines
    assert lines[-1].startswith("| MIPS |")


@pytest.mark.parametrize("scale", ["cpu", "paper"])
def test_the_scales_train_every_task_with_the_papers_learning_rates(scale):
    sweeps = [sweep for sweep in table1.REPRODUCTION.sweeps(scale) if not sweep.name.startswith("select_fixed")]
    runs = [config for sweep in sweeps for config in sweep.expand()]
    assert {config.task.name for config in runs} == set(TASKS)
    for config in runs:
        assert config.model.norm_position == "post" and config.schedule.kind == "constant"
        assert config.optimizer.weight_decay == 0.0 and config.train.batch_size == 16
        lr = {"dlr": 1e-4, "dss_exp": 1e-3, "softmax_attention": 1e-3}[config.model.mixer]  # the controls' too
        assert config.optimizer.lr == lr
        assert config.task.train_examples == config.train.steps * config.train.batch_size  # a fresh batch a step
    if scale == "paper":
        assert {(c.task.params["seq_len"], c.model.d_model, c.train.steps) for c in runs} == {(4096, 128, 40_000)}


# --- Table 2 (dlr_shift_length) ------------------------------------------------------------------------------
def shift_table(r2: dict[str, dict[int, tuple[float, ...]]]):
    from seqdyn.reproduce import dlr_shift_length as table2

    return results(
        [
            {
                **row(
                    value,
                    task__name="shift",
                    task__params__seq_len=length,
                    train__seed=seed,
                    model__mixer_options__state_dim=32 if key == "dlr_small_n" else 256,
                ),
                "name": f"dlr_shift_length/cpu/table2-{key}[L={length}, seed={seed}]",
            }
            for key, by_length in r2.items()
            for length, values in by_length.items()
            for seed, value in enumerate(values)
        ]
    ), table2


def test_table2_claims_hold_fail_and_stay_open():
    # three seeds of DLR-ℝ and DLR's seeds at 2^12 0.01 apart: two seeds 0.05 apart leave R² ≤ 0.5 (0.225 ± 0.32) and
    # DLR-prod's margin (0.17 ± 0.27) open
    paperlike = {
        "dlr_real": {256: (0.2, 0.25, 0.225)},
        "dlr": {256: (0.99, 0.98), 1024: (0.85, 0.85), 4096: (0.82, 0.83)},
        "dlr_prod": {256: (1.0, 1.0), 4096: (1.0, 0.99)},
        "dlr_small_n": {256: (0.9, 0.9), 1024: (0.3, 0.3), 4096: (0.3, 0.3)},
        "dss_exp": {256: (0.99, 0.99), 4096: (0.7, 0.7)},
    }
    data, table2 = shift_table(paperlike)
    assert verdicts(data, table2.CLAIMS) == [HELD] * 3
    opposite = {
        **paperlike,
        "dlr_real": {256: (0.95, 0.97)},
        "dlr_prod": {4096: (0.5, 0.5)},
        "dlr_small_n": {1024: (0.95, 0.95)},
    }
    assert verdicts(shift_table(opposite)[0], table2.CLAIMS) == [FAILED] * 3
    spread = {
        **paperlike,
        "dlr_real": {256: (0.2, 0.7)},
        "dlr_prod": {4096: (1.0, 0.6)},
        "dlr_small_n": {1024: (0.3, 0.9)},
    }
    assert verdicts(shift_table(spread)[0], table2.CLAIMS) == [INCONCLUSIVE] * 3
    text = table2.REPRODUCTION.table(data)
    assert "| DLR-ℝ | 0.23 ± 0.01 (0.23) |  |  |" in text  # seeds 0.2, 0.25, 0.225: standard error 0.014
    assert text.splitlines()[0] == "| model | L = 256 | L = 1024 | L = 4096 |"


def test_table2_paper_scale_is_the_papers_protocol():
    from seqdyn.reproduce import dlr_shift_length as table2

    runs = [config for sweep in table2.REPRODUCTION.sweeps("paper") for config in sweep.expand()]
    by_label = {}
    for config in runs:
        by_label.setdefault(
            (
                config.model.mixer_options.get("prod", False),
                config.model.mixer_options.get("real", False),
                config.model.mixer_options.get("state_dim"),
            ),
            set(),
        ).add((config.task.params["seq_len"], config.optimizer.lr, config.train.batch_size, config.model.d_model))
    assert by_label[(False, True, 4096)] == {(256, 1e-5, 4, 32)}
    assert {length for length, *_ in by_label[(True, False, 4096)]} == {2**14, 2**16, 2**18, 2**20}
    assert {lr for _, lr, *_ in by_label[(False, False, 512)]} == {1e-5}
    assert {config.train.steps for config in runs} == {86_000}


def assert_select_fixed_pilot(pilot_file: str, mixer_options: dict | None = None) -> dict:
    """The pilot's runs at lr 1e-4 are the cpu scale's two DLR runs on SELECT-FIXED with ``mixer_options`` undone
    and the budget aside (10,000 steps instead of 1,500, evaluated every 500); at lr 1e-3 the same. Returns those
    cpu runs by (mixer, task, lr, seed)."""
    pilot, cpu = pilot_and_scale_runs(pilot_file, table1.REPRODUCTION)
    key = ("model.mixer", "task.name", "optimizer.lr", "train.seed")
    expected = {
        k: run
        for k, run in runs_by_key(cpu, key=key, mixer_options=mixer_options).items()
        if k[:3] == ("dlr", "select_fixed", 1e-4)
    }
    undone = runs_by_key(pilot, train=dict(steps=1_500, eval_every=250), key=key)
    assert {k: run for k, run in undone.items() if k[2] == 1e-4} == expected and len(expected) == 2
    higher = {
        k[:2] + (1e-4,) + k[3:]: {**run, "optimizer": {**run["optimizer"], "lr": 1e-4}}
        for k, run in undone.items()
        if k[2] == 1e-3
    }
    assert higher == expected
    return expected


def test_select_fixed_pilot_is_the_cpu_scale_dlr_runs_but_its_budget():
    """examples/pilots/dlr_select_fixed_longer.yaml: the cpu scale's two DLR runs on SELECT-FIXED at 10,000 steps,
    and the same at lr 1e-3; it ran before the DLR runs took Table 7's initialization, so without it."""
    assert_select_fixed_pilot("dlr_select_fixed_longer.yaml", mixer_options={"r_range": None})


def test_select_fixed_table7_pilot_is_the_cpu_scale_dlr_runs_but_its_budget():
    """examples/pilots/dlr_select_fixed_table7.yaml: the same with the cpu runs' Table 7 initialization kept."""
    expected = assert_select_fixed_pilot("dlr_select_fixed_table7.yaml")
    assert all(run["model"]["mixer_options"]["r_range"] == [1e-5, 1e-5] for run in expected.values())


def test_select_fixed_is_decided_on_the_pilots_dlr_at_lr_1e_3_and_10_000_steps():
    """At cpu the claim reads a DLR layer of its own: the table7 pilot's run at lr 1e-3, evaluated every 250 steps
    instead of 500 and on a fresh batch every step (the protocol's rule; the pilot reused the 1,500 steps' 24,000
    examples); the Table 1 runs keep the paper's 1e-4, and without the extra run the claim reads them."""
    pilot, cpu = pilot_and_scale_runs("dlr_select_fixed_table7.yaml", table1.REPRODUCTION)
    key = ("model.mixer", "task.name", "optimizer.lr", "train.seed")
    extra = [sweep for sweep in table1.REPRODUCTION.sweeps("cpu") if sweep.name == "select_fixed-dlr_fast"]
    assert len(extra) == 1 and {config.train.steps for config in extra[0].expand()} == {10_000}
    fast = {k: run for k, run in runs_by_key(cpu, key=key).items() if k[2] == 1e-3 and k[0] == "dlr"}
    piloted = {k: run for k, run in runs_by_key(pilot, train=dict(eval_every=250), key=key).items() if k[2] == 1e-3}
    for run in piloted.values():
        run["task"]["train_examples"] = 10_000 * 16
    assert fast == piloted and len(fast) == 2
    assert not any(s.name.startswith("select_fixed") for s in table1.REPRODUCTION.sweeps("paper"))
    claim = named_claim("DLR solves SELECT-FIXED")
    slow = table({"select_fixed": {"dlr": (0.04, 0.05)}})
    fast_rows = [
        {**r, "name": r["name"].replace("table1-dlr", "select_fixed-dlr_fast")}
        for r in table({"select_fixed": {"dlr": (0.961, 0.959)}}).rows
    ]
    both = type(slow)(scale=slow.scale, rows=slow.rows + tuple(fast_rows))
    assert claim.decide(both).verdict == HELD and claim.decide(slow).cause == "budget"


def named_claim(name: str):
    return next(claim for claim in table1.CLAIMS if claim.name == name)


SHIFT_PAPERLIKE = {
    "dlr_real": {256: (0.2, 0.25, 0.225)},  # at R² ≤ 0.5 on its interval (0.225 ± 0.062)
    "dlr": {256: (0.99, 0.98), 1024: (0.8, 0.8), 4096: (0.8, 0.85)},
    "dlr_prod": {256: (1.0, 1.0), 4096: (1.0, 0.99)},
    "dlr_small_n": {256: (0.9, 0.9), 1024: (0.3, 0.3), 4096: (0.3, 0.3)},
    "dss_exp": {256: (0.99, 0.99), 4096: (0.7, 0.7)},
}


@pytest.mark.parametrize(
    ("claim", "changed", "verdict"),
    [
        # "failed on SHIFT": DLR-ℝ ≤ 0.5 at the shortest length, where the control, DLR, reaches 0.9
        ("DLR-ℝ fails SHIFT", {"dlr_real": {256: (0.49, 0.49)}}, HELD),
        ("DLR-ℝ fails SHIFT", {"dlr_real": {256: (0.51, 0.51)}}, FAILED),
        ("DLR-ℝ fails SHIFT", {"dlr": {256: (0.89, 0.89), 4096: (0.8, 0.85)}}, INCONCLUSIVE),
        ("DLR-ℝ fails SHIFT", {"dlr": {256: (0.91, 0.91), 4096: (0.8, 0.85)}}, HELD),
        # "significantly": 0.1 at the longest length
        ("DLR-prod beats DLR", {"dlr_prod": {4096: (0.91, 0.91)}, "dlr": {256: (0.99, 0.98), 4096: (0.8, 0.8)}}, HELD),
        (
            "DLR-prod beats DLR",
            {"dlr_prod": {4096: (0.89, 0.89)}, "dlr": {256: (0.99, 0.98), 4096: (0.8, 0.8)}},
            FAILED,
        ),
        # "reduced performance": 0.1 where N/L = 1/4 (L = 1024 for N = 256), whatever the longest length shows
        ("small N degrades", {"dlr_small_n": {1024: (0.69, 0.69), 4096: (0.8, 0.8)}}, HELD),
        ("small N degrades", {"dlr_small_n": {1024: (0.71, 0.71), 4096: (0.3, 0.3)}}, FAILED),
    ],
)
def test_dlr_shift_length_claims_just_above_and_below_their_thresholds(claim, changed, verdict):
    """Table 2's claims one cell past R² 0.5 / 0.9 or the margin 0.1 (the paper-like picture elsewhere)."""
    data, table2 = shift_table({**SHIFT_PAPERLIKE, **changed})
    assert_verdict(table2.CLAIMS, claim, data, verdict)


@pytest.mark.parametrize(
    ("claim", "changed", "reason"),
    [
        ("DLR-prod beats DLR", {"dlr_prod": {256: (1.0, 1.0), 4096: (0.01, 0.02)}}, "budget: DLR-prod best seed"),
        (
            "small N degrades",
            {"dlr": {256: (0.99, 0.98), 1024: (0.02, 0.03), 4096: (0.8, 0.85)}},
            "budget: DLR best seed",
        ),
    ]
    + [
        (claim, {"dlr": {256: (0.03, 0.04), 4096: (0.8, 0.85)}}, "control DLR 0.035 < 0.9")
        for claim in ("DLR-ℝ fails SHIFT", "DLR-prod beats DLR", "small N degrades")
    ],
)
def test_dlr_shift_length_claims_need_the_model_that_must_learn_off_r2_0(claim, changed, reason):
    """Each claim's control (DLR solves SHIFT at the shortest length) and the plateau of the model it needs to
    learn."""
    data, table2 = shift_table({**SHIFT_PAPERLIKE, **changed})
    outcome = next(c for c in table2.CLAIMS if c.name == claim).decide(data)
    assert outcome.verdict == INCONCLUSIVE and outcome.reason.startswith(reason), outcome
