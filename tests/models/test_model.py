"""The model stack: shapes for every head, block and hybrid stack; weight tying; streaming; parameter counts;
bad input."""

from __future__ import annotations

import pytest
import torch

from seqdyn import tasks
from seqdyn.models import build_model, count_parameters
from seqdyn.tasks.base import HEADS
from tests.models.helpers import CHANNELS, LENGTH, VOCAB, config, inputs, spec

HYBRID = dict(
    layers=3,
    mixer=["softmax_attention", "mamba2", "gated_deltanet"],
    mixer_options=[{"heads": 2}, {"state_dim": 4, "head_dim": 8}, {"heads": 2}],
)


@pytest.mark.parametrize("block", ["transformer", "gated"])
@pytest.mark.parametrize("input_kind", ["tokens", "channels"])
@pytest.mark.parametrize("head", HEADS)
def test_output_shape_of_every_head_and_block(head, input_kind, block):
    task_spec = spec(head, input_kind)
    model = build_model(config(block=block, short_conv=block == "gated"), task_spec)
    out = model(inputs(task_spec))
    assert out.shape == (3, LENGTH, task_spec.output_size)
    assert torch.isfinite(out).all()
    out.sum().backward()  # every parameter is reachable (no unused branch left behind)
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("block", ["transformer", "gated"])
@pytest.mark.parametrize(
    "options",
    [
        dict(mlp="swiglu", norm="rmsnorm"),
        dict(mlp="none", positions=False),
        dict(expand=2.0, short_conv=True, conv_size=3),
    ],
)
def test_hybrid_stacks_have_one_mixer_per_layer(block, options):
    model = build_model(config(block=block, **HYBRID, **options), spec())
    assert [type(b.mixer).name for b in model.blocks] == HYBRID["mixer"]
    width = 16 * (options.get("expand", 1.0) if block == "gated" else 1)
    assert all(b.mixer.d_model == width for b in model.blocks)
    assert model(inputs(spec())).shape == (3, LENGTH, VOCAB)


def test_task_outputs_feed_loss_and_metrics():
    task = tasks.build("mqar", vocab_size=32, seq_len=16, num_kv_pairs=2)
    model = build_model({"d_model": 16, "mixer": "linear_attention"}, task)  # a mapping and a task are accepted
    x, y = task.generate(4, seed=0)
    out = model(x)
    assert out.shape == (4, 16, 32) and task.loss(out, y).ndim == 0 and "accuracy" in task.metrics(out, y)
    assert model.config.mixer == "linear_attention" and model.spec == task.spec


def test_lm_head_is_tied_to_the_embedding():
    model = build_model(config(), spec())
    assert model.tied and model.head.weight is model.embedding.weight
    assert sum(1 for p in model.parameters() if p is model.embedding.weight) == 1
    assert not any(key.startswith("head.") for key in model.state_dict())  # one copy in checkpoints
    model.embedding.weight.data.zero_()
    assert model(inputs(spec())).abs().max() == 0  # logits are read through the embedding


@pytest.mark.parametrize("case", ["untied", "channels", "other_size"])
def test_lm_head_has_its_own_weight_where_tying_does_not_apply(case):
    task_spec = {
        "untied": spec(),
        "channels": spec("lm", "channels", output_size=VOCAB),
        "other_size": spec(output_size=VOCAB + 1),
    }[case]
    model = build_model(config(tie_embeddings=case != "untied"), task_spec)
    assert not model.tied and model.head.weight is not model.embedding.weight
    assert model.head.weight.shape == (task_spec.output_size, 16)


def test_logit_softcap_bounds_the_lm_logits_as_gemma_2():
    """Gemma 2 / Griffin: ``logits ← c·tanh(logits / c)``, the same in forward and step; only for lm heads."""
    model = build_model(config(logit_softcap=0.5), spec())
    x = inputs(spec())
    raw = model(x, head=False) @ model.embedding.weight.T
    torch.testing.assert_close(model(x), 0.5 * torch.tanh(raw / 0.5))
    stepped, _ = model.step(x[:, 0], model.init_state(x.shape[0]))
    torch.testing.assert_close(stepped, model(x)[:, 0])
    assert model(x).abs().max() < 0.5
    with pytest.raises(ValueError, match="logit_softcap"):
        build_model(config(logit_softcap=30.0), spec("tagging", output_size=VOCAB))


def test_only_lm_heads_are_tied():
    for head in ("tagging", "autoencoder"):
        assert not build_model(config(), spec(head, output_size=VOCAB)).tied


def test_classification_pools_the_mean_of_the_prefix():
    model = build_model(config(), spec("classification"))
    x = inputs(spec("classification"))
    h = model.norm(_blocks(model, x))
    expected = model.head.proj(h.mean(1))
    torch.testing.assert_close(model(x)[:, -1], expected)


def test_autoencoder_decodes_every_position_from_the_last_one():
    task_spec = spec("autoencoder")
    model = build_model(config(), task_spec)
    x = inputs(task_spec)
    changed = x.clone()
    changed[:, -1] = (changed[:, -1] + 1) % VOCAB
    out, out_changed = model(x), model(changed)
    assert not torch.allclose(out[:, 0], out_changed[:, 0])  # position 0 sees the last token
    h = model.norm(_blocks(model, x))[:, -1]
    torch.testing.assert_close(out, model.head(h.unsqueeze(1).expand(-1, LENGTH, -1)))  # only h_{T-1} matters


def _blocks(model, x):
    h = model.embed(x)
    for block in model.blocks:
        h = block(h)
    return h


# --- streaming ---------------------------------------------------------------------------------------------
STREAMING = {
    "softmax_attention": config(mixer="softmax_attention", mixer_options={"heads": 2}, positions=True),
    "mamba2": config(
        block="gated",
        short_conv=True,
        positions=False,
        mixer="mamba2",
        mixer_options={"state_dim": 4, "head_dim": 8, "chunk_size": 4},
    ),
    "hybrid": config(block="gated", expand=2.0, short_conv=True, mlp="swiglu", norm="rmsnorm", **HYBRID),
    # seed 002's attention block: post-norm, rotary positions instead of learned ones
    "post_norm_rotary": config(
        norm_position="post", positions=False, mixer="softmax_attention", mixer_options={"heads": 2, "rotary": True}
    ),
    "post_norm_gated": config(
        block="gated",
        norm_position="post",
        short_conv=True,
        positions=False,
        mixer="gated_deltanet",
        mixer_options={"heads": 2},
    ),
    # OLMo-hybrid: pre-norm Gated DeltaNet layers, output-norm attention layers, a final norm
    "output_norm_hybrid": config(
        norm_position=["pre", "output"],
        layers=2,
        positions=False,
        norm="rmsnorm",
        mixer=["gated_deltanet", "softmax_attention"],
        mixer_options=[{"heads": 2}, {"heads": 2, "rotary": True}],
    ),
    # Qwen3-Next's MLP: a mixture of SwiGLU experts with a shared expert
    "experts": config(
        positions=False,
        mlp="moe",
        mlp_ratio=0.5,
        norm="rmsnorm",
        mixer="gated_deltanet",
        mixer_options={"heads": 2},
        moe={"experts": 4, "top_k": 2, "shared_ratio": 0.5},
    ),
}


@pytest.mark.parametrize("name", list(STREAMING))
def test_step_equals_forward_for_an_lm(name):
    torch.manual_seed(0)
    model = build_model(STREAMING[name], spec()).double().eval()
    x = inputs(spec(), batch=2)
    expected = model(x)
    state = model.init_state(2)
    steps = []
    for t in range(LENGTH):
        out, state = model.step(x[:, t], state)
        steps.append(out)
    assert state.position == LENGTH
    torch.testing.assert_close(torch.stack(steps, 1), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("head", ["regression", "tagging", "classification"])
def test_step_equals_forward_on_channels(head):
    model = build_model(config(), spec(head, "channels")).double().eval()
    x = inputs(spec(head, "channels"), batch=2).double()
    state, steps = model.init_state(2), []
    for t in range(LENGTH):
        out, state = model.step(x[:, t], state)
        steps.append(out)
    torch.testing.assert_close(torch.stack(steps, 1), model(x), rtol=1e-9, atol=1e-9)


def test_streaming_stops_at_the_last_learned_position_and_refuses_the_autoencoder():
    model = build_model(config(), spec(input_len=2))
    state = model.init_state(1)
    for _ in range(2):
        _, state = model.step(torch.tensor([1]), state)
    with pytest.raises(ValueError, match="position 2"):
        model.step(torch.tensor([1]), state)
    with pytest.raises(ValueError, match="head"):
        build_model(config(), spec("autoencoder")).init_state(1)


# --- parameter counts --------------------------------------------------------------------------------------
def test_parameter_count_of_a_transformer():
    d, layers, hidden = 16, 2, 32  # mlp_ratio 2
    model = build_model(config(mixer="softmax_attention"), spec())
    layer = 2 * d + 4 * d * d + 2 * d + (d * hidden + hidden) + (hidden * d + d)  # LN, W_QKV + W_O, LN, GELU MLP
    embeddings = VOCAB * d + LENGTH * d  # tied head: no extra weight
    assert count_parameters(model) == embeddings + layers * layer + 2 * d
    assert count_parameters(model, embeddings=False) == layers * layer + 2 * d


def test_parameter_count_of_a_gated_stack():
    d, inner, width, hidden = 16, 32, 3, 32
    model = build_model(
        config(
            block="gated",
            expand=2.0,
            short_conv=True,
            conv_size=width,
            norm="rmsnorm",
            mlp="swiglu",
            positions=False,
            tie_embeddings=False,
        ),
        spec(),
    )
    layer = (
        d
        + 2 * d * inner
        + inner * width
        + inner
        + 4 * inner * inner
        + inner
        + inner * d  # norm … W_out
        + d
        + d * 2 * hidden
        + hidden * d
    )  # norm, SwiGLU without biases
    assert count_parameters(model) == VOCAB * d + 2 * layer + d + VOCAB * d  # untied head


# --- bad input ---------------------------------------------------------------------------------------------
def test_bad_inputs_name_what_is_wrong():
    model = build_model(config(), spec())
    with pytest.raises(ValueError, match="integer tokens"):
        model(torch.randn(2, LENGTH))
    with pytest.raises(ValueError, match="inputs"):
        model(torch.zeros(2, LENGTH, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="positions"):
        model(torch.zeros(2, LENGTH + 1, dtype=torch.long))
    channels = build_model(config(), spec("regression", "channels"))
    with pytest.raises(ValueError, match="channels"):
        channels(torch.randn(2, LENGTH, CHANNELS + 1))
    with pytest.raises(ValueError, match="state"):
        model.step(torch.tensor([1]), None)


def test_longer_inputs_are_fine_without_positions():
    model = build_model(config(positions=False), spec())
    assert model(torch.zeros(1, LENGTH + 5, dtype=torch.long)).shape == (1, LENGTH + 5, VOCAB)


def test_bad_specs_and_options_name_the_field():
    with pytest.raises(ValueError, match="head"):
        build_model(config(), spec("ranking"))
    with pytest.raises(ValueError, match="mixer_options"):
        build_model(config(mixer="mamba2", mixer_options={"head_dim": 7}), spec())
    with pytest.raises(ValueError, match="expand"):
        build_model(config(block="gated", expand=0.3), spec())


@pytest.mark.parametrize("block", ["transformer", "gated"])
def test_post_norm_blocks_normalize_after_each_residual_sum(block):
    """norm_position="post": every block output is LayerNorm(x + branch) (zero mean, unit variance per position),
    the model has no final norm, and the pre-norm model of the same weights computes something else."""
    torch.manual_seed(0)
    post = build_model(
        config(block=block, norm_position="post", mixer="gated_deltanet", mixer_options={"heads": 2}), spec()
    )
    pre = build_model(config(block=block, mixer="gated_deltanet", mixer_options={"heads": 2}), spec())
    missing = pre.load_state_dict(post.state_dict(), strict=False).missing_keys
    assert missing == ["norm.weight", "norm.bias"]  # only the final norm, which post-norm models have not
    assert isinstance(post.norm, torch.nn.Identity) and isinstance(pre.norm, torch.nn.LayerNorm)
    x = post.embed(inputs(spec()))
    for layer in post.blocks:
        x = layer(x)
        torch.testing.assert_close(x.mean(-1), torch.zeros_like(x[..., 0]), atol=1e-5, rtol=0)
        torch.testing.assert_close(x.var(-1, unbiased=False), torch.ones_like(x[..., 0]), atol=1e-3, rtol=0)
    assert not torch.allclose(post(inputs(spec())), pre(inputs(spec())))


def test_output_norm_blocks_add_the_normalized_branch():
    """norm_position="output" (OLMo 2): each residual adds LayerNorm(branch(x)) — the mixer's, then the MLP's, an
    update of zero mean per position; the model keeps its final norm."""
    torch.manual_seed(0)
    model = build_model(config(norm_position="output", mixer="gated_deltanet", mixer_options={"heads": 2}), spec())
    assert isinstance(model.norm, torch.nn.LayerNorm)
    x = model.embed(inputs(spec()))
    block = model.blocks[0]
    after_mixer = x + block.norm1(block.mixer(x))
    update = block(x) - after_mixer
    torch.testing.assert_close(update.mean(-1), torch.zeros_like(x[..., 0]), atol=1e-5, rtol=0)
    torch.testing.assert_close(update, block.norm2(block.mlp(after_mixer)))
    pre_norm = after_mixer + block.mlp(block.norm2(after_mixer))
    assert not torch.allclose(block(x), pre_norm)


def test_normed_residual_blocks_carry_the_normalized_stream_times_alpha():
    """norm_position="normed" (MiniMax-01): ``u = norm(x)``, ``x ← α·u + branch(u)`` for the mixer, then the MLP."""
    torch.manual_seed(0)
    model = build_model(
        config(norm_position="normed", residual_scale=1.7, mixer="gated_deltanet", mixer_options={"heads": 2}), spec()
    )
    x = model.embed(inputs(spec()))
    block = model.blocks[0]
    u = block.norm1(x)
    after_mixer = 1.7 * u + block.mixer(u)
    w = block.norm2(after_mixer)
    torch.testing.assert_close(block(x), 1.7 * w + block.mlp(w))


def test_norm_position_is_checked():
    with pytest.raises(ValueError, match="norm_position"):
        config(norm_position="middle")


@pytest.mark.parametrize("block", ["transformer", "gated"])
def test_a_bidirectional_model_reads_the_future_and_a_causal_one_does_not(block):
    """Changing the last token changes the first output of a bidirectional model only; its blocks add a forward
    mixer and a backward one on the reversed sequence, both output projections scaled as residual projections."""
    torch.manual_seed(0)
    task = spec("tagging")
    x = inputs(task, batch=2)
    changed = x.clone()
    changed[:, -1] = (changed[:, -1] + 1) % VOCAB
    for bidirectional in (False, True):
        model = build_model(config(block=block, mixer="linear_attention", bidirectional=bidirectional), task).eval()
        difference = (model(x)[:, 0] - model(changed)[:, 0]).abs().max()
        assert (difference > 1e-6) == bidirectional
    pair = model.blocks[0].mixer
    u = torch.randn(2, LENGTH, pair.d_model)
    torch.testing.assert_close(pair(u), pair.forward_mixer(u) + pair.backward_mixer(u.flip(1)).flip(1))
    projections = model.blocks[0].residual_projections()
    assert len(projections) == (3 if block == "transformer" else 2)  # (both mixers' or W_out) and the MLP's fc2


def test_a_bidirectional_model_cannot_stream_and_keeps_old_run_ids():
    from seqdyn.train.config import RunConfig

    model = build_model(config(mixer="linear_attention", bidirectional=True), spec())
    with pytest.raises(ValueError, match="^model.bidirectional: "):
        model.init_state(1)
    run = {
        "name": "r",
        "model": {"mixer": "linear_attention"},
        "task": {"name": "mqar", "params": {"seq_len": 16, "num_kv_pairs": 2, "vocab_size": 32}},
    }
    same = {**run, "model": {"mixer": "linear_attention", "bidirectional": False}}
    other = {**run, "model": {"mixer": "linear_attention", "bidirectional": True}}
    ids = [RunConfig.model_validate(data).run_id for data in (run, same, other)]
    assert ids[0] == ids[1] != ids[2]
