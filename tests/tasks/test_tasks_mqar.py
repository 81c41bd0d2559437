"""MQAR: labels recomputed from the inputs, the power law of the query gaps, the parameter constraints."""

import numpy as np
import pytest

from seqdyn.tasks import IGNORE_INDEX, build


def _check_labels(inputs, targets, vocab, pairs, passes):
    context = 2 * pairs * passes
    for x, y in zip(inputs.tolist(), targets.tolist()):
        keys, values = x[0 : 2 * pairs : 2], x[1 : 2 * pairs : 2]
        assert len(set(keys)) == pairs and len(set(values)) == pairs
        assert all(1 <= k < vocab // 2 for k in keys) and all(vocab // 2 <= v < vocab for v in values)
        assert x[:context] == [t for kv in zip(keys, values) for t in kv] * passes
        labelled = [t for t, label in enumerate(y) if label != IGNORE_INDEX]
        assert len(labelled) == pairs
        assert sorted(x[t] for t in labelled) == sorted(keys)  # every key queried once
        for t in labelled:
            assert t >= context and (t - context) % 2 == 0
            first = x.index(x[t])
            assert y[t] == x[first + 1]  # the value right after the key's first occurrence


@pytest.mark.parametrize(
    "params",
    [
        {"vocab_size": 8192, "seq_len": 64, "num_kv_pairs": 4},
        {"vocab_size": 300, "seq_len": 256, "num_kv_pairs": 64},  # 4P = L: every even query slot is used
        {"vocab_size": 1000, "seq_len": 128, "num_kv_pairs": 8, "num_passes": 3},
        {"vocab_size": 8192, "seq_len": 128, "num_kv_pairs": 8, "random_non_queries": False},
        {"vocab_size": 40, "seq_len": 32, "num_kv_pairs": 8, "power_a": 1.0},  # dense draws of keys/values
    ],
)
def test_each_label_is_the_value_after_the_first_occurrence_of_its_key(params):
    task = build("mqar", **params)
    inputs, targets = task.generate(64, seed=0)
    passes = params.get("num_passes", 1)
    _check_labels(inputs, targets, params["vocab_size"], params["num_kv_pairs"], passes)
    if params.get("random_non_queries") is False:
        context = 2 * params["num_kv_pairs"] * passes
        fillers = (targets[:, context:] == IGNORE_INDEX).numpy()
        assert (inputs[:, context:].numpy()[fillers] == 0).all()


def test_random_non_queries_replace_every_filler():
    task = build("mqar", vocab_size=8192, seq_len=256, num_kv_pairs=4)
    inputs, _ = task.generate(200, seed=1)
    assert (inputs == 0).float().mean() < 0.01  # a random token is 0 with probability 1/8192
    assert len(set(inputs[:, 200:].flatten().tolist())) > 5000


def _first_key_gaps(task, n, seed):
    inputs, targets = task.generate(n, seed)
    x, y = inputs.numpy(), targets.numpy()
    context = task.context_len
    first_key = x[:, 0]
    hit = (x[:, context:] == first_key[:, None]) & (y[:, context:] != IGNORE_INDEX)
    assert (hit.sum(1) == 1).all()
    return hit.argmax(1) // 2


@pytest.mark.parametrize("power_a", [0.01, 0.5, 1.0])
def test_query_gaps_follow_the_power_law(power_a):
    """The first key's gap is the first draw, distributed as p_i ∝ a·i^(a−1) (i = gap + 1)."""
    task = build("mqar", vocab_size=8192, seq_len=256, num_kv_pairs=16, power_a=power_a)
    gaps = _first_key_gaps(task, 20_000, seed=5)
    space = (256 - 32) // 2
    i = np.arange(1, space + 1)
    p = power_a * i ** (power_a - 1.0)
    p /= p.sum()
    empirical = np.bincount(gaps, minlength=space) / gaps.size
    assert np.abs(np.cumsum(empirical) - np.cumsum(p)).max() < 0.015  # KS distance; 1% critical value ≈ 0.0115
    assert abs(empirical[0] - p[0]) < 4 * np.sqrt(p[0] * (1 - p[0]) / gaps.size) + 1e-3


def test_later_draws_avoid_taken_gaps_and_favour_small_gaps():
    task = build("mqar", vocab_size=8192, seq_len=512, num_kv_pairs=32)
    inputs, targets = task.generate(2000, seed=2)
    labelled = (targets.numpy() != IGNORE_INDEX)[:, task.context_len :]
    positions = np.nonzero(labelled)[1]
    assert labelled.sum(1).min() == 32
    gaps = positions // 2
    space = (512 - 64) // 2
    assert np.mean(gaps < space // 4) > 0.4  # a uniform placement would give 0.25


@pytest.mark.parametrize(
    "params, words",
    [
        ({"seq_len": 63, "vocab_size": 8192, "num_kv_pairs": 4}, ["seq_len", "63", "even"]),
        ({"seq_len": 64, "vocab_size": 64, "num_kv_pairs": 4}, ["vocab_size", "64", "seq_len"]),
        ({"seq_len": 64, "vocab_size": 32, "num_kv_pairs": 4}, ["vocab_size", "32"]),
        ({"seq_len": 64, "num_kv_pairs": 17}, ["num_kv_pairs", "17", "4·num_kv_pairs·num_passes", "64"]),
        ({"seq_len": 64, "num_kv_pairs": 8, "num_passes": 3}, ["num_kv_pairs", "num_passes", "96"]),
        ({"power_a": 0.0}, ["power_a", "0.0"]),
        ({"power_a": -1.0}, ["power_a", "-1.0"]),
    ],
)
def test_impossible_parameters_are_refused(params, words):
    with pytest.raises(ValueError) as info:
        build("mqar", **params)
    for word in words:
        assert word in str(info.value)
