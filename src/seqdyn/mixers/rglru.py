"""RG-LRU, the real-gated linear recurrent unit of Griffin/Hawk (De et al. 2024; Sieber et al. 2024 eqs. 9–10, 20,
appendix E.1).

Per channel (no state expansion), with gates from the unit's input u_t and no pre-processing of u_t::

    r_t = σ(W_a u_t + b_a),   i_t = σ(W_x u_t + b_x),   a_t = exp(−c · r_t ⊙ softplus(Λ))   (c = 8)   (10)
    h_t = a_t ⊙ h_{t-1} + √(1 − a_t²) ⊙ (i_t ⊙ u_t),   y_t = h_t                                  (9)

Coefficient form, one head per channel (H = W, K = V = 1): φ = identity, Λ_t = a_t (scalar log decay
``log a_t = −c·r_t·softplus(Λ)``), b_t = √(1 − a_t²)·i_t, η = 1, q = k = 1, v = u_t — the DSF of eq. 20
(B_i = √(1 − Λ_i²)·diag(i_i), C_i = I).  ``√(1 − a²)`` is formed as ``√(−expm1(2 log a))`` (exact as a → 1), and
its derivative is clipped at 1000 as in RecurrentGemma (``SqrtBoundDerivative``), which keeps it finite where
a_t rounds to 1.

The layer around it is Griffin's recurrent block (RecurrentGemma ``RecurrentBlock``)::

    u = W_x x,  g = GeLU(W_y x)            (W = expand·D channels; g only with ``gate``)
    u = conv(u)                            (``short_conv``: depthwise causal conv of width 4, no activation)
    y = RG-LRU(u) ⊙ g
    out = W_out y

``short_conv=False, gate=False`` leaves the bare eqs. 9–10 between an in- and an out-projection.
``gate_blocks`` makes W_a and W_x block-diagonal with that many blocks (Griffin's heads; 1 = dense, as eq. 10).
``reset`` is RecurrentGemma's document reset: the first token of a sequence (position 0) enters unscaled,
``h_0 = i_0 ⊙ u_0`` — the state it would decay is empty, so only the √(1 − a²) factor changes.
Initialization: Λ such that a^c = exp(−c·softplus(Λ)) — the decay at r_t = 1 — is uniform in [0.9, 0.999]
(Griffin §2.4); gate weights ~ N(0, 1/block width), gate biases 0 (RecurrentGemma).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.core.precision import float32_under_autocast
from seqdyn.layers import ShortConv
from seqdyn.layers.gates import inverse_softplus
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_choice, check_positive, keep_init, scaled_width

#: largest derivative of √x let through (RecurrentGemma's ``_MAX_SQRT_GRADIENT``)
MAX_SQRT_GRADIENT = 1000.0


@float32_under_autocast
class SqrtBoundedDerivative(torch.autograd.Function):
    """``√x`` whose derivative ``1/(2√x)`` is capped at :data:`MAX_SQRT_GRADIENT`."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return torch.sqrt(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return grad / torch.sqrt(torch.clamp(4.0 * x, min=MAX_SQRT_GRADIENT**-2))


class BlockDiagonalLinear(nn.Module):
    """``y = blockdiag(W_1, …, W_n) x + b`` over ``[..., width]`` (Griffin's gate projections)."""

    def __init__(self, width: int, blocks: int):
        super().__init__()
        size = width // blocks
        self.weight = nn.Parameter(torch.randn(blocks, size, size) * size**-0.5)
        self.bias = nn.Parameter(torch.zeros(blocks, size))

    def forward(self, x: Tensor) -> Tensor:
        blocks = x.unflatten(-1, self.bias.shape)  # [..., n, w/n]
        return (torch.einsum("...hi,hij->...hj", blocks, self.weight) + self.bias).flatten(-2)


def init_recurrence(width: int, c: float, low: float = 0.9, high: float = 0.999) -> Tensor:
    """Λ ``[W]`` with ``exp(−c·softplus(Λ))`` uniform in ``[low, high]`` (Griffin §2.4)."""
    target = torch.empty(width, dtype=torch.float64).uniform_(low, high)
    return inverse_softplus(-torch.log(target) / c).to(torch.get_default_dtype())


class RGLRU(CoefficientMixer):
    """RG-LRU (Griffin/Hawk): a real gated diagonal recurrence per channel, in Griffin's recurrent block.

    Args:
        expand: the recurrence width W is expand·d_model channels.
        c: the constant c in a_t = exp(−c·r_t ⊙ softplus(Λ)) (Griffin: 8); the decay at r_t = 1 is a^c.
        gate_blocks: W_a and W_x are block-diagonal with this many blocks (Griffin's heads; must divide W); 1: dense.
        short_conv: a short causal depthwise convolution (no activation) on u before the RG-LRU, as Griffin.
        conv_size: the width of that convolution (taps, the current token included; Griffin: 4).
        gate: multiply the RG-LRU's output by GeLU(W_y x), Griffin's gate branch; False: the bare eqs. 9–10
            between the in- and out-projections.
        reset: the first token of every sequence enters without the √(1 − a²) factor (RecurrentGemma's reset
            at position 0; packed sequences each at their own start).
    """

    name = "rglru"
    ssm_parameter_names = ("a_param",)  # Λ

    def __init__(
        self,
        d_model: int,
        expand: float = 1,
        c: float = 8.0,
        gate_blocks: int = 1,
        short_conv: bool = True,
        conv_size: int = 4,
        gate: bool = True,
        chunk_size: int = 64,
        reset: bool = False,
    ):
        super().__init__(d_model, chunk_size)
        self.width = scaled_width("expand", d_model, expand)
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not c > 0:
            raise ValueError(f"c: expected a positive number (Griffin: 8), got {c!r}")
        self.c = float(c)
        check_positive("gate_blocks", gate_blocks)
        if self.width % gate_blocks:
            raise ValueError(f"gate_blocks: {gate_blocks} does not divide the recurrence width {self.width}")
        self.gate = check_choice("gate", gate, (True, False))
        self.reset = check_choice("reset", reset, (False, True))
        check_choice("short_conv", short_conv, (True, False))
        check_positive("conv_size", conv_size)
        self.in_proj = nn.Linear(d_model, self.width * (2 if gate else 1))  # [W_x | W_y]
        if short_conv:
            conv = self.convs["u"] = ShortConv(self.width, conv_size, activation=False)
            nn.init.normal_(conv.weight, std=(0.01 / conv_size) ** 0.5)  # RecurrentGemma Conv1D
        self.a_gate = BlockDiagonalLinear(self.width, gate_blocks)  # W_a: r_t
        self.input_gate = BlockDiagonalLinear(self.width, gate_blocks)  # W_x: i_t
        self.a_param = nn.Parameter(init_recurrence(self.width, self.c))  # Λ
        self.out_proj = nn.Linear(self.width, d_model)
        keep_init(
            self.a_param,
            *self.a_gate.parameters(),
            *self.input_gate.parameters(),
            *(conv.weight for conv in self.convs.values()),
        )

    def log_base_decay(self) -> Tensor:
        """``−c·softplus(Λ)`` ``[W]``: the log decay at ``r_t = 1`` (``log a_t = r_t ·`` this)."""
        return -self.c * F.softplus(self.a_param)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor | None]:
        u, g = self.in_proj(x).split([self.width, self.width if self.gate else 0], dim=-1)
        if self.convs:
            u = self.convolve("u", u, state)
        log_a = torch.sigmoid(self.a_gate(u)) * self.log_base_decay()  # (10)
        multiplier = SqrtBoundedDerivative.apply(-torch.expm1(2 * log_a))  # √(1 − a²)
        if self.reset:
            multiplier = torch.where(self._first_tokens(x.shape[1], state, x.device), 1.0, multiplier)
        ones = x.new_ones(*x.shape[:2], 1, 1)
        inputs = Dynamics(
            q=ones, k=ones, v=u.unsqueeze(-1), log_decay=log_a, scale=multiplier * torch.sigmoid(self.input_gate(u))
        )
        return inputs, F.gelu(g, approximate="tanh") if self.gate else None

    @staticmethod
    def _first_tokens(length: int, state: MixerState, device) -> Tensor:
        """``[T, 1]``: whether each token is at position 0 of its sequence."""
        positions = state.positions
        if not isinstance(positions, Tensor):
            positions = torch.arange(positions, positions + length, device=device)
        return (positions == 0)[:, None]

    def core_output(self, core: Tensor, extras: Tensor | None) -> Tensor:
        y = core.squeeze(-1)
        return self.out_proj(y if extras is None else y * extras)

    def extra_repr(self) -> str:
        reset = ", reset=True" if self.reset else ""
        return f"d_model={self.d_model}, width={self.width}, c={self.c}, gate={self.gate}{reset}"


MIXER = RGLRU
