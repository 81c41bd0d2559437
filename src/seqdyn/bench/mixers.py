"""``seqdyn bench mixers``: every registered mixer at default options, side by side with softmax attention.

Each mixer runs with ``backend="auto"`` (softmax attention's auto is torch's ``scaled_dot_product_attention``);
mixers with an ``fft`` backend (the LTI mixers) also run ``fft`` and ``recurrent`` explicitly, for the target
"fft ≥ 5× faster than recurrent".  A mixer is linear-time when its recurrent state does not grow with T.

The cells are timed in ``rounds`` passes over all mixers, each cell keeping its best times: a machine that is
slower for a while (other work, a busy host) then slows one pass, not the mixers that happened to run meanwhile,
and every ratio compares times taken the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from seqdyn import mixers
from seqdyn.bench.measure import available_memory_bytes, measure_step, resolve_device, skip_estimate
from seqdyn.mixers.base import CoefficientMixer

REFERENCE = "softmax_attention"


@dataclass
class MixerCell:
    name: str
    length: int
    backend: str
    status: str = "ok"  # ok | skip | error
    picked: str | None = None
    forward_s: float | None = None
    train_s: float | None = None
    peak_mb: float | None = None
    note: str = ""


def linear_time(mixer: mixers.Mixer) -> bool:
    """Whether the mixer's recurrent state is bounded (it does not grow with the sequence)."""
    return mixer.state_size(4096) == mixer.state_size(8192)


def _picked(mixer: mixers.Mixer, x: torch.Tensor, backend: str) -> str:
    """What ``auto`` picks for a coefficient mixer on ``x`` (the table shows ``auto`` alone for the others)."""
    if backend != "auto" or not isinstance(mixer, CoefficientMixer):
        return backend
    return mixer.backend_for(x, backend)


def _measure(
    mixer: mixers.Mixer,
    backend: str,
    length: int,
    batch: int,
    d_model: int,
    device: torch.device,
    repeats: int,
    again: MixerCell | None = None,
) -> MixerCell:
    """Time one cell; ``again``: the cell of an earlier round, which keeps the better times and its peak memory."""
    x = torch.randn(batch, length, d_model, device=device, requires_grad=True)

    def forward() -> None:
        with torch.no_grad():
            mixer(x, backend=backend)

    def train_step() -> None:
        mixer.zero_grad(set_to_none=True)
        x.grad = None
        mixer(x, backend=backend).square().mean().backward()

    if again is not None:
        result = measure_step(forward, train_step, device, repeats, peak_memory=False)
        again.forward_s, again.train_s = min(again.forward_s, result.forward_s), min(again.train_s, result.train_s)
        return again
    cell = MixerCell(mixer.name, length, backend, picked=_picked(mixer, x, backend))
    result = measure_step(forward, train_step, device, repeats)
    cell.forward_s, cell.train_s, cell.peak_mb = result.forward_s, result.train_s, result.peak_mb
    return cell


def _backends_of(mixer: mixers.Mixer) -> list[str]:
    return ["auto", "fft", "recurrent"] if "fft" in mixer.backends else ["auto"]


def _skip_if_too_costly(
    name: str,
    length: int,
    backend: str,
    prev: MixerCell | None,
    is_linear: bool,
    max_seconds: float,
    memory: int | None,
) -> MixerCell | None:
    """A skipped cell when the estimate from the cell ``prev`` measured at a shorter length exceeds a limit
    (:func:`skip_estimate`): the time of one forward and two training steps (scaled linearly in T for a linear-time
    mixer, quadratically otherwise) above ``max_seconds``, or the peak memory (scaled linearly) above 60 % of
    ``memory``; ``None`` to measure it."""
    if prev is None:
        return None
    skip = skip_estimate(prev, length, 1 if is_linear else 2, max_seconds, memory, memory_share=0.6)
    return None if skip is None else MixerCell(name, length, backend, status="skip", note=skip.note)


def run_benchmark(
    names=None,
    seq_lens=(1024, 4096),
    d_model=256,
    batch=4,
    device="auto",
    repeats=2,
    max_seconds=120.0,
    progress=None,
    rounds=1,
) -> tuple[list[MixerCell], dict[str, bool]]:
    """Measure every (mixer, T, backend) cell, in ``rounds`` passes over all of them (each cell keeps its best
    times; skipped and failed cells are not retried); returns the cells and which mixers are linear-time."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds: expected a positive integer, got {rounds!r}")
    device = resolve_device(device)
    names = list(names or mixers.names())
    if REFERENCE not in names:
        names.insert(0, REFERENCE)
    memory = available_memory_bytes(device)
    cells, linear, built = [], {}, {}
    for name in names:
        torch.manual_seed(0)
        mixer = built[name] = mixers.build(name, d_model).to(device)
        linear[name] = linear_time(mixer)
        last: dict[str, MixerCell] = {}
        for length in sorted(seq_lens):
            for backend in _backends_of(mixer):
                cell = _skip_if_too_costly(name, length, backend, last.get(backend), linear[name], max_seconds, memory)
                if cell is None:
                    try:
                        cell = _measure(mixer, backend, length, batch, d_model, device, repeats)
                        last[backend] = cell
                    except (RuntimeError, MemoryError) as error:  # out of memory is a result, not a crash
                        cell = MixerCell(name, length, backend, status="error", note=str(error).split("\n")[0][:60])
                cells.append(cell)
                if progress is not None:
                    progress(cell)
    for _ in range(rounds - 1):
        for cell in cells:
            if cell.status == "ok":
                _measure(built[cell.name], cell.backend, cell.length, batch, d_model, device, repeats, again=cell)
            if progress is not None:
                progress(cell)
    return cells, linear


def _get(cells, name, length, backend):
    return next((c for c in cells if (c.name, c.length, c.backend) == (name, length, backend)), None)


def target_checks(cells: list[MixerCell], linear: dict[str, bool]) -> list[tuple[str, str, bool | None]]:
    top = max(c.length for c in cells)
    reference = _get(cells, REFERENCE, top, "auto")
    checks = []
    for name, is_linear in linear.items():
        cell = _get(cells, name, top, "auto")
        if is_linear and name != REFERENCE and reference is not None and reference.train_s:
            if cell is None or cell.train_s is None:
                checks.append((f"{name} faster than softmax attention at T={top}", cell.status if cell else "—", None))
            else:
                ratio = reference.train_s / cell.train_s
                checks.append((f"{name} faster than softmax attention at T={top}", f"{ratio:.2f}×", ratio > 1))
        fft, recurrent = _get(cells, name, top, "fft"), _get(cells, name, top, "recurrent")
        if fft is not None and recurrent is not None:
            if fft.train_s and recurrent.train_s:
                ratio = recurrent.train_s / fft.train_s
                checks.append((f"{name}: fft ≥ 5× faster than recurrent at T={top}", f"{ratio:.1f}×", ratio >= 5))
            else:
                checks.append(
                    (
                        f"{name}: fft ≥ 5× faster than recurrent at T={top}",
                        f"recurrent {recurrent.status} ({recurrent.note})",
                        None,
                    )
                )
    return checks


def results_table(cells: list[MixerCell], device: str):
    from rich.table import Table

    from seqdyn.bench.operator import format_ms

    table = Table(title=f"mixers on {device}: time (ms) and peak memory of forward+backward")
    for column in ("mixer", "T", "backend", "fwd ms", "fwd+bwd ms", "peak MB", f"÷ {REFERENCE}"):
        table.add_column(column, justify="left" if column in ("mixer", "backend") else "right")
    for cell in cells:
        name = cell.backend + (
            f" → {cell.picked}" if cell.backend == "auto" and cell.picked not in (None, "auto") else ""
        )
        if cell.status != "ok":
            table.add_row(cell.name, str(cell.length), name, cell.status, cell.note, "", "")
            continue
        reference = _get(cells, REFERENCE, cell.length, "auto")
        ratio = f"{cell.train_s / reference.train_s:.2f}×" if reference and reference.train_s else ""
        peak = "n/a" if cell.peak_mb is None else f"{cell.peak_mb:.0f}"
        table.add_row(
            cell.name, str(cell.length), name, format_ms(cell.forward_s), format_ms(cell.train_s), peak, ratio
        )
    return table


def run_mixer_benchmark(
    names=None, seq_lens=(1024, 4096), d_model=256, batch=4, device="auto", repeats=2, max_seconds=120.0, rounds=2
):
    """Run with a progress bar, print the table and the target checks."""
    from seqdyn.bench.operator import checks_table
    from seqdyn.train.progress import console as make_console
    from seqdyn.train.progress import progress_bar

    console = make_console()
    names = list(names or mixers.names())
    with progress_bar(console=console) as bar:
        task = bar.add_task("benchmarking mixers", total=None)

        def advance(cell: MixerCell) -> None:
            bar.update(task, advance=1, description=f"{cell.name} T={cell.length} {cell.backend}")

        cells, linear = run_benchmark(names, seq_lens, d_model, batch, device, repeats, max_seconds, advance, rounds)
    dev = resolve_device(device)
    console.print(results_table(cells, str(dev) if dev.type == "cpu" else torch.cuda.get_device_name(dev)))
    console.print(checks_table(target_checks(cells, linear), "targets"))
    return cells
