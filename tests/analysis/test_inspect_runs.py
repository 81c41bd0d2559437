"""`seqdyn inspect` and the analysis of trained runs in a results store (issue 6, part 3)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from seqdyn.analysis.runs import inspect_run, principle_points
from seqdyn.cli import app
from seqdyn.train.checkpoint import checkpoint_dir_for
from seqdyn.train.config import SweepConfig
from seqdyn.train.store import Store
from seqdyn.train.sweep import run_sweep
from tests.train._helpers import unprivileged

SWEEP = {
    "name": "inspect-demo",
    "model": {"d_model": 16, "layers": 2, "mlp": "none"},
    "task": {
        "name": "mqar",
        "params": {"seq_len": 16, "num_kv_pairs": 2, "vocab_size": 32},
        "train_examples": 128,
        "test_examples": 16,
    },
    "train": {"steps": 6, "batch_size": 16, "eval_every": 3},
    "sweep": {
        "model": [
            {"mixer": "softmax_attention", "mixer_options": {"heads": 2}},
            {"mixer": "gla", "positions": False, "mixer_options": {"heads": 2}},
        ]
    },
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inspect")
    store_path = folder / "runs.db"
    results = run_sweep(SweepConfig.model_validate(SWEEP), store_path, progress=False)
    assert all(r.status == "finished" for r in results), results
    return store_path, {r.name.split("mixer=")[1].split(",")[0].rstrip("]"): r.run_id for r in results}


def test_inspect_run_measures_every_layer_and_head(trained):
    store_path, ids = trained
    result = inspect_run(store_path, ids["softmax_attention"], examples=4)
    assert result.inputs.shape == (4, 16)
    assert [(row.layer, row.head) for row in result.rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for row in result.rows:  # softmax coefficients are convex combinations (seed 001 appendix A)
        assert row.class_shares["convex"] == 1.0 and row.zero_bound is None
    gla = inspect_run(store_path, ids["gla"], examples=4).rows
    assert all(row.zero_bound == row.key_dim - 1 and row.within_bound for row in gla)  # Corollary 2.2
    assert all(0 < row.spectral_bound <= 1 for row in gla)
    assert set(result.coefficients) == {"layer 0 · softmax_attention", "layer 1 · softmax_attention"}


def test_principle_points_cover_the_sweep(trained):
    store_path, ids = trained
    points = principle_points(store_path, "inspect-demo", examples=2)
    assert sorted(label for label, _, _ in points) == [
        "mixer=gla, positions=False",
        "mixer=softmax_attention, positions=True",
    ]
    assert all(0 <= fraction <= 1 and 0 <= accuracy <= 1 for _, fraction, accuracy in points)


def test_inspect_command_prints_the_table_and_writes_figures(trained, tmp_path):
    store_path, ids = trained
    figure = tmp_path / "coefficients.png"
    result = CliRunner().invoke(
        app, ["inspect", ids["gla"], "--store", str(store_path), "--examples", "2", "--plot", str(figure)]
    )
    assert result.exit_code == 0, result.output
    assert "gla" in result.output and "inspect-demo[mixer=gla" in result.output
    assert "measured on 2 token sequences of 16 steps from its task's test set" in result.output
    assert "|α_ij| < eps = 0.001" in result.output and "rows by class: share of the rows" in result.output
    assert "n/a" not in result.output and "┃ large" not in result.output  # 1 − near-zero: not a column
    assert figure.stat().st_size > 0 and (tmp_path / "coefficients-principle.png").stat().st_size > 0


def test_inspect_says_why_a_zero_count_has_no_bound(trained):
    store_path, ids = trained
    result = CliRunner().invoke(
        app,
        ["inspect", ids["softmax_attention"], "--store", str(store_path), "--examples", "2", "--eps", "0.01"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "(bound for φ identity only)" in result.output and "eps = 0.01 " in result.output


def test_inspect_command_takes_token_ids_from_a_file(trained, tmp_path):
    store_path, ids = trained
    tokens = torch.randint(0, 32, (3, 10))
    torch.save(tokens, tmp_path / "tokens.pt")
    # the order: options first, then the run id
    result = CliRunner().invoke(
        app, ["inspect", "--store", str(store_path), "--input", str(tmp_path / "tokens.pt"), ids["softmax_attention"]]
    )
    assert result.exit_code == 0, result.output
    assert "measured on 3 token sequences of 10 steps from --input" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["nosuchrun"], "run id 'nosuchrun'"),
        (["{softmax}", "--input", "{missing}"], "--input: no file"),
        (["{softmax}", "--input", "{floats}"], "takes tokens inputs"),
        (["{softmax}", "--input", "{large}"], "token ids must lie in [0, 32)"),
        (["{softmax}", "--input", "{text_pt}"], "holds no numeric .pt tensor"),
        (["{softmax}", "--input", "{noise_pt}"], "holds no numeric .pt tensor"),
        (["{softmax}", "--input", "{text_npy}"], "holds no numeric .npy tensor"),
        (["{softmax}", "--input", "{strings_npy}"], "holds no numeric .npy tensor"),
    ],
)
def test_inspect_command_bad_input_exits_2(trained, tmp_path, args, message):
    store_path, ids = trained
    torch.save(torch.rand(2, 8), tmp_path / "floats.pt")
    torch.save(torch.full((2, 8), 99), tmp_path / "large.pt")
    (tmp_path / "text.pt").write_text("1 2 3\n")
    (tmp_path / "noise.pt").write_bytes(bytes(range(256)))
    (tmp_path / "text.npy").write_text("1 2 3\n")
    np.save(tmp_path / "strings.npy", np.array(["a", "b"]))
    fill = {
        "softmax": ids["softmax_attention"],
        "missing": str(tmp_path / "missing.pt"),
        "floats": str(tmp_path / "floats.pt"),
        "large": str(tmp_path / "large.pt"),
        **{
            f"{stem}_{suffix}": str(tmp_path / f"{stem}.{suffix}")
            for stem, suffix in (("text", "pt"), ("noise", "pt"), ("text", "npy"), ("strings", "npy"))
        },
    }
    before = Store(store_path, readonly=True).runs()
    result = CliRunner().invoke(app, ["inspect", *(a.format(**fill) for a in args), "--store", str(store_path)])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1  # one line, no traceback
    assert Store(store_path, readonly=True).runs() == before


def test_report_and_inspect_read_a_store_on_read_only_media(trained, tmp_path):
    """Issue 18.1: a store whose file and folder are not writable (read-only media) is read by ``report`` and
    ``inspect``, and neither changes a byte of it."""
    store_path, ids = trained
    with Store(store_path) as store:  # everything into the file, no -wal left to copy
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    media = tmp_path / "media"
    shutil.copytree(checkpoint_dir_for(store_path), checkpoint_dir_for(media / "runs.db"))
    shutil.copy(store_path, media / "runs.db")
    locked = [media / "runs.db", *checkpoint_dir_for(media / "runs.db").iterdir()]
    for path in locked:
        path.chmod(0o444)
    for folder in (checkpoint_dir_for(media / "runs.db"), media):
        folder.chmod(0o555)
    before = ((media / "runs.db").read_bytes(), (media / "runs.db").stat().st_mtime_ns)
    try:
        seqdyn = [sys.executable, "-m", "seqdyn"]
        commands = [
            ["report", "--store", str(media / "runs.db")],
            ["inspect", ids["gla"], "--store", str(media / "runs.db"), "--examples", "2"],
        ]
        for command in commands:
            done = subprocess.run(
                unprivileged([*seqdyn, *command], media),
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "COLUMNS": "200"},
            )
            assert done.returncode == 0, done.stderr
            assert "inspect-demo[mixer=gla" in done.stdout
        assert ((media / "runs.db").read_bytes(), (media / "runs.db").stat().st_mtime_ns) == before
        assert sorted(p.name for p in media.iterdir()) == ["runs.checkpoints", "runs.db"]
    finally:
        for folder in (media, checkpoint_dir_for(media / "runs.db")):
            folder.chmod(0o755)
