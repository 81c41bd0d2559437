"""inspect_model on small hybrid models: one row per layer and head, hooks capture the right activations, zero
counts within K − 1 (Corollary 2.2), None metrics for mixers without scalar coefficients."""

from __future__ import annotations

import pytest
import torch
from rich.console import Console

from seqdyn import analysis
from seqdyn.models import build_model
from seqdyn.tasks.base import TaskSpec

VOCAB, LENGTH = 20, 12
HYBRID = dict(
    d_model=16,
    layers=3,
    mlp_ratio=2.0,
    mixer=["softmax_attention", "mamba2", "s5"],
    mixer_options=[{"heads": 2}, {"state_dim": 4, "head_dim": 8}, {"state_dim": 4}],
)


def spec() -> TaskSpec:
    return TaskSpec("tokens", VOCAB, LENGTH, "lm", VOCAB, LENGTH, "accuracy")


def tokens(batch: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, LENGTH), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(HYBRID, spec())


def test_one_row_per_layer_and_head(model):
    rows = analysis.inspect_model(model, tokens())
    heads = [2, 4, 1]  # softmax: 2 heads; mamba2: expand·d / head_dim = 32 / 8; s5: one MIMO system
    assert [(r.layer, r.head) for r in rows] == [(layer, h) for layer, n in enumerate(heads) for h in range(n)]
    assert [r.mixer for r in rows] == ["softmax_attention"] * 2 + ["mamba2"] * 4 + ["s5"]
    assert [r.module for r in rows][::3] == ["blocks.0.mixer", "blocks.1.mixer", "blocks.2.mixer"]
    softmax, mamba, s5 = rows[0], rows[2], rows[6]
    assert softmax.readout == "exp" and softmax.zero_bound is None and softmax.within_bound is None
    assert softmax.class_shares["convex"] == 1.0 and softmax.spectral_bound == 1.0
    assert mamba.readout == "identity" and mamba.key_dim == 4 and mamba.zero_bound == 3
    assert all(r.within_bound for r in rows[2:6]) and all(0 < r.spectral_bound < 1 for r in rows[2:6])
    assert s5.near_zero_fraction is None and s5.max_zero_count is None and s5.class_shares is None
    assert 0 < s5.spectral_bound < 1
    for row in rows[:6]:
        assert 0 <= row.near_zero_fraction <= 1 and row.near_zero_fraction + row.large_fraction == pytest.approx(1)
        assert sum(row.class_shares.values()) == pytest.approx(1)
    record = mamba.as_dict()
    assert record["within_bound"] is True and record["mixer"] == "mamba2"
    # Lemma 3: attention without positions cannot tell a repeated token's positions apart; decays (Λ ≠ I) can
    assert [r.positional for r in rows] == [False] * 2 + [True] * 4 + [True]


def test_metrics_are_those_of_the_mixer_on_its_own_input(model):
    x = tokens()
    with torch.no_grad():
        hidden = model.blocks[0](model.embed(x))
        expected = model.blocks[1].mixer.coefficients(model.blocks[1].norm1(hidden))
    layers = analysis.layer_coefficients(model, x)
    assert list(layers) == ["layer 0 · softmax_attention", "layer 1 · mamba2"]  # s5 has no scalar coefficients
    assert torch.allclose(layers["layer 1 · mamba2"], expected, rtol=1e-5, atol=1e-7)
    rows = analysis.inspect_model(model, x, eps=1e-2)
    for head in range(4):
        one = expected[:, head : head + 1]
        assert rows[2 + head].near_zero_fraction == pytest.approx(analysis.near_zero_fraction(one, 1e-2))
        assert rows[2 + head].max_zero_count == int(analysis.zero_count_per_row(one).max())
        assert rows[2 + head].mean_zero_count == float(analysis.mean_zero_count(one).nan_to_num(nan=0.0).max())
        assert rows[2 + head].spectral_bound == pytest.approx(
            float(analysis.spectral_radii(model.blocks[1].mixer, model.blocks[1].norm1(hidden))[head])
        )


def test_inspection_leaves_the_model_as_it_was(model):
    model.train()
    analysis.inspect_model(model, tokens(), spectral=False)
    assert model.training
    assert all(not block.mixer._forward_pre_hooks for block in model.blocks)
    assert all(r.spectral_bound is None for r in analysis.inspect_model(model, tokens(), spectral=False)[:6])


def test_gated_blocks_and_householder_mixers():
    torch.manual_seed(1)
    model = build_model(
        dict(
            d_model=16,
            layers=2,
            block="gated",
            expand=2.0,
            mixer=["gated_deltanet", "gla"],
            mixer_options=[{"heads": 2}, {"heads": 4}],
        ),
        spec(),
    )
    rows = analysis.inspect_model(model, tokens())
    assert len(rows) == 2 + 4
    assert all(r.readout == "identity" and r.within_bound for r in rows)
    assert all(r.spectral_bound <= 1 + 1e-6 for r in rows)


def test_a_parallel_layer_is_inspected_part_by_part_as_one_layer():
    """Falcon-H1's layer (mamba2 beside attention): each part's heads, under the layer's index; its coefficient maps
    and DSFs are labelled by part."""
    torch.manual_seed(2)
    parts = [["mamba2", {"state_dim": 4, "head_dim": 8}], ["softmax_attention", {"heads": 2}]]
    model = build_model(
        dict(d_model=16, layers=2, mixer=["parallel", "gla"], mixer_options=[{"parts": parts}, {"heads": 2}]), spec()
    )
    rows = analysis.inspect_model(model, tokens())
    assert [(r.layer, r.mixer) for r in rows] == [(0, "mamba2")] * 4 + [(0, "softmax_attention")] * 2 + [(1, "gla")] * 2
    maps = analysis.layer_coefficients(model, tokens())
    assert list(maps) == ["layer 0 · mamba2 (part 0)", "layer 0 · softmax_attention (part 1)", "layer 1 · gla"]
    torch.testing.assert_close(
        torch.cat(list(maps.values())[:2], dim=1),
        model.blocks[0].mixer.coefficients(analysis.capture_mixer_inputs(model, tokens())[0].x),
    )


def test_positions_per_head_follow_lemma_3():
    """A rotary attention layer tells positions apart in every head; a gated_deltanet head whose decay is switched
    off (A = 0: α = 1) still does through its Householder factor (Λ = I − βkkᵀ ≠ I), a linear-attention one does not."""
    torch.manual_seed(0)
    model = build_model(
        dict(
            d_model=16,
            layers=3,
            mixer=["softmax_attention", "gated_deltanet", "linear_attention"],
            mixer_options=[{"heads": 2, "rotary": True}, {"heads": 2}, {"heads": 2}],
        ),
        spec(),
    )
    with torch.no_grad():
        model.blocks[1].mixer.decay.a_log[0] = -torch.inf
    rows = analysis.inspect_model(model, tokens())
    assert [r.positional for r in rows] == [True, True, True, True, False, False]


def test_format_table_renders_every_row(model):
    rows = analysis.inspect_model(model, tokens())
    table = analysis.format_table(rows)
    assert table.row_count == len(rows)
    console = Console(record=True, width=200)
    console.print(table)
    text = console.export_text()
    assert "mamba2" in text and "s5" in text and "convex 100%" in text and "positions" in text


def test_a_module_without_mixers_is_rejected():
    with pytest.raises(ValueError, match="^model: no seqdyn mixer"):
        analysis.inspect_model(torch.nn.Linear(3, 3), torch.zeros(2, 3))


def test_zeros_beyond_k_minus_1_come_from_a_decay_below_round_off_and_the_legend_says_so():
    """An identity readout with Λ = 0.3·I over 128 tokens in float32: 0.3^(i−j) falls below float32's smallest
    number after about 86 steps, so rows hold more exact zeros than K − 1 — flagged, and explained under the table;
    with Λ = I no row exceeds the bound and no such line is printed."""
    length = 128
    decayed = build_model(
        dict(
            d_model=16, layers=1, mixer="custom", mixer_options={"heads": 2, "decay": "constant", "constant_decay": 0.3}
        ),
        TaskSpec("tokens", VOCAB, length, "lm", VOCAB, length, "accuracy"),
    )
    inputs = torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(0))
    rows = analysis.inspect_model(decayed, inputs)
    assert all(row.within_bound is False for row in rows) and "exceeds*" in analysis.model._zeros_cell(rows[0])
    assert analysis.model.BEYOND_THE_BOUND in analysis.table_legend(rows)
    plain = build_model(
        dict(d_model=16, layers=1, mixer="custom", mixer_options={"heads": 2}),
        TaskSpec("tokens", VOCAB, length, "lm", VOCAB, length, "accuracy"),
    )
    rows = analysis.inspect_model(plain, inputs)
    assert all(row.within_bound for row in rows) and analysis.model.BEYOND_THE_BOUND not in analysis.table_legend(rows)
