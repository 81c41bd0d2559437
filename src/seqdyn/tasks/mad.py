"""The MAD token-manipulation tasks (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid Architectures";
the mad-lab generators), vectorized.

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
  tokens (sizes uniform; at test time every key has ``k_motif_size`` tokens). As mad-lab (multi-query): the probe
  pair is drawn first, with a position ``p`` uniform in ``[0, L − 2·|probe|)``; pairs are then appended while the
  context is shorter than ``L − |probe| − k_motif_size − v_motif_size``, the probe pair itself taking the place of
  the first pair that would start at or after ``p`` (unless its key came up earlier); a repeated key keeps the
  value of its first appearance. The probe pair is appended, the sequence left-padded with ``V − 1`` to
  ``L + 1`` tokens and its last token dropped: the inputs have ``L`` tokens and the target of the last position
  is the probe value's last token. Test targets are the value motifs of repeated keys and of the probe.
  Unlike mad-lab, the probe key is always in the context: with mad-lab's defaults its generator leaves it out
  (when ``p`` lies beyond the last pair) in about 1.8 % of training and 2.6 % of test examples; here such
  examples are drawn again, so the distribution is mad-lab's conditioned on the probe being answerable.
- ``selective_copying``: ``num_tokens_to_copy`` tokens (from ``[0, V−2)``) with ``L − 2·num_tokens_to_copy − 1``
  blanks (``V − 2``) inserted among them as mad-lab does: each blank goes before a uniformly chosen token, so the
  blanks before the tokens are multinomial and the last token sits right before the copy token (``V − 1``); then
  as many blanks as tokens, whose targets are the tokens in order.
- ``compression``: ``seq_len − 1`` random tokens and a compression token (``V − 1``); the targets are the inputs
  (auto-encoder head: reproduce the sequence from the last position's encoding).
- ``memorization``: a fixed key→value map (from ``map_seed``, shared by all examples and splits); inputs
  ``k, insert`` repeated ``seq_len/2`` times (insert = ``V − 1``), the target at each insert is the key's value.

Metric: accuracy over labelled positions (pooled over the batch, as mad-lab).
"""

from __future__ import annotations

from typing import NamedTuple

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
    reference = "Poli et al. 2024 (MAD), mad-lab generators"

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


class _Pairs(NamedTuple):
    """Key-value pairs ``[n, s]`` of fuzzy recall: motif sizes ``[n, s]`` and motifs ``[n, s, max size]``."""

    ksize: np.ndarray
    kmotif: np.ndarray
    vsize: np.ndarray
    vmotif: np.ndarray


def _fill_context(length, is_probe, plen, probe_at, limit) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """mad-lab's loop over the candidate pairs of lengths ``length [n, s]``: the probe pair takes the place of the
    first pair that starts at or after ``probe_at`` while the context is shorter than ``limit``, unless a pair
    with the probe key came first. Returns each pair's start ``[n, s]``, the probe pair's ``entry`` position and
    whether it was ``inserted`` ``[n]``."""
    slots = length.shape[1]
    start = np.cumsum(length, axis=1) - length  # without the probe pair
    at = (start < probe_at[:, None]).sum(axis=1)
    before = np.arange(slots) < at[:, None]
    seen_early = (is_probe & before & (start < limit[:, None])).any(axis=1)
    entry = start[np.arange(len(at)), np.minimum(at, slots - 1)]
    inserted = ~seen_early & (at < slots) & (entry < limit)
    return start + np.where(inserted[:, None] & ~before, plen[:, None], 0), entry, inserted


def _place(seq, values, start, pairs: _Pairs, keep, labelled) -> None:
    """Write the ``pairs`` ``[n, s]`` starting at ``start [n, s]`` where ``keep``; copy the value tokens into
    ``values`` (at their own positions) where ``labelled``."""
    n = seq.shape[0]
    parts = ((start, pairs.ksize, pairs.kmotif, None), (start + pairs.ksize, pairs.vsize, pairs.vmotif, labelled))
    for offset, size, motif, label in parts:
        rows = np.broadcast_to(np.arange(n)[:, None, None], motif.shape)
        pos = offset[..., None] + np.arange(motif.shape[-1])
        ok = keep[..., None] & (np.arange(motif.shape[-1]) < size[..., None])
        seq[rows[ok], pos[ok]] = motif[ok]
        if label is not None:
            lab = ok & label[..., None]
            values[rows[lab], pos[lab]] = motif[lab]


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
        if self.seq_len <= need:
            self._fail(f"parameter seq_len={self.seq_len} must be > 2·(k_motif_size + v_motif_size) = {need}")

    def token_str(self, token: int) -> str:
        return "·" if token == self.vocab_size - 1 else str(token)

    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        inputs = np.empty((n, self.seq_len), dtype=np.int64)
        targets = np.empty_like(inputs)
        todo = np.arange(n)
        while todo.size:  # redraw the rows whose probe key never reached the context (rejection: exact conditioning)
            inputs[todo], targets[todo], answerable = self._draw(todo.size, rng, split)
            todo = todo[~answerable]
        return inputs, targets

    def _draw(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n`` examples of mad-lab's process, and whether each one's probe key is in its context."""
        kmax, vmax, L = self.k_motif_size, self.v_motif_size, self.seq_len
        probe = self._draw_pairs(n, 1, rng, split)  # the probe pair comes first (mad-lab)
        plen = probe.ksize[:, 0] + probe.vsize[:, 0]
        probe_at = rng.integers(0, L - 2 * plen)  # the probe pair enters at the first pair starting here or later
        limit = L - plen - kmax - vmax  # pairs are added while the context is shorter than this
        pairs = self._draw_pairs(n, (L - kmax - vmax) // 2 + 1, rng, split)  # enough: every pair has >= 2 tokens
        kcode = self._key_code(pairs)
        is_probe = kcode == self._key_code(probe)
        first = first_index(kcode)  # a key's value is the one drawn at its first appearance, the probe's its own
        rows = np.arange(n)[:, None]
        pairs = pairs._replace(
            vsize=np.where(is_probe, probe.vsize, pairs.vsize[rows, first]),
            vmotif=np.where(is_probe[..., None], probe.vmotif, pairs.vmotif[rows, first]),
        )
        start, entry, inserted = _fill_context(pairs.ksize + pairs.vsize, is_probe, plen, probe_at, limit)
        used = start < limit[:, None]  # a prefix of the slots
        answerable = inserted | (is_probe & used).any(axis=1)
        labelled = used & ((first != np.arange(first.shape[1])) | (is_probe & inserted[:, None]))

        # The whole sequence has L + 1 tokens, left-padded with V − 1; its last token is dropped from the inputs.
        context = np.where(used, start + pairs.ksize + pairs.vsize, 0).max(axis=1)
        pad = L + 1 - plen - np.maximum(context, np.where(inserted, entry + plen, 0))
        seq = np.full((n, L + 1), self.vocab_size - 1, dtype=np.int64)
        values = np.full((n, L + 1), IGNORE_INDEX, dtype=np.int64)
        always, never = np.ones((n, 1), dtype=bool), np.zeros((n, 1), dtype=bool)
        _place(seq, values, pad[:, None] + start, pairs, used, labelled)
        _place(seq, values, (pad + entry)[:, None], probe, inserted[:, None], never)
        _place(seq, values, (L + 1 - plen)[:, None], probe, always, always)
        return seq[:, :-1], (seq if split == "train" else values)[:, 1:], answerable

    def _draw_pairs(self, n: int, slots: int, rng: np.random.Generator, split: str) -> _Pairs:
        """``[n, slots]`` key-value pairs: motif sizes uniform (test keys: ``k_motif_size``), distinct tokens."""
        kmax, vmax, nk = self.k_motif_size, self.v_motif_size, self.num_keys
        train = split == "train"
        ksize = rng.integers(1, kmax + 1, size=(n, slots)) if train else np.full((n, slots), kmax)
        kmotif = distinct_rows(rng, n * slots, kmax, 0, nk).reshape(n, slots, kmax)
        vsize = rng.integers(1, vmax + 1, size=(n, slots))
        vmotif = distinct_rows(rng, n * slots, vmax, nk, self.vocab_size - 1).reshape(n, slots, vmax)
        return _Pairs(ksize, kmotif, vsize, vmotif)

    def _key_code(self, pairs: _Pairs) -> np.ndarray:
        """One integer per key (the first ``ksize`` tokens of its motif), equal for equal keys."""
        kmax = pairs.kmotif.shape[-1]
        masked = np.where(np.arange(kmax) < pairs.ksize[..., None], pairs.kmotif + 1, 0)
        return (masked * (self.num_keys + 1) ** np.arange(kmax)).sum(-1)


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
        tokens = rng.integers(0, V - 2, size=(n, k))
        blanks_before = rng.multinomial(copy_at - k, np.full(k, 1 / k), size=n)  # each blank before a uniform token
        positions = np.cumsum(blanks_before, axis=1) + np.arange(k)
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
