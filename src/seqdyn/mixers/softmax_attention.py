"""Softmax attention (Vaswani et al. 2017; seed 000 eq. 2; seed 001 Table 1).

Per head (K = V = D/H)::

    q_i, k_i, v_i = W_Q u_i, W_K u_i, W_V u_i
    y_i = Σ_{j≤i} exp(q_iᵀ k_j / √K) v_j / Σ_{j≤i} exp(q_iᵀ k_j / √K),      output W_O y_i

Coefficient form: φ = exp, Λ = I, b = K^-½, η_i = Σ_j α_ij.  No finite state (seed 000 Lemma 1): the recurrent
form keeps every key; position information comes from the model (learned positions), since Λ = I (Lemma 3), or
with ``rotary=True`` from rotary embeddings of q and k (RoFormer eq. 34; the ATTENTION block of seed 002 §3.3:
"a 4-head attention layer and rotary positional embeddings").
"""

from __future__ import annotations

from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers.rotary import rotary
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_choice, check_heads, split_heads


class SoftmaxAttention(CoefficientMixer):
    """Causal softmax attention (multi-head), the operator with readout exp and normalizer sum.

    Args:
        heads: the number of heads H; K = V = d_model / H per head.
        bias: biases in the query, key, value and output projections.
        rotary: rotary position embeddings on q and k (RoFormer; needs an even d_model / H); False: no position
            information in the mixer.
    """

    name = "softmax_attention"

    def __init__(self, d_model: int, heads: int = 1, bias: bool = False, rotary: bool = False,
                 chunk_size: int = 64):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.rotary = check_choice("rotary", rotary, (False, True))
        if rotary and (d_model // heads) % 2:
            raise ValueError(f"rotary: rotary embeddings rotate channel pairs, so the head dimension d_model / heads "
                             f"= {d_model // heads} must be even; choose another heads or d_model")
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, None]:
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))  # [B, T, H, D/H] each
        if self.rotary:
            q, k = rotary(q, state.positions), rotary(k, state.positions)
        return Dynamics(q, k, v, readout="exp", normalizer="sum"), None

    def core_output(self, core: Tensor, extras: None) -> Tensor:
        return self.out(core.flatten(2))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, rotary={self.rotary}"


MIXER = SoftmaxAttention
