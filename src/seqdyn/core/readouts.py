"""Readout maps φ and normalization η of the coefficient dynamics (seed 001 eqs. 2 and 4).

A coefficient is ``α_ij = φ(s_ij)`` with the score ``s_ij = q_iᵀ Λ_i ⋯ Λ_{j+1} b_j k_j``; the output is
``y_i = (1/η_i) Σ_{j≤i} α_ij v_j``.  This module holds the maps φ, the normalizers η and the one function that
turns (un-normalized) coefficient rows into normalized ones, used by every backend and by the operator's
linear path alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import torch
import torch.nn.functional as F
from torch import Tensor


def _elu1(s: Tensor) -> Tensor:
    return F.elu(s) + 1.0


def _square(s: Tensor) -> Tensor:
    return s * s


def _identity(s: Tensor) -> Tensor:
    return s


#: The named readout maps φ (seed 001 §4.1, Fig. 1).  ``identity`` is the only linear one (Lemma 1).
READOUTS: dict[str, Callable[[Tensor], Tensor]] = {
    "identity": _identity,
    "exp": torch.exp,
    "softplus": F.softplus,
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "elu1": _elu1,
    "square": _square,
}

#: The named normalizers η (DESIGN §2); a tensor ``[B, T, H]`` of given η_i is also accepted.
NORMALIZERS = ("none", "sum", "abs_max1")
#: The normalizers computed from a state ``z_t`` carried beside ``S_t`` (for the identity readout).
STATE_NORMALIZERS = ("sum", "abs_max1")

ReadoutLike = Union[str, Callable[[Tensor], Tensor]]
NormalizerLike = Union[str, Tensor]


@dataclass(frozen=True)
class Readout:
    """A readout map φ with its name; ``linear`` marks the identity, which admits a finite state (Lemma 1).

    A user callable is always treated as nonlinear (it is named ``"callable:<name>"``), unless it is one of the
    functions in :data:`READOUTS` itself.
    """

    name: str
    fn: Callable[[Tensor], Tensor]

    @property
    def linear(self) -> bool:
        return self.name == "identity"

    @property
    def is_exp(self) -> bool:
        return self.name == "exp"


def resolve_readout(readout: ReadoutLike) -> Readout:
    """Turn a readout name or callable into a :class:`Readout`; unknown names raise ``ValueError``."""
    if callable(readout):
        for name, fn in READOUTS.items():
            if readout is fn:
                return Readout(name, fn)
        return Readout(f"callable:{getattr(readout, '__name__', type(readout).__name__)}", readout)
    if isinstance(readout, str) and readout in READOUTS:
        return Readout(readout, READOUTS[readout])
    raise ValueError(
        f"readout: got {readout!r}; allowed: one of {sorted(READOUTS)} or a callable mapping scores to coefficients"
    )


def normalize(num: Tensor, den: Tensor, normalizer: NormalizerLike, log_scale: Tensor | None = None) -> Tensor:
    """Apply η to a row quantity given up to a per-row factor: returns ``e^c · num / η`` (DESIGN §2).

    ``num`` ``[..., X]`` and ``den`` ``[...]`` are ``e^{-c} Σ_j α_ij x_j`` and ``e^{-c} Σ_j α_ij`` for a per-row
    log-scale ``c`` (``log_scale``, ``[...]``; ``None`` means 0) chosen by the caller to keep them finite.  Then
    ``"sum"``: ``num / den``; ``"abs_max1"``: ``num / max(|den|, e^{-c})``; ``"none"``: ``e^c num``;
    a tensor η: ``e^c num / η``.  The factor cancels exactly, so the result is the same for every ``c``.
    """
    if isinstance(normalizer, Tensor):
        out = num / normalizer.unsqueeze(-1)
        return out if log_scale is None else out * torch.exp(log_scale).unsqueeze(-1)
    if normalizer == "sum":
        return num / den.unsqueeze(-1)
    if normalizer == "abs_max1":
        floor = torch.ones_like(den) if log_scale is None else torch.exp(-log_scale)
        return num / torch.maximum(den.abs(), floor).unsqueeze(-1)
    if normalizer == "none":
        return num if log_scale is None else num * torch.exp(log_scale).unsqueeze(-1)
    raise ValueError(f"normalizer: got {normalizer!r}; allowed: {list(NORMALIZERS)} or a tensor [B, T, H]")


def normalized_coefficients(
    scores: Tensor, valid: Tensor | None, readout: Readout, normalizer: NormalizerLike
) -> Tensor:
    """Normalized coefficients ``A_ij = φ(s_ij) / η_i`` from scores ``[..., Tq, Tk]`` (seed 001 eqs. 2, 4).

    ``valid`` (broadcastable boolean, e.g. the causal mask) marks the pairs ``j ≤ i`` that exist; the others get
    coefficient 0.  ``exp`` is evaluated relative to the row maximum, so ``exp`` with ``"sum"`` is a stable
    softmax and ``"abs_max1"`` is stabilized like mLSTM; ``normalizer`` tensors are ``[..., Tq]``.
    """
    if valid is not None:
        fill = float("-inf") if readout.is_exp else 0.0
        scores = scores.masked_fill(~valid, fill)
    if readout.is_exp:
        row_max = scores.amax(dim=-1, keepdim=True).detach()
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        alpha = torch.exp(scores - row_max)
        log_scale = row_max.squeeze(-1)
    else:
        alpha = readout.fn(scores)
        if valid is not None:
            alpha = alpha.masked_fill(~valid, 0.0)
        log_scale = None
    return normalize(alpha, alpha.sum(dim=-1), normalizer, log_scale)
