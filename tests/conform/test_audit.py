"""The invariants of transformers models against their float64 conversions: they hold for the Mamba-2 and
Qwen3-Next types, plain and accelerated, and a model that forgets its cache breaks exactly the two that read it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from seqdyn.conform.audit import INVARIANTS, audit_family, check_invariants  # noqa: E402


@pytest.mark.parametrize("family", ["mamba2", "qwen3_next"])
@pytest.mark.parametrize("accelerated", [False, True])
def test_every_invariant_holds_for_a_family_that_keeps_them(family, accelerated):
    """Every invariant but packing: transformers' CPU paths of these families carry their recurrent state (and the
    short convolution) across the documents of a packed row (the test below)."""
    report = audit_family(family, accelerated=accelerated)
    assert list(report["invariants"]) == list(INVARIANTS)
    broken = {name: result for name, result in report["invariants"].items() if not result["holds"]}
    assert set(broken) == {"packed"}, broken


def test_packing_breaks_from_the_first_layer_in_transformers_mamba2_and_holds_in_the_conversion():
    """A row packed after another document (positions restarting at 0): transformers' Mamba-2 scan ignores the
    restart and carries the first document's state in, from its first layer; seqdyn's conversion restarts there."""
    theirs, ours = audit_family("mamba2"), audit_family("mamba2", converted=True)
    assert not theirs["invariants"]["packed"]["holds"] and theirs["invariants"]["packed"]["first_layer"] == 0
    assert ours["invariants"]["packed"]["holds"] and ours["invariants"]["packed"]["error"] < 1e-5


def test_a_model_that_forgets_its_cache_breaks_the_prefill_in_pieces_and_the_decoding():
    from seqdyn.hf.convert.checks import tiny_model
    from seqdyn.hf.convert.registry import TINY_CONFIGS, from_transformers

    model = tiny_model("qwen3_next")
    reference = from_transformers(tiny_model("qwen3_next").to(torch.float64))
    forward = model.forward

    def forgetting(*args, cache=None, **kwargs):
        return forward(*args, cache=None, **kwargs)  # every call from an empty state

    model.forward = forgetting
    vocab = TINY_CONFIGS["qwen3_next"][2]["vocab_size"]
    row = torch.randint(1, vocab, (1, 13), generator=torch.Generator().manual_seed(0))
    results = check_invariants(model, lambda tokens: reference(tokens).logits[0].double(), row)
    assert {name for name, result in results.items() if not result["holds"]} >= {"two-piece prefill", "token by token"}
    assert results["alone"]["holds"] and results["left-padded"]["holds"]
    # every layer starts from an empty state: the break shows from the first layer on; a kept invariant names none
    assert results["two-piece prefill"]["first_layer"] == 0 and results["token by token"]["first_layer"] == 0
    assert results["left-padded"]["first_layer"] is None and results["alone"]["layers"] == len(model.model.layers)


def test_the_first_layer_that_breaks_an_invariant_is_named():
    """A model whose second layer alone reads the padding (its output shifted where the batch is left-padded):
    left padding breaks from layer 1, not 0; the other invariants hold."""
    from seqdyn.conform.audit import first_departing_layer

    alone = [torch.zeros(3, 4), torch.ones(3, 4), torch.ones(3, 4)]
    shifted = [alone[0], alone[1] + 1e-2, alone[2] + 1e-2]
    assert first_departing_layer(shifted, alone) == 1 and first_departing_layer(alone, alone) is None
    assert first_departing_layer([alone[0][:2], *alone[1:]], alone) == 0  # a layer of another length departs too


def test_seqdyns_conversion_keeps_every_invariant_where_transformers_jamba_breaks_its_prefill_in_pieces():
    """The control of the harness: the same checks, driven the same way, hold on the conversion."""
    theirs, ours = audit_family("jamba"), audit_family("jamba", converted=True)
    assert all(result["holds"] for result in ours["invariants"].values())
    assert not theirs["invariants"]["two-piece prefill"]["holds"] and theirs["invariants"]["alone"]["holds"]


def test_the_command_prints_the_three_ways_of_a_family_and_names_an_unknown_one(tmp_path):
    from typer.testing import CliRunner

    from seqdyn.cli import app

    result = CliRunner().invoke(app, ["audit", "mamba2", "--json", str(tmp_path / "audit.json")])
    assert result.exit_code == 0, result.output
    assert "mamba2 (accelerated)" in result.output and "mamba2 (seqdyn's conversion)" in result.output
    bad = CliRunner().invoke(app, ["audit", "lfm3"])
    assert bad.exit_code == 2 and "lfm3 is not converted" in bad.output


def _families():
    from seqdyn.hf.convert.registry import TINY_CONFIGS

    return list(TINY_CONFIGS)


@pytest.mark.slow
@pytest.mark.parametrize("family", _families())
def test_every_familys_conversion_keeps_every_invariant(family):
    report = audit_family(family, converted=True)
    assert {name: result for name, result in report["invariants"].items() if not result["holds"]} == {}
