"""Falcon-H1 (``FalconH1ForCausalLM``): attention and Mamba-2 side by side in every layer → a ``parallel`` mixer per
layer (mamba2 beside rotary attention, outputs added), its μP multipliers folded into the weights.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.bamba import bamba_layout, check_mamba2_hybrid_options, tiny_mamba2_hybrid_fields
from seqdyn.hf.convert.common import (
    attention_heads,
    check_default_rope,
    copy_decoder_stack,
    hybrid_config,
    plain_attention_weights,
    rotary_options,
)
from seqdyn.hf.convert.mamba2 import HYBRID_MAMBA2_FIELDS, mamba2_mixer_weights, mamba2_options
from seqdyn.hf.convert.registry import TinyModel, refuse, register
from seqdyn.hf.modeling import SeqdynForCausalLM


def _falcon_h1_config(config: Any) -> SeqdynConfig:
    """``FalconH1Config`` → pre-norm RMSNorm blocks, each a ``parallel`` mixer of mamba2 (``mamba_d_ssm`` channels,
    groups of B and C, the gated norm or, as the released models, none) beside rotary softmax attention (grouped
    key–value heads), and a SwiGLU MLP; the μP multipliers become weights (:func:`_fold_falcon_h1`), so a tied head
    becomes its own copy where the embedding or the logits are scaled."""
    check_mamba2_hybrid_options(
        config,
        ("projectors_bias", True, "seqdyn's mamba2 out-projection has no bias"),
        ("mlp_bias", True, "seqdyn's SwiGLU has no biases"),
    )
    if config.mamba_rms_norm and config.mamba_norm_before_gate:
        raise refuse(
            config.model_type,
            "mamba_norm_before_gate",
            True,
            "seqdyn's gated norm normalizes y ⊙ SiLU(z), after the gate",
        )
    check_default_rope(config)
    inner = config.mamba_d_ssm or config.mamba_expand * config.hidden_size
    mamba2 = mamba2_options(
        config, HYBRID_MAMBA2_FIELDS, expand=inner / config.hidden_size, gate_norm=bool(config.mamba_rms_norm)
    )
    attention = {**attention_heads(config), **rotary_options(config)}
    parallel = ("parallel", {"parts": [["mamba2", mamba2], ["softmax_attention", attention]]})
    scaled = (config.embedding_multiplier, config.lm_head_multiplier) != (1, 1)
    return hybrid_config(config, [parallel] * config.num_hidden_layers, tie=config.tie_word_embeddings and not scaled)


def _falcon_h1_mixer_weights(prefix: str, layer: nn.Module, ours: nn.Module) -> None:
    """The layer's ``mamba`` and ``self_attn`` into the parallel mixer's two parts."""
    mamba2_mixer_weights(f"{prefix}.mamba", layer.mamba, ours.parts[0])
    plain_attention_weights(f"{prefix}.self_attn", layer.self_attn, ours.parts[1])


def _fold_falcon_h1(source: nn.Module, target: SeqdynForCausalLM) -> None:
    """Falcon-H1's μP multipliers as weights: the embedding times ``embedding_multiplier``, the head times
    ``lm_head_multiplier``; per layer the Mamba-2 in-projection's rows times ``ssm_in_multiplier`` and the layer's
    ``mup_vector`` (z, x, B, C and Δ each by its ``ssm_multipliers`` entry), its out-projection times
    ``ssm_out_multiplier``; the attention's q, k, v rows times ``attention_in_multiplier`` (k also times
    ``key_multiplier``), its output times ``attention_out_multiplier``; the MLP's gate rows times
    ``mlp_multipliers[0]``, its down-projection times ``mlp_multipliers[1]``."""
    config, model = source.config, target.seqdyn
    model.embedding.weight.mul_(config.embedding_multiplier)
    if not target.config.tie_word_embeddings:
        model.head.weight.mul_(config.lm_head_multiplier)
    gate_multiplier, down_multiplier = config.mlp_multipliers
    for layer, block in zip(source.model.layers, model.blocks):
        ssm, attention = block.mixer.parts
        ssm.in_proj.weight.mul_(
            layer.mamba.mup_vector.reshape(-1, 1).to(ssm.in_proj.weight.dtype) * config.ssm_in_multiplier
        )
        ssm.out_proj.weight.mul_(config.ssm_out_multiplier)
        attention.qkv.weight.mul_(config.attention_in_multiplier)
        attention.qkv.weight.split(attention.widths)[1].mul_(config.key_multiplier)  # the key rows
        attention.out.weight.mul_(config.attention_out_multiplier)
        block.mlp.fc1.weight[: block.mlp.hidden].mul_(gate_multiplier)
        block.mlp.fc2.weight.mul_(down_multiplier)


def _falcon_h1_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    copy_decoder_stack(source, target, bamba_layout({"hybrid": ("", _falcon_h1_mixer_weights)}))
    _fold_falcon_h1(source, target)


register(
    "falcon_h1",
    _falcon_h1_config,
    _falcon_h1_weights,
    TinyModel(
        "FalconH1ForCausalLM",
        "FalconH1Config",
        tiny_mamba2_hybrid_fields(
            intermediate_size=24,
            num_hidden_layers=2,
            head_dim=8,
            mamba_d_ssm=24,
            mamba_n_heads=6,
            mamba_d_head=4,
            embedding_multiplier=2.0,
            lm_head_multiplier=0.5,
            mlp_multipliers=[1.5, 0.7],
            key_multiplier=0.8,
            attention_in_multiplier=1.2,
            attention_out_multiplier=0.9,
            ssm_in_multiplier=0.6,
            ssm_out_multiplier=1.4,
            ssm_multipliers=[1.1, 0.9, 1.3, 0.7, 1.2],
        ),
    ),
)
