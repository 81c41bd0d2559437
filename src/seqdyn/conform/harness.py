"""Run an implementation over a sweep of cases against seqdyn's float64 reference: outputs, final states and every
gradient, each within a tolerance scaled to the dtype and to the problem's own condition.

The tolerance of a quantity y (an output, a state, a gradient), relative to max |y_ref| (to the case's largest
magnitude where y_ref is zero to round-off)::

    tol = C · u · (κ + √T),   κ = max |y_ref(x ⊙ (1 + u ξ)) − y_ref(x)| / (u · max |y_ref|)

u the unit round-off of the case's dtype, ξ uniform in [−1, 1] per input element, T the sequence length, C =
:data:`SAFETY`: κ measures how much rounding the inputs to the dtype alone moves the exact answer (the problem's
condition, measured on the case itself), √T the growth of an accumulation over T steps. A backward-stable
implementation in that dtype stays within a small multiple of both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor

from seqdyn.conform.cases import DTYPES, Case
from seqdyn.conform.ops import Adapter, Op

#: C in the tolerance: the multiple of the dtype's expected error an implementation may reach
SAFETY = 32.0
#: a minimized case is searched at most this many shrinking steps
MAX_SHRINKS = 40


@dataclass(frozen=True)
class Checked:
    """One case's result: passed, the worst error / tolerance ratio and of which quantity, or the error the
    implementation raised."""

    case: Case
    passed: bool
    worst: float = math.nan
    quantity: str = ""
    error: str = ""
    ratios: dict[str, float] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {
            "case": self.case.label(),
            "passed": self.passed,
            "worst_ratio": None if math.isnan(self.worst) else self.worst,
            "quantity": self.quantity,
            "error": self.error,
            "ratios": self.ratios,
        }


def _quantities(
    differentiable: tuple[str, ...],
    compute: Callable[[dict[str, Tensor]], dict[str, Tensor]],
    inputs: dict[str, Tensor],
) -> dict[str, Tensor]:
    """The outputs, final state and gradients of a fixed random projection of both, in float64 for comparing."""
    leaves = {name: tensor.detach().requires_grad_(name in differentiable) for name, tensor in inputs.items()}
    result = compute(leaves)
    generator = torch.Generator().manual_seed(1)
    loss = sum(
        (value.double() * torch.randn(value.shape, generator=generator, dtype=torch.float64).to(value.device)).sum()
        for _, value in sorted(result.items())
    )
    wanted = [name for name in sorted(leaves) if leaves[name].requires_grad]
    grads = torch.autograd.grad(loss, [leaves[name] for name in wanted], allow_unused=True)
    quantities = {name: value.detach().double().cpu() for name, value in result.items()}
    for name, grad in zip(wanted, grads):
        quantities[f"d{name}"] = (
            torch.zeros(leaves[name].shape, dtype=torch.float64) if grad is None else grad.double().cpu()
        )
    return quantities


def check_case(
    op: Op, adapter: Adapter, fn: Callable[..., Any], case: Case, device: str = "cpu", seed: int = 0
) -> Checked:
    """``fn`` on ``case`` (its inputs drawn with ``seed``, rounded to the case's dtype, on ``device``) against the
    float64 reference of the same rounded inputs, within the tolerance of the module's docstring."""
    if not adapter.takes(case, fn):
        raise ValueError(f"{adapter.name}'s convention cannot state {case.label()}: leave it out")
    dtype = DTYPES[case.dtype]
    exact = op.inputs(case, torch.Generator().manual_seed(seed))
    rounded = {
        name: tensor.to(dtype).double() if tensor.is_floating_point() else tensor for name, tensor in exact.items()
    }
    reference = _quantities(op.differentiable, op.reference, rounded)
    unit = torch.finfo(dtype).eps / 2
    jitter = torch.Generator().manual_seed(seed + 1)
    perturbed = {
        name: tensor * (1 + unit * (2 * torch.rand(tensor.shape, generator=jitter, dtype=torch.float64) - 1))
        if tensor.is_floating_point()
        else tensor
        for name, tensor in rounded.items()
    }
    moved = _quantities(op.differentiable, op.reference, perturbed)
    on_device = {
        name: t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype) for name, t in rounded.items()
    }
    try:
        got = _quantities(op.differentiable, partial(adapter.call, fn), on_device)
    except Exception as error:  # the tested callable's own failure is a failing case, never the harness's
        return Checked(case, False, math.inf, "", f"{type(error).__name__}: {error}".splitlines()[0][:300])
    largest = max(value.abs().max().item() for value in reference.values())
    ratios = {
        name: _ratio(got.get(name), reference[name], moved[name], unit, case.length, largest) for name in reference
    }
    quantity = max(ratios, key=lambda name: ratios[name])
    return Checked(case, ratios[quantity] <= 1.0, ratios[quantity], quantity, ratios=ratios)


def _ratio(got: Tensor | None, reference: Tensor, moved: Tensor, unit: float, length: int, largest: float) -> float:
    """The error of ``got`` over its tolerance (∞ where it is missing, of another shape or not finite); a quantity
    that is zero to the dtype's round-off of the ``largest`` of the case (the gradient of a decay acting on a zero
    state) is measured against that largest magnitude instead of its own."""
    if got is None or got.shape != reference.shape or not torch.isfinite(got).all():
        return math.inf
    own = reference.abs().max().item()
    scale = own if own > unit * largest else (largest or 1e-300)
    condition = (moved - reference).abs().max().item() / (unit * scale)
    tolerance = SAFETY * unit * (condition + math.sqrt(length))
    return (got - reference).abs().max().item() / scale / tolerance


def minimized(check: Callable[[Case], Checked], failing: Checked) -> Checked:
    """The smallest failing case reached from ``failing`` by one-axis shrinking steps (:meth:`Case.smaller`, smallest
    first), each checked by ``check``, with its result."""
    for _ in range(MAX_SHRINKS):
        smaller = (check(each) for each in sorted(failing.case.smaller(), key=lambda c: c.size))
        found = next((each for each in smaller if not each.passed), None)
        if found is None:
            return failing
        failing = found
    return failing
