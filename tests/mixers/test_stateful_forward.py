"""Every mixer runs from a state and returns the next one (``forward(x, state=…, return_state=True)``): a prefill
in chunks of any size, then ``step`` token by token, equals one forward over the whole sequence — values and
states, every backend the mixer accepts (issue 33, item 3)."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from seqdyn.core.rows import tensors

CHUNKS = (5, 1, 4)  # then 3 tokens by step: T = 13


def built(name: str):
    torch.manual_seed(0)
    return mixers.build(name, 16).double()


def _cases():
    for name in mixers.names():
        for backend in built(name).backends:
            yield name, backend


@pytest.mark.parametrize(("name", "backend"), list(_cases()))
def test_prefill_in_chunks_then_steps_equals_one_forward(name, backend, tmp_path, monkeypatch):
    monkeypatch.setenv("SEQDYN_AUTOTUNE_CACHE", str(tmp_path))
    mixer = built(name)
    x = torch.randn(2, 13, 16, dtype=torch.float64)
    whole, whole_state = mixer(x, backend, return_state=True)
    torch.testing.assert_close(whole, mixer(x), rtol=0, atol=1e-11)
    state, outputs, start = None, [], 0
    for size in CHUNKS:
        y, state = mixer(x[:, start : start + size], backend, state=state, return_state=True)
        outputs.append(y)
        start += size
    for position in range(start, 13):
        y, state = mixer.step(x[:, position], state)
        outputs.append(y[:, None])
    torch.testing.assert_close(torch.cat(outputs, dim=1), whole, rtol=0, atol=1e-11)
    got, want = tensors(state), tensors(whole_state)
    assert len(got) == len(want) and got
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


def test_a_state_of_another_batch_is_one_error():
    mixer = built("gla")
    _, state = mixer(torch.randn(2, 4, 16, dtype=torch.float64), return_state=True)
    with pytest.raises(ValueError, match=r"^state: streams a batch of 2, but x_t has 3 rows"):
        mixer(torch.randn(3, 4, 16, dtype=torch.float64), state=state)


MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])  # none, left, right padding


@pytest.mark.parametrize("name", mixers.names())
def test_a_padded_prefill_leaves_each_row_the_state_of_its_tokens_alone(name):
    """A padded step is no step: the state after a right- (or left-) padded prefill is the unpadded sequence's, and
    each row continues from it as that sequence does."""
    mixer = built(name)
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    following = torch.randn(3, 4, 16, dtype=torch.float64)
    y, states = mixer(x, attention_mask=MASK, return_state=True)
    torch.testing.assert_close(y, mixer(x, attention_mask=MASK), rtol=0, atol=1e-12)
    after, _ = mixer(following, state=states, return_state=True)  # a list of states: each row from its own
    assert isinstance(states, list) and len(states) == 3
    for row in range(3):
        tokens = x[row : row + 1, MASK[row].bool()]
        _, alone = mixer(tokens, return_state=True)
        torch.testing.assert_close(
            after[row : row + 1], mixer(following[row : row + 1], state=alone), rtol=0, atol=1e-12
        )
        whole = mixer(torch.cat([tokens, following[row : row + 1]], dim=1))
        torch.testing.assert_close(after[row : row + 1], whole[:, -4:], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["gla", "softmax_attention", "s4d"])
def test_packed_sequences_return_and_take_a_state_each(name):
    mixer = built(name)
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    cu_seqlens = torch.tensor([0, 4, 5, 9])
    y, states = mixer(x, cu_seqlens=cu_seqlens, return_state=True)
    torch.testing.assert_close(y, mixer(x, cu_seqlens=cu_seqlens), rtol=0, atol=1e-12)
    more = torch.randn(1, 6, 16, dtype=torch.float64)
    continued = mixer(more, cu_seqlens=torch.tensor([0, 2, 3, 6]), state=states)
    for index, (start, end, more_start, more_end) in enumerate([(0, 4, 0, 2), (4, 5, 2, 3), (5, 9, 3, 6)]):
        whole = mixer(torch.cat([x[:, start:end], more[:, more_start:more_end]], dim=1))
        torch.testing.assert_close(continued[:, more_start:more_end], whole[:, end - start :], rtol=0, atol=1e-12)


def test_a_list_of_states_of_the_wrong_length_is_one_error():
    mixer = built("gla")
    _, states = mixer(torch.randn(2, 4, 16, dtype=torch.float64), attention_mask=torch.ones(2, 4), return_state=True)
    with pytest.raises(ValueError, match=r"^state: a list of one state per sequence needs 3, got 2"):
        mixer(torch.randn(3, 4, 16, dtype=torch.float64), state=states)
