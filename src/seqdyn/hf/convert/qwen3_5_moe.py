"""Qwen3.5-MoE (``Qwen3_5MoeForCausalLM``, also the text model of a ``qwen3_5_moe`` vision–language checkpoint) →
Qwen3.5's layers with Qwen3-Next's mixture of experts (top-k renormalized) in every block.
"""

from __future__ import annotations

from typing import Any

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.qwen3_5 import (
    QWEN_TINY_ROPE,
    check_qwen3_5_options,
    qwen3_5_delta_weights,
    qwen_weights,
    tiny_delta_hybrid_fields,
)
from seqdyn.hf.convert.qwen3_next import TINY_EXPERTS, copy_qwen_experts, experts_hybrid_config
from seqdyn.hf.convert.registry import TinyModel, register


def _qwen3_5_moe_config(config: Any) -> SeqdynConfig:
    """``Qwen3_5MoeTextConfig`` → Qwen3.5's layers with the mixture of experts in every layer (top-k renormalized)."""
    check_qwen3_5_options(config)
    return experts_hybrid_config(config, True)


register(
    "qwen3_5_moe_text",
    _qwen3_5_moe_config,
    qwen_weights(qwen3_5_delta_weights, copy_qwen_experts),
    TinyModel(
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeTextConfig",
        tiny_delta_hybrid_fields(head_dim=8, **TINY_EXPERTS, rope_parameters=dict(QWEN_TINY_ROPE)),
    ),
    vision_language="qwen3_5_moe",
)
