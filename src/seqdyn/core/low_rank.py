"""The diagonal-plus-low-rank transition ``Λ_t = D_t + u_t z_tᵀ``: RWKV-7, the generalized delta rule, and both
orders of decay and delta update as its cases.

RWKV-7 (`Peng et al. 2025 <https://arxiv.org/abs/2503.14456>`_, its WKV state update) and flash-linear-attention's
generalized delta rule (``dplr``) evolve the state with a diagonal decay plus a rank-one map, both applied to the
previous state::

    S_t = (D_t + u_t z_tᵀ) S_{t−1} + b_t k_t v_tᵀ

RWKV-7 writes it for the transposed state, ``S_{t−1}(diag(w_t) − κ̂_tᵀ (a_t ⊙ κ̂_t)) + v_tᵀ k_t``: here
``D = diag(w)``, ``u = −a ⊙ κ̂`` (the in-context learning rate a) and ``z = κ̂`` (the normalized removal key).

The operator takes it as ``low_rank_write`` u and ``low_rank_read`` z (:class:`~seqdyn.core.dynamics.Dynamics`), in
place of the Householder factor.  Every backend computes it with the machinery of that factor: ``D_t − ũ_t z_tᵀ``
(``ũ = −u``) is the factor ``D_t (I − β_t w_t w_tᵀ) = D_t − (D_t β_t w_t) w_tᵀ`` with the vector written, ``ũ_t``,
no longer decayed by its own step — so the WY form of the ``chunk`` backend (the UT transform of Yang et al. 2024)
holds with the written vector's log factor ``γ_t`` in place of ``γ_{t−1}``, never with ``D⁻¹`` formed
(:mod:`seqdyn.core.backends.chunk.minimal` lists it).

The two orders of a decay and a delta update are cases (:func:`householder_as_low_rank`)::

    D_t (I − β_t w_t w_tᵀ) = D_t + (−β_t D_t w_t) w_tᵀ          Gated DeltaNet's order
    (I − β_t k_t k_tᵀ) D_t = D_t + (−β_t k_t) (D_t k_t)ᵀ          Kimi Delta Attention's (Kimi Team 2025, eq. 1)

so Kimi Delta Attention is one operator step per token here, where the decay before the factor as its own step
(:mod:`seqdyn.core.products`) takes two.
"""

from __future__ import annotations

import torch
from torch import Tensor


def householder_as_low_rank(
    beta: Tensor, direction: Tensor, log_decay: Tensor | None = None, decay_first: bool = False
) -> tuple[Tensor, Tensor]:
    """``(u, z)`` ``[B, T, H, K]`` with ``D_t + u_t z_tᵀ`` equal to ``D_t (I − β_t w_t w_tᵀ)``, or to
    ``(I − β_t w_t w_tᵀ) D_t`` when ``decay_first``; β ``[B, T, H]``, w ``[B, T, H, K]``, ``log_decay`` g with
    ``D_t = exp(g_t)`` ``[B, T, H]`` (scalar) or ``[B, T, H, K]`` (diagonal), ``None`` for ``D = I``."""
    if beta.dim() != 3 or direction.dim() != 4:
        raise ValueError(
            f"householder_as_low_rank: β [B, T, H] and w [B, T, H, K] of one factor per step; got shapes "
            f"{list(beta.shape)} and {list(direction.shape)}"
        )
    step = -beta.unsqueeze(-1) * direction  # −β_t w_t
    if log_decay is None:
        return step, direction
    decay = torch.exp(log_decay if log_decay.dim() == 4 else log_decay.unsqueeze(-1))
    return (step, decay * direction) if decay_first else (decay * step, direction)
