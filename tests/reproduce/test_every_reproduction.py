"""Every reproduction at ``--scale smoke``, end to end: its runs, ``results.csv``, ``table.md``, ``figure.png`` and a
``verdict.json`` with one entry per claim (the verdict itself is not asserted at this scale); and every scale of
every reproduction expands to valid runs, the smoke ones small."""

from __future__ import annotations

import csv
import json

import pytest

from seqdyn import reproduce
from seqdyn.reproduce.base import SCALES
from seqdyn.reproduce.claims import VERDICTS
from seqdyn.reproduce.runner import OUTPUTS, named_sweeps, run
from seqdyn.tasks import build
from tests.helpers import stub_tiktoken


@pytest.mark.parametrize("name", reproduce.names())
def test_smoke_writes_every_output_with_one_verdict_per_claim(name, tmp_path):
    reproduction = reproduce.get(name)
    written = run(reproduction, "smoke", tmp_path / "runs.db", tmp_path / "out", workers=1, progress=False)
    assert sorted(p.name for p in written.folder.iterdir()) == sorted(OUTPUTS)
    verdict = json.loads((written.folder / "verdict.json").read_text())
    assert [claim["name"] for claim in verdict["claims"]] == [claim.name for claim in reproduction.claims]
    assert all(claim["verdict"] in VERDICTS and claim["numbers"] for claim in verdict["claims"])
    assert verdict["runs_done"] == verdict["runs"] > 0
    with (written.folder / "results.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == verdict["runs"]
    table = (written.folder / "table.md").read_text()
    assert "## Results" in table and "## Claims" in table and reproduction.reductions["smoke"] in table
    for claim, recorded in zip(reproduction.claims, verdict["claims"]):  # each control recorded and listed
        assert bool(recorded["control"]) is (claim.control is not None)
        if claim.control is not None:
            line = next(
                line
                for line in table.splitlines()
                if line.startswith(f"- *{claim.name}*: {claim.control.description} — ")
            )
            assert ("(the measured level " in line) is (recorded["control"].get("level") is not None)
    assert (written.folder / "figure.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("name", reproduce.names())
@pytest.mark.parametrize("scale", SCALES)
def test_every_scale_expands_to_valid_runs(name, scale, tmp_path, monkeypatch):
    reproduction = reproduce.get(name)
    data = None
    if reproduction.corpus:  # a language-model reproduction, on a small local text file
        data = tmp_path / "corpus.txt"
        data.write_text("a small corpus of plain words, repeated. " * 2_000)
        if scale == "paper":  # the paper's GPT-2 tokens: tiktoken's code path with a word-level encoding (offline)
            stub_tiktoken(monkeypatch)
    if scale not in reproduction.scales:  # only the reproductions with a claim cpu leaves open have a gpu scale
        assert scale == "gpu"
        with pytest.raises(ValueError, match=f"^--scale gpu: {name} has no gpu scale"):
            named_sweeps(reproduction, scale, data)
        return
    runs = [config for sweep in named_sweeps(reproduction, scale, data) for config in sweep.expand()]
    if not reproduction.trains:  # it computes its numbers in ``measure``: no run at any scale
        assert not runs and reproduction.reductions[scale]
        return
    assert runs and len({config.run_id for config in runs}) == len(runs)
    assert reproduction.reductions[scale]
    assert {config.train.device for config in runs} == {{"paper": "auto", "gpu": "cuda"}.get(scale, "cpu")}
    if scale == "smoke":
        assert all(config.train.steps <= 20 and config.model.d_model <= 32 for config in runs)
    if reproduction.corpus and scale == "paper":  # the paper's GPT-2 tokens, as the stand-in encoded them
        assert {config.task.params["tokenizer"] for config in runs} == {"gpt2"}
        assert build(runs[0].task.name, **runs[0].task.params).input_size == 50257  # GPT-2's vocabulary
