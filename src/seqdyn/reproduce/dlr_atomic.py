"""Gupta et al. 2022 (DLR), Table 1: single DLR, DSS-EXP and ATTENTION layers on the eleven atomic tasks.

"To compare attention-based contextualization to SSMs, we trained single DLR, DSS_EXP and ATTENTION layers on the
atomic tasks described in §3.1" (§3.3), reporting R² per task; the paper's conclusions: SSM layers are "highly
effective on tasks like SHIFT and CUMSUM", "fail on tasks such a REVERSE", on SELECT and on CONTEXTSHIFT, reach
"perfect performance" on SELECT-FIXED; "DLR performs as good as or better than DSS_EXP"; a single ATTENTION layer
"is more expressive than a single SSM layer" on CUMMAX and MIPS.  The protocol is
:mod:`seqdyn.reproduce.protocols.atomic`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from seqdyn.reproduce.base import Reproduction, Results
from seqdyn.reproduce.claims import BEST_SCORE, Claim, Control, Outcome, at_least, at_most, every, reaches, weakest
from seqdyn.reproduce.protocols.atomic import (
    MODELS,
    PAPER_R2,
    SMOKE,
    TASK_LABELS,
    TASKS,
    Budget,
    atomic_sweeps,
    plot_r2_grid,
    present,
    r2_plateau,
    r2_table,
)
from seqdyn.reproduce.protocols.atomic import score as r2
from seqdyn.train.config import SweepConfig

#: "highly effective", "perfect performance": R² of at least 0.9 on every seed
SOLVED = 0.9
#: "fail": R² of at most 0.2 on every seed
FAILS = 0.2
#: "as good as or better than": DLR no more than 0.05 below DSS-EXP
AS_GOOD = -0.05
#: "more expressive": ATTENTION at least 0.2 above DLR
MORE_EXPRESSIVE = 0.2
SINGLE_LAYER = ("dlr", "dss_exp", "attention")
#: the tasks whose manipulation depends on the input itself, or needs more kernels than one layer has (§3.3)
CONTEXT_DEPENDENT = ("reverse", "select", "context_shift")
#: the model that shows each of them can be learnt, from Table 1's deeper columns (L = 2^9): DLR with 6 layers on
#: REVERSE (.95), ATTENTION with 2 layers on SELECT (.97)
LEARNERS = {"reverse": "dlr_6", "select": "attention_2"}
#: CONTEXTSHIFT has no such model: no column of Table 1 learns it (.11 at best, DLR with 6 layers at L = 2^9), so a
#: control asking a model to learn it could never pass, and the claim would stay inconclusive by construction.  Its
#: claim is therefore encoded as agreement with Table 1's numbers — every SSM layer at R² ≤ FAILS where Table 1
#: prints 0 — and its control is the task it is the context-dependent version of ("SSMs fail on CONTEXTSHIFT which
#: is a context-dependent version of SHIFT"): the same SSM layers reach R² ≥ SOLVED on SHIFT (Table 1: 1, .99) at the
#: same budget, so that a failure on CONTEXTSHIFT is not a layer that does not train.  What it cannot show, as
#: Table 1 cannot: that another layer learns CONTEXTSHIFT where the SSMs fail.  Fixed before any re-decision.
#: task → (its context-free version, the best R² of any model of Table 1 on the task)
CONTEXT_FREE = {"context_shift": ("shift", 0.11)}

#: the model and budget "DLR solves SELECT-FIXED" is decided on at ``cpu``, fixed before the run from the pilots
#: (examples/pilots/dlr_select_fixed_table7.yaml, 2026-11-28, 865f17b): from Table 7's initialization, DLR at the
#: paper's lr 1e-4 reached R² 0.04 after 1,500 steps and 0.38-0.43 after 10,000, still rising as slowly as the
#: paper's 40,000 steps suggest; at lr 1e-3 (the other layers' rate in Table 7) 0.72-0.78 at step 4,000, 0.947 at
#: 8,000 and 0.96 at 10,000.  The claim is about what the layer can express, which a faster rate does not change;
#: the paper's own rate stays in the Table 1 runs, where every comparison between layers is read
SELECT_FIXED_MODEL, SELECT_FIXED_STEPS = "dlr_fast", 10_000

#: the ``gpu`` scale, fixed before any run: Table 1's budget for its deeper columns (Table 7's row for L = 2^9: batch
#: 64, 11K steps, H = 128, N = 4096) for every model, on the tasks of the claims the cpu scale left to their controls
#: (REVERSE, SELECT, CONTEXTSHIFT) and SHIFT, CONTEXTSHIFT's control
GPU_TASKS = ("shift", "reverse", "select", "context_shift")
GPU_BUDGET = Budget(seq_len=512, width=128, state_dim=4096, batch_size=64, steps=11_000, eval_every=500)
#: the ``gpu`` scale's reason, shared with dlr_context (whose runs of it are a subset of these)
GPU_REASON = (
    "Table 1's budget for its deeper columns (Table 7's row for L = 2^9: batch 64, 11K steps) for every model, "
    "at the paper's width H = 128 and state size N = 4,096, three seeds (the seed loop adds more while a claim's "
    "seeds leave it open), the paper's learning rates (the 6-layer DLR keeps 1e-4, Table 7's rate at 2^12, where "
    "its 2^9 row has 5e-5), R² the best evaluation on 1,024 fresh examples. What differs from the paper: L = 2^9 "
    "instead of 2^12 for the single layers, whose Table 1 column is at 2^12. Why it should decide the claims: the "
    "cpu scale (1,000-1,500 steps at L = 2^8, H = 64) left them to their controls, which Table 1 reports at 2^9 "
    "after 11K steps — the 6-layer DLR at .95 on REVERSE, the 2-layer ATTENTION at .97 on SELECT — so this is the "
    "budget at which the paper itself shows the tasks learnable; the SSM layers' failures, near R² 0 at every "
    "length in Table 1, are read on the same budget"
)
#: the ``gpu`` scale's H200 estimate in words, its minutes left to fill in: the paper scale's timed steps (1.8-7 h for
#: Table 1's 35 runs of 40K steps at L = 2^12 and batch 16, as many tokens a step as REVERSE's 2L = 2^10 at batch 64)
GPU_ESTIMATE = (
    "Estimated {minutes} min on one H200 one run at a time, from the paper scale's timed steps (Table 1's runs at "
    "4.6-18 ms a step): a single layer at 5 ms a step, the 6-layer DLR at 20 ms, the 2-layer ATTENTION at 8 ms"
)

SCALES = {
    "paper": dict(tasks=TASKS, seeds=(0,), budget=Budget()),
    "cpu": dict(
        tasks=TASKS,
        seeds=(0, 1),
        budget=Budget(seq_len=256, width=64, state_dim=256, steps=1500, test_examples=256, eval_every=250),
    ),
    "gpu": dict(tasks=GPU_TASKS, seeds=(0, 1, 2), budget=GPU_BUDGET),
    "smoke": dict(
        tasks=("shift", "reverse", "select_fixed", "select", "context_shift", "mips"), seeds=(0,), budget=SMOKE
    ),
}
#: the single layers per scale (the ``gpu`` scale trains the SSM layers alone: no claim it decides reads ATTENTION's)
LAYERS = {"gpu": ("dlr", "dss_exp")}


def _tasks(results: Results, wanted: tuple[str, ...]) -> list[str]:
    return [task for task in wanted if task in present(results)[0]]


def _ssms(results: Results) -> list[str]:
    """The SSM layers the results hold (a reduced reproduction may train DLR alone)."""
    return [model for model in ("dlr", "dss_exp") if model in present(results)[1]]


def _ssms_solve(results: Results) -> Outcome:
    return every(
        {
            f"{MODELS[model].label} {TASK_LABELS[task]}": reaches(r2(results, model, task), SOLVED)
            for model in _ssms(results)
            for task in _tasks(results, ("shift", "cumsum"))
        }
    )


def _ssms_fail(task: str):
    def test(results: Results) -> Outcome:
        if task not in present(results)[0]:
            return every({})
        return every(
            {
                f"{MODELS[model].label} {TASK_LABELS[task]}": at_most(r2(results, model, task), FAILS)
                for model in _ssms(results)
            }
        )

    return test


def learner_control(task: str) -> Control:
    """The positive control of "SSMs fail ``task``": the model of :data:`LEARNERS` reaches R² ≥ ``SOLVED`` on it;
    for a task of :data:`CONTEXT_FREE`, :func:`context_free_control`."""
    if task in CONTEXT_FREE:
        return context_free_control(task)
    learner = LEARNERS[task]
    return Control(
        f"{MODELS[learner].label} on {TASK_LABELS[task]} reaches R² {SOLVED} (Table 1: {PAPER_R2[task][learner]:g})",
        lambda results: r2(results, learner, task),
        SOLVED,
    )


def context_free_control(task: str) -> Control:
    """The positive control of "SSMs fail ``task``" where no model of Table 1 learns ``task``: every SSM layer the
    results hold reaches R² ≥ ``SOLVED`` on the task's context-free version (:data:`CONTEXT_FREE`)."""
    free, best = CONTEXT_FREE[task]
    paper = ", ".join(f"{MODELS[model].label} {PAPER_R2[free][model]:g}" for model in ("dlr", "dss_exp"))
    return Control(
        f"the SSM layers reach R² {SOLVED} on {TASK_LABELS[free]}, {TASK_LABELS[task]}'s context-free version "
        f"(Table 1: {paper}; no model of Table 1 learns {TASK_LABELS[task]}, {best:g} at best)",
        lambda results: weakest([r2(results, model, free) for model in _ssms(results)] or [r2(results, "dlr", free)]),
        SOLVED,
    )


def trains_control(model: str, task: str) -> Control:
    """The positive control of a comparison of trained layers: ``model`` (one layer) reaches R² ≥ ``SOLVED`` on
    ``task``, which Table 1 says it solves — the layer trains at the scale's budget."""
    return Control(
        f"{MODELS[model].label}, one layer, on {TASK_LABELS[task]} reaches R² {SOLVED} (Table 1: "
        f"{PAPER_R2[task][model]:g})",
        lambda results: r2(results, model, task),
        SOLVED,
    )


def learner_sweeps(part: str, tasks: Sequence[str], seeds: Sequence[int], budget: Budget) -> list[SweepConfig]:
    """The controls' runs: each learner of :data:`LEARNERS` on the context-dependent ``tasks`` it stands for."""
    by_learner: dict[str, list[str]] = {}
    for task in tasks:
        if task in LEARNERS:
            by_learner.setdefault(LEARNERS[task], []).append(task)
    return [
        sweep
        for learner, its_tasks in by_learner.items()
        for sweep in atomic_sweeps(part, (learner,), its_tasks, seeds, budget)
    ]


def select_fixed_dlr(results: Results) -> str:
    """The DLR layer "DLR solves SELECT-FIXED" reads: the one trained for it (:data:`SELECT_FIXED_MODEL`) where the
    results hold it, else the Table 1 layer."""
    return SELECT_FIXED_MODEL if SELECT_FIXED_MODEL in present(results)[1] else "dlr"


def _dlr_solves_select_fixed(results: Results) -> Outcome:
    model = select_fixed_dlr(results)
    return every(
        {TASK_LABELS[task]: reaches(r2(results, model, task), SOLVED) for task in _tasks(results, ("select_fixed",))}
    )


def select_fixed_sweeps(seeds: Sequence[int], budget: Budget, **_: object) -> list[SweepConfig]:
    """The run "DLR solves SELECT-FIXED" is decided on at ``cpu``: :data:`SELECT_FIXED_MODEL` on SELECT-FIXED for
    :data:`SELECT_FIXED_STEPS` steps."""
    longer = dataclasses.replace(budget, steps=SELECT_FIXED_STEPS)
    return atomic_sweeps("select_fixed", (SELECT_FIXED_MODEL,), ("select_fixed",), seeds, longer)


def _dlr_as_good_as_dss(results: Results) -> Outcome:
    """DLR ≥ DSS-EXP + ``AS_GOOD`` on every task, without the ceiling rule: two means within ``PLATEAU_MARGIN`` of
    R² 1 already differ by no more than ``AS_GOOD``, so a task both layers solve (Table 1's SHIFT and CUMSUM) shows
    DLR as good as DSS-EXP rather than hiding a difference."""
    return every(
        {
            TASK_LABELS[task]: at_least(r2(results, "dlr", task), r2(results, "dss_exp", task), AS_GOOD)
            for task in present(results)[0]
        }
    )


def _attention_more_expressive(results: Results) -> Outcome:
    return every(
        {
            TASK_LABELS[task]: at_least(
                r2(results, "attention", task), r2(results, "dlr", task), MORE_EXPRESSIVE, ceiling=BEST_SCORE
            )
            for task in _tasks(results, ("cummax", "mips"))
        }
    )


def _learning(models: Callable[[Results], Sequence[str]], tasks: tuple[str, ...]):
    """The scores a claim needs to have left the plateau: each of ``models(results)`` on each of ``tasks``."""
    return r2_plateau(
        lambda results: [r2(results, model, task) for model in models(results) for task in _tasks(results, tasks)]
    )


#: the layers Table 1's claims about SSMs are said of
SSM_LAYERS = "SSM layers (DLR, DSS-EXP)"
#: what the paper says of each task the SSM layers fail, and its numbers (DLR, DSS-EXP)
FAIL_QUOTES = {
    "reverse": ("they fail on tasks such a REVERSE that potentially require a large number of kernels", ".01, 0"),
    "select": ("Similarly, they fail on SELECT where [...] the value of these shifts is context-dependent", "0, 0"),
    "context_shift": ("Similarly, SSMs fail on CONTEXTSHIFT which is a context-dependent version of SHIFT", "0, 0"),
}


def _verb(plural: bool, plural_form: str, singular_form: str) -> str:
    return plural_form if plural else singular_form


def ssms_solve_claim(label: str = SSM_LAYERS, plural: bool = True) -> Claim:
    """ "SSM layers are highly effective on SHIFT and CUMSUM", said of ``label`` (``plural``: several layers): every
    SSM layer the results hold reaches R² ≥ ``SOLVED`` on both."""
    return Claim(
        "SSMs solve SHIFT, CUMSUM",
        f"{label} {_verb(plural, 'reach', 'reaches')} R² ≥ {SOLVED} on SHIFT and CUMSUM",
        "SSM layers (DLR, DSS_EXP) are highly effective on tasks like SHIFT and CUMSUM that can be described "
        "via a small number of convolutional kernels",
        _ssms_solve,
        paper_value="DLR 1, 1; DSS-EXP .99, 1",
        plateau=_learning(_ssms, ("shift", "cumsum")),
    )


def ssms_fail_claim(task: str, label: str = SSM_LAYERS, plural: bool = True) -> Claim:
    """ "SSMs fail ``task``", said of ``label``: every SSM layer the results hold stays at R² ≤ ``FAILS`` on it, where
    the task's learner (:data:`LEARNERS`) learns it."""
    quote, paper_value = FAIL_QUOTES[task]
    agreement = (
        ""
        if task not in CONTEXT_FREE
        else f", as in Table 1 (0), where no model learns it ({CONTEXT_FREE[task][1]:g} at best): agreement with "
        "Table 1's numbers, with the layer learning the context-free task as its control"
    )
    return Claim(
        f"SSMs fail {TASK_LABELS[task]}",
        f"{label} {_verb(plural, 'stay', 'stays')} at R² ≤ {FAILS} on {TASK_LABELS[task]}{agreement}",
        quote,
        _ssms_fail(task),
        paper_value=paper_value,
        control=learner_control(task),
    )


def attention_beats_claim(label: str = "DLR") -> Claim:
    """ "A single ATTENTION layer is more expressive than a single SSM layer on CUMMAX and MIPS", said of the DLR layer
    (``label``): ATTENTION at least ``MORE_EXPRESSIVE`` above it on both."""
    return Claim(
        "attention beats SSMs on CUMMAX, MIPS",
        f"ATTENTION ≥ {label} + {MORE_EXPRESSIVE} on CUMMAX and MIPS",
        "there are tasks such as CUMMAX and MIPS on which a single ATTENTION layer is more expressive than a "
        "single SSM layer",
        _attention_more_expressive,
        paper_value="1 vs .52; .90 vs 0",
        control=trains_control("attention", "cumsum"),
        plateau=_learning(lambda results: ["attention"], ("cummax", "mips")),
    )


CLAIMS = (
    ssms_solve_claim(),
    ssms_fail_claim("reverse"),
    ssms_fail_claim("select"),
    ssms_fail_claim("context_shift"),
    Claim(
        "DLR solves SELECT-FIXED",
        f"DLR reaches R² ≥ {SOLVED} on SELECT-FIXED (at cpu: at lr 1e-3 for {SELECT_FIXED_STEPS:,} steps, "
        "where the paper's 1e-4 needs its 40,000)",
        "the perfect performance of DLR on SELECT-FIXED in which the value of the shifts does not change with the "
        "inputs",
        _dlr_solves_select_fixed,
        paper_value=".97",
        plateau=_learning(lambda results: [select_fixed_dlr(results)], ("select_fixed",)),
    ),
    Claim(
        "DLR ≥ DSS-EXP",
        f"DLR ≥ DSS-EXP {AS_GOOD:+} on every task",
        "in all experiments DLR performs as good as or better than DSS_EXP",
        _dlr_as_good_as_dss,
        control=trains_control("dlr", "shift"),
    ),
    attention_beats_claim(),
)


class AtomicTable1(Reproduction):
    name = "dlr_atomic"
    paper = "Gupta et al. 2022 (DLR)"
    figure = "Table 1"
    summary = (
        "Single DLR, DSS-EXP and ATTENTION layers on the eleven atomic tasks: R² (best evaluation, mean over "
        "seeds ± its standard error), the paper's in parentheses."
    )
    claims = CLAIMS
    reductions = {
        "paper": "The paper's Table 1 (single layers) and Table 7: L = 2^12, H = 128, N = 4096, batch 16, 40K steps, "
        "constant learning rate 1e-4 (DLR) or 1e-3 (DSS-EXP, ATTENTION), weight decay 0, post-norm "
        "LayerNorm, one seed.",
        "cpu": "L = 2^8 instead of 2^12 with the state size N = L as in the paper (N = 256), width H = 64 instead of "
        "128, 1,500 steps instead of 40K (batch 16, the paper's learning rates, constant); two seeds to "
        "start, more until the interval rule decides. Measured first at L = 256 (one seed, 1,000 "
        "steps): DLR reached R² 0.995 on SHIFT and 0.997 on CUMSUM and stayed at 0.02 on REVERSE, ATTENTION "
        "reached 0.99 on CUMMAX and 0.83 on MIPS; but DLR on SELECT-FIXED was at 0.04 after 3,000 steps "
        "(0.39 with a ten times larger learning rate), so SELECT-FIXED needs far more steps than this scale "
        "has: its claim is decided on a DLR layer of its own at lr 1e-3 for 10,000 steps (two seeds), which the "
        "pilots showed reaches R² 0.96 (the paper's 1e-4 reached 0.38-0.43 in as many steps). Our R² is the best "
        "evaluation on 256 fresh test examples, where the paper averages over its "
        "evaluation batches. The claims that SSMs fail REVERSE and SELECT each have a control from Table 1's "
        "deeper columns on that task alone (DLR with 6 layers on REVERSE, ATTENTION with 2 layers on SELECT), "
        "on the same budget. No column of Table 1 learns CONTEXTSHIFT (.11 at best), so its claim is agreement "
        "with Table 1's numbers, its control the SSM layers learning SHIFT, the task it is the context-dependent "
        "version of.",
        "gpu": GPU_REASON + ". The single layers are DLR and DSS-EXP on SHIFT, REVERSE, SELECT and CONTEXTSHIFT; "
        "the controls the 6-layer DLR on REVERSE and the 2-layer ATTENTION on SELECT. The claims the cpu scale "
        "decides (SHIFT and CUMSUM solved, SELECT-FIXED on its own DLR layer, ATTENTION on CUMMAX and MIPS) are "
        "not retrained: they read inconclusive (missing) or on fewer tasks here, and their cpu verdicts stand. "
        + GPU_ESTIMATE.format(minutes=40)
        + ": 24 single-layer runs (22 min), 3 of the 6-layer DLR (11 min) and 3 of the 2-layer ATTENTION (4 min), "
        "less with runs sharing the device.",
        "smoke": "The whole pipeline on six tasks at L = 16, H = 16, N = 8, 4 steps: no verdict to trust.",
    }
    gpu_minutes = 40

    def sweeps(self, scale: str) -> list[SweepConfig]:
        extra = select_fixed_sweeps(**SCALES[scale]) if scale == "cpu" else []
        layers = LAYERS.get(scale, SINGLE_LAYER)
        return atomic_sweeps("table1", layers, **SCALES[scale]) + learner_sweeps("control", **SCALES[scale]) + extra

    def table(self, results: Results) -> str:
        return (
            r2_table(results) + "\n\nR² per task; the paper's Table 1 (L = 2^12) in parentheses. Inputs of "
            "REVERSE and SORT are 2L long."
        )

    def plot(self, results: Results, path: Path) -> Path:
        return plot_r2_grid(results, path, "Gupta et al. 2022, Table 1: R² of single layers")


REPRODUCTION = AtomicTable1()
