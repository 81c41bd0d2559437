"""The atomic-task protocol of Gupta et al. 2022 (DLR; §3.3 and appendix A.6), as sweep configs.

"Input x ∈ R^{L×D} is linearly projected to xW ∈ R^{L×d} where d is the model dimension. For a desired output
y ∈ R^{L'×D'} we take the output o ∈ R^{L×d} of the model and linearly project it to oW' ∈ R^{L×D'} and take its
rightmost L' positions as the prediction. All experiments use post-norm Layer Normalization. Model dimension
H = 128 and weight decay of optimizer was 0. For SSMs, state size N = 4096. [...] Constant learning rate schedule
was used. In DSS_EXP, log Λ is initialized as (−.5 + 2πin)_{0≤n≤N−1}" (§A.6), with Table 7's learning rates,
DLR initialization (dt-min = dt-max = 1e-5), batch 16 and 40K steps at L = 2^12; "All models trained on atomic
tasks are unidirectional and are trained for an equal number of steps with MSE loss, using a fresh batch sampled
for every training and evaluation step"; the
ATTENTION block replaces "the DLR contextualization in the DLR layer with a 4-head attention layer and rotary
positional embeddings" (§3.3).

:data:`MODELS` gives each model of Table 1 as the paper ran it; :func:`atomic_sweeps` writes one sweep per model
(each has its own learning rate): every task at one length, every seed.  The names and signatures are every
protocol's (:mod:`seqdyn.reproduce.protocols.base`).  :func:`r2_table` and :func:`plot_r2_grid`
print and draw a task × model grid of R² with the paper's numbers beside ours.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqdyn.reproduce.base import Results, score_cell
from seqdyn.reproduce.claims import PLATEAU_MARGIN, Plateau, Score
from seqdyn.reproduce.protocols import base
from seqdyn.train.config import SweepConfig

#: Table 1's tasks, in the paper's order (rows)
TASKS = (
    "shift",
    "cumsum",
    "cummax",
    "select_fixed",
    "solve_fixed",
    "reverse",
    "solve",
    "select",
    "sort",
    "context_shift",
    "mips",
)
TASK_LABELS = {
    "shift": "SHIFT",
    "cumsum": "CUMSUM",
    "cummax": "CUMMAX",
    "select_fixed": "SELECT-FIXED",
    "solve_fixed": "SOLVE-FIXED",
    "reverse": "REVERSE",
    "solve": "SOLVE",
    "select": "SELECT",
    "sort": "SORT",
    "context_shift": "CONTEXTSHIFT",
    "mips": "MIPS",
}
PAPER_LENGTH, PAPER_WIDTH, PAPER_STATE, PAPER_BATCH, PAPER_STEPS = 4096, 128, 4096, 16, 40_000


@dataclass(frozen=True, kw_only=True)
class AtomicModel(base.Model):
    """A model of Tables 1 and 2 as the paper ran it (Table 7, §A.6): its label, mixer and options (``state_dim``
    is the scale's N times ``state_scale``), learning rate (Table 1's) and number of layers."""

    label: str
    lr: float = 1e-3
    layers: int = 1
    has_state: bool = True
    state_scale: float = 1.0

    def mixer_options(self, state_dim: int) -> dict[str, Any]:
        size = {"state_dim": max(1, round(state_dim * self.state_scale))} if self.has_state else {}
        return {**self.options, **size}


#: Table 7's DLR initialization for Tables 1 and 2: dt-min = dt-max = 1e-5, so |λ| = exp(−dt/2) ≈ 1 with the phases
#: 2πn/N — the DFT-like start of §2.3 (``r_range`` is (dt-min, dt-max))
TABLE7_DLR = {"r_range": [1e-5, 1e-5]}

#: Table 7's learning rates: DLR's, and every other model's
PAPER_LRS = (1e-4, 1e-3)
DLR_LR, OTHER_LR = PAPER_LRS
#: ATTENTION as §3.3 replaces the DLR contextualization with it: four heads, rotary positions
ATTENTION = {"heads": 4, "rotary": True}

MODELS = {
    "dlr": AtomicModel(label="DLR", mixer="dlr", options=TABLE7_DLR, lr=DLR_LR),
    "dss_exp": AtomicModel(
        label="DSS-EXP", mixer="dss_exp", options={"init": "lin2pi", "dt_min": 1e-4, "dt_max": 1e-2}, lr=OTHER_LR
    ),
    "attention": AtomicModel(
        label="ATTENTION", mixer="softmax_attention", options=ATTENTION, lr=OTHER_LR, has_state=False
    ),
    "dlr_6": AtomicModel(label="DLR, 6 layers", mixer="dlr", options=TABLE7_DLR, lr=DLR_LR, layers=6),
    "attention_2": AtomicModel(
        label="ATTENTION, 2 layers",
        mixer="softmax_attention",
        options=ATTENTION,
        lr=OTHER_LR,
        layers=2,
        has_state=False,
    ),
    # the single DLR layer at the other layers' learning rate: what a short budget needs on SELECT-FIXED
    "dlr_fast": AtomicModel(label="DLR, lr 1e-3", mixer="dlr", options=TABLE7_DLR, lr=OTHER_LR),
    # Table 2's variants of the single DLR layer
    "dlr_prod": AtomicModel(label="DLR-prod", mixer="dlr", options={**TABLE7_DLR, "prod": True}, lr=DLR_LR),
    "dlr_small_n": AtomicModel(label="DLR, N/8", mixer="dlr", options=TABLE7_DLR, lr=DLR_LR, state_scale=1 / 8),
    "dlr_real": AtomicModel(label="DLR-ℝ", mixer="dlr", options={**TABLE7_DLR, "real": True}, lr=DLR_LR),
}

#: Table 1 (top), the single-layer columns at L = 2^12, the 6-layer DLR at 2^12 and the 2-layer ATTENTION at 2^9:
#: average validation R²
PAPER_R2 = {
    "shift": {"dlr": 1.0, "dss_exp": 0.99, "attention": 0.72, "dlr_6": 1.0, "attention_2": 1.0},
    "cumsum": {"dlr": 1.0, "dss_exp": 1.0, "attention": 1.0, "dlr_6": 1.0, "attention_2": 1.0},
    "cummax": {"dlr": 0.52, "dss_exp": 0.51, "attention": 1.0, "dlr_6": 1.0, "attention_2": 1.0},
    "select_fixed": {"dlr": 0.97, "dss_exp": 0.0, "attention": 0.72, "dlr_6": 1.0, "attention_2": 0.94},
    "solve_fixed": {"dlr": 1.0, "dss_exp": 0.01, "attention": 0.0, "dlr_6": 1.0, "attention_2": 0.95},
    "reverse": {"dlr": 0.01, "dss_exp": 0.0, "attention": 0.03, "dlr_6": 0.99, "attention_2": 0.28},
    "solve": {"dlr": 0.0, "dss_exp": 0.0, "attention": 0.0, "dlr_6": 0.0, "attention_2": 0.0},
    "select": {"dlr": 0.0, "dss_exp": 0.0, "attention": 0.17, "dlr_6": 0.0, "attention_2": 0.97},
    "sort": {"dlr": 0.0, "dss_exp": 0.0, "attention": 0.0, "dlr_6": 0.49, "attention_2": 0.51},
    "context_shift": {"dlr": 0.0, "dss_exp": 0.0, "attention": 0.0, "dlr_6": 0.02, "attention_2": 0.04},
    "mips": {"dlr": 0.0, "dss_exp": 0.0, "attention": 0.90, "dlr_6": 0.0, "attention_2": 0.97},
}


@dataclass(frozen=True, kw_only=True)
class Budget(base.Budget):
    """Length L, width H, state size N, batch, steps, test examples and evaluations every ``eval_every`` steps (a
    fresh batch every step: ``steps × batch`` training examples)."""

    seq_len: int = PAPER_LENGTH
    width: int = PAPER_WIDTH
    state_dim: int = PAPER_STATE
    batch_size: int = PAPER_BATCH
    steps: int = PAPER_STEPS
    test_examples: int = 1_024
    eval_every: int = 1_000


#: the ``smoke`` budget: a toy length, a few steps
SMOKE = Budget(seq_len=16, width=16, state_dim=8, batch_size=4, steps=4, test_examples=8, eval_every=2)


def atomic_sweeps(
    part: str,
    models: Sequence[str],
    tasks: Sequence[str],
    seeds: Sequence[int],
    budget: Budget,
    lrs: Sequence[float] | None = None,
    *,
    lengths: Mapping[str, Sequence[int]] | None = None,
) -> list[SweepConfig]:
    """One sweep per model (a key of :data:`MODELS`) named ``PART-MODEL``: every task at length ``budget.seq_len``
    (or at each of the model's ``lengths``), every seed, at the model's own learning rate (or over ``lrs``); a fresh
    batch every step (``steps × batch`` training examples)."""
    sweeps = []
    for key in models:
        model = MODELS[key]
        axes = {"task.name": list(tasks), "train.seed": list(seeds)}
        if lengths is not None:
            axes["task.params.seq_len"] = list(lengths[key])
        if lrs is not None:
            axes["optimizer.lr"] = list(lrs)
        data = {
            "name": f"{part}-{key}",
            "model": {
                "block": "transformer",
                "layers": model.layers,
                "d_model": budget.width,
                "mlp": "none",
                "positions": False,
                "norm": "layernorm",
                "norm_position": "post",
                "mixer": model.mixer,
                "mixer_options": model.mixer_options(budget.state_dim),
            },
            "task": {
                "name": tasks[0],
                "params": {"seq_len": budget.seq_len},
                "train_examples": budget.steps * budget.batch_size,
                "test_examples": budget.test_examples,
            },
            "optimizer": {"lr": model.lr, "weight_decay": 0.0},
            "schedule": {"kind": "constant"},
            "train": budget.train_options(budget.batch_size),
            "sweep": axes,
        }
        sweeps.append(SweepConfig.model_validate(data))
    return sweeps


# ------------------------------------------------------------------------------------------------ reporting
def model_of(row: dict[str, Any]) -> str:
    """The key of :data:`MODELS` a row was trained with: its sweep's name ends in ``-KEY`` (``PART-KEY[...]``, as
    :func:`atomic_sweeps` names them)."""
    key = row["name"].split("[", 1)[0].rsplit("-", 1)[-1]
    if key not in MODELS:
        raise ValueError(f"row {row['name']!r}: its model {key!r} is none of {', '.join(MODELS)}")
    return key


def score(results: Results, model: str, task: str) -> Score:
    """One model's R² on one task: per seed, its best evaluation."""
    rows = [row for row in results.select(task__name=task) if model_of(row) == model]
    return results.score(MODELS[model].label, rows)


#: an atomic task's plateau: the best constant prediction, whose R² is 0 by the definition of R² (one minus the
#: squared error over the variance about the mean)
CONSTANT_R2 = 0.0
PLATEAU_WORDS = "an atomic task's plateau: the best constant prediction, R² 0 by definition"


def r2_plateau(compared: Callable[[Results], Sequence[Score]]) -> Plateau:
    """The plateau rule for a claim that the scores ``compared(results)`` must leave R² 0 to support."""
    return Plateau(PLATEAU_WORDS, PLATEAU_MARGIN, lambda results: [(score, CONSTANT_R2) for score in compared(results)])


def present(results: Results) -> tuple[list[str], list[str]]:
    """The tasks (in Table 1's order) and the models (in :data:`MODELS` order) the results hold."""
    tasks = [task for task in TASKS if results.select(task__name=task)]
    models = list(dict.fromkeys(model_of(row) for row in results.rows))
    return tasks, [key for key in MODELS if key in models]


def r2_table(results: Results, paper: Mapping[str, Mapping[str, float]] = PAPER_R2) -> str:
    """Table 1's layout: one row per task, one column per model; each cell our R² (mean over seeds ± its standard
    error) with the paper's in parentheses."""
    tasks, models = present(results)
    header = ["task", *(MODELS[key].label for key in models)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task in tasks:
        cells = [r2_cell(score(results, key, task), paper.get(task, {}).get(key)) for key in models]
        lines.append("| " + " | ".join([TASK_LABELS[task], *cells]) + " |")
    return "\n".join(lines)


def r2_cell(ours: Score, paper: float | None) -> str:
    """Our R² (mean over seeds ± its standard error) with the paper's in parentheses where it prints one."""
    return score_cell(ours, "{:.2f}".format) + ("" if paper is None else f" ({paper:g})")


def plot_r2_grid(results: Results, path: Path, title: str) -> Path:
    """A task × model grid of our R² (mean over seeds), Table 1 drawn as Sieber et al. 2024, Fig. 5 draws its grids."""
    from seqdyn.analysis.plots import plot_accuracy_grid

    tasks, models = present(results)
    grid = [[score(results, key, task).mean for key in models] for task in tasks]  # NaN where nothing ran
    return plot_accuracy_grid(
        grid,
        [TASK_LABELS[task] for task in tasks],
        [MODELS[key].label for key in models],
        path,
        row_name="task",
        column_name="model",
        title=title,
        percent=False,
    )
