"""seeds 003/004 (``seqdyn.reproduce.duality_decoding``): each claim on hand-made measurements where it must hold,
must fail and must be inconclusive; the peak memory a decoding pass adds."""

from __future__ import annotations

import pytest
import torch

from seqdyn import tasks
from seqdyn.analysis.decoding import decode_profile, random_tokens
from seqdyn.bench.measure import _READ_RSS
from seqdyn.models import build_model
from seqdyn.reproduce import duality_decoding as decoding
from seqdyn.reproduce.claims import FAILED, HELD, INCONCLUSIVE
from tests.reproduce.helpers import assert_verdict, results, row

STATE, ERROR = decoding.STATE, decoding.ERROR


def table(state: dict[str, tuple[int, int]], error: dict[str, float], missing: str | None = None):
    """One row per model: its state bytes at contexts 256 and 4096 and its step error; ``missing`` gave none."""
    rows = []
    for mixer in decoding.MODELS:
        measured = (
            {}
            if mixer == missing
            else {f"{STATE}.256": state[mixer][0], f"{STATE}.4096": state[mixer][1], ERROR: error[mixer]}
        )
        rows.append({**row(0.5, model__mixer=mixer, status="finished" if mixer != missing else "failed"), **measured})
    return results(rows)


def verdicts(data) -> list[str]:
    return [claim.decide(data).verdict for claim in decoding.CLAIMS]


FIXED = {
    "softmax_attention": (1000, 16_000),
    "linear_attention": (500, 500),
    "mamba2": (700, 700),
    "gated_deltanet": (300, 300),
}
SMALL = dict.fromkeys(decoding.MODELS, 1e-7)


def test_constant_recurrent_states_and_a_growing_cache_hold():
    assert verdicts(table(FIXED, SMALL)) == [HELD] * 3


def test_the_opposite_fails():
    grown = {
        "softmax_attention": (1000, 1000),
        "linear_attention": (500, 8000),
        "mamba2": (700, 700),
        "gated_deltanet": (300, 300),
    }
    assert verdicts(table(grown, {**SMALL, "mamba2": 0.3})) == [FAILED] * 3


def test_a_model_without_measurements_is_inconclusive():
    for mixer in ("softmax_attention", "mamba2"):
        data = table(FIXED, SMALL, missing=mixer)
        outcomes = [claim.decide(data) for claim in decoding.CLAIMS]
        assert [o.verdict for o in outcomes] == (
            [HELD, INCONCLUSIVE, INCONCLUSIVE] if mixer == "softmax_attention" else [INCONCLUSIVE, HELD, INCONCLUSIVE]
        )


def test_decoding_peak_memory_holds_at_least_the_key_cache_it_ends_with():
    """The key and value cache is alive when decoding ends, so the peak the pass added is at least its bytes."""
    if _READ_RSS is None:
        pytest.skip("needs a readable resident set size")
    torch.manual_seed(0)
    task = tasks.build("mqar", seq_len=16, num_kv_pairs=2, vocab_size=32)
    model = build_model(
        {
            "d_model": 64,
            "layers": 2,
            "mlp": "none",
            "positions": False,
            "mixer": "softmax_attention",
            "mixer_options": {"heads": 2},
        },
        task,
    ).eval()
    tokens = random_tokens(32, 2048)
    cache = decode_profile(model, tokens, [2048], window=8)[0].state_bytes
    assert cache >= 2 * 2 * 2048 * 64 * 4  # layers × (keys, values) × tokens × width × float32
    assert decoding.decoding_peak_bytes(model, tokens) >= cache


@pytest.mark.parametrize(
    ("claim", "state", "error", "verdict"),
    [
        # "fixed-size": the state at context 4096 is at most the one at 256 (ratio ≤ 1)
        ("recurrent state is fixed-size", {"linear_attention": (500, 499)}, {}, HELD),
        ("recurrent state is fixed-size", {"linear_attention": (500, 501)}, {}, FAILED),
        # "O(N) memory": softmax attention's state grows ≥ 0.9 × as fast as the context (16 ×: ≥ 14.4 ×)
        ("attention's state grows with the context", {"softmax_attention": (1000, 14_500)}, {}, HELD),
        ("attention's state grows with the context", {"softmax_attention": (1000, 14_300)}, {}, FAILED),
        # float32 round-off: relative step error ≤ 1e-4
        ("the two forms agree", {}, {"mamba2": 0.99e-4}, HELD),
        ("the two forms agree", {}, {"mamba2": 1.01e-4}, FAILED),
    ],
)
def test_duality_decoding_claims_just_above_and_below_their_thresholds(claim, state, error, verdict):
    """Seeds 003/004's claims one model past the ratio 1, the growth 0.9 or the round-off 1e-4."""
    data = table({**FIXED, **state}, {**SMALL, **error})
    assert_verdict(decoding.CLAIMS, claim, data, verdict)
