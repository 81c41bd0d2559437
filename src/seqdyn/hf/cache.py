"""``SeqdynCache``: transformers' ``Cache`` holding each layer's streaming state.

One :class:`SeqdynLayerState` per block keeps that block's state — a recurrent state and convolution inputs (fixed
size: memory constant per token), or the key–value cache of a softmax layer — as seqdyn's mixers stream it.  Beam
search reorders it, sampling several continuations repeats it (:mod:`seqdyn.core.rows`).

A padded batch (``attention_mask`` with zeros) keeps one state per row instead, each computed from that row's tokens
alone: every row then continues exactly as its prompt does alone (``rows``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers.cache_utils import Cache, CacheLayerMixin

from seqdyn.core.rows import count_rows, select_rows
from seqdyn.models.model import ModelState

__all__ = ["SeqdynCache", "SeqdynLayerState"]


class SeqdynLayerState(CacheLayerMixin):
    """One block's state: batched (``state``), or one per row of a padded batch (``rows``)."""

    is_compileable = False
    is_croppable = False
    supports_early_init = False

    def __init__(self):
        super().__init__()
        self.state: Any = None
        self.rows: list[Any] | None = None

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        pass

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs):
        raise NotImplementedError("a seqdyn layer keeps its own state: run the model with cache=…")

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return query_length, 0

    def get_seq_length(self) -> int:
        return 0

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.state, self.rows = None, None

    def reorder_cache(self, beam_idx: Tensor) -> None:
        self._select(beam_idx)

    def batch_select_indices(self, indices: Tensor) -> None:
        self._select(indices)

    def _select(self, index: Tensor) -> None:
        if self.rows is not None:
            self.rows = [self.rows[i] for i in index.tolist()]
        elif self.state is not None:
            self.state = select_rows(self.state, index)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise NotImplementedError("crop: a recurrent state cannot forget its last tokens")


class SeqdynCache(Cache):
    """The cache of a :class:`~seqdyn.hf.SeqdynForCausalLM`: a :class:`SeqdynLayerState` per block, the tokens seen
    and the position that comes next (per row in a padded batch)."""

    def __init__(self, layers: int):
        super().__init__(layers=[SeqdynLayerState() for _ in range(layers)])
        self.seen = 0
        self.positions: list[int] | int | None = None  # an int (batched), a list (rows) or None (nothing yet)

    # --- seqdyn's view: the model state ------------------------------------------------------------------------
    @property
    def padded(self) -> bool:
        """Whether the cache keeps one state per row (a padded batch was fed)."""
        return isinstance(self.positions, list)

    def model_state(self) -> ModelState | None:
        """The batched :class:`~seqdyn.models.ModelState` (``None`` before the first tokens)."""
        if self.positions is None:
            return None
        return ModelState(self.positions, [layer.state for layer in self.layers], None)

    def store(self, state: ModelState, tokens: int) -> None:
        self.positions = state.position
        for layer, block in zip(self.layers, state.blocks):
            layer.state = block
        self.seen += tokens

    def row_state(self, row: int) -> ModelState | None:
        """Row ``row``'s state in a padded batch (``None``: no token of it yet)."""
        if self.positions[row] is None:
            return None
        return ModelState(self.positions[row], [layer.rows[row] for layer in self.layers], None)

    def store_row(self, row: int, state: ModelState) -> None:
        self.positions[row] = state.position
        for layer, block in zip(self.layers, state.blocks):
            layer.rows[row] = block

    def split_rows(self, batch: int) -> None:
        """From one batched state (or none) to one state per row: a padded chunk follows."""
        if self.padded:
            return
        batched = self.model_state()
        self.positions = [None if batched is None else batched.position] * batch
        for index, layer in enumerate(self.layers):
            layer.rows = [
                None if batched is None else select_rows(batched.blocks[index], torch.tensor([row]))
                for row in range(batch)
            ]
            layer.state = None

    # --- transformers' view ------------------------------------------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.seen + query_length, 0

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1

    def reset(self) -> None:
        super().reset()
        self.seen, self.positions = 0, None

    def reorder_cache(self, beam_idx: Tensor) -> None:
        super().reorder_cache(beam_idx)
        if self.padded:
            self.positions = [self.positions[i] for i in beam_idx.tolist()]

    def batch_select_indices(self, indices: Tensor) -> None:
        super().batch_select_indices(indices)
        if self.padded:
            self.positions = [self.positions[i] for i in indices.tolist()]

    def batch_repeat_interleave(self, repeats: int) -> None:
        batch = len(self.positions) if self.padded else _batch_of(self.model_state())
        self.batch_select_indices(torch.arange(batch).repeat_interleave(repeats))


def _batch_of(state: ModelState | None) -> int:
    rows = None if state is None else count_rows(state.blocks)
    if rows is None:
        raise ValueError("batch_repeat_interleave: the cache holds no state yet")
    return rows
