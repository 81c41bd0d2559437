"""Feature maps that turn a nonlinear readout into an identity readout on features (Sieber et al. 2024 §3, appendix C).

With features ``ψ``, ``φ(qᵀk) ≈ ψ(q)ᵀψ(k)`` makes the coefficient dynamics linear, hence a finite DSF
(Principle 2.1 of Sieber et al. 2025 explains what this costs in input selectivity).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdyn.core.readouts import elu1  # the positive feature map of linear attention

__all__ = ["FEATURE_MAPS", "elu1", "feature_map", "taylor", "taylor_dim"]


def taylor_dim(dim: int, degree: int) -> int:
    """Length of :func:`taylor` features of a ``dim``-vector: ``Σ_{d=0}^{p} dim^d``."""
    return sum(dim**d for d in range(degree + 1))


def taylor(x: Tensor, degree: int) -> Tensor:
    """Degree-p Taylor features ``φ_p(x) = [1, x, x⊗x/√2!, …, x^{⊗p}/√p!]`` along the last axis (Sieber et al. 2024
    Lemma 1).

    ``φ_p(q)ᵀ φ_p(k) = Σ_{d=0}^{p} (qᵀk)^d / d!``, the degree-p Taylor polynomial of ``exp(qᵀk)``, whose error
    vanishes as p grows.  ``x`` ``[..., K]`` → ``[..., Σ_d K^d]``.
    """
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 0:
        raise ValueError(f"degree: expected a non-negative integer, got {degree!r}")
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise ValueError(f"x: expected a floating-point tensor [..., K], got {type(x).__name__}")
    term = x.new_ones(*x.shape[:-1], 1)
    parts = [term]
    for d in range(1, degree + 1):
        term = (term.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2) / math.sqrt(d)
        parts.append(term)
    return torch.cat(parts, dim=-1)


#: Positive and polynomial feature maps ψ for linear attention: ``φ(qᵀk) ≈ ψ(q)ᵀψ(k)``
#: (Sieber et al. 2025 Principle 2.1).
FEATURE_MAPS = {
    "identity": lambda x: x,
    "elu1": elu1,
    "relu": F.relu,
    "softplus": F.softplus,
    "exp": torch.exp,
    "square": lambda x: x * x,
}

#: the names of :data:`FEATURE_MAPS` as a type (a mixer option's allowed values)
FeatureMap = Literal[tuple(FEATURE_MAPS)]


def feature_map(name: str):
    """The feature map called ``name`` (:data:`FEATURE_MAPS`); unknown names raise ``ValueError``."""
    if name not in FEATURE_MAPS:
        raise ValueError(f"feature_map: got {name!r}; allowed: {sorted(FEATURE_MAPS)}")
    return FEATURE_MAPS[name]
