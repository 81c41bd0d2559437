"""Metrics on coefficient matrices ``A [B, H, T, T]`` (Sieber et al. 2025 §4.1, appendix A, appendix D).

Every mixer's output is ``y_i = Σ_{j≤i} A_ij v_j`` with the normalized coefficients ``A_ij = α_ij / η_i``
(Sieber et al. 2025 eqs. 2 and 4), returned by ``seqdyn.coefficients(q, k, ...)`` or by a mixer's ``coefficients(x)``:
zero above the diagonal (causal).  Only the causal entries ``j ≤ i`` enter the metrics below.

    near_zero_fraction(A, eps)      fraction of causal entries with |A_ij| < eps           (Principle 2, Fig. 1)
    large_fraction(A, eps)          fraction with |A_ij| ≥ eps; near_zero_ratio: their ratio   (appendix D, Fig. 7)
    zero_count_per_row(A, tol)      zeros of each row, at most K − 1 for φ = identity        (Corollary 2.2)
    mean_zero_count(A, tol)         their mean over the batch per head and row, zero rows left out   (Fig. 9)
    combination_class(A, tol)       convex / conical / affine / linear per row               (appendix A, Table 2)

Tolerances.  ``eps = 1e-3`` (:data:`NEAR_ZERO_EPS`) marks a coefficient as suppressed: it lies well below the
uniform weight ``1/T`` of a convex combination for every T up to 1000 (the paper's own ε was lost from the text
copy of Sieber et al. 2025).  Exact zeros (Corollary 2.2) and exact sums (Table 2) are judged at round-off level: a
float32 row cannot sum to 1 more closely than its round-off, so tolerances are never taken below
:func:`roundoff` of the dtype.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "COMBINATION_CLASSES",
    "NEAR_ZERO_EPS",
    "check_coefficients",
    "combination_class",
    "combination_class_shares",
    "large_fraction",
    "mean_zero_count",
    "near_zero_fraction",
    "near_zero_ratio",
    "roundoff",
    "zero_count_per_row",
]

#: Default threshold below which a coefficient counts as near zero (module docstring).
NEAR_ZERO_EPS = 1e-3

#: Default ``tol`` of :func:`combination_class` (raised to the dtype's :func:`roundoff` where that is larger).
COMBINATION_TOL = 1e-9

#: The linear-combination classes of Sieber et al. 2025 Table 2, most specific first: convex ⊂ conical, convex ⊂ affine.
COMBINATION_CLASSES = ("convex", "conical", "affine", "linear")

#: Units of the dtype's machine epsilon within which a computed coefficient counts as exactly zero.
ZERO_ULPS = 64


def roundoff(dtype: torch.dtype, terms: int = 1) -> float:
    """Round-off bound of a sum of ``terms`` O(1) numbers in ``dtype``: ``4 · max(terms, 16) · eps(dtype)``."""
    return 4.0 * max(int(terms), 16) * torch.finfo(dtype).eps


def check_coefficients(A: object, name: str = "A") -> Tensor:
    """Validate a causal coefficient tensor ``[B, H, T, T]``; returns it detached from autograd.

    Raises ``ValueError`` naming ``name`` for a non-tensor, a non-floating dtype, a rank other than 4, last two
    axes of different sizes, an empty sequence, NaN/inf entries, or entries above the diagonal (``j > i``) larger
    than round-off (``ZERO_ULPS · eps · max(1, max|A|)``).
    """
    if not isinstance(A, Tensor):
        raise ValueError(f"{name}: expected a tensor of coefficients [B, H, T, T], got {type(A).__name__}")
    if not A.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor [B, H, T, T], got dtype {A.dtype}")
    if A.dim() != 4:
        raise ValueError(f"{name}: expected 4 dimensions [B, H, T, T], got shape {list(A.shape)}")
    if A.shape[-1] != A.shape[-2]:
        raise ValueError(f"{name}: the last two axes must both be T (a square [T, T] per head), got {list(A.shape)}")
    if A.shape[-1] < 1 or A.numel() == 0:
        raise ValueError(f"{name}: empty coefficient tensor {list(A.shape)}")
    A = A.detach()
    if not torch.isfinite(A).all():
        raise ValueError(f"{name}: contains NaN or infinite entries")
    upper = torch.triu(A, diagonal=1).abs()
    limit = ZERO_ULPS * torch.finfo(A.dtype).eps * max(1.0, float(A.abs().max()))
    if float(upper.max()) > limit:
        index = tuple(int(i) for i in np.unravel_index(int(upper.argmax()), tuple(A.shape)))
        raise ValueError(
            f"{name}: not causal: entry {list(index)} = {float(A[index]):.3g} lies above the diagonal "
            "(j > i); coefficient matrices are zero there"
        )
    return A


def _check_threshold(name: str, value: object, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(float(value)):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if (positive and value <= 0) or value < 0:
        raise ValueError(f"{name}: expected a {'positive' if positive else 'non-negative'} number, got {value!r}")
    return float(value)


def _causal(A: Tensor) -> Tensor:
    """Boolean ``[T, T]`` mask of the causal pairs ``j ≤ i``."""
    length = A.shape[-1]
    return torch.ones(length, length, dtype=torch.bool, device=A.device).tril()


def _causal_count(A: Tensor) -> int:
    batch, heads, length, _ = A.shape
    return batch * heads * length * (length + 1) // 2


def near_zero_fraction(A: Tensor, eps: float = NEAR_ZERO_EPS) -> float:
    """Fraction of causal entries ``j ≤ i`` with ``|A_ij| < eps`` (Sieber et al. 2025 Principle 2, Fig. 1).

    The empirical counterpart of the readout's near-zero set (:func:`seqdyn.analysis.readout_near_zero_set`):
    how many coefficients a model actually suppresses.  ``A`` ``[B, H, T, T]`` causal; ``eps > 0``.
    """
    A = check_coefficients(A)
    eps = _check_threshold("eps", eps, positive=True)
    hits = ((A.abs() < eps) & _causal(A)).sum()
    return float(hits) / _causal_count(A)


def large_fraction(A: Tensor, eps: float = NEAR_ZERO_EPS) -> float:
    """Fraction of causal entries with ``|A_ij| ≥ eps`` (Sieber et al. 2025 appendix D.2, Fig. 7).

    With the same ``eps`` this is ``1 − near_zero_fraction(A, eps)``; a larger threshold (e.g. ``eps=0.5`` for
    normalized coefficients) counts the coefficients a model *selects*.
    """
    A = check_coefficients(A)
    eps = _check_threshold("eps", eps, positive=True)
    hits = ((A.abs() >= eps) & _causal(A)).sum()
    return float(hits) / _causal_count(A)


def near_zero_ratio(A: Tensor, eps: float = NEAR_ZERO_EPS, large: float | None = None) -> float:
    """``large_fraction(A, large) / near_zero_fraction(A, eps)`` (Sieber et al. 2025 appendix D.2, Fig. 7, log scale).

    ``large`` defaults to ``eps``.  Returns ``inf`` when no entry is near zero but some are large, ``nan`` when
    neither occurs.
    """
    near = near_zero_fraction(A, eps)
    big = large_fraction(A, eps if large is None else large)
    if near == 0.0:
        return float("inf") if big > 0 else float("nan")
    return big / near


def zero_count_per_row(A: Tensor, tol: float | None = None) -> Tensor:
    """Number of zero coefficients ``|A_ij| ≤ tol``, ``j ≤ i``, of every row: int64 ``[B, H, T]``.

    Sieber et al. 2025, Corollary 2.2: with the identity readout a nonzero query ``q_i`` can zero at most ``K − 1``
    coefficients whose transformed keys ``x_i^(j)`` are linearly independent (K: the head's key/state dimension);
    a row with more zeros has a zero query or linearly dependent (e.g. vanished) states.  ``tol`` is absolute;
    ``None`` means exact zero up to round-off *relative to the row*, ``|A_ij| ≤ ZERO_ULPS · eps(dtype) ·
    max_j |A_ij|``, so the count does not depend on the row's scale η_i (an all-zero row counts every entry).
    """
    A = check_coefficients(A)
    magnitude = A.abs()
    if tol is None:
        limit = ZERO_ULPS * torch.finfo(A.dtype).eps * magnitude.amax(dim=-1, keepdim=True)
        zeros = magnitude <= limit
    else:
        zeros = magnitude <= _check_threshold("tol", tol, positive=False)
    return (zeros & _causal(A)).sum(dim=-1)


def mean_zero_count(A: Tensor, tol: float | None = None) -> Tensor:
    """Sieber et al. 2025 Fig. 9's statistic: per head and row index i, the mean over the batch of
    :func:`zero_count_per_row`, float64 ``[H, T]``.  Rows without a nonzero coefficient (a zero query, outside
    Corollary 2.2) are left out of the mean; a (head, i) whose rows are all such is NaN."""
    counts = zero_count_per_row(A, tol).to(torch.float64)  # [B, H, T]
    empty = counts == _causal(A).sum(dim=-1).to(torch.float64)  # every causal entry zero
    kept = (~empty).sum(dim=0)
    total = torch.where(empty, 0.0, counts).sum(dim=0)
    return torch.where(kept > 0, total / kept.clamp(min=1), torch.nan)


def _class_index(A: Tensor, tol: float) -> Tensor:
    """Index into :data:`COMBINATION_CLASSES` of every row, int64 ``[B, H, T]``."""
    tol = max(_check_threshold("tol", tol, positive=False), roundoff(A.dtype, A.shape[-1]))
    causal = _causal(A)
    nonnegative = ((A >= -tol) | ~causal).all(dim=-1)
    sums = (A.to(torch.float64) * causal).sum(dim=-1)
    affine = (sums - 1.0).abs() <= tol
    index = torch.full(A.shape[:-1], 3, dtype=torch.int64, device=A.device)  # linear
    index[affine] = 2
    index[nonnegative] = 1
    index[nonnegative & affine] = 0
    return index


def combination_class(A: Tensor, tol: float = COMBINATION_TOL) -> np.ndarray:
    """The linear-combination class of every row ``i`` of ``A`` (Sieber et al. 2025 appendix A, Table 2).

    Returns a numpy array of strings ``[B, H, T]`` holding the most specific class of row ``(b, h, i)``:

    * ``"convex"``: ``A_ij ≥ 0`` and ``Σ_j A_ij = 1`` — output in the simplex of the values (softmax attention);
    * ``"conical"``: ``A_ij ≥ 0`` only — the positive orthant (normalized attention with positive features);
    * ``"affine"``: ``Σ_j A_ij = 1`` only — a hyperplane (GPAM);
    * ``"linear"``: neither (Mamba-2, DeltaNet).

    A convex row is also conical and affine; only ``"convex"`` is reported.  Both conditions hold up to ``tol``
    (absolute), which is raised to the round-off of a length-T sum in ``A``'s dtype (:func:`roundoff`).
    """
    A = check_coefficients(A)
    return np.array(COMBINATION_CLASSES)[_class_index(A, tol).cpu().numpy()]


def combination_class_shares(A: Tensor, tol: float = COMBINATION_TOL) -> dict[str, float]:
    """Fraction of rows (over B, H and T) in each class of :func:`combination_class`; the four shares sum to 1.

    Keys in the order of :data:`COMBINATION_CLASSES`, every class present (0.0 when no row has it).
    """
    A = check_coefficients(A)
    counts = torch.bincount(_class_index(A, tol).flatten(), minlength=len(COMBINATION_CLASSES))
    total = float(counts.sum())
    return {name: float(count) / total for name, count in zip(COMBINATION_CLASSES, counts.tolist())}
