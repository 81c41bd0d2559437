"""Normalized attention (Sieber et al. 2024 eq. 21, §4.2): linear attention whose normalization is learned, as in S6.

Per head, identity features on n-dimensional queries and keys::

    y_i = Σ_{j≤i} (q_iᵀ k_j) v_j / η_i,      η_i = exp(w_ηᵀ u_i)

Coefficient form: φ = identity, Λ = I, b = 1, η_i given by the input (a normalizer tensor).  In the DSF the
ratio η_{i-1}/η_i enters Λ_i (Sieber et al. 2024 eq. 15), like the discretization step Δ_i of S6.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, check_positive, split_heads


class NormalizedAttention(CoefficientMixer):
    """Normalized attention: linear attention (identity features) divided by a normalizer learned from the input.

    Args:
        heads: the number of heads H; values have d_model / H channels per head.
        state_dim: the dimension n of a head's queries and keys (the state's rows); None: d_model / heads.
        bias: biases in the query, key, value and output projections (W_η always has one).
    """

    name = "normalized_attention"

    def __init__(
        self, d_model: int, heads: int = 1, state_dim: int | None = None, bias: bool = False, chunk_size: int = 64
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.state_dim = check_positive("state_dim", d_model // heads if state_dim is None else state_dim)
        self.qk = nn.Linear(d_model, 2 * self.heads * self.state_dim, bias=bias)
        self.v = nn.Linear(d_model, d_model, bias=bias)
        self.eta = nn.Linear(d_model, self.heads, bias=True)  # W_η
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, None]:
        q, k = (split_heads(t, self.heads) for t in self.qk(x).chunk(2, dim=-1))
        return Dynamics(q, k, split_heads(self.v(x), self.heads), scale=1.0, normalizer=torch.exp(self.eta(x))), None

    def core_output(self, core: Tensor, extras: None) -> Tensor:
        return self.out(core.flatten(2))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, state_dim={self.state_dim}"


MIXER = NormalizedAttention
