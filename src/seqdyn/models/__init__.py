"""Models built from mixers: blocks, heads, the sequence model and its config.

model = seqdyn.models.build_model(config.model, task.spec)     # a SequenceModel
outputs = model(inputs)                                         # [n, input_len, output_size] for task.loss
"""

from seqdyn.models.blocks import GatedBlock, GatedState, TransformerBlock, make_norm
from seqdyn.models.config import ModelConfig
from seqdyn.models.heads import AutoEncoderHead, Head, LinearHead, MeanPoolHead, build_head, sinusoidal_positions
from seqdyn.models.model import (
    ModelState,
    SequenceModel,
    build_model,
    count_parameters,
    init_weights,
    recording_backends,
    residual_projections,
)

__all__ = [
    "AutoEncoderHead",
    "GatedBlock",
    "GatedState",
    "Head",
    "LinearHead",
    "MeanPoolHead",
    "ModelConfig",
    "ModelState",
    "SequenceModel",
    "TransformerBlock",
    "build_head",
    "build_model",
    "count_parameters",
    "init_weights",
    "make_norm",
    "recording_backends",
    "residual_projections",
    "sinusoidal_positions",
]
