"""Training, sweeps, resume, concurrency, Ray, DDP and the command line's handling of bad input (issue 5)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from seqdyn.train.config import RunConfig, load_config, parse_config
from seqdyn.train.loop import train_run
from seqdyn.train.store import Store
from seqdyn.train.sweep import run_sweep
from tests.train._helpers import tiny

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def cli(*args, env=None, **kwargs) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(ROOT / "src"), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "seqdyn", *args], capture_output=True, text=True, env=environment, timeout=600, **kwargs
    )


def test_a_tiny_mqar_model_learns(tmp_path):
    result = train_run(parse_config(tiny()), checkpoint_dir=tmp_path, progress=False)
    assert result.status == "stopped_early", result
    assert result.final_metric > 0.9 and result.step <= 400


def test_sweep_expansion_gives_stable_distinct_ids(tmp_path):
    data = tiny(
        sweep={
            "model": [
                {"mixer": "softmax_attention"},
                {"mixer": "mamba2", "positions": False, "mixer_options": {"head_dim": 16}},
            ],
            "optimizer.lr": [1e-3, 3e-3],
        }
    )
    runs = parse_config(data).expand()
    assert len(runs) == 4 and len({r.run_id for r in runs}) == 4
    assert [r.model.mixer for r in runs] == ["softmax_attention"] * 2 + ["mamba2"] * 2
    again = load_config(write(tmp_path / "sweep.yaml", data)).expand()
    assert [r.run_id for r in again] == [r.run_id for r in runs]
    renamed = RunConfig.model_validate(runs[0].canonical() | {"name": "other"})
    assert renamed.run_id == runs[0].run_id  # the id is the config, not the name
    changed = RunConfig.model_validate(runs[0].canonical() | {"optimizer": {"lr": 5e-3}})
    assert changed.run_id != runs[0].run_id
    script = (
        "from seqdyn.train.config import load_config; import sys; print(load_config(sys.argv[1]).expand()[0].run_id)"
    )
    other = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "sweep.yaml")],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONHASHSEED="123"),
    )
    assert other.stdout.strip() == runs[0].run_id  # no dependence on Python's hash seed


def test_sweep_run_names_include_the_mixer_options_that_vary():
    data = tiny(
        name="d-001-pe",
        sweep={
            "model": [
                {"mixer": "custom", "positions": False, "mixer_options": {"readout": readout, "normalizer": normalizer}}
                for readout in ("exp", "relu")
                for normalizer in ("sum", "none")
            ]
        },
    )
    names = [run.name for run in parse_config(data).expand()]
    assert len(set(names)) == 4, names
    assert names[1] == "d-001-pe[mixer=custom, positions=False, readout=exp, normalizer=none]"


def test_a_diverging_run_is_recorded_as_diverged_and_the_sweep_goes_on(tmp_path):
    data = tiny(sweep={"optimizer": [{"lr": 1e30, "grad_clip": None}, {"lr": 3e-3}]}, **{"train.steps": 60})
    results = run_sweep(parse_config(data), tmp_path / "s.db", progress=False)
    assert [r.status for r in results] == ["diverged", "finished"]
    record = Store(tmp_path / "s.db").run(results[0].run_id)
    assert record.status == "diverged" and "non-finite loss" in record.reason and "at step" in record.reason


def _wait_for_checkpoint(store_path: Path, process: subprocess.Popen, timeout: float = 120.0) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if store_path.exists():
            try:
                runs = Store(store_path, readonly=True).runs()
            except ValueError:  # the file exists, its tables not yet: the process is creating the store
                runs = []
            if runs and runs[0].checkpoint_step:
                return runs[0].checkpoint_step
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    raise AssertionError("no checkpoint appeared")


def test_a_killed_run_resumes_to_identical_metrics(tmp_path):
    config = write(
        tmp_path / "run.yaml",
        tiny(**{"train.early_stop": {"threshold": None}, "train.steps": 300, "train.eval_every": 30}),
    )
    reference = cli("train", str(config), "--store", str(tmp_path / "whole.db"), "--no-progress")
    assert reference.returncode == 0, reference.stderr
    store_path = tmp_path / "killed.db"
    environment = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    process = subprocess.Popen(
        [sys.executable, "-m", "seqdyn", "train", str(config), "--store", str(store_path), "--no-progress"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    checkpoint = _wait_for_checkpoint(store_path, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed = Store(store_path, readonly=True).runs()[0]
    assert killed.status == "running" and checkpoint < 300  # killed mid-run, its heartbeat still fresh
    resumed = cli("train", str(config), "--store", str(store_path), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr  # the dead owner is noticed at once and the run resumed
    whole, again = Store(tmp_path / "whole.db", readonly=True), Store(store_path, readonly=True)
    assert again.runs()[0].status == "finished" and again.runs()[0].attempts == 2
    assert again.runs()[0].final_metric == whole.runs()[0].final_metric
    expected = {(m.step, m.split, m.name): m.value for m in whole.metrics()}
    assert {(m.step, m.split, m.name): m.value for m in again.metrics()} == expected


def test_two_concurrent_sweeps_on_one_store_train_each_run_once(tmp_path):
    data = tiny(
        sweep={"optimizer.lr": [1e-3, 2e-3, 3e-3, 4e-3]},
        **{"train.steps": 40, "train.eval_every": 20, "task.train_examples": 512},
    )
    config = write(tmp_path / "sweep.yaml", data)
    store_path = tmp_path / "shared.db"
    environment = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        "-m",
        "seqdyn",
        "sweep",
        str(config),
        "--store",
        str(store_path),
        "--no-progress",
        "--workers",
        "1",
    ]  # two sweeps of one process each
    processes = [
        subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs
    store = Store(store_path, readonly=True)
    runs = store.runs()
    assert len(runs) == 4 and all(r.status == "finished" for r in runs)
    assert all(r.attempts == 1 for r in runs)  # no run was trained twice
    assert store.integrity_check() == "ok"
    rows = [(m.run_id, m.step, m.name) for m in store.metrics(split="test")]
    assert len(rows) == len(set(rows)) == 4 * 2 * 2  # 4 runs × 2 evaluations × (accuracy, loss), once each


BAD_CONFIGS = {
    "invalid YAML": ("name: [unclosed\n", "invalid YAML"),
    "unknown field": (yaml.safe_dump(tiny(colour="blue")), "colour: unknown field; fields here: name, model"),
    "unknown mixer": (yaml.safe_dump(tiny(**{"model.mixer": "mamba3"})), "unknown name 'mamba3'"),
    "unknown task": (yaml.safe_dump(tiny(**{"task.name": "mqar2"})), "unknown task 'mqar2'"),
    "impossible task": (yaml.safe_dump(tiny(**{"task.params.seq_len": 15})), "seq_len=15 must be even"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_configs_exit_2_with_one_line_and_leave_the_store_untouched(tmp_path, case):
    text, words = BAD_CONFIGS[case]
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    store_path = tmp_path / "results.db"
    result = cli("train", str(config), "--store", str(store_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and str(config) in lines[0]
    assert not store_path.exists()


def _dump(path: Path) -> list[str]:
    """The store's contents as SQL (its bytes may change when SQLite folds its write-ahead log in)."""
    connection = sqlite3.connect(path)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


def test_unwritable_store_and_mismatched_checkpoint_are_errors(tmp_path):
    config = write(tmp_path / "run.yaml", tiny(**{"train.steps": 20, "train.eval_every": 10}))
    result = cli("train", str(config), "--store", str(tmp_path / "missing-dir" / "results.db"))
    assert result.returncode == 2 and "missing-dir" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "missing-dir").exists()
    # an interrupted run whose recorded checkpoint (no checksum recorded yet) is another run's: named in one
    # warning, not resumed from, and the run trains from step 0 (issue 32, item 9)
    other = write(tmp_path / "other.yaml", tiny(**{"train.steps": 20, "train.eval_every": 10, "model.d_model": 48}))
    assert cli("train", str(other), "--store", str(tmp_path / "other.db"), "--no-progress").returncode == 0
    foreign = Store(tmp_path / "other.db").runs()[0].checkpoint
    store_path = tmp_path / "results.db"
    run = load_config(config)
    with Store(store_path) as store:
        store.add_run(run.run_id, run.name, run.canonical())
        store.set_checkpoint(run.run_id, foreign, 10)
    result = cli("train", str(config), "--store", str(store_path), "--no-progress")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "belongs to run" in line]
    assert len(warnings) == 1 and foreign in warnings[0] and "restarting the run from step 0" in warnings[0]
    record = Store(store_path, readonly=True).run(run.run_id)
    assert record.status == "finished" and record.step == 20 and record.checkpoint != foreign


def test_sweep_with_ray_on_a_local_instance_with_two_workers(tmp_path):
    if not os.environ.get("CI"):  # CI installs the ray extra (make test), so there a missing ray fails
        pytest.importorskip("ray", reason="install the 'ray' extra to run the Ray path")
    data = tiny(
        sweep={"optimizer.lr": [1e-3, 3e-3]}, **{"train.steps": 30, "train.eval_every": 15, "task.train_examples": 256}
    )
    config = write(tmp_path / "sweep.yaml", data)
    store_path = tmp_path / "ray.db"
    result = cli(
        "sweep",
        str(config),
        "--store",
        str(store_path),
        "--ray",
        "--no-progress",
        env={"RAY_ADDRESS": "", "SEQDYN_RAY_NUM_CPUS": "2"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    runs = Store(store_path, readonly=True).runs()
    assert len(runs) == 2 and all(r.status == "finished" for r in runs)


def test_ddp_with_two_cpu_processes_matches_one_process(tmp_path):
    config = write(
        tmp_path / "run.yaml",
        tiny(**{"train.steps": 12, "train.eval_every": 3, "train.early_stop": {"threshold": None}}),
    )
    single = cli("train", str(config), "--store", str(tmp_path / "one.db"), "--no-progress")
    assert single.returncode == 0, single.stderr
    environment = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    launch = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            "29531",
            "-m",
            "seqdyn",
            "train",
            str(config),
            "--store",
            str(tmp_path / "two.db"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert launch.returncode == 0, launch.stderr[-3000:]
    one = {
        m.step: m.value for m in Store(tmp_path / "one.db", readonly=True).metrics(split="train") if m.name == "loss"
    }
    two = {
        m.step: m.value for m in Store(tmp_path / "two.db", readonly=True).metrics(split="train") if m.name == "loss"
    }
    assert one.keys() == two.keys() == {3, 6, 9, 12}
    for step in one:
        assert abs(one[step] - two[step]) < 1e-4 * max(1.0, abs(one[step])), (step, one[step], two[step])


def test_bench_train_measures_tokens_per_second_and_overhead():
    from seqdyn.bench.train import run

    cells, setup = run(["linear_attention"], device="cpu", steps=1, d_model=32, seq_len=32, batch=4)
    (cell,) = cells
    assert cell.status == "ok", cell.note
    assert cell.tokens_per_s > 0 and cell.bare_ms > 0 and cell.harness_ms > 0
    assert setup == {"d_model": 32, "seq_len": 32, "batch": 4}


def test_bench_train_times_the_compiled_step_against_the_eager_one():
    from seqdyn.bench.train import TrainCell, run

    cells, _ = run(["linear_attention"], device="cpu", steps=1, compile_step=True, d_model=16, seq_len=16, batch=2)
    (cell,) = cells
    assert cell.status == "ok", cell.note
    assert cell.compiled_ms > 0 and cell.compile_s > 0 and cell.compile_ratio == cell.eager_ms / cell.compiled_ms
    assert TrainCell("x", 1.0, bare_ms=30.0, harness_ms=31.0, compiled_ms=20.0, eager_ms=24.0).compile_ratio == 1.2
    assert TrainCell("x", 1.0, bare_ms=30.0, harness_ms=31.0).compile_ratio is None


def test_run_ids_survive_fields_added_later():
    """The ids of examples/mqar_tiny.yaml as the last commit before model.norm_position gave them (2ed9db1): a
    field added later, left at its default, leaves every id (and so every store) as it was; set, it changes it."""
    from seqdyn.train.config import load_config

    sweep = load_config(Path(__file__).resolve().parents[2] / "examples" / "mqar_tiny.yaml")
    runs = sweep.expand()
    assert [run.run_id for run in runs] == ["75748de2b29e", "54c416b26128"]
    post = runs[0].model_copy(update={"model": runs[0].model.model_copy(update={"norm_position": "post"})})
    assert post.run_id != runs[0].run_id
