"""Atomic regression tasks of seed 002 §3.1: targets recomputed from the inputs, independently."""

import math

import numpy as np
import pytest
import torch

from seqdyn.tasks import build


def _data(inputs):
    """The data channels (positional channels dropped), float64."""
    return inputs[..., :-2].double()


def _assert_inf_normalized(x):
    assert torch.allclose(x.abs().amax(dim=1), torch.ones(x.shape[0], dtype=x.dtype))


def test_shift():
    L, C = 64, 8
    inputs, targets = build("shift", seq_len=L, num_shifts=C).generate(5, 0)
    x = _data(inputs)[..., 0]
    _assert_inf_normalized(x)
    for j in range(C):
        r = j * L // C
        expected = torch.cat([torch.zeros(5, r, dtype=x.dtype), x[:, : L - r]], dim=1)
        assert torch.allclose(targets[..., j].double(), expected, atol=1e-6)


def test_cumsum_and_cummax():
    inputs, targets = build("cumsum", seq_len=50).generate(4, 1)
    x = _data(inputs)[..., 0]
    _assert_inf_normalized(x)
    running = np.cumsum(x.numpy(), axis=1) / np.sqrt(np.arange(1, 51))
    assert np.allclose(targets[..., 0].numpy(), running, atol=1e-5)
    inputs, targets = build("cummax", seq_len=50).generate(4, 1)
    x = _data(inputs)[..., 0]
    expected = [[max(row[: i + 1]) for i in range(50)] for row in x.tolist()]
    assert np.allclose(targets[..., 0].numpy(), expected, atol=1e-6)


def test_reverse():
    L = 40
    inputs, targets = build("reverse", seq_len=L).generate(4, 2)
    x = _data(inputs)[..., 0]
    assert inputs.shape == (4, 2 * L, 3) and (x[:, L:] == 0).all()
    _assert_inf_normalized(x[:, :L])
    assert torch.allclose(targets[..., 0].double(), x[:, :L].flip(1), atol=1e-6)


def test_sort_orders_by_distance_to_the_first_element():
    L = 40
    inputs, targets = build("sort", seq_len=L).generate(6, 3)
    x = _data(inputs)[..., 0][:, :L].numpy()
    y = targets[..., 0].double().numpy()
    for row, out in zip(x, y):
        assert np.allclose(np.sort(out), np.sort(row), atol=1e-6)  # a permutation of the inputs
        assert np.all(np.diff(np.abs(out - row[0])) >= -1e-6)
        assert out[0] == pytest.approx(row[0], abs=1e-6)


@pytest.mark.parametrize("name", ["select", "select_fixed"])
def test_select(name):
    L, M = 48, 8
    task = build(name, seq_len=L, num_select=M)
    inputs, targets = task.generate(5, 4)
    values, flags = _data(inputs)[..., 0], _data(inputs)[..., 1]
    assert inputs.shape == (5, L + 2 * M, 4) and (values[:, L + M :] == 0).all() and (flags[:, L + M :] == 0).all()
    _assert_inf_normalized(values[:, : L + M])
    positions = [torch.nonzero(f).flatten().tolist() for f in flags]
    assert all(len(p) == M for p in positions)
    for v, p, y in zip(values, positions, targets[..., 0].double()):
        assert torch.allclose(y, v[p], atol=1e-6)
    same = all(p == positions[0] for p in positions)
    assert same == (name == "select_fixed")
    if name == "select_fixed":
        other = task.generate(3, 9, split="test")[0][..., 1]
        assert torch.nonzero(other[0]).flatten().tolist() == positions[0]
        moved = build(name, seq_len=L, num_select=M, positions_seed=1).generate(1, 4)[0][0, :, 1]
        assert torch.nonzero(moved).flatten().tolist() != positions[0]


def test_mips_is_the_causal_argmax():
    L, D = 24, 4
    inputs, targets = build("mips", seq_len=L, dim=D).generate(3, 5)
    data = _data(inputs)
    q, k, v = data[..., :D], data[..., D : 2 * D], data[..., 2 * D :]
    for t in (q, k, v):
        assert torch.allclose(t.norm(dim=-1), torch.ones(3, L, dtype=t.dtype), atol=1e-5)
    for b in range(3):
        for i in range(L):
            best = max(range(i + 1), key=lambda j: float(q[b, i] @ k[b, j]))
            assert torch.allclose(targets[b, i].double(), v[b, best], atol=1e-5)


def test_context_shift():
    L = 32
    inputs, targets = build("context_shift", seq_len=L).generate(20, 6)
    xp = _data(inputs)[..., 0]
    shifts = set()
    for row, y in zip(xp, targets[..., 0].double()):
        s = round(math.atan2(float(row[1]), float(row[0])) / (2 * math.pi) * L) % L
        assert 0 <= s <= L - 2
        shifts.add(s)
        assert torch.isclose(row[2:].abs().max(), torch.tensor(1.0, dtype=row.dtype))
        expected = torch.cat([torch.zeros(s, dtype=row.dtype), row[: L - s]])
        assert torch.allclose(y, expected, atol=1e-6)
    assert len(shifts) > 5


def _largest_n(L):
    n = 0
    while (n + 1) ** 2 + (n + 1) <= L:
        n += 1
    return n


@pytest.mark.parametrize("name", ["solve", "solve_fixed"])
@pytest.mark.parametrize("L", [2, 7, 64, 100])
def test_solve_recovers_x_from_a_and_b(name, L):
    task = build(name, seq_len=L)
    inputs, targets = task.generate(4, 7)
    N = _largest_n(L)
    assert targets.shape == (4, N, 1)
    x = _data(inputs)[..., 0].numpy()
    assert np.all(x[:, N * N + N :] == 0)
    blocks = x[:, : N * N + N].reshape(4, N, N + 1)
    A, B = blocks[..., :N], blocks[..., N]
    for a, b, y in zip(A, B, targets[..., 0].double().numpy()):
        assert np.allclose(a @ a.T, np.eye(N), atol=1e-5)
        assert np.allclose(np.linalg.solve(a, b), y, atol=1e-4)
        assert np.linalg.norm(y) == pytest.approx(1.0, abs=1e-5)
    fixed = all(np.allclose(a, A[0]) for a in A)
    if name == "solve_fixed" or N > 1:  # with N = 1, A = ±1 may repeat by chance
        assert fixed == (name == "solve_fixed")


def test_solve_fixed_matrix_is_shared_by_splits_and_seeds():
    task = build("solve_fixed", seq_len=30)
    a = task.generate(1, 0)[0][0, :30, 0]
    b = task.generate(1, 5, split="test")[0][0, :30, 0]
    N = _largest_n(30)
    blocks_a, blocks_b = a.reshape(-1)[: N * N + N].reshape(N, N + 1), b[: N * N + N].reshape(N, N + 1)
    assert torch.allclose(blocks_a[:, :N], blocks_b[:, :N]) and not torch.allclose(blocks_a[:, N], blocks_b[:, N])


@pytest.mark.parametrize(
    "name, params, words",
    [
        ("solve", {"seq_len": 1}, ["seq_len", "1"]),
        ("solve_fixed", {"seq_len": 0}, ["seq_len", "0"]),
        ("shift", {"seq_len": 4, "num_shifts": 8}, ["num_shifts", "8", "seq_len"]),
        ("select", {"num_select": 0}, ["num_select", "0"]),
        ("mips", {"dim": -1}, ["dim", "-1"]),
        ("context_shift", {"seq_len": 2}, ["seq_len", "2"]),
    ],
)
def test_impossible_parameters_are_refused(name, params, words):
    with pytest.raises(ValueError) as info:
        build(name, **params)
    for word in words:
        assert word in str(info.value)


def test_solve_too_short_for_one_unknown_says_why():
    with pytest.raises(ValueError, match="seq_len=1"):
        build("solve", seq_len=1)
