"""Packed sequences and padded batches, each one value made once at a public entry point and passed down.

flash-linear-attention's convention: ``cu_seqlens`` are int offsets ``[N + 1]``, ``0 = c_0 < c_1 < … < c_N = T``;
sequence ``n`` is steps ``c_n ≤ t < c_{n+1}`` of a ``[1, T, …]`` tensor.  A padded batch is ``attention_mask``
``[B, T]`` (1 = token, 0 = padding, left or right).  :func:`sequences_of` turns either into one typed value —
:class:`Packing` or :class:`Padding` — validated once (one host synchronization), which caches what it derives
(offsets, positions, resets, size classes, the packing of a padded batch's tokens); every ``forward`` below the entry
point takes that value, and :meth:`Packing.of` passes a ``Packing`` through without checking it again.

Both values offer the same two layouts, as plain functions called in line:

- the tokens packed end to end, ``[1, Σ tokens, …]``: :meth:`Packing.packed` / :meth:`Padding.packed`, with the
  ``Packing`` of those tokens (``.tokens``) and the way back (``unpacked``; 0 at padded steps).  What computes
  token by token around the operator (every :class:`~seqdyn.mixers.CoefficientMixer`, the models' blocks) takes this
  layout: nothing is computed for padding.
- the sequences side by side, each starting at step 0 and right-padded, ``[N, L, …]`` or ``[B, T, …]``:
  ``side_by_side`` and back ``in_place``.  Any causal map takes this layout; each sequence's outputs are those it has
  alone.

The operator computes a packed batch with the identity readout and no state in or out (training) as one sequence
with a hard reset (``Λ = 0``) at every sequence's first step, in ``chunk`` and ``scan``: nothing is computed for
padding.  Otherwise it takes the ``N`` sequences side by side, a padded step having ``k = 0``, ``v = 0``, ``g = 0``
and ``β = 0``, an identity step of the dynamics (``Λ = I``, nothing written), so outputs and linear states equal
those of each sequence run alone.  Either way no coefficient crosses a boundary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from seqdyn.core.rows import count_rows, select_rows

if TYPE_CHECKING:
    from seqdyn.core.dynamics import Dynamics

__all__ = [
    "Alignment",
    "Packing",
    "Padding",
    "Sequences",
    "TIMED_FIELDS",
    "check_cu_seqlens",
    "dynamics_side_by_side",
    "from_state",
    "pack_documents",
    "packing_of",
    "reset_at_starts",
    "sequences_of",
    "timed_fields",
]


def check_cu_seqlens(cu_seqlens: object, length: int, batch: int, name: str = "cu_seqlens") -> list[int]:
    """The offsets of a packed batch as a list, checked against its time ``length`` and ``batch`` size."""
    if (
        not isinstance(cu_seqlens, Tensor)
        or cu_seqlens.dtype not in (torch.int32, torch.int64)
        or cu_seqlens.dim() != 1
        or cu_seqlens.numel() < 2
    ):
        got = (
            f"{cu_seqlens.dtype} of shape {list(cu_seqlens.shape)}"
            if isinstance(cu_seqlens, Tensor)
            else type(cu_seqlens).__name__
        )
        raise ValueError(
            f"{name}: expected an int32 or int64 tensor of offsets [N + 1] (N ≥ 1 sequences), e.g. "
            f"torch.tensor([0, 5, 12]); got {got}"
        )
    if batch != 1:
        raise ValueError(
            f"{name}: a packed batch has batch size 1 (the sequences concatenated along time); got batch size {batch}"
        )
    offsets = [int(value) for value in cu_seqlens.tolist()]
    if offsets[0] != 0:
        raise ValueError(f"{name}: must start at 0, got {offsets[0]}")
    if any(later <= earlier for earlier, later in zip(offsets, offsets[1:])):
        raise ValueError(f"{name}: must increase strictly (every sequence at least one step), got {offsets}")
    if offsets[-1] != length:
        raise ValueError(f"{name}: must end at the packed length T = {length}, got {offsets[-1]}")
    return offsets


@dataclass(frozen=True)
class Packing:
    """``N`` sequences packed along time in a batch of one: the map between the packed ``[1, T, …]`` layout and the
    padded ``[N, L, …]`` one (``L`` the longest sequence), made once from ``cu_seqlens`` (:meth:`of`).

    Attributes:
        offsets: ``cu_seqlens`` as a tuple; lengths: each sequence's length.
        sequence, position: ``[T]`` the sequence and the position within it of every packed step.
        cu_seqlens: the offsets as an int64 tensor ``[N + 1]`` on the device.
    """

    offsets: tuple[int, ...]
    lengths: tuple[int, ...]
    sequence: Tensor
    position: Tensor
    cu_seqlens: Tensor

    @classmethod
    def of(cls, cu_seqlens: object, length: int, batch: int, device: torch.device) -> Packing:
        """The packing of ``cu_seqlens`` (checked by :func:`check_cu_seqlens`) for a ``[batch, length, …]`` input; a
        ``Packing`` is checked against the shape alone (no host synchronization) and returned."""
        if isinstance(cu_seqlens, Packing):
            return cu_seqlens.fitted(length, batch, device)
        return cls.of_lengths(check_cu_seqlens(cu_seqlens, length, batch), device)

    @classmethod
    def of_lengths(cls, offsets: list[int], device: torch.device) -> Packing:
        """The packing of offsets already known to be valid (increasing from 0)."""
        lengths = [end - start for start, end in zip(offsets, offsets[1:])]
        sequence = torch.repeat_interleave(
            torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device)
        )
        starts = torch.tensor(offsets[:-1], device=device)
        position = torch.arange(offsets[-1], device=device) - starts[sequence]
        return cls(tuple(offsets), tuple(lengths), sequence, position, torch.tensor(offsets, device=device))

    def fitted(self, length: int, batch: int, device: torch.device) -> Packing:
        """This packing for a ``[batch, length, …]`` input on ``device``: the shape checked, the tensors moved."""
        if batch != 1:
            raise ValueError(
                f"cu_seqlens: a packed batch has batch size 1 (the sequences concatenated along time); "
                f"got batch size {batch}"
            )
        if self.offsets[-1] != length:
            raise ValueError(f"cu_seqlens: must end at the packed length T = {length}, got {self.offsets[-1]}")
        if self.position.device == torch.device(device):
            return self
        return Packing(
            self.offsets, self.lengths, *(t.to(device) for t in (self.sequence, self.position, self.cu_seqlens))
        )

    @property
    def count(self) -> int:
        """N, the number of sequences."""
        return len(self.lengths)

    @property
    def longest(self) -> int:
        return max(self.lengths)

    @cached_property
    def starts(self) -> Tensor:
        """``[T]`` bool: the first step of every sequence (where the operator resets its state)."""
        return self.position == 0

    @property
    def size_class(self) -> tuple[int, int]:
        """The count N and the longest length L, each rounded up to a power of two."""
        return _size_class(self.count), _size_class(self.longest)

    @property
    def tokens(self) -> Packing:
        """The packing of the real tokens (:meth:`packed`): the sequences themselves."""
        return self

    def packed(self, x: Tensor) -> Tensor:
        """The tokens packed end to end: ``x`` itself."""
        return x

    def unpacked(self, y: Tensor) -> Tensor:
        """The outputs of :meth:`packed` tokens in place: ``y`` itself."""
        return y

    def side_by_side(self, packed: Tensor, fill: float = 0.0) -> Tensor:
        """``[1, T, …]`` → ``[N, L, …]``, the steps past a sequence's end set to ``fill`` (differentiable)."""
        padded = packed.new_full((self.count, self.longest, *packed.shape[2:]), fill)
        return padded.index_put((self.sequence, self.position), packed[0])

    def in_place(self, padded: Tensor) -> Tensor:
        """``[N, L, …]`` → ``[1, T, …]``: the real steps of every sequence, concatenated."""
        return padded[self.sequence, self.position].unsqueeze(0)

    def block_diagonal(self, per_sequence: Tensor) -> Tensor:
        """``[N, H, L, L]`` per-sequence matrices → ``[1, H, T, T]`` with each sequence's block on the diagonal
        and zeros across sequences."""
        length = self.sequence.numel()
        rows = self.sequence[:, None] == self.sequence[None, :]  # [T, T]: the same sequence
        entries = per_sequence[self.sequence[:, None], :, self.position[:, None], self.position[None, :]]  # [T, T, H]
        full = torch.where(rows[..., None], entries, entries.new_zeros(()))
        return full.permute(2, 0, 1).reshape(1, -1, length, length)


def _size_class(size: int) -> int:
    """The power of two ≥ ``size``."""
    return 1 << max(size - 1, 0).bit_length()


def check_attention_mask(attention_mask: object, batch: int, length: int, name: str = "attention_mask") -> Tensor:
    """The mask as a bool tensor ``[B, T]``, checked: 0/1 (or bool) values, and each row's tokens contiguous (left or
    right padding)."""
    if (
        not isinstance(attention_mask, Tensor)
        or attention_mask.dim() != 2
        or tuple(attention_mask.shape) != (batch, length)
        or attention_mask.is_complex()
    ):
        got = list(attention_mask.shape) if isinstance(attention_mask, Tensor) else type(attention_mask).__name__
        raise ValueError(
            f"{name}: expected a tensor [B, T] = [{batch}, {length}] of 1 (token) and 0 (padding); got {got}"
        )
    if attention_mask.dtype != torch.bool:
        if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
            raise ValueError(f"{name}: values must be 0 (padding) or 1 (token)")
        attention_mask = attention_mask != 0
    changes = (attention_mask[:, 1:] != attention_mask[:, :-1]).sum(dim=1)
    inner = changes - (~attention_mask[:, 0]).long() - (~attention_mask[:, -1]).long()  # changes beside the edges
    if bool((inner > 0).any()) or bool((changes > 2).any()):
        row = int(torch.nonzero((inner > 0) | (changes > 2))[0, 0])
        raise ValueError(
            f"{name}: row {row} has padding between tokens; only left or right padding is supported "
            "(pack such sequences with cu_seqlens instead)"
        )
    return attention_mask


@dataclass(frozen=True)
class Alignment:
    """A padded batch with every row's tokens moved to its start: ``aligned[b, t] = x[b, (t + s_b) mod T]`` where
    ``s_b`` is the number of left-padding steps of row ``b``; ``restore`` moves them back and zeros the padding."""

    mask: Tensor
    gather: Tensor  # [B, T]: the step of x at aligned step t
    scatter: Tensor  # [B, T]: the aligned step of x's step t

    @classmethod
    def of(cls, mask: Tensor) -> Alignment:
        """The alignment of a checked mask (bool ``[B, T]``, :func:`check_attention_mask`)."""
        length = mask.shape[1]
        starts = torch.where(mask.any(dim=1), mask.long().argmax(dim=1), torch.zeros_like(mask[:, 0], dtype=torch.long))
        steps = torch.arange(length, device=mask.device)
        return cls(mask, (steps[None] + starts[:, None]) % length, (steps[None] - starts[:, None]) % length)

    def align(self, x: Tensor) -> Tensor:
        return _gather_steps(x, self.gather)

    def restore(self, y: Tensor) -> Tensor:
        restored = _gather_steps(y, self.scatter)
        mask = self.mask.reshape(*self.mask.shape, *(1,) * (restored.dim() - 2))
        return torch.where(mask, restored, restored.new_zeros(()))


def _gather_steps(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, index[b, t], …]`` for ``x`` ``[B, T, …]``."""
    return x.gather(1, index.reshape(*index.shape, *(1,) * (x.dim() - 2)).expand(*index.shape, *x.shape[2:]))


@dataclass(frozen=True)
class Padding:
    """A padded batch ``[B, T]`` (``attention_mask``: 1 = token, 0 = left or right padding), made once
    (:meth:`of`, checked by :func:`check_attention_mask`)."""

    mask: Tensor  # [B, T] bool

    @classmethod
    def of(cls, attention_mask: object, batch: int, length: int, device: torch.device) -> Padding:
        if isinstance(attention_mask, Padding):
            if tuple(attention_mask.mask.shape) != (batch, length):
                raise ValueError(
                    f"attention_mask: expected [B, T] = [{batch}, {length}], got {list(attention_mask.mask.shape)}"
                )
            return attention_mask
        return cls(check_attention_mask(attention_mask, batch, length).to(device))

    @cached_property
    def whole(self) -> bool:
        """Whether every step is a token (no padding at all)."""
        return bool(self.mask.all())

    @cached_property
    def tokens(self) -> Packing:
        """The packing of the real tokens, each row with a token a sequence (:meth:`packed`)."""
        counts = self.mask.sum(dim=1)
        if not bool(counts.any()):
            raise ValueError("attention_mask: every step of every row is padding; nothing to compute")
        lengths = counts[counts > 0].tolist()
        return Packing.of_lengths([0, *torch.tensor(lengths).cumsum(0).tolist()], self.mask.device)

    def packed(self, x: Tensor) -> Tensor:
        """``[B, T, …]`` → the tokens of every row in order, ``[1, Σ tokens, …]``."""
        return x[self.mask].unsqueeze(0)

    def unpacked(self, y: Tensor) -> Tensor:
        """``[1, Σ tokens, …]`` → ``[B, T, …]``, 0 at padded steps."""
        return y.new_zeros(*self.mask.shape, *y.shape[2:]).index_put((self.mask,), y[0])

    @cached_property
    def alignment(self) -> Alignment:
        return Alignment.of(self.mask)

    def side_by_side(self, x: Tensor) -> Tensor:
        """Every row's tokens moved to its start (:class:`Alignment`)."""
        return self.alignment.align(x)

    def in_place(self, y: Tensor) -> Tensor:
        """The aligned rows moved back, 0 at padded steps."""
        return self.alignment.restore(y)


#: packed sequences or a padded batch: what a forward takes as ``sequences=``
Sequences = Packing | Padding


def sequences_of(x: Tensor, cu_seqlens: object = None, attention_mask: object = None) -> Sequences | None:
    """The one value of ``cu_seqlens`` or ``attention_mask`` for the input ``x`` ``[B, T, …]``, checked once (a
    ``Packing`` or ``Padding`` passes through); ``None`` when both are ``None``."""
    if cu_seqlens is not None and attention_mask is not None:
        raise ValueError("cu_seqlens, attention_mask: give one — a packed batch has no padding")
    if cu_seqlens is not None:
        return Packing.of(cu_seqlens, x.shape[1], x.shape[0], x.device)
    if attention_mask is not None:
        return Padding.of(attention_mask, x.shape[0], x.shape[1], x.device)
    return None


def from_state(
    run: Callable[[Tensor, object], tuple[Tensor, object]],
    x: Tensor,
    state: object,
    return_state: bool,
    cu_seqlens: object = None,
    attention_mask: object = None,
):
    """``run(x, state)`` → ``(y, next state)``, returned whole with ``return_state``, else ``y`` alone: a mixer's or
    a model's forward from a state.

    With ``cu_seqlens`` or ``attention_mask``, or a ``state`` that is a list (one per sequence, as such a call
    returns), every sequence runs alone from its own state — a padded step is no step at all, so a right-padded
    prefill leaves the state of the unpadded sequence — and the state returned is that list (each of batch 1; a
    sequence without a token keeps its state).  A batched state is split into its rows first
    (:func:`seqdyn.core.rows.select_rows`)."""
    if cu_seqlens is None and attention_mask is None and not isinstance(state, list):
        y, state = run(x, state)
        return (y, state) if return_state else y
    pieces, place = _sequences(x, cu_seqlens, attention_mask)
    outputs, states = [], []
    for piece, start in zip(pieces, _per_sequence(state, len(pieces))):
        y, after = run(piece, start) if piece.shape[1] else (None, start)
        outputs.append(y)
        states.append(after)
    if all(y is None for y in outputs):
        raise ValueError("attention_mask: every step of every row is padding; nothing to compute")
    y = place(outputs)
    return (y, states) if return_state else y


def _sequences(x: Tensor, cu_seqlens: object, attention_mask: object) -> tuple[list[Tensor], Callable]:
    """Each sequence of ``x`` as ``[1, n, …]``, and the map from their outputs back to ``x``'s layout (0 at
    padded steps)."""
    sequences = sequences_of(x, cu_seqlens, attention_mask)
    if isinstance(sequences, Packing):
        offsets = sequences.offsets
        return [x[:, start:end] for start, end in zip(offsets, offsets[1:])], lambda ys: torch.cat(ys, dim=1)
    if sequences is None:
        return [x[row : row + 1] for row in range(x.shape[0])], lambda ys: torch.cat(ys, dim=0)
    mask = sequences.mask

    def place(ys: list[Tensor | None]) -> Tensor:
        first = next(y for y in ys if y is not None)
        out = first.new_zeros(x.shape[0], x.shape[1], *first.shape[2:])
        for row, y in enumerate(ys):
            if y is not None:
                out[row, mask[row]] = y[0]
        return out

    return [x[row : row + 1, mask[row]] for row in range(x.shape[0])], place


def _per_sequence(state: object, count: int) -> list[object]:
    """``count`` states, one per sequence: ``None`` (each from the start), the list itself, or a batched state's
    rows."""
    if state is None:
        return [None] * count
    if isinstance(state, list):
        if len(state) != count:
            raise ValueError(f"state: a list of one state per sequence needs {count}, got {len(state)}")
        return state
    rows = count_rows(state)  # None: a state that holds no tensor yet (init_state's), the same for every row
    if rows is not None and rows != count:
        raise ValueError(
            f"state: a batched state of {rows} rows for {count} sequences; give one per sequence (a "
            "list) or a state of as many rows"
        )
    return [select_rows(state, torch.tensor([row if rows else 0])) for row in range(count)]


def pack_documents(inputs: Tensor, targets: Tensor, ignore_index: int = -100) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded documents ``[n, T]`` (targets ``ignore_index`` after each one's end) packed end to end:
    ``(inputs [1, Σ len], targets [1, Σ len], cu_seqlens [n' + 1])``, documents without a target left out."""
    real = targets != ignore_index
    lengths = real.sum(dim=1)
    lengths = lengths[lengths > 0]
    cu_seqlens = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    return inputs[real][None], targets[real][None], cu_seqlens


#: the fields of a description that have a time axis (``[B, T, …]`` where they are tensors) and the value of a
#: padded step, an identity step of the dynamics (nothing written: k = v = 0; Λ = I: g = 0, β = 0; η = 1)
TIMED_FIELDS = {
    "q": 0.0,
    "k": 0.0,
    "v": 0.0,
    "log_decay": 0.0,
    "householder": 0.0,
    "householder_dir": 0.0,
    "low_rank_write": 0.0,
    "low_rank_read": 0.0,
    "scale": 1.0,
    "normalizer": 1.0,
    "log_scale": 0.0,
    "normalizer_log_offset": 0.0,
}


#: the timed fields without a channel axis (``[B, T, H]``; per factor ``[B, T, H, n]``)
PER_HEAD_ONLY = ("log_decay", "householder", "scale", "normalizer", "log_scale", "normalizer_log_offset")


def timed_fields(dynamics: Dynamics) -> dict[str, Tensor]:
    """The fields of ``dynamics`` that are tensors with a time axis."""
    return {
        name: value
        for name in TIMED_FIELDS
        if isinstance(value := getattr(dynamics, name), Tensor) and value.dim() >= 3 - (name in PER_HEAD_ONLY)
    }


def packing_of(dynamics: Dynamics, cu_seqlens: Any) -> Packing:
    """The packing of ``dynamics`` by ``cu_seqlens``, every timed field checked to be ``[1, T, …]``."""
    batch, length = dynamics.q.shape[:2] if dynamics.q.dim() >= 2 else (None, None)
    packing = Packing.of(cu_seqlens, length, batch, dynamics.q.device)
    for name, value in timed_fields(dynamics).items():
        if tuple(value.shape[:2]) != (1, length):
            raise ValueError(
                f"{name}: a packed batch is [1, T, …] with T = {length} (that of q); got shape {list(value.shape)}"
            )
    return packing


def dynamics_side_by_side(dynamics: Dynamics, packing: Packing) -> Dynamics:
    """The packed sequences of ``dynamics`` side by side, ``[N, L, …]``, each right-padded with identity steps."""
    return dynamics.replace(
        **{name: packing.side_by_side(value, TIMED_FIELDS[name]) for name, value in timed_fields(dynamics).items()}
    )


def reset_at_starts(dynamics: Dynamics, packing: Packing) -> Dynamics:
    """The packed sequences as one sequence with a hard reset (``g = −∞``, Λ = 0) at every sequence's first step:
    no state reaches a later sequence, so with the identity readout (φ(0) = 0) no coefficient crosses a boundary
    and the outputs are each sequence's own — computed on the ``T`` packed steps, without padding."""
    g = dynamics.log_decay
    if g is None:  # Λ = I: a scalar decay shared by all heads, 0 but at the starts
        g = dynamics.q.new_zeros(1, packing.position.numel(), 1)
    starts = packing.starts.reshape(1, -1, *(1,) * (g.dim() - 2))  # [1, T, 1…]
    changes = {"log_decay": torch.where(starts, g.new_full((), float("-inf")), g)}
    if dynamics.low_rank_write is not None:  # Λ = D + u zᵀ is 0 only with u = 0 as well
        u = dynamics.low_rank_write
        changes["low_rank_write"] = u.masked_fill(packing.starts.reshape(1, -1, 1, 1), 0.0)
    return dynamics.replace(**changes)
