"""RWKV-4 (``RwkvForCausalLM``, Peng et al. 2023) → each block as two pre-norm LayerNorm layers without MLP: the
``rwkv4`` time mixing, then the ``rwkv_channel_mix`` channel mixing; the first block's ``pre_ln`` is the model's
embedding norm, ``ln_out`` its final norm, the head untied as the checkpoint's.

In eval mode transformers halves the residual stream after every ``rescale_every`` blocks, with the output weights
of the blocks after it divided to match (``RwkvModel._rescale_layers``; it changes them in place).  The converted
model is the model as trained: the weights are read as they are in training mode (multiplied back where the
checkpoint's are divided), the stream is not halved, and its logits are transformers' in training mode.  In eval
mode transformers' own logits move off those through each LayerNorm's ε (a norm of ``x / 2^s`` with ε is a norm of
``x`` with ε·4^s, a relative change of about ε (4^s − 1) / (2 Var(x)) in its output): not at all in a model of fewer
than ``rescale_every`` blocks (every ``seqdyn convert --check``), by 2.8e-4 of the largest logit in a tiny random
model of 3 blocks halved after each (``tests/hf/test_convert.py``), less where the stream's variance is large.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.common import copy_pairs, copy_weight
from seqdyn.hf.convert.registry import TinyModel, register
from seqdyn.hf.modeling import SeqdynForCausalLM

#: the time mixing's parameters, as seqdyn names them and as transformers does
TIME_MIXING = (
    ("key.weight", "key.weight"),
    ("value.weight", "value.weight"),
    ("receptance.weight", "receptance.weight"),
    ("time_decay", "time_decay"),
    ("time_first", "time_first"),
    ("time_mix_key", "time_mix_key"),
    ("time_mix_value", "time_mix_value"),
    ("time_mix_receptance", "time_mix_receptance"),
)
CHANNEL_MIXING = (
    ("key.weight", "key.weight"),
    ("receptance.weight", "receptance.weight"),
    ("time_mix_key", "time_mix_key"),
    ("time_mix_receptance", "time_mix_receptance"),
)


def _rwkv_config(config: Any) -> SeqdynConfig:
    """``RwkvConfig`` → ``2 · num_hidden_layers`` layers alternating ``rwkv4`` and ``rwkv_channel_mix``."""
    attention = {"attention_width": config.attention_hidden_size or config.hidden_size}
    channel = {"hidden_width": config.intermediate_size or 4 * config.hidden_size}
    layers = config.num_hidden_layers
    return SeqdynConfig(
        vocab_size=config.vocab_size,
        d_model=config.hidden_size,
        layers=2 * layers,
        mixer=["rwkv4", "rwkv_channel_mix"] * layers,
        mixer_options=[attention, channel] * layers,
        mlp="none",
        norm="layernorm",
        norm_eps=config.layer_norm_epsilon,
        embedding_norm=True,
        tie_embeddings=config.tie_word_embeddings,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def _copy_layernorm(ours: nn.LayerNorm, theirs: nn.LayerNorm, name: str) -> None:
    copy_weight(ours.weight, theirs.weight, f"{name}.weight")
    copy_weight(ours.bias, theirs.bias, f"{name}.bias")


def training_scale(source: nn.Module, block: int) -> float:
    """The factor that undoes eval mode's division of block ``block``'s output weights: ``2^⌊block / R⌋`` while
    the checkpoint's layers are rescaled (``R = rescale_every > 0``), else 1."""
    every = source.config.rescale_every
    return float(2 ** (block // every)) if every > 0 and source.rwkv.layers_are_rescaled else 1.0


def _rwkv_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    rwkv, model = source.rwkv, target.seqdyn
    copy_weight(model.embedding.weight, rwkv.embeddings.weight, "rwkv.embeddings.weight")
    _copy_layernorm(model.embedding_norm, rwkv.blocks[0].pre_ln, "rwkv.blocks.0.pre_ln")
    for index, block in enumerate(rwkv.blocks):
        prefix, scale = f"rwkv.blocks.{index}", training_scale(source, index)
        time, channel = model.blocks[2 * index], model.blocks[2 * index + 1]
        _copy_layernorm(time.norm1, block.ln1, f"{prefix}.ln1")
        _copy_layernorm(channel.norm1, block.ln2, f"{prefix}.ln2")
        copy_pairs(f"{prefix}.attention", block.attention, time.mixer, TIME_MIXING)
        copy_pairs(f"{prefix}.feed_forward", block.feed_forward, channel.mixer, CHANNEL_MIXING)
        output, value = block.attention.output.weight, block.feed_forward.value.weight
        copy_weight(time.mixer.output.weight, output * scale, f"{prefix}.attention.output.weight")
        copy_weight(channel.mixer.value.weight, value * scale, f"{prefix}.feed_forward.value.weight")
    _copy_layernorm(model.norm, rwkv.ln_out, "rwkv.ln_out")
    if not target.config.tie_word_embeddings:
        copy_weight(model.head.weight, source.head.weight, "head.weight")


register(
    "rwkv",
    _rwkv_config,
    _rwkv_weights,
    TinyModel(
        "RwkvForCausalLM",
        "RwkvConfig",
        dict(
            vocab_size=48,
            hidden_size=16,
            num_hidden_layers=2,
            intermediate_size=24,
            context_length=64,
        ),
    ),
)
