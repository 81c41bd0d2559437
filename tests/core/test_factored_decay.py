"""The factored diagonal decay ``g_t = Δ_t ⊗ A`` (``decay_rate``, Mamba-1's discretization).

``decay_rate`` must equal passing the formed ``g`` on every backend — outputs, final states and the gradients of
the steps and the rates — including where the scan never forms ``g`` (its native kernel, tested further in
test_native_scan.py, and its torch blocks).
"""

from __future__ import annotations

import pytest
import torch

import seqdyn
from seqdyn.core.backends import scan
from seqdyn.kernels import scan as scan_kernel
from tests.core.cases import assert_close

TOL = 1e-10
BACKENDS = ("quadratic", "recurrent", "chunk", "scan", "auto")


def _inputs(
    seed: int,
    length: int,
    heads: int = 3,
    key_dim: int = 4,
    value_dim: int = 2,
    shared: bool = False,
    rate_heads: int | None = None,
    unstable: bool = False,
):
    """Leaves of an S6-like problem: steps Δ ≥ 0, rates A < 0 (``unstable``: some A > 0), a scale per head."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    key_heads = 1 if shared else heads
    rate = -torch.rand(rate_heads or heads, key_dim, generator=gen, dtype=torch.float64) * 2
    if unstable:
        rate[0, 0] = 0.3
    leaves = {
        "q": rand(2, length, key_heads, key_dim),
        "k": rand(2, length, key_heads, key_dim),
        "v": rand(2, length, heads, value_dim),
        "step": torch.rand(2, length, heads, generator=gen, dtype=torch.float64) * 0.5,
        "rate": rate,
        "scale": torch.rand(2, length, heads, generator=gen, dtype=torch.float64) + 0.5,
        "state": rand(2, heads, key_dim, value_dim),
    }
    return {name: x.requires_grad_() for name, x in leaves.items()}


def _run(leaves: dict, backend: str, factored: bool):
    """Outputs, final state and the gradients of a fixed functional of both, for ``decay_rate`` or the formed g."""
    if factored:
        decay = dict(log_decay=leaves["step"], decay_rate=leaves["rate"])
    else:
        decay = dict(log_decay=leaves["step"].unsqueeze(-1) * leaves["rate"])
    y, final = seqdyn.coefficient_dynamics(
        leaves["q"],
        leaves["k"],
        leaves["v"],
        scale=leaves["scale"],
        initial_state=leaves["state"],
        output_final_state=True,
        backend=backend,
        **decay,
    )
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
    loss = (y * weights).sum() + final.square().sum()
    return (y, final, *torch.autograd.grad(loss, list(leaves.values())))


def _assert_same(got, want, what: str, tol: float = TOL):
    names = ["y", "final state"] + [f"d/d{n}" for n in ("q", "k", "v", "step", "rate", "scale", "state")]
    for name, a, b in zip(names, got, want):
        assert_close(a, b, tol, f"{what}: {name}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ["per-head", "shared-keys", "one-rate"])
def test_factored_decay_equals_the_formed_decay_on_every_backend(backend, shape):
    length = 2 * scan.BLOCK + 3  # several scan blocks and a partial one
    leaves = _inputs(7, length, shared=shape == "shared-keys", rate_heads=1 if shape == "one-rate" else None)
    reference = _run(leaves, "quadratic", factored=False)
    _assert_same(_run(leaves, backend, factored=True), reference, backend)


@pytest.mark.parametrize("backend", ["recurrent", "chunk", "scan"])
def test_unstable_rates_are_stabilized_like_the_formed_decay(backend):
    """A > 0 somewhere makes Λ unstable: the operator forms g and rescales, as for a given g (Principle 6)."""
    leaves = _inputs(3, 21, unstable=True)
    _assert_same(_run(leaves, backend, factored=True), _run(leaves, "quadratic", factored=False), backend)


def test_step_coefficients_and_dsf_take_a_decay_rate():
    leaves = {n: x.detach() for n, x in _inputs(5, 6).items()}
    q, k, v, step, rate = (leaves[n] for n in ("q", "k", "v", "step", "rate"))
    formed = step.unsqueeze(-1) * rate
    y = seqdyn.coefficient_dynamics(q, k, v, log_decay=formed)
    state, outputs = None, []
    for t in range(q.shape[1]):
        y_t, state = seqdyn.coefficient_dynamics_step(
            q[:, t], k[:, t], v[:, t], state, log_decay=step[:, t], decay_rate=rate
        )
        outputs.append(y_t)
    assert_close(torch.stack(outputs, dim=1), y, TOL, "step by step")
    coefficients = seqdyn.coefficients(q, k, log_decay=step, decay_rate=rate)
    assert_close(coefficients, seqdyn.coefficients(q, k, log_decay=formed), TOL, "coefficients")
    from seqdyn.core.dsf import dsf

    assert_close(dsf(q, k, v, log_decay=step, decay_rate=rate).apply(v), y, TOL, "DSF")


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(decay_rate=[[1.0]]), "decay_rate: expected a tensor"),
        (dict(decay_rate=torch.zeros(3, 4, 1)), "decay_rate: expected 2 dimensions"),
        (dict(decay_rate=torch.zeros(3, 5)), "does not match the key dimension K=4"),
        (dict(decay_rate=torch.zeros(2, 4)), "decay_rate: 2 heads"),
        (dict(decay_rate=torch.zeros(3, 4), log_decay=None), "needs log_decay as the steps"),
        (dict(decay_rate=torch.zeros(3, 4), log_decay=torch.zeros(2, 6, 3, 4)), "needs log_decay as the steps"),
        (dict(decay_rate=torch.zeros(3, 4, dtype=torch.int64)), "decay_rate: expected a floating-point tensor"),
    ],
)
def test_bad_decay_rates_are_named(change, message):
    q = k = torch.randn(2, 6, 3, 4)
    options = dict(log_decay=torch.rand(2, 6, 3)) | change
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        seqdyn.coefficient_dynamics(q, k, torch.randn(2, 6, 3, 2), **options)


# ---------------------------------------------------------------------------------------- the torch-block scan
def test_seqdyn_compile_0_scans_with_torch_blocks(monkeypatch):
    """Without the native kernel the scan's torch blocks form the factored decay block by block."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the native kernel ran although SEQDYN_COMPILE=0")

    monkeypatch.setenv("SEQDYN_COMPILE", "0")
    monkeypatch.setattr(scan_kernel, "scan", forbidden)
    leaves = _inputs(4, 2 * scan.BLOCK + 3, shared=True)
    _assert_same(_run(leaves, "scan", factored=True), _run(leaves, "quadratic", factored=False), "torch blocks")
