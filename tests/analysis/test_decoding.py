"""Decoding token by token (``seqdyn.analysis.decoding``): the state's bytes, the decode profile and the distance
between the recurrent and the parallel forms."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from seqdyn import tasks
from seqdyn.analysis.decoding import decode_profile, random_tokens, state_bytes, step_error
from seqdyn.models import build_model


@dataclass
class Nested:
    a: torch.Tensor
    rest: list


def test_state_bytes_walks_dataclasses_lists_tuples_and_dicts():
    state = Nested(
        torch.zeros(3, dtype=torch.float32),
        [torch.zeros(2, 2, dtype=torch.float64), {"x": (torch.zeros(5, dtype=torch.int8), None)}, 7],
    )
    assert state_bytes(state) == 3 * 4 + 4 * 8 + 5


def model(mixer: str, **options):
    torch.manual_seed(0)
    task = tasks.build("mqar", seq_len=16, num_kv_pairs=2, vocab_size=32)
    return build_model(
        {"d_model": 16, "layers": 2, "mlp": "none", "positions": False, "mixer": mixer, "mixer_options": options}, task
    ).eval()


def test_a_recurrent_state_stays_the_same_size_and_a_key_cache_grows():
    tokens = random_tokens(32, 64)
    linear = decode_profile(model("linear_attention", heads=2), tokens, (16, 32, 64), window=8)
    softmax = decode_profile(model("softmax_attention", heads=2, rotary=True), tokens, (16, 32, 64), window=8)
    assert [p.length for p in linear] == [16, 32, 64]
    assert len({p.state_bytes for p in linear}) == 1 and linear[0].state_bytes > 0
    sizes = [p.state_bytes for p in softmax]
    assert sizes[1] == 2 * sizes[0] and sizes[2] == 4 * sizes[0]  # every key and value kept: linear in the context
    assert all(p.seconds_per_token > 0 for p in linear + softmax)


@pytest.mark.parametrize(
    "mixer,options", [("mamba2", {"state_dim": 4, "head_dim": 8}), ("softmax_attention", {"heads": 2, "rotary": True})]
)
def test_step_error_is_round_off_for_a_model_and_large_for_another(mixer, options):
    tokens = random_tokens(32, 24, batch=2)
    assert step_error(model(mixer, **options), tokens) < 1e-5

    class Shifted(torch.nn.Module):  # a "recurrent form" that is off by one position: the error must see it
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

        def init_state(self, batch):
            return self.inner.init_state(batch)

        def step(self, x_t, state):
            return self.inner.step((x_t + 1) % 32, state)

    assert step_error(Shifted(model(mixer, **options)), tokens) > 1e-2


def test_decode_profile_checks_its_lengths():
    with pytest.raises(ValueError, match="lengths"):
        decode_profile(model("linear_attention"), random_tokens(32, 16), (8, 32), window=4)
