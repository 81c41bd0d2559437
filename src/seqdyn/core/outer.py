"""A decay applied outside the readout: ``α_ij = φ(q_iᵀ x_i^(j)) · exp(Σ_{l=j+1}^{i} h_l)``, and its reduction to the
one operator.

The Forgetting Transformer (`Lin et al. 2025 <https://arxiv.org/abs/2503.02130>`_, eq. 3) is softmax attention with a
data-dependent forget gate ``f_l = exp(h_l)`` outside the exponential, ``exp(q_iᵀk_j + Σ_{l=j+1}^{i} log f_l)``;
ALiBi is its data-independent case.  With the cumulative ``G_i = Σ_{l≤i} h_l``:

- the identity readout is linear, ``φ(c s) = c φ(s)``: the decay is a scalar decay inside, ``g ← g + h``;
- the exponential readout takes it as an additive bias, ``exp(s + G_i − G_j)``: two channels appended to queries
  and impulses, ``q'_i = [q_i, G_i, 1]`` and ``x'_j = [b_j k_j, 1, −G_j]``, on which Λ acts as the identity (decay
  0, Householder direction 0), give ``q'_iᵀ x'_i^(j) = q_iᵀ x_i^(j) + G_i − G_j`` on every backend.

A key cache then holds the impulses with those two channels ``[…, K + 2]``; at the end of a call its last channel is
shifted by the call's ``G_T`` so that the next call's ``G`` starts again from 0 (a state is relative to its end).
No other readout takes such a decay (``φ(s)·c`` is not ``φ`` of anything for them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from seqdyn.core.dynamics import Dynamics
from seqdyn.core.readouts import resolve_readout


@dataclass(frozen=True)
class OuterDecay:
    """The part of a decay outside the readout that outlives the reduction: ``G_T`` ``[B, H]``, by which a final
    key cache's last channel is shifted (None for the identity readout, whose state needs none)."""

    total: Tensor | None

    def coefficients(self, matrix: Tensor) -> Tensor:
        """The coefficient matrix of the reduced problem: the original's (the two channels only add the bias)."""
        return matrix

    def token_outputs(self, result: Any, with_state: bool) -> Any:
        """The operator's result with the final key cache (if any) made relative to its end."""
        if not with_state or self.total is None:
            return result
        y, (keys, values) = result
        end = self.total.to(keys.dtype)[:, :, None, None].expand(*keys.shape[:3], 1)  # [B, H, N, 1]
        return y, (keys + torch.cat([torch.zeros_like(keys[..., :-1]), end], dim=-1), values)  # −G_j + G_T


def outer_decayed(dynamics: Dynamics) -> tuple[Dynamics, OuterDecay] | None:
    """``dynamics`` with its ``outer_log_decay`` reduced to the one operator (module docstring), or None without
    one.  Raises ``ValueError`` naming the argument it cannot take."""
    h = dynamics.outer_log_decay
    if h is None:
        return None
    if not isinstance(h, Tensor) or h.dim() != 3 or tuple(h.shape[:2]) != tuple(dynamics.q.shape[:2]):
        raise ValueError(
            f"outer_log_decay: expected h as [B, T, H] with B, T = {list(dynamics.q.shape[:2])} of q, got "
            f"{list(getattr(h, 'shape', [])) or type(h).__name__}"
        )
    readout = resolve_readout(dynamics.readout)
    if readout.linear:
        return dynamics.replace(log_decay=_added(dynamics.log_decay, h), outer_log_decay=None), OuterDecay(None)
    if readout.name != "exp":
        raise ValueError(
            f"outer_log_decay: the {readout.name} readout does not take a decay outside it (φ(s)·c is φ of nothing "
            "for it); use readout='exp' (an additive bias, the Forgetting Transformer) or 'identity'"
        )
    for name in ("log_scale", "decay_rate"):
        if getattr(dynamics, name) is not None:
            raise ValueError(f"{name}: not taken beside outer_log_decay with the exp readout; fold it into the keys")
    return _augmented(dynamics, h)


def _added(log_decay: Tensor | None, h: Tensor) -> Tensor:
    """``g + h`` for a scalar or diagonal ``g`` (``h`` alone without one)."""
    if log_decay is None:
        return h
    return log_decay + (h.unsqueeze(-1) if log_decay.dim() == 4 else h)


def _augmented(dynamics: Dynamics, h: Tensor) -> tuple[Dynamics, OuterDecay]:
    """``q' = [q, G, 1]``, ``k' = [b k, 1, −G]``, ``b = 1``, Λ extended by the identity on the two channels."""
    q, k = dynamics.q, dynamics.k
    heads = max(q.shape[2], k.shape[2], h.shape[2])
    batch, length = q.shape[:2]
    G = torch.cumsum(h.to(torch.float64), dim=1).to(q.dtype).expand(batch, length, heads)  # [B, T, H]
    ones = G.new_ones(batch, length, heads, 1)
    expand = lambda x: x.expand(batch, length, heads, x.shape[-1])  # noqa: E731  shared heads, if any, made explicit
    scale = dynamics.scale
    scaled = k * (k.shape[-1] ** -0.5 if scale is None else scale.unsqueeze(-1) if isinstance(scale, Tensor) else scale)
    changes: dict[str, Any] = {
        "q": torch.cat([expand(q), G.unsqueeze(-1), ones], dim=-1),
        "k": torch.cat([expand(scaled), ones, -G.unsqueeze(-1)], dim=-1),
        "scale": 1.0,
        "outer_log_decay": None,
    }
    g = dynamics.log_decay
    if g is not None:  # the decay acts on the two channels as the identity: diagonal, 0 there
        g = g.unsqueeze(-1).expand(*g.shape, k.shape[-1]) if g.dim() == 3 else g
        changes["log_decay"] = torch.cat([g.expand(batch, length, heads, -1), g.new_zeros(batch, length, heads, 2)], -1)
    if dynamics.householder is not None:  # w = [w, 0, 0]: the factor leaves the two channels alone
        w = k if dynamics.householder_dir is None else dynamics.householder_dir
        changes["householder_dir"] = torch.cat([expand(w), w.new_zeros(batch, length, heads, 2)], dim=-1)
    for name in ("low_rank_write", "low_rank_read"):  # u = [u, 0, 0]: the low-rank part leaves them alone too
        if (x := getattr(dynamics, name)) is not None:
            changes[name] = torch.cat([expand(x), x.new_zeros(batch, length, heads, 2)], dim=-1)
    return dynamics.replace(**changes), OuterDecay(G[:, -1])
