"""``coefficient_dynamics``: the one operator every mixer reduces to (DESIGN §2; seed 001 eqs. 2–4; seed 000 eq. 11).

For each head, every key position ``j`` starts an autonomous linear system with an impulse input::

    x_j^(j) = b_j k_j,   x_i^(j) = Λ_i x_{i-1}^(j)  (i > j),   α_ij = φ(q_iᵀ x_i^(j)),   y_i = (1/η_i) Σ_{j≤i} α_ij v_j

with ``Λ_t = D_t (I − β_t w_t w_tᵀ)`` (:class:`~seqdyn.core.dynamics.Dynamics` describes the arguments).  This
module builds that description from the keywords, chooses a backend, and does the
work shared by all backends: for the identity readout the normalizer state ``z`` rides along as an extra value
column of ones (``Σ_j α_ij = q_iᵀ z_i``), and unstable decays (g > 0) are rescaled so nothing overflows where
the exact result is finite.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor

from seqdyn.core import autotune
from seqdyn.core.autotune import BackendChoice
from seqdyn.core.backends import REGISTRY
from seqdyn.core.backends import quadratic as quadratic_backend
from seqdyn.core.dynamics import Dynamics, as_dynamics
from seqdyn.core.evolution import causal_mask, cumulative_log_decay
from seqdyn.core.packing import Packing, check_cu_seqlens
from seqdyn.core.problem import Problem, prepare, shared_over_heads
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

#: The backend names accepted by ``backend=``; ``"auto"`` picks the fastest valid one.
BACKENDS = ("quadratic", "recurrent", "chunk", "scan", "auto")

log = logging.getLogger("seqdyn")

#: Above this many entries (B·H·T² scores, times K with a diagonal decay) ``auto`` does not materialize them.
QUADRATIC_AUTO_LIMIT = 1 << 26


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
    cu_seqlens: Tensor | None = None,
):
    """Outputs ``y_i = (1/η_i) Σ_{j≤i} φ(q_iᵀ Λ_i ⋯ Λ_{j+1} b_j k_j) v_j`` (seed 001 eqs. 2 and 4).

    Args:
        q, k, v, readout, log_decay, householder, householder_dir, scale, normalizer, log_scale, decay_rate: the
            fields of :class:`~seqdyn.core.dynamics.Dynamics`, which documents each; or ``q`` a ``Dynamics`` alone.
        initial_state: the state at time −1 (see ``output_final_state``); ``None`` is zero / empty.
        output_final_state: also return the final state: ``S [B, H, K, V]`` for the identity readout,
            ``(S, z [B, H, K])`` with ``"sum"``/``"abs_max1"``, and the key cache
            ``(keys [B, H, N, K], values [B, H, N, V])`` of transformed keys for any other readout.
        backend: ``"quadratic"``, ``"recurrent"``, ``"chunk"``, ``"scan"`` or ``"auto"``.
        chunk_size: chunk length C of the ``chunk`` backend (default 64).
        cu_seqlens: int offsets ``[N + 1]`` of ``N`` sequences packed along time in a batch of one
            (:mod:`seqdyn.core.packing`): each is computed alone, no coefficient crosses a boundary; states are per
            sequence — ``initial_state`` and the final state ``[N, …]``, or for a key cache a list of ``N``.
            Without states, the identity readout runs the ``T`` packed steps as one sequence with a hard reset at
            each start (``chunk``: scalar or no decay; ``scan``), nothing computed for padding.

    Returns:
        ``y`` ``[B, T, H, V]`` in the dtype of ``v``, or ``(y, final_state)``.

    Raises:
        ValueError: naming the argument, what was given and what is allowed.
    """
    dynamics = as_dynamics(q, k, v, readout=readout, log_decay=log_decay, householder=householder,
                           householder_dir=householder_dir, scale=scale, normalizer=normalizer, log_scale=log_scale,
                           decay_rate=decay_rate)
    if cu_seqlens is not None:
        return _packed_outputs(dynamics, cu_seqlens, initial_state, output_final_state, backend, chunk_size)
    return _outputs(dynamics, initial_state, output_final_state, backend, chunk_size)


def _outputs(dynamics: Dynamics, initial_state: Any, output_final_state: bool, backend: str, chunk_size: int | None):
    """:func:`coefficient_dynamics` of a :class:`Dynamics`."""
    problem = prepare(dynamics, initial_state=initial_state, chunk_size=chunk_size, factored=True)
    module, _ = _backend_for(problem, backend, bool(output_final_state))
    out, state = _computed(problem, module, bool(output_final_state))
    return (out, state) if output_final_state else out


#: the fields of a description that have a time axis (``[B, T, …]`` where they are tensors) and the value of a
#: padded step, an identity step of the dynamics (nothing written: k = v = 0; Λ = I: g = 0, β = 0; η = 1)
TIMED_FIELDS = {"q": 0.0, "k": 0.0, "v": 0.0, "log_decay": 0.0, "householder": 0.0, "householder_dir": 0.0,
                "scale": 1.0, "normalizer": 1.0, "log_scale": 0.0}


def _timed(dynamics: Dynamics) -> dict[str, Tensor]:
    """The fields of ``dynamics`` that are tensors with a time axis."""
    return {name: value for name in TIMED_FIELDS if isinstance(value := getattr(dynamics, name), Tensor)
            and value.dim() >= 3 - (name in ("log_decay", "householder", "scale", "normalizer", "log_scale"))}


def _packing(dynamics: Dynamics, cu_seqlens: Any) -> Packing:
    """The packing of ``dynamics`` by ``cu_seqlens``, every timed field checked to be ``[1, T, …]``."""
    batch, length = dynamics.q.shape[:2] if dynamics.q.dim() >= 2 else (None, None)
    packing = Packing.of(cu_seqlens, length, batch, dynamics.q.device)
    for name, value in _timed(dynamics).items():
        if tuple(value.shape[:2]) != (1, length):
            raise ValueError(f"{name}: a packed batch is [1, T, …] with T = {length} (that of q); got shape "
                             f"{list(value.shape)}")
    return packing


def _padded(dynamics: Dynamics, packing: Packing) -> Dynamics:
    """The packed sequences side by side, ``[N, L, …]``, each right-padded with identity steps."""
    return dynamics.replace(**{name: packing.unpack(value, TIMED_FIELDS[name])
                               for name, value in _timed(dynamics).items()})


def _reset_at_starts(dynamics: Dynamics, packing: Packing) -> Dynamics:
    """The packed sequences as one sequence with a hard reset (``g = −∞``, Λ = 0) at every sequence's first step:
    no state reaches a later sequence, so with the identity readout (φ(0) = 0) no coefficient crosses a boundary
    and the outputs are each sequence's own — computed on the ``T`` packed steps, without padding."""
    g = dynamics.log_decay
    if g is None:  # Λ = I: a scalar decay shared by all heads, 0 but at the starts
        g = dynamics.q.new_zeros(1, packing.position.numel(), 1)
    starts = (packing.position == 0).reshape(1, -1, *(1,) * (g.dim() - 2))  # [1, T, 1…]
    return dynamics.replace(log_decay=torch.where(starts, g.new_full((), float("-inf")), g))


#: the backends that compute packed sequences as one with resets (:func:`_reset_at_starts`) in ``O(T)``; ``quadratic``
#: and ``recurrent`` take them side by side (``O(N·L²)``, ``L`` steps), as does ``chunk`` for diagonal decays,
#: whose chunks a reset's range of log decays would cut to single steps (:func:`~.chunking.safe_chunk_size`)
RESETS_SERVE = ("chunk", "scan")


def _resets_suffice(dynamics: Dynamics, initial_state: Any, output_final_state: bool) -> bool:
    """Whether :func:`_reset_at_starts` computes the packed batch: the identity readout, no state in or out (a
    state per sequence needs the sequences side by side), and no factored decay (``Δ ⊗ A`` cannot be −∞ but by
    forming ``g``)."""
    return (resolve_readout(dynamics.readout).linear and initial_state is None and not output_final_state
            and dynamics.decay_rate is None)


def _packed_outputs(dynamics: Dynamics, cu_seqlens: Any, initial_state: Any, output_final_state: bool,
                    backend: str, chunk_size: int | None):
    """:func:`coefficient_dynamics` of a packed batch: with the identity readout and no state, one sequence with
    hard resets at the starts (:func:`_reset_at_starts`); otherwise the sequences as a padded batch ``[N, L, …]``
    in one call (padded steps are identity steps, so outputs and linear states are each sequence's own); a key
    cache, whose size is each sequence's length, one sequence at a time."""
    packing = _packing(dynamics, cu_seqlens)
    if _resets_suffice(dynamics, initial_state, output_final_state) and backend in ("auto", *RESETS_SERVE):
        problem = prepare(_reset_at_starts(dynamics, packing), chunk_size=chunk_size, factored=True)
        module, _ = _backend_for(problem, backend, False)
        if module.NAME in RESETS_SERVE and not (module.NAME == "chunk" and problem.diagonal):
            return _computed(problem, module, False)[0]
        backend = module.NAME  # what auto chose (select_backend's answer), on the sequences side by side
    if resolve_readout(dynamics.readout).linear or (initial_state is None and not output_final_state):
        result = _outputs(_padded(dynamics, packing), initial_state, output_final_state, backend, chunk_size)
        y, state = result if output_final_state else (result, None)
        return (packing.pack(y), state) if output_final_state else packing.pack(y)
    if initial_state is not None and (not isinstance(initial_state, (list, tuple)) or
                                      len(initial_state) != packing.count):
        raise ValueError(f"initial_state: with cu_seqlens and the {resolve_readout(dynamics.readout).name} readout, "
                         f"a list of {packing.count} key caches (one per sequence, None for an empty one)")
    outputs, finals = [], []
    for index, (start, end) in enumerate(zip(packing.offsets, packing.offsets[1:])):
        one = dynamics.replace(**{name: value[:, start:end] for name, value in _timed(dynamics).items()})
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


def select_backend(q: Tensor | Dynamics, k: Tensor | None = None, v: Tensor | None = None, backend: str = "auto",
                   train: bool | None = None, **options: Any) -> BackendChoice:
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
    dynamics = as_dynamics(q, k, v, **options)
    if cu_seqlens is not None:
        packing = _packing(dynamics, cu_seqlens)
        dynamics = (_reset_at_starts(dynamics, packing) if _resets_suffice(dynamics, beside.get("initial_state"),
                                                                           want_state) else _padded(dynamics, packing))
    problem = prepare(dynamics, **beside)
    return _backend_for(problem, backend, want_state, train)[1]


#: the per-token layouts of :func:`coefficient_dynamics_step`: argument -> (allowed ranks, layout)
STEP_LAYOUTS = {
    "q": ((3,), "[B, H, K]"),
    "k": ((3,), "[B, H, K]"),
    "v": ((3,), "[B, H, V]"),
    "log_decay": ((2, 3), "[B, H] or [B, H, K]"),
    "householder": ((2,), "[B, H]"),
    "householder_dir": ((3,), "[B, H, K]"),
    "scale": ((2,), "[B, H]"),
    "normalizer": ((2,), "[B, H]"),
    "log_scale": ((2,), "[B, H]"),
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
    cu_seqlens: Tensor | None = None,
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
    dynamics = as_dynamics(q, k, v, readout=readout, log_decay=log_decay, householder=householder,
                           householder_dir=householder_dir, scale=scale, normalizer=normalizer, log_scale=log_scale,
                           decay_rate=decay_rate)
    steps = _one_step_as_sequence(dynamics)
    if cu_seqlens is not None:
        rows = steps.q.shape[0]
        offsets = check_cu_seqlens(cu_seqlens, rows, 1)
        if offsets != list(range(rows + 1)):
            raise ValueError(f"cu_seqlens: one step takes one token of each sequence, [0, 1, …, {rows}] for the {rows} "
                             f"rows; got {offsets}")
    if isinstance(state, list):
        if len(state) != steps.q.shape[0]:
            raise ValueError(f"state: a list of one state per sequence needs {steps.q.shape[0]}, got {len(state)}")
        outputs, states = zip(*(_outputs(_row(steps, row), part, True, "recurrent", None)
                                for row, part in enumerate(state)))
        return torch.cat(outputs)[:, 0], list(states)
    y, new_state = _outputs(steps, state, True, "recurrent", None)
    return y[:, 0], new_state


def _row(dynamics: Dynamics, row: int) -> Dynamics:
    """Row ``row`` of a batch of operator arguments (those with a batch axis: :data:`STEP_LAYOUTS`)."""
    return dynamics.replace(**{name: getattr(dynamics, name)[row:row + 1] for name in STEP_LAYOUTS
                               if isinstance(getattr(dynamics, name), Tensor) and getattr(dynamics, name).dim() > 0})


def _one_step_as_sequence(dynamics: Dynamics) -> Dynamics:
    """A per-token description (no time axis) as a sequence of one step: each tensor gains ``T = 1`` at axis 1."""
    timed = {}
    for name, (ranks, layout) in STEP_LAYOUTS.items():
        value = getattr(dynamics, name)
        if not isinstance(value, Tensor) or (name == "scale" and value.dim() == 0):
            continue
        if value.dim() not in ranks:
            raise ValueError(f"{name}: one step expects {layout}, got shape {list(value.shape)}")
        timed[name] = value.unsqueeze(1)
    return dynamics.replace(**timed)


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
    cu_seqlens: Tensor | None = None,
) -> Tensor:
    """The normalized coefficient matrix ``A[b, h, i, j] = α_ij / η_i`` ``[B, H, T, T]``, zero above the diagonal.

    Same keywords as :func:`coefficient_dynamics` (without values; or ``q`` a ``Dynamics``, whose values are not
    read): the "attention matrix" of any mixer, so ``coefficient_dynamics(q, k, v, ...)`` equals ``A @ v`` per
    head.  ``backend="quadratic"`` (default, also ``"auto"``) forms the scores directly; any other backend that
    supports the combination computes the rows as outputs for one-hot values (a cross-check of that backend).
    With ``cu_seqlens`` (a packed batch, see :func:`coefficient_dynamics`) the matrix ``[1, H, T, T]`` is block
    diagonal: each sequence's own coefficients, zero across sequences.
    """
    if initial_state is not None or output_final_state:
        raise ValueError("initial_state/output_final_state: coefficients describe the sequence alone; leave them unset")
    dynamics = as_dynamics(q, k, None, readout=readout, log_decay=log_decay, householder=householder,
                           householder_dir=householder_dir, scale=scale, normalizer=normalizer, log_scale=log_scale,
                           decay_rate=decay_rate).replace(v=None)
    if cu_seqlens is not None:
        packing = _packing(dynamics, cu_seqlens)
        return packing.block_diagonal(coefficients(_padded(dynamics, packing), backend=backend,
                                                   chunk_size=chunk_size))
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
        return normalized_coefficients(quadratic_backend.coefficient_scores(problem), valid, problem.readout,
                                       problem.normalizer)
    problem, row_scale, _ = _stabilized(problem)
    scores = quadratic_backend.coefficient_scores(problem)
    return _normalized(scores, scores.sum(-1), problem.normalizer, row_scale)


def _backend_for(problem: Problem, backend: Any, want_state: bool = False, train: bool | None = None):
    """``(backend module, BackendChoice)`` for ``backend`` (a name, or ``"auto"``: :func:`_auto_choice`)."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend: got {backend!r}; allowed: {list(BACKENDS)}")
    if backend == "auto":
        choice = _auto_choice(problem, want_state, _records_gradients(problem) if train is None else train)
        log.debug("auto backend: %s (%s)", choice, choice.why)
        return REGISTRY[str(choice)], choice
    module = REGISTRY[backend]
    reason = module.unsupported(problem)
    if reason is not None:
        raise ValueError(f"backend={backend!r} cannot compute {problem.describe()}: {reason}. Backends that can: "
                         f"{_able(problem)}")
    return module, BackendChoice.asked(backend)


def _able(problem: Problem) -> list[str]:
    return [name for name, module in REGISTRY.items() if module.unsupported(problem) is None]


#: the scan's cost per state element and step relative to the chunked form's per-step cost (calibrated with
#: ``seqdyn bench operator`` on the CPU: GLA-type heads of K = V = 64 scan ~6× slower than they chunk)
SCAN_COST_FACTOR = 16.0
#: ``recurrent`` steps through time in Python: a candidate only for sequences this short (or as the only form)
RECURRENT_CANDIDATE_MAX = 64


def _auto_choice(problem: Problem, want_state: bool, train: bool) -> BackendChoice:
    """What ``"auto"`` computes with: the fastest of the candidate backends, measured once per problem shape and
    cached (:func:`seqdyn.core.autotune.choose`), the cost model (:func:`_modelled`) deciding where nothing may be
    timed."""
    return autotune.choose(_shape_key(problem, want_state, train), problem.q.device, lambda: _plan(problem),
                           lambda name: _trial(problem, name, want_state, train), _shape_words(problem, train),
                           lambda name: name in REGISTRY and REGISTRY[name].unsupported(problem) is None)


def auto_plan(dynamics: Dynamics, chunk_size: int | None = None,
              cu_seqlens: Tensor | None = None) -> tuple[list[str], str, str]:
    """``(candidates, modelled, reason)`` of ``auto`` for these operator arguments (:func:`_plan`): what a mixer
    that times its whole call with each backend (:meth:`~seqdyn.mixers.base.CoefficientMixer.backend_for`)
    chooses among; with ``cu_seqlens``, for the packed sequences side by side, as they are computed."""
    if cu_seqlens is not None:
        dynamics = _padded(dynamics, _packing(dynamics, cu_seqlens))
    return _plan(prepare(dynamics, chunk_size=chunk_size))


def _plan(problem: Problem) -> tuple[list[str], str, str]:
    """``(candidates, modelled, reason)``: the backends that can compute the problem, the modelled one first —
    but those :func:`ruled_out` unless nothing else can compute it — and the cost model's choice with its reason."""
    modelled, reason = _modelled(problem)
    candidates = without_ruled_out(_able(problem), ruled_out(problem))
    candidates.sort(key=lambda name: name != modelled)
    return candidates, modelled, reason


def quadratic_entries(problem: Problem) -> int:
    """The entries the ``quadratic`` backend materializes: ``B·H·T²`` scores, times K with a diagonal decay
    (its pairwise decays ``e^{γ_i − γ_j}`` per channel)."""
    batch, heads, length, key_dim, _ = problem.shape
    return batch * heads * length * length * (key_dim if problem.diagonal else 1)


def ruled_out(problem: Problem) -> dict[str, str]:
    """The backends ``auto`` does not time (unless nothing else can compute the problem), with the reason:
    ``quadratic`` beyond ``QUADRATIC_AUTO_LIMIT`` entries, ``recurrent`` beyond ``RECURRENT_CANDIDATE_MAX`` steps."""
    return too_large_to_time(problem.shape[2], {"quadratic": quadratic_entries(problem)})


def without_ruled_out(candidates: list[str], reasons: dict[str, str]) -> list[str]:
    """``candidates`` less those ``reasons`` rules out, one by one while more than one is left: ``auto`` times a
    ruled-out backend only where nothing else can compute the problem."""
    for name in reasons:
        if len(candidates) > 1:
            candidates = [other for other in candidates if other != name]
    return candidates


def too_large_to_time(length: int, materialized: dict[str, int]) -> dict[str, str]:
    """The rule behind every ``auto``'s candidates (the operator's and the mixers' that compute their own cores): a
    backend that materializes more than ``QUADRATIC_AUTO_LIMIT`` entries (``materialized``: backend -> entries) is
    not timed, nor ``recurrent``, a Python loop over the steps, beyond ``RECURRENT_CANDIDATE_MAX`` steps; the
    reason for each."""
    reasons = {name: f"{entries:,} entries materialized" for name, entries in materialized.items()
               if entries > QUADRATIC_AUTO_LIMIT}
    if length > RECURRENT_CANDIDATE_MAX:
        reasons["recurrent"] = f"a Python loop over {length} > {RECURRENT_CANDIDATE_MAX} steps"
    return reasons


def _records_gradients(problem: Problem) -> bool:
    """Whether computing ``problem`` records gradients (grad mode on and an input that requires them)."""
    return torch.is_grad_enabled() and any(x.requires_grad for x in _tensors(problem))


def _tensors(problem: Problem) -> list[Tensor]:
    state = problem.initial_state
    parts = [problem.q, problem.k, problem.v, problem.log_decay, problem.beta, problem.direction, problem.scale,
             problem.log_scale, problem.decay_rate, problem.normalizer,
             *(state if isinstance(state, tuple) else (state,))]
    return [x for x in parts if isinstance(x, Tensor)]


def _shape_key(problem: Problem, want_state: bool, train: bool) -> str:
    """Everything but the data that a backend's speed depends on, as the cache key of :mod:`autotune`."""
    batch, _, length, _, _ = problem.shape
    return (f"B{batch} T{length} | {problem_signature(problem)} | {'train' if train else 'forward'} | "
            f"state in {problem.initial_state is not None} out {want_state}")


def problem_signature(problem: Problem) -> str:
    """What a backend's speed depends on besides the batch, the length and the state passed in or out: heads,
    widths, the combination, dtypes, the chunk and which arguments are shared over heads."""
    _, heads, _, key_dim, value_dim = problem.shape
    scale = problem.scale
    scale_kind = ("none" if scale is None else "number" if not isinstance(scale, Tensor)
                  else "shared" if shared_over_heads(scale) else "per-head")
    return (f"H{heads} K{key_dim} V{value_dim} | {problem.describe()} | {problem.q.dtype} -> {problem.out_dtype} | "
            f"chunk {problem.chunk_size} | q {'shared' if shared_over_heads(problem.q) else 'per-head'} | "
            f"k {'shared' if shared_over_heads(problem.k) else 'per-head'} | scale {scale_kind} | "
            f"log_scale {problem.log_scale is not None} | factored {problem.decay_rate is not None}")


def _shape_words(problem: Problem, train: bool) -> str:
    batch, heads, length, key_dim, value_dim = problem.shape
    return (f"{'forward + backward' if train else 'forward'} of B={batch}, H={heads}, T={length}, K={key_dim}, "
            f"V={value_dim}, {problem.describe()}")


def _trial(problem: Problem, name: str, want_state: bool, train: bool) -> None:
    """One run of ``problem`` by backend ``name`` on detached copies of its inputs (forward, and backward of the
    sum of the outputs when ``train``): what :func:`seqdyn.core.autotune.measure` times."""
    copies: dict[int, Tensor] = {}

    def detached(x: Any) -> Any:
        if isinstance(x, tuple):
            return tuple(detached(part) for part in x)
        if not isinstance(x, Tensor):
            return x
        if id(x) not in copies:  # one copy per tensor: aliases (DeltaNet's direction is its key) stay aliases
            copies[id(x)] = x.detach().requires_grad_(train and x.is_floating_point())
        return copies[id(x)]

    fields = ("q", "k", "v", "log_decay", "beta", "direction", "normalizer", "initial_state", "scale", "log_scale",
              "decay_rate")
    copy = problem.replaced(**{field: detached(getattr(problem, field)) for field in fields})
    with torch.enable_grad() if train else torch.no_grad():
        out, state = _computed(copy, REGISTRY[name], want_state)
        if train:
            parts = [out, *(state if isinstance(state, tuple) else (state,) if state is not None else ())]
            sum(part.float().sum() for part in parts).backward()


def _modelled(problem: Problem) -> tuple[str, str]:
    """The cost model's backend and its reason (calibrated with ``seqdyn bench operator`` and ``bench auto`` on
    the CPU): what ``auto`` uses where nothing may be timed, and the first candidate it times.

    Per head and step, the chunked form costs about ``C·(K+V) + K·V`` (its intra-chunk matrices and the state
    hand-over, C = min(chunk, T)) and the scan ``16·K·V`` (a few elementwise passes over every state element):
    the scan wins for the tiny states of per-channel mixers (S6, qLSTM, RG-LRU), the chunked form for heads of
    K = V = 64.  Short sequences (T ≤ 2C) of large states without a diagonal decay are fastest materialized.
    Without a linear-time form: materialize while it fits, else step.
    """
    batch, heads, length, key_dim, value_dim = problem.shape
    chunk = min(problem.chunk_size, length)
    scan_able = REGISTRY["scan"].unsupported(problem) is None
    if problem.readout.linear:
        scan_cost = SCAN_COST_FACTOR * key_dim * value_dim
        if scan_able and scan_cost < chunk * (key_dim + value_dim) + key_dim * value_dim and (
                problem.diagonal or length > 2 * problem.chunk_size or key_dim * value_dim <= 4):
            return "scan", f"a scan of {key_dim}×{value_dim} states costs less than chunks of {chunk} steps"
        if not problem.diagonal and length <= 2 * problem.chunk_size:
            return "quadratic", f"T={length} ≤ 2·chunk without a diagonal decay: materialized scores are cheapest"
    if REGISTRY["chunk"].unsupported(problem) is None:
        return "chunk", f"the chunked form of T={length} in chunks of {chunk}"
    if batch * heads * length * length <= QUADRATIC_AUTO_LIMIT:
        return "quadratic", f"no chunked form; B·H·T² = {batch * heads * length * length:,} scores fit"
    return "recurrent", f"no chunked form and B·H·T² = {batch * heads * length * length:,} scores would not fit"


def _run(problem: Problem, module, want_state: bool):
    if not problem.readout.linear:
        return module.nonlinear(problem.folded(), want_state)
    original = problem
    if problem.augmented:  # z_t rides along as a value column of ones: q_tᵀ z_t = Σ_j α_tj
        ones = problem.v.new_ones(*problem.v.shape[:-1], 1)
        state = problem.initial_state
        if state is not None:
            state = torch.cat([state[0], state[1].unsqueeze(-1)], dim=-1)
        problem = problem.replaced(v=torch.cat([problem.v, ones], dim=-1), initial_state=state)
    problem, row_scale, state_scale = _stabilized(problem)
    out, state = module.linear(problem, want_state)
    numerator, denominator = (out[..., :-1], out[..., -1]) if original.augmented else (out, None)
    out = _normalized(numerator, denominator, original.normalizer, row_scale)
    if not want_state:
        return out, None
    if state_scale is not None:
        state = (state.to(torch.float64) * state_scale).to(state.dtype)
    return out, ((state[..., :-1], state[..., -1]) if original.augmented else state)


def _normalized(numerator: Tensor, denominator: Tensor | None, normalizer, row_scale: Tensor | None) -> Tensor:
    """:func:`normalize`, in float64 when a row scale undoes the stabilization (``e^c`` may exceed float32)."""
    if row_scale is None:
        return normalize(numerator, denominator, normalizer)
    dtype = numerator.dtype
    wide = lambda x: x if x is None or isinstance(x, str) else x.to(torch.float64)  # noqa: E731
    return normalize(wide(numerator), wide(denominator), wide(normalizer), row_scale).to(dtype)


def _stable_factors(step: Tensor, rate: Tensor) -> bool:
    """Whether every ``Δ_t A`` is ``≤ 0`` for sure: steps ``≥ 0`` and rates ``≤ 0`` (NaN: not sure)."""
    return bool(step.detach().amin() >= 0) and bool(rate.detach().amax() <= 0)


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
    if ell is None and (g is None or not bool(g.detach().amax() > 0)):  # one read (amax: no copy of a strided g)
        return problem, None, None
    batch, heads, length, _, _ = problem.shape
    with torch.no_grad():
        if g is None:
            cumulative = torch.zeros(batch, heads, length, dtype=torch.float64, device=problem.q.device)
        else:
            cumulative = cumulative_log_decay(g)
        impulse = torch.zeros(batch, heads, length, dtype=torch.float64, device=problem.q.device) \
            if ell is None else ell.detach().to(torch.float64)
        lifted = impulse.unsqueeze(-1) if cumulative.dim() == 4 else impulse
        log_scale = cumulative + torch.clamp((lifted - cumulative).cummax(dim=2).values, min=0.0)
        if problem.diagonal and problem.householder:  # the Householder factor only commutes with scalars
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
    stable = problem.with_keys_scaled(
        key_factor,
        log_decay=new_decay.to(dtype),
        q=problem.q * torch.exp(log_scale - row_scale.unsqueeze(-1)).to(dtype) if per_channel else problem.q,
        log_scale=None,
    )
    final = torch.exp(along_keys(log_scale[:, :, -1])).unsqueeze(-1)  # multiplies S_T [B, H, K, V]
    return stable, row_scale, final
