"""Qwen3.5-MoE (``Qwen3_5MoeForCausalLM``, also the text model of a ``qwen3_5_moe`` vision–language checkpoint) →
Qwen3.5's layers with Qwen3-Next's mixture of experts (top-k renormalized) in every block.
"""

from __future__ import annotations

from typing import Any

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import hybrid_config
from seqdyn.hf.convert.qwen3_5 import check_qwen3_5_options, qwen3_5_delta_weights, qwen3_5_mixers, qwen_weights
from seqdyn.hf.convert.qwen3_next import copy_experts, experts
from seqdyn.hf.convert.registry import TinyModel, register


def _qwen3_5_moe_config(config: Any) -> SeqdynConfig:
    """``Qwen3_5MoeTextConfig`` → Qwen3.5's layers with the mixture of experts in every layer (top-k renormalized)."""
    check_qwen3_5_options(config)
    return hybrid_config(config, qwen3_5_mixers(config), **experts(config, True))


register(
    "qwen3_5_moe_text",
    _qwen3_5_moe_config,
    qwen_weights(qwen3_5_delta_weights, copy_experts),
    TinyModel(
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeTextConfig",
        dict(
            vocab_size=48,
            hidden_size=16,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=6,
            linear_value_head_dim=8,
            linear_conv_kernel_dim=4,
            layer_types=["linear_attention", "full_attention"] * 2,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=8,
            shared_expert_intermediate_size=12,
            rope_parameters={"rope_type": "default", "rope_theta": 10_000.0, "partial_rotary_factor": 0.5},
            experts_implementation="eager",
        ),
    ),
    vision_language="qwen3_5_moe",
)
