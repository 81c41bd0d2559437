"""The ``seqdyn`` command line (typer + rich): the app, with one module per group of commands.

    common.py         what the commands share: one-line errors, the store and worker options, lists and lengths
    train.py          seqdyn train, sweep, report, merge, inspect
    reproduce.py      seqdyn reproduce (reproductions.py: what it lists, runs and reports)
    bench.py          seqdyn bench ... (the benchmarks themselves are in seqdyn.bench)
    tasks.py          seqdyn tasks ...
    models.py         seqdyn mixers, convert, config schema, demo
    conform.py        seqdyn conform, audit, precision (the machinery is seqdyn.conform)

Each command imports its machinery when it runs, so that the command line starts fast.
"""

from __future__ import annotations

import typer

from seqdyn.cli import bench, conform, models, reproduce, tasks, train

app = typer.Typer(
    name="seqdyn",
    help="Sequence mixers as dynamical systems: compute, inspect, benchmark and compare them.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(bench.app, name="bench")
app.add_typer(models.config_app, name="config")
app.add_typer(tasks.app, name="tasks", help="List the task suites and show a generated example.")
app.command()(train.train)
app.command()(train.sweep)
app.command()(train.report)
app.command()(train.merge)
app.command()(train.inspect)
app.command()(reproduce.reproduce)
app.command()(models.demo)
app.command()(models.convert)
app.command()(conform.conform)
app.command()(conform.audit)
app.command()(conform.precision)
app.command("mixers")(models.list_mixers)


def main() -> None:
    """Run the ``seqdyn`` command on this process's arguments."""
    app()


if __name__ == "__main__":
    main()
