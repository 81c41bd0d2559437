"""The MAD protocol (Poli et al. 2024) as Sieber et al. 2025 ran it (appendix E), as sweep configs, and the coefficient
measurements Sieber et al. 2025 takes on the trained models.

MAD (Poli et al. 2024): 12,800 training (memorization: 256) and 1,280 test examples, batch 128, 200 epochs, AdamW with
lr ∈ {1e-4, 5e-4, 1e-3} × weight decay ∈ {0, 0.1}, cosine decay to 1e-6, early stop at 99.9 % test accuracy, width
128; a model's *MAD score* on a task is the mean over the task's settings of its best test accuracy over the
lr × weight-decay grid.  Sieber et al. 2025 (appendix E): "We use the two block designs shown in Figure 12. Generally,
we use the Transformer style block for attention-based models [...] and the Gated DeltaNet style block for SSMs/RNNs
[...] we typically use interleaved MLP blocks after each block [...] two dense layers with SwiGLU activation".
The numbers of Sieber et al. 2025's tables E.1/E.2 (layers, widths, heads, MLP width) are lost from its text copy; where
a reproduction needs them it takes MAD's: two layers, width 128.

:func:`mad_sweeps` writes one sweep per task: every model entry × learning rate × weight decay × seed.  The names and
signatures are every protocol's (:mod:`seqdyn.reproduce.protocols.base`).
:func:`measure_coefficients` loads a trained run and measures its coefficients on test inputs of its task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from seqdyn.reproduce.base import SEED, Results, result_value
from seqdyn.reproduce.claims import BEST_SCORE, PLATEAU_MARGIN, Control, Plateau, Score, weakest
from seqdyn.reproduce.protocols import base
from seqdyn.tasks import IGNORE_INDEX
from seqdyn.tasks import build as build_task
from seqdyn.train.config import SweepConfig

PAPER_LRS = (1e-4, 5e-4, 1e-3)
PAPER_WEIGHT_DECAYS = (0.0, 0.1)
PAPER_TRAIN, PAPER_TEST, PAPER_BATCH, PAPER_EPOCHS = 12_800, 1_280, 128, 200
PAPER_MIN_LR, PAPER_WIDTH, PAPER_LAYERS = 1e-6, 128, 2
EARLY_STOP = 0.999
#: the tasks whose MAD configuration sets its own number of training examples: memorization learns a fixed key-value
#: map from 256 examples (athms/mad-lab at 0f49a45, configs/tasks/memorization.yml, line 4: ``num_train_examples:
#: 256``; every other task takes MADConfig's default, 12,800: mad/configs.py, line 43)
TASK_TRAIN_EXAMPLES = {"memorization": 256}


#: Sieber et al. 2025, Fig. 12, Type 1: ``x + mixer(norm x)`` at the model width, learned positions
TRANSFORMER_BLOCK: dict[str, Any] = {"block": "transformer", "positions": True}
#: Sieber et al. 2025, Fig. 12, Type 2 (Gated DeltaNet style): input and gate projections and an output gate around the
#: mixer, no positions (the short convolution of its keys and queries is the mixer's ``short_conv``)
GATED_BLOCK: dict[str, Any] = {"block": "gated", "positions": False}


@dataclass(frozen=True, kw_only=True)
class MADModel(base.Model):
    """A model of Sieber et al. 2025 as it ran it: the mixer and its options in a block design
    (:data:`TRANSFORMER_BLOCK` or :data:`GATED_BLOCK`)."""

    block: dict[str, Any]

    def entry(self) -> dict[str, Any]:
        """The ``model`` sweep-axis entry: the block design, the mixer and its options."""
        return {**self.block, "mixer": self.mixer, "mixer_options": dict(self.options)}


#: Sieber et al. 2025's MAD tasks at MAD's settings (Poli et al. 2024)
PAPER_TASKS: dict[str, dict[str, Any]] = {
    "fuzzy_in_context_recall": {"vocab_size": 16, "seq_len": 128, "k_motif_size": 3, "v_motif_size": 3},
    "selective_copying": {"vocab_size": 16, "seq_len": 256, "num_tokens_to_copy": 16},
    "memorization": {"vocab_size": 256, "seq_len": 32},
    "noisy_in_context_recall": {"vocab_size": 32, "seq_len": 128, "noise_vocab_size": 16, "frac_noise": 0.2},
}
#: the same tasks as the ``cpu`` scales run them.  Selective copying at the rung :func:`choose_rung` picks from its
#: ladder (:data:`SELECTIVE_COPYING_LADDER`): L = 64 with 8 tokens to copy, where the compared models are apart
#: (0.71-0.999) and the control learns (0.872 / 0.914); one rung easier, L = 32 with 4, every compared model sat at
#: the ceiling (0.979-1.0).  Memorization at MAD's settings, its 256 training examples included
#: (:data:`TASK_TRAIN_EXAMPLES`; with 12,800 every model scored 1.0 at 6db3862).  Noisy recall at L = 16 with 4 keys
#: (V = 24, 16 of them noise), the hardest rung where the control (softmax with positions) reached 0.9 on both seeds
#: within coef_positions' 4,000 steps in the difficulty pilot (examples/pilots/control_difficulty.py, 2026-11-27:
#: 0.935 / 0.903; at V = 32, L = 16: 0.76 / 0.45; at L = 32: 0.49 in coef_positions' run at 6db3862)
CPU_TASKS: dict[str, dict[str, Any]] = {
    "selective_copying": {"vocab_size": 16, "seq_len": 64, "num_tokens_to_copy": 8},
    "memorization": {"vocab_size": 256, "seq_len": 32},
    "noisy_in_context_recall": {"vocab_size": 24, "seq_len": 16, "noise_vocab_size": 16, "frac_noise": 0.2},
}
#: the MAD tasks the ``cpu`` scales leave out, and why: no rung of the control's difficulty pilot passed
CPU_LEFT_OUT: dict[str, str] = {
    "fuzzy_in_context_recall": "fuzzy recall is left out: in the difficulty pilot of the control alone (softmax, "
    "2,000 steps, two seeds; examples/pilots/control_difficulty.py, 2026-11-27) no setting "
    "reached 0.9 — V = 16 with motifs of 2 at L = 32: 0.13 / 0.15, at L = 16: 0.15 / 0.71 (0.17 / "
    "0.75 at 6,000 steps); motifs of 1 at L = 16: 0.43 / 0.44; V = 12 and 8 at L = 16: 0.19 "
    "/ 0.20, 0.30 / 0.27 "
    "(MAD's L = 64 with motifs of 3 left every model at chance, 0.13-0.16, at 6db3862)",
}


def cpu_tasks(*names: str) -> dict[str, dict[str, Any]]:
    """The ``cpu`` settings of the tasks ``names`` that have one (:data:`CPU_TASKS`), in that order; the others are
    in :data:`CPU_LEFT_OUT`."""
    unknown = [name for name in names if name not in CPU_TASKS and name not in CPU_LEFT_OUT]
    if unknown:
        raise ValueError(f"names: {', '.join(unknown)} has no cpu setting and no reason to be left out")
    return pick(CPU_TASKS, *(name for name in names if name in CPU_TASKS))


def left_out_words(*names: str) -> str:
    """Why the ``cpu`` scale leaves out those of the tasks ``names`` it leaves out ("" where none)."""
    return " ".join(
        CPU_LEFT_OUT[name][0].upper() + CPU_LEFT_OUT[name][1:] + "." for name in names if name in CPU_LEFT_OUT
    )


#: the same tasks in toy sizes: a smoke scale's whole pipeline in seconds
SMOKE_TASKS: dict[str, dict[str, Any]] = {
    "fuzzy_in_context_recall": {"vocab_size": 16, "seq_len": 16, "k_motif_size": 2, "v_motif_size": 2},
    "selective_copying": {"vocab_size": 8, "seq_len": 16, "num_tokens_to_copy": 2},
    "memorization": {"vocab_size": 16, "seq_len": 8},
    "noisy_in_context_recall": {"vocab_size": 16, "seq_len": 16, "noise_vocab_size": 4, "frac_noise": 0.2},
}


def pick(tasks: Mapping[str, Mapping[str, Any]], *names: str) -> dict[str, dict[str, Any]]:
    """The settings of the tasks ``names``, in that order."""
    return {name: dict(tasks[name]) for name in names}


@dataclass(frozen=True, kw_only=True)
class Budget(base.Budget):
    """How long and on how much data — ``steps`` (else ``epochs``), the examples, the batch size, an evaluation
    every ``eval_every`` steps — and the model around the mixers: ``width``, ``layers`` and the interleaved
    ``mlp`` (Sieber et al. 2025: SwiGLU)."""

    epochs: int | None = PAPER_EPOCHS
    train_examples: int = PAPER_TRAIN
    test_examples: int = PAPER_TEST
    batch_size: int = PAPER_BATCH
    width: int = PAPER_WIDTH
    layers: int = PAPER_LAYERS
    mlp: str = "swiglu"


def train_examples(task: str, budget: Budget) -> int:
    """The training examples of ``task`` within ``budget``: MAD's own number for the task
    (:data:`TASK_TRAIN_EXAMPLES`) where it has one and the budget allows that many, else the budget's."""
    return min(budget.train_examples, TASK_TRAIN_EXAMPLES.get(task, budget.train_examples))


#: how the ``paper`` scales train, in words for their ``reductions``
PAPER_PROTOCOL = (
    "MAD's protocol (Sieber et al. 2025, appendix E): 12,800 training (memorization: 256, as mad-lab's "
    "configuration) and 1,280 test examples, batch "
    "128, 200 epochs, lr ∈ {1e-4, 5e-4, 1e-3} × weight decay ∈ {0, 0.1}, cosine to 1e-6, early stop "
    "at 99.9 %; two blocks of width 128 with SwiGLU MLPs, 4 heads (Sieber et al. 2025's layer counts, widths and "
    "heads are lost from its text copy: MAD's are taken); one seed"
)
SMOKE_REDUCTION = "The whole pipeline on toy tasks (L = 16, d = 16, 4 steps): no verdict to trust."

#: the ``gpu`` budget of the Sieber et al. 2025 reproductions that have a ``gpu`` scale, fixed before any run: MAD's
#: model, data and batch (width 128, two blocks with SwiGLU MLPs, 12,800 training examples — memorization's 256 —,
#: 1,280 test, batch 128) for 10,000 steps, 100 of MAD's 200 epochs, an evaluation every 500 steps
GPU = Budget(epochs=None, steps=10_000, eval_every=500)
#: the H200 time of one step at MAD's sizes that the ``gpu`` scales' estimates take: the paper scale's timed steps put
#: coef_scaling_seeds' 864 runs of 20,000 steps (fuzzy recall at L = 128) at 51 h, 10.6 ms a step
GPU_STEP_S = 0.0106


def gpu_scale(*names: str) -> dict[str, Any]:
    """The ``gpu`` scale of the tasks ``names`` (:data:`GPU` at MAD's settings, lr 1e-3, weight decay 0.1, three
    seeds), as a reproduction's ``SCALES`` entry."""
    return dict(tasks=pick(PAPER_TASKS, *names), lrs=(1e-3,), weight_decays=(0.1,), seeds=(0, 1, 2), budget=GPU)


def gpu_words(runs: int, note: str = "") -> str:
    """What the ``gpu`` scales share, in words for their ``reductions``: MAD's sizes at half of MAD's steps, what
    should decide the claims there, and the estimated H200 time of ``runs`` runs (``note``: what lowers it)."""
    minutes = runs * GPU.steps * GPU_STEP_S / 60
    return (
        "MAD's own sizes: the tasks at MAD's settings, width 128, two blocks with SwiGLU MLPs, "
        "12,800 training examples (memorization: 256) and 1,280 test, batch 128; 10,000 steps, 100 of MAD's 200 "
        "epochs; lr 1e-3 and weight decay 0.1 only, where MAD sweeps 3 × 2; three seeds (the seed loop adds more "
        "while a claim's seeds leave it open). Why it should decide the claims: the cpu scale read them at "
        "settings its 2-core budget could train (L = 16-64, width 64, 1,500-8,000 steps of batch 32), where the "
        "models sat at the ceiling, the control fell short or the seeds left a claim open; at MAD's lengths the "
        "tasks are as hard as the paper reports them, and 100 epochs of batch 128 are 5-27 times the examples the "
        "cpu scale saw. "
        f"Estimated {minutes:.0f} min on one H200 one run at a time: {runs} runs of 10,000 steps at "
        f"{1000 * GPU_STEP_S:.1f} ms a step (the paper scale's timed steps at MAD's sizes: 51 h for "
        "coef_scaling_seeds' 864 runs of 20,000 steps), before early stops at 99.9 %"
        + (f", {note}" if note else "")
        + "; less with runs sharing the device"
    )


#: the ``smoke`` budget of every Sieber et al. 2025 reproduction
SMOKE = Budget(
    epochs=None, steps=4, train_examples=64, test_examples=16, batch_size=8, eval_every=2, width=16, layers=1
)


def mad_sweeps(
    part: str,
    models: Sequence[MADModel | dict[str, Any]],
    tasks: Mapping[str, Mapping[str, Any]],
    seeds: Sequence[int],
    budget: Budget,
    lrs: Sequence[float] | None = None,
    *,
    weight_decays: Sequence[float] = PAPER_WEIGHT_DECAYS,
) -> list[SweepConfig]:
    """One sweep per MAD task named ``PART-TASK`` (``tasks``: name → its parameters): the ``models`` (each a
    :class:`MADModel` or its ``model`` sweep-axis entry: a block design, a mixer and its options) × ``lrs`` (None: the
    paper's) × ``weight_decays`` × ``seeds``."""
    lrs = PAPER_LRS if lrs is None else lrs
    sweeps = []
    for task, params in tasks.items():
        train = budget.train_options(budget.batch_size, early_stop={"threshold": EARLY_STOP})
        data = {
            "name": f"{part}-{task}",
            "model": {"layers": budget.layers, "d_model": budget.width, "mlp": budget.mlp, "norm": "layernorm"},
            "task": {
                "name": task,
                "params": dict(params),
                "train_examples": train_examples(task, budget),
                "test_examples": budget.test_examples,
            },
            "optimizer": {"weight_decay": weight_decays[0]},
            "schedule": {"kind": "cosine", "min_lr": PAPER_MIN_LR},
            "train": train,
            "sweep": {
                "model": [model.entry() if isinstance(model, MADModel) else dict(model) for model in models],
                "optimizer.lr": list(lrs),
                "optimizer.weight_decay": list(weight_decays),
                "train.seed": list(seeds),
            },
        }
        sweeps.append(SweepConfig.model_validate(data))
    return sweeps


# ------------------------------------------------------------------------------------------------ reporting
TASK = "task.name"


def tasks_of(results: Results) -> list[str]:
    """The MAD tasks of the results, in order."""
    return [task for task in results.values(TASK) if task is not None]


#: what a MAD task's plateau is, in words
PLATEAU_WORDS = (
    "the MAD task's plateau: the better of a constant answer and a token copied from the context so far, "
    "measured on its test examples"
)


def plateau_level(task_name: str, examples: int = 256, seed: int = 0, **params: Any) -> float:
    """What a model scores before it learns MAD task ``task_name`` (with ``params``), measured on its test examples
    token by token as its accuracy is: the better of the best constant answer (the commonest target) and of copying
    from the context — answering each target with one of the distinct answer tokens (tokens that are some target of
    the task) among the inputs up to it, drawn uniformly."""
    task = build_task(task_name, **params)
    inputs, targets = task.generate(examples, seed, "test")
    scored = targets != IGNORE_INDEX
    answers = targets[scored]
    constant = float(torch.bincount(answers).max()) / answers.numel()
    is_answer = torch.zeros(int(max(inputs.max(), answers.max())) + 1, dtype=torch.bool)
    is_answer[answers] = True
    chances = []
    for tokens, wanted, keep in zip(inputs.tolist(), targets.tolist(), scored.tolist()):
        seen: set[int] = set()
        for token, target, counted in zip(tokens, wanted, keep):
            if is_answer[token]:
                seen.add(token)
            if counted:
                chances.append(1 / len(seen) if target in seen else 0.0)
    return max(constant, sum(chances) / len(chances))


def task_plateau(results: Results, task: str) -> float:
    """:func:`plateau_level` of ``task`` with the parameters its runs used (averaged over its settings)."""
    settings = {
        tuple(
            sorted(
                (key.removeprefix("task.params."), value)
                for key, value in row.items()
                if key.startswith("task.params.") and value is not None
            )
        )
        for row in results.select(task__name=task)
    }
    levels = [plateau_level(task, **dict(setting)) for setting in settings]
    return sum(levels) / len(levels)


# ------------------------------------------------------------------------------------------------ difficulty
@dataclass(frozen=True)
class Rung:
    """One setting of a MAD task on its difficulty ladder and what was measured there at a ``cpu`` budget: the
    control's best accuracy per seed, each compared model's MAD score (mean over its seeds) and where these
    numbers come from."""

    params: dict[str, Any]
    control: tuple[float, ...]
    compared: dict[str, float]
    source: str


def at_ceiling(score: float) -> bool:
    """Whether a score sits at the ceiling: within :data:`PLATEAU_MARGIN` of the best score, 1."""
    return score >= BEST_SCORE - PLATEAU_MARGIN


def control_learns(task: str, rung: Rung) -> bool:
    """Whether the control learns ``task`` at ``rung``: every seed of it leaves the task's plateau
    (:func:`plateau_level` at the rung's setting) by more than :data:`PLATEAU_MARGIN`."""
    level = plateau_level(task, **rung.params)
    return bool(rung.control) and all(value > level + PLATEAU_MARGIN for value in rung.control)


def choose_rung(task: str, rungs: Sequence[Rung]) -> Rung | None:
    """The difficulty a ``cpu`` scale runs ``task`` at, from its ladder ``rungs`` (hardest first): the easiest rung
    at which the compared models are not all at the ceiling (some model's score below 1 − :data:`PLATEAU_MARGIN`)
    while the control still learns (:func:`control_learns`); None where no rung is both.  Easier rungs leave every
    comparison at the ceiling, where no claim can be decided; harder ones only weaken the control.  Whether the
    control also reaches the claims' bar (:data:`MAD_CONTROL`) is each claim's check, not the ladder's."""
    for rung in reversed(rungs):
        if control_learns(task, rung) and not all(at_ceiling(score) for score in rung.compared.values()):
            return rung
    return None


#: selective copying's ladder, hardest first.  The control: softmax in the Type 1 block alone at coef_readout_maps'
#: cpu budget (2,000 steps), two seeds (examples/pilots/control_difficulty.py, 2026-11-27).  The compared models:
#: the readouts of coef_readout_maps and the kernel approximations of coef_kernel_maps (2,000 steps) and the best
#: parameterization of each Λ structure of coef_lambda_structure (1,500 steps), from their cpu runs
SELECTIVE_COPYING_LADDER = (
    Rung(
        {"vocab_size": 16, "seq_len": 64, "num_tokens_to_copy": 8},
        (0.872, 0.914),
        {
            "readout identity": 0.886,
            "readout x²": 0.952,
            "readout ReLU": 0.866,
            "readout softplus": 0.917,
            "readout sigmoid": 0.963,
            "readout elu + 1": 0.888,
            "readout exp": 0.893,
            "kernel ψ = elu + 1": 0.917,
            "kernel ψ = ReLU": 0.896,
            "kernel ψ = softplus": 0.945,
            "kernel ψ = exp": 0.948,
            "Λ scalar": 0.706,
            "Λ diagonal": 0.957,
            "Λ Householder, w = k": 0.999,
            "Λ Householder, learned w": 0.930,
        },
        "readouts and kernels at 6db3862, Λ at 9e4b7b2 (two seeds each)",
    ),
    Rung(
        {"vocab_size": 16, "seq_len": 32, "num_tokens_to_copy": 4},
        (0.989, 0.999),
        {
            "readout identity": 0.999,
            "readout x²": 0.999,
            "readout ReLU": 0.979,
            "readout softplus": 0.993,
            "readout sigmoid": 0.998,
            "readout elu + 1": 0.989,
            "readout exp": 0.996,
            "kernel ψ = elu + 1": 1.0,
            "kernel ψ = ReLU": 0.987,
            "kernel ψ = softplus": 1.0,
            "kernel ψ = exp": 0.999,
            "Λ scalar": 0.999,
            "Λ diagonal": 0.999,
            "Λ Householder, w = k": 0.998,
            "Λ Householder, learned w": 0.999,
        },
        "every model at 3810fbc (three seeds)",
    ),
)
#: each task's difficulty ladder, where a ``cpu`` scale's setting was chosen on one
LADDERS: dict[str, tuple[Rung, ...]] = {"selective_copying": SELECTIVE_COPYING_LADDER}


def ladder_table(task: str) -> str:
    """``task``'s difficulty ladder as a markdown table (hardest rung first): per rung the setting, the control
    per seed against the plateau, the compared models' range and how many sit at the ceiling, and which rung
    :func:`choose_rung` picks; "" where the task has no ladder."""
    rungs = LADDERS.get(task)
    if not rungs:
        return ""
    chosen = choose_rung(task, rungs)
    lines = [
        f"Difficulty ladder of {task} (the chosen rung: the easiest where the compared models are not all within "
        f"{PLATEAU_MARGIN} of 1 while every seed of the control leaves the plateau by more than {PLATEAU_MARGIN}):",
        "",
        "| setting | control per seed | plateau | compared models | at the ceiling | chosen | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for rung in rungs:
        scores = rung.compared.values()
        lines.append(
            "| "
            + " | ".join(
                [
                    ", ".join(f"{key} {value}" for key, value in rung.params.items()),
                    " / ".join(f"{value:.3f}" for value in rung.control),
                    f"{plateau_level(task, **rung.params):.3f}",
                    f"{min(scores):.3f}-{max(scores):.3f}",
                    f"{sum(at_ceiling(score) for score in scores)} of {len(rung.compared)}",
                    "yes" if rung is chosen else "",
                    rung.source,
                ]
            )
            + " |"
        )
    return "\n".join(lines)


#: "solved": at least 90 % of a MAD task's answers right
SOLVED = 0.9
#: the positive control of the MAD comparisons: softmax attention as the ``custom`` mixer computes it (the exp
#: readout, Λ = I, b = K^-½, η = max(|Σα|, 1)) in the Type 1 block with learned positions — ``coef_readout_maps``'
#: exp model, so a store shares its runs between the reproductions that train it at the same budget
CONTROL_OPTIONS: dict[str, Any] = {
    "readout": "exp",
    "heads": 4,
    "decay": "none",
    "scale": "inv_sqrt",
    "normalizer": "abs_max1",
}
CONTROL = MADModel(label="softmax", mixer="custom", options=CONTROL_OPTIONS, block=TRANSFORMER_BLOCK)
CONTROL_ENTRY: dict[str, Any] = CONTROL.entry()


def is_control(row: dict[str, Any]) -> bool:
    """Whether ``row`` trained :data:`CONTROL_ENTRY` (its mixer with exactly the control's options)."""
    options = {
        key.removeprefix("model.mixer_options."): value
        for key, value in row.items()
        if key.startswith("model.mixer_options.") and value is not None
    }
    return (
        row.get("model.mixer") == "custom"
        and bool(row.get("model.positions"))
        and row.get("model.block") == "transformer"
        and options == CONTROL_OPTIONS
    )


def control_score(results: Results, task: str) -> Score:
    """The control's MAD score on ``task``."""
    return mad_score(results, f"softmax on {task}", [row for row in results.select(task__name=task) if is_control(row)])


#: every MAD comparison's control: the claim's tasks must be learnable at the scale's budget and settings
MAD_CONTROL = Control(
    f"softmax attention (exp readout, Type 1 block with positions) reaches {SOLVED} on every task of the claim",
    lambda results: weakest([control_score(results, task) for task in tasks_of(results)]),
    SOLVED,
)


def mad_plateau(compared: Callable[[Results, str], Sequence[Score]]) -> Plateau:
    """MAD's plateau rule for a claim comparing, on each task, the scores ``compared(results, task)``."""
    return Plateau(
        PLATEAU_WORDS,
        PLATEAU_MARGIN,
        lambda results: [
            (score, task_plateau(results, task)) for task in tasks_of(results) for score in compared(results, task)
        ],
    )


def setting_keys(rows: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The keys that tell a task's settings apart: its name and every parameter the rows carry."""
    return (TASK, *sorted({key for row in rows for key in row if key.startswith("task.params.")}))


def mad_score(results: Results, label: str, rows: Sequence[dict[str, Any]], by: Sequence[str] = ()) -> Score:
    """The MAD score of ``rows`` (one model's runs): per seed, the best accuracy over the lr × weight-decay grid
    in each task setting, averaged over the settings (and over the values of the keys ``by``: the models of a
    group)."""
    return results.score(label, rows, cells=(*by, *setting_keys(rows)))


def best_runs(rows: Sequence[dict[str, Any]], cells: Sequence[str]) -> list[dict[str, Any]]:
    """Per seed and cell (rows agreeing on ``cells``), the run with the best result over the grid: the trained
    model a measurement of that cell is taken on.  Runs without a result are left out."""
    best: dict[tuple, tuple[float, dict[str, Any]]] = {}
    for row in rows:
        value = result_value(row)
        key = (row.get(SEED), *(row.get(cell) for cell in cells))
        if value is not None and (key not in best or value > best[key][0]):
            best[key] = (value, row)
    return [row for _, row in best.values()]


def measured_score(label: str, rows: Sequence[dict[str, Any]], key: str, cells: Sequence[str]) -> Score:
    """A measurement ``key`` taken on the best run of each (seed, cell), averaged over the cells per seed.  Runs
    without a result, and best runs without the measurement, are named as missing."""
    by_seed: dict[Any, list[float]] = {}
    missing = [f"{row['name']} ({row['status']})" for row in rows if result_value(row) is None]
    for row in best_runs(rows, cells):
        if row.get(key) is None:
            missing.append(f"{row['name']} (not measured)")
        else:
            by_seed.setdefault(row.get(SEED), []).append(float(row[key]))
    return Score(label, tuple(sum(v) / len(v) for v in by_seed.values()), tuple(missing))


# ------------------------------------------------------------------------------------------------ measurements
NEAR_ZERO = "coefficients.near_zero_fraction"
LARGE = "coefficients.large_fraction"
#: Sieber et al. 2025, Fig. 9: the largest, over layers, heads and row indices i, of the batch's mean zero count of
#: row i
MAX_ZEROS = "coefficients.max_mean_zero_count"
ZERO_BOUND = "coefficients.zero_bound"
#: test examples the coefficients are measured on
MEASURE_EXAMPLES = 16


def measure_coefficients(store: Any, row: dict[str, Any], examples: int = MEASURE_EXAMPLES) -> dict[str, Any]:
    """Sieber et al. 2025's measurements of one trained run on ``examples`` test inputs of its task: the near-zero and
    large fractions of its coefficients (mean over layers and heads, at ``NEAR_ZERO_EPS``) and, where the bound
    of Corollary 2.2 applies (identity readouts), Fig. 9's count — per layer, head and row index, the batch's mean
    number of zero coefficients (``HeadReport.mean_zero_count``), its largest value — and the bound K − 1."""
    from seqdyn.reproduce.measured import measured_once

    return measured_once(
        store, row["run_id"], f"coefficients(examples={examples})", lambda: _coefficients(store, row, examples)
    )


def _coefficients(store: Any, row: dict[str, Any], examples: int) -> dict[str, Any]:
    from seqdyn.analysis.model import inspect_model
    from seqdyn.train.checkpoint import load_trained

    _, task, model = load_trained(store, row["run_id"])
    inputs, _ = task.generate(examples, seed=0, split="test")
    heads = [head for head in inspect_model(model, inputs, spectral=False) if head.near_zero_fraction is not None]
    measured: dict[str, Any] = {
        NEAR_ZERO: sum(head.near_zero_fraction for head in heads) / len(heads) if heads else None,
        LARGE: sum(head.large_fraction for head in heads) / len(heads) if heads else None,
    }
    bounded = [head for head in heads if head.zero_bound is not None]
    if bounded:
        measured[MAX_ZEROS] = max(head.mean_zero_count for head in bounded)
        measured[ZERO_BOUND] = min(head.zero_bound for head in bounded)
    return measured


def measure_best_runs(results: Results, store_path: str | Path, cells: Sequence[str]) -> Results:
    """The results with :func:`measure_coefficients` added to the best run of each (seed, cell), measured with one
    thread; the other rows are left as they are."""
    from seqdyn.bench.measure import one_thread
    from seqdyn.train.store import Store

    store = Store(store_path)
    best = {row["run_id"] for row in best_runs(results.rows, cells)}
    with one_thread():
        rows = tuple(
            {**row, **(measure_coefficients(store, row) if row["run_id"] in best else {})} for row in results.rows
        )
    return replace(results, rows=rows)


def principle_panels(results: Results, cells: Sequence[str], label: Any) -> dict[str, list[tuple[str, float, float]]]:
    """Sieber et al. 2025, Fig. 1's panels for :func:`~seqdyn.analysis.plots.plot_principle`: per task, ``(label(row),
    near-zero fraction, accuracy)`` of every measured best run; a placeholder panel where none is measured yet."""
    panels = {}
    for task in tasks_of(results):
        points = [
            (label(row), row[NEAR_ZERO], row["best"])
            for row in best_runs(results.select(task__name=task), cells)
            if row.get(NEAR_ZERO) is not None
        ]
        if points:
            panels[task.replace("_", " ")] = points
    return panels or {"no measured run yet": [("none", 0.0, 0.0)]}
