"""Qwen3.5 (``Qwen3_5ForCausalLM``, also the text model of a ``qwen3_5`` vision–language checkpoint) → per layer
``gated_deltanet`` (grouped value heads) or ``softmax_attention`` (grouped key–value heads, q/k norms, partial
rotary, sigmoid output gate), in pre-norm RMSNorm blocks with a SwiGLU MLP.  Its Gated DeltaNet layer is the one of
Qwen3-Next, Qwen3.5-MoE and OLMo-hybrid too: they take its options and checks from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import (
    DecoderLayout,
    check_default_rope,
    copy_centered,
    copy_decoder_stack,
    copy_pairs,
    copy_swiglu,
    copy_weight,
    hybrid_config,
    rotary_options,
)
from seqdyn.hf.convert.registry import TinyModel, refuse, register
from seqdyn.hf.modeling import SeqdynForCausalLM

#: the ε of the norms inside Qwen3.5's layers that seqdyn's mixers fix: the gated head norm of Gated DeltaNet and
#: the q/k norms of attention
MIXER_NORM_EPS = 1e-6


def check_delta_hybrid_options(config: Any) -> None:
    """What the Gated DeltaNet hybrids (Qwen3.5, Qwen3-Next, OLMo-hybrid) may not set: another activation, attention
    biases, another ε of the norms inside the layers, other layer types."""
    family = config.model_type
    if config.hidden_act != "silu":
        raise refuse(family, "hidden_act", config.hidden_act, "seqdyn's SwiGLU and short convolution use SiLU")
    if config.attention_bias:
        raise refuse(family, "attention_bias", True, "seqdyn converts attention without projection biases here")
    if config.rms_norm_eps != MIXER_NORM_EPS:
        raise refuse(
            family,
            "rms_norm_eps",
            config.rms_norm_eps,
            f"the norms inside seqdyn's gated_deltanet and softmax_attention have ε = {MIXER_NORM_EPS}",
        )
    unknown = set(config.layer_types) - {"linear_attention", "full_attention"}
    if unknown:
        raise refuse(family, "layer_types", sorted(unknown), "seqdyn converts linear_attention and full_attention")


def check_qwen3_5_options(config: Any) -> None:
    check_delta_hybrid_options(config)
    check_default_rope(config)


def qwen3_5_mixers(config: Any) -> list[tuple[str, dict[str, Any]]]:
    """Per layer: Gated DeltaNet (grouped value heads, per-head key width, flash-linear-attention's L2 norm, no
    convolution bias) or gated softmax attention (grouped key-value heads, q/k norms, partial rotary, sigmoid
    output gate)."""
    attention = {
        "heads": config.num_attention_heads,
        "kv_heads": config.num_key_value_heads,
        "head_dim": config.head_dim,
        "qk_norm": True,
        "output_gate": True,
        **rotary_options(config),
    }
    return [
        ("gated_deltanet", delta_options(config)) if kind == "linear_attention" else ("softmax_attention", attention)
        for kind in config.layer_types
    ]


def delta_options(config: Any) -> dict[str, Any]:
    """gated_deltanet's options of a ``linear_*`` config: grouped value heads, the per-head key width,
    flash-linear-attention's L2 norm, no convolution bias."""
    value_width = config.linear_num_value_heads * config.linear_value_head_dim
    return {
        "heads": config.linear_num_value_heads,
        "key_heads": config.linear_num_key_heads,
        "key_dim": config.linear_key_head_dim,
        "expand_v": value_width / config.hidden_size,
        "conv_size": config.linear_conv_kernel_dim,
        "conv_bias": False,
        "qk_norm_eps": 1e-6,
    }


def _qwen3_5_config(config: Any) -> SeqdynConfig:
    """``Qwen3_5TextConfig`` → pre-norm RMSNorm blocks with a SwiGLU MLP, each with its layer's mixer."""
    check_qwen3_5_options(config)
    return hybrid_config(config, qwen3_5_mixers(config))


#: what every transformers Gated DeltaNet names alike: the convolution, Δ's bias and A
DELTA_DECAY = (("convs.qkv.weight", "conv1d.weight"), ("decay.dt_bias", "dt_bias"), ("decay.a_log", "A_log"))


#: Qwen's Gated DeltaNet (Qwen3-Next: its projections de-interleaved first): the gated head norm and the output
QWEN_DELTA_REST = (*DELTA_DECAY, ("output.norm.weight", "norm.weight"), ("output.out.weight", "out_proj.weight"))


def qwen3_5_delta_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    copy_pairs(
        prefix,
        theirs,
        ours,
        (
            ("qkv.weight", "in_proj_qkv.weight"),
            ("output.gate.weight", "in_proj_z.weight"),
            ("beta.weight", "in_proj_b.weight"),
            ("decay.proj.weight", "in_proj_a.weight"),
            *QWEN_DELTA_REST,
        ),
    )


def _qwen3_5_attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """``q_proj`` holds each head's query and gate rows one after the other: ``[H, 2·K, D]``."""
    query, gate = theirs.q_proj.weight.unflatten(0, (ours.heads, 2 * ours.head_dim)).chunk(2, dim=1)
    stacked = torch.cat([query.flatten(0, 1), theirs.k_proj.weight, theirs.v_proj.weight])
    copy_weight(ours.qkv.weight, stacked, f"{prefix}.q_proj/k_proj/v_proj.weight")
    copy_weight(ours.gate.weight, gate.flatten(0, 1), f"{prefix}.q_proj.weight (gate rows)")
    copy_weight(ours.out.weight, theirs.o_proj.weight, f"{prefix}.o_proj.weight")
    copy_centered(ours.q_norm.weight, theirs.q_norm.weight, f"{prefix}.q_norm.weight")
    copy_centered(ours.k_norm.weight, theirs.k_norm.weight, f"{prefix}.k_norm.weight")


def qwen_weights(
    delta_weights: Callable[[str, nn.Module, nn.Module], None],
    mlp_weights: Callable[[str, nn.Module, nn.Module], None] = copy_swiglu,
) -> Callable[[nn.Module, SeqdynForCausalLM], None]:
    """The weight copy of a Qwen hybrid (zero-centered norms, gated attention): its Gated DeltaNet layers by
    ``delta_weights``, its MLPs by ``mlp_weights`` (a SwiGLU, or Qwen3-Next's mixture of experts)."""
    layout = DecoderLayout(
        ("input_layernorm", "post_attention_layernorm"),
        "mlp",
        {
            "linear_attention": ("linear_attn", delta_weights),
            "full_attention": ("self_attn", _qwen3_5_attention_weights),
        },
        "norm",
        centered=True,
        mlp_weights=mlp_weights,
    )
    return lambda source, target: copy_decoder_stack(source, target, layout)


def tiny_delta_hybrid_fields(**own: Any) -> dict[str, Any]:
    """The tiny config of a Gated DeltaNet hybrid (Qwen3.5, Qwen3-Next, Qwen3.5-MoE, OLMo-hybrid): 4 layers of width
    16, Gated DeltaNet (2 key heads of width 6, 4 value heads of width 8, conv width 4) and attention (4 query heads,
    2 key–value heads) alternating, with the family's ``own`` fields."""
    return dict(
        vocab_size=48,
        hidden_size=16,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=6,
        linear_value_head_dim=8,
        linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "full_attention"] * 2,
        **own,
    )


#: the tiny Qwen hybrids' rotary embeddings: on half of each head, at the default frequencies
QWEN_TINY_ROPE = {"rope_type": "default", "rope_theta": 10_000.0, "partial_rotary_factor": 0.5}

register(
    "qwen3_5_text",
    _qwen3_5_config,
    qwen_weights(qwen3_5_delta_weights),
    TinyModel(
        "Qwen3_5ForCausalLM",
        "Qwen3_5TextConfig",
        tiny_delta_hybrid_fields(head_dim=8, intermediate_size=40, rope_parameters=dict(QWEN_TINY_ROPE)),
    ),
    vision_language="qwen3_5",
)
