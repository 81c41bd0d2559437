"""``train.dtype: bfloat16`` and ``float16`` train what users hit first: the chunk backend's hand-written backward
and the complex LTI systems under autocast; float16 with a loss scale that a checkpoint keeps (issue 18; every
mixer and backend: tests/mixers/test_autocast.py)."""

from __future__ import annotations

import functools
import json
import math

import pytest
import torch
from safetensors import safe_open

from seqdyn.train.config import ConfigError, parse_config
from seqdyn.train.loop import Trainer, train_run
from seqdyn.train.store import Store


def hybrid(dtype: str, steps: int = 4, eval_every: int = 2) -> dict:
    """Chunked gated DeltaNet and GLA (T = 32: auto takes the chunk backend, T > 2C) and the complex LRU."""
    chunked = {"heads": 2, "chunk_size": 8}
    return {
        "name": dtype,
        "model": {
            "mixer": ["gated_deltanet", "gla", "lru"],
            "mixer_options": [chunked, chunked, {}],
            "layers": 3,
            "d_model": 32,
            "mlp": "none",
        },
        "task": {
            "name": "mqar",
            "params": {"seq_len": 32, "num_kv_pairs": 2, "vocab_size": 64},
            "train_examples": 64,
            "test_examples": 16,
        },
        "train": {"steps": steps, "batch_size": 16, "eval_every": eval_every, "dtype": dtype},
    }


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_hybrid_of_chunked_and_lti_mixers_trains_in_half_precision(tmp_path, dtype):
    result = train_run(parse_config(hybrid(dtype)), checkpoint_dir=tmp_path, progress=False)
    assert result.status == "finished", result.reason
    assert math.isfinite(result.final["loss"])


def test_an_interrupted_float16_run_resumes_with_its_loss_scale_to_identical_metrics(tmp_path, monkeypatch):
    # a scale that doubles after every 2 good steps overflows within a few steps: steps are skipped and the scale
    # halved, so the scale at the checkpoint is not the one a fresh scaler starts from
    monkeypatch.setattr(torch.amp, "GradScaler", functools.partial(torch.amp.GradScaler, growth_interval=2))
    config = parse_config(hybrid("float16", steps=20, eval_every=5))
    with Store(tmp_path / "whole.db") as whole:
        assert train_run(config, whole, checkpoint_dir=tmp_path / "whole", progress=False).status == "finished"
        expected = {(m.step, m.split, m.name): m.value for m in whole.metrics()}
        final = whole.run(config.run_id).final_metric
    with monkeypatch.context() as patch:
        original = Trainer.train_step

        def interrupted_at_step_12(self):
            if self.step == 12:
                raise KeyboardInterrupt
            return original(self)

        patch.setattr(Trainer, "train_step", interrupted_at_step_12)
        with Store(tmp_path / "cut.db") as store, pytest.raises(KeyboardInterrupt):
            train_run(config, store, checkpoint_dir=tmp_path / "cut", progress=False)
    with Store(tmp_path / "cut.db") as store:
        record = store.run(config.run_id)
        assert (record.status, record.checkpoint_step) == ("interrupted", 10)
        with safe_open(record.checkpoint, framework="pt") as handle:
            scale = json.loads(handle.metadata()["seqdyn"])["grad_scaler"]["scale"]
        assert scale != torch.amp.GradScaler("cpu").get_scale()  # steps were skipped and the scale moved
        assert train_run(config, store, checkpoint_dir=tmp_path / "cut", progress=False).status == "finished"
        assert store.run(config.run_id).final_metric == final
        assert {(m.step, m.split, m.name): m.value for m in store.metrics()} == expected


def test_an_unknown_dtype_is_refused_in_one_line_naming_train_dtype():
    with pytest.raises(ConfigError) as error:
        parse_config(hybrid("float8"))
    message = str(error.value)
    assert "\n" not in message and "train.dtype" in message
    assert all(f"'{name}'" in message for name in ("float32", "bfloat16", "float16"))  # the choices, float16 too
