"""What the families' conversions share: copying a weight (reshaped where only its layout differs), the linears,
convolutions, norms, attention and MLPs that several families name alike, a hybrid decoder's config and weights
(:class:`DecoderLayout`), and the config pieces of rotary embeddings, attention heads and Mamba-2's clamp of Δ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.registry import UnsupportedModel, refuse
from seqdyn.hf.modeling import SeqdynForCausalLM


def copy_weight(target: torch.Tensor, source: torch.Tensor, name: str) -> None:
    """``target ← source`` (reshaped to the target's shape where only the layout differs)."""
    if target.numel() != source.numel():
        raise UnsupportedModel(
            f"weights: {name} has shape {tuple(source.shape)}, the converted model expects {tuple(target.shape)}"
        )
    target.copy_(source.reshape(target.shape))


def copy_linears(prefix: str, theirs: nn.Module, ours: nn.Module, names: tuple[str, ...]) -> None:
    for name in names:
        for kind in ("weight", "bias"):
            source = getattr(getattr(theirs, name), kind)
            if source is not None:
                copy_weight(getattr(getattr(ours, name), kind), source, f"{prefix}.{name}.{kind}")


def copy_conv(prefix: str, theirs: nn.Conv1d, ours: nn.Module) -> None:
    """A depthwise ``nn.Conv1d`` (weight ``[C, 1, W]``, causal by its padding) into a ShortConv (``[C, W]``)."""
    copy_weight(ours.weight, theirs.weight, f"{prefix}.conv1d.weight")
    copy_weight(ours.bias, theirs.bias, f"{prefix}.conv1d.bias")


def copy_pairs(prefix: str, theirs: nn.Module, ours: nn.Module, pairs: tuple[tuple[str, str], ...]) -> None:
    """Each ``(our parameter, their parameter)`` pair of dotted names, copied."""
    for our_name, their_name in pairs:
        copy_weight(attrgetter(our_name)(ours), attrgetter(their_name)(theirs), f"{prefix}.{their_name}")


def copy_centered(target: torch.Tensor, source: torch.Tensor, name: str) -> None:
    """A zero-centered RMSNorm weight (Qwen3.5's ``x · (1 + w)``) into seqdyn's ``x · w``."""
    copy_weight(target, 1.0 + source.float(), name)


def copy_swiglu(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """A SwiGLU of ``gate_proj``, ``up_proj`` and ``down_proj`` into seqdyn's MLP (``fc1`` = [gate | up])."""
    copy_weight(
        ours.fc1.weight,
        torch.cat([theirs.gate_proj.weight, theirs.up_proj.weight]),
        f"{prefix}.gate_proj/up_proj.weight",
    )
    copy_weight(ours.fc2.weight, theirs.down_proj.weight, f"{prefix}.down_proj.weight")


def copy_experts(
    prefix: str, router: str, theirs: nn.Module, ours: nn.Module, selection_bias: str | None = None
) -> None:
    """A mixture of SwiGLU experts — its linear router (the attribute ``router``), ``experts`` (``gate_up_proj`` =
    [gate | up], ``down_proj``, one slice per expert) and, where named, the bias that only chooses experts (a dotted
    name: DeepSeek-V3's ``gate.e_score_correction_bias``) — into seqdyn's (``router``, ``gate_up``, ``down``,
    ``selection_bias``)."""
    pairs = [("router.weight", f"{router}.weight"), ("gate_up", "experts.gate_up_proj"), ("down", "experts.down_proj")]
    if selection_bias is not None:
        pairs.append(("selection_bias", selection_bias))
    copy_pairs(prefix, theirs, ours, tuple(pairs))


def copy_qkv(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """Separate ``q_proj``, ``k_proj``, ``v_proj`` weights into seqdyn's stacked ``qkv``."""
    stacked = torch.cat([theirs.q_proj.weight, theirs.k_proj.weight, theirs.v_proj.weight])
    copy_weight(ours.qkv.weight, stacked, f"{prefix}.q_proj/k_proj/v_proj.weight")


def plain_attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    copy_qkv(prefix, theirs, ours)
    copy_weight(ours.out.weight, theirs.o_proj.weight, f"{prefix}.o_proj.weight")


@dataclass(frozen=True)
class DecoderLayout:
    """Where a hybrid decoder keeps its weights: per layer the norm of the mixer's branch and the one of the MLP's (or
    these per layer type), the MLP, and the mixer of each layer type (its attribute and the function that copies
    it); the final norm; whether its RMSNorm weights are zero-centered (``x · (1 + w)``)."""

    norms: tuple[str, str] | dict[str, tuple[str, str]]
    mlp: str
    mixers: dict[str, tuple[str, Callable[[str, nn.Module, nn.Module], None]]]
    final_norm: str
    centered: bool = False
    mlp_weights: Callable[[str, nn.Module, nn.Module], None] = copy_swiglu


def copy_decoder_stack(source: nn.Module, target: SeqdynForCausalLM, layout: DecoderLayout) -> None:
    """``model.embed_tokens``, each of ``model.layers`` (its two norms, its mixer by its ``block_type``, its MLP),
    the final norm and ``lm_head``."""
    backbone, model = source.model, target.seqdyn
    norm_copy = copy_centered if layout.centered else copy_weight
    copy_weight(model.embedding.weight, backbone.embed_tokens.weight, "model.embed_tokens.weight")
    for index, (layer, block) in enumerate(zip(backbone.layers, model.blocks)):
        prefix = f"model.layers.{index}"
        kind = getattr(layer, "block_type", None) or source.config.layer_types[index]
        norms = layout.norms[kind] if isinstance(layout.norms, dict) else layout.norms
        for ours, theirs in zip((block.norm1, block.norm2), norms):
            norm_copy(ours.weight, getattr(layer, theirs).weight, f"{prefix}.{theirs}.weight")
        attribute, mixer_weights = layout.mixers[kind]  # "": the mixer's parts are the layer's
        mixer_weights(
            f"{prefix}.{attribute}" if attribute else prefix,
            getattr(layer, attribute) if attribute else layer,
            block.mixer,
        )
        mlp = getattr(layer, layout.mlp) if layout.mlp else layer  # "": the MLP's parts are the layer's
        layout.mlp_weights(f"{prefix}.{layout.mlp}" if layout.mlp else prefix, mlp, block.mlp)
    norm_copy(model.norm.weight, getattr(backbone, layout.final_norm).weight, f"model.{layout.final_norm}.weight")
    if not target.config.tie_word_embeddings:
        copy_weight(model.head.weight, source.lm_head.weight, "lm_head.weight")


def hybrid_config(
    config: Any, mixers: list[tuple[str, dict[str, Any]]], tie: bool | None = None, **fields: Any
) -> SeqdynConfig:
    """A hybrid decoder: pre-norm RMSNorm blocks, each with its layer's mixer (name, options) and a SwiGLU MLP of the
    checkpoint's width, final RMSNorm, lm head (tied as the checkpoint's, or ``tie``), with the checkpoint's ε and
    special tokens; ``fields`` set other model fields (another MLP, norm positions)."""
    if "mlp" not in fields:
        fields.update(mlp="swiglu", mlp_ratio=config.intermediate_size / config.hidden_size)
    fields.setdefault("norm_eps", getattr(config, "rms_norm_eps", None))
    return SeqdynConfig(
        vocab_size=config.vocab_size,
        d_model=config.hidden_size,
        layers=config.num_hidden_layers,
        mixer=[name for name, _ in mixers],
        mixer_options=[options for _, options in mixers],
        norm="rmsnorm",
        tie_embeddings=config.tie_word_embeddings if tie is None else tie,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        **fields,
    )


def check_default_rope(config: Any) -> None:
    """The checkpoint's rotary embeddings must be RoPE's default frequencies (no scaling), the ones seqdyn rotates
    by."""
    rope_type = (config.rope_parameters or {}).get("rope_type", "default")
    if rope_type != "default":
        raise refuse(
            config.model_type, "rope_parameters.rope_type", rope_type, "seqdyn rotates by the default RoPE frequencies"
        )


def rotary_options(config: Any) -> dict[str, Any]:
    """softmax_attention's rotary options from the checkpoint's ``rope_parameters``: rotary embeddings on the
    ``partial_rotary_factor`` of each head, at base ``rope_theta``."""
    rope = config.rope_parameters or {}
    return {
        "rotary": True,
        "rotary_fraction": float(rope.get("partial_rotary_factor", 1.0)),
        "rotary_base": float(rope.get("rope_theta", 10_000.0)),
    }


def rotary_or_none(config: Any, rope: bool) -> dict[str, Any]:
    """Rotary embeddings as the checkpoint's (checked to be RoPE's default frequencies), or no positions."""
    if not rope:
        return {"rotary": False}
    check_default_rope(config)
    return rotary_options(config)


def attention_heads(config: Any) -> dict[str, Any]:
    """softmax_attention's query heads, grouped key–value heads and head width of a checkpoint's attention."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return {"heads": config.num_attention_heads, "kv_heads": config.num_key_value_heads, "head_dim": head_dim}


def dt_limit(limit: tuple[float, float]) -> dict[str, Any]:
    """mamba2's clamp of Δ from a checkpoint's ``time_step_limit`` (which transformers, as ``mamba_ssm``, applies
    over a prompt but not when it decodes a token; seqdyn applies it in both)."""
    low, high = limit
    return {
        **({"dt_floor": float(low)} if low > 0 else {}),
        **({"dt_ceiling": float(high)} if high != float("inf") else {}),
    }
