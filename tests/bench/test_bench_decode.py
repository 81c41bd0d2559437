"""``seqdyn bench decode`` on tiny sizes: its rows hold what they say (issue 33, item 6)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from seqdyn.bench.decode import build, measure_decode, measure_packing, render_markdown  # noqa: E402


def test_a_recurrent_cache_keeps_its_size_with_the_context_and_a_softmax_cache_grows():
    import torch

    rows = {}
    for name in ("gated_deltanet", "softmax_attention"):
        model = build(name, d_model=16, layers=1, vocab=32)
        rows[name] = [
            measure_decode(model, name, context, chunk=8, steps=3, device=torch.device("cpu")) for context in (16, 48)
        ]
    short, long = rows["gated_deltanet"]
    assert short.cache_bytes == long.cache_bytes > 0
    short, long = rows["softmax_attention"]
    assert long.cache_bytes > short.cache_bytes
    assert all(row.decode_tokens_per_s > 0 and row.prefill_s > 0 for pair in rows.values() for row in pair)


def test_packing_counts_the_real_tokens_and_the_table_shows_every_row():
    import torch

    model = build("mamba2", d_model=16, layers=1, vocab=32)
    packing = measure_packing(model, documents=4, shortest=3, longest=9, repeats=1, device=torch.device("cpu"))
    assert packing.real_tokens == sum(packing.lengths) and packing.padded_tokens == 4 * max(packing.lengths)
    decode = measure_decode(model, "mamba2", 16, chunk=8, steps=2, device=torch.device("cpu"))
    text = render_markdown([decode], [packing], ["mamba2"], 16, 1, 8, 2)
    assert "| mamba2 | 16 |" in text and f"| mamba2 | 4 | {packing.real_tokens} |" in text
