"""The ``gpu`` scale: the reproductions whose claims the cpu scale leaves open define it, its runs expand to valid
configs on ``cuda`` with at least three seeds, each is larger than the cpu scale in what its reason names, the others
refuse it in one line, and every verdict names the device, torch and CUDA beside its commit."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from seqdyn import reproduce
from seqdyn.reproduce.base import SCALES, Results
from seqdyn.reproduce.claims import VERDICTS
from seqdyn.reproduce.runner import commit_text, hardware, named_sweeps, run, verdict_rows
from seqdyn.reproduce.seeds import MOST_SEEDS, default_max_seeds
from seqdyn.train.store import flatten

#: what each gpu scale's reason says it enlarges over the cpu scale: run keys (a dotted config key, or
#: "examples": steps × batch), compared task by task
LARGER = {
    "dsf_mqar_models": ("train.steps",),
    "dsf_qlstm_transition": ("train.steps", "model.d_model"),
    "dsf_lm_perplexity": ("train.steps", "examples"),
    "dlr_atomic": ("task.params.seq_len", "model.d_model", "train.steps", "examples"),
    "dlr_context": ("task.params.seq_len", "model.d_model", "train.steps", "examples"),
    "dlr_long_range": ("model.d_model", "train.steps", "examples"),
    "coef_readout_maps": ("task.params.seq_len", "model.d_model", "examples"),
    "coef_kernel_maps": ("task.params.seq_len", "model.d_model", "examples"),
    "coef_lambda_structure": ("task.params.seq_len", "model.d_model", "examples"),
    "coef_scaling_seeds": ("task.params.seq_len", "model.d_model", "examples"),
    "coef_positions": ("task.params.seq_len", "model.d_model", "examples"),
    "coef_unstable_lambda": ("task.params.seq_len", "model.d_model", "examples"),
}
WITHOUT = ("dlr_shift_length", "dsf_state_expansion", "duality_decoding", "lemma_checks", "timing_claims")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "reproducing.md"


def _sweeps(name: str, scale: str, tmp_path: Path) -> list:
    """The reproduction's sweeps at ``scale`` (a language-model one's on a small local text file)."""
    reproduction = reproduce.get(name)
    data = None
    if reproduction.corpus:
        data = tmp_path / "corpus.txt"
        data.write_text("a small corpus of plain words, repeated. " * 2_000)
    return named_sweeps(reproduction, scale, data)


def _runs(name: str, scale: str, tmp_path: Path) -> list:
    return [config for sweep in _sweeps(name, scale, tmp_path) for config in sweep.expand()]


def _value(config, key: str) -> float:
    if key == "examples":
        return config.train.steps * config.train.batch_size
    value = config
    for part in key.split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


def _span(runs: list, task: str, key: str) -> tuple[float, float]:
    """The least and the largest value of ``key`` over the runs of ``task``."""
    values = [_value(config, key) for config in runs if config.task.name == task]
    return min(values), max(values)


def test_gpu_is_a_scale_and_the_reproductions_with_a_claim_cpu_leaves_open_have_it():
    assert SCALES == ("smoke", "cpu", "gpu", "paper")
    having = [name for name in reproduce.names() if "gpu" in reproduce.get(name).scales]
    assert having == sorted(LARGER) and sorted(set(reproduce.names()) - set(having)) == sorted(WITHOUT)
    assert all(reproduce.get(name).scales == ("smoke", "cpu", "paper") for name in WITHOUT)


@pytest.mark.parametrize("name", sorted(LARGER))
def test_a_gpu_scale_expands_to_valid_runs_on_cuda_with_three_seeds_or_more(name, tmp_path):
    sweeps = _sweeps(name, "gpu", tmp_path)
    runs = [config for sweep in sweeps for config in sweep.expand()]
    assert runs and len({config.run_id for config in runs}) == len(runs)
    assert {config.train.device for config in runs} == {"cuda"}
    assert all(sweep.name.startswith(f"{name}/gpu/") and len(sweep.sweep["train.seed"]) >= 3 for sweep in sweeps)
    assert default_max_seeds("gpu", sweeps) == MOST_SEEDS


@pytest.mark.parametrize("name", sorted(LARGER))
def test_a_gpu_scale_is_larger_than_the_cpu_scale_where_its_reason_says(name, tmp_path):
    gpu, cpu = _runs(name, "gpu", tmp_path), _runs(name, "cpu", tmp_path)
    shared = {config.task.name for config in gpu} & {config.task.name for config in cpu}
    assert shared
    for key in LARGER[name]:  # per task: no value below the cpu scale's least, the largest above its largest
        spans = {task: [_span(runs, task, key) for runs in (gpu, cpu)] for task in shared}
        assert all(g[0] >= c[0] and g[1] >= c[1] for g, c in spans.values()), (key, spans)
        assert any(g[1] > c[1] for g, c in spans.values()), (key, spans)


@pytest.mark.parametrize("name", sorted(LARGER))
def test_a_gpu_scale_says_what_differs_why_it_should_decide_and_its_h200_estimate(name):
    reproduction = reproduce.get(name)
    reason = reproduction.reductions["gpu"]
    assert reproduction.gpu_minutes and f"Estimated {reproduction.gpu_minutes:.0f} min on one H200" in reason
    assert "should" in reason and "decide" in reason
    assert not re.search(r"seeds?/00\d|issue \d|DESIGN", reason)


@pytest.mark.parametrize("name", WITHOUT)
def test_a_reproduction_without_a_gpu_scale_refuses_it_in_one_line_naming_those_with_one(name):
    with pytest.raises(ValueError) as error:
        named_sweeps(reproduce.get(name), "gpu")
    message = str(error.value)
    assert "\n" not in message
    assert message == (
        f"--scale gpu: {name} has no gpu scale (the cpu scale decides its claims); the reproductions with one: "
        + ", ".join(sorted(LARGER))
    )


@pytest.mark.parametrize("name", sorted(LARGER))
def test_the_claims_table_and_figure_read_results_of_the_gpu_scales_runs(name, tmp_path):
    """No run trains here: each run of the gpu scale as a finished row with a made-up score (an R², an accuracy, a
    perplexity); every claim decides on them, and the table and the figure are drawn."""
    reproduction, rng = reproduce.get(name), random.Random(0)
    rows = []
    for config in _runs(name, "gpu", tmp_path):
        value = rng.uniform(0.2, 1.0) if reproduction.higher_is_better else rng.uniform(5.0, 12.0)
        rows.append(
            flatten({key: item for key, item in config.canonical().items() if key != "name"})
            | dict(run_id=config.run_id, name=config.name, status="finished", reason=None, best=value, final=value)
            | dict(steps=config.train.steps, wall_time=1.0, curve=((config.train.steps, value),))
        )
    results = Results("gpu", tuple(rows))
    assert all(claim.decide(results).verdict in VERDICTS for claim in reproduction.claims)
    assert reproduction.table(results)
    assert reproduction.plot(results, tmp_path / "figure.png").read_bytes()[:4] == b"\x89PNG"


def test_all_at_the_gpu_scale_chooses_the_reproductions_that_have_one(capsys):
    from seqdyn.cli.reproductions import _chosen

    assert [reproduction.name for reproduction in _chosen("all", "gpu", "corpus.txt")] == sorted(LARGER)
    assert (
        "left out (no gpu scale: the cpu scale decides their claims): " + ", ".join(WITHOUT) in capsys.readouterr().out
    )


def test_the_gpu_scale_refuses_a_machine_without_a_gpu_before_touching_the_store(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^--scale gpu: its runs train on a GPU and this machine has none"):
        run(reproduce.get("dsf_mqar_models"), "gpu", tmp_path / "runs.db", tmp_path / "out", progress=False)
    assert not (tmp_path / "runs.db").exists()


def test_a_verdict_names_the_device_torch_and_cuda_beside_its_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    written = run(
        reproduce.get("dsf_qlstm_transition"), "smoke", tmp_path / "runs.db", tmp_path / "out", progress=False
    )
    verdict = json.loads((written.folder / "verdict.json").read_text())
    assert (verdict["device"], verdict["torch"], verdict["cuda"]) == ("cpu", str(torch.__version__), torch.version.cuda)
    on = f"on cpu, torch {torch.__version__}" + (f", CUDA {torch.version.cuda}" if torch.version.cuda else "")
    assert f"commit {verdict['commit']} {on}." in (written.folder / "table.md").read_text()
    rows = verdict_rows(tmp_path / "out")
    assert {row["commit"] for row in rows} == {f"{verdict['commit']} {on}"}
    assert {row["hardware"] for row in rows} == {on.removeprefix("on ")}


def test_the_device_is_the_gpus_name_only_where_cuda_ran_the_runs(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *device: "NVIDIA H200")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    on = {"device": "NVIDIA H200", "torch": str(torch.__version__), "cuda": "12.4"}
    assert hardware(Results("gpu", ({"train.device": "cuda"},))) == on
    assert hardware(Results("cpu", ({"train.device": "cpu"},))) == {**on, "device": "cpu"}
    assert hardware(Results("cpu", ())) == {**on, "device": "cpu"}  # a computation: no run trains
    assert commit_text({"commit": "abc1234", **on}) == f"abc1234 on NVIDIA H200, torch {torch.__version__}, CUDA 12.4"
    assert commit_text({"commit": "abc1234"}) == "abc1234"  # a verdict written before the device was recorded


def test_the_docs_list_every_gpu_scale_with_its_estimate():
    text = DOCS.read_text()
    section = text[text.index("## The gpu scale") :]
    section = section[: section.index("\n## ", 1)]
    listed = dict(re.findall(r"^\| `(\w+)` \| .*? \| (\d+) min \|", section, flags=re.M))
    assert listed == {name: str(round(reproduce.get(name).gpu_minutes)) for name in LARGER}
    assert "seqdyn reproduce NAME --scale gpu" in section
