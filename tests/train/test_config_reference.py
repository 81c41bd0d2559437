"""The config reference: docs/config.md is what `seqdyn config schema` prints now, and every field is described."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqdyn.cli import app
from seqdyn.models.config import ModelConfig
from seqdyn.train.config import RunConfig, TrainConfig
from seqdyn.train.config_reference import config_reference, config_sections, undescribed_fields

DOCS = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_docs_config_is_current():
    assert DOCS.read_text(encoding="utf-8") == config_reference(), (
        "docs/config.md is not current: regenerate it with `seqdyn config schema > docs/config.md`"
    )


def test_cli_prints_the_reference():
    result = CliRunner().invoke(app, ["config", "schema"])
    assert result.exit_code == 0, result.output
    assert result.output == config_reference()


def test_every_field_has_a_description():
    assert undescribed_fields() == []


def test_every_field_of_every_section_is_listed():
    """Each field of the run config and of its nested models appears once, at its dotted path."""
    paths = [row.path for section in config_sections() for row in section.rows]
    assert len(paths) == len(set(paths))
    assert {f"model.{name}" for name in ModelConfig.model_fields} - {"model.moe"} <= set(paths)
    assert {f"train.{name}" for name in TrainConfig.model_fields} - {"train.early_stop"} <= set(paths)
    assert {"name", "sweep", "train.early_stop.metric", "model.moe.top_k", "schedule.kind", "task.name"} <= set(paths)
    assert "model.shared_blocks[].adapter_rank" in paths  # the model of a list's items, at path[]
    assert {section.path for section in config_sections()} == {
        "",
        "train.early_stop",
        "model.moe",
        "model.shared_blocks[]",
    } | {name for name, info in RunConfig.model_fields.items() if name not in ("name",)}


def test_rows_give_type_default_and_allowed_values():
    rows = {row.path: row for section in config_sections() for row in section.rows}
    assert (rows["schedule.kind"].type, rows["schedule.kind"].default, rows["schedule.kind"].allowed) == (
        "str",
        '`"cosine"`',
        "`cosine`, `constant`",
    )
    assert (rows["schedule.warmup"].allowed, rows["train.steps"].type) == ("≥ 0, < 1", "int or null")
    assert (rows["task.name"].default, rows["optimizer.betas"].default) == ("required", "`[0.9, 0.999]`")


def test_a_field_without_description_is_reported(monkeypatch):
    monkeypatch.setattr(ModelConfig.model_fields["init_std"], "description", None)
    assert undescribed_fields() == ["model.init_std"]
    with pytest.raises(ValueError, match="model.init_std"):
        config_reference()
