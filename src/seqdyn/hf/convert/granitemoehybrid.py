"""Granite 4.0-H (``GraniteMoeHybridForCausalLM``) → Bamba's layers (attention with RoPE or none) with a SwiGLU MLP,
or a mixture of experts beside an ungated shared SwiGLU; its μP scalars folded into the weights.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.bamba import check_mamba2_hybrid_options, hybrid_mixers, tiny_mamba2_hybrid_fields
from seqdyn.hf.convert.common import (
    DecoderLayout,
    copy_decoder_stack,
    copy_experts,
    copy_weight,
    hybrid_config,
    plain_attention_weights,
    rotary_or_none,
)
from seqdyn.hf.convert.mamba2 import mamba2_mixer_weights
from seqdyn.hf.convert.registry import TinyModel, refuse, register
from seqdyn.hf.modeling import SeqdynForCausalLM


def _granite_config(config: Any) -> SeqdynConfig:
    """``GraniteMoeHybridConfig`` → Bamba's layers (attention with RoPE or none) with a SwiGLU MLP, or a mixture of
    experts beside an ungated shared SwiGLU; the μP multipliers are folded into the weights (:func:`_fold_granite`),
    so a tied head becomes its own when the embedding or the logits are scaled."""
    check_mamba2_hybrid_options(config)
    position = config.position_embedding_type
    if position not in (None, "nope", "rope"):
        raise refuse(
            config.model_type, "position_embedding_type", position, "seqdyn's attention has RoPE or no positions"
        )
    mixers = hybrid_mixers(config, rotary_or_none(config, position == "rope"))
    shared_ratio = config.shared_intermediate_size / config.hidden_size
    mlp: dict[str, Any] = {"mlp": "swiglu", "mlp_ratio": shared_ratio}
    if config.num_local_experts:
        moe = {
            "experts": config.num_local_experts,
            "top_k": config.num_experts_per_tok,
            "normalize": True,
            "shared_ratio": shared_ratio,
            "shared_gate": False,
        }
        mlp = {"mlp": "moe", "mlp_ratio": config.intermediate_size / config.hidden_size, "moe": moe}
    scaled = (config.embedding_multiplier, config.logits_scaling) != (1, 1)
    return hybrid_config(config, mixers, tie=config.tie_word_embeddings and not scaled, **mlp)


def _granite_mlp_weights(prefix: str, layer: nn.Module, ours: nn.Module) -> None:
    """The dense ``shared_mlp`` (``input_linear`` = [gate | up], ``output_linear``), or the ``block_sparse_moe``
    (router, experts) beside it as the shared expert."""
    shared = ours if layer.block_sparse_moe is None else ours.shared
    copy_weight(shared.fc1.weight, layer.shared_mlp.input_linear.weight, f"{prefix}.shared_mlp.input_linear.weight")
    copy_weight(shared.fc2.weight, layer.shared_mlp.output_linear.weight, f"{prefix}.shared_mlp.output_linear.weight")
    if layer.block_sparse_moe is not None:
        copy_experts(f"{prefix}.block_sparse_moe", "router", layer.block_sparse_moe, ours)


def _fold_granite(config: Any, target: SeqdynForCausalLM) -> None:
    """Granite's μP scalars as weights: ``x₀ = m_emb · E[token]``; each residual branch times ``m_res`` (its output
    projections); scores ``m_att · q·k`` instead of ``q·k / √d`` (the query rows times ``m_att · √d``, which the
    rotation commutes with); logits ``/ s`` (the head's rows)."""
    model = target.seqdyn
    model.embedding.weight.mul_(config.embedding_multiplier)
    if not target.config.tie_word_embeddings:  # (a copy of transformers' lm_head, tied or not)
        model.head.weight.div_(config.logits_scaling)
    for block in model.blocks:
        outputs = [projection.weight for projection in block.residual_projections()]
        if getattr(block.mlp, "down", None) is not None:
            outputs.append(block.mlp.down)
        for weight in outputs:
            weight.mul_(config.residual_multiplier)
        mixer = block.mixer
        if mixer.name == "softmax_attention":
            mixer.qkv.weight[: mixer.widths[0]].mul_(config.attention_multiplier * mixer.head_dim**0.5)


def _granite_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    layout = DecoderLayout(
        ("input_layernorm", "post_attention_layernorm"),
        "",
        {"linear_attention": ("mamba", mamba2_mixer_weights), "full_attention": ("self_attn", plain_attention_weights)},
        "norm",
        mlp_weights=_granite_mlp_weights,
    )
    copy_decoder_stack(source, target, layout)
    _fold_granite(source.config, target)


register(
    "granitemoehybrid",
    _granite_config,
    _granite_weights,
    TinyModel(
        "GraniteMoeHybridForCausalLM",
        "GraniteMoeHybridConfig",
        tiny_mamba2_hybrid_fields(
            intermediate_size=8,
            shared_intermediate_size=24,
            num_hidden_layers=4,
            layer_types=["linear_attention", "full_attention"] * 2,
            num_local_experts=4,
            num_experts_per_tok=2,
            position_embedding_type="rope",
            tie_word_embeddings=True,
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.2,
            logits_scaling=2.5,
            rms_norm_eps=1e-5,
            experts_implementation="eager",
        ),
    ),
)
