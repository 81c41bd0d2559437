"""Sieber et al. 2024 and 2025 and Gupta et al. 2022: the papers' cheap mathematical statements, computed in float64
with seqdyn's own code.

No training: each claim is decided by a computation on random draws (queries, keys, mixers' weights, linear RNNs)
that takes seconds, and the scales differ only in the number of draws.

- Sieber et al. 2024, Lemma 1: the ``taylor_attention`` mixer's coefficients approach softmax attention's as the degree
  p of its Taylor features grows;
- Sieber et al. 2024, eq. 22 (appendix G, eq. 29): the ``s6`` mixer's DSF transition with a scalar A = −a equals
  diag(σ_rev(W̄_Δ u_i)^a) ⊗ I_n;
- Sieber et al. 2024, Lemma 2 (appendix H): a mixer's DSF embedded in a larger state gives the same outputs;
- Sieber et al. 2025, Lemma 3: identical inputs at different positions get identical coefficients iff Λ = I;
- Sieber et al. 2025, Lemma 5: Var(qᵀ b k) = b² K for q, k with independent unit-variance entries;
- Sieber et al. 2025, Corollary 6.1: with η_i = Σ_j α_ij and a positive readout the outputs are convex combinations of
  the values;
- Gupta et al. 2022, Proposition 1: the ``dlr`` mixer with λ = eig(A) and w = (CV) ⊙ (V⁻¹B) computes a diagonalizable
  linear RNN's map.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import seqdyn
from seqdyn.analysis.mixers import expand_state
from seqdyn.core.dsf import DSF
from seqdyn.mixers import build
from seqdyn.reproduce.base import Computation, Results, computed_row
from seqdyn.reproduce.claims import Claim, Outcome, Score, at_most, every, reaches

F64 = torch.float64

#: Lemma 1 is an identity in the limit: e^{qᵀk} = φ(q)ᵀφ(k) with an infinite feature vector, which the degree-p
#: Taylor features truncate to T_p(s) = Σ_{m≤p} s^m / m!.  T_p → exp for every score s, so for every draw the
#: coefficient error vanishes as p grows.  At an even p, T_p > 0 for every s: A^(p) is a convex combination like
#: softmax's and its error is at most 1, so the mean error over the draws (bounded, converging on each draw)
#: vanishes too.  At an odd p, T_p has a real root (−1 at p = 1, about −3.3 at p = 9) below which η^(p) can pass
#: through zero, so its error is unbounded at any finite p and says nothing about the limit.  The rule, fixed before
#: any re-decision (no absolute bound: none follows from the lemma): the mean error falls from each even degree to
#: the next, and at the largest degree it is at most TAYLOR_FALL × the mean error at p = 1
TAYLOR_DEGREES = tuple(range(1, 11))
TAYLOR_EVEN = tuple(p for p in TAYLOR_DEGREES if p % 2 == 0)
TAYLOR_FALL = 0.1
#: eq. 22, Lemma 2 and Proposition 1 are identities: they hold to float64 round-off
IDENTITY_ROUNDOFF = 1e-12
#: Proposition 1 goes through an eigendecomposition: its V⁻¹ costs a few digits
DLR_ROUNDOFF = 1e-10
#: Lemma 3: Λ = I leaves a row's coefficients equal to round-off; Λ ≠ I spreads them by more than 1e-6 of the row's
NO_POSITION, POSITION = 1e-12, 1e-6
#: Lemma 5: the Monte Carlo variance within 5 % of b² K (more than 4 standard errors at 50,000 samples)
VARIANCE_TOLERANCE = 0.05
VARIANCE_WIDTHS = (1, 4, 16, 64)
VARIANCE_SCALES = (0.5, 1.0, 2.0, "inv_sqrt")
#: Corollary 6.1: negative weights, row sums off 1 and outputs outside the values' hull all at most round-off
CONVEX_ROUNDOFF = 1e-12
POSITIVE_READOUTS = ("exp", "softplus", "sigmoid", "elu1", "square")


@dataclass(frozen=True)
class Scale:
    """How many random draws each check takes the worst of, and the Monte Carlo samples of Lemma 5."""

    draws: int
    samples: int


SCALES = {
    "smoke": Scale(draws=1, samples=50_000),
    "cpu": Scale(draws=8, samples=400_000),
    "paper": Scale(draws=64, samples=4_000_000),
}


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _normal(generator: torch.Generator, *shape: int, std: float = 1.0) -> Tensor:
    return std * torch.randn(*shape, generator=generator, dtype=F64)


def _mixer(name: str, d_model: int, seed: int, **options: Any) -> torch.nn.Module:
    """Mixer ``name`` in float64 with weights drawn from ``seed`` (the global generator left as it was)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build(name, d_model, **options).double().eval()


# --- Sieber et al. 2024, Lemma 1 --------------------------------------------------------------------------------------


def taylor_coefficient_error(
    degree: int,
    seed: int,
    length: int = 32,
    d_model: int = 16,
    state_dim: int = 2,
    features: Callable[[Tensor, int], Tensor] | None = None,
) -> float:
    """``max_ij |A^(p)_ij − softmax_ij(qᵀk/√n)|`` (Sieber et al. 2024, Lemma 1, eq. 17; Taylor features eq. 24).

    ``A^(p)`` are the coefficients of the ``taylor_attention`` mixer of degree p; the softmax coefficients come from
    ``seqdyn.coefficients`` with the exp readout and η = Σ_j α_ij on the same projections.  The query-key weights
    are N(0, 1/D) and the inputs N(0, I_D), so q and k have unit-variance entries and the scores unit variance.
    ``features`` replaces the Taylor feature map (a broken map must fail the lemma).
    """
    mixer = _mixer("taylor_attention", d_model, seed, state_dim=state_dim, degree=degree)
    generator = _generator(seed)
    with torch.no_grad():
        mixer.qk.weight.copy_(_normal(generator, *mixer.qk.weight.shape, std=d_model**-0.5))
        x = _normal(generator, 1, length, d_model)
        q, k = (t.unflatten(-1, (1, state_dim)) for t in mixer.qk(x).chunk(2, dim=-1))
        softmax = seqdyn.coefficients(q, k, readout="exp", normalizer="sum", scale=state_dim**-0.5)
        if features is None:
            taylor = mixer.coefficients(x)
        else:
            lifted = [features(t * state_dim**-0.25, degree) for t in (q, k)]
            taylor = seqdyn.coefficients(*lifted, scale=1.0, normalizer="sum")
    return float((taylor - softmax).abs().max())


def taylor_errors(draws: int, **options: Any) -> dict[int, float]:
    """The mean :func:`taylor_coefficient_error` over ``draws`` draws, per degree p (the statistic whose limit
    Lemma 1 fixes: see :data:`TAYLOR_FALL`)."""
    return {
        p: sum(taylor_coefficient_error(p, seed, **options) for seed in range(draws)) / draws for p in TAYLOR_DEGREES
    }


# --- Sieber et al. 2024, eq. 22 ---------------------------------------------------------------------------------------


def scalar_a_s6(seed: int, a: float, d_model: int = 8, state_dim: int = 4) -> torch.nn.Module:
    """The bare S6 block (Sieber et al. 2024, §4.2: no convolution, no gate) with the scalar A = −a·I of eq. 22."""
    mixer = _mixer("s6", d_model, seed, state_dim=state_dim, expand=1, dt_rank=2, short_conv=False, gate=False)
    with torch.no_grad():
        mixer.a_log.fill_(math.log(a))
    return mixer


def reversed_sigmoid_transition(mixer: torch.nn.Module, x: Tensor, a: float) -> Tensor:
    """``Λ_i = diag(σ_rev(W̄_Δ u_i)^a) ⊗ I_n`` with ``σ_rev(z) = 1/(1 + e^z)`` (Sieber et al. 2024, eq. 22, appendix G
    eq. 29), ``[B, I, T, n, n]`` as the mixer's DSF lays it out; ``W̄_Δ u_i`` is the Δ projection before the
    softplus."""
    inner = mixer.in_proj(x)
    rank = mixer.x_proj(inner)[..., : mixer.dt_rank]
    gate = torch.sigmoid(-mixer.dt_proj(rank)) ** a  # σ_rev(z) = σ(−z)
    return gate.transpose(1, 2)[..., None, None] * torch.eye(mixer.state_dim, dtype=F64)


def s6_transition_gap(mixer: torch.nn.Module, x: Tensor, a: float) -> float:
    """``max |Λ_i^S6 − Λ_i^(22)|``: the mixer's DSF transition ``exp((Δ_i ⊗ I_n) ⊙ A)`` (Sieber et al. 2024, eq. 18)
    against eq. 22 with exponent ``a``."""
    with torch.no_grad():
        return float((mixer.dsf(x).Lambda - reversed_sigmoid_transition(mixer, x, a)).abs().max())


def s6_transition_gaps(draws: int) -> float:
    """The worst :func:`s6_transition_gap` over ``draws`` S6 blocks with a scalar a ∈ [0.5, 2]."""
    gaps = []
    for seed in range(draws):
        generator = _generator(seed)
        a = 0.5 + 1.5 * float(torch.rand(1, generator=generator, dtype=F64))
        mixer = scalar_a_s6(seed, a)
        gaps.append(s6_transition_gap(mixer, _normal(generator, 2, 16, mixer.d_model), a))
    return max(gaps)


# --- Sieber et al. 2024, Lemma 2 --------------------------------------------------------------------------------------

STATE_MIXERS = {"linear_attention": dict(heads=2), "s6": dict(state_dim=4, expand=1, short_conv=False, gate=False)}


def recovery_error(system: DSF, larger: DSF, u: Tensor) -> float:
    """``max |y − ȳ| / max |y|`` of the two systems (Sieber et al. 2024, eq. 11) run on the same inputs ``u``
    ``[B, T, H, V]``."""
    with torch.no_grad():
        y = system.simulate(u)
        return float((y - larger.simulate(u)).abs().max() / y.abs().max())


def state_expansion_error(name: str, seed: int, extra_states: int = 5, d_model: int = 8, length: int = 12) -> float:
    """:func:`recovery_error` of mixer ``name``'s DSF and the larger system of Sieber et al. 2024, appendix H
    (``Λ̄ = [[Λ, 0], [Λ₂₁, Λ₂₂]]``, ``B̄ = [B; B₂]``, ``C̄ = [C, 0]``, ``seqdyn.analysis.expand_state``)."""
    mixer = _mixer(name, d_model, seed, **STATE_MIXERS[name])
    generator = _generator(seed)
    with torch.no_grad():
        system = mixer.dsf(_normal(generator, 2, length, d_model))
    batch, heads, _, _, width = system.B.shape
    u = _normal(generator, batch, length, heads, width)
    return recovery_error(system, expand_state(system, extra_states, seed), u)


# --- Sieber et al. 2025, Lemma 3 --------------------------------------------------------------------------------------

#: (readout, normalizer) pairs the lemma is checked with
POSITION_READOUTS = (("identity", "none"), ("exp", "sum"), ("sigmoid", "none"))
#: Λ of each setting for a repeated token: the operator's evolution keywords, per step the same
EVOLUTIONS: dict[str, Callable[[torch.Generator, int, int, int], dict[str, Tensor]]] = {
    "Λ = I": lambda g, length, heads, dim: {},
    "Λ = λI": lambda g, length, heads, dim: {
        "log_decay": torch.log(0.5 + 0.45 * torch.rand(1, 1, heads, generator=g, dtype=F64)).expand(1, length, heads)
    },
    "Λ diagonal": lambda g, length, heads, dim: {
        "log_decay": torch.log(0.5 + 0.45 * torch.rand(1, 1, heads, dim, generator=g, dtype=F64)).expand(
            1, length, heads, dim
        )
    },
    "Λ Householder": lambda g, length, heads, dim: {
        "householder": (0.2 + 0.6 * torch.rand(1, 1, heads, generator=g, dtype=F64)).expand(1, length, heads),
        "householder_dir": torch.nn.functional.normalize(_normal(g, 1, 1, heads, dim), dim=-1).expand(
            1, length, heads, dim
        ),
    },
}


def positional_spread(
    evolution: dict[str, Tensor],
    readout: str,
    normalizer: str,
    seed: int,
    length: int = 16,
    heads: int = 2,
    dim: int = 4,
) -> float:
    """``max_i (max_{j≤i} A_ij − min_{j≤i} A_ij) / max_{j≤i} |A_ij|`` for a repeated token (Sieber et al. 2025,
    Definition 1).

    Every position holds the same query and key, so the coefficients ``α_ij = φ(qᵀ Λ^{i−j} b k)`` (Sieber et al. 2025,
    eq. 4) of a row differ only through Λ: Lemma 3 says the spread is zero iff Λ = I.
    """
    generator = _generator(seed)
    q, k = (_normal(generator, 1, 1, heads, dim).expand(1, length, heads, dim) for _ in range(2))
    A = seqdyn.coefficients(q, k, readout=readout, normalizer=normalizer, **evolution)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    high = A.masked_fill(~causal, -math.inf).amax(dim=-1)
    low = A.masked_fill(~causal, math.inf).amin(dim=-1)
    return float(((high - low) / A.abs().amax(dim=-1)).max())


def positional_spreads(draws: int) -> dict[str, float]:
    """Per Λ setting: the largest spread over readouts and draws when Λ = I, the smallest when Λ ≠ I."""
    spreads = {}
    for name, evolution in EVOLUTIONS.items():
        values = [
            positional_spread(evolution(_generator(seed + 1000), 16, 2, 4), readout, normalizer, seed)
            for seed in range(draws)
            for readout, normalizer in POSITION_READOUTS
        ]
        spreads[name] = max(values) if name == "Λ = I" else min(values)
    return spreads


# --- Sieber et al. 2025, Lemma 5 --------------------------------------------------------------------------------------


def scale_value(scale: float | str, width: int) -> float:
    return width**-0.5 if scale == "inv_sqrt" else float(scale)


def dot_product_variance_ratio(
    width: int, scale: float, samples: int, seed: int, std: float = 1.0, block: int = 1 << 18
) -> float:
    """``Var(α) / (b² K)`` for ``α = qᵀ b k``, q, k with independent N(0, std²) entries (Sieber et al. 2025, Lemma 5).

    α is the operator's coefficient of a one-token sequence (Sieber et al. 2025, eq. 4 with Λ = I):
    ``seqdyn.coefficients`` with the identity readout and scale b, over ``samples`` draws in blocks; the lemma says the
    ratio is 1 for unit-variance entries."""
    generator = _generator(seed)
    values = []
    for start in range(0, samples, block):
        count = min(block, samples - start)
        q, k = (_normal(generator, count, 1, 1, width, std=std) for _ in range(2))
        values.append(seqdyn.coefficients(q, k, scale=scale).flatten())
    return float(torch.cat(values).var() / (scale**2 * width))


def variance_ratios(samples: int) -> dict[tuple[int, str], float]:
    """:func:`dot_product_variance_ratio` for every K of :data:`VARIANCE_WIDTHS` and b of :data:`VARIANCE_SCALES`."""
    return {
        (width, str(scale)): dot_product_variance_ratio(width, scale_value(scale, width), samples, seed)
        for seed, (width, scale) in enumerate((w, s) for w in VARIANCE_WIDTHS for s in VARIANCE_SCALES)
    }


# --- Sieber et al. 2025, Corollary 6.1 --------------------------------------------------------------------------------


def convexity_violation(
    readout: str, seed: int, length: int = 32, heads: int = 2, dim: int = 8, value_dim: int = 3
) -> float:
    """The largest departure from a convex combination with η_i = Σ_j α_ij (Sieber et al. 2025, eq. 2, Corollary 6.1).

    The largest of: a negative coefficient ``−min A_ij``; a row sum's distance to 1, ``|Σ_j A_ij − 1|``; an output
    outside its values' range per coordinate, ``y_ic − max_{j≤i} v_jc`` or ``min_{j≤i} v_jc − y_ic``.  Random q, k,
    v and a scalar decay Λ_t = λ_t I with λ_t ∈ [0.8, 1] (the corollary is about η, whatever Λ).
    """
    generator = _generator(seed)
    q, k = (_normal(generator, 1, length, heads, dim) for _ in range(2))
    v = _normal(generator, 1, length, heads, value_dim)
    log_decay = torch.log(0.8 + 0.2 * torch.rand(1, length, heads, generator=generator, dtype=F64))
    options = dict(readout=readout, normalizer="sum", log_decay=log_decay)
    A = seqdyn.coefficients(q, k, **options)
    y = seqdyn.coefficient_dynamics(q, k, v, **options)
    running_max = torch.cummax(v, dim=1).values
    running_min = torch.cummin(v, dim=1).values
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return max(
        float(-A.masked_fill(~causal, 0).min()),
        float((A.sum(-1) - 1).abs().max()),
        float((y - running_max).max()),
        float((running_min - y).max()),
    )


def convexity_violations(draws: int) -> dict[str, float]:
    return {readout: max(convexity_violation(readout, seed) for seed in range(draws)) for readout in POSITIVE_READOUTS}


# --- Gupta et al. 2022, Proposition 1 ---------------------------------------------------------------------------------


def random_linear_rnn(seed: int, state_dim: int = 8, radius: float = 0.95) -> tuple[Tensor, Tensor, Tensor]:
    """``A`` ``[N, N]`` (complex Gaussian, spectral radius ``radius``), ``B`` ``[N]``, ``C`` ``[N]`` of the linear RNN
    of Gupta et al. 2022 (eq. 7)."""
    generator = _generator(seed)

    def complex_normal(*shape: int) -> Tensor:
        return torch.complex(_normal(generator, *shape), _normal(generator, *shape))

    A = complex_normal(state_dim, state_dim)
    A = radius * A / torch.linalg.eigvals(A).abs().max()
    return A, complex_normal(state_dim), complex_normal(state_dim)


def linear_rnn(A: Tensor, B: Tensor, C: Tensor, u: Tensor) -> Tensor:
    """``x_k = A x_{k−1} + B u_k``, ``y_k = C x_k`` (Gupta et al. 2022, eq. 7), step by step from ``x_{−1} = 0``:
    ``u`` ``[T]`` → ``y``."""
    x, outputs = torch.zeros_like(B), []
    for u_k in u:
        x = A @ x + B * u_k
        outputs.append(C @ x)
    return torch.stack(outputs)


def dlr_parameters(A: Tensor, B: Tensor, C: Tensor) -> tuple[Tensor, Tensor]:
    """``Λ`` and ``w = (CV) ⊙ (V⁻¹B)`` from ``A = V diag(Λ) V⁻¹`` (Gupta et al. 2022, Proposition 1, §A.3)."""
    lam, V = torch.linalg.eig(A)
    return lam, (C @ V) * torch.linalg.solve(V, B)


def dlr_outputs(lam: Tensor, w: Tensor, u: Tensor) -> Tensor:
    """``y_k = Re Σ_j ⟨w, Λ^j⟩ u_{k−j}`` (Gupta et al. 2022, eqs. 1–4) by the ``dlr`` mixer's FFT convolution, its
    parameters set to ``λ = exp(−(logΛ)_re² + i (logΛ)_im)`` and ``W = w`` (one channel)."""
    mixer = _mixer("dlr", 1, 0, state_dim=lam.shape[0])
    with torch.no_grad():
        mixer.log_re.copy_(torch.sqrt(-torch.log(lam.abs()))[None])
        mixer.log_im.copy_(torch.angle(lam)[None])
        mixer.W.copy_(torch.view_as_real(w)[None, None])
        return mixer.system()(u[None, :, None], backend="fft")[0, :, 0]


def dlr_mismatch(
    A: Tensor,
    B: Tensor,
    C: Tensor,
    u: Tensor,
    parameters: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]] = dlr_parameters,
) -> float:
    """``max_k |y_k^DLR − Re y_k^RNN| / max_k |Re y_k^RNN|`` (the DLR casts to ℝ by the real part, Gupta et al. 2022,
    §2.1)."""
    expected = linear_rnn(A, B, C, u.to(A.dtype)).real
    return float((dlr_outputs(*parameters(A, B, C), u) - expected).abs().max() / expected.abs().max())


def dlr_mismatches(draws: int, length: int = 64) -> float:
    """The worst :func:`dlr_mismatch` over ``draws`` random diagonalizable linear RNNs of 8 states."""
    worst = 0.0
    for seed in range(draws):
        u = _normal(_generator(seed + 1000), length)
        worst = max(worst, dlr_mismatch(*random_linear_rnn(seed), u))
    return worst


# --- rows, claims, table, figure --------------------------------------------------------------------------------

LEMMAS = {
    "taylor": "Sieber et al. 2024, Lemma 1",
    "s6": "Sieber et al. 2024, eq. 22",
    "state": "Sieber et al. 2024, Lemma 2",
    "positions": "Sieber et al. 2025, Lemma 3",
    "variance": "Sieber et al. 2025, Lemma 5",
    "convex": "Sieber et al. 2025, Corollary 6.1",
    "dlr": "Gupta et al. 2022, Proposition 1",
}


def _row(lemma: str, setting: str, value: float, seconds: float, x: float | None = None) -> dict[str, Any]:
    """One computation as a result row."""
    return computed_row(
        f"{LEMMAS[lemma]}: {setting}",
        f"{lemma}/{setting}",
        round(seconds, 3),
        {"check.lemma": lemma, "check.setting": setting, "check.x": x, "check.value": value},
    )


def _timed(compute: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = compute()
    return value, time.perf_counter() - start


def compute_rows(scale: Scale) -> list[dict[str, Any]]:
    """Every check's numbers at ``scale``, one row per setting (the time of a check shared by its rows)."""
    rows = []
    errors, seconds = _timed(lambda: taylor_errors(scale.draws))
    rows += [_row("taylor", f"p = {p}", error, seconds / len(errors), p) for p, error in errors.items()]
    gap, seconds = _timed(lambda: s6_transition_gaps(scale.draws))
    rows.append(_row("s6", "A = −a·I", gap, seconds))
    for name in STATE_MIXERS:
        error, seconds = _timed(lambda: max(state_expansion_error(name, seed) for seed in range(scale.draws)))
        rows.append(_row("state", name, error, seconds))
    spreads, seconds = _timed(lambda: positional_spreads(scale.draws))
    rows += [_row("positions", name, spread, seconds / len(spreads)) for name, spread in spreads.items()]
    ratios, seconds = _timed(lambda: variance_ratios(scale.samples))
    rows += [
        _row(
            "variance",
            f"K = {width}, b = {b}",
            ratio,
            seconds / len(ratios),
            scale_value(float(b) if b != "inv_sqrt" else b, width) ** 2 * width,
        )
        for (width, b), ratio in ratios.items()
    ]
    violations, seconds = _timed(lambda: convexity_violations(scale.draws))
    rows += [_row("convex", readout, value, seconds / len(violations)) for readout, value in violations.items()]
    mismatch, seconds = _timed(lambda: dlr_mismatches(scale.draws))
    rows.append(_row("dlr", "N = 8, L = 64", mismatch, seconds))
    return rows


def _values(results: Results, lemma: str) -> dict[str, float]:
    return {row["check.setting"]: row["check.value"] for row in results.rows if row.get("check.lemma") == lemma}


def _score(results: Results, lemma: str, setting: str | None = None) -> Score:
    """One computation's number (``setting``), or the largest over the lemma's settings; none where it is missing."""
    values = _values(results, lemma)
    picked = [values[setting]] if setting in values else [] if setting else list(values.values())
    label = setting or LEMMAS[lemma]
    missing = () if picked else (f"{LEMMAS[lemma]} {label} not computed",)
    return Score(label, (max(picked),) if picked else (), missing, exact=True)


def _each_at_most(lemma: str, settings: Iterable[str], threshold: float) -> Callable[[Results], Outcome]:
    """The claim that every setting of ``lemma`` computes a number ≤ ``threshold``."""
    return lambda results: every({setting: at_most(_score(results, lemma, setting), threshold) for setting in settings})


def error_ratio(results: Results, upper: int, lower: int) -> Score:
    """The mean Taylor error at degree ``upper`` over that at degree ``lower`` (missing where either is; infinite
    where only the lower one is 0)."""
    top, bottom = _score(results, "taylor", f"p = {upper}"), _score(results, "taylor", f"p = {lower}")
    label = f"p = {upper} / p = {lower}"
    if not top.values or not bottom.values:
        return Score(label, (), (*top.missing, *bottom.missing), exact=True)
    numerator, denominator = top.values[0], bottom.values[0]
    return Score(label, (numerator / denominator if denominator else 0.0 if numerator == 0 else math.inf,), exact=True)


def _taylor_converges(results: Results) -> Outcome:
    """Lemma 1's limit (:data:`TAYLOR_FALL`): the mean error does not rise from an even degree to the next, and at the
    largest degree it is at most ``TAYLOR_FALL`` × that at p = 1."""
    parts = {
        f"p = {upper} / p = {lower}": at_most(error_ratio(results, upper, lower), 1.0)
        for lower, upper in zip(TAYLOR_EVEN, TAYLOR_EVEN[1:])
    }
    top, first = TAYLOR_DEGREES[-1], TAYLOR_DEGREES[0]
    parts[f"p = {top} / p = {first}"] = at_most(error_ratio(results, top, first), TAYLOR_FALL)
    return every(parts)


def _positions_iff(results: Results) -> Outcome:
    parts = {"Λ = I": at_most(_score(results, "positions", "Λ = I"), NO_POSITION)}
    parts |= {name: reaches(_score(results, "positions", name), POSITION) for name in EVOLUTIONS if name != "Λ = I"}
    return every(parts)


def _variance_fits(results: Results) -> Outcome:
    deviations = tuple(abs(ratio - 1) for ratio in _values(results, "variance").values())
    label = "max |Var / b²K − 1|"
    return at_most(
        Score(label, (max(deviations),) if deviations else (), () if deviations else (f"{label}: none",), exact=True),
        VARIANCE_TOLERANCE,
    )


CLAIMS = (
    Claim(
        "Lemma 1: Taylor → softmax",
        f"taylor_attention's coefficients converge to softmax's as p grows: the largest coefficient error (mean over "
        f"the draws) does not rise from one even degree to the next (p = {', '.join(map(str, TAYLOR_EVEN))}: T_p > 0, "
        f"a convex combination) and at p = {TAYLOR_DEGREES[-1]} is ≤ {TAYLOR_FALL:g} × that at p = "
        f"{TAYLOR_DEGREES[0]} (n = 2, unit-variance q, k, L = 32)",
        "This insight gives further motivation to approximations of the softmax function by using, e.g., a Taylor "
        "series approximation [...] to render the feature vector finite-dimensional. Lemma 1. Softmax attention "
        "(2) can be expressed by separable attention (13) with φ(q_i)ᵀψ(k_j) = φ(q_i)ᵀφ(k_j) = e^{q_iᵀk_j}",
        _taylor_converges,
    ),
    Claim(
        "eq. 22: S6 transition = σ_rev^a",
        f"with A = −a·I, s6's DSF transition equals diag(σ_rev(W̄_Δ u_i)^a) ⊗ I_n to ≤ {IDENTITY_ROUNDOFF:g}",
        "the state transition matrix Λ_i in S6 (18) can be rewritten when assuming A = a·I_nd as "
        "Λ_i = diag(σ_rev(W_Δ u_i)^a) ⊗ I_n. (22)",
        lambda results: at_most(_score(results, "s6"), IDENTITY_ROUNDOFF),
    ),
    Claim(
        "Lemma 2: a larger state recovers",
        f"a mixer's DSF embedded in 5 more states (appendix H) gives the same outputs: relative error ≤ "
        f"{IDENTITY_ROUNDOFF:g} (linear attention, S6)",
        "Lemma 2. For two dynamical systems (11) with hidden state dimensions N and N̄ with N ≤ N̄, the dynamical "
        "system of state dimension N̄ can always recover the dynamical system with state dimension N.",
        _each_at_most("state", STATE_MIXERS, IDENTITY_ROUNDOFF),
    ),
    Claim(
        "Lemma 3: positions iff Λ ≠ I",
        f"a repeated token's coefficient rows spread by ≤ {NO_POSITION:g} with Λ = I and by ≥ {POSITION:g} with "
        f"Λ = λI, diagonal or Householder Λ (identity, exp with η = Σα, sigmoid readouts)",
        "Definition 1 (Positional Information). [α_ij] in (4) are said to have positional information, if for two "
        "identical inputs [u_j = u_k], the resulting coefficients are not identical [...]. Lemma 3. The "
        "coefficients in (4) have positional information if and only if [Λ_i ≠ I].",
        _positions_iff,
    ),
    Claim(
        "Lemma 5: Var(qᵀbk) = b²K",
        f"for q, k with unit-variance entries the Monte Carlo Var(qᵀ b k) is within {VARIANCE_TOLERANCE:.0%} of "
        f"b²K for K ∈ {{{', '.join(map(str, VARIANCE_WIDTHS))}}}, b ∈ {{0.5, 1, 2, K^-½}}",
        "Assuming [isotropic q and k], both [covariances] are positive semi-definite and the variance of the dot "
        "product scales as [b²K].",
        _variance_fits,
        paper_value="b² K",
    ),
    Claim(
        "Corollary 6.1: convex combinations",
        f"with η_i = Σ_j α_ij and a positive readout (exp, softplus, sigmoid, elu+1, x²) the coefficients are ≥ 0 "
        f"and sum to 1, and every output lies in its values' range, to ≤ {CONVEX_ROUNDOFF:g}",
        "Choosing [η_i = Σ_j α_ij] in (2) constrains the normalized coefficients to [[0, 1]] and imposes "
        "[Σ_j α_ij / η_i = 1].",
        _each_at_most("convex", POSITIVE_READOUTS, CONVEX_ROUNDOFF),
    ),
    Claim(
        "Proposition 1: DLR = linear RNN",
        f"the dlr mixer with Λ = eig(A), w = (CV) ⊙ (V⁻¹B) matches a random diagonalizable linear RNN (8 complex "
        f"states, L = 64): relative error ≤ {DLR_ROUNDOFF:g}",
        "Proposition 1. In Equation 7, let A ∈ ℂ^{N×N} be diagonalizable over ℂ as V diag(Λ) V⁻¹. Then, ∃ w ∈ ℂ^N "
        "such that DLR parameterized by Λ, w (Equation 1) computes the same map as Equation 7.",
        lambda results: at_most(_score(results, "dlr"), DLR_ROUNDOFF),
    ),
)

#: the table's rows: lemma → (what was computed, the threshold in words)
COMPUTED = {
    "taylor": (
        f"max |A^(p) − softmax| (mean over draws), p = {TAYLOR_DEGREES[-1]} and its ratio to p = {TAYLOR_DEGREES[0]}",
        f"falls over p = {', '.join(map(str, TAYLOR_EVEN))}; ratio ≤ {TAYLOR_FALL:g}",
    ),
    "s6": ("max |exp(Δ ⊗ A) − σ_rev(W̄_Δ u)^a ⊗ I|", f"≤ {IDENTITY_ROUNDOFF:g}"),
    "state": ("max |y − ȳ| / max |y|, N → N + 5 states", f"≤ {IDENTITY_ROUNDOFF:g}"),
    "positions": ("row spread of a repeated token's coefficients", f"Λ = I: ≤ {NO_POSITION:g}; else ≥ {POSITION:g}"),
    "variance": ("max |Var(qᵀbk) / b²K − 1| over K and b", f"≤ {VARIANCE_TOLERANCE:g}"),
    "convex": ("max violation: −min A, |Σ_j A_ij − 1|, y outside the values' range", f"≤ {CONVEX_ROUNDOFF:g}"),
    "dlr": ("max |y^DLR − Re y^RNN| / max |Re y^RNN|", f"≤ {DLR_ROUNDOFF:g}"),
}


def _ours(results: Results, lemma: str) -> str:
    values = _values(results, lemma)
    if not values:
        return "not computed"
    if lemma == "taylor":
        top, first = values[f"p = {TAYLOR_DEGREES[-1]}"], values[f"p = {TAYLOR_DEGREES[0]}"]
        return f"{top:.2e}; ratio {top / first:.2e}"
    if lemma == "variance":
        return f"{max(abs(ratio - 1) for ratio in values.values()):.2e}"
    return "; ".join(f"{setting}: {value:.2e}" for setting, value in values.items())


class LemmaChecks(Computation):
    name = "lemma_checks"
    paper = "Sieber et al. 2024 and 2025; Gupta et al. 2022"
    figure = "lemmas, eq. 22, Prop. 1"
    summary = (
        "The papers' mathematical statements checked numerically in float64 on seqdyn's operator and mixers, "
        "without training: each number is the worst over random draws (Lemma 1's Taylor errors: their mean)."
    )
    claims = CLAIMS
    reductions = {
        "paper": "No training: the statements are mathematics. 64 random draws per check (Taylor attention, S6 "
        "blocks, DSFs, repeated tokens, convex combinations, linear RNNs) and 4,000,000 Monte Carlo samples "
        "per (K, b) for Lemma 5.",
        "cpu": "No training: 8 random draws per check and 400,000 Monte Carlo samples per (K, b) for Lemma 5.",
        "smoke": "No training: one random draw per check and 50,000 Monte Carlo samples per (K, b) for Lemma 5.",
    }

    def compute(self, scale: str) -> list[dict[str, Any]]:
        return compute_rows(SCALES[scale])

    def table(self, results: Results) -> str:
        lines = ["| statement | what we computed | ours | threshold |", "|---|---|---|---|"]
        lines += [
            f"| {LEMMAS[lemma]} | {computed} | {_ours(results, lemma)} | {threshold} |"
            for lemma, (computed, threshold) in COMPUTED.items()
        ]
        return "\n".join(lines) + (
            "\n\nEvery number is the worst over the scale's random draws (Lemma 1's: the mean), in float64; "
            "`results.csv` has one row per setting."
        )

    def plot(self, results: Results, path: Path) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        taylor = [(row["check.x"], row["check.value"]) for row in results.rows if row["check.lemma"] == "taylor"]
        variance = [
            (row["check.x"], row["check.value"] * row["check.x"])
            for row in results.rows
            if row["check.lemma"] == "variance"
        ]
        figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
        left.semilogy(*zip(*taylor), color="lightgray", label="every p")
        left.semilogy(*zip(*[(p, error) for p, error in taylor if p % 2 == 0]), marker="o", label="even p")
        left.set(xlabel="Taylor degree p", ylabel="max |A^(p) − softmax|", title="Sieber et al. 2024, Lemma 1")
        left.legend()
        right.loglog(*zip(*variance), linestyle="none", marker="o", label="Monte Carlo")
        span = [min(x for x, _ in variance), max(x for x, _ in variance)]
        right.loglog(span, span, color="gray", linestyle="--", label="b²K")
        right.set(xlabel="b²K", ylabel="Var(qᵀ b k)", title="Sieber et al. 2025, Lemma 5")
        right.legend()
        figure.tight_layout()
        figure.savefig(path, dpi=120)
        plt.close(figure)
        return path


REPRODUCTION = LemmaChecks()
