"""The diagonal-plus-low-rank transition ``Λ_t = D_t + u_t z_tᵀ`` (RWKV-7, the generalized delta rule): every backend
against the definition written with explicit K × K transitions, in float64, and both orders of a decay and a delta
update as its cases."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import seqdyn
from seqdyn.core.backends.chunk.minimal import chunked
from seqdyn.core.low_rank import householder_as_low_rank
from seqdyn.core.readouts import resolve_readout

B, T, H, K, V = 2, 9, 2, 3, 2
TOL = dict(rtol=1e-10, atol=1e-10)
DECAYS = ("none", "scalar", "diagonal")
LINEAR_BACKENDS = ("quadratic", "recurrent", "chunk", "auto")


def draw(decay: str, seed: int = 0, length: int = T, batch: int = B) -> dict:
    """Random arguments as RWKV-7 draws them: a unit removal key κ̂ (z), ``u = −a ⊙ κ̂`` with a rate a ∈ (0, 1) per
    channel, half the heads with a general u instead; a scale per step; the decay in (0.5, 1)."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.rand(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    removal = F.normalize(randn(batch, length, H, K), dim=-1)
    write = -rand(batch, length, H, K) * removal
    write[:, :, 1] = 0.4 * randn(batch, length, K)  # a ≠ −κ̂ ⊙ rate: any rank-one part
    arguments = dict(
        q=randn(batch, length, H, K),
        k=randn(batch, length, H, K) / 2,
        v=randn(batch, length, H, V),
        low_rank_write=write,
        low_rank_read=removal,
        scale=rand(batch, length, H) + 0.5,
    )
    if decay != "none":
        shape = (batch, length, H) + ((K,) if decay == "diagonal" else ())
        arguments["log_decay"] = torch.log(0.5 + 0.5 * rand(*shape))
    return arguments


def transition(arguments: dict, t: int) -> torch.Tensor:
    """``Λ_t = D_t + u_t z_tᵀ`` ``[B, H, K, K]``."""
    u, z = arguments["low_rank_write"][:, t], arguments["low_rank_read"][:, t]
    batch = u.shape[0]
    g = arguments.get("log_decay")
    if g is None:
        decay = torch.ones(batch, H, K, dtype=torch.float64)
    else:
        decay = torch.exp(g[:, t]).reshape(batch, H, -1).expand(batch, H, K)
    return torch.diag_embed(decay) + u[..., :, None] * z[..., None, :]


def reference(arguments: dict, readout: str = "identity", normalizer: str = "none", initial=None):
    """``y_i = (1/η_i) Σ_{j≤i} φ(q_iᵀ Λ_i ⋯ Λ_{j+1} b_j k_j) v_j`` and, for the identity readout, the final state
    ``S_T = Λ_T ⋯ Λ_1 S_0 + Σ_j Λ_T ⋯ Λ_{j+1} b_j k_j v_jᵀ``."""
    phi = resolve_readout(readout)
    q, k, v, b = arguments["q"], arguments["k"], arguments["v"], arguments["scale"]
    batch, length = q.shape[:2]
    y = torch.zeros(batch, length, H, V, dtype=torch.float64)
    for i in range(length):
        numerator, mass = torch.zeros(batch, H, V, dtype=torch.float64), torch.zeros(batch, H, dtype=torch.float64)
        for j in range(i + 1):
            x = (b[:, j, :, None] * k[:, j])[..., None]  # [B, H, K, 1]
            for t in range(j + 1, i + 1):
                x = transition(arguments, t) @ x
            alpha = phi.fn(torch.einsum("bhk,bhk->bh", q[:, i], x[..., 0]))
            numerator, mass = numerator + alpha[..., None] * v[:, j], mass + alpha
        if initial is not None:
            state = initial
            for t in range(i + 1):
                state = transition(arguments, t) @ state
            numerator = numerator + torch.einsum("bhk,bhkv->bhv", q[:, i], state)
        y[:, i] = numerator / (mass[..., None] if normalizer == "sum" else 1.0)
    return y


def final_state(arguments: dict, initial=None) -> torch.Tensor:
    q, k, v, b = arguments["q"], arguments["k"], arguments["v"], arguments["scale"]
    state = torch.zeros(q.shape[0], H, K, V, dtype=torch.float64) if initial is None else initial
    for t in range(q.shape[1]):
        state = transition(arguments, t) @ state + (b[:, t, :, None] * k[:, t])[..., None] * v[:, t, :, None, :]
    return state


@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("backend", LINEAR_BACKENDS)
def test_every_backend_computes_the_diagonal_plus_low_rank_transition(decay, backend):
    arguments = draw(decay, seed=1)
    initial = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    y, state = seqdyn.coefficient_dynamics(
        **arguments, initial_state=initial, output_final_state=True, backend=backend, chunk_size=4
    )
    torch.testing.assert_close(y, reference(arguments, initial=initial), **TOL)
    torch.testing.assert_close(state, final_state(arguments, initial), **TOL)


@pytest.mark.parametrize(("readout", "normalizer"), [("exp", "sum"), ("softplus", "none")])
@pytest.mark.parametrize("backend", ["quadratic", "recurrent", "auto"])
def test_nonlinear_readouts_read_the_low_rank_dynamics(readout, normalizer, backend):
    arguments = draw("diagonal", seed=3)
    y = seqdyn.coefficient_dynamics(**arguments, readout=readout, normalizer=normalizer, backend=backend)
    torch.testing.assert_close(y, reference(arguments, readout, normalizer), **TOL)


@pytest.mark.parametrize("decay", DECAYS)
def test_gradients_agree_between_backends(decay):
    """Every input's gradient (u, z and the decay included), with an initial state, on every backend."""
    grads = {}
    initial = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    for backend in ("quadratic", "recurrent", "chunk"):
        leaves = {name: value.clone().requires_grad_() for name, value in draw(decay, seed=5).items()}
        leaves["initial_state"] = initial.clone().requires_grad_()
        y, state = seqdyn.coefficient_dynamics(**leaves, output_final_state=True, backend=backend, chunk_size=4)
        weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
        ((y * weights).sum() + state.square().sum()).backward()
        grads[backend] = {name: leaf.grad for name, leaf in leaves.items()}
    for backend in ("recurrent", "chunk"):
        for name, grad in grads["quadratic"].items():
            torch.testing.assert_close(grads[backend][name], grad, **TOL, msg=f"{backend}: {name}")


def test_the_chunk_listing_writes_the_low_rank_part_undecayed():
    """The minimal listing (head-major, β = 1 beside ``written`` ũ = −u) equals the definition."""
    arguments = draw("diagonal", seed=7)
    head_major = lambda name: arguments[name].transpose(1, 2)  # noqa: E731  [B, H, T, …]
    keys = head_major("k") * head_major("scale").unsqueeze(-1)
    y, state = chunked(
        head_major("q"),
        keys,
        head_major("v"),
        log_decay=head_major("log_decay"),
        beta=torch.ones(B, H, T, dtype=torch.float64),
        direction=head_major("low_rank_read"),
        chunk_size=4,
        written=-head_major("low_rank_write"),
    )
    torch.testing.assert_close(y.transpose(1, 2), reference(arguments), **TOL)
    torch.testing.assert_close(state, final_state(arguments), **TOL)


@pytest.mark.parametrize("decay", ["scalar", "diagonal"])
def test_the_final_state_continues_the_sequence_and_steps_decode_it(decay):
    arguments = draw(decay, seed=8)
    whole, state = seqdyn.coefficient_dynamics(**arguments, output_final_state=True)
    first = {name: value[:, :4] for name, value in arguments.items()}
    second = {name: value[:, 4:] for name, value in arguments.items()}
    y1, middle = seqdyn.coefficient_dynamics(**first, output_final_state=True, backend="chunk")
    y2, end = seqdyn.coefficient_dynamics(**second, initial_state=middle, output_final_state=True, backend="chunk")
    torch.testing.assert_close(torch.cat([y1, y2], 1), whole, **TOL)
    torch.testing.assert_close(end, state, **TOL)
    step_state, outputs = None, []
    for t in range(T):
        y, step_state = seqdyn.coefficient_dynamics_step(
            **{name: value[:, t] for name, value in arguments.items()}, state=step_state
        )
        outputs.append(y)
    torch.testing.assert_close(torch.stack(outputs, 1), whole, **TOL)
    torch.testing.assert_close(step_state, state, **TOL)


@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("backend", ["recurrent", "chunk", "auto"])
def test_packed_sequences_are_each_computed_alone(decay, backend):
    """A reset at each start zeroes the low-rank part too (``D + u zᵀ`` is 0 only with ``u = 0``)."""
    lengths = (3, 5, 2)
    parts = [draw(decay, seed=10 + n, length=length, batch=1) for n, length in enumerate(lengths)]
    packed = {name: torch.cat([part[name] for part in parts], dim=1) for name in parts[0]}
    y = seqdyn.coefficient_dynamics(**packed, cu_seqlens=torch.tensor([0, 3, 8, 10]), backend=backend)
    alone = [seqdyn.coefficient_dynamics(**part, backend="quadratic") for part in parts]
    torch.testing.assert_close(y, torch.cat(alone, dim=1), **TOL)


@pytest.mark.parametrize("backend", ["quadratic", "chunk"])
def test_the_coefficients_give_the_outputs(backend):
    arguments = draw("diagonal", seed=13)
    values = arguments.pop("v")
    matrix = seqdyn.coefficients(**arguments, backend=backend)
    y = torch.einsum("bhij,bjhv->bihv", matrix, values)
    torch.testing.assert_close(y, reference({**arguments, "v": values}), **TOL)


@pytest.mark.parametrize("normalizer", ["none", "sum"])
def test_the_dsf_has_the_low_rank_transition(normalizer):
    arguments = draw("diagonal", seed=14)
    system = seqdyn.dsf(**arguments, normalizer=normalizer)
    y = seqdyn.coefficient_dynamics(**arguments, normalizer=normalizer)
    torch.testing.assert_close(system.simulate(arguments["v"]), y, **TOL)
    if normalizer == "none":
        expected = torch.kron(transition(arguments, 2)[0, 1], torch.eye(V, dtype=torch.float64))
        torch.testing.assert_close(system.Lambda[0, 1, 2], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("decay_first", [False, True])
def test_both_orders_of_decay_and_delta_update_are_cases(decay, decay_first):
    """``D(I − βwwᵀ)`` is ``u = −βDw, z = w`` and ``(I − βwwᵀ)D`` is ``u = −βw, z = Dw``: the operator's Householder
    forms (the second as its sub-steps) equal the low-rank transition on every backend."""
    arguments = draw(decay, seed=15)
    for name in ("low_rank_write", "low_rank_read"):
        arguments.pop(name)
    gen = torch.Generator().manual_seed(16)
    beta = 2 * torch.rand(B, T, H, generator=gen, dtype=torch.float64)
    w = F.normalize(torch.randn(B, T, H, K, generator=gen, dtype=torch.float64), dim=-1)
    expected = seqdyn.coefficient_dynamics(**arguments, householder=beta, householder_dir=w, decay_first=decay_first)
    u, z = householder_as_low_rank(beta, w, arguments.get("log_decay"), decay_first)
    for backend in LINEAR_BACKENDS:
        y = seqdyn.coefficient_dynamics(**arguments, low_rank_write=u, low_rank_read=z, backend=backend)
        torch.testing.assert_close(y, expected, **TOL, msg=backend)


def test_a_decay_outside_the_readout_takes_the_low_rank_part():
    """The Forgetting Transformer's bias on a low-rank key evolution: ``α_ij ∝ exp(s_ij + Σ_{l=j+1}^{i} h_l)``."""
    arguments = draw("diagonal", seed=17)
    h = torch.log(torch.rand(B, T, H, generator=torch.Generator().manual_seed(18), dtype=torch.float64))
    y = seqdyn.coefficient_dynamics(**arguments, readout="exp", normalizer="sum", outer_log_decay=h)
    q, k, v, b = arguments["q"], arguments["k"], arguments["v"], arguments["scale"]
    expected = torch.zeros_like(y)
    for i in range(T):
        scores = []
        for j in range(i + 1):
            x = (b[:, j, :, None] * k[:, j])[..., None]
            for t in range(j + 1, i + 1):
                x = transition(arguments, t) @ x
            scores.append(torch.einsum("bhk,bhk->bh", q[:, i], x[..., 0]) + h[:, j + 1 : i + 1].sum(1))
        weights = torch.softmax(torch.stack(scores, -1), -1)  # [B, H, i+1]
        expected[:, i] = torch.einsum("bhj,bjhv->bhv", weights, v[:, : i + 1])
    torch.testing.assert_close(y, expected, **TOL)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"low_rank_read": None}, "low_rank_read: Λ = D \\+ u zᵀ needs both"),
        ({"householder": torch.ones(B, T, H, dtype=torch.float64)}, "given beside householder"),
        ({"decay_first": True}, "decay_first: Λ = D \\+ u zᵀ has no order"),
        ({"low_rank_write": torch.zeros(B, T, H, K + 1, dtype=torch.float64)}, "low_rank_write: last dimension"),
        ({"low_rank_read": torch.zeros(B, T, H, dtype=torch.float64)}, "low_rank_read: expected 4 dimensions"),
    ],
)
def test_bad_low_rank_arguments_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        seqdyn.coefficient_dynamics(**{**draw("diagonal"), **change})


def test_the_scan_backend_says_why_it_does_not_compute_it():
    with pytest.raises(ValueError, match="low-rank part"):
        seqdyn.coefficient_dynamics(**draw("diagonal"), backend="scan")


@pytest.mark.parametrize("decay", ["scalar", "diagonal"])
@pytest.mark.parametrize("backend", ["quadratic", "recurrent", "chunk"])
def test_unstable_decays_and_scales_in_log_space_rescale_the_low_rank_part_too(decay, backend):
    """The operator's stabilization (``g > 0``, ``log_scale``) rescales the state by a scalar per step: ``D − ũ zᵀ``
    as a whole, its low-rank part with its decay."""
    arguments = draw(decay, seed=19)
    arguments["log_decay"] = arguments["log_decay"] + 0.3  # some steps with g > 0
    log_scale = torch.randn(B, T, H, generator=torch.Generator().manual_seed(20), dtype=torch.float64)
    arguments.pop("scale")
    y = seqdyn.coefficient_dynamics(**arguments, log_scale=log_scale, backend=backend, chunk_size=4)
    torch.testing.assert_close(y, reference({**arguments, "scale": torch.exp(log_scale)}), **TOL)


def test_a_low_rank_part_that_makes_the_state_overflow_is_one_line_naming_it():
    arguments = {name: value.float() for name, value in draw("scalar", length=400, batch=1).items()}
    arguments["low_rank_write"] = 3.0 * arguments["low_rank_read"]  # Λ = D + 3 z zᵀ: an eigenvalue near 4
    for backend in ("recurrent", "chunk"):
        with pytest.raises(ValueError, match="low_rank_write: the low-rank part u zᵀ gives the transition"):
            seqdyn.coefficient_dynamics(**arguments, backend=backend)
    arguments["q"][0, 0, 0, 0] = float("nan")  # a non-finite input is its own trouble: no word about the transition
    out = seqdyn.coefficient_dynamics(**arguments, backend="recurrent")
    assert not torch.isfinite(out).all()
    stable = {name: value.float() for name, value in draw("scalar", length=400, batch=1).items()}
    assert torch.isfinite(seqdyn.coefficient_dynamics(**stable, backend="chunk")).all()
