"""The README's and the user's guide's code runs as written."""

import re
import shlex
from pathlib import Path

import pytest

from tests.helpers import code_blocks

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide.md"


@pytest.mark.parametrize("path", [README, GUIDE], ids=["README", "guide"])
def test_readme_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # what a block saves lands here
    blocks = code_blocks(path, "python")
    assert blocks
    for block in blocks:
        exec(compile(block, str(path), "exec"), {})


def test_readme_opens_with_the_two_setup_commands():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1).strip().splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == ["make main", "make test"]


def test_readme_yaml_blocks_are_valid_configs():
    """Every YAML block of the README and the guide is a run or sweep config that validates (each expanded run
    too)."""
    import yaml

    from seqdyn.train.config import parse_config

    blocks = code_blocks(README, "yaml") + code_blocks(GUIDE, "yaml")
    assert blocks
    for block in blocks:
        parse_config(yaml.safe_load(block), "README.md or docs/guide.md")


def test_readme_tasks_and_config_commands_run():
    """Every `seqdyn tasks ...` and `seqdyn config ...` command quoted in the README or the guide runs as written."""
    from typer.testing import CliRunner

    from seqdyn.cli import app

    text = README.read_text() + GUIDE.read_text()
    commands = re.findall(r"`(?:\.venv/bin/)?seqdyn ((?:tasks|config) [^`]+)`", text)
    assert sum(command.startswith("tasks") for command in commands) >= 2
    assert "config schema" in commands
    for command in commands:
        result = CliRunner().invoke(app, shlex.split(command))
        assert result.exit_code == 0, f"seqdyn {command}: {result.output}"
