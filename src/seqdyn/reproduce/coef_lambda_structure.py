"""Sieber et al. 2025 (coefficient dynamics), Principle 4 (§5): the structure of the evolution matrices Λ_i.

"we ablate four structures imposed on Λ_i – scalar, diagonal, Householder with keys, and Householder with a learned
vector – on the fuzzy in-context recall and selective copying tasks of MAD; the other parameters are fixed [...]
across all choices of Λ_i. For each Λ_i, we additionally vary how the scalar and diagonal are parameterized (either
using GLA or Mamba-2 parameterizations), and the scaling factor of the rotation vector in the Householder matrix
(either [fixed] or learned from the input). On both tasks, the performance generally increases as more
transformations are allowed in Λ_i (blue line). However, the parameterization of the involved parameters is
important and good parameterizations can considerably improve performance (orange line)." (§5, Lemma 4: a scalar
Λ scales the keys uniformly, a diagonal one per dimension, a Householder matrix also rotates them).

Every structure runs in the ``custom`` mixer with the identity readout (Principle 4 assumes a linear readout),
b = K^-½ and no normalizer, in Type 2 (Gated DeltaNet style) blocks whose keys and queries pass a short convolution,
without positions (Sieber et al. 2025, appendix E.2).  The fixed β of the Householder variants is lost from the text
copy; it is 2 here, a reflection, against β = σ(W u) ∈ (0, 1) from the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqdyn.analysis.plots import plot_bars
from seqdyn.reproduce.base import Reproduction, Results, percent, score_cell
from seqdyn.reproduce.claims import BEST_SCORE, Claim, Outcome, Score, at_least, every
from seqdyn.reproduce.protocols.mad import (
    CONTROL_ENTRY,
    GATED_BLOCK,
    GPU_STEP_S,
    MAD_CONTROL,
    PAPER_LRS,
    PAPER_PROTOCOL,
    PAPER_TASKS,
    PAPER_WEIGHT_DECAYS,
    SMOKE,
    SMOKE_REDUCTION,
    SMOKE_TASKS,
    Budget,
    control_score,
    cpu_tasks,
    gpu_scale,
    gpu_words,
    is_control,
    ladder_table,
    left_out_words,
    mad_plateau,
    mad_score,
    mad_sweeps,
    pick,
    tasks_of,
)
from seqdyn.train.config import SweepConfig

OPTIONS = "model.mixer_options."


@dataclass(frozen=True)
class Variant:
    """One structure of Λ in one parameterization: the ``custom`` mixer's options for it."""

    structure: str
    parameterization: str
    options: dict[str, Any]

    def matches(self, row: dict[str, Any]) -> bool:
        return all(row.get(OPTIONS + key) == value for key, value in self.options.items())


#: the structures, fewest allowed transformations of the keys first (Lemma 4)
STRUCTURES = ("scalar", "diagonal", "Householder, w = k", "Householder, learned w")
VARIANTS = (
    Variant("scalar", "GLA", {"decay": "scalar", "decay_param": "gla"}),
    Variant("scalar", "Mamba-2", {"decay": "scalar", "decay_param": "mamba2"}),
    Variant("diagonal", "GLA", {"decay": "diagonal", "decay_param": "gla"}),
    Variant("diagonal", "Mamba-2", {"decay": "diagonal", "decay_param": "mamba2"}),
    Variant("Householder, w = k", "β = σ(Wu)", {"householder": "keys", "householder_beta": "input"}),
    Variant("Householder, w = k", "β = 2", {"householder": "keys", "householder_beta": 2.0}),
    Variant("Householder, learned w", "β = σ(Wu)", {"householder": "learned", "householder_beta": "input"}),
    Variant("Householder, learned w", "β = 2", {"householder": "learned", "householder_beta": 2.0}),
)
#: "considerably" / "generally increases": the richest structure above the scalar one by at least 5 points
MARGIN = 0.05
HEADS = 4
TASKS = ("fuzzy_in_context_recall", "selective_copying")

SCALES: dict[str, dict[str, Any]] = {
    "paper": dict(
        tasks=pick(PAPER_TASKS, *TASKS), lrs=PAPER_LRS, weight_decays=PAPER_WEIGHT_DECAYS, seeds=(0,), budget=Budget()
    ),
    "cpu": dict(
        tasks=cpu_tasks(*TASKS),
        lrs=(1e-3,),
        weight_decays=(0.1,),
        seeds=(0, 1, 2),
        budget=Budget(
            epochs=None, steps=1_500, train_examples=12_800, test_examples=256, batch_size=32, eval_every=250, width=64
        ),
    ),
    # both tasks at MAD's settings, fuzzy recall included (the cpu scale left it out: no setting its control learnt)
    "gpu": gpu_scale(*TASKS),
    "smoke": dict(tasks=pick(SMOKE_TASKS, *TASKS), lrs=(1e-3,), weight_decays=(0.0,), seeds=(0,), budget=SMOKE),
}
#: the ``gpu`` scale's runs: eight variants and the control on two tasks, three seeds
GPU_RUNS = (len(VARIANTS) + 1) * len(TASKS) * 3


def model_entry(variant: Variant, heads: int = HEADS) -> dict[str, Any]:
    """The ``model`` sweep-axis entry of one variant: a Type 2 block around the ``custom`` mixer."""
    return {
        **GATED_BLOCK,
        "mixer": "custom",
        "mixer_options": {
            "readout": "identity",
            "heads": heads,
            "scale": "inv_sqrt",
            "normalizer": "none",
            "short_conv": True,
            **variant.options,
        },
    }


def variant_of(row: dict[str, Any]) -> Variant:
    """The variant a row was trained with (by its mixer options)."""
    found = [variant for variant in VARIANTS if variant.matches(row)]
    if len(found) != 1:
        raise ValueError(f"row {row['name']!r}: its mixer options match {len(found)} of the variants, not one")
    return found[0]


def _score(results: Results, task: str, structure: str, parameterization: str | None = None) -> Score:
    """A structure's MAD score on a task: its best parameterization (or ``parameterization``) per seed."""
    return _best_of(
        results,
        task,
        (structure,),
        structure + (f" ({parameterization})" if parameterization else ""),
        parameterization,
    )


def _best_of(
    results: Results, task: str, structures: tuple[str, ...], label: str, parameterization: str | None = None
) -> Score:
    """The best run per seed over the variants of ``structures`` (over ``parameterization`` alone where given)."""
    rows = [
        row
        for row in _compared(results.select(task__name=task))
        if variant_of(row).structure in structures and parameterization in (None, variant_of(row).parameterization)
    ]
    return mad_score(results, label, rows)


#: the Householder structures (w = k and a learned w), each in both parameterizations of β
HOUSEHOLDER = tuple(structure for structure in STRUCTURES if structure.startswith("Householder"))


def _compared(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the Λ variants (the control's left out)."""
    return [row for row in rows if not is_control(row)]


def _structures(results: Results) -> list[str]:
    present = {variant_of(row).structure for row in _compared(results.rows)}
    return [structure for structure in STRUCTURES if structure in present]


def _householder_beats_scalar(results: Results) -> Outcome:
    """The best Householder variant ≥ the best scalar one + ``MARGIN`` on every task."""
    if not any(structure in HOUSEHOLDER for structure in _structures(results)):
        return every({})
    return every(
        {
            task: at_least(
                _best_of(results, task, HOUSEHOLDER, "Householder"),
                _score(results, task, "scalar"),
                MARGIN,
                ceiling=BEST_SCORE,
            )
            for task in tasks_of(results)
        }
    )


def _diagonal_at_least_scalar(results: Results) -> Outcome:
    return every(
        {
            task: at_least(_score(results, task, "diagonal"), _score(results, task, "scalar"), ceiling=BEST_SCORE)
            for task in tasks_of(results)
        }
    )


CLAIMS = (
    Claim(
        "Householder > scalar",
        f"on every task, a Householder Λ ≥ a scalar Λ + {MARGIN} (the best variant of each: w = k or learned, "
        "each β; GLA or Mamba-2)",
        "On both tasks, the performance generally increases as more transformations are allowed in Λ_i",
        _householder_beats_scalar,
        control=MAD_CONTROL,
        plateau=mad_plateau(
            lambda results, task: [_best_of(results, task, HOUSEHOLDER, "Householder"), _score(results, task, "scalar")]
        ),
    ),
    Claim(
        "diagonal ≥ scalar",
        "on every task, a diagonal Λ ≥ a scalar Λ (best parameterization of each)",
        "the performance generally increases as more transformations are allowed in Λ_i",
        _diagonal_at_least_scalar,
        control=MAD_CONTROL,
        plateau=mad_plateau(lambda results, task: [_score(results, task, "diagonal"), _score(results, task, "scalar")]),
    ),
)


class LambdaStructure(Reproduction):
    name = "coef_lambda_structure"
    paper = "Sieber et al. 2025 (coefficient dynamics)"
    figure = "Principle 4 (§5)"
    summary = (
        "Four structures of the evolution matrices Λ — scalar, diagonal, Householder with w = k, Householder "
        "with a learned w — each in two parameterizations, with the identity readout on MAD's fuzzy in-context "
        "recall and selective copying: accuracy (best over the lr × weight-decay grid, mean over seeds ± its "
        "standard error)."
    )
    claims = CLAIMS
    reductions = {
        "paper": PAPER_PROTOCOL + "; Type 2 blocks; both tasks at MAD's settings.",
        "cpu": "Selective copying at L = 64 with 8 tokens to copy (MAD: 256 and 16): the rung of its difficulty "
        "ladder where the compared models are not all at the ceiling while the control still learns "
        "(mad.choose_rung; the ladder's numbers are under the table; at L = 32 with 4 every Λ scored "
        "0.998-0.999 at 3810fbc); width 64 (4 heads of 16); 1,500 steps of batch 32 over 12,800 examples (256 "
        "test) instead of 200 epochs of batch 128; lr 1e-3 and weight decay 0.1 only; three seeds; softmax in "
        "the Type 1 block beside the variants as the control. From a pilot (2026-11-26, one thread, 100 steps "
        "at L = 64): 0.062-0.070 s per step for the scalar and diagonal Λ, 0.087-0.089 for the Householder "
        "ones; after 100 steps the Householder Λ with β = σ(Wu) already copied 0.37 of the tokens where the "
        "others copied 0.07-0.08. " + left_out_words(*TASKS),
        "gpu": "Both tasks at MAD's settings: fuzzy recall (L = 128, motifs of 3), which the cpu scale left out, "
        "and selective copying (L = 256, 16 tokens), where the paper's order showed at L = 64 (scalar 0.71, "
        "diagonal 0.96, Householder 0.93-0.999) but every Λ sat at the ceiling at the cpu scale's setting; 4 heads "
        "of 32; softmax in the Type 1 block beside the variants as the control. "
        + gpu_words(GPU_RUNS, "the Householder Λ taking about 1.4 times as long a step as the others on the CPU")
        + ".",
        "smoke": SMOKE_REDUCTION,
    }
    gpu_minutes = round(GPU_RUNS * 10_000 * GPU_STEP_S / 60)

    def sweeps(self, scale: str) -> list[SweepConfig]:
        # softmax attention in the Type 1 block beside the variants, at their budget: the control (mad.MAD_CONTROL)
        return mad_sweeps("structure", [model_entry(variant) for variant in VARIANTS], **SCALES[scale]) + mad_sweeps(
            "control", [CONTROL_ENTRY], **SCALES[scale]
        )

    def table(self, results: Results) -> str:
        """One row per (structure, parameterization), one column per task; then each structure's best; then the
        difficulty ladder each task's ``cpu`` setting was chosen on."""
        tasks = tasks_of(results)
        lines = [
            "| Λ | parameterization | " + " | ".join(f"{task} %" for task in tasks) + " |",
            "|" + "---|" * (2 + len(tasks)),
        ]
        for variant in VARIANTS:
            cells = [
                score_cell(_score(results, task, variant.structure, variant.parameterization), percent)
                for task in tasks
            ]
            lines.append(f"| {variant.structure} | {variant.parameterization} | " + " | ".join(cells) + " |")
        for structure in _structures(results):
            cells = [score_cell(_score(results, task, structure), percent) for task in tasks]
            lines.append(f"| {structure} | best of both | " + " | ".join(cells) + " |")
        cells = [score_cell(control_score(results, task), percent) for task in tasks]
        lines.append("| softmax (control) | Type 1 block | " + " | ".join(cells) + " |")
        ladders = [ladder for ladder in map(ladder_table, tasks) if ladder]
        return "\n\n".join(
            ["\n".join(lines), "Accuracy in %. The paper prints this ablation only as a figure.", *ladders]
        )

    def plot(self, results: Results, path: Path) -> Path:
        """Per task: accuracy per structure, one bar per parameterization (the first of each structure's two, and the
        second)."""
        panels = {}
        for task in tasks_of(results):
            series: dict[str, list] = {}
            for slot, name in ((0, "GLA · β = σ(Wu)"), (1, "Mamba-2 · β = 2")):
                for structure in _structures(results):
                    variant = [v for v in VARIANTS if v.structure == structure][slot]
                    score = _score(results, task, structure, variant.parameterization)
                    if score.values:
                        series.setdefault(name, []).append((structure, score.mean, score.error_bar))
            panels[task.replace("_", " ")] = series
        return plot_bars(panels, path, xlabel="structure of Λ", title="Sieber et al. 2025, Principle 4: structure of Λ")


REPRODUCTION = LambdaStructure()
