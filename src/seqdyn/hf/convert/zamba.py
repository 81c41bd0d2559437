"""Zamba (``ZambaForCausalLM``, Glorioso et al. 2024, https://arxiv.org/abs/2405.16712) → ``s6`` with its Mamba heads
(each head's Δ, B and C from its own channels: the mixer's ``heads``) in every layer, pre-norm RMSNorm blocks without
MLP, and one shared block (:mod:`seqdyn.models.shared`) that every "hybrid" layer runs on [hidden state, embeddings]
and adds, through the layer's own ``linear``, to the input of its Mamba layer only (its eq. 6).

Its in-projection interleaves x and the gate z channel by channel (rows 2c and 2c + 1); seqdyn's stacks [x ; z].  Its
attention scores are ``qᵀk / √(K/2)``: √2 is folded into the query projection, as for Zamba2.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import copy_conv, copy_swiglu, copy_weight, hybrid_config
from seqdyn.hf.convert.registry import TinyModel, refuse, register
from seqdyn.hf.convert.zamba2 import (
    check_one_set,
    check_zamba_options,
    copy_shared_attention,
    copy_zamba_layers,
    hybrid_layers,
    shared_block,
    shared_inputs,
)
from seqdyn.hf.modeling import SeqdynForCausalLM


def _check_zamba(config: Any) -> None:
    check_zamba_options(
        config,
        ("mamba_proj_bias", True, "seqdyn's s6 projections have no bias"),
        ("mamba_conv_bias", False, "seqdyn's short convolution has a bias"),
    )
    if config.hidden_mamba_act != "silu":
        raise refuse("zamba", "hidden_mamba_act", config.hidden_mamba_act, "seqdyn's s6 block uses SiLU")
    if config.attention_hidden_size != 2 * config.hidden_size:
        raise refuse(
            "zamba",
            "attention_hidden_size",
            config.attention_hidden_size,
            "its attention reads [hidden state, embeddings], twice hidden_size",
        )


def _zamba_config(config: Any) -> SeqdynConfig:
    """``ZambaConfig`` → s6 with its Mamba heads in every layer, without MLP, and the shared block of its hybrid
    layers."""
    _check_zamba(config)
    s6 = {
        "state_dim": config.mamba_d_state,
        "expand": config.mamba_expand,
        "dt_rank": config.mamba_dt_rank,
        "conv_size": config.mamba_d_conv,
        "heads": config.n_mamba_heads,
    }
    return hybrid_config(
        config,
        [("s6", s6)] * config.num_hidden_layers,
        mlp="none",
        shared_blocks=[shared_block(config)],
        shared_inputs=shared_inputs(config, 1),
    )


def _mixer_weights(prefix: str, mixer: nn.Module, ours: nn.Module) -> None:
    """A ``ZambaMambaMixer`` into seqdyn's s6 with heads (its per-head tensors ``[H, …]`` flattened to channels)."""
    inner = ours.inner
    interleaved = mixer.in_proj.weight.view(inner, 2, -1)  # rows 2c (x_c) and 2c + 1 (z_c)
    copy_weight(ours.in_proj.weight, interleaved.transpose(0, 1), f"{prefix}.in_proj.weight")
    copy_conv(prefix, mixer.conv1d, ours.convs["x"])
    copy_weight(ours.x_proj.weight, mixer.x_proj_weight, f"{prefix}.x_proj_weight")
    copy_weight(ours.dt_proj.weight, mixer.dt_proj_weight, f"{prefix}.dt_proj_weight")
    copy_weight(ours.dt_proj.bias, mixer.dt_proj_bias, f"{prefix}.dt_proj_bias")
    copy_weight(ours.a_log, mixer.A_log, f"{prefix}.A_log")
    copy_weight(ours.skip, mixer.D, f"{prefix}.D")
    copy_weight(ours.out_proj.weight, mixer.out_proj.weight, f"{prefix}.out_proj.weight")


def _shared_weights(block: nn.Module, layers: nn.ModuleList, hybrid: list[int]) -> None:
    """The one shared block, from the first hybrid layer's ``shared_transf`` (the others' must be the same)."""
    check_one_set([(layers[layer].shared_transf, layer) for layer in hybrid], "shared_transf")
    theirs, prefix = layers[hybrid[0]].shared_transf, f"model.layers.{hybrid[0]}.shared_transf"
    copy_shared_attention(block, theirs, prefix, [])
    copy_swiglu(f"{prefix}.feed_forward", theirs.feed_forward, block.mlp)  # fc1 = [gate | up], whatever activation


def _zamba_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    _shared_weights(target.seqdyn.shared[0], source.model.layers, hybrid_layers(source.config))
    copy_zamba_layers(source, target, _mixer_weights)


register(
    "zamba",
    _zamba_config,
    _zamba_weights,
    TinyModel(
        "ZambaForCausalLM",
        "ZambaConfig",
        dict(
            vocab_size=48,
            hidden_size=16,
            intermediate_size=24,
            num_hidden_layers=4,
            layers_block_type=["mamba", "hybrid", "mamba", "hybrid"],
            num_attention_heads=2,
            num_key_value_heads=2,
            mamba_d_state=4,
            n_mamba_heads=2,
        ),
    ),
)
