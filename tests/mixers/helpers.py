"""The small mixers of the suites that check every registered mixer (``test_mixer_suite``, ``test_autocast``,
``test_step_state_batch``)."""

from __future__ import annotations

import torch

from seqdyn import mixers

D = 16
#: small options that keep every check fast (chunk_size is added where a mixer has one)
SMALL = {
    "softmax_attention": dict(heads=2),
    "linear_attention": dict(heads=2, state_dim=4),
    "normalized_attention": dict(heads=2, state_dim=4),
    "taylor_attention": dict(heads=2, state_dim=2, degree=2),
    "local_attention": dict(heads=2, window=4),
    "gla": dict(heads=2, gate_low_rank=4),
    "retnet": dict(heads=2),
    "mamba2": dict(state_dim=4, head_dim=8),
    "deltanet": dict(heads=2),
    "gated_deltanet": dict(heads=2),
    "mlstm": dict(heads=2),
    "ttt_linear": dict(heads=2),
    "custom": dict(heads=2, decay="scalar", householder="keys", normalizer="abs_max1"),
    "s6": dict(state_dim=4),
    "parallel": dict(
        parts=[
            ["mamba2", dict(state_dim=4, head_dim=8, chunk_size=4)],
            ["softmax_attention", dict(heads=2, rotary=True)],
        ]
    ),
}

NAMES = mixers.names()


def small(name: str) -> mixers.Mixer:
    options = dict(SMALL.get(name, {}))
    if "chunk_size" in mixers.options(name):
        options["chunk_size"] = 4
    torch.manual_seed(0)
    return mixers.build(name, D, **options).double()
