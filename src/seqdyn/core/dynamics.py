"""``Dynamics``: the one description of a coefficient-dynamics problem (Sieber et al. 2025 eqs. 2–4).

For each head, every key position ``j`` starts an autonomous linear system with an impulse input::

    x_j^(j) = b_j k_j                                     impulse at time j (scale b)
    x_i^(j) = Λ_i x_{i-1}^(j),   i > j                    Λ_t = D_t (I − β_t w_t w_tᵀ),  D_t = exp(g_t)
                                                          (or Λ_t = D_t + u_t z_tᵀ, diagonal plus low rank)
    α_ij    = φ(q_iᵀ x_i^(j))                              readout φ
    y_i     = (1/η_i) Σ_{j≤i} α_ij v_j                     normalizer η

Every entry point takes or builds a :class:`Dynamics`: :func:`~seqdyn.coefficient_dynamics`,
:func:`~seqdyn.coefficients`, :func:`~seqdyn.coefficient_dynamics_step`, :func:`~seqdyn.dsf` and the mixers
(``core_inputs``).  Their keyword arguments are its fields; :func:`as_dynamics` builds it from them once.
The DSF view of the same system (Sieber et al. 2024 §3): ``h = vec(S)/η``, ``Λ_i^DSF = (η_{i-1}/η_i)(Λ_i ⊗ I_V)``,
``B_i = (b_i/η_i)(k_i ⊗ I_V)``, ``C_i = q_iᵀ ⊗ I_V``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torch import Tensor

__all__ = ["Dynamics", "as_dynamics"]


@dataclass(frozen=True)
class Dynamics:
    """The arguments of the one operator: queries, keys, values and the maps φ, Λ, b, η of the coefficient dynamics.

    Attributes:
        q, k: ``[B, T, H, K]`` queries and keys; v: ``[B, T, H, V]`` values (``None`` where only coefficients
            are asked for).  A head axis of size 1 is shared by all heads.
        readout: φ — ``"identity"``, ``"exp"``, ``"softplus"``, ``"relu"``, ``"sigmoid"``, ``"elu1"``,
            ``"square"`` or a callable on score tensors.
        log_decay: ``g`` with ``D_t = exp(g_t)``: ``None`` (Λ = I), ``[B, T, H]`` (scalar) or ``[B, T, H, K]``
            (diagonal).  ``g > 0`` (unstable Λ) is allowed; ``g = −∞`` is a hard reset (decay 0, gradient 0).
        householder: β ``[B, T, H]``: ``Λ_t ← D_t (I − β_t w_t w_tᵀ)``; householder_dir: w ``[B, T, H, K]``
            (default ``w = k``, DeltaNet).
        scale: b — ``None`` (``K**-0.5``, Principle 5), a float or ``[B, T, H]``.
        normalizer: η — ``"none"``, ``"sum"`` (Σ_j α_ij), ``"abs_max1"`` (max(|Σ_j α_ij|, 1)) or ``[B, T, H]``.
            With ``"sum"`` a row without mass (``Σ_j α_ij = 0``: relu rows without a positive score, ``square``
            at zero scores, the identity with ``q_iᵀ z_i = 0``) has coefficients 0 and output 0, with finite
            gradients.
        log_scale: ``log b`` ``[B, T, H]`` instead of ``scale``, for scales that exceed the float range (mLSTM's
            input gate ``exp(ĩ)``); with the identity readout it is folded into the stabilization, never
            exponentiated alone.
        decay_rate: ``A`` ``[H, K]`` (or ``[1, K]``) of a factored diagonal decay ``g_t = Δ_t ⊗ A`` with the steps
            ``Δ`` given as a scalar ``log_decay`` ``[B, T, H]`` (Mamba-1's discretization, Sieber et al. 2024 eq. 4).
            The same as passing ``g`` ``[B, T, H, K]``, but the ``scan`` backend never forms ``g``.
        Several Householder factors per step (Gated DeltaProduct): householder β ``[B, T, H, n]`` with k, v,
            householder_dir ``[B, T, H, n, K/V]`` and a tensor scale or log_scale ``[B, T, H, n]``, one per factor:
            ``Λ_t = D_t Π_{s=n}^{1} (I − β_ts w_ts w_tsᵀ)``, each factor's impulse ``b_ts k_ts`` written after it
            (:mod:`seqdyn.core.products`).
        outer_log_decay: h ``[B, T, H]``, a decay outside the readout: ``α_ij ← α_ij · exp(Σ_{l=j+1}^{i} h_l)`` — an
            additive bias inside softmax (the Forgetting Transformer's forget gate, ALiBi), a scalar decay for the
            identity readout; the ``exp`` and ``identity`` readouts take it (:mod:`seqdyn.core.outer`).
        decay_first: apply a diagonal decay before the factors, ``Λ_t = (Π_s (I − β_ts w_ts w_tsᵀ)) D_t``
            (Kimi Delta Attention's order); ``False``: the operator's ``D_t`` after the first factor.  A scalar
            decay commutes with the factors, so the flag changes nothing there.
        low_rank_write, low_rank_read: u, z ``[B, T, H, K]`` of a diagonal-plus-low-rank transition
            ``Λ_t = D_t + u_t z_tᵀ`` (in place of the Householder factor): the state read by z before the step,
            written along u — RWKV-7 and the generalized delta rule (:mod:`seqdyn.core.low_rank`).  Both orders of
            decay and update are cases: ``D(I − βwwᵀ)`` is ``u = −β D w, z = w``, ``(I − βkkᵀ) D`` is
            ``u = −β k, z = D k``.
        bonus: u ``[H, K]`` or ``[B, T, H, K]``, a bonus for the current token: the output reads the state before
            the token's step, ``y_t = q_tᵀ (S_{t−1} + Diag(u_t) b_t k_t v_tᵀ)`` (RWKV-5/6; identity readout, no
            normalizer; :mod:`seqdyn.core.bonus`).
        normalizer_log_offset: ``log ε_t`` ``[B, T, H]``, a term added to a named normalizer:
            ``η_t = max(|Σ_j α_tj|, 1) + ε_t`` (``"abs_max1"``) or ``Σ_j α_tj + ε_t`` (``"sum"``), identity readout —
            xLSTM's ``ε·e^{m_t}`` with its stabilizer ``m_t`` (Beck et al. 2025, xLSTM 7B), which a mixer computes
            from its gates; given in log space because ``e^{m_t}`` may exceed the float range.

    Nothing is checked here: :func:`seqdyn.core.problem.prepare` validates a description (each argument named
    in its error) and brings it into the backends' layout.
    """

    q: Tensor
    k: Tensor
    v: Tensor | None = None
    readout: Any = "identity"
    log_decay: Tensor | None = None
    householder: Tensor | None = None
    householder_dir: Tensor | None = None
    scale: Any = None
    normalizer: Any = "none"
    log_scale: Tensor | None = None
    decay_rate: Tensor | None = None
    decay_first: bool = False
    outer_log_decay: Tensor | None = None
    low_rank_write: Tensor | None = None
    low_rank_read: Tensor | None = None
    bonus: Tensor | None = None
    normalizer_log_offset: Tensor | None = None

    def options(self) -> dict[str, Any]:
        """Every field except q, k, v: the keywords of :func:`~seqdyn.coefficient_dynamics` beside them."""
        return {name: getattr(self, name) for name in OPTIONS}

    def replace(self, **changes: Any) -> "Dynamics":
        """The same description with ``changes`` (``dataclasses.replace`` without its per-field bookkeeping: a
        short sequence's call is mostly such overhead)."""
        unknown = changes.keys() - FIELDS
        if unknown:
            raise TypeError(f"Dynamics has no field {', '.join(sorted(unknown))}")
        return copy_with(self, changes)


#: the fields of :class:`Dynamics` beside q, k, v, with their defaults
OPTIONS = {field.name: field.default for field in dataclasses.fields(Dynamics) if field.name not in ("q", "k", "v")}
FIELDS = frozenset(("q", "k", "v", *OPTIONS))


def copy_with(instance: Any, changes: dict[str, Any]) -> Any:
    """A shallow copy of a (frozen) dataclass ``instance`` with ``changes`` set, without ``dataclasses.replace``'s
    per-field bookkeeping and ``__init__``: a short sequence's operator call is mostly such overhead."""
    copy = object.__new__(type(instance))
    copy.__dict__.update(instance.__dict__, **changes)
    return copy


def dynamics_of_call(arguments: dict[str, Any]) -> Dynamics:
    """The :class:`Dynamics` of a public function's ``arguments`` (its ``locals()`` before it binds another name):
    ``q``, ``k``, ``v`` (``None`` where it takes none) and the keywords named as the fields of a description, or
    ``q`` itself when it is a ``Dynamics`` given alone."""
    options = {name: arguments[name] for name in OPTIONS}
    return as_dynamics(arguments["q"], arguments["k"], arguments.get("v"), **options)


def as_dynamics(q: Tensor | Dynamics, k: Tensor | None, v: Tensor | None, **options: Any) -> Dynamics:
    """The :class:`Dynamics` of a keyword call: ``Dynamics(q, k, v, **options)``, or ``q`` itself when it is one
    (then neither k, v nor an option may be given beside it)."""
    if not isinstance(q, Dynamics):
        return Dynamics(q, k, v, **options)
    beside = [
        name
        for name, value in (("k", k), ("v", v), *options.items())
        if value is not OPTIONS.get(name) and not (isinstance(value, str) and value == OPTIONS.get(name))
    ]  # a default, or a name equal to it
    if beside:
        raise ValueError(
            f"{', '.join(beside)}: given beside a Dynamics, which holds them; set them in it (Dynamics.replace) instead"
        )
    return q
