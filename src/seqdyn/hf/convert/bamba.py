"""Bamba (``BambaForCausalLM``) → per layer ``mamba2`` or ``softmax_attention``, each in a pre-norm RMSNorm block with a
SwiGLU MLP.  Its options and layer pattern are the ones of the other Mamba-2 hybrids (Granite 4.0, Falcon-H1):
they take its checks from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import (
    DecoderLayout,
    attention_heads,
    check_default_rope,
    copy_decoder_stack,
    hybrid_config,
    plain_attention_weights,
    rotary_options,
)
from seqdyn.hf.convert.mamba2 import HYBRID_MAMBA2_FIELDS, mamba2_mixer_weights, mamba2_options
from seqdyn.hf.convert.registry import TinyModel, refuse, refuse_any, register
from seqdyn.hf.modeling import SeqdynForCausalLM


def check_mamba2_hybrid_options(config: Any, *extra: tuple[str, Any, str]) -> None:
    """What the Mamba-2 hybrids (Bamba, Granite 4.0, Falcon-H1) may not set: biases where seqdyn has none (or none
    where it has one), another activation."""
    refuse_any(
        config,
        [
            ("mamba_proj_bias", True, "seqdyn's mamba2 projections have no bias"),
            ("mamba_conv_bias", False, "seqdyn's short convolution has a bias"),
            ("attention_bias", True, "seqdyn converts attention without projection biases here"),
            *extra,
        ],
    )
    if config.hidden_act != "silu":
        raise refuse(config.model_type, "hidden_act", config.hidden_act, "seqdyn's SwiGLU and mamba2 use SiLU")


def hybrid_mixers(config: Any, attention: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Per layer of ``layers_block_type``: mamba2 of the ``mamba_*`` fields (its gated RMSNorm with the checkpoint's
    ε) or softmax attention with grouped key–value heads and the options ``attention``."""
    mamba2 = mamba2_options(config, HYBRID_MAMBA2_FIELDS)
    attention = {**attention_heads(config), **attention}
    return [
        ("mamba2", mamba2) if kind == "linear_attention" else ("softmax_attention", attention)
        for kind in config.layers_block_type
    ]


def _bamba_config(config: Any) -> SeqdynConfig:
    """``BambaConfig`` → pre-norm RMSNorm blocks with a SwiGLU MLP, each with mamba2 (groups of B and C) or softmax
    attention (grouped key–value heads, rotary embeddings on half of each head)."""
    check_mamba2_hybrid_options(config, ("mlp_bias", True, "seqdyn's SwiGLU has no biases"))
    check_default_rope(config)
    return hybrid_config(config, hybrid_mixers(config, rotary_options(config)))


def bamba_layout(mixers: dict[str, tuple[str, Callable[[str, nn.Module, nn.Module], None]]]) -> DecoderLayout:
    """Where Bamba's decoder (and Falcon-H1's) keeps its weights: per layer ``input_layernorm``, ``pre_ff_layernorm``
    and the ``feed_forward`` SwiGLU, the mixer of each layer type as ``mixers`` says; ``final_layernorm``."""
    return DecoderLayout(("input_layernorm", "pre_ff_layernorm"), "feed_forward", mixers, "final_layernorm")


def _bamba_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    mixers = {
        "linear_attention": ("mamba", mamba2_mixer_weights),
        "full_attention": ("self_attn", plain_attention_weights),
    }
    copy_decoder_stack(source, target, bamba_layout(mixers))


def tiny_mamba2_hybrid_fields(**own: Any) -> dict[str, Any]:
    """The tiny config of a Mamba-2 hybrid (Bamba, Granite 4.0-H, Falcon-H1): width 16, attention of 2 query heads
    and 1 key–value head, Mamba-2 of 8 heads (expand 2), 2 groups of B and C, state 4, conv width 4, chunks of 8;
    with the family's ``own`` fields in their place."""
    fields = dict(
        vocab_size=48,
        hidden_size=16,
        num_attention_heads=2,
        num_key_value_heads=1,
        mamba_n_heads=8,
        mamba_n_groups=2,
        mamba_d_state=4,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_chunk_size=8,
    )
    return {**fields, **own}


register(
    "bamba",
    _bamba_config,
    _bamba_weights,
    TinyModel(
        "BambaForCausalLM",
        "BambaConfig",
        tiny_mamba2_hybrid_fields(intermediate_size=40, num_hidden_layers=4, attn_layer_indices=[1, 3]),
    ),
)
