"""``train.pack``: a language model trained on documents packed end to end (``cu_seqlens``) computes the same
losses as on the same documents right-padded — step by step — with no padding in the batch (issue 33, item 5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seqdyn.core.packing import pack_documents
from seqdyn.train.config import ConfigError, parse_config
from seqdyn.train.loop import Trainer


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(["ab", "cd", "ef", "gh"], size=int(rng.integers(2, 20)))) for _ in range(200)]
    path = tmp_path / "docs.txt"
    path.write_text("\n\n".join(docs), encoding="utf-8")
    return path


def run_config(corpus, pack: bool, mixer="gated_deltanet"):
    return parse_config(
        {
            "name": "docs",
            "model": {
                "mixer": [mixer, "softmax_attention"],
                "d_model": 16,
                "layers": 2,
                "block": "gated",
                "short_conv": True,
            },
            "task": {
                "name": "lm",
                "params": {"path": str(corpus), "seq_len": 48, "document_separator": "\n\n"},
                "train_examples": 64,
                "test_examples": 16,
            },
            "train": {"steps": 6, "batch_size": 8, "pack": pack, "backend": "quadratic"},
        }
    )


def test_packing_keeps_every_real_token_in_order():
    inputs = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0], [1, 2, 3, 4]])
    targets = torch.tensor([[6, 7, 9, -100], [3, -100, -100, -100], [2, 3, 4, 5]])
    packed_inputs, packed_targets, cu_seqlens = pack_documents(inputs, targets)
    assert packed_inputs.tolist() == [[5, 6, 7, 8, 1, 2, 3, 4]]
    assert packed_targets.tolist() == [[6, 7, 9, 3, 2, 3, 4, 5]] and cu_seqlens.tolist() == [0, 3, 4, 8]


def test_a_packed_run_computes_the_losses_of_the_padded_run(corpus, tmp_path):
    losses = {}
    for pack in (False, True):
        trainer = Trainer(run_config(corpus, pack), checkpoint_dir=tmp_path / str(pack), progress=False)
        losses[pack] = [trainer.train_step() for _ in range(6)]
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-5)
    assert losses[True][-1] < losses[True][0]


def test_pack_needs_documents(corpus):
    with pytest.raises(ConfigError, match="train.pack: packs documents"):
        parse_config(
            {"task": {"name": "mqar", "train_examples": 8, "test_examples": 8}, "train": {"steps": 1, "pack": True}}
        )
    assert run_config(corpus, True).run_id != run_config(corpus, False).run_id
