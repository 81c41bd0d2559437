"""What mixers are built from: the short causal convolution, norms, MLPs, decay gates and parameter
helpers.  Layers import only the core; mixers and models import them."""

from seqdyn.layers.conv import ShortConv, TokenShift
from seqdyn.layers.gates import GLADecay, KDADecay, MambaDecay, init_dt_bias, inverse_softplus
from seqdyn.layers.mlp import MLP, build_mlp
from seqdyn.layers.norms import GatedRMSNorm, HeadOutput, RMSNorm, l2_normalize, rms_norm
from seqdyn.layers.params import check_positive, is_kept, keep_init, scaled_width
from seqdyn.layers.rotary import rotary

__all__ = [
    "GLADecay",
    "GatedRMSNorm",
    "HeadOutput",
    "KDADecay",
    "MLP",
    "MambaDecay",
    "RMSNorm",
    "ShortConv",
    "TokenShift",
    "build_mlp",
    "check_positive",
    "init_dt_bias",
    "inverse_softplus",
    "is_kept",
    "keep_init",
    "l2_normalize",
    "rms_norm",
    "rotary",
    "scaled_width",
]
