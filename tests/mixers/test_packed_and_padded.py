"""Every mixer takes packed sequences (``cu_seqlens``) and padded batches (``attention_mask``): each sequence's
outputs and gradients are those it has alone, in float64, and a padded step's outputs are 0 (issue 33, item 2)."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers

CU_SEQLENS = torch.tensor([0, 5, 6, 15, 18])  # lengths 5, 1, 9, 3
MASK = torch.tensor(
    [
        [1, 1, 1, 1, 1, 1, 1],
        [0, 0, 1, 1, 1, 1, 1],  # left padding
        [1, 1, 1, 1, 0, 0, 0],  # right padding
        [0, 1, 1, 1, 1, 1, 0],
    ]
)  # both sides


def built(name: str, **options):
    torch.manual_seed(0)
    return mixers.build(name, 16, **options).double()


def spans(offsets: torch.Tensor):
    return list(zip(offsets[:-1].tolist(), offsets[1:].tolist()))


@pytest.mark.parametrize("name", mixers.names())
def test_a_packed_batch_equals_each_sequence_alone(name):
    assert_packed_equals_alone(built(name))


# what reads positions or neighbours: rotary angles and short convolutions restart at each sequence; a window of 2,
# shorter than the sequences (the default, 1024, is longer than all of them)
@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("softmax_attention", dict(rotary=True, heads=2)),
        ("local_attention", dict(window=2)),
        ("local_attention", dict(window=2, rotary=True, heads=2)),
        ("mamba2", dict(conv_size=4)),
        ("gated_deltanet", dict(conv_size=3)),
    ],
)
def test_options_that_read_positions_stay_inside_each_sequence(name, options):
    assert_packed_equals_alone(built(name, **options))


def assert_packed_equals_alone(mixer):
    x = torch.randn(1, 18, 16, dtype=torch.float64, requires_grad=True)
    packed = mixer(x, cu_seqlens=CU_SEQLENS)
    alone = torch.cat([mixer(x[:, start:end]) for start, end in spans(CU_SEQLENS)], dim=1)
    torch.testing.assert_close(packed, alone, rtol=0, atol=1e-12)
    weights = torch.randn_like(alone)
    got = torch.autograd.grad((packed * weights).sum(), [x, *mixer.parameters()], allow_unused=True)
    want = torch.autograd.grad((alone * weights).sum(), [x, *mixer.parameters()], allow_unused=True)
    for a, b in zip(got, want):
        if b is not None:
            # packed, a chunk holds several sequences: a decay's gradient sums terms across the resets between them,
            # which cancel to round-off of the larger terms
            torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", mixers.names())
def test_a_padded_batch_equals_each_sequence_alone_and_zeros_the_padding(name):
    mixer = built(name)
    x = torch.randn(4, 7, 16, dtype=torch.float64, requires_grad=True)
    padded = mixer(x, attention_mask=MASK)
    assert padded[MASK == 0].abs().max() == 0
    for row in range(4):
        tokens = MASK[row].nonzero().flatten()
        alone = mixer(x[row : row + 1, tokens])
        torch.testing.assert_close(padded[row : row + 1, tokens], alone, rtol=0, atol=1e-12)
    # no gradient reaches a padded input: it is not read (an FFT convolution's round-off aside)
    (grad,) = torch.autograd.grad(padded.square().sum(), [x])
    assert grad[MASK == 0].abs().max() <= 1e-12 * grad.abs().max()


def test_a_bool_mask_and_an_all_ones_mask_are_accepted():
    mixer = built("gla")
    x = torch.randn(4, 7, 16, dtype=torch.float64)
    torch.testing.assert_close(mixer(x, attention_mask=MASK.bool()), mixer(x, attention_mask=MASK))
    torch.testing.assert_close(mixer(x, attention_mask=torch.ones(4, 7)), mixer(x))


BAD = [
    (dict(attention_mask=torch.ones(4, 6)), r"^attention_mask: expected a tensor \[B, T\] = \[4, 7\]"),
    (dict(attention_mask=torch.full((4, 7), 2)), r"^attention_mask: values must be 0 \(padding\) or 1 \(token\)"),
    (dict(attention_mask=torch.tensor([[1, 0, 1, 1, 1, 1, 1]] * 4)), r"^attention_mask: row 0 has padding between"),
    (dict(cu_seqlens=torch.tensor([0, 7])), r"^cu_seqlens: a packed batch has batch size 1 .* got batch size 4"),
    (dict(cu_seqlens=torch.tensor([0, 7]), attention_mask=torch.ones(4, 7)), r"^cu_seqlens, attention_mask: give one"),
]


@pytest.mark.parametrize(("arguments", "message"), BAD)
def test_bad_packing_or_padding_is_one_error_naming_the_argument(arguments, message):
    with pytest.raises(ValueError, match=message):
        built("gla")(torch.randn(4, 7, 16, dtype=torch.float64), **arguments)
