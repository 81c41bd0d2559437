"""LFM2-MoE (``Lfm2MoeForCausalLM``, Liquid AI 2025) → LFM2's layers (``gated_conv`` or ``softmax_attention``) with a
SwiGLU MLP in the first ``num_dense_layers`` blocks and a mixture of experts in the others: a sigmoid router that
chooses the top k with a per-expert bias added, their sigmoid scores renormalized (``+ 1e-6``) and scaled.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import copy_decoder_stack, copy_experts, hybrid_config
from seqdyn.hf.convert.lfm2 import lfm2_layout, lfm2_mixers, lfm2_mlp_weights
from seqdyn.hf.convert.registry import TinyModel, register
from seqdyn.hf.modeling import SeqdynForCausalLM

#: the ε transformers' LFM2-MoE router adds to the chosen scores' sum
NORMALIZE_EPS = 1e-6


def _lfm2_moe_config(config: Any) -> SeqdynConfig:
    """``Lfm2MoeConfig`` → LFM2's mixers, a SwiGLU of ``intermediate_size`` in the dense blocks, experts of
    ``moe_intermediate_size`` in the others."""
    sparse = [index >= config.num_dense_layers for index in range(config.num_hidden_layers)]
    moe = {
        "experts": config.num_experts,
        "top_k": config.num_experts_per_tok,
        "normalize": config.norm_topk_prob,
        "normalize_eps": NORMALIZE_EPS,
        "router": "sigmoid",
        "routed_scale": float(config.routed_scaling_factor),
        "selection_bias": config.use_expert_bias,
    }
    widths = [(config.moe_intermediate_size if s else config.intermediate_size) / config.hidden_size for s in sparse]
    fields = dict(mlp=["moe" if s else "swiglu" for s in sparse], mlp_ratio=widths, norm_eps=config.norm_eps)
    return hybrid_config(config, lfm2_mixers(config), **fields, **({"moe": moe} if any(sparse) else {}))


def _feed_forward_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """A dense SwiGLU (``w1``, ``w3``, ``w2``), or the experts: router ``gate``, ``experts``, ``expert_bias``."""
    if not hasattr(theirs, "experts"):
        lfm2_mlp_weights(prefix, theirs, ours)
        return
    copy_experts(prefix, "gate", theirs, ours, selection_bias="expert_bias" if theirs.use_expert_bias else None)


def _lfm2_moe_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    copy_decoder_stack(source, target, lfm2_layout(_feed_forward_weights))


register(
    "lfm2_moe",
    _lfm2_moe_config,
    _lfm2_moe_weights,
    TinyModel(
        "Lfm2MoeForCausalLM",
        "Lfm2MoeConfig",
        dict(
            vocab_size=48,
            hidden_size=16,
            intermediate_size=24,
            moe_intermediate_size=8,
            num_hidden_layers=4,
            num_attention_heads=2,
            num_key_value_heads=1,
            layer_types=["conv", "full_attention", "conv", "full_attention"],
            num_dense_layers=1,
            num_experts=4,
            num_experts_per_tok=2,
            routed_scaling_factor=1.5,
            experts_implementation="eager",
        ),
    ),
)
