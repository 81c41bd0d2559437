"""Packed sequences (``cu_seqlens``, :mod:`seqdyn.core.packing`): every backend and readout computes each
sequence as if alone — outputs, final states and every gradient, the initial states' included — in float64."""

from __future__ import annotations

import pytest
import torch

import seqdyn
from seqdyn.core import operator
from seqdyn.core.backends import REGISTRY
from tests.core.cases import (
    STATE_COMBOS,
    _state,
    all_combinations,
    assert_close,
    build,
    call,
    flatten,
    random_case,
    supported,
)

LENGTHS = (5, 1, 9, 3)  # boundaries inside and at the edges of chunks of 4; a sequence of one step
CU_SEQLENS = torch.tensor([0, 5, 6, 15, 18])


def _packed_case(combo, seed: int):
    """Leaves of one packed batch ``[1, 18, …]`` and initial states of the four sequences ``[4, …]``."""
    case = random_case(*combo, seed=seed, batch=1, length=sum(LENGTHS), chunk_size=4, with_state=False)
    leaves, options = build(case)
    states = _state(
        random_case(*combo, seed=seed, batch=len(LENGTHS), with_state=True),
        torch.Generator().manual_seed(seed),
        torch.float64,
    )
    if "state_keys" in states:  # a key cache per sequence (their sizes may differ): one entry each
        states = {f"{name}_{n}": value[n : n + 1].clone() for name, value in states.items() for n in range(4)}
    for value in states.values():
        value.requires_grad_(True)
    return case, leaves, options, states


def _initial_state(states: dict, readout: str):
    if readout != "identity":
        return [(states[f"state_keys_{n}"], states[f"state_values_{n}"]) for n in range(len(LENGTHS))]
    return (states["state_S"], states["state_z"]) if "state_z" in states else states["state_S"]


def _one_sequence(states: dict, index: int, readout: str) -> dict:
    if readout != "identity":
        return {"state_keys": states[f"state_keys_{index}"], "state_values": states[f"state_values_{index}"]}
    return {name: value[index : index + 1] for name, value in states.items()}


@pytest.mark.parametrize(
    "combo,backend",
    [(c, b) for c in STATE_COMBOS for b in [*REGISTRY, "auto"] if b == "auto" or supported(c, b)],
    ids=lambda x: x if isinstance(x, str) else "-".join(x),
)
def test_a_packed_batch_equals_each_sequence_alone_with_states_and_gradients(combo, backend, tmp_path, monkeypatch):
    monkeypatch.setenv("SEQDYN_AUTOTUNE_CACHE", str(tmp_path))
    readout = combo[0]
    case, leaves, options, states = _packed_case(combo, seed=11)
    inputs = dict(leaves)
    q, k, v = inputs.pop("q"), inputs.pop("k"), inputs.pop("v")
    packed, final = seqdyn.coefficient_dynamics(
        q,
        k,
        v,
        initial_state=_initial_state(states, readout),
        output_final_state=True,
        backend=backend,
        chunk_size=4,
        cu_seqlens=CU_SEQLENS,
        **inputs,
        **options,
    )
    outputs, finals = [], []
    for index, (start, end) in enumerate(zip(CU_SEQLENS.tolist(), CU_SEQLENS[1:].tolist())):
        alone = {name: value[:, start:end] for name, value in leaves.items()}
        y, state = call(
            alone | _one_sequence(states, index, readout),
            options,
            "quadratic" if readout != "identity" else "recurrent",
        )
        outputs.append(y)
        finals.append(state)
    expected = torch.cat(outputs, dim=1)
    expected_final = finals if readout != "identity" else [torch.cat(parts) for parts in zip(*map(flatten, finals))]
    assert_close(packed, expected, 1e-10, "outputs")
    got_final = flatten(final)
    want_final = flatten(expected_final)
    assert len(got_final) == len(want_final)
    for got, want in zip(got_final, want_final):
        assert_close(got, want, 1e-10, "final states")
    weights = [torch.randn_like(t) for t in (expected, *want_final)]
    wrt = [*leaves.values(), *states.values()]
    loss = lambda outs: sum((w * t).sum() for w, t in zip(weights, outs))  # noqa: E731
    grads = torch.autograd.grad(loss([packed, *got_final]), wrt, allow_unused=True)
    expected_grads = torch.autograd.grad(loss([expected, *want_final]), wrt, allow_unused=True)
    for name, got, want in zip([*leaves, *states], grads, expected_grads):
        if want is None:
            assert got is None or got.abs().max() == 0, name
        else:
            assert_close(got, want, 1e-10, f"gradient of {name}")


@pytest.mark.parametrize("readout", ["identity", "exp"])
def test_packed_coefficients_are_block_diagonal_and_reproduce_the_outputs(readout):
    case = random_case(readout, "scalar", "none", "sum", seed=3, batch=1, length=18, with_state=False)
    leaves, options = build(case)
    inputs = {name: value.detach() for name, value in leaves.items()}
    q, k, v = inputs.pop("q"), inputs.pop("k"), inputs.pop("v")
    A = seqdyn.coefficients(q, k, cu_seqlens=CU_SEQLENS, **inputs, **options)
    assert A.shape == (1, q.shape[2], 18, 18)
    sequence = torch.repeat_interleave(torch.arange(4), torch.tensor(LENGTHS))
    across = sequence[:, None] != sequence[None, :]
    assert A[..., across].abs().max() == 0  # no coefficient crosses a boundary
    for start, end in zip(CU_SEQLENS.tolist(), CU_SEQLENS[1:].tolist()):
        alone = seqdyn.coefficients(
            q[:, start:end], k[:, start:end], **{n: x[:, start:end] for n, x in inputs.items()}, **options
        )
        assert_close(A[..., start:end, start:end], alone, 1e-12, "block")
    y = seqdyn.coefficient_dynamics(q, k, v, cu_seqlens=CU_SEQLENS, **inputs, **options)
    assert_close(torch.einsum("bhij,bjhv->bihv", A, v.expand(-1, -1, A.shape[1], -1)), y, 1e-12, "A @ v")


def test_select_backend_takes_cu_seqlens():
    q = torch.randn(1, 18, 2, 4)
    choice = seqdyn.select_backend(q, q, q, backend="chunk", cu_seqlens=CU_SEQLENS)
    assert choice == "chunk"


BAD = {
    "floats": (torch.tensor([0.0, 5.0, 18.0]), "cu_seqlens: expected an int32 or int64 tensor of offsets [N + 1]"),
    "a list": ([0, 5, 18], "cu_seqlens: expected an int32 or int64 tensor of offsets [N + 1]"),
    "one offset": (torch.tensor([0]), "cu_seqlens: expected an int32 or int64 tensor of offsets [N + 1]"),
    "two dims": (torch.tensor([[0, 18]]), "cu_seqlens: expected an int32 or int64 tensor of offsets [N + 1]"),
    "not from 0": (torch.tensor([1, 5, 18]), "cu_seqlens: must start at 0, got 1"),
    "not increasing": (torch.tensor([0, 9, 5, 18]), "cu_seqlens: must increase strictly"),
    "an empty sequence": (torch.tensor([0, 5, 5, 18]), "cu_seqlens: must increase strictly"),
    "short of T": (torch.tensor([0, 5, 17]), "cu_seqlens: must end at the packed length T = 18, got 17"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_cu_seqlens_is_one_error_naming_it(case):
    offsets, message = BAD[case]
    q = torch.randn(1, 18, 2, 4)
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("]", r"\]").replace("+", r"\+")):
        seqdyn.coefficient_dynamics(q, q, q, cu_seqlens=offsets)


def test_a_packed_batch_has_batch_size_one_and_every_field_its_length():
    q = torch.randn(2, 18, 2, 4)
    with pytest.raises(ValueError, match=r"^cu_seqlens: a packed batch has batch size 1 .* got batch size 2"):
        seqdyn.coefficient_dynamics(q, q, q, cu_seqlens=CU_SEQLENS)
    q = torch.randn(1, 18, 2, 4)
    with pytest.raises(ValueError, match=r"^log_decay: a packed batch is \[1, T, …\] with T = 18 .* \[1, 17, 2\]"):
        seqdyn.coefficient_dynamics(q, q, q, log_decay=torch.zeros(1, 17, 2), cu_seqlens=CU_SEQLENS)


def test_a_key_cache_state_per_sequence_must_be_a_list_of_one_per_sequence():
    q = torch.randn(1, 18, 2, 4)
    cache = (torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"^initial_state: with cu_seqlens and the exp readout, a list of 4 key"):
        seqdyn.coefficient_dynamics(q, q, q, readout="exp", initial_state=[cache], cu_seqlens=CU_SEQLENS)


@pytest.mark.parametrize("readout, normalizer", [("identity", "none"), ("exp", "sum")])
def test_packed_sequences_decode_a_token_each_from_their_states(readout, normalizer):
    """After a packed prefill, one step with ``cu_seqlens`` [0, 1, …, N] continues every sequence from its own
    state — a tensor ``[N, …]`` for a linear readout, a list of key caches of different lengths for softmax."""
    generator = torch.Generator().manual_seed(3)

    def randn(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    q, k, v, g = randn(1, 18, 2, 4), randn(1, 18, 2, 4), randn(1, 18, 2, 3), -randn(1, 18, 2).exp()
    options = dict(readout=readout, normalizer=normalizer, log_decay=g if readout == "identity" else None)
    _, states = seqdyn.coefficient_dynamics(q, k, v, cu_seqlens=CU_SEQLENS, output_final_state=True, **options)
    assert isinstance(states, list) == (readout != "identity")
    q1, k1, v1, g1 = randn(4, 2, 4), randn(4, 2, 4), randn(4, 2, 3), -randn(4, 2).exp()
    step_options = dict(options, log_decay=g1 if readout == "identity" else None)
    y1, after = seqdyn.coefficient_dynamics_step(q1, k1, v1, state=states, cu_seqlens=torch.arange(5), **step_options)
    for index, (start, end) in enumerate(zip(CU_SEQLENS.tolist(), CU_SEQLENS[1:].tolist())):
        whole = {
            name: torch.cat([x[:, start:end], x1[index : index + 1, None]], dim=1)
            for name, x, x1 in [("q", q, q1), ("k", k, k1), ("v", v, v1), ("g", g, g1)]
        }
        alone = seqdyn.coefficient_dynamics(
            whole["q"],
            whole["k"],
            whole["v"],
            readout=readout,
            normalizer=normalizer,
            log_decay=whole["g"] if readout == "identity" else None,
        )
        torch.testing.assert_close(y1[index], alone[0, -1], rtol=0, atol=1e-12)
    assert isinstance(after, list) == (readout != "identity")
    with pytest.raises(ValueError, match=r"cu_seqlens: one step takes one token of each sequence"):
        seqdyn.coefficient_dynamics_step(q1, k1, v1, state=states, cu_seqlens=torch.tensor([0, 2, 4]), **step_options)


RESET_CASES = [
    (combo, backend)
    for combo in all_combinations()
    for backend in ("chunk", "scan")
    if combo[0] == "identity"
    and supported(combo, backend)
    and not (backend == "chunk" and combo[1].startswith("diagonal"))
]


@pytest.mark.parametrize("combo,backend", RESET_CASES, ids=lambda x: x if isinstance(x, str) else "-".join(x))
def test_without_states_packed_sequences_run_as_one_with_resets_and_no_padding(combo, backend, monkeypatch):
    """The identity readout without states: ``chunk`` (scalar decays) and ``scan`` compute the packed steps as one
    sequence with a hard reset at each start — nothing side by side, so no padded step — and give each sequence's
    own outputs and gradients (the chunks of 4 hold several sequences)."""
    case = random_case(*combo, seed=5, batch=1, length=sum(LENGTHS), chunk_size=4, with_state=False)
    leaves, options = build(case)
    inputs = dict(leaves)
    q, k, v = inputs.pop("q"), inputs.pop("k"), inputs.pop("v")
    expected = torch.cat(
        [
            call({name: value[:, start:end] for name, value in leaves.items()}, options, "recurrent", want_state=False)
            for start, end in zip(CU_SEQLENS.tolist(), CU_SEQLENS[1:].tolist())
        ],
        dim=1,
    )
    monkeypatch.setattr(operator, "dynamics_side_by_side", lambda *args: pytest.fail("packed sequences were padded"))
    packed = seqdyn.coefficient_dynamics(
        q, k, v, backend=backend, chunk_size=4, cu_seqlens=CU_SEQLENS, **inputs, **options
    )
    assert_close(packed, expected, 1e-10, "outputs")
    weights = torch.randn_like(expected)
    grads = torch.autograd.grad((weights * packed).sum(), list(leaves.values()), allow_unused=True)
    expected_grads = torch.autograd.grad((weights * expected).sum(), list(leaves.values()), allow_unused=True)
    for name, got, want in zip(leaves, grads, expected_grads):
        if want is not None:
            assert_close(got, want, 1e-10, f"gradient of {name}")
