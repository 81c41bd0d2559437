"""``seqdyn bench``: the speed and memory benchmarks of bench/, each a command (the ratios are measured side by
side in one run)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from seqdyn.cli.common import name_list, one_line_errors, parse_lengths, per_thread_count

app = typer.Typer(help="Speed and memory benchmarks (ratios measured side by side in one run).", no_args_is_help=True)


@app.command("tasks")
@one_line_errors
@per_thread_count
def bench_tasks(
    scale: float = typer.Option(1.0, min=1e-6, help="Multiply every count (and its target) by this, e.g. 0.01."),
    skip_512: bool = typer.Option(False, "--skip-512", help="Leave out Pathfinder-Segmentation at M=512."),
    seed: int = typer.Option(0, help="Data seed."),
) -> None:
    """Time the task generators on one CPU core and print a table against their targets."""
    from rich.console import Console
    from rich.table import Table

    from seqdyn.bench.tasks import run

    rows = run(scale=scale, skip_512=skip_512, seed=seed)
    from seqdyn.bench.measure import threads_in_words

    table = Table(title=f"seqdyn bench tasks ({threads_in_words()})")
    for column in ("case", "examples", "seconds", "target", "met"):
        table.add_column(column, justify="left" if column == "case" else "right")
    for row in rows:
        target = "—" if row["target_s"] is None else f"< {row['target_s']:.3g} s"
        met = "—" if row["met"] is None else ("[green]yes[/green]" if row["met"] else "[red]no[/red]")
        table.add_row(row["case"], f"{row['count']:,}", f"{row['seconds']:.2f}", target, met)
    Console(width=120).print(table)


@app.command("train")
@one_line_errors
@per_thread_count
def bench_train(names: str = "", device: str = "auto", steps: int = 7, compile_step: bool = False) -> None:
    """Training tokens per second per mixer and the harness overhead (target: under 5 % of the step time);
    --compile-step: also the bare step under torch.compile, against the eager one."""
    from seqdyn import mixers
    from seqdyn.bench.measure import resolve_device
    from seqdyn.bench.operator import checks_table
    from seqdyn.bench.train import run
    from seqdyn.train.progress import console, progress_bar

    selected = name_list(names)
    for name in selected or []:
        mixers.get(name)
    out = console()
    with progress_bar(console=out) as bar:
        task = bar.add_task("training steps", total=len(selected or mixers.names()))
        cells, setup = run(
            selected, device, steps, lambda cell: bar.update(task, advance=1, description=cell.mixer), compile_step
        )
    out.print(_train_table(cells, setup, resolve_device(device), compile_step))
    ok = [c for c in cells if c.overhead is not None]
    if ok:
        median = sorted(c.overhead for c in ok)[len(ok) // 2]
        out.print(
            checks_table(
                [("median harness overhead < 5 % of the step time", f"{100 * median:.1f} %", median < 0.05)],
                "targets",
            )
        )


def _train_table(cells, setup: dict, device, compile_step: bool):
    """``seqdyn bench train``'s table: one row per mixer, its tokens per second, bare and harness step times and
    the overhead; with ``compile_step`` the eager and compiled bare steps, their ratio and the compile time."""
    from rich.table import Table

    title = (
        f"training throughput on {device}: 2 layers, d={setup['d_model']}, MQAR L={setup['seq_len']},"
        f" batch {setup['batch']}"
    )
    table = Table(title=title)
    columns = ["mixer", "tokens/s", "bare step ms", "harness step ms", "harness overhead"]
    columns += ["eager step ms", "compiled step ms", "eager / compiled", "compile s"] if compile_step else []
    for column in columns:
        table.add_column(column, justify="left" if column == "mixer" else "right")
    for cell in cells:
        if cell.status != "ok":
            table.add_row(cell.mixer, cell.status, cell.note, *[""] * (len(columns) - 3))
            continue
        compiled = (
            [f"{cell.eager_ms:.1f}", f"{cell.compiled_ms:.1f}", f"{cell.compile_ratio:.2f}×", f"{cell.compile_s:.1f}"]
            if compile_step
            else []
        )
        table.add_row(
            cell.mixer,
            f"{cell.tokens_per_s:,.0f}",
            f"{cell.bare_ms:.1f}",
            f"{cell.harness_ms:.1f}",
            f"{100 * cell.overhead:.1f} %",
            *compiled,
        )
    return table


@app.command("sweep")
@one_line_errors
@per_thread_count
def bench_sweep(
    reproductions: str = typer.Option(
        "", help="Comma-separated reproductions whose runs to time (default: dsf_mqar_models and coef_readout_maps)."
    ),
    scale: Optional[str] = typer.Option(None, help="Their scale (default: gpu on a GPU, else cpu)."),
    sizes: str = typer.Option("2,4,8", help="Comma-separated stack sizes (runs per batched model)."),
    names: str = typer.Option("", "--mixers", help="Comma-separated mixers (default: every mixer of the runs)."),
    device: str = "auto",
    steps: int = typer.Option(5, min=1, help="Timed rounds (one step of each setting per round)."),
    json_path: Optional[Path] = typer.Option(
        None, "--json", help="Also write the measurement (and the stack size it chooses) as JSON to this file."
    ),
) -> None:
    """Runs per hour stacked into one batched model against one run at a time, per mixer of a sweep's runs, and
    where stacking stops helping."""
    import json

    from seqdyn.bench.sweep import DEFAULT_REPRODUCTIONS, as_json, best_stack, run
    from seqdyn.train.progress import console, progress_bar

    chosen = name_list(reproductions) or DEFAULT_REPRODUCTIONS
    stack_sizes = [int(size) for size in name_list(sizes) or []]
    out = console()
    with progress_bar(console=out) as bar:
        task = bar.add_task("sweep steps", total=None)
        cells, scale_, device_ = run(
            chosen,
            scale,
            stack_sizes,
            device,
            steps,
            name_list(names),
            lambda cell: bar.update(task, advance=1, description=cell.mixer),
        )
    out.print(_sweep_table(cells, scale_, device_, stack_sizes))
    out.print(f"stack size to train with (median ratio ≥ 1.2 over the mixers, else 1): --stack {best_stack(cells)}")
    if json_path is not None:
        json_path.write_text(json.dumps(as_json(cells, scale_, device_), indent=1))


def _sweep_table(cells, scale: str, device, sizes: list[int]):
    """``seqdyn bench sweep``'s table: per mixer, one run's step time, each stack's step time and its runs per
    hour over one run at a time, where stacking stops helping and (on a GPU) the memory per run."""
    from rich.table import Table

    table = Table(title=f"runs per hour stacked / one at a time, --scale {scale} runs on {device} (median step ms)")
    columns = ["reproduction", "mixer", "one run ms"] + [f"stack {size}" for size in sorted(sizes)]
    columns += ["stops helping at", "MB per run (largest stack)"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("reproduction", "mixer") else "right")
    for cell in cells:
        if cell.status != "ok":
            table.add_row(cell.reproduction, cell.mixer, cell.status, cell.note, *[""] * (len(columns) - 4))
            continue
        stacked = [f"{cell.stacked_ms[size]:.1f} ms · {cell.ratio(size):.2f}×" for size in sorted(sizes)]
        memory = cell.memory_per_run_mb.get(max(sizes))
        table.add_row(
            cell.reproduction,
            cell.mixer,
            f"{cell.one_ms:.1f}",
            *stacked,
            str(cell.stops_helping() or f"> {max(sizes)}"),
            "—" if memory is None else f"{memory:.0f}",
        )
    return table


@app.command("operator")
@one_line_errors
@per_thread_count
def bench_operator(
    seq_lens: str = typer.Option("256,1024,4096", "--seq-lens", help="Comma-separated sequence lengths T."),
    kinds: str = typer.Option(
        "gla,mamba2,deltanet,softmax", help="Comma-separated argument types (also: kda, deltaproduct, fox, rwkv7)."
    ),
    backends: str = typer.Option(
        "quadratic,recurrent,chunk,scan,auto",
        help=(
            "Comma-separated backends (also: transformers, its CPU fallback, for deltanet and kda; floor, the matrix "
            "products alone, for mamba2)."
        ),
    ),
    batch: int = typer.Option(4, help="Batch size B."),
    heads: int = typer.Option(4, help="Heads H."),
    dim: int = typer.Option(64, help="Key and value dimension K = V."),
    device: str = typer.Option("auto", help="'cpu', 'cuda' or 'auto' (cuda when available)."),
    repeats: int = typer.Option(3, help="Timed repetitions per cell after a warm-up (the fastest is reported)."),
    max_seconds: float = typer.Option(120.0, help="Skip a cell whose estimated time exceeds this (marked 'skip')."),
) -> None:
    """Forward and forward+backward time and peak memory of every backend of coefficient_dynamics, side by side."""
    from seqdyn.bench.operator import run_operator_benchmark

    run_operator_benchmark(
        seq_lens=parse_lengths("--seq-lens", seq_lens),
        kinds=kinds.split(","),
        backends=backends.split(","),
        batch=batch,
        heads=heads,
        dim=dim,
        device=device,
        repeats=repeats,
        max_seconds=max_seconds,
    )


@app.command("mixers")
@one_line_errors
@per_thread_count
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
    """Forward and forward+backward time and peak memory of every mixer, beside softmax attention."""
    from seqdyn import mixers
    from seqdyn.bench.mixers import run_mixer_benchmark

    selected = name_list(names)
    for name in selected or []:
        mixers.get(name)  # unknown names fail before any work
    run_mixer_benchmark(
        selected, parse_lengths("--seq-lens", seq_lens), d_model, batch, device, repeats, max_seconds, rounds
    )


@app.command("auto")
@one_line_errors
@per_thread_count
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

    result = run_auto_benchmark(quick, device, repeats, rounds, name_list(mixers), str(markdown) if markdown else None)
    if not result["met"]:
        raise typer.Exit(1)


@app.command("decode")
@one_line_errors
@per_thread_count
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
        quick, device, d_model, layers, chunk, steps, name_list(models), str(markdown) if markdown else None
    )


@app.command("hf")
@one_line_errors
@per_thread_count
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
        "recurrent_gemma, kimi_linear, rwkv, xlstm); default: all of them.",
    ),
) -> None:
    """transformers' Mamba, Mamba-2, Qwen3.5 (Gated DeltaNet), RecurrentGemma (RG-LRU), Kimi-Linear (KDA), RWKV-4 and
    xLSTM 7B on their PyTorch fallbacks against the same models with seqdyn.hf.accelerate: prefill, forward + backward
    and decode, side by side (needs the \\[hf] extra)."""
    from seqdyn.bench.hf import run_hf_benchmark

    chosen = tuple(name.strip() for name in families.split(",") if name.strip())
    run_hf_benchmark(
        quick,
        tuple(parse_lengths("--lengths", lengths)),
        repeats,
        str(markdown) if markdown else None,
        **({"families": chosen} if chosen else {}),
    )
