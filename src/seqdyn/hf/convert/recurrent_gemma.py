"""RecurrentGemma (``RecurrentGemmaForCausalLM``, Griffin) → per layer ``rglru`` (Griffin's recurrent block, reset at
position 0) or sliding-window ``local_attention``, each with a GeGLU MLP, logits soft-capped.
"""

from __future__ import annotations

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
    copy_swiglu,
    copy_weight,
    hybrid_config,
    plain_attention_weights,
    rotary_options,
)
from seqdyn.hf.convert.registry import TinyModel, refuse, register
from seqdyn.hf.modeling import SeqdynForCausalLM


def _recurrent_gemma_config(config: Any) -> SeqdynConfig:
    """``RecurrentGemmaConfig`` → per layer Griffin's recurrent block (``rglru``: block-diagonal gates of
    ``num_attention_heads`` blocks, c = 8, the convolution, the GeLU gate branch, the reset at position 0) or
    sliding-window attention (grouped key–value heads, rotary embeddings on part of each head, an output bias); pre-norm
    RMSNorm blocks with a GeGLU MLP of ``intermediate_size / 2``, logits soft-capped.  The embedding's √d scale
    (bfloat16-rounded, as the model multiplies by it) is folded into the embedding, so the head is its own copy."""
    family = config.model_type
    if config.hidden_activation != "gelu_pytorch_tanh":
        raise refuse(
            family, "hidden_activation", config.hidden_activation, "seqdyn's GeGLU and RG-LRU gate use the tanh GELU"
        )
    check_default_rope(config)
    rglru = {
        "expand": config.lru_width / config.hidden_size,
        "gate_blocks": config.num_attention_heads,
        "conv_size": config.conv1d_width,
        "reset": True,
    }
    attention = {
        **attention_heads(config),
        "window": config.attention_window_size,
        "sliding": True,
        "bias": True,
        **rotary_options(config),
    }
    mixers = [
        ("rglru", rglru) if kind == "linear_attention" else ("local_attention", attention)
        for kind in config.layers_block_type
    ]
    return hybrid_config(
        config,
        mixers,
        tie=False,
        mlp="geglu",
        mlp_ratio=(config.intermediate_size // 2) / config.hidden_size,
        logit_softcap=config.logits_soft_cap,
    )


def _rglru_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """``linear_x`` / ``linear_y`` (the in-projection [x | gate]), ``conv_1d``, the RG-LRU's block-diagonal gates and
    Λ (``recurrent_param``), ``linear_out``."""
    for kind in ("weight", "bias"):
        stacked = torch.cat([getattr(theirs.linear_x, kind), getattr(theirs.linear_y, kind)])
        copy_weight(getattr(ours.in_proj, kind), stacked, f"{prefix}.linear_x/linear_y.{kind}")
    copy_pairs(
        prefix,
        theirs,
        ours,
        (
            ("convs.u.weight", "conv_1d.weight"),
            ("convs.u.bias", "conv_1d.bias"),
            ("a_gate.weight", "rg_lru.recurrent_gate_weight"),
            ("a_gate.bias", "rg_lru.recurrent_gate_bias"),
            ("input_gate.weight", "rg_lru.input_gate_weight"),
            ("input_gate.bias", "rg_lru.input_gate_bias"),
            ("a_param", "rg_lru.recurrent_param"),
            ("out_proj.weight", "linear_out.weight"),
            ("out_proj.bias", "linear_out.bias"),
        ),
    )


def _biased_attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """Attention whose output projection has a bias and whose q, k, v projections may have (0 where not)."""
    plain_attention_weights(prefix, theirs, ours)
    biases = [
        torch.zeros(projection.out_features) if projection.bias is None else projection.bias
        for projection in (theirs.q_proj, theirs.k_proj, theirs.v_proj)
    ]
    copy_weight(ours.qkv.bias, torch.cat(biases), f"{prefix}.q_proj/k_proj/v_proj.bias")
    copy_weight(ours.out.bias, theirs.o_proj.bias, f"{prefix}.o_proj.bias")


def _copy_geglu(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """``gate_proj``, ``up_proj`` (fc1 = [gate | up]) and ``down_proj``, each with its bias."""
    copy_swiglu(prefix, theirs, ours)
    copy_weight(
        ours.fc1.bias, torch.cat([theirs.gate_proj.bias, theirs.up_proj.bias]), f"{prefix}.gate_proj/up_proj.bias"
    )
    copy_weight(ours.fc2.bias, theirs.down_proj.bias, f"{prefix}.down_proj.bias")


def _recurrent_gemma_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    layout = DecoderLayout(
        ("temporal_pre_norm", "channel_pre_norm"),
        "mlp_block",
        {
            "linear_attention": ("temporal_block", _rglru_weights),
            "sliding_attention": ("temporal_block", _biased_attention_weights),
        },
        "final_norm",
        centered=True,
        mlp_weights=_copy_geglu,
    )
    copy_decoder_stack(source, target, layout)
    target.seqdyn.embedding.weight.mul_(source.model.normalizer.to(target.seqdyn.embedding.weight.dtype))


register(
    "recurrent_gemma",
    _recurrent_gemma_config,
    _recurrent_gemma_weights,
    TinyModel(
        "RecurrentGemmaForCausalLM",
        "RecurrentGemmaConfig",
        dict(
            vocab_size=48,
            hidden_size=24,
            intermediate_size=48,
            num_hidden_layers=3,
            num_attention_heads=2,
            num_key_value_heads=1,
            lru_width=36,
            attention_window_size=8,
            conv1d_width=4,
            logits_soft_cap=3.0,
            block_types=["recurrent", "attention"],
            attention_bias=True,
        ),
    ),
)
