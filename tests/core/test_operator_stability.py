"""Unstable (g > 0) and strong decays over long sequences in float32; NaN/Inf inputs propagate."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import seqdyn

T = 4096
FLOAT32_MAX = torch.finfo(torch.float32).max


def relative_to_magnitude(got: torch.Tensor, exact: torch.Tensor, magnitude: torch.Tensor) -> torch.Tensor:
    """Each entry's error relative to its own magnitude: for an output the sum of the absolute values of the terms
    that make it up (``output_magnitude``), the scale against which floating point bounds the error of a sum
    (Higham, *Accuracy and Stability of Numerical Algorithms*, Eq. 3.5); for a gradient the largest entry of its
    sequence and head (``sequence_scale``). Unlike one global scale (the largest entry anywhere) it compares every
    entry, also in rows far smaller than the largest; unlike ``|exact|`` it does not demand digits that cancellation
    removed. An entry of magnitude 0 must be exact."""
    error = (got.double() - exact).abs()
    return torch.where(magnitude > 0, error / magnitude, torch.where(error > 0, math.inf, 0.0))


def output_magnitude(q, k, v, **options) -> torch.Tensor:
    """``Σ_s |α_ts|·|v_s|`` ``[B, T, H, V]`` in float64, from the coefficient matrix ``[B, H, T, T]``; for the
    identity readout with a diagonal or scalar decay, ``α_ts = Σ_i q_ti·γ_tsi·k_si`` is itself a sum, so its terms
    count with their absolute values (the coefficients of ``|q|``, ``|k|``); a positive readout's α is one term."""
    if options.get("readout", "identity") == "identity" and "householder" not in options:
        q, k = q.abs(), k.abs()
    coefficients = seqdyn.coefficients(q.double(), k.double(), **options)
    return torch.einsum("bhts,bshv->bthv", coefficients.abs(), v.double().abs())


def sequence_scale(gradient: torch.Tensor) -> torch.Tensor:
    """The largest entry of a gradient ``[B, T, H, …]`` within each sequence and head ``[B, 1, H, 1…]``: a gradient
    entry sums terms over the whole sequence (through the normalizer and the decays), which are not at hand."""
    dims = (1, *range(3, gradient.dim()))
    return gradient.abs().amax(dim=dims, keepdim=True).expand_as(gradient)


def _inputs(kind: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    q, k, v = F.softplus(rand(1, T, 2, 8)), F.softplus(rand(1, T, 2, 8)), rand(1, T, 2, 4)
    g = {
        "growing_scalar": 0.05 * torch.ones(1, T, 2),
        "growing_diagonal": 0.05 * torch.rand(1, T, 2, 8, generator=gen),
        "strong_scalar": -30 * torch.rand(1, T, 2, generator=gen),
        "strong_diagonal": -30 * torch.rand(1, T, 2, 8, generator=gen),
        "mixed_diagonal": 3 * rand(1, T, 2, 8),
    }[kind]
    return q, k, v, g


CASES = [
    (kind, normalizer)
    for kind in ("growing_scalar", "growing_diagonal", "mixed_diagonal")
    for normalizer in ("sum", "abs_max1", "none")
]
CASES += [(kind, normalizer) for kind in ("strong_scalar", "strong_diagonal") for normalizer in ("none", "sum")]


@pytest.mark.parametrize("kind,normalizer", CASES)
@pytest.mark.parametrize("backend", ["chunk", "recurrent", "scan", "auto"])
def test_no_overflow_where_the_exact_result_is_finite(kind, normalizer, backend):
    q, k, v, g = _inputs(kind)
    exact = seqdyn.coefficient_dynamics(
        q.double(), k.double(), v.double(), log_decay=g.double(), normalizer=normalizer, backend="chunk"
    )
    representable = exact.abs() < FLOAT32_MAX / 2
    assert representable.float().mean() > 0.05  # the case is not vacuous
    out = seqdyn.coefficient_dynamics(q, k, v, log_decay=g, normalizer=normalizer, backend=backend)
    assert torch.isfinite(out[representable]).all()
    # every entry against the scale of its own row y_t (its largest representable entry): outputs grow by ~1e38
    # along the sequence, so one scale for the whole output would leave the entries of all but the last rows
    # uncompared
    row_scale = torch.where(representable, exact.abs(), 0.0).amax(dim=-1, keepdim=True).expand_as(exact)
    error = (out.double() - exact).abs()[representable] / row_scale[representable]
    assert error.max() < 1e-3


def test_float64_chunk_reference_agrees_with_quadratic_on_a_long_growing_sequence():
    q, k, v, g = (x.double() for x in _inputs("growing_scalar"))
    n = 1024
    a = seqdyn.coefficient_dynamics(q[:, :n], k[:, :n], v[:, :n], log_decay=g[:, :n], normalizer="sum", backend="chunk")
    b = seqdyn.coefficient_dynamics(
        q[:, :n], k[:, :n], v[:, :n], log_decay=g[:, :n], normalizer="sum", backend="quadratic"
    )
    assert (
        relative_to_magnitude(
            a, b, output_magnitude(q[:, :n], k[:, :n], v[:, :n], log_decay=g[:, :n], normalizer="sum")
        ).max()
        < 1e-9
    )


@pytest.mark.parametrize("backend", ["quadratic", "recurrent", "chunk", "scan"])
@pytest.mark.parametrize("where", ["q", "v", "log_decay"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_inf_inputs_propagate_without_crashing(backend, where, value):
    gen = torch.Generator().manual_seed(1)
    tensors = {
        "q": torch.randn(1, 40, 2, 4, generator=gen),
        "k": torch.randn(1, 40, 2, 4, generator=gen),
        "v": torch.randn(1, 40, 2, 3, generator=gen),
        "log_decay": -torch.rand(1, 40, 2, 4, generator=gen),
    }
    tensors[where][0, 17, 1, 0] = value
    q, k, v, g = tensors["q"], tensors["k"], tensors["v"], tensors["log_decay"]
    out = seqdyn.coefficient_dynamics(q, k, v, log_decay=g, backend=backend, normalizer="sum")
    if not (where == "v" and backend in ("quadratic", "chunk")):
        # causality; the matrix products of the materializing backends multiply the zero coefficients above the
        # diagonal by the bad value, and 0·∞ = 0·NaN = NaN, as in any attention kernel
        assert torch.isfinite(out[:, :17]).all()
    if not (where == "log_decay" and value == float("-inf")):  # -inf decay is a valid hard reset
        assert not torch.isfinite(out[:, 17:, 1]).all()


@pytest.mark.parametrize("strength", [1 / 16, 3.0, 30.0])
@pytest.mark.parametrize("kind", ["diagonal", "scalar"])
def test_float32_chunk_is_as_accurate_as_float32_allows(strength, kind):
    """GLA-type (chunks halved) and Mamba-2-type decays, mild to strong, and a strong step among weak ones:
    float32 chunk within 1e-5 of the float64 result."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 300, 2, 16, generator=gen) for _ in range(3))
    g = F.logsigmoid(torch.randn(2, 300, 2, *((16,) if kind == "diagonal" else ()), generator=gen)) * strength
    g[:, 70] = -1000.0  # a hard reset inside a chunk: the short segments after it keep their digits
    exact = seqdyn.coefficient_dynamics(q.double(), k.double(), v.double(), log_decay=g.double(), backend="quadratic")
    out = seqdyn.coefficient_dynamics(q, k, v, log_decay=g, backend="chunk")
    magnitude = output_magnitude(q, k, v, log_decay=g.double())
    assert relative_to_magnitude(out, exact, magnitude).max() < 1e-5


@pytest.mark.parametrize("strength", [1 / 16, 1.0, 30.0])
def test_safe_chunk_size_keeps_every_chunk_range_inside_the_float_range(strength):
    from seqdyn.core.backends.chunk import safe_chunk_size

    gen = torch.Generator().manual_seed(2)
    g = -strength * torch.rand(1, 2, 700, 4, generator=gen)
    size = safe_chunk_size(g, 64)
    limit = 0.75 * math.log(FLOAT32_MAX)
    padded = F.pad(g, (0, 0, 0, -g.shape[2] % size))
    chunk_ranges = -padded.reshape(1, 2, -1, size, 4).sum(3)
    assert chunk_ranges.max() < limit
    assert (
        size == 64
        or (-F.pad(g, (0, 0, 0, -g.shape[2] % (2 * size))).reshape(1, 2, -1, 2 * size, 4).sum(3)).max() >= limit
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_decay_factors_that_would_be_subnormal_products_are_zero(dtype):
    """``decay_factor`` is ``exp`` down to ``e^{-20}·tiny``, 0 below (no subnormal operands for the products), and
    NaN stays NaN."""
    from seqdyn.core.evolution import decay_factor

    cutoff = math.log(torch.finfo(dtype).tiny) + 20.0
    x = torch.tensor([0.0, -1.0, cutoff + 0.5, cutoff - 0.5, cutoff - 30.0, float("-inf"), float("nan")], dtype=dtype)
    got = decay_factor(x)
    assert torch.equal(got[:3], torch.exp(x[:3]))
    assert torch.equal(got[3:6], torch.zeros(3, dtype=dtype))
    assert torch.isnan(got[6])
    strong = -torch.rand(1, 300, 2, generator=torch.Generator().manual_seed(0)) * 40
    q, k, v = (torch.randn(1, 300, 2, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    out = seqdyn.coefficient_dynamics(q, k, v, log_decay=strong, backend="chunk")
    exact = seqdyn.coefficient_dynamics(
        q.double(), k.double(), v.double(), log_decay=strong.double(), backend="quadratic"
    )
    magnitude = output_magnitude(q, k, v, log_decay=strong.double())
    assert relative_to_magnitude(out, exact, magnitude).max() < 1e-6


@pytest.mark.parametrize("backend", ["quadratic", "recurrent"])
@pytest.mark.parametrize("dtype,offset", [(torch.float32, 200.0), (torch.float64, 1000.0)])
@pytest.mark.parametrize("readout", ["softplus", "sigmoid", "elu1"])
def test_positive_readouts_keep_their_ratios_where_they_underflow(readout, dtype, offset, backend):
    """Scores around −offset, where φ(s) underflows to 0 and equals ``e^s`` to the dtype's precision: ``"sum"`` rows
    are the softmax of the scores, outputs and gradients (no 0/0)."""
    gen = torch.Generator().manual_seed(3)
    rand = lambda *s: torch.rand(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    q = (1 + 0.2 * rand(2, 12, 2, 4)).to(dtype).requires_grad_()
    k = (-offset / 4 * (1 + 0.2 * rand(2, 12, 2, 4))).to(dtype).requires_grad_()
    v = torch.randn(2, 12, 2, 3, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
    weights = torch.randn(2, 12, 2, 3, generator=gen, dtype=torch.float64)
    results = {}
    for name, operands in (("readout", (q, k, v)), ("softmax", tuple(x.double() for x in (q, k, v)))):
        y = seqdyn.coefficient_dynamics(
            *operands, readout="exp" if name == "softmax" else readout, scale=1.0, normalizer="sum", backend=backend
        )
        results[name] = (y, *torch.autograd.grad((y * weights.to(y.dtype)).sum(), (q, k, v)))
    softmax = dict(readout="exp", scale=1.0, normalizer="sum")
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    exact_grads = results["softmax"][1:]
    magnitudes = [output_magnitude(q, k, v, **softmax), *map(sequence_scale, exact_grads)]
    for i, (got, exact, magnitude) in enumerate(zip(results["readout"], results["softmax"], magnitudes)):
        assert relative_to_magnitude(got, exact, magnitude).max() <= tol, f"part {i}"


@pytest.mark.parametrize("direction", ["keys", "given"])
@pytest.mark.parametrize("strength", [-200.0, -1000.0, float("-inf")])
def test_float32_chunk_with_diagonal_decay_and_householder_factor_survives_strong_steps(strength, direction):
    """A step of ``g ≤ −200`` (beyond float32's range of one factorized chunk, so the chunks are one step) or a hard
    reset: float32 outputs and gradients finite and within float32's accuracy of the float64 result."""
    gen = torch.Generator().manual_seed(4)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    q, k, v = rand(2, 24, 2, 4), F.normalize(rand(2, 24, 2, 4), dim=-1), rand(2, 24, 2, 3)
    g = -torch.rand(2, 24, 2, 4, generator=gen, dtype=torch.float64)
    g[:, 9] = strength
    beta = torch.rand(2, 24, 2, generator=gen, dtype=torch.float64)
    given = {"householder_dir": F.normalize(rand(2, 24, 2, 4), dim=-1)} if direction == "given" else {}
    weights = rand(2, 24, 2, 3)
    results = {}
    for dtype in (torch.float32, torch.float64):
        leaves = [x.to(dtype).requires_grad_() for x in (q, k, v, g, beta)]
        y = seqdyn.coefficient_dynamics(
            *leaves[:3],
            log_decay=leaves[3],
            householder=leaves[4],
            backend="chunk",
            chunk_size=8,
            **{n: x.to(dtype) for n, x in given.items()},
        )
        results[dtype] = (y, *torch.autograd.grad((y * weights.to(dtype)).sum(), leaves))
    options = dict(householder_dir=given["householder_dir"]) if given else {}
    magnitudes = [
        output_magnitude(q, k, v, log_decay=g, householder=beta, **options),
        *map(sequence_scale, results[torch.float64][1:]),
    ]
    for i, (got, exact, magnitude) in enumerate(zip(results[torch.float32], results[torch.float64], magnitudes)):
        assert torch.isfinite(got).all(), f"part {i}"
        assert relative_to_magnitude(got, exact, magnitude).max() <= 1e-4, f"part {i}"


@pytest.mark.parametrize("backend", ["quadratic", "recurrent", "chunk"])
def test_a_nonlinear_readout_of_scores_that_outgrow_the_float_range_says_why(backend):
    """Unstable decays (g > 0) grow the scores as e^{Σg}: the identity readout rescales its state, exp cannot — one
    line naming log_decay instead of NaN outputs; decays the float range holds compute as before."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 60, 1, 2, generator=gen) for _ in range(3))
    g = torch.full((1, 60, 1), 3.0)
    with pytest.raises(ValueError, match=r"log_decay: decays above 1 \(g up to 3 > 0\) make the scores of the exp"):
        seqdyn.coefficient_dynamics(q, k, v, log_decay=g, readout="exp", normalizer="sum", backend=backend)
    small = seqdyn.coefficient_dynamics(q, k, v, log_decay=g / 100, readout="exp", normalizer="sum", backend=backend)
    assert torch.isfinite(small).all()
