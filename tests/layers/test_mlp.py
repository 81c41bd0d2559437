"""The mixture-of-experts MLP against Shazeer et al. 2017 (eqs. 1–3, softmax gating over the top k) with Qwen3-Next's
shared expert, written as every expert computed densely for every token."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqdyn.layers.mlp import MixtureOfExperts, build_mlp

D, HIDDEN, EXPERTS = 8, 6, 5


def moe_listing(moe: MixtureOfExperts, x: torch.Tensor) -> torch.Tensor:
    """``y = Σ_{e ∈ T(x)} p̃_e E_e(x) + σ(w_sᵀx) E_s(x)`` per token: ``p = softmax(W_r x)``, ``T(x)`` the top k of
    ``p``, ``p̃_e = p_e / Σ_{T(x)} p`` (or ``p_e`` without renormalization), ``E(x) = W_down (SiLU(W_g x) ⊙ W_u x)``."""
    p = torch.softmax(x @ moe.router.weight.T, dim=-1)  # [B, T, E]
    every = torch.stack(
        [
            F.silu(x @ moe.gate_up[e, :HIDDEN].T) * (x @ moe.gate_up[e, HIDDEN:].T) @ moe.down[e].T
            for e in range(EXPERTS)
        ],
        dim=-2,
    )  # [B, T, E, D]
    top = torch.zeros_like(p).scatter(-1, p.topk(moe.top_k, dim=-1).indices, 1.0)
    weights = p * top
    if moe.normalize:
        weights = weights / weights.sum(-1, keepdim=True)
    y = (weights[..., None] * every).sum(-2)
    if moe.shared is not None:
        gate, up = (x @ moe.shared.fc1.weight.T).chunk(2, dim=-1)
        weight = 1.0 if moe.shared_gate is None else torch.sigmoid(x @ moe.shared_gate.weight.T)
        y = y + weight * ((F.silu(gate) * up) @ moe.shared.fc2.weight.T)
    return y


@pytest.mark.parametrize(
    ("top_k", "normalize", "shared_ratio", "shared_gate"),
    [(2, True, 0.75, True), (2, True, 0.75, False), (1, False, 0.0, True), (5, True, 0.0, True)],
)
def test_mixture_of_experts_matches_its_listing_with_gradients(top_k, normalize, shared_ratio, shared_gate):
    torch.manual_seed(0)
    moe = build_mlp(
        "moe",
        D,
        HIDDEN / D,
        dict(experts=EXPERTS, top_k=top_k, normalize=normalize, shared_ratio=shared_ratio, shared_gate=shared_gate),
    ).double()
    with torch.no_grad():
        for parameter in moe.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    x = torch.randn(2, 7, D, dtype=torch.float64, requires_grad=True)
    got, expected = moe(x), moe_listing(moe, x)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad(got.sum(), [x, moe.gate_up, moe.router.weight])
    wanted = torch.autograd.grad(expected.sum(), [x, moe.gate_up, moe.router.weight])
    for ours, theirs in zip(grads, wanted):
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
    assert (moe.shared is not None) == (shared_ratio > 0)
    assert (moe.shared_gate is not None) == (shared_ratio > 0 and shared_gate)


@pytest.mark.parametrize(
    "top_k, message",
    [
        (5, "moe.top_k: 5 exceeds experts=4; choose top_k ≤ experts"),
        (0, "moe.top_k: expected at least 1 expert per token, got 0"),
    ],
)
def test_a_top_k_beyond_the_experts_or_below_one_is_refused(top_k, message):
    with pytest.raises(ValueError, match=message):
        build_mlp("moe", D, 1.0, dict(experts=4, top_k=top_k))


def test_a_model_config_with_more_chosen_experts_than_experts_is_refused_by_field():
    from pydantic import ValidationError

    from seqdyn.models.config import ModelConfig, describe_errors

    with pytest.raises(ValidationError) as raised:
        ModelConfig(mlp="moe", moe={"experts": 2, "top_k": 3})
    assert describe_errors(raised.value, ModelConfig) == "moe: moe.top_k: 3 exceeds experts=2; choose top_k ≤ experts"


def test_squared_relu_is_primers():
    """So et al. 2021 (Primer), eq. 1 without biases, as Nemotron-H's MLP: ``W₂ max(0, W₁ x)²``."""
    torch.manual_seed(0)
    mlp = build_mlp("relu2", D, HIDDEN / D).double()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    expected = torch.clamp(x @ mlp.fc1.weight.T, min=0) ** 2 @ mlp.fc2.weight.T
    torch.testing.assert_close(mlp(x), expected, rtol=1e-12, atol=1e-12)
    assert mlp.fc1.bias is None and mlp.fc2.bias is None


def test_geglu_is_griffins_mlp_block():
    """Shazeer 2020 eq. 6 (GEGLU) with the tanh GELU and biases, as Griffin's MLP block in RecurrentGemma:
    ``W₂ (GELU_tanh(W_a x + b_a) ⊙ (W_b x + b_b)) + b₂``, ``[W_a | W_b]`` stacked in fc1."""
    torch.manual_seed(0)
    mlp = build_mlp("geglu", D, HIDDEN / D).double()
    for parameter in mlp.parameters():
        torch.nn.init.normal_(parameter)  # biases away from 0
    x = torch.randn(2, 5, D, dtype=torch.float64)
    (w_a, w_b), (b_a, b_b) = mlp.fc1.weight.chunk(2), mlp.fc1.bias.chunk(2)
    z = x @ w_a.T + b_a
    gelu_tanh = 0.5 * z * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (z + 0.044715 * z**3)))
    expected = (gelu_tanh * (x @ w_b.T + b_b)) @ mlp.fc2.weight.T + mlp.fc2.bias
    torch.testing.assert_close(mlp(x), expected, rtol=1e-12, atol=1e-12)
    assert mlp.hidden == HIDDEN and mlp.fc1.weight.shape == (2 * HIDDEN, D)


def test_gated_gelu_is_shazeers_geglu_with_the_exact_gelu_and_no_biases():
    """Shazeer 2020 eq. 6 as written, Zamba's shared MLP: ``W₂ (GELU(W_a x) ⊙ W_b x)``, GELU(z) = z Φ(z)."""
    torch.manual_seed(0)
    mlp = build_mlp("gated_gelu", D, HIDDEN / D).double()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    w_a, w_b = mlp.fc1.weight.chunk(2)
    z = x @ w_a.T
    gelu = z * 0.5 * (1 + torch.erf(z / 2**0.5))
    torch.testing.assert_close(mlp(x), (gelu * (x @ w_b.T)) @ mlp.fc2.weight.T, rtol=1e-12, atol=1e-12)
    assert mlp.fc1.bias is None and mlp.fc2.bias is None


def test_a_per_layer_list_of_mlps_builds_each_and_must_name_every_layer():
    from pydantic import ValidationError

    from seqdyn.models.config import ModelConfig
    from seqdyn.models.model import build_model

    config = ModelConfig(layers=3, d_model=8, mixer_options={"heads": 2}, mlp=["swiglu", "none", "relu2"])
    spec = language_model_spec()
    model = build_model(config, spec)
    assert [block.mlp.kind if block.mlp is not None else None for block in model.blocks] == ["swiglu", None, "relu2"]
    with pytest.raises(ValidationError, match="mlp: a per-layer list must have one entry per layer"):
        ModelConfig(layers=3, mlp=["swiglu", "none"])


def deepseek_routing_listing(moe: MixtureOfExperts, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V3 eqs. 12–16 with node-limited routing, written per token with Python loops: ``s = σ(W_r x)``;
    the groups ranked by the sum of their two best ``s + b``; the top k of ``s + b`` within the best ``top_groups``
    groups; ``g = s`` there, renormalized, times the routed scale; plus the ungated shared expert."""
    out = torch.zeros_like(x)
    size = EXPERTS_GROUPED // moe.groups
    for index, token in enumerate(x):
        s = torch.sigmoid(token @ moe.router.weight.T)
        choice = (s + bias).tolist()
        group_score = [sum(sorted(choice[g * size : (g + 1) * size])[-2:]) for g in range(moe.groups)]
        groups = sorted(range(moe.groups), key=lambda g: -group_score[g])[: moe.top_groups]
        allowed = [e for e in range(EXPERTS_GROUPED) if e // size in groups]
        chosen = sorted(allowed, key=lambda e: -choice[e])[: moe.top_k]
        total = sum(s[e] for e in chosen) + moe.normalize_eps
        for e in chosen:
            gate, up = (token @ moe.gate_up[e].T).chunk(2)
            out[index] += moe.routed_scale * s[e] / total * ((F.silu(gate) * up) @ moe.down[e].T)
        gate, up = (token @ moe.shared.fc1.weight.T).chunk(2)
        out[index] += (F.silu(gate) * up) @ moe.shared.fc2.weight.T
    return out


EXPERTS_GROUPED = 8


@pytest.mark.parametrize(("groups", "top_groups", "top_k"), [(1, 1, 3), (4, 2, 3), (4, 1, 2), (2, 2, 8)])
def test_the_sigmoid_router_is_deepseek_v3s(groups, top_groups, top_k):
    torch.manual_seed(1)
    options = dict(experts=EXPERTS_GROUPED, top_k=top_k, shared_ratio=0.5, shared_gate=False, router="sigmoid")
    options.update(groups=groups, top_groups=top_groups, routed_scale=2.5, selection_bias=True, normalize_eps=0.1)
    moe = build_mlp("moe", D, HIDDEN / D, options).double()
    bias = torch.randn(EXPERTS_GROUPED, dtype=torch.float64) * 0.5
    with torch.no_grad():
        moe.selection_bias.copy_(bias)
        moe.router.weight.mul_(20)  # scores spread over (0, 1)
    x = torch.randn(11, D, dtype=torch.float64)
    torch.testing.assert_close(moe(x), deepseek_routing_listing(moe, x, bias), rtol=1e-12, atol=1e-12)
    assert "selection_bias" in moe.state_dict() and "selection_bias" not in dict(moe.named_parameters())


def test_the_selection_bias_chooses_but_does_not_weigh():
    """A large bias on one expert makes every token choose it, with the weight of its unbiased score."""
    moe = build_mlp("moe", D, HIDDEN / D, dict(experts=4, top_k=1, router="sigmoid", selection_bias=True)).double()
    with torch.no_grad():
        moe.selection_bias[2] = 100.0
    x = torch.randn(5, D, dtype=torch.float64)
    weights, chosen = moe.route(x)
    assert chosen.flatten().tolist() == [2] * 5
    torch.testing.assert_close(weights, torch.ones_like(weights))  # renormalized over the one chosen
    moe.normalize = False
    weights, _ = moe.route(x)
    torch.testing.assert_close(weights[:, 0], torch.sigmoid(x @ moe.router.weight[2]))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(router="sparsemax"), "moe.router: expected one of|Input should be 'softmax' or 'sigmoid'"),
        (dict(groups=3), "moe.groups: 3 does not divide experts=8"),
        (dict(groups=4, top_groups=5), "moe.top_groups: expected 1 ≤ top_groups ≤ groups=4"),
        (dict(groups=4, top_groups=1, top_k=3), "moe.top_k: 3 exceeds the 2 experts of the top_groups=1 groups"),
    ],
)
def test_routing_that_cannot_choose_is_refused_by_option(options, message):
    from pydantic import ValidationError

    from seqdyn.models.config import ModelConfig

    with pytest.raises(ValueError, match=message):
        build_mlp("moe", D, 1.0, dict(experts=8, **options))
    with pytest.raises(ValidationError, match=message):
        ModelConfig(mlp="moe", moe=dict(experts=8, **options))


def test_a_per_layer_list_of_mlp_ratios_sizes_each_layer():
    from pydantic import ValidationError

    from seqdyn.models.config import ModelConfig
    from seqdyn.models.model import build_model

    config = ModelConfig(layers=2, d_model=8, mixer_options={"heads": 2}, mlp="swiglu", mlp_ratio=[3.0, 0.5])
    spec = language_model_spec()
    assert [block.mlp.hidden for block in build_model(config, spec).blocks] == [24, 4]
    with pytest.raises(ValidationError, match="mlp_ratio: a per-layer list must have one entry per layer"):
        ModelConfig(layers=3, mlp_ratio=[1.0, 2.0])


def language_model_spec():
    """A token task of 11 symbols, 6 positions, a language-model head."""
    from seqdyn.tasks.base import TaskSpec

    return TaskSpec(
        input_kind="tokens",
        input_size=11,
        input_len=6,
        head="lm",
        output_size=11,
        output_len=6,
        primary_metric="accuracy",
    )
