"""The papers' lemmas (``seqdyn.reproduce.lemma_checks``): each computation fails where the statement's premise is
broken (a wrong feature map, a non-scalar A, an output that reads the extra states, Λ = I where Λ ≠ I is claimed,
non-unit variances, a signed readout, a wrong DLR weight), and each claim holds, fails and is inconclusive on rows
where it must."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from seqdyn.core.dsf import DSF
from seqdyn.features import taylor
from seqdyn.reproduce import lemma_checks as lc
from seqdyn.reproduce.base import Results
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE
from seqdyn.reproduce.runner import named_sweeps, run


@pytest.fixture(scope="module")
def computed() -> Results:
    return Results("smoke", tuple(lc.compute_rows(lc.SCALES["smoke"])))


def _with(results: Results, lemma: str, value: float, setting: str | None = None) -> Results:
    rows = tuple(
        {**row, "check.value": value}
        if row["check.lemma"] == lemma and setting in (None, row["check.setting"])
        else row
        for row in results.rows
    )
    return dataclasses.replace(results, rows=rows)


def _without(results: Results, lemma: str) -> Results:
    return dataclasses.replace(results, rows=tuple(row for row in results.rows if row["check.lemma"] != lemma))


def _verdicts(results: Results) -> dict[str, str]:
    return {claim.name: claim.decide(results).verdict for claim in lc.CLAIMS}


def test_every_claim_holds_on_the_smoke_computation(computed):
    assert set(_verdicts(computed).values()) == {HELD}


CLAIM_OF = dict(zip(lc.LEMMAS, (claim.name for claim in lc.CLAIMS)))


@pytest.mark.parametrize(
    ("lemma", "value", "setting"),
    [
        ("taylor", 0.05, None),  # every degree as large: p = 10's error is not a tenth of p = 1's
        ("taylor", 0.5, "p = 8"),  # an even degree whose error rises above the one before it
        ("s6", 1e-6, None),
        ("state", 1e-9, "s6"),
        ("positions", 1e-9, "Λ = I"),
        ("positions", 1e-8, "Λ diagonal"),
        ("variance", 1.06, "K = 4, b = 2.0"),
        ("convex", 1e-9, "sigmoid"),
        ("dlr", 1e-8, None),
    ],
)
def test_each_claim_fails_where_its_number_misses_the_threshold_and_only_that_claim(computed, lemma, value, setting):
    verdicts = _verdicts(_with(computed, lemma, value, setting))
    assert verdicts.pop(CLAIM_OF[lemma]) == FAILED
    assert set(verdicts.values()) == {HELD}


@pytest.mark.parametrize("lemma", list(lc.LEMMAS))
def test_a_claim_without_its_computation_is_inconclusive(computed, lemma):
    assert _verdicts(_without(computed, lemma))[CLAIM_OF[lemma]] == INCONCLUSIVE


def test_taylor_attention_approaches_softmax_and_a_broken_feature_map_does_not():
    first, top = lc.taylor_coefficient_error(1, seed=0), lc.taylor_coefficient_error(10, seed=0)
    assert top <= lc.TAYLOR_FALL * first
    assert lc.taylor_coefficient_error(10, seed=0, features=taylor) == pytest.approx(top, abs=1e-12)
    tripled = lc.taylor_coefficient_error(10, seed=0, features=lambda x, p: 3 * taylor(x, p))  # η divides it out
    assert tripled == pytest.approx(top, abs=1e-12)
    without_constant = lambda x, p: torch.cat([2 * taylor(x, p)[..., :1], taylor(x, p)[..., 1:]], dim=-1)  # noqa: E731
    assert lc.taylor_coefficient_error(10, seed=0, features=without_constant) > 10 * top


def _taylor_rows(errors: dict[int, float]) -> Results:
    return Results("cpu", tuple(lc._row("taylor", f"p = {p}", error, 0.0, p) for p, error in errors.items()))


#: p = 1's error 1, the even degrees' falling, the odd ones' ten times larger and rising (their normalizer can pass
#: through zero)
FALLING = {1: 1.0, 2: 0.9, 4: 0.5, 6: 0.3, 8: 0.2, 10: 0.05} | {p: 10.0 * p for p in (3, 5, 7, 9)}


def _taylor_verdict(errors: dict[int, float]) -> str:
    return next(claim for claim in lc.CLAIMS if claim.name.startswith("Lemma 1")).decide(_taylor_rows(errors)).verdict


@pytest.mark.parametrize(
    ("changes", "verdict"),
    [
        ({}, HELD),  # odd degrees rising do not count: only the even ones converge at finite p
        ({10: 0.099}, HELD),  # just inside a tenth of p = 1's error
        ({10: 0.101}, FAILED),  # just outside it
        ({8: 0.301}, FAILED),  # p = 8 just above p = 6's 0.3: the error rose between even degrees
        ({8: 0.299}, HELD),  # just below it
        ({6: 0.2}, HELD),  # equal errors do not rise
    ],
)
def test_lemma1_converges_over_the_even_degrees_and_falls_a_tenth_from_p1(changes, verdict):
    assert _taylor_verdict({**FALLING, **changes}) == verdict


def test_lemma1_without_a_degree_is_inconclusive():
    errors = {p: error for p, error in FALLING.items() if p != 4}
    assert _taylor_verdict(errors) == INCONCLUSIVE


def test_eq22_needs_a_scalar_a_and_its_own_exponent():
    mixer = lc.scalar_a_s6(seed=0, a=1.5)
    x = torch.randn(2, 8, mixer.d_model, dtype=torch.float64)
    assert lc.s6_transition_gap(mixer, x, 1.5) <= lc.IDENTITY_ROUNDOFF
    assert lc.s6_transition_gap(mixer, x, 1.0) > 1e-3
    with torch.no_grad():
        mixer.a_log.copy_(torch.log(torch.linspace(1.0, 2.0, mixer.state_dim)).expand_as(mixer.a_log))
    assert lc.s6_transition_gap(mixer, x, 1.5) > 1e-3


def test_lemma2_fails_when_the_larger_system_reads_its_extra_states():
    system = DSF(
        *(
            torch.randn(*shape, dtype=torch.float64) * 0.3
            for shape in ((1, 1, 6, 3, 3), (1, 1, 6, 3, 2), (1, 1, 6, 2, 3), (1, 1, 6, 2, 2))
        )
    )
    u = torch.randn(1, 6, 1, 2, dtype=torch.float64)
    larger = lc.expand_state(system, 4, seed=0)
    assert lc.recovery_error(system, larger, u) <= lc.IDENTITY_ROUNDOFF
    reads_extra = larger.C.clone()
    reads_extra[..., 3:] = 0.1
    leaky = dataclasses.replace(larger, C=reads_extra)
    assert lc.recovery_error(system, leaky, u) > 1e-3


def test_lemma3_spread_is_zero_for_an_identity_lambda_given_as_a_decay():
    length, heads, dim = 16, 2, 4
    identity = {"log_decay": torch.zeros(1, length, heads, dtype=torch.float64)}
    decay = lc.EVOLUTIONS["Λ = λI"](torch.Generator().manual_seed(0), length, heads, dim)
    assert lc.positional_spread(identity, "exp", "sum", seed=0) <= lc.NO_POSITION
    assert lc.positional_spread(decay, "exp", "sum", seed=0) >= lc.POSITION
    assert lc.positional_spread({}, "sigmoid", "none", seed=0) <= lc.NO_POSITION


def test_lemma5_ratio_is_one_for_unit_variances_and_four_for_variance_two():
    assert abs(lc.dot_product_variance_ratio(8, 0.5, 100_000, seed=0) - 1) <= lc.VARIANCE_TOLERANCE
    assert lc.dot_product_variance_ratio(8, 0.5, 100_000, seed=0, std=2**0.5) == pytest.approx(4, rel=0.1)


def test_corollary61_fails_for_a_signed_readout():
    assert lc.convexity_violation("exp", seed=0) <= lc.CONVEX_ROUNDOFF
    assert lc.convexity_violation("identity", seed=0) > 1e-2


def test_proposition1_needs_both_halves_of_w():
    A, B, C = lc.random_linear_rnn(seed=0)
    u = torch.randn(32, dtype=torch.float64)
    assert lc.dlr_mismatch(A, B, C, u) <= lc.DLR_ROUNDOFF

    def without_inverse(A, B, C):
        lam, V = torch.linalg.eig(A)
        return lam, (C @ V) * B

    assert lc.dlr_mismatch(A, B, C, u, without_inverse) > 1e-3


@pytest.mark.parametrize("scale", list(lc.SCALES))
def test_it_trains_nothing_and_the_scales_differ_in_draws_only(scale):
    assert named_sweeps(lc.REPRODUCTION, scale) == [] and not lc.REPRODUCTION.trains
    assert lc.REPRODUCTION.reductions[scale]
    assert [lc.SCALES[s].draws for s in ("smoke", "cpu", "paper")] == sorted(s.draws for s in lc.SCALES.values())


def test_a_second_call_records_its_own_wall_time(tmp_path):
    """A reproduction that trains nothing computes again on every call: no earlier call's time is kept."""
    folder = run(lc.REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False).folder
    verdict = json.loads((folder / "verdict.json").read_text())
    (folder / "verdict.json").write_text(json.dumps({**verdict, "elapsed_s": 9999.0}))
    again = run(lc.REPRODUCTION, "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False)
    assert again.elapsed_s < 9999.0 and again.runs_before == 0
    assert "computations, no training" in (folder / "table.md").read_text()
