"""The families :func:`from_transformers` converts, each registered here by its own module of this package.

A family is a transformers ``config.model_type`` with its config map (the transformers config → a
:class:`~seqdyn.hf.SeqdynConfig`: which seqdyn mixer and options, refusing in one line an option seqdyn cannot
represent exactly), its weight map (each weight of the transformers model renamed or reshaped into the
:class:`~seqdyn.hf.SeqdynForCausalLM` of that config) and its tiny model (the transformers classes and a tiny config,
for :func:`~seqdyn.hf.convert.checks.tiny_model`).  Adding a family is adding a module that calls :func:`register`
(and naming it in :data:`seqdyn.hf.convert.FAMILY_MODULES`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.modeling import SeqdynForCausalLM

__all__ = [
    "NOT_YET",
    "SUPPORTED",
    "TEXT_MODEL_OF",
    "TINY_CONFIGS",
    "Conversion",
    "TinyModel",
    "UnsupportedModel",
    "from_transformers",
    "missing",
    "refuse",
    "refuse_any",
    "register",
]


class UnsupportedModel(ValueError):
    """A transformers model (or an option of its config) that no converter represents exactly."""


class Conversion(NamedTuple):
    """A family's config map and weight map."""

    config: Callable[[Any], SeqdynConfig]
    weights: Callable[[nn.Module, SeqdynForCausalLM], None]


class TinyModel(NamedTuple):
    """A family's tiny random model: its transformers causal-LM class, its config class and the tiny config's fields
    (2 layers of width 16; the hybrids: 4, each mixer twice)."""

    model_class: str
    config_class: str
    fields: dict[str, Any]


#: family (``config.model_type``) → its config map and weight map
SUPPORTED: dict[str, Conversion] = {}
#: family → its tiny random model
TINY_CONFIGS: dict[str, TinyModel] = {}
#: vision–language checkpoints whose text model ``AutoModelForCausalLM`` loads, as the family of that text model
TEXT_MODEL_OF: dict[str, str] = {}


def register(
    family: str,
    config: Callable[[Any], SeqdynConfig],
    weights: Callable[[nn.Module, SeqdynForCausalLM], None],
    tiny: TinyModel,
    vision_language: str | None = None,
) -> None:
    """``family`` converted by ``config`` and ``weights``, checked on ``tiny``; ``vision_language``: the
    ``model_type`` of the vision–language checkpoints whose text model is of this family."""
    SUPPORTED[family] = Conversion(config, weights)
    TINY_CONFIGS[family] = tiny
    if vision_language is not None:
        TEXT_MODEL_OF[vision_language] = family


def from_transformers(model: nn.Module) -> SeqdynForCausalLM:
    """The :class:`SeqdynForCausalLM` with ``model``'s weights (a transformers ``…ForCausalLM`` of a family in
    :data:`SUPPORTED`), in ``model``'s dtype, in eval mode; its logits equal ``model``'s to round-off.  Raises
    :class:`UnsupportedModel` naming the family or the config option it cannot represent."""
    config = getattr(model, "config", None)
    family = getattr(config, "model_type", None)
    if family not in SUPPORTED:
        raise UnsupportedModel(
            f"model: family {family!r} ({type(model).__name__}) has no seqdyn converter"
            f"{missing(family)}; supported: {', '.join(sorted(SUPPORTED))}"
        )
    head = getattr(model, "get_output_embeddings", lambda: None)()
    if head is None:
        raise UnsupportedModel(
            f"model: {type(model).__name__} has no language-model head (a body without one); convert the causal "
            f"LM of its checkpoint instead (AutoModelForCausalLM.from_pretrained of the same folder)"
        )
    make_config, copy_weights = SUPPORTED[family]
    converted = SeqdynForCausalLM(make_config(config))
    dtype = next(model.parameters()).dtype
    converted.to(dtype)
    with torch.no_grad():
        copy_weights(model, converted)
    return converted.eval()


#: the linear-recurrent families of transformers not converted yet, each with what seqdyn lacks to compute it exactly
NOT_YET: dict[str, str] = {
    "lfm3": "norms after each branch as well as before it, and sliding-window attention with a per-head gate beside "
    "full attention (its convolution layers are lfm2's gated_conv)",
    "glm5_next": "its text model's residual of four streams mixed by Sinkhorn-normalized matrices around every "
    "branch (mHC), beside KDA layers (the kda mixer) and latent attention with a sparse indexer",
    "qwen4_exp": "its text model's gated residual of four streams without per-layer norms, hashed n-gram embeddings "
    "with a dilated convolution, and an attention whose keys a block indexer selects (its Gated DeltaNet layers "
    "are Qwen3.5's)",
    "lara_mini": "weights of its RMS norms applied in float32 after the norm, sliding-window RoPE attention beside "
    "position-free full attention, and experts beside an ungated shared one, around Qwen3.5's Gated DeltaNet layers",
    "inkling": "short convolutions with an identity residual on attention's keys and values and on each branch's "
    "output, and a learned relative-position bias in attention without RoPE",
    "inkling2": "Inkling's short convolutions with an input-dependent kernel on keys and values, a residual that "
    "attends over earlier blocks' sums, per-token attention sinks",
    "inkling2_loop": "Inkling 2's layers, a span of them run three times with messages between the passes",
}


def missing(family: str | None) -> str:
    """`` (it needs …)`` for a family of the roadmap, else nothing."""
    return f" yet (it needs {NOT_YET[family]})" if family in NOT_YET else ""


def refuse(family: str, option: str, value: Any, why: str) -> UnsupportedModel:
    return UnsupportedModel(f"{family}: config option {option}={value!r} cannot be converted exactly ({why})")


def refuse_any(config: Any, refused: list[tuple[str, Any, str]]) -> None:
    """Refuse the first ``(option, value, why)`` whose option the checkpoint sets to that value."""
    for option, value, why in refused:
        if getattr(config, option) == value:
            raise refuse(config.model_type, option, value, why)
