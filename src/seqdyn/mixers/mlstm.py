"""mLSTM, the matrix-memory cell of xLSTM (Beck et al. 2024, https://arxiv.org/abs/2405.04517; Sieber et al. 2025
Table 1), with the options of xLSTM 7B (Beck et al. 2025, https://arxiv.org/abs/2503.13427; transformers'
``xLSTMLayer``).

Per head (K = key_width / H, V = value_width / H), with exponential input gate and sigmoid forget gate::

    C_t = f_t C_{t-1} + exp(ĩ_t) k_t v_tᵀ / √K,   n_t = f_t n_{t-1} + exp(ĩ_t) k_t / √K
    h_t = o_t ⊙ Norm(C_tᵀ q_t / (max(|n_tᵀ q_t|, 1) + ε e^{m_t})),   y_t = W_O h_t

with ``log f_t = logsigmoid(f̃_t)``, ``ĩ_t, f̃_t = cap·tanh((w_{i,f}ᵀ u_t + b_{i,f}) / cap)`` (no cap by default),
``o_t = σ(W_o u_t)`` and xLSTM's stabilizer ``m_t = max(log f_t + m_{t−1}, ĩ_t)`` from ``m_{−1} = 0`` (eq. 12 of the
2025 paper; the ε term is how xLSTM 7B computes ``h̃_t = C̃_tᵀ q_t / (max(|ñ_tᵀ q_t|, e^{−m_t}) + ε)`` on the
stabilized ``C̃ = e^{−m} C``).  Norm: RMSNorm per head with one weight for all heads (``head_norm="rms"``), or
xLSTM 7B's LayerNorm per head without bias and a weight per channel of all heads (``"layer"``).
Coefficient form: φ = identity, Λ_t = f_t I, b_t = exp(ĩ_t) K^-½ (passed as ``log_scale``), η = "abs_max1" with
the offset ``ε e^{m_t}`` (``normalizer_log_offset``).  Gate biases as in xLSTM: b_f = linspace(3, 6),
b_i ~ N(0, 0.1).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.core.evolution import cumulative_log_decay, running_log_maximum
from seqdyn.core.packing import Packing
from seqdyn.layers import RMSNorm
from seqdyn.layers.params import check_positive
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_choice, check_heads, keep_init, split_heads

HEAD_NORMS = ("rms", "layer")


def soft_capped(x: Tensor, cap: float | None) -> Tensor:
    """``cap · tanh(x / cap)`` (xLSTM 7B's gate soft-capping), ``x`` without a cap."""
    return x if cap is None else cap * torch.tanh(x / cap)


def stabilizer(input_gate: Tensor, log_forget: Tensor, start: Tensor | None, packing: Packing | None) -> Tensor:
    """xLSTM's ``m_t = max(log f_t + m_{t−1}, ĩ_t)`` ``[B, T, H]`` from ``m_{−1}`` = ``start`` ``[B, H]`` (None: 0),
    in closed form ``m_t = G_t + max(m_{−1}, max_{j≤t} (ĩ_j − G_j))`` with ``G_t = Σ_{s≤t} log f_s``, in float64;
    packed sequences each from 0."""
    if packing is not None:
        bounds = packing.cu_seqlens.tolist()
        pieces = [stabilizer(input_gate[:, a:b], log_forget[:, a:b], None, None) for a, b in zip(bounds, bounds[1:])]
        return torch.cat(pieces, dim=1)
    cumulative = cumulative_log_decay(log_forget, dim=1)  # G [B, T, H], float64
    first = 0.0 if start is None else start.double()[:, None]
    return running_log_maximum(input_gate.double(), cumulative, first, dim=1).to(input_gate.dtype)


def mlstm_dynamics(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    input_gate: Tensor,
    log_forget: Tensor,
    eps: float = 0.0,
    start: Tensor | None = None,
    packing: Packing | None = None,
    levels: bool = False,
) -> tuple[Dynamics, Tensor | None]:
    """The operator's description of the mLSTM (module docstring) for ``q, k`` ``[B, T, H, K]``, ``v``
    ``[B, T, H, V]``, ``ĩ`` and ``log f`` ``[B, T, H]``: φ = identity, Λ_t = f_t, b_t = e^{ĩ_t} K^-½, η = "abs_max1"
    plus ``ε e^{m_t}`` where ``eps`` > 0, with the stabilizer ``m_t`` from ``start`` ``[B, H]`` (:func:`stabilizer`).
    Returns it and ``m`` ``[B, T, H]`` (computed where ε > 0 or ``levels`` asks for it, else None)."""
    m = stabilizer(input_gate, log_forget, start, packing) if eps > 0 or levels else None
    dynamics = Dynamics(
        q,
        k,
        v,
        log_decay=log_forget,
        log_scale=input_gate - 0.5 * math.log(q.shape[-1]),
        normalizer="abs_max1",
        normalizer_log_offset=math.log(eps) + m if eps > 0 else None,  # log(ε e^{m_t})
    )
    return dynamics, m


class MLSTM(CoefficientMixer):
    """mLSTM: a matrix memory with an exponential input gate, a sigmoid forget gate and a normalizer state.

    Args:
        heads: the number of heads H; each has its own input and forget gates.
        key_width: the width of the queries and of the keys, H·K; None: d_model.
        value_width: the width of the values, H·V; None: d_model.
        head_norm: the norm of each head's output, ``"rms"`` (one RMSNorm weight shared by the heads) or
            ``"layer"`` (xLSTM 7B's LayerNorm per head, a weight per channel, no bias).
        norm_eps: ε of that norm.
        gate_soft_cap: ``cap`` of the input and forget gates' soft cap ``cap·tanh(x / cap)`` (xLSTM 7B: 15); None.
        eps: ε of the normalizer ``max(|n_tᵀ q_t|, 1) + ε e^{m_t}`` (xLSTM 7B: 1e-6); 0: none.
    """

    name = "mlstm"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        chunk_size: int = 64,
        key_width: int | None = None,
        value_width: int | None = None,
        head_norm: str = "rms",
        norm_eps: float = 1e-6,
        gate_soft_cap: float | None = None,
        eps: float = 0.0,
    ):
        super().__init__(d_model, chunk_size)
        self.key_width = d_model if key_width is None else check_positive("key_width", key_width)
        self.value_width = d_model if value_width is None else check_positive("value_width", value_width)
        self.heads = check_heads(heads, self.key_width, "key_width")
        check_heads(heads, self.value_width, "value_width")
        self.head_norm = check_choice("head_norm", head_norm, HEAD_NORMS)
        if gate_soft_cap is not None and not gate_soft_cap > 0:
            raise ValueError(
                f"gate_soft_cap: the cap of cap·tanh(x / cap) must be > 0 (or None), got {gate_soft_cap!r}"
            )
        self.gate_soft_cap = None if gate_soft_cap is None else float(gate_soft_cap)
        if not eps >= 0:
            raise ValueError(f"eps: the normalizer's ε must be ≥ 0, got {eps!r}")
        self.eps = float(eps)
        self.qkv = nn.Linear(d_model, 2 * self.key_width + self.value_width, bias=False)
        self.input_gate = nn.Linear(d_model, heads)
        self.forget_gate = nn.Linear(d_model, heads)
        self.output_gate = nn.Linear(d_model, self.value_width)
        if head_norm == "rms":
            self.norm = RMSNorm(self.value_width // heads, eps=norm_eps)
        else:
            self.norm = nn.LayerNorm(self.value_width // heads, eps=norm_eps, elementwise_affine=False, bias=False)
            self.norm_weight = nn.Parameter(torch.ones(self.value_width))
        self.out = nn.Linear(self.value_width, d_model, bias=False)
        with torch.no_grad():
            nn.init.zeros_(self.forget_gate.weight)
            self.forget_gate.bias.copy_(torch.linspace(3.0, 6.0, heads))
            nn.init.zeros_(self.input_gate.weight)
            nn.init.normal_(self.input_gate.bias, std=0.1)
        keep_init(self.forget_gate.weight, self.forget_gate.bias, self.input_gate.weight, self.input_gate.bias)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        q, k, v = self.qkv(x).split([self.key_width, self.key_width, self.value_width], dim=-1)
        q, k, v = split_heads(q, self.heads), split_heads(k, self.heads), split_heads(v, self.heads)
        input_gate = soft_capped(self.input_gate(x), self.gate_soft_cap)  # ĩ [B, T, H]
        log_forget = F.logsigmoid(soft_capped(self.forget_gate(x), self.gate_soft_cap))
        inputs, m = mlstm_dynamics(q, k, v, input_gate, log_forget, self.eps, state.scale, state.packing)
        if m is not None and state.packing is None:
            state.scale = m[:, -1]  # m_T, where the next call's ε e^{m_t} starts
        return inputs, torch.sigmoid(self.output_gate(x))

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        normed = self.norm(core).flatten(2)
        if self.head_norm == "layer":
            normed = normed * self.norm_weight
        return self.out(extras * normed)

    def extra_repr(self) -> str:
        widths = "" if self.key_width == self.value_width == self.d_model else f", K·H={self.key_width}"
        return f"d_model={self.d_model}, heads={self.heads}{widths}, head_norm={self.head_norm}, eps={self.eps}"


MIXER = MLSTM
