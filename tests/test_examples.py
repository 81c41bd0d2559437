"""The examples do what their comments and the README say."""

from pathlib import Path

import pytest

from seqdyn.train.config import load_config
from seqdyn.train.sweep import run_sweep

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_tiny_example_learns(tmp_path):
    """Both mixers of examples/mqar_tiny.yaml leave the ~0.5 "guess a context value" plateau (~30 s of CPU)."""
    results = run_sweep(load_config(EXAMPLES / "mqar_tiny.yaml"), tmp_path / "tiny.db", progress=False)
    best = {result.name.split("[")[1].split(",")[0]: result.best_metric for result in results}
    assert best["mixer=softmax_attention"] > 0.95 and best["mixer=mamba2"] > 0.8, best


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("*.yaml")), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_config_is_valid(path):
    """Every config under examples/ (pilots included) loads and expands to runs."""
    from seqdyn.train.sweep import expand

    assert expand(load_config(path))


def test_paper_step_times_estimates_from_timed_steps(capsys):
    """examples/pilots/paper_step_times.py times three runs of a reproduction and multiplies out its steps."""
    import json
    import runpy

    script = runpy.run_path(str(EXAMPLES / "pilots" / "paper_step_times.py"))
    script["main"](["dlr_context", "--scale", "smoke"])
    lines = capsys.readouterr().out.splitlines()
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert lines[-1].startswith("RESULT ") and len(lines) == 1 + len(result["timed"])
    assert result["devices"] == ["cpu"] and result["runs"] >= len(result["timed"]) == 3
    mean = sum(run["s_per_step"] for run in result["timed"]) / 3
    assert result["estimate_h"] == round(mean * result["total_steps"] / 3600, 2)
    assert all(run["device"] == "cpu" and run["s_per_step"] > 0 for run in result["timed"])


def test_auto_overhead_times_auto_and_the_pinned_backend(capsys):
    """examples/pilots/auto_overhead.py: what auto's measuring costs runs of a reproduction, against a pinned
    backend."""
    import json
    import runpy

    script = runpy.run_path(str(EXAMPLES / "pilots" / "auto_overhead.py"))
    script["main"](["dsf_qlstm_transition", "--scale", "smoke", "--against", "recurrent"])
    lines = capsys.readouterr().out.splitlines()
    result = json.loads(lines[-1].removeprefix("RESULT "))
    rows = [json.loads(line) for line in lines[:-1]]
    assert len(rows) == result["timed"] == 3  # softmax attention (the control), qLSTM and its S6 variant
    for row in rows:
        assert row["recurrent"]["backends"] == ["recurrent", "recurrent"] and row["recurrent"]["measured_shapes"] == 0
        assert row["auto"]["measured_shapes"] >= 1 and row["auto"]["measuring_s"] > 0  # a cold cache each run
        assert row["measuring_share"] == row["auto"]["measuring_s"] / row["run_s_auto"]


def test_packed_training_pilot_gives_the_padded_runs_losses(capsys):
    """examples/pilots/packed_training.py: the same documents packed and padded, step by step."""
    import json
    import runpy

    script = runpy.run_path(str(EXAMPLES / "pilots" / "packed_training.py"))
    script["main"](["--steps", "4", "--seq-len", "64", "--batch", "4", "--every", "2"])
    lines = capsys.readouterr().out.splitlines()
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["largest_loss_difference"] < 1e-4 and len([line for line in lines if line.startswith("| 4 |")]) == 1
    assert result["packed_tokens_per_s"] > 0 and result["padded_tokens_per_s"] > 0
    assert 1 < result["real_tokens_per_row"] <= 64


def test_escape_steps_trains_the_scale_on_this_device_and_reports_each_runs_escape(tmp_path, capsys):
    """examples/pilots/escape_steps.py: the scale's runs but the device (and steps), then one line per run with the
    first evaluation above the level."""
    import json
    import runpy

    from seqdyn.reproduce import dsf_qlstm_transition
    from seqdyn.reproduce.runner import named_sweeps
    from seqdyn.train.store import Store
    from seqdyn.train.sweep import expand

    script = runpy.run_path(str(EXAMPLES / "pilots" / "escape_steps.py"))
    sweeps = script["pilot_sweeps"]("dsf_qlstm_transition", 4, "smoke")
    scale = named_sweeps(dsf_qlstm_transition.REPRODUCTION, "smoke")
    pilot_runs, scale_runs = [r for s in sweeps for r in expand(s)], [r for s in scale for r in expand(s)]
    assert {(r.train.device, r.train.steps) for r in pilot_runs} == {("auto", 4)}
    unchanged = [
        r.model_copy(update={"train": r.train.model_copy(update={"device": "cpu", "steps": 6})}) for r in pilot_runs
    ]
    assert [r.model_dump(exclude={"name"}) for r in unchanged] == [r.model_dump(exclude={"name"}) for r in scale_runs]
    store = tmp_path / "pilot.db"
    for sweep in sweeps:
        run_sweep(sweep, store, progress=False)
    script["main"](
        [
            "dsf_qlstm_transition",
            "--scale",
            "smoke",
            "--steps",
            "4",
            "--store",
            str(store),
            "--report",
            "--level",
            "0.0",
        ]
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == len(pilot_runs) and all(line["steps"] == 4 for line in lines)
    with Store(store, readonly=True) as opened:
        for line, run in zip(lines, pilot_runs):
            tested = [m.step for m in opened.metrics(run.run_id, split="test") if m.name == "accuracy" and m.value > 0]
            assert line["escape_step"] == (min(tested) if tested else None)


def test_control_difficulty_pilot_picks_the_hardest_rung_every_seed_of_the_control_passes(monkeypatch, capsys):
    """examples/pilots/control_difficulty.py: the control alone on each rung at the borrowed scale's budget (or the
    ladder's longer one); the hardest rung where every seed reaches the threshold is chosen, none where none does."""
    import runpy
    from types import SimpleNamespace

    from seqdyn.reproduce import coef_readout_maps
    from seqdyn.train.sweep import expand

    monkeypatch.syspath_prepend(str(EXAMPLES / "pilots"))
    script = runpy.run_path(str(EXAMPLES / "pilots" / "control_difficulty.py"))
    fuzzy = script["ladder_sweeps"]("fuzzy")
    assert len(fuzzy) == len(script["LADDERS"]["fuzzy"].rungs)
    for sweep in fuzzy:
        runs = expand(sweep)
        assert [run.train.seed for run in runs] == [0, 1]
        assert runs[0].train.steps == coef_readout_maps.SCALES["cpu"]["budget"].steps
        assert runs[0].model.mixer_options == coef_readout_maps.model_entry("exp")["mixer_options"]
    (longer,) = script["ladder_sweeps"]("noisy_longer")
    assert expand(longer)[0].train.steps == 8_000  # the ladder's own budget, whatever the scale's

    def store_with(bests):  # run id → best accuracy, rung by rung and seed by seed
        by_id = {run.run_id: best for sweep, rung in zip(fuzzy, bests) for run, best in zip(expand(sweep), rung)}
        return SimpleNamespace(
            run=lambda run_id: SimpleNamespace(best_metric=by_id[run_id], step=2000), metrics=lambda run_id, split: []
        )

    assert (
        script["report"](store_with([[0.95, 0.5], [0.92, 0.91], [0.99, 0.99]]), "fuzzy")["chosen"]
        == script["LADDERS"]["fuzzy"].rungs[1]
    )
    assert script["report"](store_with([[0.5, 0.5], [0.89, 0.95], [0.8, 0.2]]), "fuzzy")["chosen"] is None
    assert len(capsys.readouterr().out.splitlines()) == 12  # one line per run
