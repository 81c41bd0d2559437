"""Timing and peak-memory measurement shared by the benchmarks.

Peak memory on CUDA is ``torch.cuda.max_memory_allocated``.  On the CPU torch keeps no allocator statistics, so
a background thread samples the process's resident set size (``/proc/self/statm`` on Linux, psutil elsewhere)
and the peak rise over the level before the measured call is reported.
"""

from __future__ import annotations

import contextvars
import ctypes
import ctypes.util
import gc
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import torch

from seqdyn.core.autotune import elapsed_seconds

#: the torch thread count a benchmark measures at (``--threads``; one unless :func:`benchmark_threads` sets it)
_THREADS = contextvars.ContextVar("seqdyn_benchmark_threads", default=1)


@contextmanager
def pinned_threads(count: int | None = None) -> Iterator[None]:
    """Run the block on ``count`` torch threads — by default the benchmark's count (:func:`benchmark_threads`, one
    unless set: timings comparable across machines and beside other work) — restoring the thread count after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(_THREADS.get() if count is None else count)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def threads_in_words() -> str:
    """The benchmark's thread count in words, for a table's title: ``one thread``, ``2 threads``."""
    count = _THREADS.get()
    return "one thread" if count == 1 else f"{count} threads"


def one_thread():
    """Run the block on one torch thread (:func:`pinned_threads` with 1)."""
    return pinned_threads(1)


@contextmanager
def benchmark_threads(count: int) -> Iterator[None]:
    """Measure the block's benchmarks at ``count`` torch threads (what :func:`pinned_threads` pins)."""
    if count < 1:
        raise ValueError(f"--threads: expected thread counts of 1 or more, got {count}")
    token = _THREADS.set(count)
    try:
        with pinned_threads(count):
            yield
    finally:
        _THREADS.reset(token)


def _rss_reader() -> Callable[[], int] | None:
    if os.path.exists("/proc/self/statm"):
        page = os.sysconf("SC_PAGE_SIZE")

        def read() -> int:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * page

        return read
    try:
        import psutil
    except ImportError:
        return None
    process = psutil.Process()
    return lambda: process.memory_info().rss


_READ_RSS = _rss_reader()
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4
_DEFAULT_MMAP_MAX = 65536
_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        try:
            _LIBC = ctypes.CDLL(name) if name else False
            _LIBC.mallopt  # noqa: B018  (glibc only)
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC


def track_allocations(exact: bool) -> bool:
    """Switch glibc between fast allocation (for timing: no block is mmapped and freed memory is kept, so a step
    reuses the pages of the last one instead of faulting in fresh zeroed pages — what torch's caching allocator
    does on a GPU; without it a timing depended on what the process had allocated before, up to 2× for Mamba-2
    at T=4096) and exact tracking (every block over 64 KiB is mmapped and unmapped when freed, after returning
    all free memory with ``malloc_trim``, so that the resident set size follows live memory).  Returns whether
    it applied."""
    libc = _libc()
    if not libc:
        return False
    if exact:
        libc.malloc_trim(0)
        return bool(
            libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
            and libc.mallopt(_M_MMAP_THRESHOLD, 1 << 16)
            and libc.mallopt(_M_TRIM_THRESHOLD, 1 << 16)
        )
    return bool(libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30))


class PeakMemory:
    """Context manager: ``.peak_bytes`` is the peak memory the block added (``None`` where it can't be read)."""

    def __init__(self, device: torch.device, interval: float = 0.0005):
        self.device = device
        self.interval = interval
        self.peak_bytes: int | None = None

    def __enter__(self) -> PeakMemory:
        gc.collect()
        track_allocations(exact=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            return self
        if _READ_RSS is None:
            return self
        self._base = self._peak = _READ_RSS()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, _READ_RSS())
            time.sleep(self.interval)

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device) - self._base
        elif _READ_RSS is not None:
            self._stop.set()
            self._thread.join()
            self.peak_bytes = max(0, max(self._peak, _READ_RSS()) - self._base)
        track_allocations(exact=False)


@dataclass
class Timing:
    best_s: float
    runs: int


def time_call(
    fn: Callable[[], object], device: torch.device, repeats: int, slow_s: float = 2.0, very_slow_s: float = 30.0
) -> Timing:
    """Best (minimum) wall time of ``fn`` over ``repeats`` runs after one warm-up — the minimum is the estimate
    least disturbed by other work on the machine.  A warm-up slower than ``slow_s`` is followed by a single
    timed run (long cells are not worth repeating, but a warm-up alone overstates them), one slower than
    ``very_slow_s`` counts as the only measurement — unless it compiled code (``torch.compile``, e.g. of a model a
    user compiled): then it was a warm-up only, and the cell is timed as if it had been the first call."""

    def once() -> float:
        return elapsed_seconds(fn, device)

    compiled = compilations()
    first = once()
    if compilations() != compiled:
        first = once()
    if first > very_slow_s or repeats <= 0:
        return Timing(first, 1)
    if first > slow_s:
        return Timing(min(first, once()), 2)
    return Timing(min(once() for _ in range(repeats)), repeats)


def time_alternately(calls: list[Callable[[], object]], device: torch.device, repeats: int) -> list[float]:
    """Best wall time of each of ``calls``, timed alternately: one warm-up call each (not counted), then ``repeats``
    rounds (at least one) that call each once, in turn — forwards, then backwards the next round — so that drifts
    in the machine's speed (other work, clock changes) fall on all of them alike."""
    for fn in calls:
        elapsed_seconds(fn, device)
    best = [float("inf")] * len(calls)
    for round_ in range(max(repeats, 1)):
        order = range(len(calls)) if round_ % 2 == 0 else reversed(range(len(calls)))
        for index in order:
            best[index] = min(best[index], elapsed_seconds(calls[index], device))
    return best


def compilations() -> int:
    """Graphs ``torch.compile`` has compiled in this process so far (0 before it was first used)."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return 0
    return sum(dynamo.utils.counters["stats"].values())


def available_memory_bytes(device: torch.device) -> int | None:
    """Free memory on the device (CUDA) or available RAM (Linux ``MemAvailable``); ``None`` if unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass
class Measurement:
    forward_s: float
    train_s: float
    peak_mb: float | None


def measure_step(
    forward: Callable[[], object],
    train_step: Callable[[], object],
    device: torch.device,
    repeats: int,
    peak_memory: bool = True,
) -> Measurement:
    """Best forward time (run it under ``no_grad``), best forward+backward time, and the peak memory of one
    forward+backward (unless ``peak_memory=False``) — the three numbers every benchmark table reports."""
    track_allocations(exact=False)
    forward_s = time_call(forward, device, repeats).best_s
    train_s = time_call(train_step, device, repeats).best_s
    if not peak_memory:
        return Measurement(forward_s, train_s, None)
    with PeakMemory(device) as peak:
        train_step()
    return Measurement(forward_s, train_s, None if peak.peak_bytes is None else peak.peak_bytes / 2**20)


class Skip(NamedTuple):
    """Why a cell is skipped: its estimate (``"est. N s"`` or ``"est. N MB"``) and the factor of its time over the
    measured cell's."""

    note: str
    growth: float


def skip_estimate(
    measured: Any,
    length: int,
    exponent: float,
    max_seconds: float,
    memory: int | None,
    memory_share: float,
    memory_growth: Callable[[float], float] | None = None,
) -> Skip | None:
    """Whether to skip a cell of ``length`` whose cost is extrapolated from the cell ``measured`` at a shorter length
    (with ``length``, ``forward_s``, ``train_s`` and ``peak_mb``): its time grows by ``growth = (length /
    measured.length) ** exponent``, its peak memory by ``memory_growth(growth)`` (by default the lengths' ratio).  A
    :class:`Skip` where one forward and two training steps would take over ``max_seconds``, or the peak memory would
    exceed ``memory_share`` of ``memory`` bytes (``None``: unknown); ``None`` to measure it (also where ``measured``
    has no time)."""
    if measured.train_s is None:
        return None
    growth = (length / measured.length) ** exponent
    seconds = (measured.forward_s + 2 * measured.train_s) * growth
    peak_mb = measured.peak_mb or 0.0
    megabytes = peak_mb * length / measured.length if memory_growth is None else peak_mb * memory_growth(growth)
    if seconds > max_seconds:
        return Skip(f"est. {seconds:.0f} s", growth)
    if memory and megabytes * 2**20 > memory_share * memory:
        return Skip(f"est. {megabytes:.0f} MB", growth)
    return None


def resolve_device(device: str) -> torch.device:
    """``"auto"`` is CUDA when available, else the CPU; a device this machine lacks is a ``ValueError``."""
    from seqdyn.train.loop import resolve_device as resolve

    return resolve(device, "--device")
