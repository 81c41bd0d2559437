"""The ``seqdyn`` command line (typer + rich).  Sub-commands import their machinery lazily."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(
    name="seqdyn",
    help="Sequence mixers as dynamical systems: compute, inspect, benchmark and compare them.",
    no_args_is_help=True,
    add_completion=False,
)
bench_app = typer.Typer(
    help="Speed and memory benchmarks (ratios measured side by side in one run).", no_args_is_help=True
)
app.add_typer(bench_app, name="bench")
config_app = typer.Typer(help="The run and sweep configs (YAML).", no_args_is_help=True)
app.add_typer(config_app, name="config")


def _register_subcommands() -> None:
    """Sub-apps that live beside the code they drive (the task suites own ``seqdyn tasks``)."""
    from seqdyn.bench.tasks import main as bench_tasks
    from seqdyn.bench.train import main as bench_train
    from seqdyn.tasks.cli import app as tasks_app

    app.add_typer(tasks_app, name="tasks", help="List the task suites and show a generated example.")
    bench_app.command("tasks")(_one_line_errors(bench_tasks))
    bench_app.command("train")(_one_line_errors(bench_train))


def _name_list(text: str) -> list[str] | None:
    """A comma-separated option as its names; ``None`` (every one) where it names none."""
    return [name for name in text.split(",") if name] or None


def _one_line_errors(command):
    """``command`` with its ``ValueError`` (bad names, an absent device) as a one-line error, exit code 2."""

    @functools.wraps(command)
    def wrapped(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except ValueError as error:
            _fail(str(error))

    return wrapped


def _lengths(option: str, text: str) -> list[int]:
    """Comma-separated positive integers (sequence lengths)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        _fail(f"{option}: expected comma-separated positive integers such as 256,1024; got {text!r}")
    return values


_register_subcommands()


STORE_OPTION = typer.Option("seqdyn.db", "--store", help="The results store (an SQLite file).")
WORKERS_OPTION = typer.Option(
    0,
    help="Local worker processes, each training one run at a time with its share of "
    "the cores' threads; 0 (the default): one per CPU core, 1: the runs in turn in this "
    "process.",
)
RETRY_OPTION = typer.Option(
    False,
    "--retry-failed",
    help="Train again the runs that failed (a diverged loss excepted: the same config repeats it).",
)


def _fail(message: str, code: int = 2) -> None:
    """A one-line error on stderr and exit code ``code``: 2 for bad input, 1 for an error of the machine."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _fail_resumable(error: OSError) -> None:
    """An error of the machine during a run (a full disk): one line; the run is left to resume."""
    where = f"{error.filename}: " if error.filename else ""
    _fail(f"{where}{error.strerror or error}; the run can resume: run the same command again once that is fixed", 1)


def _check_before_start(config_path: str, runs, store: str, use_ray: bool = False, workers: int = 1) -> None:
    from seqdyn.train.checkpoint import checkpoint_dir_for
    from seqdyn.train.sweep import check_before_start

    try:
        check_before_start(runs, checkpoint_dir_for(store), use_ray=use_ray, workers=workers)
    except ValueError as error:
        _fail(f"{config_path}: {error}")


def _interrupted(error: KeyboardInterrupt) -> None:
    """Ctrl-C or SIGTERM: the run in progress is released as interrupted; say so in one line and exit at once
    with 128 + the signal (130 for Ctrl-C), skipping the seconds that tearing down torch can take."""
    import os
    import sys

    typer.echo(
        f"interrupted ({error or 'SIGINT'}): the run in progress is marked interrupted; the same command resumes it",
        err=True,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(getattr(error, "exit_status", 130))


@contextlib.contextmanager
def _training_errors():
    """What stops a training command, each in one line: bad input (exit 2), Ctrl-C or SIGTERM (the run is left
    to resume; 128 + the signal), an error of the machine (a full disk: exit 1, resumable)."""
    try:
        yield
    except ValueError as error:
        _fail(str(error))
    except KeyboardInterrupt as error:
        _interrupted(error)
    except OSError as error:
        _fail_resumable(error)


def _load(config_path: str):
    from seqdyn.train.config import ConfigError, load_config

    try:
        return load_config(config_path)
    except ConfigError as error:
        _fail(str(error))


def _open_store(path: str):
    from seqdyn.train.store import Store

    try:
        return Store(path)
    except ValueError as error:
        _fail(str(error))


@app.command()
def train(
    config: str = typer.Argument(..., help="A run config (YAML)."),
    store: str = STORE_OPTION,
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Train one run into the store (resumes it from its checkpoint when it was interrupted).

    Under ``torchrun --nproc_per_node N`` the run trains data-parallel (DDP; gloo on CPU, nccl on GPU).
    """
    from seqdyn.train.checkpoint import checkpoint_dir_for
    from seqdyn.train.config import SweepConfig
    from seqdyn.train.distributed import Distributed
    from seqdyn.train.loop import train_run

    run = _load(config)
    if isinstance(run, SweepConfig):
        _fail(f"{config}: has a sweep section; run it with `seqdyn sweep {config}`")
    _check_before_start(config, [run], store)
    distributed = Distributed.from_environment()
    results = _open_store(store) if distributed is None or distributed.rank == 0 else None
    try:
        with _training_errors():
            result = train_run(
                run, results, checkpoint_dir=checkpoint_dir_for(store), progress=progress, distributed=distributed
            )
            if distributed is not None:
                distributed.barrier()  # no rank tears the group down while rank 0 still writes
    finally:
        if distributed is not None:
            distributed.close()
    if distributed is None or distributed.rank == 0:
        _print_summary([result])


@app.command()
def sweep(
    config: str = typer.Argument(..., help="A sweep config (YAML with a `sweep` section) or a run config."),
    store: str = STORE_OPTION,
    workers: int = WORKERS_OPTION,
    ray: bool = typer.Option(False, "--ray", help="Run each run as a Ray task (RAY_ADDRESS picks the cluster)."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    retry_failed: bool = RETRY_OPTION,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="List the runs it would train and those already done, and train nothing."
    ),
) -> None:
    """Train every run of a sweep that is not finished yet, then print a summary."""
    from seqdyn.train.sweep import available_cores, expand, plan_sweep, run_sweep

    parsed = _load(config)
    workers = workers or available_cores()
    _check_before_start(config, expand(parsed), store, use_ray=ray, workers=workers)
    try:
        planned = plan_sweep(parsed, store, retry_failed)
    except ValueError as error:
        _fail(f"{store}: {error}")
    if dry_run:
        _print_plan(planned, store)
        return
    _open_store(store)
    with _training_errors():
        results = run_sweep(parsed, store, workers=workers, use_ray=ray, progress=progress, retry_failed=retry_failed)
    _print_summary(results)
    skipped = sum(run.action == "done" for run in planned)
    if skipped == len(planned):
        typer.echo(
            f"nothing trained: all {len(planned)} runs are already done in {store} (--retry-failed trains "
            "the failed ones again; `seqdyn report` shows them)"
        )
    elif skipped:
        typer.echo(f"trained {len(planned) - skipped} runs; {skipped} already done in {store} were skipped")


def _print_plan(planned, store: str) -> None:
    """``sweep --dry-run``: each run and what the sweep would do with it."""
    from rich.markup import escape
    from rich.table import Table

    from seqdyn.train.progress import console

    table = Table(title=f"sweep --dry-run against {escape(store)}: nothing trained")
    for column in ("run", "name", "in the store", "would"):
        table.add_column(column)
    for run in planned:
        table.add_row(run.run_id, escape(run.name), run.status or "—", run.action)
    console().print(table)
    counts = {action: sum(run.action == action for run in planned) for action in ("train", "resume", "retry", "done")}
    typer.echo(", ".join(f"{count} {action}" for action, count in counts.items() if count) + f" of {len(planned)} runs")


@app.command()
def report(
    store: str = STORE_OPTION,
    format: str = typer.Option("table", "--format", help="table, csv or json."),
    plot: str = typer.Option("", "--plot", help="Write a figure here (accuracy grid or learning curves)."),
    sweep_name: str = typer.Option("", "--sweep", help="Only the runs of this sweep."),
) -> None:
    """One row per run (the hyper-parameters that vary, final and best metric, steps, wall time), best over
    learning rates, and optionally a figure."""
    from seqdyn.train.report import report_command

    try:
        typer.echo(report_command(store, format, plot or None, sweep_name or None))
    except ValueError as error:
        _fail(str(error))


@app.command()
def inspect(
    run_id: str = typer.Argument(
        ...,
        metavar="RUN_ID|MODEL_DIR",
        help="The run's id (first column of `seqdyn "
        "report`), or a model folder: a seqdyn checkpoint or a transformers checkpoint of a "
        "family `seqdyn convert` converts.",
    ),
    store: str = STORE_OPTION,
    input: str = typer.Option("", "--input", help="Token ids [B,T] (.pt or .npy) instead of the task's test set."),
    text: str = typer.Option(
        "", "--text", help="A model folder: the text to measure on, read by the folder's tokenizer."
    ),
    examples: int = typer.Option(8, help="Test sequences to run when no --input is given."),
    eps: float = typer.Option(1e-3, help="Threshold of a near-zero coefficient."),
    plot: str = typer.Option(
        "",
        "--plot",
        help="Write coefficient heat maps here, and the principle plot of the "
        "run's sweep beside it (FILE-principle.png).",
    ),
    dsf: str = typer.Option(
        "",
        "--dsf",
        help="A model folder: save each layer's DSF matrices (Lambda, B, C, D per step and head) to this .pt file.",
    ),
) -> None:
    """Load a trained run, or a model folder, and print, per layer and head, the near-zero fraction, zero counts
    against K−1, the combination classes and the spectral bound of its coefficient dynamics (Sieber et al. 2025,
    §5), with a legend of the columns."""
    if Path(run_id).is_dir():
        _inspect_folder(Path(run_id), input, text, eps, plot, dsf)
    elif dsf:
        _fail("--dsf: saves the DSF matrices of a model folder's layers; give a MODEL_DIR")
    else:
        _inspect_run(run_id, store, input, examples, eps, plot)


def _inspect_run(run_id: str, store: str, input: str, examples: int, eps: float, plot: str) -> None:
    """``seqdyn inspect RUN_ID``: a trained run of the store, on its task's test set or ``--input``."""
    from rich.markup import escape

    from seqdyn.analysis.model import format_table, table_legend
    from seqdyn.analysis.runs import inspect_run, load_inputs, principle_points
    from seqdyn.train.progress import console
    from seqdyn.train.report import describe_backends
    from seqdyn.train.store import Store

    try:
        opened = Store(store, readonly=True)
        inputs = load_inputs(input) if input else None
        result = inspect_run(opened, run_id, inputs, examples, eps)
        out = console()
        metric = "" if result.best_metric is None else f", best {result.metric_name} {result.best_metric:.4f}"
        backend = f", backend {describe_backends(result.backends)}" if result.backends else ""
        source = f"--input {input}" if input else "its task's test set"
        title = f"run {run_id} ({result.name}, {result.status}{metric}{backend})"
        out.print(format_table(result.rows, title=escape(title)))
        out.print(
            escape(
                f"measured on {_described_inputs(result.inputs)} from {source}: coefficients "
                f"[{result.inputs.shape[0]}, H, {result.inputs.shape[1]}, {result.inputs.shape[1]}] per layer"
            )
        )
        for line in table_legend(result.rows, eps):
            out.print(escape(line), style="dim")
        for layer, (name, why) in enumerate(zip(result.backends or [], result.backend_reasons or [])):
            if why:
                out.print(escape(f"layer {layer} trained with {name}: {why}"))
        if plot:
            from seqdyn.analysis.plots import plot_coefficients, plot_principle

            written = [plot_coefficients(result.coefficients, plot, title=f"coefficients of run {run_id}")]
            points = principle_points(opened, opened.run(run_id).sweep, examples, eps)
            if len(points) > 1:
                target = Path(plot).with_name(Path(plot).stem + "-principle.png")
                written.append(plot_principle(points, target, ylabel=f"best {result.metric_name}"))
            out.print("wrote " + ", ".join(str(path) for path in written))
    except ValueError as error:
        _fail(str(error))


def _inspect_folder(folder: Path, input: str, text: str, eps: float, plot: str, dsf: str = "") -> None:
    """``seqdyn inspect MODEL_DIR``: every layer and head of a checkpoint's model (converted from transformers where
    it is one) measured on ``--text`` (its tokenizer's ids) or ``--input`` (token ids)."""
    from rich.markup import escape

    from seqdyn.analysis.model import format_table, inspect_model, layer_coefficients, table_legend
    from seqdyn.analysis.runs import load_inputs
    from seqdyn.train.progress import console

    if bool(input) == bool(text):
        _fail("inspect MODEL_DIR: give the text to measure on with --text, or token ids with --input (one of them)")
    try:
        from seqdyn.hf.convert import UnsupportedModel, load_model, tokenize
    except ImportError as error:
        _fail(str(error))
    try:
        model = load_model(folder)
        inputs = tokenize(folder, text) if text else load_inputs(input).long()
    except (UnsupportedModel, ValueError) as error:
        _fail(str(error))
    vocab = model.config.vocab_size
    if inputs.dim() != 2 or int(inputs.min()) < 0 or int(inputs.max()) >= vocab:
        _fail(f"--input: expected token ids [B, T] in [0, {vocab}), got shape {tuple(inputs.shape)}")
    body = model.seqdyn
    rows = inspect_model(body, inputs, eps=eps)
    out = console()
    mixers = sorted({row.mixer for row in rows})
    out.print(
        format_table(rows, title=escape(f"{folder} ({', '.join(mixers)}, {model.config.num_hidden_layers} layers)"))
    )
    source = f"--text ({inputs.shape[1]} tokens)" if text else f"--input {input}"
    out.print(
        escape(
            f"measured on {_described_inputs(inputs)} from {source}: coefficients "
            f"[{inputs.shape[0]}, H, {inputs.shape[1]}, {inputs.shape[1]}] per layer"
        )
    )
    for line in table_legend(rows, eps):
        out.print(escape(line), style="dim")
    if plot:
        from seqdyn.analysis.plots import plot_coefficients

        written = plot_coefficients(layer_coefficients(body, inputs), plot, title=f"coefficients of {folder.name}")
        out.print(f"wrote {written}")
    if dsf:
        _save_dsfs(body, inputs, dsf, out)


def _save_dsfs(model, inputs, path: str, out) -> None:
    """``--dsf``: every layer's DSF matrices on ``inputs`` in one ``torch.save`` file, ``{layer label: {"Lambda",
    "B", "C", "D"}}``; the layers too large to form are named with the reason."""
    import torch
    from rich.markup import escape

    from seqdyn.analysis.model import layer_dsfs

    systems, skipped = layer_dsfs(model, inputs)
    torch.save({label: dict(vars(system)) for label, system in systems.items()}, path)
    shapes = "; ".join(f"{label}: Λ {list(system.Lambda.shape)}" for label, system in systems.items())
    out.print(escape(f"wrote {path} (DSF per layer [B, H, T, ·, ·]: {shapes or 'none'})"))
    for label, why in skipped.items():
        out.print(escape(f"left out {label}: {why}"), style="dim")


def _described_inputs(inputs) -> str:
    """``[B, T]`` token ids or ``[B, T, C]`` features in words."""
    batch, length = inputs.shape[:2]
    what = "token sequences" if inputs.dim() == 2 else f"sequences of {inputs.shape[2]} features per step"
    return f"{batch} {what} of {length} steps"


def _print_summary(results) -> None:
    from rich.markup import escape
    from rich.table import Table

    from seqdyn.train.progress import console

    table = Table(title="runs")
    for column in ("run", "name", "status", "steps", "metric", "final", "best", "wall s"):
        table.add_column(column)
    fmt = lambda v: "—" if v is None else f"{v:.4f}"  # noqa: E731
    for r in results:
        table.add_row(
            r.run_id,
            escape(r.name),
            escape(r.status + (f" ({r.reason})" if r.reason else "")),
            str(r.step),
            r.metric_name,
            fmt(r.final_metric),
            fmt(r.best_metric),
            f"{r.wall_time:.1f}",
        )
    console().print(table)


@app.command()
def reproduce(
    target: str = typer.Argument(..., help="A reproduction's name, or list, all or report."),
    scale: str = typer.Option("cpu", help="smoke (a minute), cpu (at most 45 min on 2 cores) or paper (a GPU)."),
    store: str = STORE_OPTION,
    out: str = typer.Option(
        "reproductions",
        help="The folder of the results: each reproduction writes its "
        "results.csv, table.md, figure.png and verdict.json into a sub-folder named after it.",
    ),
    workers: int = WORKERS_OPTION,
    ray: bool = typer.Option(False, "--ray", help="Run each run as a Ray task (RAY_ADDRESS picks the cluster)."),
    yes: bool = typer.Option(False, "--yes", help="Start --scale paper on a machine without a GPU anyway."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    retry_failed: bool = RETRY_OPTION,
    data: Optional[str] = typer.Option(
        None,
        help="The local corpus of the language-model reproductions: a "
        "WikiText-103 directory (wiki.{train,valid,test}.tokens) or one text file.",
    ),
    markdown: bool = typer.Option(False, "--markdown", help="report: print the verdicts as a markdown table."),
    brief: bool = typer.Option(
        False,
        "--brief",
        help="report --markdown: the README's short table (claim names, "
        "the deciding numbers, an inconclusive verdict's cause in a word).",
    ),
) -> None:
    """The source documents' experiments: `list` them, run one by NAME (or `all`), or `report` the verdicts.

    A reproduction runs its sweeps into the store (started again, it skips finished runs), decides each claim
    (held, did not hold or inconclusive) and writes its table, figure and verdict under --out.
    """
    from seqdyn.reproduce import commands
    from seqdyn.train.sweep import available_cores

    with _training_errors():
        if target == "list":
            commands.list_table()
        elif target == "report" and markdown:
            typer.echo(commands.report_markdown(out, brief), nl=False)
        elif target == "report":
            commands.report(out)
        else:
            try:
                commands.reproduce(
                    target, scale, store, out, workers or available_cores(), ray, yes, progress, retry_failed, data
                )
            except commands.ReproductionsFailed as error:
                _fail(str(error), 1)


@app.command()
def demo(
    quick: bool = typer.Option(False, help="Only T=256 and 1024 in the benchmark table (about 75 s on 2 cores)."),
) -> None:
    """The operator demo: every backend against the reference, then the benchmark table."""
    from seqdyn.bench.operator import run_demo

    run_demo(quick=quick)


@bench_app.command("operator")
@_one_line_errors
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
        seq_lens=_lengths("--seq-lens", seq_lens),
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
@_one_line_errors
def bench_mixers(
    names: str = typer.Option("", help="Comma-separated mixer names (default: every registered mixer)."),
    seq_lens: str = typer.Option("1024,4096", "--seq-lens", help="Comma-separated sequence lengths T."),
    d_model: int = typer.Option(256, help="Model width D."),
    batch: int = typer.Option(4, help="Batch size B."),
    device: str = typer.Option("auto", help="'cpu', 'cuda' or 'auto' (cuda when available)."),
    repeats: int = typer.Option(2, help="Timed repetitions per cell after a warm-up (the fastest is reported)."),
    max_seconds: float = typer.Option(120.0, help="Skip a cell whose estimated time exceeds this (marked 'skip')."),
    rounds: int = typer.Option(2, help="Passes over all cells; each cell reports its best times over them."),
) -> None:
    """Forward and forward+backward time and peak memory of every mixer, beside softmax attention (issue 'mixer zoo')."""
    from seqdyn import mixers
    from seqdyn.bench.mixers import run_mixer_benchmark

    selected = _name_list(names)
    for name in selected or []:
        mixers.get(name)  # unknown names fail before any work
    run_mixer_benchmark(
        selected, _lengths("--seq-lens", seq_lens), d_model, batch, device, repeats, max_seconds, rounds
    )


@bench_app.command("auto")
@_one_line_errors
def bench_auto(
    quick: bool = typer.Option(False, help="Four small cases only (a first look, seconds)."),
    mixers: str = typer.Option("", "--mixers", help="Comma-separated mixer names: only the cases of these."),
    device: str = typer.Option("cpu", help="'cpu', 'cuda' or 'auto' (cuda when available)."),
    repeats: int = typer.Option(
        3, help="Timed repetitions per backend and round after a warm-up (the fastest counts)."
    ),
    rounds: int = typer.Option(
        3, help="Passes over a cell's backends (auto first, then last, ...); each keeps its best time."
    ),
    markdown: Optional[Path] = typer.Option(None, help="Also write the table as Markdown to this file."),
) -> None:
    """Is backend='auto' the fastest exact backend? Every mixer at its defaults and at the reproductions' shapes,
    auto beside every backend it could use (targets: within 1.2× in every cell, 1.05× in geometric mean)."""
    from seqdyn.bench.auto import run_auto_benchmark

    result = run_auto_benchmark(quick, device, repeats, rounds, _name_list(mixers), str(markdown) if markdown else None)
    if not result["met"]:
        raise typer.Exit(1)


@bench_app.command("decode")
@_one_line_errors
def bench_decode(
    quick: bool = typer.Option(False, help="Contexts 128 and 512 only (a first look, seconds)."),
    models: str = typer.Option("", "--models", help="Comma-separated: softmax_attention, mamba2, gated_deltanet."),
    device: str = typer.Option("cpu", help="'cpu', 'cuda' or 'auto' (cuda when available)."),
    d_model: int = typer.Option(64, min=1, help="Model width."),
    layers: int = typer.Option(2, min=1, help="Blocks."),
    chunk: int = typer.Option(512, min=1, help="Tokens per chunk of the chunked prefill."),
    steps: int = typer.Option(32, min=1, help="Tokens decoded after the prefill."),
    markdown: Optional[Path] = typer.Option(None, help="Also write the tables as Markdown to this file."),
) -> None:
    """A language model's prefill (whole and in chunks), decode tokens/s and cache memory at contexts 1k, 4k and
    16k, and packed against padded training throughput (needs the \\[hf] extra)."""
    from seqdyn.bench.decode import run_decode_benchmark

    run_decode_benchmark(
        quick, device, d_model, layers, chunk, steps, _name_list(models), str(markdown) if markdown else None
    )


@bench_app.command("hf")
@_one_line_errors
def bench_hf(
    quick: bool = typer.Option(False, help="A toy model at 64 tokens (a first look, seconds)."),
    lengths: str = typer.Option("1024,4096,16384", "--lengths", help="Comma-separated prompt lengths."),
    repeats: int = typer.Option(2, min=1, help="Timed repetitions per cell after a warm-up (the fastest counts)."),
    markdown: Optional[Path] = typer.Option(None, help="Also write the table as Markdown to this file."),
    families: str = typer.Option(
        "",
        "--families",
        show_default=False,
        help="Comma-separated families to measure (mamba, mamba2, qwen3_5_text, "
        "recurrent_gemma); default: all of them.",
    ),
) -> None:
    """transformers' Mamba, Mamba-2, Qwen3.5 (Gated DeltaNet) and RecurrentGemma (RG-LRU) on their PyTorch
    fallbacks against the same models with seqdyn.hf.accelerate: prefill, forward + backward and decode, side by
    side (needs the \\[hf] extra)."""
    from seqdyn.bench.hf import run_hf_benchmark

    chosen = tuple(name.strip() for name in families.split(",") if name.strip())
    run_hf_benchmark(
        quick,
        tuple(_lengths("--lengths", lengths)),
        repeats,
        str(markdown) if markdown else None,
        **({"families": chosen} if chosen else {}),
    )


@config_app.command("schema")
def config_schema() -> None:
    """Print the config reference as Markdown (docs/config.md): each field's type, default, values and meaning."""
    from seqdyn.train.config_reference import config_reference

    typer.echo(config_reference(), nl=False)


@app.command()
def convert(
    model_dir: Optional[str] = typer.Argument(
        None,
        metavar="MODEL_DIR",
        help="A transformers checkpoint folder (config.json and its weights) of a supported family.",
    ),
    out_dir: Optional[str] = typer.Argument(None, metavar="OUT_DIR", help="A new folder for the seqdyn checkpoint."),
    check: bool = typer.Option(
        False,
        "--check",
        help="Convert a tiny random model of every supported family, built "
        "offline, and print the largest differences from transformers.",
    ),
) -> None:
    """Convert a transformers model (Mamba, Mamba-2, Qwen3.5, Bamba, Granite, Nemotron-H) to seqdyn: same logits.

    The result loads with transformers' AutoModelForCausalLM once seqdyn.hf is imported, and opens in
    `seqdyn inspect OUT_DIR` and the analysis API as coefficient dynamics.
    """
    try:
        from seqdyn.hf.convert import TINY_CONFIGS, UnsupportedModel, check_conversion, convert_checkpoint
    except ImportError as error:
        _fail(str(error))
    if check:
        from rich.table import Table

        from seqdyn.train.progress import console

        reports = [check_conversion(family) for family in TINY_CONFIGS]
        columns = [key for key in reports[0] if key != "family"]
        table = Table(title="seqdyn convert --check: largest |seqdyn − transformers| / largest |logit|, tiny models")
        for column in ("family", *columns):
            table.add_column(column)
        for report in reports:
            table.add_row(
                report["family"],
                *(f"{report[key]:.1e}" if isinstance(report[key], float) else str(report[key]) for key in columns),
            )
        console().print(table)
        return
    if model_dir is None or out_dir is None:
        _fail("convert: give MODEL_DIR and OUT_DIR (or --check)")
    try:
        written = convert_checkpoint(model_dir, out_dir)
    except UnsupportedModel as error:
        _fail(str(error))
    typer.echo(f"{written}: a seqdyn checkpoint converted from {model_dir}")


@app.command("mixers")
def list_mixers(
    name: Optional[str] = typer.Argument(
        None,
        metavar="NAME",
        help="A mixer, or the import path of your own (my_package.my_module:MyMixer): print "
        "its equations and what each option means.",
    ),
) -> None:
    """List the registered mixers with their options and defaults, or document one (seqdyn mixers custom)."""
    from rich.console import Console
    from rich.table import Table

    from seqdyn import mixers

    if name is not None:
        try:
            typer.echo(mixers.describe(name).text(), nl=False)
        except ValueError as error:
            _fail(f"NAME: {error}")
        return
    table = Table(
        title="seqdyn mixers (seqdyn.mixers.build(name, d_model, **options))",
        caption="seqdyn mixers NAME: its equations and what each option means",
    )
    table.add_column("name")
    table.add_column("options (defaults)")
    for name in mixers.names():
        table.add_row(name, ", ".join(f"{k}={v!r}" for k, v in mixers.options(name).items()))
    Console().print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
