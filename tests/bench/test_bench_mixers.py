"""The mixer benchmark and the mixer listing run end to end on tiny sizes."""

from __future__ import annotations

import torch
from typer.testing import CliRunner

from seqdyn.bench.mixers import REFERENCE, run_benchmark, target_checks
from seqdyn.cli import app


def test_cells_linear_time_and_checks():
    cells, linear = run_benchmark(["mamba2", "local_attention"], seq_lens=[16, 32], d_model=64, batch=1, repeats=0)
    assert linear == {REFERENCE: False, "mamba2": True, "local_attention": True}
    assert {(c.name, c.length) for c in cells} == {(n, t) for n in linear for t in (16, 32)}
    assert all(c.status == "ok" and c.train_s > 0 for c in cells)
    whats = [what for what, _, _ in target_checks(cells, linear)]
    assert "mamba2 faster than softmax attention at T=32" in whats
    assert not any(REFERENCE + " faster" in w for w in whats)


def test_a_time_budget_skips_the_longer_cells_with_their_estimate():
    cells, _ = run_benchmark(["mamba2"], seq_lens=[16, 64], d_model=16, batch=1, repeats=0, max_seconds=1e-9)
    status = {(c.name, c.length): (c.status, c.note) for c in cells}
    assert status[("mamba2", 16)] == ("ok", "") and status[(REFERENCE, 16)] == ("ok", "")
    for name in ("mamba2", REFERENCE):
        skipped, note = status[(name, 64)]
        assert skipped == "skip" and note.startswith("est. ") and note.endswith(" s")


def test_bench_mixers_and_mixers_commands():
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["bench", "mixers", "--names", "gla", "--seq-lens", "16", "--d-model", "16", "--batch", "1", "--repeats", "0"],
    )
    assert result.exit_code == 0, result.output
    assert "gla" in result.output and REFERENCE in result.output and "targets" in result.output
    listing = runner.invoke(app, ["mixers"], env={"COLUMNS": "250"})
    assert listing.exit_code == 0 and "mamba2" in listing.output and "state_dim=64" in listing.output
    bad = runner.invoke(app, ["bench", "mixers", "--names", "mamba3"])
    assert bad.exit_code == 2 and "unknown name 'mamba3'" in bad.stderr  # one line, no traceback


def test_picked_backend_is_the_one_auto_runs_at_the_measured_length(monkeypatch, tmp_path):
    from seqdyn import mixers
    from seqdyn.bench.mixers import _picked

    monkeypatch.setenv("SEQDYN_AUTOTUNE_CACHE", str(tmp_path))
    mixer = mixers.build("gla", 16, chunk_size=8)
    ran = []
    run_core = mixer.run_core
    monkeypatch.setattr(
        mixer,
        "run_core",
        lambda inputs, backend="auto", *args, **kwargs: (
            ran.append(str(backend)) or run_core(inputs, backend, *args, **kwargs)
        ),
    )
    for length in (8, 64):
        x = torch.randn(1, length, 16)
        picked = _picked(mixer, x, "auto")  # measured here (a cold cache), timing each backend by name
        ran.clear()
        mixer(x, "auto")
        assert ran == [str(picked)], (length, picked, ran)
    monkeypatch.setenv("SEQDYN_AUTOTUNE", "0")  # the cost model: choices known in advance
    assert _picked(mixer, torch.randn(1, 64, 16), "auto") == "chunk"  # not the pick for one step (quadratic)


def test_rounds_keep_each_cells_best_times_and_first_peak(monkeypatch):
    """A later round re-times every measured cell (without a peak-memory run) and keeps the better times."""
    import pytest

    from seqdyn.bench import mixers as bench_mixers
    from seqdyn.bench.measure import Measurement

    calls = []

    def fake_measure(forward, train_step, device, repeats, peak_memory=True):
        calls.append(peak_memory)
        times = {1: (3.0, 5.0), 2: (4.0, 2.0)}[1 if peak_memory else 2]  # round 2: slower forward, faster step
        return Measurement(*times, 7.0 if peak_memory else None)

    monkeypatch.setattr(bench_mixers, "measure_step", fake_measure)
    cells, _ = run_benchmark(["gla"], seq_lens=[8], d_model=16, batch=1, repeats=0, rounds=2)
    assert calls == [True, True, False, False]  # softmax attention and gla, then both again
    assert all((c.forward_s, c.train_s, c.peak_mb) == (3.0, 2.0, 7.0) for c in cells)
    with pytest.raises(ValueError, match="rounds"):
        run_benchmark(["gla"], seq_lens=[8], d_model=16, batch=1, repeats=0, rounds=0)
