"""Jamba (``JambaForCausalLM``, Lieber et al. 2024) → per layer ``s6`` (Mamba-1 with RMS norms, with weights, of Δ's
input, B and C) or ``softmax_attention`` without positions, each in a pre-norm RMSNorm block with a SwiGLU MLP or a
mixture of SwiGLU experts (top-k of the softmax, the chosen weights not renormalized).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import (
    DecoderLayout,
    attention_heads,
    copy_conv,
    copy_decoder_stack,
    copy_experts,
    copy_linears,
    copy_swiglu,
    copy_weight,
    hybrid_config,
    plain_attention_weights,
)
from seqdyn.hf.convert.registry import TinyModel, refuse, refuse_any, register
from seqdyn.hf.modeling import SeqdynForCausalLM


def _jamba_config(config: Any) -> SeqdynConfig:
    """``JambaConfig`` → its layer pattern (attention where ``i % attn_layer_period == attn_layer_offset``, experts
    where ``i % expert_layer_period == expert_layer_offset``) as seqdyn's hybrid stack."""
    refuse_any(
        config,
        [
            ("mamba_proj_bias", True, "seqdyn's s6 projections have no bias"),
            ("mamba_conv_bias", False, "seqdyn's short convolution has a bias"),
        ],
    )
    if config.hidden_act != "silu":
        raise refuse(config.model_type, "hidden_act", config.hidden_act, "seqdyn's s6 and SwiGLU use SiLU")
    s6 = {
        "state_dim": config.mamba_d_state,
        "expand": config.mamba_expand,
        "dt_rank": int(config.mamba_dt_rank),
        "conv_size": config.mamba_d_conv,
        "bcdt_rms_eps": config.rms_norm_eps,
        "bcdt_norm_weights": True,
    }
    attention = {**attention_heads(config), "rotary": False}
    mixers = [("s6", s6) if kind == "mamba" else ("softmax_attention", attention) for kind in config.layers_block_type]
    mlp = ["moe" if experts > 1 else "swiglu" for experts in config.layers_num_experts]
    moe = {"experts": config.num_experts, "top_k": config.num_experts_per_tok, "normalize": False}
    return hybrid_config(config, mixers, mlp=mlp, mlp_ratio=config.intermediate_size / config.hidden_size, moe=moe)


def _mamba_weights(prefix: str, mixer: nn.Module, ours: nn.Module) -> None:
    copy_linears(prefix, mixer, ours, ("in_proj", "x_proj", "dt_proj", "out_proj"))
    copy_conv(prefix, mixer.conv1d, ours.convs["x"])
    copy_weight(ours.a_log, mixer.A_log, f"{prefix}.A_log")
    copy_weight(ours.skip, mixer.D, f"{prefix}.D")
    for weight, name in zip(ours.bcdt_norms, ("dt_layernorm", "b_layernorm", "c_layernorm")):
        copy_weight(weight, getattr(mixer, name).weight, f"{prefix}.{name}.weight")


def _feed_forward_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """A dense SwiGLU (``JambaMLP``) or the experts (``router``, ``experts.gate_up_proj`` = [gate | up],
    ``experts.down_proj``)."""
    if not hasattr(theirs, "router"):
        copy_swiglu(prefix, theirs, ours)
        return
    copy_experts(prefix, "router", theirs, ours)


def _jamba_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    layout = DecoderLayout(
        ("input_layernorm", "pre_ff_layernorm"),
        "feed_forward",
        {"linear_attention": ("mamba", _mamba_weights), "full_attention": ("self_attn", plain_attention_weights)},
        "final_layernorm",
        mlp_weights=_feed_forward_weights,
    )
    copy_decoder_stack(source, target, layout)


register(
    "jamba",
    _jamba_config,
    _jamba_weights,
    TinyModel(
        "JambaForCausalLM",
        "JambaConfig",
        dict(
            vocab_size=48,
            hidden_size=16,
            intermediate_size=24,
            num_hidden_layers=4,
            num_attention_heads=2,
            num_key_value_heads=1,
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=0,
            num_experts=4,
            num_experts_per_tok=2,
            mamba_d_state=4,
            mamba_dt_rank=2,
            use_mamba_kernels=False,
            experts_implementation="eager",
        ),
    ),
)
