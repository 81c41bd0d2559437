"""Every mixer runs from a state and returns the next one (``forward(x, state=…, return_state=True)``): a prefill
in chunks of any size, then ``step`` token by token, equals one forward over the whole sequence — values and
states, every backend the mixer accepts (issue 33, item 3)."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers

CHUNKS = (5, 1, 4)  # then 3 tokens by step: T = 13


def built(name: str):
    torch.manual_seed(0)
    return mixers.build(name, 16).double()


def _cases():
    for name in mixers.names():
        for backend in built(name).backends:
            yield name, backend


def _state_tensors(state):
    """The tensors a state holds, whatever its type (MixerState, a tensor, a cache)."""
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, (list, tuple)):
        return [t for part in state for t in _state_tensors(part)]
    if isinstance(state, dict):
        return [t for key in sorted(state) for t in _state_tensors(state[key])]
    if hasattr(state, "__dict__"):
        return _state_tensors({key: value for key, value in vars(state).items() if not key.startswith("_")})
    return []


@pytest.mark.parametrize(("name", "backend"), list(_cases()))
def test_prefill_in_chunks_then_steps_equals_one_forward(name, backend, tmp_path, monkeypatch):
    monkeypatch.setenv("SEQDYN_AUTOTUNE_CACHE", str(tmp_path))
    mixer = built(name)
    x = torch.randn(2, 13, 16, dtype=torch.float64)
    whole, whole_state = mixer(x, backend, return_state=True)
    torch.testing.assert_close(whole, mixer(x), rtol=0, atol=1e-11)
    state, outputs, start = None, [], 0
    for size in CHUNKS:
        y, state = mixer(x[:, start:start + size], backend, state=state, return_state=True)
        outputs.append(y)
        start += size
    for position in range(start, 13):
        y, state = mixer.step(x[:, position], state)
        outputs.append(y[:, None])
    torch.testing.assert_close(torch.cat(outputs, dim=1), whole, rtol=0, atol=1e-11)
    got, want = _state_tensors(state), _state_tensors(whole_state)
    assert len(got) == len(want) and got
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


def test_a_state_of_another_batch_is_one_error():
    mixer = built("gla")
    _, state = mixer(torch.randn(2, 4, 16, dtype=torch.float64), return_state=True)
    with pytest.raises(ValueError, match=r"^state: streams a batch of 2, but x_t has 3 rows"):
        mixer(torch.randn(3, 4, 16, dtype=torch.float64), state=state)


def test_state_with_packing_is_refused_for_now():
    with pytest.raises(ValueError, match=r"^state, return_state: not with cu_seqlens or attention_mask yet"):
        built("gla")(torch.randn(1, 4, 16, dtype=torch.float64), return_state=True,
                     cu_seqlens=torch.tensor([0, 2, 4]))
