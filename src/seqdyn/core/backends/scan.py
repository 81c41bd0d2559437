"""The ``scan`` backend: a parallel associative scan over the pairs ``(Λ_t, b_t k_t v_tᵀ)``.

The states of the identity readout satisfy ``S_t = Λ_t S_{t-1} + X_t`` with ``X_t = b_t k_t v_tᵀ``; the pairs
compose associatively, ``(Λ_2, X_2) ∘ (Λ_1, X_1) = (Λ_2 Λ_1, Λ_2 X_1 + X_2)``, so all prefixes follow in
``O(log T)`` parallel depth (textbook seed 004, S5; Blelloch 1990).  Λ must be scalar or diagonal (a
Householder factor would make every element a ``[K, K]`` matrix).  ``O(T·K·V)`` memory.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdyn.core.problem import Problem

NAME = "scan"


def unsupported(problem: Problem) -> str | None:
    if not problem.readout.linear:
        return f"readout={problem.readout.name!r} has no finite state to scan; scan needs readout='identity'"
    if problem.householder:
        return "householder is not scalar or diagonal; scan needs Λ without a Householder factor"
    return None


def associative_scan(log_decay: Tensor, inputs: Tensor) -> Tensor:
    """All prefixes ``S_t = exp(g_t) ⊙ S_{t-1} + X_t`` (``S_{-1} = 0``) along dim 2 by recursive pairing.

    ``log_decay`` broadcasts against ``inputs`` ``[B, H, T, K, V]`` (``[B, H, T, 1, 1]`` or ``[B, H, T, K, 1]``).
    Pairs ``(2i, 2i+1)`` are combined, the half-length sequence is scanned, and the even positions are filled in.
    """
    length = inputs.shape[2]
    if length == 1:
        return inputs
    half = length // 2
    left_g, right_g = log_decay[:, :, 0:2 * half:2], log_decay[:, :, 1:2 * half:2]
    left_x, right_x = inputs[:, :, 0:2 * half:2], inputs[:, :, 1:2 * half:2]
    odd = associative_scan(left_g + right_g, torch.exp(right_g) * left_x + right_x)  # prefixes at 1, 3, 5, ...
    even_rest = torch.exp(log_decay[:, :, 2::2]) * odd[:, :, :(length - 1) // 2] + inputs[:, :, 2::2]
    even = torch.cat([inputs[:, :, :1], even_rest], dim=2)  # prefixes at 0, 2, 4, ...
    paired = torch.stack([even[:, :, :half], odd], dim=3).flatten(2, 3)
    return torch.cat([paired, even[:, :, half:]], dim=2)


def linear(problem: Problem, want_state: bool) -> tuple[Tensor, Tensor]:
    """Scan the outer products; ``y_t = S_tᵀ q_t``.  The initial state is folded into the first element."""
    inputs = problem.k.unsqueeze(-1) * problem.v.unsqueeze(-2)  # [B, H, T, K, V]
    g = problem.log_decay
    if g is not None:
        g = g.unsqueeze(-1) if problem.diagonal else g[..., None, None]
    state = problem.initial_state
    if state is not None:
        first = state if g is None else torch.exp(g[:, :, 0]) * state
        inputs = torch.cat([(inputs[:, :, 0] + first).unsqueeze(2), inputs[:, :, 1:]], dim=2)
    states = inputs.cumsum(dim=2) if g is None else associative_scan(g, inputs)
    return torch.einsum("bhtk,bhtkv->bhtv", problem.q, states), states[:, :, -1]
