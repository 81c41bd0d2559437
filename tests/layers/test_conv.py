"""The short causal convolution: its native kernel and its torch definition (hand-written backward), both against
``F.conv1d``, and its streaming state."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqdyn.core.backends import native
from seqdyn.layers import ShortConv
from seqdyn.layers import conv as conv_module
from tests.layers.helpers import native_paths

needs_kernel, PATHS = native_paths("conv_kernel")


def _reference(conv: ShortConv, x, state):
    padded = torch.cat([state, x], dim=1).transpose(1, 2)
    out = F.conv1d(padded, conv.weight.unsqueeze(1).to(x.dtype), None if conv.bias is None else conv.bias.to(x.dtype),
                   groups=x.shape[-1]).transpose(1, 2)
    return F.silu(out) if conv.activation else out


@pytest.mark.parametrize("path", PATHS, indirect=True)
@pytest.mark.parametrize("width,bias,activation,length,with_state", [
    (4, True, True, 11, True), (1, False, False, 11, True), (3, True, False, 11, True), (4, True, True, 600, True),
    (4, True, True, 2, True), (4, True, True, 130, False), (2, False, True, 1, False), (4, True, False, 64, True)])
def test_short_conv_equals_a_causal_depthwise_conv1d_with_gradients(path, width, bias, activation, length,
                                                                    with_state):
    """Outputs, the returned state and every gradient (the new state's included), with and without a state, for
    lengths shorter than the window, within one block of the kernel and over several (and several slices of
    the torch weight gradient's sum)."""
    gen = torch.Generator().manual_seed(width + length)
    conv = ShortConv(5, width, activation=activation, bias=bias).double()
    with torch.no_grad():
        if bias:
            conv.bias.normal_(generator=gen)
    x = torch.randn(2, length, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    state = torch.randn(2, width - 1, 5, generator=gen, dtype=torch.float64, requires_grad=with_state)
    y, new_state = conv(x, state if with_state else None)
    assert (type(y.grad_fn).__name__ == "_NativeConvolutionBackward") == (path == "native")
    start = state if with_state else torch.zeros_like(state)
    reference = _reference(conv, x, start)
    torch.testing.assert_close(y, reference, rtol=0, atol=1e-12)
    torch.testing.assert_close(new_state, torch.cat([start, x], dim=1)[:, length:], rtol=0, atol=0)
    parameters = [x, *([state] if with_state else []), *conv.parameters()]
    upstream = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    state_weights = torch.randn(new_state.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad((y * upstream).sum() + (new_state * state_weights).sum(), parameters)
    exact = torch.autograd.grad((reference * upstream).sum() + (torch.cat([start, x], dim=1)[:, length:]
                                                                 * state_weights).sum(), parameters)
    for got_grad, exact_grad in zip(got, exact):
        torch.testing.assert_close(got_grad, exact_grad, rtol=0, atol=1e-12)


@needs_kernel
@pytest.mark.parametrize("activation", [True, False])
def test_native_short_conv_passes_gradcheck_with_a_state(activation):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 9, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    state = torch.randn(2, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: conv_module._NativeConvolution.apply(*a, activation),
                                    (x, state, weight, bias))


@needs_kernel
def test_native_short_conv_in_float32_and_split_over_threads(monkeypatch):
    """float32 within float32's precision of the float64 reference, with the (batch, block) items cut into more
    ranges than there are batch elements (each range sums its own weight-gradient part)."""
    monkeypatch.setattr(native.torch, "get_num_threads", lambda: 3)
    gen = torch.Generator().manual_seed(2)
    conv = ShortConv(70, 4)
    x = torch.randn(2, 3 * conv_module.NATIVE_BLOCK + 5, 70, generator=gen, requires_grad=True)
    y, _ = conv(x)
    assert type(y.grad_fn).__name__ == "_NativeConvolutionBackward"
    exact_conv = ShortConv(70, 4).double()
    exact_conv.load_state_dict(conv.state_dict())
    x64 = x.detach().double().requires_grad_()
    exact = _reference(exact_conv, x64, torch.zeros(2, 3, 70, dtype=torch.float64))
    torch.testing.assert_close(y.double(), exact, rtol=1e-5, atol=1e-5)
    upstream = torch.randn(y.shape, generator=gen)
    got = torch.autograd.grad(y, [x, *conv.parameters()], upstream)
    want = torch.autograd.grad(exact, [x64, *exact_conv.parameters()], upstream.double())
    for got_grad, exact_grad in zip(got, want):
        torch.testing.assert_close(got_grad.double(), exact_grad, rtol=1e-4, atol=1e-4)


def test_short_conv_runs_its_torch_definition_where_the_kernel_cannot(monkeypatch):
    """bfloat16 (no kernel for it) and ``SEQDYN_COMPILE=0`` take the torch path."""
    conv = ShortConv(4, 3).to(torch.bfloat16)
    y, _ = conv(torch.randn(1, 5, 4, dtype=torch.bfloat16, requires_grad=True))
    assert type(y.grad_fn).__name__ != "_NativeConvolutionBackward"
    monkeypatch.setenv("SEQDYN_COMPILE", "0")
    y, _ = ShortConv(4, 3)(torch.randn(1, 5, 4, requires_grad=True))
    assert type(y.grad_fn).__name__ != "_NativeConvolutionBackward"


def test_short_conv_backward_passes_gradcheck_on_a_strided_input():
    from seqdyn.layers.conv import _DepthwiseCorrelation

    gen = torch.Generator().manual_seed(0)
    wide = torch.randn(2, 9, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: _DepthwiseCorrelation.apply(x[..., 2:5], w, b),
                                    (wide, weight, bias))


@pytest.mark.parametrize("path", PATHS, indirect=True)
def test_short_conv_in_pieces_equals_the_whole_sequence(path):
    torch.manual_seed(0)
    conv = ShortConv(6, 4).double()
    x = torch.randn(3, 20, 6, dtype=torch.float64)
    whole, _ = conv(x)
    first, state = conv(x[:, :7])
    second, _ = conv(x[:, 7:], state)
    torch.testing.assert_close(torch.cat([first, second], dim=1), whole, rtol=0, atol=1e-13)
