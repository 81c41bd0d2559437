"""transformers models opened as seqdyn models: the same weights, layer by layer, in a :class:`SeqdynForCausalLM`.

:func:`from_transformers` takes a loaded transformers causal language model of a supported family and returns the
seqdyn model that computes the same logits — whose every layer can then be inspected as coefficient dynamics
(``seqdyn.analysis``) and run on any of seqdyn's backends.  Each family has one converter here: what config it
reads, which seqdyn mixer and options it maps to, and how each weight is renamed or reshaped.  An option of a
family's config that seqdyn cannot represent exactly is refused in one line that names it.

Supported: ``mamba`` (``MambaForCausalLM``: Mamba-1, Gu & Dao 2023) and ``falcon_mamba`` (``FalconMambaForCausalLM``:
Mamba-1 with weightless RMS norms of B, C and Δ, as transformers' CPU path computes them) → the ``s6`` mixer, and
``mamba2`` (``Mamba2ForCausalLM``: Mamba-2, Dao & Gu 2024) → the ``mamba2`` mixer with its groups of B and C, each in
pre-norm RMSNorm blocks without MLP, as ``MambaBlock`` / ``Mamba2Block``; ``qwen3_5_text`` (``Qwen3_5ForCausalLM``,
also the text model of a ``qwen3_5`` vision–language checkpoint) → per layer ``gated_deltanet`` (grouped value heads)
or ``softmax_attention`` (grouped key–value heads, q/k norms, partial rotary, sigmoid output gate); ``qwen3_next``
(``Qwen3NextForCausalLM``) and ``qwen3_5_moe_text`` (``Qwen3_5MoeForCausalLM``, also from a ``qwen3_5_moe``
checkpoint) → the same layers with a mixture of experts (``mlp="moe"``) in every block; ``bamba``
(``BambaForCausalLM``) and ``granitemoehybrid`` (``GraniteMoeHybridForCausalLM``, Granite 4.0-H, its μP scalars
folded into the weights) → per layer ``mamba2`` or ``softmax_attention``, each in pre-norm RMSNorm blocks with a SwiGLU
MLP (Granite: or experts beside a shared MLP); ``nemotron_h`` (``NemotronHForCausalLM``) → a block per Mamba-2 or
attention layer, with the squared-ReLU MLP layer after it as its MLP; ``olmo_hybrid`` (``OlmoHybridForCausalLM``) →
pre-norm ``gated_deltanet`` blocks and OLMo 2's output-norm attention blocks; ``recurrent_gemma``
(``RecurrentGemmaForCausalLM``, Griffin) → per layer ``rglru`` (Griffin's recurrent block, reset at position 0) or
sliding-window ``local_attention``, each with a GeGLU MLP, logits soft-capped; ``falcon_h1`` (``FalconH1ForCausalLM``)
→ a ``parallel`` mixer per layer (mamba2 beside rotary attention, outputs added), its μP multipliers folded into the
weights.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.modeling import SeqdynForCausalLM

__all__ = ["SUPPORTED", "TINY_CONFIGS", "UnsupportedModel", "check_conversion", "convert_checkpoint",
           "from_transformers", "load_model", "tiny_model", "tokenize"]

#: the files a saved transformers tokenizer has one of
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
#: the files a transformers checkpoint keeps its weights in
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")


#: vision–language checkpoints whose text model ``AutoModelForCausalLM`` loads, as the family of that text model
TEXT_MODEL_OF = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}


class UnsupportedModel(ValueError):
    """A transformers model (or an option of its config) that no converter represents exactly."""


def from_transformers(model: nn.Module) -> SeqdynForCausalLM:
    """The :class:`SeqdynForCausalLM` with ``model``'s weights (a transformers ``…ForCausalLM`` of a family in
    :data:`SUPPORTED`), in ``model``'s dtype, in eval mode; its logits equal ``model``'s to round-off.  Raises
    :class:`UnsupportedModel` naming the family or the config option it cannot represent."""
    config = getattr(model, "config", None)
    family = getattr(config, "model_type", None)
    if family not in SUPPORTED:
        raise UnsupportedModel(f"model: family {family!r} ({type(model).__name__}) has no seqdyn converter"
                               f"{_missing(family)}; supported: {', '.join(sorted(SUPPORTED))}")
    make_config, copy_weights = SUPPORTED[family]
    converted = SeqdynForCausalLM(make_config(config))
    dtype = next(model.parameters()).dtype
    converted.to(dtype)
    with torch.no_grad():
        copy_weights(model, converted)
    return converted.eval()


def convert_checkpoint(model_dir: str | Path, out_dir: str | Path) -> Path:
    """``seqdyn convert``: the transformers checkpoint in ``model_dir`` (``config.json`` and its weights) converted
    by :func:`from_transformers` and saved as a seqdyn checkpoint in ``out_dir`` (``save_pretrained``; loads with
    ``AutoModelForCausalLM.from_pretrained`` once ``seqdyn.hf`` is imported).  The family is checked from the config
    before any weight is read; ``out_dir`` is written whole or not at all (a folder beside it, renamed at the end)."""
    source, target = Path(model_dir), Path(out_dir)
    if target.exists() and any(target.iterdir()):
        raise UnsupportedModel(f"OUT_DIR: {target} exists and is not empty; name a new folder")
    model = _load_transformers(source, _checkpoint_family(source))
    converted = from_transformers(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        converted.save_pretrained(partial)
        if target.exists():
            target.rmdir()  # empty: checked above
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _checkpoint_family(source: Path) -> str | None:
    """The ``model_type`` of the checkpoint folder ``source``, after checking that it has a config and weights."""
    from transformers import AutoConfig

    if not (source / "config.json").is_file():
        raise UnsupportedModel(f"MODEL_DIR: {source / 'config.json'} not found (a transformers checkpoint folder has "
                               "config.json and its weights)")
    if not any(next(source.glob(pattern), None) for pattern in WEIGHT_FILES):
        raise UnsupportedModel(f"MODEL_DIR: {source} has no weights ({' or '.join(WEIGHT_FILES)})")
    family = getattr(AutoConfig.from_pretrained(source), "model_type", None)
    return TEXT_MODEL_OF.get(family, family)


def load_model(model_dir: str | Path) -> SeqdynForCausalLM:
    """The seqdyn model of a checkpoint folder, in eval mode: a seqdyn checkpoint as it is, a transformers one of
    a family in :data:`SUPPORTED` converted by :func:`from_transformers` (what ``seqdyn inspect MODEL_DIR``
    opens)."""
    source = Path(model_dir)
    family = _checkpoint_family(source)
    if family == SeqdynConfig.model_type:
        with _quiet_transformers():
            return SeqdynForCausalLM.from_pretrained(source).eval()
    return from_transformers(_load_transformers(source, family))


def tokenize(model_dir: str | Path, text: str) -> torch.Tensor:
    """``text`` as the token ids ``[1, T]`` of the tokenizer saved in ``model_dir``."""
    from transformers import AutoTokenizer

    if not any((Path(model_dir) / name).is_file() for name in TOKENIZER_FILES):
        raise UnsupportedModel(f"--text: {model_dir} has no tokenizer to read the text with ({' or '.join(TOKENIZER_FILES)}); "
                               "give token ids with --input instead")
    try:
        with _quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError, TypeError):
        raise UnsupportedModel(f"--text: {model_dir} has no tokenizer to read the text with; give token ids with "
                               "--input instead") from None
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    if ids.numel() == 0:
        raise UnsupportedModel("--text: the text has no tokens")
    return ids


def _load_transformers(source: Path, family: str | None) -> nn.Module:
    """The transformers model saved in ``source`` (of ``family``, its config's ``model_type``: a supported one),
    every weight loaded with its own shape."""
    from transformers import AutoModelForCausalLM

    if family not in SUPPORTED:
        raise UnsupportedModel(f"MODEL_DIR: family {family!r} ({source / 'config.json'}) has no seqdyn converter"
                               f"{_missing(family)}; supported: {', '.join(sorted(SUPPORTED))}")
    try:  # mismatched weights come back in the loading info, which names them (transformers' own error does not)
        with _quiet_transformers():
            model, info = AutoModelForCausalLM.from_pretrained(source, output_loading_info=True,
                                                               ignore_mismatched_sizes=True)
    except (RuntimeError, ValueError, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UnsupportedModel(f"MODEL_DIR: the weights in {source} do not load into its config ({first})") from None
    wrong = {kind: sorted(str(key[0] if isinstance(key, tuple) else key) for key in info.get(kind, ()))
             for kind in ("mismatched_keys", "missing_keys", "unexpected_keys")}
    wrong = {kind.removesuffix("_keys"): keys for kind, keys in wrong.items() if keys}
    if wrong:
        said = "; ".join(f"{kind}: {', '.join(keys[:3])}{' …' if len(keys) > 3 else ''}" for kind, keys in wrong.items())
        raise UnsupportedModel(f"MODEL_DIR: the weights in {source} do not load into its config ({said})")
    return model


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers without its progress bars and warnings (a loading report table): the caller says what went
    wrong in one line."""
    from transformers.utils import logging as hf_logging

    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


#: the families of the roadmap (issue 34) not converted yet, with what seqdyn lacks for each
NOT_YET: dict[str, str] = {
    "kimi_linear": "KDA: a channel-wise decay applied before the delta rule's Householder factor, where seqdyn's "
                   "operator applies Λ = D(I − βkkᵀ); latent attention with its own key and value widths; a grouped "
                   "sigmoid router",
    "xlstm": "the mLSTM normalizer max(|q·n|, exp(−m)) + ε of the xLSTM large models, whose ε depends on the "
             "kernel's chunking of the stabilizer m; per-head LayerNorm weights; soft-capped gates",
    "zamba2": "a shared attention block on [hidden state, embeddings] whose output enters only the next Mamba-2 "
              "layer's input, not the residual stream, with LoRA adapters per use",
}


def _missing(family: str | None) -> str:
    """`` (it needs …)`` for a family of the roadmap, else nothing."""
    return f" yet (it needs {NOT_YET[family]})" if family in NOT_YET else ""


def _refuse(family: str, option: str, value: Any, why: str) -> UnsupportedModel:
    return UnsupportedModel(f"{family}: config option {option}={value!r} cannot be converted exactly ({why})")


def _copy(target: torch.Tensor, source: torch.Tensor, name: str) -> None:
    """``target ← source`` (reshaped to the target's shape where only the layout differs)."""
    if target.numel() != source.numel():
        raise UnsupportedModel(f"weights: {name} has shape {tuple(source.shape)}, the converted model expects "
                               f"{tuple(target.shape)}")
    target.copy_(source.reshape(target.shape))


# --- Mamba (MambaForCausalLM) ------------------------------------------------------------------------------------

def _refuse_any(config: Any, refused: list[tuple[str, Any, str]]) -> None:
    """Refuse the first ``(option, value, why)`` whose option the checkpoint sets to that value."""
    for option, value, why in refused:
        if getattr(config, option) == value:
            raise _refuse(config.model_type, option, value, why)


def _check_mamba_options(family: str, config: Any) -> None:
    """The options of the Mamba families that seqdyn's blocks fix: no projection bias, a convolution bias, SiLU."""
    if config.use_bias:
        raise _refuse(family, "use_bias", True, "seqdyn's projections have no bias")
    if not config.use_conv_bias:
        raise _refuse(family, "use_conv_bias", False, "seqdyn's short convolution has a bias")
    if config.hidden_act != "silu":
        raise _refuse(family, "hidden_act", config.hidden_act, "seqdyn's block uses SiLU")


def _rmsnorm_stack(config: Any, mixer: str, options: dict[str, Any]) -> SeqdynConfig:
    """The Mamba families' model around a mixer: embedding, pre-norm RMSNorm blocks without MLP, final RMSNorm,
    lm head (tied or not), with the checkpoint's ε and special tokens."""
    return SeqdynConfig(vocab_size=config.vocab_size, d_model=config.hidden_size, layers=config.num_hidden_layers,
                        mixer=mixer, mixer_options=options, mlp="none", norm="rmsnorm",
                        norm_eps=config.layer_norm_epsilon, tie_embeddings=config.tie_word_embeddings,
                        pad_token_id=config.pad_token_id, bos_token_id=config.bos_token_id,
                        eos_token_id=config.eos_token_id)


def _copy_linears(prefix: str, theirs: nn.Module, ours: nn.Module, names: tuple[str, ...]) -> None:
    for name in names:
        for kind in ("weight", "bias"):
            source = getattr(getattr(theirs, name), kind)
            if source is not None:
                _copy(getattr(getattr(ours, name), kind), source, f"{prefix}.{name}.{kind}")


def _copy_conv(prefix: str, theirs: nn.Conv1d, ours: nn.Module) -> None:
    """A depthwise ``nn.Conv1d`` (weight ``[C, 1, W]``, causal by its padding) into a ShortConv (``[C, W]``)."""
    _copy(ours.weight, theirs.weight, f"{prefix}.conv1d.weight")
    _copy(ours.bias, theirs.bias, f"{prefix}.conv1d.bias")


def _copy_rmsnorm_stack(source: nn.Module, target: SeqdynForCausalLM,
                        mixer_weights: Callable[[str, nn.Module, nn.Module], None]) -> None:
    """The weights around the mixers (``backbone.embeddings``, each layer's ``norm``, ``norm_f``, ``lm_head``),
    and each layer's mixer by ``mixer_weights(prefix, theirs, ours)``."""
    backbone, model = source.backbone, target.seqdyn
    _copy(model.embedding.weight, backbone.embeddings.weight, "backbone.embeddings.weight")
    for index, (layer, block) in enumerate(zip(backbone.layers, model.blocks)):
        _copy(block.norm1.weight, layer.norm.weight, f"backbone.layers.{index}.norm.weight")
        mixer_weights(f"backbone.layers.{index}.mixer", layer.mixer, block.mixer)
    _copy(model.norm.weight, backbone.norm_f.weight, "backbone.norm_f.weight")
    if not target.config.tie_word_embeddings:
        _copy(model.head.weight, source.lm_head.weight, "lm_head.weight")


def _mamba_config(config: Any) -> SeqdynConfig:
    """``MambaConfig`` (or ``FalconMambaConfig``: with the weightless RMS norms of B, C and Δ) → the s6 mixer
    (state N, expand, Δ rank, conv width) in RMSNorm pre-norm blocks, no MLP."""
    family = config.model_type
    _check_mamba_options(family, config)
    if config.intermediate_size != config.expand * config.hidden_size:
        raise _refuse(family, "intermediate_size", config.intermediate_size, "seqdyn's s6 width is expand·d_model")
    options = {"state_dim": config.state_size, "expand": config.expand, "dt_rank": int(config.time_step_rank),
               "conv_size": config.conv_kernel}
    if family == "falcon_mamba":
        options["bcdt_rms_eps"] = config.mixer_rms_eps
    return _rmsnorm_stack(config, "s6", options)


def _mamba_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    def mixer_weights(prefix: str, mixer: nn.Module, ours: nn.Module) -> None:
        _copy_linears(prefix, mixer, ours, ("in_proj", "x_proj", "dt_proj", "out_proj"))
        _copy_conv(prefix, mixer.conv1d, ours.convs["x"])
        _copy(ours.a_log, mixer.A_log, f"{prefix}.A_log")
        _copy(ours.skip, mixer.D, f"{prefix}.D")

    _copy_rmsnorm_stack(source, target, mixer_weights)


# --- Mamba-2 (Mamba2ForCausalLM) -----------------------------------------------------------------------------------

def _mamba2_config(config: Any) -> SeqdynConfig:
    """``Mamba2Config`` → the mamba2 mixer (state N, head size P, groups of B and C, conv width) in RMSNorm pre-norm
    blocks, no MLP."""
    _check_mamba_options("mamba2", config)
    if config.num_heads * config.head_dim != config.expand * config.hidden_size:
        raise _refuse("mamba2", "num_heads", config.num_heads, "seqdyn's mamba2 width num_heads·head_dim is "
                      "expand·hidden_size")
    options = {"state_dim": config.state_size, "expand": config.expand, "head_dim": config.head_dim,
               "groups": config.n_groups, "conv_size": config.conv_kernel, "norm_eps": config.layer_norm_epsilon,
               **_dt_limit(config.time_step_limit)}
    return _rmsnorm_stack(config, "mamba2", options)


def _dt_limit(limit: tuple[float, float]) -> dict[str, Any]:
    """mamba2's clamp of Δ from a checkpoint's ``time_step_limit`` (which transformers, as ``mamba_ssm``, applies
    over a prompt but not when it decodes a token; seqdyn applies it in both)."""
    low, high = limit
    return {**({"dt_floor": float(low)} if low > 0 else {}),
            **({"dt_ceiling": float(high)} if high != float("inf") else {})}


def _mamba2_mixer_weights(prefix: str, mixer: nn.Module, ours: nn.Module) -> None:
    """A ``Mamba2Mixer`` (or Bamba's, Granite's, Nemotron-H's, Falcon-H1's: the same weights) into seqdyn's mamba2."""
    _copy_linears(prefix, mixer, ours, ("in_proj", "out_proj"))
    _copy_conv(prefix, mixer.conv1d, ours.convs["xbc"])
    _copy(ours.decay.dt_bias, mixer.dt_bias, f"{prefix}.dt_bias")
    _copy(ours.decay.a_log, mixer.A_log, f"{prefix}.A_log")
    _copy(ours.skip, mixer.D, f"{prefix}.D")
    if ours.norm is not None:  # (Falcon-H1's layers may have none)
        _copy(ours.norm.weight, mixer.norm.weight, f"{prefix}.norm.weight")


def _mamba2_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    _copy_rmsnorm_stack(source, target, _mamba2_mixer_weights)


# --- Qwen3.5 (Qwen3_5ForCausalLM): Gated DeltaNet and gated softmax attention layers ----------------------------

#: the ε of the norms inside Qwen3.5's layers that seqdyn's mixers fix: the gated head norm of Gated DeltaNet and
#: the q/k norms of attention
MIXER_NORM_EPS = 1e-6


def _check_default_rope(config: Any) -> None:
    """The checkpoint's rotary embeddings must be RoPE's default frequencies (no scaling), the ones seqdyn rotates by."""
    rope_type = (config.rope_parameters or {}).get("rope_type", "default")
    if rope_type != "default":
        raise _refuse(config.model_type, "rope_parameters.rope_type", rope_type, "seqdyn rotates by the default "
                      "RoPE frequencies")


def _rotary_options(config: Any) -> dict[str, Any]:
    """softmax_attention's rotary options from the checkpoint's ``rope_parameters``: rotary embeddings on the
    ``partial_rotary_factor`` of each head, at base ``rope_theta``."""
    rope = config.rope_parameters or {}
    return {"rotary": True, "rotary_fraction": float(rope.get("partial_rotary_factor", 1.0)),
            "rotary_base": float(rope.get("rope_theta", 10_000.0))}


def _check_delta_hybrid_options(config: Any) -> None:
    """What the Gated DeltaNet hybrids (Qwen3.5, Qwen3-Next, OLMo-hybrid) may not set: another activation, attention
    biases, another ε of the norms inside the layers, other layer types."""
    family = config.model_type
    if config.hidden_act != "silu":
        raise _refuse(family, "hidden_act", config.hidden_act, "seqdyn's SwiGLU and short convolution use SiLU")
    if config.attention_bias:
        raise _refuse(family, "attention_bias", True, "seqdyn converts attention without projection biases here")
    if config.rms_norm_eps != MIXER_NORM_EPS:
        raise _refuse(family, "rms_norm_eps", config.rms_norm_eps, "the norms inside seqdyn's gated_deltanet and "
                      f"softmax_attention have ε = {MIXER_NORM_EPS}")
    unknown = set(config.layer_types) - {"linear_attention", "full_attention"}
    if unknown:
        raise _refuse(family, "layer_types", sorted(unknown), "seqdyn converts linear_attention and full_attention")


def _check_qwen3_5_options(config: Any) -> None:
    _check_delta_hybrid_options(config)
    _check_default_rope(config)


def _qwen3_5_mixers(config: Any) -> list[tuple[str, dict[str, Any]]]:
    """Per layer: Gated DeltaNet (grouped value heads, per-head key width, flash-linear-attention's L2 norm, no
    convolution bias) or gated softmax attention (grouped key-value heads, q/k norms, partial rotary, sigmoid
    output gate)."""
    attention = {"heads": config.num_attention_heads, "kv_heads": config.num_key_value_heads,
                 "head_dim": config.head_dim, "qk_norm": True, "output_gate": True, **_rotary_options(config)}
    return [("gated_deltanet", _delta_options(config)) if kind == "linear_attention"
            else ("softmax_attention", attention) for kind in config.layer_types]


def _delta_options(config: Any) -> dict[str, Any]:
    """gated_deltanet's options of a ``linear_*`` config: grouped value heads, the per-head key width,
    flash-linear-attention's L2 norm, no convolution bias."""
    value_width = config.linear_num_value_heads * config.linear_value_head_dim
    return {"heads": config.linear_num_value_heads, "key_heads": config.linear_num_key_heads,
            "key_dim": config.linear_key_head_dim, "expand_v": value_width / config.hidden_size,
            "conv_size": config.linear_conv_kernel_dim, "conv_bias": False, "qk_norm_eps": 1e-6}


def _qwen3_5_config(config: Any) -> SeqdynConfig:
    """``Qwen3_5TextConfig`` → pre-norm RMSNorm blocks with a SwiGLU MLP, each with its layer's mixer."""
    _check_qwen3_5_options(config)
    return _hybrid_config(config, _qwen3_5_mixers(config))


def _hybrid_config(config: Any, mixers: list[tuple[str, dict[str, Any]]], tie: bool | None = None,
                   **fields: Any) -> SeqdynConfig:
    """A hybrid decoder: pre-norm RMSNorm blocks, each with its layer's mixer (name, options) and a SwiGLU MLP of the
    checkpoint's width, final RMSNorm, lm head (tied as the checkpoint's, or ``tie``), with the checkpoint's ε and
    special tokens; ``fields`` set other model fields (another MLP, norm positions)."""
    if "mlp" not in fields:
        fields.update(mlp="swiglu", mlp_ratio=config.intermediate_size / config.hidden_size)
    return SeqdynConfig(vocab_size=config.vocab_size, d_model=config.hidden_size, layers=config.num_hidden_layers,
                        mixer=[name for name, _ in mixers], mixer_options=[options for _, options in mixers],
                        norm="rmsnorm", norm_eps=config.rms_norm_eps,
                        tie_embeddings=config.tie_word_embeddings if tie is None else tie,
                        pad_token_id=config.pad_token_id, bos_token_id=config.bos_token_id,
                        eos_token_id=config.eos_token_id, **fields)


def _copy_centered(target: torch.Tensor, source: torch.Tensor, name: str) -> None:
    """A zero-centered RMSNorm weight (Qwen3.5's ``x · (1 + w)``) into seqdyn's ``x · w``."""
    _copy(target, 1.0 + source.float(), name)


def _copy_pairs(prefix: str, theirs: nn.Module, ours: nn.Module, pairs: tuple[tuple[str, str], ...]) -> None:
    """Each ``(our parameter, their parameter)`` pair of dotted names, copied."""
    for our_name, their_name in pairs:
        _copy(attrgetter(our_name)(ours), attrgetter(their_name)(theirs), f"{prefix}.{their_name}")


#: what every transformers Gated DeltaNet names alike: the convolution, Δ's bias and A
_DELTA_DECAY = (("convs.qkv.weight", "conv1d.weight"), ("decay.dt_bias", "dt_bias"), ("decay.a_log", "A_log"))
#: Qwen's Gated DeltaNet (Qwen3-Next: its projections de-interleaved first): the gated head norm and the output
_QWEN_DELTA_REST = (*_DELTA_DECAY, ("output.norm.weight", "norm.weight"), ("output.out.weight", "out_proj.weight"))


def _qwen3_5_delta_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    _copy_pairs(prefix, theirs, ours, (("qkv.weight", "in_proj_qkv.weight"), ("output.gate.weight", "in_proj_z.weight"),
                                       ("beta.weight", "in_proj_b.weight"), ("decay.proj.weight", "in_proj_a.weight"),
                                       *_QWEN_DELTA_REST))


def _qwen3_5_attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """``q_proj`` holds each head's query and gate rows one after the other: ``[H, 2·K, D]``."""
    query, gate = theirs.q_proj.weight.unflatten(0, (ours.heads, 2 * ours.head_dim)).chunk(2, dim=1)
    stacked = torch.cat([query.flatten(0, 1), theirs.k_proj.weight, theirs.v_proj.weight])
    _copy(ours.qkv.weight, stacked, f"{prefix}.q_proj/k_proj/v_proj.weight")
    _copy(ours.gate.weight, gate.flatten(0, 1), f"{prefix}.q_proj.weight (gate rows)")
    _copy(ours.out.weight, theirs.o_proj.weight, f"{prefix}.o_proj.weight")
    _copy_centered(ours.q_norm.weight, theirs.q_norm.weight, f"{prefix}.q_norm.weight")
    _copy_centered(ours.k_norm.weight, theirs.k_norm.weight, f"{prefix}.k_norm.weight")


def _copy_swiglu(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """A SwiGLU of ``gate_proj``, ``up_proj`` and ``down_proj`` into seqdyn's MLP (``fc1`` = [gate | up])."""
    _copy(ours.fc1.weight, torch.cat([theirs.gate_proj.weight, theirs.up_proj.weight]),
          f"{prefix}.gate_proj/up_proj.weight")
    _copy(ours.fc2.weight, theirs.down_proj.weight, f"{prefix}.down_proj.weight")


@dataclass(frozen=True)
class _DecoderLayout:
    """Where a hybrid decoder keeps its weights: per layer the norm of the mixer's branch and the one of the MLP's (or
    these per layer type), the MLP, and the mixer of each layer type (its attribute and the function that copies
    it); the final norm; whether its RMSNorm weights are zero-centered (``x · (1 + w)``)."""

    norms: tuple[str, str] | dict[str, tuple[str, str]]
    mlp: str
    mixers: dict[str, tuple[str, Callable[[str, nn.Module, nn.Module], None]]]
    final_norm: str
    centered: bool = False
    mlp_weights: Callable[[str, nn.Module, nn.Module], None] = _copy_swiglu


def _copy_decoder_stack(source: nn.Module, target: SeqdynForCausalLM, layout: _DecoderLayout) -> None:
    """``model.embed_tokens``, each of ``model.layers`` (its two norms, its mixer by its ``block_type``, its MLP),
    the final norm and ``lm_head``."""
    backbone, model = source.model, target.seqdyn
    norm_copy = _copy_centered if layout.centered else _copy
    _copy(model.embedding.weight, backbone.embed_tokens.weight, "model.embed_tokens.weight")
    for index, (layer, block) in enumerate(zip(backbone.layers, model.blocks)):
        prefix = f"model.layers.{index}"
        kind = getattr(layer, "block_type", None) or source.config.layer_types[index]
        norms = layout.norms[kind] if isinstance(layout.norms, dict) else layout.norms
        for ours, theirs in zip((block.norm1, block.norm2), norms):
            norm_copy(ours.weight, getattr(layer, theirs).weight, f"{prefix}.{theirs}.weight")
        attribute, mixer_weights = layout.mixers[kind]  # "": the mixer's parts are the layer's
        mixer_weights(f"{prefix}.{attribute}" if attribute else prefix, getattr(layer, attribute) if attribute
                      else layer, block.mixer)
        mlp = getattr(layer, layout.mlp) if layout.mlp else layer  # "": the MLP's parts are the layer's
        layout.mlp_weights(f"{prefix}.{layout.mlp}" if layout.mlp else prefix, mlp, block.mlp)
    norm_copy(model.norm.weight, getattr(backbone, layout.final_norm).weight, f"model.{layout.final_norm}.weight")
    if not target.config.tie_word_embeddings:
        _copy(model.head.weight, source.lm_head.weight, "lm_head.weight")


def _qwen_weights(delta_weights: Callable[[str, nn.Module, nn.Module], None], experts: bool = False
                  ) -> Callable[[nn.Module, SeqdynForCausalLM], None]:
    """The weight copy of a Qwen hybrid (zero-centered norms, gated attention): its Gated DeltaNet layers by
    ``delta_weights``, its MLPs dense or (``experts``) a mixture of experts."""
    layout = _DecoderLayout(("input_layernorm", "post_attention_layernorm"), "mlp",
                            {"linear_attention": ("linear_attn", delta_weights),
                             "full_attention": ("self_attn", _qwen3_5_attention_weights)}, "norm", centered=True,
                            mlp_weights=_copy_experts if experts else _copy_swiglu)
    return lambda source, target: _copy_decoder_stack(source, target, layout)


# --- Qwen3-Next (Qwen3NextForCausalLM): Qwen3.5's layers with a mixture of experts -------------------------------

def _qwen3_next_config(config: Any) -> SeqdynConfig:
    """``Qwen3NextConfig`` → Qwen3.5's layers (:func:`_qwen3_5_mixers`) with the mixture-of-experts MLP (its shared
    expert gated by a sigmoid) in every layer."""
    family = config.model_type
    _check_qwen3_5_options(config)
    if config.num_experts == 0 or config.decoder_sparse_step != 1 or config.mlp_only_layers:
        raise _refuse(family, "decoder_sparse_step / mlp_only_layers / num_experts",
                      (config.decoder_sparse_step, config.mlp_only_layers, config.num_experts),
                      "seqdyn's model has one kind of MLP in every layer: experts in all of them")
    return _hybrid_config(config, _qwen3_5_mixers(config), **_experts(config, config.norm_topk_prob))


def _experts(config: Any, normalize: bool) -> dict[str, Any]:
    """The model fields of the Qwen mixture of experts: ``num_experts`` SwiGLU experts of ``moe_intermediate_size``,
    the top ``num_experts_per_tok`` per token, a shared expert of ``shared_expert_intermediate_size``."""
    moe = {"experts": config.num_experts, "top_k": config.num_experts_per_tok, "normalize": normalize,
           "shared_ratio": config.shared_expert_intermediate_size / config.hidden_size}
    return {"mlp": "moe", "mlp_ratio": config.moe_intermediate_size / config.hidden_size, "moe": moe}


def _qwen3_5_moe_config(config: Any) -> SeqdynConfig:
    """``Qwen3_5MoeTextConfig`` → Qwen3.5's layers with the mixture of experts in every layer (top-k renormalized)."""
    _check_qwen3_5_options(config)
    return _hybrid_config(config, _qwen3_5_mixers(config), **_experts(config, True))


def _qwen3_next_delta_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """``in_proj_qkvz`` holds per query/key head its query, key, and its value heads' values and gates one after the
    other ``[H_k, 2·K + 2·(H/H_k)·V, D]``; ``in_proj_ba`` per query/key head its value heads' β then decay rows."""
    key_heads, key_dim, group = ours.key_heads, ours.key_dim, ours.heads // ours.key_heads
    grouped_values = group * ours.value_width // ours.heads
    q, k, v, z = theirs.in_proj_qkvz.weight.unflatten(0, (key_heads, -1)).split(
        [key_dim, key_dim, grouped_values, grouped_values], dim=1)
    b, a = theirs.in_proj_ba.weight.unflatten(0, (key_heads, -1)).split([group, group], dim=1)
    _copy(ours.qkv.weight, torch.cat([t.flatten(0, 1) for t in (q, k, v)]), f"{prefix}.in_proj_qkvz.weight (q, k, v)")
    _copy(ours.output.gate.weight, z.flatten(0, 1), f"{prefix}.in_proj_qkvz.weight (z)")
    _copy(ours.beta.weight, b.flatten(0, 1), f"{prefix}.in_proj_ba.weight (b)")
    _copy(ours.decay.proj.weight, a.flatten(0, 1), f"{prefix}.in_proj_ba.weight (a)")
    _copy_pairs(prefix, theirs, ours, _QWEN_DELTA_REST)


def _copy_experts(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """Qwen3-Next's sparse MoE block: router ``gate``, ``experts`` (``gate_up_proj``, ``down_proj``), the shared
    expert and its gate."""
    _copy(ours.router.weight, theirs.gate.weight, f"{prefix}.gate.weight")
    _copy(ours.gate_up, theirs.experts.gate_up_proj, f"{prefix}.experts.gate_up_proj")
    _copy(ours.down, theirs.experts.down_proj, f"{prefix}.experts.down_proj")
    _copy_swiglu(f"{prefix}.shared_expert", theirs.shared_expert, ours.shared)
    _copy(ours.shared_gate.weight, theirs.shared_expert_gate.weight, f"{prefix}.shared_expert_gate.weight")


# --- Bamba (BambaForCausalLM): Mamba-2 and softmax attention layers -------------------------------------------------

def _check_mamba2_hybrid_options(config: Any, *extra: tuple[str, Any, str]) -> None:
    """What the Mamba-2 hybrids (Bamba, Granite 4.0, Falcon-H1) may not set: biases where seqdyn has none (or none where it has
    one), another activation."""
    _refuse_any(config, [("mamba_proj_bias", True, "seqdyn's mamba2 projections have no bias"),
                         ("mamba_conv_bias", False, "seqdyn's short convolution has a bias"),
                         ("attention_bias", True, "seqdyn converts attention without projection biases here"), *extra])
    if config.hidden_act != "silu":
        raise _refuse(config.model_type, "hidden_act", config.hidden_act, "seqdyn's SwiGLU and mamba2 use SiLU")


def _hybrid_mixers(config: Any, attention: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Per layer of ``layers_block_type``: mamba2 of the ``mamba_*`` fields (its gated RMSNorm with the checkpoint's
    ε) or softmax attention with grouped key–value heads and the options ``attention``."""
    mamba2 = {"state_dim": config.mamba_d_state, "expand": config.mamba_expand, "head_dim": config.mamba_d_head,
              "groups": config.mamba_n_groups, "conv_size": config.mamba_d_conv, "norm_eps": config.rms_norm_eps,
              **_dt_limit(config.time_step_limit)}
    attention = {**_attention_heads(config), **attention}
    return [("mamba2", mamba2) if kind == "linear_attention" else ("softmax_attention", attention)
            for kind in config.layers_block_type]


def _attention_heads(config: Any) -> dict[str, Any]:
    """softmax_attention's query heads, grouped key–value heads and head width of a checkpoint's attention."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return {"heads": config.num_attention_heads, "kv_heads": config.num_key_value_heads, "head_dim": head_dim}


def _rotary_or_none(config: Any, rope: bool) -> dict[str, Any]:
    """Rotary embeddings as the checkpoint's (checked to be RoPE's default frequencies), or no positions."""
    if not rope:
        return {"rotary": False}
    _check_default_rope(config)
    return _rotary_options(config)


def _bamba_config(config: Any) -> SeqdynConfig:
    """``BambaConfig`` → pre-norm RMSNorm blocks with a SwiGLU MLP, each with mamba2 (groups of B and C) or softmax
    attention (grouped key–value heads, rotary embeddings on half of each head)."""
    _check_mamba2_hybrid_options(config, ("mlp_bias", True, "seqdyn's SwiGLU has no biases"))
    _check_default_rope(config)
    return _hybrid_config(config, _hybrid_mixers(config, _rotary_options(config)))


def _plain_attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    stacked = torch.cat([theirs.q_proj.weight, theirs.k_proj.weight, theirs.v_proj.weight])
    _copy(ours.qkv.weight, stacked, f"{prefix}.q_proj/k_proj/v_proj.weight")
    _copy(ours.out.weight, theirs.o_proj.weight, f"{prefix}.o_proj.weight")


def _bamba_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    layout = _DecoderLayout(("input_layernorm", "pre_ff_layernorm"), "feed_forward",
                            {"linear_attention": ("mamba", _mamba2_mixer_weights),
                             "full_attention": ("self_attn", _plain_attention_weights)}, "final_layernorm")
    _copy_decoder_stack(source, target, layout)


# --- Granite 4.0 hybrid (GraniteMoeHybridForCausalLM): Mamba-2 and attention layers, μP multipliers -----------------

def _granite_config(config: Any) -> SeqdynConfig:
    """``GraniteMoeHybridConfig`` → Bamba's layers (attention with RoPE or none) with a SwiGLU MLP, or a mixture of
    experts beside an ungated shared SwiGLU; the μP multipliers are folded into the weights (:func:`_fold_granite`),
    so a tied head becomes its own when the embedding or the logits are scaled."""
    _check_mamba2_hybrid_options(config)
    position = config.position_embedding_type
    if position not in (None, "nope", "rope"):
        raise _refuse(config.model_type, "position_embedding_type", position, "seqdyn's attention has RoPE or no "
                      "positions")
    mixers = _hybrid_mixers(config, _rotary_or_none(config, position == "rope"))
    shared_ratio = config.shared_intermediate_size / config.hidden_size
    mlp: dict[str, Any] = {"mlp": "swiglu", "mlp_ratio": shared_ratio}
    if config.num_local_experts:
        moe = {"experts": config.num_local_experts, "top_k": config.num_experts_per_tok, "normalize": True,
               "shared_ratio": shared_ratio, "shared_gate": False}
        mlp = {"mlp": "moe", "mlp_ratio": config.intermediate_size / config.hidden_size, "moe": moe}
    scaled = (config.embedding_multiplier, config.logits_scaling) != (1, 1)
    return _hybrid_config(config, mixers, tie=config.tie_word_embeddings and not scaled, **mlp)


def _granite_mlp_weights(prefix: str, layer: nn.Module, ours: nn.Module) -> None:
    """The dense ``shared_mlp`` (``input_linear`` = [gate | up], ``output_linear``), or the ``block_sparse_moe``
    (router, experts) beside it as the shared expert."""
    shared = ours if layer.block_sparse_moe is None else ours.shared
    _copy(shared.fc1.weight, layer.shared_mlp.input_linear.weight, f"{prefix}.shared_mlp.input_linear.weight")
    _copy(shared.fc2.weight, layer.shared_mlp.output_linear.weight, f"{prefix}.shared_mlp.output_linear.weight")
    if layer.block_sparse_moe is not None:
        moe = layer.block_sparse_moe
        _copy(ours.router.weight, moe.router.weight, f"{prefix}.block_sparse_moe.router.weight")
        _copy(ours.gate_up, moe.experts.gate_up_proj, f"{prefix}.block_sparse_moe.experts.gate_up_proj")
        _copy(ours.down, moe.experts.down_proj, f"{prefix}.block_sparse_moe.experts.down_proj")


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
            mixer.qkv.weight[:mixer.widths[0]].mul_(config.attention_multiplier * mixer.head_dim ** 0.5)


def _granite_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    layout = _DecoderLayout(("input_layernorm", "post_attention_layernorm"), "",
                            {"linear_attention": ("mamba", _mamba2_mixer_weights),
                             "full_attention": ("self_attn", _plain_attention_weights)}, "norm",
                            mlp_weights=_granite_mlp_weights)
    _copy_decoder_stack(source, target, layout)
    _fold_granite(source.config, target)


# --- Nemotron-H (NemotronHForCausalLM): layers of Mamba-2, attention or a squared-ReLU MLP alone ------------------

_NEMOTRON_MIXERS = ("linear_attention", "full_attention")


def _nemotron_blocks(config: Any) -> list[tuple[int, int | None]]:
    """Nemotron-H's layers as seqdyn blocks: each Mamba-2 or attention layer, with the MLP layer right after it as
    the block's MLP (none where another mixer follows): ``(mixer layer, MLP layer or None)`` per block."""
    kinds, blocks, index = list(config.layers_block_type), [], 0
    while index < len(kinds):
        if kinds[index] not in _NEMOTRON_MIXERS:
            why = ("seqdyn's experts are SwiGLU with a softmax router" if kinds[index] == "moe" else
                   "a seqdyn block is a mixer and the MLP after it, and this MLP follows no mixer")
            raise _refuse(config.model_type, f"layers_block_type[{index}]", kinds[index], why)
        has_mlp = index + 1 < len(kinds) and kinds[index + 1] == "mlp"
        blocks.append((index, index + 1 if has_mlp else None))
        index += 2 if has_mlp else 1
    return blocks


def _check_nemotron_options(config: Any) -> None:
    family = config.model_type
    _refuse_any(config, [("use_bias", True, "seqdyn's mamba2 projections have no bias"),
                         ("use_conv_bias", False, "seqdyn's short convolution has a bias"),
                         ("mlp_bias", True, "seqdyn's squared-ReLU MLP has no biases")])
    for option, value in (("mamba_hidden_act", "silu"), ("mlp_hidden_act", "relu2")):
        if getattr(config, option) != value:
            raise _refuse(family, option, getattr(config, option), f"seqdyn's block uses {value} there")
    inner = config.mamba_num_heads * config.mamba_head_dim
    if inner % config.hidden_size:
        raise _refuse(family, "mamba_num_heads", config.mamba_num_heads, "seqdyn's mamba2 width "
                      "mamba_num_heads·mamba_head_dim is a whole multiple of hidden_size")


def _nemotron_config(config: Any) -> SeqdynConfig:
    """``NemotronHConfig`` → one block per Mamba-2 or attention layer (no positions, grouped key–value heads), with
    the squared-ReLU MLP layer after it as its MLP; Δ clamped from below at ``time_step_min`` as the layer does."""
    _check_nemotron_options(config)
    mamba2 = {"state_dim": config.ssm_state_size, "expand": config.mamba_num_heads * config.mamba_head_dim
              // config.hidden_size, "head_dim": config.mamba_head_dim, "groups": config.n_groups,
              "conv_size": config.conv_kernel, "norm_eps": config.layer_norm_epsilon,
              **_dt_limit((config.time_step_min, float("inf")))}
    attention = {**_attention_heads(config), "rotary": False}
    blocks = _nemotron_blocks(config)
    kinds = config.layers_block_type
    mixers = [("mamba2", mamba2) if kinds[mixer] == "linear_attention" else ("softmax_attention", attention)
              for mixer, _ in blocks]
    return SeqdynConfig(vocab_size=config.vocab_size, d_model=config.hidden_size, layers=len(blocks),
                        mixer=[name for name, _ in mixers], mixer_options=[options for _, options in mixers],
                        mlp=["none" if mlp is None else "relu2" for _, mlp in blocks],
                        mlp_ratio=config.intermediate_size / config.hidden_size, norm="rmsnorm",
                        norm_eps=config.layer_norm_epsilon, tie_embeddings=config.tie_word_embeddings,
                        pad_token_id=config.pad_token_id, bos_token_id=config.bos_token_id,
                        eos_token_id=config.eos_token_id)


def _nemotron_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    backbone, model = source.model, target.seqdyn
    _copy(model.embedding.weight, backbone.embeddings.weight, "model.embeddings.weight")
    for block, (mixer_index, mlp_index) in zip(model.blocks, _nemotron_blocks(source.config)):
        layer, prefix = backbone.layers[mixer_index], f"model.layers.{mixer_index}"
        _copy(block.norm1.weight, layer.norm.weight, f"{prefix}.norm.weight")
        mixer_weights = _mamba2_mixer_weights if layer.block_type == "linear_attention" else _plain_attention_weights
        mixer_weights(f"{prefix}.mixer", layer.mixer, block.mixer)
        if mlp_index is not None:
            layer, prefix = backbone.layers[mlp_index], f"model.layers.{mlp_index}"
            _copy(block.norm2.weight, layer.norm.weight, f"{prefix}.norm.weight")
            _copy(block.mlp.fc1.weight, layer.mixer.up_proj.weight, f"{prefix}.mixer.up_proj.weight")
            _copy(block.mlp.fc2.weight, layer.mixer.down_proj.weight, f"{prefix}.mixer.down_proj.weight")
    _copy(model.norm.weight, backbone.norm_f.weight, "model.norm_f.weight")
    if not target.config.tie_word_embeddings:
        _copy(model.head.weight, source.lm_head.weight, "lm_head.weight")


# --- OLMo-hybrid (OlmoHybridForCausalLM): Gated DeltaNet layers and OLMo 2's attention layers -------------------

def _olmo_hybrid_config(config: Any) -> SeqdynConfig:
    """``OlmoHybridConfig`` → per layer a pre-norm Gated DeltaNet block (β ∈ (0, 2) with ``linear_allow_neg_eigval``,
    its output norm at FLA's ε = 1e-5) or an output-norm attention block (OLMo 2's ``x + norm(f(x))``, q/k RMSNorms
    over the whole projections, RoPE or, as the released checkpoints, no positions); SwiGLU MLPs, a final norm."""
    _check_delta_hybrid_options(config)
    rope = config.rope_parameters is not None and config.rope_parameters.get("rope_theta") is not None
    delta = {**_delta_options(config), "negative_eigenvalues": bool(config.linear_allow_neg_eigval),
             "output_norm_eps": 1e-5}
    attention = {**_attention_heads(config), "qk_norm": True, "qk_norm_scope": "projection",
                 **_rotary_or_none(config, rope)}
    mixers = [("gated_deltanet", delta) if kind == "linear_attention" else ("softmax_attention", attention)
              for kind in config.layer_types]
    positions = ["pre" if kind == "linear_attention" else "output" for kind in config.layer_types]
    return _hybrid_config(config, mixers, norm_position=positions)


def _olmo_delta_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """Separate ``q_proj``, ``k_proj``, ``v_proj``, the gate ``g_proj``, β's ``b_proj``, the decay's ``a_proj``."""
    stacked = torch.cat([theirs.q_proj.weight, theirs.k_proj.weight, theirs.v_proj.weight])
    _copy(ours.qkv.weight, stacked, f"{prefix}.q_proj/k_proj/v_proj.weight")
    _copy_pairs(prefix, theirs, ours, (("output.gate.weight", "g_proj.weight"), ("beta.weight", "b_proj.weight"),
                                       ("decay.proj.weight", "a_proj.weight"), *_DELTA_DECAY,
                                       ("output.norm.weight", "o_norm.weight"), ("output.out.weight", "o_proj.weight")))


def _olmo_attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    _plain_attention_weights(prefix, theirs, ours)
    _copy(ours.q_norm.weight, theirs.q_norm.weight, f"{prefix}.q_norm.weight")
    _copy(ours.k_norm.weight, theirs.k_norm.weight, f"{prefix}.k_norm.weight")


def _olmo_hybrid_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    layout = _DecoderLayout({"linear_attention": ("input_layernorm", "post_attention_layernorm"),
                             "full_attention": ("post_attention_layernorm", "post_feedforward_layernorm")}, "mlp",
                            {"linear_attention": ("linear_attn", _olmo_delta_weights),
                             "full_attention": ("self_attn", _olmo_attention_weights)}, "norm")
    _copy_decoder_stack(source, target, layout)


# --- RecurrentGemma (RecurrentGemmaForCausalLM): Griffin's recurrent blocks and sliding-window attention ----------

def _recurrent_gemma_config(config: Any) -> SeqdynConfig:
    """``RecurrentGemmaConfig`` → per layer Griffin's recurrent block (``rglru``: block-diagonal gates of
    ``num_attention_heads`` blocks, c = 8, the convolution, the GeLU gate branch, the reset at position 0) or
    sliding-window attention (grouped key–value heads, rotary embeddings on part of each head, an output bias); pre-norm
    RMSNorm blocks with a GeGLU MLP of ``intermediate_size / 2``, logits soft-capped.  The embedding's √d scale
    (bfloat16-rounded, as the model multiplies by it) is folded into the embedding, so the head is its own copy."""
    family = config.model_type
    if config.hidden_activation != "gelu_pytorch_tanh":
        raise _refuse(family, "hidden_activation", config.hidden_activation, "seqdyn's GeGLU and RG-LRU gate use "
                      "the tanh GELU")
    _check_default_rope(config)
    rglru = {"expand": config.lru_width / config.hidden_size, "gate_blocks": config.num_attention_heads,
             "conv_size": config.conv1d_width, "reset": True}
    attention = {**_attention_heads(config), "window": config.attention_window_size, "sliding": True, "bias": True,
                 **_rotary_options(config)}
    mixers = [("rglru", rglru) if kind == "linear_attention" else ("local_attention", attention)
              for kind in config.layers_block_type]
    return _hybrid_config(config, mixers, tie=False, mlp="geglu",
                          mlp_ratio=(config.intermediate_size // 2) / config.hidden_size,
                          logit_softcap=config.logits_soft_cap)


def _rglru_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """``linear_x`` / ``linear_y`` (the in-projection [x | gate]), ``conv_1d``, the RG-LRU's block-diagonal gates and
    Λ (``recurrent_param``), ``linear_out``."""
    for kind in ("weight", "bias"):
        _copy(getattr(ours.in_proj, kind), torch.cat([getattr(theirs.linear_x, kind), getattr(theirs.linear_y, kind)]),
              f"{prefix}.linear_x/linear_y.{kind}")
    _copy_pairs(prefix, theirs, ours, (("convs.u.weight", "conv_1d.weight"), ("convs.u.bias", "conv_1d.bias"),
                                       ("a_gate.weight", "rg_lru.recurrent_gate_weight"),
                                       ("a_gate.bias", "rg_lru.recurrent_gate_bias"),
                                       ("input_gate.weight", "rg_lru.input_gate_weight"),
                                       ("input_gate.bias", "rg_lru.input_gate_bias"),
                                       ("a_param", "rg_lru.recurrent_param"), ("out_proj.weight", "linear_out.weight"),
                                       ("out_proj.bias", "linear_out.bias")))


def _biased_attention_weights(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """Attention whose output projection has a bias and whose q, k, v projections may have (0 where not)."""
    _plain_attention_weights(prefix, theirs, ours)
    biases = [torch.zeros(projection.out_features) if projection.bias is None else projection.bias
              for projection in (theirs.q_proj, theirs.k_proj, theirs.v_proj)]
    _copy(ours.qkv.bias, torch.cat(biases), f"{prefix}.q_proj/k_proj/v_proj.bias")
    _copy(ours.out.bias, theirs.o_proj.bias, f"{prefix}.o_proj.bias")


def _copy_geglu(prefix: str, theirs: nn.Module, ours: nn.Module) -> None:
    """``gate_proj``, ``up_proj`` (fc1 = [gate | up]) and ``down_proj``, each with its bias."""
    _copy_swiglu(prefix, theirs, ours)
    _copy(ours.fc1.bias, torch.cat([theirs.gate_proj.bias, theirs.up_proj.bias]), f"{prefix}.gate_proj/up_proj.bias")
    _copy(ours.fc2.bias, theirs.down_proj.bias, f"{prefix}.down_proj.bias")


def _recurrent_gemma_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    layout = _DecoderLayout(("temporal_pre_norm", "channel_pre_norm"), "mlp_block",
                            {"linear_attention": ("temporal_block", _rglru_weights),
                             "sliding_attention": ("temporal_block", _biased_attention_weights)}, "final_norm",
                            centered=True, mlp_weights=_copy_geglu)
    _copy_decoder_stack(source, target, layout)
    target.seqdyn.embedding.weight.mul_(source.model.normalizer.to(target.seqdyn.embedding.weight.dtype))


# --- Falcon-H1 (FalconH1ForCausalLM): attention and Mamba-2 side by side in every layer, μP multipliers ----------

def _falcon_h1_config(config: Any) -> SeqdynConfig:
    """``FalconH1Config`` → pre-norm RMSNorm blocks, each a ``parallel`` mixer of mamba2 (``mamba_d_ssm`` channels,
    groups of B and C, the gated norm or, as the released models, none) beside rotary softmax attention (grouped
    key–value heads), and a SwiGLU MLP; the μP multipliers become weights (:func:`_fold_falcon_h1`), so a tied head
    becomes its own copy where the embedding or the logits are scaled."""
    _check_mamba2_hybrid_options(config, ("projectors_bias", True, "seqdyn's mamba2 out-projection has no bias"),
                                 ("mlp_bias", True, "seqdyn's SwiGLU has no biases"))
    if config.mamba_rms_norm and config.mamba_norm_before_gate:
        raise _refuse(config.model_type, "mamba_norm_before_gate", True, "seqdyn's gated norm normalizes y ⊙ SiLU(z), after the "
                      "gate")
    _check_default_rope(config)
    inner = config.mamba_d_ssm or config.mamba_expand * config.hidden_size
    mamba2 = {"state_dim": config.mamba_d_state, "expand": inner / config.hidden_size,
              "head_dim": config.mamba_d_head, "groups": config.mamba_n_groups, "conv_size": config.mamba_d_conv,
              "gate_norm": bool(config.mamba_rms_norm), "norm_eps": config.rms_norm_eps,
              **_dt_limit(config.time_step_limit)}
    attention = {**_attention_heads(config), **_rotary_options(config)}
    parallel = ("parallel", {"parts": [["mamba2", mamba2], ["softmax_attention", attention]]})
    scaled = (config.embedding_multiplier, config.lm_head_multiplier) != (1, 1)
    return _hybrid_config(config, [parallel] * config.num_hidden_layers,
                          tie=config.tie_word_embeddings and not scaled)


def _falcon_h1_mixer_weights(prefix: str, layer: nn.Module, ours: nn.Module) -> None:
    """The layer's ``mamba`` and ``self_attn`` into the parallel mixer's two parts."""
    _mamba2_mixer_weights(f"{prefix}.mamba", layer.mamba, ours.parts[0])
    _plain_attention_weights(f"{prefix}.self_attn", layer.self_attn, ours.parts[1])


def _fold_falcon_h1(source: nn.Module, target: SeqdynForCausalLM) -> None:
    """Falcon-H1's μP multipliers as weights: the embedding times ``embedding_multiplier``, the head times
    ``lm_head_multiplier``; per layer the Mamba-2 in-projection's rows times ``ssm_in_multiplier`` and the layer's
    ``mup_vector`` (z, x, B, C and Δ each by its ``ssm_multipliers`` entry), its out-projection times
    ``ssm_out_multiplier``; the attention's q, k, v rows times ``attention_in_multiplier`` (k also times
    ``key_multiplier``), its output times ``attention_out_multiplier``; the MLP's gate rows times
    ``mlp_multipliers[0]``, its down-projection times ``mlp_multipliers[1]``."""
    config, model = source.config, target.seqdyn
    model.embedding.weight.mul_(config.embedding_multiplier)
    if not target.config.tie_word_embeddings:
        model.head.weight.mul_(config.lm_head_multiplier)
    gate_multiplier, down_multiplier = config.mlp_multipliers
    for layer, block in zip(source.model.layers, model.blocks):
        ssm, attention = block.mixer.parts
        ssm.in_proj.weight.mul_(layer.mamba.mup_vector.reshape(-1, 1).to(ssm.in_proj.weight.dtype)
                                * config.ssm_in_multiplier)
        ssm.out_proj.weight.mul_(config.ssm_out_multiplier)
        attention.qkv.weight.mul_(config.attention_in_multiplier)
        attention.qkv.weight.split(attention.widths)[1].mul_(config.key_multiplier)  # the key rows
        attention.out.weight.mul_(config.attention_out_multiplier)
        block.mlp.fc1.weight[:block.mlp.hidden].mul_(gate_multiplier)
        block.mlp.fc2.weight.mul_(down_multiplier)


def _falcon_h1_weights(source: nn.Module, target: SeqdynForCausalLM) -> None:
    layout = _DecoderLayout(("input_layernorm", "pre_ff_layernorm"), "feed_forward",
                            {"hybrid": ("", _falcon_h1_mixer_weights)}, "final_layernorm")
    _copy_decoder_stack(source, target, layout)
    _fold_falcon_h1(source, target)


#: family (``config.model_type``) → (its SeqdynConfig, the weight copy)
SUPPORTED: dict[str, tuple[Callable[[Any], SeqdynConfig], Callable[[nn.Module, SeqdynForCausalLM], None]]] = {
    "mamba": (_mamba_config, _mamba_weights),
    "falcon_mamba": (_mamba_config, _mamba_weights),
    "mamba2": (_mamba2_config, _mamba2_weights),
    "qwen3_5_text": (_qwen3_5_config, _qwen_weights(_qwen3_5_delta_weights)),
    "bamba": (_bamba_config, _bamba_weights),
    "qwen3_next": (_qwen3_next_config, _qwen_weights(_qwen3_next_delta_weights, experts=True)),
    "qwen3_5_moe_text": (_qwen3_5_moe_config, _qwen_weights(_qwen3_5_delta_weights, experts=True)),
    "granitemoehybrid": (_granite_config, _granite_weights),
    "nemotron_h": (_nemotron_config, _nemotron_weights),
    "olmo_hybrid": (_olmo_hybrid_config, _olmo_hybrid_weights),
    "recurrent_gemma": (_recurrent_gemma_config, _recurrent_gemma_weights),
    "falcon_h1": (_falcon_h1_config, _falcon_h1_weights),
}


# --- tiny random models of each family, built offline: the checks of the conversion -------------------------------

#: family → (its transformers causal-LM class, its config class, a tiny config's fields): 2 layers of width 16 (the
#: hybrid Qwen3.5: 4, each mixer twice)
TINY_CONFIGS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "mamba": ("MambaForCausalLM", "MambaConfig",
              dict(vocab_size=48, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4,
                   time_step_rank=2)),
    "falcon_mamba": ("FalconMambaForCausalLM", "FalconMambaConfig",
                     dict(vocab_size=48, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4,
                          time_step_rank=2)),
    "mamba2": ("Mamba2ForCausalLM", "Mamba2Config",
               dict(vocab_size=48, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2, head_dim=4,
                    num_heads=8, n_groups=2, conv_kernel=4, chunk_size=8)),
    "qwen3_5_text": ("Qwen3_5ForCausalLM", "Qwen3_5TextConfig",
                     dict(vocab_size=48, hidden_size=16, intermediate_size=40, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_key_heads=2,
                          linear_num_value_heads=4, linear_key_head_dim=6, linear_value_head_dim=8,
                          linear_conv_kernel_dim=4, layer_types=["linear_attention", "full_attention"] * 2,
                          rope_parameters={"rope_type": "default", "rope_theta": 10_000.0,
                                           "partial_rotary_factor": 0.5})),
    "qwen3_next": ("Qwen3NextForCausalLM", "Qwen3NextConfig",
                   dict(vocab_size=48, hidden_size=16, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
                        linear_key_head_dim=6, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                        layer_types=["linear_attention", "full_attention"] * 2, num_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=8, shared_expert_intermediate_size=12, intermediate_size=40,
                        partial_rotary_factor=0.5, experts_implementation="eager")),
    "qwen3_5_moe_text": ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig",
                         dict(vocab_size=48, hidden_size=16, num_hidden_layers=4, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
                              linear_key_head_dim=6, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                              layer_types=["linear_attention", "full_attention"] * 2, num_experts=4,
                              num_experts_per_tok=2, moe_intermediate_size=8, shared_expert_intermediate_size=12,
                              rope_parameters={"rope_type": "default", "rope_theta": 10_000.0,
                                               "partial_rotary_factor": 0.5}, experts_implementation="eager")),
    "granitemoehybrid": ("GraniteMoeHybridForCausalLM", "GraniteMoeHybridConfig",
                         dict(vocab_size=48, hidden_size=16, intermediate_size=8, shared_intermediate_size=24,
                              num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
                              layer_types=["linear_attention", "full_attention"] * 2, num_local_experts=4,
                              num_experts_per_tok=2,
                              mamba_n_heads=8, mamba_n_groups=2, mamba_d_state=4, mamba_d_conv=4, mamba_expand=2,
                              mamba_chunk_size=8, position_embedding_type="rope", tie_word_embeddings=True,
                              embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
                              logits_scaling=2.5, rms_norm_eps=1e-5, experts_implementation="eager")),
    "nemotron_h": ("NemotronHForCausalLM", "NemotronHConfig",
                   dict(vocab_size=48, hidden_size=16, intermediate_size=24, num_hidden_layers=6,
                        layers_block_type=["linear_attention", "mlp", "linear_attention", "full_attention", "mlp",
                                           "linear_attention"], num_attention_heads=2, num_key_value_heads=1,
                        head_dim=8, mamba_num_heads=8, mamba_head_dim=4, ssm_state_size=4, n_groups=2, chunk_size=8,
                        conv_kernel=4)),
    "olmo_hybrid": ("OlmoHybridForCausalLM", "OlmoHybridConfig",
                    dict(vocab_size=48, hidden_size=16, intermediate_size=40, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, linear_num_key_heads=2,
                         linear_num_value_heads=4, linear_key_head_dim=6, linear_value_head_dim=8,
                         linear_conv_kernel_dim=4, layer_types=["linear_attention", "full_attention"] * 2,
                         rope_parameters={"rope_type": "default", "rope_theta": 10_000.0}, pad_token_id=0,
                         eos_token_id=1)),
    "recurrent_gemma": ("RecurrentGemmaForCausalLM", "RecurrentGemmaConfig",
                        dict(vocab_size=48, hidden_size=24, intermediate_size=48, num_hidden_layers=3,
                             num_attention_heads=2, num_key_value_heads=1, lru_width=36, attention_window_size=8,
                             conv1d_width=4, logits_soft_cap=3.0, block_types=["recurrent", "attention"],
                             attention_bias=True)),
    "falcon_h1": ("FalconH1ForCausalLM", "FalconH1Config",
                  dict(vocab_size=48, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=8, mamba_d_ssm=24, mamba_n_heads=6, mamba_d_head=4,
                       mamba_n_groups=2, mamba_d_state=4, mamba_chunk_size=8, embedding_multiplier=2.0,
                       lm_head_multiplier=0.5, mlp_multipliers=[1.5, 0.7], key_multiplier=0.8,
                       attention_in_multiplier=1.2, attention_out_multiplier=0.9, ssm_in_multiplier=0.6,
                       ssm_out_multiplier=1.4, ssm_multipliers=[1.1, 0.9, 1.3, 0.7, 1.2])),
    "bamba": ("BambaForCausalLM", "BambaConfig",
              dict(vocab_size=48, hidden_size=16, intermediate_size=40, num_hidden_layers=4, num_attention_heads=2,
                   num_key_value_heads=1, attn_layer_indices=[1, 3], mamba_n_heads=8, mamba_n_groups=2,
                   mamba_d_state=4, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=8)),
}


def tiny_model(family: str, dtype: torch.dtype = torch.float32, seed: int = 0, **changes: Any) -> nn.Module:
    """A random transformers model of ``family`` at :data:`TINY_CONFIGS`' size (with ``changes`` to its config),
    in eval mode, every weight moved off transformers' initialization (which leaves some at 0 or 1, where a wrongly
    mapped weight would not show)."""
    import transformers

    if family not in TINY_CONFIGS:
        raise ValueError(f"family: expected one of {', '.join(TINY_CONFIGS)}, got {family!r}")
    model_class, config_class, fields = TINY_CONFIGS[family]
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**{**fields, **changes})
    model = getattr(transformers, model_class)(config).to(dtype).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model


def check_conversion(family: str, length: int = 40, new_tokens: int = 32) -> dict[str, Any]:
    """The largest differences between ``family``'s tiny model and its conversion, relative to the largest logit:
    a whole forward in float32 and in float64, and the logits of ``new_tokens`` greedy tokens (float64) after a
    prompt the seqdyn model prefills in chunks; whether the generated tokens agree."""
    inputs = torch.randint(0, TINY_CONFIGS[family][2]["vocab_size"], (2, length),
                           generator=torch.Generator().manual_seed(1))
    report: dict[str, Any] = {"family": family, "class": TINY_CONFIGS[family][0]}
    for dtype, name in ((torch.float32, "forward float32"), (torch.float64, "forward float64")):
        theirs = tiny_model(family, dtype)
        ours = from_transformers(theirs)
        with torch.no_grad(), _quiet_transformers():  # (its notes on the fallbacks it runs instead of mamba_ssm)
            expected = theirs(inputs).logits.double()
            report[name] = float((ours(inputs).logits.double() - expected).abs().max() / expected.abs().max())
    prompt, mask = inputs[:1, :24], torch.ones_like(inputs[:1, :24])
    settings = dict(max_new_tokens=new_tokens, do_sample=False, output_logits=True, return_dict_in_generate=True,
                    pad_token_id=0, attention_mask=mask)
    with _quiet_transformers():
        expected, got = theirs.generate(prompt, **settings), ours.generate(prompt, **settings)
    steps = min(len(expected.logits), len(got.logits))  # a different end-of-sequence token may stop one early
    theirs_logits, ours_logits = (torch.stack(out.logits[:steps]).double() for out in (expected, got))
    report[f"decode {new_tokens} tokens"] = float((ours_logits - theirs_logits).abs().max()
                                                  / theirs_logits.abs().max())
    report["same tokens"] = bool(torch.equal(got.sequences, expected.sequences))
    with torch.no_grad():
        whole, cache, chunks = theirs(prompt).logits.double(), None, []
        for piece in prompt.split(10, dim=1):
            out = ours(piece, cache=cache, use_cache=True)
            cache = out.cache
            chunks.append(out.logits)
    report["chunked prefill"] = float((torch.cat(chunks, dim=1).double() - whole).abs().max() / whole.abs().max())
    return report
