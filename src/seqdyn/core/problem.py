"""Validation of a :class:`~seqdyn.core.dynamics.Dynamics` and the canonical, head-major form every backend receives.

Public layout: ``q, k: [B, T, H, K]``, ``v: [B, T, H, V]``, per-head scalars ``[B, T, H]``; a head
axis of size 1 is shared by all heads.  Inside, every tensor is head-major (``[B, H, T, ...]``), heads are
expanded, the scale ``b`` stays beside the keys (each backend multiplies it in where it is cheapest), and half
precision is computed in float32.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from seqdyn.core.dynamics import Dynamics, copy_with
from seqdyn.core.readouts import NORMALIZERS, STATE_NORMALIZERS, Readout, resolve_readout

#: the chunk of the ``chunk`` backend where the caller names none
DEFAULT_CHUNK_SIZE = 64
#: the delta rule's (DeltaNet, Gated DeltaNet) where the caller names none: on one CPU thread at 4k tokens, 8 heads
#: of 64 or of 128, chunks of 32 run the forward 1.1–1.3× faster than chunks of 64 (the UT transform's inverse and
#: grams shrink with the chunk; the sequential hand-over of states grows with the count of chunks) (2026-11-28)
DELTA_RULE_CHUNK_SIZE = 32
#: every other Householder factor's (a diagonal decay, a given direction, a written vector: KDA, RWKV-7, Gated
#: DeltaProduct) for keys of at most :data:`HOUSEHOLDER_SMALL_KEYS` channels; wider keys chunk by
#: :data:`DEFAULT_CHUNK_SIZE`, since this path hands a ``[K, K]`` transition from chunk to chunk (K² V products per
#: chunk).  Forward + backward at 4k tokens, 4 heads, one thread: keys of 64 take 0.84–0.95× the time with chunks
#: of 32 (KDA at batch 1 and 4, RWKV-7, Gated DeltaProduct), keys of 128 0.80–0.85× with chunks of 64 (2026-12-03)
HOUSEHOLDER_CHUNK_SIZE = 32
HOUSEHOLDER_SMALL_KEYS = 64


@dataclass
class Problem:
    """The operator's arguments after validation, in the layout the backends share.

    Attributes:
        q: ``[B, H, T, K]`` queries.
        k: ``[B, H, T, K]`` keys; the impulse of Sieber et al. 2025 eq. 3a is ``b_j k_j`` with the scale ``b`` below.
        scale: ``b`` as ``[B, H, T]`` or a constant float; ``None`` when ``b`` is given in log space (``log_scale``)
            or is 1.  Where ``b`` is multiplied in is the backends' decision (:meth:`with_scale_applied`).
        log_scale: ``log b`` ``[B, H, T]`` or ``None``, for scales beyond the float range (folded in by
            :meth:`folded` or by the operator's stabilization).
        v: ``[B, H, T, V]`` values, or ``None`` when only coefficients are asked for.
        log_decay: ``None`` (Λ = I), ``[B, H, T]`` (scalar) or ``[B, H, T, K]`` (diagonal) log decays ``g``; with
            ``decay_rate`` the step ``Δ`` ``[B, H, T]`` of the factored diagonal decay ``g = Δ ⊗ A``.
        decay_rate: ``A`` ``[H, K]`` of a factored diagonal decay, kept apart only for the backends that use the
            factors (``scan``); :meth:`materialized` forms ``g`` for the others.
        beta, direction: the Householder factor ``I − β w wᵀ`` (``[B, H, T]``, ``[B, H, T, K]``) or ``None``.
        written: ``ũ`` ``[B, H, T, K]`` of a diagonal-plus-low-rank transition ``Λ_t = D_t − ũ_t w_tᵀ`` (``ũ = −u``
            of the description's ``D + u zᵀ``, ``w = z`` the direction, β = 1), or ``None``: the vector the state's
            projection ``w_tᵀ S_{t−1}`` is written along, *not* decayed by ``D_t`` (the Householder factor writes
            ``D_t β_t w_t``).
        readout: the map φ.  normalizer: a name, or η as ``[B, H, T]``.
        normalizer_offset: ``log ε`` ``[B, H, T]`` of a term added to the named normalizer's η, or ``None``.
        initial_state: validated, head-major state (see :func:`check_state`), or ``None``.
    """

    q: Tensor
    k: Tensor
    v: Tensor | None
    log_decay: Tensor | None
    beta: Tensor | None
    direction: Tensor | None
    readout: Readout
    normalizer: str | Tensor
    initial_state: Any
    chunk_size: int
    out_dtype: torch.dtype
    scale: Tensor | float | None = None
    log_scale: Tensor | None = None
    decay_rate: Tensor | None = None
    written: Tensor | None = None
    normalizer_offset: Tensor | None = None

    def replaced(self, **changes: Any) -> "Problem":
        """``dataclasses.replace(self, **changes)`` without its per-field bookkeeping (:func:`copy_with`)."""
        return copy_with(self, changes)

    def materialized(self) -> "Problem":
        """The same problem with a factored decay formed: ``g_t = Δ_t A`` ``[B, H, T, K]``
        (Sieber et al. 2024 eq. 4)."""
        if self.decay_rate is None:
            return self
        return self.replaced(log_decay=factored_log_decay(self.log_decay, self.decay_rate), decay_rate=None)

    def folded(self) -> "Problem":
        """The same problem with ``b`` (``scale``, or ``exp(log_scale)``) multiplied into the keys: ``k ← b ⊙ k``."""
        problem = self if self.log_scale is None else self.with_keys_scaled(torch.exp(self.log_scale), log_scale=None)
        if problem.scale is None:
            return problem
        return problem.replaced(k=problem.scaled_keys(), scale=None)

    def with_scale_applied(self) -> "Problem":
        """The same outputs and states with ``b`` multiplied in where it is cheapest — the backends' speed decision.

        ``b_j k_j v_jᵀ = k_j (b_j v_j)ᵀ``: a per-step ``b`` of the identity readout goes on the values where it
        enters nowhere else (no Householder factor, no normalizer state ``z``) and the values are narrower than the
        keys (S6: V = 1, K = N), so scaling them is the cheaper product, or the keys are shared by all heads and
        ``b`` is not (Mamba-2: one group of keys), so the keys stay shared.  Otherwise it goes on the keys.
        """
        if not self._scale_on_values():
            return self.folded()
        return self.replaced(v=self.v * self.scale.unsqueeze(-1), scale=None)

    def _scale_on_values(self) -> bool:
        scale = self.scale
        if not isinstance(scale, Tensor) or self.v is None or not self.readout.linear or self.householder:
            return False
        if self.normalizer_kind in STATE_NORMALIZERS:
            return False
        keys_stay_shared = shared_over_heads(self.k) and not shared_over_heads(scale)
        return self.v.shape[-1] < self.k.shape[-1] or keys_stay_shared

    def scale_per_step(self) -> Tensor:
        """``b`` as ``[B, H, T]`` (ones when it is given in log space)."""
        if isinstance(self.scale, Tensor):
            return self.scale
        return self.k.new_full(self.k.shape[:3], 1.0 if self.scale is None else self.scale)

    def scaled_keys(self) -> Tensor:
        """The impulses ``b_j k_j`` ``[B, H, T, K]`` of ``scale`` (not of ``log_scale``)."""
        # b as a [B, H, T] tensor even when constant: the product then has the memory layout the backends were
        # tuned on (head-major), where a number would keep the keys' time-major layout
        return self.k if self.scale is None else self.k * self.scale_per_step().unsqueeze(-1)

    def with_keys_scaled(self, factor: Tensor, **changes) -> "Problem":
        """The problem with every impulse ``b_t k_t`` multiplied by ``factor`` (``[B, H, T]``, or ``[B, H, T, K]``
        per channel): DeltaNet's per-step factors go into ``b`` (its keys stay its Householder directions), all
        others into the keys, with ``b`` multiplied in first."""
        per_step = factor.dim() == self.k.dim() - 1
        if per_step and self.direction_is_key:
            return self.replaced(scale=self.scale_per_step() * factor.to(self.k.dtype), **changes)
        scaled = self.scaled_keys() * (factor.unsqueeze(-1) if per_step else factor).to(self.k.dtype)
        return self.replaced(k=scaled, scale=None, **changes)

    @property
    def direction_is_key(self) -> bool:
        """DeltaNet: the Householder direction is the key itself (``w_t = k_t``), so the impulses ``b_t w_t`` share
        the direction's Gram matrices in the ``chunk`` backend."""
        return self.beta is not None and self.direction is self.k and self.written is None

    @property
    def transition(self) -> tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None]:
        """The fields of ``Λ_t`` ``(log_decay, beta, direction, written)``, in the order the evolution takes them
        (:func:`~seqdyn.core.evolution.apply_evolution`)."""
        return self.log_decay, self.beta, self.direction, self.written

    @property
    def decay_kind(self) -> str:
        if self.log_decay is None:
            return "none"
        return "diagonal" if self.log_decay.dim() == 4 or self.decay_rate is not None else "scalar"

    @property
    def diagonal(self) -> bool:
        return self.decay_kind == "diagonal"

    @property
    def householder(self) -> bool:
        return self.beta is not None

    @property
    def normalizer_kind(self) -> str:
        return "tensor" if isinstance(self.normalizer, Tensor) else self.normalizer

    @property
    def augmented(self) -> bool:
        """Linear readouts with ``"sum"``/``"abs_max1"`` carry the normalizer state ``z`` as an extra value column."""
        return self.readout.linear and self.normalizer_kind in STATE_NORMALIZERS

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        batch, heads, length, key_dim = self.q.shape
        return batch, heads, length, key_dim, 0 if self.v is None else self.v.shape[-1]

    def describe(self) -> str:
        """A short description of the combination, used in error messages."""
        parts = [f"readout={self.readout.name!r}", f"decay={self.decay_kind}"]
        if self.householder:
            parts.append("householder" if self.written is None else "low rank")
        parts.append(f"normalizer={self.normalizer_kind!r}")
        return ", ".join(parts)


def factored_log_decay(step: Tensor, rate: Tensor) -> Tensor:
    """``g = Δ ⊗ A``: head-major steps ``[B, H, T]`` times rates ``[H, K]`` → ``[B, H, T, K]`` (Mamba-1's ``Δ_t A``)."""
    return step.unsqueeze(-1) * rate.unsqueeze(1)


def _shape(x: Tensor) -> str:
    return "[" + ", ".join(str(s) for s in x.shape) + "]"


def _check_tensor(name: str, x: Any, rank: int, layout: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name}: expected a tensor {layout}, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}; convert it with .float()")
    if x.dim() != rank:
        raise ValueError(f"{name}: expected {rank} dimensions {layout}, got shape {_shape(x)}")
    return x


class _Sizes:
    """B, T, H, K, V of the arguments; every per-head tensor checked against them."""

    def __init__(self, dynamics: Dynamics):
        q, k, v = dynamics.q, dynamics.k, dynamics.v
        self.batch, self.length = q.shape[0], q.shape[1]
        self.key_dim = q.shape[3]
        self.device = q.device
        if self.length < 1:
            raise ValueError("q: the sequence is empty (T=0); coefficient dynamics need T ≥ 1")
        if self.key_dim < 1 or (v is not None and v.shape[3] < 1):
            value_dim = "" if v is None else f", V={v.shape[3]}"  # coefficients() has no values
            raise ValueError(f"q/v: key and value dimensions must be ≥ 1, got K={self.key_dim}{value_dim}")
        per_head = _per_head(dynamics)
        self.heads = max(t.shape[2] for t in per_head.values())
        if k.shape[3] != self.key_dim:
            raise ValueError(f"k: key dimension {k.shape[3]} does not match q's {self.key_dim} (shapes [B, T, H, K])")
        for name, x in per_head.items():
            self.check(name, x, key_dim=name in KEY_FIELDS or (name == "log_decay" and x.dim() == 4))

    def check(self, name: str, x: Tensor, key_dim: bool = False, heads_of: str = "the other inputs") -> None:
        """Check batch, time, heads (1 or H) and, for ``key_dim``, the last axis K of ``x`` ``[B, T, H, ...]``."""
        if x.device != self.device:
            raise ValueError(f"{name}: on device {x.device}, but q is on {self.device}; move it with .to()")
        if x.shape[0] != self.batch:
            raise ValueError(f"{name}: batch size {x.shape[0]} does not match q's {self.batch}")
        if x.shape[1] != self.length:
            raise ValueError(f"{name}: sequence length {x.shape[1]} does not match q's {self.length}")
        if x.shape[2] not in (1, self.heads):
            raise ValueError(
                f"{name}: {x.shape[2]} heads, but {heads_of} have {self.heads}; use {self.heads} or 1 "
                "(shared by all heads)"
            )
        if key_dim and x.shape[3] != self.key_dim:
            raise ValueError(f"{name}: last dimension {x.shape[3]} does not match the key dimension K={self.key_dim}")

    def head_major(self, x: Tensor | None, dtype: torch.dtype) -> Tensor | None:
        """``[B, T, H|1, ...]`` → ``[B, H, T, ...]`` with heads expanded, in ``dtype`` (``None`` stays ``None``)."""
        if x is None:
            return None
        x = x.to(dtype).transpose(1, 2)
        return x.expand(x.shape[0], self.heads, *x.shape[2:])


#: the fields whose last axis is the key dimension K
KEY_FIELDS = ("q", "k", "householder_dir", "low_rank_write", "low_rank_read")


def _per_head(dynamics: Dynamics) -> dict[str, Tensor]:
    """The tensors laid out ``[B, T, H|1, ...]``, in the order their sizes are checked."""
    scale = dynamics.scale if isinstance(dynamics.scale, Tensor) and dynamics.scale.dim() == 3 else None
    normalizer = dynamics.normalizer if isinstance(dynamics.normalizer, Tensor) else None
    per_head = {
        "q": dynamics.q,
        "k": dynamics.k,
        "v": dynamics.v,
        "log_decay": dynamics.log_decay,
        "householder": dynamics.householder,
        "householder_dir": dynamics.householder_dir,
        "low_rank_write": dynamics.low_rank_write,
        "low_rank_read": dynamics.low_rank_read,
        "scale": scale,
        "log_scale": dynamics.log_scale,
        "normalizer": normalizer,
        "normalizer_log_offset": dynamics.normalizer_log_offset,
    }
    return {name: x for name, x in per_head.items() if x is not None}


def compute_dtype(*tensors: Tensor | None) -> torch.dtype:
    """The dtype the math runs in: the promoted input dtype, with float16/bfloat16 lifted to float32."""
    dtype = None
    for t in tensors:
        if t is not None:
            dtype = t.dtype if dtype is None else torch.promote_types(dtype, t.dtype)
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def default_chunk_size(problem: Problem) -> int:
    """The ``chunk`` backend's chunk where the caller names none: :data:`DELTA_RULE_CHUNK_SIZE` for the delta rule
    (DeltaNet, Gated DeltaNet), :data:`HOUSEHOLDER_CHUNK_SIZE` for any other Householder factor with keys of at most
    :data:`HOUSEHOLDER_SMALL_KEYS` channels, :data:`DEFAULT_CHUNK_SIZE` otherwise."""
    if not problem.householder:
        return DEFAULT_CHUNK_SIZE
    if problem.direction_is_key and not problem.diagonal:
        return DELTA_RULE_CHUNK_SIZE
    return HOUSEHOLDER_CHUNK_SIZE if problem.shape[3] <= HOUSEHOLDER_SMALL_KEYS else DEFAULT_CHUNK_SIZE


def prepare(
    dynamics: Dynamics, *, initial_state: Any = None, chunk_size: int | None = None, factored: bool = False
) -> Problem:
    """Validate ``dynamics`` (one check per argument, each naming it in its error) and return the canonical
    :class:`Problem`, head-major, with the state ``initial_state`` checked against it.

    ``factored=True`` keeps a ``decay_rate`` apart from the steps (the
    caller materializes it where its backend needs ``g``); by default ``g = Δ ⊗ A`` is formed here.  ``chunk_size``
    None: :func:`default_chunk_size`.
    """
    readout = _check_arguments(dynamics)
    sizes = _Sizes(dynamics)
    chunk_size = _check_chunk_size(chunk_size)
    _check_decay_rate(dynamics.decay_rate, dynamics.log_decay, sizes)
    problem = _head_major(dynamics, readout, sizes, chunk_size)
    if chunk_size is None:
        problem.chunk_size = default_chunk_size(problem)
    if not factored:
        problem = problem.materialized()
    problem.initial_state = check_state("initial_state", initial_state, problem, problem.q.dtype)
    return problem


def _check_arguments(dynamics: Dynamics) -> Readout:
    """Check each argument on its own (type, rank, value; the error names it), in the order of the signature.
    Returns the readout map φ."""
    _check_tensor("q", dynamics.q, 4, "[B, T, H, K]")
    _check_tensor("k", dynamics.k, 4, "[B, T, H, K]")
    if dynamics.v is not None:
        _check_tensor("v", dynamics.v, 4, "[B, T, H, V]")
    readout = resolve_readout(dynamics.readout)
    _check_log_decay(dynamics.log_decay)
    _check_householder(dynamics.householder, dynamics.householder_dir)
    _check_low_rank(dynamics)
    _check_scale(dynamics.scale)
    _check_log_scale(dynamics.log_scale, dynamics.scale)
    _check_normalizer(dynamics.normalizer)
    _check_normalizer_offset(dynamics.normalizer_log_offset, dynamics.normalizer, readout)
    return readout


#: the tensor fields whose dtypes set the compute dtype (with a tensor scale and η)
COMPUTED_FIELDS = (
    "q",
    "k",
    "v",
    "log_decay",
    "decay_rate",
    "householder",
    "householder_dir",
    "low_rank_write",
    "low_rank_read",
    "log_scale",
    "normalizer_log_offset",
)


def _head_major(dynamics: Dynamics, readout: Readout, sizes: _Sizes, chunk_size: int) -> Problem:
    """The layout change: every tensor ``[B, H, T, ...]`` in the compute dtype; the scale ``b`` a float or
    ``[B, H, T]``."""
    scale = dynamics.scale
    if isinstance(scale, Tensor) and scale.dim() == 0:
        scale = scale.to(sizes.device).expand(sizes.batch, sizes.length, 1)
    scale_tensor = scale if isinstance(scale, Tensor) else None
    normalizer = dynamics.normalizer if isinstance(dynamics.normalizer, Tensor) else None
    dtype = compute_dtype(scale_tensor, normalizer, *(getattr(dynamics, name) for name in COMPUTED_FIELDS))
    if dynamics.log_scale is None and scale_tensor is None:
        scale = sizes.key_dim**-0.5 if scale is None else float(scale)
    k = sizes.head_major(dynamics.k, dtype)
    key_is_direction = dynamics.householder is not None and dynamics.householder_dir is None
    direction = k if key_is_direction else sizes.head_major(dynamics.householder_dir, dtype)  # DeltaNet: w = k
    beta, written = sizes.head_major(dynamics.householder, dtype), None
    if dynamics.low_rank_write is not None:  # Λ = D + u zᵀ = D − ũ zᵀ: direction z, ũ = −u written undecayed
        direction = sizes.head_major(dynamics.low_rank_read, dtype)
        written = -sizes.head_major(dynamics.low_rank_write, dtype)
        beta = written.new_ones(written.shape[:3])
    rate = dynamics.decay_rate
    return Problem(
        q=sizes.head_major(dynamics.q, dtype),
        k=k,
        v=sizes.head_major(dynamics.v, dtype),
        log_decay=sizes.head_major(dynamics.log_decay, dtype),
        beta=beta,
        direction=direction,
        readout=readout,
        normalizer=dynamics.normalizer if normalizer is None else sizes.head_major(normalizer, dtype),
        initial_state=None,
        chunk_size=chunk_size,
        out_dtype=dynamics.q.dtype if dynamics.v is None else dynamics.v.dtype,
        scale=sizes.head_major(scale_tensor, dtype) if scale_tensor is not None else scale,
        log_scale=sizes.head_major(dynamics.log_scale, dtype),
        decay_rate=None if rate is None else rate.to(dtype).expand(sizes.heads, sizes.key_dim),
        written=written,
        normalizer_offset=sizes.head_major(dynamics.normalizer_log_offset, dtype),
    )


def shared_over_heads(x: Tensor) -> bool:
    """Whether a head-major ``[B, H, ...]`` tensor holds one head for all (size 1, or expanded with stride 0)."""
    return x.shape[1] == 1 or x.stride(1) == 0


def spread_over_heads(grad: Tensor, shape: torch.Size) -> Tensor:
    """The gradient for a head-major input of ``shape`` that was one head expanded over all, from the gradient
    ``[B, 1, ...]`` of that head: split evenly over the heads, so that their sum — all that reaches the tensor
    they were expanded from — is ``grad``."""
    return (grad / shape[1]).expand(shape)


def _check_log_decay(log_decay: Any) -> None:
    if log_decay is not None:
        rank = 4 if isinstance(log_decay, Tensor) and log_decay.dim() == 4 else 3
        _check_tensor("log_decay", log_decay, rank, "[B, T, H] (scalar decay) or [B, T, H, K] (diagonal)")


def _check_householder(householder: Any, direction: Any) -> None:
    if direction is not None and householder is None:
        raise ValueError("householder_dir: given without householder; pass householder=β [B, T, H] as well")
    if householder is not None:
        _check_tensor("householder", householder, 3, "β as [B, T, H] (or [B, T, H, n] for n factors per step)")
        if direction is not None:
            _check_tensor("householder_dir", direction, 4, "w as [B, T, H, K]")


def _check_low_rank(dynamics: Dynamics) -> None:
    """u and z of ``Λ_t = D_t + u_t z_tᵀ``: both ``[B, T, H, K]``, given together, in place of a Householder factor."""
    write, read = dynamics.low_rank_write, dynamics.low_rank_read
    if write is None and read is None:
        return
    if write is None or read is None:
        missing = "low_rank_write" if write is None else "low_rank_read"
        raise ValueError(f"{missing}: Λ = D + u zᵀ needs both u (low_rank_write) and z (low_rank_read); pass it too")
    if dynamics.householder is not None:
        raise ValueError(
            "low_rank_write/low_rank_read: given beside householder; a diagonal-plus-low-rank transition replaces "
            "the Householder factor (D(I − βwwᵀ) is u = −β D w, z = w): pass one of them"
        )
    if dynamics.decay_first:
        raise ValueError(
            "decay_first: Λ = D + u zᵀ has no order of decay and update (both act on the previous state); "
            "for (I − βkkᵀ) D pass u = −β k, z = D k"
        )
    _check_tensor("low_rank_write", write, 4, "u as [B, T, H, K]")
    _check_tensor("low_rank_read", read, 4, "z as [B, T, H, K]")


def _check_scale(scale: Any) -> None:
    if scale is None or (isinstance(scale, numbers.Real) and not isinstance(scale, bool)):
        return
    if isinstance(scale, Tensor) and scale.dim() == 0:
        if not scale.is_floating_point():
            raise ValueError(f"scale: expected a float or a floating-point tensor [B, T, H], got dtype {scale.dtype}")
    elif isinstance(scale, Tensor):
        _check_tensor("scale", scale, 3, "b as [B, T, H]")
    else:
        raise ValueError(f"scale: expected None (K**-0.5), a float or a tensor [B, T, H], got {type(scale).__name__}")


def _check_log_scale(log_scale: Any, scale: Any) -> None:
    if log_scale is not None:
        if scale is not None:
            raise ValueError("scale/log_scale: give the scale b once, either as scale or as log_scale = log b")
        _check_tensor("log_scale", log_scale, 3, "log b as [B, T, H]")


def _check_normalizer(normalizer: Any) -> None:
    if isinstance(normalizer, Tensor):
        _check_tensor("normalizer", normalizer, 3, "η as [B, T, H]")
    elif not (isinstance(normalizer, str) and normalizer in NORMALIZERS):
        raise ValueError(f"normalizer: got {normalizer!r}; allowed: {list(NORMALIZERS)} or a tensor η [B, T, H]")


def _check_normalizer_offset(offset: Any, normalizer: Any, readout: Readout) -> None:
    """``log ε`` ``[B, T, H]`` of a term added to a named normalizer of the identity readout."""
    if offset is None:
        return
    _check_tensor("normalizer_log_offset", offset, 3, "log ε as [B, T, H]")
    named = isinstance(normalizer, str) and normalizer in STATE_NORMALIZERS
    if not named or not readout.linear:
        given = normalizer if isinstance(normalizer, str) else "a tensor"
        raise ValueError(
            f"normalizer_log_offset: adds ε to η = Σ_j α_ij ('sum') or max(|Σ_j α_ij|, 1) ('abs_max1') of the "
            f"identity readout; got readout={readout.name!r}, normalizer={given!r} (a given η tensor takes its ε "
            "itself)"
        )


def _check_chunk_size(chunk_size: Any) -> int | None:
    if chunk_size is None:
        return None  # the default of the problem's kind (prepare)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive integer, got {chunk_size!r}")
    return chunk_size


def _check_decay_rate(rate: Any, log_decay: Tensor | None, sizes: _Sizes) -> None:
    """``A`` ``[H, K]`` (or ``[1, K]``) of the factored decay ``g_t = Δ_t ⊗ A``; needs the steps ``Δ`` as a scalar
    ``log_decay``."""
    if rate is None:
        return
    _check_tensor("decay_rate", rate, 2, "A as [H, K] (per head and key channel)")
    if log_decay is None or log_decay.dim() != 3:
        raise ValueError(
            "decay_rate: the factored decay g = log_decay ⊗ decay_rate needs log_decay as the steps "
            "Δ [B, T, H]; pass a scalar log_decay, or drop decay_rate and pass g as [B, T, H, K]"
        )
    if rate.shape[1] != sizes.key_dim:
        raise ValueError(
            f"decay_rate: last dimension {rate.shape[1]} does not match the key dimension K={sizes.key_dim}"
        )
    if rate.shape[0] not in (1, sizes.heads):
        raise ValueError(
            f"decay_rate: {rate.shape[0]} heads, but the other inputs have {sizes.heads}; "
            f"give A as [{sizes.heads}, {sizes.key_dim}] or [1, {sizes.key_dim}]"
        )
    if rate.device != sizes.device:
        raise ValueError(f"decay_rate: on device {rate.device}, but q is on {sizes.device}; move it with .to()")


def state_layout(problem: Problem) -> str:
    """The layout of the recurrent state for this combination, for messages and docs."""
    if not problem.readout.linear:
        return "a key cache (keys [B, H, N, K], values [B, H, N, V]) of transformed keys"
    if problem.augmented:
        return f"(S [B, H, K, V], z [B, H, K]) for normalizer={problem.normalizer_kind!r}"
    return "S [B, H, K, V]"


def check_state(name: str, state: Any, problem: Problem, dtype: torch.dtype) -> Any:
    """Validate a recurrent state against ``problem``; returns it in ``dtype`` (or ``None``)."""
    if state is None:
        return None
    batch, heads, _, key_dim, value_dim = problem.shape
    expected = state_layout(problem)
    if problem.readout.linear and not problem.augmented:
        if not isinstance(state, Tensor):
            raise ValueError(f"{name}: expected {expected}, got {type(state).__name__}")
        parts, shapes = (state,), [(batch, heads, key_dim, value_dim)]
    else:
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise ValueError(f"{name}: expected {expected}, got {type(state).__name__}")
        parts = tuple(state)
        shapes = [(batch, heads, key_dim, value_dim), (batch, heads, key_dim)] if problem.readout.linear else None
    for part in parts:
        if not isinstance(part, Tensor) or not part.is_floating_point():
            raise ValueError(f"{name}: expected {expected} of floating-point tensors")
        if part.device != problem.q.device:
            raise ValueError(f"{name}: on device {part.device}, but q is on {problem.q.device}")
    if shapes is None:
        keys, values = parts
        ok = (
            keys.dim() == 4
            and values.dim() == 4
            and keys.shape[:2] == (batch, heads)
            and keys.shape[3] == key_dim
            and values.shape[:3] == keys.shape[:3]
            and (value_dim == 0 or values.shape[3] == value_dim)
        )
    else:
        ok = all(tuple(p.shape) == s for p, s in zip(parts, shapes))
    if not ok:
        got = ", ".join(_shape(p) for p in parts)
        raise ValueError(
            f"{name}: expected {expected} with B={batch}, H={heads}, K={key_dim}, V={value_dim}; got {got}"
        )
    parts = tuple(p.to(dtype) for p in parts)
    return parts[0] if len(parts) == 1 else parts
