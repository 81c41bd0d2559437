"""Mamba-2 (``Mamba2ForCausalLM``: Dao & Gu 2024) → the ``mamba2`` mixer with its groups of B and C, in pre-norm RMSNorm
blocks without MLP, as ``Mamba2Block``; its mixer's options and weights are those of the Mamba-2 layers of every
hybrid (:func:`mamba2_options`, :func:`mamba2_mixer_weights`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import copy_conv, copy_linears, copy_weight, dt_limit
from seqdyn.hf.convert.mamba import check_mamba_options, copy_rmsnorm_stack, rmsnorm_stack
from seqdyn.hf.convert.registry import TinyModel, refuse, register
from seqdyn.hf.modeling import SeqdynForCausalLM

#: where ``Mamba2Config`` holds each option of the mamba2 mixer that a Mamba-2 layer sets
MAMBA2_FIELDS = {
    "state_dim": "state_size",
    "expand": "expand",
    "head_dim": "head_dim",
    "groups": "n_groups",
    "conv_size": "conv_kernel",
    "norm_eps": "layer_norm_epsilon",
}
#: the same fields as the Mamba-2 hybrids (Bamba, Granite 4.0-H, Falcon-H1) name them
HYBRID_MAMBA2_FIELDS = {
    "state_dim": "mamba_d_state",
    "expand": "mamba_expand",
    "head_dim": "mamba_d_head",
    "groups": "mamba_n_groups",
    "conv_size": "mamba_d_conv",
    "norm_eps": "rms_norm_eps",
}


def mamba2_options(
    config: Any, fields: dict[str, str], limit: tuple[float, float] | None = None, **own: Any
) -> dict[str, Any]:
    """The mamba2 mixer's options of a Mamba-2 layer: each option of ``fields`` (state N, expand, head size P,
    groups of B and C, conv width, the gated norm's ε) from the config field named there, unless the family gives
    its ``own`` value; Δ clamped to ``limit`` (by default the config's ``time_step_limit``)."""
    options = {option: getattr(config, field) for option, field in fields.items() if option not in own}
    return {**options, **own, **dt_limit(config.time_step_limit if limit is None else limit)}


def _mamba2_config(config: Any) -> SeqdynConfig:
    """``Mamba2Config`` → the mamba2 mixer (state N, head size P, groups of B and C, conv width) in RMSNorm pre-norm
    blocks, no MLP."""
    check_mamba_options("mamba2", config)
    if config.num_heads * config.head_dim != config.expand * config.hidden_size:
        raise refuse(
            "mamba2", "num_heads", config.num_heads, "seqdyn's mamba2 width num_heads·head_dim is expand·hidden_size"
        )
    return rmsnorm_stack(config, "mamba2", mamba2_options(config, MAMBA2_FIELDS))


def mamba2_mixer_weights(prefix: str, mixer: nn.Module, ours: nn.Module) -> None:
    """A ``Mamba2Mixer`` (or Bamba's, Granite's, Nemotron-H's, Falcon-H1's: the same weights) into seqdyn's mamba2."""
    copy_linears(prefix, mixer, ours, ("in_proj", "out_proj"))
    copy_conv(prefix, mixer.conv1d, ours.convs["xbc"])
    copy_weight(ours.decay.dt_bias, mixer.dt_bias, f"{prefix}.dt_bias")
    copy_weight(ours.decay.a_log, mixer.A_log, f"{prefix}.A_log")
    copy_weight(ours.skip, mixer.D, f"{prefix}.D")
    if ours.norm is not None:  # (Falcon-H1's layers may have none)
        copy_weight(ours.norm.weight, mixer.norm.weight, f"{prefix}.norm.weight")


def _mamba2_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    copy_rmsnorm_stack(source, target, mamba2_mixer_weights)


register(
    "mamba2",
    _mamba2_config,
    _mamba2_weights,
    TinyModel(
        "Mamba2ForCausalLM",
        "Mamba2Config",
        dict(
            vocab_size=48,
            hidden_size=16,
            state_size=4,
            num_hidden_layers=2,
            expand=2,
            head_dim=4,
            num_heads=8,
            n_groups=2,
            conv_kernel=4,
            chunk_size=8,
        ),
    ),
)
