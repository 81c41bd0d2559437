"""The MAD protocol of seed 001 (``seqdyn.reproduce.mad``): its sweeps, the MAD score, the best run of each cell and
the measurements on trained models."""

from __future__ import annotations

import csv

import pytest

from seqdyn.reproduce import get
from seqdyn.reproduce.mad import (NEAR_ZERO, PAPER_MIN_LR, TRANSFORMER_BLOCK, Budget, best_runs, mad_score,
                                  mad_sweeps, measured_score)
from seqdyn.reproduce.runner import run
from tests.reproduce.helpers import results, row


def test_one_sweep_per_task_over_models_lrs_weight_decays_and_seeds():
    models = [{**TRANSFORMER_BLOCK, "mixer": "softmax_attention"}, {**TRANSFORMER_BLOCK, "mixer": "linear_attention"}]
    tasks = {"memorization": {"vocab_size": 64, "seq_len": 16}, "selective_copying": {"seq_len": 32, "num_tokens_to_copy": 4}}
    sweeps = mad_sweeps("part", models, tasks, lrs=(1e-4, 1e-3), weight_decays=(0.0, 0.1), seeds=(0, 1, 2),
                        budget=Budget(epochs=None, steps=10, width=32))
    assert [sweep.name for sweep in sweeps] == ["part-memorization", "part-selective_copying"]
    runs = sweeps[1].expand()
    assert len(runs) == 2 * 2 * 2 * 3
    assert {(c.optimizer.lr, c.optimizer.weight_decay) for c in runs} == {(a, b) for a in (1e-4, 1e-3)
                                                                           for b in (0.0, 0.1)}
    config = runs[0]
    assert config.task.name == "selective_copying" and config.task.params["seq_len"] == 32
    assert config.schedule.min_lr == PAPER_MIN_LR and config.train.early_stop.threshold == 0.999
    assert config.model.block == "transformer" and config.model.mlp == "swiglu" and config.model.d_model == 32


def grid(values: dict[tuple[str, int], list[float]]):
    """Two weight decays per (task, seq_len) setting and seed: the given accuracy and a worse one."""
    return results([row(value - worse, task__name=task, task__params__seq_len=length, optimizer__weight_decay=wd,
                        train__seed=seed)
                    for (task, length), per_seed in values.items() for seed, value in enumerate(per_seed)
                    for wd, worse in ((0.0, 0.3), (0.1, 0.0))])


def test_the_mad_score_averages_the_best_of_the_grid_over_a_tasks_settings():
    data = grid({("recall", 64): [1.0, 0.8], ("recall", 128): [0.6, 0.4]})
    assert mad_score(data, "m", data.rows).values == pytest.approx((0.8, 0.6))


def test_the_measurement_of_a_cell_is_its_best_runs():
    data = grid({("recall", 64): [1.0, 0.8]})
    rows = [r | {NEAR_ZERO: 0.5 if r["optimizer.weight_decay"] == 0.1 else 0.9} for r in data.rows]
    assert {r["optimizer.weight_decay"] for r in best_runs(rows, ("task.name",))} == {0.1}
    assert measured_score("m", rows, NEAR_ZERO, ("task.name",)).values == (0.5, 0.5)
    unmeasured = [{k: v for k, v in r.items() if k != NEAR_ZERO} for r in data.rows]
    score = measured_score("m", unmeasured, NEAR_ZERO, ("task.name",))
    assert not score.complete and all("not measured" in name for name in score.missing)
    failed = [r | {"status": "failed", "best": None} for r in data.rows]
    assert best_runs(failed, ("task.name",)) == []
    assert not measured_score("m", failed, NEAR_ZERO, ("task.name",)).values


def test_the_best_runs_of_a_reproduction_carry_their_coefficient_measurements(tmp_path):
    written = run(get("coef_readout_maps"), "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    with (written.folder / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 14  # smoke: one run per task and readout, each the best of its cell
    assert all(0.0 <= float(r[NEAR_ZERO]) <= 1.0 for r in rows)
