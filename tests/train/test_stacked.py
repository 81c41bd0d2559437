"""Runs stacked into one batched model end as each run alone: seeds × learning rates in float64, for every kind of
mixer the reproductions' sweeps train; a stack resumes after the time limit to the metrics of an uninterrupted one,
a diverging run leaves it, and runs that cannot stack are told apart."""

from __future__ import annotations

import pytest
import torch

from seqdyn.train.config import RunConfig, SweepConfig, parse_config
from seqdyn.train.loop import train_run
from seqdyn.train.stacked import stack_key, stack_refusal, stacks, train_stack
from seqdyn.train.store import Store
from tests.train._helpers import metrics, quick_run, time_up_after


@pytest.fixture
def float64():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _grid(mixer: str = "softmax_attention", **train) -> list[RunConfig]:
    """Two seeds × two learning rates of a quick MQAR run of ``mixer``."""
    data = quick_run(**train)
    data["model"]["mixer"] = mixer
    data["sweep"] = {"train.seed": [0, 1], "optimizer.lr": [1e-3, 3e-3]}
    return SweepConfig.model_validate(data).expand()


def _parameters(tmp_path, name: str, config: RunConfig) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {key: value for key, value in load_file(tmp_path / name / f"{config.run_id}.safetensors").items()}


def _per_run(store: Store) -> dict:
    """Every metric by run, step, split and name."""
    return {(m.run_id, m.step, m.split, m.name): m.value for m in store.metrics()}


def _close(stacked: dict, alone: dict, tolerance: float) -> None:
    assert stacked.keys() == alone.keys()
    for key, value in alone.items():
        assert stacked[key] == pytest.approx(value, rel=tolerance, abs=tolerance), key


@pytest.mark.parametrize("mixer", ["softmax_attention", "linear_attention", "s6", "ssd", "qlstm", "dlr"])
def test_runs_stacked_end_as_each_run_alone_in_float64(tmp_path, float64, mixer):
    runs = _grid(mixer, steps=12, eval_every=4)
    with Store(tmp_path / "alone.db") as alone:
        for run in runs:
            train_run(run, alone, checkpoint_dir=tmp_path / "alone", progress=False)
        expected = _per_run(alone)
    with Store(tmp_path / "stacked.db") as stacked:
        results = train_stack(runs, stacked, checkpoint_dir=tmp_path / "stacked", progress=False)
        assert [result.status for result in results] == ["finished"] * 4
        got = _per_run(stacked)
        assert all(record.status == "finished" and record.step == 12 for record in stacked.runs())
    train_losses = {key: value for key, value in expected.items() if key[2] == "train" and key[3] == "loss"}
    _close({key: got[key] for key in train_losses}, train_losses, 1e-10)
    _close(got, expected, 1e-6)  # test metrics come out of float32 (evaluate casts the outputs)
    for run in runs:
        want, have = _parameters(tmp_path, "alone", run), _parameters(tmp_path, "stacked", run)
        for key in want:
            if key.startswith("model."):
                torch.testing.assert_close(have[key], want[key], rtol=1e-9, atol=1e-11, msg=f"{run.name}: {key}")


def test_a_stack_stopped_by_the_time_limit_resumes_to_the_metrics_of_an_uninterrupted_one(tmp_path, monkeypatch):
    from seqdyn.train import timelimit

    runs = _grid(steps=20, eval_every=5)
    with Store(tmp_path / "whole.db") as whole:
        train_stack(runs, whole, checkpoint_dir=tmp_path / "whole", progress=False)
        expected = metrics(whole)
    with monkeypatch.context() as patch, timelimit.time_limit(3600):
        time_up_after(patch, len(runs) * (1 + 12))  # a check per run before it starts and after each step
        with Store(tmp_path / "cut.db") as store:
            results = train_stack(runs, store, checkpoint_dir=tmp_path / "cut", progress=False)
            records = [store.run(run.run_id) for run in runs]
    assert {result.status for result in results} == {"interrupted"}
    assert {(record.status, record.checkpoint_step) for record in records} == {("interrupted", 13)}
    with Store(tmp_path / "cut.db") as store:
        assert {result.status for result in train_stack(runs, store, checkpoint_dir=tmp_path / "cut")} == {"finished"}
        assert metrics(store) == expected


def test_a_run_that_diverges_leaves_the_stack_and_the_others_go_on(tmp_path):
    runs = [parse_config(quick_run(steps=8, eval_every=4) | {"optimizer": {"lr": lr}}) for lr in (1e-3, 1e12)]
    with Store(tmp_path / "alone.db") as alone:
        expected = train_run(runs[0], alone, checkpoint_dir=tmp_path / "alone", progress=False)
    with Store(tmp_path / "stacked.db") as store:
        calm, wild = train_stack(runs, store, checkpoint_dir=tmp_path / "stacked", progress=False)
    assert wild.status == "diverged" and "at step" in wild.reason
    assert calm.status == "finished" and calm.final_metric == pytest.approx(expected.final_metric, abs=1e-6)


def test_runs_stack_when_they_differ_in_seed_and_learning_rate_only():
    runs = _grid()
    assert len({stack_key(run) for run in runs}) == 1 and len({run.run_id for run in runs}) == 4
    wider = parse_config(quick_run() | {"model": {"mixer": "softmax_attention", "d_model": 32, "layers": 1}})
    groups = stacks([*runs, wider], 3)
    assert [len(group) for group in groups] == [3, 1, 1] and groups[-1] == [wider]
    assert [len(group) for group in stacks(runs, 1)] == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="stack: expected at least 1"):
        stacks(runs, 0)


def test_packed_and_float16_runs_do_not_stack():
    plain = parse_config(quick_run())
    packed = plain.model_copy(update={"train": plain.train.model_copy(update={"pack": True})})
    half = parse_config(quick_run(dtype="float16"))
    assert "train.pack" in stack_refusal(packed) and "float16" in stack_refusal(half)
    assert stack_refusal(plain) is None
    assert [len(group) for group in stacks([packed, packed.model_copy()], 4)] == [1, 1]


def test_a_sweep_with_stack_trains_its_runs_as_it_trains_them_one_at_a_time(tmp_path):
    from seqdyn.train.sweep import run_sweep

    data = quick_run(steps=10, eval_every=5) | {"sweep": {"train.seed": [0, 1], "optimizer.lr": [1e-3, 3e-3]}}
    sweep = SweepConfig.model_validate(data)
    alone = run_sweep(sweep, tmp_path / "alone.db", progress=False)
    stacked = run_sweep(sweep, tmp_path / "stacked.db", progress=False, stack=3)
    assert [result.status for result in stacked] == ["finished"] * 4
    for one, other in zip(alone, stacked, strict=True):
        assert other.run_id == one.run_id and other.final_metric == pytest.approx(one.final_metric, abs=1e-5)
    with Store(tmp_path / "alone.db") as a, Store(tmp_path / "stacked.db") as b:
        _close(_per_run(b), _per_run(a), 1e-4)  # float32: batched products sum in another order
    with pytest.raises(ValueError, match="stack: expected at least 1"):
        run_sweep(sweep, tmp_path / "never.db", stack=0)
    assert not (tmp_path / "never.db").exists()


def test_the_cli_trains_stacks_on_worker_processes(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from seqdyn.cli import app

    data = quick_run(steps=6, eval_every=3) | {"sweep": {"train.seed": [0, 1, 2]}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(data))
    store = tmp_path / "runs.db"
    refused = CliRunner().invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "--store", str(store), "--stack", "0"])
    assert refused.exit_code != 0 and "--stack" in refused.output and not store.exists()
    refused = CliRunner().invoke(
        app, ["reproduce", "dlr_context", "--scale", "smoke", "--store", str(store), "--stack", "0"]
    )
    assert refused.exit_code != 0 and "--stack: expected at least 1" in refused.output and not store.exists()
    result = CliRunner().invoke(
        app, ["sweep", str(tmp_path / "sweep.yaml"), "--store", str(store), "--workers", "2", "--stack", "2"]
    )
    assert result.exit_code == 0, result.output
    with Store(store) as runs:
        assert sorted(record.status for record in runs.runs()) == ["finished"] * 3
        assert all(record.backends for record in runs.runs())


def test_a_stack_that_fails_as_a_stack_is_released_and_its_runs_train_one_at_a_time(tmp_path, monkeypatch, caplog):
    from seqdyn.train import stacked
    from seqdyn.train.sweep import run_sweep

    def cannot_batch(self, live):
        raise RuntimeError("vmap: a hand-written function without a plain form")

    monkeypatch.setattr(stacked.StackedRuns, "step", cannot_batch)
    data = quick_run(steps=4, eval_every=2) | {"sweep": {"train.seed": [0, 1]}}
    with caplog.at_level("WARNING", logger="seqdyn"):
        results = run_sweep(SweepConfig.model_validate(data), tmp_path / "runs.db", progress=False, stack=2)
    assert [result.status for result in results] == ["finished", "finished"]
    assert "could not train stacked (RuntimeError: vmap: a hand-written function" in caplog.text
    with Store(tmp_path / "runs.db") as store:
        assert [record.attempts for record in store.runs()] == [2, 2]  # claimed by the stack, then alone
