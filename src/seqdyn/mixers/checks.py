"""The checks every mixer passes, built-in or your own (``tests/mixers/test_mixer_suite.py`` runs each on every
built-in mixer; :func:`check` runs them all on one), in float64 to ``tol`` relative to max(1, the largest entry):

    backends      every backend the mixer accepts gives the output and the gradients (of the input and of every
                  parameter) of its ``reference_backend``
    step          ``init_state`` and ``step`` token by token give ``forward``
    coefficients  the coefficients ``A`` ``[B, H, T, T]`` are causal and ``A @ v`` per head is the mixing core
    dsf           the DSF kernel Φ applied to the values is the mixing core (Sieber et al. 2024, eq. 12)

    report = seqdyn.mixers.check(MyMixer, d_model=16, heads=2)   # AssertionError naming each failing check
    print(report.text())
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from seqdyn.mixers.base import Mixer


class NotApplicable(Exception):
    """A check that does not apply to a mixer (no coefficients, not causal); the message says why."""


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check` found: for each check that ran, what it compared and the largest error; for each it
    skipped, why."""

    mixer: str
    passed: dict[str, str]
    skipped: dict[str, str]

    def text(self) -> str:
        lines = [f"{self.mixer}: {len(self.passed)} checks passed, {len(self.skipped)} not applicable"]
        lines += [f"  {name}: passed ({what})" for name, what in self.passed.items()]
        lines += [f"  {name}: not applicable ({why})" for name, why in self.skipped.items()]
        return "\n".join(lines) + "\n"


def inputs(
    d_model: int, length: int = 11, batch: int = 2, seed: int = 1, dtype=torch.float64, device: Any = None
) -> Tensor:
    """The inputs of the checks: ``[batch, length, d_model]`` standard normal, fixed by ``seed``."""
    x = torch.randn(batch, length, d_model, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return x.to(device)


def assert_close(actual: Tensor, expected: Tensor, what: str, tol: float = 1e-10) -> float:
    """The largest entry of ``|actual − expected|`` relative to max(1, the largest ``|expected|``); an
    ``AssertionError`` naming ``what`` when it exceeds ``tol``."""
    scale = max(1.0, float(expected.detach().abs().max()))
    error = float((actual - expected).detach().abs().max()) / scale
    assert error <= tol, f"{what}: {error:.2e} (tolerance {tol:.0e})"
    return error


def backends_agree(mixer: Mixer, x: Tensor, tol: float = 1e-10) -> str:
    """Every backend of ``mixer`` gives the output and gradients of its ``reference_backend`` on ``x``."""
    backends = [b for b in mixer.backends if b != "auto"]
    assert mixer.reference_backend in backends, (
        f"{mixer.name}: reference_backend {mixer.reference_backend!r} is not among its backends {backends}"
    )
    results = {}
    for backend in backends:
        x_grad = x.detach().clone().requires_grad_(True)
        y = mixer(x_grad, backend=backend)
        weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(2), dtype=y.dtype).to(y.device)
        params = [p for p in mixer.parameters() if p.requires_grad]
        results[backend] = y, torch.autograd.grad((y * weights).sum(), [x_grad, *params], allow_unused=True)
    y_ref, grads_ref = results[mixer.reference_backend]
    worst = 0.0
    for backend, (y, grads) in results.items():
        worst = max(worst, assert_close(y, y_ref, f"{mixer.name}/{backend} output", tol))
        for i, (g, g_ref) in enumerate(zip(grads, grads_ref)):
            if g_ref is None:
                assert g is None or torch.all(g == 0), f"{mixer.name}/{backend} gradient {i}: not zero"
            else:
                worst = max(worst, assert_close(g, g_ref, f"{mixer.name}/{backend} gradient {i}", tol))
    return f"{', '.join(backends)} against {mixer.reference_backend}, outputs and gradients, error {worst:.1e}"


def step_equals_forward(mixer: Mixer, x: Tensor, tol: float = 1e-10) -> str:
    """``step`` token by token from ``init_state`` gives ``forward`` with the reference backend."""
    if getattr(mixer, "bidirectional", False):
        raise NotApplicable("a bidirectional mixer is not causal")
    expected = mixer(x, backend=mixer.reference_backend)
    state = mixer.init_state(x.shape[0])
    outputs = []
    for t in range(x.shape[1]):
        y, state = mixer.step(x[:, t], state)
        outputs.append(y)
    error = assert_close(torch.stack(outputs, dim=1), expected, f"{mixer.name} step", tol)
    return f"{x.shape[1]} steps against forward, error {error:.1e}"


def coefficients_reproduce_core(mixer: Mixer, x: Tensor, tol: float = 1e-10) -> str:
    """The coefficients are causal and ``A @ v`` per head is the mixing core (``mixer.core(x)``)."""
    if not mixer.scalar_coefficients:
        raise NotApplicable("no scalar coefficients per head (a MIMO system)")
    core, values = _core(mixer, x)
    A = mixer.coefficients(x)
    length, per_token = x.shape[1], values.shape[1] // x.shape[1]  # n values per token: a column each
    assert A.shape == (x.shape[0], core.shape[2], length, length * per_token), (
        f"{mixer.name} coefficients: shape {list(A.shape)}, expected [B, H, T, T·n] = "
        f"{[x.shape[0], core.shape[2], length, length * per_token]}"
    )
    future = torch.ones(length, length, dtype=torch.bool, device=A.device).triu(1).repeat_interleave(per_token, dim=1)
    assert torch.all(A[..., future] == 0), f"{mixer.name} coefficients: not causal (entries above the diagonal)"
    error = assert_close(torch.einsum("bhij,bjhv->bihv", A, values), core, f"{mixer.name} A·v", tol)
    return f"A @ v against the core, error {error:.1e}"


def dsf_reproduces_core(mixer: Mixer, x: Tensor, tol: float = 1e-10) -> str:
    """The DSF kernel Φ of ``mixer.dsf(x)`` applied to the values is the mixing core."""
    core, values = _core(mixer, x)
    inputs = values.unflatten(1, (x.shape[1], -1)).movedim(2, 3).flatten(3)  # [B, T, H, n·V]: a token's n values
    error = assert_close(mixer.dsf(x).apply(inputs), core, f"{mixer.name} Φ u", tol)
    return f"Φ u against the core, error {error:.1e}"


def _core(mixer: Mixer, x: Tensor) -> tuple[Tensor, Tensor]:
    if not callable(getattr(mixer, "core", None)):
        raise NotApplicable("no core(x) to compare with (CoefficientMixer and LTIMixer have one)")
    return mixer.core(x)


#: each check with the length of its inputs (the DSF kernel is T × T × N × N: short inputs)
CHECKS: dict[str, tuple[Callable[[Mixer, Tensor, float], str], int]] = {
    "backends": (backends_agree, 11),
    "step": (step_equals_forward, 11),
    "coefficients": (coefficients_reproduce_core, 11),
    "dsf": (dsf_reproduces_core, 6),
}


def check(
    mixer: Mixer | type[Mixer] | str, d_model: int = 16, *, tol: float = 1e-10, seed: int = 0, **options: Any
) -> CheckReport:
    """Run every check of this module on ``mixer`` — a :class:`Mixer` (a float64 copy is checked), a class (built
    as ``cls(d_model, **options)`` with ``torch.manual_seed(seed)``) or a name or import path — and return what
    each compared; raise ``AssertionError`` naming every check that failed, with its error."""
    mixer = _float64_mixer(mixer, d_model, seed, options)
    passed, skipped, failed = {}, {}, {}
    for name, (run, length) in CHECKS.items():
        x = inputs(mixer.d_model, length, device=next(mixer.parameters(), torch.empty(0)).device)
        try:
            passed[name] = run(mixer, x, tol)
        except NotApplicable as reason:
            skipped[name] = str(reason)
        except AssertionError as error:
            failed[name] = str(error)
    if failed:
        raise AssertionError(
            f"{mixer.name}: {len(failed)} of {len(CHECKS)} checks failed: "
            + "; ".join(f"{name} — {why}" for name, why in failed.items())
        )
    return CheckReport(mixer.name, passed, skipped)


def _float64_mixer(mixer: Mixer | type[Mixer] | str, d_model: int, seed: int, options: dict[str, Any]) -> Mixer:
    if isinstance(mixer, Mixer):
        if options:
            raise ValueError(f"check: options {sorted(options)} apply to a class or a name, not to a built mixer")
        return copy.deepcopy(mixer).double()
    if isinstance(mixer, str):
        from seqdyn import mixers  # the registry is the package this module belongs to

        mixer = mixers.get(mixer)
    if not (isinstance(mixer, type) and issubclass(mixer, Mixer)):
        raise ValueError(f"check: expected a Mixer, a Mixer class, a name or an import path, got {mixer!r}")
    torch.manual_seed(seed)
    return mixer(d_model, **options).double()
