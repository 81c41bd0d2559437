"""Falcon-Mamba (``FalconMambaForCausalLM``: Mamba-1 with weightless RMS norms of B, C and Δ, as transformers' CPU
path computes them) → the ``s6`` mixer with ``bcdt_rms_eps``, Mamba's model and weights otherwise.
"""

from __future__ import annotations

from typing import Any

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.mamba import mamba_weights, s6_config
from seqdyn.hf.convert.registry import TinyModel, register


def _falcon_mamba_config(config: Any) -> SeqdynConfig:
    """``FalconMambaConfig`` → Mamba's (:func:`~seqdyn.hf.convert.mamba.s6_config`) with B_t, C_t and the low-rank Δ
    input each divided by its RMS (ε = ``mixer_rms_eps``), which no weight can express."""
    return s6_config(config, bcdt_rms_eps=config.mixer_rms_eps)


register(
    "falcon_mamba",
    _falcon_mamba_config,
    mamba_weights,
    TinyModel(
        "FalconMambaForCausalLM",
        "FalconMambaConfig",
        dict(
            vocab_size=48, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4, time_step_rank=2
        ),
    ),
)
