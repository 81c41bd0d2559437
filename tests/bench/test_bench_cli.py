"""`seqdyn bench` with bad names, lengths or devices: a one-line error and exit code 2, before any measurement;
every bench command that takes names or lengths."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from seqdyn.cli import app

BAD = [  # (arguments, words of the one-line error)
    (["mixers", "--names", "s6,mamba3"], "mixer: unknown name 'mamba3'"),
    (["mixers", "--names", "s6", "--seq-lens", "1k"], "--seq-lens: expected comma-separated positive integers"),
    (["mixers", "--names", "s6", "--seq-lens", "16", "--device", "cuda"], "--device: 'cuda' asked for, but no CUDA"),
    (["operator", "--seq-lens", "16,x"], "--seq-lens: expected comma-separated positive integers"),
    (["operator", "--seq-lens", "0"], "got '0'"),
    (["operator", "--seq-lens", "16", "--kinds", "gla,mamba3"], "kinds: unknown 'mamba3'"),
    (["operator", "--seq-lens", "16", "--backends", "flash"], "backends: unknown 'flash'"),
    (["operator", "--seq-lens", "16", "--device", "cuda:0"], "--device: 'cuda:0' asked for, but no CUDA"),
    (["operator", "--seq-lens", "16", "--device", "tpu"], "--device: expected 'cpu', 'cuda', 'cuda:N' or 'auto'"),
    (["train", "--names", "mamba3"], "mixer: unknown name 'mamba3'"),
    (["train", "--names", "s6", "--device", "cuda"], "--device: 'cuda' asked for, but no CUDA"),
    (["hf", "--lengths", "64,x"], "--lengths: expected comma-separated positive integers"),
    (["auto", "--mixers", "mamba3"], "mamba3"),
]


@pytest.mark.parametrize("args, words", BAD, ids=[" ".join(args) for args, _ in BAD])
def test_bad_bench_arguments_are_one_line_errors(args, words, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on a GPU machine
    result = CliRunner().invoke(app, ["bench", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr
    assert "Traceback" not in result.output and not isinstance(result.exception, ValueError)
