"""Every command's ``--help`` reads whole in an 80-column terminal: nothing cut off with an ellipsis (issue 36)."""

from __future__ import annotations

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from seqdyn.cli import app


def command_paths(command, prefix: tuple[str, ...] = ()):
    """Every command and sub-command of the CLI, as the arguments that reach it."""
    yield prefix
    for name, sub in getattr(command, "commands", {}).items():
        yield from command_paths(sub, (*prefix, name))


@pytest.mark.parametrize("path", list(command_paths(get_command(app))), ids=lambda path: " ".join(path) or "seqdyn")
def test_help_is_not_cut_off_at_80_columns(path):
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines and max(map(len, lines)) <= 80
    assert [line for line in lines if "…" in line] == []
