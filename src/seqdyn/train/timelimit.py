"""A time limit a command keeps by itself: training stops cleanly at a checkpoint when it is reached.

``seqdyn sweep … --time-limit 8m`` and ``seqdyn reproduce … --time-limit 8m`` run within :func:`time_limit`, which
puts the moment to stop into the environment (:data:`STOP_AT`, seconds since the epoch), so that the worker
processes a sweep starts inherit it.  A run checks it after every step (:func:`time_is_up`): once it is reached, the
run writes a checkpoint, gives itself back as ``interrupted`` and the sweep starts no other run; the same command
started again resumes every run from its checkpoint and ends with the metrics of an uninterrupted run.  A step
begun before the limit is finished, so a command overshoots its limit by at most one step and one checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator

#: the environment variable holding the moment to stop (seconds since the epoch)
STOP_AT = "SEQDYN_STOP_AT"
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


class OutOfTime(Exception):
    """A run reached the time limit after ``step`` steps and gave itself back at a checkpoint."""

    def __init__(self, step: int):
        super().__init__(f"time limit reached at step {step:,}")
        self.step = step


def parse_duration(text: str, option: str = "--time-limit") -> float:
    """Seconds in a duration such as ``8m``, ``90s``, ``1h30m`` or ``600`` (seconds); a ValueError naming
    ``option`` for anything else, zero or less."""
    words = str(text).strip().lower()
    match = _DURATION.fullmatch(words)
    if words and match and any(match.groups()):
        seconds = sum(float(value) * _UNITS[unit] for value, unit in zip(match.groups(), "hms") if value)
    else:
        try:
            seconds = float(words)
        except ValueError:
            seconds = None
    if seconds is None or not seconds > 0:
        raise ValueError(f"{option}: expected a positive duration such as 8m, 90s or 1h30m, got {text!r}")
    return seconds


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[float | None]:
    """Within the block, training stops ``seconds`` from now (:data:`STOP_AT` in ``os.environ``, restored after);
    None: no limit.  Yields the moment to stop."""
    if seconds is None:
        yield None
        return
    saved = os.environ.get(STOP_AT)
    stop = time.time() + seconds
    os.environ[STOP_AT] = repr(stop)
    try:
        yield stop
    finally:
        if saved is None:
            os.environ.pop(STOP_AT, None)
        else:
            os.environ[STOP_AT] = saved


def stop_at() -> float | None:
    """The moment to stop that the environment holds (:data:`STOP_AT`), None where there is none."""
    value = os.environ.get(STOP_AT)
    return float(value) if value else None


def time_is_up(moment: float | None = None) -> bool:
    """Whether the time limit (``moment``, else the environment's) has been reached."""
    moment = stop_at() if moment is None else moment
    return moment is not None and time.time() >= moment
