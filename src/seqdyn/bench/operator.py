"""``seqdyn bench operator``: time and peak memory of every backend of ``coefficient_dynamics`` side by side.

Argument types follow the mixers they stand for, at the operator level:
  ``gla``      diagonal decay ``g = logsigmoid(·)/16``, scale K^-½;
  ``mamba2``   scalar decay ``g = Δ·A`` (Δ = softplus, A < 0), scale ``b = Δ``, q = C and k = B shared by heads;
  ``deltanet`` Householder factor with L2-normalized keys, ``β = σ(·)``, scale ``β·K^-½``;
  ``softmax``  exp readout with ``"sum"`` normalizer;
  ``kda``      Kimi Delta Attention: a diagonal decay before the Householder factor, as its mixer computes it (the
               diagonal-plus-low-rank ``Diag(α) − β k (α ⊙ k)ᵀ``, one step per token);
  ``rwkv7``    RWKV-7: ``Diag(w) − (a ⊙ κ̂) κ̂ᵀ`` with a unit removal key κ̂, rates a ∈ (0, 1), w ∈ (0.55, 1);
  ``deltaproduct`` Gated DeltaProduct: 2 Householder factors per token with a scalar decay, β ∈ (0, 2);
  ``fox``      the Forgetting Transformer: softmax with a forget gate outside the exponential.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F

from seqdyn.bench.measure import available_memory_bytes, measure_step, resolve_device, skip_estimate
from seqdyn.core.low_rank import householder_as_low_rank
from seqdyn.core.operator import coefficient_dynamics, select_backend
from seqdyn.core.problem import DEFAULT_CHUNK_SIZE, DELTA_RULE_CHUNK_SIZE

KINDS = ("gla", "mamba2", "deltanet", "softmax", "kda", "deltaproduct", "fox", "rwkv7")
#: what ``seqdyn bench operator`` times unless told (the newest transitions on request: ``--kinds kda,…``)
DEFAULT_KINDS = KINDS[:4]
BACKEND_ORDER = ("quadratic", "recurrent", "chunk", "scan", "auto")
#: on request (``--backends chunk,transformers``): transformers' CPU fallback of the same computation, where it has
#: one (``deltanet``: ``torch_chunk_gated_delta_rule``, Qwen3-Next's; ``kda``: Kimi-Linear's
#: ``chunk_kimi_delta_attention``); the transformers extra is needed
FALLBACK = "transformers"
FALLBACK_OF = {"deltanet": "torch_chunk_gated_delta_rule", "kda": "chunk_kimi_delta_attention"}
#: on request (``--backends chunk,floor``): the matrix products the chunk backend must do for a scalar decay
#: (``mamba2``), timed as plain batched products of the same shapes — the time no implementation of it can beat
FLOOR = "floor"


def make_arguments(
    kind: str,
    batch: int,
    heads: int,
    length: int,
    dim: int,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> tuple[tuple, dict]:
    """Random operator arguments of one mixer type; returns ``(q, k, v), keywords``, leaves requiring grad."""
    if kind not in KINDS:
        raise ValueError(f"kind: got {kind!r}; allowed: {list(KINDS)}")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=gen, dtype=dtype).to(device)  # noqa: E731
    shared_heads = 1 if kind == "mamba2" else heads
    q = rand(batch, length, shared_heads, dim)
    k = rand(batch, length, shared_heads, dim)
    v = rand(batch, length, heads, dim)
    options: dict = {}
    if kind == "gla":
        options["log_decay"] = F.logsigmoid(rand(batch, length, heads, dim)) / 16
    elif kind == "mamba2":
        step = F.softplus(rand(batch, length, heads) - 2.0)
        rate = torch.linspace(1.0, 16.0, heads, dtype=dtype, device=device)
        options.update(log_decay=-step * rate, scale=step)
    elif kind == "deltanet":
        k = F.normalize(k, dim=-1)
        beta = torch.sigmoid(rand(batch, length, heads))
        options.update(householder=beta, scale=beta * dim**-0.5)
    elif kind in ("kda", "rwkv7", "deltaproduct"):
        k, v, options = _newest_transition(kind, k, v, rand, (batch, length, heads, dim))
    else:
        options.update(readout="exp", normalizer="sum")
        if kind == "fox":
            options["outer_log_decay"] = F.logsigmoid(rand(batch, length, heads) + 4.0)
    leaves = [q, k, v] + [x for x in options.values() if isinstance(x, torch.Tensor) and x.is_floating_point()]
    for x in leaves:
        x.requires_grad_(True)
    return (q, k, v), options


def _newest_transition(kind: str, k, v, rand, shape: tuple[int, int, int, int]) -> tuple:
    """``(k, v, keywords)`` of Kimi Delta Attention (as its mixer computes it), RWKV-7 and Gated DeltaProduct."""
    batch, length, heads, dim = shape
    if kind == "kda":
        k = F.normalize(k, dim=-1)
        beta = torch.sigmoid(rand(batch, length, heads))
        g = F.logsigmoid(rand(batch, length, heads, dim) + 4.0)
        write, read = householder_as_low_rank(beta, k, g, decay_first=True)
        return k, v, dict(log_decay=g, low_rank_write=write, low_rank_read=read, scale=beta * dim**-0.5)
    if kind == "rwkv7":
        removal = F.normalize(rand(batch, length, heads, dim), dim=-1)
        rate = torch.sigmoid(rand(batch, length, heads, dim))
        log_decay = -0.6065306597126334 * torch.sigmoid(rand(batch, length, heads, dim))  # −e^{−½} σ(·)
        return k, v, dict(log_decay=log_decay, low_rank_write=-rate * removal, low_rank_read=removal, scale=1.0)
    k, v = F.normalize(rand(batch, length, heads, 2, dim), dim=-1), rand(batch, length, heads, 2, dim)
    beta = 2 * torch.sigmoid(rand(batch, length, heads, 2))
    return (
        k,
        v,
        dict(householder=beta, scale=beta * dim**-0.5, log_decay=F.logsigmoid(rand(batch, length, heads) + 4.0)),
    )


def _cost_exponent(kind: str, backend: str) -> int:
    """How a backend's time grows with T, used to skip cells that would exceed the time budget."""
    if backend == "quadratic" or (backend == "recurrent" and kind == "softmax"):
        return 2
    return 1


@dataclass
class Cell:
    kind: str
    length: int
    backend: str
    status: str = "ok"  # ok | n/a | skip
    forward_s: float | None = None
    train_s: float | None = None
    peak_mb: float | None = None
    picked: str | None = None
    note: str = ""
    estimated_train_s: float | None = None  # skipped cells: fwd+bwd time extrapolated from the last measured T
    inputs_mb: float | None = None  # the arguments' own memory
    states_mb: float | None = None  # one K × V state per chunk of the delta rule (deltanet)


@dataclass
class Report:
    device: str
    cells: list[Cell] = field(default_factory=list)

    def get(self, kind: str, length: int, backend: str) -> Cell | None:
        return next((c for c in self.cells if (c.kind, c.length, c.backend) == (kind, length, backend)), None)


def _measure_cell(
    kind: str, length: int, backend: str, batch: int, heads: int, dim: int, device: torch.device, repeats: int
) -> Cell:
    args, options = make_arguments(kind, batch, heads, length, dim, device)
    leaves = [x for x in (*args, *options.values()) if isinstance(x, torch.Tensor)]
    cell = Cell(kind, length, backend, inputs_mb=sum(x.numel() * x.element_size() for x in leaves) / 2**20)
    if kind == "deltanet":
        cell.states_mb = (
            batch * heads * -(-length // DELTA_RULE_CHUNK_SIZE) * dim * dim * args[2].element_size() / 2**20
        )
    if backend == FALLBACK:
        return _measure_fallback(cell, args, options, leaves, device, repeats)
    if backend == FLOOR:
        return _measure_floor(cell, batch, heads, dim, device, repeats)
    try:
        cell.picked = select_backend(*args, backend=backend, **options)
    except ValueError:
        cell.status = "n/a"
        return cell

    return _measured(cell, lambda: coefficient_dynamics(*args, backend=backend, **options), leaves, device, repeats)


def _measured(cell: Cell, call: Callable[[], torch.Tensor], leaves: list, device, repeats: int) -> Cell:
    """``cell`` with the time of ``call()`` (outputs ``[…]``) alone and of its forward + backward of the outputs'
    sum (gradients into ``leaves``), and the peak memory (:func:`~seqdyn.bench.measure.measure_step`)."""

    def forward() -> None:
        with torch.no_grad():
            call()

    def train_step() -> None:
        for x in leaves:
            x.grad = None
        call().sum().backward()

    result = measure_step(forward, train_step, device, repeats)
    cell.forward_s, cell.train_s, cell.peak_mb = result.forward_s, result.train_s, result.peak_mb
    return cell


def _measure_fallback(cell: Cell, args: tuple, options: dict, leaves: list, device, repeats: int) -> Cell:
    """transformers' fallback of ``cell.kind`` on the same arguments (``n/a`` where it has none, or without
    transformers): its outputs are the operator's (:func:`fallback_arguments`)."""
    if cell.kind not in FALLBACK_OF:
        cell.status, cell.note = "n/a", f"transformers has a fallback for {sorted(FALLBACK_OF)} only"
        return cell
    try:
        from seqdyn.hf.acceleration import fallback_of
    except ImportError:
        cell.status, cell.note = "n/a", "needs transformers: pip install 'seqdyn[hf]'"
        return cell
    function = fallback_of(FALLBACK_OF[cell.kind])
    cell.picked = FALLBACK_OF[cell.kind]
    return _measured(cell, lambda: function(*fallback_arguments(cell.kind, args, options))[0], leaves, device, repeats)


def fallback_arguments(kind: str, args: tuple, options: dict) -> tuple:
    """``(q, k, v, g, β)`` of transformers' fallback of ``kind`` for the operator's ``args``, ``options``.  Both
    fallbacks scale the queries by ``K^-½`` and write ``β k vᵀ``, where the operator writes ``β K^-½ k vᵀ`` and reads
    with the queries as given: the same outputs, the state scaled by ``K^-½``.  Gated DeltaNet's β is the
    Householder factor's and its decay 0; Kimi Delta Attention's β is its write scale times ``√K`` and its decay
    the operator's diagonal one."""
    q, k, v = args
    if kind == "deltanet":
        beta = options["householder"]
        return q, k, v, torch.zeros(beta.shape, dtype=beta.dtype, device=beta.device), beta
    return q, k, v, options["log_decay"], options["scale"] * q.shape[-1] ** 0.5


def floor_products(batch: int, heads: int, length: int, dim: int, shared_heads: int = 1) -> tuple[list, list]:
    """The operand shapes of the chunk backend's matrix products for a scalar decay (chunks of
    :data:`DEFAULT_CHUNK_SIZE`, queries and keys of ``shared_heads`` heads), ``(forward, backward)``, each a list of
    ``(batch, m, k, n)``: forward ``Q Kᵀ``, ``K̃ᵀ V``, ``A V`` and ``Q̃ E``; backward ``Q̃ᵀ ∂Y``, ``∂Y Eᵀ``,
    ``V ∂ΔSᵀ``, ``K̃ ∂ΔS``, ``Aᵀ ∂Y``, ``∂Y Vᵀ``, ``∂A K`` and ``∂Aᵀ Q``."""
    size = DEFAULT_CHUNK_SIZE
    chunks = -(-length // size)
    every, shared = batch * heads * chunks, batch * shared_heads * chunks
    forward = [(shared, size, dim, size), (every, dim, size, dim), (every, size, size, dim), (every, size, dim, dim)]
    backward = [
        (every, dim, size, dim),
        (every, size, dim, dim),
        (every, size, dim, dim),
        (every, size, dim, dim),
        (every, size, size, dim),
        (every, size, dim, size),
        (shared, size, size, dim),
        (shared, size, size, dim),
    ]
    return forward, backward


def _measure_floor(cell: Cell, batch: int, heads: int, dim: int, device, repeats: int) -> Cell:
    """The products of :func:`floor_products` timed as ``torch.bmm`` on random operands (``n/a`` but for
    ``mamba2``): the forward's, and the forward's with the backward's."""
    if cell.kind != "mamba2":
        cell.status, cell.note = "n/a", "the product floor is timed for the scalar decay (mamba2)"
        return cell
    forward, backward = floor_products(batch, heads, cell.length, dim)

    def operands(shapes):
        return [(torch.randn(b, m, k, device=device), torch.randn(b, k, n, device=device)) for b, m, k, n in shapes]

    forward_operands, all_operands = operands(forward), operands(forward + backward)

    def products(pairs) -> None:
        for left, right in pairs:
            torch.bmm(left, right)

    result = measure_step(
        lambda: products(forward_operands), lambda: products(all_operands), device, repeats, peak_memory=False
    )
    cell.forward_s, cell.train_s, cell.note = result.forward_s, result.train_s, "products only"
    return cell


def _memory_growth(growth: float) -> float:
    """The factor of a cell's peak memory for the factor ``growth`` of its time: the same, beyond 16 its 2/3
    power."""
    return growth ** (2 / 3 if growth > 16 else 1)


def _skip_if_too_costly(
    kind: str, length: int, backend: str, prev: Cell | None, max_seconds: float, memory: int | None
) -> Cell | None:
    """A skipped cell, with its extrapolated training time, when the estimate from the cell ``prev`` measured at a
    shorter length exceeds a limit (:func:`skip_estimate`): the time of one forward and two training steps (scaled
    by the backend's cost exponent in T, for ``auto`` the one of the backend it picked) above ``max_seconds``, or
    the peak memory (:func:`_memory_growth`) above 75 % of ``memory``; ``None`` to measure it."""
    if prev is None:
        return None
    exponent = _cost_exponent(kind, backend if backend != "auto" else prev.picked)
    skip = skip_estimate(prev, length, exponent, max_seconds, memory, memory_share=0.75, memory_growth=_memory_growth)
    if skip is None:
        return None
    return Cell(kind, length, backend, status="skip", note=skip.note, estimated_train_s=prev.train_s * skip.growth)


def run_benchmark(
    seq_lens, kinds, backends, batch=4, heads=4, dim=64, device="auto", repeats=3, max_seconds=120.0, progress=None
) -> Report:
    """Measure every (kind, T, backend) cell; cells estimated to exceed ``max_seconds`` or the free memory are
    skipped (their estimate is noted).  ``progress(cell)`` is called after each cell."""
    device = resolve_device(device)
    for name in backends:
        if name not in (*BACKEND_ORDER, FALLBACK, FLOOR):
            raise ValueError(f"backends: unknown {name!r}; allowed: {[*BACKEND_ORDER, FALLBACK, FLOOR]}")
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"kinds: unknown {kind!r}; allowed: {list(KINDS)}")
    report = Report(device=str(device) if device.type == "cpu" else torch.cuda.get_device_name(device))
    memory = available_memory_bytes(device)
    for kind in kinds:
        last: dict[str, Cell] = {}
        for length in sorted(seq_lens):
            for backend in backends:
                cell = _skip_if_too_costly(kind, length, backend, last.get(backend), max_seconds, memory)
                if cell is None:
                    cell = _measure_cell(kind, length, backend, batch, heads, dim, device, repeats)
                    if cell.status == "ok":
                        last[backend] = cell
                report.cells.append(cell)
                if progress is not None:
                    progress(cell)
    return report


# ---------------------------------------------------------------------------------------------------- output
def format_ms(seconds: float | None) -> str:
    """``seconds`` in milliseconds for a table: one decimal below 10 s, none above, ``—`` when not measured."""
    return "—" if seconds is None else (f"{seconds * 1e3:.1f}" if seconds < 10 else f"{seconds * 1e3:.0f}")


def results_table(report: Report):
    from rich.table import Table

    table = Table(title=f"coefficient_dynamics on {report.device}: time (ms) and peak memory of forward+backward")
    for column in ("args", "T", "backend", "fwd ms", "fwd+bwd ms", "peak MB", "fwd+bwd ÷ chunk"):
        table.add_column(column, justify="right" if column not in ("args", "backend") else "left")
    for cell in report.cells:
        chunk = report.get(cell.kind, cell.length, "chunk")
        ratio = ""
        if cell.train_s and chunk is not None and chunk.train_s:
            ratio = f"{cell.train_s / chunk.train_s:.2f}×"
        name = cell.backend + (f" → {cell.picked}" if cell.backend == "auto" and cell.picked else "")
        if cell.status != "ok":
            table.add_row(cell.kind, str(cell.length), name, cell.status, cell.note, "", "")
            continue
        peak = "n/a" if cell.peak_mb is None else f"{cell.peak_mb:.0f}"
        table.add_row(
            cell.kind, str(cell.length), name, format_ms(cell.forward_s), format_ms(cell.train_s), peak, ratio
        )
    return table


class Check(NamedTuple):
    """A target: what it asks, what was measured, whether it was met (``None``: not measured), and by what factor
    it was missed (``None`` unless missed: 1.3 means 1.3× short of the target)."""

    what: str
    measured: str
    met: bool | None
    missed_by: float | None = None


def _check(what: str, measured: str, value: float, target: float, at_least: bool) -> Check:
    """``value ≥ target`` (``at_least``) or ``value ≤ target``, with the factor of a miss."""
    met = value >= target if at_least else value <= target
    return Check(what, measured, met, None if met else (target / value if at_least else value / target))


def target_checks(report: Report) -> list[Check]:
    """The targets, per argument kind: at the largest T the chunk backend ≥ 10× faster than recurrent and ≥ 5×
    faster than quadratic (forward+backward), the chunk backend's peak memory linear in T between the two largest
    T, and ``auto`` within 1.2× of the fastest backend at every T — ``met`` is ``None`` where a cell was not
    measured."""
    checks = []
    lengths = sorted({c.length for c in report.cells})
    top = lengths[-1]
    for kind in dict.fromkeys(c.kind for c in report.cells):
        checks.extend(_speedup_checks(report, kind, top))
        checks.extend(_memory_check(report, kind, lengths))
        checks.extend(_memory_budget_checks(report, kind, lengths))
        checks.extend(_floor_checks(report, kind, lengths))
        checks.extend(_fallback_checks(report, kind, lengths))
        checks.extend(_auto_checks(report, kind, lengths))
    return checks


def _speedup_checks(report: Report, kind: str, top: int) -> list[Check]:
    """Whether the chunk backend's forward+backward at T = ``top`` is ≥ 10× faster than recurrent and ≥ 5× faster
    than quadratic; a cell skipped for its time is judged by its extrapolated time, said as such (``met`` is
    ``None`` when it has none)."""
    checks = []
    chunk = report.get(kind, top, "chunk")
    for other, factor in (("recurrent", 10.0), ("quadratic", 5.0)):
        cell = report.get(kind, top, other)
        if chunk is None or chunk.train_s is None or cell is None:
            continue
        what = f"{kind}: chunk ≥ {factor:.0f}× faster than {other} at T={top}"
        if cell.train_s is not None:
            speedup = cell.train_s / chunk.train_s
            checks.append(_check(what, f"{speedup:.1f}×", speedup, factor, at_least=True))
        elif cell.estimated_train_s is None:
            checks.append(Check(what, f"{other} {cell.status} ({cell.note})", None))
        else:
            estimate = cell.estimated_train_s
            speedup = estimate / chunk.train_s
            measured = f"est. {speedup:.0f}× ({other} fwd+bwd est. {estimate:.0f} s)"
            checks.append(_check(what, measured, speedup, factor, at_least=True))
    return checks


def _memory_check(report: Report, kind: str, lengths: list[int]) -> list[Check]:
    """Whether the chunk backend's peak memory grows at most 1.5× as fast as T between the two largest lengths with
    a peak measured (no check when fewer than two have one)."""
    peaks = [(t, report.get(kind, t, "chunk")) for t in lengths]
    peaks = [(t, c.peak_mb) for t, c in peaks if c is not None and c.peak_mb]
    if len(peaks) < 2:
        return []
    (t0, m0), (t1, m1) = peaks[-2], peaks[-1]
    growth = m1 / m0
    what = f"{kind}: chunk peak memory linear in T ({t0}→{t1}: ×{t1 / t0:.0f})"
    return [_check(what, f"×{growth:.1f}", growth, 1.5 * t1 / t0, at_least=False)]


def _memory_budget_checks(report: Report, kind: str, lengths: list[int]) -> list[Check]:
    """For the delta rule (``deltanet``), whose chunk backward computes its blocks again: at each T, the chunk
    backend's forward + backward peak at most 4× its inputs plus one ``K × V`` state per chunk of
    :data:`DELTA_RULE_CHUNK_SIZE` steps, and at most transformers' fallback's where it was measured."""
    if kind != "deltanet":
        return []
    checks = []
    for t in lengths:
        chunk, fallback = report.get(kind, t, "chunk"), report.get(kind, t, FALLBACK)
        if chunk is None or not chunk.peak_mb or chunk.inputs_mb is None or chunk.states_mb is None:
            continue
        budget = 4 * chunk.inputs_mb + chunk.states_mb
        what = f"{kind}: chunk peak memory ≤ 4× inputs + a state per chunk at T={t}"
        checks.append(_check(what, f"{chunk.peak_mb:.0f} MB of {budget:.0f}", chunk.peak_mb, budget, at_least=False))
        if fallback is not None and fallback.peak_mb:
            what = f"{kind}: chunk peak memory ≤ transformers' at T={t}"
            measured = f"{chunk.peak_mb / fallback.peak_mb:.2f}×"
            checks.append(_check(what, measured, chunk.peak_mb, fallback.peak_mb, at_least=False))
    return checks


#: the chunk backend's time over its matrix products' at most (forward, forward + backward)
FLOOR_TARGETS = {"forward": 2.0, "fwd+bwd": 2.0}
#: the chunk backend's time over transformers' fallback's at most: forward, forward + backward (the forward's from
#: the Gated DeltaNet target of the CPU work; the other from the accelerated models' ≥ 2× forward + backward)
FALLBACK_TARGETS = {"forward": 0.7, "fwd+bwd": 0.5}


def _floor_checks(report: Report, kind: str, lengths: list[int]) -> list[Check]:
    """Where the product floor was timed: the chunk backend's forward and forward + backward within 2× of it."""
    return _time_ratio_checks(report, kind, lengths, FLOOR, FLOOR_TARGETS, "its matrix products' time")


def _fallback_checks(report: Report, kind: str, lengths: list[int]) -> list[Check]:
    """Where transformers' fallback was timed: the chunk backend's forward and forward + backward time over its, at
    most :data:`FALLBACK_TARGETS`."""
    return _time_ratio_checks(report, kind, lengths, FALLBACK, FALLBACK_TARGETS, "transformers' fallback")


def _time_ratio_checks(
    report: Report, kind: str, lengths: list[int], other: str, targets: dict[str, float], against: str
) -> list[Check]:
    """At each T where both were timed: the chunk backend's forward and forward + backward time over the cell
    ``other``'s, at most ``targets``."""
    checks = []
    for t in lengths:
        chunk, cell = report.get(kind, t, "chunk"), report.get(kind, t, other)
        if chunk is None or cell is None or cell.train_s is None or chunk.train_s is None:
            continue
        for what, ours, theirs in (
            ("forward", chunk.forward_s, cell.forward_s),
            ("fwd+bwd", chunk.train_s, cell.train_s),
        ):
            ratio = ours / theirs
            text = f"{kind}: chunk {what} ≤ {targets[what]:g}× {against} at T={t}"
            checks.append(_check(text, f"{ratio:.2f}×", ratio, targets[what], at_least=False))
    return checks


def _auto_checks(report: Report, kind: str, lengths: list[int]) -> list[Check]:
    """Whether, at each T, the time of the backend ``auto`` picked is within 1.2× of the fastest backend measured
    by name (T where ``auto`` or every backend went unmeasured are left out); where ``auto``'s own cell timed the
    same computation slower than the picked backend's cell, the measured text shows both, so that it agrees with
    the table above it."""
    checks = []
    for t in lengths:
        auto = report.get(kind, t, "auto")
        valid = [
            c.train_s
            for c in report.cells
            if c.kind == kind and c.length == t and c.backend not in ("auto",) and c.train_s is not None
        ]
        if auto is None or auto.train_s is None or not valid:
            continue
        ratio, own = _picked_time(report, auto) / min(valid), auto.train_s / min(valid)
        what = f"{kind}: auto ({auto.picked}) ≤ 1.2× the fastest at T={t}"
        measured = (
            f"{ratio:.2f}×" if abs(own - ratio) < 0.005 else f"{ratio:.2f}× ({auto.picked}'s cell; auto's {own:.2f}×)"
        )
        checks.append(_check(what, measured, ratio, 1.2, at_least=False))
    return checks


def _picked_time(report: Report, auto: Cell) -> float:
    """The best time of the computation ``auto`` picked: its own cell and the picked backend's cell time the same
    work (``auto`` adds one dispatch decision), so the faster of the two is the less disturbed estimate."""
    picked = report.get(auto.kind, auto.length, auto.picked) if auto.picked else None
    times = [auto.train_s] + ([picked.train_s] if picked is not None and picked.train_s is not None else [])
    return min(times)


def checks_table(checks, title: str = "targets", noise: float | None = None):
    """The targets as a table; with ``noise`` (:func:`timing_noise`), a time target missed by less than that
    factor says so."""
    from rich.table import Table

    table = Table(title=title)
    for column in ("target", "measured", "met"):
        table.add_column(column)
    for check in checks:
        what, measured, met = check[:3]
        text = {True: "[green]yes[/]", False: "[red]no[/]", None: "—"}[met]
        if met is False and _within_noise(check, noise):
            text = "[yellow]no, within noise[/]"
        table.add_row(what, measured, text)
    return table


def _within_noise(check, noise: float | None) -> bool:
    """A missed time target (not a memory one) whose shortfall is within the run's own timing noise."""
    missed_by = getattr(check, "missed_by", None)
    return noise is not None and missed_by is not None and "memory" not in check[0] and missed_by <= noise


def timing_noise(report: Report) -> float | None:
    """The largest factor between two timings of the same computation in this run: ``auto``'s cell and the cell of
    the backend it picked (``auto`` only adds a cached dispatch) — what this machine's noise was, measured."""
    factors = []
    for auto in report.cells:
        picked = report.get(auto.kind, auto.length, auto.picked) if auto.backend == "auto" and auto.picked else None
        if picked is not None and auto.train_s and picked.train_s:
            factors.append(max(auto.train_s / picked.train_s, picked.train_s / auto.train_s))
    return max(factors, default=None)


def summary_line(checks, noise: float | None) -> str:
    """``seqdyn demo``'s last line: how many targets were met, and whether the misses are within the noise."""
    judged = [check for check in checks if check[2] is not None]
    met = sum(check[2] for check in judged)
    line = f"{met} of {len(judged)} targets met"
    missed = [check for check in judged if check[2] is False]
    if not missed:
        return line + "."
    within = sum(_within_noise(check, noise) for check in missed)
    line += (
        f"; {within} of the {len(missed)} missed by less than this run's timing noise "
        f"({noise:.2f}×: `auto` and the backend it picked, the same computation, timed apart)"
        if noise
        else ""
    )
    if within == len(missed):
        return line + ": the machine's noise, not the code — a rerun misses a different few."
    return line + f"; {len(missed) - within} missed by more than the noise."


def run_operator_benchmark(
    seq_lens, kinds, backends, batch=4, heads=4, dim=64, device="auto", repeats=3, max_seconds=120.0
) -> Report:
    """Run the benchmark with a progress bar and print the results and the target checks."""
    from seqdyn.train.progress import console as make_console
    from seqdyn.train.progress import progress_bar

    console = make_console()
    total = len(seq_lens) * len(kinds) * len(backends)
    with progress_bar(console=console) as bar:
        task = bar.add_task("benchmarking", total=total)

        def advance(cell: Cell) -> None:
            bar.update(task, advance=1, description=f"{cell.kind} T={cell.length} {cell.backend}")

        report = run_benchmark(seq_lens, kinds, backends, batch, heads, dim, device, repeats, max_seconds, advance)
    checks, noise = target_checks(report), timing_noise(report)
    console.print(results_table(report))
    console.print(checks_table(checks, noise=noise))
    console.print(summary_line(checks, noise))
    return report


def agreement(length: int = 200, dim: int = 16, seed: int = 0) -> list[tuple[str, str, float]]:
    """Every backend against ``quadratic`` in float64 for each argument type: (kind, backend, max |error|)."""
    rows = []
    for kind in KINDS:
        args, options = make_arguments(kind, 2, 3, length, dim, torch.device("cpu"), torch.float64, seed)
        with torch.no_grad():
            reference = coefficient_dynamics(*args, backend="quadratic", **options)
            for backend in BACKEND_ORDER[1:]:
                try:
                    out = coefficient_dynamics(*args, backend=backend, **options)
                except ValueError:
                    continue
                rows.append((kind, backend, float((out - reference).abs().max())))
    return rows


def demo_plan(quick: bool) -> tuple[list[int], list[str]]:
    """The lengths and backends ``seqdyn demo`` times.  ``quick``: T = 256 and 1024 without the ``recurrent``
    backend — the token-by-token loop is the slow reference (about 30 s per argument kind at T = 256 on one core,
    more than all other cells together), already shown agreeing in the first table — so that the demo ends within
    a minute; the full demo times every backend up to T = 4096 and checks the targets against ``recurrent`` too."""
    if quick:
        return [256, 1024], [backend for backend in BACKEND_ORDER if backend != "recurrent"]
    return [256, 1024, 4096], list(BACKEND_ORDER)


def run_demo(quick: bool = False) -> None:
    """``seqdyn demo``: agreement of every backend with the reference, then the benchmark table
    (:func:`demo_plan`)."""
    from rich.table import Table

    from seqdyn.train.progress import console as make_console

    console = make_console()
    console.rule("seqdyn: one operator, every backend")
    table = Table(title="every backend against the quadratic reference (float64, T=200, K=V=16)")
    for column in ("args", "backend", "max |y − y_quadratic|"):
        table.add_column(column)
    for kind, backend, error in agreement():
        table.add_row(kind, backend, f"{error:.1e}")
    console.print(table)
    lengths, backends = demo_plan(quick)
    run_operator_benchmark(lengths, list(KINDS), backends)
