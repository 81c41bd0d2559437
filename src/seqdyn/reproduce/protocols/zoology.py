"""The MQAR protocol of Sieber et al. 2024 (appendix I.1), which is Zoology's (Arora et al. 2023), as sweep configs.

"Weight decay of 0.1, linear warmup with duration of 10%, AdamW optimizer. For each run, we sweep the learning
rates in np.logspace(-4, -2, 4) and train for 64 epochs. [...] We use a global batch size of 512, which we reduce
to 256 if sequence length L ≥ 128, to 128 if sequence length L ≥ 256, and to 64 if sequence length L ≥ 512.
[...] we use two layers (each with a sequence model and a MLP, interleaved with layer normalization). [...]
Positional embeddings are used for the attention and RNN architecture classes, but not for the SSM architecture
classes. [...] Each model is trained on 100,000 datapoints and evaluated on 3,000 datapoints." (Sieber et al. 2024,
I.1); vocabulary 8,192 (§4); one head for the attention functions, "S6 and SSD [...] we do not implement the
pre-convolution on the input or the SiLU activations; but just the S6 and SSD blocks" (I.1).  Zoology stops a
run once test accuracy passes 99 %.

:func:`mqar_sweeps` writes one sweep per MQAR task ``(L, P)``: every mixer at every state expansion n, width d,
learning rate and seed.  :data:`MIXERS` gives each mixer of Sieber et al. 2024 as the paper ran it.  The names and
signatures are every protocol's (:mod:`seqdyn.reproduce.protocols.base`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from seqdyn.reproduce.base import Results, percent, result_value, score_cell
from seqdyn.reproduce.claims import PLATEAU_MARGIN, Control, Outcome, Plateau, Score, every, reaches, weakest
from seqdyn.reproduce.protocols import base
from seqdyn.tasks import IGNORE_INDEX
from seqdyn.tasks import build as build_task
from seqdyn.train.config import SweepConfig

#: np.logspace(-4, -2, 4), the paper's learning-rate grid
PAPER_LRS = (1.0e-4, 4.6415888336127786e-4, 2.154434690031882e-3, 1.0e-2)
PAPER_TASKS = ((64, 4), (128, 8), (256, 16), (512, 64))
PAPER_WIDTHS = (64, 128, 256, 512)
PAPER_STATES = (32, 64, 128, 256)
PAPER_VOCAB, PAPER_TRAIN, PAPER_TEST, PAPER_EPOCHS = 8192, 100_000, 3_000, 64
EARLY_STOP = 0.99


def paper_batch_size(seq_len: int) -> int:
    """512, or 256 from L = 128, 128 from L = 256, 64 from L = 512 (Sieber et al. 2024 I.1)."""
    return 64 if seq_len >= 512 else 128 if seq_len >= 256 else 256 if seq_len >= 128 else 512


@dataclass(frozen=True, kw_only=True)
class MQARModel(base.Model):
    """A mixer of Sieber et al. 2024 as the paper ran it: the mixer and its options, whether it takes the state
    expansion n (``state_dim``), whether the model adds learned positions (attention and RNNs: yes; SSMs: no) and the
    blocks' MLP where the authors' config for this mixer sets its own (None: the budget's)."""

    expands: bool = True
    positions: bool = True
    mlp: str | None = None

    def entries(self, states: Sequence[int], width: int) -> list[dict[str, Any]]:
        """The ``model`` sweep-axis entries at width ``width``: one per state expansion (one in all where n does
        not apply)."""
        sizes = states if self.expands else states[:1]
        mlp = {"mlp": self.mlp} if self.mlp else {}
        return [
            {
                "mixer": self.mixer,
                "positions": self.positions,
                "d_model": width,
                **mlp,
                "mixer_options": {**self.options, **({"state_dim": n} if self.expands else {})},
            }
            for n in sizes
        ]


#: Sieber et al. 2024, Fig. 3's qLSTM block (appendix I.1 and the authors' code, built on Hippogriff): width expansion
#: 2, a depthwise causal convolution before the gates, a GELU gate branch, and no tanh (the DSF form, eq. 19)
QLSTM_BLOCK = {"expand": 2, "short_conv": True, "gate": True, "dsf_form": True}

MIXERS = {
    "softmax_attention": MQARModel(mixer="softmax_attention", options={"heads": 1}, expands=False),
    "linear_attention": MQARModel(mixer="linear_attention", options={"heads": 1}),
    # the one MQAR model whose block keeps its MLP in the authors' configs
    "normalized_attention": MQARModel(mixer="normalized_attention", options={"heads": 1}, mlp="gelu"),
    # the S6 and SSD blocks alone: no short convolution, no SiLU gate, no expansion of the width (Sieber et al. 2024
    # I.1); the SSD is the bare S6 block with dt_rank 1 and one scalar A (seqdyn/mixers/ssd.py)
    "s6": MQARModel(mixer="s6", options={"expand": 1, "short_conv": False, "gate": False}, positions=False),
    "ssd": MQARModel(mixer="ssd", positions=False),
    "qlstm": MQARModel(mixer="qlstm", options=QLSTM_BLOCK, expands=False),
    "qlstm_s6": MQARModel(mixer="qlstm_s6", options=QLSTM_BLOCK, expands=False),
}


@dataclass(frozen=True, kw_only=True)
class Budget(base.Budget):
    """How long and on how much data: ``steps`` (else ``epochs``), the examples, the vocabulary, the batch size
    (None: the paper's rule by L) and evaluations every ``eval_every`` steps; and the two departures from the
    paper's model that a CPU budget may need: the blocks' ``mlp`` (the paper's: GELU) and ``init_std`` (Zoology's:
    0.02)."""

    epochs: int | None = PAPER_EPOCHS
    train_examples: int = PAPER_TRAIN
    test_examples: int = PAPER_TEST
    vocab_size: int = PAPER_VOCAB
    batch_size: int | None = None
    mlp: str = "gelu"
    init_std: float = 0.02


#: the ``smoke`` budget of every MQAR reproduction: a toy task's whole pipeline in seconds
SMOKE = Budget(epochs=None, steps=6, train_examples=128, test_examples=32, vocab_size=64, batch_size=16, eval_every=3)
#: the ``smoke`` task, width, learning rate and seed of every MQAR reproduction
SMOKE_GRID = dict(tasks=((16, 2),), widths=(16,), lrs=(1e-2,), seeds=(0,))


def cpu_budget(steps: int, train_examples: int = 20_000) -> Budget:
    """The ``cpu`` budget of the MQAR reproductions: ``steps`` of batch 64 over ``train_examples`` (1,000 test), a
    vocabulary of 256, an evaluation every 250 steps, blocks without MLPs and Zoology's weights (std 0.02) — see
    :data:`CPU_MODEL_REASON`."""
    return Budget(
        epochs=None,
        steps=steps,
        train_examples=train_examples,
        test_examples=1_000,
        vocab_size=256,
        batch_size=64,
        eval_every=250,
        mlp="none",
    )


#: why the ``cpu`` scales leave out the MLPs (measured 2026-11-25, MQAR L = 64, d = 64, batch 64, lr 0.01, 1,500 steps
#: at most: ``seqdyn sweep examples/pilots/mqar_cpu_model.yaml``), and what Zoology's weights do at this scale
#: (2026-11-29: the seed-0 runs of dsf_mqar_models' and dsf_state_expansion's cpu scales)
CPU_MODEL_REASON = (
    "the blocks have no MLPs, as in the authors' configs of every model but normalized attention "
    "(state_mixer torch.nn.Identity; S6 and SSD in Mamba blocks without one), while the paper's text gives every "
    "block one: with GELU MLPs softmax attention itself stayed on the plateau for 1,500 steps at lr 0.01 (best "
    "0.26 with 4 pairs, 0.15 with 8), and without them each step takes about half the time. The weights are "
    "Zoology's (std 0.02, every bias 0, S6's Δ near 0.69): at lr 2.15e-3 softmax attention solved 4 pairs by "
    "step 2,250 (0.996) and 8 pairs by step 1,500 (0.994) on seed 0, and S6 on 4 pairs stayed at 0.235, below "
    "the copy plateau of 0.25, for 5,000 steps (these scales drew the weights with std 0.1 before, and left "
    "S6's Δ in Mamba's [0.001, 0.1]: softmax then solved both by step 500)"
)


#: whether the mixers keep the initialization they give themselves: not in the DSF authors' MQAR runs.  Their Zoology
#: fork (IntelligentControlSystems/dsf-mqar at 7c5aff8) builds every model and then applies ``_init_weights`` to all
#: of it (zoology/model.py, lines 73-96, applied at lines 157 and 184): every ``nn.Linear`` weight ~ N(0, 0.02²) and
#: every Linear bias zeroed, without reading the ``_no_reinit`` mark their S6 puts on ``dt_proj.bias``
#: (zoology/mixers/mamba.py, line 262; only ``MambaInit``, line 525, reads it, and nothing calls it).  So S6's and
#: SSD's Δ start near softplus(0) ≈ 0.69 (not Mamba's [0.001, 0.1]), their ``dt_proj`` weight is N(0, 0.02²), and the
#: qLSTM's gate biases (zoology/mixers/lstm.py, line 17: ``nn.Linear(hidden, 3*hidden, bias=True)``), the forget
#: gate's included, start at 0
KEEP_MIXER_INIT = False

#: the initialization of every MQAR model, in words for the reproductions' ``reductions``
ZOOLOGY_INIT_WORDS = (
    "Zoology's initialization as in the authors' runs: every Linear weight ~ N(0, 0.02²) (the residual "
    "projections 0.02/√(2·layers)) and every Linear bias 0, S6's and SSD's Δ projection included (Δ starts near "
    "softplus(0) ≈ 0.69, not in Mamba's [0.001, 0.1]) and the qLSTMs' forget gate (f starts at σ(0) = 0.5)"
)

#: the DSF authors' MQAR configs all set ``random_non_queries: False`` (fillers stay 0; Zoology's default, True,
#: fills them with random tokens, about one of which per example collides with a key at a vocabulary of 256)
RANDOM_NON_QUERIES = False


def _mqar_task(seq_len: int, pairs: int, budget: Budget) -> dict[str, Any]:
    """The ``task`` section of an MQAR sweep: sequences of length ``seq_len`` with ``pairs`` key-value pairs, the
    budget's vocabulary and numbers of train and test examples, fillers as :data:`RANDOM_NON_QUERIES` says."""
    return {
        "name": "mqar",
        "params": {
            "seq_len": seq_len,
            "num_kv_pairs": pairs,
            "vocab_size": budget.vocab_size,
            "random_non_queries": RANDOM_NON_QUERIES,
        },
        "train_examples": budget.train_examples,
        "test_examples": budget.test_examples,
    }


def mqar_sweeps(
    part: str,
    models: Sequence[str],
    tasks: Sequence[tuple[int, int]],
    seeds: Sequence[int],
    budget: Budget,
    lrs: Sequence[float] | None = None,
    *,
    widths: Sequence[int] = PAPER_WIDTHS,
    states: Sequence[int] = PAPER_STATES,
    backend: str = "auto",
) -> list[SweepConfig]:
    """One sweep per MQAR task ``(L, P)`` named ``PART-L{L}-P{P}``: the mixers ``models`` (keys of :data:`MIXERS`)
    × ``widths`` × ``states`` × ``lrs`` (None: the paper's) × ``seeds``, every layer computing with ``backend``."""
    sweeps = []
    for seq_len, pairs in tasks:
        entries = [entry for name in models for width in widths for entry in MIXERS[name].entries(states, width)]
        train = budget.train_options(
            budget.batch_size or paper_batch_size(seq_len), early_stop={"threshold": EARLY_STOP}, backend=backend
        )
        data = {
            "name": f"{part}-L{seq_len}-P{pairs}",
            "model": {
                "block": "transformer",
                "layers": 2,
                "mlp": budget.mlp,
                "norm": "layernorm",
                "init_std": budget.init_std,
                "keep_mixer_init": KEEP_MIXER_INIT,
            },
            "task": _mqar_task(seq_len, pairs, budget),
            "optimizer": {"weight_decay": 0.1},
            "schedule": {"kind": "cosine", "warmup": 0.1},
            "train": train,
            "sweep": {
                "model": entries,
                "optimizer.lr": list(PAPER_LRS if lrs is None else lrs),
                "train.seed": list(seeds),
            },
        }
        sweeps.append(SweepConfig.model_validate(data))
    return sweeps


# ------------------------------------------------------------------------------------------------ reporting
TASK_KEYS = ("task.params.seq_len", "task.params.num_kv_pairs")
STATE = "model.mixer_options.state_dim"


def task_of(row: dict[str, Any]) -> tuple[int, int]:
    return row[TASK_KEYS[0]], row[TASK_KEYS[1]]


def task_label(task: tuple[int, int]) -> str:
    return f"L={task[0]}, KV={task[1]}"


def tasks_of(results: Results) -> list[tuple[int, int]]:
    """The MQAR tasks of the results, in order."""
    return list(dict.fromkeys(task_of(row) for row in results.rows))


def rows_of(results: Results, mixer: str, task: tuple[int, int] | None = None, **where: Any) -> list[dict[str, Any]]:
    """The rows of one mixer (on one task), with further dotted-key conditions (``__`` for ``.``)."""
    return [row for row in results.select(model__mixer=mixer, **where) if task is None or task_of(row) == task]


#: what MQAR's plateau is, in words
PLATEAU_WORDS = "MQAR's plateau: a value copied from the key–value context"


def context_copy_level(seq_len: int, num_kv_pairs: int, examples: int = 500, seed: int = 0, **params: Any) -> float:
    """MQAR's plateau, measured on the task's test examples: the accuracy of answering every query with a value drawn
    uniformly from the values of its example's key–value context (``k1 v1 … kP vP``) — what a model scores that has
    learnt to copy a value from the context but not which (``1/P``; random fillers after the context do not change
    it).  Averaged per example, as the task's metric.  ``params``: the task's other parameters (vocabulary,
    fillers)."""
    task = build_task("mqar", seq_len=seq_len, num_kv_pairs=num_kv_pairs, **params)
    inputs, targets = task.generate(examples, seed, "test")
    per_example = []
    for tokens, answers in zip(inputs.tolist(), targets.tolist()):
        values = set(tokens[1 : task.context_len : 2])  # the context is k1 v1 k2 v2 …
        chances = [1 / len(values) if answer in values else 0.0 for answer in answers if answer != IGNORE_INDEX]
        per_example.append(sum(chances) / len(chances))
    return sum(per_example) / len(per_example)


def plateau_level(results: Results, task: tuple[int, int] | None = None) -> float:
    """:func:`context_copy_level` of the task of ``results`` (of every task, averaged, where ``task`` is None), with
    the vocabulary and fillers its runs used."""
    levels = []
    for each in [task] if task is not None else tasks_of(results):
        row = next(row for row in results.rows if task_of(row) == each)
        params = {
            name: row[f"task.params.{name}"]
            for name in ("vocab_size", "random_non_queries")
            if row.get(f"task.params.{name}") is not None
        }
        levels.append(context_copy_level(*each, **params))
    return sum(levels) / len(levels)


def escape_step(row: dict[str, Any], level: float) -> int | None:
    """The first evaluated step of a run whose test accuracy passed ``level`` (from its row's ``curve``); None
    where none did."""
    return next((step for step, value in sorted(row.get("curve") or ()) if value > level), None)


def escape_table(results: Results, models: dict[str, str]) -> str:
    """Per task, model and seed: where that seed's best run (over the learning rates) left MQAR's plateau — the
    first evaluation above the plateau plus :data:`PLATEAU_MARGIN` — or that it had not by its last step."""
    seeds = [seed for seed in results.values("train.seed") if seed is not None]
    header = ["task", "model", *(f"seed {seed}" for seed in seeds)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task in tasks_of(results):
        level = plateau_level(results, task) + PLATEAU_MARGIN
        for mixer, label in models.items():
            cells = []
            for seed in seeds:
                runs = [row for row in rows_of(results, mixer, task, train__seed=seed) if result_value(row) is not None]
                if not runs:
                    cells.append("—")
                    continue
                best = max(runs, key=result_value)
                step = escape_step(best, level)
                cells.append(
                    f"left at step {step:,} ({best['best']:.2f})"
                    if step is not None
                    else f"not by step {int(best['steps']):,} ({best['best']:.2f})"
                )
            lines.append("| " + " | ".join([task_label(task), label, *cells]) + " |")
    return "\n".join(lines)


def escape_words(results: Results) -> str:
    """What :func:`escape_table` shows, in a sentence under it."""
    levels = ", ".join(f"{task_label(task)}: {plateau_level(results, task):.3f}" for task in tasks_of(results))
    return (
        f"Where each seed's best run left MQAR's plateau (a value copied from the context; {levels}) by more "
        f"than {PLATEAU_MARGIN} of accuracy: the first such evaluation, else the step it stopped at."
    )


#: the positive control of every MQAR comparison: softmax attention solves the same task (Sieber et al. 2024, Fig. 1:
#: "perfect accuracy throughout") on every seed, so that a model below it is below a model that learnt the task
def softmax_control(tasks: Callable[[Results], Sequence[tuple[int, int]]] | None = None) -> Control:
    """That control on each of the claim's ``tasks`` (results → the tasks it compares; every task of the results
    where None): the weakest of softmax attention's scores there (:func:`~seqdyn.reproduce.claims.weakest`) must
    reach the early stop."""

    def score(results: Results) -> Score:
        scores = [
            results.score("softmax attention", rows_of(results, "softmax_attention", task))
            for task in (tasks_of(results) if tasks is None else tasks(results))
        ]
        return weakest(scores) if scores else Score("softmax attention", (), ("softmax attention: no task",))

    return Control(
        f"softmax attention on the same tasks reaches Zoology's early stop {EARLY_STOP} on every seed",
        score,
        EARLY_STOP,
    )


SOFTMAX_CONTROL = softmax_control()


def compared_plateau(
    score: Callable[..., Score],
    *mixers: Any,
    per_task: bool,
    tasks: Callable[[Results], Sequence[tuple[int, int]]] | None = None,
) -> Plateau:
    """MQAR's plateau for the compared ``mixers`` (``score(results, mixer, task)`` their scores; a mixer may be
    any key ``score`` takes, e.g. the index of a state size): on each task (``per_task``) or averaged over the
    tasks, as the claim compares them — those of ``tasks(results)`` where given, else every task."""

    def averaged_level(results: Results) -> float:
        if tasks is None:
            return plateau_level(results)
        levels = [plateau_level(results, task) for task in tasks(results)]
        return sum(levels) / len(levels) if levels else plateau_level(results)

    def compared(results: Results) -> list[tuple[Score, float]]:
        if not per_task:
            return [(score(results, mixer), averaged_level(results)) for mixer in mixers]
        return [
            (score(results, mixer, task), plateau_level(results, task))
            for task in tasks_of(results)
            for mixer in mixers
        ]

    return Plateau(PLATEAU_WORDS, PLATEAU_MARGIN, compared)


def softmax_solves(results: Results) -> Outcome:
    """Softmax attention reaches Zoology's early-stop accuracy on every seed of every task."""
    return every(
        {
            task_label(task): reaches(results.score("softmax", rows_of(results, "softmax_attention", task)), EARLY_STOP)
            for task in tasks_of(results)
        }
    )


def grid_table(
    results: Results,
    models: dict[str, str],
    column: str,
    column_label: str,
    row_key: str | None = None,
    row_label: str = "n",
) -> str:
    """A markdown table of accuracy (%): one row per (task, model[, ``row_key`` value]), one column per value of
    ``column``; each cell the mean over seeds of the best over the learning rates (± its standard error).  A model
    without ``column`` (softmax attention has no state size) shows its one value in every column."""
    columns = [value for value in results.values(column) if value is not None]
    header = ["task", "model", *([row_label] if row_key else []), *(f"{column_label} = {value}" for value in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task in tasks_of(results):
        for mixer, label in models.items():
            rows = rows_of(results, mixer, task)
            for key in dict.fromkeys(row.get(row_key) for row in rows) if row_key else [None]:
                chosen = [row for row in rows if row_key is None or row.get(row_key) == key]
                cells = [
                    score_cell(
                        results.score(label, [row for row in chosen if row.get(column) in (value, None)]), percent
                    )
                    for value in columns
                ]
                lead = [task_label(task), label, *([str(key or "—")] if row_key else [])]
                lines.append("| " + " | ".join(lead + cells) + " |")
    return "\n".join(lines)


def bar_panels(results: Results, models: dict[str, str], x: str) -> dict[str, dict[str, list]]:
    """One panel per task for :func:`~seqdyn.analysis.plots.plot_bars`: per model, ``(x value, mean, standard
    error)`` with the best over everything else (learning rate, other sizes)."""
    panels = {}
    for task in tasks_of(results):
        series = {}
        for mixer, label in models.items():
            rows = rows_of(results, mixer, task)
            bars = []
            for value in [v for v in results.values(x) if v is not None]:
                score = results.score(label, [row for row in rows if row.get(x) in (value, None)])
                if score.values:
                    bars.append((value, score.mean, score.error_bar))
            series[label] = bars
        panels[task_label(task)] = series
    return panels
