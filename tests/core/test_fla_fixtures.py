"""The newest transitions against flash-linear-attention's own reference code (its ``naive.py`` of each op, lifted
to float64), as numbers saved by ``tools/peer_check_fla.py``: every backend, to 1e-10."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import seqdyn

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "fla_naive.json").read_text())


@pytest.mark.parametrize("backend", ["quadratic", "recurrent", "chunk", "auto"])
@pytest.mark.parametrize("case", FIXTURE["cases"], ids=[case["name"].split(" ")[0] for case in FIXTURE["cases"]])
def test_every_backend_agrees_with_the_fla_reference_op(case, backend):
    arguments = {name: torch.tensor(value, dtype=torch.float64) for name, value in case["tensors"].items()}
    options = dict(case["options"])
    query_scale = options.pop("query_scale")
    if backend not in options.pop("backends", (backend,)):
        pytest.skip(f"{backend} does not compute {case['name']} (the exp readout with a Householder factor)")
    if options.get("readout", "identity") == "identity":  # fla scales queries where seqdyn's b scales impulses
        arguments["q"] = arguments["q"] * query_scale
    y = seqdyn.coefficient_dynamics(**arguments, **options, backend=backend)
    expected = torch.tensor(case["expected"], dtype=torch.float64)
    torch.testing.assert_close(y, expected, rtol=1e-10, atol=1e-10)


def test_the_fixture_names_its_source_and_every_new_form():
    assert FIXTURE["source"].startswith("flash-linear-attention ")
    ops = {case["name"].split("/")[0] for case in FIXTURE["cases"]}
    assert {"kda", "gated_delta_product", "forgetting_attn", "gla", "simple_gla", "path_attn"} <= ops
