"""Figures are written as non-empty PNG files; matplotlib is not imported by ``import seqdyn.analysis``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seqdyn import analysis
from tests.analysis.helpers import inputs, mixer

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path) -> bool:
    data = path.read_bytes()
    return len(data) > 1000 and data.startswith(PNG)


def test_importing_the_analysis_package_does_not_import_matplotlib():
    code = "import sys, seqdyn; seqdyn.analysis.near_zero_fraction; assert 'matplotlib' not in sys.modules"
    src = str(Path(__file__).resolve().parents[2] / "src")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": src})


def test_coefficient_heat_maps_for_one_and_several_layers(tmp_path):
    signed = mixer("mamba2", state_dim=4, head_dim=8).coefficients(inputs(length=10))  # 4 heads, signed
    convex = mixer("softmax_attention", heads=2).coefficients(inputs(length=10))
    assert is_png(analysis.plot_coefficients(convex, tmp_path / "one.png"))
    path = analysis.plot_coefficients(
        {"softmax": convex, "mamba2": signed}, tmp_path / "sub" / "layers.png", title="layers", log=False
    )
    assert path == tmp_path / "sub" / "layers.png" and is_png(path)
    assert is_png(analysis.plot_coefficients([convex, signed], tmp_path / "log.png", heads=[1], batch=1, log=True))


def _ink_at_the_edges(path) -> float:
    """The darkest pixel of the image's outermost two rows and columns (1.0: white)."""
    import matplotlib.image

    image = matplotlib.image.imread(path)[..., :3].mean(axis=-1)
    return float(min(image[:2].min(), image[-2:].min(), image[:, :2].min(), image[:, -2:].min()))


@pytest.mark.parametrize("title", [None, "a title wider than one narrow panel of coefficients"])
def test_nothing_is_cut_off_at_the_edges_of_a_one_head_figure(tmp_path, title):
    """The issue's right-hand colour bars: their tick labels (and a long title) lie inside the image."""
    A = torch.tril(torch.rand(1, 1, 12, 12) * 1e3)
    path = analysis.plot_coefficients(A, tmp_path / "one.png", title=title)
    assert _ink_at_the_edges(path) > 0.95


def test_coefficient_heat_maps_reject_bad_input(tmp_path):
    with pytest.raises(ValueError, match="^A: "):
        analysis.plot_coefficients(torch.ones(1, 1, 3, 3), tmp_path / "x.png")
    with pytest.raises(ValueError, match="^batch: "):
        analysis.plot_coefficients(torch.eye(3)[None, None], tmp_path / "x.png", batch=2)
    assert not (tmp_path / "x.png").exists()


def test_principle_plot_and_accuracy_grid(tmp_path):
    points = [("exp", 0.82, 0.99), ("exp", 0.78, 0.97), ("relu", 0.55, 0.9), ("identity", 0.01, 0.3)]
    assert is_png(analysis.plot_principle(points, tmp_path / "principle.png", title="fuzzy recall"))
    assert is_png(analysis.plot_principle(points, tmp_path / "ratio.png", log_x=True))
    panels = {"fuzzy recall": points, "selective copying": points[:2]}
    assert is_png(analysis.plot_principle(panels, tmp_path / "panels.png", title="two tasks"))
    with pytest.raises(ValueError, match="^points: nothing"):
        analysis.plot_principle({}, tmp_path / "bad.png")
    grid = [[0.1, 0.5, float("nan")], [0.9, 1.0, 0.99]]
    assert is_png(analysis.plot_accuracy_grid(grid, [32, 64], [64, 128, 256], tmp_path / "grid.png"))
    with pytest.raises(ValueError, match=r"^points\[1\]: "):
        analysis.plot_principle([("a", 0.1, 0.2), ("b", 0.1)], tmp_path / "bad.png")
    with pytest.raises(ValueError, match="^values: "):
        analysis.plot_accuracy_grid(grid, [32], [64, 128, 256], tmp_path / "bad.png")


def test_curves_and_bars_write_pngs_and_refuse_nothing(tmp_path):
    from seqdyn.analysis.plots import plot_bars, plot_curves

    panels = {"state": {"a": [(256, 1.0), (4096, 1.0)], "b": [(256, 2.0), (4096, 32.0)]}, "time": {"a": [(256, 0.5)]}}
    path = plot_curves(panels, tmp_path / "curves.png", "context", {"state": "KiB"})
    assert path.read_bytes()[:4] == b"\x89PNG"
    bars = plot_bars({"task": {"x": [(1, 0.5, 0.1)]}}, tmp_path / "bars.png", "n")
    assert bars.read_bytes()[:4] == b"\x89PNG"
    for plot, args in ((plot_curves, ("context",)), (plot_bars, ("n",))):
        with pytest.raises(ValueError, match="nothing to plot"):
            plot({}, tmp_path / "empty.png", *args)
