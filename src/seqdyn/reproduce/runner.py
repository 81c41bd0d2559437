"""Running a reproduction through the sweep machinery and writing what it found.

:func:`run` trains every run of a reproduction's sweeps that the store does not hold finished yet (a killed
reproduction started again skips finished runs and resumes the others from their checkpoints), reads them back
as :class:`~seqdyn.reproduce.base.Results`, decides every claim and writes ``OUT/NAME/``:

- ``results.csv`` — one row per run (the hyper-parameters that vary, status, best and final metric, steps,
  wall time);
- ``table.md`` — the reproduction's table in the paper's layout, the claims with the paper's numbers beside ours
  and their verdicts, what the scale reduced and why, and the command that regenerates it;
- ``figure.png`` — the paper's figure style;
- ``verdict.json`` — every claim's verdict, the numbers that decided it and the reason where it is inconclusive,
  and where it was computed: date, commit, device (the GPU's name where CUDA ran the runs, else "cpu"), torch's and
  CUDA's versions;
- ``timing.json`` — the wall time of the call that ran each scale, with its date, commit and workers (a published
  folder's is what :attr:`~seqdyn.reproduce.base.Reproduction.wall_time` reads).

:func:`verdict_rows` reads the ``verdict.json`` files under an output folder back (``seqdyn reproduce report``).
"""

from __future__ import annotations

import csv
import datetime
import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from seqdyn.reproduce.base import (
    CPU_BUDGET_S,
    RESULT_STATUSES,
    TIMING,
    Reproduction,
    Results,
    check_scale,
    read_timing,
    sweep_name,
)
from seqdyn.reproduce.claims import BUDGET, INCONCLUSIVE, Cause, Outcome, control_state, control_value, counted
from seqdyn.reproduce.measured import collecting_missing
from seqdyn.reproduce.seeds import (
    affords_one_more_seed,
    check_max_seeds,
    default_max_seeds,
    needing_seeds,
    with_one_more_seed,
    with_stored_seeds,
)
from seqdyn.train.config import RunConfig, SweepConfig
from seqdyn.train.report import varying_keys
from seqdyn.train.store import DIVERGED, Store, flatten
from seqdyn.train.sweep import DONE, expand, run_sweep
from seqdyn.train.timelimit import time_is_up

OUTPUTS = ("results.csv", "table.md", "figure.png", "verdict.json", TIMING)
#: the ``train.device`` of the scales that do not keep the CPU: ``paper`` on the GPU where there is one, ``gpu`` on it
DEVICES = {"paper": "auto", "gpu": "cuda"}
#: the hyper-parameters every ``results.csv`` shows, beside those that vary
ALWAYS = ("model.mixer", "model.d_model", "task.name", "optimizer.lr", "train.seed")


@dataclass(frozen=True)
class Written:
    """What :func:`run` wrote: the folder, every claim's outcome by name, and the wall time of the call that
    trained the runs (this one, unless every run was finished before it and the folder held their outputs), which
    leaves out the ``runs_before`` runs that held results when that call began."""

    folder: Path
    outcomes: dict[str, Outcome]
    elapsed_s: float
    runs_before: int = 0


#: the statuses of a run that has neither a result nor a final failure: a later call trains or resumes it
UNFINISHED = ("missing", "pending", "running", "interrupted")


def named_sweeps(reproduction: Reproduction, scale: str, data: str | Path | None = None) -> list[SweepConfig]:
    """The reproduction's sweeps at ``scale`` (a ``corpus`` reproduction's on ``data``, which every scale but
    ``smoke`` needs), each renamed ``NAME/SCALE/PART`` as the store keeps it.  The ``paper`` scale trains on the
    GPU where there is one (``train.device`` ``auto``), the ``gpu`` scale on the GPU (``cuda``); ``smoke`` and
    ``cpu`` keep the CPU.  A scale the reproduction does not have (:attr:`~Reproduction.scales`) is refused."""
    check_has_scale(reproduction, scale)
    if not reproduction.corpus:
        sweeps = reproduction.sweeps(scale)
    elif data is None and scale != "smoke":
        raise ValueError(
            f"--data: {reproduction.name} at --scale {scale} trains on {reproduction.data_help}; give "
            f"its path with --data PATH"
        )
    else:
        sweeps = reproduction.sweeps(scale, data)
    parts = [sweep.name for sweep in sweeps]
    if len(set(parts)) != len(parts):
        raise ValueError(f"{reproduction.name}: its sweeps need distinct names, got {parts}")
    device = {"device": DEVICES[scale]} if scale in DEVICES else {}
    return [
        sweep.model_copy(
            update={"name": sweep_name(reproduction, scale, sweep), "train": sweep.train.model_copy(update=device)}
        )
        for sweep in sweeps
    ]


def check_has_scale(reproduction: Reproduction, scale: str) -> str:
    """``scale``, where it is a scale the reproduction has; else one line naming those that have it."""
    check_scale(scale)
    if scale in reproduction.scales:
        return scale
    from seqdyn.reproduce import get, names

    having = [name for name in names() if scale in get(name).scales]
    raise ValueError(
        f"--scale {scale}: {reproduction.name} has no {scale} scale (the cpu scale decides its claims); "
        f"the reproductions with one: {', '.join(having) or 'none'}"
    )


def check_gpu_at_hand(scale: str) -> None:
    """Refuse a scale whose runs train on ``cuda`` on a machine without CUDA, in one line."""
    if DEVICES.get(scale) == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--scale {scale}: its runs train on a GPU and this machine has none; run it where one is")


def check_store(store: Store, sweeps: list[SweepConfig]) -> None:
    """Refuse a store that holds runs under one of these sweep names whose configs are not this version's (their
    results would be mixed with this version's, or silently dropped); nothing in the store changes."""
    for sweep in sweeps:
        expected = {run.run_id for run in expand(sweep)}
        stray = [record for record in store.runs(sweep=sweep.name) if record.id not in expected]
        if stray:
            raise ValueError(
                f"--store {store.path}: sweep {sweep.name!r} holds {len(stray)} run(s) of another "
                f"config (e.g. {stray[0].name!r}, id {stray[0].id}); give another --store, or remove "
                f"those runs to redo them"
            )


def run(
    reproduction: Reproduction,
    scale: str,
    store_path: str | Path,
    out: str | Path = "reproductions",
    workers: int = 1,
    use_ray: bool = False,
    progress: bool = True,
    retry_failed: bool = False,
    data: str | Path | None = None,
    max_seeds: int | None = None,
    stack: int = 1,
) -> Written:
    """Train what is missing of the reproduction at ``scale`` (on the corpus ``data``, where it needs one) into the
    store (and, with ``retry_failed``, what failed for another reason than divergence), add seeds to the sweeps
    behind each claim its seeds left open until it is decided or ``max_seeds`` are reached
    (:mod:`seqdyn.reproduce.seeds`; None: :func:`~seqdyn.reproduce.seeds.default_max_seeds`), then write
    ``OUT/NAME/``.  ``stack``: runs per batched model (:mod:`seqdyn.train.stacked`)."""
    start = time.monotonic()
    check_gpu_at_hand(check_has_scale(reproduction, scale))
    store = Store(store_path)
    sweeps = with_stored_seeds(store, named_sweeps(reproduction, scale, data))
    check_store(store, sweeps)
    cap = default_max_seeds(scale, sweeps) if max_seeds is None else check_max_seeds(max_seeds)
    budget = CPU_BUDGET_S if max_seeds is None and scale == "cpu" else None
    rows = collect(store, sweeps, scale).rows
    runs_before = sum(row["status"] in RESULT_STATUSES for row in rows)
    left = [row for row in rows if _to_train(row, retry_failed)]

    retrained: set[str] = set()
    train = partial(
        _train_and_measure,
        reproduction,
        store,
        store_path,
        scale,
        retrained,
        dict(workers=workers, use_ray=use_ray, progress=progress, retry_failed=retry_failed, stack=stack),
    )
    results, grown = _seeded_until_decided(reproduction, sweeps, train, cap, (budget, workers))
    left += grown + sorted(retrained)
    elapsed = time.monotonic() - start
    earlier = None
    if not left and reproduction.trains:  # nothing trained: the outputs keep the wall time of the call that did
        earlier = _earlier_timing(Path(out) / reproduction.name, results)
        elapsed, runs_before = earlier or (elapsed, runs_before)
    written = write(reproduction, results, Path(out), elapsed, runs_before)
    if earlier is None or scale not in read_timing(written.folder).get("scales", {}):
        record_timing(written.folder, scale, elapsed, runs_before, workers)
    return written


def _to_train(row: dict[str, Any], retry_failed: bool) -> bool:
    """Whether a run of the reproduction is trained by this call: it has no result, and it did not fail (for another
    reason than divergence, with ``retry_failed``)."""
    return row["status"] not in RESULT_STATUSES and (retry_failed or row["status"] not in ("failed", DIVERGED))


def _train_and_measure(
    reproduction: Reproduction,
    store: Store,
    store_path: str | Path,
    scale: str,
    retrained: set[str],
    options: dict[str, Any],
    sweeps: list[SweepConfig],
) -> Results:
    """Train ``sweeps`` (``options`` for :func:`~seqdyn.train.sweep.run_sweep`) and measure their results; runs whose
    model must be measured and whose checkpoint is gone, nothing of them kept (:mod:`seqdyn.reproduce.measured`),
    are trained again from the start (added to ``retrained``) and measured then."""
    for sweep in sweeps:
        run_sweep(sweep, store_path, **options)
    collected = collect(store, sweeps, scale)
    check_time_left(reproduction, collected)
    with collecting_missing() as missing:
        measured = reproduction.measure(collected, store_path)
    if not missing:
        return measured
    again = retrained.intersection(missing)
    if again:
        raise ValueError(f"{reproduction.name}: runs {', '.join(sorted(again))} trained again left no checkpoint")
    store.retrain(missing)
    retrained.update(missing)
    return _train_and_measure(reproduction, store, store_path, scale, retrained, options, sweeps)


class TimeLimitReached(Exception):
    """The command's time limit (:mod:`seqdyn.train.timelimit`) stopped a reproduction with runs left: nothing of
    it is written; the same command resumes them."""


def check_time_left(reproduction: Reproduction, results: Results) -> None:
    """Raise :class:`TimeLimitReached` where the time limit has passed and runs of ``results`` are unfinished."""
    unfinished = sum(row["status"] in UNFINISHED for row in results.rows)
    if unfinished and time_is_up():
        raise TimeLimitReached(
            f"{reproduction.name}: time limit reached with {unfinished} of {len(results.rows)} runs unfinished "
            "(stopped at a checkpoint or not started); nothing written for it — the same command resumes them"
        )


def _seeded_until_decided(
    reproduction: Reproduction,
    sweeps: list[SweepConfig],
    train: Callable[[list[SweepConfig]], Results],
    cap: int,
    budget: tuple[float | None, int] = (None, 1),
) -> tuple[Results, list[str]]:
    """``train(sweeps)``, then a seed more for the sweeps behind each claim its seeds left open, trained, until no
    such claim is left, those sweeps run ``cap`` seeds or — where ``budget`` (seconds, workers) gives seconds — the
    next seed would not fit in them (:func:`~seqdyn.reproduce.seeds.affords_one_more_seed`); the results and the
    sweeps that grew (once per seed)."""
    results, grown = train(sweeps), []
    seconds, workers = budget
    while True:
        outcomes = {claim.name: claim.decide(results) for claim in reproduction.claims}
        wider, names = with_one_more_seed(sweeps, needing_seeds(reproduction, results, outcomes), cap)
        if not names or (seconds is not None and not affords_one_more_seed(results, sweeps, names, workers, seconds)):
            return results, grown
        if time_is_up():  # the command's time limit: the next call adds the seed
            return results, grown
        grown += names
        sweeps = wider
        results = train(sweeps)


def record_timing(folder: Path, scale: str, elapsed_s: float, runs_before: int, workers: int) -> None:
    """Write the wall time of the call that ran ``scale`` (and its date, commit, workers and the runs it did not
    train) into ``folder``'s :data:`~seqdyn.reproduce.base.TIMING`, keeping the other scales' and the GPU
    estimate."""
    timing = read_timing(folder) or {"reproduction": folder.name}
    timing.setdefault("scales", {})[scale] = {
        "seconds": round(elapsed_s, 1),
        "date": datetime.date.today().isoformat(),
        "commit": _commit(),
        "workers": workers,
        "runs_before": runs_before,
        "note": "",
    }
    (folder / TIMING).write_text(json.dumps(timing, indent=2, ensure_ascii=False) + "\n")


def _earlier_timing(folder: Path, results: Results) -> tuple[float, int] | None:
    """The wall time (``elapsed_s``) and the ``runs_before`` that ``folder``'s outputs recorded, where they are of
    these very runs (same scale, same run ids); else None."""
    try:
        verdict = json.loads((folder / "verdict.json").read_text())
        with (folder / "results.csv").open() as handle:
            run_ids = {row["run_id"] for row in csv.DictReader(handle)}
    except (OSError, ValueError, KeyError):
        return None
    same = verdict.get("scale") == results.scale and run_ids == {row["run_id"] for row in results.rows}
    if not same or "elapsed_s" not in verdict:
        return None
    return verdict["elapsed_s"], verdict.get("runs_before", 0)


def collect(store: Store, sweeps: list[SweepConfig], scale: str) -> Results:
    """Every run of the sweeps as a row (flattened resolved config plus status and metrics), in sweep order."""
    rows = []
    for sweep in sweeps:
        for config in expand(sweep):
            rows.append(_row(store, config))
    return Results(scale, tuple(rows))


def _row(store: Store, config: RunConfig) -> dict[str, Any]:
    record = store.run(config.run_id)
    row = flatten({key: value for key, value in config.canonical().items() if key != "name"})
    row.update(
        run_id=config.run_id,
        name=config.name,
        status=record.status if record else "missing",
        reason=record.reason if record else None,
        best=record.best_metric if record else None,
        final=record.final_metric if record else None,
        steps=record.step if record else 0,
        wall_time=record.wall_time if record else None,
        curve=_curve(store, record),
    )
    return row


def _curve(store: Store, record) -> tuple[tuple[int, float], ...]:
    """``(step, value)`` of the run's watched test metric at each evaluation (empty before it finished: the name of
    the watched metric is recorded then)."""
    if record is None or not record.metric_name:
        return ()
    return tuple(
        (row.step, row.value) for row in store.metrics(record.id, split="test") if row.name == record.metric_name
    )


def write(reproduction: Reproduction, results: Results, out: Path, elapsed_s: float, runs_before: int = 0) -> Written:
    """``results.csv``, ``table.md``, ``figure.png`` and ``verdict.json`` of these results under ``out/NAME/``;
    ``elapsed_s`` is the wall time of the call that trained them, which left out the ``runs_before`` runs that
    already held results when it began."""
    folder = out / reproduction.name
    folder.mkdir(parents=True, exist_ok=True)
    outcomes = {
        claim.name: with_what_decides(claim.decide(results), reproduction, results.scale, claim.paper_budget)
        for claim in reproduction.claims
    }
    _write_csv(folder / "results.csv", results)
    reproduction.plot(results, folder / "figure.png")
    provenance = _provenance(results, elapsed_s, runs_before)
    (folder / "table.md").write_text(_table_md(reproduction, results, outcomes, provenance))
    verdict = {
        "reproduction": reproduction.name,
        "paper": reproduction.paper,
        "figure": reproduction.figure,
        "scale": results.scale,
        **provenance,
        "claims": [
            {
                "name": claim.name,
                "statement": claim.statement,
                "quote": claim.quote,
                "paper_value": claim.paper_value,
                **outcomes[claim.name].record(),
            }
            for claim in reproduction.claims
        ],
    }
    (folder / "verdict.json").write_text(json.dumps(verdict, indent=2, default=_json_number) + "\n")
    return Written(folder, outcomes, elapsed_s, runs_before)


def _level_words(control: dict[str, Any]) -> str:
    """Where a control's threshold counts from a level the reproduction measured: that level, in words."""
    return "" if control.get("level") is None else f" (the measured level {control['level']:.3g} and its margin)"


def with_what_decides(outcome: Outcome, reproduction: Reproduction, scale: str, paper_budget: str = "") -> Outcome:
    """An *inconclusive (budget)* outcome with what would decide it: the paper's budget (the claim's own,
    ``paper_budget``, else the ``paper`` scale's protocol in the words of its first clause), and the scale the
    project expects to decide it at — ``gpu`` with its estimate where the reproduction has that scale and this is
    a smaller one, else ``paper`` with its estimated cost on one H200; other outcomes as they are."""
    if outcome.cause != BUDGET:
        return outcome
    if scale == "paper":
        return replace(outcome, reason=f"{outcome.reason}; the paper's own budget left it open")
    protocol = paper_budget or reproduction.reductions.get("paper", "").split(";")[0].strip().rstrip(".")
    estimate = reproduction.paper_gpu_estimate
    cost = f"estimated {estimate} on one H200" if estimate else "its cost not estimated yet"
    paper = f"--scale paper — {protocol} ({cost})" if protocol else f"--scale paper ({cost})"
    minutes = getattr(reproduction, "gpu_minutes", None)
    if scale in ("smoke", "cpu") and "gpu" in getattr(reproduction, "scales", ()) and minutes:
        nearer = f"--scale gpu (estimated {minutes:g} min on one H200, one run at a time)"
        return replace(outcome, reason=f"{outcome.reason}; would decide it: {nearer}, else {paper}")
    return replace(outcome, reason=f"{outcome.reason}; would decide it: {paper}")


def _json_number(value: Any) -> Any:
    return float(value) if hasattr(value, "__float__") else str(value)


def _provenance(results: Results, elapsed_s: float, runs_before: int) -> dict[str, Any]:
    """When, from which commit and on what (:func:`hardware`), the runs' summed wall time, how many gave a result,
    the call's wall time and how many runs held a result before it began."""
    run_time = sum(row["wall_time"] or 0.0 for row in results.rows)
    done = sum(row["status"] in DONE for row in results.rows)
    return {
        "date": datetime.date.today().isoformat(),
        "commit": _commit(),
        **hardware(results),
        "runs": len(results.rows),
        "runs_done": done,
        "run_time_s": round(run_time, 1),
        "elapsed_s": round(elapsed_s, 1),
        "runs_before": runs_before,
    }


def hardware(results: Results) -> dict[str, str | None]:
    """What the runs computed on: ``device``, the GPU's name where CUDA ran them (a run whose ``train.device`` is
    not ``cpu``, on a machine with CUDA), else "cpu"; ``torch``, its version; ``cuda``, the CUDA version torch was
    built with (None for a build without CUDA)."""
    on_gpu = torch.cuda.is_available() and any(row.get("train.device", "cpu") != "cpu" for row in results.rows)
    return {
        "device": torch.cuda.get_device_name() if on_gpu else "cpu",
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
    }


def hardware_text(provenance: dict[str, Any]) -> str:
    """A verdict's :func:`hardware` in words, "NVIDIA H200, torch 2.5.1, CUDA 12.4" ("cpu, torch 2.5.1" without
    CUDA); "" for a verdict written before it was recorded."""
    if "device" not in provenance:
        return ""
    cuda = f", CUDA {provenance['cuda']}" if provenance.get("cuda") else ""
    return f"{provenance['device']}, torch {provenance['torch']}{cuda}"


def commit_text(provenance: dict[str, Any]) -> str:
    """A verdict's commit and what it ran on, "3810fbc on NVIDIA H200, torch 2.5.1, CUDA 12.4" (the commit alone
    for a verdict written before :func:`hardware` was recorded), as the report prints it beside the commit."""
    hardware_words = hardware_text(provenance)
    return provenance["commit"] + (f" on {hardware_words}" if hardware_words else "")


def _commit() -> str:
    """The short hash of the checkout this seqdyn runs from ("unknown" outside a git checkout)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _write_csv(path: Path, results: Results) -> None:
    varying = varying_keys([{k: v for k, v in row.items() if "." in k} for row in results.rows])
    keys = list(dict.fromkeys([*ALWAYS, *varying]))
    columns = ["name", "run_id", *keys, "status", "reason", "best", "final", "steps", "wall_time"]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(results.rows)


def seeds_text(seeds: dict[str, int], units: dict[str, str] | None = None) -> str:
    """The seeds that decided a verdict, in words: " — 3 seeds", or per setting where they differ; a setting whose
    values are not one per seed is counted in its unit (``units``: " — 8 seed ranges")."""
    if not seeds:
        return ""
    units = units or {}
    words = {label: counted(count, units.get(label, "seed")) for label, count in seeds.items()}
    if len(set(words.values())) == 1:
        return f" — {next(iter(words.values()))}"
    return " — seeds: " + ", ".join(f"{label} {count}" for label, count in seeds.items())


def _table_md(
    reproduction: Reproduction, results: Results, outcomes: dict[str, Outcome], provenance: dict[str, Any]
) -> str:
    lines = [
        f"# {reproduction.name}: {reproduction.paper}, {reproduction.figure}",
        "",
        reproduction.summary,
        "",
        f"Scale `{results.scale}`: {_work_text(reproduction, provenance)}, {provenance['date']}, commit "
        f"{commit_text(provenance)}." + _resumed_text(provenance),
        "",
        "## Results",
        "",
        reproduction.table(results),
        "",
        "## Claims",
        "",
        "| claim | paper | ours | rule | verdict |",
        "|---|---|---|---|---|",
    ]
    lines += [_claim_row(claim, outcomes[claim.name]) for claim in reproduction.claims]
    controls = [
        (claim.name, outcomes[claim.name].control) for claim in reproduction.claims if outcomes[claim.name].control
    ]
    if controls:
        lines += ["", "Controls (checked before each claim; a control that fails leaves its claim inconclusive):", ""]
        lines += [
            f"- *{name}*: {control['description']} — {control['setting']} {control_value(control)} against "
            f"{control['threshold']:.3g}{_level_words(control)}: **{control_state(control)}**"
            for name, control in controls
        ]
    lines += ["", "What the paper says:", ""]
    lines += [f"- *{claim.name}*: “{claim.quote}”" for claim in reproduction.claims]
    lines += [
        "",
        f"## Scale `{results.scale}`",
        "",
        reproduction.reductions.get(results.scale, ""),
        "",
        f"Regenerate: `{regenerate_command(reproduction, results)}`.",
        "",
    ]
    return "\n".join(lines)


def _claim_row(claim: Any, outcome: Outcome) -> str:
    """The claims table's row of one claim: statement, the paper's value, ours, the rule, the verdict in words."""
    reason = f" ({outcome.reason})" if outcome.reason else ""
    verdict = outcome.verdict + reason + seeds_text(outcome.seeds, outcome.units)
    cells = (
        claim.statement,
        claim.paper_value or "—",
        ours_text(outcome.numbers),
        outcome.rule or "—",
        f"**{verdict}**",
    )
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _work_text(reproduction: Reproduction, provenance: dict[str, Any]) -> str:
    if not reproduction.trains:
        return f"{provenance['runs']} computations, no training, {provenance['elapsed_s']:.1f} s"
    return f"{provenance['runs_done']} of {provenance['runs']} runs done, {provenance['run_time_s']:.0f} s of training"


def _resumed_text(provenance: dict[str, Any]) -> str:
    before = provenance["runs_before"]
    if not before:
        return ""
    return (
        f" {before} of the runs held results from an earlier call; the wall time of the call that trained the "
        f"rest, {provenance['elapsed_s']:.0f} s, leaves them out."
    )


def regenerate_command(reproduction: Reproduction, results: Results) -> str:
    """The command that reruns ``results``: with the corpus the runs read as ``--data`` for a ``corpus``
    reproduction (above the smoke scale, which brings its own)."""
    command = f"seqdyn reproduce {reproduction.name} --scale {results.scale}"
    if not reproduction.corpus or results.scale == "smoke":
        return command
    sources = [value for key in ("task.params.path", "task.params.data_dir") for value in results.values(key) if value]
    return command + f" --data {sources[0] if len(sources) == 1 else 'PATH'}"


def _short(value: float) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


#: the numbers of an outcome that say how it was decided rather than what was measured (kept in verdict.json)
DECIDING = ("lowest seed", "highest seed", "threshold", "difference", "margin", "tolerance", "interval half-width")


def ours_text(numbers: dict[str, float]) -> str:
    """The measured numbers of an outcome for a table cell: every setting's score, without the thresholds, the
    per-seed extremes and the intervals (a verdict its interval left open says so in its reason); a part's key
    that already names its score is not repeated (``"DLR SHIFT: DLR"`` → ``"DLR SHIFT"``)."""
    shown = []
    for key, value in numbers.items():
        part, _, name = key.rpartition(": ")
        if name in DECIDING:
            continue
        shown.append(f"{part if part and name in part else key} {_short(value)}")
    return ", ".join(shown)


def brief_numbers(numbers: dict[str, float]) -> str:
    """The first two measured numbers of an outcome (:func:`ours_text`'s), their common part said once:
    ``"SHIFT: DLR 0.997 vs DSS-EXP 0.998"``."""
    shown = [(key, value) for key, value in numbers.items() if key.rpartition(": ")[2] not in DECIDING][:2]
    parts = [key.rpartition(": ") for key, _ in shown]
    if len(shown) == 2 and parts[0][0] and parts[0][0] == parts[1][0]:
        return f"{parts[0][0]}: {parts[0][2]} {_short(shown[0][1])} vs {parts[1][2]} {_short(shown[1][1])}"
    return ours_text(dict(shown))


#: what an *inconclusive* reason says (``re.search``) for each cause, in a ``verdict.json`` written before claims
#: recorded their ``cause``
_LEGACY_CAUSES = (
    (r"^control [^:]* undecided: ", "seeds"),
    (r"^control ", "control"),
    (r"^budget: ", "budget"),
    ("at the ceiling", "ceiling"),
    ("seed spread", "seeds"),
    (r"\d+ of \d+ seeds ", "seeds"),
    ("the rule needs two", "seeds"),
    (r" ± \S+ \(\d+%, ", "seeds"),
    ("missing", "missing"),
    ("no finished run", "missing"),
)


def claim_cause(claim: dict[str, Any]) -> Cause | None:
    """The cause of a ``verdict.json`` claim's verdict (None unless it is *inconclusive*): the recorded one, or, in a
    file written before claims recorded it, the one its reason says (None where it says none)."""
    if "cause" in claim:
        return claim["cause"]
    if claim["verdict"] != INCONCLUSIVE:
        return None
    cause = next((cause for pattern, cause in _LEGACY_CAUSES if re.search(pattern, claim["reason"])), None)
    return cause


def verdict_rows(out: str | Path) -> list[dict[str, Any]]:
    """One row per claim of every ``verdict.json`` under ``out`` (reproduction, scale, claim, paper value, our
    numbers, verdict, reason and cause, the rule, the seeds that decided it and its control as checked (empty in
    files written before they were recorded), date, commit with what it ran on (:func:`commit_text`) and that
    alone, ``hardware``), in the order of the reproductions' names."""
    rows = []
    for path in sorted(Path(out).glob("*/verdict.json")):
        verdict = json.loads(path.read_text())
        for claim in verdict["claims"]:
            rows.append(
                {
                    "reproduction": verdict["reproduction"],
                    "scale": verdict["scale"],
                    "name": claim["name"],
                    "claim": claim["statement"],
                    "paper": claim["paper_value"],
                    "numbers": claim["numbers"],
                    "ours": ours_text(claim["numbers"]),
                    "verdict": claim["verdict"],
                    "reason": claim["reason"],
                    "cause": claim_cause(claim),
                    "rule": claim.get("rule", ""),
                    "seeds": claim.get("seeds", {}),
                    "units": claim.get("units", {}),
                    "control": claim.get("control", {}),
                    "date": verdict["date"],
                    "commit": commit_text(verdict),
                    "hardware": hardware_text(verdict),
                    "elapsed_s": verdict["elapsed_s"],
                    "runs_before": verdict.get("runs_before", 0),
                }
            )
    return rows
