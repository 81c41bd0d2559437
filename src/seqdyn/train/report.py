"""Reports on a results store: run tables, best-over-learning-rate tables and figures.

``run_rows`` gives one row per run with the hyper-parameters that vary across the selected runs (dotted keys
such as ``model.mixer``, ``optimizer.lr``, ``model.d_model``); ``best_over`` keeps, for each combination of the
other varying hyper-parameters, the run with the best final metric over the learning rate (the number the MQAR
protocol of Zoology and Sieber et al. 2024 reports); ``render`` prints rows as a table, CSV or JSON; ``plot_grid`` draws
the accuracy grid of Sieber et al. 2024 Fig. 5 (mixers × model width, best over lr, values written in the cells) and
``plot_curves`` the primary metric against the step. matplotlib is imported only by the plotting functions.

A row is a dict: ``run_id``, ``name``, ``status``, the varying hyper-parameters, ``metric`` (its name),
``final``, ``best``, ``steps``, ``wall_time``, the model's sizes (:func:`model_sizes`), ``backend`` (the backend
its layers computed with, only where a run of the selection recorded one) and ``_config`` (the resolved config,
which ``render`` omits).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqdyn.train.store import FINAL_STATUSES, RunRecord, Store, flatten

FORMATS = ("table", "csv", "json")
PLOT_SUFFIXES = (".png", ".pdf", ".svg")
LR_KEY = "optimizer.lr"
METRIC_COLUMNS = ("metric", "final", "best", "steps", "wall_time")
ID_COLUMNS = ("run_id", "name", "status")
BACKEND_COLUMN = "backend"
#: the size columns of a run: its parameters, those outside the token embedding and the lm head (which count
#: the vocabulary, not the mixer), and the floats its mixers keep per sequence after the task's length
SIZE_COLUMNS = ("parameters", "non_embedding", "state_floats")
BEST_FLAG = "best_over_lr"
EVAL_SPLITS = ("test", "valid")  # the splits a run's curve and metric come from, in order of preference
_MISSING = object()


# --- rows -----------------------------------------------------------------------------------------------------
def run_rows(store: Store, sweep: str | None = None) -> list[dict[str, Any]]:
    """One row per run (of ``sweep``, or all): id, name, status, the varying hyper-parameters, the metric's name,
    final and best value, steps and wall time, and the backend of its layers when a run recorded one. A run without
    a recorded final metric (still running, or interrupted) shows the latest and best value of its evaluations."""
    records = store.runs(sweep=sweep)
    configs = [_hyper_parameters(record.config) for record in records]
    varying = varying_keys(configs)
    recorded = any(record.backends for record in records)
    rows = []
    for record, config in zip(records, configs):
        row: dict[str, Any] = {"run_id": record.id, "name": record.name, "status": record.status}
        row.update({key: config.get(key) for key in varying})
        row.update(_metric_columns(store, record))
        row.update(model_sizes(record.config))
        if recorded:
            row[BACKEND_COLUMN] = describe_backends(record.backends)
        row["_config"] = record.config
        rows.append(row)
    return rows


def unfound_mixers(rows: list[dict[str, Any]]) -> list[str]:
    """One line for each run whose mixer this process cannot find any more — its module moved or deleted, its
    import path wrong, or a name that ``seqdyn.mixers.register`` gave in the process that trained it — naming
    the run and the import path; ``seqdyn inspect`` cannot load such a run."""
    from seqdyn import mixers

    problems: dict[str, str | None] = {}
    lines = []
    for row in rows:
        names = (row["_config"].get("model") or {}).get("mixer")
        for name in dict.fromkeys(names if isinstance(names, list) else [names]):
            if isinstance(name, str) and name not in problems:
                try:
                    problems[name] = mixers.get(name) and None
                except ValueError as error:
                    problems[name] = str(error)
            if problems.get(name):
                lines.append(f"run {row['run_id']}: {problems[name]}; `seqdyn inspect` cannot load it")
                break
    return lines


def describe_backends(backends: list[str] | None) -> str | None:
    """The backends a run's layers computed with: one name when every layer used it, else one name per layer
    joined by commas; None when the run recorded none."""
    if not backends:
        return None
    return backends[0] if len(set(backends)) == 1 else ",".join(backends)


def varying_keys(configs: list[dict[str, Any]]) -> list[str]:
    """The dotted keys, sorted, whose value is not the same in every flattened config (missing counts as None)."""
    keys: list[str] = []
    for config in configs:
        keys.extend(key for key in config if key not in keys)
    return sorted(key for key in keys if len({_hashable(config.get(key)) for config in configs}) > 1)


def run_labels(configs: list[dict[str, Any]], exclude: Iterable[str] = ()) -> list[str]:
    """A legend label per run config: the hyper-parameters that vary across ``configs`` (but ``exclude``, and
    seeds: repetitions share a label), each by the last part of its dotted key unless two share it, e.g.
    ``"mixer=custom, readout=relu"``, those a run does not set left out; the mixer's name where nothing else
    varies."""
    flat = [_hyper_parameters(config) for config in configs]
    keys = [key for key in varying_keys(flat) if key not in set(exclude) and not key.endswith("seed")]
    short = {key: key.rsplit(".", 1)[-1] for key in keys}
    names = {key: name if list(short.values()).count(name) == 1 else key for key, name in short.items()}
    labels = []
    for config, values in zip(configs, flat):
        mixer = (config.get("model") or {}).get("mixer", "?")
        fallback = mixer if isinstance(mixer, str) else "+".join(map(str, mixer))
        labels.append(
            ", ".join(f"{names[key]}={_label(values[key])}" for key in keys if values.get(key) is not None) or fallback
        )
    return labels


def hyper_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The hyper-parameter columns of rows made by :func:`run_rows`."""
    fixed = set(ID_COLUMNS) | set(METRIC_COLUMNS) | set(SIZE_COLUMNS) | {BEST_FLAG, BACKEND_COLUMN}
    keys: list[str] = []
    for row in rows:
        keys.extend(key for key in row if key not in fixed and not key.startswith("_") and key not in keys)
    return keys


def _hyper_parameters(config: dict[str, Any]) -> dict[str, Any]:
    """The flattened resolved config without its name (sweep runs differ in name by construction)."""
    return flatten({key: value for key, value in config.items() if key != "name"})


def _metric_columns(store: Store, record: RunRecord) -> dict[str, Any]:
    """Metric name, final and best value as the run recorded them; for what it did not record, its evaluations
    tell (a run still going shows its latest value as final; a failed run only its best)."""
    name, final, best = record.metric_name, _number(record.final_metric), _number(record.best_metric)
    if final is None or best is None:
        name = name or _task_info(record.config)[0]
        values = [v for _, v in _curve(store, record.id, name)[1] if not math.isnan(v)]
        if values:
            unfinished = record.status not in FINAL_STATUSES
            final = values[-1] if final is None and unfinished else final
            best = (max(values) if _task_info(record.config)[1] else min(values)) if best is None else best
    return {"metric": name, "final": final, "best": best, "steps": record.step, "wall_time": record.wall_time}


def _curve(store: Store, run_id: str, metric: str) -> tuple[str | None, list[tuple[int, float]]]:
    """``(split, [(step, value), ...])`` of one metric of one run, from the preferred evaluation split."""
    by_split: dict[str, list[tuple[int, float]]] = {}
    for row in store.metrics(run_id=run_id):
        if row.name == metric:
            by_split.setdefault(row.split, []).append((row.step, row.value))
    for split in (*EVAL_SPLITS, *sorted(set(by_split) - {"train"}), "train"):
        if split in by_split:
            return split, by_split[split]
    return None, []


# --- best over a key --------------------------------------------------------------------------------------------
def best_over(rows: list[dict[str, Any]], key: str = LR_KEY) -> list[dict[str, Any]]:
    """For each combination of the other varying hyper-parameters, the row with the best final metric over
    ``key`` (higher or lower is better as the run's task says). A combination without any final metric keeps
    its first row. Order: first appearance of each combination."""
    others = [k for k in hyper_keys(rows) if k != key]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(_hashable(row.get(k)) for k in others), []).append(row)
    return [_best(group) for group in groups.values()]


def _best(group: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [row for row in group if _number(row.get("final")) is not None]
    if not scored:
        return group[0]
    sign = {id(row): (1.0 if higher_is_better(row) else -1.0) for row in scored}
    return max(scored, key=lambda row: sign[id(row)] * row["final"])


def higher_is_better(row: dict[str, Any]) -> bool:
    """Whether a larger metric is better for this row's run: its task's ``spec.higher_is_better``."""
    config = row.get("_config")
    if config is None:
        raise ValueError("best_over: rows need their resolved config (_config); make them with run_rows")
    return _task_info(config)[1]


def model_sizes(config: dict[str, Any]) -> dict[str, int | None]:
    """A run's :data:`SIZE_COLUMNS`, from its resolved config (the model built once per model and task; None where
    it cannot be built here, e.g. a corpus that moved)."""
    model, task = config.get("model") or {}, config.get("task") or {}
    return dict(zip(SIZE_COLUMNS, _sizes(json.dumps(model, sort_keys=True), json.dumps(task, sort_keys=True))))


@functools.lru_cache(maxsize=256)
def _sizes(model_json: str, task_json: str) -> tuple[int | None, int | None, int | None]:
    from seqdyn import tasks
    from seqdyn.models import build_model
    from seqdyn.models.config import ModelConfig

    task = json.loads(task_json)
    try:
        spec = tasks.build(task.get("name", ""), **(task.get("params") or {})).spec
        model = build_model(ModelConfig.model_validate(json.loads(model_json)), spec)
    except (ValueError, TypeError, OSError):
        return None, None, None
    unique = {id(p): p for p in model.parameters()}
    total = sum(p.numel() for p in unique.values())
    vocabulary = (
        {id(p): p for m in (model.embedding, model.head) for p in m.parameters()} if spec.input_kind == "tokens" else {}
    )
    state = sum(block.mixer.state_size(spec.input_len) for block in model.blocks if hasattr(block, "mixer"))
    return total, total - sum(p.numel() for p in vocabulary.values()), state


def _task_info(config: dict[str, Any]) -> tuple[str, bool]:
    task = config.get("task") or {}
    return _task_spec(task.get("name", ""), json.dumps(task.get("params") or {}, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _task_spec(name: str, params_json: str) -> tuple[str, bool]:
    """``(primary metric, higher is better)`` of a task, built once per (name, parameters)."""
    from seqdyn import tasks

    try:
        spec = tasks.build(name, **json.loads(params_json)).spec
    except ValueError:  # parameters valid at training time may not be now (a moved corpus): the defaults tell
        try:
            spec = tasks.build(name).spec
        except ValueError as error:
            raise ValueError(f"report: cannot read the metric of task {name!r} ({error})") from None
    return spec.primary_metric, spec.higher_is_better


# --- rendering ----------------------------------------------------------------------------------------------------
def render(rows: list[dict[str, Any]], format: str = "table", title: str = "seqdyn runs") -> str:
    """Rows as a rich table (with a title), CSV, or a JSON list; ``_``-prefixed keys are left out."""
    if format not in FORMATS:
        raise ValueError(f"unknown report format {format!r}; formats: {', '.join(FORMATS)}")
    columns = _columns(rows)
    if format == "csv":
        return _render_csv(rows, columns)
    if format == "json":
        return json.dumps([{c: _json_value(row.get(c)) for c in columns} for row in rows], indent=2)
    return _render_table(rows, columns, title)


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if not key.startswith("_") and key not in columns)
    return columns


def _render_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else _csv_value(row.get(c)) for c in columns])
    return buffer.getvalue()


def _render_table(rows: list[dict[str, Any]], columns: list[str], title: str) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    for column in columns:
        numeric = column in ("final", "best", "steps", "wall_time", *SIZE_COLUMNS) or any(
            isinstance(row.get(column), (int, float)) and not isinstance(row.get(column), bool) for row in rows
        )
        table.add_column(column, justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        table.add_row(*(Text(_text(column, row.get(column))) for column in columns))  # Text: no markup in names
    console = Console(file=io.StringIO(), width=400, color_system=None, force_terminal=False)
    console.print(table)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines()) + "\n"


def _text(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if column in ("final", "best"):
        return f"{value:.4f}"
    if column == "wall_time":
        return f"{value:.1f}s"
    if column in SIZE_COLUMNS:
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _csv_value(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (list, tuple, dict)) else value


def _json_value(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


# --- figures ------------------------------------------------------------------------------------------------------
@dataclass
class GridPanel:
    """One panel of the accuracy grid: ``values[i][j]`` is the best-over-lr final metric of row value
    ``rows[i]`` and column value ``cols[j]`` (NaN where no run has one); ``facet`` names the panel's fixed
    values of the other varying hyper-parameters (e.g. the task and the state size, as in Sieber et al. 2024 Fig. 5)."""

    facet: dict[str, Any]
    row_key: str
    col_key: str
    rows: list[Any]
    cols: list[Any]
    values: list[list[float]]
    run_ids: list[list[str | None]]
    metric: str | None
    higher_is_better: bool = True
    title: str = field(default="")


@dataclass
class Curve:
    """The primary metric of one run against the step, on ``split``."""

    run_id: str
    name: str
    metric: str
    split: str | None
    steps: list[int]
    values: list[float]


def grid_data(
    store: Store,
    row_key: str = "model.mixer",
    col_key: str = "model.d_model",
    sweep: str | None = None,
    key: str = LR_KEY,
) -> list[GridPanel]:
    """The panels :func:`plot_grid` draws: best over ``key`` per (row value, column value) cell, one panel per
    combination of the other varying hyper-parameters (those that merely follow the row or column value, such
    as a mixer's own options, stay out of the facets)."""
    rows = _all_key_rows(store, sweep, (row_key, col_key))
    best = best_over(rows, key)
    facet_keys = [
        k
        for k in hyper_keys(rows)
        if k not in (row_key, col_key, key) and not _follows(rows, k, row_key) and not _follows(rows, k, col_key)
    ]
    panels: dict[tuple, list[dict[str, Any]]] = {}
    for row in best:
        panels.setdefault(tuple(_hashable(row.get(k)) for k in facet_keys), []).append(row)
    return [_panel(group, facet_keys, row_key, col_key, rows) for group in panels.values()]


def _all_key_rows(store: Store, sweep: str | None, keys: Iterable[str]) -> list[dict[str, Any]]:
    """run_rows, plus the grid's keys even where they do not vary (a one-row or one-column grid)."""
    rows = run_rows(store, sweep)
    if not rows:
        raise ValueError(f"no runs in the store {store.path}" + (f" for sweep {sweep!r}" if sweep else ""))
    for row in rows:
        config = _hyper_parameters(row["_config"])
        for key in keys:
            value = config.get(key, _MISSING)
            if value is _MISSING:
                raise ValueError(f"plot: the runs' configs have no {key!r}")
            row[key] = value
    return rows


def _follows(rows: list[dict[str, Any]], key: str, by: str) -> bool:
    """Whether ``key`` takes one value per value of ``by`` (so it describes ``by``, like a mixer's options)."""
    seen: dict[Any, Any] = {}
    for row in rows:
        value = _hashable(row.get(key))
        if seen.setdefault(_hashable(row.get(by)), value) != value:
            return False
    return True


def _panel(
    group: list[dict[str, Any]], facet_keys: list[str], row_key: str, col_key: str, all_rows: list[dict[str, Any]]
) -> GridPanel:
    row_values = _ordered(r[row_key] for r in all_rows)
    col_values = _ordered(r[col_key] for r in all_rows)
    values = [[math.nan] * len(col_values) for _ in row_values]
    run_ids: list[list[str | None]] = [[None] * len(col_values) for _ in row_values]
    for row in group:
        i = [_hashable(v) for v in row_values].index(_hashable(row[row_key]))
        j = [_hashable(v) for v in col_values].index(_hashable(row[col_key]))
        final = _number(row.get("final"))
        values[i][j] = math.nan if final is None else final
        run_ids[i][j] = row["run_id"]
    facet = {k: group[0].get(k) for k in facet_keys}
    metric = next((r["metric"] for r in group if r.get("metric")), None)
    title = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in facet.items())
    return GridPanel(
        facet, row_key, col_key, row_values, col_values, values, run_ids, metric, higher_is_better(group[0]), title
    )


def _ordered(values: Iterable[Any]) -> list[Any]:
    """Distinct values: sorted when all are numbers, else in order of first appearance."""
    distinct: list[Any] = []
    for value in values:
        if _hashable(value) not in [_hashable(v) for v in distinct]:
            distinct.append(value)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in distinct):
        return sorted(distinct)
    return distinct


def plot_grid(
    store: Store,
    path: str | os.PathLike,
    row_key: str = "model.mixer",
    col_key: str = "model.d_model",
    sweep: str | None = None,
) -> list[GridPanel]:
    """Draw the accuracy grid of Sieber et al. 2024 Fig. 5 (rows × columns, best over lr per cell, values in the cells;
    accuracies in %) to ``path`` (.png, .pdf or .svg); returns the panels drawn."""
    path = _plot_path(path)
    panels = grid_data(store, row_key, col_key, sweep)
    figure, axes = _figure(len(panels), width=1.1 * len(panels[0].cols) + 2.5, height=0.6 * len(panels[0].rows) + 1.5)
    for ax, panel in zip(axes, panels):
        _draw_panel(ax, panel)
    figure.savefig(path, bbox_inches="tight")
    return panels


def _draw_panel(ax: Any, panel: GridPanel) -> None:
    import numpy as np

    values = np.array(panel.values, dtype=float)
    percent = _is_accuracy(panel.metric, values)
    shown = values * 100 if percent else values
    cmap = "viridis" if panel.higher_is_better else "viridis_r"
    limits = {"vmin": 0, "vmax": 100} if percent else {}
    image = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, aspect="auto", **limits)
    for (i, j), value in np.ndenumerate(shown):
        text = "-" if np.isnan(value) else (f"{value:.1f}" if percent else f"{value:.3g}")
        ax.text(j, i, text, ha="center", va="center", fontsize=9, color=_ink(image, value))
    ax.set_xticks(range(len(panel.cols)), [str(c) for c in panel.cols])
    ax.set_yticks(range(len(panel.rows)), [_label(r) for r in panel.rows])
    ax.set_xlabel(panel.col_key)
    ax.set_ylabel(panel.row_key)
    metric = f"{panel.metric} (%)" if percent else (panel.metric or "metric")
    ax.set_title(f"{panel.title}\nbest {metric} over lr" if panel.title else f"best {metric} over lr", fontsize=9)


def _ink(image: Any, value: float) -> str:
    """Black on light cells, white on dark ones, gray where the cell is empty."""
    if math.isnan(value):
        return "gray"
    red, green, blue, _ = image.cmap(image.norm(value))
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"


def _is_accuracy(metric: str | None, values: Any) -> bool:
    import numpy as np

    finite = values[np.isfinite(values)]
    return bool(metric and "acc" in metric.lower() and (finite.size == 0 or (finite.min() >= 0 and finite.max() <= 1)))


def _label(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def curve_data(store: Store, sweep: str | None = None, metric: str | None = None) -> list[Curve]:
    """Each run's primary metric (or ``metric``) against the step, from its evaluation split."""
    curves = []
    for record in store.runs(sweep=sweep):
        name = metric or record.metric_name or _task_info(record.config)[0]
        split, points = _curve(store, record.id, name)
        curves.append(Curve(record.id, record.name, name, split, [s for s, _ in points], [v for _, v in points]))
    return curves


def plot_curves(
    store: Store, path: str | os.PathLike, sweep: str | None = None, metric: str | None = None
) -> list[Curve]:
    """Draw the primary metric against the step, one line per run and one panel per metric, to ``path``;
    returns the curves drawn."""
    path = _plot_path(path)
    curves = curve_data(store, sweep, metric)
    if not curves:
        raise ValueError(f"no runs in the store {store.path}" + (f" for sweep {sweep!r}" if sweep else ""))
    metrics = _ordered(c.metric for c in curves)
    figure, axes = _figure(len(metrics), width=7.5, height=4.0)
    for ax, name in zip(axes, metrics):
        for curve in (c for c in curves if c.metric == name):
            ax.plot(curve.steps, curve.values, marker="o", markersize=3, label=curve.name)
        ax.set_xlabel("step")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        if len(curves) <= 20:
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    figure.savefig(path, bbox_inches="tight")
    return curves


def plot(store: Store, path: str | os.PathLike, sweep: str | None = None) -> str:
    """The grid when the runs vary in mixer and model width (or in exactly two keys besides the learning
    rate), else the learning curves; returns which (``"grid"`` or ``"curves"``)."""
    keys = grid_keys(run_rows(store, sweep))
    if keys is None:
        plot_curves(store, path, sweep)
        return "curves"
    plot_grid(store, path, *keys, sweep=sweep)
    return "grid"


def grid_keys(rows: list[dict[str, Any]]) -> tuple[str, str] | None:
    """``(row key, column key)`` of the grid the rows call for, or None for curves."""
    varying = [k for k in hyper_keys(rows) if k != LR_KEY]
    if "model.mixer" in varying and "model.d_model" in varying:
        return "model.mixer", "model.d_model"
    if len(varying) == 2:
        return tuple(sorted(varying, key=lambda k: k != "model.mixer"))  # the mixer, if any, labels the rows
    return None


def _plot_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise ValueError(f"plot file {path}: unknown extension {path.suffix!r}; use {', '.join(PLOT_SUFFIXES)}")
    if not path.parent.is_dir():
        raise ValueError(f"plot file {path}: directory {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise ValueError(f"plot file {path}: directory {path.parent} is not writable")
    return path


def _figure(panels: int, width: float, height: float) -> tuple[Any, list[Any]]:
    """A matplotlib figure on the Agg canvas (no pyplot, no global backend) with ``panels`` axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    ncols = min(panels, 4)
    nrows = math.ceil(panels / ncols)
    figure = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(nrows, ncols, squeeze=False).ravel().tolist()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return figure, axes[:panels]


# --- the command ------------------------------------------------------------------------------------------------
def report_command(
    store_path: str | os.PathLike,
    format: str = "table",
    plot_path: str | os.PathLike | None = None,
    sweep: str | None = None,
) -> str:
    """What ``seqdyn report`` prints: the run rows in ``format`` and, when the learning rate varies, the best
    over it (a second table; a ``best_over_lr`` column in CSV and JSON). With ``plot_path`` the figure is drawn
    too (a line saying so ends the table output). Bad input raises a one-line ValueError. A run whose mixer can
    no longer be found (:func:`unfound_mixers`) is one more line: after the table, or on stderr beside CSV and JSON."""
    if format not in FORMATS:
        raise ValueError(f"unknown report format {format!r}; formats: {', '.join(FORMATS)}")
    if plot_path is not None:
        _plot_path(plot_path)
    store = _open_store(store_path)
    try:
        rows = run_rows(store, sweep)
        if not rows:
            where = f" for sweep {sweep!r}" if sweep else ""
            raise ValueError(f"results store {store_path}: no runs{where}")
        text = _report_text(rows, format)
        notes = "".join(f"note: {line}\n" for line in unfound_mixers(rows))
        if format == "table":
            text += notes
        else:
            sys.stderr.write(notes)
        if plot_path is not None:
            kind = plot(store, plot_path, sweep)
            if format == "table":
                text += f"wrote the {kind} figure to {plot_path}\n"
    finally:
        store.close()
    return text


def _open_store(store_path: str | os.PathLike) -> Store:
    path = Path(store_path)
    if not path.exists():
        raise ValueError(f"results store {path}: no such file")
    return Store(path, readonly=True)


def _report_text(rows: list[dict[str, Any]], format: str) -> str:
    lr_varies = LR_KEY in hyper_keys(rows)
    best = best_over(rows, LR_KEY) if lr_varies else []
    if format == "table":
        text = render(rows, "table", title=f"seqdyn runs ({len(rows)})")
        if lr_varies:
            text += "\n" + render(best, "table", title=f"best over {LR_KEY} ({len(best)} of {len(rows)} runs)")
        return text
    if lr_varies:
        winners = {row["run_id"] for row in best}
        rows = [{**row, BEST_FLAG: row["run_id"] in winners} for row in rows]
    return render(rows, format)
