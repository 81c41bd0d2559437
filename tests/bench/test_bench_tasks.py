"""`seqdyn bench tasks` (how fast the task generators are) runs end to end on tiny counts."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from seqdyn.bench.tasks import run as bench_run
from seqdyn.cli.bench import bench_tasks as bench_main


def test_bench_on_tiny_counts():
    rows = bench_run(scale=1e-3, skip_512=True)
    assert [row["count"] for row in rows] == [100, 1, 1]
    assert all(row["seconds"] > 0 and row["target_s"] > 0 for row in rows)
    cli = typer.Typer()
    cli.command()(bench_main)
    result = CliRunner().invoke(cli, ["--scale", "0.0005", "--skip-512"], env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.output
    assert "MQAR" in result.output and "ListOps" in result.output and "M=256" in result.output
