"""What ``seqdyn reproduce`` prints and runs: the list, one reproduction or all of them, and the verdict report.

Imported when the command runs (it draws on the reproductions and the training code); the command and its
options are in :mod:`seqdyn.cli.reproduce`."""

from __future__ import annotations

from pathlib import Path

from seqdyn.reproduce import get, names
from seqdyn.reproduce.base import SCALES, Reproduction, check_scale
from seqdyn.reproduce.claims import control_state, control_value
from seqdyn.reproduce.runner import (
    TimeLimitReached,
    Written,
    brief_numbers,
    check_gpu_at_hand,
    check_store,
    named_sweeps,
    run,
    seeds_text,
    verdict_rows,
)
from seqdyn.reproduce.seeds import check_max_seeds, with_stored_seeds
from seqdyn.train.config import RunConfig
from seqdyn.train.progress import console
from seqdyn.train.store import Store
from seqdyn.train.sweep import expand

VERDICT_STYLES = {"held": "green", "did not hold": "red", "inconclusive": "yellow"}


class ReproductionsFailed(RuntimeError):
    """``reproduce all`` went on past reproductions that raised an error; this names them at the end."""


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "not measured"
    if seconds >= 2 * 3600:
        hours, minutes = divmod(round(seconds / 60), 60)
        return f"{hours} h {minutes} min"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _wall_time(elapsed_s: float, runs_before: int) -> str:
    """The wall time of the call that trained a reproduction's runs, saying how many it did not train."""
    earlier = f"; {runs_before} run{'s' if runs_before > 1 else ''} trained by an earlier call" if runs_before else ""
    return _duration(elapsed_s) + earlier


def list_table() -> None:
    """One row per reproduction: name, paper and figure, its claims, and each scale's measured wall time (the
    paper scale's GPU estimate where it was not measured)."""
    from rich.table import Table

    table = Table(title=f"seqdyn reproductions (seqdyn reproduce NAME --scale {'|'.join(SCALES)})", show_lines=True)
    for column in ("name", "paper", "claims", *(f"{scale} wall time" for scale in SCALES)):
        # the long claims and times wrap, not the names
        table.add_column(column, max_width=72 if column == "claims" else 16 if "time" in column else None)
    for name in names():
        reproduction = get(name)
        table.add_row(
            name,
            f"{reproduction.paper}\n{reproduction.figure}",
            "\n".join(claim.statement for claim in reproduction.claims),
            *(_scale_time(reproduction, scale) for scale in SCALES),
        )
    console().print(table)
    console().print(
        "smoke and cpu: measured on the project's 2-core CPU machine; gpu: estimated on one H200, one run at a time "
        "(each module's reductions say from what); paper: estimated on one H200 from timed training steps "
        "(examples/pilots/paper_step_times.py)",
        style="dim",
    )


def _scale_time(reproduction: Reproduction, scale: str) -> str:
    """A scale's measured wall time, or the gpu or paper scale's H200 estimate where it was not measured ("—" for a
    scale the reproduction does not have)."""
    if scale not in reproduction.scales:
        return "—"
    measured = reproduction.wall_time.get(scale)
    if measured is None and scale == "gpu":
        return f"about {reproduction.gpu_minutes:.0f} min on one H200 (estimated)"
    if measured is None and scale == "paper" and reproduction.paper_gpu_estimate:
        return f"about {reproduction.paper_gpu_estimate} on one H200 (estimated)"
    return _duration(measured)


def _work(config: RunConfig) -> float:
    """A run's arithmetic, up to a constant: steps × batch × length × width² × layers."""
    train = config.train
    steps = train.steps or -(-config.task.train_examples // train.batch_size) * (train.epochs or 1)
    length = config.task.params.get("seq_len", 64)
    return float(steps) * train.batch_size * length * config.model.d_model**2 * config.model.layers


def estimate_seconds(reproduction: Reproduction, scale: str, data: str | None = None) -> float | None:
    """The wall time of ``scale`` on the project's 2-core CPU: measured, or the ``cpu`` scale's measured time
    scaled by the arithmetic of the runs (early stopping ignored; a corpus reproduction's on ``data``); None where
    ``cpu`` is not measured yet."""
    measured = reproduction.wall_time.get(scale)
    base = reproduction.wall_time.get("cpu")
    if measured is not None or base is None:
        return measured
    work = {
        s: sum(_work(run) for sweep in named_sweeps(reproduction, s, data) for run in expand(sweep))
        for s in ("cpu", scale)
    }
    return base * work[scale] / work["cpu"]


def check_device(reproductions: list[Reproduction], scale: str, yes: bool, data: str | None = None) -> None:
    """Refuse ``--scale gpu`` without a GPU, and ``--scale paper`` unless ``yes``: the error gives the estimated
    time on this CPU."""
    import torch

    reproductions = [reproduction for reproduction in reproductions if reproduction.trains]
    if reproductions:
        check_gpu_at_hand(scale)
    if scale != "paper" or yes or not reproductions or torch.cuda.is_available():
        return
    estimates = [estimate_seconds(reproduction, scale, data) for reproduction in reproductions]
    known = [seconds for seconds in estimates if seconds is not None]
    hours = f"about {sum(known) / 3600:,.0f} hours" if known else "an unmeasured time (days, at the papers' sizes)"
    raise ValueError(
        f"--scale paper: this machine has no GPU; the paper's sizes would take {hours} on its CPU. "
        f"Run on a GPU or a Ray cluster (--ray), or add --yes to start anyway"
    )


def reproduce(
    target: str,
    scale: str,
    store: str,
    out: str,
    workers: int,
    use_ray: bool,
    yes: bool,
    progress: bool = True,
    retry_failed: bool = False,
    data: str | None = None,
    max_seeds: int | None = None,
    stack: int = 1,
) -> None:
    """Run one reproduction (``target`` its name) or ``all``, then print each one's verdicts.  ``all`` without
    ``data`` leaves out (and names) the reproductions that need a corpus; one such reproduction alone is an error.
    ``max_seeds``: the cap on seeds added to decide a claim (None: each reproduction's budget decides)."""
    check_scale(scale)
    if stack < 1:
        raise ValueError(f"--stack: expected at least 1 run per batched model, got {stack}")
    if max_seeds is not None:
        check_max_seeds(max_seeds)
    options = dict(workers=workers, use_ray=use_ray, progress=progress, retry_failed=retry_failed, data=data)
    options |= dict(max_seeds=max_seeds, stack=stack)
    reproductions = _chosen(target, scale, data)
    _check_before_any_run(reproductions, scale, store, yes, data)
    if target == "all":
        _print_expected_time(reproductions, scale)
    failed = []
    for reproduction in reproductions:
        try:
            written = run(reproduction, scale, store, out, **options)
        except TimeLimitReached as reached:  # a visit's end: the runs left resume with the same command
            console().print(str(reached))
            break
        except OSError:  # the machine's (a full disk): every reproduction after it would fail the same way
            raise
        except Exception as error:  # a bug in one reproduction stops neither ``all`` nor the hours of the others
            if target != "all":
                raise
            _print_failure(reproduction, error)
            failed.append(reproduction.name)
            continue
        _print_written(reproduction, written, out)
    if failed:
        raise ReproductionsFailed(
            f"{len(failed)} of {len(reproductions)} reproductions failed: {', '.join(failed)} "
            f"(tracebacks above); the runs they finished stay in --store {store}"
        )


def _chosen(target: str, scale: str, data: str | None) -> list[Reproduction]:
    """The reproductions ``target`` names: one, or every one for ``all``, less (named on the console) those that
    train on a local corpus where no ``data`` is given above the smoke scale and those without the scale."""
    reproductions = [get(name) for name in (names() if target == "all" else [target])]
    if target == "all" and data is None and scale != "smoke":
        skipped = [r.name for r in reproductions if r.corpus]
        reproductions = [r for r in reproductions if not r.corpus]
        if skipped:
            console().print(f"left out (they train on a local corpus: add --data PATH): {', '.join(skipped)}")
    without = [r.name for r in reproductions if scale not in r.scales]
    if target == "all" and without:
        reproductions = [r for r in reproductions if scale in r.scales]
        console().print(f"left out (no {scale} scale: the cpu scale decides their claims): {', '.join(without)}")
    return reproductions


def _check_before_any_run(
    reproductions: list[Reproduction], scale: str, store: str, yes: bool, data: str | None
) -> None:
    """What refuses the reproductions before any run starts: a sweep that cannot be built (a bad ``data``, or none
    where one is needed), ``--scale paper`` without a GPU (:func:`check_device`), and a store holding another
    config under one of their sweep names."""
    planned = [named_sweeps(reproduction, scale, data) for reproduction in reproductions]
    check_device(reproductions, scale, yes, data)
    if Path(store).exists():
        held = Store(store)
        for sweeps in planned:
            check_store(held, with_stored_seeds(held, sweeps))


def _print_expected_time(reproductions: list[Reproduction], scale: str) -> None:
    """How many of ``reproductions`` have a measured wall time at ``scale``, and those times together."""
    measured = [r.wall_time.get(scale) for r in reproductions if r.wall_time.get(scale) is not None]
    console().print(
        f"{len(reproductions)} reproductions at --scale {scale}; {len(measured)} of them measured "
        f"here, in {_duration(sum(measured))} together (on 2 cores; a store's finished runs skipped)"
    )


def _print_written(reproduction: Reproduction, written: Written, out: str) -> None:
    """A finished reproduction's wall time and the files it wrote, then its verdicts."""
    console().print(
        f"{reproduction.name} ({_wall_time(written.elapsed_s, written.runs_before)}): "
        f"{written.folder}/{{{', '.join(p.name for p in sorted(written.folder.iterdir()))}}}"
    )
    report(out, only=reproduction.name)


def _print_failure(reproduction: Reproduction, error: Exception) -> None:
    """The traceback of a reproduction that failed during ``all``, and a line saying that the others go on."""
    console().print_exception()
    console().print(
        f"[red]{reproduction.name} failed[/red] ({type(error).__name__}: {error}); the other reproductions go on"
    )


def _rows(out: str | Path, only: str | None = None) -> list[dict]:
    """The verdict rows written under ``out`` (only ``only``'s where given); none is an error naming the command
    that writes them."""
    rows = [row for row in verdict_rows(out) if only is None or row["reproduction"] == only]
    if not rows:
        raise ValueError(
            f"--out {out}: no reproduction has written a verdict.json there yet "
            f"(run `seqdyn reproduce NAME --out {out}`)"
        )
    return rows


#: the hand-written evidence an out folder may hold beside the reproductions: the full report ends with it
EVIDENCE = "evidence.md"


def report_markdown(out: str | Path, brief: bool = False) -> str:
    """The verdict table of every reproduction written under ``out`` as markdown, read from their
    ``verdict.json`` files alone (``docs/reproductions/README.md`` is this for ``docs/reproductions``), followed by
    ``out``'s :data:`EVIDENCE` where there is one.  ``brief``: the README's table — each claim by its short name,
    the first two numbers that decided it, the verdict with an inconclusive one's cause
    (:data:`~seqdyn.reproduce.claims.CAUSES`)."""
    evidence = Path(out) / EVIDENCE
    lines = [] if brief else _markdown_preamble(out, evidence.is_file())
    rows = _rows(out)
    shared = _shared_provenance(rows) if brief else {}
    if shared:
        lines += ["All at " + ", ".join(f"{key} {value}" for key, value in shared.items()) + ".", ""]
    kept = [key for key in ("scale", "date", "commit") if key not in shared]
    header = f"| reproduction ({', '.join([*kept, 'wall time'])}) | claim | paper | ours |"
    lines += [
        header + (" verdict |" if brief else " rule, seeds, control | verdict |"),
        "|---|---|---|---|---|" + ("" if brief else "---|"),
    ]
    shown = None
    for row in rows:
        lines.append(_markdown_row(row, kept, row["reproduction"] != shown, brief))
        shown = row["reproduction"]
    if evidence.is_file() and not brief:
        lines += ["", evidence.read_text().strip()]
    return "\n".join(lines) + "\n"


def _markdown_preamble(out: str | Path, has_evidence: bool) -> list[str]:
    """The full markdown report's title and the lines that say how it was generated and from what."""
    return [
        f"# Verdicts of the reproductions in {Path(out).as_posix()}/",
        "",
        f"Generated by `seqdyn reproduce report --out {Path(out).as_posix()} --markdown` from each folder's",
        "`verdict.json`; each folder's `table.md` has the runs behind them."
        + (f" The evidence after the table is `{EVIDENCE}`, written by hand." if has_evidence else ""),
        "",
    ]


def _markdown_row(row: dict, kept: list[str], first: bool, brief: bool) -> str:
    """One claim's row of the markdown table; the ``first`` of a reproduction's rows names it, with its ``kept``
    provenance and its wall time."""
    wall_time = _wall_time(row["elapsed_s"], row["runs_before"])
    name = f"`{row['reproduction']}` ({', '.join([*(str(row[key]) for key in kept), wall_time])})" if first else ""
    reason = row["reason"] or ""
    if brief:
        cells = (
            name,
            row["name"],
            row["paper"] or "—",
            brief_numbers(row["numbers"]),
            row["verdict"] + (f" ({row['cause']})" if row["cause"] else ""),
        )
    else:
        verdict = reason if reason.startswith(row["verdict"]) else row["verdict"] + (f": {reason}" if reason else "")
        cells = (name, row["claim"], row["paper"] or "—", row["ours"], decided_by(row), verdict)
    return _table_line(cells)


def _table_line(cells) -> str:
    """One row of a markdown table: its cells' ``|`` escaped and line breaks made spaces."""
    return "| " + " | ".join(str(text).replace("|", "\\|").replace("\n", " ") for text in cells) + " |"


def decided_by(row: dict) -> str:
    """What decided a claim's verdict, in one cell: its rule, the seeds per setting, its control as checked ("—"
    where a file written before these were recorded has none)."""
    parts = [row["rule"]] if row["rule"] else []
    seeds = seeds_text(row["seeds"], row.get("units")).removeprefix(" — ")
    parts += [seeds] if seeds else []
    control = row["control"]
    if control:
        parts.append(
            f"control {control['setting']} {control_value(control)} against {control['threshold']:.3g}: "
            + control_state(control)
        )
    return "; ".join(parts) or "—"


def changes_markdown(out: str | Path, against: str | Path) -> str:
    """Claim by claim, the verdicts under ``against`` (before) beside those under ``out`` (after), for the
    reproductions ``out`` holds: each verdict with its cause, a claim new in ``out`` or no longer made marked
    "—", and the counts of each verdict before and after."""
    before = {(row["reproduction"], row["name"]): row for row in _rows(against)}
    after = _rows(out)
    rerun = {row["reproduction"] for row in after}
    pairs = [(before.pop((row["reproduction"], row["name"]), None), row) for row in after]
    pairs += [(row, None) for key, row in before.items() if key[0] in rerun]
    pairs.sort(key=lambda pair: next(row["reproduction"] for row in pair if row is not None))
    lines = [
        f"| reproduction | claim | before ({Path(against).as_posix()}) | after ({Path(out).as_posix()}) |",
        "|---|---|---|---|",
    ]
    for old, new in pairs:
        either = new or old
        cells = (f"`{either['reproduction']}`", either["name"], _verdict_words(old), _verdict_words(new))
        lines.append(_table_line(cells))
    counts = [_counts([row for row, _ in pairs if row]), _counts([row for _, row in pairs if row])]
    lines += ["", f"Before: {counts[0]}. After: {counts[1]}."]
    return "\n".join(lines) + "\n"


def _verdict_words(row: dict | None) -> str:
    """A verdict with an inconclusive one's cause and where it was decided ("inconclusive (seeds), 3810fbc")."""
    if row is None:
        return "—"
    return (
        row["verdict"] + (f" ({row['cause']})" if row["cause"] else "") + f", {row['date']}, {row['commit'].split()[0]}"
    )


def _counts(rows: list[dict]) -> str:
    """How many claims of each verdict, in words ("12 claims: 5 held, 2 did not hold, 5 inconclusive")."""
    by_verdict = ", ".join(f"{sum(row['verdict'] == verdict for row in rows)} {verdict}" for verdict in VERDICT_STYLES)
    return f"{len(rows)} claims: {by_verdict}"


def _shared_provenance(rows: list[dict]) -> dict[str, str]:
    """The scale, date and commit that every reproduction's verdicts share (one ``reproduce all``, say), to be said
    once above the brief table instead of on each row."""
    return {
        key: str(rows[0][key]) for key in ("scale", "date", "commit") if rows and len({row[key] for row in rows}) == 1
    }


def print_report(out: str | Path, markdown: bool, brief: bool, against: str | None) -> None:
    """``seqdyn reproduce report``: the verdicts under ``out`` beside those under ``against`` where given
    (:func:`changes_markdown`), else as markdown (:func:`report_markdown`) or as a table (:func:`report`)."""
    import typer

    if against:
        typer.echo(changes_markdown(out, against), nl=False)
    elif markdown:
        typer.echo(report_markdown(out, brief), nl=False)
    else:
        report(out)


def report(out: str | Path, only: str | None = None) -> None:
    """The verdict table of every reproduction written under ``out`` (or only of ``only``)."""
    from rich.table import Table

    rows = _rows(out, only)
    table = Table(title=f"seqdyn reproductions: verdicts ({out})", show_lines=True)
    for column in ("reproduction", "scale", "claim", "paper", "ours", "verdict"):
        table.add_column(column)
    for row in rows:
        style = VERDICT_STYLES[row["verdict"]]
        verdict = f"[{style}]{row['verdict']}[/{style}]" + (f"\n{row['reason']}" if row["reason"] else "")
        table.add_row(
            f"{row['reproduction']}\n{row['date']} {row['commit']}",
            row["scale"],
            row["claim"],
            row["paper"] or "—",
            row["ours"],
            verdict,
        )
    console().print(table)
