"""``seqdyn train``, ``sweep``, ``report`` and ``inspect``: train runs into the results store, report them, and
measure the coefficient dynamics of a trained run or a model folder."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from seqdyn.cli.common import (
    RAY_OPTION,
    RETRY_OPTION,
    STACK_OPTION,
    STORE_OPTION,
    TIME_LIMIT_OPTION,
    WORKERS_OPTION,
    fail,
    time_limit_seconds,
    training_errors,
)


def _check_before_start(config_path: str, runs, store: str, use_ray: bool = False, workers: int = 1) -> None:
    """What would stop ``runs`` once started (an absent device, the checkpoint folder), as a one-line error."""
    from seqdyn.train.checkpoint import checkpoint_dir_for
    from seqdyn.train.sweep import check_before_start

    try:
        check_before_start(runs, checkpoint_dir_for(store), use_ray=use_ray, workers=workers)
    except ValueError as error:
        fail(f"{config_path}: {error}")


def _load(config_path: str):
    """The run or sweep config at ``config_path``; a bad one is a one-line error."""
    from seqdyn.train.config import ConfigError, load_config

    try:
        return load_config(config_path)
    except ConfigError as error:
        fail(str(error))


def _open_store(path: str):
    """The results store at ``path``; one it cannot open is a one-line error."""
    from seqdyn.train.store import Store

    try:
        return Store(path)
    except ValueError as error:
        fail(str(error))


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
    from seqdyn.train.sweep import train_or_record_failure

    run = _load(config)
    if isinstance(run, SweepConfig):
        fail(f"{config}: has a sweep section; run it with `seqdyn sweep {config}`")
    _check_before_start(config, [run], store)
    distributed = Distributed.from_environment()
    results = _open_store(store) if distributed is None or distributed.rank == 0 else None
    train = train_run if distributed is not None else train_or_record_failure  # a run that cannot start: failed
    try:
        with training_errors():
            result = train(
                run, results, checkpoint_dir=checkpoint_dir_for(store), progress=progress, distributed=distributed
            )
            if distributed is not None:
                distributed.barrier()  # no rank tears the group down while rank 0 still writes
    finally:
        if distributed is not None:
            distributed.close()
    if distributed is None or distributed.rank == 0:
        _print_summary([result])
        if result.status == "failed":
            fail(f"{config}: the run failed: {result.reason}", 1)


def sweep(
    config: str = typer.Argument(..., help="A sweep config (YAML with a `sweep` section) or a run config."),
    store: str = STORE_OPTION,
    workers: int = WORKERS_OPTION,
    ray: bool = RAY_OPTION,
    progress: bool = typer.Option(True, help="Show progress bars."),
    retry_failed: bool = RETRY_OPTION,
    stack: int = STACK_OPTION,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="List the runs it would train and those already done, and train nothing."
    ),
    time_limit: Optional[str] = TIME_LIMIT_OPTION,
) -> None:
    """Train every run of a sweep that is not finished yet, then print a summary."""
    from seqdyn.train.sweep import available_cores, expand, plan_sweep, run_sweep
    from seqdyn.train.timelimit import time_limit as limited

    try:
        seconds = time_limit_seconds(time_limit, ray)
    except ValueError as error:
        fail(str(error))
    if stack < 1:
        fail(f"--stack: expected at least 1 run per batched model, got {stack}")
    parsed = _load(config)
    workers = workers or available_cores()
    _check_before_start(config, expand(parsed), store, use_ray=ray, workers=workers)
    try:
        planned = plan_sweep(parsed, store, retry_failed)
    except ValueError as error:
        fail(f"{store}: {error}")
    if dry_run:
        from seqdyn.train.store import check_store_path

        try:
            check_store_path(store)  # what the sweep itself would refuse
        except ValueError as error:
            fail(str(error))
        _print_plan(planned, store, expand(parsed))
        return
    _open_store(store)
    with training_errors(), limited(seconds):
        results = run_sweep(
            parsed, store, workers=workers, use_ray=ray, progress=progress, retry_failed=retry_failed, stack=stack
        )
    _print_summary(results)
    _say_if_out_of_time(results, config, time_limit)
    _say_what_was_skipped(planned, store)


def _say_what_was_skipped(planned, store: str) -> None:
    skipped = sum(run.action == "done" for run in planned)
    if skipped == len(planned):
        typer.echo(
            f"nothing trained: all {len(planned)} runs are already done in {store} (--retry-failed trains "
            "the failed ones again; `seqdyn report` shows them)"
        )
    elif skipped:
        typer.echo(f"trained {len(planned) - skipped} runs; {skipped} already done in {store} were skipped")


def merge(
    source: str = typer.Argument(
        ..., help="The store to merge in: another machine's (a visit's), its .checkpoints folder beside it."
    ),
    store: str = STORE_OPTION,
) -> None:
    """Merge another store's runs into --store: those it has further along (new, with a result, or checkpointed
    later), with their metrics and checkpoints; a run both finished with different results stops the merge."""
    from seqdyn.train.merge import merge_stores

    try:
        report = merge_stores(source, store)
    except ValueError as error:
        fail(str(error))
    typer.echo(
        f"merged {source} into {store}: {len(report.added)} new runs, {len(report.advanced)} further along, "
        f"{report.kept} kept as they were"
    )


def _say_if_out_of_time(results, config: str, time_limit: str | None) -> None:
    """One line where the time limit stopped runs or left them unstarted: how many, and that the same command
    resumes them."""
    left = sum(
        result.status in ("interrupted", "skipped") and result.reason and "time limit" in result.reason
        for result in results
    )
    if left:
        typer.echo(
            f"time limit {time_limit} reached: {left} runs stopped at a checkpoint or not started; "
            f"`seqdyn sweep {config}` again (same store) resumes them"
        )


def _print_plan(planned, store: str, runs) -> None:
    """``sweep --dry-run``: each run, its model's sizes and what the sweep would do with it."""
    from rich.markup import escape
    from rich.table import Table

    from seqdyn.train.progress import console
    from seqdyn.train.report import model_sizes

    table = Table(title=f"sweep --dry-run against {escape(store)}: nothing trained")
    for column in ("run", "name", "parameters", "non-embedding", "state floats", "in the store", "would"):
        table.add_column(
            column, justify="right" if column in ("parameters", "non-embedding", "state floats") else "left"
        )
    for run, config in zip(planned, runs):
        sizes = [f"{value:,}" if value is not None else "—" for value in model_sizes(config.canonical()).values()]
        table.add_row(run.run_id, escape(run.name), *sizes, run.status or "—", run.action)
    console().print(table)
    counts = {action: sum(run.action == action for run in planned) for action in ("train", "resume", "retry", "done")}
    typer.echo(", ".join(f"{count} {action}" for action, count in counts.items() if count) + f" of {len(planned)} runs")


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
        fail(str(error))


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
        fail("--dsf: saves the DSF matrices of a model folder's layers; give a MODEL_DIR")
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
        fail(str(error))


def _inspect_folder(folder: Path, input: str, text: str, eps: float, plot: str, dsf: str = "") -> None:
    """``seqdyn inspect MODEL_DIR``: every layer and head of a checkpoint's model (converted from transformers where
    it is one) measured on ``--text`` (its tokenizer's ids) or ``--input`` (token ids)."""
    from rich.markup import escape

    from seqdyn.analysis.model import format_table, inspect_model, layer_coefficients, table_legend
    from seqdyn.analysis.runs import load_inputs
    from seqdyn.train.progress import console

    if bool(input) == bool(text):
        fail("inspect MODEL_DIR: give the text to measure on with --text, or token ids with --input (one of them)")
    try:
        from seqdyn.hf.convert import UnsupportedModel, load_model, tokenize
    except ImportError as error:
        fail(str(error))
    try:
        model = load_model(folder)
        inputs = tokenize(folder, text) if text else load_inputs(input).long()
    except (UnsupportedModel, ValueError) as error:
        fail(str(error))
    vocab = model.config.vocab_size
    if inputs.dim() != 2 or int(inputs.min()) < 0 or int(inputs.max()) >= vocab:
        fail(f"--input: expected token ids [B, T] in [0, {vocab}), got shape {tuple(inputs.shape)}")
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
    """One row per trained run: its status, steps, final and best metric and wall time."""
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
