"""seqdyn's backends inside a loaded transformers model (issue 34, item 3): ``accelerate`` swaps the
pure-PyTorch SSD scan of Mamba-2 and its hybrids (Bamba, Granite 4.0, Nemotron-H, Zamba2, Falcon-H1) and Gated
DeltaNet's chunked delta rule (Qwen3.5, Qwen3-Next), Kimi Delta Attention (Kimi-Linear) — and RecurrentGemma's RG-LRU
loop, a method of each layer —
for seqdyn's operator in that model only;
logits, the cache and generation stay transformers' to round-off, and packed sequences (``seq_idx``,
``cu_seqlens``) are computed each alone."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqdyn.hf import acceleration as acc  # noqa: E402
from seqdyn.hf.convert import tiny_model  # noqa: E402
from seqdyn.hf.convert.checks import random_model  # noqa: E402

#: transformers' fallback upcasts the scan to float32 whatever the dtype: both agree to a few float32 roundings
FLOAT32_ROUNDING = 8 * torch.finfo(torch.float32).eps


def ids(length: int, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, 48, (batch, length), generator=torch.Generator().manual_seed(1))


SMALL = dict(vocab_size=48, hidden_size=16, intermediate_size=24)
#: the tiny models of these tests that are not the converters' own
UNCONVERTED = {
    "kimi_linear": (
        "KimiLinearForCausalLM",
        "KimiLinearConfig",
        dict(
            SMALL,
            moe_intermediate_size=8,
            num_hidden_layers=2,
            layer_types=["linear_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse"],
            num_attention_heads=2,
            num_key_value_heads=2,
            kv_lora_rank=8,
            qk_rope_head_dim=4,
            qk_nope_head_dim=8,
            v_head_dim=8,
            num_local_experts=4,
            num_experts_per_tok=2,
            linear_head_dim=8,
            linear_num_heads=2,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            experts_implementation="eager",
        ),
    ),
}


def build(family: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    if family in UNCONVERTED:
        return random_model(*UNCONVERTED[family], dtype)
    return tiny_model(family, dtype)


def module_of(family: str) -> str:
    name = {"qwen3_5_text": "qwen3_5", "qwen3_5_moe_text": "qwen3_5_moe"}.get(family, family)
    return f"transformers.models.{name}.modeling_{name}"


#: family → (the fallbacks swapped in its transformers module, the layers that call each)
SSD, DELTA = ("mamba2_chunk_scan", "causal_conv1d_fn"), ("torch_chunk_gated_delta_rule", "causal_conv1d_fn")
S6 = ("mamba_selective_scan", "causal_conv1d_fn")
SWAPPED = {
    "mamba": (S6, 2),
    "falcon_mamba": (S6, 2),
    "zamba": (S6, {"causal_conv1d_fn": 4, "mamba_selective_scan": 8}),  # 4 layers, a scan per head (2)
    "mamba2": (SSD, 2),
    "bamba": (SSD, 2),
    "granitemoehybrid": (SSD, 2),
    "nemotron_h": (SSD, 3),
    "zamba2": (SSD, 5),
    "falcon_h1": (SSD, 2),
    "qwen3_5_text": (DELTA, 2),
    "qwen3_5_moe_text": (DELTA, 2),
    "qwen3_next": (DELTA, 2),
    "olmo_hybrid": (DELTA, 2),
    "rwkv": (("rwkv_linear_attention",), 2),
}


@pytest.mark.parametrize("family", SWAPPED)
@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.float64, FLOAT32_ROUNDING)])
def test_accelerated_models_give_transformers_logits_through_seqdyns_operator(family, dtype, tolerance, monkeypatch):
    """Over 150 tokens (more than one of transformers' 64-token chunks, and not a multiple of them)."""
    (names, layers), module = SWAPPED[family], module_of(family)
    model, inputs = build(family, dtype), ids(150)
    assert set(acc.ACCELERATED[module]) == set(names)
    with torch.no_grad():
        expected = model(inputs).logits
        calls = []
        for name in names:
            counted = acc.ACCELERATED[module][name]
            monkeypatch.setitem(
                acc.ACCELERATED[module],
                name,
                lambda *args, counted=counted, name=name, **kwargs: calls.append(name) or counted(*args, **kwargs),
            )
        got = acc.accelerate(model)(inputs).logits
    counts = {name: layers for name in names} if isinstance(layers, int) else layers
    assert sorted(calls) == sorted(name for name in names for _ in range(counts[name]))  # each once per layer
    assert (got - expected).abs().max() <= tolerance * expected.abs().max()


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.float64, FLOAT32_ROUNDING)])
def test_kimi_delta_attention_runs_on_the_low_rank_transition(dtype, tolerance, monkeypatch):
    """Kimi-Linear's KDA layers (the decay before the delta rule, ``(I − βkkᵀ) Diag(α)``) on seqdyn's operator as
    ``Diag(α) − βk(α⊙k)ᵀ``: transformers' logits over 150 tokens, its chunked fallback replaced in each KDA layer."""
    module = module_of("kimi_linear")
    model, inputs = build("kimi_linear", dtype), ids(150)
    calls = []
    swapped = acc.ACCELERATED[module]["chunk_kimi_delta_attention"]
    monkeypatch.setitem(
        acc.ACCELERATED[module], "chunk_kimi_delta_attention", lambda *a, **k: calls.append(1) or swapped(*a, **k)
    )
    with torch.no_grad():
        expected = model(inputs).logits
        got = acc.accelerate(model)(inputs).logits
    assert len(calls) == 1  # the one KDA layer
    assert (got - expected).abs().max() <= tolerance * expected.abs().max()


def test_only_the_accelerated_model_changes_and_transformers_is_left_as_it_was():
    from transformers.models.mamba2 import modeling_mamba2

    fallback = modeling_mamba2.mamba2_chunk_scan
    accelerated, plain = acc.accelerate(tiny_model("mamba2")), tiny_model("mamba2")
    with torch.no_grad():
        accelerated(ids(12))
    assert modeling_mamba2.mamba2_chunk_scan is fallback  # swapped back after the call
    assert not getattr(plain.backbone.layers[0].mixer, "_seqdyn_accelerated", False)
    assert acc.accelerate(accelerated) is accelerated  # a second call wraps nothing twice


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.float64, FLOAT32_ROUNDING)])
def test_recurrent_gemma_runs_its_rg_lru_scan_on_seqdyns_operator(dtype, tolerance, monkeypatch):
    """``RecurrentGemmaRglru._rnn_scan`` is a method: swapped on each RG-LRU layer of this model (2 of 3 layers)."""
    model, inputs, calls = build("recurrent_gemma", dtype), ids(150), []
    counted = acc.ACCELERATED_METHODS["RecurrentGemmaRglru"]["_rnn_scan"]
    monkeypatch.setitem(
        acc.ACCELERATED_METHODS["RecurrentGemmaRglru"],
        "_rnn_scan",
        lambda *args, **kwargs: calls.append(1) or counted(*args, **kwargs),
    )
    with torch.no_grad():
        expected = model(inputs).logits
        got = acc.accelerate(model)(inputs).logits
    assert len(calls) == 2 and (got - expected).abs().max() <= tolerance * expected.abs().max()
    assert not getattr(build("recurrent_gemma").model.layers[0].temporal_block.rg_lru, "_seqdyn_accelerated", False)


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.float64, FLOAT32_ROUNDING)])
def test_xlstm_runs_its_mlstm_backend_on_seqdyns_operator(dtype, tolerance, monkeypatch):
    """``xLSTMBackend.forward`` (its chunkwise kernel, then the steps after the last whole chunk) is swapped on each
    layer's backend: transformers' logits over 150 tokens."""
    model, inputs, calls = build("xlstm", dtype), ids(150), []
    counted = acc.ACCELERATED_METHODS["xLSTMBackend"]["forward"]

    def counting(*args, **kwargs):
        calls.append(1)
        return counted(*args, **kwargs)

    counting.binds_layer = True
    monkeypatch.setitem(acc.ACCELERATED_METHODS["xLSTMBackend"], "forward", counting)
    with torch.no_grad():
        expected = model(inputs).logits
        got = acc.accelerate(model)(inputs).logits
    assert len(calls) == 2 and (got - expected).abs().max() <= tolerance * expected.abs().max()


@pytest.mark.parametrize("mode", ["train", "inference"])
def test_mlstm_backend_equals_transformers_kernels_from_a_state_with_large_gates_and_gradients(mode):
    """In float64 against transformers' chunkwise kernel (whole chunks, ``train``) and its chunks-then-steps
    (``inference``), from a stabilized state (C̃, ñ, m) with input gates up to 8 and ε = 0.05 (most of some rows'
    normalizer): outputs, final states and the gradients of every input."""
    from transformers.models.xlstm.modeling_xlstm import xLSTMBackend, xLSTMConfig

    config = xLSTMConfig(mode=mode, chunk_size=8, eps=0.05, return_last_states=True)
    object.__setattr__(config, "inference_state_dtype", "float64")  # its steps' state dtype (its config allows
    # float32 and lower only): here the inputs', so that its steps after the last whole chunk keep float64
    theirs = xLSTMBackend(config)
    generator = torch.Generator().manual_seed(0)
    randn = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64)  # noqa: E731
    length = 24 if mode == "train" else 29
    inputs = [randn(2, 3, length, 4), randn(2, 3, length, 4), randn(2, 3, length, 5)]
    inputs += [4 * randn(2, 3, length), randn(2, 3, length) + 3]  # ĩ, f̃
    states = [randn(2, 3, 4, 5) * 0.1, randn(2, 3, 4) * 0.1, randn(2, 3, 1)]
    leaves = [x.clone().requires_grad_() for x in inputs]
    expected, expected_states = theirs(*leaves, *states)
    got, got_states = acc.mlstm_backend(theirs, *leaves, *states)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    for ours, want in zip(got_states, expected_states):
        torch.testing.assert_close(ours, want.to(ours.dtype), rtol=1e-10, atol=1e-12)
    upstream = randn(*expected.shape)
    for ours, want in zip(torch.autograd.grad(got, leaves, upstream), torch.autograd.grad(expected, leaves, upstream)):
        torch.testing.assert_close(ours, want, rtol=1e-9, atol=1e-11)


def test_linear_rnn_scan_equals_recurrent_gemmas_loop_with_resets_a_state_and_gradients():
    from transformers.models.recurrent_gemma.modeling_recurrent_gemma import RecurrentGemmaRglru

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 9, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    gate = torch.rand(2, 9, 5, generator=generator, dtype=torch.float64).requires_grad_()
    state = torch.randn(2, 5, generator=generator, dtype=torch.float64)
    reset = torch.zeros(2, 9, 1, dtype=torch.bool)
    reset[0, 4] = reset[1, 0] = True  # a document starting mid-row, and one at the start
    expected = RecurrentGemmaRglru._rnn_scan(None, x, gate, reset, state, acc_dtype=torch.float64)
    got = acc.linear_rnn_scan(x, gate, reset, state, acc_dtype=torch.float64)
    for ours, theirs in zip(got, expected):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    upstream = torch.randn(2, 9, 5, generator=generator, dtype=torch.float64)
    for ours, theirs in zip(
        torch.autograd.grad(got[0], (x, gate), upstream), torch.autograd.grad(expected[0], (x, gate), upstream)
    ):
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "family",
    [
        "mamba",
        "mamba2",
        "qwen3_5_text",
        "granitemoehybrid",
        "nemotron_h",
        "recurrent_gemma",
        "kimi_linear",
        "rwkv",
        "xlstm",
    ],
)
def test_generation_after_an_accelerated_prefill_follows_transformers(family):
    """The prompt's final states go into transformers' cache: the decoded tokens and their logits agree."""
    prompt = ids(24, batch=1)
    settings = dict(
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=24,
        do_sample=False,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
    )
    expected = build(family, torch.float64).generate(prompt, **settings)
    got = acc.accelerate(build(family, torch.float64)).generate(prompt, **settings)
    assert torch.equal(got.sequences, expected.sequences)
    theirs, ours = torch.stack(expected.logits), torch.stack(got.logits)
    assert (ours - theirs).abs().max() <= FLOAT32_ROUNDING * theirs.abs().max()


@pytest.mark.parametrize("family", ["rwkv", "xlstm", "mamba2"])
def test_a_decoded_token_runs_transformers_step_not_the_operator(family, monkeypatch):
    """The prompt goes through seqdyn's operator once per layer; each decoded token through transformers' own step
    update (RWKV-4's layer names its input ``hidden``, xLSTM's backend takes ``[B, H, T, K]``)."""
    calls = []
    operator = acc.functions.coefficient_dynamics
    monkeypatch.setattr(acc.functions, "coefficient_dynamics", lambda *a, **k: calls.append(1) or operator(*a, **k))
    model = acc.accelerate(build(family))
    prompt = ids(24, batch=1)
    model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert len(calls) == 2  # the two layers' prefill


def test_rwkv_linear_attention_equals_transformers_loop_from_a_state_with_large_keys_and_gradients():
    """RWKV-4's WKV against transformers' CPU loop (float32, its running maximum): keys up to ±150 (e^150 overflows
    float32), continued from the state of a first call, its outputs, its (numerator, denominator, maximum) state —
    the same average and the same log of the sum — and the gradients of every input."""
    from transformers.models.rwkv.modeling_rwkv import rwkv_linear_attention_cpu

    generator = torch.Generator().manual_seed(3)
    decay, first = torch.randn(6, generator=generator), torch.randn(6, generator=generator)
    key = 50 * torch.randn(2, 19, 6, generator=generator)
    value = torch.randn(2, 19, 6, generator=generator)
    inputs = [t.clone().requires_grad_() for t in (decay, first, key, value)]
    theirs = [t.clone().requires_grad_() for t in (decay, first, key, value)]
    _, state = acc.rwkv_linear_attention(*[t.detach() for t in inputs[:2]], key[:, :7], value[:, :7], None, True)
    _, expected_state = rwkv_linear_attention_cpu(decay, first, key[:, :7], value[:, :7], None, True)
    (numerator, denominator, maximum), (its_numerator, its_denominator, its_maximum) = state, expected_state
    torch.testing.assert_close(numerator / denominator, its_numerator / its_denominator)  # the average so far
    torch.testing.assert_close(denominator.log() + maximum, its_denominator.log() + its_maximum)  # log of the sum
    got, _ = acc.rwkv_linear_attention(*inputs, state=state)
    expected, _ = rwkv_linear_attention_cpu(*theirs, state=expected_state)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    upstream = torch.randn(expected.shape, generator=generator)
    for ours, its in zip(torch.autograd.grad(got, inputs, upstream), torch.autograd.grad(expected, theirs, upstream)):
        torch.testing.assert_close(ours, its, rtol=1e-4, atol=1e-4)


def test_packed_sequences_by_seq_idx_are_each_computed_alone():
    """``ssd_chunk_scan`` with ``seq_idx`` (which transformers' fallback ignores) equals each sequence's own scan."""
    generator = torch.Generator().manual_seed(0)
    lengths, heads, head_dim, groups, state = (5, 9, 3), 4, 2, 2, 3
    total = sum(lengths)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    x, dt, B, C = (
        draw(1, total, heads, head_dim),
        draw(1, total, heads),
        draw(1, total, groups, state),
        draw(1, total, groups, state),
    )
    A, D, bias = -draw(heads).exp(), draw(heads), draw(heads)
    seq_idx = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))[None]
    packed = acc.ssd_chunk_scan(x, dt, A, B, C, 4, D=D, dt_bias=bias, dt_softplus=True, seq_idx=seq_idx)
    alone, start = [], 0
    for length in lengths:
        part = slice(start, start + length)
        alone.append(
            acc.ssd_chunk_scan(
                x[:, part], dt[:, part], A, B[:, part], C[:, part], 4, D=D, dt_bias=bias, dt_softplus=True
            )
        )
        start += length
    torch.testing.assert_close(packed, torch.cat(alone, dim=1), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="seq_idx: packed sequences run from zero states"):
        acc.ssd_chunk_scan(x, dt, A, B, C, 4, seq_idx=seq_idx, return_final_states=True)


@pytest.mark.parametrize("groups", [1, 2])
def test_ssd_chunk_scan_equals_transformers_fallback_with_gradients(groups):
    """Against ``mamba2_chunk_scan`` itself in float64 over 3 chunks and a part, from a state, with its final state
    and the gradients of every input; one group (B and C shared by every head, their gram formed once) or two."""
    from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan

    generator = torch.Generator().manual_seed(5)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_()

    x, dt, B, C = draw(2, 14, 4, 3), draw(2, 14, 4), draw(2, 14, groups, 5), draw(2, 14, groups, 5)
    A, D, bias, state = draw(4), draw(4), draw(4), draw(2, 4, 3, 5)
    inputs = (x, dt, B, C, A, D, bias, state)
    results = []
    for scan in (mamba2_chunk_scan, acc.ssd_chunk_scan):
        out, final = scan(
            x,
            dt,
            -A.exp(),
            B,
            C,
            4,
            D=D,
            dt_bias=bias,
            dt_softplus=True,
            initial_states=state,
            return_final_states=True,
        )
        results.append((out.double(), final.double(), torch.autograd.grad((out.sum() + final.sum()), inputs)))
    (theirs, theirs_final, theirs_grads), (ours, ours_final, ours_grads) = results
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)  # (the fallback computes in float32)
    torch.testing.assert_close(ours_final, theirs_final, rtol=1e-6, atol=1e-6)
    for mine, wanted in zip(ours_grads, theirs_grads):
        torch.testing.assert_close(mine, wanted.double(), rtol=1e-5, atol=1e-5)


def test_packed_sequences_by_cu_seqlens_are_each_computed_alone_from_their_own_states():
    """``gated_delta_rule`` with ``cu_seqlens`` (which transformers' fallback ignores) equals each sequence's own
    chunked delta rule, each from its own initial state, with its own final state; grouped value heads."""
    generator = torch.Generator().manual_seed(0)
    lengths, key_heads, heads, key_dim, value_dim = (5, 9, 3), 2, 4, 3, 2
    total = sum(lengths)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    q, k, v = draw(1, total, key_heads, key_dim), draw(1, total, key_heads, key_dim), draw(1, total, heads, value_dim)
    g, beta = -draw(1, total, heads).exp(), torch.sigmoid(draw(1, total, heads))
    states = draw(len(lengths), heads, key_dim, value_dim)
    offsets = torch.tensor([0, 5, 14, 17], dtype=torch.int32)
    packed, finals = acc.gated_delta_rule(
        q,
        k,
        v,
        g,
        beta,
        4,
        initial_state=states,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        cu_seqlens=offsets,
    )
    for index, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
        part = slice(int(start), int(end))
        alone, final = acc.gated_delta_rule(
            q[:, part],
            k[:, part],
            v[:, part],
            g[:, part],
            beta[:, part],
            4,
            initial_state=states[index : index + 1],
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
        )
        torch.testing.assert_close(packed[:, part], alone, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(finals[index : index + 1], final, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("activation", ["silu", None])
def test_causal_conv1d_equals_transformers_fallback_with_gradients(activation):
    """On the ``[b, c, l]`` transposed view of a ``[b, l, c]`` projection, as the layers pass it, in float64."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import causal_conv1d_fn

    generator = torch.Generator().manual_seed(4)
    projected = torch.randn(2, 13, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(6, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(6, generator=generator, dtype=torch.float64, requires_grad=True)
    results = []
    for conv in (causal_conv1d_fn, acc.causal_conv1d):
        out = conv(projected.transpose(1, 2), weight, bias, activation=activation)
        results.append((out, torch.autograd.grad((out * out).sum(), (projected, weight, bias))))
    (theirs, theirs_grads), (ours, ours_grads) = results
    assert ours.shape == (2, 6, 13) and ours.transpose(1, 2).is_contiguous()  # a view of [b, l, c] memory
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    for mine, wanted in zip(ours_grads, theirs_grads):
        torch.testing.assert_close(mine, wanted, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("packing", ["seq_idx", "cu_seq_lens_q"])
def test_causal_conv1d_of_packed_sequences_reads_each_sequence_alone(packing):
    """The fallback's convolution runs across the sequences of a packed row; seqdyn's starts each from zeros."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import causal_conv1d_fn

    generator = torch.Generator().manual_seed(5)
    x = torch.randn(1, 5, 12, generator=generator, dtype=torch.float64)  # [b, c, l]
    weight, bias = torch.randn(5, 4, generator=generator, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    offsets = torch.tensor([0, 2, 9, 12], dtype=torch.int32)
    seq_idx = torch.repeat_interleave(torch.arange(3), offsets.diff())[None]
    packed = acc.causal_conv1d(
        x, weight, bias, "silu", **({"seq_idx": seq_idx} if packing == "seq_idx" else {"cu_seq_lens_q": offsets})
    )
    alone = torch.cat(
        [causal_conv1d_fn(x[:, :, start:end], weight, bias, "silu") for start, end in zip(offsets[:-1], offsets[1:])],
        dim=-1,
    )
    torch.testing.assert_close(packed, alone, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(causal_conv1d_fn(x, weight, bias, "silu"), alone)  # what the fallback would give


def test_causal_conv1d_refuses_an_activation_it_does_not_compute():
    with pytest.raises(ValueError, match="^activation: 'gelu' after the convolution is not accelerated"):
        acc.causal_conv1d(torch.zeros(1, 2, 3), torch.zeros(2, 4), activation="gelu")


def test_gated_delta_rule_equals_transformers_recurrent_form():
    """Against transformers' token-by-token ``torch_recurrent_gated_delta_rule`` in float64, from a state."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_recurrent_gated_delta_rule

    generator = torch.Generator().manual_seed(3)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    q, k, v = draw(2, 11, 1, 4), draw(2, 11, 1, 4), draw(2, 11, 2, 3)
    g, beta, state = -draw(2, 11, 2).exp(), torch.sigmoid(draw(2, 11, 2)), draw(2, 2, 4, 3)
    expected = torch_recurrent_gated_delta_rule(
        q, k, v, g, beta, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    got = acc.gated_delta_rule(
        q, k, v, g, beta, 4, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    for ours, theirs in zip(got, expected):
        torch.testing.assert_close(ours, theirs.double(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("family", ["mamba", "falcon_mamba", "mamba2", "qwen3_5_text", "kimi_linear"])
def test_a_prompt_prefilled_in_two_pieces_gives_the_logits_of_one_forward(family):
    """Accelerated, the second piece continues from the cache's recurrent state; transformers' Mamba and
    Falcon-Mamba fallbacks start every multi-token call from zeros (their chunked prefill diverges)."""
    tokens = ids(24)
    plain, accelerated = build(family, torch.float64), acc.accelerate(build(family, torch.float64))

    def in_two_pieces(model):
        first = model(tokens[:, :10], use_cache=True)
        return torch.cat([first.logits, model(tokens[:, 10:], cache=first.cache, use_cache=True).logits], dim=1)

    with torch.no_grad():
        whole, ours, theirs = plain(tokens).logits, in_two_pieces(accelerated), in_two_pieces(plain)
    assert (ours - whole).abs().max() <= FLOAT32_ROUNDING * whole.abs().max()
    if family in ("mamba", "falcon_mamba"):
        assert (theirs - whole).abs().max() > 1e-5 * whole.abs().max()


def recurrent_states(cache, row: int) -> list[torch.Tensor]:
    """Every convolution and recurrent state of a transformers cache, of one row of the batch."""
    return [
        state[row]
        for layer in range(len(cache.layers))
        if type(cache.layers[layer]).__name__.startswith("Linear")
        for state in (cache.get_conv_state(layer), cache.layers[layer].recurrent_states[0])
    ]


@pytest.mark.parametrize("family", ["mamba", "mamba2", "qwen3_5_text"])
def test_a_right_padded_prompt_leaves_each_rows_states_at_its_last_real_token(family):
    """A row padded on the right ends with the states of its real tokens alone — convolution inputs and recurrent
    state —, which transformers' fallbacks run on through the padding; the logits of the real tokens are the same."""
    ids = torch.randint(1, 48, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    plain, accelerated = build(family), acc.accelerate(build(family))
    with torch.no_grad():
        alone = accelerated(ids[1:, :7], use_cache=True)
        padded = accelerated(ids, attention_mask=mask, use_cache=True)
        theirs = plain(ids, attention_mask=mask, use_cache=True)
        unpadded = plain(ids[1:, :7], use_cache=True)
    torch.testing.assert_close(padded.logits[1, :7], alone.logits[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(theirs.logits[1, :7], unpadded.logits[0], rtol=1e-5, atol=1e-5)
    ours, wanted = recurrent_states(padded.cache, 1), recurrent_states(alone.cache, 0)
    assert len(ours) == 4
    for state, expected in zip(ours, wanted):
        torch.testing.assert_close(state, expected, rtol=1e-5, atol=1e-6)
    drifted = recurrent_states(theirs.cache, 1)[1]  # the first layer's recurrent state, after the padding
    assert not torch.allclose(drifted, recurrent_states(unpadded.cache, 0)[1], rtol=1e-3, atol=1e-4)
    if family != "qwen3_5_text":  # a recurrent model decodes on from there (attention layers would see the padding)
        following = ids[:, 7:8]
        with torch.no_grad():
            step = accelerated(following, cache=padded.cache, use_cache=True).logits[1]
            wanted = accelerated(following[1:], cache=alone.cache, use_cache=True).logits[0]
        torch.testing.assert_close(step, wanted, rtol=1e-5, atol=1e-5)


def test_a_model_without_an_accelerated_layer_is_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=48, n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match="^model: GPT2LMHeadModel has no layer seqdyn accelerates"):
        acc.accelerate(gpt2)


def test_the_package_exports_accelerate_and_from_transformers():
    import seqdyn.hf

    assert seqdyn.hf.accelerate is acc.accelerate and callable(seqdyn.hf.from_transformers)


@pytest.mark.parametrize("family", ["mamba", "mamba2", "qwen3_5_text"])
def test_an_accelerated_and_a_plain_model_of_one_family_run_at_once_each_with_its_own_functions(family, monkeypatch):
    """Two threads, several forwards each started together: the accelerated model calls seqdyn's functions (and only
    its thread does), the plain one transformers' fallbacks, each with the logits it gives alone, bit for bit (the
    two differ by float32 roundings, so a forward that ran the other's function would show)."""
    import threading

    module, runs = acc.ACCELERATED[module_of(family)], 6
    callers = set()
    for name, function in list(module.items()):
        monkeypatch.setitem(
            module,
            name,
            lambda *args, function=function, **kwargs: callers.add(threading.get_ident()) or function(*args, **kwargs),
        )
    plain, accelerated, inputs = build(family), acc.accelerate(build(family)), ids(80)
    with torch.no_grad():
        alone = {"plain": plain(inputs).logits, "accelerated": accelerated(inputs).logits}
    assert not torch.equal(alone["plain"], alone["accelerated"])  # the test can tell them apart
    callers.clear()
    barrier, got, threads = threading.Barrier(2), {}, {}

    def run(name: str, model: torch.nn.Module) -> None:
        threads[name] = threading.get_ident()
        for run_index in range(runs):
            barrier.wait()
            with torch.no_grad():
                got[name, run_index] = model(inputs).logits

    workers = [threading.Thread(target=run, args=item) for item in (("plain", plain), ("accelerated", accelerated))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert callers == {threads["accelerated"]}
    for (name, _), logits in got.items():
        assert torch.equal(logits, alone[name]), name
    assert len(got) == 2 * runs


def test_an_accelerated_layer_has_its_own_forward_and_transformers_class_and_module_keep_theirs():
    """``accelerate`` binds seqdyn's functions in a copy of the layer's forward (its decorators copied around it),
    set on the layer alone; a name that is no global of the layer's module is refused."""
    from transformers.models.mamba2 import modeling_mamba2

    forward, fallback = modeling_mamba2.Mamba2Mixer.forward, modeling_mamba2.mamba2_chunk_scan
    layer = acc.accelerate(tiny_model("mamba2")).backbone.layers[0].mixer
    assert "forward" in vars(layer) and modeling_mamba2.Mamba2Mixer.forward is forward
    assert modeling_mamba2.mamba2_chunk_scan is fallback
    innermost = layer.forward.__func__
    while hasattr(innermost, "__wrapped__"):  # the accelerated forward, then transformers' own, unchanged
        innermost = innermost.__wrapped__
    assert innermost.__globals__ is vars(modeling_mamba2)
    with pytest.raises(ValueError, match=r"^functions: \['mamba3_scan'\] are not globals of .*modeling_mamba2"):
        acc.rebound_forward(layer, {"mamba3_scan": acc.ssd_chunk_scan})


def test_an_accelerated_model_copied_saved_and_loaded_computes_with_its_own_weights_and_seqdyns_functions(
    monkeypatch, tmp_path
):
    """A deep copy, a model saved whole and loaded, and a state-dict round trip each compute with their own weights
    through seqdyn's functions (transformers' fallback made to raise shows it), and accelerating again changes
    nothing."""
    import copy

    from transformers.models.mamba2 import modeling_mamba2

    model = acc.accelerate(tiny_model("mamba2"))
    inputs = ids(12)
    copied = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in copied.parameters():
            parameter.mul_(0.5)
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    restored = acc.accelerate(tiny_model("mamba2"))
    restored.load_state_dict(model.state_dict())
    halved = tiny_model("mamba2")
    halved.load_state_dict(copied.state_dict())
    with torch.no_grad():
        expected, expected_half = model(inputs).logits, halved(inputs).logits
    monkeypatch.setattr(modeling_mamba2, "mamba2_chunk_scan", lambda *a, **k: pytest.fail("the fallback ran"))
    with torch.no_grad():
        assert torch.allclose(copied(inputs).logits, expected_half, atol=1e-5)
        assert torch.equal(loaded(inputs).logits, expected) and torch.equal(restored(inputs).logits, expected)
    for each in (copied, loaded):
        layer = each.backbone.layers[0].mixer
        assert isinstance(layer.forward, acc.Swapped) and layer.forward.__self__ is layer
        forward = layer.forward
        acc.accelerate(each)
        assert layer.forward is forward
