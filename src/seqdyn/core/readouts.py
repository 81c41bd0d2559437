"""Readout maps φ and normalization η of the coefficient dynamics (Sieber et al. 2025 eqs. 2 and 4).

A coefficient is ``α_ij = φ(s_ij)`` with the score ``s_ij = q_iᵀ Λ_i ⋯ Λ_{j+1} b_j k_j``; the output is
``y_i = (1/η_i) Σ_{j≤i} α_ij v_j``.  This module holds the maps φ, the normalizers η and the one function that
turns (un-normalized) coefficient rows into normalized ones, used by every backend and by the operator's
linear path alike.

A row without mass (``"sum"`` with ``Σ_j α_ij = 0``: relu rows without a positive score, ``square`` at zero
scores, the identity with ``q_iᵀ z_i = 0``) has coefficients 0 and output 0, with finite gradients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import torch
import torch.nn.functional as F
from torch import Tensor


def elu1(s: Tensor) -> Tensor:
    """``elu(s) + 1`` (Katharopoulos et al. 2020; Sieber et al. 2024, eq. 16): ``s + 1`` above 0 and ``e^s`` below,
    formed as ``relu(s) + e^{min(s, 0)}`` so that ``e^s`` keeps its digits where ``(e^s − 1) + 1`` would cancel them
    (to 0 below s ≈ −37 in float64)."""
    return F.relu(s) + torch.exp(s.clamp(max=0.0))


def _square(s: Tensor) -> Tensor:
    return s * s


def _identity(s: Tensor) -> Tensor:
    return s


#: below this score ``softplus(s) = e^s (1 − e^s/2 + …)`` equals ``e^s`` in float64, and ``e^s`` is a normal float32
_SOFTPLUS_EXP_BELOW = -40.0


def _log_softplus(s: Tensor) -> Tensor:
    """``log softplus(s)``, which is ``s`` to float64 precision below −40 (where ``softplus`` would underflow)."""
    return torch.where(s < _SOFTPLUS_EXP_BELOW, s, torch.log(F.softplus(s.clamp(min=_SOFTPLUS_EXP_BELOW))))


def _log_elu1(s: Tensor) -> Tensor:
    """``log(elu(s) + 1)``: ``s`` for ``s ≤ 0`` (``elu(s) + 1 = e^s``), ``log(1 + s)`` above."""
    return torch.where(s > 0, torch.log1p(F.relu(s)), s)


#: The named readout maps φ (Sieber et al. 2025 §4.1, Fig. 1).  ``identity`` is the only linear one (Lemma 1).
READOUTS: dict[str, Callable[[Tensor], Tensor]] = {
    "identity": _identity,
    "exp": torch.exp,
    "softplus": F.softplus,
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "elu1": elu1,
    "square": _square,
}

#: ``log φ`` of the positive readouts, in forms that stay finite where ``φ(s)`` underflows to 0: coefficients are
#: formed as ``e^{log φ(s) − c}`` with the row maximum ``c`` (a stable softmax for ``exp``).
LOG_READOUTS: dict[str, Callable[[Tensor], Tensor]] = {
    "exp": _identity,
    "softplus": _log_softplus,
    "sigmoid": F.logsigmoid,
    "elu1": _log_elu1,
}

#: The named normalizers η; a tensor ``[B, T, H]`` of given η_i is also accepted.
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

    @property
    def log_fn(self) -> Callable[[Tensor], Tensor] | None:
        """``log φ`` for the positive readouts of :data:`LOG_READOUTS`, else ``None``."""
        return LOG_READOUTS.get(self.name)


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


def normalize(
    num: Tensor,
    den: Tensor,
    normalizer: NormalizerLike,
    log_scale: Tensor | None = None,
    *,
    may_lack_mass: bool = True,
    log_offset: Tensor | None = None,
) -> Tensor:
    """Apply η to a row quantity given up to a per-row factor: returns ``e^c · num / η``.

    ``num`` ``[..., X]`` and ``den`` ``[...]`` are ``e^{-c} Σ_j α_ij x_j`` and ``e^{-c} Σ_j α_ij`` for a per-row
    log-scale ``c`` (``log_scale``, ``[...]``; ``None`` means 0) chosen by the caller to keep them finite.  Then
    ``"sum"``: ``num / den``, and 0 for a row without mass (``den = 0``); ``"abs_max1"``:
    ``num / max(|den|, e^{-c})``; ``"none"``: ``e^c num``; a tensor η: ``e^c num / η``.  The factor cancels
    exactly, so the result is the same for every ``c``.  ``may_lack_mass=False``: the caller knows ``den > 0``.
    ``log_offset`` ``log ε`` ``[...]`` adds ``ε`` to the named normalizers' η (``e^{log ε − c}`` to the scaled
    denominator): xLSTM's ``max(|Σ_j α_ij|, 1) + ε·e^{m_i}``.
    """
    if isinstance(normalizer, Tensor):
        out = num / normalizer.unsqueeze(-1)
        return out if log_scale is None else out * torch.exp(log_scale).unsqueeze(-1)
    offset = None
    if log_offset is not None:
        offset = torch.exp(log_offset if log_scale is None else log_offset - log_scale)
    if normalizer == "sum":
        if offset is not None:
            return num / (den + offset).unsqueeze(-1)
        if may_lack_mass:  # num / ∞ = 0 where den = 0, and its gradients are 0 there instead of NaN
            den = torch.where(den == 0, torch.inf, den)
        return num / den.unsqueeze(-1)
    if normalizer == "abs_max1":
        floor = torch.ones_like(den) if log_scale is None else torch.exp(-log_scale)
        bounded = torch.maximum(den.abs(), floor)
        return num / (bounded if offset is None else bounded + offset).unsqueeze(-1)
    if normalizer == "none":
        return num if log_scale is None else num * torch.exp(log_scale).unsqueeze(-1)
    raise ValueError(f"normalizer: got {normalizer!r}; allowed: {list(NORMALIZERS)} or a tensor [B, T, H]")


def normalized_coefficients(
    scores: Tensor, valid: Tensor | None, readout: Readout, normalizer: NormalizerLike
) -> Tensor:
    """Normalized coefficients ``A_ij = φ(s_ij) / η_i`` from scores ``[..., Tq, Tk]`` (Sieber et al. 2025 eqs. 2, 4).

    ``valid`` (broadcastable boolean, e.g. the causal mask) marks the pairs ``j ≤ i`` that exist; the others get
    coefficient 0.  The positive readouts of :data:`LOG_READOUTS` are evaluated relative to the row maximum,
    ``α_ij = e^{log φ(s_ij) − c_i}`` with ``c_i = max_j log φ(s_ij)``, so ``exp`` with ``"sum"`` is a stable softmax,
    ``"abs_max1"`` is stabilized like mLSTM, and softplus, sigmoid and elu1 rows keep their ratios where ``φ``
    underflows; ``normalizer`` tensors are ``[..., Tq]``.
    """
    log_readout = readout.log_fn
    if log_readout is not None:
        log_alpha = log_readout(scores)
        if valid is not None:
            log_alpha = log_alpha.masked_fill(~valid, float("-inf"))
        row_max = log_alpha.amax(dim=-1, keepdim=True).detach()
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        alpha = torch.exp(log_alpha - row_max)
        log_scale = row_max.squeeze(-1)
    else:
        if valid is not None:
            scores = scores.masked_fill(~valid, 0.0)
        alpha = readout.fn(scores)
        if valid is not None:
            alpha = alpha.masked_fill(~valid, 0.0)
        log_scale = None
    # a row of e^{log φ − c} holds its maximum e^0 = 1: only the other readouts' rows may lack mass
    return normalize(alpha, alpha.sum(dim=-1), normalizer, log_scale, may_lack_mass=log_readout is None)
