"""The source documents' experiments, one module each, as one command with a verdict (DESIGN §9).

    seqdyn reproduce list                          every reproduction, its paper and figure, claims and scales
    seqdyn reproduce dsf_mqar_models --scale cpu   its runs (resumable), then reproductions/dsf_mqar_models/
    seqdyn reproduce report                        the verdicts of everything that has run

A reproduction is a module here defining ``REPRODUCTION`` (:class:`~seqdyn.reproduce.base.Reproduction`): its
sweeps per scale, its claims (:mod:`~seqdyn.reproduce.claims`), its table and its figure; "where is seed 000's
Fig. 2 reproduced?" — in ``seqdyn/reproduce/dsf_mqar_models.py``.  The framework modules (:data:`FRAMEWORK`)
hold what they share: the claims, the base class, the runner and the papers' training protocols.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from seqdyn.reproduce.base import SCALES, Reproduction, Results

__all__ = ["FRAMEWORK", "SCALES", "Reproduction", "Results", "get", "names"]

#: the modules that are not reproductions
FRAMEWORK = frozenset({"atomic", "base", "claims", "commands", "mad", "runner", "zoology"})


@lru_cache(maxsize=None)
def _module_names() -> tuple[str, ...]:
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                        if not m.name.startswith("_") and m.name not in FRAMEWORK))


def names() -> list[str]:
    """Every reproduction's name, sorted."""
    return list(_module_names())


def get(name: str) -> Reproduction:
    """The reproduction ``name`` (its module ``seqdyn/reproduce/<name>.py`` defines ``REPRODUCTION``)."""
    if name not in _module_names():
        raise ValueError(f"unknown reproduction {name!r}; known: {', '.join(names())} (`seqdyn reproduce list`)")
    return importlib.import_module(f"seqdyn.reproduce.{name}").REPRODUCTION
