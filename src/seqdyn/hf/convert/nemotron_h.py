"""Nemotron-H (``NemotronHForCausalLM``): layers of Mamba-2, attention or a squared-ReLU MLP alone → a seqdyn block per
Mamba-2 or attention layer, with the MLP layer after it as its MLP.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import attention_heads, copy_weight, plain_attention_weights
from seqdyn.hf.convert.mamba2 import mamba2_mixer_weights, mamba2_options
from seqdyn.hf.convert.registry import TinyModel, refuse, refuse_any, register
from seqdyn.hf.modeling import SeqdynForCausalLM

_NEMOTRON_MIXERS = ("linear_attention", "full_attention")
#: where ``NemotronHConfig`` holds mamba2's options (its width, ``expand``, is the heads' ``mamba_num_heads`` times
#: ``mamba_head_dim``)
_NEMOTRON_MAMBA2_FIELDS = {
    "state_dim": "ssm_state_size",
    "head_dim": "mamba_head_dim",
    "groups": "n_groups",
    "conv_size": "conv_kernel",
    "norm_eps": "layer_norm_epsilon",
}


def _nemotron_blocks(config: Any) -> list[tuple[int, int | None]]:
    """Nemotron-H's layers as seqdyn blocks: each Mamba-2 or attention layer, with the MLP layer right after it as
    the block's MLP (none where another mixer follows): ``(mixer layer, MLP layer or None)`` per block."""
    kinds, blocks, index = list(config.layers_block_type), [], 0
    while index < len(kinds):
        if kinds[index] not in _NEMOTRON_MIXERS:
            why = (
                "seqdyn's experts are SwiGLU with a softmax router"
                if kinds[index] == "moe"
                else "a seqdyn block is a mixer and the MLP after it, and this MLP follows no mixer"
            )
            raise refuse(config.model_type, f"layers_block_type[{index}]", kinds[index], why)
        has_mlp = index + 1 < len(kinds) and kinds[index + 1] == "mlp"
        blocks.append((index, index + 1 if has_mlp else None))
        index += 2 if has_mlp else 1
    return blocks


def _check_nemotron_options(config: Any) -> None:
    family = config.model_type
    refuse_any(
        config,
        [
            ("use_bias", True, "seqdyn's mamba2 projections have no bias"),
            ("use_conv_bias", False, "seqdyn's short convolution has a bias"),
            ("mlp_bias", True, "seqdyn's squared-ReLU MLP has no biases"),
        ],
    )
    for option, value in (("mamba_hidden_act", "silu"), ("mlp_hidden_act", "relu2")):
        if getattr(config, option) != value:
            raise refuse(family, option, getattr(config, option), f"seqdyn's block uses {value} there")
    inner = config.mamba_num_heads * config.mamba_head_dim
    if inner % config.hidden_size:
        raise refuse(
            family,
            "mamba_num_heads",
            config.mamba_num_heads,
            "seqdyn's mamba2 width mamba_num_heads·mamba_head_dim is a whole multiple of hidden_size",
        )


def _nemotron_config(config: Any) -> SeqdynConfig:
    """``NemotronHConfig`` → one block per Mamba-2 or attention layer (no positions, grouped key–value heads), with
    the squared-ReLU MLP layer after it as its MLP; Δ clamped from below at ``time_step_min`` as the layer does."""
    _check_nemotron_options(config)
    mamba2 = mamba2_options(
        config,
        _NEMOTRON_MAMBA2_FIELDS,
        (config.time_step_min, float("inf")),
        expand=config.mamba_num_heads * config.mamba_head_dim // config.hidden_size,
    )
    attention = {**attention_heads(config), "rotary": False}
    blocks = _nemotron_blocks(config)
    kinds = config.layers_block_type
    mixers = [
        ("mamba2", mamba2) if kinds[mixer] == "linear_attention" else ("softmax_attention", attention)
        for mixer, _ in blocks
    ]
    return SeqdynConfig(
        vocab_size=config.vocab_size,
        d_model=config.hidden_size,
        layers=len(blocks),
        mixer=[name for name, _ in mixers],
        mixer_options=[options for _, options in mixers],
        mlp=["none" if mlp is None else "relu2" for _, mlp in blocks],
        mlp_ratio=config.intermediate_size / config.hidden_size,
        norm="rmsnorm",
        norm_eps=config.layer_norm_epsilon,
        tie_embeddings=config.tie_word_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def _nemotron_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    backbone, model = source.model, target.seqdyn
    copy_weight(model.embedding.weight, backbone.embeddings.weight, "model.embeddings.weight")
    for block, (mixer_index, mlp_index) in zip(model.blocks, _nemotron_blocks(source.config)):
        layer, prefix = backbone.layers[mixer_index], f"model.layers.{mixer_index}"
        copy_weight(block.norm1.weight, layer.norm.weight, f"{prefix}.norm.weight")
        mixer_weights = mamba2_mixer_weights if layer.block_type == "linear_attention" else plain_attention_weights
        mixer_weights(f"{prefix}.mixer", layer.mixer, block.mixer)
        if mlp_index is not None:
            layer, prefix = backbone.layers[mlp_index], f"model.layers.{mlp_index}"
            copy_weight(block.norm2.weight, layer.norm.weight, f"{prefix}.norm.weight")
            copy_weight(block.mlp.fc1.weight, layer.mixer.up_proj.weight, f"{prefix}.mixer.up_proj.weight")
            copy_weight(block.mlp.fc2.weight, layer.mixer.down_proj.weight, f"{prefix}.mixer.down_proj.weight")
    copy_weight(model.norm.weight, backbone.norm_f.weight, "model.norm_f.weight")
    if not target.config.tie_word_embeddings:
        copy_weight(model.head.weight, source.lm_head.weight, "lm_head.weight")


register(
    "nemotron_h",
    _nemotron_config,
    _nemotron_weights,
    TinyModel(
        "NemotronHForCausalLM",
        "NemotronHConfig",
        dict(
            vocab_size=48,
            hidden_size=16,
            intermediate_size=24,
            num_hidden_layers=6,
            layers_block_type=[
                "linear_attention",
                "mlp",
                "linear_attention",
                "full_attention",
                "mlp",
                "linear_attention",
            ],
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            mamba_num_heads=8,
            mamba_head_dim=4,
            ssm_state_size=4,
            n_groups=2,
            chunk_size=8,
            conv_kernel=4,
        ),
    ),
)
