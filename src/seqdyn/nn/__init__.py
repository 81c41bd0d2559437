"""Neural-network building blocks shared by mixers and models (DESIGN §7), and the model of a run.

    model = seqdyn.nn.build_model(config.model, task.spec)     # a SequenceModel
    outputs = model(inputs)                                     # [n, input_len, output_size] for task.loss
"""

from seqdyn.nn.conv import ShortConv
from seqdyn.nn.norms import GatedRMSNorm, HeadOutput, RMSNorm
from seqdyn.nn.mlp import MLP, build_mlp
from seqdyn.nn.blocks import GatedBlock, GatedState, TransformerBlock, make_norm
from seqdyn.nn.heads import AutoEncoderHead, Head, LinearHead, MeanPoolHead, build_head, sinusoidal_positions
from seqdyn.nn.model import (ModelState, SequenceModel, build_model, count_parameters, init_weights,
                             residual_projections)

__all__ = [
    "AutoEncoderHead", "GatedBlock", "GatedRMSNorm", "GatedState", "Head", "HeadOutput", "LinearHead", "MLP",
    "MeanPoolHead", "ModelState", "RMSNorm", "SequenceModel", "ShortConv", "TransformerBlock", "build_head",
    "build_mlp", "build_model", "count_parameters", "init_weights", "make_norm", "residual_projections",
    "sinusoidal_positions",
]
