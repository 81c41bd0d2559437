"""Multi-query associative recall (MQAR), exactly as Zoology's ``multiquery_ar`` (Arora et al. 2023).

An example with P key–value pairs, L = ``seq_len`` and V = ``vocab_size`` (keys in ``1 .. V/2 − 1``, values in
``V/2 .. V − 1``, 0 the filler), e.g. V = 12, P = 2, L = 16, ``random_non_queries=False``::

    inputs   2  8  4  7  0  0  4  0  0  0  0  0  2  0  0  0
    targets  ·  ·  ·  ·  ·  ·  7  ·  ·  ·  ·  ·  8  ·  ·  ·      (· = −100)

1. P distinct keys and P distinct values per example; the context ``k1 v1 … kP vP`` is repeated
   ``num_passes`` times (length C = 2·P·num_passes).
2. Gaps: ``space = (L − C)/2``, ``p_i ∝ a·i^(a−1)`` for i = 1..space (a = ``power_a``); P distinct gaps
   g_m ∈ {0..space−1} are drawn one after another with these probabilities, renormalized over the gaps not
   yet taken (numpy's ``choice(replace=False, p=p)``); key m is queried at position C + 2·g_m.
3. The target at a query position is that key's value; −100 elsewhere. (Zoology builds L+1 tokens and shifts
   by one; the result is the same.)
4. With ``random_non_queries`` every remaining 0 becomes a uniform random token in ``[0, V)``.

Metric: accuracy over each example's labelled positions, averaged over examples.
"""

from __future__ import annotations

import numpy as np
import torch

from seqdyn.tasks.base import (
    IGNORE_INDEX,
    Param,
    Task,
    TaskSpec,
    distinct_rows,
    per_example_accuracy,
    register,
    render_tokens,
)


@register
class MQAR(Task):
    """Multi-query associative recall (Zoology)."""

    name = "mqar"
    family = "mqar"
    reference = "Arora et al. 2023 (Zoology), multiquery_ar"
    PARAMS = {
        "vocab_size": Param(8192, int, "vocabulary size V (keys below V/2, values from V/2)", low=4),
        "seq_len": Param(64, int, "sequence length L (even, < vocab_size)", low=2),
        "num_kv_pairs": Param(8, int, "key–value pairs P per example", low=1),
        "power_a": Param(0.01, float, "power-law exponent a of the query gaps, p_i ∝ a·i^(a−1)", low=0.0),
        "random_non_queries": Param(True, bool, "replace fillers (0) by uniform random tokens"),
        "num_passes": Param(1, int, "repetitions of the key–value context (JRT)", low=1),
    }

    def _check(self) -> None:
        if self.power_a <= 0:
            self._fail(f"parameter power_a={self.power_a!r} must be > 0")
        if self.seq_len % 2:
            self._fail(f"parameter seq_len={self.seq_len} must be even")
        if self.vocab_size <= self.seq_len:
            self._fail(f"parameter vocab_size={self.vocab_size} must be greater than seq_len={self.seq_len}")
        need = 4 * self.num_kv_pairs * self.num_passes
        if need > self.seq_len:
            self._fail(
                f"parameter num_kv_pairs={self.num_kv_pairs} needs 4·num_kv_pairs·num_passes = {need} <= "
                f"seq_len={self.seq_len}"
            )

    def _spec(self) -> TaskSpec:
        V, T = self.vocab_size, self.seq_len
        return TaskSpec("tokens", V, T, self.head_kind, V, T, "accuracy")

    @property
    def context_len(self) -> int:
        return 2 * self.num_kv_pairs * self.num_passes

    def gap_probabilities(self) -> np.ndarray:
        """``p_i ∝ a·i^(a−1)`` for i = 1..space; entry i−1 is the probability of gap i−1 (the first draw)."""
        space = (self.seq_len - self.context_len) // 2
        p = self.power_a * np.arange(1, space + 1, dtype=np.float64) ** (self.power_a - 1)
        return p / p.sum()

    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        P, L, V, C = self.num_kv_pairs, self.seq_len, self.vocab_size, self.context_len
        keys = distinct_rows(rng, n, P, 1, V // 2)
        values = distinct_rows(rng, n, P, V // 2, V)
        gaps = self._draw_gaps(rng, n)

        inputs = np.zeros((n, L), dtype=np.int64)
        context = np.stack([keys, values], axis=2).reshape(n, 1, 2 * P)  # k1 v1 k2 v2 …
        inputs[:, :C] = np.tile(context, (1, self.num_passes, 1)).reshape(n, C)
        query_pos = C + 2 * gaps
        np.put_along_axis(inputs, query_pos, keys, axis=1)
        targets = np.full((n, L), IGNORE_INDEX, dtype=np.int64)
        np.put_along_axis(targets, query_pos, values, axis=1)

        if self.random_non_queries:
            fillers = inputs == 0
            inputs[fillers] = rng.integers(0, V, size=int(fillers.sum()))
        return inputs, targets

    def _draw_gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """P distinct gaps per row, drawn successively without replacement with probabilities p (in draw order).

        Exponential race: with E_i ~ Exp(1), the order of E_i / p_i is the order of successive weighted draws
        without replacement (Plackett–Luce), so the P smallest, sorted, are the first P draws.
        """
        p = self.gap_probabilities()
        P = self.num_kv_pairs
        race = rng.standard_exponential((n, p.size)) / p
        first = np.argpartition(race, P - 1, axis=1)[:, :P] if P < p.size else np.tile(np.arange(P), (n, 1))
        order = np.argsort(np.take_along_axis(race, first, axis=1), axis=1)
        return np.take_along_axis(first, order, axis=1)

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """Per-example accuracy over labelled positions, averaged over examples as Zoology does, and the loss."""
        outputs = self._output_window(outputs.detach(), targets)
        targets = targets.to(outputs.device)
        return {"accuracy": per_example_accuracy(outputs, targets), "loss": float(self.loss(outputs, targets))}

    def render(self, inputs: torch.Tensor, targets: torch.Tensor, index: int = 0) -> str:
        header = (
            f"MQAR: {self.num_kv_pairs} pairs, context of {self.context_len} tokens, keys < {self.vocab_size // 2} "
            f"<= values\n"
        )
        return header + render_tokens(inputs, targets, index)
