"""Every backend against the ``quadratic`` reference in float64: outputs, final states and all gradients."""

from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch
import torch.nn.functional as F

import seqdyn
from seqdyn.core.backends import REGISTRY
from seqdyn.core.dynamics import Dynamics
from tests.core.cases import all_combinations, assert_close, build, call, flatten, random_case

TOL = 1e-10


def _combinations():
    for readout, decay, householder, normalizer in all_combinations():
        if readout != "identity" and decay.endswith("unstable"):
            continue  # unstable Λ needs a normalizer that sees the linear coefficients (Principle 6)
        yield readout, decay, householder, normalizer


COMBINATIONS = list(_combinations())


def _gradients(output, leaves: dict, seed: int) -> dict[str, torch.Tensor]:
    """Gradients of a random linear functional of every output tensor (outputs and final state)."""
    gen = torch.Generator().manual_seed(seed)
    parts = flatten(output)
    loss = sum((part * torch.randn(part.shape, generator=gen, dtype=part.dtype)).sum() for part in parts)
    names = list(leaves)
    grads = torch.autograd.grad(loss, [leaves[n] for n in names], allow_unused=True)
    return {n: g if g is not None else torch.zeros_like(leaves[n]) for n, g in zip(names, grads)}


def _assert_backends_match_quadratic(case, seed: int, backends=tuple(REGISTRY)) -> dict:
    """Every backend of ``backends`` that computes ``case`` against the quadratic reference: outputs, final states
    and gradients.  Returns the outputs by backend (the reference's included)."""
    leaves, options = build(case)
    reference = call(leaves, options, "quadratic", case.chunk_size)
    reference_grads = _gradients(reference, leaves, seed)
    outputs = {"quadratic": reference}
    for name in backends:
        if name == "quadratic":
            continue
        try:
            output = outputs[name] = call(leaves, options, name, case.chunk_size)
        except ValueError as error:
            assert "cannot compute" in str(error) and "quadratic" in str(error)
            continue
        for i, (got, want) in enumerate(zip(flatten(output), flatten(reference))):
            assert_close(got, want, TOL, f"{name} output/state part {i}")
        for leaf, grad in _gradients(output, leaves, seed).items():
            assert_close(grad, reference_grads[leaf], TOL, f"{name} d/d{leaf}")
    return outputs


@pytest.mark.parametrize("combo", COMBINATIONS, ids=lambda c: "-".join(c))
def test_every_backend_matches_quadratic(combo):
    seed = zlib.crc32("-".join(combo).encode()) % 10_000
    outputs = _assert_backends_match_quadratic(random_case(*combo, seed), seed)
    assert "recurrent" in outputs  # the recurrent backend computes every combination


#: rows without mass under ``"sum"`` (Σ_j α_ij = 0): the convention is coefficient 0 and output 0
MASSLESS = [
    (readout, decay, householder, "sum")
    for readout in ("relu", "square", "identity")
    for decay in ("none", "scalar", "diagonal")
    for householder in ("none", "keys")
]
MASSLESS += [("identity", "scalar_unstable", "none", "sum"), ("identity", "diagonal_unstable", "given", "sum")]


@pytest.mark.parametrize("combo", MASSLESS, ids=lambda c: "-".join(c))
def test_rows_without_mass_are_zero_with_finite_gradients_on_every_backend(combo):
    seed = zlib.crc32(("massless-" + "-".join(combo)).encode()) % 10_000
    case = random_case(*combo, seed, massless=True, length=11)
    outputs = _assert_backends_match_quadratic(case, seed, backends=(*REGISTRY, "auto"))
    for name, output in outputs.items():
        massless_rows = flatten(output)[0][:, ::3]
        assert torch.equal(massless_rows, torch.zeros_like(massless_rows)), name
    coefficients = _assert_coefficients_reproduce_the_outputs(case, seed)
    assert torch.equal(coefficients[:, :, ::3], torch.zeros_like(coefficients[:, :, ::3]))


#: hard resets (``g = −∞``, decay 0) among the decays: every backend finite and equal, gradients included (0 or
#: a rounding residue for the −∞ entries themselves, whose exact gradient is 0)
HARD_RESETS = [
    ("identity", decay, householder, normalizer)
    for decay in ("scalar", "diagonal", "scalar_unstable", "diagonal_unstable")
    for householder in ("none", "keys", "given")
    for normalizer in ("none", "sum")
]
HARD_RESETS += [
    (readout, decay, householder, "sum")
    for readout in ("exp", "softplus", "relu")
    for decay in ("scalar", "diagonal")
    for householder in ("none", "keys")
]


@pytest.mark.parametrize("combo", HARD_RESETS, ids=lambda c: "-".join(c))
def test_hard_resets_agree_on_every_backend(combo):
    seed = zlib.crc32(("reset-" + "-".join(combo)).encode()) % 10_000
    case = random_case(*combo, seed, hard_reset=True, length=11)
    _assert_backends_match_quadratic(case, seed, backends=(*REGISTRY, "auto"))
    _assert_coefficients_reproduce_the_outputs(case, seed)


def _assert_coefficients_reproduce_the_outputs(case, seed: int) -> torch.Tensor:
    """``coefficients`` (quadratic) are finite with finite gradients, and ``A v`` is the quadratic output; returns A."""
    case = dataclasses.replace(case, with_state=False)
    leaves, options = build(case)
    inputs = {name: x for name, x in leaves.items() if name != "v"}
    coefficients = seqdyn.coefficients(inputs.pop("q"), inputs.pop("k"), **inputs, **options)
    heads = max(coefficients.shape[1], leaves["v"].shape[2])
    values = leaves["v"].detach().expand(-1, -1, heads, -1)
    expected = call({**leaves, "v": values}, options, "quadratic", want_state=False)
    rows = torch.einsum("bhij,bjhv->bihv", coefficients.expand(-1, heads, -1, -1), values)
    assert_close(rows, expected, TOL, "coefficients @ v")
    grads = _gradients(coefficients, leaves, seed)
    assert all(torch.isfinite(grad).all() for grad in grads.values())
    return coefficients


@pytest.mark.parametrize("combo", [c for c in COMBINATIONS if c[0] == "identity"], ids=lambda c: "-".join(c))
def test_every_backend_matches_quadratic_with_heads_shared_over_whole_chunks(combo):
    """Queries, keys and gates of one head for all heads, T a multiple of the chunk size: no padding copy
    materializes the shared heads, so the chunked form works on one head for them (its gradients must be summed
    over heads exactly once)."""
    seed = zlib.crc32(("shared-" + "-".join(combo)).encode()) % 10_000
    case = random_case(*combo, seed, shared=("q", "k", "gates"), length=16, chunk_size=8, heads=3)
    leaves, options = build(case)
    reference = call(leaves, options, "quadratic", case.chunk_size)
    reference_grads = _gradients(reference, leaves, seed)
    for name in REGISTRY:
        if name == "quadratic":
            continue
        try:
            output = call(leaves, options, name, case.chunk_size)
        except ValueError as error:
            assert "cannot compute" in str(error)
            continue
        for i, (got, want) in enumerate(zip(flatten(output), flatten(reference))):
            assert_close(got, want, TOL, f"{name} output/state part {i}")
        for leaf, grad in _gradients(output, leaves, seed).items():
            assert_close(grad, reference_grads[leaf], TOL, f"{name} d/d{leaf}")


def test_unsupported_combinations_are_the_documented_ones():
    expectations = {
        ("identity", "diagonal", "given", "sum"): {"quadratic", "recurrent", "chunk"},
        ("identity", "scalar", "none", "none"): {"quadratic", "recurrent", "chunk", "scan"},
        ("exp", "scalar", "none", "sum"): {"quadratic", "recurrent", "chunk"},
        ("exp", "none", "keys", "sum"): {"quadratic", "recurrent"},
        ("exp", "none", "none", "none"): {"quadratic", "recurrent"},
        ("softplus", "diagonal", "none", "sum"): {"quadratic", "recurrent"},
    }
    for combo, expected in expectations.items():
        leaves, options = build(random_case(*combo, seed=1))
        able = set()
        for name in REGISTRY:
            try:
                call(leaves, options, name)
                able.add(name)
            except ValueError as error:
                message = str(error)
                assert f"backend={name!r} cannot compute" in message
                for other in expected:
                    assert repr(other) in message
        assert able == expected, combo


@pytest.mark.parametrize("length", [1, 7, 8, 9, 33])
@pytest.mark.parametrize("backend", ["recurrent", "chunk", "scan"])
def test_lengths_around_the_chunk_size(length, backend):
    """T = 1, T not a multiple of the chunk size, several chunks; diagonal decay and the default scale."""
    case = random_case(
        "identity", "diagonal", "none", "none", seed=length, length=length, chunk_size=8, with_state=True
    )
    leaves, options = build(case)
    reference = call(leaves, options, "quadratic", 8)
    output = call(leaves, options, backend, 8)
    for got, want in zip(flatten(output), flatten(reference)):
        assert_close(got, want, TOL, backend)


def test_heads_of_size_one_broadcast():
    """A head axis of size 1 equals the same tensor repeated over heads."""
    case = random_case("identity", "scalar", "keys", "none", seed=3, heads=3, shared=("q", "k", "gates"))
    leaves, options = build(case)
    repeated = {
        n: (
            x.detach().expand(*x.shape[:2], 3, *x.shape[3:]).clone()
            if x.dim() >= 3 and x.shape[2] == 1 and not n.startswith("state_")
            else x.detach()
        )
        for n, x in leaves.items()
    }
    for backend in ("quadratic", "chunk", "recurrent"):
        shared = call(leaves, options, backend, want_state=False)
        full = call(repeated, options, backend, want_state=False)
        assert_close(shared, full, TOL, backend)


@pytest.mark.parametrize("length", [37, 32])  # 32: whole chunks, no padding, so the chunks keep one shared head
@pytest.mark.parametrize("decay", [False, True])
def test_delta_rule_with_keys_shared_over_heads_and_a_scale_per_head(decay, length):
    """DeltaNet-type arguments (direction = key) whose query and key have one head while β, b and g have three:
    outputs, final states and every gradient."""
    gen = torch.Generator().manual_seed(5)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    q, k = rand(2, length, 1, 6), torch.nn.functional.normalize(rand(2, length, 1, 6), dim=-1)
    v, beta = rand(2, length, 3, 5), torch.sigmoid(rand(2, length, 3))
    scale = torch.rand(2, length, 3, generator=gen, dtype=torch.float64)
    g = -torch.rand(2, length, 3, generator=gen, dtype=torch.float64) if decay else None
    initial = 0.5 * rand(2, 3, 6, 5)
    leaves = [x.requires_grad_() for x in (q, k, v, beta, scale, initial) + ((g,) if decay else ())]
    results = {}
    for backend in ("quadratic", "chunk"):
        y, final = seqdyn.coefficient_dynamics(
            q,
            k,
            v,
            householder=beta,
            scale=scale,
            log_decay=g,
            chunk_size=8,
            initial_state=initial,
            output_final_state=True,
            backend=backend,
        )
        results[backend] = (y, final, *torch.autograd.grad(y.square().sum() + final.sin().sum(), leaves))
    for i, (got, exact) in enumerate(zip(results["chunk"], results["quadratic"])):
        assert_close(got, exact, TOL, f"chunk part {i}")


def test_unit_lower_solve_and_its_gradients_match_a_triangular_solve():
    from seqdyn.core.backends.chunk.triangular import unit_lower_solve

    gen = torch.Generator().manual_seed(6)
    lower = (0.3 * torch.randn(2, 3, 9, 9, generator=gen, dtype=torch.float64)).tril(-1).requires_grad_()
    rhs = torch.randn(2, 3, 9, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    exact = torch.linalg.solve_triangular(torch.eye(9, dtype=torch.float64) + lower, rhs, upper=False)
    assert_close(unit_lower_solve(lower, rhs), exact, TOL, "solve")
    assert torch.autograd.gradcheck(lambda a, b: unit_lower_solve(a.tril(-1), b), (lower, rhs))
    grad = torch.autograd.grad(unit_lower_solve(lower, rhs).sum(), lower, create_graph=True)[0]
    with pytest.raises(RuntimeError):  # no silent wrong second derivatives
        grad.sum().backward()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 13, 16, 33, 64])
def test_unit_lower_inverse_by_doubling_is_the_inverse(size):
    """Block doubling (padded to a power of two) against a triangular solve, any size and batch shape; in float32
    it stays as accurate as the solve at the chunk's size."""
    from seqdyn.core.backends.chunk.triangular import unit_lower_inverse

    gen = torch.Generator().manual_seed(size)
    lower = (0.5 * torch.randn(2, 3, size, size, generator=gen, dtype=torch.float64)).tril(-1)
    eye = torch.eye(size, dtype=torch.float64)
    exact = torch.linalg.solve_triangular(eye + lower, eye.expand_as(lower), upper=False)
    assert_close(unit_lower_inverse(lower), exact, TOL, "inverse")
    assert_close(unit_lower_inverse(lower[0, 0]), exact[0, 0], TOL, "one matrix")
    assert_close((eye + lower) @ unit_lower_inverse(lower), eye.expand_as(lower), TOL, "product")
    single = unit_lower_inverse(lower.float()).double()
    by_solve = torch.linalg.solve_triangular((eye + lower).float(), eye.float().expand_as(lower), upper=False)
    assert (single - exact).abs().max() <= 4 * (by_solve.double() - exact).abs().max() + 1e-6


def test_opposite_decay_factors_and_their_gradients_with_broadcast_heads():
    from seqdyn.core.backends.chunk.chunking import OppositeDecays

    gen = torch.Generator().manual_seed(7)
    q = torch.randn(2, 1, 3, 5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, 3, 5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    exponent = torch.randn(2, 3, 3, 5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    grown, shrunk = OppositeDecays.apply(q, k, exponent)
    assert_close(grown, q * torch.exp(exponent), TOL, "q e^d")
    assert_close(shrunk, k * torch.exp(-exponent), TOL, "k e^-d")
    assert torch.autograd.gradcheck(OppositeDecays.apply, (q, k, exponent))
    assert torch.autograd.gradcheck(OppositeDecays.apply, (k, q, exponent[:, :1]))


def test_diagonal_decay_and_keys_shared_over_heads_with_queries_per_head():
    gen = torch.Generator().manual_seed(8)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64, requires_grad=True)  # noqa: E731
    q, k, v = rand(2, 21, 3, 4), rand(2, 21, 1, 4), rand(2, 21, 3, 2)
    g = (-torch.rand(2, 21, 1, 4, generator=gen, dtype=torch.float64)).requires_grad_()
    grads = {}
    for backend in ("quadratic", "chunk"):
        y = seqdyn.coefficient_dynamics(q, k, v, log_decay=g, backend=backend, chunk_size=8)
        grads[backend] = (y, *torch.autograd.grad(y.square().sum(), (q, k, v, g)))
    for exact, got in zip(grads["quadratic"], grads["chunk"]):
        assert_close(got, exact, TOL, "chunk")


def half_precision_inputs(dtype: torch.dtype, decay: str, householder: bool) -> dict:
    """q, k, v, the decay and the Householder gate β all in ``dtype`` (bfloat16 or float16): T = 64, K = 8."""
    gen = torch.Generator().manual_seed(11)
    rand = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    inputs = {"q": rand(2, 64, 2, 8), "k": rand(2, 64, 2, 8), "v": rand(2, 64, 2, 4)}
    if decay != "none":
        inputs["log_decay"] = F.logsigmoid(rand(2, 64, 2, *((8,) if decay == "diagonal" else ())) + 3.0)
    if householder:
        inputs["k"] = F.normalize(inputs["k"], dim=-1)
        inputs["householder"] = torch.sigmoid(rand(2, 64, 2))
    return {name: x.to(dtype) for name, x in inputs.items()}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize(
    ("readout", "decay", "householder", "normalizer", "backend"),
    [
        ("identity", "scalar", False, "none", "chunk"),
        ("identity", "scalar", False, "none", "recurrent"),
        ("identity", "diagonal", True, "none", "chunk"),  # Gated DeltaNet: every gate in half precision
        ("exp", "none", False, "sum", "quadratic"),  # softmax attention
        ("sigmoid", "scalar", False, "none", "quadratic"),
    ],
)
def test_half_precision_inputs_compute_in_float32_within_one_unit_of_the_format(
    readout, decay, householder, normalizer, backend, dtype
):
    """Inputs entirely in bfloat16 / float16 (queries, keys, values, decay, β): the operator lifts them to float32
    (``compute_dtype``) and rounds only its output, so every output row is within one unit of the format's
    precision (``eps``: half of it for rounding the output, half for float32's accumulation over 64 steps) of the
    float64 result on the same (rounded) inputs, relative to the row's largest entry."""
    inputs = half_precision_inputs(dtype, decay, householder)
    options = dict(readout=readout, normalizer=normalizer, backend=backend)
    out = seqdyn.coefficient_dynamics(**inputs, **options)
    assert out.dtype == dtype
    exact = seqdyn.coefficient_dynamics(**{name: x.double() for name, x in inputs.items()}, **options)
    row_scale = exact.abs().amax(dim=-1, keepdim=True)
    error = (out.double() - exact).abs()
    assert (error <= torch.finfo(dtype).eps * row_scale).all(), float((error / row_scale).max())


@pytest.mark.parametrize(
    ("dtypes", "computed"),
    [
        ((torch.bfloat16,), torch.float32),
        ((torch.float16, torch.float16), torch.float32),
        ((torch.bfloat16, torch.float16), torch.float32),  # promoted to float32 either way
        ((torch.bfloat16, None, torch.float64), torch.float64),
        ((torch.float32,), torch.float32),
        ((torch.float64, torch.float32), torch.float64),
    ],
)
def test_compute_dtype_lifts_half_precision_to_float32_and_promotes_the_rest(dtypes, computed):
    from seqdyn.core.problem import compute_dtype

    assert compute_dtype(*(None if d is None else torch.zeros(1, dtype=d) for d in dtypes)) == computed


def test_auto_picks_a_valid_backend_and_says_which():
    for combo in [
        ("identity", "diagonal", "keys", "sum"),
        ("exp", "none", "none", "sum"),
        ("sigmoid", "scalar", "none", "none"),
        ("exp", "none", "keys", "abs_max1"),
    ]:
        leaves, options = build(random_case(*combo, seed=2, with_state=False))
        q, k, v = leaves.pop("q"), leaves.pop("k"), leaves.pop("v")
        chosen = seqdyn.select_backend(q, k, v, **leaves, **options)
        assert REGISTRY[chosen].unsupported(seqdyn.core.problem.prepare(Dynamics(q, k, v, **leaves, **options))) is None
        auto = seqdyn.coefficient_dynamics(q, k, v, backend="auto", **leaves, **options)
        explicit = seqdyn.coefficient_dynamics(q, k, v, backend=chosen, **leaves, **options)
        assert torch.equal(auto, explicit)


@pytest.mark.parametrize(
    "shape,options,expected",
    [
        ((4, 4096, 256, 1, 1), {"log_decay": "scalar"}, "scan"),  # per-channel states (qLSTM, RG-LRU)
        ((4, 4096, 64, 16, 1), {"log_decay": "diagonal"}, "scan"),  # S6: N = 16 states, V = 1
        ((4, 4096, 4, 64, 64), {"log_decay": "scalar"}, "chunk"),  # Mamba-2 heads
        ((4, 4096, 4, 64, 64), {"log_decay": "diagonal"}, "chunk"),  # GLA heads
        ((4, 4096, 4, 64, 64), {"householder": True}, "chunk"),  # DeltaNet
        ((4, 100, 4, 16, 16), {"log_decay": "scalar"}, "quadratic"),  # short: materialized is fastest
        ((4, 100, 4, 16, 16), {"log_decay": "diagonal"}, "chunk"),  # ... but not with pairwise diagonal decays
        ((4, 4096, 4, 64, 64), {"readout": "exp", "normalizer": "sum"}, "chunk"),  # softmax
        ((1, 64, 2, 8, 8), {"readout": "sigmoid"}, "quadratic"),
        ((8, 8192, 8, 8, 8), {"readout": "sigmoid"}, "recurrent"),  # the T×T scores would not fit
    ],
)
def test_auto_cost_model_decisions(shape, options, expected):
    """The choices of the cost model calibrated by ``seqdyn bench operator`` (see ``operator._auto``)."""
    batch, length, heads, key_dim, value_dim = shape
    meta = lambda *s: torch.empty(*s, device="meta")  # noqa: E731
    q, k, v = meta(batch, length, 1, key_dim), meta(batch, length, 1, key_dim), meta(batch, length, heads, value_dim)
    kwargs = dict(options)
    if kwargs.get("log_decay") == "scalar":
        kwargs["log_decay"] = meta(batch, length, heads)
    elif kwargs.get("log_decay") == "diagonal":
        kwargs["log_decay"] = meta(batch, length, heads, key_dim)
    if kwargs.pop("householder", False):
        kwargs["householder"] = meta(batch, length, heads)
    assert seqdyn.select_backend(q, k, v, **kwargs) == expected


@pytest.mark.parametrize("decay", ["none", "scalar", "diagonal"])
@pytest.mark.parametrize("blocks", [1, 2, 3.2])
def test_scan_across_its_blocks_with_state_and_gradients(decay, blocks):
    """The scan's blocks: T a whole number of blocks or not, an initial state, keys shared over heads."""
    from seqdyn.core.backends.scan import BLOCK

    length = int(blocks * BLOCK) + (1 if blocks == 1 else 0)
    gen = torch.Generator().manual_seed(length)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64, requires_grad=True)  # noqa: E731
    q, k, v = rand(2, length, 3, 4), rand(2, length, 1, 4), rand(2, length, 3, 2)
    state = rand(2, 3, 4, 2)
    g = {
        "none": None,
        "scalar": -torch.rand(2, length, 3, generator=gen, dtype=torch.float64),
        "diagonal": -torch.rand(2, length, 3, 4, generator=gen, dtype=torch.float64),
    }[decay]
    leaves = [q, k, v, state] + ([g.requires_grad_()] if g is not None else [])
    results = {}
    for backend in ("quadratic", "scan"):
        y, final = seqdyn.coefficient_dynamics(
            q, k, v, log_decay=g, initial_state=state, output_final_state=True, backend=backend
        )
        loss = (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum() + final.square().sum()
        results[backend] = (y, final, *torch.autograd.grad(loss, leaves))
    for i, (got, exact) in enumerate(zip(results["scan"], results["quadratic"])):
        assert_close(got, exact, TOL, f"scan part {i}")


@pytest.mark.parametrize("length", [40, 32])  # 32: whole chunks, no padding, so the chunks keep one shared head
@pytest.mark.parametrize("kind", ["s6", "mamba2"])
def test_a_scale_per_head_on_keys_shared_over_heads_goes_on_the_values(kind, length):
    """Keys shared by all heads with a scale per head — S6-type (V < K, diagonal decay) and Mamba-2-type (one group
    of queries and keys, V = K, scalar decay per head): b rides on the values (``b_j k_j v_jᵀ = k_j (b_j v_j)ᵀ``),
    which changes no output, state, gradient or coefficient, and the DSF still carries b in its B_i."""
    from seqdyn.core.problem import prepare

    gen = torch.Generator().manual_seed(11)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64, requires_grad=True)  # noqa: E731
    value_dim, decay_shape = (1, (2, length, 5, 4)) if kind == "s6" else (4, (2, length, 5))
    q, k, v = rand(2, length, 1, 4), rand(2, length, 1, 4), rand(2, length, 5, value_dim)
    b = torch.rand(2, length, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    g = (-torch.rand(*decay_shape, generator=gen, dtype=torch.float64)).requires_grad_()
    initial = rand(2, 5, 4, value_dim)
    problem = prepare(Dynamics(q, k, v, log_decay=g, scale=b)).with_scale_applied()
    assert torch.equal(problem.k, prepare(Dynamics(q, k, v)).k) and problem.scale is None  # b went on the values
    results = {}
    for backend in ("quadratic", "chunk", "scan", "recurrent"):
        y, final = seqdyn.coefficient_dynamics(
            q,
            k,
            v,
            log_decay=g,
            scale=b,
            output_final_state=True,
            initial_state=initial,
            backend=backend,
            chunk_size=16,
        )
        results[backend] = (y, final, *torch.autograd.grad(y.square().sum() + final.sum(), (q, k, v, g, b, initial)))
    for backend in ("chunk", "scan", "recurrent"):
        for i, (got, exact) in enumerate(zip(results[backend], results["quadratic"])):
            assert_close(got, exact, TOL, f"{backend} part {i}")
    coefficients = seqdyn.coefficients(q, k, log_decay=g, scale=b)
    without_state = seqdyn.coefficient_dynamics(q, k, v, log_decay=g, scale=b, backend="quadratic")
    assert_close(coefficients @ v.detach().transpose(1, 2), without_state.transpose(1, 2), TOL, "coefficients")
    if kind == "s6":  # one value per head: B_i is the impulse itself
        system = seqdyn.dsf(q[:, :6], k[:, :6], v[:, :6], log_decay=g[:, :6], scale=b[:, :6])
        impulses = (k[:, :6] * b[:, :6].unsqueeze(-1)).transpose(1, 2)  # b_i k_i per head [B, H, T, K]
        assert_close(system.B.squeeze(-1), impulses, TOL, "dsf B_i")
