"""What an accelerated layer's forward knows of its prompt that transformers does not tell the scan inside it.

transformers passes the attention mask and the cache to a layer, not to the scan or convolution the layer calls.
The accelerated forward (:mod:`seqdyn.hf.acceleration.swap`) reads them from its own arguments and runs the layer
within :func:`running`, where seqdyn's functions (:mod:`seqdyn.hf.acceleration.functions`) find them: a context
variable, so each thread (and each task) sees only the prompt of the layer it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["Prompt", "current_prompt", "keep_real_conv_state", "prompt_of", "real_steps", "running"]


@dataclass
class Prompt:
    """``real`` ``[b, l]``: True at the real steps of a padded prompt: the swapped scans make a padded step no step
    — decay 1, no input —, so that each row's final state is its state at its last real token (right padding: the
    fallbacks run on through the padding, decaying the state; left padding leaves a zero state zero in both);
    ``conv_input``: what the swapped convolution read, for the cache's convolution state.  ``previous_state``: the
    cache's recurrent state before the call, which Mamba's fallback does not continue from when a prompt comes in
    several pieces (it starts each from zeros)."""

    real: Tensor | None = None
    previous_state: Tensor | None = None
    conv_input: Tensor | None = None


_PROMPT: ContextVar[Prompt | None] = ContextVar("seqdyn_accelerated_prompt", default=None)


def current_prompt() -> Prompt | None:
    """The prompt of the accelerated layer running in this thread, or ``None`` outside one."""
    return _PROMPT.get()


@contextmanager
def running(prompt: Prompt) -> Iterator[Prompt]:
    """Within the block, :func:`current_prompt` is ``prompt`` (in this thread only)."""
    token = _PROMPT.set(prompt)
    try:
        yield prompt
    finally:
        _PROMPT.reset(token)


def real_steps(batch: int, length: int) -> Tensor | None:
    """``[b, l]`` True at the real steps of the prompt the accelerated layer runs, or ``None`` without padding."""
    prompt = _PROMPT.get()
    real = None if prompt is None else prompt.real
    return real if real is not None and real.shape == (batch, length) else None


def prompt_of(hidden: Any, cache: Any, mask: Any, layer_idx: int | None) -> Prompt:
    """The prompt of a layer's call on ``hidden`` ``[b, l, d]`` with its ``cache`` and ``attention_mask``."""
    return Prompt(_real_of(mask, hidden), _recurrent_state(cache, layer_idx))


def _real_of(mask: Any, hidden: Any) -> Tensor | None:
    """The real steps ``[b, l]`` of a padded prompt from the layer's ``attention_mask`` (1 at real tokens)."""
    if not isinstance(mask, Tensor) or not isinstance(hidden, Tensor) or mask.dim() != 2:
        return None
    if mask.shape != hidden.shape[:2] or bool(mask.all()):
        return None
    return mask.bool()


def _recurrent_state(cache: Any, layer_idx: int | None) -> Tensor | None:
    """The cache's recurrent state of the layer before this call (``None`` before its first piece)."""
    if cache is None or layer_idx is None or not hasattr(cache, "get_recurrent_state"):
        return None
    try:
        return cache.get_recurrent_state(layer_idx)
    except (ValueError, IndexError):  # no state of this layer kept yet
        return None


def keep_real_conv_state(cache: Any, layer_idx: int | None, prompt: Prompt) -> None:
    """The cache's convolution state of each row as its last inputs up to its last real step (transformers keeps
    the last inputs of the prompt, right padding included), from what the swapped convolution read."""
    inputs = prompt.conv_input  # [b, c, l]
    if prompt.real is None or cache is None:
        return
    state = cache.get_conv_state(layer_idx) if layer_idx is not None and inputs is not None else None
    if state is None or inputs.shape[-1] != prompt.real.shape[1]:
        return
    width, length = state.shape[-1], inputs.shape[-1]
    ends = length - prompt.real.flip(-1).int().argmax(-1)  # [b]: one past each row's last real step
    window = torch.arange(width, device=inputs.device) - width  # [w]: the steps before the end
    steps = ends.unsqueeze(-1) + window  # [b, w]
    taken = inputs.gather(-1, steps.clamp(min=0).unsqueeze(1).expand(-1, inputs.shape[1], -1))  # [b, c, w]
    state.copy_(taken.masked_fill((steps < 0).unsqueeze(1), 0.0).to(state.dtype))
