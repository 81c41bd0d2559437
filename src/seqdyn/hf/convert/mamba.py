"""Mamba (``MambaForCausalLM``: Mamba-1, Gu & Dao 2023) → the ``s6`` mixer in pre-norm RMSNorm blocks without MLP,
as ``MambaBlock``; the model around the mixers is the one of every Mamba family (``backbone.layers``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import copy_conv, copy_linears, copy_weight
from seqdyn.hf.convert.registry import TinyModel, refuse, register
from seqdyn.hf.modeling import SeqdynForCausalLM


def check_mamba_options(family: str, config: Any) -> None:
    """The options of the Mamba families that seqdyn's blocks fix: no projection bias, a convolution bias, SiLU."""
    if config.use_bias:
        raise refuse(family, "use_bias", True, "seqdyn's projections have no bias")
    if not config.use_conv_bias:
        raise refuse(family, "use_conv_bias", False, "seqdyn's short convolution has a bias")
    if config.hidden_act != "silu":
        raise refuse(family, "hidden_act", config.hidden_act, "seqdyn's block uses SiLU")


def rmsnorm_stack(config: Any, mixer: str, options: dict[str, Any]) -> SeqdynConfig:
    """The Mamba families' model around a mixer: embedding, pre-norm RMSNorm blocks without MLP, final RMSNorm,
    lm head (tied or not), with the checkpoint's ε and special tokens."""
    return SeqdynConfig(
        vocab_size=config.vocab_size,
        d_model=config.hidden_size,
        layers=config.num_hidden_layers,
        mixer=mixer,
        mixer_options=options,
        mlp="none",
        norm="rmsnorm",
        norm_eps=config.layer_norm_epsilon,
        tie_embeddings=config.tie_word_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def copy_rmsnorm_stack(
    source: nn.Module, target: SeqdynForCausalLM, mixer_weights: Callable[[str, nn.Module, nn.Module], None]
) -> None:
    """The weights around the mixers (``backbone.embeddings``, each layer's ``norm``, ``norm_f``, ``lm_head``),
    and each layer's mixer by ``mixer_weights(prefix, theirs, ours)``."""
    backbone, model = source.backbone, target.seqdyn
    copy_weight(model.embedding.weight, backbone.embeddings.weight, "backbone.embeddings.weight")
    for index, (layer, block) in enumerate(zip(backbone.layers, model.blocks)):
        copy_weight(block.norm1.weight, layer.norm.weight, f"backbone.layers.{index}.norm.weight")
        mixer_weights(f"backbone.layers.{index}.mixer", layer.mixer, block.mixer)
    copy_weight(model.norm.weight, backbone.norm_f.weight, "backbone.norm_f.weight")
    if not target.config.tie_word_embeddings:
        copy_weight(model.head.weight, source.lm_head.weight, "lm_head.weight")


def s6_config(config: Any, **options: Any) -> SeqdynConfig:
    """``MambaConfig`` (or a family's config that adds mixer ``options``, as Falcon-Mamba's) → the s6 mixer (state N,
    expand, Δ rank, conv width) in RMSNorm pre-norm blocks, no MLP."""
    family = config.model_type
    check_mamba_options(family, config)
    if config.intermediate_size != config.expand * config.hidden_size:
        raise refuse(family, "intermediate_size", config.intermediate_size, "seqdyn's s6 width is expand·d_model")
    options = {
        "state_dim": config.state_size,
        "expand": config.expand,
        "dt_rank": int(config.time_step_rank),
        "conv_size": config.conv_kernel,
        **options,
    }
    return rmsnorm_stack(config, "s6", options)


def mamba_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    def mixer_weights(prefix: str, mixer: nn.Module, ours: nn.Module) -> None:
        copy_linears(prefix, mixer, ours, ("in_proj", "x_proj", "dt_proj", "out_proj"))
        copy_conv(prefix, mixer.conv1d, ours.convs["x"])
        copy_weight(ours.a_log, mixer.A_log, f"{prefix}.A_log")
        copy_weight(ours.skip, mixer.D, f"{prefix}.D")

    copy_rmsnorm_stack(source, target, mixer_weights)


register(
    "mamba",
    s6_config,
    mamba_weights,
    TinyModel(
        "MambaForCausalLM",
        "MambaConfig",
        dict(
            vocab_size=48, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4, time_step_rank=2
        ),
    ),
)
