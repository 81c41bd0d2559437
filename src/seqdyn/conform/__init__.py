"""Conformance of a third-party implementation to seqdyn's float64 reference (``seqdyn conform``).

The user names a callable (``module:function``) and the op it claims to compute (:data:`~seqdyn.conform.ops.OPS`);
its calling convention is recognized from its parameters (:data:`~seqdyn.conform.ops.ADAPTERS`: transformers'
fallbacks, flash-linear-attention). :func:`conform` sweeps :func:`~seqdyn.conform.cases.sweep`'s cases, compares
outputs, final states and every gradient with :func:`~seqdyn.conform.harness.check_case`, and shrinks the first
failing case to the smallest that still fails.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from seqdyn.conform.cases import Case, sweep
from seqdyn.conform.harness import Checked, check_case, minimized
from seqdyn.conform.ops import adapter_for, check_op

__all__ = ["Case", "Checked", "conform", "load_callable", "sweep"]


def load_callable(target: str) -> Callable[..., Any]:
    """The callable ``module.path:attribute`` (or ``module.path.attribute``) names; the attribute may be dotted
    (``module:Class.method``: a method whose ``self`` the function never reads, as RecurrentGemma's ``_rnn_scan``)."""
    module, _, attribute = target.partition(":") if ":" in target else target.rpartition(".")
    if not module or not attribute:
        raise ValueError(f"callable: expected module.path:function, got {target!r}")
    try:
        found = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"callable {target!r}: {error}") from None
    if not callable(found):
        raise ValueError(f"callable {target!r}: {type(found).__name__} is not callable")
    return found


def conform(
    fn: Callable[..., Any], op: str, cases: Iterable[Case], adapter: str | None = None, device: str = "cpu"
) -> dict[str, Any]:
    """Every case of ``cases`` that ``fn``'s convention takes (packed rows where ``fn`` takes the op's packing
    input), checked; the report: op, adapter, each case's
    :meth:`Checked.record`, and the first failing case minimized (None where every case passed)."""
    spec, convention = check_op(op), adapter_for(fn, op, adapter)
    taken = list(dict.fromkeys(spec.case(case) for case in cases if convention.takes(case, fn)))
    checked = [check_case(spec, convention, fn, case, device) for case in taken]
    failing = [each for each in checked if not each.passed]
    smallest = None
    if failing:
        first = min(failing, key=lambda each: each.case.size)
        smallest = minimized(lambda case: check_case(spec, convention, fn, case, device), first).record()
    return {
        "op": spec.name,
        "description": spec.description,
        "adapter": convention.name,
        "device": device,
        "cases": [each.record() for each in checked],
        "passed": sum(each.passed for each in checked),
        "failed": len(failing),
        "minimized": smallest,
    }
