"""The backend each layer computed with is recorded with the run (issue 19, item 6) and shown by `seqdyn report`
and `seqdyn inspect`; stores of schema 2 stay readable and are migrated when opened to write."""

from __future__ import annotations

import json
import sqlite3

import pytest
from typer.testing import CliRunner

from seqdyn.cli import app
from seqdyn.train.config import parse_config
from seqdyn.train.loop import train_run
from seqdyn.train.report import render, run_rows
from seqdyn.train.store import _MIGRATIONS, _SCHEMA, SCHEMA_VERSION, Store


def linear_attention_run(seq_len: int, **train) -> dict:
    """Two layers of linear attention (identity readout, no decay: ``auto`` materializes short sequences)."""
    return {
        "name": f"la-{seq_len}",
        "model": {"mixer": "linear_attention", "d_model": 16, "layers": 2, "mlp": "none"},
        "task": {
            "name": "mqar",
            "params": {"seq_len": seq_len, "num_kv_pairs": 2, "vocab_size": seq_len + 16},
            "train_examples": 32,
            "test_examples": 8,
        },
        "train": {"steps": 2, "batch_size": 8, "eval_every": 2, **train},
    }


@pytest.mark.parametrize(
    "seq_len, train, expected",
    [
        (16, {}, "quadratic"),  # T <= 2·chunk: the cost model materializes
        (256, {}, "chunk"),
        (16, {"backend": "chunk"}, "chunk"),
    ],
)
def test_a_run_records_the_backend_each_layer_computed_with(tmp_path, monkeypatch, seq_len, train, expected):
    monkeypatch.setenv("SEQDYN_AUTOTUNE", "0")  # the cost model: a choice known in advance
    config = parse_config(linear_attention_run(seq_len, **train))
    with Store(tmp_path / "s.db") as store:
        result = train_run(config, store, checkpoint_dir=tmp_path / "c", progress=False)
        assert store.run(result.run_id).backends == [expected, expected]
        (row,) = run_rows(store)
    assert row["backend"] == expected
    assert render([row], "csv").splitlines()[0].endswith(",wall_time,parameters,non_embedding,state_floats,backend")


def test_a_run_records_what_auto_measured_and_why(tmp_path):
    """``train.backend: auto`` (the default) measures as any call of ``auto`` does; the run keeps the choice and
    its reason, the candidates' times among them."""
    config = parse_config(linear_attention_run(24))
    with Store(tmp_path / "s.db") as store:
        result = train_run(config, store, checkpoint_dir=tmp_path / "c", progress=False)
        record = store.run(result.run_id)
    assert len(record.backends) == len(record.backend_reasons) == 2
    for name, why in zip(record.backends, record.backend_reasons):
        assert f"{name} " in why and "forward + backward of linear_attention, B=8, T=24" in why and "H=1" in why
        assert why.startswith(("measured now", "cached in"))


def test_report_and_inspect_show_the_recorded_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQDYN_AUTOTUNE", "0")
    store_path = tmp_path / "s.db"
    with Store(store_path) as store:
        for seq_len in (16, 256):
            train_run(parse_config(linear_attention_run(seq_len)), store, checkpoint_dir=tmp_path / "c", progress=False)
        store.add_run("unrun", "unrun", parse_config(linear_attention_run(32)).canonical())
        run_id = store.runs()[0].id
    runner = CliRunner()
    report = runner.invoke(app, ["report", "--store", str(store_path), "--format", "json"])
    assert report.exit_code == 0, report.output
    assert '"backend": "quadratic"' in report.output and '"backend": "chunk"' in report.output
    assert '"backend": null' in report.output  # a run that has not trained yet
    inspect = runner.invoke(app, ["inspect", run_id, "--store", str(store_path), "--examples", "2"])
    assert inspect.exit_code == 0, inspect.output
    assert "backend quadratic)" in inspect.output
    assert "layer 1 trained with quadratic: cost model (nothing timed here): T=16 ≤ 2·chunk" in inspect.output


def test_a_store_of_schema_2_is_read_read_only_and_migrated_when_opened_to_write(tmp_path):
    path = tmp_path / "v2.db"
    connection = sqlite3.connect(path)
    connection.executescript(_SCHEMA + ";".join(_MIGRATIONS[2]) + "; PRAGMA user_version = 2;")
    config = json.dumps(parse_config(linear_attention_run(16)).canonical())
    connection.execute(
        "INSERT INTO runs (id, name, config, created, threads) VALUES ('r1', 'old', ?, 1.0, 2)", (config,)
    )
    connection.commit()
    connection.close()
    with Store(path, readonly=True) as store:
        (record,) = store.runs()
        assert (record.id, record.threads, record.backends) == ("r1", 2, None)
        assert "backend" not in run_rows(store)[0]
    with Store(path) as store:
        store.set_backends("r1", ["scan", "chunk"], ["measured now: scan", "only candidate"])
        assert store.run("r1").backends == ["scan", "chunk"]
        assert store.run("r1").backend_reasons == ["measured now: scan", "only candidate"]
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        assert run_rows(store)[0]["backend"] == "scan,chunk"  # one name per layer where they differ
