"""The operator benchmark and the demo run end to end on tiny sizes (speed targets live in the benchmark itself)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from seqdyn.bench.measure import PeakMemory
from seqdyn.bench.operator import BACKEND_ORDER, DEFAULT_KINDS, agreement, demo_plan, run_benchmark, target_checks
from seqdyn.cli import app


def test_the_quick_demo_times_every_backend_but_the_recurrent_loop_and_the_full_one_all_of_them():
    lengths, backends = demo_plan(quick=True)
    assert lengths == [256, 1024] and backends == [name for name in BACKEND_ORDER if name != "recurrent"]
    assert demo_plan(quick=False) == ([256, 1024, 4096], list(BACKEND_ORDER))
    # without recurrent's cells the checks against it are left out, the others still made
    report = run_benchmark([8, 16], ["gla"], backends, batch=1, heads=1, dim=4, repeats=1)
    checks = [check.what for check in target_checks(report)]
    assert checks and not any("recurrent" in target for target in checks)
    assert any("faster than quadratic" in target for target in checks)


def test_bench_operator_command_prints_every_backend_and_the_targets():
    result = CliRunner().invoke(
        app, ["bench", "operator", "--seq-lens", "8,16", "--batch", "1", "--heads", "2", "--dim", "4", "--repeats", "1"]
    )
    assert result.exit_code == 0, result.output
    for word in (*BACKEND_ORDER, *DEFAULT_KINDS, "fwd+bwd ms", "peak MB", "targets"):
        assert word in result.output
    assert "n/a" in result.output  # scan cannot compute DeltaNet- or softmax-type arguments


def test_report_cells_and_checks(monkeypatch):
    monkeypatch.setenv("SEQDYN_AUTOTUNE", "0")  # auto by the cost model: its picks are known in advance
    report = run_benchmark([8, 32], ["mamba2", "deltanet"], list(BACKEND_ORDER), batch=1, heads=1, dim=4, repeats=0)
    assert {(c.kind, c.backend) for c in report.cells} >= {("mamba2", "scan"), ("deltanet", "chunk")}
    assert report.get("deltanet", 8, "scan").status == "n/a"
    ok = [c for c in report.cells if c.status == "ok"]
    assert all(c.train_s > 0 and c.forward_s > 0 for c in ok)
    picked = {c.kind: c.picked for c in ok if c.backend == "auto"}
    assert picked == {"mamba2": "quadratic", "deltanet": "quadratic"}  # short sequences: the model materializes
    whats = [check.what for check in target_checks(report)]
    assert any("faster than recurrent" in w for w in whats) and any("auto" in w for w in whats)


def test_time_budget_skips_cells_with_an_estimate():
    report = run_benchmark([16, 1024], ["softmax"], ["quadratic"], batch=1, heads=1, dim=4, repeats=0, max_seconds=1e-9)
    skipped = report.get("softmax", 1024, "quadratic")
    assert skipped.status == "skip" and skipped.note.startswith("est.")
    measured_16 = report.get("softmax", 16, "quadratic").train_s
    assert skipped.estimated_train_s == pytest.approx(measured_16 * (1024 / 16) ** 2)


def test_a_skipped_cell_is_judged_by_its_estimate_and_says_so():
    from seqdyn.bench.operator import Cell, Report

    def check(estimate_s):
        cells = [
            Cell("gla", 4096, "chunk", train_s=0.5),
            Cell("gla", 4096, "quadratic", status="skip", note="est. 9 s", estimated_train_s=estimate_s),
        ]
        return next(
            (check.measured, check.met) for check in target_checks(Report("cpu", cells)) if "quadratic" in check.what
        )

    assert check(1000.0) == ("est. 2000× (quadratic fwd+bwd est. 1000 s)", True)
    assert check(2.0)[1] is False
    assert check(None) == ("quadratic skip (est. 9 s)", None)


def test_demo_agreement_table_is_exact():
    rows = agreement(length=40, dim=4)
    assert {backend for _, backend, _ in rows} == {"recurrent", "chunk", "scan", "auto"}
    assert max(error for _, _, error in rows) < 1e-10


def test_peak_memory_sees_a_large_allocation():
    with PeakMemory(torch.device("cpu")) as peak:
        block = torch.ones(64, 2**20 // 4)  # 64 MiB
        del block
    if peak.peak_bytes is not None:
        assert peak.peak_bytes > 32 * 2**20


def test_python_dash_m_seqdyn_works_like_the_command():
    result = subprocess.run([sys.executable, "-m", "seqdyn", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert "bench" in result.stdout and "demo" in result.stdout


def test_auto_check_judges_the_picked_computation_and_still_flags_a_bad_pick():
    from seqdyn.bench.operator import Cell, Report

    def report(chunk_s, auto_s, scan_s):
        cells = [
            Cell("gla", 64, "chunk", train_s=chunk_s),
            Cell("gla", 64, "scan", train_s=scan_s),
            Cell("gla", 64, "auto", train_s=auto_s, picked="chunk"),
        ]
        return Report("cpu", cells)

    def auto_check(r):
        return next((check.measured, check.met) for check in target_checks(r) if "auto" in check.what)

    # the auto cell disturbed by other work, its pick (chunk) the fastest: the pick is right, and the measured text
    # shows auto's own cell too, so that it agrees with the table above it
    assert auto_check(report(chunk_s=1.0, auto_s=1.6, scan_s=1.1)) == ("1.00× (chunk's cell; auto's 1.60×)", True)
    # a pick 1.5× slower than the fastest valid backend is a miss, however it is timed
    assert auto_check(report(chunk_s=1.5, auto_s=1.5, scan_s=1.0)) == ("1.50×", False)


def test_the_demo_says_which_misses_are_within_the_runs_own_timing_noise():
    """The noise is measured in the run: auto and the backend it picked time the same computation."""
    from rich.console import Console

    from seqdyn.bench.operator import Cell, Report, checks_table, summary_line, timing_noise

    def cells(kind, chunk_s, scan_s, auto_s):
        return [
            Cell(kind, 64, "chunk", train_s=chunk_s),
            Cell(kind, 64, "scan", train_s=scan_s),
            Cell(kind, 64, "auto", train_s=auto_s, picked="chunk"),
        ]

    noisy = cells("mamba2", 1.0, 9.0, 1.5)  # the same computation timed 1.5× apart; its pick is right
    near = cells("gla", 1.5, 1.0, 1.5)  # auto 1.5× the fastest: 1.25× short of the 1.2× target
    far = cells("deltanet", 2.0, 1.0, 2.0)  # 2× the fastest: 1.67× short
    report = Report("cpu", noisy + near + far)
    noise = timing_noise(report)
    assert noise == pytest.approx(1.5)
    checks = [check for check in target_checks(report) if "auto" in check.what]
    assert [check.met for check in checks] == [True, False, False]
    assert [check.missed_by for check in checks] == [None, pytest.approx(1.25), pytest.approx(2.0 / 1.2)]
    assert summary_line(checks, noise) == (
        "1 of 3 targets met; 1 of the 2 missed by less than this run's timing noise (1.50×: `auto` and the backend "
        "it picked, the same computation, timed apart); 1 missed by more than the noise."
    )
    console = Console(record=True, width=200)
    console.print(checks_table(checks, noise=noise))
    assert console.export_text().count("no, within noise") == 1
    within = [check for check in target_checks(Report("cpu", noisy + near)) if "auto" in check.what]
    assert summary_line(within, noise).endswith("the machine's noise, not the code — a rerun misses a different few.")
    assert summary_line(within[:1], noise) == "1 of 1 targets met."


def test_time_call_repeats_fast_calls_and_times_slow_ones_once_after_the_warm_up(monkeypatch):
    import seqdyn.bench.measure as measure

    calls = []
    cpu = torch.device("cpu")
    assert measure.time_call(lambda: calls.append(1), cpu, repeats=3).runs == 3 and len(calls) == 4

    clock = {"now": 0.0}
    durations = iter([0.5, 0.2])  # a slow warm-up, then one timed run

    def slow_call():
        clock["now"] += next(durations)

    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock["now"])
    timing = measure.time_call(slow_call, cpu, repeats=3, slow_s=0.3, very_slow_s=10.0)
    assert timing.runs == 2 and abs(timing.best_s - 0.2) < 1e-12


def test_time_call_does_not_count_a_call_that_compiled(monkeypatch):
    """A first call that compiles (torch.compile in the scan) is a warm-up, however long it took."""
    import seqdyn.bench.measure as measure

    clock = {"now": 0.0, "compiled": 0}
    durations = iter([40.0, 0.25, 0.2, 0.3, 0.2])  # compiling, then the usual warm-up and three timed runs

    def compiling_call():
        clock["now"] += next(durations)
        clock["compiled"] = 1

    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock["now"])
    monkeypatch.setattr(measure, "compilations", lambda: clock["compiled"])
    timing = measure.time_call(compiling_call, torch.device("cpu"), repeats=3, slow_s=1.0, very_slow_s=30.0)
    assert timing.runs == 3 and abs(timing.best_s - 0.2) < 1e-12


def test_timing_mode_keeps_freed_memory_and_peak_memory_still_sees_allocations():
    """Timing reuses freed pages (no mmap, no trim); the exact mode of PeakMemory returns them and still sees a
    large allocation made after timing mode was on."""
    from seqdyn.bench.measure import _READ_RSS, track_allocations

    if _READ_RSS is None or not track_allocations(exact=False):
        pytest.skip("needs glibc and a readable resident set size")
    block = torch.ones(64, 2**20 // 4)  # 64 MiB, every page touched
    del block
    kept = _READ_RSS()
    track_allocations(exact=True)
    returned = _READ_RSS()
    track_allocations(exact=False)
    assert kept - returned > 32 * 2**20
    with PeakMemory(torch.device("cpu")) as peak:
        block = torch.ones(64, 2**20 // 4)
        del block
    assert peak.peak_bytes > 32 * 2**20


def test_the_newest_transitions_are_timed_on_request_with_the_same_targets():
    """``--kinds kda,deltaproduct,fox,rwkv7``: every backend that computes them (scan none), the targets of the
    others."""
    import inspect

    from seqdyn.cli import bench

    default = inspect.signature(bench.bench_operator).parameters["kinds"].default.default
    assert default == ",".join(DEFAULT_KINDS)
    report = run_benchmark(
        [8, 16], ["kda", "deltaproduct", "fox", "rwkv7"], list(BACKEND_ORDER), batch=1, heads=2, dim=4, repeats=0
    )
    for kind in ("kda", "deltaproduct", "fox", "rwkv7"):
        assert report.get(kind, 8, "scan").status == "n/a" and report.get(kind, 16, "chunk").status == "ok"
    assert {check.what.split(":")[0] for check in target_checks(report)} == {"kda", "deltaproduct", "fox", "rwkv7"}


@pytest.mark.parametrize("kind", ["deltanet", "kda"])
def test_transformers_fallback_computes_the_operators_outputs_from_the_same_arguments(kind):
    """Gated DeltaNet's and Kimi Delta Attention's fallbacks on :func:`fallback_arguments` give the operator's
    outputs (a wrong β, decay or query scale would not)."""
    pytest.importorskip("transformers")
    from seqdyn.bench.operator import FALLBACK_OF, fallback_arguments, make_arguments
    from seqdyn.core.operator import coefficient_dynamics
    from seqdyn.hf.acceleration import fallback_of

    (q, k, v), options = make_arguments(kind, 1, 2, 40, 8, torch.device("cpu"), torch.float64)
    theirs = fallback_of(FALLBACK_OF[kind])(*fallback_arguments(kind, (q, k, v), options), chunk_size=16)[0]
    ours = coefficient_dynamics(q, k, v, **options, backend="recurrent")
    torch.testing.assert_close(theirs.to(ours.dtype), ours, rtol=1e-5, atol=1e-5)  # transformers computes in float32


def test_transformers_fallback_is_timed_on_request_beside_chunk_with_its_targets():
    """``--backends chunk,transformers``: the fallback on the same arguments, ``n/a`` for a kind without one;
    deltanet's memory targets against the inputs and the fallback, and both kinds' times against the fallback's."""
    pytest.importorskip("transformers")
    from seqdyn.bench.operator import FALLBACK
    from seqdyn.hf.acceleration import fallback_of

    report = run_benchmark(
        [64, 128], ["deltanet", "kda", "gla"], ["chunk", FALLBACK], batch=1, heads=2, dim=8, repeats=0
    )
    assert report.get("deltanet", 64, FALLBACK).status == "ok" and report.get("gla", 64, FALLBACK).status == "n/a"
    assert report.get("kda", 128, FALLBACK).status == "ok"
    whats = [check.what for check in target_checks(report)]
    assert "deltanet: chunk peak memory ≤ 4× inputs + a state per chunk at T=128" in whats
    assert "deltanet: chunk peak memory ≤ transformers' at T=128" in whats
    for kind in ("deltanet", "kda"):
        assert f"{kind}: chunk forward ≤ 0.7× transformers' fallback at T=128" in whats
        assert f"{kind}: chunk fwd+bwd ≤ 0.5× transformers' fallback at T=128" in whats
    assert not any(w.startswith("gla") and ("inputs" in w or "fallback" in w) for w in whats)
    with pytest.raises(ValueError, match="name: transformers has no fallback 'nope'"):
        fallback_of("nope")


def test_the_product_floor_is_timed_on_request_with_its_targets():
    """``--backends chunk,floor``: the scalar decay's matrix products alone (12: 4 forward, 8 backward, the
    gram of shared queries and keys once), ``n/a`` for other kinds; the chunk backend's two ratios to it."""
    from seqdyn.bench.operator import FLOOR, floor_products

    forward, backward = floor_products(2, 3, 130, 8)  # 3 chunks of 64
    assert len(forward) == 4 and len(backward) == 8
    assert forward[0] == (2 * 3, 64, 8, 64) and forward[1] == (2 * 3 * 3, 8, 64, 8)
    report = run_benchmark([64, 128], ["mamba2", "gla"], ["chunk", FLOOR], batch=1, heads=2, dim=8, repeats=0)
    floor = report.get("mamba2", 128, FLOOR)
    assert floor.status == "ok" and 0 < floor.forward_s and report.get("gla", 64, FLOOR).status == "n/a"
    whats = [check.what for check in target_checks(report)]
    assert "mamba2: chunk forward ≤ 2× its matrix products' time at T=128" in whats
    assert "mamba2: chunk fwd+bwd ≤ 2× its matrix products' time at T=128" in whats
