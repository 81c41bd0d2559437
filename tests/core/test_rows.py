"""Rows of a streaming state (``seqdyn.core.rows``): beam search reorders them, sampling several continuations
repeats them. Selecting rows of a state and continuing equals continuing those rows of the inputs — every mixer,
and a model."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from seqdyn.core.rows import count_rows, repeat_rows, select_rows, tensors
from seqdyn.models import build_model
from tests.models.helpers import config, inputs, spec

ORDER = torch.tensor([2, 0, 2, 1])  # reordered, one row twice, as beam search does


@pytest.mark.parametrize("name", mixers.names())
def test_a_mixers_selected_rows_continue_as_those_rows_do(name):
    torch.manual_seed(0)
    mixer = mixers.build(name, 16).double()
    x = torch.randn(3, 9, 16, dtype=torch.float64)
    _, state = mixer(x[:, :6], state=mixer.init_state(3), return_state=True)
    assert count_rows(state) == 3 and tensors(state)
    after = mixer(x[ORDER, 6:], state=select_rows(state, ORDER))
    torch.testing.assert_close(after, mixer(x[:, 6:], state=state)[ORDER], rtol=0, atol=1e-12)


def test_a_models_repeated_rows_continue_as_the_repeated_inputs():
    torch.manual_seed(0)
    model = build_model(
        config(mixer=["gated_deltanet", "softmax_attention"], block="gated", short_conv=True), spec(input_len=12)
    ).double()
    tokens = inputs(spec(input_len=12), batch=2)
    _, state = model(tokens[:, :7], return_state=True)
    twice = repeat_rows(state, 2, batch=2)
    assert count_rows(twice) == 4
    after = model(tokens.repeat_interleave(2, dim=0)[:, 7:], state=twice)
    torch.testing.assert_close(after, model(tokens[:, 7:], state=state).repeat_interleave(2, dim=0), rtol=0, atol=1e-12)


def test_bad_rows_are_named():
    with pytest.raises(ValueError, match="index: expected the rows as a 1-D"):
        select_rows(torch.zeros(2, 3), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="repeats: expected a positive int"):
        repeat_rows(torch.zeros(2, 3), 0, batch=2)
