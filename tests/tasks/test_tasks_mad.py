"""MAD tasks: targets recomputed from the inputs, train vs test targets, the noise fraction, constraints."""

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


@pytest.mark.parametrize("split", ["train", "test"])
def test_fuzzy_recall_motifs_and_targets(split):
    task = build("fuzzy_in_context_recall")
    inputs, targets = task.generate(200, seed=2, split=split)
    pad, num_keys = 15, 7
    key_lengths = set()
    for x, y in zip(inputs.tolist(), targets.tolist()):
        runs = _runs(x, pad, num_keys)
        assert len(runs) % 2 == 0
        pairs = [(runs[i], runs[i + 1]) for i in range(0, len(runs), 2)]
        first_value = {}
        expected = [IGNORE_INDEX] * len(x)
        for (_, key, is_key), (v_start, value, v_is_key) in pairs:
            assert is_key and not v_is_key and len(set(key)) == len(key) and len(set(value)) == len(value)
            assert 1 <= len(key) <= 3 and 1 <= len(value) <= 3
            key_lengths.add(len(key))
            if key in first_value:
                assert value == first_value[key]
                for i, token in enumerate(value):
                    expected[v_start + i - 1] = token
            first_value.setdefault(key, value)
        assert pairs[-1][0][1] in [k for (_, k, _), _ in pairs[:-1]]  # the probe repeats a context key
        if split == "test":
            assert y == expected
    assert key_lengths == ({3} if split == "test" else {1, 2, 3})


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


def test_compression_targets_are_the_inputs():
    inputs, targets = build("compression").generate(50, seed=0)
    assert torch.equal(inputs, targets)
    assert (inputs[:, -1] == 15).all() and (inputs[:, :-1] < 15).all()


def test_memorization_uses_one_fixed_injective_map():
    task = build("memorization")
    seen = {}
    for seed, split in [(0, "train"), (1, "train"), (0, "test")]:
        inputs, targets = task.generate(300, seed=seed, split=split)
        assert (inputs[:, 1::2] == 255).all() and (targets[:, 0::2] == IGNORE_INDEX).all()
        for key, value in zip(inputs[:, 0::2].flatten().tolist(), targets[:, 1::2].flatten().tolist()):
            assert 0 <= key < 127 and 127 <= value < 255
            assert seen.setdefault(key, value) == value
    assert len(seen) == 127 and len(set(seen.values())) == 127
    other = build("memorization", map_seed=1)
    inputs, targets = other.generate(300, seed=0)
    changed = [seen[k] != v for k, v in zip(inputs[:, 0::2].flatten().tolist(), targets[:, 1::2].flatten().tolist())]
    assert np.mean(changed) > 0.9


@pytest.mark.parametrize(
    "name, params, words",
    [
        ("in_context_recall", {"seq_len": 33}, ["seq_len", "33", "even"]),
        ("noisy_in_context_recall", {"frac_noise": 1.0}, ["frac_noise", "1.0"]),
        ("noisy_in_context_recall", {"vocab_size": 17, "noise_vocab_size": 16}, ["vocab_size", "17"]),
        ("fuzzy_in_context_recall", {"vocab_size": 6}, ["vocab_size", "6", "k_motif_size"]),
        ("fuzzy_in_context_recall", {"seq_len": 11}, ["seq_len", "11"]),
        ("selective_copying", {"seq_len": 33}, ["seq_len", "33", "num_tokens_to_copy"]),
        ("memorization", {"seq_len": 31}, ["seq_len", "31", "even"]),
        ("compression", {"vocab_size": 2}, ["vocab_size", "2"]),
    ],
)
def test_impossible_parameters_are_refused(name, params, words):
    with pytest.raises(ValueError) as info:
        build(name, **params)
    for word in words:
        assert word in str(info.value)
