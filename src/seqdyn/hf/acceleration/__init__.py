"""seqdyn's operator inside a loaded transformers model: :func:`accelerate` swaps a family's pure-PyTorch fallbacks
(what transformers runs on a CPU, or wherever ``mamba_ssm`` is not installed) for seqdyn's functions, in that model's
layers only, leaving every weight, every other model and every function of transformers as it is.

- :mod:`~seqdyn.hf.acceleration.functions`: seqdyn's operator in the fallbacks' signatures (the SSD scan, Mamba's
  S6 scan, Gated DeltaNet's chunked delta rule, the RG-LRU's scan, RWKV-4's WKV, xLSTM's mLSTM, the short
  convolution);
- :mod:`~seqdyn.hf.acceleration.swap`: which layers of which family call which fallback, and how an accelerated
  layer gets a forward (or a method) of its own that calls seqdyn's instead;
- :mod:`~seqdyn.hf.acceleration.prompt`: what that forward knows of its prompt (padding, the cache's state) and
  hands to the functions inside it.
"""

from __future__ import annotations

from seqdyn.hf.acceleration.functions import (
    CHUNK_SIZE,
    DELTA_RULE_CHUNK_SIZE,
    causal_conv1d,
    gated_delta_rule,
    linear_rnn_scan,
    mlstm_backend,
    rwkv_linear_attention,
    selective_scan,
    ssd_chunk_scan,
)
from seqdyn.hf.acceleration.swap import (
    ACCELERATED,
    ACCELERATED_LAYERS,
    ACCELERATED_METHODS,
    Swapped,
    accelerate,
    fallback_of,
    rebound_forward,
    swapped_functions,
)

__all__ = [
    "ACCELERATED",
    "ACCELERATED_LAYERS",
    "ACCELERATED_METHODS",
    "CHUNK_SIZE",
    "DELTA_RULE_CHUNK_SIZE",
    "Swapped",
    "accelerate",
    "causal_conv1d",
    "fallback_of",
    "gated_delta_rule",
    "linear_rnn_scan",
    "mlstm_backend",
    "rwkv_linear_attention",
    "rebound_forward",
    "selective_scan",
    "ssd_chunk_scan",
    "swapped_functions",
]
