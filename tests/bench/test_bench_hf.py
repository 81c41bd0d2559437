"""``seqdyn bench hf``: transformers' Mamba, Mamba-2, Gated DeltaNet and RG-LRU fallbacks against
``seqdyn.hf.accelerate``, side by side — each row measures both models (then the first accelerated layer and each
swapped function alone), checks their outputs agree, and states the ratios the way the table prints them."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("transformers")

from seqdyn.bench.hf import FunctionRow, HfRow, render_markdown, run_hf_benchmark  # noqa: E402


def test_quick_bench_measures_both_models_of_each_family_and_their_logits_agree(tmp_path):
    rows = run_hf_benchmark(quick=True, repeats=1, markdown=str(tmp_path / "hf.md"))
    assert [(row.family, row.length) for row in rows] == [
        ("mamba", 64),
        ("mamba2", 64),
        ("qwen3_5_text", 64),
        ("qwen3_next", 64),
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
        "qwen3_next": ["Qwen3NextGatedDeltaNet (layer)", "torch_chunk_gated_delta_rule", "causal_conv1d_fn"],
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
        assert all(seconds > 0 for seconds in row.costless_s) and set(row.ceilings) == {"prefill", "forward + backward"}
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
    assert row.ceilings == {}
    assert (
        "| mamba2 | 4,096 | 3.000 → 1.000 | 3.00× | — | 8.000 → 2.000 | 4.00× | — | 50.0 → 55.0 | 1.10× |"
        in render_markdown([row], quick=False)
    )
    measured = dataclasses.replace(row, costless_s=(0.5, 1.0))
    assert measured.ceilings == {"prefill": 6.0, "forward + backward": 8.0}
    assert "| 3.00× | 6.00× | 8.000 → 2.000 | 4.00× | 8.00× |" in render_markdown([measured], quick=False)


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


def test_a_costless_function_returns_its_first_outputs_per_shapes_and_passes_gradients_on():
    import torch

    from seqdyn.bench.hf import costless

    calls = []

    def function(x, y, scale=2.0):
        calls.append(x.shape)
        return x * y * scale, None

    stand_in = costless(function)
    x, y = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    out, nothing = stand_in(x, y)
    assert nothing is None
    torch.testing.assert_close(out, x * y * 2)
    again, _ = stand_in(torch.randn(3), y)  # the same shapes: the first outputs, not computed again
    assert torch.equal(again, out) and len(calls) == 1
    again.sum().backward()
    assert torch.equal(y.grad, torch.zeros(3))  # reached, at no cost
    stand_in(torch.randn(4), torch.randn(4))
    assert len(calls) == 2


def test_the_costless_model_runs_its_swapped_functions_as_stand_ins():
    """Its first call gives the model's logits (seqdyn's functions on the same arguments); a second prompt of the
    same length gets the first one's outputs of the swapped functions, so its logits differ from the model's."""
    import torch

    from seqdyn.bench.hf import QUICK, _model, costless_model

    plain = _model("qwen3_5_text", QUICK["qwen3_5_text"])
    costless = costless_model(plain)
    first, second = (torch.randint(0, 64, (1, 24), generator=torch.Generator().manual_seed(s)) for s in (0, 1))
    with torch.no_grad():
        torch.testing.assert_close(costless(first).logits, plain(first).logits, rtol=1e-4, atol=1e-4)
        assert not torch.allclose(costless(second).logits, plain(second).logits, atol=1e-3)
    costless(second).logits.sum().backward()
    assert plain.model.layers[0].linear_attn.in_proj_qkv.weight.grad is None  # the copy's own weights
    assert costless.model.layers[0].linear_attn.in_proj_qkv.weight.grad is not None


def test_a_costless_function_keeps_the_shape_of_named_tuples_and_of_functions_of_no_tensor():
    from typing import NamedTuple

    import torch

    from seqdyn.bench.hf import costless

    class Pair(NamedTuple):
        out: torch.Tensor
        state: torch.Tensor | None

    pair = costless(lambda x: Pair(x * 2, None))(torch.ones(2))
    assert isinstance(pair, Pair) and torch.equal(pair.out, torch.full((2,), 2.0)) and pair.state is None
    assert torch.equal(costless(lambda n: torch.arange(float(n)))(3), torch.arange(3.0))
