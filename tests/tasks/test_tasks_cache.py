"""The optional on-disk cache of generated data."""

import torch

from seqdyn.tasks import build
from seqdyn.tasks.base import CACHE_ENV


def test_cache_writes_then_reads_back(tmp_path, monkeypatch):
    task = build("mqar", vocab_size=256, seq_len=64, num_kv_pairs=4)
    first = task.generate(5, 3, cache_dir=tmp_path)
    files = list(tmp_path.glob("mqar-*.pt"))
    assert len(files) == 1
    monkeypatch.setattr(type(task), "_make", lambda *a, **k: (_ for _ in ()).throw(AssertionError("regenerated")))
    again = task.generate(5, 3, cache_dir=tmp_path)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


def test_cache_key_separates_params_seed_split_and_size(tmp_path):
    task = build("mqar", vocab_size=256, seq_len=64, num_kv_pairs=4)
    task.generate(5, 3, cache_dir=tmp_path)
    task.generate(5, 4, cache_dir=tmp_path)
    task.generate(5, 3, split="test", cache_dir=tmp_path)
    task.generate(6, 3, cache_dir=tmp_path)
    build("mqar", vocab_size=256, seq_len=64, num_kv_pairs=5).generate(5, 3, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 5


def test_cache_from_environment_and_off_by_default(tmp_path, monkeypatch):
    task = build("compression")
    task.generate(2, 0)
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    plain = task.generate(2, 0)
    assert len(list(tmp_path.glob("compression-*.pt"))) == 1
    assert torch.equal(plain[0], task.generate(2, 0)[0])
