"""The short causal convolution: its hand-written backward and its streaming state."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqdyn.nn import ShortConv


@pytest.mark.parametrize("width,bias,activation,length", [(4, True, True, 11), (1, False, False, 11),
                                                          (3, True, False, 11), (4, True, True, 600)])
def test_short_conv_equals_a_causal_depthwise_conv1d_with_gradients(width, bias, activation, length):
    """Outputs and every gradient, over one and several slices of the weight gradient's sum."""
    gen = torch.Generator().manual_seed(width)
    conv = ShortConv(5, width, activation=activation, bias=bias).double()
    with torch.no_grad():
        if bias:
            conv.bias.normal_(generator=gen)
    x = torch.randn(2, length, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    state = torch.randn(2, width - 1, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    y, _ = conv(x, state)
    padded = torch.cat([state, x], dim=1).transpose(1, 2)
    reference = F.conv1d(padded, conv.weight.unsqueeze(1), conv.bias, groups=5).transpose(1, 2)
    reference = F.silu(reference) if activation else reference
    torch.testing.assert_close(y, reference, rtol=0, atol=1e-12)
    parameters = [x, state, *conv.parameters()]
    upstream = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    for got, exact in zip(torch.autograd.grad(y, parameters, upstream), torch.autograd.grad(reference, parameters,
                                                                                              upstream)):
        torch.testing.assert_close(got, exact, rtol=0, atol=1e-12)


def test_short_conv_backward_passes_gradcheck_on_a_strided_input():
    from seqdyn.nn.conv import _DepthwiseCorrelation

    gen = torch.Generator().manual_seed(0)
    wide = torch.randn(2, 9, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: _DepthwiseCorrelation.apply(x[..., 2:5], w, b),
                                    (wide, weight, bias))


def test_short_conv_in_pieces_equals_the_whole_sequence():
    torch.manual_seed(0)
    conv = ShortConv(6, 4).double()
    x = torch.randn(3, 20, 6, dtype=torch.float64)
    whole, _ = conv(x)
    first, state = conv(x[:, :7])
    second, _ = conv(x[:, 7:], state)
    torch.testing.assert_close(torch.cat([first, second], dim=1), whole, rtol=0, atol=1e-13)
