"""transformers models opened as seqdyn models: the same weights, layer by layer, in a :class:`SeqdynForCausalLM`.

:func:`from_transformers` takes a loaded transformers causal language model of a supported family and returns the
seqdyn model that computes the same logits — whose every layer can then be inspected as coefficient dynamics
(``seqdyn.analysis``) and run on any of seqdyn's backends.  Each family has one module here (named as transformers'
``transformers.models.<name>``): what config it reads, which seqdyn mixer and options it maps to, how each weight is
renamed or reshaped, and its tiny random model; it registers them in :mod:`~seqdyn.hf.convert.registry`.  An option
of a family's config that seqdyn cannot represent exactly is refused in one line that names it.

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
weights; ``zamba2`` (``Zamba2ForCausalLM``) → ``mamba2`` in every layer and its shared attention-and-MLP blocks on
[hidden state, embeddings] (``seqdyn.models.shared``), each hybrid layer with its own adapters and projection;
``zamba`` (``ZambaForCausalLM``) → ``s6`` with its Mamba heads and one such block (no adapters).
"""

from __future__ import annotations

import importlib

from seqdyn.hf.convert.checkpoints import TOKENIZER_FILES, WEIGHT_FILES, convert_checkpoint, load_model, tokenize
from seqdyn.hf.convert.checks import check_conversion, tiny_model
from seqdyn.hf.convert.registry import (
    NOT_YET,
    SUPPORTED,
    TEXT_MODEL_OF,
    TINY_CONFIGS,
    Conversion,
    TinyModel,
    UnsupportedModel,
    from_transformers,
    register,
)

__all__ = [
    "FAMILY_MODULES",
    "NOT_YET",
    "SUPPORTED",
    "TEXT_MODEL_OF",
    "TINY_CONFIGS",
    "TOKENIZER_FILES",
    "WEIGHT_FILES",
    "Conversion",
    "TinyModel",
    "UnsupportedModel",
    "check_conversion",
    "convert_checkpoint",
    "from_transformers",
    "load_model",
    "register",
    "tiny_model",
    "tokenize",
]

#: the modules of this package that each register a family, in the order ``seqdyn convert --check`` lists them
FAMILY_MODULES = (
    "mamba",
    "falcon_mamba",
    "mamba2",
    "qwen3_5",
    "qwen3_next",
    "qwen3_5_moe",
    "bamba",
    "granitemoehybrid",
    "nemotron_h",
    "olmo_hybrid",
    "recurrent_gemma",
    "falcon_h1",
    "jamba",
    "minimax",
    "lfm2",
    "lfm2_moe",
    "rwkv",
    "kimi_linear",
    "bailing_hybrid",
    "xlstm",
    "zamba",
    "zamba2",
)


def _register_families() -> None:
    """Each module of :data:`FAMILY_MODULES` imported, which registers its family."""
    for name in FAMILY_MODULES:
        importlib.import_module(f"{__name__}.{name}")


_register_families()
