"""Metrics on coefficient tensors: near-zero fractions, zero counts (Corollary 2.2), combination classes (Table 2),
on hand-built matrices with known answers and on the coefficients of real mixers; bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import seqdyn
from seqdyn import analysis
from tests.analysis.helpers import inputs, key_dim, mixer


def causal(rows: list[list[float]], dtype=torch.float64) -> torch.Tensor:
    """``[1, 1, T, T]`` from the causal parts of the rows (row i has i + 1 entries)."""
    length = len(rows)
    A = torch.zeros(1, 1, length, length, dtype=dtype)
    for i, row in enumerate(rows):
        assert len(row) == i + 1
        A[0, 0, i, : i + 1] = torch.tensor(row, dtype=dtype)
    return A


def random_causal(batch=2, heads=3, length=9, seed=0) -> torch.Tensor:
    """Entries of magnitude in [0.1, 1] with random signs below and on the diagonal, zero above."""
    g = torch.Generator().manual_seed(seed)
    values = (0.1 + 0.9 * torch.rand(batch, heads, length, length, generator=g, dtype=torch.float64))
    signs = torch.where(torch.rand(values.shape, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    return (values * signs).tril()


# --- near-zero and large fractions ---------------------------------------------------------------------------

def test_near_zero_fraction_counts_the_planted_small_entries():
    A = random_causal()
    g = torch.Generator().manual_seed(5)
    causal_index = torch.nonzero(torch.ones(9, 9).tril())
    planted = causal_index[torch.randperm(len(causal_index), generator=g)[:17]]
    for b in range(2):
        for h in range(3):
            A[b, h, planted[:, 0], planted[:, 1]] = 1e-4 * (b - h + 0.5)  # |·| ≤ 2.5e-4 < 1e-3, signs vary
    total = 2 * 3 * 9 * 10 // 2
    assert analysis.near_zero_fraction(A, eps=1e-3) == pytest.approx(2 * 3 * 17 / total)
    assert analysis.large_fraction(A, eps=1e-3) == pytest.approx(1 - 2 * 3 * 17 / total)
    assert analysis.near_zero_ratio(A, eps=1e-3) == pytest.approx((total - 102) / 102)
    # below every planted magnitude nothing is near zero; above all magnitudes everything is
    assert analysis.near_zero_fraction(A, eps=1e-5) == 0.0
    assert analysis.near_zero_fraction(A, eps=1.5) == 1.0
    assert analysis.near_zero_ratio(A, eps=1e-5) == float("inf")


def test_fractions_count_causal_entries_with_a_strict_near_zero_bound():
    A = causal([[1.0], [0.0, 1.0], [1e-4, 0.5, 0.5], [0.2, -1e-5, 0.3, 0.5]])
    assert analysis.near_zero_fraction(A, eps=1e-3) == pytest.approx(3 / 10)
    assert analysis.near_zero_fraction(A, eps=1e-4) == pytest.approx(2 / 10)  # |1e-4| < 1e-4 is false
    assert analysis.large_fraction(A, eps=1e-4) == pytest.approx(8 / 10)
    assert analysis.large_fraction(A, eps=0.5) == pytest.approx(5 / 10)  # "selected" coefficients (Fig. 7)
    assert analysis.near_zero_ratio(A, eps=1e-3, large=0.5) == pytest.approx((5 / 10) / (3 / 10))


# --- zero counts (Corollary 2.2) ------------------------------------------------------------------------------

def test_zero_count_per_row_counts_exact_zeros_per_row_and_head():
    A = random_causal(batch=2, heads=2, length=6)
    A[0, 0, 5, [0, 2, 4]] = 0.0
    A[1, 1, 3, :4] = 0.0  # an all-zero row: every causal entry counts
    A[0, 1, 2, 1] = 1e-20  # round-off relative to a row of O(1) entries
    counts = analysis.zero_count_per_row(A)
    assert counts.shape == (2, 2, 6) and counts.dtype == torch.int64
    expected = torch.zeros(2, 2, 6, dtype=torch.int64)
    expected[0, 0, 5], expected[1, 1, 3], expected[0, 1, 2] = 3, 4, 1
    assert torch.equal(counts, expected)
    # an absolute tolerance counts every entry at or below it
    assert int(analysis.zero_count_per_row(A, tol=1.0).sum()) == 2 * 2 * 21


def test_default_zero_tolerance_is_relative_to_the_row_scale():
    A = causal([[1.0], [1.0, 1.0], [1.0, 0.0, 1.0]]) * 1e-9  # a tiny but genuine row: no zeros but one
    assert analysis.zero_count_per_row(A).tolist() == [[[0, 0, 1]]]
    assert analysis.zero_count_per_row(A, tol=1e-6).tolist() == [[[1, 2, 3]]]


def test_identity_readout_zeros_at_most_k_minus_one_coefficients_with_a_nonzero_query():
    """Corollary 2.2 on a constructed case: q_7 orthogonal to K − 1 = 2 keys reaches the bound; zeroing K
    independent keys needs q = 0; a nonlinear readout (relu) zeros many more with a nonzero query."""
    g = torch.Generator().manual_seed(0)
    K, T = 3, 8
    q = torch.randn(1, T, 1, K, generator=g, dtype=torch.float64)
    k = torch.randn(1, T, 1, K, generator=g, dtype=torch.float64)
    constraints = torch.stack([k[0, 2, 0], k[0, 5, 0]])  # [2, K]
    q[0, 7, 0] = torch.linalg.svd(constraints).Vh[-1]  # the null space of two keys: a unit vector
    for log_decay in (None, torch.full((1, T, 1), -0.3, dtype=torch.float64)):
        A = seqdyn.coefficients(q, k, log_decay=log_decay)
        counts = analysis.zero_count_per_row(A)[0, 0]
        assert counts[7] == K - 1 and counts[:7].sum() == 0
    q[0, 7, 0] = 0.0
    assert analysis.zero_count_per_row(seqdyn.coefficients(q, k))[0, 0, 7] == T  # beyond K − 1: zero query
    q[0, 7, 0] = torch.tensor([1.0, 0.0, 0.0])
    k[0, :, 0, 0] = -k[0, :, 0, 0].abs() - 0.1  # qᵀk_j < 0 for every j
    relu = analysis.zero_count_per_row(seqdyn.coefficients(q, k, readout="relu"))[0, 0, 7]
    assert relu == T > K - 1


def test_mean_zero_count_averages_over_the_batch_and_leaves_zero_queries_out():
    """Seed 001 Fig. 9's statistic: row 7 has K − 1 = 2 zeros in one example and none in the other (mean 1); a
    zero query's row (all zeros) is left out of its mean, and a row index whose every row is such is NaN."""
    g = torch.Generator().manual_seed(1)
    K, T = 3, 8
    q = torch.randn(2, T, 1, K, generator=g, dtype=torch.float64)
    k = torch.randn(2, T, 1, K, generator=g, dtype=torch.float64)
    q[0, 7, 0] = torch.linalg.svd(torch.stack([k[0, 2, 0], k[0, 5, 0]])).Vh[-1]
    q[1, 3, 0] = 0.0
    q[:, 4, 0] = 0.0
    means = analysis.mean_zero_count(seqdyn.coefficients(q, k))
    assert means.shape == (1, T) and means[0, 7] == 1.0 and means[0, 3] == 0.0 and torch.isnan(means[0, 4])
    assert torch.nan_to_num(means).sum() == 1.0


@pytest.mark.parametrize("name, options", [
    ("linear_attention", {"heads": 2}),
    ("custom", {"heads": 2, "normalizer": "none"}),
    ("gla", {}),
    ("retnet", {}),
    ("mamba2", {"state_dim": 4, "head_dim": 8, "a_init_range": (1.0, 2.0)}),
    ("deltanet", {}),
])
def test_zero_counts_of_random_identity_readout_mixers_stay_within_k_minus_one(name, options):
    m = mixer(name, **options)
    x = inputs(length=16)
    A = m.coefficients(x)
    assert A.dtype == torch.float64
    assert int(analysis.zero_count_per_row(A).max()) <= key_dim(m, x) - 1


# --- combination classes (appendix A, Table 2) ----------------------------------------------------------------

def test_each_combination_class_on_hand_built_rows():
    A = causal([
        [1.0],                       # convex
        [0.3, 0.7],                  # convex
        [0.2, 0.3, 0.1],             # conical: non-negative, sum 0.6
        [1.5, -0.25, -0.25, 0.0],    # affine: sum 1 with negative entries
        [0.5, -0.1, 0.2, 0.3, 0.4],  # linear
    ])
    classes = analysis.combination_class(A)
    assert isinstance(classes, np.ndarray) and classes.shape == (1, 1, 5)
    assert classes[0, 0].tolist() == ["convex", "convex", "conical", "affine", "linear"]
    shares = analysis.combination_class_shares(A)
    assert list(shares) == list(analysis.COMBINATION_CLASSES)
    assert shares == pytest.approx({"convex": 0.4, "conical": 0.2, "affine": 0.2, "linear": 0.2})


def test_combination_class_tolerance_and_layout_over_batch_and_heads():
    A = causal([[1.0], [0.5, 0.5 + 1e-6]]).repeat(2, 3, 1, 1)
    A[1, 2, 1] = torch.tensor([-0.5, 1.5])
    classes = analysis.combination_class(A)
    assert classes.shape == (2, 3, 2)
    assert classes[0, 0, 1] == "conical" and analysis.combination_class(A, tol=1e-5)[0, 0, 1] == "convex"
    assert classes[1, 2, 1] == "affine" and (classes[:, :, 0] == "convex").all()
    assert analysis.combination_class_shares(A)["affine"] == pytest.approx(1 / 12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name, options", [("softmax_attention", {"heads": 2}),
                                           ("linear_attention", {"heads": 2, "feature_map": "elu1"})])
def test_attention_coefficients_are_convex(name, options, dtype):
    m = mixer(name, **options).to(dtype)
    A = m.coefficients(inputs(length=24).to(dtype))
    assert analysis.combination_class_shares(A)["convex"] == 1.0
    assert analysis.combination_class_shares(A, tol=1e-9)["convex"] == 1.0  # floored at the dtype's round-off


def test_normalized_attention_with_positive_features_is_conical():
    m = mixer("custom", heads=2, feature_map="elu1", normalizer="learned", scale="one")
    shares = analysis.combination_class_shares(m.coefficients(inputs(length=24)))
    assert shares["conical"] == 1.0
    # the same with identity features has signed coefficients
    plain = analysis.combination_class_shares(mixer("normalized_attention").coefficients(inputs(length=24)))
    assert plain["linear"] > 0 and plain["convex"] == plain["affine"] == 0.0


def test_mamba2_coefficients_are_linear_combinations():
    m = mixer("mamba2", state_dim=4, head_dim=8)
    classes = analysis.combination_class(m.coefficients(inputs(length=24)))
    assert (classes == "linear").any()
    assert not np.isin(classes, ["convex", "affine"]).any()  # rows never sum to one exactly


# --- bad input ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, message", [
    (torch.zeros(2, 4, 4), "4 dimensions"),
    (torch.zeros(1, 1, 3, 4), "square"),
    (torch.ones(1, 1, 3, 3), "not causal"),
    (torch.zeros(1, 1, 3, 3, dtype=torch.int64), "floating-point"),
    (torch.full((1, 1, 2, 2), float("nan")).tril(), "NaN"),
    ([[1.0]], "tensor"),
])
@pytest.mark.parametrize("metric", [analysis.near_zero_fraction, analysis.large_fraction,
                                    analysis.zero_count_per_row, analysis.combination_class,
                                    analysis.combination_class_shares])
def test_bad_coefficient_tensors_raise_value_errors_naming_the_argument(metric, bad, message):
    with pytest.raises(ValueError, match=f"^A: .*{message}"):
        metric(bad)


@pytest.mark.parametrize("call, name", [
    (lambda A: analysis.near_zero_fraction(A, eps=0.0), "eps"),
    (lambda A: analysis.large_fraction(A, eps=-1.0), "eps"),
    (lambda A: analysis.zero_count_per_row(A, tol=-1e-3), "tol"),
    (lambda A: analysis.combination_class(A, tol=float("nan")), "tol"),
    (lambda A: analysis.near_zero_fraction(A, eps="small"), "eps"),
])
def test_bad_thresholds_raise_value_errors(call, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        call(torch.eye(3, dtype=torch.float64)[None, None])
