"""Measurements of trained models, made once from their checkpoints and kept in the store.

Some reproductions decide on what a trained model does beyond its training curve — its coefficients, its decoding
speed. :func:`measured_once` keeps each such measurement in the results store
(:meth:`~seqdyn.train.store.Store.record_measurements`), so that a store shared without its checkpoint folder (as
``cpu/seqdyn.db`` is) decides again; a run whose measurement is neither kept nor measurable, its checkpoint gone,
is collected by :func:`collecting_missing` for the runner to train again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from seqdyn.train.checkpoint import MissingCheckpoint

_missing: ContextVar[list[str] | None] = ContextVar("missing_checkpoints", default=None)


def measured_once(store: Any, run_id: str, kind: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``measure()`` of run ``run_id``, kept in ``store`` under ``kind`` (a name that changes with the measurement's
    parameters), or what was kept there before. A run without its checkpoint gives ``{}`` and is collected where
    :func:`collecting_missing` is active; elsewhere its :class:`MissingCheckpoint` propagates."""
    kept = store.measurements(run_id, kind)
    if kept is not None:
        return kept
    try:
        values = measure()
    except MissingCheckpoint:
        missing = _missing.get()
        if missing is None:
            raise
        missing.append(run_id)
        return {}
    store.record_measurements(run_id, kind, values)
    return values


@contextmanager
def collecting_missing() -> Iterator[list[str]]:
    """The run ids that :func:`measured_once` could not measure for want of a checkpoint within the block."""
    missing: list[str] = []
    token = _missing.set(missing)
    try:
        yield missing
    finally:
        _missing.reset(token)
