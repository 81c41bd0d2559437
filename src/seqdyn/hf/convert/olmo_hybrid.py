"""OLMo-hybrid (``OlmoHybridForCausalLM``) → pre-norm ``gated_deltanet`` blocks (Qwen3.5's Gated DeltaNet, its own
projection names) and OLMo 2's output-norm attention blocks.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import (
    DecoderLayout,
    attention_heads,
    copy_decoder_stack,
    copy_pairs,
    copy_qkv,
    copy_weight,
    hybrid_config,
    plain_attention_weights,
    rotary_or_none,
)
from seqdyn.hf.convert.qwen3_5 import DELTA_DECAY, check_delta_hybrid_options, delta_options, tiny_delta_hybrid_fields
from seqdyn.hf.convert.registry import TinyModel, register
from seqdyn.hf.modeling import SeqdynForCausalLM


def _olmo_hybrid_config(config: Any) -> SeqdynConfig:
    """``OlmoHybridConfig`` → per layer a pre-norm Gated DeltaNet block (β ∈ (0, 2) with ``linear_allow_neg_eigval``,
    its output norm at FLA's ε = 1e-5) or an output-norm attention block (OLMo 2's ``x + norm(f(x))``, q/k RMSNorms
    over the whole projections, RoPE or, as the released checkpoints, no positions); SwiGLU MLPs, a final norm."""
    check_delta_hybrid_options(config)
    rope = config.rope_parameters is not None and config.rope_parameters.get("rope_theta") is not None
    delta = {
        **delta_options(config),
        "negative_eigenvalues": bool(config.linear_allow_neg_eigval),
        "output_norm_eps": 1e-5,
    }
    attention = {
        **attention_heads(config),
        "qk_norm": True,
        "qk_norm_scope": "projection",
        **rotary_or_none(config, rope),
    }
    mixers = [
        ("gated_deltanet", delta) if kind == "linear_attention" else ("softmax_attention", attention)
        for kind in config.layer_types
    ]
    positions = ["pre" if kind == "linear_attention" else "output" for kind in config.layer_types]
    return hybrid_config(config, mixers, norm_position=positions)


def _olmo_delta_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """Separate ``q_proj``, ``k_proj``, ``v_proj``, the gate ``g_proj``, β's ``b_proj``, the decay's ``a_proj``."""
    copy_qkv(prefix, theirs, ours)
    copy_pairs(
        prefix,
        theirs,
        ours,
        (
            ("output.gate.weight", "g_proj.weight"),
            ("beta.weight", "b_proj.weight"),
            ("decay.proj.weight", "a_proj.weight"),
            *DELTA_DECAY,
            ("output.norm.weight", "o_norm.weight"),
            ("output.out.weight", "o_proj.weight"),
        ),
    )


def _olmo_attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    plain_attention_weights(prefix, theirs, ours)
    copy_weight(ours.q_norm.weight, theirs.q_norm.weight, f"{prefix}.q_norm.weight")
    copy_weight(ours.k_norm.weight, theirs.k_norm.weight, f"{prefix}.k_norm.weight")


def _olmo_hybrid_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    layout = DecoderLayout(
        {
            "linear_attention": ("input_layernorm", "post_attention_layernorm"),
            "full_attention": ("post_attention_layernorm", "post_feedforward_layernorm"),
        },
        "mlp",
        {
            "linear_attention": ("linear_attn", _olmo_delta_weights),
            "full_attention": ("self_attn", _olmo_attention_weights),
        },
        "norm",
    )
    copy_decoder_stack(source, target, layout)


register(
    "olmo_hybrid",
    _olmo_hybrid_config,
    _olmo_hybrid_weights,
    TinyModel(
        "OlmoHybridForCausalLM",
        "OlmoHybridConfig",
        tiny_delta_hybrid_fields(
            intermediate_size=40,
            rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
            pad_token_id=0,
            eos_token_id=1,
        ),
    ),
)
