"""Shared fixtures of the task tests: small parameter sets that generate fast, and a clean cache setting."""

import pytest

from seqdyn.tasks.base import CACHE_ENV

# Parameters small enough that every task generates a batch in milliseconds (lm needs a file: own tests).
SMALL = {
    "mqar": {"vocab_size": 256, "seq_len": 64, "num_kv_pairs": 8},
    "in_context_recall": {"seq_len": 32},
    "noisy_in_context_recall": {"seq_len": 32},
    "fuzzy_in_context_recall": {"seq_len": 48},
    "selective_copying": {"seq_len": 48, "num_tokens_to_copy": 6},
    "compression": {},
    "memorization": {},
    "shift": {"seq_len": 64},
    "cumsum": {"seq_len": 64},
    "cummax": {"seq_len": 64},
    "reverse": {"seq_len": 64},
    "sort": {"seq_len": 64},
    "select": {"seq_len": 64, "num_select": 8},
    "select_fixed": {"seq_len": 64, "num_select": 8},
    "mips": {"seq_len": 32},
    "context_shift": {"seq_len": 64},
    "solve": {"seq_len": 64},
    "solve_fixed": {"seq_len": 64},
    "listops_subtrees": {"seq_len": 256, "min_len": 128},
    "pathfinder_segmentation": {"seq_len": 64 * 64},
}


@pytest.fixture
def small():
    """``build(name, **small[name])`` gives a fast variant of every task but ``lm``."""
    return SMALL


@pytest.fixture(autouse=True)
def _no_cache_env(monkeypatch):
    """The on-disk cache stays off unless a test turns it on."""
    monkeypatch.delenv(CACHE_ENV, raising=False)
