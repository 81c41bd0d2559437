"""Sieber et al. 2024 (the DSF paper), Fig. 1: linear against softmax attention on MQAR as the state expansion n grows.

"Since N = nd, this means that the larger the state expansion n, the more expressivity the architecture has – in
the case of softmax attention, n = ∞ (Lemma 1). To show expressivity with increasing n empirically, we compare
linear attention, for which it holds that n = m, and softmax attention on the MQAR. Figure 1 shows that with
larger state expansion linear attention converges to the performance of softmax attention, which achieves
perfect accuracy throughout." (§4.1).  Fig. 1: tasks {L = 256, KV-pairs = 16} and {L = 512, KV-pairs = 64}, d = 512,
best of the learning-rate grid.  Linear attention's n is the size of its feature map (``state_dim``).
"""

from __future__ import annotations

from pathlib import Path

from seqdyn.analysis.plots import plot_bars
from seqdyn.reproduce.base import Reproduction, Results
from seqdyn.reproduce.claims import BEST_SCORE, Claim, Outcome, Score, at_least, every, within
from seqdyn.reproduce.protocols.zoology import (
    CPU_MODEL_REASON,
    EARLY_STOP,
    PAPER_LRS,
    PAPER_STATES,
    PAPER_TRAIN,
    SMOKE,
    SMOKE_GRID,
    SOFTMAX_CONTROL,
    STATE,
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
    softmax_solves,
    task_label,
    tasks_of,
)
from seqdyn.train.config import SweepConfig

MODELS = {"softmax_attention": "softmax", "linear_attention": "linear"}
#: "converges to the performance of softmax attention": within 5 points of it at the largest n
CONVERGED = 0.05

SCALES = {
    "paper": dict(
        tasks=((256, 16), (512, 64)), widths=(512,), states=PAPER_STATES, lrs=PAPER_LRS, seeds=(0,), budget=Budget()
    ),
    "cpu": dict(
        tasks=((64, 8),),
        widths=(64,),
        states=(4, 16, 64),
        # best of two rates of the paper's grid, the second from the pilot examples/pilots/dsf_state_expansion_lr.yaml
        lrs=(PAPER_LRS[1], PAPER_LRS[2]),
        seeds=(0, 1, 2),
        budget=cpu_budget(12_000, train_examples=PAPER_TRAIN),
    ),
    "smoke": dict(SMOKE_GRID, budget=SMOKE, states=(2, 8)),
}


def _linear(results: Results, task: tuple[int, int], n: int) -> Score:
    rows = [row for row in rows_of(results, "linear_attention", task) if row.get(STATE) == n]
    return results.score(f"linear n={n}", rows)


def _states(results: Results) -> list[int]:
    return sorted(n for n in results.values(STATE) if n is not None)


def _linear_at(results: Results, index: int, task: tuple[int, int]) -> Score:
    """Linear attention at the ``index``-th size n of the results (0 the smallest, −1 the largest)."""
    return _linear(results, task, _states(results)[index])


def _rises_with_n(results: Results) -> Outcome:
    smallest, largest = _states(results)[0], _states(results)[-1]
    return every(
        {
            task_label(task): at_least(
                _linear(results, task, largest), _linear(results, task, smallest), ceiling=BEST_SCORE
            )
            for task in tasks_of(results)
        }
    )


def _converges_to_softmax(results: Results) -> Outcome:
    largest = _states(results)[-1]
    return every(
        {
            task_label(task): within(
                _linear(results, task, largest),
                results.score("softmax", rows_of(results, "softmax_attention", task)),
                CONVERGED,
            )
            for task in tasks_of(results)
        }
    )


CLAIMS = (
    Claim(
        "linear rises with n",
        "linear attention at the largest n > at the smallest n, on every task",
        "the larger the state expansion n, the more expressivity the architecture has",
        _rises_with_n,
        control=SOFTMAX_CONTROL,
        plateau=compared_plateau(_linear_at, 0, -1, per_task=True),
    ),
    Claim(
        "linear → softmax",
        f"linear attention at the largest n within {CONVERGED} of softmax attention, on every task",
        "with larger state expansion linear attention converges to the performance of softmax attention",
        _converges_to_softmax,
        control=SOFTMAX_CONTROL,
        plateau=compared_plateau(_linear_at, -1, per_task=True),
    ),
    Claim(
        "softmax ≈ 100 %",
        f"softmax attention ≥ {EARLY_STOP} on every task (Zoology's early stop)",
        "softmax attention, which achieves perfect accuracy throughout",
        softmax_solves,
        paper_value="100 %",
    ),
)


class StateExpansion(Reproduction):
    name = "dsf_state_expansion"
    paper = "Sieber et al. 2024 (DSF)"
    figure = "Fig. 1"
    summary = (
        "Linear attention against softmax attention on MQAR as the state expansion n (the feature size of "
        "linear attention) grows: accuracy, best over the learning-rate grid, mean over seeds ± its standard "
        "error."
    )
    claims = CLAIMS
    reductions = {
        "paper": "The paper's Fig. 1: tasks {256, 16} and {512, 64} at d = 512, n ∈ {32, 64, 128, 256}, lr ∈ "
        "logspace(−4, −2, 4), 64 epochs of 100,000 examples (3,000 test), vocabulary 8,192, batch 128 and "
        "64, one seed; " + ZOOLOGY_INIT_WORDS + ".",
        "cpu": "One task, {64, 8}, at d = 64 with n ∈ {4, 16, 64} (eight pairs against states of 4 to 64 features, "
        "where the paper has 16 and 64 pairs against n = 32…256 at d = 512); two learning rates of the "
        "paper's grid, 4.6e-4 and 2.15e-3, the best per setting and seed as the paper takes the best of its grid; "
        "12,000 steps of batch 64 over the paper's 100,000 examples (1,000 test), "
        "vocabulary 256, fillers 0 (the DSF configs' random_non_queries: False); three seeds, since MQAR "
        "models leave the plateau on some seeds and not others, with the step at which each left it. "
        "Chosen from a first cpu run (2026-11-25, 3,000 steps, lr 2.15e-3 and "
        "1e-2, 20,000 examples): at lr 1e-2 no n left the 0.15 plateau, and at 2.15e-3 n = 16 was still "
        "climbing at the last step while n = 64 had not left the plateau, so the steps went up fourfold "
        "and lr 1e-2 went. Under Zoology's initialization 2.15e-3 alone left softmax attention on the plateau on "
        "one seed of three (2026-12-02); the pilot examples/pilots/dsf_state_expansion_lr.yaml (rule fixed "
        "before it ran: add the neighbouring rate at which more runs of softmax and n = 64 reach 0.99, ties by "
        "the sum of their best accuracies) trained both at 4.6e-4 and 1e-2 for 4,000 steps: no run reached 0.99; "
        "at 4.6e-4 softmax rose to 0.27, 0.41, 0.26 (n = 64: 0.14 on every seed), at 1e-2 every run stayed on "
        "the plateau (0.14-0.15), so 4.6e-4 joined. And " + CPU_MODEL_REASON + ".",
        "smoke": "The whole pipeline on a toy MQAR (L = 16, 2 pairs, d = 16, n ∈ {2, 8}, 6 steps): no verdict to "
        "trust.",
    }

    def sweeps(self, scale: str) -> list[SweepConfig]:
        return mqar_sweeps("expansion", ("softmax_attention", "linear_attention"), **SCALES[scale])

    def table(self, results: Results) -> str:
        """Fig. 1 as a table: one row per (task, model), one column per state expansion n."""
        return (
            grid_table(results, MODELS, STATE, "n")
            + "\n\nAccuracy in %. The paper prints Fig. 1 only as a figure; its text says softmax attention "
            '"achieves perfect accuracy throughout".\n\n'
            + escape_words(results)
            + "\n\n"
            + escape_table(results, MODELS)
        )

    def plot(self, results: Results, path: Path) -> Path:
        return plot_bars(
            bar_panels(results, MODELS, STATE),
            path,
            xlabel="state expansion n",
            title="Sieber et al. 2024, Fig. 1: linear vs softmax attention",
        )


REPRODUCTION = StateExpansion()
