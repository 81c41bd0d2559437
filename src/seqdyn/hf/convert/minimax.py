"""MiniMax-01 (``MiniMaxForCausalLM``, MiniMax 2025) → per layer ``lightning_attention`` (its layer index setting its
decays) or ``softmax_attention`` (RoPE, grouped key–value heads), each with a mixture of SwiGLU experts, in blocks whose
residual is the normed stream (``norm_position: normed``): ``u = norm(h)``, ``h ← α·u + β·f(u)`` for both branches.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import (
    DecoderLayout,
    attention_heads,
    check_default_rope,
    copy_decoder_stack,
    copy_experts,
    copy_pairs,
    hybrid_config,
    plain_attention_weights,
    rotary_options,
)
from seqdyn.hf.convert.registry import TinyModel, refuse, register
from seqdyn.hf.modeling import SeqdynForCausalLM

#: MiniMax's branch factors: (α, β) of each kind of branch
FACTORS = {
    "linear_attention": ("linear_attn_alpha_factor", "linear_attn_beta_factor"),
    "full_attention": ("full_attn_alpha_factor", "full_attn_beta_factor"),
    "mlp": ("mlp_alpha_factor", "mlp_beta_factor"),
}


def _minimax_config(config: Any) -> SeqdynConfig:
    """``MiniMaxConfig`` → lightning or softmax attention per ``layer_types``, experts everywhere, the normed residual
    with the one α of every branch (the β are folded into the branches' output projections)."""
    family = config.model_type
    alphas = {getattr(config, alpha) for alpha, _ in FACTORS.values()}
    if len(alphas) != 1:
        raise refuse(family, "*_alpha_factor", sorted(alphas), "seqdyn's normed residual has one α for every branch")
    if config.sliding_window is not None:
        raise refuse(family, "sliding_window", config.sliding_window, "seqdyn converts full attention here")
    if config.hidden_act != "silu":
        raise refuse(family, "hidden_act", config.hidden_act, "seqdyn's experts are SwiGLU")
    heads = attention_heads(config)
    if heads["head_dim"] * heads["heads"] != config.hidden_size:
        raise refuse(family, "head_dim", heads["head_dim"], "seqdyn's lightning attention has heads of d_model / H")
    check_default_rope(config)
    layers = config.num_hidden_layers
    mixers = [
        ("lightning_attention", {"heads": heads["heads"], "layer": index, "layers": layers})
        if kind == "linear_attention"
        else ("softmax_attention", {**heads, **rotary_options(config)})
        for index, kind in enumerate(config.layer_types)
    ]
    moe = {"experts": config.num_local_experts, "top_k": config.num_experts_per_tok, "normalize": True}
    return hybrid_config(
        config,
        mixers,
        mlp="moe",
        mlp_ratio=config.intermediate_size / config.hidden_size,
        moe=moe,
        norm_position="normed",
        residual_scale=float(alphas.pop()),
    )


def _lightning_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    pairs = (("qkv.weight", "qkv_proj.weight"), ("norm.weight", "norm.weight"), ("gate.weight", "output_gate.weight"))
    copy_pairs(prefix, theirs, ours, (*pairs, ("out.weight", "out_proj.weight")))


def _experts_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    copy_experts(prefix, "gate", theirs, ours)


def _minimax_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    layout = DecoderLayout(
        ("input_layernorm", "post_attention_layernorm"),
        "mlp",
        {
            "linear_attention": ("self_attn", _lightning_weights),
            "full_attention": ("self_attn", plain_attention_weights),
        },
        "norm",
        mlp_weights=_experts_weights,
    )
    copy_decoder_stack(source, target, layout)
    config = source.config
    for kind, block in zip(config.layer_types, target.seqdyn.blocks):  # β·f(u): the branches' last maps times β
        block.mixer.output_projection().weight.mul_(getattr(config, FACTORS[kind][1]))
        block.mlp.down.mul_(config.mlp_beta_factor)


register(
    "minimax",
    _minimax_config,
    _minimax_weights,
    TinyModel(
        "MiniMaxForCausalLM",
        "MiniMaxConfig",
        dict(
            vocab_size=48,
            hidden_size=16,
            intermediate_size=24,
            num_hidden_layers=4,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            layer_types=["linear_attention", "full_attention"] * 2,
            num_local_experts=4,
            num_experts_per_tok=2,
            block_size=8,
            full_attn_alpha_factor=1.5,
            linear_attn_alpha_factor=1.5,
            mlp_alpha_factor=1.5,
            full_attn_beta_factor=0.8,
            linear_attn_beta_factor=1.2,
            mlp_beta_factor=0.9,
            experts_implementation="eager",
        ),
    ),
)
