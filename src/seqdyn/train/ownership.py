"""Who trains a run: owners, their heartbeats, and when a claim may be taken over.

A run is claimed in the store by an owner, ``host:pid`` (:func:`default_owner`), before it trains, so concurrent
sweeps never train it twice. While it trains, a heartbeat (:class:`Heartbeat`) tells the store every 20 s that
the owner is alive. A claim goes stale after 120 s without a heartbeat, or at once when its owner is a process
of this host that has ended (:func:`owner_is_dead`); the next sweep then takes the run over and resumes it.
"""

from __future__ import annotations

import os
import socket
import threading

#: seconds without a heartbeat after which another process may take a run over
STALE_AFTER = 120.0


def default_owner() -> str:
    """This process as an owner: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_is_dead(owner: str | None) -> bool:
    """Whether ``owner`` (``host:pid``, see :func:`default_owner`) is a process of this host that has ended."""
    host, _, pid = (owner or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def stale_after(record) -> float:
    """Seconds the claim of a store record must have gone without a heartbeat before it can be taken over: none
    when it is ``running`` under an owner that has died on this host, else :data:`STALE_AFTER`."""
    return 0.0 if record.status == "running" and owner_is_dead(record.owner) else STALE_AFTER


class Heartbeat:
    """Tells the store every ``interval`` seconds that this run's owner is alive, so that a long stretch between
    evaluations is not mistaken for a dead process (claims go stale after :data:`STALE_AFTER` seconds without a
    heartbeat). Without a store (``None``) it does nothing."""

    def __init__(self, store, run_id: str, owner: str, interval: float = 20.0):
        self.store, self.run_id, self.owner, self.interval = store, run_id, owner, interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.stopped.wait(self.interval):
            self.store.heartbeat(self.run_id, self.owner)

    def __enter__(self) -> Heartbeat:
        if self.store is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join()
