"""Taylor attention (Sieber et al. 2024 Lemma 1, appendix C; the feature map of Based, Arora et al. 2024).

Queries and keys of dimension n are lifted to degree-p Taylor features
``φ_p(x) = [1, x, x⊗x/√2!, …, x^{⊗p}/√p!]`` so that ``φ_p(q)ᵀφ_p(k) = Σ_{d≤p} (qᵀk)^d/d! ≈ exp(qᵀk)``::

    y_i = Σ_{j≤i} φ_p(q_i/n^¼)ᵀ φ_p(k_j/n^¼) v_j / Σ_{j≤i} φ_p(q_i/n^¼)ᵀ φ_p(k_j/n^¼)

Coefficient form: φ = identity on the features, Λ = I, b = 1, η = Σ_j α_ij — the finite DSF of softmax
attention with the temperature n^-½ of b = K^-½ (with η = "sum" a constant b cancels, so it is applied to q and
k inside the features).  The state has Σ_d n^d rows per head.
"""

from __future__ import annotations

from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.features import taylor, taylor_dim
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, check_positive, split_heads


class TaylorAttention(CoefficientMixer):
    """Taylor attention: linear attention whose features approximate exp(qᵀk) by its degree-p Taylor series.

    Args:
        heads: the number of heads H; values have d_model / H channels per head.
        state_dim: the dimension n of a head's queries and keys before the Taylor features (Based uses 16);
            the state has Σ_{d≤p} n^d rows.
        degree: the degree p of the Taylor features (2: Based's 1 + x + x²/2; 0: plain averaging).
        bias: biases in the query, key, value and output projections.
    """

    name = "taylor_attention"

    def __init__(
        self,
        d_model: int,
        heads: int = 1,
        state_dim: int = 16,
        degree: int = 2,
        bias: bool = False,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.state_dim = check_positive("state_dim", state_dim)
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 0:
            raise ValueError(f"degree: expected a non-negative integer, got {degree!r}")
        self.degree = degree
        self.qk = nn.Linear(d_model, 2 * self.heads * state_dim, bias=bias)
        self.v = nn.Linear(d_model, d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    @property
    def feature_dim(self) -> int:
        return taylor_dim(self.state_dim, self.degree)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, None]:
        temperature = self.state_dim**-0.25
        q, k = (taylor(split_heads(t, self.heads) * temperature, self.degree) for t in self.qk(x).chunk(2, dim=-1))
        return Dynamics(q, k, split_heads(self.v(x), self.heads), scale=1.0, normalizer="sum"), None

    def core_output(self, core: Tensor, extras: None) -> Tensor:
        return self.out(core.flatten(2))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, state_dim={self.state_dim}, degree={self.degree}"


MIXER = TaylorAttention
