"""Sieber et al. 2025 (coefficient dynamics), Fig. 11 (Principle 6): an unstable Λ trains with the right normalization.

"we therefore consider the simple unstable evolution matrix Λ_i = λI [λ > 1] and show that with appropriate design
of η_i, we are able to solve noisy in-context recall. We fix [b] and ablate the readout maps and normalization
factors [...] the normalization factor η_i = Σ_j α_ij ensures stable training and achieves perfect accuracy. [...]
First, consider [η_i = 1]: for readout map [exp], training is unstable and the model fails to learn anything, yet for
readout maps [that grow linearly] training is stable and the model achieves good performance, albeit suboptimal.
[...] Now consider [a normalizer that grows linearly with the state]: for readout map [exp], training is unstable
and the model fails to learn anything, yet for [the linear ones] training is stable and the model achieves perfect
performance." (appendix D.4; Lemma 6, Corollary 6.1).

The ``custom`` mixer with Λ = λI, λ = 1.01 at MAD's L = 128 (the paper's "mildly unstable" value is lost from the
text copy; 1.01^127 ≈ 3.5 over the 128 tokens) and at any other length the λ with the same growth λ^(L−1) over the
sequence (:func:`unstable_lambda`: 1.0416 at the cpu scale's L = 32), b = K^-½, readouts exp (superlinear) and
ReLU and softplus (linear growth; the paper's two are lost), and three normalizers: none (η = 1), ``state``
(η_i = max(|q_iᵀ n_i|, 1) with mLSTM's normalization state, linear in the state) and ``sum`` (η_i = Σ_j α_ij,
Corollary 6.1); Type 1 blocks with learned positions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from seqdyn.analysis.plots import plot_bars
from seqdyn.reproduce.base import Reproduction, Results, percent, score_cell
from seqdyn.reproduce.claims import (
    BEST_SCORE,
    Claim,
    Control,
    Outcome,
    Plateau,
    Score,
    at_least,
    at_most,
    every,
    reaches,
)
from seqdyn.reproduce.protocols.mad import (
    CPU_TASKS,
    PAPER_LRS,
    PAPER_PROTOCOL,
    PAPER_TASKS,
    PAPER_WEIGHT_DECAYS,
    PLATEAU_MARGIN,
    SMOKE,
    SMOKE_REDUCTION,
    SMOKE_TASKS,
    TRANSFORMER_BLOCK,
    Budget,
    mad_plateau,
    mad_score,
    mad_sweeps,
    pick,
    task_plateau,
)
from seqdyn.train.config import SweepConfig

#: λ at MAD's L = 128, and the growth λ^(L−1) over the sequence it gives, which every length keeps
LAMBDA, PAPER_LENGTH = 1.01, 128
GROWTH = LAMBDA ** (PAPER_LENGTH - 1)
DECAY = "model.mixer_options.constant_decay"
READOUTS = {"exp": "exp", "relu": "ReLU", "softplus": "softplus"}
LINEAR = ("relu", "softplus")
NORMALIZERS = {"none": "η = 1", "state": "η = max(|qᵀn|, 1)", "sum": "η = Σα"}
#: "perfect accuracy": at least 90 %; "fails to learn anything" is measured against the task's plateau
#: (:func:`fails_level`), not against chance
SOLVED = 0.9
#: "good performance, albeit suboptimal": the linear readouts above exp by at least 20 points without normalization
MARGIN = 0.2
TASK = "noisy_in_context_recall"

SCALES: dict[str, dict[str, Any]] = {
    "paper": dict(
        tasks=pick(PAPER_TASKS, TASK), lrs=PAPER_LRS, weight_decays=PAPER_WEIGHT_DECAYS, seeds=(0,), budget=Budget()
    ),
    # noisy recall at the setting of coef_positions' difficulty pilot (mad.CPU_TASKS: L = 16, 4 keys)
    "cpu": dict(
        tasks=pick(CPU_TASKS, TASK),
        lrs=(1e-3,),
        weight_decays=(0.1,),
        seeds=(0, 1, 2),
        budget=Budget(
            epochs=None, steps=5_000, train_examples=12_800, test_examples=256, batch_size=32, eval_every=500, width=64
        ),
    ),
    "smoke": dict(tasks=pick(SMOKE_TASKS, TASK), lrs=(1e-3,), weight_decays=(0.0,), seeds=(0,), budget=SMOKE),
}


def unstable_lambda(seq_len: int) -> float:
    """The λ whose growth λ^(L−1) over ``seq_len`` tokens is λ = 1.01's over MAD's 128 (to four decimals)."""
    return round(GROWTH ** (1 / (seq_len - 1)), 4)


def model_entry(readout: str, normalizer: str, lam: float) -> dict[str, Any]:
    options = {
        "readout": readout,
        "heads": 4,
        "decay": "constant",
        "constant_decay": lam,
        "scale": "inv_sqrt",
        "normalizer": normalizer,
    }
    return {**TRANSFORMER_BLOCK, "mixer": "custom", "mixer_options": options}


#: the positive control: softmax attention as the custom mixer computes it (exp, η = Σα) with a stable Λ = I and
#: learned positions, on the same task and budget — a model that shows the task can be learnt there
CONTROL_ENTRY = {
    **TRANSFORMER_BLOCK,
    "mixer": "custom",
    "mixer_options": {"readout": "exp", "heads": 4, "decay": "none", "scale": "inv_sqrt", "normalizer": "sum"},
}


def _control_score(results: Results) -> Score:
    return mad_score(results, "softmax attention, Λ = I", results.select(model__mixer_options__decay="none"))


CONTROL = Control(
    f"softmax attention with Λ = I and learned positions reaches {SOLVED} on the same task", _control_score, SOLVED
)


def _score(results: Results, readouts: tuple[str, ...], normalizer: str) -> Score:
    rows = [
        row
        for row in results.select(model__mixer_options__normalizer=normalizer, model__mixer_options__decay="constant")
        if row.get("model.mixer_options.readout") in readouts
    ]
    label = ", ".join(READOUTS[r] for r in readouts) + f" ({NORMALIZERS[normalizer]})"
    return mad_score(results, label, rows, by=("model.mixer_options.readout",))


def _lambdas(results: Results) -> str:
    """The λ the results were trained with, for a caption."""
    return " / ".join(str(lam) for lam in results.values(DECAY) if lam is not None) or "λ"


def _sum_solves(results: Results) -> Outcome:
    return every({READOUTS[r]: reaches(_score(results, (r,), "sum"), SOLVED) for r in READOUTS})


def fails_level(results: Results) -> float:
    """What a model that "fails to learn anything" scores at most: the task's plateau as the results' settings
    give it (the better of a constant answer and a token copied from the context, ``mad.plateau_level``) plus
    ``mad.PLATEAU_MARGIN``."""
    return task_plateau(results, TASK) + PLATEAU_MARGIN


def _plateau(compared: Callable[[Results], list[Score]]) -> Plateau:
    """MAD's plateau rule on the readouts a claim says learn (those it says fail are meant to stay there)."""
    return mad_plateau(lambda results, task: compared(results))


def _unnormalized_exp_fails(results: Results) -> Outcome:
    return every(
        {
            "exp": at_most(_score(results, ("exp",), "none"), fails_level(results)),
            "linear readouts vs exp": at_least(
                _score(results, LINEAR, "none"), _score(results, ("exp",), "none"), MARGIN, ceiling=BEST_SCORE
            ),
        }
    )


def _state_normalizer(results: Results) -> Outcome:
    return every(
        {
            "exp": at_most(_score(results, ("exp",), "state"), fails_level(results)),
            **{READOUTS[r]: reaches(_score(results, (r,), "state"), SOLVED) for r in LINEAR},
        }
    )


CLAIMS = (
    Claim(
        "η = Σα trains",
        f"with η = Σ_j α_ij every readout reaches {SOLVED}",
        "the normalization factor η_i = Σ_j α_ij ensures stable training and achieves perfect accuracy",
        _sum_solves,
        control=CONTROL,
        plateau=_plateau(lambda results: [_score(results, (r,), "sum") for r in READOUTS]),
    ),
    Claim(
        "η = 1: exp fails",
        f"with η = 1, exp stays within {PLATEAU_MARGIN} of the task's plateau and the linear "
        f"readouts score ≥ exp + {MARGIN}",
        "for readout map [exp], training is unstable and the model fails to learn anything, yet for readout maps "
        "[that grow linearly] training is stable and the model achieves good performance, albeit suboptimal",
        _unnormalized_exp_fails,
        control=CONTROL,
        plateau=_plateau(lambda results: [_score(results, LINEAR, "none")]),
    ),
    Claim(
        "linear η: only exp fails",
        f"with η = max(|qᵀn|, 1), exp stays within {PLATEAU_MARGIN} of the task's "
        f"plateau and ReLU and softplus reach {SOLVED}",
        "for readout map [exp], training is unstable and the model fails to learn anything, yet for "
        "[the others] training is stable and the model achieves perfect performance",
        _state_normalizer,
        control=CONTROL,
        plateau=_plateau(lambda results: [_score(results, (r,), "state") for r in LINEAR]),
    ),
)


class UnstableLambda(Reproduction):
    name = "coef_unstable_lambda"
    paper = "Sieber et al. 2025 (coefficient dynamics)"
    figure = "Fig. 11"
    summary = (
        "An unstable Λ = λI (λ^(L−1) = 1.01^127) with readouts exp, ReLU and softplus and normalizers η = 1, "
        "η = max(|qᵀn|, 1) and η = Σα on MAD's noisy in-context recall: accuracy (best over the lr × "
        "weight-decay grid, mean over seeds ± half the seed range)."
    )
    claims = CLAIMS
    reductions = {
        "paper": PAPER_PROTOCOL + "; Type 1 blocks with learned positions; noisy in-context recall at MAD's settings.",
        "cpu": "Noisy in-context recall at L = 16 with 4 keys (V = 24 with 16 noise tokens; MAD: L = 128, V = 32; "
        "λ = 1.088 keeps the growth over the sequence); width 64 (4 heads of 16); 5,000 steps of batch 32 over "
        "12,800 examples (256 test); lr 1e-3 and weight decay 0.1 only; three seeds. The setting is the one "
        "the difficulty pilot of coef_positions' control (softmax with positions, η = max(|Σα|, 1)) chose: "
        "0.935 / 0.903 after 4,000 steps, where at L = 32 (the run at 6db3862) softmax reached 0.50. Softmax "
        "attention with Λ = I, η = Σα and positions is trained beside the models as every claim's control; "
        "'fails to learn anything' is within 0.05 of the task's plateau (0.53 here: a constant answer or a "
        "value copied from the context), not below a multiple of chance.",
        "smoke": SMOKE_REDUCTION,
    }

    def sweeps(self, scale: str) -> list[SweepConfig]:
        lam = unstable_lambda(SCALES[scale]["tasks"][TASK]["seq_len"])
        entries = [model_entry(readout, normalizer, lam) for readout in READOUTS for normalizer in NORMALIZERS]
        entries.append(CONTROL_ENTRY)
        return mad_sweeps("unstable", entries, **SCALES[scale])

    def table(self, results: Results) -> str:
        """Fig. 11 as a table: one row per readout, one column per normalizer."""
        lines = [
            "| φ | " + " | ".join(label.replace("|", "\\|") + " %" for label in NORMALIZERS.values()) + " |",
            "|" + "---|" * (1 + len(NORMALIZERS)),
        ]
        for readout, label in READOUTS.items():
            cells = [score_cell(_score(results, (readout,), normalizer), percent) for normalizer in NORMALIZERS]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        caption = f"Accuracy in %, Λ = {_lambdas(results)} I. The paper prints Fig. 11 only as a figure."
        return "\n".join(lines) + "\n\n" + caption

    def plot(self, results: Results, path: Path) -> Path:
        series = {}
        for normalizer, label in NORMALIZERS.items():
            bars = []
            for readout, name in READOUTS.items():
                score = _score(results, (readout,), normalizer)
                if score.values:
                    bars.append((name, score.mean, score.spread / 2))
            series[label] = bars
        return plot_bars(
            {"noisy in-context recall": series},
            path,
            xlabel="readout map φ",
            title=f"Sieber et al. 2025, Fig. 11: Λ = {_lambdas(results)} I and the normalizer η",
        )


REPRODUCTION = UnstableLambda()
