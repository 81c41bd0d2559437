"""The ``recurrent`` backend: the coefficient dynamics step by step, the streaming form of every mixer.

Identity readout (Sieber et al. 2025 Lemma 1): a finite state ``S_t = Λ_t S_{t-1} + b_t k_t v_tᵀ`` ``[K, V]``
and ``y_t = S_tᵀ q_t``.  Any other readout has no finite state: the state is the cache of transformed keys
``x_t^(j) = Λ_t x_{t-1}^(j)`` of every past ``j`` with their values (Sieber et al. 2025 eq. 3), and
``y_t = Σ_j φ(q_tᵀ x_t^(j)) v_j / η_t`` — a KV cache that grows with t.  ``O(T·K·V)`` time in T Python steps.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdyn.core.evolution import apply_evolution
from seqdyn.core.problem import Problem
from seqdyn.core.readouts import normalized_coefficients

NAME = "recurrent"


def unsupported(problem: Problem) -> str | None:
    """Every combination has a step-by-step form (a key cache for nonlinear readouts)."""
    return None


def steps_of(*tensors: Tensor | None) -> list[tuple]:
    """The per-step slices ``x[:, :, t]`` of head-major tensors (``None`` stays ``None``), as one tuple per step.

    One ``unbind`` per tensor: its backward stacks the steps' gradients once, where indexing step t would add a
    zero-filled gradient of the whole tensor for every step (quadratic in T).
    """
    length = next(x.shape[2] for x in tensors if x is not None)
    slices = [x.unbind(2) if x is not None else (None,) * length for x in tensors]
    return list(zip(*slices))


def state_step(state: Tensor, key: Tensor, value: Tensor, transition: tuple, diagonal: bool) -> Tensor:
    """``S_t = Λ_t S_{t-1} + k_t v_tᵀ`` for one step; ``state`` ``[B, H, K, V]``, ``key`` ``[B, H, K]`` (with b),
    ``transition`` the step's ``(log_decay, beta, direction, written)`` (:func:`apply_evolution`)."""
    evolved = apply_evolution(state, transition, diagonal)
    return evolved + key.unsqueeze(-1) * value.unsqueeze(-2)


def linear(problem: Problem, want_state: bool) -> tuple[Tensor, Tensor]:
    """Run the linear recurrence over the sequence; returns ``y`` ``[B, H, T, V]`` and ``S_T``."""
    problem = problem.with_scale_applied()
    batch, heads, length, key_dim, value_dim = problem.shape
    state = problem.initial_state
    if state is None:
        state = problem.v.new_zeros(batch, heads, key_dim, value_dim)
    outputs = []
    for query, key, value, *transition in steps_of(problem.q, problem.k, problem.v, *problem.transition):
        state = state_step(state, key, value, transition, problem.diagonal)
        outputs.append(torch.einsum("bhk,bhkv->bhv", query, state))
    return torch.stack(outputs, dim=2), state


def nonlinear(problem: Problem, want_state: bool):
    """Run the key-cache recurrence; the state is ``(keys [B, H, N, K], values [B, H, N, V])``."""
    batch, heads, length, key_dim, value_dim = problem.shape
    cache = problem.initial_state
    if cache is None:
        cache = (problem.k.new_zeros(batch, heads, 0, key_dim), problem.v.new_zeros(batch, heads, 0, value_dim))
    prefix = cache[0].shape[2]
    values = torch.cat([cache[1], problem.v], dim=2)
    normalizer = problem.normalizer
    row_normalizers = (
        [row.unsqueeze(2) for row in normalizer.unbind(2)] if isinstance(normalizer, Tensor) else [normalizer] * length
    )
    static = problem.log_decay is None and problem.beta is None
    if static:  # Λ = I: the cache never changes, so every step reads a prefix of one key tensor
        keys = torch.cat([cache[0], problem.k], dim=2).transpose(-1, -2)
    else:
        keys = cache[0].transpose(-1, -2)  # [B, H, K, N]
    outputs = []
    steps = steps_of(problem.q, problem.k, *problem.transition)
    for t, (query, key, *transition) in enumerate(steps):
        size = prefix + t + 1
        if static:
            current = keys[..., :size]
        else:
            current = apply_evolution(keys, transition, problem.diagonal)
            keys = current = torch.cat([current, key.unsqueeze(-1)], dim=-1)
        scores = torch.einsum("bhk,bhkn->bhn", query, current).unsqueeze(-2)
        coefficients = normalized_coefficients(scores, None, problem.readout, row_normalizers[t])
        outputs.append((coefficients @ values[:, :, :size]).squeeze(-2))
    final = (keys.transpose(-1, -2), values) if want_state else None
    return torch.stack(outputs, dim=2), final
