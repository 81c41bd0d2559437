"""``train.dtype: bfloat16`` trains what users hit first: the chunk backend's hand-written backward and the
complex LTI systems under autocast (issue 18; every mixer and backend: tests/mixers/test_autocast.py)."""

from __future__ import annotations

import math

from seqdyn.train.config import parse_config
from seqdyn.train.loop import train_run


def test_a_hybrid_of_chunked_and_lti_mixers_trains_in_bfloat16(tmp_path):
    chunked = {"heads": 2, "chunk_size": 8}  # T = 32: auto takes the chunk backend (T > 2C)
    config = parse_config({
        "name": "bf16",
        "model": {"mixer": ["gated_deltanet", "gla", "lru"], "mixer_options": [chunked, chunked, {}], "layers": 3,
                  "d_model": 32, "mlp": "none"},
        "task": {"name": "mqar", "params": {"seq_len": 32, "num_kv_pairs": 2, "vocab_size": 64},
                 "train_examples": 64, "test_examples": 16},
        "train": {"steps": 4, "batch_size": 16, "eval_every": 2, "dtype": "bfloat16"},
    })
    result = train_run(config, checkpoint_dir=tmp_path, progress=False)
    assert result.status == "finished", result.reason
    assert math.isfinite(result.final["loss"])
