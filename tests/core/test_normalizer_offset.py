"""A term added to the normalizer, ``η_t = max(|Σ_j α_tj|, 1) + ε_t`` (xLSTM 7B's ``ε·e^{m_t}``) or ``Σ_j α_tj + ε_t``,
on every backend, with states, packed sequences, one step at a time, the coefficients and the DSF, against the
recurrence written out in float64."""

from __future__ import annotations

import pytest
import torch

import seqdyn
from seqdyn.core.dsf import dsf

B, T, H, K, V = 2, 11, 2, 3, 2
TOL = dict(rtol=1e-10, atol=1e-10)
BACKENDS = ("quadratic", "recurrent", "chunk", "scan", "auto")


def draw(seed: int = 0, length: int = T, batch: int = B) -> dict:
    """mLSTM's arguments: a scalar forget gate, an input gate in log space up to e^6, and ε_t in (e^-3, e^3)."""
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    return dict(
        q=randn(batch, length, H, K),
        k=randn(batch, length, H, K),
        v=randn(batch, length, H, V),
        log_decay=torch.nn.functional.logsigmoid(randn(batch, length, H) + 2),
        log_scale=2 * randn(batch, length, H),
        normalizer_log_offset=randn(batch, length, H),
    )


def reference(arguments: dict, normalizer: str, initial=None):
    """``S_t = f_t S_{t−1} + e^{ℓ_t} k_t v_tᵀ``, ``z_t = f_t z_{t−1} + e^{ℓ_t} k_t``, ``y_t = q_tᵀ S_t / η_t``
    with ``η_t = max(|q_tᵀ z_t|, 1) + ε_t`` or ``q_tᵀ z_t + ε_t``: ``(y, (S_T, z_T))``."""
    q, k, v, g, ell, offset = arguments.values()
    batch, length = q.shape[:2]
    state, norm = (
        (torch.zeros(batch, H, K, V, dtype=q.dtype), torch.zeros(batch, H, K, dtype=q.dtype))
        if initial is None
        else initial
    )
    outputs = []
    for t in range(length):
        decay, weight = torch.exp(g[:, t])[..., None], torch.exp(ell[:, t])[..., None]
        state = decay[..., None] * state + (weight * k[:, t])[..., None] * v[:, t, :, None, :]
        norm = decay * norm + weight * k[:, t]
        mass = torch.einsum("bhk,bhk->bh", q[:, t], norm)
        eta = (mass.abs().clamp(min=1.0) if normalizer == "abs_max1" else mass) + torch.exp(offset[:, t])
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t], state) / eta[..., None])
    return torch.stack(outputs, dim=1), (state, norm)


def initial_state(seed: int, batch: int = B):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, H, K, V, generator=gen, dtype=torch.float64), torch.randn(
        batch, H, K, generator=gen, dtype=torch.float64
    )


@pytest.mark.parametrize("normalizer", ["abs_max1", "sum"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_adds_the_offset_to_the_normalizer(backend, normalizer):
    arguments, initial = draw(1), initial_state(2)
    y, (state, norm) = seqdyn.coefficient_dynamics(
        **arguments,
        normalizer=normalizer,
        initial_state=initial,
        output_final_state=True,
        backend=backend,
        chunk_size=4,
    )
    expected, (expected_state, expected_norm) = reference(arguments, normalizer, initial)
    torch.testing.assert_close(y, expected, **TOL)
    torch.testing.assert_close(state, expected_state, **TOL)
    torch.testing.assert_close(norm, expected_norm, **TOL)


def test_the_offset_changes_the_outputs():
    """The offset is not lost on the way: without it, the outputs differ from the recurrence with it."""
    arguments = draw(3)
    without = seqdyn.coefficient_dynamics(**{**arguments, "normalizer_log_offset": None}, normalizer="abs_max1")
    assert (without - reference(arguments, "abs_max1")[0]).abs().max() > 1e-2


@pytest.mark.parametrize("backend", ["chunk", "recurrent", "quadratic"])
def test_gradients_agree_with_the_recurrence(backend):
    leaves = {name: value.clone().requires_grad_() for name, value in draw(4).items()}
    y = seqdyn.coefficient_dynamics(**leaves, normalizer="abs_max1", backend=backend, chunk_size=4)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    grads = torch.autograd.grad((y * weights).sum(), list(leaves.values()))
    expected = torch.autograd.grad((reference(leaves, "abs_max1")[0] * weights).sum(), list(leaves.values()))
    for name, got, want in zip(leaves, grads, expected):
        torch.testing.assert_close(got, want, **TOL, msg=name)


def test_one_step_at_a_time_is_the_recurrence():
    arguments = draw(6)
    state, outputs = None, []
    for t in range(T):
        token = {name: value[:, t] for name, value in arguments.items()}
        y, state = seqdyn.coefficient_dynamics_step(**token, state=state, normalizer="abs_max1")
        outputs.append(y)
    torch.testing.assert_close(torch.stack(outputs, dim=1), reference(arguments, "abs_max1")[0], **TOL)


@pytest.mark.parametrize("backend", ["recurrent", "chunk", "scan", "auto"])
def test_packed_sequences_each_have_their_own_offsets(backend):
    lengths = (4, 6, 1)
    parts = [draw(10 + n, length=length, batch=1) for n, length in enumerate(lengths)]
    packed = {name: torch.cat([part[name] for part in parts], dim=1) for name in parts[0]}
    cu_seqlens = torch.tensor([0, 4, 10, 11])
    y = seqdyn.coefficient_dynamics(**packed, normalizer="abs_max1", cu_seqlens=cu_seqlens, backend=backend)
    expected = torch.cat([reference(part, "abs_max1")[0] for part in parts], dim=1)
    torch.testing.assert_close(y, expected, **TOL)


def test_coefficients_and_dsf_carry_the_offset():
    arguments = draw(7, length=6)
    expected = reference(arguments, "abs_max1")[0]
    options = {name: value for name, value in arguments.items() if name != "v"}
    matrix = seqdyn.coefficients(**options, normalizer="abs_max1")
    torch.testing.assert_close(torch.einsum("bhij,bjhv->bihv", matrix, arguments["v"]), expected, **TOL)
    realization = dsf(**arguments, normalizer="abs_max1")
    torch.testing.assert_close(realization.apply(arguments["v"]), expected, **TOL)


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(normalizer="none"), "normalizer='none'"),
        (dict(normalizer="abs_max1", readout="exp"), "readout='exp'"),
    ],
)
def test_an_offset_without_a_named_normalizer_of_the_identity_readout_is_refused(options, words):
    arguments = draw(8)
    with pytest.raises(ValueError, match="normalizer_log_offset") as error:
        seqdyn.coefficient_dynamics(**arguments, **options)
    assert words in str(error.value)


def test_an_offset_of_the_wrong_shape_is_refused():
    arguments = draw(9)
    with pytest.raises(ValueError, match=r"normalizer_log_offset: expected 3 dimensions"):
        seqdyn.coefficient_dynamics(
            **{**arguments, "normalizer_log_offset": arguments["normalizer_log_offset"][..., None]},
            normalizer="abs_max1",
        )
