"""The ``seqdyn`` command line (typer + rich).  Sub-commands import their machinery lazily."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="seqdyn",
    help="Sequence mixers as dynamical systems: compute, inspect, benchmark and compare them.",
    no_args_is_help=True,
    add_completion=False,
)
bench_app = typer.Typer(help="Speed and memory benchmarks (ratios measured side by side in one run).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def _register_subcommands() -> None:
    """Sub-apps that live beside the code they drive (the task suites own ``seqdyn tasks``)."""
    from seqdyn.bench.tasks import main as bench_tasks
    from seqdyn.tasks.cli import app as tasks_app

    app.add_typer(tasks_app, name="tasks", help="List the task suites and show a generated example.")
    bench_app.command("tasks")(bench_tasks)


_register_subcommands()


@app.command()
def demo(
    quick: bool = typer.Option(False, help="Only T=256 and 1024 in the benchmark table (about a minute)."),
) -> None:
    """The main job for now: run the operator on every backend, check they agree, and print the benchmark table."""
    from seqdyn.bench.operator import run_demo

    run_demo(quick=quick)


@bench_app.command("operator")
def bench_operator(
    seq_lens: str = typer.Option("256,1024,4096", "--seq-lens", help="Comma-separated sequence lengths T."),
    kinds: str = typer.Option("gla,mamba2,deltanet,softmax", help="Comma-separated argument types."),
    backends: str = typer.Option("quadratic,recurrent,chunk,scan,auto", help="Comma-separated backends."),
    batch: int = typer.Option(4, help="Batch size B."),
    heads: int = typer.Option(4, help="Heads H."),
    dim: int = typer.Option(64, help="Key and value dimension K = V."),
    device: str = typer.Option("auto", help="'cpu', 'cuda' or 'auto' (cuda when available)."),
    repeats: int = typer.Option(3, help="Timed repetitions per cell after a warm-up (the fastest is reported)."),
    max_seconds: float = typer.Option(120.0, help="Skip a cell whose estimated time exceeds this (marked 'skip')."),
) -> None:
    """Forward and forward+backward time and peak memory of every backend (DESIGN §2, issue 'foundation')."""
    from seqdyn.bench.operator import run_operator_benchmark

    run_operator_benchmark(
        seq_lens=[int(t) for t in seq_lens.split(",")],
        kinds=kinds.split(","),
        backends=backends.split(","),
        batch=batch,
        heads=heads,
        dim=dim,
        device=device,
        repeats=repeats,
        max_seconds=max_seconds,
    )


@bench_app.command("mixers")
def bench_mixers(
    names: str = typer.Option("", help="Comma-separated mixer names (default: every registered mixer)."),
    seq_lens: str = typer.Option("1024,4096", "--seq-lens", help="Comma-separated sequence lengths T."),
    d_model: int = typer.Option(256, help="Model width D."),
    batch: int = typer.Option(4, help="Batch size B."),
    device: str = typer.Option("auto", help="'cpu', 'cuda' or 'auto' (cuda when available)."),
    repeats: int = typer.Option(2, help="Timed repetitions per cell after a warm-up (the fastest is reported)."),
    max_seconds: float = typer.Option(120.0, help="Skip a cell whose estimated time exceeds this (marked 'skip')."),
) -> None:
    """Forward and forward+backward time and peak memory of every mixer, beside softmax attention (issue 'mixer zoo')."""
    from seqdyn import mixers
    from seqdyn.bench.mixers import run_mixer_benchmark

    selected = [n for n in names.split(",") if n] or None
    for name in selected or []:
        mixers.get(name)  # unknown names fail before any work
    run_mixer_benchmark(selected, [int(t) for t in seq_lens.split(",")], d_model, batch, device, repeats, max_seconds)


@app.command("mixers")
def list_mixers() -> None:
    """List the registered mixers with their options and defaults."""
    from rich.console import Console
    from rich.table import Table

    from seqdyn import mixers

    table = Table(title="seqdyn mixers (seqdyn.mixers.build(name, d_model, **options))")
    table.add_column("name")
    table.add_column("options (defaults)")
    for name in mixers.names():
        table.add_row(name, ", ".join(f"{k}={v!r}" for k, v in mixers.options(name).items()))
    Console().print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
