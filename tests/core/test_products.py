"""Several Householder factors per step (Gated DeltaProduct) and the decay before the factor (Kimi Delta Attention):
every backend against the definition written with explicit K × K transitions, in float64."""

from __future__ import annotations

import pytest
import torch

import seqdyn
from seqdyn.core.dynamics import Dynamics
from seqdyn.core.products import PER_FACTOR
from seqdyn.core.readouts import resolve_readout

B, T, H, K, V = 2, 7, 2, 3, 2
#: the backends that compute Householder factors, per readout (the identity: also ``chunk``)
LINEAR_BACKENDS = ("quadratic", "recurrent", "chunk", "auto")
NONLINEAR_BACKENDS = ("quadratic", "recurrent", "auto")


def draw(factors: int | None, decay: str, seed: int = 0, length: int = T, batch: int = B) -> dict:
    """Random arguments: ``factors`` Householder factors per step (None: one, per-token layout), unit directions
    ``w ≠ k`` for half the heads' sake (given), β ∈ (0, 2), a scale per factor, and the decay (none, scalar or
    diagonal, in (0.5, 1))."""
    gen = torch.Generator().manual_seed(seed)
    per = () if factors is None else (factors,)
    rand = lambda *shape: torch.rand(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    w = randn(batch, length, H, *per, K)
    arguments = dict(
        q=randn(batch, length, H, K),
        k=randn(batch, length, H, *per, K) / 2,
        v=randn(batch, length, H, *per, V),
        householder=2 * rand(batch, length, H, *per),
        householder_dir=w / w.norm(dim=-1, keepdim=True),
        scale=rand(batch, length, H, *per) + 0.5,
    )
    if decay != "none":
        shape = (batch, length, H) + ((K,) if decay == "diagonal" else ())
        arguments["log_decay"] = torch.log(0.5 + 0.5 * rand(*shape))
    return arguments


def factors_of(arguments: dict, t: int):
    """Token ``t``'s factors ``I − β w wᵀ`` ``[B, H, n, K, K]`` and impulses ``b k`` ``[B, H, n, K]``."""
    beta, w = arguments["householder"][:, t], arguments["householder_dir"][:, t]
    k, b = arguments["k"][:, t], arguments["scale"][:, t]
    if beta.dim() == 2:  # one factor, per-token layout
        beta, w, k, b = beta[..., None], w[:, :, None], k[:, :, None], b[..., None]
    eye = torch.eye(K, dtype=torch.float64)
    return eye - beta[..., None, None] * w[..., :, None] * w[..., None, :], b[..., None] * k


def decay_matrix(arguments: dict, t: int) -> torch.Tensor:
    """``D_t`` ``[B, H, K, K]``."""
    g = arguments.get("log_decay")
    if g is None:
        return torch.eye(K, dtype=torch.float64).expand(B, H, K, K)
    d = torch.exp(g[:, t])
    return torch.diag_embed(d[..., None].expand(B, H, K) if d.dim() == 2 else d)


def reference(arguments: dict, readout: str = "identity", normalizer: str = "none", decay_first: bool = False):
    """``y_i = (1/η_i) Σ_{j ≤ i, s} φ(q_iᵀ x_i^(j,s)) v_js`` with ``x_i^(j,s) = Λ_i ⋯ Λ_{j+1} P_js b_js k_js``:
    ``P_js = H_jn ⋯ H_j,s+1`` the token's factors after the impulse's own, and ``Λ_t = H_tn ⋯ H_t2 D_t H_t1``
    (``decay_first``: ``H_tn ⋯ H_t1 D_t``)."""
    phi = resolve_readout(readout)
    q, v = arguments["q"], arguments["v"]
    v = v if v.dim() == 5 else v[:, :, :, None]
    length = q.shape[1]
    y = torch.zeros(B, length, H, V, dtype=torch.float64)
    for i in range(length):
        numerator, mass = torch.zeros(B, H, V, dtype=torch.float64), torch.zeros(B, H, dtype=torch.float64)
        for j in range(i + 1):
            factors, impulses = factors_of(arguments, j)
            for s in range(factors.shape[2]):
                x = impulses[:, :, s, :, None]  # [B, H, K, 1]
                for later in range(s + 1, factors.shape[2]):
                    x = factors[:, :, later] @ x
                for t in range(j + 1, i + 1):
                    x = transition(arguments, t, decay_first) @ x
                alpha = phi.fn(torch.einsum("bhk,bhk->bh", q[:, i], x[..., 0]))
                numerator += alpha[..., None] * v[:, j, :, s]
                mass += alpha
        eta = {"none": torch.ones_like(mass), "sum": mass}[normalizer]
        y[:, i] = numerator / eta[..., None]
    return y


def transition(arguments: dict, t: int, decay_first: bool) -> torch.Tensor:
    """``Λ_t`` ``[B, H, K, K]`` of the docstring of :func:`reference`."""
    factors, _ = factors_of(arguments, t)
    decay = decay_matrix(arguments, t)
    matrix = decay if decay_first else decay @ factors[:, :, 0]
    for s in range(0 if decay_first else 1, factors.shape[2]):
        matrix = factors[:, :, s] @ matrix
    return matrix


CASES = [
    (factors, decay, decay_first)
    for factors, decay, decay_first in [
        (3, "none", False),
        (2, "scalar", False),
        (3, "diagonal", False),
        (2, "diagonal", True),
        (None, "diagonal", True),  # Kimi Delta Attention's order, one factor
        (1, "scalar", True),
    ]
]


@pytest.mark.parametrize(("factors", "decay", "decay_first"), CASES)
@pytest.mark.parametrize("backend", LINEAR_BACKENDS)
def test_every_backend_computes_the_products_and_the_decay_before_them(factors, decay, decay_first, backend):
    arguments = draw(factors, decay, seed=3)
    y = seqdyn.coefficient_dynamics(**arguments, decay_first=decay_first, backend=backend, chunk_size=2)
    torch.testing.assert_close(y, reference(arguments, decay_first=decay_first), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("readout", ["exp", "softplus"])
@pytest.mark.parametrize("backend", NONLINEAR_BACKENDS)
def test_nonlinear_readouts_read_every_factors_impulse(readout, backend):
    arguments = draw(2, "scalar", seed=4)
    y = seqdyn.coefficient_dynamics(**arguments, readout=readout, normalizer="sum", backend=backend)
    torch.testing.assert_close(y, reference(arguments, readout, "sum"), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("factors", "decay", "decay_first"), CASES[:4])
def test_gradients_agree_between_backends(factors, decay, decay_first):
    grads = {}
    for backend in ("quadratic", "recurrent", "chunk"):
        leaves = {name: value.clone().requires_grad_() for name, value in draw(factors, decay, seed=5).items()}
        y = seqdyn.coefficient_dynamics(**leaves, decay_first=decay_first, backend=backend, chunk_size=3)
        weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
        (y * weights).sum().backward()
        grads[backend] = {name: leaf.grad for name, leaf in leaves.items()}
    for backend in ("recurrent", "chunk"):
        for name, grad in grads["quadratic"].items():
            torch.testing.assert_close(grads[backend][name], grad, rtol=1e-10, atol=1e-10, msg=f"{backend}: {name}")


@pytest.mark.parametrize(("factors", "decay", "decay_first"), CASES[:4])
def test_the_final_state_continues_the_sequence_and_steps_decode_it(factors, decay, decay_first):
    """Two halves with the state passed between them, and token-by-token steps, equal the whole sequence."""
    arguments = draw(factors, decay, seed=7)
    whole, state = seqdyn.coefficient_dynamics(**arguments, decay_first=decay_first, output_final_state=True)
    first = {name: value[:, :4] for name, value in arguments.items()}
    second = {name: value[:, 4:] for name, value in arguments.items()}
    y1, middle = seqdyn.coefficient_dynamics(**first, decay_first=decay_first, output_final_state=True, backend="chunk")
    y2, end = seqdyn.coefficient_dynamics(
        **second, decay_first=decay_first, initial_state=middle, output_final_state=True, backend="chunk"
    )
    torch.testing.assert_close(torch.cat([y1, y2], 1), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(end, state, rtol=1e-10, atol=1e-10)
    step_state, outputs = None, []
    for t in range(T):
        token = {name: value[:, t] for name, value in arguments.items()}
        y, step_state = seqdyn.coefficient_dynamics_step(**token, state=step_state, decay_first=decay_first)
        outputs.append(y)
    torch.testing.assert_close(torch.stack(outputs, 1), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(step_state, state, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("factors", "decay", "decay_first"), CASES[:4])
@pytest.mark.parametrize("backend", ["recurrent", "chunk", "auto"])
def test_packed_sequences_are_each_computed_alone(factors, decay, decay_first, backend):
    lengths = (3, 5, 2)
    parts = [draw(factors, decay, seed=10 + n, length=length, batch=1) for n, length in enumerate(lengths)]
    packed = {name: torch.cat([part[name] for part in parts], dim=1) for name in parts[0]}
    cu_seqlens = torch.tensor([0, 3, 8, 10])
    y = seqdyn.coefficient_dynamics(**packed, decay_first=decay_first, cu_seqlens=cu_seqlens, backend=backend)
    alone = [seqdyn.coefficient_dynamics(**part, decay_first=decay_first, backend="quadratic") for part in parts]
    torch.testing.assert_close(y, torch.cat(alone, dim=1), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("factors", "decay", "decay_first"), CASES)
def test_the_coefficients_have_a_column_per_factor_and_give_the_outputs(factors, decay, decay_first):
    arguments = draw(factors, decay, seed=8)
    values = arguments.pop("v")
    matrix = seqdyn.coefficients(**arguments, decay_first=decay_first)
    n = 1 if factors is None else factors
    assert matrix.shape == (B, H, T, T * n)
    flat = (values if values.dim() == 5 else values[:, :, :, None]).movedim(3, 2).flatten(1, 2)  # [B, T·n, H, V]
    y = torch.einsum("bhij,bjhv->bihv", matrix, flat)
    torch.testing.assert_close(
        y, reference({**arguments, "v": values}, decay_first=decay_first), rtol=1e-10, atol=1e-10
    )
    future = torch.ones(T, T, dtype=torch.bool).triu(1).repeat_interleave(n, dim=1)  # key tokens after the query
    assert (matrix[..., future] == 0).all()


def test_one_factor_per_step_is_the_operator_itself():
    """``[B, T, H, 1]`` factors, and the decay before a scalar-decayed factor, change nothing."""
    arguments = draw(1, "scalar", seed=9)
    plain = {name: value[:, :, :, 0] if name in PER_FACTOR else value for name, value in arguments.items()}
    expected = seqdyn.coefficient_dynamics(**plain)
    torch.testing.assert_close(seqdyn.coefficient_dynamics(**arguments), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(seqdyn.coefficient_dynamics(**plain, decay_first=True), expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(k=torch.zeros(B, T, H, 2, K)), r"k: with householder \[B, T, H, n\] \(n = 3 factors per step\)"),
        (dict(householder_dir=torch.zeros(B, T, H, 3, K + 1)), None),
        (dict(scale=torch.ones(B, T, H)), r"scale: with householder \[B, T, H, n\]"),
        (dict(householder=torch.ones(B, T, H)), r"k: keys per factor \[B, T, H, n, K\]"),
        (dict(readout="exp", decay_first=True, log_decay=torch.zeros(B, T, H, K)), r"decay_first: a diagonal decay"),
    ],
)
def test_shapes_that_do_not_fit_the_factors_are_named(change, message):
    arguments = {**draw(3, "none", seed=1), **change}
    with pytest.raises(ValueError, match=message or "householder_dir"):
        seqdyn.coefficient_dynamics(**arguments)


def test_a_description_carries_the_order():
    arguments = draw(None, "diagonal", seed=2)
    dynamics = Dynamics(**arguments, decay_first=True)
    assert not torch.allclose(reference(arguments, decay_first=True), reference(arguments)), "the orders agree"
    torch.testing.assert_close(
        seqdyn.coefficient_dynamics(dynamics), reference(arguments, decay_first=True), rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("normalizer", ["none", "sum", "tensor"])
@pytest.mark.parametrize(("factors", "decay", "decay_first"), CASES)
def test_the_dsf_per_token_takes_each_factors_value_as_an_input(factors, decay, decay_first, normalizer):
    """``Φ u`` and the simulated DSF on ``u_t = [v_t1, …, v_tn]`` equal the operator; Λ̄_t is the token's product."""
    arguments = draw(factors, decay, seed=11)
    if normalizer == "tensor":
        normalizer = 1.0 + torch.rand(B, T, H, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = seqdyn.coefficient_dynamics(**arguments, normalizer=normalizer, decay_first=decay_first)
    system = seqdyn.dsf(**arguments, normalizer=normalizer, decay_first=decay_first)
    values = arguments["v"] if factors is not None else arguments["v"][:, :, :, None]
    u = values.flatten(3)  # [B, T, H, n·V]
    torch.testing.assert_close(system.apply(u), y, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(system.simulate(u), y, rtol=1e-10, atol=1e-10)
    if normalizer == "none":
        expected = torch.kron(transition(arguments, 2, decay_first)[0, 1], torch.eye(V, dtype=torch.float64))
        torch.testing.assert_close(system.Lambda[0, 1, 2], expected, rtol=1e-12, atol=1e-12)


def test_strong_diagonal_decays_stay_finite_under_float16_autocast():
    """Kimi Delta Attention's initial decays reach e^{-11} per step: the chunks are sized for float16's range where
    autocast forms the products in it."""
    arguments = draw(None, "diagonal", seed=12, length=24)
    arguments["log_decay"] = 25 * arguments["log_decay"]  # down to −17 per step
    expected = reference(arguments, decay_first=True)
    single = {name: value.float() for name, value in arguments.items()}
    with torch.autocast("cpu", dtype=torch.float16):
        y = seqdyn.coefficient_dynamics(**single, decay_first=True, backend="chunk", chunk_size=8)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), expected, rtol=2e-2, atol=2e-2)


def test_a_factored_decay_is_diagonal_and_takes_the_order_too():
    """``log_decay`` Δ ``[B, T, H]`` with ``decay_rate`` A is the diagonal ``Δ ⊗ A``: decay_first puts it before the
    factor as the formed ``g`` would."""
    arguments = draw(None, "scalar", seed=13)
    step = -arguments.pop("log_decay")  # Δ > 0
    rate = -torch.rand(H, K, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    formed = seqdyn.coefficient_dynamics(**arguments, log_decay=step[..., None] * rate, decay_first=True)
    factored = seqdyn.coefficient_dynamics(**arguments, log_decay=step, decay_rate=rate, decay_first=True)
    torch.testing.assert_close(factored, formed, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(formed, seqdyn.coefficient_dynamics(**arguments, log_decay=step, decay_rate=rate))
