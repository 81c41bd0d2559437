"""Zamba2 (``Zamba2ForCausalLM``, Glorioso et al. 2024, https://arxiv.org/abs/2411.15242) → ``mamba2`` in every layer
(pre-norm RMSNorm blocks without MLP) and ``num_mem_blocks`` shared blocks (:mod:`seqdyn.models.shared`): its
"hybrid" layers, in turn, run shared block ``i mod num_mem_blocks`` on [hidden state, embeddings] and add its
output, through the layer's own ``linear``, to the input of their Mamba-2 layer only.

Its attention scores are ``qᵀk / √(K/2)`` (K the head width): the factor √2 is folded into the query projection (and
its adapters), which rotary embeddings leave as it is.  Each use's adapters (``adapter_rank``) on the MLP's input
projection, and with ``use_shared_attention_adapter`` on the query, key and value, are the layer's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import check_default_rope, copy_weight, hybrid_config, rotary_options
from seqdyn.hf.convert.mamba2 import mamba2_mixer_weights, mamba2_options
from seqdyn.hf.convert.registry import TinyModel, UnsupportedModel, refuse, refuse_any, register
from seqdyn.hf.modeling import SeqdynForCausalLM

#: √2: Zamba's attention scores are qᵀk / √(K/2), seqdyn's qᵀk / √K
SCORE_FACTOR = math.sqrt(2.0)
#: where ``Zamba2Config`` holds each option of the mamba2 mixer (its ``mamba_headdim``: expand·hidden / heads)
ZAMBA2_MAMBA2_FIELDS = {
    "state_dim": "mamba_d_state",
    "expand": "mamba_expand",
    "head_dim": "mamba_headdim",
    "groups": "mamba_ngroups",
    "conv_size": "mamba_d_conv",
}
#: the shared block's MLP of each of Zamba's activations (a gated MLP: act(gate) ⊙ up)
SHARED_MLPS = {"gelu": "gated_gelu", "silu": "swiglu"}


def check_zamba_options(config: Any, *refused: tuple[str, Any, str]) -> None:
    """What Zamba and Zamba2 may not set: the family's ``refused`` ``(option, value, why)`` (biases where seqdyn has
    none, or none where it has one), another activation of the shared MLP."""
    refuse_any(config, list(refused))
    if config.hidden_act not in SHARED_MLPS:
        raise refuse(
            config.model_type, "hidden_act", config.hidden_act, f"seqdyn's gated MLPs use {sorted(SHARED_MLPS)}"
        )


def hybrid_layers(config: Any) -> list[int]:
    """The indices of the layers that run a shared block."""
    return [index for index, kind in enumerate(config.layers_block_type) if kind == "hybrid"]


def shared_inputs(config: Any, blocks: int) -> list[int | None]:
    """Per layer, the shared block its hybrid layer runs (the ``i``-th hybrid layer: block ``i mod blocks``)."""
    order = {layer: use for use, layer in enumerate(hybrid_layers(config))}
    return [order[layer] % blocks if layer in order else None for layer in range(config.num_hidden_layers)]


def _mamba2_options(config: Any) -> dict[str, Any]:
    """The mamba2 mixer of its layers: Δ floored at ``time_step_min`` (its only limit), its gated norm's own ε."""
    if int(config.mamba_expand * config.hidden_size) % config.n_mamba_heads:
        raise refuse("zamba2", "n_mamba_heads", config.n_mamba_heads, "it must divide mamba_expand·hidden_size")
    return mamba2_options(config, ZAMBA2_MAMBA2_FIELDS, (config.time_step_min, float("inf")), norm_eps=1e-5)


def shared_block(config: Any, attention: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """Zamba's shared block: attention of its heads (no positions, unless ``attention`` says otherwise) at twice the
    width, its gated MLP; ``fields``: the family's other fields (Zamba2's adapters)."""
    heads = {
        "heads": config.num_attention_heads,
        "kv_heads": config.num_key_value_heads,
        "head_dim": config.attention_head_dim,
        "rotary": False,
    }
    mlp_ratio = config.intermediate_size / config.hidden_size
    return dict(
        attention={**heads, **(attention or {})}, mlp=SHARED_MLPS[config.hidden_act], mlp_ratio=mlp_ratio, **fields
    )


def _shared_block(config: Any) -> dict[str, Any]:
    """Zamba2's: rotary embeddings with ``use_mem_rope``, adapters of ``adapter_rank``."""
    rotary = {}
    if config.use_mem_rope:
        check_default_rope(config)
        rotary = rotary_options(config)
    return shared_block(
        config,
        attention=rotary,
        adapter_rank=config.adapter_rank,
        attention_adapters=config.use_shared_attention_adapter,
    )


def _zamba2_config(config: Any) -> SeqdynConfig:
    """``Zamba2Config`` → mamba2 in every layer, without MLP, and its shared blocks on the hybrid layers."""
    check_zamba_options(
        config,
        ("add_bias_linear", True, "seqdyn's mamba2 and shared projections have no bias"),
        ("use_conv_bias", False, "seqdyn's short convolution has a bias"),
    )
    blocks = config.num_mem_blocks
    mixers = [("mamba2", _mamba2_options(config))] * config.num_hidden_layers
    return hybrid_config(
        config,
        mixers,
        mlp="none",
        shared_blocks=[_shared_block(config)] * blocks,
        shared_inputs=shared_inputs(config, blocks),
    )


def copy_adapted(target: nn.Module, weight: torch.Tensor, adapters: list[tuple[Any, int]], name: str) -> None:
    """A shared linear ``weight`` into ``target`` (an ``AdaptedLinear``, or a plain ``nn.Linear`` where no adapter
    is), and each ``(their adapter parts, use)``'s ``A`` and ``B`` into the use's parts."""
    base = getattr(target, "base", target)
    copy_weight(base.weight, weight, f"{name}.weight")
    for parts, use in adapters:
        for ours, theirs in zip(target.adapters[str(use)], parts):
            copy_weight(ours[0].weight, theirs[0].weight, f"{name} adapter {use} A")
            copy_weight(ours[1].weight, theirs[1].weight, f"{name} adapter {use} B")


def check_one_set(uses: list[tuple[nn.Module, int]], attribute: str) -> None:
    """The shared weights (all but adapters) of each hybrid layer's ``attribute`` (``(its module, its layer)`` in
    ``uses``) are the first one's."""
    first, layer = uses[0]
    for other, other_layer in uses[1:]:
        for (name, theirs), mine in zip(other.state_dict().items(), first.state_dict().values()):
            if "adapter" not in name and not torch.equal(theirs, mine):
                raise UnsupportedModel(
                    f"weights: model.layers.{other_layer}.{attribute}.{name} differs from "
                    f"model.layers.{layer}.{attribute}.{name}: the shared block's weights are not one set"
                )


def copy_shared_attention(block: nn.Module, theirs: nn.Module, prefix: str, qkv_adapters: list) -> None:
    """Zamba's shared block's attention (with ``qkv_adapters``) and its two norms into ``block`` (a
    ``SharedBlock``), then √2 of its scores ``qᵀk / √(K/2)`` folded into the query projection and each use's query
    adapter (its B)."""
    attention, qkv = theirs.self_attn, block.attention.qkv
    stacked = torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight])
    copy_adapted(qkv, stacked, qkv_adapters, f"{prefix}.self_attn.q_proj/k_proj/v_proj")
    getattr(qkv, "base", qkv).weight[: block.attention.widths[0]].mul_(SCORE_FACTOR)
    for query, _, _ in getattr(qkv, "adapters", {}).values():
        query[1].weight.mul_(SCORE_FACTOR)
    copy_weight(block.attention.out.weight, attention.o_proj.weight, f"{prefix}.self_attn.o_proj.weight")
    copy_weight(block.norm_in.weight, theirs.input_layernorm.weight, f"{prefix}.input_layernorm.weight")
    copy_weight(block.norm_mlp.weight, theirs.pre_ff_layernorm.weight, f"{prefix}.pre_ff_layernorm.weight")


def _shared_weights(block: nn.Module, uses: list[tuple[nn.Module, int, int]]) -> None:
    """Shared block ``block`` from the hybrid layers ``uses`` (their ``shared_transformer``, their layer, their
    index among hybrid layers), whose shared weights must be one set."""
    check_one_set([(module, layer) for module, layer, _ in uses], "shared_transformer")
    first, layer, _ = uses[0]
    prefix = f"model.layers.{layer}.shared_transformer"
    qkv_adapters = []
    if first.self_attn.config.use_shared_attention_adapter:
        for theirs, layer_index, use in uses:
            own = theirs.self_attn
            parts = (own.linear_q_adapter_list[use], own.linear_k_adapter_list[use], own.linear_v_adapter_list[use])
            qkv_adapters.append((parts, layer_index))
    copy_shared_attention(block, first, prefix, qkv_adapters)
    mlp = first.feed_forward
    mlp_adapters = [((own.feed_forward.gate_up_proj_adapter_list[use],), layer) for own, layer, use in uses]
    copy_adapted(block.mlp.fc1, mlp.gate_up_proj.weight, mlp_adapters, f"{prefix}.feed_forward.gate_up_proj")
    copy_weight(block.mlp.fc2.weight, mlp.down_proj.weight, f"{prefix}.feed_forward.down_proj.weight")


def copy_zamba_layers(
    source: nn.Module, target: SeqdynForCausalLM, mixer_weights: Callable[[str, nn.Module, nn.Module], None]
) -> None:
    """What Zamba and Zamba2 lay out alike: the embedding, each layer's norm and Mamba mixer (``mixer_weights``) and,
    in a hybrid layer, its own ``linear`` into its block's projection; the final norm and the head."""
    backbone, model = source.model, target.seqdyn
    copy_weight(model.embedding.weight, backbone.embed_tokens.weight, "model.embed_tokens.weight")
    for index, (layer, block) in enumerate(zip(backbone.layers, model.blocks)):
        prefix = f"model.layers.{index}"
        if hasattr(layer, "mamba_decoder"):
            copy_weight(block.projection.weight, layer.linear.weight, f"{prefix}.linear.weight")
            layer, block, prefix = layer.mamba_decoder, block.block, f"{prefix}.mamba_decoder"
        copy_weight(block.norm1.weight, layer.input_layernorm.weight, f"{prefix}.input_layernorm.weight")
        mixer_weights(f"{prefix}.mamba", layer.mamba, block.mixer)
    copy_weight(model.norm.weight, backbone.final_layernorm.weight, "model.final_layernorm.weight")
    if not target.config.tie_word_embeddings:
        copy_weight(model.head.weight, source.lm_head.weight, "lm_head.weight")


def _zamba2_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    uses: dict[int, list[tuple[nn.Module, int, int]]] = {}
    for use, layer in enumerate(hybrid_layers(source.config)):
        shared = source.model.layers[layer].shared_transformer
        uses.setdefault(use % source.config.num_mem_blocks, []).append((shared, layer, use))
    for index, block in enumerate(target.seqdyn.shared):
        _shared_weights(block, uses[index])
    copy_zamba_layers(source, target, mamba2_mixer_weights)


register(
    "zamba2",
    _zamba2_config,
    _zamba2_weights,
    TinyModel(
        "Zamba2ForCausalLM",
        "Zamba2Config",
        dict(
            vocab_size=48,
            hidden_size=16,
            intermediate_size=24,
            num_hidden_layers=5,
            layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid"],
            num_mem_blocks=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            use_shared_attention_adapter=True,
            adapter_rank=4,
            use_mem_rope=True,
            mamba_d_state=4,
            n_mamba_heads=8,
            mamba_ngroups=2,
            chunk_size=8,
        ),
    ),
)
