"""While runs are stacked, every hand-written function computes its plain form — the same values and gradients in
float64, and under ``vmap`` each run's own; branches read a value over every run; the backends that cannot stack
say so, and ``auto`` leaves them out."""

from __future__ import annotations

import pytest
import torch
from torch.func import vmap

from seqdyn.core import stacking
from seqdyn.core.backends.chunk.decayed import decayed_chunks
from seqdyn.core.lti import fft_conv
from seqdyn.core.operator import coefficient_dynamics
from seqdyn.layers.conv import causal_depthwise_conv
from seqdyn.layers.norms import l2_normalize, rms_norm

torch.manual_seed(0)
D = dict(dtype=torch.float64)


def _rms(x, w):
    return rms_norm(x, w, 1e-6)


def _l2(x):
    return l2_normalize(x, 1e-3)


def _conv(x, w, b):
    return causal_depthwise_conv(x, w, b)


def _fft(u, kernel):
    return fft_conv(u, kernel)


def _decayed(q, k, v, g):
    out, state = decayed_chunks(q, k, v, g, None)
    return out + state.sum()


FUNCTIONS = {  # each hand-written function and inputs for it, shared-weight inputs last
    "rms_norm": (_rms, [(3, 5, 8), (8,)]),
    "l2_normalize": (_l2, [(3, 5, 8)]),
    "short_conv": (_conv, [(2, 9, 6), (6, 4), (6,)]),
    "fft_conv": (_fft, [(2, 3, 16), (3, 16)]),
    "decayed_chunks": (_decayed, [(2, 2, 3, 4, 5), (2, 2, 3, 4, 5), (2, 2, 3, 4, 6), (2, 2, 3, 4)]),
}


def _inputs(shapes):
    tensors = [torch.randn(*shape, **D) for shape in shapes]
    if len(shapes) == 4:  # the decayed chunks' log decays are ≤ 0
        tensors[3] = -torch.rand(*shapes[3], **D)
    if len(shapes) == 1:  # one row below the L2 clamp
        tensors[0][0, 0] *= 1e-5
    return [t.requires_grad_() for t in tensors]


def _value_and_gradients(function, inputs):
    out = function(*inputs)
    grads = torch.autograd.grad((out * torch.linspace(-1, 1, out.numel(), **D).view_as(out)).sum(), inputs)
    return out, grads


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_the_plain_form_has_the_values_and_gradients_of_the_hand_written_one(name):
    function, shapes = FUNCTIONS[name]
    inputs = _inputs(shapes)
    out, grads = _value_and_gradients(function, inputs)
    with stacking.stacked_runs():
        plain_out, plain_grads = _value_and_gradients(function, inputs)
    torch.testing.assert_close(plain_out, out, rtol=1e-12, atol=1e-12)
    for plain, hand in zip(plain_grads, grads, strict=True):
        torch.testing.assert_close(plain, hand, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_under_vmap_each_run_gets_its_own_values_and_gradients(name):
    function, shapes = FUNCTIONS[name]
    runs = [_inputs(shapes) for _ in range(3)]
    stacked = [torch.stack([run[i].detach() for run in runs]).requires_grad_() for i in range(len(shapes))]
    with stacking.stacked_runs():
        out = vmap(function)(*stacked)
        grads = torch.autograd.grad(out.sum(), stacked)
    for r, run in enumerate(runs):
        alone = function(*run)
        torch.testing.assert_close(out[r], alone, rtol=1e-12, atol=1e-12)
        for grad, own in zip(grads, torch.autograd.grad(alone.sum(), run), strict=True):
            torch.testing.assert_close(grad[r], own, rtol=1e-10, atol=1e-12)


def test_a_branch_reads_the_largest_value_over_every_run():
    x = torch.tensor([[-1.0, -2.0], [-3.0, 0.5]], **D)
    assert float(stacking.amax(x)) == 0.5 and float(stacking.amin(x)) == -3.0
    with stacking.stacked_runs():
        over_runs = vmap(lambda row: stacking.amax(row) * torch.ones(()))(x)
        assert over_runs.tolist() == [0.5, 0.5]  # each run reads the maximum of both
        assert float(stacking.amin(x)) == -3.0


def test_stacked_runs_compute_with_the_backends_that_stack_and_say_why_others_cannot():
    q, k, v = (torch.randn(2, 2, 8, 4, **D) for _ in range(3))
    with stacking.stacked_runs():
        for backend in ("quadratic", "recurrent", "chunk"):  # chunk: the identity readout without Householder
            coefficient_dynamics(q, k, v, backend=backend)
        with pytest.raises(ValueError, match="backend 'scan' computes with a hand-written backward"):
            coefficient_dynamics(q, k, v, backend="scan")
        with pytest.raises(ValueError, match="chunk stacks the identity readout"):
            coefficient_dynamics(q, k, v, readout="exp", normalizer="sum", backend="chunk")
    assert stacking.unstackable("scan") is None  # outside a stack every backend computes
