"""Shared blocks (Zamba / Zamba2, Glorioso et al. 2024 eq. 6 and Fig. 2): one attention-and-MLP block on
[hidden, embeddings], run by several layers, each adding its own projection of it to its mixer's input only."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqdyn.models import build_model
from seqdyn.models.config import ModelConfig
from tests.models.helpers import config, inputs, spec

MAMBA2 = {"state_dim": 4, "head_dim": 8, "chunk_size": 4}


def shared_config(**fields) -> ModelConfig:
    """Four layers (mamba2, mamba2, attention, mamba2); layers 0 and 3 run shared block 0 (rotary attention with each
    use's adapters), layer 1 block 1 (no adapters)."""
    base = dict(
        layers=4,
        positions=False,
        norm="rmsnorm",
        mixer=["mamba2", "mamba2", "softmax_attention", "mamba2"],
        mixer_options=[MAMBA2, MAMBA2, {"heads": 2}, MAMBA2],
        mlp=["none", "none", "swiglu", "none"],
        shared_blocks=[
            {"attention": {"heads": 2, "rotary": True}, "adapter_rank": 3, "attention_adapters": True},
            {"attention": {"heads": 4, "kv_heads": 2}, "mlp": "swiglu"},
        ],
        shared_inputs=[0, 1, None, 0],
    )
    return config(**{**base, **fields})


def _model(seed: int = 0, **fields):
    torch.manual_seed(seed)
    model = build_model(shared_config(**fields), spec(input_len=16)).double().eval()
    with torch.no_grad():  # adapters away from their start, so that each use differs
        for name, parameter in model.named_parameters():
            if "adapters" in name:
                parameter.normal_(0, 0.3)
    return model


def _rms(x, weight, eps):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight


def _rotate(x, positions, base=10_000.0):
    """RoFormer's rotation of channel pairs (i, i + K/2), as GPT-NeoX lays them out."""
    half = x.shape[-1] // 2
    angles = positions[:, None] * base ** (-torch.arange(half, dtype=x.dtype) / half)
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]  # [T, 1, K/2]
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


def _adapted(linear, x, use):
    """``W x`` plus this use's adapters, written out (``B_p A_p x`` per part)."""
    y = x @ linear.base.weight.T if hasattr(linear, "base") else x @ linear.weight.T
    if hasattr(linear, "base") and str(use) in linear.adapters:
        y = y + torch.cat([x @ part[0].weight.T @ part[1].weight.T for part in linear.adapters[str(use)]], -1)
    return y


def zamba_shared_block(block, x, e, use):
    """Glorioso et al. 2024's shared block written out: ``MLP(norm(Attn(norm([x ; e]))))``, causal softmax attention
    with grouped heads, rotary positions where set, adapters of ``use``; no residual."""
    attention = block.attention
    u = _rms(torch.cat([x, e], -1), block.norm_in.weight, block.norm_in.eps)
    q, k, v = _adapted(attention.qkv, u, use).split(attention.widths, -1)
    heads, kv_heads, width = attention.heads, attention.kv_heads, attention.head_dim
    T = x.shape[1]
    q, k, v = q.view(-1, T, heads, width), k.view(-1, T, kv_heads, width), v.view(-1, T, kv_heads, width)
    if attention.rotary:
        positions = torch.arange(T, dtype=x.dtype)
        q, k = _rotate(q, positions), _rotate(k, positions)
    k, v = (t.repeat_interleave(heads // kv_heads, dim=2) for t in (k, v))
    scores = torch.einsum("bihk,bjhk->bhij", q, k) / math.sqrt(width)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    a = torch.einsum("bhij,bjhv->bihv", scores.softmax(-1), v).flatten(2) @ attention.out.weight.T
    h = _rms(a, block.norm_mlp.weight, block.norm_mlp.eps)
    gate, up = _adapted(block.mlp.fc1, h, use).chunk(2, -1)
    activation = F.gelu(gate) if block.mlp.kind == "gated_gelu" else F.silu(gate)
    return (activation * up) @ block.mlp.fc2.weight.T


def test_a_layer_of_a_shared_block_is_zambas_equation_six():
    """``x_{l+1} = x_l + Mamba(norm(x_l + W_l · shared([x_l ; e])))`` for the layers of a shared block, plain
    pre-norm blocks elsewhere, against the blocks run with the listing's side inputs."""
    model = _model()
    x = inputs(spec(input_len=16), batch=2, length=11)
    e = model.embed(x)
    h = e
    for index, block in enumerate(model.blocks):
        if index in (0, 1, 3):
            side = zamba_shared_block(block.shared, h, e, index) @ block.projection.weight.T
            mixed = block.block.mixer(_rms(h + side, block.block.norm1.weight, block.block.norm1.eps))
            h = h + mixed
        else:
            h = block(h)
    torch.testing.assert_close(model(x, head=False), model.norm(h), rtol=1e-10, atol=1e-10)


def test_each_use_has_its_own_adapters_and_one_set_of_shared_weights():
    model = _model()
    assert model.blocks[0].shared is model.blocks[3].shared is model.shared[0]
    assert model.blocks[1].shared is model.shared[1]
    assert sorted(model.shared[0].attention.qkv.adapters) == ["0", "3"]
    names = [name for name, _ in model.named_parameters()]
    assert sum(name.startswith("shared.0.attention.qkv.base") for name in names) == 1  # stored once
    assert not any(name.startswith("blocks.0.shared") for name in names)
    x = inputs(spec(input_len=16), batch=1, length=6)
    e = model.embed(x)
    with torch.no_grad():
        assert not torch.allclose(model.shared[0](e, e, 0), model.shared[0](e, e, 3))  # the adapters differ


@pytest.mark.parametrize("pieces", [(11,), (4, 1, 6), (1,) * 11])
def test_a_shared_block_model_prefilled_in_pieces_or_stepped_equals_one_forward(pieces):
    model = _model()
    x = inputs(spec(input_len=16), batch=2, length=11)
    expected, state, outputs, start = model(x), None, [], 0
    for size in pieces:
        out, state = model(x[:, start : start + size], state=state, return_state=True)
        outputs.append(out)
        start += size
    torch.testing.assert_close(torch.cat(outputs, 1), expected, rtol=1e-10, atol=1e-10)
    state, steps = model.init_state(2), []
    for t in range(11):
        out, state = model.step(x[:, t], state)
        steps.append(out)
    torch.testing.assert_close(torch.stack(steps, 1), expected, rtol=1e-10, atol=1e-10)


def test_packed_and_padded_rows_of_a_shared_block_model_equal_each_row_alone():
    model = _model()
    rows = [inputs(spec(input_len=16), batch=1, length=n, seed=n)[0] for n in (5, 9, 3)]
    alone = [model(row[None])[0] for row in rows]
    packed = model(torch.cat(rows)[None], cu_seqlens=torch.tensor([0, 5, 14, 17]))[0]
    torch.testing.assert_close(packed, torch.cat(alone), rtol=1e-10, atol=1e-10)
    padded = torch.zeros(3, 9, dtype=torch.long)
    mask = torch.zeros(3, 9, dtype=torch.long)
    for index, row in enumerate(rows):
        padded[index, 9 - len(row) :], mask[index, 9 - len(row) :] = row, 1  # left padding
    out = model(padded, attention_mask=mask)
    for index, row in enumerate(rows):
        torch.testing.assert_close(out[index, 9 - len(row) :], alone[index], rtol=1e-10, atol=1e-10)


def test_gradients_reach_the_shared_weights_each_uses_adapters_and_the_projections():
    model = _model().train()
    x = inputs(spec(input_len=16), batch=2, length=7)
    model(x).logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        if "shared" in name or "projection" in name:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert model.shared[1].attention.qkv.weight.grad is not None  # block 1 has no adapters


def test_gradients_of_a_shared_block_match_finite_differences():
    model = _model()
    x = inputs(spec(input_len=16), batch=1, length=5)
    name = "shared.0.attention.qkv.adapters.3.1.1.weight"  # use 3's adapter B of the key
    weight = dict(model.named_parameters())[name].detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda w: torch.func.functional_call(model, {name: w}, (x,)).tanh().sum(), (weight,)
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(shared_inputs=[0, 1, None]), r"shared_inputs: expected one entry per layer \(4\), got 3"),
        (dict(shared_inputs=[0, 2, None, 0]), r"shared_inputs: names shared blocks \[0, 2\]; shared_blocks has 2"),
        (dict(shared_inputs=[0, 0, None, 0]), r"shared_blocks: blocks \[1\] have no layer"),
        (dict(shared_inputs=None), "shared_inputs: shared_blocks need the layers that use them"),
        (dict(norm_position="post"), r"shared_inputs: a shared block's input needs causal pre-norm blocks"),
        (
            dict(shared_blocks=[{"attention": {"heads": 2}, "attention_adapters": True}, {}]),
            "attention_adapters: needs adapter_rank > 0",
        ),
        (dict(shared_blocks=[{"attention": {"output_width": 8}}, {}]), r"attention: softmax_attention has no option"),
        (dict(shared_blocks=[{"mlp": "moe"}, {}]), "mlp: a shared block needs an MLP of one expert"),
    ],
)
def test_a_bad_shared_block_configuration_is_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        shared_config(**fields)


def test_a_model_without_shared_blocks_has_none():
    model = build_model(config(), spec())
    assert len(model.shared) == 0 and model.config.layer_shared_inputs() == [None, None]
