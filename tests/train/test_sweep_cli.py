"""``seqdyn sweep --dry-run``, what a sweep says when it trained nothing, and one ``--workers`` default
(issue 36, deliverable 4)."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from seqdyn.cli import app
from seqdyn.train.config import parse_config
from seqdyn.train.store import Store
from tests.train._helpers import add_finished, tiny

SWEEP = tiny(
    sweep={"optimizer.lr": [1e-3, 2e-3, 3e-3]},
    **{"train.steps": 4, "task.train_examples": 64, "task.test_examples": 16},
)


def write_sweep(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return path


def sweep_cli(*args: str):
    return CliRunner().invoke(app, ["sweep", *args, "--no-progress"], env={"COLUMNS": "200"})


def test_dry_run_on_a_new_store_lists_every_run_and_creates_nothing(tmp_path):
    config, store = write_sweep(tmp_path), tmp_path / "new.db"
    result = sweep_cli(str(config), "--store", str(store), "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.output.count("│ train │") == 3 and "3 train of 3 runs" in result.output
    assert not store.exists()


def test_dry_run_says_what_is_done_resumed_and_retried(tmp_path):
    config, store_path = write_sweep(tmp_path), tmp_path / "runs.db"
    finished, failed, pending = parse_config(SWEEP).expand()
    with Store(store_path) as store:
        add_finished(store, finished, 0.5, sweep="tiny")
        store.add_run(failed.run_id, failed.name, failed.canonical(), sweep="tiny")
        assert store.claim(failed.run_id, "tester")
        store.finish(failed.run_id, "tester", "failed", step=1, reason="RuntimeError: out of memory")
    result = sweep_cli(str(config), "--store", str(store_path), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "1 train, 2 done of 3 runs" in result.output
    retried = sweep_cli(str(config), "--store", str(store_path), "--dry-run", "--retry-failed")
    assert "1 train, 1 retry, 1 done of 3 runs" in retried.output
    assert Store(store_path, readonly=True).run(pending.run_id) is None  # the dry run wrote nothing


def test_a_sweep_that_is_all_done_says_that_nothing_was_trained(tmp_path):
    config, store_path = write_sweep(tmp_path), tmp_path / "runs.db"
    with Store(store_path) as store:
        for run in parse_config(SWEEP).expand():
            add_finished(store, run, 0.5, sweep="tiny")
    result = sweep_cli(str(config), "--store", str(store_path))
    assert result.exit_code == 0, result.output
    assert f"nothing trained: all 3 runs are already done in {store_path}" in result.output.replace("\n", " ")


def test_sweep_and_reproduce_share_one_workers_default_one_process_per_core():
    from typer.main import get_command

    commands = get_command(app).commands
    defaults = {name: next(p for p in commands[name].params if p.name == "workers") for name in ("sweep", "reproduce")}
    assert {p.default for p in defaults.values()} == {0}
    assert len({p.help for p in defaults.values()}) == 1 and "one per CPU core" in defaults["sweep"].help


def test_a_sweep_piped_into_a_file_prints_no_blank_lines(tmp_path):
    """Progress bars draw on a terminal only: piped, a stopped bar would leave one blank line per run."""
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({**SWEEP, "sweep": {"optimizer.lr": [1e-3, 2e-3]}}))
    result = CliRunner().invoke(app, ["sweep", str(config), "--store", str(tmp_path / "runs.db"), "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "tiny[lr=0.001]" in result.output
    assert [line for line in result.output.splitlines() if not line.strip()] == []


def test_dry_run_shows_each_runs_model_sizes(tmp_path):
    from typer.testing import CliRunner

    from seqdyn.cli import app

    result = CliRunner().invoke(
        app,
        ["sweep", "examples/mqar_tiny.yaml", "--store", str(tmp_path / "s.db"), "--dry-run"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "parameters" in result.output and "non-embedding" in result.output and "9,920" in result.output


def test_a_run_that_cannot_start_is_recorded_failed_with_its_reason_in_one_line(tmp_path, monkeypatch):
    import yaml
    from typer.testing import CliRunner

    from seqdyn.cli import app
    from seqdyn.train import loop
    from seqdyn.train.store import Store

    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"name": "x", "task": {"name": "mqar"}, "train": {"steps": 2}}))

    def cannot_start(self, *args, **kwargs):
        raise RuntimeError("no room for the scene\nsecond line of a traceback")

    monkeypatch.setattr(loop.Trainer, "__init__", cannot_start)
    result = CliRunner().invoke(app, ["train", str(config), "--store", str(tmp_path / "s.db"), "--no-progress"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {config}: the run failed: RuntimeError: no room for the scene"
    )
    with Store(tmp_path / "s.db", readonly=True) as store:
        [record] = store.runs()
        assert record.status == "failed" and record.reason == "RuntimeError: no room for the scene"


def test_dry_run_refuses_a_store_the_sweep_would_refuse(tmp_path):
    from typer.testing import CliRunner

    from seqdyn.cli import app

    store = tmp_path / "missing" / "s.db"
    for options in ([], ["--dry-run"]):
        result = CliRunner().invoke(app, ["sweep", "examples/mqar_tiny.yaml", "--store", str(store), *options])
        assert result.exit_code == 2
        assert result.stderr.strip() == f"error: results store {store}: directory {store.parent} does not exist"
