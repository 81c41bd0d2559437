"""LFM2 (``Lfm2ForCausalLM``, Liquid AI 2025) → per layer ``gated_conv`` (its gated short convolution) or
``softmax_attention`` (RoPE, grouped key–value heads, an RMSNorm of each head's query and key), each in a pre-norm
RMSNorm block with a SwiGLU MLP; the final norm is its ``embedding_norm``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import (
    DecoderLayout,
    attention_heads,
    check_default_rope,
    copy_decoder_stack,
    copy_pairs,
    copy_qkv,
    copy_weight,
    hybrid_config,
    rotary_options,
)
from seqdyn.hf.convert.registry import TinyModel, register
from seqdyn.hf.modeling import SeqdynForCausalLM


def lfm2_mlp_width(config: Any) -> int:
    """LFM2's SwiGLU width: ``intermediate_size``, or with ``block_auto_adjust_ff_dim`` ⌊2I/3⌋, times the multiplier
    and rounded up to a multiple of ``block_multiple_of`` (transformers' ``Lfm2MLP``)."""
    width = config.intermediate_size
    if config.block_auto_adjust_ff_dim:
        width = int(2 * width / 3)
        if config.block_ffn_dim_multiplier is not None:
            width = int(config.block_ffn_dim_multiplier * width)
            width = config.block_multiple_of * -(-width // config.block_multiple_of)
    return width


def lfm2_mixers(config: Any) -> list[tuple[str, dict[str, Any]]]:
    """Its ``layer_types`` (``conv`` or ``full_attention``) as seqdyn's mixers (LFM2 and LFM2-MoE)."""
    check_default_rope(config)
    conv = {"conv_size": config.conv_L_cache, "bias": config.conv_bias}
    attention = {**attention_heads(config), **rotary_options(config), "qk_norm": True, "qk_norm_eps": config.norm_eps}
    return [("gated_conv", conv) if kind == "conv" else ("softmax_attention", attention) for kind in config.layer_types]


def _lfm2_config(config: Any) -> SeqdynConfig:
    """``Lfm2Config`` → its ``layer_types`` as seqdyn's hybrid stack, a SwiGLU MLP in every block."""
    fields = dict(mlp="swiglu", mlp_ratio=lfm2_mlp_width(config) / config.hidden_size, norm_eps=config.norm_eps)
    return hybrid_config(config, lfm2_mixers(config), **fields)


def _conv_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    pairs = [
        ("in_proj.weight", "in_proj.weight"),
        ("conv.weight", "conv.weight"),
        ("out_proj.weight", "out_proj.weight"),
    ]
    if theirs.bias:
        pairs += [("in_proj.bias", "in_proj.bias"), ("conv.bias", "conv.bias"), ("out_proj.bias", "out_proj.bias")]
    copy_pairs(prefix, theirs, ours, tuple(pairs))


def _attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    copy_qkv(prefix, theirs, ours)
    copy_pairs(
        prefix,
        theirs,
        ours,
        (
            ("out.weight", "out_proj.weight"),
            ("q_norm.weight", "q_layernorm.weight"),
            ("k_norm.weight", "k_layernorm.weight"),
        ),
    )


def lfm2_mlp_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """LFM2's SwiGLU ``w2(SiLU(w1 x) ⊙ w3 x)`` into seqdyn's (``fc1`` = [gate | up])."""
    copy_weight(ours.fc1.weight, torch.cat([theirs.w1.weight, theirs.w3.weight]), f"{prefix}.w1/w3.weight")
    copy_weight(ours.fc2.weight, theirs.w2.weight, f"{prefix}.w2.weight")


def lfm2_layout(mlp_weights: Callable[[str, nn.Module, nn.Module], None] = lfm2_mlp_weights) -> DecoderLayout:
    """Where LFM2's (and LFM2-MoE's) weights are, its ``feed_forward`` copied by ``mlp_weights``."""
    return DecoderLayout(
        ("operator_norm", "ffn_norm"),
        "feed_forward",
        {"conv": ("conv", _conv_weights), "full_attention": ("self_attn", _attention_weights)},
        "embedding_norm",
        mlp_weights=mlp_weights,
    )


def _lfm2_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    copy_decoder_stack(source, target, lfm2_layout())


register(
    "lfm2",
    _lfm2_config,
    _lfm2_weights,
    TinyModel(
        "Lfm2ForCausalLM",
        "Lfm2Config",
        dict(
            vocab_size=48,
            hidden_size=16,
            intermediate_size=36,
            num_hidden_layers=4,
            num_attention_heads=2,
            num_key_value_heads=1,
            layer_types=["conv", "full_attention", "conv", "full_attention"],
            block_multiple_of=8,
            block_ffn_dim_multiplier=1.0,
        ),
    ),
)
