"""Runs stacked into one batched model: several training runs of one architecture computed by one call.

:mod:`seqdyn.train.stacked` trains runs that differ only in their seed, learning rate and data order as one model
whose parameters carry a leading run axis, through ``torch.func.vmap`` (each run's forward is the model's own; the
gradient of the summed losses is each run's gradient alone).  Two things in the library do not pass through
``vmap`` as written, and :func:`stacked_runs` switches them while runs are stacked:

* a hand-written ``torch.autograd.Function`` (the RMSNorm, the L2 normalization, the short convolution, the FFT
  convolution, the chunked and scanned backends) computes with the plain tensor ops it replaces, which autograd
  differentiates: the same values to round-off, without the hand-written backward's savings;
* a branch on a tensor's values (is every decay ≤ 1?) reads them over every run (:func:`amax`, :func:`amin`): the
  runs take one branch together, exact for each of them as both branches are (:func:`anywhere` for masks).

The backends whose hand-written functions have no plain form here (``scan``; ``chunk`` but for the identity
readout without a Householder factor) then cannot compute (:func:`unstackable`), and ``auto`` chooses by its cost
model among the others, timing nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

__all__ = ["STACKABLE_BACKENDS", "amax", "amin", "anywhere", "apply", "runs_stacked", "stacked_runs", "unstackable"]

#: the operator's backends built from plain tensor ops, which ``vmap`` batches over stacked runs for every problem
STACKABLE_BACKENDS = ("quadratic", "recurrent")

_STACKED = contextvars.ContextVar("seqdyn_runs_stacked", default=False)


@contextlib.contextmanager
def stacked_runs() -> Iterator[None]:
    """While inside: the library computes for runs stacked under ``torch.func.vmap`` (see the module's text)."""
    token = _STACKED.set(True)
    try:
        yield
    finally:
        _STACKED.reset(token)


def runs_stacked() -> bool:
    """Whether the current call computes stacked runs (inside :func:`stacked_runs`)."""
    return _STACKED.get()


def unstackable(backend: str) -> str | None:
    """Why ``backend`` cannot compute while runs are stacked (None: it can, or runs are not stacked)."""
    if not runs_stacked() or backend in STACKABLE_BACKENDS:
        return None
    return (
        f"backend {backend!r} computes with a hand-written backward that torch.func.vmap cannot batch over stacked "
        f"runs; stacked runs compute with {' or '.join(STACKABLE_BACKENDS)} (or 'auto'), or train one run at a time"
    )


def apply(function: type[torch.autograd.Function], *args):
    """``function.apply(*args)``, or while runs are stacked ``function.plain(*args)``: the same values from plain
    tensor ops, differentiated by autograd (a hand-written function's ``plain`` static method)."""
    return function.plain(*args) if runs_stacked() else function.apply(*args)


def amax(x: torch.Tensor) -> torch.Tensor:
    """The largest element of ``x`` as a 0-d tensor — while runs are stacked, the largest over every run's ``x`` (an
    unbatched value a branch may read under ``vmap``)."""
    return _amax_over_runs(x) if runs_stacked() else x.amax()


def anywhere(mask: torch.Tensor) -> bool:
    """Whether ``mask`` holds a true element — in any run's ``mask`` while runs are stacked (see :func:`amax`)."""
    return bool(_amax_over_runs(mask)) if runs_stacked() else bool(mask.any())


def amin(x: torch.Tensor) -> torch.Tensor:
    """The smallest element of ``x``, over every run's while runs are stacked (see :func:`amax`)."""
    return -amax(-x)


@torch.library.custom_op("seqdyn::amax_over_runs", mutates_args=())
def _amax_over_runs(x: torch.Tensor) -> torch.Tensor:
    return x.amax()


@_amax_over_runs.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(())


def _amax_of_the_batch(info, in_dims, x: torch.Tensor):
    """``vmap``'s rule for :func:`_amax_over_runs`: the maximum over the batched tensor, the run axis included,
    comes out unbatched."""
    return x.amax(), None


_amax_over_runs.register_vmap(_amax_of_the_batch)
