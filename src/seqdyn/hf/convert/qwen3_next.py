"""Qwen3-Next (``Qwen3NextForCausalLM``) → Qwen3.5's layers with a mixture of experts (``mlp="moe"``, its shared
expert gated by a sigmoid) in every block; its Gated DeltaNet's projections interleaved per query/key head.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import copy_experts, copy_pairs, copy_swiglu, copy_weight, hybrid_config
from seqdyn.hf.convert.qwen3_5 import (
    QWEN_DELTA_REST,
    check_qwen3_5_options,
    qwen3_5_mixers,
    qwen_weights,
    tiny_delta_hybrid_fields,
)
from seqdyn.hf.convert.registry import TinyModel, refuse, register


def _qwen3_next_config(config: Any) -> SeqdynConfig:
    """``Qwen3NextConfig`` → Qwen3.5's layers (:func:`qwen3_5_mixers`) with the mixture-of-experts MLP (its shared
    expert gated by a sigmoid) in every layer."""
    family = config.model_type
    check_qwen3_5_options(config)
    if config.num_experts == 0 or config.decoder_sparse_step != 1 or config.mlp_only_layers:
        raise refuse(
            family,
            "decoder_sparse_step / mlp_only_layers / num_experts",
            (config.decoder_sparse_step, config.mlp_only_layers, config.num_experts),
            "seqdyn's model has one kind of MLP in every layer: experts in all of them",
        )
    return experts_hybrid_config(config, config.norm_topk_prob)


def experts_hybrid_config(config: Any, normalize: bool) -> SeqdynConfig:
    """Qwen3.5's layers (:func:`qwen3_5_mixers`) with the Qwen mixture of experts (:func:`experts`) in every layer,
    its top-k weights renormalized where ``normalize``."""
    return hybrid_config(config, qwen3_5_mixers(config), **experts(config, normalize))


def experts(config: Any, normalize: bool) -> dict[str, Any]:
    """The model fields of the Qwen mixture of experts: ``num_experts`` SwiGLU experts of ``moe_intermediate_size``,
    the top ``num_experts_per_tok`` per token, a shared expert of ``shared_expert_intermediate_size``."""
    moe = {
        "experts": config.num_experts,
        "top_k": config.num_experts_per_tok,
        "normalize": normalize,
        "shared_ratio": config.shared_expert_intermediate_size / config.hidden_size,
    }
    return {"mlp": "moe", "mlp_ratio": config.moe_intermediate_size / config.hidden_size, "moe": moe}


def _qwen3_next_delta_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """``in_proj_qkvz`` holds per query/key head its query, key, and its value heads' values and gates one after the
    other ``[H_k, 2·K + 2·(H/H_k)·V, D]``; ``in_proj_ba`` per query/key head its value heads' β then decay rows."""
    key_heads, key_dim, group = ours.key_heads, ours.key_dim, ours.heads // ours.key_heads
    grouped_values = group * ours.value_width // ours.heads
    q, k, v, z = theirs.in_proj_qkvz.weight.unflatten(0, (key_heads, -1)).split(
        [key_dim, key_dim, grouped_values, grouped_values], dim=1
    )
    b, a = theirs.in_proj_ba.weight.unflatten(0, (key_heads, -1)).split([group, group], dim=1)
    copy_weight(
        ours.qkv.weight, torch.cat([t.flatten(0, 1) for t in (q, k, v)]), f"{prefix}.in_proj_qkvz.weight (q, k, v)"
    )
    copy_weight(ours.output.gate.weight, z.flatten(0, 1), f"{prefix}.in_proj_qkvz.weight (z)")
    copy_weight(ours.beta.weight, b.flatten(0, 1), f"{prefix}.in_proj_ba.weight (b)")
    copy_weight(ours.decay.proj.weight, a.flatten(0, 1), f"{prefix}.in_proj_ba.weight (a)")
    copy_pairs(prefix, theirs, ours, QWEN_DELTA_REST)


def copy_qwen_experts(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """Qwen3-Next's sparse MoE block: router ``gate``, ``experts`` (``gate_up_proj``, ``down_proj``), the shared
    expert and its gate."""
    copy_experts(prefix, "gate", theirs, ours)
    copy_swiglu(f"{prefix}.shared_expert", theirs.shared_expert, ours.shared)
    copy_weight(ours.shared_gate.weight, theirs.shared_expert_gate.weight, f"{prefix}.shared_expert_gate.weight")


#: the tiny Qwen hybrids' mixture of experts: 4 experts of width 8, the top 2 per token, a shared expert of 12
TINY_EXPERTS = {
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 8,
    "shared_expert_intermediate_size": 12,
    "experts_implementation": "eager",
}

register(
    "qwen3_next",
    _qwen3_next_config,
    qwen_weights(_qwen3_next_delta_weights, copy_qwen_experts),
    TinyModel(
        "Qwen3NextForCausalLM",
        "Qwen3NextConfig",
        tiny_delta_hybrid_fields(head_dim=8, **TINY_EXPERTS, intermediate_size=40, partial_rotary_factor=0.5),
    ),
)
