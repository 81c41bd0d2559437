"""xLSTM 7B (``xLSTMForCausalLM``, Beck et al. 2025, https://arxiv.org/abs/2503.13427) → pre-norm RMSNorm blocks,
each an ``mlstm`` mixer with xLSTM 7B's options and a SwiGLU MLP, the final RMSNorm, the untied head, logits
soft-capped.

transformers computes the mLSTM chunk by chunk (``mlstm_chunkwise_native_autograd``: the multiple of
``chunk_size`` that fits, then the rest a step at a time), with the stabilizer ``m`` of each chunk's states and of
each row the maximum of its log weights, ``m_t = max(m_0 + Σ_{s≤t} log f_s, max_{j≤t} (ĩ_j + Σ_{j<s≤t} log f_s))``
from ``m_0 = 0`` — in exact arithmetic the step recurrence ``m_t = max(log f_t + m_{t−1}, ĩ_t)`` of its decoding
kernel, so the chunk size only changes rounding.  Its normalizer ``max(|ñ_tᵀ q_t|, e^{−m_t}) + ε`` on the stabilized
state is ``max(|n_tᵀ q_t|, 1) + ε e^{m_t}`` on the state itself: the mixer's ``eps`` with that ``m_t``.  Its gates
are soft-capped at ``gate_soft_cap``, its per-head LayerNorm has a weight per channel and no bias, its queries and
keys have ``int(qk_dim_factor · D)`` channels (its cache rounds them up to multiples of 64, so a width that is
not one runs in transformers only without the cache; seqdyn computes the layers' widths); ``weight_mode="fused"``
stacks the same projections.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import copy_pairs, copy_weight
from seqdyn.hf.convert.registry import TinyModel, refuse_any, register
from seqdyn.hf.modeling import SeqdynForCausalLM


def xlstm_widths(config: Any) -> tuple[int, int, int]:
    """``(query/key width, value width, MLP width)`` as transformers' ``xLSTMLayer`` and ``xLSTMFeedForward`` build
    them: ``int(D · factor)`` for the mLSTM, the SwiGLU's ``D · ffn_proj_factor`` rounded up to a multiple of
    ``ffn_round_up_to_multiple_of``."""
    width = config.hidden_size
    multiple = config.ffn_round_up_to_multiple_of
    mlp = int(((width * config.ffn_proj_factor + multiple - 1) // multiple) * multiple)
    return int(width * config.qk_dim_factor), int(width * config.v_dim_factor), mlp


def _xlstm_config(config: Any) -> SeqdynConfig:
    refuse_any(config, [("use_bias", True, "biases in its RMSNorms and per-head LayerNorms, which seqdyn's lack")])
    key_width, value_width, mlp_width = xlstm_widths(config)
    mlstm = {
        "heads": config.num_heads,
        "key_width": key_width,
        "value_width": value_width,
        "head_norm": "layer",
        "norm_eps": config.norm_eps,
        "gate_soft_cap": config.gate_soft_cap,
        "eps": config.eps,
        "chunk_size": config.chunk_size,
    }
    return SeqdynConfig(
        vocab_size=config.vocab_size,
        d_model=config.hidden_size,
        layers=config.num_hidden_layers,
        mixer="mlstm",
        mixer_options=mlstm,
        mlp="swiglu",
        mlp_ratio=mlp_width / config.hidden_size,
        norm="rmsnorm",
        norm_eps=config.norm_eps,
        tie_embeddings=config.tie_word_embeddings,
        logit_softcap=config.output_logit_soft_cap,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def _projections(layer: nn.Module, heads: int) -> dict[str, torch.Tensor]:
    """The layer's q, k, v, output-gate, input-gate and forget-gate weights and the gates' biases, from its
    separate (``single``) or stacked (``fused``) projections."""
    if hasattr(layer, "qkv_opreact"):
        widths = (layer.qk_dim, layer.qk_dim, layer.v_dim, layer.v_dim)
        q, k, v, o = layer.qkv_opreact.weight.split(widths)
        i, f = layer.ifgate_preact.weight.split(heads)
        i_bias, f_bias = layer.ifgate_preact.bias.split(heads)
    else:
        q, k, v, o = (getattr(layer, name).weight for name in ("q", "k", "v", "ogate_preact"))
        i, f = layer.igate_preact.weight, layer.fgate_preact.weight
        i_bias, f_bias = layer.igate_preact.bias, layer.fgate_preact.bias
    return dict(qkv=torch.cat([q, k, v]), o=o, i=i, f=f, i_bias=i_bias, f_bias=f_bias)


def _mlstm_weights(prefix: str, layer: nn.Module, mixer: nn.Module) -> None:
    parts = _projections(layer, mixer.heads)
    copy_weight(mixer.qkv.weight, parts["qkv"], f"{prefix}.q/k/v.weight")
    copy_weight(mixer.output_gate.weight, parts["o"], f"{prefix}.ogate_preact.weight")
    mixer.output_gate.bias.zero_()  # xLSTM 7B's output gate has none
    copy_weight(mixer.input_gate.weight, parts["i"], f"{prefix}.igate_preact.weight")
    copy_weight(mixer.input_gate.bias, parts["i_bias"], f"{prefix}.igate_preact.bias")
    copy_weight(mixer.forget_gate.weight, parts["f"], f"{prefix}.fgate_preact.weight")
    copy_weight(mixer.forget_gate.bias, parts["f_bias"], f"{prefix}.fgate_preact.bias")
    copy_pairs(prefix, layer, mixer, (("norm_weight", "multihead_norm.weight"), ("out.weight", "out_proj.weight")))


def _mlp_weights(prefix: str, ffn: nn.Module, mlp: nn.Module) -> None:
    """xLSTM's ``proj_down(SiLU(proj_up_gate x) ⊙ proj_up x)`` (or the stacked ``proj_up_gate_z``) into seqdyn's
    SwiGLU (``fc1`` = [gate | up])."""
    stacked = (
        ffn.proj_up_gate_z.weight
        if hasattr(ffn, "proj_up_gate_z")
        else torch.cat([ffn.proj_up_gate.weight, ffn.proj_up.weight])
    )
    copy_weight(mlp.fc1.weight, stacked, f"{prefix}.proj_up_gate/proj_up.weight")
    copy_weight(mlp.fc2.weight, ffn.proj_down.weight, f"{prefix}.proj_down.weight")


def _xlstm_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    backbone, model = source.backbone, target.seqdyn
    copy_weight(model.embedding.weight, backbone.embeddings.weight, "backbone.embeddings.weight")
    for index, (block, ours) in enumerate(zip(backbone.blocks, model.blocks)):
        prefix = f"backbone.blocks.{index}"
        copy_weight(ours.norm1.weight, block.norm_mlstm.weight, f"{prefix}.norm_mlstm.weight")
        copy_weight(ours.norm2.weight, block.norm_ffn.weight, f"{prefix}.norm_ffn.weight")
        _mlstm_weights(f"{prefix}.mlstm_layer", block.mlstm_layer, ours.mixer)
        _mlp_weights(f"{prefix}.ffn", block.ffn, ours.mlp)
    copy_weight(model.norm.weight, backbone.out_norm.weight, "backbone.out_norm.weight")
    if not target.config.tie_word_embeddings:
        copy_weight(model.head.weight, source.lm_head.weight, "lm_head.weight")


register(
    "xlstm",
    _xlstm_config,
    _xlstm_weights,
    TinyModel(
        "xLSTMForCausalLM",
        "xLSTMConfig",
        dict(
            vocab_size=48,
            hidden_size=64,
            num_hidden_layers=2,
            num_heads=4,
            qk_dim_factor=1.0,
            v_dim_factor=2.0,
            chunk_size=16,
            eps=1e-2,
        ),
    ),
)
