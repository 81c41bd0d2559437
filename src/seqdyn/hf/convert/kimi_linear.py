"""Kimi-Linear (``KimiLinearForCausalLM``, Kimi Team 2025, https://arxiv.org/abs/2510.26692) → per layer ``kda``
(Kimi Delta Attention) or ``latent_attention`` (DeepSeek-V2's multi-head latent attention without positions), in
pre-norm RMSNorm blocks whose MLP is a SwiGLU (``mlp_layer_types`` "dense") or DeepSeek-V3's mixture of experts
("sparse": a sigmoid router that chooses with a per-expert bias within the best groups, the routed scaling factor,
ungated shared experts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import (
    DecoderLayout,
    copy_decoder_stack,
    copy_experts,
    copy_pairs,
    copy_swiglu,
    copy_weight,
    hybrid_config,
)
from seqdyn.hf.convert.registry import TinyModel, refuse, register

#: the ε of the RMSNorms transformers gives the latents of Kimi-Linear's attention (its RMSNorm's default)
LATENT_NORM_EPS = 1e-6


def check_options(config: Any) -> None:
    """What Kimi-Linear and Bailing-hybrid may not set: another activation, attention biases, fewer key–value heads,
    other layer types."""
    family = config.model_type
    if config.hidden_act != "silu":
        raise refuse(family, "hidden_act", config.hidden_act, "seqdyn's SwiGLU, experts and short convolution use SiLU")
    if config.attention_bias:
        raise refuse(family, "attention_bias", True, "seqdyn's latent_attention has no projection biases")
    if config.num_key_value_heads != config.num_attention_heads:
        raise refuse(
            family,
            "num_key_value_heads",
            config.num_key_value_heads,
            "latent attention expands its latent into every query head's key and value (num_attention_heads)",
        )
    unknown = set(config.layer_types) - {"linear_attention", "full_attention"}
    if unknown:
        raise refuse(family, "layer_types", sorted(unknown), "seqdyn converts linear_attention and full_attention")


def kda_options(config: Any, gate_rank: int, **own: Any) -> dict[str, Any]:
    """The kda mixer's options of a Kimi-Linear or Bailing-hybrid config, its decay's and gate's rank ``gate_rank``."""
    return {
        "heads": config.linear_num_heads,
        "key_dim": config.linear_head_dim,
        "conv_size": config.linear_conv_kernel_dim,
        "gate_low_rank": gate_rank,
        "output_norm_eps": config.rms_norm_eps,
        **own,
    }


def latent_options(config: Any, **own: Any) -> dict[str, Any]:
    """The latent_attention mixer's options of a DeepSeek-style attention config (with the family's ``own``)."""
    return {
        "heads": config.num_attention_heads,
        "kv_rank": config.kv_lora_rank,
        "q_rank": config.q_lora_rank,
        "nope_dim": config.qk_nope_head_dim,
        "rope_dim": config.qk_rope_head_dim,
        "value_dim": config.v_head_dim,
        "latent_norm_eps": LATENT_NORM_EPS,
        **own,
    }


def per_layer(config: Any, kda: dict[str, Any], attention: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """KDA or latent attention by ``layer_types``."""
    return [
        ("kda", kda) if kind == "linear_attention" else ("latent_attention", attention) for kind in config.layer_types
    ]


def mlp_fields(config: Any) -> dict[str, Any]:
    """The MLP of each layer: a SwiGLU of ``intermediate_size`` or DeepSeek-V3's experts of ``moe_intermediate_size``
    (Kimi-Linear, Bailing-hybrid)."""
    sparse = [kind == "sparse" for kind in config.mlp_layer_types]
    hidden = config.hidden_size
    moe = {
        "experts": config.num_local_experts,
        "top_k": config.num_experts_per_tok,
        "normalize": config.norm_topk_prob,
        "normalize_eps": 1e-20,  # transformers' DeepSeek-V3 router
        "shared_ratio": config.moe_intermediate_size * config.n_shared_experts / hidden,
        "shared_gate": False,
        "router": "sigmoid",
        "groups": config.n_group,
        "top_groups": config.topk_group,
        "routed_scale": float(config.routed_scaling_factor),
        "selection_bias": True,
    }
    return {
        "mlp": ["moe" if s else "swiglu" for s in sparse],
        "mlp_ratio": [(config.moe_intermediate_size if s else config.intermediate_size) / hidden for s in sparse],
        **({"moe": moe} if any(sparse) else {}),
    }


def _kimi_linear_config(config: Any) -> SeqdynConfig:
    """``KimiLinearConfig`` → KDA or latent attention per ``layer_types``, a SwiGLU or experts per
    ``mlp_layer_types``."""
    check_options(config)
    mixers = per_layer(config, kda_options(config, config.linear_head_dim), latent_options(config))
    return hybrid_config(config, mixers, **mlp_fields(config))


def copy_kda_common(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """What Kimi-Linear's and Bailing-hybrid's KDA layers name alike: q, k, v, their convolution, β, the gated norm and
    the output."""
    qkv = torch.cat([theirs.q_proj.weight, theirs.k_proj.weight, theirs.v_proj.weight])
    copy_weight(ours.qkv.weight, qkv, f"{prefix}.q_proj/k_proj/v_proj.weight")
    pairs = (
        ("convs.qkv.weight", "conv1d.weight"),
        ("beta.weight", "b_proj.weight"),
        ("output.norm.weight", "o_norm.weight"),
        ("output.out.weight", "o_proj.weight"),
    )
    copy_pairs(prefix, theirs, ours, pairs)
    ours.gate[1].bias.zero_()  # neither family's gate projection has a bias


def _kda_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    copy_kda_common(prefix, theirs, ours)
    pairs = (
        ("decay.down.weight", "forget_gate.f_a_proj.weight"),
        ("decay.up.weight", "forget_gate.f_b_proj.weight"),
        ("decay.dt_bias", "forget_gate.dt_bias"),
        ("decay.a_log", "forget_gate.A_log"),
        ("gate.0.weight", "g_a_proj.weight"),
        ("gate.1.weight", "g_b_proj.weight"),
    )
    copy_pairs(prefix, theirs, ours, pairs)


def latent_attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """DeepSeek's latent attention as transformers names it: the query's projection (or latent), the key–value latent
    with its norm, its up-projection, the output."""
    pairs = [
        ("kv_down.weight", "kv_a_proj_with_mqa.weight"),
        ("kv_norm.weight", "kv_a_layernorm.weight"),
        ("kv_up.weight", "kv_b_proj.weight"),
        ("out.weight", "o_proj.weight"),
    ]
    if theirs.q_lora_rank is None:
        pairs.append(("q_up.weight", "q_proj.weight"))
    else:
        pairs += [("q_down.weight", "q_a_proj.weight"), ("q_norm.weight", "q_a_layernorm.weight")]
        pairs.append(("q_up.weight", "q_b_proj.weight"))
    copy_pairs(prefix, theirs, ours, tuple(pairs))


def mlp_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """A dense SwiGLU, or the experts: router ``gate`` (its weight and selection bias), ``experts``, the shared
    experts as one SwiGLU."""
    if not hasattr(theirs, "experts"):
        copy_swiglu(prefix, theirs, ours)
        return
    copy_experts(prefix, "gate", theirs, ours, selection_bias="gate.e_score_correction_bias")
    copy_swiglu(f"{prefix}.shared_experts", theirs.shared_experts, ours.shared)


def kda_hybrid_weights(
    kda_weights: Callable[[str, nn.Module, nn.Module], None],
    attention_weights: Callable[[str, nn.Module, nn.Module], None],
) -> Callable[[nn.Module, Any], None]:
    """The weight copy of a KDA and latent-attention hybrid (Kimi-Linear, Bailing-hybrid) with its layers' copies."""
    layout = DecoderLayout(
        ("input_layernorm", "post_attention_layernorm"),
        "mlp",
        {"linear_attention": ("self_attn", kda_weights), "full_attention": ("self_attn", attention_weights)},
        "norm",
        mlp_weights=mlp_weights,
    )
    return lambda source, target: copy_decoder_stack(source, target, layout)


#: the tiny KDA and latent-attention hybrids: width 16, K A K A, 2 attention heads (latent 6, value 6), DeepSeek-V3's
#: 8 experts in 4 groups after a dense first layer
TINY_FIELDS = dict(
    vocab_size=48,
    hidden_size=16,
    intermediate_size=24,
    moe_intermediate_size=8,
    num_hidden_layers=4,
    num_attention_heads=2,
    num_key_value_heads=2,
    kv_lora_rank=6,
    q_lora_rank=None,
    qk_nope_head_dim=4,
    v_head_dim=6,
    num_local_experts=8,
    num_experts_per_tok=2,
    n_group=4,
    topk_group=2,
    routed_scaling_factor=2.5,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    experts_implementation="eager",
)

register(
    "kimi_linear",
    _kimi_linear_config,
    kda_hybrid_weights(_kda_weights, latent_attention_weights),
    TinyModel(
        "KimiLinearForCausalLM",
        "KimiLinearConfig",
        dict(
            TINY_FIELDS,
            qk_rope_head_dim=2,
            linear_num_heads=2,
            linear_head_dim=8,
            linear_conv_kernel_dim=4,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
            n_shared_experts=1,
        ),
    ),
)
