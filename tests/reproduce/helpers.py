"""Hand-made result rows for the claim predicates of the reproductions, and the runs of the pilots under
``examples/pilots/`` beside those of the reproduction scale they follow up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqdyn.reproduce.base import Reproduction, Results
from seqdyn.train.store import flatten

PILOTS = Path(__file__).resolve().parents[2] / "examples" / "pilots"


def row(best: float | None, status: str = "finished", reason: str | None = None, **keys: Any) -> dict[str, Any]:
    """One run's row: dotted keys given with ``__`` for ``.`` (``model__mixer="s6"``)."""
    values = {key.replace("__", "."): value for key, value in keys.items()}
    name = ", ".join(f"{key}={value}" for key, value in values.items())
    return {
        "name": name,
        "run_id": str(abs(hash(name)))[:12],
        "status": status,
        "reason": reason,
        "best": best,
        "final": best,
        "steps": 10,
        "wall_time": 1.0,
        **values,
    }


def entry_keys(entry: dict[str, Any]) -> dict[str, Any]:
    """A ``model`` sweep-axis entry as :func:`row` keywords (``model__mixer_options__readout="exp"``, ...)."""
    return {key.replace(".", "__"): value for key, value in flatten({"model": entry}).items()}


def results(rows: list[dict[str, Any]], scale: str = "cpu") -> Results:
    return Results(scale, tuple(rows))


#: the pilots ran before the MQAR reproductions took the DSF configs' ``random_non_queries: False``: they leave it
#: at the task's default (random fillers)
FILLERS_THEN = {"random_non_queries": None}
#: the pilots ran before the MQAR reproductions took Zoology's initialization (std 0.02, and the mixers' own
#: parameters drawn too: ``keep_mixer_init: false``): they drew the weights with std 0.1 and kept those parameters
INIT_THEN = {"init_std": 0.1, "keep_mixer_init": True}


def _update(options: dict[str, Any], changes: dict[str, Any] | None) -> None:
    """``options`` with ``changes``, a value None leaving the option out (its default, as a config that omits it)."""
    for name, value in (changes or {}).items():
        if value is None:
            options.pop(name, None)
        else:
            options[name] = value


def runs_by_key(
    configs,
    train: dict | None = None,
    mixer_options: dict | None = None,
    key=("model.mixer", "optimizer.lr", "train.seed"),
    task_params: dict | None = None,
    model: dict | None = None,
) -> dict[tuple, dict[str, Any]]:
    """Canonical run configs (their names left out) by the dotted ``key`` paths, with ``train``, ``mixer_options``,
    ``task_params`` and ``model`` updated (a value ``None``: left out): what a pilot should equal once its deliberate
    changes are undone."""
    runs = {}
    for config in configs:
        canonical = config.canonical()
        canonical.pop("name")
        canonical["train"].update(train or {})
        _update(canonical["model"]["mixer_options"], mixer_options)
        _update(canonical["task"]["params"], task_params)
        _update(canonical["model"], model)
        values = []
        for path in key:
            value = canonical
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else None  # None: the run has no such key
            values.append(value)
        runs[tuple(values)] = canonical
    return runs


def pilot_and_scale_runs(pilot: str, reproduction: Reproduction, scale: str = "cpu") -> tuple[list, list]:
    """The runs of ``examples/pilots/<pilot>`` and those of ``reproduction`` at ``scale``."""
    from seqdyn.reproduce.runner import named_sweeps
    from seqdyn.train.config import load_config
    from seqdyn.train.sweep import expand

    scale_runs = [config for sweep in named_sweeps(reproduction, scale) for config in sweep.expand()]
    return expand(load_config(PILOTS / pilot)), scale_runs


def assert_verdict(claims, name: str, data: Results, verdict: str) -> None:
    """The claim named ``name`` among ``claims`` decides ``verdict`` on ``data`` (the outcome shown if not)."""
    outcome = next(claim for claim in claims if claim.name == name).decide(data)
    assert outcome.verdict == verdict, outcome
