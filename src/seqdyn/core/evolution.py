"""Evolution matrices ``Λ_t = D_t (I − β_t w_t w_tᵀ)`` (or ``D_t − ũ_t w_tᵀ``) and the decayed products every backend
is made of.

Notation (head-major inside the backends): ``g`` is the log decay, ``[B, H, T]`` for a scalar
``D_t = exp(g_t)·I`` or ``[B, H, T, K]`` for a diagonal ``D_t = diag(exp(g_t))``; ``β`` ``[B, H, T]`` and
``w`` ``[B, H, T, K]`` give the Householder factor (Sieber et al. 2025 Lemma 4 a–c).  ``G_t = Σ_{s≤t} g_s`` is the
inclusive cumulative log decay, so ``D_i ⋯ D_{j+1} = diag(exp(G_i − G_j))``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

#: Largest number of float elements one block of pairwise decays may hold (bounds the quadratic reference's memory).
PAIRWISE_BLOCK_ELEMENTS = 1 << 24
#: The log decay a hard reset ``g = −∞`` (decay 0) is summed as: its factor ``e^{−10⁴}`` is as exactly 0 in every
#: dtype, and unlike ``−∞`` it leaves differences ``G_i − G_j`` of cumulative log decays defined (``−∞ + ∞`` is NaN).
HARD_RESET = -1e4


def apply_evolution(state: Tensor, transition: tuple, diagonal: bool) -> Tensor:
    """``Λ_t X = D_t (X − β_t w_t (w_tᵀ X))`` for one time step (Sieber et al. 2025 eq. 3b), or with ``written``
    ``ũ_t`` the diagonal-plus-low-rank ``Λ_t X = D_t X − ũ_t (w_tᵀ X)``.

    ``state`` is ``[B, H, K, X]`` (a linear state ``S`` with X = V, or a cache of transformed keys with X = N);
    ``transition`` is the step's ``(log_decay, beta, direction, written)``: ``log_decay`` ``[B, H]`` (scalar) or
    ``[B, H, K]`` (``diagonal``), ``beta`` ``[B, H]``, ``direction`` and ``written`` ``[B, H, K]`` (or ``None``).
    """
    log_decay, beta, direction, written = transition
    projection = None if beta is None else torch.einsum("bhk,bhkx->bhx", direction, state)
    if projection is not None and written is None:
        state = state - (beta[..., None] * direction).unsqueeze(-1) * projection.unsqueeze(-2)
    if log_decay is not None:
        factor = torch.exp(log_decay)
        state = state * (factor.unsqueeze(-1) if diagonal else factor[..., None, None])
    if written is not None:
        state = state - written.unsqueeze(-1) * projection.unsqueeze(-2)
    return state


def evolution_matrix(transition: tuple, diagonal: bool, size: int, like: Tensor) -> Tensor:
    """The matrices ``Λ_t`` ``[B, H, K, K]`` of one step, built by applying :func:`apply_evolution` to ``I``;
    ``transition`` is the step's ``(log_decay, beta, direction, written)``."""
    batch, heads = like.shape[:2]
    eye = torch.eye(size, dtype=like.dtype, device=like.device).expand(batch, heads, size, size)
    return apply_evolution(eye, transition, diagonal)


def decay_factor(log_factor: Tensor) -> Tensor:
    """``e^x``, with the factors below ``e^{20}`` times the smallest normal number of the dtype set to 0.

    Products with such factors are subnormal numbers, which CPUs multiply tens of times slower (a chunk of strong
    decays made the matrix products of the ``chunk`` backend several times slower); any sum they enter already
    holds a term ``e^{20}`` times the dtype's whole range larger (each row's own step has factor 1).
    """
    return torch.exp(log_factor.masked_fill(log_factor < subnormal_cutoff(log_factor.dtype), float("-inf")))


def subnormal_cutoff(dtype: torch.dtype) -> float:
    """The log factor below which :func:`decay_factor` gives 0: that of ``e^{20}`` times the dtype's smallest normal
    number."""
    return math.log(torch.finfo(dtype).tiny) + 20.0


def bounded_log_decay(log_decay: Tensor) -> Tensor:
    """``max(g, HARD_RESET)``: hard resets ``g = −∞`` as :data:`HARD_RESET`, the same decay 0 with finite sums.

    Its gradient is 0 at a hard reset, as that of ``e^g`` at ``g = −∞`` (the recurrent and scan backends).
    """
    return log_decay.clamp(min=HARD_RESET)


def cumulative_log_decay(log_decay: Tensor, dim: int = 2) -> Tensor:
    """``G_t = Σ_{s≤t} g_s`` in float64 (long sums of strong decays lose their differences in float32), hard resets
    bounded (:func:`bounded_log_decay`)."""
    return bounded_log_decay(log_decay.to(torch.float64)).cumsum(dim)


def running_log_maximum(log_impulse: Tensor, cumulative: Tensor, start: Tensor | float = 0.0, dim: int = 2) -> Tensor:
    """The running maximum of the log weights, ``m_t = max(g_t + m_{t−1}, ℓ_t)`` from ``m_{−1}`` = ``start``, in
    closed form ``m_t = G_t + max(m_{−1}, max_{j≤t} (ℓ_j − G_j))`` along ``dim`` for the impulses' log scales ``ℓ`` and
    the cumulative log decays ``G_t = Σ_{s≤t} g_s`` (xLSTM's stabilizer; RWKV-4's reference ``M``)."""
    running = (log_impulse - cumulative).cummax(dim).values
    return cumulative + (running.clamp(min=start) if isinstance(start, float) else torch.maximum(running, start))


def pairwise_gram(a: Tensor, b: Tensor, la: Tensor | None, lb: Tensor | None, valid: Tensor) -> Tensor:
    """``P_ij = Σ_k a_ik b_jk exp(la_ik − lb_jk)`` where ``valid[i, j]``, else 0, with every decay formed pairwise.

    ``a`` ``[..., Ta, K]``, ``b`` ``[..., Tb, K]``; ``la``/``lb`` are ``None`` (no decay), ``[..., T]`` (scalar)
    or ``[..., T, K]`` (diagonal) cumulative log decays.  Forming ``la_i − lb_j`` before the exponential keeps
    every factor ``≤ 1`` for decays (never ``e^{+G}·e^{−G}``), so the result is exact for any decay strength.
    Diagonal decays are processed in blocks of rows (recomputed in the backward pass) so that memory stays
    ``O(Ta·Tb)``.  Returns ``[..., Ta, Tb]`` in the dtype of ``a``.
    """
    if la is None:
        return (a @ b.transpose(-1, -2)).masked_fill(~valid, 0.0)
    if la.dim() == a.dim() - 1:
        exponent = (la.unsqueeze(-1) - lb.unsqueeze(-2)).masked_fill(~valid, float("-inf"))
        return (a @ b.transpose(-1, -2)) * decay_factor(exponent.to(a.dtype))
    rows, cols, width = a.shape[-2], b.shape[-2], a.shape[-1]
    block = max(1, PAIRWISE_BLOCK_ELEMENTS // max(1, math.prod(a.shape[:-2]) * cols * width))
    valid = valid.expand(rows, cols) if valid.dim() == 2 else valid
    pieces = []
    for start in range(0, rows, block):
        stop = min(rows, start + block)
        args = (a[..., start:stop, :], b, la[..., start:stop, :], lb, valid[..., start:stop, :])
        if torch.is_grad_enabled() and any(t.requires_grad for t in args[:4]):
            pieces.append(checkpoint(_diagonal_gram_block, *args, use_reentrant=False))
        else:
            pieces.append(_diagonal_gram_block(*args))
    return torch.cat(pieces, dim=-2)


def _diagonal_gram_block(a: Tensor, b: Tensor, la: Tensor, lb: Tensor, valid: Tensor) -> Tensor:
    exponent = (la.unsqueeze(-2) - lb.unsqueeze(-3)).to(a.dtype)  # [..., Ta, Tb, K], formed in float64
    decay = torch.exp(exponent.masked_fill(~valid.unsqueeze(-1), float("-inf")))
    return ((a.unsqueeze(-2) * decay) * b.unsqueeze(-3)).sum(-1)


def causal_mask(rows: int, cols: int, device: torch.device, strict: bool = False, offset: int = 0) -> Tensor:
    """Boolean ``[rows, cols]`` mask of the pairs ``j ≤ i + offset`` (``j < i + offset`` when ``strict``)."""
    return torch.ones(rows, cols, dtype=torch.bool, device=device).tril(offset - 1 if strict else offset)
