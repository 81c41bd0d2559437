"""Short causal depthwise convolution, with the streaming state a recurrent step needs (Mamba, GLA, DeltaNet)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from seqdyn.core import stacking
from seqdyn.core.precision import float32_under_autocast


class ShortConv(nn.Module):
    """``y_t = Σ_{s<w} W[:, s] ⊙ x_{t-w+1+s}`` per channel (causal, kernel width w), optionally followed by SiLU.

    ``forward(x [B, T, C], state=None)`` returns ``(y, state)`` with ``state`` the last ``w − 1`` inputs
    ``[B, w − 1, C]``, so that feeding a sequence in pieces equals feeding it whole.
    """

    def __init__(self, channels: int, width: int = 4, activation: bool = True, bias: bool = True):
        super().__init__()
        if width < 1:
            raise ValueError(f"conv_size: expected a width ≥ 1, got {width}")
        self.channels, self.width, self.activation = channels, width, activation
        self.weight = nn.Parameter(torch.empty(channels, width))
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None
        nn.init.uniform_(self.weight, -(width**-0.5), width**-0.5)

    def init_state(self, batch: int, like: Tensor | None = None) -> Tensor:
        dtype = self.weight.dtype if like is None else like.dtype
        return torch.zeros(batch, self.width - 1, self.channels, dtype=dtype, device=self.weight.device)

    def forward(
        self, x: Tensor, state: Tensor | None = None, positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """``(y, state)``; ``positions`` ``[T]``: packed sequences from their starts (no state; each step's position
        in its sequence), so that no output reads a step of the sequence before."""
        if positions is not None:
            return self._packed(x, positions), None
        expected = [x.shape[0], self.width - 1, self.channels]
        if state is not None and list(state.shape) != expected:
            raise ValueError(
                f"state: expected the short convolution's last inputs [B, w − 1, C] = {expected}, got "
                f"{list(state.shape)}; start a state for this batch with init_state({x.shape[0]})"
            )
        state = self.init_state(x.shape[0], x) if state is None else state.to(x.dtype)
        weight = self.weight.to(x.dtype)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        y = stacking.apply(_DepthwiseCorrelation, torch.cat([state, x], dim=1), weight, bias)
        if self.activation:
            y = F.silu(y)
        recent = torch.cat([state, x[:, max(0, x.shape[1] - (self.width - 1)) :]], dim=1)
        return y, recent[:, recent.shape[1] - (self.width - 1) :]

    def _packed(self, x: Tensor, positions: Tensor) -> Tensor:
        y = causal_depthwise_conv(
            x, self.weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype), positions
        )
        return F.silu(y) if self.activation else y

    def extra_repr(self) -> str:
        return f"channels={self.channels}, width={self.width}, activation={self.activation}"


class TokenShift(nn.Module):
    """``x_{t−1}`` of ``x`` ``[B, T, C]`` (RWKV's token shift; 0 before the start): a short convolution of width 2
    with the kernel ``[1, 0]``, with :class:`ShortConv`'s interface — ``forward(x, state=None, positions=None)``
    returns ``(x_{t−1}, state)``, the state the last input ``[B, 1, C]``; ``positions`` restart packed sequences."""

    width = 2

    def __init__(self, channels: int):
        super().__init__()
        self.channels = channels

    def init_state(self, batch: int, like: Tensor | None = None) -> Tensor:
        return torch.zeros(batch, 1, self.channels, dtype=None if like is None else like.dtype)

    def forward(
        self, x: Tensor, state: Tensor | None = None, positions: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        if positions is not None:
            earlier = F.pad(x[:, :-1], (0, 0, 1, 0))
            return torch.where((positions >= 1)[:, None], earlier, earlier.new_zeros(())), None
        if state is not None and list(state.shape) != [x.shape[0], 1, self.channels]:
            raise ValueError(
                f"state: expected the token shift's last input [B, 1, C] = {[x.shape[0], 1, self.channels]}, got "
                f"{list(state.shape)}; start a state for this batch with init_state({x.shape[0]})"
            )
        state = x.new_zeros(x.shape[0], 1, self.channels) if state is None else state.to(x.dtype)
        return torch.cat([state, x[:, :-1]], dim=1), x[:, -1:]

    def extra_repr(self) -> str:
        return f"channels={self.channels}"


def causal_depthwise_conv(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, positions: Tensor | None = None
) -> Tensor:
    """``y_t = b + Σ_{l<w} W[:, w−1−l] ⊙ x_{t−l}`` of ``x`` ``[B, T, C]`` with kernel ``weight`` ``[C, w]``, zeros
    before the start; ``positions`` ``[T]``: packed sequences (each step's position in its own sequence, ``l ≤ p_t``
    only), so that no output reads a step of the sequence before."""
    if positions is None:
        return stacking.apply(_DepthwiseCorrelation, F.pad(x, (0, 0, weight.shape[1] - 1, 0)), weight, bias)
    width = weight.shape[1]
    y = x * weight[:, -1] if bias is None else torch.addcmul(bias, x, weight[:, -1])
    for lag in range(1, min(width, x.shape[1])):
        earlier = F.pad(x[:, :-lag], (0, 0, lag, 0))  # [B, T, C]: x_{t−lag}
        within = (positions >= lag)[:, None]  # [T, 1]: x_{t−lag} is in the same sequence
        y = y + torch.where(within, earlier, earlier.new_zeros(())) * weight[:, width - 1 - lag]
    return y


def _correlate(padded: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``y_t = b + Σ_s W[:, s] ⊙ x_{t+s}`` of time-major ``padded`` ``[B, T + w − 1, C]`` → ``[B, T, C]``.

    Seen as a ``[B, C, 1, T]`` image in channels-last layout, ``[B, T, C]`` needs no transposed copy: the
    convolution reads and writes it in place of memory.
    """
    image = padded.transpose(1, 2).unsqueeze(2)  # [B, C, 1, T + w − 1], channels-last strides
    out = F.conv2d(image, weight[:, None, None, :], bias, groups=weight.shape[0])
    return out.squeeze(2).transpose(1, 2)


@float32_under_autocast
class _DepthwiseCorrelation(torch.autograd.Function):
    """:func:`_correlate` with a hand-written backward: ``∂x_u = Σ_s W[:, s] ∂y_{u−s}`` is the same correlation of
    the zero-padded ``∂y`` with the flipped kernel, and ``∂W[:, s] = Σ_{b,t} ∂y_t ⊙ x_{t+s}`` one multiply-and-sum
    per tap (torch's convolution backward for depthwise weights is several times slower on a CPU)."""

    @staticmethod
    def forward(ctx, padded: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        padded = padded.contiguous()
        ctx.save_for_backward(padded, weight)
        ctx.has_bias = bias is not None
        return _correlate(padded, weight, bias).contiguous()

    @staticmethod
    def plain(padded: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return _correlate(padded, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y: Tensor):
        padded, weight = ctx.saved_tensors
        width = weight.shape[1]
        grad_y = grad_y.contiguous()
        grad_padded = _correlate(F.pad(grad_y, (0, 0, width - 1, width - 1)), weight.flip(1), None).contiguous()
        grad_weight = _tap_products(grad_y, padded, width)
        grad_bias = grad_y.sum((0, 1)) if ctx.has_bias else None
        return grad_padded, grad_weight, grad_bias


#: steps per slice of :func:`_tap_products`: every tap of a slice reads it while it is in cache
TAP_SLICE = 256


def _tap_products(grad_y: Tensor, padded: Tensor, width: int) -> Tensor:
    """``∂W[:, s] = Σ_{b,t} ∂y_t ⊙ x_{t+s}`` ``[C, w]``, summed slice by slice of time (~3× faster than whole)."""
    grad_weight = grad_y.new_zeros(grad_y.shape[-1], width)
    for start in range(0, grad_y.shape[1], TAP_SLICE):
        piece = grad_y[:, start : start + TAP_SLICE]
        for s in range(width):
            grad_weight[:, s] += (piece * padded[:, start + s : start + s + piece.shape[1]]).sum((0, 1))
    return grad_weight
