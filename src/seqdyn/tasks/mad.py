"""The MAD token-manipulation tasks (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid Architectures";
the mad-lab generators; DESIGN §8), vectorized.

Conventions shared by all six tasks: ``inputs`` and ``targets`` are ``[n, seq_len]`` int64, −100 where nothing
is predicted, and the target at position t is what the model must output after reading ``inputs[: t+1]``.

- ``in_context_recall``: ``seq_len/2 − 1`` key–value pairs (keys from the lower half of the non-noise vocabulary,
  drawn with replacement; values from the upper half; a key's value fixed by its first appearance), then a
  final probe pair re-querying a seen key. Multi-query: at test time every repeated key, and the probe, is
  labelled with its value (at the key's position); at training time the targets are the next tokens at every
  position. The last position (the probe's value) has no target: mad-lab instead drops that token and has
  sequences of ``seq_len − 1`` tokens.
- ``noisy_in_context_recall``: as above with a noise vocabulary ``[V − noise_vocab_size, V)``; each pair slot is
  replaced by two uniform noise tokens with probability ``frac_noise`` (one slot per example always keeps its
  pair, so that the probe has a key to re-query).
- ``fuzzy_in_context_recall``: keys and values are motifs of 1..``k_motif_size`` / 1..``v_motif_size`` distinct
  tokens; pairs are added while they fit in ``seq_len − k_motif_size − v_motif_size`` tokens, the probe (the
  pair of a uniformly chosen context slot) is appended, and the sequence is left-padded with ``V − 1``. At test
  time every key has ``k_motif_size`` tokens; test targets are the value motifs of repeated keys and of the
  probe.
- ``selective_copying``: ``num_tokens_to_copy`` tokens (from ``[0, V−2)``) at uniformly random distinct
  positions among blanks (``V − 2``), a copy token (``V − 1``), then as many blanks whose targets are the
  tokens in order.
- ``compression``: ``seq_len − 1`` random tokens and a compression token (``V − 1``); the targets are the inputs
  (auto-encoder head: reproduce the sequence from the last position's encoding).
- ``memorization``: a fixed key→value map (from ``map_seed``, shared by all examples and splits); inputs
  ``k, insert`` repeated ``seq_len/2`` times (insert = ``V − 1``), the target at each insert is the key's value.

Metric: accuracy over labelled positions (pooled over the batch, as mad-lab).
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
    first_index,
    register,
    render_tokens,
)

_VOCAB = Param(16, int, "vocabulary size V", low=3)


def _shift_targets(seq: np.ndarray) -> np.ndarray:
    """Training targets of the recall tasks: the next token everywhere, −100 at the last position."""
    targets = np.full_like(seq, IGNORE_INDEX)
    targets[:, :-1] = seq[:, 1:]
    return targets


class _MadTask(Task):
    family = "mad"
    reference = "Poli et al. 2024 (MAD), mad-lab generators; DESIGN §8"

    def _spec(self) -> TaskSpec:
        V, T = self.vocab_size, self.seq_len
        return TaskSpec("tokens", V, T, self.head_kind, V, T, "accuracy")

    def token_str(self, token: int) -> str:
        return str(token)

    def render(self, inputs: torch.Tensor, targets: torch.Tensor, index: int = 0) -> str:
        return f"{self.name}\n" + render_tokens(inputs, targets, index, self.token_str)


@register
class InContextRecall(_MadTask):
    """Multi-query in-context recall (mad-lab ``in-context-recall``)."""

    name = "in_context_recall"
    PARAMS = {
        "vocab_size": _VOCAB,
        "seq_len": Param(128, int, "sequence length (even)", low=4),
    }
    noise_vocab_size = 0
    frac_noise = 0.0

    def _check(self) -> None:
        if self.seq_len % 2:
            self._fail(f"parameter seq_len={self.seq_len} must be even")
        if self.vocab_size - self.noise_vocab_size < 2:
            self._fail(
                f"parameter vocab_size={self.vocab_size} must exceed noise_vocab_size={self.noise_vocab_size} by >= 2"
            )
        if self.frac_noise > 0 and self.noise_vocab_size < 1:
            self._fail(f"parameter noise_vocab_size={self.noise_vocab_size} must be >= 1 when frac_noise > 0")

    @property
    def num_keys(self) -> int:
        return (self.vocab_size - self.noise_vocab_size) // 2

    def token_str(self, token: int) -> str:
        if token >= self.vocab_size - self.noise_vocab_size:
            return f"n{token}"
        return str(token)

    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        m = self.seq_len // 2 - 1  # context pair slots before the probe
        nk, ns = self.num_keys, self.vocab_size - self.noise_vocab_size
        rows = np.arange(n)
        keys = rng.integers(0, nk, size=(n, m))
        value_of = rng.integers(nk, ns, size=(n, nk))  # the value each key takes at its first appearance
        values = np.take_along_axis(value_of, keys, axis=1)
        noise = self._noise_slots(rng, n, m)

        codes = np.where(noise, nk + np.arange(m), keys)  # a noise slot never matches anything
        repeated = (first_index(codes) != np.arange(m)) & ~noise
        seen = np.zeros((n, nk), dtype=bool)
        seen[np.broadcast_to(rows[:, None], (n, m))[~noise], keys[~noise]] = True
        priority = np.where(seen, rng.random((n, nk)), -1.0)
        probe = priority.argmax(axis=1)  # uniform over the distinct keys seen

        seq = np.empty((n, self.seq_len), dtype=np.int64)
        seq[:, 0 : 2 * m : 2], seq[:, 1 : 2 * m : 2] = keys, values
        if self.frac_noise > 0:
            pairs = seq[:, : 2 * m].reshape(n, m, 2)  # a view of the context
            pairs[noise] = rng.integers(ns, self.vocab_size, size=(int(noise.sum()), 2))
        seq[:, 2 * m] = probe
        seq[:, 2 * m + 1] = value_of[rows, probe]
        if split == "train":
            return seq, _shift_targets(seq)
        targets = np.full_like(seq, IGNORE_INDEX)
        targets[:, 0 : 2 * m : 2] = np.where(repeated, values, IGNORE_INDEX)
        targets[:, 2 * m] = value_of[rows, probe]
        return seq, targets

    def _noise_slots(self, rng: np.random.Generator, n: int, m: int) -> np.ndarray:
        if self.frac_noise == 0:
            return np.zeros((n, m), dtype=bool)
        noise = rng.random((n, m)) < self.frac_noise
        noise[np.arange(n), rng.integers(0, m, size=n)] = False
        return noise


@register
class NoisyInContextRecall(InContextRecall):
    """In-context recall with noise pairs (mad-lab ``noisy-in-context-recall``)."""

    name = "noisy_in_context_recall"
    PARAMS = {
        "vocab_size": Param(32, int, "vocabulary size V, noise tokens included", low=3),
        "seq_len": Param(128, int, "sequence length (even)", low=4),
        "noise_vocab_size": Param(16, int, "noise tokens, the top of the vocabulary", low=1),
        "frac_noise": Param(0.2, float, "probability that a pair slot holds two noise tokens", low=0.0, below=1.0),
    }


@register
class FuzzyInContextRecall(_MadTask):
    """In-context recall with multi-token keys and values (mad-lab ``fuzzy-in-context-recall``)."""

    name = "fuzzy_in_context_recall"
    PARAMS = {
        "vocab_size": _VOCAB,
        "seq_len": Param(128, int, "sequence length", low=4),
        "k_motif_size": Param(3, int, "maximum tokens per key", low=1),
        "v_motif_size": Param(3, int, "maximum tokens per value", low=1),
    }

    @property
    def num_keys(self) -> int:
        return (self.vocab_size - 1) // 2

    def _check(self) -> None:
        nk = self.num_keys
        nv = self.vocab_size - 1 - nk
        if nk < self.k_motif_size or nv < self.v_motif_size:
            self._fail(
                f"parameter vocab_size={self.vocab_size} gives {nk} key and {nv} value tokens, too few for "
                f"k_motif_size={self.k_motif_size}, v_motif_size={self.v_motif_size} distinct tokens"
            )
        if float(nk + 1) ** self.k_motif_size > 2**40:
            self._fail(f"parameter k_motif_size={self.k_motif_size} too large for vocab_size={self.vocab_size}")
        need = 2 * (self.k_motif_size + self.v_motif_size)
        if self.seq_len < need:
            self._fail(f"parameter seq_len={self.seq_len} must be >= 2·(k_motif_size + v_motif_size) = {need}")

    def token_str(self, token: int) -> str:
        return "·" if token == self.vocab_size - 1 else str(token)

    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        kmax, vmax, L = self.k_motif_size, self.v_motif_size, self.seq_len
        nk, ns = self.num_keys, self.vocab_size - 1
        budget = L - kmax - vmax  # room for the context; the probe pair always fits after it
        slots = budget // 2
        rows = np.arange(n)[:, None]

        ksize = rng.integers(1, kmax + 1, size=(n, slots)) if split == "train" else np.full((n, slots), kmax)
        kmotif = distinct_rows(rng, n * slots, kmax, 0, nk).reshape(n, slots, kmax)
        vsize_new = rng.integers(1, vmax + 1, size=(n, slots))
        vmotif_new = distinct_rows(rng, n * slots, vmax, nk, ns).reshape(n, slots, vmax)
        kmask = np.arange(kmax) < ksize[..., None]
        kcode = (np.where(kmask, kmotif + 1, 0) * (nk + 1) ** np.arange(kmax)).sum(-1)
        first = first_index(kcode)  # a key's value is the one drawn at its first appearance
        vsize, vmotif = vsize_new[rows, first], vmotif_new[rows, first]

        end = np.cumsum(ksize + vsize, axis=1)
        count = (end <= budget).sum(axis=1)  # context slots that fit (a prefix, >= 1)
        probe = (rng.random(n) * count).astype(np.int64)
        r = np.arange(n)
        probe_len = ksize[r, probe] + vsize[r, probe]
        pad = L - end[r, count - 1] - probe_len

        seq = np.full((n, L), ns, dtype=np.int64)
        test_targets = np.full((n, L), IGNORE_INDEX, dtype=np.int64)
        start = pad[:, None] + end - ksize - vsize
        in_context = np.arange(slots) < count[:, None]
        repeated = in_context & (first != np.arange(slots))
        self._place(seq, test_targets, start, ksize, kmotif, vsize, vmotif, in_context, repeated)
        self._place(
            seq,
            test_targets,
            (L - probe_len)[:, None],
            ksize[r, probe][:, None],
            kmotif[r, probe][:, None],
            vsize[r, probe][:, None],
            vmotif[r, probe][:, None],
            np.ones((n, 1), dtype=bool),
            np.ones((n, 1), dtype=bool),
        )
        return seq, (_shift_targets(seq) if split == "train" else test_targets)

    @staticmethod
    def _place(seq, targets, start, ksize, kmotif, vsize, vmotif, keep, labelled) -> None:
        """Write key and value motifs of pairs starting at ``start [n, s]``; label the values where asked."""
        n = seq.shape[0]
        rows = np.broadcast_to(np.arange(n)[:, None, None], kmotif.shape)
        kpos = start[..., None] + np.arange(kmotif.shape[-1])
        kok = keep[..., None] & (np.arange(kmotif.shape[-1]) < ksize[..., None])
        seq[rows[kok], kpos[kok]] = kmotif[kok]
        rows = np.broadcast_to(np.arange(n)[:, None, None], vmotif.shape)
        vpos = (start + ksize)[..., None] + np.arange(vmotif.shape[-1])
        vok = keep[..., None] & (np.arange(vmotif.shape[-1]) < vsize[..., None])
        seq[rows[vok], vpos[vok]] = vmotif[vok]
        lab = vok & labelled[..., None]
        targets[rows[lab], vpos[lab] - 1] = vmotif[lab]


@register
class SelectiveCopying(_MadTask):
    """Selective copying (mad-lab ``selective-copying``)."""

    name = "selective_copying"
    PARAMS = {
        "vocab_size": _VOCAB,
        "seq_len": Param(256, int, "sequence length", low=4),
        "num_tokens_to_copy": Param(16, int, "tokens to copy", low=1),
    }

    def _check(self) -> None:
        need = 2 * self.num_tokens_to_copy + 1
        if self.seq_len <= need:
            self._fail(f"parameter seq_len={self.seq_len} must be > 2·num_tokens_to_copy + 1 = {need}")

    def token_str(self, token: int) -> str:
        return {self.vocab_size - 2: "_", self.vocab_size - 1: "COPY"}.get(token, str(token))

    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        k, L, V = self.num_tokens_to_copy, self.seq_len, self.vocab_size
        copy_at = L - k - 1
        positions = np.sort(distinct_rows(rng, n, k, 0, copy_at), axis=1)
        tokens = rng.integers(0, V - 2, size=(n, k))
        inputs = np.full((n, L), V - 2, dtype=np.int64)
        np.put_along_axis(inputs, positions, tokens, axis=1)
        inputs[:, copy_at] = V - 1
        targets = np.full((n, L), IGNORE_INDEX, dtype=np.int64)
        targets[:, copy_at + 1 :] = tokens
        return inputs, targets


@register
class Compression(_MadTask):
    """Compression (mad-lab ``compression``): encode the sequence into the last position, decode it back."""

    name = "compression"
    head_kind = "autoencoder"
    PARAMS = {
        "vocab_size": _VOCAB,
        "seq_len": Param(32, int, "sequence length, the compression token included", low=2),
    }

    def token_str(self, token: int) -> str:
        return "CMP" if token == self.vocab_size - 1 else str(token)

    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        inputs = np.empty((n, self.seq_len), dtype=np.int64)
        inputs[:, :-1] = rng.integers(0, self.vocab_size - 1, size=(n, self.seq_len - 1))
        inputs[:, -1] = self.vocab_size - 1
        return inputs, inputs.copy()


@register
class Memorization(_MadTask):
    """Memorization of a fixed key→value map (mad-lab ``memorization``); the papers train on 256 examples."""

    name = "memorization"
    PARAMS = {
        "vocab_size": Param(256, int, "vocabulary size V (insert token V − 1)", low=3),
        "seq_len": Param(32, int, "sequence length (even)", low=2),
        "map_seed": Param(12345, int, "seed of the fixed key→value map", low=0),
    }

    def _check(self) -> None:
        if self.seq_len % 2:
            self._fail(f"parameter seq_len={self.seq_len} must be even")

    def key_value_map(self) -> np.ndarray:
        """``value_of[key]`` for the keys ``0 .. (V−1)//2 − 1``: a random injection into the values."""
        ns = self.vocab_size - 1
        nk = ns // 2
        rng = np.random.Generator(np.random.PCG64(self.map_seed))
        keys, values = rng.permutation(nk), rng.permutation(np.arange(nk, ns))
        value_of = np.empty(nk, dtype=np.int64)
        value_of[keys] = values[:nk]
        return value_of

    def token_str(self, token: int) -> str:
        return "INS" if token == self.vocab_size - 1 else str(token)

    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        value_of = self.key_value_map()
        keys = rng.integers(0, value_of.size, size=(n, self.seq_len // 2))
        inputs = np.full((n, self.seq_len), self.vocab_size - 1, dtype=np.int64)
        inputs[:, 0::2] = keys
        targets = np.full((n, self.seq_len), IGNORE_INDEX, dtype=np.int64)
        targets[:, 1::2] = value_of[keys]
        return inputs, targets
