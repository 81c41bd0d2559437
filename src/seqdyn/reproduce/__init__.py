"""The source documents' experiments, one module each, as one command with a verdict.

    seqdyn reproduce list                          every reproduction, its paper and figure, claims and scales
    seqdyn reproduce dsf_mqar_models --scale cpu   its runs (resumable), then reproductions/dsf_mqar_models/
    seqdyn reproduce report                        the verdicts of everything that has run

A reproduction is a module here defining ``REPRODUCTION`` (:class:`~seqdyn.reproduce.base.Reproduction`): its
sweeps per scale, its claims (:mod:`~seqdyn.reproduce.claims`), its table and its figure; "where is Sieber et al. 2024's
Fig. 2 reproduced?" — in ``seqdyn/reproduce/dsf_mqar_models.py``.  The framework modules (:data:`FRAMEWORK`)
hold what they share: the claims, the base class, the runner and the papers' training protocols
(:mod:`seqdyn.reproduce.protocols`).

Adding one (``seqdyn reproduce list`` and the smoke test of every reproduction find the module by itself):

1. ``seqdyn/reproduce/<name>.py`` defining ``REPRODUCTION``: sweeps per scale of its module's ``SCALES`` (``paper``
   the paper's own hyper-parameters, trained on the GPU where there is one; ``cpu`` a reduction measured to fit
   :data:`~seqdyn.reproduce.base.CPU_BUDGET_S` on 2 cores; ``smoke`` under a minute; and, where a claim is left open
   at ``cpu``, ``gpu``: the smallest setting of the paper's own budgets that would decide it, with its estimated
   H200 time in ``gpu_minutes``), ``reductions`` saying what each scale changed and why, the table and the figure.
2. Each claim a :class:`~seqdyn.reproduce.claims.Claim` whose threshold stands beside the paper's sentence it
   tests, fixed before any result is seen; ``tests/reproduce/test_<name>.py`` decides it on hand-made results
   where it must hold, fail and be inconclusive, and pins the paper scale to the paper's numbers.
3. The cpu budget from a pilot (``examples/pilots/``), fixed in a commit before the run; then
   ``seqdyn reproduce <name> --scale cpu``, its outputs under ``docs/reproductions/`` (``timing.json`` among them:
   the measured wall time that ``seqdyn reproduce list`` shows) and
   ``seqdyn reproduce report --out docs/reproductions --markdown > docs/reproductions/README.md``.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from seqdyn.reproduce.base import SCALES, Reproduction, Results

__all__ = ["FRAMEWORK", "SCALES", "Reproduction", "Results", "get", "names"]

#: the modules that are not reproductions
FRAMEWORK = frozenset({"base", "claims", "measured", "protocols", "runner", "seeds"})


@lru_cache(maxsize=None)
def _module_names() -> tuple[str, ...]:
    return tuple(
        sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name not in FRAMEWORK)
    )


def names() -> list[str]:
    """Every reproduction's name, sorted."""
    return list(_module_names())


def get(name: str) -> Reproduction:
    """The reproduction ``name`` (its module ``seqdyn/reproduce/<name>.py`` defines ``REPRODUCTION``)."""
    if name not in _module_names():
        raise ValueError(f"unknown reproduction {name!r}; known: {', '.join(names())} (`seqdyn reproduce list`)")
    return importlib.import_module(f"seqdyn.reproduce.{name}").REPRODUCTION
