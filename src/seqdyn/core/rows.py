"""Rows of a streaming state: the sequences of a batch, selected, reordered or repeated.

Every state a mixer, block or model streams (:class:`~seqdyn.models.model.ModelState`, the mixers' states) is a
tree of dataclasses, tuples, lists and dicts whose tensors hold the batch in their first dimension, and whose
``batch`` fields (where a state records its batch size) count it.  Beam search reorders those rows; sampling several
continuations of one prompt repeats them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch import Tensor

__all__ = ["count_rows", "repeat_rows", "select_rows", "tensors"]


def select_rows(state: Any, index: Tensor) -> Any:
    """The state of rows ``index`` (``[n]`` int, repeats allowed) of the batch ``state`` streams, in that order."""
    index = torch.as_tensor(index, dtype=torch.long)
    if index.dim() != 1:
        raise ValueError(f"index: expected the rows as a 1-D int tensor [n], got shape {list(index.shape)}")
    return _map_rows(state, lambda x: x.index_select(0, index.to(x.device)), len(index))


def repeat_rows(state: Any, repeats: int, batch: int) -> Any:
    """Each of the ``batch`` rows of ``state`` ``repeats`` times in a row (``torch.repeat_interleave``)."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: expected a positive int, got {repeats!r}")
    return select_rows(state, torch.arange(batch).repeat_interleave(repeats))


def count_rows(state: Any) -> int | None:
    """The batch ``state`` streams: its tensors' first dimension (``None`` where it holds no tensor yet)."""
    found = tensors(state)
    return found[0].shape[0] if found else None


def tensors(state: Any) -> list[Tensor]:
    """Every tensor ``state`` holds (what its memory is)."""
    found: list[Tensor] = []
    _map_rows(state, lambda x: found.append(x) or x, 0)
    return found


def _map_rows(state: Any, rows: Callable[[Tensor], Tensor], batch: int) -> Any:
    if isinstance(state, Tensor):
        return rows(state)
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return dataclasses.replace(
            state,
            **{
                f.name: batch
                if f.name == "batch" and isinstance(getattr(state, f.name), int)
                else _map_rows(getattr(state, f.name), rows, batch)
                for f in dataclasses.fields(state)
                if f.init
            },
        )
    if isinstance(state, tuple):
        parts = [_map_rows(part, rows, batch) for part in state]
        return type(state)(*parts) if hasattr(state, "_fields") else tuple(parts)
    if isinstance(state, list):
        return [_map_rows(part, rows, batch) for part in state]
    if isinstance(state, dict):
        return {key: _map_rows(value, rows, batch) for key, value in state.items()}
    return state
