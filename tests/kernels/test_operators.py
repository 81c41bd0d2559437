"""The native kernel as ``torch.library`` operators (``seqdyn::scan`` and ``seqdyn::scan_backward``): their fake
(meta) implementations give the shapes, strides and dtypes the kernel gives, ``torch.library.opcheck`` accepts
their registrations, ``torch.compile`` runs through them, each passes gradcheck in float64 and runs in float32
under autocast (as the hand-written autograd functions do, see tests/mixers/test_autocast.py)."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from seqdyn.kernels import build
from seqdyn.kernels import scan as scan_kernel


def _needs(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(isinstance(build.load(name), str), reason=f"no C++ compiler to build {name}")


@pytest.fixture(autouse=True)
def _kernels_required(monkeypatch):
    monkeypatch.delenv("SEQDYN_COMPILE", raising=False)
    monkeypatch.setenv("SEQDYN_KERNELS", "require")


def _scan_inputs(decay: str, shared: bool, seed: int = 0, length: int = 9):
    """``q, k, v, g, rate, initial`` head-major as the scan backend gives them (q, k expanded when shared)."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    batch, heads, key_dim, value_dim = 2, 3, 4, 2
    q, k = (rand(batch, 1 if shared else heads, length, key_dim).requires_grad_() for _ in range(2))
    v = rand(batch, heads, length, value_dim).requires_grad_()
    g = rate = None
    if decay == "diagonal":
        g = (-rand(batch, heads, length, key_dim).abs()).requires_grad_()
    elif decay == "factored":
        g, rate = rand(batch, heads, length).abs().requires_grad_(), (-rand(heads, key_dim).abs()).requires_grad_()
    initial = rand(batch, heads, key_dim, value_dim).requires_grad_()
    return q, k, v, g, rate, initial


def _scan(q, k, v, g, rate, initial):
    shared = q.shape[1] == 1
    heads = v.shape[1]
    if shared:
        q, k = (x.expand(-1, heads, -1, -1) for x in (q, k))
    return scan_kernel.scan(q, k, v, g, rate, initial, shared, shared)


@_needs("scan_kernel")
@pytest.mark.parametrize("decay", ["none", "diagonal", "factored"])
@pytest.mark.parametrize("shared", [False, True])
def test_scan_passes_gradcheck_in_float64(decay, shared):
    inputs = [x for x in _scan_inputs(decay, shared)]
    present = [i for i, x in enumerate(inputs) if x is not None]

    def run(*leaves):
        full = list(inputs)
        for i, leaf in zip(present, leaves):
            full[i] = leaf
        return _scan(*full)

    assert torch.autograd.gradcheck(run, [inputs[i] for i in present])


def _assert_like(fake: torch.Tensor, real: torch.Tensor, what: str) -> None:
    assert (fake.shape, fake.stride(), fake.dtype) == (real.shape, real.stride(), real.dtype), what


@_needs("scan_kernel")
@pytest.mark.parametrize("decay", ["none", "diagonal", "factored"])
@pytest.mark.parametrize("shared", [False, True])
def test_the_scan_operators_fake_implementations_match_the_kernel(decay, shared):
    """Forward and backward operators under ``FakeTensorMode`` give the shapes, strides and dtypes of the kernel's
    outputs (one per output)."""
    inputs = [None if x is None else x.detach() for x in _scan_inputs(decay, shared)]
    q, k, v, g, rate, initial = inputs
    heads = v.shape[1]
    if shared:
        q, k = (x.expand(-1, heads, -1, -1) for x in (q, k))
    args = (q, k, v, g, rate, initial, shared, shared, True)
    real = scan_kernel.scan_op(*args)
    grads = (torch.randn_like(real[0]), torch.randn_like(real[1]))
    real_backward = scan_kernel.scan_backward_op(q, k, v, g, rate, real[2], *grads, shared, shared)
    with FakeTensorMode() as mode:
        fakes = [None if x is None else mode.from_tensor(x) for x in (q, k, v, g, rate, initial, real[2], *grads)]
        fake = scan_kernel.scan_op(*fakes[:6], shared, shared, True)
        fake_backward = scan_kernel.scan_backward_op(*fakes[:5], *fakes[6:], shared, shared)
    for name, got, want in zip(
        ("y", "final", "saved", "∂q", "∂k", "∂v", "∂g", "∂rate", "∂S0"),
        (*fake, *fake_backward),
        (*real, *real_backward),
    ):
        _assert_like(got, want, name)


@_needs("scan_kernel")
def test_opcheck_accepts_the_registrations():
    """Schema, fake implementation, autograd registration and dispatch (``torch.library.opcheck``)."""
    for decay in ("none", "factored"):
        q, k, v, g, rate, initial = _scan_inputs(decay, False)
        cut = scan_kernel.plan(*q.shape[:2], q.shape[-1], v.shape[-1], q.element_size())
        torch.library.opcheck(
            torch.ops.seqdyn.scan.default, (q, k, v, g, rate, initial, False, False, True, cut.group, cut.interval)
        )


@_needs("scan_kernel")
def test_torch_compile_runs_through_the_operators():
    """One graph through the operators, forward and backward, equal to the eager result."""
    q, k, v, g, rate, initial = _scan_inputs("factored", False, length=5)
    weight = torch.randn(2, dtype=torch.float64, requires_grad=True)

    def step(q, k, v, g, rate, initial, weight):
        y, final = scan_kernel.scan(q, k, v, g, rate, initial, False, False)
        return (y.sin() * weight).sum() + final.square().sum()

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    leaves = (q, k, v, g, rate, initial, weight)
    got = torch.autograd.grad(compiled(*leaves), leaves)
    want = torch.autograd.grad(step(*leaves), leaves)
    for got_grad, want_grad in zip(got, want):
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-12, atol=1e-12)


@_needs("scan_kernel")
def test_the_operators_run_in_float32_under_autocast():
    """bfloat16 inputs (which the kernels lack) are cast to float32, as autocast casts them for its float32 ops."""
    q, k, v, g, rate, initial = (x.detach().bfloat16() for x in _scan_inputs("factored", False))
    with torch.autocast("cpu", torch.bfloat16):
        outputs = scan_kernel.scan_op(q, k, v, g, rate, initial, False, False, False)
    assert [out.dtype for out in outputs] == [torch.float32] * 3


@_needs("scan_kernel")
@pytest.mark.parametrize("wrong", ["dtype", "g_dims", "initial", "k_length", "v_stride"])
def test_the_operator_refuses_mismatched_tensors(wrong):
    """The operator checks the tensors it is given (an error that names them, not memory read out of bounds)."""
    q, k, v, g, rate, initial = (None if x is None else x.detach() for x in _scan_inputs("diagonal", False))
    if wrong == "dtype":
        v = v.float()
    elif wrong == "g_dims":
        g = g[..., None]
    elif wrong == "initial":
        initial = initial[:1]
    elif wrong == "k_length":
        k = k[:, :, :-1]
    else:
        v = v.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, last axis strided
    with pytest.raises(
        RuntimeError,
        match={
            "dtype": "share one dtype",
            "g_dims": "g must be",
            "initial": "initial must be",
            "k_length": "k must be",
            "v_stride": "v needs a unit stride",
        }[wrong],
    ):
        torch.ops.seqdyn.scan(q, k, v, g, rate, initial, False, False, False, 1, 4)


@_needs("scan_kernel")
@pytest.mark.parametrize("wrong", ["saved", "grad_final", "grad_y"])
def test_the_backward_operator_refuses_mismatched_tensors(wrong):
    """The adjoint reads the saved states and the output gradients in its own layouts; others are refused."""
    q, k, v, g, rate, initial = (None if x is None else x.detach() for x in _scan_inputs("diagonal", False))
    y, final, saved = torch.ops.seqdyn.scan(q, k, v, g, rate, initial, False, False, True, 1, 4)
    grad_y, grad_final = torch.ones_like(y), torch.ones_like(final)
    if wrong == "saved":
        saved = saved[:, :, :-1]
    elif wrong == "grad_final":
        grad_final = grad_final.transpose(-1, -2)
    else:
        grad_y = grad_y[:, :, 1:]
    with pytest.raises(RuntimeError, match=f"{wrong} must be"):
        torch.ops.seqdyn.scan_backward(q, k, v, g, rate, saved, grad_y, grad_final, False, False, 1, 4)
