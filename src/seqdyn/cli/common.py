"""What the commands share: one-line errors and exit codes, the options several commands take, and the parsing of
comma-separated lists of names and lengths."""

from __future__ import annotations

import contextlib
import functools
import inspect

import typer

STORE_OPTION = typer.Option("seqdyn.db", "--store", help="The results store (an SQLite file).")
WORKERS_OPTION = typer.Option(
    0,
    help="Local worker processes, each training one run at a time with its share of "
    "the cores' threads; 0 (the default): one per CPU core, 1: the runs in turn in this "
    "process.",
)
STACK_OPTION = typer.Option(
    1,
    "--stack",
    help="Runs per batched model: up to that many runs of a sweep that differ only in their seed and learning "
    "rate train as one model on one worker, each as it would alone (1: one run at a time).",
)
RETRY_OPTION = typer.Option(
    False,
    "--retry-failed",
    help="Train again the runs that failed (a diverged loss excepted: the same config repeats it).",
)
RAY_OPTION = typer.Option(False, "--ray", help="Run each run as a Ray task (RAY_ADDRESS picks the cluster).")
TIME_LIMIT_OPTION = typer.Option(
    None,
    "--time-limit",
    help="Stop training after this long (8m, 90s, 1h30m): every run stops at a checkpoint and the same command "
    "started again resumes them exactly.",
)


def time_limit_seconds(text: str | None, ray: bool = False) -> float | None:
    """The seconds of ``--time-limit`` (None where it is not given); one line for a bad value or with ``--ray``."""
    from seqdyn.train.timelimit import parse_duration

    if text is None:
        return None
    if ray:
        raise ValueError("--time-limit: not with --ray (Ray's workers do not see the limit); use local --workers")
    return parse_duration(text)


def fail(message: str, code: int = 2) -> None:
    """A one-line error on stderr and exit code ``code``: 2 for bad input, 1 for an error of the machine."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def one_line_errors(command):
    """``command`` with its ``ValueError`` (bad names, an absent device) as a one-line error, exit code 2."""

    @functools.wraps(command)
    def wrapped(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except ValueError as error:
            fail(str(error))

    return wrapped


THREADS_OPTION = typer.Option(
    "1",
    "--threads",
    help="Comma-separated torch thread counts: the benchmark runs and reports at each, one count after another.",
)


def per_thread_count(command):
    """``command`` (a benchmark) with a ``--threads`` option: run once per thread count, under
    :func:`~seqdyn.bench.measure.benchmark_threads`, each run's tables after a line naming its count."""

    @functools.wraps(command)
    def wrapped(*args, threads: str = "1", **kwargs):
        from seqdyn.bench.measure import benchmark_threads
        from seqdyn.train.progress import console

        counts = thread_counts(threads)
        for count in counts:
            if len(counts) > 1:
                console().rule(f"at {count} torch thread{'s' if count > 1 else ''}")
            with benchmark_threads(count):
                command(*args, **kwargs)

    signature = inspect.signature(command)
    option = inspect.Parameter("threads", inspect.Parameter.KEYWORD_ONLY, default=THREADS_OPTION, annotation=str)
    wrapped.__signature__ = signature.replace(parameters=[*signature.parameters.values(), option])
    return wrapped


def thread_counts(text: str) -> list[int]:
    """``--threads`` as its counts, each a positive integer."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ValueError(f"--threads: expected comma-separated thread counts of 1 or more, e.g. 1,2; got {text!r}")
    return counts


def name_list(text: str) -> list[str] | None:
    """A comma-separated option as its names; ``None`` (every one) where it names none."""
    return [name for name in text.split(",") if name] or None


def parse_lengths(option: str, text: str) -> list[int]:
    """Comma-separated positive integers (sequence lengths)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        fail(f"{option}: expected comma-separated positive integers such as 256,1024; got {text!r}")
    return values


def _fail_resumable(error: OSError) -> None:
    """An error of the machine during a run (a full disk): one line; the run is left to resume."""
    where = f"{error.filename}: " if error.filename else ""
    fail(f"{where}{error.strerror or error}; the run can resume: run the same command again once that is fixed", 1)


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
def training_errors():
    """What stops a training command, each in one line: bad input (exit 2), Ctrl-C or SIGTERM (the run is left
    to resume; 128 + the signal), an error of the machine (a full disk: exit 1, resumable)."""
    try:
        yield
    except ValueError as error:
        fail(str(error))
    except KeyboardInterrupt as error:
        _interrupted(error)
    except OSError as error:
        _fail_resumable(error)
