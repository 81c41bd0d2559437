"""Language modelling on local files: bytes, a stubbed GPT-2 encoding, and a small WikiText-103-shaped folder."""

import sys
import types

import numpy as np
import pytest
import torch

from seqdyn.tasks import build
from seqdyn.tasks.lm import WIKITEXT_ENV
from tests.helpers import stub_tiktoken


@pytest.fixture(autouse=True)
def _no_wikitext_env(monkeypatch):
    monkeypatch.delenv(WIKITEXT_ENV, raising=False)


@pytest.fixture
def corpus(tmp_path):
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "épsilon", "zeta"]
    text = " ".join(rng.choice(words, size=4000))
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    return path


def _occurs(window, stream):
    return bytes(window) in bytes(stream)


def test_bytes_windows_are_next_token_pairs_from_the_right_split(corpus):
    task = build("lm", path=str(corpus), seq_len=64)
    assert (task.input_size, task.output_size, task.head) == (256, 256, "lm")
    data = corpus.read_bytes()
    cut_valid, cut_test = round(len(data) * 0.9), round(len(data) * 0.95)
    for split, part in [("train", data[:cut_valid]), ("valid", data[cut_valid:cut_test]), ("test", data[cut_test:])]:
        inputs, targets = task.generate(20, seed=1, split=split)
        assert inputs.shape == targets.shape == (20, 64) and inputs.dtype == torch.int64
        assert torch.equal(inputs[:, 1:], targets[:, :-1])
        for x, y in zip(inputs.tolist(), targets.tolist()):
            assert _occurs(x + y[-1:], part)


def test_consecutive_windows_cover_the_split(corpus):
    task = build("lm", path=str(corpus), seq_len=50)
    inputs, targets = task.windows("test")
    stream = task.stream("test")
    assert inputs.shape[0] == (len(stream) - 1) // 50
    assert torch.equal(inputs.flatten(), torch.from_numpy(stream[: inputs.numel()].astype(np.int64)))
    assert torch.equal(targets.flatten(), torch.from_numpy(stream[1 : inputs.numel() + 1].astype(np.int64)))


def test_wikitext_directory_reads_each_split_from_its_file(tmp_path):
    for split, letters in [("train", "abc"), ("valid", "def"), ("test", "ghi")]:
        (tmp_path / f"wiki.{split}.tokens").write_text(" = Title = \n" + " ".join(letters * 200), encoding="utf-8")
    task = build("lm", data_dir=str(tmp_path), seq_len=32)
    for split, letters in [("train", "abc"), ("valid", "def"), ("test", "ghi")]:
        inputs, _ = task.generate(8, seed=0, split=split)
        text = set(bytes(inputs.flatten().tolist()).decode())
        assert text & set("abcdefghi") <= set(letters)


def test_wikitext_directory_from_the_environment(tmp_path, monkeypatch):
    for split in ("train", "valid", "test"):
        (tmp_path / f"wiki.{split}.tokens").write_text("x y z " * 50, encoding="utf-8")
    monkeypatch.setenv(WIKITEXT_ENV, str(tmp_path))
    assert build("lm", seq_len=16).params["data_dir"] == str(tmp_path)


def test_render_shows_the_text(corpus):
    task = build("lm", path=str(corpus), seq_len=40)
    inputs, targets = task.generate(2, seed=0)
    rendered = task.render(inputs, targets)
    assert "next token" in rendered and any(w in rendered for w in ("alpha", "beta", "gamma", "delta", "zeta"))


def test_metrics_include_perplexity(corpus):
    task = build("lm", path=str(corpus), seq_len=16)
    inputs, targets = task.generate(4, seed=0)
    uniform = torch.zeros(4, 16, 256)
    metrics = task.metrics(uniform, targets)
    assert metrics["perplexity"] == pytest.approx(256.0, rel=1e-5)
    assert task.primary_metric == "perplexity" and task.spec.higher_is_better is False


def test_gpt2_without_tiktoken_is_a_clear_error(corpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(ValueError, match="tiktoken"):
        build("lm", path=str(corpus), tokenizer="gpt2")


def test_gpt2_encoding_unavailable_offline_is_a_clear_error(corpus, monkeypatch):
    def get_encoding(name):
        raise ConnectionError("no network")

    monkeypatch.setitem(sys.modules, "tiktoken", types.SimpleNamespace(get_encoding=get_encoding))
    with pytest.raises(ValueError, match="BPE file"):
        build("lm", path=str(corpus), tokenizer="gpt2")


def test_gpt2_path_with_a_stub_encoding(corpus, monkeypatch):
    """The tiktoken code path, with a word-level stand-in for the real BPE (which needs a download)."""
    stub_tiktoken(monkeypatch)
    task = build("lm", path=str(corpus), tokenizer="gpt2", seq_len=8)
    assert task.input_size == 50257
    inputs, targets = task.generate(3, seed=0)
    assert int(inputs.max()) < 6 and torch.equal(inputs[:, 1:], targets[:, :-1])
    assert set(task.decode(inputs[0].tolist()).split(" ")) <= {"alpha", "beta", "gamma", "delta", "épsilon", "zeta"}


@pytest.mark.parametrize(
    "params, words",
    [
        ({"path": "/nonexistent/file.txt"}, ["path", "/nonexistent/file.txt"]),
        ({"data_dir": "/nonexistent"}, ["data_dir", "wiki.train.tokens"]),
        ({"tokenizer": "t5"}, ["tokenizer", "'t5'", "'bytes'"]),
        ({"seq_len": 0}, ["seq_len", "0"]),
    ],
)
def test_bad_sources_are_refused(params, words):
    with pytest.raises(ValueError) as info:
        build("lm", **params)
    for word in words:
        assert word in str(info.value)


def test_no_corpus_and_short_corpus(tmp_path, corpus):
    with pytest.raises(ValueError, match="path="):
        build("lm").generate(2, 0)
    with pytest.raises(ValueError, match="path="):
        build("lm", path=str(corpus), data_dir=str(tmp_path))
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("short")
    with pytest.raises(ValueError, match="seq_len"):
        build("lm", path=str(tiny), seq_len=64).generate(2, 0)


@pytest.fixture
def documents_file(tmp_path):
    """Twelve documents of 3–40 words, separated by blank lines."""
    rng = np.random.default_rng(1)
    words = ["alpha", "beta", "gamma", "delta"]
    docs = [" ".join(rng.choice(words, size=int(rng.integers(3, 40)))) for _ in range(120)]
    path = tmp_path / "documents.txt"
    path.write_text("\n\n".join(docs), encoding="utf-8")
    return path, docs


def test_documents_are_the_text_between_separators_right_padded(documents_file):
    path, docs = documents_file
    task = build("lm", path=str(path), seq_len=64, document_separator="\n\n", holdout=0.0)
    assert [bytes(d).decode() for d in task.documents("train")] == docs
    inputs, targets = task.generate(30, seed=0, split="train")
    for row in range(30):
        length = int((targets[row] != -100).sum())
        document = bytes(inputs[row, :length].tolist()) + bytes([int(targets[row, length - 1])])
        assert document.decode()[:65] in [d[:65] for d in docs]  # a whole document (its first 65 tokens)
        assert torch.equal(inputs[row, 1:length], targets[row, : length - 1])
        assert (inputs[row, length:] == 0).all() and (targets[row, length:] == -100).all()
    assert "next token" in task.render(inputs, targets) and "\\x00" not in task.render(inputs, targets)


def test_documents_need_a_separator_that_cuts(documents_file):
    path, _ = documents_file
    with pytest.raises(ValueError, match="document_separator='' would cut nothing"):
        build("lm", path=str(path), document_separator="")
    with pytest.raises(ValueError, match="documents\\(\\) needs parameter document_separator"):
        build("lm", path=str(path)).documents()
