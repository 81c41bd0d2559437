"""The scan's native CPU kernel (``seqdyn.kernels.scan``) against the ``quadratic`` reference.

Random problems in float64 — every decay kind (none, scalar, diagonal, factored ``Δ ⊗ A``), q and k per head or
shared by all heads, one value column (Mamba-1) or several, key dimensions the kernel fixes at compile time and
others, time-major inputs, several saved-state intervals, partial groups of heads and several threads — compared
with the ``quadratic`` backend in outputs, final states and every gradient; then float32, the fallbacks (no
kernel, other dtypes, ``SEQDYN_KERNELS=off``, a compiler that fails under ``auto`` and ``require``) and the on-disk
cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

import seqdyn
from seqdyn.core.backends import scan
from seqdyn.kernels import build
from seqdyn.kernels import scan as scan_kernel
from tests.core.cases import assert_close

TOL = 1e-10

needs_kernel = pytest.mark.skipif(
    isinstance(build.load("scan_kernel"), str), reason="no C++ compiler to build the native scan"
)


def _problem(
    seed: int, decay: str, shared: bool, key_dim: int, value_dim: int, length: int, heads: int = 5, dtype=torch.float64
):
    """Leaves of a random problem in the operator's layout ``[B, T, H, ...]`` (time-major in memory, as mixers
    give them) and the operator's keyword arguments for its decay."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    key_heads = 1 if shared else heads
    leaves = {
        "q": rand(2, length, key_heads, key_dim),
        "k": rand(2, length, key_heads, key_dim) / key_dim**0.5,
        "v": rand(2, length, heads, value_dim),
        "state": rand(2, heads, key_dim, value_dim),
    }
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
    y, final = seqdyn.coefficient_dynamics(
        leaves["q"],
        leaves["k"],
        leaves["v"],
        initial_state=leaves["state"],
        output_final_state=True,
        backend=backend,
        **extra,
    )
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
    loss = (y * weights).sum() + (final * final.detach().sin()).sum()
    return {"y": y, "final": final} | dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))


@pytest.fixture
def kernel_runs(monkeypatch):
    """Counts the native kernel's forward calls (so that a test knows it did not fall back)."""
    calls = []
    real = scan_kernel.scan
    monkeypatch.setattr(scan_kernel, "scan", lambda *args: calls.append(1) or real(*args))
    monkeypatch.delenv("SEQDYN_COMPILE", raising=False)
    monkeypatch.setenv("SEQDYN_KERNELS", "require")
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
    monkeypatch.setattr(scan_kernel, "INTERVAL", pick(1, 9))
    monkeypatch.setattr(scan_kernel, "GROUP", pick(1, 4))
    monkeypatch.setattr(scan_kernel.torch, "get_num_threads", lambda: pick(1, 4))
    decay = ("none", "scalar", "diagonal", "factored")[seed]
    leaves = _problem(
        100 + seed,
        decay,
        shared=bool(seed % 2),
        key_dim=pick(1, 17),
        value_dim=pick(1, 3),
        length=pick(1, 40),
        heads=pick(1, 7),
    )
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
        y = seqdyn.coefficient_dynamics(
            leaves["q"], leaves["k"], leaves["v"], log_decay=leaves["log_decay"], backend="scan"
        )
        exact = seqdyn.coefficient_dynamics(
            leaves["q"], leaves["k"], leaves["v"], log_decay=leaves["log_decay"], backend="quadratic"
        )
    assert kernel_runs
    assert_close(y, exact, TOL, "inference")


def test_the_torch_blocks_serve_where_the_kernel_cannot(monkeypatch):
    """With ``SEQDYN_KERNELS=off`` (or its older spelling ``SEQDYN_COMPILE=0``), a dtype the kernel lacks
    (bfloat16; the operator itself computes half precision in float32), mixed dtypes, another device, scalar
    states (where the kernel does not pay) or no kernel, the scan runs its torch blocks."""
    x64 = torch.zeros(1, 1, 1, 2, dtype=torch.float64)
    assert scan_kernel.available(x64, x64, x64, None, None, None) == (not isinstance(build.load("scan_kernel"), str))
    monkeypatch.setenv("SEQDYN_KERNELS", "off")
    assert not scan_kernel.available(x64, x64, x64, None, None, None)
    monkeypatch.delenv("SEQDYN_KERNELS")
    monkeypatch.setenv("SEQDYN_COMPILE", "0")
    assert not scan_kernel.available(x64, x64, x64, None, None, None)
    monkeypatch.delenv("SEQDYN_COMPILE")
    scalar = torch.zeros(1, 1, 1, 1, dtype=torch.float64)
    assert not scan_kernel.available(scalar, scalar, scalar, None, None, None)
    assert not build.available("scan_kernel", torch.zeros(2, dtype=torch.bfloat16))
    assert not build.available("scan_kernel", x64, torch.zeros(2, dtype=torch.float32))  # mixed dtypes
    assert not build.available("scan_kernel", torch.zeros(2, device="meta"))
    monkeypatch.setattr(build, "library", lambda name: None)
    assert not scan_kernel.available(x64, x64, x64, None, None, None)
    leaves = _problem(5, "factored", True, 4, 2, length=2 * scan.BLOCK + 1)
    got, want = _run(leaves, "scan"), _run(leaves, "quadratic")
    for name in want:
        assert_close(got[name], want[name], TOL, f"torch blocks {name}")


@pytest.fixture
def failing_compiler(monkeypatch, tmp_path):
    """A compiler that exits 1 (the build fails), a fresh cache, and the kernels forgotten before and after."""
    monkeypatch.setenv("SEQDYN_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    monkeypatch.delenv("SEQDYN_COMPILE", raising=False)
    build.forget()
    yield tmp_path
    build.forget()


def test_a_compiler_that_fails_warns_once_and_leaves_the_torch_blocks(failing_compiler, monkeypatch):
    monkeypatch.setenv("SEQDYN_KERNELS", "auto")
    with pytest.warns(RuntimeWarning, match="scan_kernel: the native kernel could not be built"):
        assert build.library("scan_kernel") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process: no second warning
        assert build.library("scan_kernel") is None
        monkeypatch.setenv("SEQDYN_KERNELS", "off")
        assert build.library("scan_kernel") is None
    assert not list((failing_compiler / "kernels").glob("*.so"))
    leaves = _problem(5, "diagonal", False, 4, 2, length=20)
    monkeypatch.setenv("SEQDYN_KERNELS", "auto")
    got, want = _run(leaves, "scan"), _run(leaves, "quadratic")
    assert_close(got["y"], want["y"], TOL, "torch blocks after a failed build")


def test_a_compiler_that_fails_raises_under_require(failing_compiler, monkeypatch):
    monkeypatch.setenv("SEQDYN_KERNELS", "require")
    with pytest.raises(build.KernelUnavailable, match="scan_kernel: the native kernel could not be built"):
        build.library("scan_kernel")
    monkeypatch.setenv("CXX", str(failing_compiler / "no-such-compiler"))
    build.forget()
    leaves = _problem(5, "diagonal", False, 4, 2, length=20)
    with pytest.raises(build.KernelUnavailable, match="scan_kernel.*no-such-compiler"):
        _run(leaves, "scan")


def test_an_unknown_kernel_mode_is_refused(monkeypatch):
    monkeypatch.setenv("SEQDYN_KERNELS", "sometimes")
    with pytest.raises(ValueError, match="SEQDYN_KERNELS: expected one of off, auto, require, got 'sometimes'"):
        build.mode()


def test_vector_flags_for_x86_and_arm_only():
    assert "-march=native" in build.machine_flags("x86_64")
    assert build.machine_flags("aarch64") == ("-mcpu=native",)
    assert build.machine_flags("riscv64") == ()
    assert not any("native" in flag for flag in build.FLAGS)


@needs_kernel
def test_the_kernel_is_built_once_per_machine(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQDYN_CACHE", str(tmp_path))
    build.forget()
    try:
        assert build.load("scan_kernel") is not None
        built = list((tmp_path / "kernels").glob("scan_kernel-*.so"))
        assert len(built) == 1
        stamp = built[0].stat().st_mtime_ns
        build.forget()
        assert not isinstance(build.load("scan_kernel"), str)
        assert [p.stat().st_mtime_ns for p in (tmp_path / "kernels").glob("*.so")] == [stamp]
    finally:
        build.forget()


FORKED_CHILD = """
import multiprocessing, torch, seqdyn
from seqdyn.kernels import scan as scan_kernel



def forward(seed):
    if multiprocessing.parent_process() is not None:
        torch.set_num_threads(1)  # what torch's data loader workers do: its OpenMP pool does not survive a fork
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 20, 1, 16, generator=gen), torch.randn(2, 20, 1, 16, generator=gen) / 4
    v, g = torch.randn(2, 20, 5, 1, generator=gen), torch.rand(2, 20, 5, generator=gen)
    rate = -torch.rand(5, 16, generator=gen) * 2
    return seqdyn.coefficient_dynamics(q, k, v, log_decay=g, decay_rate=rate, backend="scan")


if __name__ == "__main__":
    want = forward(9)  # the parent's OpenMP pool now exists
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply_async(forward, (9,)).get(timeout=60)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6), (got - want).abs().max()
"""


@needs_kernel
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_scans_on_the_thread_torch_gives_it(tmp_path):
    """The kernel runs on torch's intra-op (OpenMP) threads, which do not survive a fork: a forked child (data loader
    workers, process pools) runs it as it runs torch's own operators, on the one thread torch's data loader gives
    its workers.  Run in a fresh interpreter, whose OpenMP pool no earlier test has resized."""
    script = tmp_path / "forked_child.py"
    script.write_text(FORKED_CHILD)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
