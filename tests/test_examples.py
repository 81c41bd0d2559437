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


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("*.yaml")), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_config_is_valid(path):
    """Every config under examples/ (pilots included) loads and expands to runs."""
    from seqdyn.train.sweep import expand

    assert expand(load_config(path))
