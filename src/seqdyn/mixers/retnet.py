"""Retention, the core of RetNet (Sun et al. 2023): linear attention with a constant decay per head.

Per head h (K = D/H, V = expand_v·D/H), with fixed ``γ_h = 1 − 2^{−5−h}``::

    S_t = γ_h S_{t-1} + k_t v_tᵀ,   o_t = S_tᵀ (q_t K^-½),   y_t = W_O (RMSNorm(o_t) ⊙ SiLU(W_g u_t))

Coefficient form: φ = identity, Λ = γ_h I (a scalar decay that does not depend on the input), b = K^-½,
η = 1 — the simplest Λ ≠ I that gives the coefficients positional information (Sieber et al. 2025 Lemma 3).  RetNet's
xPos rotation of q and k is left out (it would make Λ complex).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import HeadOutput
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, scaled_width, split_heads


def retention_log_decays(heads: int) -> Tensor:
    """``log γ_h = log(1 − 2^{−5−h})`` for ``h = 0 … H−1`` (RetNet's multi-scale decays)."""
    return torch.tensor([math.log(1 - 2.0 ** (-5 - h)) for h in range(heads)])


class RetNet(CoefficientMixer):
    """Retention (RetNet): linear attention with a fixed decay γ_h = 1 − 2^{−5−h} per head.

    Args:
        heads: the number of heads H; head h decays by γ_h = 1 − 2^{−5−h}, so the heads see different spans.
        expand_v: the value width is expand_v·d_model, V = expand_v·d_model / H per head (RetNet: 2).
        output_gate: multiply the per-head RMS-normalized output by SiLU(W_g u_t) before W_O (RetNet's swish
            gate); False: RMSNorm only.
    """

    name = "retnet"

    def __init__(
        self, d_model: int, heads: int = 4, expand_v: float = 2.0, output_gate: bool = True, chunk_size: int = 64
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.value_width = scaled_width("expand_v", d_model, expand_v)
        check_heads(heads, self.value_width, "expand_v·d_model")
        self.qk = nn.Linear(d_model, 2 * d_model, bias=False)
        self.v = nn.Linear(d_model, self.value_width, bias=False)
        self.register_buffer("log_gamma", retention_log_decays(heads))
        self.output = HeadOutput(d_model, heads, self.value_width // heads, gate=output_gate)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        q, k = (split_heads(t, self.heads) for t in self.qk(x).chunk(2, dim=-1))
        log_decay = self.log_gamma.to(x.dtype).expand(*x.shape[:2], self.heads)
        return Dynamics(q, k, split_heads(self.v(x), self.heads), log_decay=log_decay), x

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        return self.output(core, extras)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, value_width={self.value_width}"


MIXER = RetNet
