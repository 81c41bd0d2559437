"""``seqdyn conform``: a third-party implementation of an op against seqdyn's float64 reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from seqdyn.cli.common import name_list, one_line_errors


@one_line_errors
def conform(
    target: str = typer.Argument(
        ..., metavar="CALLABLE", help="The implementation, as module.path:function (imported here)."
    ),
    op: str = typer.Option(
        ..., "--op", help="The op it claims to compute: gated_delta_rule, selective_scan or causal_conv1d."
    ),
    adapter: Optional[str] = typer.Option(
        None,
        help="Its calling convention (gated_delta_rule: transformers, fla; selective_scan: mamba_ssm, "
        "transformers); by default the one its parameters match.",
    ),
    dtypes: str = typer.Option(
        "float32,bfloat16", help="The dtypes to compute in, comma-separated (float64, float16 too)."
    ),
    device: str = typer.Option("cpu", help="Where the implementation runs (the reference runs on the CPU in float64)."),
    quick: bool = typer.Option(
        False,
        "--quick",
        help="Ten cases per dtype instead of the full sweep (20: lengths, widths, grouped heads, initial states, "
        "decays, packed rows).",
    ),
    json_out: Optional[Path] = typer.Option(
        None, "--json", help="Write the report (every case, the minimized one) here."
    ),
) -> None:
    """Sweep shapes (odd lengths, lengths around chunk boundaries, head widths 16–256, grouped heads), initial
    states, extreme decays and dtypes, comparing outputs, final states and every gradient with seqdyn's float64
    reference within a tolerance scaled to the dtype and to each case's condition; print the table, shrink the first
    failing case to the smallest that still fails. Exit code 1 where a case fails."""
    from seqdyn.conform import conform as run_conformance
    from seqdyn.conform import load_callable, sweep

    report = run_conformance(load_callable(target), op, sweep(quick, _dtypes(dtypes)), adapter, device)
    report["callable"] = target
    _print(report)
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2) + "\n")
    if report["failed"]:
        raise typer.Exit(1)


def _print(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"seqdyn conform {report['callable']} --op {report['op']} ({report['adapter']} convention)")
    for column in ("case", "passed", "error / tolerance", "worst quantity"):
        table.add_column(column, justify="left" if column in ("case", "worst quantity") else "right")
    for case in report["cases"]:
        ratio = case["error"] or ("∞" if case["worst_ratio"] is None else f"{case['worst_ratio']:.3g}")
        mark = "[green]yes[/green]" if case["passed"] else "[red]no[/red]"
        table.add_row(case["case"], mark, ratio, case["quantity"])
    console = Console(width=140)
    console.print(table)
    console.print(f"{report['passed']} passed, {report['failed']} failed")
    if report["minimized"]:
        smallest = report["minimized"]
        why = smallest["error"] or f"{smallest['quantity']} at {smallest['worst_ratio']:.3g}× its tolerance"
        console.print(f"smallest failing case: {smallest['case']} — {why}")


@one_line_errors
def audit(
    families: Optional[list[str]] = typer.Argument(
        None, metavar="FAMILY...", help="Families of transformers models seqdyn converts (default: every one)."
    ),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write every family's invariants here."),
) -> None:
    """Check the invariants a user of a transformers model assumes — a row alone = left-padded = right-padded = packed
    after another document, one prefill = the prompt in two pieces = token-by-token decoding, greedy generation with
    and without the cache — on each family's tiny random model, as transformers runs it, accelerated by seqdyn, and
    as seqdyn's float32 conversion (the control), against its float64 conversion; a broken invariant names the first
    layer whose output departs from the row's own forward."""
    from seqdyn.conform.audit import audit_family
    from seqdyn.hf.convert.checkpoints import quiet_transformers
    from seqdyn.hf.convert.registry import TINY_CONFIGS

    chosen = families or list(TINY_CONFIGS)
    unknown = [name for name in chosen if name not in TINY_CONFIGS]
    if unknown:
        raise ValueError(f"FAMILY: {', '.join(unknown)} is not converted; seqdyn converts {', '.join(TINY_CONFIGS)}")
    reports = []
    with quiet_transformers():
        for family in chosen:
            accelerated = audit_family(family, accelerated=True)
            reports += [audit_family(family), *filter(None, [accelerated]), audit_family(family, converted=True)]
    _print_audit(reports)
    if json_out is not None:
        json_out.write_text(json.dumps(reports, indent=2) + "\n")


def _print_audit(reports: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    from seqdyn.conform.audit import INVARIANTS

    table = Table(title="seqdyn audit: invariants against the float64 conversion (error relative to the largest logit)")
    table.add_column("family")
    for name in INVARIANTS:
        table.add_column(name, justify="right")
    for report in reports:
        cells = []
        for name in INVARIANTS:
            result = report["invariants"][name]
            if result["raised"]:
                cells.append(f"[red]raised[/red] {result['raised'][:40]}")
            else:
                mark = "[green]ok[/green]" if result["holds"] else "[red]broken[/red]"
                where = "" if result.get("first_layer") is None else f" from layer {result['first_layer']}"
                cells.append(f"{mark} {result['error']:.0e}{where}")
        how = " (seqdyn's conversion)" if report["converted"] else " (accelerated)" if report["accelerated"] else ""
        table.add_row(report["family"] + how, *cells)
    Console(width=200).print(table)


@one_line_errors
def precision(
    op: str = typer.Option(
        "gated_delta_rule",
        "--op",
        help="gated_delta_rule, selective_scan, ssd or linear_rnn (the ops with several backends).",
    ),
    lengths: str = typer.Option("1024,4096", help="Sequence lengths, comma-separated."),
    dtypes: str = typer.Option("float32,bfloat16,float16", help="The dtypes to compute in, comma-separated."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write every row here."),
) -> None:
    """Where precision is lost: seqdyn's operator on the op's problem, per backend and dtype, against float64 — the
    error of the outputs and of the final state relative to their largest magnitude beside the dtype's unit
    round-off, and the state's largest entry."""
    from rich.console import Console
    from rich.table import Table

    from seqdyn.cli.common import parse_lengths
    from seqdyn.conform.precision import precision_report

    rows = precision_report(op, tuple(parse_lengths("--lengths", lengths)), _dtypes(dtypes))
    table = Table(title=f"seqdyn precision --op {op}: error against float64, relative to the largest magnitude")
    for column in ("T", "dtype", "backend", "unit round-off", "output", "final state", "largest state entry"):
        table.add_column(column, justify="right")
    for row in rows:
        values = (row["unit_roundoff"], row["output_error"], row["state_error"], row["state_max"])
        table.add_row(f"{row['length']:,}", row["dtype"], row["backend"], *(f"{value:.2g}" for value in values))
    Console(width=120).print(table)
    if json_out is not None:
        json_out.write_text(json.dumps(rows, indent=2) + "\n")


def _dtypes(text: str) -> tuple[str, ...]:
    """``--dtypes`` as names of :data:`~seqdyn.conform.cases.DTYPES`; one line naming the option otherwise."""
    from seqdyn.conform.cases import DTYPES

    chosen = tuple(name_list(text) or ())
    if not chosen or any(name not in DTYPES for name in chosen):
        raise ValueError(f"--dtypes: expected some of {', '.join(DTYPES)}; got {text!r}")
    return chosen
