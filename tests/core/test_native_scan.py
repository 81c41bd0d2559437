"""The scan's native CPU kernel (``scan_kernel.cpp`` via ``native.py``) against the ``quadratic`` reference.

Random problems in float64 — every decay kind (none, scalar, diagonal, factored ``Δ ⊗ A``), q and k per head or
shared by all heads, one value column (Mamba-1) or several, key dimensions the kernel fixes at compile time and
others, time-major inputs, several saved-state intervals, partial groups of heads and several threads — compared
with the ``quadratic`` backend in outputs, final states and every gradient; then float32, the fallbacks (no
kernel, other dtypes, ``SEQDYN_COMPILE=0``, a compiler that fails) and the on-disk cache.
"""

from __future__ import annotations

import logging

import pytest
import torch

import seqdyn
from seqdyn.core.backends import native, scan
from tests.core.cases import assert_close

TOL = 1e-10

needs_kernel = pytest.mark.skipif(native.library() is None, reason="no C++ compiler to build the native scan")


def _problem(seed: int, decay: str, shared: bool, key_dim: int, value_dim: int, length: int, heads: int = 5,
             dtype=torch.float64):
    """Leaves of a random problem in the operator's layout ``[B, T, H, ...]`` (time-major in memory, as mixers
    give them) and the operator's keyword arguments for its decay."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    key_heads = 1 if shared else heads
    leaves = {"q": rand(2, length, key_heads, key_dim), "k": rand(2, length, key_heads, key_dim) / key_dim**0.5,
              "v": rand(2, length, heads, value_dim), "state": rand(2, heads, key_dim, value_dim)}
    if decay == "scalar":
        leaves["log_decay"] = -torch.rand(2, length, heads, generator=gen, dtype=dtype)
    elif decay == "diagonal":
        leaves["log_decay"] = -torch.rand(2, length, heads, key_dim, generator=gen, dtype=dtype)
    elif decay == "factored":
        leaves["log_decay"] = torch.rand(2, length, heads, generator=gen, dtype=dtype)
        leaves["decay_rate"] = -torch.rand(heads, key_dim, generator=gen, dtype=dtype) * 2
    return {name: x.requires_grad_() for name, x in leaves.items()}


def _run(leaves: dict, backend: str):
    """Outputs, final state and the gradients of every leaf for a fixed functional of both."""
    extra = {name: leaves[name] for name in ("log_decay", "decay_rate") if name in leaves}
    y, final = seqdyn.coefficient_dynamics(leaves["q"], leaves["k"], leaves["v"], initial_state=leaves["state"],
                                           output_final_state=True, backend=backend, **extra)
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
    loss = (y * weights).sum() + (final * final.detach().sin()).sum()
    return {"y": y, "final": final} | dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))


@pytest.fixture
def kernel_runs(monkeypatch):
    """Counts the native kernel's forward calls (so that a test knows it did not fall back)."""
    calls = []
    real = native.NativeScan.apply
    monkeypatch.setattr(native.NativeScan, "apply", lambda *args: calls.append(1) or real(*args))
    monkeypatch.delenv("SEQDYN_COMPILE", raising=False)
    return calls


@needs_kernel
@pytest.mark.parametrize("decay", ["none", "scalar", "diagonal", "factored"])
@pytest.mark.parametrize("shared", [False, True], ids=["qk-per-head", "qk-shared"])
@pytest.mark.parametrize("key_dim, value_dim", [(16, 1), (5, 1), (8, 3), (3, 4)])
def test_native_scan_matches_quadratic(decay, shared, key_dim, value_dim, kernel_runs):
    leaves = _problem(key_dim * 10 + value_dim, decay, shared, key_dim, value_dim, length=37)
    got, want = _run(leaves, "scan"), _run(leaves, "quadratic")
    assert kernel_runs, "the scan did not run the native kernel"
    for name in want:
        assert_close(got[name], want[name], TOL, f"native scan ({decay}, shared={shared}) {name}")


@needs_kernel
@pytest.mark.parametrize("seed", range(4))
def test_native_scan_random_cuts(seed, kernel_runs, monkeypatch):
    """Random saved-state intervals, head groups (partial last group) and thread counts: the way the work is cut
    changes nothing."""
    gen = torch.Generator().manual_seed(seed)
    pick = lambda low, high: int(torch.randint(low, high + 1, (), generator=gen))  # noqa: E731
    monkeypatch.setattr(native, "INTERVAL", pick(1, 9))
    monkeypatch.setattr(native, "GROUP", pick(1, 4))
    monkeypatch.setattr(native.torch, "get_num_threads", lambda: pick(1, 4))
    decay = ("none", "scalar", "diagonal", "factored")[seed]
    leaves = _problem(100 + seed, decay, shared=bool(seed % 2), key_dim=pick(1, 17), value_dim=pick(1, 3),
                      length=pick(1, 40), heads=pick(1, 7))
    got, want = _run(leaves, "scan"), _run(leaves, "quadratic")
    assert kernel_runs
    for name in want:
        assert_close(got[name], want[name], TOL, f"native scan, seed {seed}: {name}")


@needs_kernel
def test_native_scan_float32_follows_float64(kernel_runs):
    leaves = _problem(7, "factored", True, 16, 1, length=300, heads=8, dtype=torch.float32)
    wide = {name: x.detach().double().requires_grad_() for name, x in leaves.items()}
    got, want = _run(leaves, "scan"), _run(wide, "scan")
    assert got["y"].dtype == torch.float32
    for name in want:
        assert_close(got[name].double(), want[name], 1e-4, f"float32 {name}")


@needs_kernel
def test_native_scan_without_gradients_and_without_initial_state(kernel_runs):
    leaves = _problem(3, "diagonal", False, 4, 2, length=20)
    with torch.no_grad():
        y = seqdyn.coefficient_dynamics(leaves["q"], leaves["k"], leaves["v"], log_decay=leaves["log_decay"],
                                        backend="scan")
        exact = seqdyn.coefficient_dynamics(leaves["q"], leaves["k"], leaves["v"], log_decay=leaves["log_decay"],
                                            backend="quadratic")
    assert kernel_runs
    assert_close(y, exact, TOL, "inference")


def test_the_torch_blocks_serve_where_the_kernel_cannot(monkeypatch):
    """With ``SEQDYN_COMPILE=0``, a dtype the kernel lacks (bfloat16; the operator itself computes half precision
    in float32), mixed dtypes, another device or no kernel, the scan runs its torch blocks."""
    x64 = torch.zeros(2, dtype=torch.float64)
    monkeypatch.setenv("SEQDYN_COMPILE", "0")
    assert not native.available(x64)
    monkeypatch.delenv("SEQDYN_COMPILE")
    assert not native.available(torch.zeros(2, dtype=torch.bfloat16))
    assert not native.available(x64, torch.zeros(2, dtype=torch.float32))  # mixed dtypes
    assert not native.available(torch.zeros(2, device="meta"))
    monkeypatch.setattr(native, "library", lambda name="scan_kernel": None)
    assert not native.available(x64)
    leaves = _problem(5, "factored", True, 4, 2, length=2 * scan.BLOCK + 1)
    got, want = _run(leaves, "scan"), _run(leaves, "quadratic")
    for name in want:
        assert_close(got[name], want[name], TOL, f"torch blocks {name}")


def test_a_compiler_that_fails_leaves_the_torch_blocks(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("SEQDYN_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # exits 1: the build fails
    native.library.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="seqdyn"):
            assert native.library() is None
        assert "native kernel did not build" in caplog.text
        assert not list((tmp_path / "kernels").glob("*.so"))
    finally:
        native.library.cache_clear()


@needs_kernel
def test_the_kernel_is_built_once_per_machine(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQDYN_CACHE", str(tmp_path))
    native.library.cache_clear()
    try:
        assert native.library() is not None
        built = list((tmp_path / "kernels").glob("scan_kernel-*.so"))
        assert len(built) == 1
        stamp = built[0].stat().st_mtime_ns
        native.library.cache_clear()
        assert native.library() is not None
        assert [p.stat().st_mtime_ns for p in (tmp_path / "kernels").glob("*.so")] == [stamp]
    finally:
        native.library.cache_clear()


@needs_kernel
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_scans_with_threads_of_its_own(monkeypatch):
    """The parent's thread pool does not survive a fork; the child must build its own instead of waiting on
    threads that do not exist."""
    import multiprocessing

    monkeypatch.setattr(native.torch, "get_num_threads", lambda: 2)
    leaves = _problem(9, "factored", True, 16, 1, length=20)
    want = _run(leaves, "scan")["y"].detach()  # the parent's pool now exists
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        got = pool.apply_async(_forward_in_child, (9,)).get(timeout=60)
    assert_close(got, want, TOL, "forked child")


def _forward_in_child(seed: int) -> torch.Tensor:
    native.torch.get_num_threads = lambda: 2
    leaves = _problem(seed, "factored", True, 16, 1, length=20)
    return _run(leaves, "scan")["y"].detach()
