"""The interface every task shares: registry, validation, layouts, seeds and splits, loss and metrics."""

import numpy as np
import pytest
import torch

from seqdyn.tasks import IGNORE_INDEX, build, names

EXPECTED = sorted(
    """mqar in_context_recall noisy_in_context_recall fuzzy_in_context_recall selective_copying compression
    memorization shift cumsum cummax reverse sort select select_fixed mips context_shift solve solve_fixed
    listops_subtrees pathfinder_segmentation lm""".split()
)
GENERATED = [name for name in EXPECTED if name != "lm"]


def test_names_are_exactly_the_issue_names_sorted():
    assert names() == EXPECTED


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ValueError) as info:
        build("mqar2")
    assert "mqar2" in str(info.value) and "in_context_recall" in str(info.value)


def test_unknown_parameter_lists_the_allowed_ones():
    with pytest.raises(ValueError) as info:
        build("mqar", seq_length=64)
    message = str(info.value)
    assert "seq_length" in message and "num_kv_pairs" in message and "power_a" in message


@pytest.mark.parametrize(
    "params, words",
    [
        ({"seq_len": 64.0}, ["seq_len", "64.0", "int"]),
        ({"seq_len": "64"}, ["seq_len", "'64'"]),
        ({"seq_len": True}, ["seq_len", "True"]),
        ({"seq_len": -8}, ["seq_len", "-8", ">="]),
        ({"num_kv_pairs": 0}, ["num_kv_pairs", "0", ">="]),
        ({"random_non_queries": 1}, ["random_non_queries", "bool"]),
        ({"power_a": float("nan")}, ["power_a"]),
    ],
)
def test_wrong_types_and_sizes_name_the_parameter(params, words):
    with pytest.raises(ValueError) as info:
        build("mqar", **params)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("name", GENERATED)
def test_layout_of_every_task(name, small):
    task = build(name, **small[name])
    inputs, targets = task.generate(3, seed=0)
    spec = task.spec
    assert inputs.shape[:2] == (3, spec.input_len)
    if spec.input_kind == "tokens":
        assert inputs.dtype == torch.int64 and inputs.ndim == 2
        assert 0 <= int(inputs.min()) and int(inputs.max()) < spec.input_size
    else:
        assert inputs.dtype == torch.float32 and inputs.shape[2] == spec.input_size
    if spec.head == "regression":
        assert targets.dtype == torch.float32 and targets.shape == (3, spec.output_len, spec.output_size)
        T = spec.input_len
        angle = 2 * np.pi * np.arange(T) / T
        assert np.allclose(inputs[0, :, -2].numpy(), np.cos(angle), atol=1e-6)
        assert np.allclose(inputs[0, :, -1].numpy(), np.sin(angle), atol=1e-6)
    else:
        assert targets.dtype == torch.int64 and targets.shape == (3, spec.output_len)
        labelled = targets[targets != IGNORE_INDEX]
        assert labelled.numel() > 0
        assert 0 <= int(labelled.min()) and int(labelled.max()) < spec.output_size
    assert spec.head in ("lm", "regression", "tagging", "classification", "autoencoder")
    assert isinstance(task.render(inputs, targets, 1), str) and task.render(inputs, targets, 1)


@pytest.mark.parametrize("name", GENERATED)
def test_same_seed_same_data_other_seed_or_split_other_data(name, small):
    task = build(name, **small[name])
    a = task.generate(4, seed=7)
    b = build(name, **small[name]).generate(4, seed=7)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = task.generate(4, seed=8)
    assert not torch.equal(a[0], c[0])
    d = task.generate(4, seed=7, split="test")
    assert not torch.equal(a[0], d[0])


def test_split_seeds_never_coincide():
    task = build("mqar")
    keys = {task.split_seed(seed, split) for seed in range(200) for split in ("train", "test")}
    assert len(keys) == 400


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda t: t.generate(0, 0), "num_examples"),
        (lambda t: t.generate(2.0, 0), "num_examples"),
        (lambda t: t.generate(2, -1), "seed"),
        (lambda t: t.generate(2, 0, split="dev"), "split"),
    ],
)
def test_generate_arguments_are_validated(call, word):
    with pytest.raises(ValueError, match=word):
        call(build("mqar"))


def _perfect_outputs(task, targets):
    """Model outputs ``[n, input_len, output_size]`` that predict the targets exactly."""
    spec = task.spec
    n = targets.shape[0]
    if spec.head == "regression":
        out = torch.zeros(n, spec.input_len, spec.output_size)
        out[:, spec.input_len - spec.output_len :] = targets
        return out
    logits = torch.zeros(n, spec.input_len, spec.output_size)
    safe = targets.clamp(min=0)
    logits.scatter_(2, safe[..., None], 30.0)
    return logits


@pytest.mark.parametrize("name", GENERATED)
def test_loss_and_primary_metric_on_perfect_and_on_poor_outputs(name, small):
    task = build(name, **small[name])
    inputs, targets = task.generate(4, seed=1)
    perfect = _perfect_outputs(task, targets)
    metrics = task.metrics(perfect, targets)
    assert metrics[task.primary_metric] == pytest.approx(1.0)
    assert float(task.loss(perfect, targets)) < 1e-3
    poor = torch.zeros_like(perfect)
    if task.head == "regression":
        poor[:, task.input_len - task.output_len :] = targets.mean()
        assert task.metrics(poor, targets)["r2"] == pytest.approx(0.0, abs=1e-9)
    else:
        poor[..., 0] = 1.0  # always predict class 0
        assert task.metrics(poor, targets)[task.primary_metric] < 1.0
    assert all(isinstance(v, float) for v in metrics.values())


def test_mqar_accuracy_is_averaged_per_example():
    targets = torch.full((2, 8), IGNORE_INDEX)
    targets[0, 1] = 3  # example 0: one labelled position, predicted right
    targets[1, [1, 3, 5, 7]] = 3  # example 1: four labelled, one right
    logits = torch.zeros(2, 8, 16)
    logits[..., 5] = 1.0
    logits[0, 1, 3] = 2.0
    logits[1, 1, 3] = 2.0
    task = build("mqar", vocab_size=16, seq_len=8, num_kv_pairs=1)
    assert task.metrics(logits, targets)["accuracy"] == pytest.approx((1.0 + 0.25) / 2)
    pooled = build("in_context_recall", vocab_size=16, seq_len=8)
    assert pooled.metrics(logits, targets)["accuracy"] == pytest.approx(2 / 5)


def test_r2_uses_the_batch_mean():
    task = build("cumsum", seq_len=4)
    targets = torch.tensor([[[0.0], [1.0], [2.0], [3.0]], [[4.0], [5.0], [6.0], [7.0]]])
    outputs = targets + 1.0
    var = float(((targets - targets.mean()) ** 2).mean())
    assert task.metrics(outputs, targets)["r2"] == pytest.approx(1 - 1.0 / var)


def test_regression_loss_reads_the_rightmost_outputs():
    task = build("select", seq_len=16, num_select=4)
    inputs, targets = task.generate(2, 0)
    outputs = torch.randn(2, task.input_len, 1)
    outputs[:, -4:] = targets
    assert float(task.loss(outputs, targets)) == 0.0
    assert float(task.loss(outputs[:, -4:], targets)) == 0.0


def test_spec_for_the_training_loop():
    mqar = build("mqar", vocab_size=512, seq_len=128, num_kv_pairs=8)
    assert (mqar.input_kind, mqar.input_size, mqar.head, mqar.output_size) == ("tokens", 512, "lm", 512)
    shift = build("shift", seq_len=128)
    assert (shift.input_kind, shift.input_size, shift.head, shift.output_size) == ("channels", 3, "regression", 8)
    reverse = build("reverse", seq_len=128)
    assert (reverse.input_len, reverse.output_len) == (256, 128)
    pf = build("pathfinder_segmentation", seq_len=64 * 64)
    assert (pf.input_kind, pf.input_size, pf.head, pf.output_size, pf.primary_metric) == (
        "channels",
        1,
        "tagging",
        3,
        "macro_f1",
    )
    assert build("compression").head == "autoencoder"
    assert build("listops_subtrees").output_size == 10
    assert build("lm").spec.higher_is_better is False


def test_import_stays_light():
    import subprocess
    import sys

    code = (
        "import sys, seqdyn; before = {m for m in ('matplotlib', 'typer', 'rich') if m in sys.modules}; "
        "import seqdyn.tasks; print(sorted({m for m in ('matplotlib', 'typer', 'rich') if m in sys.modules} - before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "name, defaults",
    [
        ("mqar", {"vocab_size": 8192, "power_a": 0.01, "random_non_queries": True, "num_passes": 1}),
        ("in_context_recall", {"vocab_size": 16, "seq_len": 128}),
        ("noisy_in_context_recall", {"vocab_size": 32, "seq_len": 128, "noise_vocab_size": 16, "frac_noise": 0.2}),
        ("fuzzy_in_context_recall", {"vocab_size": 16, "seq_len": 128, "k_motif_size": 3, "v_motif_size": 3}),
        ("selective_copying", {"vocab_size": 16, "seq_len": 256, "num_tokens_to_copy": 16}),
        ("compression", {"vocab_size": 16, "seq_len": 32}),
        ("memorization", {"vocab_size": 256, "seq_len": 32}),
        ("shift", {"seq_len": 4096, "num_shifts": 8}),
        ("select", {"seq_len": 4096, "num_select": 32}),
        ("mips", {"seq_len": 4096, "dim": 4}),
        ("listops_subtrees", {"seq_len": 8192, "min_len": 7000}),
        ("pathfinder_segmentation", {"seq_len": 65536}),
        ("lm", {"seq_len": 1024, "tokenizer": "bytes"}),
    ],
)
def test_defaults_are_the_papers_values(name, defaults, monkeypatch):
    monkeypatch.delenv("SEQDYN_WIKITEXT103", raising=False)
    params = build(name).params
    assert {key: params[key] for key in defaults} == defaults
