"""The gated short convolution of LFM2 (Liquid AI 2025, "LFM2 Technical Report", https://arxiv.org/abs/2511.23404;
transformers' ``Lfm2ShortConv``): a causal depthwise convolution of a few taps between two multiplicative gates, the
token mixer of LFM2's convolution layers.

Per channel c, from one projection of the input u::

    [b_t; c_t; x_t] = W_in u_t                               (the input gate, the output gate, the values)
    y_t = W_out (c_t ⊙ Σ_{l<L} w_{L−1−l} ⊙ (b_{t−l} ⊙ x_{t−l}))

Coefficient form: every channel a head (V = 1) with the coefficients ``α_tj = c_t w_{L−1−(t−j)} b_j`` for
``0 ≤ t − j < L`` (0 otherwise) on its values x — a banded matrix, an LTI kernel between two time-varying gates.  Its
DSF keeps the last L gated inputs, ``h_t = [b_t x_t, …, b_{t−L+1} x_{t−L+1}]`` (a shift register), and its streaming
state the last L − 1.  It has one form, which every backend name computes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqdyn.core.dsf import DSF
from seqdyn.layers import ShortConv
from seqdyn.mixers.base import ConvolutionMixer, check_choice, check_positive


class GatedConv(ConvolutionMixer):
    """LFM2's gated short convolution: ``W_out (c ⊙ conv_L(b ⊙ x))`` with ``[b; c; x] = W_in u``.

    Args:
        conv_size: L, the convolution's taps, the current token's included (3 in LFM2).
        bias: biases of the projections and the convolution (LFM2's ``conv_bias``, False).
    """

    name = "gated_conv"

    def __init__(self, d_model: int, conv_size: int = 3, bias: bool = False):
        super().__init__(d_model)
        self.conv_size = check_positive("conv_size", conv_size)
        check_choice("bias", bias, (True, False))
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.conv = ShortConv(d_model, conv_size, activation=False, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _gates(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(b, c, x)`` ``[B, T, D]`` each."""
        return self.in_proj(x).chunk(3, dim=-1)

    def before(self, x: Tensor) -> tuple[Tensor, Tensor]:
        b, c, v = self._gates(x)
        return b * v, c

    def after(self, convolved: Tensor, extras: Tensor) -> Tensor:
        return self.out_proj(extras * convolved)

    def core(self, x: Tensor, backend: str = "auto") -> tuple[Tensor, Tensor]:
        """The gated convolution's output ``c ⊙ conv(b ⊙ x)`` and its values ``x``, ``[B, T, D, 1]`` each."""
        self.check_input(x)
        b, c, v = self._gates(x)
        return (c * self.conv(b * v)[0]).unsqueeze(-1), v.unsqueeze(-1)

    def coefficients(self, x: Tensor) -> Tensor:
        """``A[b, c, t, j] = c_t w_{L−1−(t−j)} b_j`` for ``0 ≤ t − j < L`` ``[B, D, T, T]`` (module docstring)."""
        self.check_input(x)
        b, c, _ = self._gates(x)
        length = x.shape[1]
        lag = torch.arange(length, device=x.device)[:, None] - torch.arange(length, device=x.device)[None, :]
        band = (lag >= 0) & (lag < self.conv_size)
        taps = self.conv.weight.to(x.dtype)[:, (self.conv_size - 1 - lag).clamp(0, self.conv_size - 1)]  # [D, T, T]
        kernel = taps.masked_fill(~band, 0.0)
        return c.transpose(1, 2)[..., :, None] * kernel * b.transpose(1, 2)[..., None, :]

    def dsf(self, x: Tensor) -> DSF:
        """The shift register of the last L gated inputs: ``Λ`` shifts them down, ``B_t = b_t e_0``,
        ``C_t = c_t [w_{L−1}, …, w_0]``, ``D = 0`` — per channel (H = D, V = 1)."""
        self.check_input(x)
        b, c, _ = self._gates(x)
        batch, length, width = x.shape
        size = self.conv_size
        shift = torch.diag_embed(x.new_ones(size - 1), offset=-1)  # [L, L]
        lam = shift.expand(batch, width, length, size, size)
        first = torch.zeros(size, 1, dtype=x.dtype, device=x.device)
        first[0] = 1.0
        inputs = b.transpose(1, 2)[..., None, None] * first  # [B, D, T, L, 1]
        read = self.conv.weight.to(x.dtype).flip(-1)[:, None, None, :]  # [D, 1, 1, L]: w_{L−1}, …, w_0
        outputs = c.transpose(1, 2)[..., None, None] * read  # [B, D, T, 1, L]
        return DSF(Lambda=lam, B=inputs, C=outputs, D=x.new_zeros(batch, width, length, 1, 1))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, conv_size={self.conv_size}"


MIXER = GatedConv
