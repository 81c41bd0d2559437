"""The MAD protocol of seed 001 (``seqdyn.reproduce.protocols.mad``): its sweeps, the MAD score, the best run of
each cell and the measurements on trained models."""

from __future__ import annotations

import csv

import pytest

from seqdyn.analysis.model import HeadReport
from seqdyn.reproduce import get
from seqdyn.reproduce.claims import PLATEAU_MARGIN
from seqdyn.reproduce.protocols.mad import (
    CPU_TASKS,
    LARGE,
    MAX_ZEROS,
    NEAR_ZERO,
    PAPER_MIN_LR,
    PAPER_TASKS,
    SELECTIVE_COPYING_LADDER,
    SMOKE,
    TASK_TRAIN_EXAMPLES,
    TRANSFORMER_BLOCK,
    ZERO_BOUND,
    Budget,
    Rung,
    at_ceiling,
    best_runs,
    choose_rung,
    ladder_table,
    mad_score,
    mad_sweeps,
    measure_coefficients,
    measured_score,
    pick,
    plateau_level,
    train_examples,
)
from seqdyn.reproduce.runner import run
from tests.reproduce.helpers import results, row


def test_one_sweep_per_task_over_models_lrs_weight_decays_and_seeds():
    models = [{**TRANSFORMER_BLOCK, "mixer": "softmax_attention"}, {**TRANSFORMER_BLOCK, "mixer": "linear_attention"}]
    tasks = {
        "memorization": {"vocab_size": 64, "seq_len": 16},
        "selective_copying": {"seq_len": 32, "num_tokens_to_copy": 4},
    }
    sweeps = mad_sweeps(
        "part",
        models,
        tasks,
        lrs=(1e-4, 1e-3),
        weight_decays=(0.0, 0.1),
        seeds=(0, 1, 2),
        budget=Budget(epochs=None, steps=10, width=32),
    )
    assert [sweep.name for sweep in sweeps] == ["part-memorization", "part-selective_copying"]
    runs = sweeps[1].expand()
    assert len(runs) == 2 * 2 * 2 * 3
    assert {(c.optimizer.lr, c.optimizer.weight_decay) for c in runs} == {
        (a, b) for a in (1e-4, 1e-3) for b in (0.0, 0.1)
    }
    config = runs[0]
    assert config.task.name == "selective_copying" and config.task.params["seq_len"] == 32
    assert config.schedule.min_lr == PAPER_MIN_LR and config.train.early_stop.threshold == 0.999
    assert config.model.block == "transformer" and config.model.mlp == "swiglu" and config.model.d_model == 32


def grid(values: dict[tuple[str, int], list[float]]):
    """Two weight decays per (task, seq_len) setting and seed: the given accuracy and a worse one."""
    return results(
        [
            row(
                value - worse,
                task__name=task,
                task__params__seq_len=length,
                optimizer__weight_decay=wd,
                train__seed=seed,
            )
            for (task, length), per_seed in values.items()
            for seed, value in enumerate(per_seed)
            for wd, worse in ((0.0, 0.3), (0.1, 0.0))
        ]
    )


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


def head(
    layer: int,
    near_zero: float | None,
    large: float | None,
    mean_zeros: float | None = None,
    zero_bound: int | None = None,
) -> HeadReport:
    """One head's report with the fractions and Fig. 9's count given by hand."""
    return HeadReport(
        layer=layer,
        module=f"blocks.{layer}.mixer",
        mixer="custom",
        head=0,
        key_dim=None,
        readout="identity" if zero_bound is not None else "exp",
        near_zero_fraction=near_zero,
        large_fraction=large,
        max_zero_count=None,
        mean_zero_count=mean_zeros,
        zero_bound=zero_bound,
        class_shares=None,
        spectral_bound=None,
    )


def measured(monkeypatch, heads: list[HeadReport]) -> dict:
    """``measure_coefficients`` of a run whose model ``inspect_model`` reports as ``heads``."""
    import seqdyn.analysis.model
    import seqdyn.train.checkpoint

    class Task:
        def generate(self, examples, seed, split):
            assert (examples, seed, split) == (16, 0, "test")
            return "inputs", None

    monkeypatch.setattr(seqdyn.train.checkpoint, "load_trained", lambda store, run_id: (None, Task(), "model"))
    monkeypatch.setattr(
        seqdyn.analysis.model,
        "inspect_model",
        lambda model, inputs, spectral: heads if (model, inputs, spectral) == ("model", "inputs", False) else [],
    )
    return measure_coefficients(store=NothingKept(), row={"run_id": "r"})


class NothingKept:
    """A store that has kept no measurement, and keeps none."""

    def measurements(self, run_id, kind):
        return None

    def record_measurements(self, run_id, kind, values):
        pass


def test_measure_coefficients_averages_the_fractions_over_layers_and_heads(monkeypatch):
    """Seed 001 Fig. 1 and Fig. 7 average the near-zero and large fractions over the model's heads: the mean of
    0.1, 0.4 and 0.7 is 0.4 (the minimum would be 0.1), of 0.9, 0.5 and 0.2 is 1.6 / 3; a head without scalar
    coefficients (None) is left out; Fig. 9's count is the largest of the identity heads' and the bound the
    smallest K − 1."""
    heads = [
        head(0, 0.1, 0.9, mean_zeros=2.5, zero_bound=7),
        head(0, None, None),
        head(1, 0.4, 0.5),
        head(1, 0.7, 0.2, mean_zeros=1.0, zero_bound=3),
    ]
    values = measured(monkeypatch, heads)
    assert values[NEAR_ZERO] == pytest.approx((0.1 + 0.4 + 0.7) / 3, rel=1e-15)
    assert values[LARGE] == pytest.approx((0.9 + 0.5 + 0.2) / 3, rel=1e-15)
    assert values[MAX_ZEROS] == 2.5 and values[ZERO_BOUND] == 3


def test_measure_coefficients_of_a_model_without_scalar_coefficients_or_identity_heads(monkeypatch):
    assert measured(monkeypatch, [head(0, None, None)]) == {NEAR_ZERO: None, LARGE: None}
    values = measured(monkeypatch, [head(0, 0.25, 0.75), head(1, 0.5, 0.5)])
    assert values == {NEAR_ZERO: (0.25 + 0.5) / 2, LARGE: (0.75 + 0.5) / 2}  # no Fig. 9 count without identity heads


def test_the_plateau_is_the_better_of_a_constant_answer_and_copying_from_the_context():
    """Memorization's answers never occur in its inputs: only the constant answer scores (about 1 / vocabulary);
    selective copying's answers are the context's content tokens: copying one of them scores about 1 / their
    number; fuzzy recall's answers are values in the context."""
    from seqdyn.reproduce.protocols.mad import plateau_level

    assert plateau_level("memorization", vocab_size=256, seq_len=32) < 0.03
    assert 0.1 < plateau_level("selective_copying", vocab_size=16, seq_len=64, num_tokens_to_copy=8) < 0.25
    fuzzy = plateau_level("fuzzy_in_context_recall", vocab_size=16, seq_len=64, k_motif_size=3, v_motif_size=3)
    assert 0.1 < fuzzy < 0.3
    assert plateau_level(
        "fuzzy_in_context_recall", seed=1, vocab_size=16, seq_len=64, k_motif_size=3, v_motif_size=3
    ) == pytest.approx(fuzzy, abs=0.02)  # a property of the task, not the draw


def test_the_mad_control_is_softmax_in_the_type_1_block_and_must_reach_0_9_on_every_task():
    """``mad.MAD_CONTROL``: the exp readout with exactly the control's options, learned positions and the
    transformer block; its mean must reach 0.9 on every task (Student's interval: 0.95, 0.96, 0.955 does), and a
    task whose seeds (0.99, 0.85) leave it open — or below — fails it, naming that task."""
    from seqdyn.reproduce.protocols import mad
    from tests.reproduce.helpers import entry_keys

    def control_rows(task, values, **changed):
        keys = {**entry_keys(mad.CONTROL_ENTRY), **changed}
        return [row(value, task__name=task, train__seed=seed, **keys) for seed, value in enumerate(values)]

    other = control_rows("selective_copying", [0.2, 0.2], model__positions=False)  # not the control: no positions
    assert not mad.is_control(other[0]) and mad.is_control(control_rows("memorization", [0.9])[0])
    passing = results(
        control_rows("fuzzy_in_context_recall", [0.95, 0.96, 0.955]) + control_rows("memorization", [1, 1, 1])
    )
    assert mad.MAD_CONTROL.check(passing)["passed"]
    failing = results(
        control_rows("fuzzy_in_context_recall", [0.95, 0.96]) + control_rows("selective_copying", [0.99, 0.85]) + other
    )
    checked = mad.MAD_CONTROL.check(failing)
    assert not checked["passed"] and checked["setting"] == "softmax on selective_copying"


def test_cpu_tasks_leave_out_the_tasks_the_difficulty_pilot_found_no_setting_for_and_say_why():
    from seqdyn.reproduce import coef_readout_maps
    from seqdyn.reproduce.protocols import mad

    tasks = mad.cpu_tasks("fuzzy_in_context_recall", "selective_copying", "memorization")
    assert list(tasks) == ["selective_copying", "memorization"] and tasks["selective_copying"]["seq_len"] == 64
    assert list(coef_readout_maps.SCALES["cpu"]["tasks"]) == ["selective_copying", "memorization"]
    assert "fuzzy_in_context_recall" in coef_readout_maps.SCALES["paper"]["tasks"]  # the paper scale keeps it
    words = mad.left_out_words("fuzzy_in_context_recall", "selective_copying")
    assert words.startswith("Fuzzy recall is left out") and "0.9" in words and words.endswith(").")
    assert mad.left_out_words("selective_copying") == ""
    with pytest.raises(ValueError, match="names: copying has no cpu setting"):
        mad.cpu_tasks("copying")


def test_memorization_trains_on_mad_labs_256_examples():
    """MAD's memorization learns its fixed key-value map from 256 examples (athms/mad-lab at 0f49a45,
    configs/tasks/memorization.yml, line 4: ``num_train_examples: 256``); every other task takes MADConfig's
    12,800 (mad/configs.py, line 43).  A budget with fewer examples keeps its own."""
    assert TASK_TRAIN_EXAMPLES == {"memorization": 256}
    sweeps = mad_sweeps(
        "p",
        [{**TRANSFORMER_BLOCK, "mixer": "linear_attention"}],
        pick(PAPER_TASKS, "memorization", "selective_copying"),
        (0,),
        Budget(),
        weight_decays=(0.0,),
    )
    assert [sweep.task.train_examples for sweep in sweeps] == [256, 12_800]
    assert train_examples("memorization", Budget(epochs=None, steps=2_000, train_examples=12_800)) == 256
    assert train_examples("memorization", SMOKE) == SMOKE.train_examples == 64


# ------------------------------------------------------------------------------------------------ difficulty
SETTINGS = (
    {"vocab_size": 16, "seq_len": 64, "num_tokens_to_copy": 8},
    {"vocab_size": 16, "seq_len": 32, "num_tokens_to_copy": 4},
)


def ladder(hard_control, hard_compared, easy_control, easy_compared):
    """Selective copying's two rungs (hardest first) with hand-made numbers."""
    return (
        Rung(SETTINGS[0], tuple(hard_control), dict(enumerate(hard_compared)), "hand-made"),
        Rung(SETTINGS[1], tuple(easy_control), dict(enumerate(easy_compared)), "hand-made"),
    )


def chosen(rungs):
    rung = choose_rung("selective_copying", rungs)
    return None if rung is None else rungs.index(rung)


def test_the_ceiling_is_within_the_plateau_margin_of_one():
    assert at_ceiling(0.95) and at_ceiling(1.0) and not at_ceiling(0.9499)


def test_the_ladder_takes_the_easiest_rung_where_the_compared_models_are_not_all_at_the_ceiling():
    """Just inside and outside the ceiling (1 − 0.05): one compared model at 0.9499 keeps the easy rung; all at
    0.95 or above move the choice one rung harder; a harder rung the control learns is not taken over an easier one."""
    assert chosen(ladder([0.8, 0.8], [0.6, 0.7], [0.99, 0.99], [0.9499, 1.0])) == 1
    assert chosen(ladder([0.8, 0.8], [0.6, 0.7], [0.99, 0.99], [0.95, 1.0])) == 0
    assert chosen(ladder([0.8, 0.8], [0.95, 0.99], [0.99, 0.99], [0.95, 1.0])) is None  # all at the ceiling
    assert chosen(ladder([0.8, 0.8], [0.6], [0.99, 0.99], [])) == 0  # no compared numbers: no choice there


def test_the_ladder_takes_a_rung_only_where_every_seed_of_the_control_leaves_the_plateau():
    """Just inside and outside the control's bar: every seed above the task's plateau + 0.05 (0.165 + 0.05 at
    L = 64 with 8 tokens) learns; one seed at the bar does not, and then no rung is chosen."""
    bar = plateau_level("selective_copying", **SETTINGS[0]) + PLATEAU_MARGIN
    assert bar == pytest.approx(0.215, abs=0.01)
    assert chosen(ladder([bar + 1e-3, 0.9], [0.6, 0.7], [0.99, 0.99], [1.0, 1.0])) == 0
    assert chosen(ladder([bar, 0.9], [0.6, 0.7], [0.99, 0.99], [1.0, 1.0])) is None


def test_the_cpu_setting_of_selective_copying_is_the_ladders_choice_and_its_numbers_are_shown():
    """One rung harder than the control's old choice: at L = 32 with 4 tokens all 15 compared models scored
    0.979-1.0 (3810fbc); at L = 64 with 8 they are apart (0.706-0.999) and the control learns (0.872 / 0.914)."""
    rung = choose_rung("selective_copying", SELECTIVE_COPYING_LADDER)
    assert rung is SELECTIVE_COPYING_LADDER[0] and CPU_TASKS["selective_copying"] == rung.params == SETTINGS[0]
    table = ladder_table("selective_copying")
    assert "0.872 / 0.914" in table and "0.706-0.999" in table and "15 of 15" in table and "| yes |" in table
    assert ladder_table("memorization") == ""
