"""docs/recipes.md: each recipe runs as written, its ``custom`` options build a mixer, and on a registered mixer's
own projections the recipe gives that mixer's core output (the operator call the table claims it is)."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import torch

from seqdyn import mixers
from seqdyn.mixers import MixerState
from seqdyn.mixers.base import split_heads
from tests.helpers import code_blocks

RECIPES = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"


def recipes() -> tuple[str, dict[str, str]]:
    """The block of stand-ins, and each recipe block by the name on its first line (``# mamba2``)."""
    stand_ins, *blocks = code_blocks(RECIPES, "python")
    return stand_ins, {block.splitlines()[0].removeprefix("# ").strip(): block for block in blocks}


def run(block: str, namespace: dict) -> dict:
    exec(compile(block, str(RECIPES), "exec"), namespace)
    return namespace


def test_the_recipes_run_and_their_custom_options_build_a_mixer():
    stand_ins, blocks = recipes()
    assert set(blocks) == {"mamba2", "gla", "deltanet", "mlstm", "relu", *NEWEST}
    for name, block in blocks.items():
        namespace = run(block, run(stand_ins, {}))
        B, T, H, K, V = (namespace[n] for n in "BTHKV")
        assert namespace["y"].shape == (B, T, H, V) and torch.isfinite(namespace["y"]).all(), name
        if name in NEWEST:  # the newest transitions have no custom options
            assert "custom" not in namespace, name
            continue
        mixer = mixers.build("custom", H * K, **namespace["custom"])
        assert mixer(torch.randn(1, 8, H * K)).shape == (1, 8, H * K), name


def _projections(name: str, mixer, u: torch.Tensor) -> dict:
    """The recipe's stand-ins taken from ``mixer`` on the input ``u``: its queries, keys and values, and the
    pre-activations of its gates from its own parameters."""
    inputs, _ = mixer.core_inputs(u, MixerState())
    found = dict(q=inputs.q, k=inputs.k, v=inputs.v, K=inputs.q.shape[-1])
    found.update(zip("BTH", inputs.q.shape[:3]))
    if name in NEWEST:
        found.update(_newest_projections(name, mixer, u, inputs))
    if name == "mamba2":
        dt_raw = mixer.in_proj(u)[..., -mixer.heads :] + mixer.decay.dt_bias
        found.update(C=inputs.q, Bk=inputs.k, x=inputs.v, dt_raw=dt_raw, A=-torch.exp(mixer.decay.a_log))
    elif name == "gla":
        found.update(g_raw=split_heads(mixer.decay.up(mixer.decay.down(u)), mixer.heads))
    elif name == "deltanet":
        found.update(beta_raw=mixer.beta(u))
    elif name == "mlstm":
        found.update(f_raw=mixer.forget_gate(u), i_raw=mixer.input_gate(u))
    return found


def _newest_projections(name: str, mixer, u: torch.Tensor, inputs) -> dict:
    """The stand-ins of the newest transitions' recipes, from ``mixer``'s own operator arguments ``inputs`` on ``u``
    (or, for the raw gates, its own projections)."""
    heads = inputs.q.shape[2]
    if name == "kda":  # its arguments before the decay-first delta rule becomes a low-rank transition, and
        # before q and k are normalized (the recipe normalizes them)
        with mock.patch.object(mixer, "_normalize", lambda x: x):
            parent, _ = type(mixer).__mro__[1].core_inputs(mixer, u, MixerState())
        return dict(q=parent.q, k=parent.k, v=parent.v, log_alpha=parent.log_decay, beta_raw=mixer.beta(u))
    if name == "gated_deltaproduct":
        return dict(k_n=inputs.k, v_n=inputs.v, beta_n=inputs.householder, g_scalar=inputs.log_decay)
    if name == "rwkv7":
        shift = mixer.convolve("shift", u, MixerState()) - u  # x_{t−1} − x_t
        a_raw = split_heads(mixer.rate(u + mixer.mix[4] * shift), heads)
        return dict(log_alpha=inputs.log_decay, kappa=inputs.low_rank_read, a_raw=a_raw)
    if name == "rwkv6":
        return dict(log_alpha=inputs.log_decay, u_bonus=mixer.bonus)
    if name == "forgetting_attention":
        return dict(f_raw=mixer.forget(u))
    if name == "path_attention":
        return dict(beta_raw=mixer.beta(u), w_dir=inputs.householder_dir)
    if name == "lightning_attention":
        return dict(log_lambda=mixer.log_lambda)
    if name == "hgrn2":
        q_raw, f_raw, i_raw = mixer.qfi(u).split(mixer.widths, dim=-1)
        return dict(q=split_heads(q_raw, heads), f4_raw=split_heads(f_raw, heads), v=split_heads(i_raw, heads))
    return dict(f_raw=mixer.forget_gate(u), i_raw=mixer.input_gate(u))  # xlstm


#: the recipes of the newest transitions → the mixer and options each is the core of
NEWEST = {
    "kda": ("kda", dict(d_model=64)),
    "gated_deltaproduct": ("gated_deltaproduct", dict(d_model=64)),
    "rwkv7": ("rwkv7", dict(d_model=64)),
    "rwkv6": ("rwkv6", dict(d_model=64)),
    "forgetting_attention": ("forgetting_attention", dict(d_model=64)),
    "path_attention": ("path_attention", dict(d_model=64)),
    "lightning_attention": ("lightning_attention", dict(d_model=64)),
    "hgrn2": ("hgrn2", dict(d_model=64)),
    "xlstm": ("mlstm", dict(d_model=64, gate_soft_cap=15.0, eps=1e-6)),
}

BUILT = {
    "mamba2": dict(d_model=32, state_dim=16, head_dim=16),
    "gla": dict(d_model=64),
    "deltanet": dict(d_model=64),
    "mlstm": dict(d_model=64),
}


@pytest.mark.parametrize(
    "name, recipe",
    [
        ("mamba2", "mamba2"),
        ("gla", "gla"),
        ("deltanet", "deltanet"),
        ("mlstm", "mlstm"),
        ("custom", "relu"),
        *((mixer, recipe) for recipe, (mixer, _) in NEWEST.items()),
    ],
)
def test_each_recipe_is_the_registered_mixers_core(name, recipe):
    """float64, so that only the order of the sums differs."""
    torch.manual_seed(0)
    stand_ins, blocks = recipes()
    namespace = run(stand_ins, {})
    if name == "custom":
        run(blocks[recipe], namespace)
        mixer = mixers.build("custom", namespace["H"] * namespace["K"], **namespace["custom"])
    else:
        options = dict(NEWEST[recipe][1] if recipe in NEWEST else BUILT[name])
        mixer = mixers.build(name, options.pop("d_model"), **options)
    mixer = mixer.double()
    u = torch.randn(2, 24, mixer.d_model, dtype=torch.float64)
    with torch.no_grad():
        namespace.update(_projections(recipe, mixer, u))
        expected = mixer.run_core(mixer.core_inputs(u, MixerState())[0], "quadratic")
        y = run(blocks[recipe], namespace)["y"]
    torch.testing.assert_close(y, expected, rtol=1e-9, atol=1e-9)


def test_custom_with_the_gla_recipes_options_is_gla():
    """The table says "exactly": with GLA's weights, custom with the recipe's options computes what gla does."""
    torch.manual_seed(0)
    stand_ins, blocks = recipes()
    namespace = run(blocks["gla"], run(stand_ins, {}))
    d_model = namespace["H"] * namespace["K"]
    gla = mixers.build("gla", d_model, heads=namespace["H"]).double()
    custom = mixers.build("custom", d_model, **namespace["custom"]).double()
    with torch.no_grad():
        custom.qk.weight.copy_(torch.cat([gla.q.weight, gla.k.weight]))
        custom.v.weight.copy_(gla.v.weight)
    custom.decay.load_state_dict(gla.decay.state_dict())
    custom.output.load_state_dict(gla.output.state_dict())
    u = torch.randn(2, 20, d_model, dtype=torch.float64)
    torch.testing.assert_close(custom(u, "quadratic"), gla(u, "quadratic"), rtol=1e-9, atol=1e-9)
