"""Packed sequences: ``N`` sequences concatenated along time in a batch of one, delimited by ``cu_seqlens``.

flash-linear-attention's convention: ``cu_seqlens`` are int offsets ``[N + 1]``, ``0 = c_0 < c_1 < … < c_N = T``;
sequence ``n`` is steps ``c_n ≤ t < c_{n+1}`` of a ``[1, T, …]`` tensor.  The operator computes a packed batch as
the ``N`` sequences side by side, each right-padded to the longest (:class:`Packing`): a padded step has ``k = 0``,
``v = 0``, ``g = 0`` and ``β = 0``, an identity step of the dynamics (``Λ = I``, nothing written), so outputs and
linear states equal those of each sequence run alone, and no coefficient crosses a boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Packing", "check_cu_seqlens"]


def check_cu_seqlens(cu_seqlens: object, length: int, batch: int, name: str = "cu_seqlens") -> list[int]:
    """The offsets of a packed batch as a list, checked against its time ``length`` and ``batch`` size."""
    if not isinstance(cu_seqlens, Tensor) or cu_seqlens.dtype not in (torch.int32, torch.int64) \
            or cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        got = (f"{cu_seqlens.dtype} of shape {list(cu_seqlens.shape)}" if isinstance(cu_seqlens, Tensor)
               else type(cu_seqlens).__name__)
        raise ValueError(f"{name}: expected an int32 or int64 tensor of offsets [N + 1] (N ≥ 1 sequences), e.g. "
                         f"torch.tensor([0, 5, 12]); got {got}")
    if batch != 1:
        raise ValueError(f"{name}: a packed batch has batch size 1 (the sequences concatenated along time); got "
                         f"batch size {batch}")
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
    """The map between a packed ``[1, T, …]`` layout and a padded ``[N, L, …]`` one (``L`` the longest sequence).

    Attributes:
        offsets: ``cu_seqlens`` as a list; lengths: each sequence's length.
        sequence, position: ``[T]`` the sequence and the position within it of every packed step.
    """

    offsets: tuple[int, ...]
    lengths: tuple[int, ...]
    sequence: Tensor
    position: Tensor

    @classmethod
    def of(cls, cu_seqlens: object, length: int, batch: int, device: torch.device) -> Packing:
        offsets = check_cu_seqlens(cu_seqlens, length, batch)
        lengths = [end - start for start, end in zip(offsets, offsets[1:])]
        sequence = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                           torch.tensor(lengths, device=device))
        starts = torch.tensor(offsets[:-1], device=device)
        position = torch.arange(length, device=device) - starts[sequence]
        return cls(tuple(offsets), tuple(lengths), sequence, position)

    @property
    def count(self) -> int:
        """N, the number of sequences."""
        return len(self.lengths)

    @property
    def longest(self) -> int:
        return max(self.lengths)

    def unpack(self, packed: Tensor, fill: float = 0.0) -> Tensor:
        """``[1, T, …]`` → ``[N, L, …]``, the steps past a sequence's end set to ``fill`` (differentiable)."""
        padded = packed.new_full((self.count, self.longest, *packed.shape[2:]), fill)
        return padded.index_put((self.sequence, self.position), packed[0])

    def pack(self, padded: Tensor) -> Tensor:
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
