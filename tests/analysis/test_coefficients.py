"""Metrics on coefficient tensors: near-zero fractions, zero counts (Corollary 2.2), combination classes (Table 2),
on hand-built matrices with known answers and on the coefficients of real mixers; bad input."""

from __future__ import annotations

import math

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
    values = 0.1 + 0.9 * torch.rand(batch, heads, length, length, generator=g, dtype=torch.float64)
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


def test_an_entry_equal_to_eps_is_large_and_one_just_below_is_near_zero():
    """Ties at the ε boundary: ``|A_ij| < ε`` is near zero, ``|A_ij| ≥ ε`` large, signs ignored; 10 causal entries,
    so each entry is a tenth; the upper triangle is never counted."""
    eps = 0.25
    below = np.nextafter(eps, 0.0)
    A = causal([[eps], [-eps, below], [-below, 0.0, 1.0], [0.5, -0.5, 2 * eps, -1.0]])
    assert analysis.near_zero_fraction(A, eps=eps) == 3 / 10  # below, −below, 0
    assert analysis.large_fraction(A, eps=eps) == 7 / 10
    assert analysis.near_zero_ratio(A, eps=eps) == (7 / 10) / (3 / 10)
    assert analysis.near_zero_fraction(A, eps=np.nextafter(eps, 1.0)) == 5 / 10  # ±eps join
    assert analysis.large_fraction(A, eps=1.0) == 2 / 10 and analysis.large_fraction(A, eps=2.0) == 0.0
    assert analysis.near_zero_fraction(A) == 1 / 10  # the default ε = 1e-3 (NEAR_ZERO_EPS)
    ones = causal([[1.0], [1.0, 1.0]])
    assert math.isnan(analysis.near_zero_ratio(ones, eps=0.5, large=2.0))  # neither near zero nor large: NaN
    assert analysis.near_zero_ratio(ones, eps=0.5) == math.inf


def test_fractions_of_several_heads_and_examples_are_over_all_their_causal_entries():
    """B = 2, H = 2, T = 3: 4 · 6 = 24 causal entries; head (1, 1) holds the only 6 near-zero ones."""
    A = causal([[1.0], [1.0, 1.0], [1.0, 1.0, 1.0]]).repeat(2, 2, 1, 1)
    A[1, 1] = causal([[1e-4], [1e-4, 1e-4], [1e-4, 1e-4, 1e-4]])[0, 0]
    A[1, 1, 0, 2] = 0.0
    assert analysis.near_zero_fraction(A) == 6 / 24 and analysis.large_fraction(A) == 18 / 24


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


def test_zero_counts_tie_at_the_tolerance_and_at_the_relative_round_off():
    """An absolute ``tol``: ``|A_ij| ≤ tol`` is zero (a tie counts); the default: ``|A_ij| ≤ 64 · eps(dtype) ·
    max_j |A_ij|`` of the row, 64 units of round-off (``ZERO_ULPS``)."""
    A = causal([[0.5], [0.5, -0.25], [0.25, 0.1, 0.0], [-0.25, 0.3, 0.2, 0.1]])
    assert analysis.zero_count_per_row(A, tol=0.25).tolist() == [[[0, 1, 3, 3]]]
    assert analysis.zero_count_per_row(A, tol=np.nextafter(0.25, 0.0)).tolist() == [[[0, 0, 2, 2]]]
    assert analysis.zero_count_per_row(A, tol=0.0).tolist() == [[[0, 0, 1, 0]]]
    for dtype in (torch.float32, torch.float64):
        scale = 3.0
        limit = 64 * torch.finfo(dtype).eps * scale
        row = [[scale], [scale, limit], [scale, 1.01 * limit, 0.0]]
        assert analysis.zero_count_per_row(causal(row, dtype)).tolist() == [[[0, 1, 1]]]


def test_mean_zero_count_is_the_batch_mean_of_each_row_index_on_hand_built_rows():
    """Seed 001 Fig. 9: per (head, row i) the mean over the batch of the zero counts, rows without any nonzero
    entry left out: row 2 has 1, 2 and (left out) 3 zeros in the three examples, mean 1.5; row 1 has 0, 1, 1."""
    rows = {
        0: [[1.0], [1.0, 1.0], [0.0, 1.0, 0.5]],
        1: [[1.0], [0.0, 1.0], [0.0, 0.0, 1.0]],
        2: [[1.0], [1.0, 0.0], [0.0, 0.0, 0.0]],
    }
    A = torch.cat([causal(rows[b]) for b in range(3)])
    assert analysis.zero_count_per_row(A)[:, 0].tolist() == [[0, 0, 1], [0, 1, 2], [0, 1, 3]]
    means = analysis.mean_zero_count(A)
    assert means.dtype == torch.float64 and means.tolist() == [[0.0, 2 / 3, 1.5]]


def test_the_zero_count_of_fig9_meets_k_minus_one_exactly():
    """Corollary 2.2 by hand, K = 2: keys e₁, e₂, e₁ + e₂ and a query (1, −1) zero the third coefficient (qᵀ(e₁ +
    e₂) = 0) and no other: K − 1 = 1 zero; the query e₁ zeros the key e₂ only."""
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)[None, :, None]
    q = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, -1.0]], dtype=torch.float64)[None, :, None]
    A = seqdyn.coefficients(q, k, scale=1.0)
    assert torch.equal(A[0, 0], torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, -1.0, 0.0]], dtype=torch.float64))
    assert analysis.zero_count_per_row(A).tolist() == [[[0, 1, 1]]]
    assert analysis.mean_zero_count(A).max() == k.shape[-1] - 1


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


@pytest.mark.parametrize(
    "name, options",
    [
        ("linear_attention", {"heads": 2}),
        ("custom", {"heads": 2, "normalizer": "none"}),
        ("gla", {}),
        ("retnet", {}),
        ("mamba2", {"state_dim": 4, "head_dim": 8, "a_init_range": (1.0, 2.0)}),
        ("deltanet", {}),
    ],
)
def test_zero_counts_of_random_identity_readout_mixers_stay_within_k_minus_one(name, options):
    m = mixer(name, **options)
    x = inputs(length=16)
    A = m.coefficients(x)
    assert A.dtype == torch.float64
    assert int(analysis.zero_count_per_row(A).max()) <= key_dim(m, x) - 1


# --- combination classes (appendix A, Table 2) ----------------------------------------------------------------


def test_each_combination_class_on_hand_built_rows():
    A = causal(
        [
            [1.0],  # convex
            [0.3, 0.7],  # convex
            [0.2, 0.3, 0.1],  # conical: non-negative, sum 0.6
            [1.5, -0.25, -0.25, 0.0],  # affine: sum 1 with negative entries
            [0.5, -0.1, 0.2, 0.3, 0.4],  # linear
        ]
    )
    classes = analysis.combination_class(A)
    assert isinstance(classes, np.ndarray) and classes.shape == (1, 1, 5)
    assert classes[0, 0].tolist() == ["convex", "convex", "conical", "affine", "linear"]
    shares = analysis.combination_class_shares(A)
    assert list(shares) == list(analysis.COMBINATION_CLASSES)
    assert shares == pytest.approx({"convex": 0.4, "conical": 0.2, "affine": 0.2, "linear": 0.2})


def test_combination_classes_at_the_tolerance_boundary():
    """Appendix A's conditions up to ``tol`` (ties included): ``A_ij ≥ −tol`` and ``|Σ_j A_ij − 1| ≤ tol``; the
    tolerance is never below the round-off ``4 · max(T, 16) · eps(dtype)`` of a length-T sum."""
    tol = 1e-3
    A = causal(
        [
            [1.0],
            [-tol, 1.0 + tol],
            [0.5, 0.5 + tol, 0.0],
            [-2 * tol, 0.5, 0.5, 2 * tol],
            [0.2, 0.2, 0.2, 0.2, 0.2 - 2 * tol],
        ]
    )
    assert analysis.combination_class(A, tol=tol)[0, 0].tolist() == ["convex", "convex", "convex", "affine", "conical"]
    assert analysis.combination_class(A, tol=tol / 2)[0, 0].tolist() == [
        "convex",
        "affine",
        "conical",
        "affine",
        "conical",
    ]
    assert analysis.roundoff(torch.float32) == 4 * 16 * torch.finfo(torch.float32).eps
    assert analysis.roundoff(torch.float64, terms=100) == 4 * 100 * torch.finfo(torch.float64).eps
    off = 0.9 * analysis.roundoff(torch.float32, 2)
    row = causal([[1.0], [0.5, 0.5 + off]], torch.float32)
    assert analysis.combination_class(row, tol=0.0)[0, 0].tolist() == ["convex", "convex"]
    assert analysis.combination_class(causal([[1.0], [0.5, 0.5 + 2e-9]]))[0, 0, 1] == "conical"  # default 1e-9
    assert analysis.combination_class(causal([[1.0], [0.5, 0.5 + 0.5e-9]]))[0, 0, 1] == "convex"


def test_combination_class_tolerance_and_layout_over_batch_and_heads():
    A = causal([[1.0], [0.5, 0.5 + 1e-6]]).repeat(2, 3, 1, 1)
    A[1, 2, 1] = torch.tensor([-0.5, 1.5])
    classes = analysis.combination_class(A)
    assert classes.shape == (2, 3, 2)
    assert classes[0, 0, 1] == "conical" and analysis.combination_class(A, tol=1e-5)[0, 0, 1] == "convex"
    assert classes[1, 2, 1] == "affine" and (classes[:, :, 0] == "convex").all()
    assert analysis.combination_class_shares(A)["affine"] == pytest.approx(1 / 12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "name, options", [("softmax_attention", {"heads": 2}), ("linear_attention", {"heads": 2, "feature_map": "elu1"})]
)
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


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.zeros(2, 4, 4), "4 dimensions"),
        (torch.zeros(1, 1, 3, 4), "square"),
        (torch.ones(1, 1, 3, 3), "not causal"),
        (torch.zeros(1, 1, 3, 3, dtype=torch.int64), "floating-point"),
        (torch.full((1, 1, 2, 2), float("nan")).tril(), "NaN"),
        ([[1.0]], "tensor"),
    ],
)
@pytest.mark.parametrize(
    "metric",
    [
        analysis.near_zero_fraction,
        analysis.large_fraction,
        analysis.zero_count_per_row,
        analysis.combination_class,
        analysis.combination_class_shares,
    ],
)
def test_bad_coefficient_tensors_raise_value_errors_naming_the_argument(metric, bad, message):
    with pytest.raises(ValueError, match=f"^A: .*{message}"):
        metric(bad)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda A: analysis.near_zero_fraction(A, eps=0.0), "eps"),
        (lambda A: analysis.large_fraction(A, eps=-1.0), "eps"),
        (lambda A: analysis.zero_count_per_row(A, tol=-1e-3), "tol"),
        (lambda A: analysis.combination_class(A, tol=float("nan")), "tol"),
        (lambda A: analysis.near_zero_fraction(A, eps="small"), "eps"),
    ],
)
def test_bad_thresholds_raise_value_errors(call, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        call(torch.eye(3, dtype=torch.float64)[None, None])


def test_entries_above_the_diagonal_count_as_zero_up_to_64_units_of_round_off():
    """``check_coefficients``: an entry at ``j = i + 1`` is refused once it exceeds ``64 · eps · max(1, max|A|)``
    (the limit itself passes), and the message names the entry."""
    eps64 = torch.finfo(torch.float64).eps
    for scale in (0.5, 4.0):  # max(1, max|A|): 1 for the small matrix, 4 for the large one
        A = scale * torch.eye(3, dtype=torch.float64)[None, None]
        limit = 64 * eps64 * max(1.0, scale)
        A[0, 0, 1, 2] = limit
        assert torch.equal(analysis.check_coefficients(A), A)
        A[0, 0, 1, 2] = 1.5 * limit
        with pytest.raises(
            ValueError,
            match=r"^A: not causal: entry \[0, 0, 1, 2\] = .* lies above the diagonal "
            r"\(j > i\); coefficient matrices are zero there$",
        ):
            analysis.check_coefficients(A)
    with pytest.raises(ValueError, match=r"^A: expected a tensor of coefficients \[B, H, T, T\], got list$"):
        analysis.check_coefficients([[1.0]])
    with pytest.raises(ValueError, match=r"^M: the last two axes must both be T .*got \[1, 1, 2, 3\]$"):
        analysis.check_coefficients(torch.zeros(1, 1, 2, 3), name="M")
    with pytest.raises(ValueError, match=r"^A: empty coefficient tensor \[0, 1, 2, 2\]$"):
        analysis.check_coefficients(torch.zeros(0, 1, 2, 2))
    one = torch.ones(1, 1, 1, 1)
    assert analysis.near_zero_fraction(one) == 0.0 and analysis.zero_count_per_row(one).tolist() == [[[0]]]


def test_threshold_errors_say_positive_or_non_negative():
    A = torch.eye(2, dtype=torch.float64)[None, None]
    with pytest.raises(ValueError, match=r"^eps: expected a positive number, got 0$"):
        analysis.large_fraction(A, eps=0)
    with pytest.raises(ValueError, match=r"^tol: expected a non-negative number, got -0.5$"):
        analysis.zero_count_per_row(A, tol=-0.5)
    with pytest.raises(ValueError, match=r"^tol: expected a finite number, got True$"):
        analysis.combination_class(A, tol=True)
    assert analysis.zero_count_per_row(A, tol=0).tolist() == [[[0, 1]]]  # tol = 0 is allowed
    assert analysis.combination_class(A, tol=0)[0, 0].tolist() == ["convex", "convex"]


def test_the_default_zero_tolerance_is_per_row_and_mean_zero_count_passes_tol_on():
    """The relative round-off is each row's own (a row of 1e-14 entries has no zeros beside a row of 1s, though
    1e-14 is below 64 · eps · 1); ``mean_zero_count`` counts with the ``tol`` it is given."""
    A = causal([[1.0], [1e-14, 1e-14], [0.5, 0.25, 1.0]])
    assert analysis.zero_count_per_row(A).tolist() == [[[0, 0, 0]]]
    assert analysis.mean_zero_count(A).tolist() == [[0.0, 0.0, 0.0]]
    means = analysis.mean_zero_count(A, tol=0.3)[0]  # row 1 is all zeros at tol = 0.3: left out (NaN)
    assert means[0] == 0.0 and math.isnan(means[1]) and means[2] == 1.0


def test_the_round_off_floor_of_the_classes_grows_with_the_row_length():
    """T = 20 > 16 float32 entries: a row summing to 1 + 8.5e-6 is affine at ``tol = 0`` because the floor is
    ``roundoff(float32, 20) = 4 · 20 · eps ≈ 9.5e-6`` (``4 · 16 · eps ≈ 7.6e-6`` would not cover it)."""
    length = 20
    A = torch.eye(length, dtype=torch.float32)[None, None].clone()
    A[0, 0, -1] = 1.0 / length
    A[0, 0, -1, 0] += 8.5e-6
    deviation = float(A[0, 0, -1].double().sum()) - 1.0
    assert analysis.roundoff(torch.float32, 16) < deviation < analysis.roundoff(torch.float32, length)
    assert analysis.combination_class(A, tol=0.0)[0, 0, -1] == "convex"


def test_row_sums_of_float32_coefficients_are_taken_in_float64():
    """A float32 row 1, 10⁸, −10⁸ (each exact in float32) sums to 1: affine.  Summed in float32 the 1 is lost in
    10⁸ and the row would read as a plain linear combination."""
    A = causal([[1.0], [1.0, 0.0], [1.0, 1e8, -1e8]], torch.float32)
    assert analysis.combination_class(A)[0, 0].tolist() == ["convex", "convex", "affine"]


def test_a_sum_exactly_at_the_tolerance_is_affine_and_every_class_has_a_share():
    """``|Σ_j A_ij − 1| ≤ tol`` with a tie (2⁻¹⁰, exact in binary); shares of a matrix of convex rows only still
    list the four classes."""
    tol = 2.0**-10
    A = causal([[1.0], [0.5, 0.5 + tol], [-2 * tol, 0.5, 0.5 + 3 * tol]])
    assert analysis.combination_class(A, tol=tol)[0, 0].tolist() == ["convex", "convex", "affine"]
    assert analysis.combination_class_shares(causal([[1.0], [0.5, 0.5]])) == {
        "convex": 1.0,
        "conical": 0.0,
        "affine": 0.0,
        "linear": 0.0,
    }
