"""qLSTM, the quasi LSTM whose gates see only the input (Stanić et al. 2023; Sieber et al. 2024 eqs. 5–8, 19,
appendix E.2).

Per channel (no state expansion, n = 1), with gates from the layer input u_t only (eq. 8)::

    ū_t = tanh(W_u u_t),  f_t = σ(W_f u_t),  i_t = σ(W_i u_t),  o_t = σ(W_o u_t)          (8)
    x_t = f_t ⊙ x_{t-1} + i_t ⊙ ū_t                                                       (5a)
    y_t = o_t ⊙ tanh(x_t)                                                                 (5b)

Coefficient form, one head per channel (H = I, K = V = 1): φ = identity, Λ_t = f_t (scalar log decay
``logsigmoid(W_f u_t)``), b_t = i_t, η = 1, q = k = 1, v = ū_t; the output gate and tanh act on the core's output.

``dsf_form=True`` drops both tanh (eq. 19): v = W_u u_t and the output gate becomes the query, q = o_t, so the
DSF is exactly eq. 19: Λ_i = diag(σ(W_f u_i)), B_i = diag(σ(W_i u_i)) W_u, C_i = diag(σ(W_o u_i)).

The layer around it (Languini's quasi-LSTM block, which Sieber et al. 2024 puts where attention was)::

    ũ = conv(u)                             (``short_conv``: depthwise causal conv, no activation; Hawk-style)
    f, i, o, ū from ũ by one projection D → 4·I   (I = expand·D channels)
    y = o ⊙ tanh(x)
    y = y ⊙ GeLU(W_g u)                     (``gate``: the multiplicative branch of the Hawk block)
    out = W_out y                           (I → D, with bias)

Initialization as in Languini: every weight ~ N(0, 0.02²), biases 0 except the forget gate's, which is 1
(Languini adds +1 inside σ of the forget gate).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import ShortConv
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_choice, check_positive, keep_init, scaled_width

#: standard deviation of every weight at initialization (Languini)
WEIGHT_STD = 0.02


class QLSTM(CoefficientMixer):
    """qLSTM: an LSTM whose gates read only the input, so it is a linear recurrence per channel.

    Args:
        expand: the recurrence width I is expand·d_model channels.
        dsf_form: drop both tanh and read the state with the output gate as the query (eq. 19, exactly a DSF);
            False: eqs. 5 and 8, ū = tanh(W_u u) and y = o ⊙ tanh(x).
        short_conv: a short causal depthwise convolution (no activation) on the input before the gates
            (Hawk-style); False: none.
        conv_size: the width of that convolution (taps, the current token included).
        gate: multiply y by GeLU(W_g u), the multiplicative branch of the Hawk block; False: none.
    """

    name = "qlstm"
    #: bias of the forget-gate pre-activation at initialization
    forget_bias = 1.0

    def __init__(
        self,
        d_model: int,
        expand: float = 1,
        dsf_form: bool = False,
        short_conv: bool = False,
        conv_size: int = 4,
        gate: bool = False,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.inner = scaled_width("expand", d_model, expand)
        self.dsf_form = check_choice("dsf_form", dsf_form, (True, False))
        check_choice("short_conv", short_conv, (True, False))
        check_choice("gate", gate, (True, False))
        check_positive("conv_size", conv_size)
        if short_conv:
            self.convs["u"] = ShortConv(d_model, conv_size, activation=False)
        self.gates = nn.Linear(d_model, 4 * self.inner)  # [forget | input | output | update]
        self.gate = nn.Linear(d_model, self.inner) if gate else None
        self.out = nn.Linear(self.inner, d_model)
        self.reset_gates()

    def reset_gates(self) -> None:
        with torch.no_grad():
            for linear in (self.gates, self.gate, self.out):
                if linear is not None:
                    nn.init.normal_(linear.weight, std=WEIGHT_STD)
                    nn.init.zeros_(linear.bias)
            self.gates.bias[: self.inner].fill_(self.forget_bias)
        keep_init(self.gates.bias)  # the forget-gate bias (the other gates' biases are 0, as a model init sets them)

    def log_forget(self, pre: Tensor) -> Tensor:
        """``log f_t`` from the forget gate's pre-activation: ``log σ(W_f u_t)`` (eq. 8)."""
        return F.logsigmoid(pre)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, tuple[Tensor, Tensor | None]]:
        u = self.convolve("u", x, state) if self.convs else x
        forget, input_, output, update = self.gates(u).chunk(4, dim=-1)  # [B, T, I] each
        o = torch.sigmoid(output)
        ones = x.new_ones(*x.shape[:2], 1, 1)
        values = update if self.dsf_form else torch.tanh(update)
        inputs = Dynamics(
            q=o.unsqueeze(-1) if self.dsf_form else ones,
            k=ones,
            v=values.unsqueeze(-1),
            log_decay=self.log_forget(forget),
            scale=torch.sigmoid(input_),
        )
        return inputs, (o, F.gelu(self.gate(x)) if self.gate is not None else None)

    def core_output(self, core: Tensor, extras: tuple[Tensor, Tensor | None]) -> Tensor:
        o, gate = extras
        y = core.squeeze(-1) if self.dsf_form else o * torch.tanh(core.squeeze(-1))  # (19c) or (5b)
        return self.out(y if gate is None else y * gate)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, inner={self.inner}, dsf_form={self.dsf_form}"


MIXER = QLSTM
