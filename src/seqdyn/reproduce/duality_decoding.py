"""Fedotov's blog post and the chapter "Deep SSMs and Linear Attention" (duality and efficient inference): a trained
model decoded token by token with ``step()``.

"A linear recurrence is simultaneously a convolution (fast parallel training via FFT or parallel scan) and a
fixed-size hidden-state update (fast O(1)-memory inference)" while "Transformers compute all pairwise token
interactions, incurring O(N²) time and memory" ("Deep SSMs and Linear Attention", opening); "As a recurrent mechanism,
it has linear complexity at inference time with respect to the sequence length L" (Fedotov's blog post, §2).  Four
models are trained on MQAR through the sweep machinery, then each is loaded from its checkpoint and decoded token by
token: the bytes of its streaming state, the wall time per token and the peak memory decoding adds at growing context
lengths, and the largest difference between its token-by-token outputs and its parallel forward pass on the same tokens.

The claims read these measurements as ``exact`` scores, decided on their values: a state's bytes are counted, and the
difference of the two forms is computed on fixed tokens of one trained model — properties of the computation, not
means over seeds (each model is trained once).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from seqdyn.reproduce.base import RESULT_STATUSES, Reproduction, Results
from seqdyn.reproduce.claims import Claim, Outcome, Score, at_most, every, reaches
from seqdyn.train.config import SweepConfig

#: the models as the table labels them: name → (mixer, options, block)
MODELS = {
    "softmax_attention": ("softmax attention (rotary)", {"heads": 2, "rotary": True}),
    "linear_attention": ("linear attention", {"heads": 2}),
    "mamba2": ("Mamba-2", {"state_dim": 16, "head_dim": 16}),
    "gated_deltanet": ("Gated DeltaNet", {"heads": 2}),
}
RECURRENT = ("linear_attention", "mamba2", "gated_deltanet")
#: "fixed-size": the recurrent state at the longest context is no larger than at the shortest
FIXED_SIZE = 1.0
#: "O(N) memory": softmax attention's state grows at least 0.9 times as fast as the context
LINEAR_GROWTH = 0.9
#: the two forms agree to float32 round-off: relative difference at most 1e-4
ROUNDOFF = 1e-4
STATE, TIME, PEAK = "decode.state_bytes", "decode.ms_per_token", "decode.peak_bytes"
ERROR = "decode.step_error"


@dataclass(frozen=True)
class Scale:
    """The training (MQAR length, width, steps) and the decoding (context lengths, timing window, tokens compared
    with the parallel forward)."""

    seq_len: int
    d_model: int
    steps: int
    lengths: tuple[int, ...]
    window: int
    compare: int
    vocab_size: int = 64


SCALES = {
    "paper": Scale(
        seq_len=512,
        d_model=256,
        steps=5_000,
        lengths=(1024, 4096, 16_384, 65_536),
        window=256,
        compare=2048,
        vocab_size=8192,
    ),
    "cpu": Scale(seq_len=64, d_model=64, steps=400, lengths=(256, 1024, 4096), window=64, compare=256, vocab_size=128),
    "smoke": Scale(seq_len=16, d_model=16, steps=4, lengths=(16, 32, 64), window=8, compare=16),
}


def _sweep(scale: Scale) -> SweepConfig:
    entries = [{"mixer": name, "mixer_options": options} for name, (_, options) in MODELS.items()]
    return SweepConfig.model_validate(
        {
            "name": "decode",
            "model": {
                "block": "transformer",
                "layers": 2,
                "d_model": scale.d_model,
                "mlp": "none",
                "positions": False,
                "init_std": 0.1,
            },
            "task": {
                "name": "mqar",
                "params": {"seq_len": scale.seq_len, "num_kv_pairs": 4, "vocab_size": scale.vocab_size},
                "train_examples": scale.steps * 64,
                "test_examples": 256,
            },
            "optimizer": {"lr": 3e-3, "weight_decay": 0.1},
            "schedule": {"kind": "constant"},
            "train": {"steps": scale.steps, "batch_size": 64, "eval_every": max(1, scale.steps // 4)},
            "sweep": {"model": entries},
        }
    )


def measure_run(store, row: dict[str, Any], scale: Scale) -> dict[str, Any]:
    """The decoding measurements of one trained run: state bytes, ms per token and peak memory at every context
    length, and the step-versus-forward difference."""
    from seqdyn.reproduce.measured import measured_once

    kind = f"decoding(lengths={list(scale.lengths)}, window={scale.window}, compare={scale.compare})"
    return measured_once(store, row["run_id"], kind, lambda: _decoding(store, row, scale))


def _decoding(store, row: dict[str, Any], scale: Scale) -> dict[str, Any]:
    from seqdyn.analysis.decoding import decode_profile, random_tokens, step_error
    from seqdyn.train.checkpoint import load_trained

    _, task, model = load_trained(store, row["run_id"])
    vocab = task.spec.input_size
    context = random_tokens(vocab, scale.lengths[-1])
    points = decode_profile(model, context, scale.lengths, scale.window)
    measured = {f"{STATE}.{p.length}": p.state_bytes for p in points}
    measured |= {f"{TIME}.{p.length}": 1000 * p.seconds_per_token for p in points}
    measured |= {
        f"{PEAK}.{length}": peak
        for length in scale.lengths
        if (peak := decoding_peak_bytes(model, context[:, :length])) is not None
    }
    measured[ERROR] = step_error(model, random_tokens(vocab, scale.compare, batch=2, seed=1))
    return measured


def decoding_peak_bytes(model, tokens) -> int | None:
    """The most memory decoding ``tokens`` ``[1, T]`` from the initial state added at any moment (the resident
    set sampled on the CPU, the allocator's peak on a GPU; ``None`` where it cannot be read): a pass of its own,
    apart from the timed one, since the sampling would disturb the timing."""
    from seqdyn.analysis.decoding import decode_profile
    from seqdyn.bench.measure import PeakMemory

    with PeakMemory(next(model.parameters()).device) as peak:
        decode_profile(model, tokens, [tokens.shape[1]], window=tokens.shape[1])  # its one timing is not read
    return peak.peak_bytes


def _value(results: Results, mixer: str, key: str) -> Score:
    """One model's measurement ``key``, an exact score (counted or computed, not a mean over seeds)."""
    rows = results.select(model__mixer=mixer)
    values = tuple(row[key] for row in rows if row.get(key) is not None)
    missing = tuple(f"{row['name']} ({row['status']})" for row in rows if row.get(key) is None)
    return Score(MODELS[mixer][0], values, missing or (() if rows else ("not run",)), exact=True)


def _context_lengths(results: Results) -> list[int]:
    """The context lengths the rows were measured at (their ``decode.state_bytes.N`` keys), ascending."""
    return sorted({int(key.rsplit(".", 1)[1]) for row in results.rows for key in row if key.startswith(STATE + ".")})


def _lengths(results: Results) -> tuple[int, int]:
    lengths = _context_lengths(results)
    return (lengths[0], lengths[-1]) if lengths else (0, 0)


def _growth(results: Results, mixer: str) -> Score:
    """The state's bytes at the longest context over those at the shortest."""
    short, long = _lengths(results)
    first, last = _value(results, mixer, f"{STATE}.{short}"), _value(results, mixer, f"{STATE}.{long}")
    ratios = tuple(b / a for a, b in zip(first.values, last.values) if a)
    return Score(first.label, ratios, first.missing + last.missing, exact=True)


def _recurrent_fixed(results: Results) -> Outcome:
    return every({MODELS[m][0]: at_most(_growth(results, m), FIXED_SIZE) for m in RECURRENT})


def _softmax_grows(results: Results) -> Outcome:
    short, long = _lengths(results)
    growth = _growth(results, "softmax_attention")
    relative = replace(growth, values=tuple(value / (long / short) for value in growth.values)) if short else growth
    return reaches(relative, LINEAR_GROWTH)


def _forms_agree(results: Results) -> Outcome:
    return every({MODELS[m][0]: at_most(_value(results, m, ERROR), ROUNDOFF) for m in MODELS})


CLAIMS = (
    Claim(
        "recurrent state is fixed-size",
        f"state bytes at the longest context ÷ at the shortest ≤ {FIXED_SIZE} "
        "for linear attention, Mamba-2 and Gated DeltaNet",
        "a fixed-size hidden-state update (fast O(1)-memory inference)",
        _recurrent_fixed,
        paper_value="O(1)",
    ),
    Claim(
        "attention's state grows with the context",
        f"softmax attention's state grows ≥ {LINEAR_GROWTH} × as fast as the context",
        "Transformers compute all pairwise token interactions, incurring O(N²) time and memory",
        _softmax_grows,
        paper_value="O(N) per token",
    ),
    Claim(
        "the two forms agree",
        f"token-by-token outputs within {ROUNDOFF:g} (relative) of the parallel forward, every model",
        "A linear recurrence is simultaneously a convolution [...] and a fixed-size hidden-state update",
        _forms_agree,
    ),
)


class Decoding(Reproduction):
    name = "duality_decoding"
    paper = "Fedotov; “Deep SSMs and Linear Attention”"
    figure = "recurrent inference"
    summary = (
        "Four models trained on MQAR, then decoded token by token with step(): the bytes of the streaming "
        "state per sequence, the wall time per token and the peak memory decoding adds, at growing context "
        "lengths, and the largest relative difference between the token-by-token and the parallel outputs."
    )
    claims = CLAIMS
    reductions = {
        "paper": "The blog post and the chapter run no experiment of their own: this scale decodes to 65,536 "
        "tokens models of width 256 trained on MQAR L = 512 for 5,000 steps (a GPU: softmax attention's step is "
        "O(context)).",
        "cpu": "Models of width 64, two layers, trained 400 steps on MQAR (L = 64, 4 pairs, vocabulary 128), decoded "
        "to 4,096 tokens on one thread; times are wall time on this machine (the mean of the last 64 "
        "steps before each length), so only their trend means something.",
        "smoke": "Width 16, 4 training steps, decoded to 64 tokens: no verdict to trust.",
    }

    def sweeps(self, scale: str) -> list[SweepConfig]:
        return [_sweep(SCALES[scale])]

    def measure(self, results: Results, store_path: str | Path) -> Results:
        from seqdyn.bench.measure import one_thread
        from seqdyn.train.store import Store

        store, rows = Store(store_path), []
        with one_thread():
            for row in results.rows:
                done = row["status"] in RESULT_STATUSES
                rows.append({**row, **(measure_run(store, row, SCALES[results.scale]) if done else {})})
        return replace(results, rows=tuple(rows))

    def table(self, results: Results) -> str:
        lengths = _context_lengths(results)
        header = [
            "model",
            "MQAR accuracy",
            *(f"state KiB at {n}" for n in lengths),
            *(f"ms/token at {n}" for n in lengths),
            *(f"peak KiB at {n}" for n in lengths),
            "step vs forward",
        ]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in results.rows:
            cells = [MODELS[row["model.mixer"]][0], "" if row.get("best") is None else f"{row['best']:.3f}"]
            cells += [_number(row.get(f"{STATE}.{n}"), 1 / 1024, "{:.1f}") for n in lengths]
            cells += [_number(row.get(f"{TIME}.{n}"), 1, "{:.2f}") for n in lengths]
            cells += [_number(row.get(f"{PEAK}.{n}"), 1 / 1024, "{:.0f}") for n in lengths]
            cells.append(_number(row.get(ERROR), 1, "{:.1e}"))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + (
            "\n\nState: bytes of every tensor the model's streaming state holds, per "
            "sequence (all layers). Time: one sequence, one thread. Peak: the most memory "
            "the process added while decoding one sequence from the start to that length "
            "(its resident set sampled every 0.5 ms; a pass of its own, untimed), so it "
            "counts the state, the step's temporaries and the copies torch makes as a "
            "cache grows, in whole pages."
        )

    def plot(self, results: Results, path: Path) -> Path:
        from seqdyn.analysis.plots import plot_curves

        panels: dict[str, dict[str, list]] = {"state": {}, "time": {}, "peak": {}}
        lengths = _context_lengths(results)
        for row in results.rows:
            for panel, prefix, factor in (("state", STATE, 1 / 1024), ("time", TIME, 1.0), ("peak", PEAK, 1 / 1024)):
                values = [(n, row.get(f"{prefix}.{n}")) for n in lengths]
                points = [(n, value * factor) for n, value in values if value]  # a log axis: zero peaks left out
                if points:
                    panels[panel][MODELS[row["model.mixer"]][0]] = points
        panels = {name: series for name, series in panels.items() if series} or {"state": {"no run measured": [(1, 1)]}}
        return plot_curves(
            panels,
            path,
            "context length (tokens)",
            {"state": "streaming state (KiB per sequence)", "time": "ms per token", "peak": "peak memory added (KiB)"},
            title="Fedotov; “Deep SSMs and Linear Attention”: decoding token by token",
        )


def _number(value: float | None, factor: float, form: str) -> str:
    return "" if value is None else form.format(value * factor)


REPRODUCTION = Decoding()
