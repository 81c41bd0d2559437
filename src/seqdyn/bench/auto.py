"""``seqdyn bench auto``: is ``backend="auto"`` the fastest exact backend, for every mixer and shape we train?

Every case is a mixer at a shape: every registered mixer at its defaults (d 64, batch 16, T 64 and 512), and the
shapes the reproductions train — MQAR and MAD at d 64–128, T 64–1,024, the DLR tasks, per-channel mixers with
hundreds of one-dimensional heads.  For each case and mode (forward + backward of ``mixer(x).square().mean()``,
and the forward alone under ``no_grad``) every backend the mixer accepts is timed beside ``auto`` but those auto
rules out as it does (``recurrent``, a Python loop over the steps, beyond T = 64; ``quadratic`` beyond 2^26
materialized entries), in ``rounds`` passes over all of them, each keeping its best time.  ``auto`` is timed
call by call alternating with the backend it chose, so that the two see the same machine: a cell's
``auto / fastest`` is ``auto / chosen`` (the median over rounds of the paired ratio: what choosing costs) times
``chosen / fastest`` (the best times: what the choice costs).  Timed apart, in different moments of a shared
machine, the same computation differs by up to 1.5× between two calls here, which no choice can fix.
The first ``auto`` call of a case is timed apart: it is where a cold cache chooses (its ``choose`` column).

Targets: ``auto`` within 1.2× of the fastest backend in every
cell, and the geometric mean of ``auto / fastest`` within 1.05×.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import torch

from seqdyn import mixers
from seqdyn.bench.measure import pinned_threads, resolve_device, threads_in_words
from seqdyn.core.autotune import elapsed_seconds
from seqdyn.core.choice import too_large_to_time

#: the targets: ``auto / fastest`` in every cell, and its geometric mean over all cells
CELL_TARGET = 1.2
MEAN_TARGET = 1.05
MODES = ("fwd+bwd", "fwd")
#: a backend whose first call of a round is this many times slower than the best so far is not timed again
HOPELESS = 4.0
#: a round pairs ``auto`` with its choice for at least this long (more pairs for calls of a few milliseconds, whose
#: timings a shared machine scatters most: two timings of the same 4.5 ms computation came out 1.25× apart at three
#: pairs a round), at most ``MAX_PAIRS`` pairs
PAIRED_SECONDS, MAX_PAIRS = 0.1, 25


@dataclass(frozen=True)
class Case:
    """One mixer at one shape; ``group`` says where the shape comes from."""

    group: str
    mixer: str
    d_model: int
    batch: int
    length: int
    options: tuple[tuple[str, object], ...] = ()

    @property
    def label(self) -> str:
        options = "".join(f", {key}={value}" for key, value in self.options)
        return f"{self.mixer}{options}"


def _defaults(lengths=(64, 512)) -> list[Case]:
    return [Case("defaults", name, 64, 16, length) for name in mixers.names() for length in lengths]


#: the shapes the reproductions train (their configs in ``seqdyn.reproduce``), beside the mixers' defaults
REPRODUCTION_CASES = [
    # MQAR (zoology's cpu budget: batch 64, d 64–128, L 64–256)
    *(
        Case("MQAR", name, 128, 64, 256)
        for name in (
            "linear_attention",
            "mamba2",
            "gated_deltanet",
            "s6",
            "gla",
            "normalized_attention",
            "taylor_attention",
        )
    ),
    Case("MQAR", "mamba2", 64, 64, 64, (("head_dim", 1),)),
    Case("MQAR", "qlstm", 64, 64, 64),
    Case("MQAR", "qlstm_s6", 64, 64, 64),
    # MAD (cpu budget: width 128, L 32–64, batch 32)
    *(Case("MAD", "custom", 128, 32, 64, (("readout", readout),)) for readout in ("exp", "square", "relu")),
    Case("MAD", "custom", 128, 32, 64, (("decay", "scalar"),)),
    # the DLR tasks (atomic: L 256, H 64, N 256, batch 16; long range: local attention in chunks of 256)
    Case("DLR", "dlr", 64, 16, 256, (("state_dim", 256),)),
    Case("DLR", "dss_exp", 64, 16, 256, (("state_dim", 256),)),
    Case("DLR", "local_attention", 64, 4, 1024, (("window", 256),)),
    # per-channel mixers with hundreds of one-dimensional heads
    Case("per-channel", "mamba2", 256, 16, 256, (("head_dim", 1),)),
    Case("per-channel", "qlstm", 256, 16, 256),
    Case("per-channel", "rglru", 256, 16, 256),
    Case("per-channel", "s6", 256, 16, 256),
    # long sequences
    *(Case("long", name, 128, 4, 1024) for name in ("mamba2", "gated_deltanet", "mlstm", "retnet", "gla")),
]


def cases(quick: bool = False) -> list[Case]:
    """The benchmark's cases; ``quick``: a few of them, small (for tests and a first look)."""
    if quick:
        return [
            Case("quick", "qlstm", 16, 2, 32),
            Case("quick", "linear_attention", 16, 2, 32),
            Case("quick", "softmax_attention", 16, 2, 32),
            Case("quick", "s4d", 16, 2, 32),
        ]
    return _defaults() + REPRODUCTION_CASES


@dataclass
class Cell:
    """One (case, mode): the best time of every backend, ``auto``'s and what it chose."""

    case: Case
    mode: str
    times: dict[str, float] = field(default_factory=dict)  # backend -> best seconds (``auto`` included)
    hopeless: list[str] = field(default_factory=list)  # backends dropped after a call ≥ HOPELESS × the best
    picked: str = ""
    why: str = ""
    choose_s: float | None = None  # the first auto call of the case (a cold cache measures then)
    paired: list[float] = field(default_factory=list)  # per round: auto's best / the chosen backend's best, alternated
    error: str = ""

    @property
    def fastest(self) -> str | None:
        timed = {name: t for name, t in self.times.items() if name != "auto"}
        return min(timed, key=timed.get) if timed else None

    @property
    def choice_ratio(self) -> float | None:
        """The chosen backend's best time over the fastest's: what the choice costs."""
        fastest = self.fastest
        return (
            None if fastest is None or self.picked not in self.times else self.times[self.picked] / self.times[fastest]
        )

    @property
    def ratio(self) -> float | None:
        """``auto / fastest``: the paired ``auto / chosen`` (median over rounds) times ``chosen / fastest``; the
        best times alone where auto's choice was not timed by name."""
        fastest = self.fastest
        if fastest is None or "auto" not in self.times:
            return None
        if self.paired and self.choice_ratio is not None:
            return statistics.median(self.paired) * self.choice_ratio
        return self.times["auto"] / self.times[fastest]


def _build(case: Case, device: torch.device) -> mixers.Mixer:
    torch.manual_seed(0)
    return mixers.build(case.mixer, case.d_model, **dict(case.options)).to(device)


def _runner(mixer: mixers.Mixer, x: torch.Tensor, mode: str):
    """The call one cell times for a backend: forward alone, or forward + backward."""
    if mode == "fwd":

        def run(backend: str) -> None:
            with torch.no_grad():
                mixer(x, backend=backend)
    else:

        def run(backend: str) -> None:
            mixer.zero_grad(set_to_none=True)
            x.grad = None
            mixer(x, backend=backend).square().mean().backward()

    return run


def _choice(mixer: mixers.Mixer, x: torch.Tensor, mode: str) -> tuple[str, str]:
    """What ``auto`` computes with for this cell, and why (where the mixer says)."""
    with torch.no_grad() if mode == "fwd" else torch.enable_grad():
        choice = mixer.explain_backend(x)
    return str(choice), choice.why


def _timed_backends(mixer: mixers.Mixer, x: torch.Tensor) -> dict[str, str]:
    """The backends a cell times beside ``auto`` — every one the mixer accepts but those ``auto`` rules out as it
    does (``Mixer.auto_timing(x).ruled_out()``: ``recurrent``, a loop over time steps in Python, beyond T = 64; a
    backend that materializes more than 2^26 entries: :func:`seqdyn.core.choice.too_large_to_time`) — mapped to
    ``""``, and the ruled-out ones to the reason."""
    timing = mixer.auto_timing(x)
    reasons = too_large_to_time(x.shape[1], {}) if timing is None else timing.ruled_out()
    return {name: reasons.get(name, "") for name in mixer.backends if name != "auto"}


def measure_case(case: Case, device: torch.device, repeats: int = 3, rounds: int = 3, modes=MODES) -> list[Cell]:
    """Every mode of one case: each backend beside ``auto``, ``rounds`` passes of ``repeats`` calls, the fastest
    call counting; ``auto`` alternates call by call with the backend it chose (``Cell.paired``; at least
    ``PAIRED_SECONDS`` of pairs a round).  A backend whose first call is ``HOPELESS`` × slower than the best so far
    is not called again (it cannot be the fastest; its one time is kept).  Rounds go through the backends in turn
    forwards and backwards: no place favours one."""
    mixer = _build(case, device)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(case.batch, case.length, case.d_model, generator=gen).to(device).requires_grad_(True)
    backends = [name for name, reason in _timed_backends(mixer, x).items() if not reason]
    cells = []
    for mode in modes:
        cell = Cell(case, mode)
        run = _runner(mixer, x, mode)

        def best_of(name: str, calls: int) -> float:
            return min(elapsed_seconds(lambda: run(name), device) for _ in range(calls))

        try:
            cell.choose_s = elapsed_seconds(lambda: run("auto"), device)
            cell.picked, cell.why = _choice(mixer, x, mode)
            alone = ["auto"] if cell.picked not in backends else []  # auto's choice not timed by name
            for round_ in range(rounds):
                for name in (alone + backends) if round_ % 2 == 0 else (backends[::-1] + alone):
                    if name in cell.hopeless:
                        continue
                    best = min(cell.times.values(), default=math.inf)
                    first = best_of(name, 1)
                    if round_ == 0 and name not in ("auto", cell.picked) and first > HOPELESS * best:
                        cell.times[name] = first
                        cell.hopeless.append(name)
                        continue
                    if name != cell.picked:
                        cell.times[name] = min(cell.times.get(name, math.inf), first, best_of(name, repeats))
                        continue
                    pairs = max(repeats, min(MAX_PAIRS, math.ceil(PAIRED_SECONDS / max(first, 1e-9))))
                    autos, chosens = zip(*[(best_of("auto", 1), best_of(name, 1)) for _ in range(pairs)])
                    cell.paired.append(min(autos) / min(chosens))
                    cell.times["auto"] = min(cell.times.get("auto", math.inf), *autos)
                    cell.times[name] = min(cell.times.get(name, math.inf), first, *chosens)
        except (RuntimeError, MemoryError) as error:  # out of memory is a result, not a crash
            cell.error = str(error).split("\n")[0][:80]
        cells.append(cell)
    return cells


def run_benchmark(
    selected: list[Case], device: str = "cpu", repeats: int = 3, rounds: int = 3, modes=MODES, progress=None
) -> list[Cell]:
    """Measure every case on one torch thread; ``progress(case)`` after each."""
    device = resolve_device(device)
    cells = []
    with pinned_threads():
        for case in selected:
            cells.extend(measure_case(case, device, repeats, rounds, modes))
            if progress is not None:
                progress(case)
    return cells


def geometric_mean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(cells: list[Cell]) -> dict:
    """The targets: the cells that miss ``CELL_TARGET``, the geometric mean and whether both are met."""
    ratios = [cell.ratio for cell in cells if cell.ratio is not None]
    misses = [cell for cell in cells if cell.ratio is not None and cell.ratio > CELL_TARGET]
    mean = geometric_mean(ratios)
    chosen = [cell.choice_ratio for cell in cells if cell.ratio is not None and cell.choice_ratio is not None]
    return {
        "cells": len(ratios),
        "misses": misses,
        "geomean": mean,
        "worst": max(ratios, default=None),
        "met": bool(ratios) and not misses and mean is not None and mean <= MEAN_TARGET,
        # a miss where auto computed with the fastest backend is auto's own cost per call (timed in pairs with it)
        "same_backend_misses": [cell for cell in misses if cell.picked == cell.fastest],
        "worst_choice": max(chosen, default=None),
    }


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.1f}"


def _paired(cell: Cell) -> str:
    return f"{statistics.median(cell.paired):.2f}×" if cell.paired else "—"


def markdown_table(cells: list[Cell]) -> str:
    """The cells as a Markdown table (``docs/benchmarks.md``)."""
    lines = [
        "| group | mixer | d | B | T | mode | auto picks | auto ms | fastest | its ms | auto / chosen, paired "
        "| auto / fastest |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for cell in cells:
        case, fastest = cell.case, cell.fastest
        ratio = "error: " + cell.error if cell.error else f"{cell.ratio:.2f}×" if cell.ratio else "—"
        lines.append(
            f"| {case.group} | {case.label} | {case.d_model} | {case.batch} | {case.length} | {cell.mode} "
            f"| {cell.picked} | {_ms(cell.times.get('auto'))} | {fastest or '—'} "
            f"| {_ms(cell.times.get(fastest))} | {_paired(cell)} | {ratio} |"
        )
    return "\n".join(lines)


def results_table(cells: list[Cell], device: str):
    from rich.table import Table

    table = Table(
        title=f"backend='auto' against the fastest backend on {device} ({threads_in_words()}; ms, best of rounds; "
        "auto / fastest = paired auto / chosen × chosen / fastest)"
    )
    for column in (
        "group",
        "mixer",
        "d",
        "B",
        "T",
        "mode",
        "auto picks",
        "auto ms",
        "fastest",
        "its ms",
        "auto / chosen, paired",
        "auto / fastest",
        "choose ms",
    ):
        table.add_column(
            column, justify="left" if column in ("group", "mixer", "mode", "auto picks", "fastest") else "right"
        )
    for cell in cells:
        case, fastest, ratio = cell.case, cell.fastest, cell.ratio
        shown = (
            f"[red]{cell.error}[/red]"
            if cell.error
            else "—"
            if ratio is None
            else (f"[red]{ratio:.2f}×[/red]" if ratio > CELL_TARGET else f"{ratio:.2f}×")
        )
        table.add_row(
            case.group,
            case.label,
            str(case.d_model),
            str(case.batch),
            str(case.length),
            cell.mode,
            cell.picked,
            _ms(cell.times.get("auto")),
            fastest or "—",
            _ms(cell.times.get(fastest)),
            _paired(cell),
            shown,
            _ms(cell.choose_s),
        )
    return table


def _print_verdict(console, result: dict) -> None:
    """Print what :func:`summary` found: one line per cell above ``CELL_TARGET`` (with why, when known), how many of
    those misses ran the fastest backend itself, how far the chosen backend timed by name is from the fastest, and
    the geometric mean and worst ratio against the targets."""
    for cell in result["misses"]:
        console.print(
            f"[red]miss[/red] {cell.case.group} {cell.case.label} T={cell.case.length} {cell.mode}: auto "
            f"picks {cell.picked} ({cell.times.get('auto', 0) * 1e3:.1f} ms), {cell.fastest} takes "
            f"{cell.times[cell.fastest] * 1e3:.1f} ms: {cell.ratio:.2f}×" + (f" — {cell.why}" if cell.why else "")
        )
    mean = result["geomean"]
    if result["misses"]:
        console.print(
            f"{len(result['same_backend_misses'])} of the {len(result['misses'])} misses computed with the "
            "fastest backend itself: what auto adds to a call, timed in pairs with that backend"
        )
    if result["worst_choice"] is not None:
        console.print(
            f"the backend auto chose, timed by name, is within {result['worst_choice']:.2f}× of the fastest "
            "in every cell"
        )
    console.print(
        f"{result['cells']} cells: geometric mean of auto / fastest {mean:.3f}× (target ≤ {MEAN_TARGET}×), "
        f"worst {result['worst']:.2f}×, {len(result['misses'])} cells above {CELL_TARGET}× — targets "
        + ("[green]met[/green]" if result["met"] else "[red]not met[/red]")
    )


def run_auto_benchmark(
    quick: bool = False,
    device: str = "cpu",
    repeats: int = 3,
    rounds: int = 3,
    names: list[str] | None = None,
    markdown: str | None = None,
) -> dict:
    """Run with a progress bar, print the table, the cells that miss and the targets; returns the summary."""
    from pathlib import Path

    from seqdyn.train.progress import console as make_console
    from seqdyn.train.progress import progress_bar

    selected = [case for case in cases(quick) if not names or case.mixer in names]
    if not selected:
        raise ValueError(f"--mixers: no case uses {names}; the cases use {sorted({c.mixer for c in cases()})}")
    console = make_console()
    with progress_bar(console=console) as bar:
        task = bar.add_task("benchmarking auto", total=len(selected))
        cells = run_benchmark(
            selected, device, repeats, rounds, progress=lambda case: bar.update(task, advance=1, description=case.label)
        )
    dev = resolve_device(device)
    console.print(results_table(cells, str(dev) if dev.type == "cpu" else torch.cuda.get_device_name(dev)))
    result = summary(cells)
    _print_verdict(console, result)
    if markdown:
        Path(markdown).write_text(markdown_table(cells) + "\n")
        console.print(f"table written to {markdown}")
    return result
