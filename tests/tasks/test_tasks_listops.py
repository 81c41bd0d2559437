"""ListOps-SubTrees: every closing bracket's tag re-evaluated by a small stack parser."""

import pytest

from seqdyn.tasks import IGNORE_INDEX, build

OPS = {10: "MAX", 11: "MIN", 12: "MED", 13: "SM"}


def _apply(op, args):
    if op == "MAX":
        return max(args)
    if op == "MIN":
        return min(args)
    if op == "SM":
        return sum(args) % 10
    ordered = sorted(args)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) // 2


def _evaluate(tokens):
    """(value of the whole expression, {position of each ']': value of its sub-expression}, height)."""
    stack, tags, deepest = [], {}, 0
    for t, token in enumerate(tokens):
        if token in OPS:
            stack.append((OPS[token], []))
            deepest = max(deepest, len(stack))
        elif token == 14:
            op, args = stack.pop()
            assert 2 <= len(args), "an operator needs at least two arguments"
            value = _apply(op, args)
            tags[t] = value
            if not stack:
                assert t == len(tokens) - 1
                return value, tags, deepest
            stack[-1][1].append(value)
        else:
            assert 0 <= token <= 9
            stack[-1][1].append(token)
    raise AssertionError("unbalanced expression")


def test_the_papers_example():
    tokens = [10, 2, 6, 12, 13, 3, 1, 6, 14, 8, 3, 14, 4, 5, 14]  # [MAX 2 6 [MED [SM 3 1 6 ] 8 3 ] 4 5 ]
    value, tags, _ = _evaluate(tokens)
    assert (value, list(tags.values())) == (6, [0, 3, 6])


@pytest.mark.parametrize(
    "params",
    [
        {"seq_len": 300, "min_len": 100, "max_args": 5, "max_depth": 6},
        {"seq_len": 64, "min_len": 10, "max_args": 4, "max_depth": 3},
        {"seq_len": 106, "min_len": 100, "max_args": 4, "max_depth": 3},  # up to the largest such expression
        {},
    ],
)
def test_every_tag_is_its_subexpression_value(params):
    task = build("listops_subtrees", **params)
    n = 4 if not params else 40
    inputs, targets = task.generate(n, seed=0)
    seq_len = params.get("seq_len", 8192)
    min_len = params.get("min_len", seq_len * 7000 // 8192)
    max_args, max_depth = params.get("max_args", 10), params.get("max_depth", 10)
    lengths = []
    for x, y in zip(inputs.tolist(), targets.tolist()):
        length = x.index(15) if 15 in x else len(x)
        assert set(x[length:]) <= {15} and set(y[length:]) <= {IGNORE_INDEX}
        assert min_len <= length <= seq_len
        lengths.append(length)
        _, tags, height = _evaluate(x[:length])
        assert height <= max_depth
        assert {t: v for t, v in enumerate(y) if v != IGNORE_INDEX} == tags
        for t, token in enumerate(x[:length]):
            if token in OPS:
                depth, count, u = 0, 0, t + 1
                while True:  # count the operator's arguments
                    if x[u] == 14 and depth == 0:
                        break
                    if depth == 0:
                        count += 1
                    depth += (x[u] in OPS) - (x[u] == 14)
                    u += 1
                assert 2 <= count <= max_args
    assert len(set(lengths)) > 1


@pytest.mark.parametrize("seq_len, min_len", [(1024, 875), (8192, 7000), (256, 218), (4, 4)])
def test_default_lengths_scale_with_seq_len(seq_len, min_len):
    """The paper's 7000–8192 range, in proportion, for any seq_len (a fixed 7000 refused every seq_len < 7000)."""
    task = build("listops_subtrees", seq_len=seq_len)
    assert task.min_len == task.params["min_len"] == min_len
    inputs, _ = task.generate(8, seed=0)
    lengths = [x.index(15) if 15 in x else len(x) for x in inputs.tolist()]
    assert inputs.shape == (8, seq_len) and min(lengths) >= min_len


def test_values_and_operators_are_varied():
    inputs, targets = build("listops_subtrees", seq_len=2000, min_len=1500).generate(20, seed=1)
    labelled = targets[targets != IGNORE_INDEX]
    assert set(labelled.tolist()) == set(range(10))
    assert {10, 11, 12, 13} <= set(inputs.flatten().tolist())


def test_root_accuracy_metric_reads_the_last_tag():
    import torch

    task = build("listops_subtrees", seq_len=64, min_len=20)
    inputs, targets = task.generate(2, seed=2)
    logits = torch.zeros(2, 64, 10)
    last = [max(t for t, v in enumerate(row) if v != IGNORE_INDEX) for row in targets.tolist()]
    logits[0, last[0], targets[0, last[0]]] = 5.0  # only the first example's root is right
    metrics = task.metrics(logits, targets)
    assert metrics["root_accuracy"] == 0.5


@pytest.mark.parametrize(
    "params, words",
    [
        ({"seq_len": 8000, "min_len": 8001}, ["min_len", "8001", "seq_len"]),
        ({"max_args": 3}, ["max_args", "3"]),
        ({"min_len": 3}, ["min_len", "3"]),
        ({"max_depth": 3, "max_args": 10}, ["max_depth", "3", "1222", "8192"]),
    ],
)
def test_impossible_parameters_are_refused(params, words):
    with pytest.raises(ValueError) as info:
        build("listops_subtrees", **params)
    for word in words:
        assert word in str(info.value)
