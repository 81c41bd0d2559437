"""The short causal convolution (its hand-written backward) against ``F.conv1d``, and its streaming state; the token
shift."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqdyn.layers import ShortConv, TokenShift


def _reference(conv: ShortConv, x, state):
    padded = torch.cat([state, x], dim=1).transpose(1, 2)
    out = F.conv1d(
        padded,
        conv.weight.unsqueeze(1).to(x.dtype),
        None if conv.bias is None else conv.bias.to(x.dtype),
        groups=x.shape[-1],
    ).transpose(1, 2)
    return F.silu(out) if conv.activation else out


@pytest.mark.parametrize(
    "width,bias,activation,length,with_state",
    [
        (4, True, True, 11, True),
        (1, False, False, 11, True),
        (3, True, False, 11, True),
        (4, True, True, 600, True),
        (4, True, True, 2, True),
        (4, True, True, 130, False),
        (2, False, True, 1, False),
        (4, True, False, 64, True),
    ],
)
def test_short_conv_equals_a_causal_depthwise_conv1d_with_gradients(width, bias, activation, length, with_state):
    """Outputs, the returned state and every gradient (the new state's included), with and without a state, for
    lengths shorter than the window and longer (several slices of the weight gradient's sum)."""
    gen = torch.Generator().manual_seed(width + length)
    conv = ShortConv(5, width, activation=activation, bias=bias).double()
    with torch.no_grad():
        if bias:
            conv.bias.normal_(generator=gen)
    x = torch.randn(2, length, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    state = torch.randn(2, width - 1, 5, generator=gen, dtype=torch.float64, requires_grad=with_state)
    y, new_state = conv(x, state if with_state else None)
    start = state if with_state else torch.zeros_like(state)
    reference = _reference(conv, x, start)
    torch.testing.assert_close(y, reference, rtol=0, atol=1e-12)
    torch.testing.assert_close(new_state, torch.cat([start, x], dim=1)[:, length:], rtol=0, atol=0)
    parameters = [x, *([state] if with_state else []), *conv.parameters()]
    upstream = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    state_weights = torch.randn(new_state.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad((y * upstream).sum() + (new_state * state_weights).sum(), parameters)
    exact = torch.autograd.grad(
        (reference * upstream).sum() + (torch.cat([start, x], dim=1)[:, length:] * state_weights).sum(), parameters
    )
    for got_grad, exact_grad in zip(got, exact):
        torch.testing.assert_close(got_grad, exact_grad, rtol=0, atol=1e-12)


def test_short_conv_backward_passes_gradcheck_on_a_strided_input():
    from seqdyn.layers.conv import _DepthwiseCorrelation

    gen = torch.Generator().manual_seed(0)
    wide = torch.randn(2, 9, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w, b: _DepthwiseCorrelation.apply(x[..., 2:5], w, b), (wide, weight, bias)
    )


def test_short_conv_in_pieces_equals_the_whole_sequence():
    torch.manual_seed(0)
    conv = ShortConv(6, 4).double()
    x = torch.randn(3, 20, 6, dtype=torch.float64)
    whole, _ = conv(x)
    first, state = conv(x[:, :7])
    second, _ = conv(x[:, 7:], state)
    torch.testing.assert_close(torch.cat([first, second], dim=1), whole, rtol=0, atol=1e-13)


def test_the_token_shift_reads_the_previous_input_across_calls_and_restarts_packed_sequences():
    shift = TokenShift(3)
    x = torch.randn(2, 7, 3, generator=torch.Generator().manual_seed(0))
    whole, last = shift(x)
    torch.testing.assert_close(whole, torch.cat([torch.zeros(2, 1, 3), x[:, :-1]], dim=1), rtol=0, atol=0)
    first, state = shift(x[:, :4])
    second, end = shift(x[:, 4:], state)
    torch.testing.assert_close(torch.cat([first, second], 1), whole, rtol=0, atol=0)
    torch.testing.assert_close(end, last, rtol=0, atol=0)
    positions = torch.tensor([0, 1, 2, 0, 1, 0, 1])  # sequences of 3, 2 and 2 steps
    packed, _ = shift(x[:1], positions=positions)
    assert bool((packed[0, positions == 0] == 0).all())
    torch.testing.assert_close(packed[0, 1:3], x[0, :2], rtol=0, atol=0)
    with pytest.raises(ValueError, match="token shift's last input"):
        shift(x, torch.zeros(2, 2, 3))
