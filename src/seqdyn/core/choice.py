"""The backend choice: which backend computes an operator problem, and for ``"auto"`` how it is chosen.

A named backend is checked against the problem (it must support the combination); ``"auto"`` is the fastest of the
candidate backends, measured once per problem shape and cached (:mod:`seqdyn.core.autotune`), with a cost model
(:func:`modelled`) that orders the candidates, rules out those that cannot be fastest (:func:`ruled_out`) and decides
alone where nothing may be timed.  Mixers whose work around the operator can reverse the operator's ranking time
their whole call with the same candidates (:func:`auto_plan` via :func:`seqdyn.core.operator.auto_plan`) and the same
rule (:func:`too_large_to_time`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from seqdyn.core import autotune
from seqdyn.core.autotune import BackendChoice, BackendKey, module_options
from seqdyn.core.backends import REGISTRY
from seqdyn.core.packing import Packing
from seqdyn.core.problem import Problem, shared_over_heads

__all__ = [
    "BACKENDS",
    "QUADRATIC_AUTO_LIMIT",
    "Timing",
    "able",
    "backend_for",
    "fixed_plan",
    "plan",
    "problem_signature",
    "quadratic_entries",
    "ruled_out",
    "timed_choice",
    "too_large_to_time",
    "without_ruled_out",
]

#: The backend names accepted by ``backend=``; ``"auto"`` picks the fastest valid one.
BACKENDS = ("quadratic", "recurrent", "chunk", "scan", "auto")

log = logging.getLogger("seqdyn")

#: Above this many entries (B·H·T² scores, times K with a diagonal decay) ``auto`` does not materialize them.
QUADRATIC_AUTO_LIMIT = 1 << 26

#: ``compute(problem, backend module, want_state)`` → ``(y, state)``: the operator's run, which a trial times
Compute = Callable[[Problem, Any, bool], tuple[Tensor, Any]]


def backend_for(problem: Problem, backend: Any, compute: Compute, want_state: bool = False, train: bool | None = None):
    """``(backend module, BackendChoice)`` for ``backend`` (a name, or ``"auto"``: :func:`_auto_choice`, whose
    trials run ``compute``)."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend: got {backend!r}; allowed: {list(BACKENDS)}")
    if backend == "auto":
        choice = _auto_choice(problem, compute, want_state, _records_gradients(problem) if train is None else train)
        log.debug("auto backend: %s (%s)", choice, choice.why)
        return REGISTRY[str(choice)], choice
    module = REGISTRY[backend]
    reason = module.unsupported(problem)
    if reason is not None:
        raise ValueError(
            f"backend={backend!r} cannot compute {problem.describe()}: {reason}. Backends that can: {able(problem)}"
        )
    return module, BackendChoice.asked(backend)


def able(problem: Problem) -> list[str]:
    return [name for name, module in REGISTRY.items() if module.unsupported(problem) is None]


#: the scan's cost per state element and step relative to the chunked form's per-step cost (calibrated with
#: ``seqdyn bench operator`` on the CPU: GLA-type heads of K = V = 64 scan ~6× slower than they chunk)
SCAN_COST_FACTOR = 16.0
#: ``recurrent`` steps through time in Python: a candidate only for sequences this short (or as the only form)
RECURRENT_CANDIDATE_MAX = 64


def _auto_choice(problem: Problem, compute: Compute, want_state: bool, train: bool) -> BackendChoice:
    """What ``"auto"`` computes with: the fastest of the candidate backends, measured once per problem shape and
    cached (:func:`seqdyn.core.autotune.choose`), the cost model (:func:`modelled`) deciding where nothing may be
    timed."""
    return autotune.choose(
        _shape_key(problem, want_state, train),
        problem.q.device,
        lambda: plan(problem),
        lambda name: _trial(problem, compute, name, want_state, train),
        lambda: _shape_words(problem, train),
        lambda name: name in REGISTRY and REGISTRY[name].unsupported(problem) is None,
    )


def plan(problem: Problem) -> tuple[list[str], str, str]:
    """``(candidates, modelled, reason)``: the backends that can compute the problem, the modelled one first —
    but those :func:`ruled_out` unless nothing else can compute it — and the cost model's choice with its reason."""
    chosen, reason = modelled(problem)
    candidates = without_ruled_out(able(problem), ruled_out(problem))
    candidates.sort(key=lambda name: name != chosen)
    return candidates, chosen, reason


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
    reasons = {
        name: f"{entries:,} entries materialized"
        for name, entries in materialized.items()
        if entries > QUADRATIC_AUTO_LIMIT
    }
    if length > RECURRENT_CANDIDATE_MAX:
        reasons["recurrent"] = f"a Python loop over {length} > {RECURRENT_CANDIDATE_MAX} steps"
    return reasons


def _records_gradients(problem: Problem) -> bool:
    """Whether computing ``problem`` records gradients (grad mode on and an input that requires them)."""
    return torch.is_grad_enabled() and any(x.requires_grad for x in _tensors(problem))


def _tensors(problem: Problem) -> list[Tensor]:
    state = problem.initial_state
    parts = [
        problem.q,
        problem.k,
        problem.v,
        problem.log_decay,
        problem.beta,
        problem.direction,
        problem.written,
        problem.scale,
        problem.log_scale,
        problem.decay_rate,
        problem.normalizer,
        problem.normalizer_offset,
        *(state if isinstance(state, tuple) else (state,)),
    ]
    return [x for x in parts if isinstance(x, Tensor)]


#: the operator's cache keys made so far, by the values they hold (a cached choice then makes no new key object)
_OPERATOR_KEYS: dict[tuple, BackendKey] = {}
#: at most this many kept keys (a padded batch has a key per shape)
OPERATOR_KEYS_KEPT = 4096


def _shape_key(problem: Problem, want_state: bool, train: bool) -> BackendKey:
    """Everything but the data that a backend's speed depends on, as the cache key of :mod:`autotune`: made once
    per :func:`problem_signature`, batch, length, state passed in or out and mode."""
    batch, _, length, _, _ = problem.shape
    signature = problem_signature(problem)
    seen = (*signature.values(), batch, length, problem.initial_state is not None, want_state, train)
    key = _OPERATOR_KEYS.get(seen)
    if key is None:
        if len(_OPERATOR_KEYS) >= OPERATOR_KEYS_KEPT:
            _OPERATOR_KEYS.clear()
        options = (*signature.items(), ("state in", problem.initial_state is not None), ("state out", want_state))
        mode = "train" if train else "forward"
        key = _OPERATOR_KEYS[seen] = BackendKey(
            "operator", options, (("B", batch), ("T", length)), str(problem.q.dtype), mode
        )
    return key


def _scale_kind(scale: Tensor | float | None) -> str:
    if scale is None:
        return "none"
    if not isinstance(scale, Tensor):
        return "number"
    return "shared" if shared_over_heads(scale) else "per-head"


def problem_signature(problem: Problem) -> dict[str, Any]:
    """What a backend's speed depends on besides the batch, the length and the state passed in or out: heads,
    widths, the combination, dtypes, the chunk and which arguments are shared over heads."""
    _, heads, _, key_dim, value_dim = problem.shape
    sharing = lambda x: "shared" if shared_over_heads(x) else "per-head"  # noqa: E731
    return {
        "H": heads,
        "K": key_dim,
        "V": value_dim,
        "combination": problem.describe(),
        "dtypes": f"{problem.q.dtype} -> {problem.out_dtype}",
        "chunk": problem.chunk_size,
        "q": sharing(problem.q),
        "k": sharing(problem.k),
        "scale": _scale_kind(problem.scale),
        "log_scale": problem.log_scale is not None,
        "normalizer offset": problem.normalizer_offset is not None,
        "factored": problem.decay_rate is not None,
    }


def _shape_words(problem: Problem, train: bool) -> str:
    batch, heads, length, key_dim, value_dim = problem.shape
    return (
        f"{'forward + backward' if train else 'forward'} of B={batch}, H={heads}, T={length}, K={key_dim}, "
        f"V={value_dim}, {problem.describe()}"
    )


def _trial(problem: Problem, compute: Compute, name: str, want_state: bool, train: bool) -> None:
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

    fields = (
        "q",
        "k",
        "v",
        "log_decay",
        "beta",
        "direction",
        "written",
        "normalizer",
        "normalizer_offset",
        "initial_state",
        "scale",
        "log_scale",
        "decay_rate",
    )
    copy = problem.replaced(**{field: detached(getattr(problem, field)) for field in fields})
    with torch.enable_grad() if train else torch.no_grad():
        out, state = compute(copy, REGISTRY[name], want_state)
        if train:
            parts = [out, *(state if isinstance(state, tuple) else (state,) if state is not None else ())]
            sum(part.float().sum() for part in parts).backward()


def modelled(problem: Problem) -> tuple[str, str]:
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
        if (
            scan_able
            and scan_cost < chunk * (key_dim + value_dim) + key_dim * value_dim
            and (problem.diagonal or length > 2 * problem.chunk_size or key_dim * value_dim <= 4)
        ):
            return "scan", f"a scan of {key_dim}×{value_dim} states costs less than chunks of {chunk} steps"
        if not problem.diagonal and length <= 2 * problem.chunk_size:
            return "quadratic", f"T={length} ≤ 2·chunk without a diagonal decay: materialized scores are cheapest"
    if REGISTRY["chunk"].unsupported(problem) is None:
        return "chunk", f"the chunked form of T={length} in chunks of {chunk}"
    if batch * heads * length * length <= QUADRATIC_AUTO_LIMIT:
        return "quadratic", f"no chunked form; B·H·T² = {batch * heads * length * length:,} scores fit"
    return "recurrent", f"no chunked form and B·H·T² = {batch * heads * length * length:,} scores would not fit"


# ------------------------------------------------------------------------------------ a module's whole call, timed
@dataclass(frozen=True)
class Timing:
    """What a module's ``auto`` times, the one hook a mixer gives (``Mixer.auto_timing``).

    Attributes:
        run: ``run(x, name)``, the module's whole call on ``x`` with backend ``name`` — projections, convolutions
            and layouts around the core can reverse the core's ranking.
        plan: ``() -> (candidates, modelled, reason)``, called on a cache miss only (it may compute the core's
            inputs): the backends to time, the likeliest first and those :attr:`ruled_out` left out
            (:func:`fixed_plan`), the cost model's choice where nothing may be timed, and why.
        ruled_out: ``() -> {backend: reason}``: the backends not timed on ``x`` (:func:`too_large_to_time`).
        options: what else the speed depends on, added to the module's options in the cache key.
        about: the problem in words, appended to the explanation.
    """

    run: Callable[[Tensor, str], Any]
    plan: Callable[[], tuple[list[str], str, str]]
    ruled_out: Callable[[], dict[str, str]]
    options: Mapping[str, Any] = field(default_factory=dict)
    about: str = ""


def fixed_plan(
    candidates: list[str], modelled: str, reason: str, ruled: Callable[[], dict[str, str]]
) -> Callable[[], tuple[list[str], str, str]]:
    """The :attr:`Timing.plan` of a fixed list of ``candidates``, less those ``ruled()`` rules out (unless nothing
    else is left), the reason naming them."""

    def chosen_plan() -> tuple[list[str], str, str]:
        reasons = {name: why for name, why in ruled().items() if name in candidates}
        timed = without_ruled_out(candidates, reasons)
        not_timed = [f"{name} ({why})" for name, why in reasons.items() if name not in timed]
        return timed, modelled, reason + ("; not timed: " + ", ".join(not_timed) if not_timed else "")

    return chosen_plan


def timed_choice(module: torch.nn.Module, x: Tensor, timing: Timing, packing: Packing | None = None) -> BackendChoice:
    """``auto`` of a module by measuring: the fastest of ``timing``'s candidates for ``timing.run(x, name)`` at this
    shape, measured once and cached by :func:`seqdyn.core.autotune.choose` — forward and backward where gradients
    are recorded (returned, not accumulated: the parameters' ``.grad`` stay as they are), the forward alone
    otherwise.  The cache key (:class:`~seqdyn.core.autotune.BackendKey`) holds the module's class and every option
    it keeps (:func:`~seqdyn.core.autotune.module_options`), ``timing.options``, the sizes, the dtype and the mode.
    ``packing``: ``x`` holds packed sequences, whose count and longest length are cached by size class, so that
    batches of documents of other lengths do not each time the backends."""
    train = torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in module.parameters()))
    batch, length, channels = x.shape
    if packing is None:
        sizes, said = (("B", batch), ("T", length)), f"B={batch}, T={length}"
    else:
        count, longest = packing.size_class
        sizes, said = (("packed N", count), ("packed L", longest)), f"packed N ≤ {count} sequences of L ≤ {longest}"
    key = _module_key(module, timing, (*sizes, ("D", channels)), str(x.dtype), "train" if train else "forward")
    mode = "forward + backward" if train else "forward"
    words = f"of {module.name}, {said}, D={channels}{timing.about}"

    def trial(name: str) -> None:
        with torch.enable_grad() if train else torch.no_grad():
            inputs = x.detach().requires_grad_(train)
            y = timing.run(inputs, name)
            if train:
                parameters = [p for p in module.parameters() if p.requires_grad]
                torch.autograd.grad(y.real.sum(), [inputs, *parameters], allow_unused=True)

    return autotune.choose(
        key,
        x.device,
        timing.plan,
        trial,
        lambda: f"{mode} {words}",
        lambda name: name != "auto" and name in module.backends,
    )


#: at most this many keys kept per layer (padded batches of many shapes each have one)
MODULE_KEYS_KEPT = 256


def _module_key(
    module: torch.nn.Module, timing: Timing, sizes: tuple[tuple[str, int], ...], dtype: str, mode: str
) -> BackendKey:
    """The :class:`~seqdyn.core.autotune.BackendKey` of ``module`` at these sizes, made once per layer and call shape
    (a cached choice is then a dict lookup: its text is made once too)."""
    extra = tuple(timing.options.items())
    memo = module.__dict__.setdefault("_backend_keys", {})
    seen = (sizes, dtype, mode, extra, next(module.parameters(), torch.empty(0)).dtype)
    if seen not in memo:
        if len(memo) >= MODULE_KEYS_KEPT:
            memo.clear()
        name = f"{type(module).__module__}.{type(module).__qualname__}"
        memo[seen] = BackendKey(name, _kept_options(module) + extra, sizes, dtype, mode)
    return memo[seen]


def _kept_options(module: torch.nn.Module) -> tuple[tuple[str, Any], ...]:
    """:func:`~seqdyn.core.autotune.module_options` of ``module``, collected once per parameter dtype (the options
    are fixed at construction)."""
    dtype = next(module.parameters(), torch.empty(0)).dtype
    seen = module.__dict__.get("_kept_options")
    if seen is None or seen[0] != dtype:
        seen = module.__dict__["_kept_options"] = (dtype, module_options(module))
    return seen[1]
