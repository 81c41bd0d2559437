"""transformers models converted to seqdyn (issue 34, item 1): on tiny random configs of each family, built
offline, the converted model's logits equal transformers' own — a full forward, a prefill in chunks, and the
logits of 32 greedily decoded tokens — and what cannot be converted exactly is refused in one line."""

from __future__ import annotations

import contextlib
import functools
import importlib
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqdyn.hf.convert import (  # noqa: E402  (after the importorskip: the module skips without transformers)
    NOT_YET,
    TINY_CONFIGS,
    UnsupportedModel,
    check_conversion,
    from_transformers,
    tiny_model,
)

VOCAB = 48


def tiny_mamba(dtype: torch.dtype = torch.float32, **changes) -> torch.nn.Module:
    """A random ``MambaForCausalLM``: 2 layers, width 16, state 4, Δ rank 2."""
    return tiny_model("mamba", dtype, **changes)


def tiny_mamba2(dtype: torch.dtype = torch.float32, **changes) -> torch.nn.Module:
    """A random ``Mamba2ForCausalLM``: 2 layers, width 16, 8 heads of 4 in 2 groups of B and C, state 4."""
    return tiny_model("mamba2", dtype, **changes)


#: each family's tiny random model
TINY = {family: functools.partial(tiny_model, family) for family in TINY_CONFIGS}


def tokens(length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(seed))


#: transformers' Mamba models return float32 logits whatever their dtype, Mamba-2 runs its gated RMSNorm in float32,
#: RecurrentGemma its RMSNorms and its RG-LRU's scan, RWKV its WKV: in float64 the two models agree to a few float32
#: roundings (8 ε₃₂ ≈ 1e-6 of the largest logit)
FLOAT32_ROUNDING = 8 * torch.finfo(torch.float32).eps
#: transformers' Kimi-Linear computes its KDA decay gate and the decay mask of its chunked fallback in float32
#: (``.float()``) whatever the model's dtype, and through the delta rule's chunk those roundings grow past a few ε₃₂:
#: its float64 agreement is bounded as float32's, and its exactness checked with those casts lifted
#: (:func:`test_kimi_linear_is_exact_in_float64_with_transformers_float32_casts_lifted`)
FLOAT32_INSIDE = {"kimi_linear": 1e-5, "bailing_hybrid": 1e-5}
#: transformers' xLSTM returns float32 logits and computes its final norm, and the mLSTM's steps after the last whole
#: chunk, in float32 whatever the model's dtype (:func:`test_xlstm_is_exact_in_float64_with_its_float32_parts_lifted`)


@pytest.mark.parametrize("family", TINY)
def test_converted_logits_equal_transformers_whole_prefilled_in_chunks_and_decoded(family):
    """``check_conversion``: a whole forward (float32: 1e-5 of the largest logit; float64: transformers' float32
    parts), seqdyn's prefill of a 24-token prompt in chunks of 10, 10 and 4 through its cache, and 32 greedy tokens
    — the same tokens, the same logits at every step."""
    report = check_conversion(family)
    bound = FLOAT32_INSIDE.get(family, FLOAT32_ROUNDING)
    assert report["forward float32"] <= 1e-5 and report["forward float64"] <= bound, report
    assert report["chunked prefill"] <= bound and report["decode 32 tokens"] <= bound, report
    assert report["same tokens"] and report["class"] == type(TINY[family]()).__name__


def test_a_wrong_weight_shows_in_the_check(monkeypatch):
    """The check can fail: a converter that leaves one weight at seqdyn's own init is caught by every measure."""
    from seqdyn.hf import convert

    family_config, copy_weights = convert.SUPPORTED["mamba2"]

    def all_but_the_skip(source, target):
        copy_weights(source, target)
        target.seqdyn.blocks[1].mixer.skip.data.fill_(1.0)

    monkeypatch.setitem(convert.SUPPORTED, "mamba2", (family_config, all_but_the_skip))
    report = check_conversion("mamba2")
    assert report["forward float32"] > 1e-3 and report["chunked prefill"] > 1e-3


@pytest.mark.parametrize(("family", "tied"), [("mamba", False), ("mamba2", True)])
def test_the_head_is_tied_or_not_as_in_transformers(family, tied):
    theirs = TINY[family](torch.float64, tie_word_embeddings=tied)
    ours = from_transformers(theirs)
    assert ours.config.tie_word_embeddings is tied
    inputs = tokens(12)
    with torch.no_grad():
        expected = theirs(inputs).logits
        assert (ours(inputs).logits.float() - expected).abs().max() <= FLOAT32_ROUNDING * expected.abs().max()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"use_bias": True}, "use_bias=True"),
        ({"use_conv_bias": False}, "use_conv_bias=False"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ],
)
def test_mamba_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=f"^mamba: config option {named.replace('(', '.').replace(')', '.')}"):
        from_transformers(tiny_mamba(**change))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"use_bias": True}, "use_bias=True"),
    ],
)
def test_mamba2_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=f"^mamba2: config option {re.escape(named)} cannot be converted"):
        from_transformers(tiny_mamba2(**change))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"rms_norm_eps": 1e-5}, "rms_norm_eps=1e-05"),
        ({"attention_bias": True}, "attention_bias=True"),
        (
            {
                "rope_parameters": {
                    "rope_type": "linear",
                    "rope_theta": 1e4,
                    "factor": 2.0,
                    "partial_rotary_factor": 0.5,
                }
            },
            "rope_parameters.rope_type='linear'",
        ),
    ],
)
def test_qwen3_5_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=f"^qwen3_5_text: config option {re.escape(named)} cannot be converted"):
        from_transformers(tiny_model("qwen3_5_text", **change))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"mamba_proj_bias": True}, "mamba_proj_bias=True"),
        ({"mamba_conv_bias": False}, "mamba_conv_bias=False"),
        ({"mlp_bias": True}, "mlp_bias=True"),
    ],
)
def test_bamba_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=f"^bamba: config option {re.escape(named)} cannot be converted"):
        from_transformers(tiny_model("bamba", **change))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"mamba_proj_bias": True}, "mamba_proj_bias=True"),
        ({"mamba_conv_bias": False}, "mamba_conv_bias=False"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ],
)
def test_jamba_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=f"^jamba: config option {re.escape(named)} cannot be converted"):
        from_transformers(tiny_model("jamba", **change))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"mlp_alpha_factor": 2.0}, "*_alpha_factor=[1.5, 2.0]"),
        ({"sliding_window": 4}, "sliding_window=4"),
        ({"head_dim": 4}, "head_dim=4"),
    ],
)
def test_minimax_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=f"^minimax: config option {re.escape(named)} cannot be converted"):
        from_transformers(tiny_model("minimax", **change))


def test_lfm2_with_biases_in_its_convolution_layers_converts_exactly():
    """LFM2's ``conv_bias``: the gated convolution's projections and taps with biases."""
    logits_agree(tiny_model("lfm2", conv_bias=True), tolerance=1e-5)


def test_rwkv_halved_in_eval_mode_converts_at_its_training_scale():
    """RWKV-4's eval mode divides each block's output weights by 2^⌊block / R⌋ in place and halves the stream every R
    blocks: converted after such a forward, the model has the training-mode weights and gives transformers'
    training-mode logits (float64, to its float32 WKV).  Its eval-mode logits differ from its own training-mode ones
    through each LayerNorm's ε (a norm of x / 2^s with ε is a norm of x with ε·4^s): far above round-off, far below
    the logits."""
    theirs = tiny_model("rwkv", torch.float64, rescale_every=1, num_hidden_layers=3)
    inputs = tokens(12)
    with torch.no_grad():
        halved = theirs(inputs).logits  # eval mode: the weights are divided now
        assert theirs.rwkv.layers_are_rescaled
        ours = from_transformers(theirs)(inputs).logits
        trained = theirs.train()(inputs).logits
    largest = trained.abs().max()
    assert (ours - trained).abs().max() <= FLOAT32_ROUNDING * largest
    assert 1e-6 * largest < (halved - trained).abs().max() < 1e-2 * largest


def logits_agree(theirs: torch.nn.Module, length: int = 12, tolerance: float = FLOAT32_ROUNDING) -> None:
    """The converted model's logits are transformers' (float64: to its float32 roundings) within ``tolerance`` of the
    largest."""
    inputs = tokens(length)
    with torch.no_grad():
        expected = theirs(inputs).logits
        got = from_transformers(theirs)(inputs).logits
    assert (got - expected).abs().max() <= tolerance * expected.abs().max()


@pytest.mark.parametrize(
    ("family", "change"), [("mamba2", {"layer_norm_epsilon": 1e-3}), ("bamba", {"rms_norm_eps": 1e-3})]
)
def test_the_gated_norm_keeps_the_checkpoint_eps(family, change):
    """mamba2's ``norm_eps``: an ε other than mamba_ssm's 1e-5 (large, to show) converts exactly."""
    model = tiny_model(family, torch.float64, **change)
    assert from_transformers(model).seqdyn.blocks[0].mixer.norm.eps == next(iter(change.values()))
    logits_agree(model)


@pytest.mark.parametrize(
    ("family", "limit"), [("mamba2", (0.01, 0.05)), ("bamba", (1.0, 1.3)), ("granitemoehybrid", (1.0, 1.3))]
)
def test_a_limit_on_the_step_converts_to_mamba2s_clamp(family, limit):
    """``time_step_limit`` → ``dt_floor`` / ``dt_ceiling``, each limit inside the spread of the tiny model's Δ so
    that both clamps bite; over a prompt transformers clamps as well (it does not when it decodes a token: there the
    two part where a clamp bites)."""
    model = tiny_model(family, torch.float64, time_step_limit=limit)
    mixer = next(block.mixer for block in from_transformers(model).seqdyn.blocks if block.mixer.name == "mamba2")
    assert (mixer.decay.floor, mixer.decay.ceiling) == limit
    logits_agree(model)


@pytest.mark.parametrize(
    "change",
    [
        {"num_local_experts": 0},
        {"position_embedding_type": None},
        {"tie_word_embeddings": False},
        {"embedding_multiplier": 1.0, "logits_scaling": 1.0},
    ],
)
def test_granite_dense_without_positions_untied_or_unscaled_converts_exactly(change):
    """Granite 4.0's variants: dense (its shared MLP alone, H-Micro), attention without positions (the released
    models), an untied head, no μP scaling of the embedding or logits (the head then stays tied)."""
    model = tiny_model("granitemoehybrid", torch.float64, **change)
    ours = from_transformers(model)
    scaled = change.get("embedding_multiplier", 3.0) != 1.0
    assert ours.config.tie_word_embeddings is (change.get("tie_word_embeddings", True) and not scaled)
    assert ours.config.model["mlp"] == ("swiglu" if change.get("num_local_experts") == 0 else "moe")
    logits_agree(model)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"position_embedding_type": "alibi"}, "position_embedding_type='alibi'"),
        ({"mamba_proj_bias": True}, "mamba_proj_bias=True"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ],
)
def test_granite_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=f"^granitemoehybrid: config option {re.escape(named)} cannot be"):
        from_transformers(tiny_model("granitemoehybrid", **change))


def test_nemotron_h_layers_become_blocks_of_a_mixer_and_the_mlp_after_it():
    """M, -, M, *, -, M: four blocks (mamba2 + MLP, mamba2, attention + MLP, mamba2); attention without positions,
    Δ clamped from below at ``time_step_min`` as the Mamba-2 layer does over a prompt."""
    ours = from_transformers(tiny_model("nemotron_h"))
    assert ours.config.model["mixer"] == ["mamba2", "mamba2", "softmax_attention", "mamba2"]
    assert ours.config.model["mlp"] == ["relu2", "none", "relu2", "none"]
    assert not ours.seqdyn.blocks[2].mixer.rotary and ours.seqdyn.blocks[0].mixer.decay.floor == 0.001


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"layers_block_type": ["mlp", "linear_attention"], "num_hidden_layers": 2}, "layers_block_type[0]='mlp'"),
        ({"layers_block_type": ["linear_attention", "moe"], "num_hidden_layers": 2}, "layers_block_type[1]='moe'"),
        ({"mlp_hidden_act": "silu"}, "mlp_hidden_act='silu'"),
        ({"use_bias": True}, "use_bias=True"),
        ({"mamba_num_heads": 6}, "mamba_num_heads=6"),
    ],
)
def test_nemotron_h_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=f"^nemotron_h: config option {re.escape(named)} cannot be converted"):
        from_transformers(tiny_model("nemotron_h", **change))


NO_ROPE = {"rope_type": "default", "rope_theta": None}


@pytest.mark.parametrize("change", [{"rope_parameters": NO_ROPE}, {"linear_allow_neg_eigval": False}])
def test_olmo_hybrid_without_positions_or_negative_eigenvalues_converts_exactly(change):
    """The released OLMo-hybrid checkpoints have no rotary embeddings (no ``rope_theta``); β ∈ (0, 1) is the other
    delta rule. In float32, to the issue's 1e-5 (OLMo-hybrid's float32 norms after every branch leave its float64
    model a few times 8 float32 roundings from seqdyn's)."""
    model = tiny_model("olmo_hybrid", **change)
    ours = from_transformers(model)
    attention, delta = ours.seqdyn.blocks[1].mixer, ours.seqdyn.blocks[0].mixer
    assert attention.rotary is ("rope_parameters" not in change)
    assert delta.negative_eigenvalues is ("linear_allow_neg_eigval" not in change)
    assert ours.config.model["norm_position"] == ["pre", "output"] * 2
    logits_agree(model, tolerance=1e-5)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"rms_norm_eps": 1e-5}, "rms_norm_eps=1e-05"),
        ({"attention_bias": True}, "attention_bias=True"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ],
)
def test_olmo_hybrid_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=f"^olmo_hybrid: config option {re.escape(named)} cannot be converted"):
        from_transformers(tiny_model("olmo_hybrid", **change))


def test_a_qwen3_5_vision_language_checkpoint_converts_its_text_model(tmp_path):
    """A ``qwen3_5`` checkpoint (``Qwen3_5ForConditionalGeneration``, as the released models are saved):
    ``seqdyn convert`` converts the language model that ``AutoModelForCausalLM`` loads from it."""
    from transformers import AutoModelForCausalLM, Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from seqdyn.hf.convert import convert_checkpoint, load_model

    torch.manual_seed(0)
    vision = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=16, out_hidden_size=16)
    config = Qwen3_5Config(text_config=TINY_CONFIGS["qwen3_5_text"][2], vision_config=vision)
    Qwen3_5ForConditionalGeneration(config).save_pretrained(tmp_path / "vlm")
    convert_checkpoint(tmp_path / "vlm", tmp_path / "out")
    inputs = tokens(12)
    with torch.no_grad():
        expected = AutoModelForCausalLM.from_pretrained(tmp_path / "vlm")(inputs).logits
        got = load_model(tmp_path / "out")(inputs).logits
    assert (got - expected).abs().max() <= 1e-5 * expected.abs().max()


def test_an_unsupported_family_is_refused_in_one_line_naming_it():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(
        UnsupportedModel,
        match=r"^model: family 'gpt2' \(GPT2LMHeadModel\) has no seqdyn converter; "
        r"supported: bailing_hybrid, bamba, falcon_h1, falcon_mamba, granitemoehybrid, jamba, kimi_linear, lfm2, "
        r"lfm2_moe, mamba, mamba2, minimax, nemotron_h, olmo_hybrid, qwen3_5_moe_text, qwen3_5_text, qwen3_next, "
        r"recurrent_gemma, rwkv, xlstm, zamba, zamba2$",
    ):
        from_transformers(model)


def test_convert_writes_a_seqdyn_checkpoint_that_loads_and_gives_transformers_logits(tmp_path):
    from transformers import AutoModelForCausalLM
    from typer.testing import CliRunner

    from seqdyn.cli import app

    importlib.import_module("seqdyn.hf")  # registers the seqdyn Auto classes

    theirs = tiny_mamba(torch.float32)
    theirs.save_pretrained(tmp_path / "mamba")
    result = CliRunner().invoke(app, ["convert", str(tmp_path / "mamba"), str(tmp_path / "seqdyn")])
    assert result.exit_code == 0, result.output
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "seqdyn").eval()
    assert type(loaded).__name__ == "SeqdynForCausalLM" and loaded.config.model["norm_eps"] == 1e-5
    inputs = tokens(16)
    with torch.no_grad():
        expected = theirs(inputs).logits
        assert (loaded(inputs).logits - expected).abs().max() <= 1e-5 * expected.abs().max()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mamba", "seqdyn"]  # no partial folder left
    torch.save(inputs, tmp_path / "ids.pt")
    result = CliRunner().invoke(
        app, ["inspect", str(tmp_path / "seqdyn"), "--input", str(tmp_path / "ids.pt")], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0 and "(s6, 2 layers)" in result.output, result.output


def test_convert_refuses_bad_folders_in_one_line_and_writes_nothing(tmp_path):
    from typer.testing import CliRunner

    from seqdyn.cli import app

    def convert(*args: str) -> str:
        result = CliRunner().invoke(app, ["convert", *args])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        return result.output

    assert "config.json not found" in convert(str(tmp_path / "nothing"), str(tmp_path / "out"))
    theirs = tiny_mamba(torch.float32)
    theirs.save_pretrained(tmp_path / "mamba")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_text((tmp_path / "mamba" / "config.json").read_text())
    assert "has no weights" in convert(str(tmp_path / "bare"), str(tmp_path / "out"))
    wider = tiny_mamba(torch.float32)
    wider.config.hidden_size = 24  # the config no longer matches the weights' shapes
    wider.config.save_pretrained(tmp_path / "bare")
    for weights in (tmp_path / "mamba").glob("*.safetensors"):
        (tmp_path / "bare" / weights.name).write_bytes(weights.read_bytes())
    assert "do not load into its config" in convert(str(tmp_path / "bare"), str(tmp_path / "out"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert "is not empty" in convert(str(tmp_path / "mamba"), str(tmp_path / "full"))
    assert not (tmp_path / "out").exists()


def _save_word_tokenizer(folder) -> None:
    """A word-level tokenizer over VOCAB words w0 … w47, saved as transformers saves one."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0").save_pretrained(folder)


@pytest.mark.parametrize(
    ("family", "changes", "title"),
    [
        ("mamba", {"hidden_size": 8}, "(s6, 2 layers)"),
        ("qwen3_5_text", {}, "(gated_deltanet, softmax_attention, 4 layers)"),
    ],
)
def test_inspect_opens_a_transformers_checkpoint_as_coefficient_dynamics(family, changes, title, tmp_path):
    """`seqdyn inspect MODEL_DIR --text ...`: per layer and head of the converted model, the coefficient table
    measured on the text through the folder's tokenizer, and the heat maps with --plot — for S6 (a head per
    channel) and for the hybrid Qwen3.5 (Gated DeltaNet heads and attention heads)."""
    from typer.testing import CliRunner

    from seqdyn.analysis.model import inspect_model
    from seqdyn.cli import app

    theirs = TINY[family](**changes)
    theirs.save_pretrained(tmp_path / "model")
    _save_word_tokenizer(tmp_path / "model")
    text = " ".join(f"w{i % VOCAB}" for i in range(5, 65, 3))  # 20 words
    result = CliRunner().invoke(
        app,
        ["inspect", str(tmp_path / "model"), "--text", text, "--plot", str(tmp_path / "maps.png")],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    model = from_transformers(theirs).seqdyn
    expected = inspect_model(model, torch.tensor([[i % VOCAB for i in range(5, 65, 3)]]))
    heads = [
        getattr(block.mixer, "inner", None) if family == "mamba" else block.mixer.heads for block in model.blocks
    ]  # S6: one head per channel
    assert len(expected) == sum(heads)
    assert title in result.output and "from --text (20 tokens)" in result.output
    assert (tmp_path / "maps.png").stat().st_size > 0


def test_inspect_saves_each_layers_dsf_matrices_and_names_the_ones_too_large(tmp_path):
    """`seqdyn inspect MODEL_DIR --dsf FILE`: per layer the DSF of seed 000 eq. 12 on the text's activations, whose
    simulation gives the layer's own core (here a Gated DeltaNet layer and an attention layer of Qwen3.5); a layer
    whose Λ would exceed the size limit is left out with the reason."""
    from typer.testing import CliRunner

    from seqdyn import coefficient_dynamics
    from seqdyn.analysis.model import capture_mixer_inputs, layer_dsfs
    from seqdyn.cli import app
    from seqdyn.core.dsf import DSF
    from seqdyn.mixers.base import MixerState

    theirs = TINY["qwen3_5_text"](torch.float64)
    theirs.save_pretrained(tmp_path / "model")
    ids = tokens(9)[:1]
    torch.save(ids, tmp_path / "ids.pt")
    result = CliRunner().invoke(
        app,
        ["inspect", str(tmp_path / "model"), "--input", str(tmp_path / "ids.pt"), "--dsf", str(tmp_path / "dsf.pt")],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    saved = torch.load(tmp_path / "dsf.pt")
    model = from_transformers(theirs).seqdyn
    calls = capture_mixer_inputs(model, ids)
    assert list(saved) == [call.label for call in calls] and "wrote" in result.output
    for call in calls[:2]:  # gated_deltanet (N = K·V = 48), softmax_attention (N = T·V = 72)
        inputs, _ = call.mixer.core_inputs(call.x, MixerState())
        simulated = DSF(**saved[call.label]).simulate(inputs.v)
        expected = coefficient_dynamics(inputs, backend="quadratic")
        torch.testing.assert_close(simulated, expected, rtol=1e-9, atol=1e-9)
    dsfs, skipped = layer_dsfs(model, ids, max_entries=10_000)
    assert not dsfs and set(skipped) == set(saved) and "more than 10,000" in next(iter(skipped.values()))


def test_inspect_a_folder_needs_text_or_token_ids_and_a_tokenizer_for_text(tmp_path):
    from typer.testing import CliRunner

    from seqdyn.cli import app

    tiny_mamba2().save_pretrained(tmp_path / "model")
    runner = CliRunner()
    result = runner.invoke(app, ["inspect", str(tmp_path / "model")])
    assert result.exit_code == 2 and "--text" in result.output and "--input" in result.output
    result = runner.invoke(app, ["inspect", str(tmp_path / "model"), "--text", "w1 w2"])
    assert result.exit_code == 2 and "has no tokenizer" in result.output
    torch.save(torch.tensor([[1, 2, 3, VOCAB]]), tmp_path / "ids.pt")
    result = runner.invoke(app, ["inspect", str(tmp_path / "model"), "--input", str(tmp_path / "ids.pt")])
    assert result.exit_code == 2 and f"in [0, {VOCAB})" in result.output


def test_convert_check_prints_every_family_with_its_differences():
    from typer.testing import CliRunner

    from seqdyn.cli import app

    result = CliRunner().invoke(app, ["convert", "--check"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for family, (model_class, _, _) in TINY_CONFIGS.items():
        assert f"│ {family} " in result.output and model_class in result.output
    assert result.output.count("True") == len(TINY_CONFIGS)  # the same greedy tokens, every family
    refused = result.output[result.output.index("refused: the linear-recurrent families") :]
    for family in NOT_YET:
        assert f"│ {family} " in refused, family
    assert CliRunner().invoke(app, ["convert"]).exit_code == 2


def test_a_family_of_the_roadmap_is_refused_with_what_seqdyn_lacks_for_it():
    from transformers import Lfm3Config, Lfm3ForCausalLM

    config = Lfm3Config(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=0,
    )
    with pytest.raises(
        UnsupportedModel,
        match=r"^model: family 'lfm3' \(Lfm3ForCausalLM\) has "
        r"no seqdyn converter yet \(it needs norms after each branch as well as before it, .*\); "
        r"supported: bailing_hybrid, bamba, .*, rwkv, xlstm, zamba, zamba2$",
    ):
        from_transformers(Lfm3ForCausalLM(config))


@pytest.mark.parametrize(
    "change",
    [
        dict(mamba_rms_norm=True, mamba_norm_before_gate=False),
        dict(tie_word_embeddings=True, embedding_multiplier=1.0, lm_head_multiplier=1.0),
    ],
    ids=["gated-norm", "tied-unscaled"],
)
def test_falcon_h1_with_the_gated_norm_or_a_tied_unscaled_head_converts_exactly(change):
    theirs = TINY["falcon_h1"](torch.float64, **change)
    ours = from_transformers(theirs)
    assert ours.config.tie_word_embeddings is change.get("tie_word_embeddings", False)
    assert (ours.seqdyn.blocks[0].mixer.parts[0].norm is not None) is change.get("mamba_rms_norm", False)
    inputs = tokens(20)
    with torch.no_grad():
        expected = theirs(inputs).logits
        assert (ours(inputs).logits - expected).abs().max() <= FLOAT32_ROUNDING * expected.abs().max()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (dict(mamba_rms_norm=True, mamba_norm_before_gate=True), "mamba_norm_before_gate=True"),
        (dict(mlp_bias=True), "mlp_bias=True"),
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
    ],
)
def test_falcon_h1_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=rf"^falcon_h1: config option {re.escape(named)} cannot be converted"):
        from_transformers(TINY["falcon_h1"](**change))


def test_recurrent_gemma_without_attention_biases_converts_exactly_and_its_activation_is_checked():
    """The released RecurrentGemma has no q/k/v biases (only the output projection's); another activation than
    the tanh GELU of its GeGLU and gate branch is refused by name."""
    theirs = TINY["recurrent_gemma"](torch.float64, attention_bias=False)
    ours = from_transformers(theirs)
    inputs = tokens(20)
    with torch.no_grad():
        expected = theirs(inputs).logits
        assert (ours(inputs).logits - expected).abs().max() <= FLOAT32_ROUNDING * expected.abs().max()
    with pytest.raises(UnsupportedModel, match=r"^recurrent_gemma: config option hidden_activation='relu'"):
        from_transformers(TINY["recurrent_gemma"](hidden_activation="relu"))


def test_qwen3_next_with_dense_layers_among_the_experts_is_refused():
    with pytest.raises(UnsupportedModel, match=r"^qwen3_next: config option decoder_sparse_step / mlp_only_layers"):
        from_transformers(tiny_model("qwen3_next", mlp_only_layers=[1]))


def test_a_converted_folder_has_the_tokenizer_and_inspect_reads_text_through_it_as_the_readme_writes(tmp_path):
    """`seqdyn convert mamba/ mamba-seqdyn/` then `seqdyn inspect mamba-seqdyn/ --text …`: the tokenizer and the
    generation config travel with the weights."""
    from typer.testing import CliRunner

    from seqdyn.cli import app

    theirs = tiny_mamba(torch.float32, hidden_size=8)
    theirs.save_pretrained(tmp_path / "mamba")
    _save_word_tokenizer(tmp_path / "mamba")
    result = CliRunner().invoke(app, ["convert", str(tmp_path / "mamba"), str(tmp_path / "mamba-seqdyn")])
    assert result.exit_code == 0, result.output
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (tmp_path / "mamba-seqdyn" / name).read_bytes() == (tmp_path / "mamba" / name).read_bytes()
    text = " ".join(f"w{i % VOCAB}" for i in range(5, 65, 3))
    result = CliRunner().invoke(
        app, ["inspect", str(tmp_path / "mamba-seqdyn"), "--text", text], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "from --text (20 tokens)" in result.output


def test_convert_help_names_every_family_it_converts():
    from typer.testing import CliRunner

    from seqdyn.cli import app
    from seqdyn.hf.convert import SUPPORTED

    words = " ".join(CliRunner().invoke(app, ["convert", "--help"], env={"COLUMNS": "200"}).output.split())
    names = {
        "mamba": "Mamba,",
        "falcon_mamba": "Falcon-Mamba",
        "mamba2": "Mamba-2",
        "qwen3_5_text": "Qwen3.5,",
        "qwen3_next": "Qwen3-Next",
        "qwen3_5_moe_text": "Qwen3.5-MoE",
        "bamba": "Bamba",
        "granitemoehybrid": "Granite-MoE-Hybrid",
        "nemotron_h": "Nemotron-H",
        "olmo_hybrid": "OLMo-Hybrid",
        "recurrent_gemma": "RecurrentGemma",
        "falcon_h1": "Falcon-H1",
        "jamba": "Jamba,",
        "minimax": "MiniMax-01,",
        "lfm2": "LFM2,",
        "lfm2_moe": "LFM2-MoE,",
        "rwkv": "RWKV-4,",
        "kimi_linear": "Kimi-Linear,",
        "bailing_hybrid": "Bailing-hybrid,",
        "xlstm": "xLSTM 7B,",
        "zamba": "Zamba,",
        "zamba2": "Zamba2.",
    }
    assert set(names) == set(SUPPORTED)  # a family added to the registry needs its name here and in the help
    assert all(name in words for name in names.values()), words


@pytest.mark.parametrize("family", ["mamba2", "qwen3_5_text"])
def test_a_model_without_a_language_model_head_is_refused_in_one_line(family):
    body = TINY[family]().model if family == "qwen3_5_text" else TINY[family]().backbone
    with pytest.raises(UnsupportedModel, match=rf"^model: {type(body).__name__} has no language-model head"):
        from_transformers(body)


@contextlib.contextmanager
def kimi_linear_in_float64(family: str = "kimi_linear"):
    """transformers' Kimi-Linear (or Bailing-hybrid) with its float32 casts made float64: the module's
    ``torch.float32``, ``torch.float`` and ``Tensor.float`` (its decay gate, norms, router, chunk and RoPE frequencies)
    keep the model's float64."""
    import types

    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")

    class Float64Torch(types.ModuleType):
        def __getattr__(self, name):
            return torch.float64 if name in ("float32", "float") else getattr(torch, name)

    original, original_float = modeling.torch, torch.Tensor.float
    modeling.torch, torch.Tensor.float = Float64Torch("torch"), lambda self, *args, **kwargs: self
    try:
        yield
    finally:
        modeling.torch, torch.Tensor.float = original, original_float


@pytest.mark.parametrize("q_lora_rank", [None, 5], ids=["query-projection", "query-latent"])
def test_kimi_linear_is_exact_in_float64_with_transformers_float32_casts_lifted(q_lora_rank):
    """KDA, latent attention (with and without the query's latent) and the experts — a selection bias that changes
    which experts are chosen, groups, the routed scale — to float64 round-off once transformers computes in
    float64 throughout."""
    theirs = tiny_model("kimi_linear", torch.float64, q_lora_rank=q_lora_rank)
    with torch.no_grad():
        for module in theirs.modules():
            if hasattr(module, "e_score_correction_bias"):
                module.e_score_correction_bias.normal_(0, 0.3)
    ours = from_transformers(theirs)
    inputs = tokens(30)
    with torch.no_grad(), kimi_linear_in_float64():
        expected = theirs(inputs, use_cache=False).logits
    with torch.no_grad():
        got = ours(inputs).logits
    assert float((got - expected).abs().max() / expected.abs().max()) < 1e-12
    chosen = theirs.model.layers[1].mlp.gate(theirs.model.embed_tokens(inputs))[2]
    unbiased = ours.seqdyn.blocks[1].mlp
    unbiased.selection_bias.zero_()
    assert not torch.equal(
        chosen.sort(-1).values, unbiased.route(theirs.model.embed_tokens(inputs).flatten(0, 1))[1].sort(-1).values
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (dict(attention_bias=True), "attention_bias"),
        (dict(num_key_value_heads=1), "num_key_value_heads"),
        (dict(hidden_act="gelu"), "hidden_act"),
    ],
)
def test_kimi_linear_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=rf"^kimi_linear: config option {named}="):
        from_transformers(tiny_model("kimi_linear", **change))


@pytest.mark.parametrize("use_expert_bias", [True, False], ids=["expert-bias", "no-bias"])
def test_lfm2_moe_routes_with_its_expert_bias_exactly(use_expert_bias):
    """The expert bias (a buffer transformers' initialization leaves at 0) moved so that it changes the choice."""
    for dtype, bound in ((torch.float32, 1e-5), (torch.float64, FLOAT32_ROUNDING)):
        theirs = tiny_model("lfm2_moe", dtype, use_expert_bias=use_expert_bias)
        if use_expert_bias:
            for layer in theirs.model.layers[1:]:
                layer.feed_forward.expert_bias.normal_(0, 0.5)
        ours = from_transformers(theirs)
        with torch.no_grad():
            expected, got = theirs(tokens(30)).logits.double(), ours(tokens(30)).logits.double()
        assert float((got - expected).abs().max() / expected.abs().max()) <= bound
        assert (ours.seqdyn.blocks[1].mlp.selection_bias is not None) == use_expert_bias


@pytest.mark.parametrize(
    "change",
    [dict(), dict(kda_safe_gate=False, q_lora_rank=5)],
    ids=["bounded-decay", "softplus-decay-query-latent"],
)
def test_bailing_hybrid_is_exact_in_float64_with_transformers_float32_casts_lifted(change):
    """Its KDA (the bounded decay, or Kimi's softplus one, from full-rank projections), its latent attention with
    interleaved RoPE and a gate per head, and its experts, to float64 round-off."""
    theirs = tiny_model("bailing_hybrid", torch.float64, **change)
    with torch.no_grad():
        for module in theirs.modules():
            if hasattr(module, "e_score_correction_bias"):
                module.e_score_correction_bias.normal_(0, 0.3)
    ours = from_transformers(theirs)
    rotary, dim = theirs.model.rotary_emb, theirs.config.qk_rope_head_dim  # its frequencies, made in float32 at init
    rotary.inv_freq = 1.0 / rotary.config.rope_parameters["rope_theta"] ** (
        torch.arange(0, dim, 2, dtype=torch.float64) / dim
    )
    inputs = tokens(30)
    with torch.no_grad(), kimi_linear_in_float64("bailing_hybrid"):
        expected = theirs(inputs, use_cache=False).logits
    with torch.no_grad():
        got = ours(inputs).logits
    assert float((got - expected).abs().max() / expected.abs().max()) < 1e-12
    bound = ours.seqdyn.blocks[0].mixer.decay.lower_bound
    assert bound == (None if change else theirs.config.kda_lower_bound)


def tiny_xlstm(dtype: torch.dtype = torch.float32, gates=(4.0, -3.0, 8.0, 0.5), **changes) -> torch.nn.Module:
    """A random ``xLSTMForCausalLM`` (width 64, 4 heads of K = 16 and V = 32, chunks of 16, ε = 0.01) whose input gates
    ĩ reach e^8 and drop to e^-3: the stabilizer m_t moves, and ε·e^{m_t} is most of some rows' normalizer."""
    model = tiny_model("xlstm", dtype, **changes)
    with torch.no_grad():
        for block in model.backbone.blocks:
            layer = block.mlstm_layer
            bias = layer.igate_preact.bias if hasattr(layer, "igate_preact") else layer.ifgate_preact.bias[:4]
            bias.copy_(torch.tensor(gates))
    return model


def xlstm_wide_logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """transformers' xLSTM logits in the model's dtype, its final norm's float32 reduction lifted (its own forward
    casts the logits to float32)."""
    model.backbone.out_norm.force_float32_reductions = False
    logits = model.lm_head(model.backbone(ids).last_hidden_state)
    cap = model.config.output_logit_soft_cap
    return cap * torch.tanh(logits / cap)


@pytest.mark.parametrize("length", [32, 48], ids=["two-chunks", "three-chunks"])
def test_xlstm_is_exact_in_float64_with_its_float32_parts_lifted(length):
    """Whole chunks of 16 (transformers' chunkwise kernel, in the model's dtype) with the norms' float32 reductions
    lifted: seqdyn's mLSTM — its ε·e^{m_t} from the step recurrence of m — is transformers' chunk by chunk to 1e-12."""
    theirs = tiny_xlstm(torch.float64, norm_reduction_force_float32=False)
    ours = from_transformers(theirs)
    ids = tokens(length)
    with torch.no_grad():
        expected, got = xlstm_wide_logits(theirs, ids), ours(ids).logits
    assert float((got - expected).abs().max() / expected.abs().max()) < 1e-12


def test_xlstm_without_its_normalizer_eps_would_not_agree():
    """The ε·e^{m_t} term is not lost on the way: the converted model with ε = 0 misses transformers' logits."""
    theirs = tiny_xlstm(torch.float64, norm_reduction_force_float32=False)
    ours = from_transformers(theirs)
    for block in ours.seqdyn.blocks:
        block.mixer.eps = 0.0
    ids = tokens(32)
    with torch.no_grad():
        expected, got = xlstm_wide_logits(theirs, ids), ours(ids).logits
    assert float((got - expected).abs().max() / expected.abs().max()) > 1e-6


def test_xlstm_with_fused_projections_converts_exactly():
    """``weight_mode="fused"`` (q, k, v and the output gate in one projection, the gates in another, the MLP's
    gate and up in one); transformers' own initialization of that mode fails on its gate biases, so the weights are
    drawn here."""
    from transformers import initialization, xLSTMConfig, xLSTMForCausalLM

    torch.manual_seed(0)
    with initialization.no_init_weights():
        theirs = xLSTMForCausalLM(xLSTMConfig(**{**TINY_CONFIGS["xlstm"].fields, "weight_mode": "fused"})).eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.copy_(0.2 * torch.randn_like(parameter))
    ours, ids = from_transformers(theirs), tokens(40)
    with torch.no_grad():
        expected, got = theirs(ids).logits, ours(ids).logits
    assert float((got - expected).abs().max() / expected.abs().max()) < 1e-5


def test_xlstm_with_biases_is_refused_by_name():
    with pytest.raises(UnsupportedModel, match=re.escape("use_bias=True")):
        from_transformers(tiny_model("xlstm", use_bias=True))


def test_xlstm_of_widths_its_cache_rounds_converts_the_layers_widths():
    """Width 96: the layers' keys have 48 channels, transformers' cache 64 (it fails with its cache; without it, the
    logits are the layers'), seqdyn computes the layers' 48."""
    theirs = tiny_xlstm(hidden_size=96, qk_dim_factor=0.5, v_dim_factor=1.0)
    ours, ids = from_transformers(theirs), tokens(40)
    with torch.no_grad():
        expected, got = theirs(ids, use_cache=False).logits, ours(ids).logits
    assert float((got - expected).abs().max() / expected.abs().max()) < 1e-5


def _zamba2_side_inputs(theirs: torch.nn.Module, ours: torch.nn.Module, inputs: torch.Tensor) -> list[tuple]:
    """Per hybrid layer, transformers' shared block + ``linear`` output and seqdyn's projection of its shared block's,
    both on transformers' hidden state entering that layer."""
    backbone, model = theirs.model, ours.seqdyn
    embeddings = backbone.embed_tokens(inputs)
    positions = torch.arange(inputs.shape[1])[None]
    rotary = backbone.rotary_emb(embeddings, positions) if theirs.config.use_mem_rope else None
    mask = torch.full((inputs.shape[1],) * 2, float("-inf"), dtype=embeddings.dtype).triu(1)[None, None]
    pairs, x = [], embeddings
    for index, layer in enumerate(backbone.layers):
        if hasattr(layer, "shared_transformer"):
            expected = layer.linear(
                layer.shared_transformer(x, embeddings, index, attention_mask=mask, position_embeddings=rotary)
            )
            block = model.blocks[index]
            pairs.append((expected, block.projection(block.shared(x, embeddings, block.use))))
        x = layer(x, embeddings, index, None, mask, position_embeddings=rotary)
    return pairs


@pytest.mark.parametrize(
    "change",
    [
        {},
        dict(use_shared_attention_adapter=False, use_mem_rope=False, num_mem_blocks=1),
        dict(hidden_act="silu", use_shared_attention_adapter=False, num_key_value_heads=1),
    ],
    ids=["adapters-rope-two-blocks", "one-block-no-positions", "swiglu-grouped-heads"],
)
def test_zamba2_is_exact_in_float64_with_transformers_float32_casts_lifted(change):
    """Zamba2's shared blocks — attention on [hidden, embeddings] with its √2 score factor, each use's adapters, the
    MLP, the layer's own projection into the Mamba-2 layer's input — equal transformers' to float64 round-off, layer by
    layer; the whole model to the ~1e-11 that transformers' float64 Mamba-2 chunk scan leaves (Bamba's as well)."""
    theirs = tiny_model("zamba2", torch.float64, **change)
    ours = from_transformers(theirs)
    if theirs.config.use_mem_rope:  # its frequencies, made in float32 when it was built
        dims = theirs.config.attention_head_dim
        theirs.model.rotary_emb.inv_freq = 1.0 / 10_000.0 ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims)
    inputs = tokens(30)
    with torch.no_grad(), kimi_linear_in_float64("zamba2"):
        pairs = _zamba2_side_inputs(theirs, ours, inputs)
        expected = theirs(inputs, use_cache=False).logits
    assert len(pairs) == 3
    for want, got in pairs:
        assert float((got - want).abs().max() / want.abs().max()) < 1e-13
    with torch.no_grad():
        got = ours(inputs).logits
    assert float((got - expected).abs().max() / expected.abs().max()) < 1e-9


@pytest.mark.parametrize("part", ["adapters", "score-factor"])
def test_zamba2_without_its_adapters_or_score_factor_would_not_agree(part):
    """The check can fail: seqdyn's model with the adapters' weights zeroed, or without the √2 folded into the query,
    is off by far more than round-off."""
    theirs = tiny_model("zamba2", torch.float64)
    ours = from_transformers(theirs)
    with torch.no_grad():
        for block in ours.seqdyn.shared:
            if part == "adapters":
                for name, parameter in block.named_parameters():
                    if "adapters" in name:
                        parameter.zero_()
            else:
                queries = block.attention.qkv.base.weight[: block.attention.widths[0]]
                queries.div_(2**0.5)
        inputs = tokens(20)
        difference = (ours(inputs).logits - theirs(inputs).logits).abs().max() / theirs(inputs).logits.abs().max()
    assert difference > 1e-4


def test_zamba2_keeps_one_set_of_shared_weights_with_an_adapter_per_use():
    """Two shared blocks for three hybrid layers (0, 1, 0): one attention and MLP each, adapters per using layer."""
    ours = from_transformers(tiny_model("zamba2"))
    model = ours.seqdyn
    assert [getattr(block, "use", None) for block in model.blocks] == [None, 1, None, 3, 4]
    assert model.config.shared_inputs == [None, 0, None, 1, 0]
    assert sorted(model.shared[0].mlp.fc1.adapters) == ["1", "4"] and sorted(model.shared[1].mlp.fc1.adapters) == ["3"]
    assert model.blocks[1].shared is model.blocks[4].shared is model.shared[0]


def test_zamba2_with_untied_shared_weights_is_refused():
    theirs = tiny_model("zamba2")
    layers = theirs.model.layers
    layers[4].shared_transformer.feed_forward.down_proj = torch.nn.Linear(16, 16, bias=False)
    assert (
        layers[4].shared_transformer.feed_forward.down_proj is not layers[1].shared_transformer.feed_forward.down_proj
    )
    with pytest.raises(UnsupportedModel, match=r"^weights: model.layers.4.shared_transformer.feed_forward.down_proj"):
        from_transformers(theirs)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (dict(add_bias_linear=True), "add_bias_linear"),
        (dict(use_conv_bias=False), "use_conv_bias"),
        (dict(hidden_act="relu"), "hidden_act"),
    ],
)
def test_zamba2_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=rf"^zamba2: config option {named}="):
        from_transformers(tiny_model("zamba2", **change))


def tiny_zamba(dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    """The tiny Zamba with its heads' Δ, B, C projections drawn large (transformers starts them at 0 and the tiny
    model only moves them by N(0, 0.05²), which leaves the heads nearly alike)."""
    theirs = tiny_model("zamba", dtype)
    with torch.no_grad():
        for layer in theirs.model.layers:
            mamba = getattr(layer, "mamba_decoder", layer).mamba
            mamba.x_proj_weight.normal_(0, 0.7)
    return theirs


def test_zamba_is_exact_in_float64_with_transformers_float32_casts_lifted():
    """Zamba's Mamba heads (the s6 mixer's ``heads``: each head's Δ, B, C from its own channels by its own W_x, W_Δ),
    its interleaved in-projection and its one shared block, to float64 round-off of transformers' layer by layer."""
    theirs = tiny_zamba()
    ours = from_transformers(theirs)
    inputs = tokens(30)
    with torch.no_grad(), kimi_linear_in_float64("zamba"):
        expected = theirs(inputs, use_cache=False).logits
    with torch.no_grad():
        got = ours(inputs).logits
    assert ours.seqdyn.blocks[0].mixer.heads == 2
    assert float((got - expected).abs().max() / expected.abs().max()) < 1e-12


def test_zamba_mamba_layer_is_its_heads_and_not_one_b_and_c_for_all_channels():
    """A Mamba layer alone on the same input: seqdyn's s6 with heads equals transformers' ``ZambaMambaMixer`` to
    round-off, and with each head's W_x replaced by their mean (one B and C for all channels) it does not (the skip
    D x set to 0 in both, so that the output is the scan's)."""
    theirs = tiny_zamba()
    with torch.no_grad():
        theirs.model.layers[0].mamba.D.zero_()
    mixer = from_transformers(theirs).seqdyn.blocks[0].mixer
    u = torch.randn(2, 17, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), kimi_linear_in_float64("zamba"):
        expected = theirs.model.layers[0].mamba(u)
    with torch.no_grad():
        exact = float((mixer(u) - expected).abs().max() / expected.abs().max())
        mixer.x_proj.weight.copy_(mixer.x_proj.weight.mean(0, keepdim=True).expand_as(mixer.x_proj.weight))
        merged = float((mixer(u) - expected).abs().max() / expected.abs().max())
    assert exact < 1e-12 and merged > 1e-2


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (dict(mamba_proj_bias=True), "mamba_proj_bias"),
        (dict(mamba_conv_bias=False), "mamba_conv_bias"),
        (dict(hidden_mamba_act="gelu"), "hidden_mamba_act"),
        (dict(attention_hidden_size=24), "attention_hidden_size"),
    ],
)
def test_zamba_options_seqdyn_cannot_represent_are_refused_by_name(change, named):
    with pytest.raises(UnsupportedModel, match=rf"^zamba: config option {named}="):
        from_transformers(tiny_model("zamba", **change))
