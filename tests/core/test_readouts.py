"""The readout maps φ, their log forms and the coefficients built from them (``seqdyn.core.readouts``) against the
formulas written out here (seed 001 Fig. 1's readouts, DESIGN §2), evaluated in 500-digit arithmetic, at scores
that reach into the regions where the library evaluates φ through a stabilized form (φ underflowing to 0, the
softplus switch at −40, the softmax's row maximum).  Nothing here reads :data:`READOUTS` to get a formula."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch

from seqdyn.core.readouts import (
    LOG_READOUTS,
    NORMALIZERS,
    READOUTS,
    Readout,
    normalize,
    normalized_coefficients,
    resolve_readout,
)

mpmath.mp.dps = 500  # enough digits for log(1 + e^s) at s = −1000 (e^{−1000} ≈ 10^{−435})

#: seed 001 Fig. 1's readout maps φ(s), written out (DESIGN §2 lists the names)
FORMULAS = {
    "identity": lambda s: s,
    "exp": lambda s: mpmath.exp(s),
    "softplus": lambda s: mpmath.log(1 + mpmath.exp(s)),
    "relu": lambda s: max(s, mpmath.mpf(0)),
    "sigmoid": lambda s: 1 / (1 + mpmath.exp(-s)),
    "elu1": lambda s: s + 1 if s > 0 else mpmath.exp(s),  # elu(s) + 1
    "square": lambda s: s * s,
}
POSITIVE = ("exp", "softplus", "sigmoid", "elu1")  # the readouts with a log form

#: scores from far below float64's exponent range to large positive ones, both sides of every switch of a formula
SCORES = [
    -1000.0,
    -745.5,
    -700.0,
    -60.0,
    -40.5,
    -40.0,
    -39.5,
    -20.0,
    -3.0,
    -1.0,
    -0.25,
    -1e-3,
    0.0,
    1e-3,
    0.25,
    1.0,
    3.0,
    20.0,
    39.5,
    40.5,
    60.0,
    300.0,
]


def exact(values) -> torch.Tensor:
    """500-digit numbers rounded to float64 (underflow to 0 or a subnormal, as float64 would)."""
    return torch.tensor([float(value) for value in values], dtype=torch.float64)


def assert_matches(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-13) -> None:
    """Entry by entry: ``|got − want| ≤ rtol · |want|`` (plus the smallest subnormal), infinities equal."""
    assert got.shape == want.shape and got.dtype == want.dtype
    finite = torch.isfinite(want)
    assert torch.equal(got[~finite], want[~finite])
    error = (got[finite] - want[finite]).abs()
    bound = rtol * want[finite].abs() + 5e-324
    assert (error <= bound).all(), {"got": got[finite][error > bound], "want": want[finite][error > bound]}


def phi_values(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """φ of :data:`SCORES` by the library and by the formula, over the scores where φ(s) fits in float64."""
    scores = [s for s in SCORES if abs(FORMULAS[name](mpmath.mpf(s))) < 1e300]
    return READOUTS[name](torch.tensor(scores, dtype=torch.float64)), exact(
        FORMULAS[name](mpmath.mpf(s)) for s in scores
    )


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_each_readout_is_its_formula(name):
    """φ(s) of seed 001 Fig. 1 to float64 precision, at negative scores too (``square`` is s², not s·|s|)."""
    assert set(READOUTS) == set(FORMULAS)
    got, want = phi_values(name)
    assert_matches(got, want)


def test_square_is_even_and_relu_zero_on_the_negative_half_line():
    s = torch.tensor([-3.0, -0.5, 0.5, 3.0], dtype=torch.float64)
    assert torch.equal(READOUTS["square"](s), torch.tensor([9.0, 0.25, 0.25, 9.0], dtype=torch.float64))
    assert torch.equal(READOUTS["relu"](s), torch.tensor([0.0, 0.0, 0.5, 3.0], dtype=torch.float64))
    assert torch.equal(
        READOUTS["elu1"](torch.tensor([0.0, 2.0], dtype=torch.float64)), torch.tensor([1.0, 3.0], dtype=torch.float64)
    )


@pytest.mark.parametrize("name", POSITIVE)
def test_each_log_readout_is_the_log_of_its_formula_where_phi_underflows(name):
    """``log φ(s)`` at every score, −1000 included (where φ itself is 0 in float64): the stabilized form of the
    positive readouts (softplus: ``s`` below −40)."""
    assert set(LOG_READOUTS) == set(POSITIVE)
    scores = torch.tensor(SCORES, dtype=torch.float64)
    want = exact(mpmath.log(FORMULAS[name](mpmath.mpf(s))) for s in SCORES)
    assert_matches(LOG_READOUTS[name](scores), want, rtol=1e-14)
    assert resolve_readout(name).log_fn is LOG_READOUTS[name]


@pytest.mark.parametrize("name", ["identity", "relu", "square"])
def test_readouts_that_reach_zero_or_negative_values_have_no_log_form(name):
    assert resolve_readout(name).log_fn is None


def test_only_the_identity_is_linear_and_only_exp_is_exp():
    """Lemma 1: the identity is the one readout with a finite state."""
    assert [name for name in READOUTS if resolve_readout(name).linear] == ["identity"]
    assert [name for name in READOUTS if resolve_readout(name).is_exp] == ["exp"]


def test_a_library_function_resolves_to_its_name_and_a_user_callable_is_nonlinear():
    for name, fn in READOUTS.items():
        assert resolve_readout(fn) == Readout(name, fn)

    def cube(s):
        return s**3

    custom = resolve_readout(cube)
    assert custom.name == "callable:cube" and custom.fn is cube and not custom.linear and custom.log_fn is None
    with pytest.raises(
        ValueError,
        match=r"readout: got 'tanh'; allowed: one of \['elu1', 'exp', 'identity', 'relu', "
        r"'sigmoid', 'softplus', 'square'\] or a callable",
    ):
        resolve_readout("tanh")
    with pytest.raises(ValueError, match="readout: got 3"):
        resolve_readout(3)

    class Halve:
        def __call__(self, s):
            return s / 2

    assert resolve_readout(Halve()).name == "callable:Halve"  # a callable object without __name__: its type's


# --- coefficients A_ij = φ(s_ij) / η_i (seed 001 eqs. 2 and 4) ----------------------------------------------------


def score_rows(shift: float) -> torch.Tensor:
    """Two rows ``[2, 4]`` of scores around ``shift`` (one row entirely far below −40 when ``shift`` is −1000)."""
    base = torch.tensor([[0.3, -1.2, 2.0, 0.7], [-0.4, 1.5, -2.5, 0.0]], dtype=torch.float64)
    return base + shift


CAUSAL = torch.tensor([[True, True, False, False], [True, True, True, True]])


def hand_coefficients(scores: torch.Tensor, name: str, normalizer: str) -> torch.Tensor:
    """``A_ij = φ(s_ij)/η_i`` over the valid pairs, 0 elsewhere: η = Σ_j φ(s_ij) (``"sum"``, 0 for a row without
    mass), ``max(|Σ_j φ(s_ij)|, 1)`` (``"abs_max1"``), 1 (``"none"``); in 500 digits."""
    rows = []
    for scores_row, valid_row in zip(scores.tolist(), CAUSAL.tolist()):
        alpha = [FORMULAS[name](mpmath.mpf(s)) if valid else mpmath.mpf(0) for s, valid in zip(scores_row, valid_row)]
        total = sum(alpha)
        eta = {"sum": total if total != 0 else mpmath.inf, "abs_max1": max(abs(total), 1), "none": 1}[normalizer]
        rows.append(exact(a / eta for a in alpha))
    return torch.stack(rows)


@pytest.mark.parametrize("shift", [0.0, -45.0, -1000.0, 30.0])
@pytest.mark.parametrize("normalizer", NORMALIZERS)
@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_normalized_coefficients_are_phi_over_eta(name, normalizer, shift):
    """Seed 001 eqs. 2 and 4 with the causal mask, for every readout and named normalizer; scores shifted down to
    −1000, where the positive readouts go through their log form and the row maximum (``exp`` with ``"sum"`` a
    stable softmax), and up by 30, where ``exp`` rows are large."""
    scores = score_rows(shift)
    got = normalized_coefficients(scores, CAUSAL, resolve_readout(name), normalizer)
    assert_matches(got, hand_coefficients(scores, name, normalizer), rtol=1e-12)


def test_rows_without_mass_have_zero_coefficients_and_finite_gradients():
    """``"sum"`` rows whose φ sums to 0 (relu at negative scores, square at 0) give 0, not 0/0."""
    scores = torch.tensor([[-1.0, -2.0, 3.0, -0.5], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    assert torch.equal(
        normalized_coefficients(scores, CAUSAL, resolve_readout("relu"), "sum")[0].detach(),
        torch.zeros(4, dtype=torch.float64),
    )
    for name in ("relu", "square"):
        got = normalized_coefficients(scores, CAUSAL, resolve_readout(name), "sum")
        assert torch.equal(got.detach(), hand_coefficients(scores.detach(), name, "sum"))
        assert torch.equal(got[1].detach(), torch.zeros(4, dtype=torch.float64))
        (gradient,) = torch.autograd.grad(got.sum(), scores)
        assert torch.isfinite(gradient).all()


def test_a_given_eta_divides_each_row_and_the_log_scale_cancels():
    """η as a tensor: ``A_ij = φ(s_ij)/η_i``; ``normalize`` returns ``e^c · num / η`` for a row log-scale c."""
    scores = score_rows(0.0)
    eta = torch.tensor([2.0, 0.5], dtype=torch.float64)
    want = hand_coefficients(scores, "softplus", "none") / eta.unsqueeze(-1)
    assert_matches(normalized_coefficients(scores, CAUSAL, resolve_readout("softplus"), eta), want, rtol=1e-12)
    num, den, c = torch.tensor([[3.0, -6.0]]), torch.tensor([-1.5]), torch.tensor([math.log(4.0)])
    assert torch.equal(normalize(num, den, torch.tensor([2.0]), c), torch.tensor([[6.0, -12.0]]))
    assert torch.equal(normalize(num, den, "none", c), torch.tensor([[12.0, -24.0]]))
    assert torch.equal(normalize(num, den, "sum", c), torch.tensor([[-2.0, 4.0]]))
    # abs_max1 with c: e^c·num / max(e^c·|den|, 1) = num / max(|den|, e^{−c}) = 3 / max(1.5, 0.25)
    assert torch.equal(normalize(num, den, "abs_max1", c), torch.tensor([[2.0, -4.0]]))
    small = torch.tensor([0.1])
    assert torch.equal(normalize(num, small, "abs_max1"), num)  # max(0.1, 1) = 1
    with pytest.raises(ValueError, match=r"normalizer: got 'max'; allowed: \['none', 'sum', 'abs_max1'\]"):
        normalize(num, den, "max")


def test_each_row_is_stabilized_by_its_own_maximum():
    """Rows at scores near 0 and near −1000 side by side, no mask: the ``exp`` / ``"sum"`` rows are both softmaxes
    (a shared maximum would underflow the second row to 0/0), and ``valid=None`` keeps every pair, with or without
    a log form."""
    scores = torch.stack([score_rows(0.0)[1], score_rows(-1000.0)[1]])
    for name in ("exp", "softplus", "sigmoid"):
        got = normalized_coefficients(scores, None, resolve_readout(name), "sum")
        want = torch.stack(
            [
                exact(FORMULAS[name](mpmath.mpf(s)) / sum(FORMULAS[name](mpmath.mpf(t)) for t in row) for s in row)
                for row in scores.tolist()
            ]
        )
        assert_matches(got, want, rtol=1e-12)
    for name in ("identity", "square"):  # readouts without a log form, unmasked
        got = normalized_coefficients(scores[:1], None, resolve_readout(name), "none")
        assert_matches(got, exact(FORMULAS[name](mpmath.mpf(s)) for s in scores[0].tolist())[None], rtol=1e-15)


def test_normalize_without_mass_and_per_row_scales_of_several_axes():
    """``"sum"`` rows with ``den = 0`` give 0 by default (not 0/0); the log-scale ``[B, T]`` multiplies row (b, t)
    of ``num [B, T, X]``."""
    num, den = torch.tensor([[1.0, -2.0]]), torch.zeros(1)
    assert torch.equal(normalize(num, den, "sum"), torch.zeros(1, 2))
    num = torch.arange(12.0).reshape(2, 3, 2)
    log_scale = torch.log(torch.tensor([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]]))
    eta = torch.full((2, 3), 2.0)
    want = num * torch.tensor([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]]).unsqueeze(-1) / 2.0
    assert torch.allclose(normalize(num, torch.ones(2, 3), eta, log_scale), want, rtol=1e-6, atol=0)
