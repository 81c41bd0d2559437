"""The chunked algorithm in plain autograd code: the reference beside the fast paths of this package.

The steps of the package docstring, for ``S_t = Λ_t S_{t−1} + k_t v_tᵀ`` and ``y_t = S_tᵀ q_t`` with
``Λ_t = D_t (I − β_t w_t w_tᵀ)``, ``D_t = diag(e^{g_t})`` (Mamba-2's ``ssd_minimal.py`` is the model).  A scalar
decay is a diagonal one with equal entries and no Householder factor is ``β = 0``, so one listing covers the
decayed chunks, the delta rule and the general Householder factor; a diagonal-plus-low-rank ``Λ_t = D_t − ũ_t w_tᵀ``
(``written`` ũ: RWKV-7, the generalized delta rule) differs only in the vector written, ``ũ_t`` for ``D_t β_t w_t``
— the WY form with the decay of its own step left out.  Inside a chunk ``γ_t = Σ_{s≤t} g_s`` and
``Γ = γ_{C−1}``; every product of decays is ``e^{γ_t − γ_j}`` over a pair in order.  Finite decays only (no hard
resets); for tests and reading, not for speed (``O(C²K)`` memory per chunk).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor | None = None,
    beta: Tensor | None = None,
    direction: Tensor | None = None,
    initial_state: Tensor | None = None,
    chunk_size: int = 64,
    written: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``(y [B, H, T, V], S_T [B, H, K, V])`` from ``q``, ``k`` ``[B, H, T, K]``, ``v`` ``[B, H, T, V]``, ``log_decay``
    ``g`` ``[B, H, T]`` or ``[B, H, T, K]``, β ``[B, H, T]``, ``direction`` w ``[B, H, T, K]`` (default ``k``,
    DeltaNet), ``S_0`` ``[B, H, K, V]`` (default 0) and ``written`` ũ ``[B, H, T, K]`` (with β = 1)."""
    batch, heads, length, key_dim = q.shape
    state = q.new_zeros(batch, heads, key_dim, v.shape[-1]) if initial_state is None else initial_state

    # 0. Chunks of C steps, the last one padded with steps that keep the state (k = 0, g = 0, β = 0).
    q, k, v, g, w, beta, written = _chunks(q, k, v, log_decay, beta, direction, chunk_size, written)

    # 1. The decays inside each chunk and the intra-chunk coefficients A[t,j] = q_tᵀ diag(e^{γ_t − γ_j}) k_j, j ≤ t.
    gamma = g.cumsum(dim=3)  # γ_t [B, H, N, C, K]
    before = gamma - g  # γ_{t−1}
    total = gamma[:, :, :, -1:]  # Γ [B, H, N, 1, K]
    a_k = _gram(q, k, gamma, gamma)

    # 2. The Householder factor writes D_j e_j with e_j = β_j w_j (the log factor γ_{j−1} of e_j below); the low-rank
    #    part writes e_j = ũ_j itself (log factor γ_j).  The corrections u_t = S_{t−1}ᵀ w_t solve
    #    (I + M_e) U = W̃ S + M_k V, with M_k[t,j] = w_tᵀ diag(e^{γ_{t−1} − γ_j}) k_j, M_e with e_j, j < t.
    e, written_log = (beta * w, before) if written is None else (written, gamma)
    a_e = _gram(q, e, gamma, written_log)  # q_tᵀ diag(e^{γ_t − γ_{j−1}}) e_j, j ≤ t (γ_j for ũ_j)
    m_k = _gram(w, k, before, gamma, strict=True)
    unit_lower = torch.eye(chunk_size, dtype=q.dtype, device=q.device) + _gram(w, e, before, written_log, strict=True)
    w_in = w * torch.exp(before)  # W̃_t = w_t ⊙ e^{γ_{t−1}}

    # 3. Between chunks, in order: y = A_k V + Q̃ S − A_e U and S ← e^{Γ} ⊙ S + K̃ᵀ V − Ẽᵀ U, with Q̃ = q ⊙ e^{γ},
    #    K̃ = k ⊙ e^{Γ − γ} and Ẽ = e ⊙ e^{Γ − γ_{t−1}} (e^{Γ − γ_t} for ũ).
    q_in, k_out, e_out = q * torch.exp(gamma), k * torch.exp(total - gamma), e * torch.exp(total - written_log)
    outputs = []
    for n in range(q.shape[2]):
        u = torch.linalg.solve_triangular(
            unit_lower[:, :, n], w_in[:, :, n] @ state + m_k[:, :, n] @ v[:, :, n], upper=False, unitriangular=True
        )  # [B, H, C, V]
        outputs.append(a_k[:, :, n] @ v[:, :, n] + q_in[:, :, n] @ state - a_e[:, :, n] @ u)
        state = (
            torch.exp(total[:, :, n]).transpose(-1, -2) * state
            + k_out[:, :, n].transpose(-1, -2) @ v[:, :, n]
            - e_out[:, :, n].transpose(-1, -2) @ u
        )
    return torch.stack(outputs, dim=2).flatten(2, 3)[:, :, :length], state  # [B, H, T, V]


def _chunks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor | None,
    beta: Tensor | None,
    direction: Tensor | None,
    chunk_size: int,
    written: Tensor | None = None,
) -> tuple[Tensor, ...]:
    """Step 0 of :func:`chunked`: ``q``, ``k``, ``v``, ``g`` (per key channel), ``w`` ``[B, H, N, C, ·]`` and β
    ``[B, H, N, C, 1]`` in chunks of C steps, the defaults filled in (no decay: g = 0; β = 0; w = k) and the last
    chunk padded with steps that keep the state (k = 0, g = 0, β = 0)."""
    batch, heads, length, key_dim = q.shape
    g = q.new_zeros(batch, heads, length, key_dim) if log_decay is None else log_decay
    g = g.unsqueeze(-1).expand(-1, -1, -1, key_dim) if g.dim() == 3 else g  # [B, H, T, K]
    w = k if direction is None else direction
    beta = q.new_zeros(batch, heads, length) if beta is None else beta
    pad = -length % chunk_size
    q, k, v, g, w = (
        F.pad(x, (0, 0, 0, pad)).unflatten(2, (-1, chunk_size))  # [B, H, N, C, ·]
        for x in (q, k, v, g, w)
    )
    beta = F.pad(beta, (0, pad)).unflatten(2, (-1, chunk_size)).unsqueeze(-1)  # [B, H, N, C, 1]
    if written is not None:
        written = F.pad(written, (0, 0, 0, pad)).unflatten(2, (-1, chunk_size))  # [B, H, N, C, K]
    return q, k, v, g, w, beta, written


def _gram(a: Tensor, b: Tensor, la: Tensor, lb: Tensor, strict: bool = False) -> Tensor:
    """``Σ_k a_tk b_jk e^{la_tk − lb_jk}`` for ``j ≤ t`` (``j < t`` when ``strict``) in each chunk, else 0:
    ``[B, H, N, C, C]`` from ``[B, H, N, C, K]`` operands."""
    size = a.shape[-2]
    keep = torch.ones(size, size, dtype=torch.bool, device=a.device).tril(-1 if strict else 0)
    exponent = la.unsqueeze(-2) - lb.unsqueeze(-3)  # [B, H, N, C, C, K]
    exponent = exponent.masked_fill(~keep.unsqueeze(-1), float("-inf"))
    return torch.einsum("...tk,...jk,...tjk->...tj", a, b, torch.exp(exponent))
