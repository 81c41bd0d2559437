"""The examples do what their comments and the README say."""

from pathlib import Path

import pytest

from seqdyn.train.config import load_config
from seqdyn.train.sweep import run_sweep

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_tiny_example_learns(tmp_path):
    """Both mixers of examples/mqar_tiny.yaml leave the ~0.5 "guess a context value" plateau (~30 s of CPU)."""
    results = run_sweep(load_config(EXAMPLES / "mqar_tiny.yaml"), tmp_path / "tiny.db", progress=False)
    best = {result.name.split("[")[1].split(",")[0]: result.best_metric for result in results}
    assert best["mixer=softmax_attention"] > 0.95 and best["mixer=mamba2"] > 0.8, best
