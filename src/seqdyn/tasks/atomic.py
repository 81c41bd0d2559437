"""The atomic regression tasks of Gupta et al. 2022 §3.1 ("Simplifying and Understanding State Space Models with
Diagonal Linear RNNs", https://arxiv.org/abs/2212.00768), exactly as written there.
L = ``seq_len`` (the paper's 2^12 by default).

Unless said otherwise, x ∈ R^L has N(0, 1) entries divided by ‖x‖_∞.

- ``shift``: y_ij = x_{i − jL/C}, j = 0..C−1 (C = ``num_shifts`` = 8; x_{<0} = 0; jL/C rounded down).
- ``cumsum``: y_i = (i+1)^(−1/2) Σ_{j≤i} x_j.        - ``cummax``: y_i = max_{j≤i} x_j.
- ``reverse``: y_i = x_{L−1−i}; the input is x followed by L zeros, the L rightmost outputs are predicted.
- ``sort``: as ``reverse``, y_i is the i-th closest element to x_0 by |x_j − x_0| (ties in index order).
- ``select`` / ``select_fixed``: x ∈ R^{L+M} (M = ``num_select`` = 32), M distinct positions i_1 < … < i_M
  (fresh per example / fixed by ``positions_seed``), y_j = x_{i_j}; the input is x followed by M zeros, with a
  0/1 channel flagging the selected positions; the M rightmost outputs are predicted.
- ``mips``: q, k, v ∈ R^{L×D} (D = ``dim`` = 4) with unit-norm rows; y_i = v_{i'}, i' = argmax_{j≤i} ⟨q_i, k_j⟩;
  the input concatenates q, k, v per position.
- ``context_shift``: x ∈ R^{L−2}, s uniform in 0..L−2, x' = (cos 2πs/L, sin 2πs/L, x) ∈ R^L, y_i = x'_{i−s}.
- ``solve`` / ``solve_fixed``: N = the largest integer with L − N² − N ≥ 0; A ∈ R^{N×N} random orthonormal
  (Haar; fresh per example / fixed by ``matrix_seed``), X a random unit vector, B = AX; the input is
  (a_1, b_1, …, a_N, b_N, 0, …) ∈ R^L with a_i the i-th row of A; y = X on the N rightmost outputs.

Every input gets two positional channels cos(2πi/T), sin(2πi/T) appended, T its length. Loss: MSE on the T_out
rightmost outputs. Metric: R² = 1 − MSE / Var(y) with the mean of y taken over the whole batch (Gupta et al. 2022 §3.3).
"""

from __future__ import annotations

import numpy as np
import torch

from seqdyn.tasks.base import Param, Task, TaskSpec, distinct_rows, positional_channels, register

_SEQ_LEN = Param(4096, int, "sequence length L (the paper uses 2^12 and 2^9)", low=2)


def _normalized_gaussian(rng: np.random.Generator, n: int, length: int) -> np.ndarray:
    x = rng.standard_normal((n, length))
    return x / np.abs(x).max(axis=1, keepdims=True)


class _Atomic(Task):
    """A regression task: data ``[n, T_in, C_data]`` (+ 2 positional channels), targets ``[n, T_out, C_out]``."""

    family = "atomic"
    reference = "Gupta et al. 2022 §3.1"
    head_kind = "regression"
    data_channels = 1
    out_channels = 1

    def input_length(self) -> int:
        return self.seq_len

    def target_length(self) -> int:
        return self.seq_len

    def _spec(self) -> TaskSpec:
        return TaskSpec(
            "channels",
            self.data_channels + 2,
            self.input_length(),
            self.head_kind,
            self.out_channels,
            self.target_length(),
            "r2",
        )

    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        data, targets = self._data(n, rng)
        if data.ndim == 2:
            data = data[..., None]
        if targets.ndim == 2:
            targets = targets[..., None]
        position = np.broadcast_to(positional_channels(data.shape[1]), (n, data.shape[1], 2))
        inputs = np.concatenate([data, position], axis=2).astype(np.float32)
        return inputs, targets.astype(np.float32)

    def _data(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def render(self, inputs: torch.Tensor, targets: torch.Tensor, index: int = 0, rows: int = 4) -> str:
        x, y = inputs[index], targets[index]
        t_in, t_out = x.shape[0], y.shape[0]

        def line(label: str, i: int, values: torch.Tensor) -> str:
            return f"  {label}[{i:>5}] " + " ".join(f"{v:+.3f}" for v in values.tolist())

        out = [
            f"{self.name}: input [{t_in}, {x.shape[1]}] (data channels, then cos/sin position), "
            f"target [{t_out}, {y.shape[1]}] on the {t_out} rightmost positions"
        ]
        out += [line("x", i, x[i]) for i in range(min(rows, t_in))]
        out.append("  …")
        out += [line("y", i, y[i]) for i in range(min(rows, t_out))]
        if t_out > rows:
            out.append("  …")
            out.append(line("y", t_out - 1, y[-1]))
        return "\n".join(out)


@register
class Shift(_Atomic):
    name = "shift"
    PARAMS = {"seq_len": _SEQ_LEN, "num_shifts": Param(8, int, "output channels C (shifts jL/C)", low=1)}

    def _check(self) -> None:
        if self.num_shifts > self.seq_len:
            self._fail(f"parameter num_shifts={self.num_shifts} must be <= seq_len={self.seq_len}")

    @property
    def out_channels(self) -> int:
        return self.num_shifts

    def _data(self, n, rng):
        L = self.seq_len
        x = _normalized_gaussian(rng, n, L)
        y = np.zeros((n, L, self.num_shifts))
        for j in range(self.num_shifts):
            s = j * L // self.num_shifts
            y[:, s:, j] = x[:, : L - s]
        return x, y


@register
class CumSum(_Atomic):
    name = "cumsum"
    PARAMS = {"seq_len": _SEQ_LEN}

    def _data(self, n, rng):
        x = _normalized_gaussian(rng, n, self.seq_len)
        return x, np.cumsum(x, axis=1) / np.sqrt(np.arange(1, self.seq_len + 1))


@register
class CumMax(_Atomic):
    name = "cummax"
    PARAMS = {"seq_len": _SEQ_LEN}

    def _data(self, n, rng):
        x = _normalized_gaussian(rng, n, self.seq_len)
        return x, np.maximum.accumulate(x, axis=1)


class _Padded(_Atomic):
    """x followed by L zeros; the L rightmost outputs are predicted."""

    def input_length(self) -> int:
        return 2 * self.seq_len

    def _data(self, n, rng):
        x = _normalized_gaussian(rng, n, self.seq_len)
        return np.concatenate([x, np.zeros_like(x)], axis=1), self._target(x)


@register
class Reverse(_Padded):
    name = "reverse"
    PARAMS = {"seq_len": _SEQ_LEN}

    def _target(self, x):
        return x[:, ::-1]


@register
class Sort(_Padded):
    name = "sort"
    PARAMS = {"seq_len": _SEQ_LEN}

    def _target(self, x):
        order = np.argsort(np.abs(x - x[:, :1]), axis=1, kind="stable")
        return np.take_along_axis(x, order, axis=1)


@register
class Select(_Atomic):
    name = "select"
    PARAMS = {"seq_len": _SEQ_LEN, "num_select": Param(32, int, "selected positions M", low=1)}
    data_channels = 2

    def input_length(self) -> int:
        return self.seq_len + 2 * self.num_select

    def target_length(self) -> int:
        return self.num_select

    def _positions(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.sort(distinct_rows(rng, n, self.num_select, 0, self.seq_len + self.num_select), axis=1)

    def _data(self, n, rng):
        L, M = self.seq_len, self.num_select
        x = _normalized_gaussian(rng, n, L + M)
        positions = self._positions(rng, n)
        data = np.zeros((n, L + 2 * M, 2))
        data[:, : L + M, 0] = x
        np.put_along_axis(data[..., 1], positions, 1.0, axis=1)
        return data, np.take_along_axis(x, positions, axis=1)


@register
class SelectFixed(Select):
    name = "select_fixed"
    PARAMS = {**Select.PARAMS, "positions_seed": Param(0, int, "seed of the fixed positions", low=0)}

    def fixed_positions(self) -> np.ndarray:
        """The M positions shared by every example (and every split)."""
        rng = np.random.Generator(np.random.PCG64(self.positions_seed))
        return np.sort(distinct_rows(rng, 1, self.num_select, 0, self.seq_len + self.num_select)[0])

    def _positions(self, rng, n):
        return np.tile(self.fixed_positions(), (n, 1))


def _unit_rows(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    v = rng.standard_normal(shape)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@register
class MIPS(_Atomic):
    name = "mips"
    PARAMS = {"seq_len": _SEQ_LEN, "dim": Param(4, int, "dimension D of queries, keys and values", low=1)}

    @property
    def data_channels(self) -> int:
        return 3 * self.dim

    @property
    def out_channels(self) -> int:
        return self.dim

    def _data(self, n, rng):
        L, D = self.seq_len, self.dim
        q, k, v = (_unit_rows(rng, (n, L, D)) for _ in range(3))
        best = np.empty((n, L), dtype=np.int64)
        block = max(1, (1 << 22) // L)
        causal = np.tril(np.ones((L, L), dtype=bool))
        for b in range(n):
            for i0 in range(0, L, block):
                scores = q[b, i0 : i0 + block] @ k[b].T
                scores[~causal[i0 : i0 + block]] = -np.inf
                best[b, i0 : i0 + block] = scores.argmax(axis=1)
        y = np.take_along_axis(v, best[..., None], axis=1)
        return np.concatenate([q, k, v], axis=2), y


@register
class ContextShift(_Atomic):
    name = "context_shift"
    PARAMS = {"seq_len": Param(4096, int, "sequence length L", low=3)}

    def _data(self, n, rng):
        L = self.seq_len
        x = _normalized_gaussian(rng, n, L - 2)
        s = rng.integers(0, L - 1, size=n)
        angle = 2 * np.pi * s / L
        xp = np.concatenate([np.cos(angle)[:, None], np.sin(angle)[:, None], x], axis=1)
        source = np.arange(L) - s[:, None]
        y = np.where(source >= 0, np.take_along_axis(xp, np.maximum(source, 0), axis=1), 0.0)
        return xp, y


def solve_size(seq_len: int) -> int:
    """The largest N with seq_len − N² − N ≥ 0."""
    N = int((np.sqrt(1 + 4 * seq_len) - 1) / 2)
    while N * N + N > seq_len:
        N -= 1
    while (N + 1) * (N + 2) <= seq_len:
        N += 1
    return N


def _haar_orthogonal(rng: np.random.Generator, n: int, N: int) -> np.ndarray:
    """``[n, N, N]`` Haar-distributed orthogonal matrices (QR of a Gaussian, signs fixed by diag R)."""
    q, r = np.linalg.qr(rng.standard_normal((n, N, N)))
    return q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]


@register
class Solve(_Atomic):
    name = "solve"
    PARAMS = {"seq_len": _SEQ_LEN}

    def _check(self) -> None:
        if solve_size(self.seq_len) < 1:
            self._fail(f"parameter seq_len={self.seq_len} must be >= 2 so that N >= 1 (L − N² − N >= 0)")

    @property
    def size(self) -> int:
        """N, the dimension of the linear system."""
        return solve_size(self.seq_len)

    def target_length(self) -> int:
        return self.size

    def _matrices(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return _haar_orthogonal(rng, n, self.size)

    def _data(self, n, rng):
        N = self.size
        A = self._matrices(rng, n)
        X = _unit_rows(rng, (n, N))
        B = np.einsum("bij,bj->bi", A, X)
        rows = np.concatenate([A, B[..., None]], axis=2).reshape(n, N * N + N)
        data = np.zeros((n, self.seq_len))
        data[:, : N * N + N] = rows
        return data, X


@register
class SolveFixed(Solve):
    name = "solve_fixed"
    PARAMS = {**Solve.PARAMS, "matrix_seed": Param(0, int, "seed of the fixed matrix A", low=0)}

    def fixed_matrix(self) -> np.ndarray:
        """The orthonormal A shared by every example (and every split)."""
        return _haar_orthogonal(np.random.Generator(np.random.PCG64(self.matrix_seed)), 1, self.size)[0]

    def _matrices(self, rng, n):
        return np.broadcast_to(self.fixed_matrix(), (n, self.size, self.size))
