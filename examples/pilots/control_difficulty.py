"""Difficulty chosen on the control alone: a MAD task's settings, hardest first, each trained with only the positive
control of the claims that run on it, at the reproduction's ``cpu`` budget.

Issue 32, item 3: where a task sits at chance (or at the ceiling) for every model, the setting is picked from a short
pilot of the control alone — the hardest rung of a ladder where the control reaches its threshold on every seed within
the budget — and only then are the compared models run.  The threshold is the one the claims' ``Control`` names; it is
not moved after the pilot.

Each ladder names the reproduction whose cpu budget, learning rate, weight decay and control it borrows.  The script
trains the rungs in turn (their seeds side by side) into ``--store`` (resumable: finished runs are skipped), then
prints one JSON line per run (best test accuracy, steps, first evaluation above the task's plateau + 0.05) and per
ladder the rung it chooses.

The ``chosen`` rung it prints is the control's half of the choice only.  Where the compared models' numbers are
known on the rungs too, the setting a ``cpu`` scale runs is ``seqdyn.reproduce.protocols.mad.choose_rung``'s: the
easiest rung where the compared models are not all at the ceiling while the control still learns (``mad.LADDERS``
holds the numbers; selective copying moved so from L = 32 to L = 64).

Run: python examples/pilots/control_difficulty.py fuzzy noisy --store difficulty.db --workers 2
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from escape_steps import escape_step

from seqdyn.reproduce import coef_positions, coef_readout_maps
from seqdyn.reproduce.protocols.mad import PLATEAU_MARGIN, mad_sweeps, plateau_level
from seqdyn.train.config import SweepConfig
from seqdyn.train.store import Store
from seqdyn.train.sweep import expand, run_sweep


@dataclass(frozen=True)
class Ladder:
    """A task's settings from hardest to easiest, the control trained on them, the scale it borrows, the bar."""

    task: str
    rungs: tuple[dict[str, Any], ...]
    control: dict[str, Any]
    scale: dict[str, Any]
    threshold: float
    seeds: tuple[int, ...] = (0, 1)
    #: a longer budget than the borrowed scale's (its steps), where the settings alone found no rung
    steps: int | None = None


LADDERS = {
    # the control of coef_readout_maps / coef_kernel_maps / coef_lambda_structure: exp (softmax) in the Type 1 block
    "fuzzy": Ladder(
        "fuzzy_in_context_recall",
        (
            {"vocab_size": 16, "seq_len": 32, "k_motif_size": 2, "v_motif_size": 2},
            {"vocab_size": 16, "seq_len": 16, "k_motif_size": 2, "v_motif_size": 2},
            {"vocab_size": 16, "seq_len": 16, "k_motif_size": 1, "v_motif_size": 1},
        ),
        coef_readout_maps.model_entry("exp"),
        coef_readout_maps.SCALES["cpu"],
        0.9,
    ),
    # the same control on selective copying, where it scored 0.87 and 0.91 at L = 64 (coef_readout_maps, 6db3862)
    "selcopy": Ladder(
        "selective_copying",
        (
            {"vocab_size": 16, "seq_len": 64, "num_tokens_to_copy": 8},
            {"vocab_size": 16, "seq_len": 32, "num_tokens_to_copy": 4},
        ),
        coef_readout_maps.model_entry("exp"),
        coef_readout_maps.SCALES["cpu"],
        0.9,
    ),
    # the control of coef_positions / coef_unstable_lambda: exp (softmax) with learned positions and Λ = I
    "noisy": Ladder(
        "noisy_in_context_recall",
        (
            {"vocab_size": 32, "seq_len": 16, "noise_vocab_size": 16, "frac_noise": 0.2},
            {"vocab_size": 24, "seq_len": 16, "noise_vocab_size": 16, "frac_noise": 0.2},
        ),
        coef_positions.model_entry("exp", True, "none"),
        coef_positions.SCALES["cpu"],
        coef_positions.SOLVED,
    ),
    # the second pilot: no fuzzy rung of the first reached 0.9 within the scale's budget (0.15/0.72 at L = 16, one
    # seed rising after a late escape), while noisy recall passed once its keys were fewer (V = 24: 4 keys): fuzzy
    # recall with fewer keys, and its easiest rung at three times the steps (noisy at twice: not needed)
    "fuzzy_fewer_keys": Ladder(
        "fuzzy_in_context_recall",
        (
            {"vocab_size": 12, "seq_len": 16, "k_motif_size": 2, "v_motif_size": 2},
            {"vocab_size": 8, "seq_len": 16, "k_motif_size": 2, "v_motif_size": 2},
        ),
        coef_readout_maps.model_entry("exp"),
        coef_readout_maps.SCALES["cpu"],
        0.9,
    ),
    "fuzzy_longer": Ladder(
        "fuzzy_in_context_recall",
        ({"vocab_size": 16, "seq_len": 16, "k_motif_size": 2, "v_motif_size": 2},),
        coef_readout_maps.model_entry("exp"),
        coef_readout_maps.SCALES["cpu"],
        0.9,
        steps=6_000,
    ),
    "noisy_longer": Ladder(
        "noisy_in_context_recall",
        ({"vocab_size": 32, "seq_len": 16, "noise_vocab_size": 16, "frac_noise": 0.2},),
        coef_positions.model_entry("exp", True, "none"),
        coef_positions.SCALES["cpu"],
        coef_positions.SOLVED,
        steps=8_000,
    ),
}


def rung_name(ladder: str, params: dict[str, Any]) -> str:
    return f"difficulty-{ladder}-" + "-".join(f"{key}{value}" for key, value in params.items())


def ladder_sweeps(name: str) -> list[SweepConfig]:
    """One sweep per rung: the control alone at the borrowed scale's budget, lr and weight decay, two seeds."""
    ladder = LADDERS[name]
    scale = ladder.scale
    budget = replace(scale["budget"], steps=ladder.steps) if ladder.steps else scale["budget"]
    sweeps = []
    for params in ladder.rungs:
        (sweep,) = mad_sweeps(
            "difficulty",
            [ladder.control],
            {ladder.task: params},
            ladder.seeds,
            budget,
            scale["lrs"][:1],
            weight_decays=scale["weight_decays"][:1],
        )
        sweeps.append(sweep.model_copy(update={"name": rung_name(name, params)}))
    return sweeps


def report(store: Store, name: str) -> dict[str, Any]:
    """Per rung the control's best accuracy and escape step per seed; the chosen rung is the hardest whose every
    seed reaches the threshold."""
    ladder = LADDERS[name]
    chosen = None
    for params, sweep in zip(ladder.rungs, ladder_sweeps(name)):
        level = plateau_level(ladder.task, **params)
        seeds = []
        for config in expand(sweep):
            record = store.run(config.run_id)
            best = record.best_metric if record else None
            seeds.append(best)
            print(
                json.dumps(
                    {
                        "ladder": name,
                        **params,
                        "seed": config.train.seed,
                        "best": best,
                        "steps": record.step if record else 0,
                        "plateau": round(level, 3),
                        "escape_step": escape_step(store, config.run_id, level + PLATEAU_MARGIN) if record else None,
                    }
                ),
                flush=True,
            )
        if chosen is None and all(best is not None and best >= ladder.threshold for best in seeds):
            chosen = params
    return {"ladder": name, "threshold": ladder.threshold, "chosen": chosen}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ladders", nargs="+", choices=sorted(LADDERS))
    parser.add_argument("--store", default="difficulty.db")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--report", action="store_true", help="train nothing: print what the store holds")
    args = parser.parse_args(argv)
    if not args.report:
        for sweep in (sweep for name in args.ladders for sweep in ladder_sweeps(name)):
            run_sweep(sweep, args.store, workers=args.workers, progress=False)
    with Store(Path(args.store), readonly=True) as store:
        for name in args.ladders:
            print(json.dumps(report(store, name)), flush=True)


if __name__ == "__main__":
    main()
