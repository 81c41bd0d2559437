"""mLSTM, the matrix-memory cell of xLSTM (Beck et al. 2024; Sieber et al. 2025 Table 1).

Per head (K = V = D/H), with exponential input gate and sigmoid forget gate::

    C_t = f_t C_{t-1} + exp(ĩ_t) k_t v_tᵀ / √K,   n_t = f_t n_{t-1} + exp(ĩ_t) k_t / √K
    h_t = o_t ⊙ RMSNorm(C_tᵀ q_t / max(|n_tᵀ q_t|, 1)),   y_t = W_O h_t

with ``log f_t = logsigmoid(w_fᵀ u_t + b_f)``, ``ĩ_t = w_iᵀ u_t + b_i``, ``o_t = σ(W_o u_t)``.  Coefficient form:
φ = identity, Λ_t = f_t I, b_t = exp(ĩ_t) K^-½ (passed as ``log_scale``, so xLSTM's log-space stabilizer m_t is
the operator's own), η = "abs_max1".  Gate biases as in xLSTM: b_f = linspace(3, 6), b_i ~ N(0, 0.1).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import RMSNorm
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, keep_init, split_heads


class MLSTM(CoefficientMixer):
    """mLSTM: a matrix memory with an exponential input gate, a sigmoid forget gate and a normalizer state.

    Args:
        heads: the number of heads H; each has K = V = d_model / H and its own input and forget gates.
    """

    name = "mlstm"

    def __init__(self, d_model: int, heads: int = 4, chunk_size: int = 64):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.input_gate = nn.Linear(d_model, heads)
        self.forget_gate = nn.Linear(d_model, heads)
        self.output_gate = nn.Linear(d_model, d_model)
        self.norm = RMSNorm(d_model // heads)
        self.out = nn.Linear(d_model, d_model, bias=False)
        with torch.no_grad():
            nn.init.zeros_(self.forget_gate.weight)
            self.forget_gate.bias.copy_(torch.linspace(3.0, 6.0, heads))
            nn.init.zeros_(self.input_gate.weight)
            nn.init.normal_(self.input_gate.bias, std=0.1)
        keep_init(self.forget_gate.weight, self.forget_gate.bias, self.input_gate.weight, self.input_gate.bias)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))
        log_scale = self.input_gate(x) - 0.5 * math.log(q.shape[-1])
        inputs = Dynamics(
            q, k, v, log_decay=F.logsigmoid(self.forget_gate(x)), log_scale=log_scale, normalizer="abs_max1"
        )
        return inputs, torch.sigmoid(self.output_gate(x))

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        return self.out(extras * self.norm(core).flatten(2))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}"


MIXER = MLSTM
