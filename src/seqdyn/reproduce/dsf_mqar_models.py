"""Sieber et al. 2024 (the DSF paper), Fig. 2 and Fig. 5: softmax, linear and normalized attention, S6 and SSD on MQAR.

"we compare S6 and softmax attention to SSD, linear attention, and normalized attention on the multi-query
associative recall (MQAR) benchmark" (§4.2) over the model size d and the state expansion n, best of the
learning-rate grid; Fig. 2 is the task {L = 512, KV-pairs = 64} at n = 128, Fig. 5 all four tasks
{64, 4}, {128, 8}, {256, 16}, {512, 64} over d ∈ {64, 128, 256, 512} and n ∈ {32, 64, 128, 256}.  Normalized
attention is eq. (21): linear attention divided by a learnt normalizer η_i = exp(W_η u_i) of the current input
instead of the sum of its scores (``seqdyn/mixers/normalized_attention.py``).  SSD is the bare S6 block with
dt_rank 1 and one learned scalar A (``seqdyn/mixers/ssd.py``), as the authors ran it.
"""

from __future__ import annotations

from pathlib import Path

from seqdyn.analysis.plots import plot_bars
from seqdyn.reproduce.base import Reproduction, Results
from seqdyn.reproduce.claims import BEST_SCORE, Claim, Outcome, Plateau, Score, at_least, every, within
from seqdyn.reproduce.protocols.zoology import (
    CPU_MODEL_REASON,
    EARLY_STOP,
    PAPER_LRS,
    PAPER_STATES,
    PAPER_TASKS,
    PAPER_TRAIN,
    PAPER_WIDTHS,
    SMOKE,
    SMOKE_GRID,
    STATE,
    TASK_KEYS,
    ZOOLOGY_INIT_WORDS,
    Budget,
    bar_panels,
    compared_plateau,
    cpu_budget,
    escape_table,
    escape_words,
    grid_table,
    mqar_sweeps,
    rows_of,
    softmax_control,
    softmax_solves,
    task_label,
    tasks_of,
)
from seqdyn.train.config import SweepConfig

MODELS = {
    "softmax_attention": "softmax",
    "linear_attention": "linear",
    "normalized_attention": "normalized",
    "s6": "S6",
    "ssd": "SSD",
}
ORDER = ("softmax_attention", "linear_attention", "normalized_attention", "s6", "ssd")
CELL_KEYS = ("model.d_model", STATE)
#: "outperforms": normalized attention above linear attention by at least 5 points of accuracy on every task
NORMALIZED_MARGIN = 0.05
#: "on par": normalized attention and S6 within 5 points, averaged over the tasks
ON_PAR = 0.05
#: the cpu scale's cell for "normalized > linear", fixed before its run: at {64, 4} linear attention reached 0.96
#: (0.99, 0.90, 0.99 by seed; 2026-11-28, 64f00cd), so normalized attention could not score 0.05 above it there.
#: Fig. 5's next task, {128, 8}, at the same d = 64 and n = 32, with softmax attention as its control; two seeds
#: (more where the budget allows), and linear attention only there, since no other claim reads it
HARDER_TASK = (128, 8)
HARDER_MODELS = ("softmax_attention", "linear_attention", "normalized_attention")

#: the number of steps of the paper's 64 epochs over 100,000 examples at its batch size for L (512 at L = 64, 256 at
#: L = 128): what the ``gpu`` scale trains at its own batch 64 on each task
GPU_STEPS = {64: 12_500, 128: 25_000}

SCALES = {
    "paper": dict(
        tasks=PAPER_TASKS, widths=PAPER_WIDTHS, states=PAPER_STATES, lrs=PAPER_LRS, seeds=(0,), budget=Budget()
    ),
    "cpu": dict(
        tasks=((64, 4),),
        widths=(64,),
        states=(32,),
        lrs=(PAPER_LRS[2],),
        seeds=(0, 1, 2),
        budget=cpu_budget(5000, train_examples=PAPER_TRAIN),
    ),
    # the cpu scale's cells and rate for the paper's number of steps on each task (GPU_STEPS), fixed before any run
    "gpu": dict(
        tasks=((64, 4),),
        widths=(64,),
        states=(32,),
        lrs=(PAPER_LRS[2],),
        seeds=(0, 1, 2, 3, 4),
        budget=cpu_budget(GPU_STEPS[64], train_examples=PAPER_TRAIN),
    ),
    "smoke": dict(SMOKE_GRID, budget=SMOKE, states=(8,)),
}
#: how the cpu and gpu scales train ``HARDER_TASK`` where it differs from their ``SCALES``: the seeds, and at gpu the
#: paper's number of steps at L = 128
HARDER = {
    "cpu": dict(seeds=(0, 1)),
    "gpu": dict(seeds=(0, 1, 2), budget=cpu_budget(GPU_STEPS[HARDER_TASK[0]], train_examples=PAPER_TRAIN)),
}


def _score(results: Results, mixer: str, task: tuple[int, int] | None = None) -> Score:
    """One mixer's accuracy (on one task, else on all): per seed, the best over the learning rates in each
    (task, d, n) cell, averaged over the cells."""
    return results.score(MODELS[mixer], rows_of(results, mixer, task), cells=TASK_KEYS + CELL_KEYS)


def _shared_tasks(results: Results, mixer: str, other: str) -> list[tuple[int, int]]:
    """The tasks both ``mixer`` and ``other`` were trained on, in order."""
    return [task for task in tasks_of(results) if rows_of(results, mixer, task) and rows_of(results, other, task)]


def _score_on_shared_tasks(results: Results, mixer: str, other: str) -> Score:
    """``mixer``'s accuracy averaged over the tasks ``other`` was trained on too (a comparison averaged over tasks
    reads both on the same ones)."""
    rows = [row for task in _shared_tasks(results, mixer, other) for row in rows_of(results, mixer, task)]
    return results.score(MODELS[mixer], rows, cells=TASK_KEYS + CELL_KEYS)


def _control_where(mixer: str, other: str):
    """Softmax attention's control on the tasks where ``mixer`` and ``other`` are compared."""
    return softmax_control(lambda results: _shared_tasks(results, mixer, other))


def _normalized_beats_linear(results: Results) -> Outcome:
    return every(
        {
            task_label(task): at_least(
                _score(results, "normalized_attention", task),
                _score(results, "linear_attention", task),
                NORMALIZED_MARGIN,
                ceiling=BEST_SCORE,
            )
            for task in tasks_of(results)
            if rows_of(results, "linear_attention", task)
        }
    )


def _normalized_on_par_with_s6(results: Results) -> Outcome:
    return within(
        _score_on_shared_tasks(results, "normalized_attention", "s6"),
        _score_on_shared_tasks(results, "s6", "normalized_attention"),
        ON_PAR,
        ceiling=BEST_SCORE,
    )


def _ssd_at_least_s6(results: Results) -> Outcome:
    return at_least(
        _score_on_shared_tasks(results, "ssd", "s6"),
        _score_on_shared_tasks(results, "s6", "ssd"),
        0.0,
        ceiling=BEST_SCORE,
    )


def _plateau(*mixers: str, per_task: bool) -> Plateau:
    """MQAR's plateau for ``mixers``: per task, or averaged over the tasks where the first two are compared."""
    shared = None if per_task else (lambda results: _shared_tasks(results, *mixers[:2]))
    return compared_plateau(_score, *mixers, per_task=per_task, tasks=shared)


CLAIMS = (
    Claim(
        "normalized > linear",
        f"normalized attention ≥ linear attention + {NORMALIZED_MARGIN} on every task",
        "While Figure 2 shows that normalized attention outperforms standard linear attention, Figure 5 shows an "
        "even more significant performance gap.",
        _normalized_beats_linear,
        control=_control_where("normalized_attention", "linear_attention"),
        plateau=_plateau("normalized_attention", "linear_attention", per_task=True),
    ),
    Claim(
        "normalized ≈ S6",
        f"|normalized attention − S6| ≤ {ON_PAR}, averaged over the tasks",
        "normalized attention performs on par with S6",
        _normalized_on_par_with_s6,
        control=_control_where("normalized_attention", "s6"),
        plateau=_plateau("normalized_attention", "s6", per_task=False),
    ),
    Claim(
        "SSD ≥ S6",
        "SSD ≥ S6, averaged over the tasks",
        "we note that SSD slightly outperforms S6",
        _ssd_at_least_s6,
        control=_control_where("ssd", "s6"),
        plateau=_plateau("ssd", "s6", per_task=False),
    ),
    Claim(
        "softmax ≈ 100 %",
        f"softmax attention ≥ {EARLY_STOP} on every task (Zoology's early stop)",
        "softmax attention, which achieves perfect accuracy throughout (Fig. 1)",
        softmax_solves,
        paper_value="100 %",
    ),
)


class MqarModels(Reproduction):
    name = "dsf_mqar_models"
    paper = "Sieber et al. 2024 (DSF)"
    figure = "Fig. 2 / Fig. 5"
    summary = (
        "Softmax, linear and normalized attention, S6 and SSD on MQAR: accuracy (best over the learning-rate "
        "grid, mean over seeds ± its standard error) per task, model size d and state expansion n."
    )
    claims = CLAIMS
    reductions = {
        "paper": "The paper's protocol (appendix I.1): four tasks, d ∈ {64, 128, 256, 512}, n ∈ {32, 64, 128, 256}, "
        "lr ∈ logspace(−4, −2, 4), 64 epochs of 100,000 examples, 3,000 test examples, vocabulary 8,192, "
        "batch 512/256/128/64 by L, one seed; fillers stay 0 (random_non_queries: False, as every MQAR "
        "config of the authors); " + ZOOLOGY_INIT_WORDS + ".",
        "cpu": "One task, {64, 4}, at d = 64, n = 32, and for 'normalized > linear' the next, {128, 8}, with "
        "linear attention there only (at {64, 4} it reached 0.96, 2026-11-28, where nothing can be 0.05 above "
        "it; fixed before the run; two seeds, softmax attention as its control); 5,000 steps of batch 64 over the "
        "paper's 100,000 examples "
        "(1,000 test) and a vocabulary of 256 instead of 8,192; fillers 0 as the authors' configs; the "
        "authors' blocks (SSD: the bare S6 block with dt_rank 1 and one scalar A; normalized attention with "
        "its MLP); three seeds, since leaving the plateau is a matter of the seed. One learning rate of the "
        "paper's grid, 2.15e-3, chosen on a pilot of this scale's runs at its two largest rates on an H200 "
        "(`python examples/pilots/escape_steps.py dsf_mqar_models --steps 5000`, c33c722): at 0.01 none of "
        "the 12 runs of linear and normalized attention, S6 and SSD left the plateau, at 2.15e-3 7 of 12 "
        "did; softmax attention solved the task at both. A first attempt found that budgets below a few "
        "thousand steps decide nothing. And " + CPU_MODEL_REASON + ".",
        "gpu": "The cpu scale's tasks, cells, learning rate and batch, trained for the paper's number of steps: 64 "
        "epochs of 100,000 examples at the paper's batch for L (512 at L = 64, 256 at L = 128) are 12,500 steps on "
        "{64, 4} and 25,000 on {128, 8}, which at this batch of 64 are 8 epochs of the paper's examples instead of "
        "64; five seeds on {64, 4}, three on {128, 8} (the seed loop adds more while a claim's seeds leave it open). "
        "Why it should decide the claims: at the cpu scale's 5,000 steps leaving the plateau was a matter of the "
        "seed, and in the 10,000-step H200 pilot S6 left it between steps 4,000 and 5,500 in every run, linear "
        "attention by 2,250, normalized attention by 750 where it left at all; 12,500 steps lets each seed arrive "
        "and five seeds count how many do. The width (d = 64, n = 32), the vocabulary (256 instead of 8,192) and "
        "the one learning rate stay the cpu scale's, whose pilots measured them. Estimated 40 min on one H200 one "
        "run at a time: the H200 pilot ran 8 of these runs of 10,000 steps in 6.5 min (4.9 ms a step at L = 64); "
        "20 runs of 12,500 steps on {64, 4} and 9 of 25,000 on {128, 8} (taken at 6 ms a step) are about 40 min "
        "before early stops, less with runs sharing the device.",
        "smoke": "The whole pipeline on a toy MQAR (L = 16, 2 pairs, d = 16, 6 steps): no verdict to trust.",
    }
    gpu_minutes = 40

    def sweeps(self, scale: str) -> list[SweepConfig]:
        if scale not in HARDER:
            return mqar_sweeps("models", ORDER, **SCALES[scale])
        easier = tuple(model for model in ORDER if model != "linear_attention")
        harder = {**SCALES[scale], "tasks": (HARDER_TASK,), **HARDER[scale]}
        return mqar_sweeps("models", easier, **SCALES[scale]) + mqar_sweeps("models", HARDER_MODELS, **harder)

    def table(self, results: Results) -> str:
        """Fig. 5's grid: one row per (task, model, n), one column per model size d."""
        return (
            grid_table(results, MODELS, "model.d_model", "d", row_key=STATE)
            + "\n\nAccuracy in %. The paper prints Fig. 5 only as a figure; it gives no numbers in its text.\n\n"
            + escape_words(results)
            + "\n\n"
            + escape_table(results, MODELS)
        )

    def plot(self, results: Results, path: Path) -> Path:
        """Fig. 2's bars per task: accuracy per model size d, one bar per model (best over n and lr)."""
        return plot_bars(
            bar_panels(results, MODELS, "model.d_model"),
            path,
            xlabel="model size d",
            title="Sieber et al. 2024, Fig. 2/5: MQAR accuracy",
        )


REPRODUCTION = MqarModels()
