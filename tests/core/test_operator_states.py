"""State passing: two halves equal one whole; the streaming step equals the ``recurrent`` backend."""

from __future__ import annotations

import pytest
import torch

import seqdyn
from seqdyn.core.backends import REGISTRY
from tests.core.cases import STATE_COMBOS, assert_close, build, call, flatten, random_case, supported


def _split(leaves: dict, start: int, stop: int) -> dict:
    return {n: (x if n.startswith("state_") else x[:, start:stop]) for n, x in leaves.items()}


def _as_leaves(state, readout: str, normalizer: str) -> dict:
    if readout != "identity":
        return {"state_keys": state[0], "state_values": state[1]}
    if normalizer in ("sum", "abs_max1"):
        return {"state_S": state[0], "state_z": state[1]}
    return {"state_S": state}


@pytest.mark.parametrize(
    "combo,backend",
    [(c, b) for c in STATE_COMBOS for b in REGISTRY if supported(c, b)],
    ids=lambda x: x if isinstance(x, str) else "-".join(x),
)
def test_two_halves_with_state_passing_equal_the_whole(combo, backend):
    case = random_case(*combo, seed=7, length=13, with_state=True, chunk_size=4)
    leaves, options = build(case)
    whole, whole_state = call(leaves, options, backend)
    first, state = call(_split(leaves, 0, 6), options, backend)
    rest = {n: x for n, x in _split(leaves, 6, 13).items() if not n.startswith("state_")}
    second, second_state = call(rest | _as_leaves(state, combo[0], combo[3]), options, backend)
    assert_close(torch.cat([first, second], dim=1), whole, 1e-10, "outputs")
    for got, want in zip(flatten(second_state), flatten(whole_state)):
        assert_close(got, want, 1e-10, "final state")


@pytest.mark.parametrize("combo", STATE_COMBOS, ids="-".join)
def test_single_step_function_equals_recurrent(combo):
    case = random_case(*combo, seed=8, length=9, with_state=False)
    leaves, options = build(case)
    whole, whole_state = call(leaves, options, "recurrent")
    state = None
    outputs = []
    for t in range(case.length):
        token = {n: x[:, t] for n, x in leaves.items()}
        y, state = seqdyn.coefficient_dynamics_step(
            token.pop("q"), token.pop("k"), token.pop("v"), state, **token, **options
        )
        outputs.append(y)
    assert_close(torch.stack(outputs, dim=1), whole, 1e-12, "step outputs")
    for got, want in zip(flatten(state), flatten(whole_state)):
        assert_close(got, want, 1e-12, "step state")


def test_step_rejects_sequence_layouts():
    q = torch.randn(2, 5, 3, 4)
    with pytest.raises(ValueError, match=r"q: one step expects \[B, H, K\]"):
        seqdyn.coefficient_dynamics_step(q, q, q)


def test_nonlinear_state_is_a_growing_cache_of_transformed_keys():
    """Seed 001 Lemma 1: no finite state for exp; the cache holds Λ_T ⋯ Λ_{j+1} b_j k_j for every j."""
    case = random_case("exp", "scalar", "none", "sum", seed=9, length=6, with_state=False, heads=1, batch=1)
    leaves, options = build(case)
    _, (keys, values) = call(leaves, options, "recurrent")
    assert keys.shape[2] == values.shape[2] == 6
    g = leaves["log_decay"].detach()[0, :, 0]
    scale = leaves["scale"].detach()[0, :, 0] if "scale" in leaves else (options.get("scale") or case.key_dim**-0.5)
    k = leaves["k"].detach()[0, :, 0]
    for j in range(6):
        expected = torch.exp(g[j + 1 :].sum()) * (scale[j] if torch.is_tensor(scale) else scale) * k[j]
        assert_close(keys[0, 0, j], expected, 1e-12, f"cached key {j}")
