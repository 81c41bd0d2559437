"""Linear attention (Katharopoulos et al. 2020; Sieber et al. 2024 eq. 16, §4.1 and Fig. 1).

Per head, with a positive feature map ψ (default ``elu(·) + 1``) on n-dimensional queries and keys::

    y_i = Σ_{j≤i} ψ(q_i)ᵀ ψ(k_j) v_j / Σ_{j≤i} ψ(q_i)ᵀ ψ(k_j)

Coefficient form: φ = identity on the features, Λ = I, b = 1, η_i = Σ_j α_ij; a finite state
``S_i = Σ_j ψ(k_j) v_jᵀ`` of n·V floats per head, so the state expansion n (``state_dim``) sets its capacity
(Sieber et al. 2024 Lemma 2, Fig. 1).
"""

from __future__ import annotations

from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.features import FeatureMap
from seqdyn.features import feature_map as feature_map_by_name
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, check_positive, split_heads


class LinearAttention(CoefficientMixer):
    """Linear attention: a positive feature map on queries and keys, a sum-normalized finite state.

    Args:
        heads: the number of heads H; values have d_model / H channels per head.
        state_dim: the dimension n of a head's queries and keys, the rows of its n × V state (the state expansion
            of Sieber et al. 2024 Fig. 1); None: d_model / heads.
        feature_map: ψ applied to queries and keys: elu1 (elu(x) + 1, Katharopoulos et al. 2020), identity, relu,
            softplus, exp, square (elementwise x²).
        bias: biases in the query, key, value and output projections.
    """

    name = "linear_attention"

    def __init__(
        self,
        d_model: int,
        heads: int = 1,
        state_dim: int | None = None,
        feature_map: FeatureMap = "elu1",
        bias: bool = False,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.state_dim = check_positive("state_dim", d_model // heads if state_dim is None else state_dim)
        self.feature_name = feature_map
        self.features = feature_map_by_name(feature_map)
        self.qk = nn.Linear(d_model, 2 * self.heads * self.state_dim, bias=bias)
        self.v = nn.Linear(d_model, d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, None]:
        q, k = (self.features(split_heads(t, self.heads)) for t in self.qk(x).chunk(2, dim=-1))
        return Dynamics(q, k, split_heads(self.v(x), self.heads), scale=1.0, normalizer="sum"), None

    def core_output(self, core: Tensor, extras: None) -> Tensor:
        return self.out(core.flatten(2))

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, heads={self.heads}, state_dim={self.state_dim}, feature_map={self.feature_name!r}"
        )


MIXER = LinearAttention
