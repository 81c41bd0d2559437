"""The estimate by which the operator and mixer benchmarks skip a cell instead of measuring it."""

from __future__ import annotations

from types import SimpleNamespace

from seqdyn.bench.measure import Skip, skip_estimate

#: a cell measured at T = 100: one forward and two training steps take 1 + 2·2 = 5 s, its peak is 10 MB
MEASURED = SimpleNamespace(length=100, forward_s=1.0, train_s=2.0, peak_mb=10.0)


def test_a_cell_is_skipped_when_its_extrapolated_time_exceeds_the_budget():
    assert skip_estimate(MEASURED, 400, 2, 79.0, None, 0.6) == Skip("est. 80 s", 16.0)  # 5 s · (400/100)²
    assert skip_estimate(MEASURED, 400, 2, 81.0, None, 0.6) is None
    assert skip_estimate(MEASURED, 400, 1, 19.0, None, 0.6) == Skip("est. 20 s", 4.0)


def test_a_cell_is_skipped_when_its_extrapolated_memory_exceeds_the_share_of_the_free_memory():
    mib = 2**20
    assert skip_estimate(MEASURED, 400, 2, 1e9, 64 * mib, 0.6) == Skip("est. 40 MB", 16.0)  # 10 MB · 400/100 > 38.4
    assert skip_estimate(MEASURED, 400, 2, 1e9, 70 * mib, 0.6) is None  # 40 MB < 42 MB
    assert skip_estimate(MEASURED, 400, 2, 1e9, 50 * mib, 0.75) == Skip("est. 40 MB", 16.0)  # 40 MB > 37.5 MB
    assert skip_estimate(MEASURED, 400, 2, 1e9, 60 * mib, 0.75) is None  # 40 MB < 45 MB
    assert skip_estimate(MEASURED, 400, 2, 1e9, None, 0.6) is None  # the free memory unknown
    grown = skip_estimate(MEASURED, 400, 2, 1e9, 64 * mib, 0.6, memory_growth=lambda growth: growth**0.5)
    assert grown == Skip("est. 40 MB", 16.0)  # the memory's factor from the time's: √16
    assert skip_estimate(MEASURED, 400, 2, 1e9, 64 * mib, 0.6, memory_growth=lambda growth: 1.0) is None


def test_a_cell_without_times_estimates_nothing():
    failed = SimpleNamespace(length=100, forward_s=None, train_s=None, peak_mb=None)
    assert skip_estimate(failed, 400, 2, 0.0, 1, 0.6) is None
