"""Stopping cleanly: SIGINT and SIGTERM interrupt a run, and worker processes end when their parent dies.

Within :func:`signals_interrupt`, SIGINT (Ctrl-C) and SIGTERM raise :class:`Interrupted` in the main thread at
the next Python instruction, so a training step ends at once; the run is released as ``interrupted`` on the way
out and the next sweep resumes it from its checkpoint. The exit status is ``128 + signal`` (130, 143).

A worker process calls :func:`exit_with_parent`: when the process that started it dies, even by SIGKILL, the
worker gets SIGTERM (Linux's ``prctl(PR_SET_PDEATHSIG)``, and a thread that watches the parent's pid wherever
that is missing), releases its run and ends, instead of holding the run as ``running`` for a sweep long gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` is its number and ``exit_status`` the shell's ``128 + signum``."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class _Raise:
    """The signal handler: raises :class:`Interrupted` for the first signal and ignores later ones, so that a
    second Ctrl-C or the sweep's SIGTERM to its workers does not cut short the release of the run."""

    def __init__(self) -> None:
        self.raised = False

    def __call__(self, signum: int, frame) -> None:
        if not self.raised:
            self.raised = True
            raise Interrupted(signum)


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` within the block (the first one; later ones are ignored).
    A signal that was ignored when the block began (a job started with ``nohup``) stays ignored; nested blocks
    and threads other than the main thread leave the handlers as they are."""
    current = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    if threading.current_thread() is not threading.main_thread() or any(
        isinstance(h, _Raise) for h in current.values()
    ):
        yield
        return
    handler = _Raise()
    for number, previous in current.items():
        if previous is not signal.SIG_IGN:
            signal.signal(number, handler)
    try:
        yield
    finally:
        for number, previous in current.items():
            signal.signal(number, previous)


def exit_on_signals() -> None:
    """SIGINT and SIGTERM end this process at once (a worker between runs, which holds nothing to release);
    an ignored signal stays ignored."""
    for number in STOP_SIGNALS:
        if signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, lambda signum, frame: os._exit(128 + signum))


def exit_with_parent(parent_pid: int, interval: float = 0.5) -> None:
    """Send this process SIGTERM when ``parent_pid`` (the process that started it) dies.

    On Linux the kernel sends it (``prctl(PR_SET_PDEATHSIG, SIGTERM)``); a daemon thread also checks every
    ``interval`` seconds that the parent is still ``parent_pid`` (other systems, and a parent that died before
    the ``prctl``).
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    threading.Thread(target=_watch_parent, args=(parent_pid, interval), name="seqdyn-parent-watch", daemon=True).start()


def _watch_parent(parent_pid: int, interval: float) -> None:
    while os.getppid() == parent_pid:
        time.sleep(interval)
    os.kill(os.getpid(), signal.SIGTERM)
