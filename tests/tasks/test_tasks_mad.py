"""MAD tasks: targets recomputed from the inputs, train vs test targets, the noise fraction, constraints."""

import math
import random

import numpy as np
import pytest
import torch

from seqdyn.tasks import IGNORE_INDEX, build


def _check_recall_test_targets(inputs, targets, num_keys, num_values_end):
    """Keys at even positions; a key seen before (or the final probe) is labelled with its first value."""
    for x, y in zip(inputs.tolist(), targets.tolist()):
        first_value = {}
        for t in range(0, len(x) - 1, 2):
            key, value = x[t], x[t + 1]
            if key >= num_values_end:  # a noise pair
                assert value >= num_values_end and y[t] == IGNORE_INDEX
                continue
            assert key < num_keys and num_keys <= value < num_values_end
            if key in first_value:
                assert value == first_value[key] and y[t] == value
            else:
                assert y[t] == IGNORE_INDEX or t == len(x) - 2
                first_value[key] = value
            assert y[t + 1] == IGNORE_INDEX
        assert x[-2] in first_value and y[-2] == x[-1]  # the probe re-queries a seen key


@pytest.mark.parametrize(
    "name, params, keys, end",
    [
        ("in_context_recall", {}, 8, 16),
        ("in_context_recall", {"vocab_size": 64, "seq_len": 256}, 32, 64),
        ("noisy_in_context_recall", {}, 8, 16),
        ("noisy_in_context_recall", {"frac_noise": 0.8, "seq_len": 64}, 8, 16),
    ],
)
def test_recall_test_targets_recomputed_from_inputs(name, params, keys, end):
    task = build(name, **params)
    inputs, targets = task.generate(200, seed=0, split="test")
    _check_recall_test_targets(inputs, targets, keys, end)


@pytest.mark.parametrize("name", ["in_context_recall", "noisy_in_context_recall", "fuzzy_in_context_recall"])
def test_recall_training_targets_are_the_next_tokens(name):
    inputs, targets = build(name).generate(50, seed=3, split="train")
    assert torch.equal(targets[:, :-1], inputs[:, 1:])
    if name == "fuzzy_in_context_recall":  # mad-lab drops the probe value's last token: it is the last target
        assert ((targets[:, -1] >= 7) & (targets[:, -1] < 15)).all()
    else:
        assert (targets[:, -1] == IGNORE_INDEX).all()
    _, test_targets = build(name).generate(50, seed=3, split="test")
    assert 0 < (test_targets != IGNORE_INDEX).sum() < (targets != IGNORE_INDEX).sum()


@pytest.mark.parametrize("frac", [0.2, 0.6])
def test_noise_fraction(frac):
    task = build("noisy_in_context_recall", seq_len=128, frac_noise=frac)
    inputs, _ = task.generate(2000, seed=1, split="test")
    slots = inputs[:, 0:-2:2].numpy()  # the 63 context pair slots, the probe excluded
    noisy = slots >= 16
    m = slots.shape[1]
    expected = frac * (m - 1) / m  # one slot per example is kept as a real pair
    assert abs(noisy.mean() - expected) < 0.01
    assert (~noisy).any(axis=1).all()
    assert (inputs[:, 1:-2:2].numpy()[noisy] >= 16).all()  # noise comes in pairs


def _runs(x, pad, num_keys):
    """Split a fuzzy-recall sequence into (start, tokens, is_key) runs, skipping the left padding."""
    runs, t = [], 0
    while x[t] == pad:
        t += 1
    while t < len(x):
        is_key = x[t] < num_keys
        start = t
        while t < len(x) and (x[t] < num_keys) == is_key:
            t += 1
        runs.append((start, tuple(x[start:t]), is_key))
    return runs


def _fuzzy_pairs(x, last_target, pad=15, num_keys=7):
    """The (start, key, value) pairs of a fuzzy-recall example, its dropped last token restored, and the padding."""
    runs = _runs(list(x) + [last_target], pad, num_keys)
    assert len(runs) % 2 == 0 and all(runs[i][2] and not runs[i + 1][2] for i in range(0, len(runs), 2))
    return [(runs[i + 1][0], runs[i][1], runs[i + 1][1]) for i in range(0, len(runs), 2)], runs[0][0]


@pytest.mark.parametrize("split", ["train", "test"])
def test_fuzzy_recall_motifs_and_targets(split):
    task = build("fuzzy_in_context_recall")
    inputs, targets = task.generate(200, seed=2, split=split)
    key_lengths = set()
    for x, y in zip(inputs.tolist(), targets.tolist()):
        pairs, padding = _fuzzy_pairs(x, y[-1])
        assert padding >= 2  # mad-lab's loop stops short of L − 1 tokens
        first_value = {}
        expected = [IGNORE_INDEX] * (len(x) + 1)  # the value tokens of repeated keys, at their own positions
        for v_start, key, value in pairs:
            assert len(set(key)) == len(key) and len(set(value)) == len(value)
            assert 1 <= len(key) <= 3 and 1 <= len(value) <= 3
            key_lengths.add(len(key))
            if key in first_value:
                assert value == first_value[key]
                expected[v_start : v_start + len(value)] = value
            first_value.setdefault(key, value)
        assert pairs[-1][1] in [key for _, key, _ in pairs[:-1]]  # the probe repeats a context key
        if split == "test":
            assert y == expected[1:]
    assert key_lengths == ({3} if split == "test" else {1, 2, 3})


def _mad_lab_fuzzy_recall(rng, vocab_size, seq_len, kmax, vmax, train):
    """One example of mad-lab's multi-query fuzzy recall as a plain loop (``rng``: a ``random.Random``): ``(full
    sequence of L + 1 tokens, context keys, probe key)``, or None when the probe key never reaches the context
    (mad-lab keeps those)."""
    num_keys = (vocab_size - 1) // 2

    def motif(low, high, most, fixed=False):
        return tuple(rng.sample(range(low, high), most if fixed else rng.randint(1, most)))

    probe_key, probe_value = motif(0, num_keys, kmax, not train), motif(num_keys, vocab_size - 1, vmax)
    probe_len = len(probe_key) + len(probe_value)
    probe_at = rng.randrange(seq_len - 2 * probe_len)
    seq, value_of, keys = [], {}, []
    while len(seq) < seq_len - probe_len - kmax - vmax:
        if len(seq) >= probe_at and probe_key not in value_of:
            key = probe_key
        else:
            key = motif(0, num_keys, kmax, not train)
        if key not in value_of:
            value_of[key] = probe_value if key == probe_key else motif(num_keys, vocab_size - 1, vmax)
        seq += key + value_of[key]
        keys.append(key)
    if probe_key not in value_of:
        return None
    return (
        [vocab_size - 1] * (seq_len + 1 - len(seq) - probe_len) + seq + list(probe_key + probe_value),
        keys,
        probe_key,
    )


def _merge_bins(table, enough):
    """Merge consecutive rows of a count table ``[bins, c]`` until each row's ``enough(row)`` holds."""
    merged, pending = [], np.zeros(table.shape[1])
    for row in table:
        pending = pending + row
        if enough(pending):
            merged, pending = merged + [pending], np.zeros(table.shape[1])
    merged[-1] = merged[-1] + pending
    return np.array(merged)


def _homogeneity_p(a, b):
    """p-value of Pearson's chi-square test that the integer samples ``a`` and ``b`` share one distribution (bins
    merged until each holds at least 40 of the pooled values)."""
    values = np.union1d(a, b)
    counts = np.stack([(np.asarray(a)[:, None] == values).sum(0), (np.asarray(b)[:, None] == values).sum(0)], 1)
    table = _merge_bins(counts, lambda row: row.sum() >= 40)
    expected = table.sum(1, keepdims=True) * table.sum(0) / table.sum()
    return _chi_square_p(((table - expected) ** 2 / expected).sum(), len(table) - 1)


def _chi_square_p(statistic, dof):
    if dof == 0:
        return 1.0
    return torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(statistic / 2)).item()


@pytest.mark.parametrize(
    "params, split",
    [({}, "train"), ({}, "test"), ({"vocab_size": 32, "seq_len": 96, "k_motif_size": 2, "v_motif_size": 4}, "train")],
)
def test_fuzzy_recall_follows_mad_lab_distribution(params, split):
    """Context pairs, unpadded length and where the probe key first appears: each as mad-lab's loop (rejecting
    unanswerable examples) draws them, by a chi-square test at p > 0.001 (decided before the run; fixed seeds)."""
    task = build("fuzzy_in_context_recall", **params)
    V, L, kmax, vmax = task.vocab_size, task.seq_len, task.k_motif_size, task.v_motif_size
    rng, reference = random.Random(7), []
    while len(reference) < 3000:
        example = _mad_lab_fuzzy_recall(rng, V, L, kmax, vmax, split == "train")
        if example is not None:
            full, keys, probe_key = example
            reference.append((len(keys), sum(t != V - 1 for t in full), keys.index(probe_key)))
    inputs, targets = task.generate(3000, seed=8, split=split)
    ours = []
    for x, y in zip(inputs.tolist(), targets.tolist()):
        pairs, padding = _fuzzy_pairs(x, y[-1], V - 1, task.num_keys)
        keys = [key for _, key, _ in pairs[:-1]]
        ours.append((len(keys), L + 1 - padding, keys.index(pairs[-1][1])))
    for column in range(3):
        assert _homogeneity_p([r[column] for r in reference], [o[column] for o in ours]) > 1e-3, column


def test_selective_copying_targets_are_the_tokens_in_order():
    task = build("selective_copying")
    inputs, targets = task.generate(100, seed=4)
    for x, y in zip(inputs.tolist(), targets.tolist()):
        copy_at = x.index(15)
        assert copy_at == 256 - 16 - 1
        tokens = [t for t in x[:copy_at] if t != 14]
        assert len(tokens) == 16 and all(0 <= t < 14 for t in tokens)
        assert x[copy_at + 1 :] == [14] * 16
        assert y[copy_at + 1 :] == tokens and set(y[: copy_at + 1]) == {IGNORE_INDEX}
    first_token = (inputs[:, :239] != 14).float().argmax(1)
    assert first_token.float().mean() < 60  # scattered, not packed at the end


@pytest.mark.parametrize("params", [{}, {"vocab_size": 32, "seq_len": 64, "num_tokens_to_copy": 5}])
def test_selective_copying_places_blanks_before_tokens_as_mad_lab(params):
    """mad-lab inserts each blank before a uniformly chosen token: the last token sits right before the copy token
    and the blanks before a token are Binomial(L − 2k − 1, 1/k) (chi-square at p > 0.001, fixed seed)."""
    task = build("selective_copying", **params)
    V, L, k = task.vocab_size, task.seq_len, task.num_tokens_to_copy
    inputs, _ = task.generate(4000, seed=9)
    copy_at = L - k - 1
    assert (inputs[:, copy_at] == V - 1).all() and (inputs[:, copy_at - 1] != V - 2).all()
    positions = torch.nonzero(inputs[:, :copy_at] != V - 2)[:, 1].reshape(-1, k).numpy()
    blanks_before = np.diff(positions, axis=1, prepend=-1) - 1
    blanks = copy_at - k
    pmf = np.array([math.comb(blanks, j) * (1 / k) ** j * (1 - 1 / k) ** (blanks - j) for j in range(blanks + 1)])
    for token in (0, k // 2):
        assert _goodness_of_fit_p(np.bincount(blanks_before[:, token], minlength=blanks + 1), pmf) > 1e-3, token


def _goodness_of_fit_p(counts, pmf):
    """p-value of Pearson's chi-square test of ``counts`` against ``pmf`` (bins merged until each expects >= 5)."""
    table = _merge_bins(np.stack([counts, counts.sum() * pmf], 1), lambda row: row[1] >= 5)
    return _chi_square_p(((table[:, 0] - table[:, 1]) ** 2 / table[:, 1]).sum(), len(table) - 1)
