"""Seeds added until a verdict is decided: a claim its two seeds leave open gets a third seed on the sweeps behind
it, a store keeps the added runs for the next call, ``--max-seeds`` caps it, and a cap below two is refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from seqdyn.cli import app
from seqdyn.reproduce import runner
from seqdyn.reproduce.base import SEED, Reproduction, Results
from seqdyn.reproduce.claims import Claim, at_least
from seqdyn.reproduce.runner import named_sweeps, run
from seqdyn.reproduce.seeds import (
    MOST_SEEDS,
    affords_one_more_seed,
    check_max_seeds,
    default_max_seeds,
    seed_count,
    with_one_more_seed,
    with_stored_seeds,
)
from seqdyn.train import sweep as sweep_module
from seqdyn.train.config import SweepConfig
from seqdyn.train.store import Store

#: per mixer, the result of seeds 0, 1, 2, …: two seeds leave "a ≥ b" open (Welch's interval ±0.45), three decide it
RESULTS = {"linear_attention": (0.60, 0.70, 0.62, 0.66), "softmax_attention": (0.55, 0.50, 0.52, 0.51)}
#: the wall time every fake run records (seconds)
RUN_SECONDS = 60.0


class TwoModels(Reproduction):
    name = "two_models"
    paper = "a test"
    figure = "none"
    summary = "two mixers, one claim"
    reductions = {}

    def sweeps(self, scale: str) -> list[SweepConfig]:
        task = {"name": "mqar"}
        compared = SweepConfig(name="compared", task=task, sweep={"model.mixer": list(RESULTS), SEED: [0, 1]})
        other = SweepConfig(name="other", task=task, sweep={"model.mixer": ["gla"], SEED: [0, 1]})  # behind no claim
        return [compared, other]

    claims = (
        Claim(
            "a ≥ b",
            "linear attention ≥ softmax attention",
            "a test sentence",
            lambda results: at_least(_score(results, "linear_attention"), _score(results, "softmax_attention")),
        ),
    )

    def table(self, results: Results) -> str:
        return ""

    def plot(self, results: Results, path):
        path.write_bytes(b"")
        return path


def _score(results: Results, mixer: str):
    return results.score(mixer, results.select(model__mixer=mixer))


@pytest.fixture
def trained(monkeypatch):
    """Training replaced by the table above: each run finishes at once with its mixer's result for its seed."""
    calls: list[tuple[str, int]] = []

    def finish(config, store, **options):
        store.claim(config.run_id, "test", stale_after=float("inf"))
        value = RESULTS.get(config.model.mixer, (0.5,) * 10)[config.train.seed]
        store.finish(
            config.run_id, "test", "finished", step=10, best_metric=value, final_metric=value, wall_time=RUN_SECONDS
        )
        calls.append((config.model.mixer, config.train.seed))
        return sweep_module._from_record(store.run(config.run_id))

    monkeypatch.setattr(sweep_module, "train_or_record_failure", finish)
    return calls


def test_a_claim_its_seeds_leave_open_gets_seeds_until_it_is_decided(trained, tmp_path):
    written = run(TwoModels(), "cpu", tmp_path / "runs.db", tmp_path / "out", progress=False, max_seeds=4)
    outcome = written.outcomes["a ≥ b"]
    assert outcome.verdict == "held" and outcome.seeds == {"linear_attention": 3, "softmax_attention": 3}
    assert sorted(trained) == sorted(
        [(mixer, seed) for mixer in RESULTS for seed in (0, 1, 2)] + [("gla", 0), ("gla", 1)]
    )  # the third seed for the compared sweep only, and no fourth: the verdict was decided
    claim = json.loads((written.folder / "verdict.json").read_text())["claims"][0]
    assert claim["seeds"] == {"linear_attention": 3, "softmax_attention": 3}
    trained.clear()
    again = run(TwoModels(), "cpu", tmp_path / "runs.db", tmp_path / "out", progress=False, max_seeds=4)
    assert trained == [] and again.outcomes["a ≥ b"].verdict == "held"  # the stored third seed is read back


def test_the_cap_stops_the_seeds_and_the_claim_stays_open(trained, tmp_path):
    written = run(TwoModels(), "cpu", tmp_path / "runs.db", tmp_path / "out", progress=False, max_seeds=2)
    outcome = written.outcomes["a ≥ b"]
    assert outcome.verdict == "inconclusive" and outcome.cause == "seeds" and len(trained) == 6
    assert "(95%, Welch, 2 and 2 seeds)" in outcome.reason


def test_a_store_with_added_seeds_widens_the_sweeps_and_is_not_refused(trained, tmp_path):
    run(TwoModels(), "cpu", tmp_path / "runs.db", tmp_path / "out", progress=False, max_seeds=3)
    store = Store(tmp_path / "runs.db")
    sweeps = with_stored_seeds(store, named_sweeps(TwoModels(), "cpu"))
    assert [sweep.sweep[SEED] for sweep in sweeps] == [[0, 1, 2], [0, 1]]


def test_one_more_seed_goes_to_the_sweeps_that_hold_the_runs_up_to_the_cap():
    sweeps = TwoModels().sweeps("cpu")
    compared_run = sweeps[0].expand()[0].run_id
    grown, names = with_one_more_seed(sweeps, {compared_run}, 5)
    assert names == ["compared"] and grown[0].sweep[SEED] == [0, 1, 2] and grown[1].sweep[SEED] == [0, 1]
    assert with_one_more_seed(sweeps, None, 5)[1] == ["compared", "other"]  # runs unknown: every sweep
    assert with_one_more_seed(sweeps, {compared_run}, 2)[1] == []  # at the cap
    assert seed_count(grown) == 3


def test_the_default_cap_adds_seeds_only_at_cpu():
    sweeps = TwoModels().sweeps("cpu")
    assert default_max_seeds("cpu", sweeps) == MOST_SEEDS and default_max_seeds("smoke", sweeps) == 2


def _results_of(sweeps: list[SweepConfig], seconds: float) -> Results:
    rows = [{"run_id": run.run_id, "wall_time": seconds} for sweep in sweeps for run in sweep.expand()]
    return Results(scale="cpu", rows=tuple(rows))


def test_one_more_seed_is_affordable_while_the_stored_runs_and_one_seed_of_the_growing_sweeps_fit_the_budget():
    sweeps = TwoModels().sweeps("cpu")  # compared: 2 mixers × 2 seeds, other: 1 mixer × 2 seeds — six runs
    # six runs of 100 s on 2 workers took 300 s; one seed of "compared" is two runs, 100 s on 2 workers
    assert affords_one_more_seed(_results_of(sweeps, 100.0), sweeps, ["compared"], workers=2, budget_s=400.0)
    assert not affords_one_more_seed(_results_of(sweeps, 100.0), sweeps, ["compared"], workers=2, budget_s=399.0)
    # on one worker the same took 600 s and the seed 200 s
    assert affords_one_more_seed(_results_of(sweeps, 100.0), sweeps, ["compared"], workers=1, budget_s=800.0)
    assert not affords_one_more_seed(_results_of(sweeps, 100.0), sweeps, ["compared"], workers=1, budget_s=799.0)
    # never less than the longest run of the seed, however many workers
    assert not affords_one_more_seed(_results_of(sweeps, 100.0), sweeps, ["compared"], workers=8, budget_s=174.0)


def test_the_default_cap_stops_adding_seeds_where_the_next_would_not_fit_the_budget(trained, tmp_path, monkeypatch):
    # six runs of 60 s on one worker: 360 s; the third seed of "compared" would add 120 s
    monkeypatch.setattr(runner, "CPU_BUDGET_S", 479.0)
    written = run(TwoModels(), "cpu", tmp_path / "runs.db", tmp_path / "out", progress=False)
    assert written.outcomes["a ≥ b"].cause == "seeds" and len(trained) == 6
    monkeypatch.setattr(runner, "CPU_BUDGET_S", 480.0)
    written = run(TwoModels(), "cpu", tmp_path / "runs.db", tmp_path / "out", progress=False)
    assert written.outcomes["a ≥ b"].verdict == "held" and len(trained) == 8


def test_a_cap_below_two_seeds_is_one_line_naming_the_option(tmp_path):
    with pytest.raises(ValueError, match="^--max-seeds: the decision rules need at least 2 seeds per setting, got 1$"):
        check_max_seeds(1)
    result = CliRunner().invoke(
        app, ["reproduce", "dlr_context", "--max-seeds", "1", "--store", str(tmp_path / "s.db"), "--out", "x"]
    )
    assert result.exit_code == 2 and "--max-seeds: the decision rules need at least 2 seeds" in result.output
    assert not (tmp_path / "s.db").exists()


def test_a_reproduction_the_time_limit_stops_writes_nothing_and_the_same_call_resumes_it(
    trained, tmp_path, monkeypatch
):
    finish = sweep_module.train_or_record_failure
    done = []

    def first_only(config, store, **options):  # the limit is reached after the first run
        if done:
            return sweep_module._from_record(store.run(config.run_id))
        done.append(config.run_id)
        return finish(config, store, **options)

    with monkeypatch.context() as patch:
        patch.setattr(sweep_module, "train_or_record_failure", first_only)
        patch.setattr(runner, "time_is_up", lambda: True)
        with pytest.raises(
            runner.TimeLimitReached, match=r"^two_models: time limit reached with 5 of 6 runs unfinished"
        ):
            run(TwoModels(), "cpu", tmp_path / "runs.db", tmp_path / "out", progress=False, max_seeds=4)
    assert not (tmp_path / "out").exists() and len(trained) == 1
    written = run(TwoModels(), "cpu", tmp_path / "runs.db", tmp_path / "out", progress=False, max_seeds=4)
    assert written.outcomes["a ≥ b"].verdict == "held" and len(trained) == 8  # 5 left, then the third seed's 2
