"""Decoding a model token by token with its recurrent form (a fixed-size hidden-state update, O(1) memory
per token, against attention's state that keeps every key).

:func:`decode_profile` steps a model through a context and reports, at each of several context lengths, the
bytes its streaming state holds and the wall time per token there; :func:`step_error` compares the token-by-token
outputs with the parallel forward pass on the same input (the duality of the two forms).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn


def state_tensors(state: Any) -> Iterator[Tensor]:
    """Every tensor a streaming state holds (dataclasses, tuples, lists and dicts walked through)."""
    if isinstance(state, Tensor):
        yield state
    elif dataclasses.is_dataclass(state) and not isinstance(state, type):
        for item in dataclasses.fields(state):
            yield from state_tensors(getattr(state, item.name))
    elif isinstance(state, dict):
        for value in state.values():
            yield from state_tensors(value)
    elif isinstance(state, (tuple, list)):
        for value in state:
            yield from state_tensors(value)


def state_bytes(state: Any) -> int:
    """The bytes of every tensor a streaming state holds."""
    return sum(tensor.numel() * tensor.element_size() for tensor in state_tensors(state))


@dataclass(frozen=True)
class DecodePoint:
    """At context length ``length``: the state's bytes per sequence and the seconds per token of the ``window``
    tokens that end there."""

    length: int
    state_bytes: int
    seconds_per_token: float


def random_tokens(vocab_size: int, length: int, batch: int = 1, seed: int = 0) -> Tensor:
    """``[batch, length]`` uniform tokens: a context to decode (what the tokens are does not change the cost)."""
    return torch.randint(0, vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def decode_profile(model: nn.Module, tokens: Tensor, lengths: Sequence[int], window: int = 32) -> list[DecodePoint]:
    """Step ``model`` through ``tokens`` ``[1, T]`` from its initial state; at each context length in ``lengths``
    (ascending, ≤ T) record the state's bytes and the mean wall time per token of the last ``window`` steps."""
    lengths = sorted(lengths)
    if not lengths or lengths[-1] > tokens.shape[1] or lengths[0] < window:
        raise ValueError(
            f"lengths: expected context lengths between window={window} and the {tokens.shape[1]} "
            f"tokens given, got {list(lengths)}"
        )
    state, points, started = model.init_state(tokens.shape[0]), [], 0.0
    for t in range(lengths[-1]):
        if t + window in lengths:
            started = time.perf_counter()
        _, state = model.step(tokens[:, t], state)
        if t + 1 in lengths:
            points.append(
                DecodePoint(t + 1, state_bytes(state) // tokens.shape[0], (time.perf_counter() - started) / window)
            )
    return points


@torch.no_grad()
def step_error(model: nn.Module, tokens: Tensor) -> float:
    """``max |step outputs − forward(tokens)|`` relative to ``max |forward(tokens)|``: how far the recurrent form
    is from the parallel one on ``tokens`` ``[B, T]``."""
    parallel = model(tokens)
    state, outputs = model.init_state(tokens.shape[0]), []
    for t in range(tokens.shape[1]):
        out, state = model.step(tokens[:, t], state)
        outputs.append(out)
    stepped = torch.stack(outputs, dim=1)
    return float((stepped - parallel).abs().max() / parallel.abs().max().clamp_min(1e-30))
