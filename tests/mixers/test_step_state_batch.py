"""A streaming state serves the batch size it was started with: ``step`` with another batch size is a one-line
``ValueError`` naming the state and the fix, for every registered mixer and for the model (issue 18)."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers, tasks
from seqdyn.models import build_model
from tests.mixers.helpers import NAMES, D, small


@pytest.mark.parametrize("name", NAMES)
def test_step_with_a_state_of_another_batch_size_is_named(name):
    mixer = small(name)
    x = torch.randn(2, D, dtype=torch.float64)
    _, state = mixer.step(x, mixer.step(x, mixer.init_state(2))[1])
    for start in (state, mixer.init_state(2)):  # after some steps, and fresh
        with pytest.raises(ValueError, match=r"^state: .*init_state\(") as error:
            mixer.step(torch.randn(3, D, dtype=torch.float64), start)
        assert "\n" not in str(error.value)
    mixer.step(x, state)  # the right batch still streams


@pytest.mark.parametrize("mixer", ["gla", "s4d"])
def test_model_step_with_a_state_of_another_batch_size_is_named(mixer):
    task = tasks.build("mqar", seq_len=16, num_kv_pairs=2, vocab_size=32)
    model = build_model({"block": "gated", "short_conv": True, "mixer": mixer, "d_model": 16, "layers": 1}, task.spec)
    _, state = model.step(torch.zeros(2, dtype=torch.long), model.init_state(2))
    with pytest.raises(ValueError, match=r"^state: .*init_state\(3\)"):
        model.step(torch.zeros(3, dtype=torch.long), state)


def test_a_state_made_without_a_batch_size_streams_any_batch():
    state = mixers.base.MixerState()  # what analysis code passes to core_inputs
    mixer = small("gla")
    y, state = mixer.step(torch.randn(3, D, dtype=torch.float64), state)
    assert y.shape == (3, D) and state.batch == 3
