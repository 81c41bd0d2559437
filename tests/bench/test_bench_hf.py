"""``seqdyn bench hf``: transformers' Mamba, Mamba-2, Gated DeltaNet and RG-LRU fallbacks against
``seqdyn.hf.accelerate``, side by side — each row measures both models (then the first accelerated layer and each
swapped function alone), checks their outputs agree, and states the ratios the way the table prints them."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from seqdyn.bench.hf import FunctionRow, HfRow, render_markdown, run_hf_benchmark  # noqa: E402


def test_quick_bench_measures_both_models_of_each_family_and_their_logits_agree(tmp_path):
    rows = run_hf_benchmark(quick=True, repeats=1, markdown=str(tmp_path / "hf.md"))
    assert [(row.family, row.length) for row in rows] == [
        ("mamba", 64),
        ("mamba2", 64),
        ("qwen3_5_text", 64),
        ("recurrent_gemma", 64),
        ("kimi_linear", 64),
        ("rwkv", 64),
        ("xlstm", 64),
        ("zamba", 64),
        ("zamba2", 64),
    ]
    swapped = {
        "mamba": ["MambaMixer (layer)", "mamba_selective_scan", "causal_conv1d_fn"],
        "mamba2": ["Mamba2Mixer (layer)", "mamba2_chunk_scan", "causal_conv1d_fn"],
        "qwen3_5_text": ["Qwen3_5GatedDeltaNet (layer)", "torch_chunk_gated_delta_rule", "causal_conv1d_fn"],
        "recurrent_gemma": ["_rnn_scan"],
        "kimi_linear": ["KimiLinearDeltaAttention (layer)", "chunk_kimi_delta_attention", "causal_conv1d_fn"],
        "rwkv": ["RwkvSelfAttention (layer)", "rwkv_linear_attention"],
        "xlstm": ["forward"],
        "zamba": ["ZambaMambaMixer (layer)", "mamba_selective_scan", "causal_conv1d_fn"],
        "zamba2": ["Zamba2MambaMixer (layer)", "mamba2_chunk_scan", "causal_conv1d_fn"],
    }  # (its RG-LRU layer keeps a state from call to call; KDA's recurrent form runs only to decode; xLSTM's backend
    # is swapped whole, its forward the function)
    for row in rows:
        assert row.largest_difference <= 1e-5
        assert all(seconds > 0 for seconds in (*row.prefill_s, *row.forward_backward_s, *row.decode_tokens_per_s))
        assert [function.function for function in row.functions] == swapped[row.family]
        for function in row.functions:
            assert function.largest_difference <= 1e-5
            assert all(seconds > 0 for seconds in (*function.forward_s, *function.forward_backward_s))
    text = (tmp_path / "hf.md").read_text()
    for family in ("mamba", "mamba2", "qwen3_5_text", "recurrent_gemma", "kimi_linear", "rwkv", "xlstm", "zamba"):
        assert f"| {family} | 64 |" in text
    assert text == render_markdown(rows, quick=True)
    assert "| qwen3_5_text | `torch_chunk_gated_delta_rule` | 64 |" in text
    assert "| qwen3_5_text | `Qwen3_5GatedDeltaNet` (layer) | 64 |" in text


def test_an_unknown_family_is_refused_by_name():
    with pytest.raises(ValueError, match=r"families: \['gpt2'\] not benchmarked"):
        run_hf_benchmark(quick=True, families=("gpt2",))


def test_ratios_read_transformers_over_seqdyn_and_decoding_the_other_way():
    row = HfRow(
        "mamba2",
        4096,
        prefill_s=(3.0, 1.0),
        forward_backward_s=(8.0, 2.0),
        decode_tokens_per_s=(50.0, 55.0),
        largest_difference=1e-7,
    )
    assert row.ratios == {"prefill": 3.0, "forward + backward": 4.0, "decode": 1.1}
    assert (
        "| mamba2 | 4,096 | 3.000 → 1.000 | 3.00× | 8.000 → 2.000 | 4.00× | 50.0 → 55.0 | 1.10× |"
        in render_markdown([row], quick=False)
    )


def test_a_function_row_reads_the_fallback_over_seqdyn_in_its_own_table():
    function = FunctionRow(
        "torch_chunk_gated_delta_rule", forward_s=(0.3, 0.2), forward_backward_s=(1.0, 0.25), largest_difference=2e-7
    )
    assert function.ratios == pytest.approx({"forward": 1.5, "forward + backward": 4.0})
    row = HfRow("qwen3_5_text", 4096, (1.0, 1.0), (2.0, 2.0), (9.0, 9.0), 1e-7, (function,))
    assert (
        "| qwen3_5_text | `torch_chunk_gated_delta_rule` | 4,096 | 0.300 → 0.200 | 1.50× | 1.000 → 0.250 | "
        "4.00× | 2.0e-07 |"
    ) in render_markdown([row], quick=False)
