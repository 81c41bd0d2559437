"""Figures of the analysis: coefficient heat maps, principle plots, accuracy grids.

matplotlib is imported inside each function and used without pyplot: each figure is drawn on its own Agg
canvas and written to ``path`` (format from the suffix, e.g. ``.png``, ``.pdf``), so no global backend state
changes and nothing opens a window.  Every function returns the path it wrote.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from seqdyn.analysis.coefficients import check_coefficients

__all__ = ["plot_accuracy_grid", "plot_bars", "plot_coefficients", "plot_curves", "plot_principle"]


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.08)  # nothing cut off at the edges
    return path


def _layers(A: Tensor | Sequence[Tensor] | Mapping[str, Tensor]) -> list[tuple[str, Tensor]]:
    if isinstance(A, Tensor):
        return [("", check_coefficients(A))]
    if isinstance(A, Mapping):
        items = list(A.items())
    elif isinstance(A, Sequence) and not isinstance(A, (str, bytes)):
        items = [(f"layer {index}", value) for index, value in enumerate(A)]
    else:
        raise ValueError(
            f"A: expected a tensor [B, H, T, T], a list of them or a mapping label → tensor, got {type(A).__name__}"
        )
    if not items:
        raise ValueError("A: no coefficient tensors to plot")
    return [(str(label), check_coefficients(value, f"A[{label!r}]")) for label, value in items]


def _heat_map(matrix: np.ndarray, log: bool) -> tuple[np.ndarray, dict[str, Any]]:
    """The data and imshow style of one coefficient matrix ``[T, T]``: the matrix with the entries above the diagonal
    masked, or ``log10 |A_ij|`` (magma) when ``log``; a diverging map centred at 0 (RdBu_r, ±max |A_ij|) when a causal
    entry is negative, else viridis from 0."""
    upper = np.triu(np.ones_like(matrix, dtype=bool), k=1)
    if log:
        data = np.log10(np.maximum(np.abs(matrix), np.finfo(np.float64).tiny))
        style = dict(cmap="magma")
    elif (matrix[~upper] < 0).any():
        bound = float(np.abs(matrix[~upper]).max()) or 1.0
        data, style = matrix, dict(cmap="RdBu_r", vmin=-bound, vmax=bound)
    else:
        data, style = matrix, dict(cmap="viridis", vmin=0.0)
    return np.ma.masked_array(data, mask=upper), style


def plot_coefficients(
    A: Tensor | Sequence[Tensor] | Mapping[str, Tensor],
    path: str | Path,
    batch: int = 0,
    heads: Sequence[int] | None = None,
    log: bool = False,
    title: str | None = None,
) -> Path:
    """Heat maps of coefficient matrices ("attention matrices" of any mixer), one row per layer, one panel per head.

    ``A``: one tensor ``[B, H, T, T]`` (one layer), a list of them (layers 0, 1, …) or a mapping label → tensor
    (e.g. :func:`seqdyn.analysis.layer_coefficients`).  Plots sequence ``batch`` and the heads ``heads`` (all by
    default; heads a layer lacks are skipped).  Entries above the diagonal are left blank.  Signed coefficients
    use a diverging map centred at 0, non-negative ones a sequential map; ``log`` plots ``log10 |A_ij|``.
    """
    layers = _layers(A)
    for label, value in layers:
        if not 0 <= batch < value.shape[0]:
            raise ValueError(f"batch: {batch} is out of range for {label or 'A'} with B={value.shape[0]}")
    columns = max(value.shape[1] for _, value in layers) if heads is None else len(heads)
    if columns < 1:
        raise ValueError("heads: no head selected")
    figure = _figure(2.6 * columns + 0.6, 2.4 * len(layers) + (0.4 if title else 0.0))
    grid = figure.subplots(len(layers), columns, squeeze=False)
    for row, (label, value) in enumerate(layers):
        chosen = list(range(value.shape[1])) if heads is None else list(heads)
        for column in range(columns):
            axis = grid[row][column]
            if column >= len(chosen) or not 0 <= chosen[column] < value.shape[1]:
                axis.set_axis_off()
                continue
            head = chosen[column]
            data, style = _heat_map(value[batch, head].detach().to("cpu", torch.float64).numpy(), log)
            image = axis.imshow(data, interpolation="nearest", **style)
            figure.colorbar(image, ax=axis, shrink=0.8).ax.tick_params(labelsize=6)
            axis.set_title(f"{label + ' · ' if label else ''}head {head}", fontsize=8)
            axis.set_xlabel("j (key position)", fontsize=7)
            axis.set_ylabel("i (query position)", fontsize=7)
            axis.tick_params(labelsize=6)
    if title:
        figure.suptitle(title)
    return _save(figure, path)


def _check_points(points: Sequence[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    checked = []
    for index, point in enumerate(points):
        try:
            label, x, y = point
            x, y = float(x), float(y)
        except (TypeError, ValueError):
            raise ValueError(
                f"points[{index}]: expected (label, near_zero_fraction, accuracy), got {point!r}"
            ) from None
        if not (math.isfinite(x) and math.isfinite(y)):
            raise ValueError(f"points[{index}]: expected finite numbers, got {point!r}")
        checked.append((str(label), x, y))
    if not checked:
        raise ValueError("points: nothing to plot")
    return checked


def plot_principle(
    points: Sequence[tuple[str, float, float]] | Mapping[str, Sequence[tuple[str, float, float]]],
    path: str | Path,
    xlabel: str = "fraction of near-zero coefficients",
    ylabel: str = "accuracy",
    title: str | None = None,
    log_x: bool = False,
) -> Path:
    """Accuracy against the near-zero fraction across runs (Sieber et al. 2025 Fig. 1; Fig. 7
    with ``log_x`` and ratios).

    ``points``: ``(label, near_zero_fraction, accuracy)`` per run, e.g. the readout map as label; runs with the
    same label share a colour and a legend entry.  A mapping ``panel title → points`` draws one panel each (one
    per task, say) side by side.
    """
    panels = dict(points) if isinstance(points, Mapping) else {"": points}
    if not panels:
        raise ValueError("points: nothing to plot")
    checked = {panel: _check_points(values) for panel, values in panels.items()}
    if log_x and any(x <= 0 for values in checked.values() for _, x, _ in values):
        raise ValueError("points: log_x needs positive x values")
    figure = _figure(4.2 * len(checked) + 0.8, 3.8)
    axes = figure.subplots(1, len(checked), squeeze=False)[0]
    labels = list(dict.fromkeys(label for values in checked.values() for label, _, _ in values))
    markers = "osD^vP*Xh<>"
    for axis, (panel, values) in zip(axes, checked.items()):
        for index, label in enumerate(labels):
            xs = [x for name, x, _ in values if name == label]
            ys = [y for name, _, y in values if name == label]
            if xs:
                axis.scatter(xs, ys, label=label, marker=markers[index % len(markers)], s=40, color=f"C{index}")
        if log_x:
            axis.set_xscale("log")
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.grid(True, alpha=0.3)
        if max(map(len, labels)) > 24:  # long labels (what a sweep varies) go below the axes, not over points
            axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
        else:
            axis.legend(fontsize=7, loc="best")
        if panel:
            axis.set_title(panel, fontsize=9)
    if title:
        figure.suptitle(title)
    return _save(figure, path)


def plot_accuracy_grid(
    values: Any,
    row_labels: Sequence[Any],
    column_labels: Sequence[Any],
    path: str | Path,
    row_name: str = "state expansion n",
    column_name: str = "model size d",
    title: str | None = None,
    percent: bool = True,
) -> Path:
    """A grid of accuracies with the value in each cell (Sieber et al. 2024 Fig. 5 style: rows n, columns d).

    ``values`` ``[rows, columns]`` (array-like; NaN cells stay blank) in [0, 1]; ``percent`` prints them in %.
    """
    grid = np.asarray(values, dtype=np.float64)
    if grid.ndim != 2 or grid.shape != (len(row_labels), len(column_labels)):
        raise ValueError(
            f"values: expected shape [{len(row_labels)}, {len(column_labels)}] (rows × columns), got {list(grid.shape)}"
        )
    figure = _figure(max(3.6, 1.0 + 0.9 * grid.shape[1]), 1.0 + 0.7 * grid.shape[0])  # wide enough for a title
    axis = figure.subplots()
    axis.imshow(np.ma.masked_invalid(grid), cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        if np.isfinite(value):
            axis.text(j, i, f"{100 * value:.0f}" if percent else f"{value:.2g}", ha="center", va="center", fontsize=8)
    axis.set_xticks(range(grid.shape[1]), [str(label) for label in column_labels])
    axis.set_yticks(range(grid.shape[0]), [str(label) for label in row_labels])
    axis.set_xlabel(column_name)
    axis.set_ylabel(row_name)
    if title:
        axis.set_title(title, fontsize=9)
    return _save(figure, path)


def plot_bars(
    panels: Mapping[str, Mapping[str, Sequence[tuple[Any, float, float]]]],
    path: str | Path,
    xlabel: str,
    ylabel: str = "accuracy",
    title: str | None = None,
    percent: bool = True,
) -> Path:
    """Grouped bars with error bars, one panel per key of ``panels`` (Sieber et al. 2024 Figs. 1–3 style: accuracy per
    model size or state expansion, one bar per model).

    ``panels[panel][series]``: ``(x, value, error)`` per bar group — ``value`` in [0, 1] (NaN: no bar) and
    ``error`` the half-height of its error bar (the standard error over seeds; 0 draws none).
    """
    if not panels or not any(panels.values()):
        raise ValueError("panels: nothing to plot")
    figure = _figure(0.6 + 3.6 * len(panels), 3.4)
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for axis, (name, series) in zip(axes, panels.items()):
        xs = list(dict.fromkeys(x for bars in series.values() for x, _, _ in bars))
        width = 0.8 / max(1, len(series))
        for index, (label, bars) in enumerate(series.items()):
            at = {x: (value, error) for x, value, error in bars}
            positions = [xs.index(x) + (index - (len(series) - 1) / 2) * width for x in at]
            values = [at[x][0] * (100 if percent else 1) for x in at]
            errors = [at[x][1] * (100 if percent else 1) for x in at]
            axis.bar(positions, values, width, yerr=errors, label=label, capsize=2)
        axis.set_xticks(range(len(xs)), [str(x) for x in xs])
        axis.set_xlabel(xlabel)
        axis.set_title(name, fontsize=9)
        axis.set_ylim(0, 100 if percent else None)
        axis.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel(f"{ylabel} (%)" if percent else ylabel)
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, hiding none
    if title:
        figure.suptitle(title, fontsize=10)
    return _save(figure, path)


def plot_curves(
    panels: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]],
    path: str | Path,
    xlabel: str,
    ylabels: Mapping[str, str] | None = None,
    logx: bool = True,
    logy: bool = True,
    title: str | None = None,
) -> Path:
    """Lines with markers, one panel per key of ``panels`` (e.g. state bytes and time per token against the
    context length, one line per model): ``panels[panel][series]`` is a list of ``(x, y)``; ``ylabels[panel]``
    labels a panel's y axis (default: the panel's name); log axes by default."""
    if not panels or not any(series for series in panels.values()):
        raise ValueError("panels: nothing to plot")
    from matplotlib.ticker import NullFormatter

    figure = _figure(0.6 + 3.6 * len(panels), 3.2)
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for axis, (name, series) in zip(axes, panels.items()):
        for label, points in series.items():
            xs, ys = zip(*sorted(points)) if points else ((), ())
            axis.plot(xs, ys, marker="o", markersize=3, label=label)
        axis.set_xscale("log" if logx else "linear")
        axis.set_yscale("log" if logy else "linear")
        ticks = sorted({x for points in series.values() for x, _ in points})
        axis.set_xticks(ticks, [f"{x:g}" for x in ticks])  # the measured x values, no crowded minor labels
        for minor in (axis.xaxis, axis.yaxis):
            minor.set_minor_formatter(NullFormatter())
        axis.set_xlabel(xlabel)
        axis.set_ylabel((ylabels or {}).get(name, name))
        axis.grid(True, alpha=0.3)
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if title:
        figure.suptitle(title, fontsize=10)
    return _save(figure, path)
