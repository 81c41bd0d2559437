"""A bonus for the current token (RWKV-5/6): the output reads the state before the token's step and adds the token
through ``Diag(u)``, on every backend against the recurrence written out, in float64."""

from __future__ import annotations

import pytest
import torch

import seqdyn

B, T, H, K, V = 2, 9, 2, 3, 2
TOL = dict(rtol=1e-10, atol=1e-10)
BACKENDS = ("quadratic", "recurrent", "chunk", "scan", "auto")


def draw(seed: int = 0, length: int = T, batch: int = B, per_step: bool = False) -> dict:
    """RWKV-6's arguments: a diagonal decay in (0.5, 1), a bonus u per head (or per step), a scale per step."""
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    rand = lambda *shape: torch.rand(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    return dict(
        q=randn(batch, length, H, K),
        k=randn(batch, length, H, K),
        v=randn(batch, length, H, V),
        log_decay=torch.log(0.5 + 0.5 * rand(batch, length, H, K)),
        bonus=randn(batch, length, H, K) if per_step else randn(H, K),
        scale=rand(batch, length, H) + 0.5,
    )


def reference(arguments: dict, initial=None):
    """``y_t = q_tᵀ (S_{t−1} + Diag(u) b_t k_t v_tᵀ)``, ``S_t = Diag(e^{g_t}) S_{t−1} + b_t k_t v_tᵀ``: ``(y, S_T)``."""
    q, k, v, g, b = (arguments[name] for name in ("q", "k", "v", "log_decay", "scale"))
    u = arguments["bonus"]
    batch, length = q.shape[:2]
    state = torch.zeros(batch, H, K, V, dtype=torch.float64) if initial is None else initial
    outputs = []
    for t in range(length):
        written = (b[:, t, :, None] * k[:, t])[..., None] * v[:, t, :, None, :]  # b_t k_t v_tᵀ [B, H, K, V]
        bonus = u if u.dim() == 2 else u[:, t]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], state + bonus[..., None] * written))
        state = torch.exp(g[:, t])[..., None] * state + written
    return torch.stack(outputs, dim=1), state


@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_reads_the_state_before_the_step_and_adds_the_bonus(backend, per_step):
    arguments = draw(1, per_step=per_step)
    initial = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    y, state = seqdyn.coefficient_dynamics(
        **arguments, initial_state=initial, output_final_state=True, backend=backend, chunk_size=4
    )
    expected, expected_state = reference(arguments, initial)
    torch.testing.assert_close(y, expected, **TOL)
    torch.testing.assert_close(state, expected_state, **TOL)


def test_gradients_agree_with_the_recurrence():
    leaves = {name: value.clone().requires_grad_() for name, value in draw(3).items()}
    y = seqdyn.coefficient_dynamics(**leaves, backend="chunk", chunk_size=4)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    grads = torch.autograd.grad((y * weights).sum(), list(leaves.values()))
    expected = torch.autograd.grad((reference(leaves)[0] * weights).sum(), list(leaves.values()))
    for name, got, want in zip(leaves, grads, expected):
        torch.testing.assert_close(got, want, **TOL, msg=name)


@pytest.mark.parametrize("backend", ["recurrent", "chunk", "scan", "auto"])
def test_packed_sequences_each_start_from_their_own_state(backend):
    """Each first token reads its own sequence's initial state (or none): the shifted query never reads the
    sequence before."""
    lengths = (3, 5, 1)
    parts = [draw(10 + n, length=length, batch=1, per_step=True) for n, length in enumerate(lengths)]
    packed = {name: torch.cat([part[name] for part in parts], dim=1) for name in parts[0]}
    cu_seqlens = torch.tensor([0, 3, 8, 9])
    y = seqdyn.coefficient_dynamics(**packed, cu_seqlens=cu_seqlens, backend=backend)
    torch.testing.assert_close(y, torch.cat([reference(part)[0] for part in parts], dim=1), **TOL)
    initial = torch.randn(3, H, K, V, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    y, states = seqdyn.coefficient_dynamics(
        **packed, cu_seqlens=cu_seqlens, initial_state=initial, output_final_state=True, backend=backend
    )
    alone = [reference(part, initial[n : n + 1]) for n, part in enumerate(parts)]
    torch.testing.assert_close(y, torch.cat([out for out, _ in alone], dim=1), **TOL)
    torch.testing.assert_close(states, torch.cat([state for _, state in alone]), **TOL)


def test_steps_decode_the_sequence():
    arguments = draw(6)
    whole, final = seqdyn.coefficient_dynamics(**arguments, output_final_state=True)
    state, outputs = None, []
    for t in range(T):
        token = {name: value if name == "bonus" else value[:, t] for name, value in arguments.items()}
        y, state = seqdyn.coefficient_dynamics_step(**token, state=state)
        outputs.append(y)
    torch.testing.assert_close(torch.stack(outputs, dim=1), whole, **TOL)
    torch.testing.assert_close(state, final, **TOL)


def test_the_coefficients_carry_the_bonus_on_the_diagonal():
    arguments = draw(7)
    values = arguments.pop("v")
    matrix = seqdyn.coefficients(**arguments)
    q, k, b, u = arguments["q"], arguments["k"], arguments["scale"], arguments["bonus"]
    diagonal = torch.einsum("bthk,hk,bthk->bht", q, u, k) * b.transpose(1, 2)
    torch.testing.assert_close(torch.diagonal(matrix, dim1=-2, dim2=-1), diagonal, **TOL)
    expected = reference({**arguments, "v": values})[0]
    torch.testing.assert_close(torch.einsum("bhij,bjhv->bihv", matrix, values), expected, **TOL)


def test_the_dsf_keeps_the_state_before_the_step():
    """``[h_i; h_{i−1}]``: the DSF simulated and as a kernel equals the operator, its feedthrough is the bonus."""
    arguments = draw(8)
    system = seqdyn.dsf(**arguments)
    y = reference(arguments)[0]
    torch.testing.assert_close(system.simulate(arguments["v"]), y, **TOL)
    torch.testing.assert_close(system.apply(arguments["v"]), y, **TOL)
    assert system.Lambda.shape[-1] == 2 * K * V


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bonus": torch.zeros(H, K + 1, dtype=torch.float64)}, "bonus: last dimension"),
        ({"bonus": torch.zeros(K, dtype=torch.float64)}, r"bonus: expected u as \[H, K\]"),
        ({"normalizer": "sum"}, "bonus: taken with the identity readout and normalizer='none'"),
        ({"readout": "exp"}, "not readout='exp'"),
        ({"decay_first": True}, "bonus: not taken with several Householder factors per step, decay_first"),
        ({"log_decay": None}, "bonus: given without log_decay"),
    ],
)
def test_bad_bonus_arguments_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        seqdyn.coefficient_dynamics(**{**draw(), **change})


@pytest.mark.parametrize("backend", ["quadratic", "chunk", "scan"])
def test_unstable_decays_and_scales_in_log_space_take_the_bonus(backend):
    arguments = draw(9)
    arguments["log_decay"] = arguments["log_decay"] + 0.3
    log_scale = torch.randn(B, T, H, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    arguments.pop("scale")
    y = seqdyn.coefficient_dynamics(**arguments, log_scale=log_scale, backend=backend, chunk_size=4)
    torch.testing.assert_close(y, reference({**arguments, "scale": torch.exp(log_scale)})[0], **TOL)
