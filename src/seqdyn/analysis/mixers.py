"""Metrics on readout maps and mixers, and numerical checks of the seeds' lemmas.

readout_near_zero_set(φ, eps, window)  measure of {x ∈ window : |φ(x)| < eps}      (001 Principle 2, Example 1)
has_positional_information(mixer)      identical tokens, different coefficients ⇔ Λ ≠ I      (001 Lemma 3)
spectral_radii / spectral_bound        largest |eigenvalue| of Λ_t                             (001 Principle 6)
dot_product_variance(K, scale)         Var(q ᵀ b k) for q, k ~ N(0, I_K)                       (001 Lemma 5)
taylor_softmax_error(q, k, p)          error of the degree-p finite DSF of softmax             (000 Lemma 1)
larger_state_recovers / lemma2_demo    a larger state recovers a smaller system exactly        (000 Lemma 2)
"""

from __future__ import annotations

import copy
import math
import numbers
from typing import Any, Callable, Union

import torch
from torch import Tensor

from seqdyn.analysis.coefficients import NEAR_ZERO_EPS
from seqdyn.core.dsf import DSF
from seqdyn.core.evolution import evolution_matrix
from seqdyn.core.problem import prepare
from seqdyn.core.products import transition_steps
from seqdyn.core.readouts import READOUTS, resolve_readout

__all__ = [
    "dot_product_variance",
    "dsf_radii",
    "evolution_radii",
    "expand_state",
    "has_positional_information",
    "positional_heads",
    "is_lti",
    "larger_state_recovers",
    "lemma2_demo",
    "readout_near_zero_set",
    "spectral_bound",
    "spectral_radii",
    "taylor_softmax_error",
]

ReadoutLike = Union[str, Callable[[Tensor], Tensor]]

#: Window of scores ``x = q ᵀ x^(j)`` over which near-zero sets are measured by default.
DEFAULT_WINDOW = (-10.0, 10.0)


# --- readout maps (Sieber et al. 2025 Principle 2, Example 1) ---------------------------------------------------------


def _near_zero_intervals(name: str, eps: float) -> list[tuple[float, float]]:
    """The open set ``{x : |φ(x)| < eps}`` of a named readout as intervals (every named φ is monotone or even)."""
    inf = math.inf
    if name == "identity":
        return [(-eps, eps)]
    if name == "square":
        return [(-math.sqrt(eps), math.sqrt(eps))]
    if name == "exp":  # e^x < eps
        return [(-inf, math.log(eps))]
    if name == "relu":  # max(x, 0) < eps
        return [(-inf, eps)]
    if name == "softplus":  # log(1 + e^x) < eps
        return [(-inf, math.log(math.expm1(eps)))] if eps < 700 else [(-inf, eps)]
    if name == "sigmoid":  # 1 / (1 + e^-x) < eps
        return [(-inf, inf)] if eps >= 1 else [(-inf, math.log(eps) - math.log1p(-eps))]
    if name == "elu1":  # elu(x) + 1 < eps: e^x < eps (x < 0), x + 1 < eps (x ≥ 0)
        return [(-inf, math.log(eps) if eps <= 1 else eps - 1)]
    raise ValueError(f"readout: no closed form for {name!r}")


def readout_near_zero_set(
    readout: ReadoutLike,
    eps: float = NEAR_ZERO_EPS,
    window: tuple[float, float] = DEFAULT_WINDOW,
    points: int = 1_000_000,
) -> float:
    """Lebesgue measure of the near-zero set ``{x ∈ window : |φ(x)| < eps}``
    (Sieber et al. 2025 Principle 2, Example 1).

    ``readout`` is a name of ``seqdyn.READOUTS`` — measured exactly from the closed-form set — or a callable
    on scores, measured on a midpoint grid of ``points`` cells over ``window`` (error ≤ cell width per boundary
    of the set).  The window is finite, ``lo < hi``.  For ``exp``, ``relu``, ``softplus`` and ``sigmoid`` the set is
    a half-line ``(−∞, c)``, so the measure grows without bound as ``lo → −∞``; for ``identity`` it is
    ``2·eps`` (O(eps)), the thin zero set of Principle 2.1.
    """
    name = resolve_readout(readout).name  # unknown names: ValueError listing the allowed ones
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < math.inf:
        raise ValueError(f"eps: expected a positive finite number, got {eps!r}")
    eps = float(eps)
    try:
        lo, hi = (float(w) for w in window)
    except (TypeError, ValueError):
        raise ValueError(f"window: expected a pair (lo, hi) of numbers, got {window!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"window: expected finite lo < hi, got {window!r}")
    if name in READOUTS:
        return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in _near_zero_intervals(name, eps))
    if isinstance(points, bool) or not isinstance(points, int) or points < 1:
        raise ValueError(f"points: expected a positive integer, got {points!r}")
    width = (hi - lo) / points
    grid = lo + width * (torch.arange(points, dtype=torch.float64) + 0.5)
    values = readout(grid)
    if not isinstance(values, Tensor) or values.shape != grid.shape:
        raise ValueError(
            f"readout: the callable must map a float64 tensor [n] of scores to a tensor [n], got "
            f"{type(values).__name__ if not isinstance(values, Tensor) else list(values.shape)}"
        )
    return float((values.abs() < eps).sum()) * width


# --- positional information (Sieber et al. 2025 Lemma 3) --------------------------------------------------------------


def _warmup(mixer: torch.nn.Module) -> int:
    """Positions a short convolution inside ``mixer`` needs before a repeated token looks the same (w − 1)."""
    from seqdyn.layers.conv import ShortConv

    return max((module.width - 1 for module in mixer.modules() if isinstance(module, ShortConv)), default=0)


def _probe_input(mixer: torch.nn.Module, length: int, seed: int, batch: int = 2) -> Tensor:
    """``batch`` random tokens, each repeated ``length`` times: ``x[b, t] = u_b`` ``[batch, length, D]``."""
    parameter = next(mixer.parameters(), None)
    dtype = parameter.dtype if parameter is not None and parameter.is_floating_point() else torch.float64
    device = parameter.device if parameter is not None else torch.device("cpu")
    tokens = torch.randn(batch, 1, mixer.d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return tokens.expand(batch, length, mixer.d_model).to(device=device, dtype=dtype)


def _check_mixer(mixer: Any) -> None:
    if not isinstance(mixer, torch.nn.Module) or not all(hasattr(mixer, a) for a in ("d_model", "dsf", "check_input")):
        raise ValueError(f"mixer: expected a seqdyn mixer (seqdyn.mixers.build), got {type(mixer).__name__}")


def _has_scalar_coefficients(mixer: Any) -> bool:
    return bool(getattr(mixer, "scalar_coefficients", True))


def has_positional_information(
    mixer: torch.nn.Module, length: int = 16, seed: int = 0, rtol: float = 1e-6, method: str = "auto"
) -> bool:
    """Whether identical inputs at different positions get different coefficients in any head (Sieber et al. 2025
    Definition 1, Lemma 3): :func:`positional_heads`, any of them."""
    return bool(positional_heads(mixer, length, seed, rtol, method).any())


def positional_heads(
    mixer: torch.nn.Module, length: int = 16, seed: int = 0, rtol: float = 1e-6, method: str = "auto"
) -> Tensor:
    """Per head ``[H]`` (one entry for a system without heads): whether identical inputs at different positions get
    different coefficients (Sieber et al. 2025 Definition 1, Lemma 3).

    Lemma 3: this holds iff the evolution matrices are not the identity, Λ ≠ I.  The probe feeds a repeated
    token, ``x_t = u`` for every t (random u, float64 copy of ``mixer``): then every key, scale and gate is the
    same at every position, so with Λ = I the causal entries of each row ``A[i, :i+1]`` are all equal
    (position-free), while Λ ≠ I makes ``A_ij`` depend on the distance ``i − j``.  The first ``w − 1`` positions
    after the start are skipped when the mixer has a short convolution of width w (its zero padding makes the
    first keys differ — Sieber et al. 2025 Remark 3 — but a repeated token is the signal it cannot tell apart).

    ``method``: ``"coefficients"`` compares the entries of each row as above (needs scalar coefficients,
    ``ValueError`` otherwise); ``"dsf"`` checks whether any DSF transition Λ_t differs from I (note that a
    normalizer enters Λ_t^DSF as η_{t−1}/η_t, Sieber et al. 2024 eq. 15); ``"auto"`` uses coefficients when the mixer
    has them and the DSF otherwise (MIMO LTI mixers such as ``s5``, ``lru``; a nonlinear readout's DSF keeps every
    value with Λ = I, so only the coefficients see its decay).  Differences count above
    ``rtol`` relative to the row's (or Λ's) largest entry.
    """
    if method not in ("auto", "coefficients", "dsf"):
        raise ValueError(f"method: got {method!r}; allowed: ['auto', 'coefficients', 'dsf']")
    _check_mixer(mixer)
    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise ValueError(f"length: expected an integer ≥ 2, got {length!r}")
    no_coefficients = ValueError(
        f"mixer: {getattr(mixer, 'name', type(mixer).__name__)} has no scalar "
        "coefficients per head (a MIMO system); use method='dsf' or 'auto'"
    )
    if method == "coefficients" and not _has_scalar_coefficients(mixer):
        raise no_coefficients
    probe = copy.deepcopy(mixer).double().eval()
    warmup = _warmup(probe)
    x = _probe_input(probe, warmup + length, seed)
    A = None
    with torch.no_grad():
        if method != "dsf" and _has_scalar_coefficients(mixer):
            try:
                A = probe.coefficients(x)[:, :, warmup:, warmup:]  # rows and columns after the warm-up
            except NotImplementedError:
                if method == "coefficients":
                    raise no_coefficients from None
        if A is None:
            return _transitions_differ_from_identity(probe.dsf(x).Lambda, warmup, rtol)
    return _rows_vary(A, rtol)


def _transitions_differ_from_identity(transitions: Tensor, warmup: int, rtol: float) -> Tensor:
    """``[1]``: whether any DSF transition Λ_t after the first ``warmup`` positions differs from I by more than
    ``rtol`` times max(1, largest |entry| of all the transitions)."""
    eye = torch.eye(transitions.shape[-1], dtype=transitions.dtype, device=transitions.device)
    scale = max(1.0, float(transitions.abs().max()))
    return torch.tensor([float((transitions[:, :, warmup:] - eye).abs().max()) > rtol * scale])


def _rows_vary(A: Tensor, rtol: float) -> Tensor:
    """Per head ``[H]``: whether the causal entries ``A[i, :i+1]`` of some row of some sequence differ (max − min)
    by more than ``rtol`` times the row's largest |entry|."""
    causal = torch.ones(A.shape[-1], A.shape[-1], dtype=torch.bool, device=A.device).tril()
    high = A.masked_fill(~causal, -math.inf).amax(dim=-1)
    low = A.masked_fill(~causal, math.inf).amin(dim=-1)
    scale = A.abs().amax(dim=-1)
    return ((high - low) > rtol * scale).any(dim=-1).any(dim=0).cpu()  # [B, H, T] → [H]


# --- spectra of the evolution matrices (Sieber et al. 2025 Principle 6) -----------------------------------------------


def evolution_radii(mixer: Any, x: Tensor) -> Tensor:
    """Largest |eigenvalue| of the coefficient dynamics' Λ_t per head, max over batch and time: ``[H]``; with
    several Householder factors per step (:mod:`seqdyn.core.products`), of each token's product of them."""
    from seqdyn.mixers.base import MixerState

    inputs, _ = mixer.core_inputs(x, MixerState())
    problem = prepare(transition_steps(inputs))
    batch, heads, length, key_dim, _ = problem.shape
    per_token = length // inputs.q.shape[1]  # the sub-steps of each token
    if problem.beta is None:  # Λ_t = exp(g_t)·I or diag(exp(g_t)): the eigenvalues are the decays
        if problem.log_decay is None:
            return problem.q.new_ones(heads)
        log_decay = problem.log_decay if not problem.diagonal else problem.log_decay.amax(dim=-1)
        return torch.exp(log_decay.amax(dim=(0, 2)))
    radii = []
    for token in range(0, length, per_token):  # Householder factors: eigenvalues of the K × K products
        matrices = None
        for t in range(token, token + per_token):
            step = tuple(None if p is None else p[:, :, t] for p in problem.transition)
            factor = evolution_matrix(step, problem.diagonal, key_dim, problem.q)
            matrices = factor if matrices is None else factor @ matrices
        radii.append(torch.linalg.eigvals(matrices).abs().amax(dim=-1))  # [B, H]
    return torch.stack(radii, dim=2).amax(dim=(0, 2)).to(problem.q.dtype)


def dsf_radii(system: DSF) -> Tensor:
    """Largest |eigenvalue| of the DSF transitions per head, max over batch and time: ``[H]``."""
    transitions = system.Lambda
    first = transitions[:1, :, :1]
    if torch.equal(transitions, first.expand_as(transitions)):  # time-invariant (LTI): one matrix per head
        transitions = first
    return torch.linalg.eigvals(transitions).abs().amax(dim=-1).amax(dim=(0, 2)).to(transitions.dtype)


def is_lti(mixer: Any) -> bool:
    """Whether ``mixer`` is a linear time-invariant mixer (its DSF does not depend on the input)."""
    from seqdyn.mixers import LTIMixer

    return isinstance(mixer, LTIMixer)


def spectral_radii(mixer: torch.nn.Module, x: Tensor, source: str = "auto") -> Tensor:
    """Largest ``|eigenvalue|`` of the evolution matrices Λ_t per head, over batch and time: ``[H]``.

    Sieber et al. 2025, Principle 6: with a radius above 1 (unstable Λ) the normalization η must counteract the growth.
    ``source``: ``"evolution"`` — the Λ_t of the coefficient dynamics (Sieber et al. 2025 eq. 3b; exact closed form for
    scalar and diagonal decays, eigenvalues of the K × K matrices with a Householder factor) for mixers built on
    ``seqdyn.coefficient_dynamics``; ``"dsf"`` — the transitions of ``mixer.dsf(x)``, which include the
    normalizer ratio η_{i−1}/η_i (Sieber et al. 2024 eq. 15; N × N with N = K·V, small sizes only); ``"auto"`` —
    ``"evolution"`` where available, else the DSF (LTI mixers, whose Λ is the same at every step).
    ``x`` is the mixer's input ``[B, T, D]``.
    """
    from seqdyn.mixers.base import CoefficientMixer

    if source not in ("auto", "evolution", "dsf"):
        raise ValueError(f"source: got {source!r}; allowed: ['auto', 'evolution', 'dsf']")
    _check_mixer(mixer)
    mixer.check_input(x)
    coefficient_form = isinstance(mixer, CoefficientMixer)
    if source == "evolution" and not coefficient_form:
        raise ValueError(f"source: {mixer.name} is not built on coefficient_dynamics; use source='dsf' or 'auto'")
    with torch.no_grad():
        if coefficient_form and source != "dsf":
            return evolution_radii(mixer, x)
        # an LTI system's DSF does not depend on the input: one step of one sequence suffices
        return dsf_radii(mixer.dsf(x[:1, :1] if is_lti(mixer) else x))


def spectral_bound(mixer: torch.nn.Module, x: Tensor, source: str = "auto") -> float:
    """``max_t max |eig(Λ_t)|`` over batch, heads and time (Sieber et al. 2025 Principle 6); see :func:`spectral_radii`.

    1 for Λ = I (attention), below 1 for stable decays (Mamba-2, GLA, RetNet), above 1 for unstable Λ.
    """
    return float(spectral_radii(mixer, x, source).max())


# --- scaling (Sieber et al. 2025 Lemma 5, Principle 5) ----------------------------------------------------------------


def dot_product_variance(K: int, scale: float | str = 1.0, samples: int = 100_000, seed: int = 0) -> float:
    """Empirical variance of ``scale · qᵀk`` for independent ``q, k ~ N(0, I_K)`` (Sieber et al. 2025 Lemma 5).

    ``scale`` is the key scaling b of eq. 4: a number, or ``"inv_sqrt"`` for ``K^-½`` (Principle 5).  The exact
    variance is ``scale² · K``: it grows linearly in K for ``scale = 1`` and stays 1 for ``K^-½``.  Float64,
    ``samples`` draws (unbiased estimator), deterministic given ``seed``.
    """
    if isinstance(K, bool) or not isinstance(K, int) or K < 1:
        raise ValueError(f"K: expected a positive integer, got {K!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
        raise ValueError(f"samples: expected an integer ≥ 2, got {samples!r}")
    if scale == "inv_sqrt":
        factor = K**-0.5
    elif isinstance(scale, numbers.Real) and not isinstance(scale, bool) and math.isfinite(scale):
        factor = float(scale)
    else:
        raise ValueError(f"scale: expected a finite number or 'inv_sqrt' (K**-0.5), got {scale!r}")
    generator = torch.Generator().manual_seed(seed)
    block = max(1, (1 << 22) // K)  # draws per block: bounded memory for large K
    products = []
    for start in range(0, samples, block):
        count = min(block, samples - start)
        q = torch.randn(count, K, generator=generator, dtype=torch.float64)
        k = torch.randn(count, K, generator=generator, dtype=torch.float64)
        products.append(factor * (q * k).sum(dim=-1))
    return float(torch.cat(products).var())


# --- finite DSF of softmax (Sieber et al. 2024 Lemma 1) ---------------------------------------------------------------


def taylor_softmax_error(q: Tensor, k: Tensor, degree: int) -> float:
    """``max_ij |exp(q_iᵀk_j) − φ_p(q_i)ᵀφ_p(k_j)| / exp(q_iᵀk_j)`` (Sieber et al. 2024 Lemma 1, appendix C).

    ``φ_p = seqdyn.features.taylor(·, p)``, so ``φ_p(q)ᵀφ_p(k) = Σ_{d≤p} (qᵀk)^d / d!``: the finite DSF of
    degree p whose error vanishes as p grows.  ``q`` ``[N, K]``, ``k`` ``[M, K]`` (raw scores, no ``K^-½``); computed
    in float64.  The features have ``Σ_{d≤p} K^d`` entries: small K and p only.
    """
    from seqdyn.features import taylor

    for name, x in (("q", q), ("k", k)):
        if not isinstance(x, Tensor) or not x.is_floating_point():
            raise ValueError(
                f"{name}: expected a floating-point tensor [N, K], got "
                f"{x.dtype if isinstance(x, Tensor) else type(x).__name__}"
            )
        if x.dim() != 2 or x.shape[0] < 1 or x.shape[1] < 1:
            raise ValueError(f"{name}: expected a non-empty [N, K] tensor, got shape {list(x.shape)}")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"k: key dimension {k.shape[1]} does not match q's {q.shape[1]} ([N, K] and [M, K])")
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 0:
        raise ValueError(f"degree: expected a non-negative integer, got {degree!r}")
    q, k = q.detach().to(torch.float64), k.detach().to(torch.float64)
    exact = torch.exp(q @ k.T)
    approx = taylor(q, degree) @ taylor(k, degree).T
    return float(((exact - approx).abs() / exact).max())


# --- state expansion (Sieber et al. 2024 Lemma 2, appendix H) ---------------------------------------------------------


def expand_state(system: DSF, extra_states: int, seed: int = 0) -> DSF:
    """The larger system of Sieber et al. 2024 appendix H that reproduces ``system`` with ``extra_states`` more states::

        Λ̄_i = [[Λ_i, 0], [Λ₂₁, Λ₂₂]],   B̄_i = [[B_i], [B₂]],   C̄_i = [C_i, 0],   D̄_i = D_i

    The first N states evolve exactly as ``system``'s; the extra ones (random Λ₂₁, Λ₂₂ with spectral radius
    below 1, random B₂) never reach the output.
    """
    if not isinstance(system, DSF):
        raise ValueError(f"system: expected a seqdyn.DSF, got {type(system).__name__}")
    if isinstance(extra_states, bool) or not isinstance(extra_states, int) or extra_states < 0:
        raise ValueError(f"extra_states: expected a non-negative integer, got {extra_states!r}")
    batch, heads, length, state_dim, value_dim = system.B.shape
    generator = torch.Generator().manual_seed(seed)
    like = dict(dtype=system.B.dtype, device=system.B.device)

    def draw(*shape: int, std: float) -> Tensor:
        return (std * torch.randn(*shape, generator=generator, dtype=torch.float64)).to(**like)

    size = state_dim + extra_states
    lam = torch.zeros(batch, heads, length, size, size, **like)
    lam[..., :state_dim, :state_dim] = system.Lambda
    lam[..., state_dim:, :state_dim] = draw(batch, heads, length, extra_states, state_dim, std=state_dim**-0.5)
    lam[..., state_dim:, state_dim:] = draw(
        batch, heads, length, extra_states, extra_states, std=0.5 * max(extra_states, 1) ** -0.5
    )
    inputs = torch.cat([system.B, draw(batch, heads, length, extra_states, value_dim, std=1.0)], dim=-2)
    outputs = torch.cat([system.C, torch.zeros(batch, heads, length, value_dim, extra_states, **like)], dim=-1)
    return DSF(Lambda=lam, B=inputs, C=outputs, D=system.D.clone())


def larger_state_recovers(system: DSF, extra_states: int, u: Tensor | None = None, seed: int = 0) -> float:
    """``max |y − ȳ|`` between ``system`` and its :func:`expand_state` on inputs ``u`` (Sieber et al. 2024 Lemma 2).

    Both systems are run step by step (``DSF.simulate``); ``u`` ``[B, T, H, V]`` defaults to standard normal
    inputs drawn from ``seed``.  Lemma 2 says the error is zero: the state of dimension N̄ ≥ N recovers the
    system of dimension N.
    """
    larger = expand_state(system, extra_states, seed)
    if u is not None and (
        not isinstance(u, Tensor)
        or tuple(u.shape) != (system.B.shape[0], system.B.shape[2], system.B.shape[1], system.B.shape[-1])
    ):
        batch, heads, length, _, value_dim = system.B.shape
        raise ValueError(
            f"u: expected inputs [B, T, H, V] = {[batch, length, heads, value_dim]}, got "
            f"{list(u.shape) if isinstance(u, Tensor) else type(u).__name__}"
        )
    if u is None:
        batch, heads, length, _, value_dim = system.B.shape
        u = torch.randn(
            batch, length, heads, value_dim, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64
        ).to(system.B)
    with torch.no_grad():
        return float((system.simulate(u) - larger.simulate(u)).abs().max())


def lemma2_demo(
    state_dim: int = 4,
    extra_states: int = 4,
    value_dim: int = 2,
    length: int = 16,
    batch: int = 2,
    heads: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> float:
    """Sieber et al. 2024, Lemma 2, on a random time-varying system: the output error of :func:`larger_state_recovers`.

    The small system has random ``Λ_i`` (spectral radius about ½), ``B_i``, ``C_i``, ``D_i`` of ``state_dim``
    states; the larger one ``state_dim + extra_states``.  Returns ``max |y − ȳ|``, zero up to round-off.
    """
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape: int, std: float = 1.0) -> Tensor:
        return (std * torch.randn(*shape, generator=generator, dtype=torch.float64)).to(dtype)

    system = DSF(
        Lambda=draw(batch, heads, length, state_dim, state_dim, std=0.5 * state_dim**-0.5),
        B=draw(batch, heads, length, state_dim, value_dim),
        C=draw(batch, heads, length, value_dim, state_dim),
        D=draw(batch, heads, length, value_dim, value_dim),
    )
    return larger_state_recovers(system, extra_states, seed=seed + 1)
