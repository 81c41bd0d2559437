"""Reports: run rows with the varying hyper-parameters, best over lr, rendering, figures, the report command."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys

import pytest

from seqdyn.train import report
from seqdyn.train.report import best_over, grid_data, plot, plot_curves, plot_grid, render, report_command, run_rows
from seqdyn.train.store import Store
from tests.train._helpers import add_finished, sweep_configs

MIXERS = ["softmax_attention", "mamba2"]
WIDTHS = [16, 32]
LRS = [1e-3, 3e-3]
# final accuracy per (mixer, width, lr): the best lr differs between cells
FINALS = {
    ("softmax_attention", 16, 1e-3): 0.40,
    ("softmax_attention", 16, 3e-3): 0.60,
    ("softmax_attention", 32, 1e-3): 0.90,
    ("softmax_attention", 32, 3e-3): 0.70,
    ("mamba2", 16, 1e-3): 0.20,
    ("mamba2", 16, 3e-3): 0.10,
    ("mamba2", 32, 1e-3): 0.30,
    ("mamba2", 32, 3e-3): 0.80,
}


def _key(config) -> tuple:
    return config.model.mixer, config.model.d_model, config.optimizer.lr


@pytest.fixture
def grid_store(tmp_path):
    """The Fig. 5 sweep: mixers × widths × learning rates, all finished."""
    with Store(tmp_path / "grid.db") as store:
        for config in sweep_configs({"model.mixer": MIXERS, "model.d_model": WIDTHS, "optimizer.lr": LRS}):
            add_finished(store, config, FINALS[_key(config)])
        yield store


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    return path


# --- rows ------------------------------------------------------------------------------------------------------
def test_run_rows_list_exactly_the_varying_keys(grid_store):
    rows = run_rows(grid_store)
    assert len(rows) == 8
    assert set(report.hyper_keys(rows)) == {"model.mixer", "model.d_model", "optimizer.lr"}
    first = rows[0]
    assert list(first)[:3] == ["run_id", "name", "status"]
    assert {"metric", "final", "best", "steps", "wall_time"} <= set(first)
    for row, record in zip(rows, grid_store.runs()):
        assert (row["run_id"], row["name"], row["status"]) == (record.id, record.name, "finished")
        assert (row["metric"], row["final"], row["steps"]) == ("accuracy", record.final_metric, 20)
        assert row["wall_time"] == 2.5
        assert FINALS[(row["model.mixer"], row["model.d_model"], row["optimizer.lr"])] == row["final"]


def test_run_rows_follow_a_mixer_axis_with_options(tmp_path):
    axes = {"model": [{"mixer": "softmax_attention"}, {"mixer": "mamba2", "mixer_options": {"state_dim": 16}}]}
    with Store(tmp_path / "s.db") as store:
        for config in sweep_configs(axes):
            add_finished(store, config, 0.5)
        single = sweep_configs({"optimizer.lr": [5e-4]}, name="single")[0]
        add_finished(store, single, 0.5, sweep="single")
        rows = run_rows(store, sweep="demo")
        assert report.hyper_keys(rows) == ["model.mixer", "model.mixer_options.state_dim"]
        assert [r["model.mixer_options.state_dim"] for r in rows] == [None, 16]
        assert report.hyper_keys(run_rows(store, sweep="single")) == []  # one run: nothing varies


def test_unfinished_and_failed_runs_show_their_evaluations(tmp_path):
    running, failed = sweep_configs({"optimizer.lr": [1e-3, 3e-3]})
    with Store(tmp_path / "s.db") as store:
        for config in (running, failed):
            store.add_run(config.run_id, config.name, config.canonical())
            store.claim(config.run_id, "me")
            store.log_metrics(config.run_id, 5, 0.25, "train", {"accuracy": 0.99}, 1.0)
            store.log_metrics(config.run_id, 5, 0.25, "test", {"accuracy": 0.5}, 1.0)
            store.log_metrics(config.run_id, 10, 0.5, "test", {"accuracy": 0.4}, 2.0)
        store.finish(failed.run_id, "me", "failed", step=12, reason="NaN loss at step 12")
        first, second = run_rows(store)
    assert (first["status"], first["metric"], first["steps"]) == ("running", "accuracy", 10)
    assert (first["final"], first["best"]) == (0.4, 0.5)  # the test split's latest and best, not the train split's
    assert (second["status"], second["steps"], second["final"], second["best"]) == ("failed", 12, None, 0.5)


# --- best over lr ----------------------------------------------------------------------------------------------
def test_best_over_lr_takes_the_highest_accuracy(grid_store):
    best = best_over(run_rows(grid_store))
    assert len(best) == 4
    for row in best:
        cell = [FINALS[(row["model.mixer"], row["model.d_model"], lr)] for lr in LRS]
        assert row["final"] == max(cell)
    assert {(r["model.mixer"], r["model.d_model"], r["optimizer.lr"]) for r in best} == {
        ("softmax_attention", 16, 3e-3),
        ("softmax_attention", 32, 1e-3),
        ("mamba2", 16, 1e-3),
        ("mamba2", 32, 3e-3),
    }


def test_best_over_respects_lower_is_better(tmp_path, corpus):
    lm = {"name": "lm", "params": {"seq_len": 32, "path": str(corpus)}, "train_examples": 8, "test_examples": 4}
    perplexity = {(16, 1e-3): 9.0, (16, 3e-3): 4.0, (32, 1e-3): 3.0, (32, 3e-3): 7.0}
    with Store(tmp_path / "lm.db") as store:
        for config in sweep_configs({"model.d_model": WIDTHS, "optimizer.lr": LRS}, task=lm):
            add_finished(store, config, perplexity[(config.model.d_model, config.optimizer.lr)], metric="perplexity")
        rows = run_rows(store)
        best = {r["model.d_model"]: (r["optimizer.lr"], r["final"]) for r in best_over(rows)}
        assert best == {16: (3e-3, 4.0), 32: (1e-3, 3.0)}
        corpus.unlink()  # the corpus moved away after training: the task's defaults still tell the direction
        report._task_spec.cache_clear()
        assert {r["final"] for r in best_over(run_rows(store))} == {4.0, 3.0}


def test_best_over_keeps_combinations_without_a_metric(tmp_path):
    with Store(tmp_path / "s.db") as store:
        configs = sweep_configs({"model.mixer": MIXERS, "optimizer.lr": LRS})
        for config in configs[:2]:
            add_finished(store, config, 0.5 if config.optimizer.lr == 1e-3 else math.nan)
        for config in configs[2:]:
            store.add_run(config.run_id, config.name, config.canonical(), sweep="demo")
        best = best_over(run_rows(store))
    assert [(r["model.mixer"], r["optimizer.lr"], r["final"]) for r in best] == [
        ("softmax_attention", 1e-3, 0.5),
        ("mamba2", 1e-3, None),
    ]


# --- rendering -------------------------------------------------------------------------------------------------
def test_render_formats(grid_store):
    rows = run_rows(grid_store)
    table = render(rows, "table", title="my runs")
    assert table.splitlines()[0].strip() == "my runs"
    assert all(row["run_id"] in table and row["name"] in table for row in rows)  # names keep their [...]
    assert "model.mixer" in table and "0.9000" in table

    parsed = list(csv.DictReader(io.StringIO(render(rows, "csv"))))
    assert [r["run_id"] for r in parsed] == [r["run_id"] for r in rows]
    assert list(parsed[0]) == [
        "run_id",
        "name",
        "status",
        "model.d_model",
        "model.mixer",
        "optimizer.lr",
        "metric",
        "final",
        "best",
        "steps",
        "wall_time",
        "parameters",
        "non_embedding",
        "state_floats",
    ]
    assert float(parsed[0]["final"]) == rows[0]["final"]

    loaded = json.loads(render(rows, "json"))
    assert loaded == [{k: v for k, v in row.items() if k != "_config"} for row in rows]
    with pytest.raises(ValueError, match="unknown report format 'html'"):
        render(rows, "html")


# --- figures ---------------------------------------------------------------------------------------------------
def test_plot_grid_cells_are_the_best_over_lr(grid_store, tmp_path):
    path = tmp_path / "grid.png"
    (panel,) = plot_grid(grid_store, path)
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
    assert (panel.rows, panel.cols, panel.metric, panel.higher_is_better) == (MIXERS, WIDTHS, "accuracy", True)
    for i, mixer in enumerate(panel.rows):
        for j, width in enumerate(panel.cols):
            assert panel.values[i][j] == max(FINALS[(mixer, width, lr)] for lr in LRS)
    best = {r["run_id"] for r in best_over(run_rows(grid_store))}
    assert {run_id for line in panel.run_ids for run_id in line} == best


def test_grid_facets_and_options_that_follow_the_mixer(tmp_path):
    axes = {
        "model": [{"mixer": "softmax_attention"}, {"mixer": "mamba2", "mixer_options": {"state_dim": 16}}],
        "model.d_model": WIDTHS,
        "task.params.num_kv_pairs": [2, 4],
        "optimizer.lr": LRS,
    }
    with Store(tmp_path / "s.db") as store:
        for n, config in enumerate(sweep_configs(axes)):
            add_finished(store, config, n / 16)
        panels = grid_data(store)
        assert [p.facet for p in panels] == [{"task.params.num_kv_pairs": 2}, {"task.params.num_kv_pairs": 4}]
        assert all(not math.isnan(v) for p in panels for line in p.values for v in line)
        path = tmp_path / "facets.pdf"
        assert plot(store, path) == "grid" and path.read_bytes()[:4] == b"%PDF"


def test_plot_curves_and_the_choice_of_figure(grid_store, tmp_path):
    path = tmp_path / "curves.png"
    curves = plot_curves(grid_store, path)
    assert path.stat().st_size > 1000
    assert len(curves) == 8 and all(c.steps == [10, 20] and c.split == "test" for c in curves)
    assert curves[0].values == [
        FINALS[_key(sweep_configs({"model.mixer": MIXERS, "model.d_model": WIDTHS, "optimizer.lr": LRS})[0])] / 2,
        0.4,
    ]
    assert plot(grid_store, tmp_path / "auto.png") == "grid"
    with Store(tmp_path / "lr.db") as store:
        for config in sweep_configs({"optimizer.lr": LRS}):
            add_finished(store, config, 0.5)
        assert plot(store, tmp_path / "lr.png") == "curves"
    with pytest.raises(ValueError, match="unknown extension '.gif'"):
        plot_curves(grid_store, tmp_path / "x.gif")


# --- the command ---------------------------------------------------------------------------------------------
def test_report_command_outputs(grid_store, tmp_path):
    path = str(grid_store.path)
    text = report_command(path, "table", None)
    assert "seqdyn runs (8)" in text and "best over optimizer.lr (4 of 8 runs)" in text
    rows = list(csv.DictReader(io.StringIO(report_command(path, "csv", None))))
    assert len(rows) == 8 and sum(r["best_over_lr"] == "True" for r in rows) == 4
    loaded = json.loads(report_command(path, "json", None))
    assert len(loaded) == 8 and {r["run_id"] for r in loaded if r["best_over_lr"]} == {
        r["run_id"] for r in best_over(run_rows(grid_store))
    }
    figure = tmp_path / "fig.png"
    assert report_command(path, "table", str(figure)).endswith(f"wrote the grid figure to {figure}\n")
    assert figure.stat().st_size > 1000


def test_report_command_errors(grid_store, tmp_path):
    with pytest.raises(ValueError, match="absent.db: no such file"):
        report_command(tmp_path / "absent.db", "table", None)
    assert not (tmp_path / "absent.db").exists()
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="notes.txt: not a SQLite database"):
        report_command(tmp_path / "notes.txt", "table", None)
    Store(tmp_path / "empty.db").close()
    with pytest.raises(ValueError, match="empty.db: no runs"):
        report_command(tmp_path / "empty.db", "table", None)
    with pytest.raises(ValueError, match="no runs for sweep 'other'"):
        report_command(grid_store.path, "table", None, sweep="other")
    with pytest.raises(ValueError, match="unknown report format 'xml'"):
        report_command(grid_store.path, "xml", None)
    with pytest.raises(ValueError, match="unknown extension"):
        report_command(grid_store.path, "table", tmp_path / "fig.bmp")
    with pytest.raises(ValueError, match="does not exist"):
        report_command(grid_store.path, "table", tmp_path / "nowhere" / "fig.png")
    for error in ("absent.db", "xml"):
        message = str(pytest.raises(ValueError, report_command, tmp_path / error, error, None).value)
        assert "\n" not in message


def test_import_is_light():
    code = "import sys, seqdyn.train.report; sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_run_labels_name_what_varies_besides_seeds_and_excluded_keys():
    from seqdyn.train.report import LR_KEY, run_labels

    def config(readout, seed, lr, state_dim=None):
        options = {"readout": readout} | ({"state_dim": state_dim} if state_dim else {})
        return {
            "name": f"run-{readout}-{seed}",
            "model": {"mixer": "custom", "mixer_options": options},
            "train": {"seed": seed},
            "optimizer": {"lr": lr},
        }

    configs = [config("relu", 0, 1e-3), config("exp", 1, 1e-2, state_dim=8)]
    assert run_labels(configs, exclude=[LR_KEY]) == ["readout=relu", "readout=exp, state_dim=8"]
    assert run_labels(configs) == ["readout=relu, lr=0.001", "readout=exp, state_dim=8, lr=0.01"]  # key order
    same = [config("relu", 0, 1e-3), config("relu", 1, 1e-3)]
    assert run_labels(same) == ["custom", "custom"]  # seeds only: the mixer's name
    both = [
        {"model": {"mixer": "a", "x": {"d": 1}}, "task": {"d": 2}},
        {"model": {"mixer": "a", "x": {"d": 3}}, "task": {"d": 4}},
    ]
    assert run_labels(both) == ["model.x.d=1, task.d=2", "model.x.d=3, task.d=4"]  # two keys end in d


def test_each_run_shows_its_models_parameters_with_and_without_the_vocabulary_and_its_state(grid_store):
    """Parameters as the built model counts them (a tied head once), those outside the embedding and head, and the
    mixers' state after the task's length — which grows with the length for softmax attention only."""
    from seqdyn import tasks
    from seqdyn.models import build_model
    from seqdyn.models.config import ModelConfig
    from seqdyn.train.report import model_sizes

    rows = run_rows(grid_store)
    for row in rows:
        config = row["_config"]
        spec = tasks.build(config["task"]["name"], **config["task"]["params"]).spec
        model = build_model(ModelConfig.model_validate(config["model"]), spec)
        assert row["parameters"] == sum(p.numel() for p in model.parameters())
        vocabulary = {id(p): p.numel() for m in (model.embedding, model.head) for p in m.parameters()}
        assert row["non_embedding"] == row["parameters"] - sum(vocabulary.values()) > 0
        assert row["state_floats"] > 0
    softmax = next(row["_config"] for row in rows if row["_config"]["model"]["mixer"] == "softmax_attention")
    params = {**softmax["task"]["params"], "seq_len": 64, "vocab_size": 128}
    longer = {**softmax, "task": {**softmax["task"], "params": params}}
    assert model_sizes(longer)["state_floats"] > model_sizes(softmax)["state_floats"]
    assert "parameters" in report_command(str(grid_store.path), "table", None)
