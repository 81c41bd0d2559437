"""Bailing-hybrid (``BailingHybridForCausalLM``, Ling 3) → Kimi-Linear's stack with its own layers: ``kda`` with the
bounded decay ``L · σ(A ⊙ (W_f u + b))`` (``kda_safe_gate``; Kimi's softplus form without it) from a full-rank
projection and a full-rank output gate, and ``latent_attention`` with RoPE on the rotated channels and a sigmoid
gate per head; DeepSeek-V3's experts after the first dense layers.

Two layouts differ from seqdyn's and become weights: the full-rank projections of the decay and of the output gate
enter seqdyn's low-rank pairs ``W_2 W_1`` as ``W_1 = I`` (width d_model; a product by the identity is exact), and the
rotated channels, which transformers pairs as ``(0, 1), (2, 3), …`` (interleaved), are reordered to seqdyn's
``(m, m + r/2)`` pairs — evens, then odds — in the query's and the shared key's rows (the scores are a sum over the
channels, unchanged by the same reordering of both).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import check_default_rope, copy_pairs, hybrid_config
from seqdyn.hf.convert.kimi_linear import (
    TINY_FIELDS,
    check_options,
    copy_kda_common,
    kda_hybrid_weights,
    kda_options,
    latent_attention_weights,
    latent_options,
    mlp_fields,
    per_layer,
)
from seqdyn.hf.convert.registry import TinyModel, register


def _mixers(config: Any) -> list[tuple[str, dict[str, Any]]]:
    bound = float(config.kda_lower_bound) if config.kda_safe_gate else None
    kda = kda_options(config, config.hidden_size, decay_lower_bound=bound)  # rank d_model: W_1 = I
    rope = {"rotary": True, "rotary_base": float(config.rope_parameters["rope_theta"]), "head_gate": True}
    return per_layer(config, kda, latent_options(config, **rope))


def _bailing_hybrid_config(config: Any) -> SeqdynConfig:
    """``BailingHybridConfig`` → KDA or latent attention per ``layer_types``, a SwiGLU or experts per
    ``mlp_layer_types``; its multi-token-prediction layers are not part of the causal model."""
    check_options(config)
    check_default_rope(config)
    return hybrid_config(config, _mixers(config), **mlp_fields(config))


def _kda_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    copy_kda_common(prefix, theirs, ours)
    copy_pairs(
        prefix,
        theirs,
        ours,
        (
            ("decay.up.weight", "forget_gate.f_proj.weight"),
            ("decay.dt_bias", "forget_gate.dt_bias"),
            ("decay.a_log", "forget_gate.A_log"),
            ("gate.1.weight", "g_proj.weight"),
        ),
    )
    for down in (ours.decay.down.weight, ours.gate[0].weight):
        down.copy_(torch.eye(*down.shape, dtype=down.dtype))


def _deinterleave(rows: torch.Tensor) -> torch.Tensor:
    """Rows paired ``(0, 1), (2, 3), …`` (the axis before the inputs') reordered to ``(m, m + r/2)``: evens, odds."""
    return torch.cat([rows[..., 0::2, :], rows[..., 1::2, :]], dim=-2)


def _attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    latent_attention_weights(prefix, theirs, ours)
    nope, rope = ours.nope_dim, ours.rope_dim
    query = ours.q_up.weight.unflatten(0, (ours.heads, nope + rope))  # [H, nope + rope, ·]
    query[:, nope:] = _deinterleave(query[:, nope:].clone())
    shared = ours.kv_down.weight[ours.kv_rank :]
    shared.copy_(_deinterleave(shared.clone()))
    copy_pairs(prefix, theirs, ours, (("gate.weight", "g_proj.weight"),))


register(
    "bailing_hybrid",
    _bailing_hybrid_config,
    kda_hybrid_weights(_kda_weights, _attention_weights),
    TinyModel(
        "BailingHybridForCausalLM",
        "BailingHybridConfig",
        dict(
            TINY_FIELDS,
            qk_rope_head_dim=4,
            head_dim=8,
            layer_group_size=2,
            first_k_dense_replace=1,
            rope_theta=10_000.0,
        ),
    ),
)
