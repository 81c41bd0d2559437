"""``coefficient_dynamics``: the one operator every mixer reduces to (Sieber et al. 2025 eqs. 2–4; Sieber et al. 2024
eq. 11).

For each head, every key position ``j`` starts an autonomous linear system with an impulse input::

    x_j^(j) = b_j k_j,   x_i^(j) = Λ_i x_{i-1}^(j)  (i > j),   α_ij = φ(q_iᵀ x_i^(j)),   y_i = (1/η_i) Σ_{j≤i} α_ij v_j

with ``Λ_t = D_t (I − β_t w_t w_tᵀ)`` (:class:`~seqdyn.core.dynamics.Dynamics` describes the arguments).  This
module builds that description from the keywords, chooses a backend, and does the
work shared by all backends: for the identity readout the normalizer state ``z`` rides along as an extra value
column of ones (``Σ_j α_ij = q_iᵀ z_i``), and unstable decays (g > 0) are rescaled so nothing overflows where
the exact result is finite.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from seqdyn.core import choice, stacking
from seqdyn.core.autotune import BackendChoice
from seqdyn.core.backends import quadratic as quadratic_backend
from seqdyn.core.bonus import Bonus, bonus_reduced
from seqdyn.core.choice import BACKENDS
from seqdyn.core.dynamics import Dynamics, as_dynamics, dynamics_of_call
from seqdyn.core.evolution import causal_mask, cumulative_log_decay, running_log_maximum
from seqdyn.core.outer import OuterDecay, outer_decayed
from seqdyn.core.packing import Packing, dynamics_side_by_side, packing_of, reset_at_starts, timed_fields
from seqdyn.core.problem import Problem, prepare
from seqdyn.core.products import SubSteps, expanded, sub_steps
from seqdyn.core.readouts import NORMALIZERS, normalize, normalized_coefficients, resolve_readout

__all__ = [
    "BACKENDS",
    "Dynamics",
    "BackendChoice",
    "NORMALIZERS",
    "coefficient_dynamics",
    "coefficient_dynamics_step",
    "coefficients",
    "select_backend",
]


def coefficient_dynamics(
    q: Tensor | Dynamics,
    k: Tensor | None = None,
    v: Tensor | None = None,
    readout: Any = "identity",
    log_decay: Tensor | None = None,
    householder: Tensor | None = None,
    householder_dir: Tensor | None = None,
    scale: Any = None,
    normalizer: Any = "none",
    initial_state: Any = None,
    output_final_state: bool = False,
    backend: str = "auto",
    chunk_size: int | None = None,
    log_scale: Tensor | None = None,
    decay_rate: Tensor | None = None,
    cu_seqlens: Tensor | Packing | None = None,
    decay_first: bool = False,
    outer_log_decay: Tensor | None = None,
    low_rank_write: Tensor | None = None,
    low_rank_read: Tensor | None = None,
    bonus: Tensor | None = None,
    normalizer_log_offset: Tensor | None = None,
):
    """Outputs ``y_i = (1/η_i) Σ_{j≤i} φ(q_iᵀ Λ_i ⋯ Λ_{j+1} b_j k_j) v_j`` (Sieber et al. 2025 eqs. 2 and 4).

    Args:
        q, k, v, readout, log_decay, householder, householder_dir, scale, normalizer, log_scale, decay_rate,
            decay_first, outer_log_decay, low_rank_write, low_rank_read, bonus, normalizer_log_offset: Dynamics fields.
        initial_state: the state at time −1 (see ``output_final_state``); ``None`` is zero / empty.
        output_final_state: also return the final state: ``S [B, H, K, V]`` for the identity readout,
            ``(S, z [B, H, K])`` with ``"sum"``/``"abs_max1"``, and the key cache
            ``(keys [B, H, N, K], values [B, H, N, V])`` of transformed keys for any other readout.
        backend: ``"quadratic"``, ``"recurrent"``, ``"chunk"``, ``"scan"`` or ``"auto"``.
        chunk_size: chunk length C of the ``chunk`` backend (default 64).
        cu_seqlens: int offsets ``[N + 1]`` of ``N`` sequences packed along time in a batch of one, or their
            :class:`~seqdyn.core.packing.Packing`: each is computed alone; states are per sequence (``[N, …]``, or for
            a key cache a list of ``N``).  Without states, the identity readout runs the ``T`` packed steps as one
            sequence with a hard reset at each start (``chunk``: scalar or no decay; ``scan``).

    Returns ``y`` ``[B, T, H, V]`` in the dtype of ``v``, or ``(y, final_state)``; raises ``ValueError`` naming the
    argument, what was given and what is allowed.
    """
    states = initial_state is not None or bool(output_final_state)
    dynamics, cu_seqlens, plan = _sub_stepped(dynamics_of_call(locals()), cu_seqlens, states, initial_state)
    if cu_seqlens is not None:
        result = _packed_outputs(dynamics, cu_seqlens, initial_state, output_final_state, backend, chunk_size)
    else:
        result = _outputs(dynamics, initial_state, output_final_state, backend, chunk_size)
    return result if plan is None else plan.token_outputs(result, output_final_state)


def _sub_stepped(
    dynamics: Dynamics, cu_seqlens: Any, states: bool = False, initial_state: Any = None
) -> tuple[Dynamics, Any, SubSteps | OuterDecay | Bonus | None]:
    """``(dynamics, cu_seqlens, plan)`` as the operator computes them: a current-token bonus as shifted queries
    (:mod:`seqdyn.core.bonus`, which reads ``initial_state`` at the starts); a decay outside the readout reduced to
    the operator (:mod:`seqdyn.core.outer`); a description with several Householder factors per step or a diagonal
    decay before its factor as its sub-steps (:mod:`seqdyn.core.products`), the packing's offsets with them; any
    other unchanged (``plan`` None).  ``plan.token_outputs`` maps the operator's result back."""
    bonus = bonus_reduced(dynamics, cu_seqlens, initial_state)
    if bonus is not None:
        return bonus[0], cu_seqlens, bonus[1]
    outer = outer_decayed(dynamics)
    if outer is not None:
        if sub_steps(outer[0]) is not None:
            raise ValueError("outer_log_decay: not taken with several Householder factors per step or decay_first")
        if states and cu_seqlens is not None and outer[1].total is not None:
            raise ValueError(
                "outer_log_decay: with the exp readout and cu_seqlens, states are not taken; call each sequence "
                "alone to pass or return its key cache"
            )
        return outer[0], cu_seqlens, outer[1]
    plan = sub_steps(dynamics)
    if plan is None:
        return dynamics, cu_seqlens, None
    if cu_seqlens is not None:
        offsets = plan.offsets(packing_of(dynamics, cu_seqlens).offsets)
        cu_seqlens = Packing.of_lengths(offsets, dynamics.q.device)
    return expanded(dynamics, plan), cu_seqlens, plan


def _outputs(dynamics: Dynamics, initial_state: Any, output_final_state: bool, backend: str, chunk_size: int | None):
    """:func:`coefficient_dynamics` of a :class:`Dynamics`."""
    problem = prepare(dynamics, initial_state=initial_state, chunk_size=chunk_size, factored=True)
    module, _ = choice.backend_for(problem, backend, _computed, bool(output_final_state))
    out, state = _computed(problem, module, bool(output_final_state))
    return (out, state) if output_final_state else out


#: the backends that compute packed sequences as one with resets (:func:`reset_at_starts`) in ``O(T)``; ``quadratic``
#: and ``recurrent`` take them side by side (``O(N·L²)``, ``L`` steps), as does ``chunk`` for diagonal decays,
#: whose chunks a reset's range of log decays would cut to single steps (:func:`~.chunking.safe_chunk_size`)
RESETS_SERVE = ("chunk", "scan")


def _resets_suffice(dynamics: Dynamics, initial_state: Any, output_final_state: bool) -> bool:
    """Whether :func:`reset_at_starts` computes the packed batch: the identity readout, no state in or out (a
    state per sequence needs the sequences side by side), and no factored decay (``Δ ⊗ A`` cannot be −∞ but by
    forming ``g``)."""
    return (
        resolve_readout(dynamics.readout).linear
        and initial_state is None
        and not output_final_state
        and dynamics.decay_rate is None
    )


def _packed_outputs(
    dynamics: Dynamics,
    cu_seqlens: Any,
    initial_state: Any,
    output_final_state: bool,
    backend: str,
    chunk_size: int | None,
):
    """:func:`coefficient_dynamics` of a packed batch: with the identity readout and no state, one sequence with
    hard resets at the starts (:func:`reset_at_starts`); otherwise the sequences as a padded batch ``[N, L, …]``
    in one call (padded steps are identity steps, so outputs and linear states are each sequence's own); a key
    cache, whose size is each sequence's length, one sequence at a time."""
    packing = packing_of(dynamics, cu_seqlens)
    if _resets_suffice(dynamics, initial_state, output_final_state) and backend in ("auto", *RESETS_SERVE):
        problem = prepare(reset_at_starts(dynamics, packing), chunk_size=chunk_size, factored=True)
        module, _ = choice.backend_for(problem, backend, _computed, False)
        if module.NAME in RESETS_SERVE and not (module.NAME == "chunk" and problem.diagonal):
            return _computed(problem, module, False)[0]
        backend = module.NAME  # what auto chose (select_backend's answer), on the sequences side by side
    if resolve_readout(dynamics.readout).linear or (initial_state is None and not output_final_state):
        result = _outputs(
            dynamics_side_by_side(dynamics, packing), initial_state, output_final_state, backend, chunk_size
        )
        y, state = result if output_final_state else (result, None)
        return (packing.in_place(y), state) if output_final_state else packing.in_place(y)
    if initial_state is not None and (
        not isinstance(initial_state, (list, tuple)) or len(initial_state) != packing.count
    ):
        raise ValueError(
            f"initial_state: with cu_seqlens and the {resolve_readout(dynamics.readout).name} readout, "
            f"a list of {packing.count} key caches (one per sequence, None for an empty one)"
        )
    outputs, finals = [], []
    for index, (start, end) in enumerate(zip(packing.offsets, packing.offsets[1:])):
        one = dynamics.replace(**{name: value[:, start:end] for name, value in timed_fields(dynamics).items()})
        state = None if initial_state is None else initial_state[index]
        y, final = _outputs(one, state, True, backend, chunk_size)
        outputs.append(y)
        finals.append(final)
    y = torch.cat(outputs, dim=1)
    return (y, finals) if output_final_state else y


def _computed(problem: Problem, module, want_state: bool):
    """``(y [B, T, H, V], final state or None)`` of a prepared problem by one backend module."""
    if not getattr(module, "FACTORED_DECAY", False):
        problem = problem.materialized()
    out, state = _run(problem, module, want_state)
    return out.transpose(1, 2).to(problem.out_dtype, memory_format=torch.contiguous_format), state


def select_backend(
    q: Tensor | Dynamics,
    k: Tensor | None = None,
    v: Tensor | None = None,
    backend: str = "auto",
    train: bool | None = None,
    **options: Any,
) -> BackendChoice:
    """The backend ``coefficient_dynamics`` would use for these arguments (what ``"auto"`` chooses), and why.

    Takes the same arguments as :func:`coefficient_dynamics`; raises the same ``ValueError`` for a backend that
    cannot compute the combination.  ``train``: whether the call records gradients (default: as the call would,
    from the grad mode and the inputs); ``auto`` chooses apart for the forward alone and for forward + backward.
    For ``"auto"`` this measures the candidates if the shape is not cached yet (:mod:`seqdyn.core.autotune`), so
    the call that follows reads the same choice.

    Returns:
        a :class:`~seqdyn.core.autotune.BackendChoice`: the name (a ``str``) with ``.why``, ``.source`` and
        ``.times_ms``.
    """
    want_state = bool(options.pop("output_final_state", False))
    beside = {name: options.pop(name) for name in ("initial_state", "chunk_size") if name in options}
    cu_seqlens = options.pop("cu_seqlens", None)
    dynamics, cu_seqlens, _ = _sub_stepped(as_dynamics(q, k, v, **options), cu_seqlens)
    if cu_seqlens is not None:
        packing = packing_of(dynamics, cu_seqlens)
        dynamics = (
            reset_at_starts(dynamics, packing)
            if _resets_suffice(dynamics, beside.get("initial_state"), want_state)
            else dynamics_side_by_side(dynamics, packing)
        )
    problem = prepare(dynamics, **beside)
    return choice.backend_for(problem, backend, _computed, want_state, train)[1]


#: the per-token layouts of :func:`coefficient_dynamics_step`: argument -> (allowed ranks, layout)
STEP_LAYOUTS = {
    "q": ((3,), "[B, H, K]"),
    "k": ((3, 4), "[B, H, K] or, per factor, [B, H, n, K]"),
    "v": ((3, 4), "[B, H, V] or, per factor, [B, H, n, V]"),
    "log_decay": ((2, 3), "[B, H] or [B, H, K]"),
    "householder": ((2, 3), "[B, H] or, per factor, [B, H, n]"),
    "householder_dir": ((3, 4), "[B, H, K] or, per factor, [B, H, n, K]"),
    "scale": ((2, 3), "[B, H] or, per factor, [B, H, n]"),
    "normalizer": ((2,), "[B, H]"),
    "log_scale": ((2, 3), "[B, H] or, per factor, [B, H, n]"),
    "outer_log_decay": ((2,), "[B, H]"),
    "low_rank_write": ((3,), "[B, H, K]"),
    "low_rank_read": ((3,), "[B, H, K]"),
    "bonus": ((2, 3), "[H, K] or [B, H, K]"),
    "normalizer_log_offset": ((2,), "[B, H]"),
}


def coefficient_dynamics_step(
    q: Tensor | Dynamics,
    k: Tensor | None = None,
    v: Tensor | None = None,
    state: Any = None,
    readout: Any = "identity",
    log_decay: Tensor | None = None,
    householder: Tensor | None = None,
    householder_dir: Tensor | None = None,
    scale: Any = None,
    normalizer: Any = "none",
    log_scale: Tensor | None = None,
    decay_rate: Tensor | None = None,
    cu_seqlens: Tensor | Packing | None = None,
    decay_first: bool = False,
    outer_log_decay: Tensor | None = None,
    low_rank_write: Tensor | None = None,
    low_rank_read: Tensor | None = None,
    bonus: Tensor | None = None,
    normalizer_log_offset: Tensor | None = None,
):
    """One step of the recurrence, for streaming: ``(y_t, state_t)`` from the token ``t`` and ``state_{t-1}``.

    Per-token layouts drop the time axis (:data:`STEP_LAYOUTS`): q, k ``[B, H, K]``, v ``[B, H, V]``, log_decay
    ``[B, H]`` or ``[B, H, K]``, householder, log_scale and tensor scale/normalizer ``[B, H]``, householder_dir
    ``[B, H, K]``; ``decay_rate`` stays ``[H, K]``.  The keywords are those of :class:`~seqdyn.core.dynamics.Dynamics`
    (or ``q`` a per-token ``Dynamics``).  The state has the layout of ``coefficient_dynamics``' final state;
    ``None`` starts from zero (an empty cache).  Applying it token by token equals the ``recurrent`` backend on
    the whole sequence.

    Packed sequences decode together: ``cu_seqlens`` ``[0, 1, …, N]`` (a token of each of ``N`` sequences, the
    rows), and ``state`` as ``coefficient_dynamics(…, cu_seqlens=…)`` returns it — ``[N, …]``, or a list of ``N``
    key caches of different lengths, each sequence stepping from its own (the returned state is such a list too).
    """
    steps = _one_step_as_sequence(dynamics_of_call(locals()))
    if cu_seqlens is not None:
        rows = steps.q.shape[0]
        offsets = list(Packing.of(cu_seqlens, rows, 1, steps.q.device).offsets)
        if offsets != list(range(rows + 1)):
            raise ValueError(
                f"cu_seqlens: one step takes one token of each sequence, [0, 1, …, {rows}] for the {rows} "
                f"rows; got {offsets}"
            )
    if isinstance(state, list):
        if len(state) != steps.q.shape[0]:
            raise ValueError(f"state: a list of one state per sequence needs {steps.q.shape[0]}, got {len(state)}")
        outputs, states = zip(*(_step_of(_row(steps, row), part) for row, part in enumerate(state)))
        return torch.cat(outputs), list(states)
    return _step_of(steps, state)


def _step_of(steps: Dynamics, state: Any) -> tuple[Tensor, Any]:
    """``(y_t [B, H, V], state_t)`` of one token as a sequence of one step (its sub-steps, where it has them)."""
    steps, _, plan = _sub_stepped(steps, None, True, state)
    result = _outputs(steps, state, True, "recurrent", None)
    y, new_state = result if plan is None else plan.token_outputs(result, True)
    return y[:, 0], new_state


def _row(dynamics: Dynamics, row: int) -> Dynamics:
    """Row ``row`` of a batch of operator arguments (those with a batch axis: :data:`STEP_LAYOUTS`)."""
    return dynamics.replace(
        **{
            name: getattr(dynamics, name)[row : row + 1]
            for name in STEP_LAYOUTS
            if isinstance(getattr(dynamics, name), Tensor) and not _without_batch(name, getattr(dynamics, name))
        }
    )


def _one_step_as_sequence(dynamics: Dynamics) -> Dynamics:
    """A per-token description (no time axis) as a sequence of one step: each tensor gains ``T = 1`` at axis 1."""
    timed = {}
    for name, (ranks, layout) in STEP_LAYOUTS.items():
        value = getattr(dynamics, name)
        if not isinstance(value, Tensor) or (name == "scale" and value.dim() == 0):
            continue
        if value.dim() not in ranks:
            raise ValueError(f"{name}: one step expects {layout}, got shape {list(value.shape)}")
        if not _without_batch(name, value):
            timed[name] = value.unsqueeze(1)
    return dynamics.replace(**timed)


def _without_batch(name: str, value: Tensor) -> bool:
    """A number (a scale) or one bonus per head ``[H, K]``: the same for every row and step."""
    return value.dim() == 0 or (name == "bonus" and value.dim() == 2)


def coefficients(
    q: Tensor | Dynamics,
    k: Tensor | None = None,
    readout: Any = "identity",
    log_decay: Tensor | None = None,
    householder: Tensor | None = None,
    householder_dir: Tensor | None = None,
    scale: Any = None,
    normalizer: Any = "none",
    backend: str = "quadratic",
    chunk_size: int | None = None,
    initial_state: None = None,
    output_final_state: bool = False,
    log_scale: Tensor | None = None,
    decay_rate: Tensor | None = None,
    cu_seqlens: Tensor | Packing | None = None,
    decay_first: bool = False,
    outer_log_decay: Tensor | None = None,
    low_rank_write: Tensor | None = None,
    low_rank_read: Tensor | None = None,
    bonus: Tensor | None = None,
    normalizer_log_offset: Tensor | None = None,
) -> Tensor:
    """The normalized coefficient matrix ``A[b, h, i, j] = α_ij / η_i`` ``[B, H, T, T]``, zero above the diagonal.

    Same keywords as :func:`coefficient_dynamics` (without values; or ``q`` a ``Dynamics``, its values unread): the
    "attention matrix" of any mixer, ``coefficient_dynamics(q, k, v, ...)`` = ``A @ v`` per head.  The default
    ``backend="quadratic"`` (also ``"auto"``) forms the scores directly; any other backend that supports the
    combination computes the rows as outputs for one-hot values (a cross-check of that backend).  With ``cu_seqlens``
    (packed, see :func:`coefficient_dynamics`) ``[1, H, T, T]`` is block diagonal: zero across sequences.
    """
    if initial_state is not None or output_final_state:
        raise ValueError("initial_state/output_final_state: coefficients describe the sequence alone; leave them unset")
    dynamics = dynamics_of_call(locals()).replace(v=None)
    computed, steps_packing, plan = _sub_stepped(dynamics, cu_seqlens)
    if plan is not None:
        matrix = coefficients(computed, backend=backend, chunk_size=chunk_size, cu_seqlens=steps_packing)
        return plan.coefficients(matrix)
    if cu_seqlens is not None:
        packing = packing_of(dynamics, cu_seqlens)
        return packing.block_diagonal(
            coefficients(dynamics_side_by_side(dynamics, packing), backend=backend, chunk_size=chunk_size)
        )
    problem = prepare(dynamics, chunk_size=chunk_size)
    if backend in ("quadratic", "auto"):
        return _coefficient_matrix(problem)
    batch, heads, length, _, _ = problem.shape
    one_hot = torch.eye(length, dtype=problem.q.dtype, device=problem.q.device)[None, :, None, :]
    one_hot = one_hot.expand(batch, length, heads, length)  # [B, T, H, T]: value j of row i is 1 at j
    return _outputs(dynamics.replace(v=one_hot), None, False, backend, chunk_size).transpose(1, 2)


# --------------------------------------------------------------------------------------------------- internals
def _coefficient_matrix(problem: Problem) -> Tensor:
    """``α_ij / η_i`` ``[B, H, T, T]`` from the scores ``s_ij`` of the quadratic backend."""
    if not problem.readout.linear:
        valid = causal_mask(problem.shape[2], problem.shape[2], problem.q.device)
        problem = problem.folded()
        return normalized_coefficients(
            quadratic_backend.coefficient_scores(problem), valid, problem.readout, problem.normalizer
        )
    problem, row_scale, _ = _stabilized(problem)
    scores = quadratic_backend.coefficient_scores(problem)
    return _normalized(scores, scores.sum(-1), problem.normalizer, row_scale, problem.normalizer_offset)


def auto_plan(
    dynamics: Dynamics, chunk_size: int | None = None, cu_seqlens: Tensor | Packing | None = None
) -> tuple[list[str], str, str]:
    """``(candidates, modelled, reason)`` of ``auto`` for these operator arguments (:func:`~seqdyn.core.choice.plan`):
    what a mixer
    that times its whole call with each backend (:meth:`~seqdyn.mixers.base.CoefficientMixer.backend_for`)
    chooses among; with ``cu_seqlens``, for the packed sequences side by side, as they are computed."""
    dynamics, cu_seqlens, _ = _sub_stepped(dynamics, cu_seqlens)
    if cu_seqlens is not None:
        dynamics = dynamics_side_by_side(dynamics, packing_of(dynamics, cu_seqlens))
    return choice.plan(prepare(dynamics, chunk_size=chunk_size))


def _run(problem: Problem, module, want_state: bool):
    if not problem.readout.linear:
        result = module.nonlinear(problem.folded(), want_state)
        _check_growth(problem, result[0])
        return result
    original = problem
    if problem.augmented:  # z_t rides along as a value column of ones: q_tᵀ z_t = Σ_j α_tj
        ones = problem.v.new_ones(*problem.v.shape[:-1], 1)
        state = problem.initial_state
        if state is not None:
            state = torch.cat([state[0], state[1].unsqueeze(-1)], dim=-1)
        problem = problem.replaced(v=torch.cat([problem.v, ones], dim=-1), initial_state=state)
    problem, row_scale, state_scale = _stabilized(problem)
    out, state = module.linear(problem, want_state)
    _check_low_rank_growth(original, out)
    numerator, denominator = (out[..., :-1], out[..., -1]) if original.augmented else (out, None)
    out = _normalized(numerator, denominator, original.normalizer, row_scale, original.normalizer_offset)
    if not want_state:
        return out, None
    if state_scale is not None:
        state = (state.to(torch.float64) * state_scale).to(state.dtype)
    return out, ((state[..., :-1], state[..., -1]) if original.augmented else state)


def _normalized(
    numerator: Tensor, denominator: Tensor | None, normalizer, row_scale: Tensor | None, offset: Tensor | None = None
) -> Tensor:
    """:func:`normalize`, in float64 when a row scale undoes the stabilization (``e^c`` may exceed float32)."""
    if row_scale is None:
        return normalize(numerator, denominator, normalizer, log_offset=offset)
    dtype = numerator.dtype
    wide = lambda x: x if x is None or isinstance(x, str) else x.to(torch.float64)  # noqa: E731
    return normalize(wide(numerator), wide(denominator), wide(normalizer), row_scale, log_offset=wide(offset)).to(dtype)


def _stable_factors(step: Tensor, rate: Tensor) -> bool:
    """Whether every ``Δ_t A`` is ``≤ 0`` for sure: steps ``≥ 0`` and rates ``≤ 0`` (NaN: not sure); of every run
    while runs are stacked."""
    return bool(stacking.amin(step.detach()) >= 0) and bool(stacking.amax(rate.detach()) <= 0)


def _log_decays_and_scales(problem: Problem) -> tuple[Tensor, Tensor]:
    """``(G, ℓ)`` in float64: the cumulative log decays ``G_t = Σ_{s≤t} g_s`` ``[B, H, T]`` or ``[B, H, T, K]`` and
    the log scales ``ℓ_t`` of the impulses ``[B, H, T]``, each 0 where the problem has none."""
    batch, heads, length, _, _ = problem.shape
    g, ell = problem.log_decay, problem.log_scale
    if g is None:
        cumulative = torch.zeros(batch, heads, length, dtype=torch.float64, device=problem.q.device)
    else:
        cumulative = cumulative_log_decay(g)
    impulse = (
        torch.zeros(batch, heads, length, dtype=torch.float64, device=problem.q.device)
        if ell is None
        else ell.detach().to(torch.float64)
    )
    return cumulative, impulse


def _check_growth(problem: Problem, y: Tensor) -> None:
    """A nonlinear readout of scores that outgrew the float range: unstable decays (``g > 0``, ``|Λ| > 1``) make
    ``s_ij`` grow as ``e^{Σ g}``, which only the identity readout's rescaling (:func:`_stabilized`) absorbs.  Says so
    where the outputs came out non-finite (one check of g, and of y only where some g > 0)."""
    g = problem.log_decay
    if g is None or stacking.runs_stacked():
        return
    if not bool(g.detach().amax() > 0) or bool(torch.isfinite(y.detach()).all()):
        return
    raise ValueError(
        f"log_decay: decays above 1 (g up to {float(g.detach().amax()):.3g} > 0) make the scores of the "
        f"{problem.readout.name} readout grow as e^(Σ g) beyond the float range over this sequence; the identity "
        "readout rescales its state, a nonlinear readout cannot: keep g ≤ 0 (decays ≤ 1), shorten the sequence, "
        "or use readout='identity'"
    )


def _check_low_rank_growth(problem: Problem, y: Tensor) -> None:
    """A low-rank part ``u zᵀ`` can give a transition a spectral radius above one however small the decays are, and
    the identity readout's rescaling (:func:`_stabilized`) commutes with scalars only: the state then grows as
    ``ρ^T`` past the float range.  Says so where the outputs came out non-finite from finite inputs (one check of
    y; the inputs read only then)."""
    if problem.written is None or stacking.runs_stacked() or bool(torch.isfinite(y.detach()).all()):
        return
    parts = (problem.q, problem.k, problem.v, problem.written, problem.direction, problem.log_decay)
    if not all(bool(torch.isfinite(x.detach()).all()) for x in parts if isinstance(x, Tensor)):
        return  # a non-finite input: its own trouble, not the transition's
    raise ValueError(
        "low_rank_write: the low-rank part u zᵀ gives the transition D + u zᵀ a spectral radius above one, so the "
        "state grows beyond the float range over this sequence (the outputs came out non-finite from finite "
        "inputs); the identity readout rescales scalar and diagonal decays only: keep |zᵀu| and the decays within "
        "the unit disc (RWKV-7's u = −a ⊙ κ̂ with a ∈ (0, 1) and a unit κ̂), shorten the sequence, or compute in "
        "float64"
    )


def _stabilized(problem: Problem):
    """Rescale an identity-readout problem so every factor is ``≤ 1``: unstable decays (``g > 0``) and scales in log
    space (``log_scale``, e.g. mLSTM's input gate ``exp(ĩ)``).

    For any per-step log-scale ``m_t`` (``m_{-1} = 0``), ``S̃_t = e^{-m_t} S_t`` obeys the same recurrence with
    ``g'_t = g_t + m_{t-1} − m_t`` and impulses ``e^{ℓ_t − m_t} k_t`` (``ℓ = log b``).  Choosing
    ``m_t = max(m_{t-1} + g_t, ℓ_t)`` — xLSTM's stabilizer; ``G_t + max(0, max_{s≤t} ℓ_s − G_s)`` in closed form,
    per channel for diagonal decays — makes both exponents ``≤ 0``.  Rows are read with ``q ⊙ e^{m_t − m*_t}``,
    ``m*_t = max_k m_tk``, so outputs come out as ``e^{-m*_t} y_t`` and :func:`normalize` undoes the factor.
    Returns ``(problem', m* [B, H, T] or None, state factor e^{m_T} or None)``; ``m`` carries no gradient (the
    identity holds for every m).
    """
    if problem.decay_rate is not None:
        if problem.log_scale is None and _stable_factors(problem.log_decay, problem.decay_rate):
            return problem, None, None
        problem = problem.materialized()
    g, ell = problem.log_decay, problem.log_scale
    if ell is None and (g is None or not bool(stacking.amax(g.detach()) > 0)):  # one read (amax: no copy of a
        return problem, None, None  # strided g); over every run while runs are stacked
    with torch.no_grad():
        cumulative, impulse = _log_decays_and_scales(problem)
        lifted = impulse.unsqueeze(-1) if cumulative.dim() == 4 else impulse
        log_scale = running_log_maximum(lifted, cumulative)
        if problem.diagonal and problem.householder:  # the Householder or low-rank factor commutes with scalars only
            log_scale = log_scale.amax(-1)
        per_channel = log_scale.dim() == 4
        row_scale = log_scale.amax(-1) if per_channel else log_scale
        shift = log_scale - torch.cat([torch.zeros_like(log_scale[:, :, :1]), log_scale[:, :, :-1]], dim=2)
        if problem.diagonal and not per_channel:
            shift = shift.unsqueeze(-1)
    along_keys = (lambda x: x) if per_channel else (lambda x: x.unsqueeze(-1))  # noqa: E731
    dtype = problem.k.dtype
    new_decay = -shift if g is None else g.to(torch.float64) - shift
    key_log = impulse if ell is None else ell.to(torch.float64)
    key_factor = torch.exp((key_log.unsqueeze(-1) if per_channel else key_log) - log_scale)
    changes = {}
    if problem.written is not None:  # Λ = D − ũ zᵀ scales as a whole: ũ with D (a scalar m, the factor not commuting)
        changes["written"] = problem.written * torch.exp(-(shift if shift.dim() == 4 else shift.unsqueeze(-1))).to(
            dtype
        )
    stable = problem.with_keys_scaled(
        key_factor,
        log_decay=new_decay.to(dtype),
        q=problem.q * torch.exp(log_scale - row_scale.unsqueeze(-1)).to(dtype) if per_channel else problem.q,
        log_scale=None,
        **changes,
    )
    final = torch.exp(along_keys(log_scale[:, :, -1])).unsqueeze(-1)  # multiplies S_T [B, H, K, V]
    return stable, row_scale, final
