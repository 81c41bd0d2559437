"""``seqdyn reproduce``: the source documents' experiments — list them, run one or all, report their verdicts.

The command and its options; what each target prints and runs is in :mod:`seqdyn.cli.reproductions`, imported
when the command runs."""

from __future__ import annotations

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

OUT_OPTION = typer.Option(
    "reproductions",
    help="The folder of the results: each reproduction writes its "
    "results.csv, table.md, figure.png and verdict.json into a sub-folder named after it.",
)
DATA_OPTION = typer.Option(
    None,
    help="The local corpus of the language-model reproductions: a "
    "WikiText-103 directory (wiki.{train,valid,test}.tokens) or one text file.",
)
MAX_SEEDS_OPTION = typer.Option(
    None,
    "--max-seeds",
    help="The most seeds per setting: a claim its seeds leave open gets one more seed at a time until it is "
    "decided or this many are run (default: 10, and at --scale cpu only while the next seed fits in the "
    "45-minute budget).",
)
BRIEF_OPTION = typer.Option(
    False,
    "--brief",
    help="report --markdown: the README's short table (claim names, "
    "the deciding numbers, an inconclusive verdict's cause in a word).",
)


AGAINST_OPTION = typer.Option(
    None,
    "--against",
    help="report: the verdicts under this folder (an earlier run) beside those under --out, claim by claim, "
    "as a markdown table with the counts before and after.",
)


def reproduce(
    target: str = typer.Argument(..., help="A reproduction's name, or list, all or report."),
    scale: str = typer.Option(
        "cpu",
        help="smoke (a minute), cpu (at most 45 min on 2 cores), gpu (on a GPU: the smallest setting that decides "
        "what cpu leaves open; `list` shows which reproductions have it) or paper (a GPU).",
    ),
    store: str = STORE_OPTION,
    out: str = OUT_OPTION,
    workers: int = WORKERS_OPTION,
    ray: bool = RAY_OPTION,
    yes: bool = typer.Option(False, "--yes", help="Start --scale paper on a machine without a GPU anyway."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    retry_failed: bool = RETRY_OPTION,
    data: Optional[str] = DATA_OPTION,
    max_seeds: Optional[int] = MAX_SEEDS_OPTION,
    markdown: bool = typer.Option(False, "--markdown", help="report: print the verdicts as a markdown table."),
    brief: bool = BRIEF_OPTION,
    against: Optional[str] = AGAINST_OPTION,
    time_limit: Optional[str] = TIME_LIMIT_OPTION,
    stack: int = STACK_OPTION,
) -> None:
    """The source documents' experiments: `list` them, run one by NAME (or `all`), or `report` the verdicts.

    A reproduction runs its sweeps into the store (started again, it skips finished runs), decides each claim
    (held, did not hold or inconclusive) and writes its table, figure and verdict under --out.
    """
    from seqdyn.cli import reproductions
    from seqdyn.train.sweep import available_cores
    from seqdyn.train.timelimit import time_limit as limited

    try:
        seconds = time_limit_seconds(time_limit, ray)
    except ValueError as error:
        fail(str(error))
    with training_errors():
        if target == "list":
            reproductions.list_table()
        elif target == "report":
            reproductions.print_report(out, markdown, brief, against)
        else:
            try:
                cores = workers or available_cores()
                options = dict(
                    progress=progress, retry_failed=retry_failed, data=data, max_seeds=max_seeds, stack=stack
                )
                with limited(seconds):
                    reproductions.reproduce(target, scale, store, out, cores, ray, yes, **options)
            except reproductions.ReproductionsFailed as error:
                fail(str(error), 1)
