"""The `seqdyn tasks` commands, on tiny inputs."""

import pytest
from typer.testing import CliRunner

from seqdyn.cli.tasks import app
from seqdyn.tasks import names

runner = CliRunner()


def test_list_shows_every_task_with_defaults():
    result = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for name in names():
        assert name in result.output
    assert "power_a=0.01" in result.output and "regression" in result.output


def test_show_resolves_parameters_and_renders():
    args = ["show", "mqar", "--param", "seq_len=128", "--param", "num_kv_pairs=8", "-p", "vocab_size=512"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for line in ("seq_len = 128", "num_kv_pairs = 8", "vocab_size = 512", "power_a = 0.01"):
        assert line in result.output
    assert "8 labelled positions" in result.output


def test_show_parses_booleans_and_floats():
    result = runner.invoke(
        app, ["show", "mqar", "-p", "random_non_queries=false", "-p", "power_a=0.5", "--split", "test", "--seed", "3"]
    )
    assert result.exit_code == 0, result.output
    assert "random_non_queries = False" in result.output and "power_a = 0.5" in result.output


@pytest.mark.parametrize(
    "args, words",
    [
        (["mqar", "--param", "seq_len=63"], ["seq_len=63", "even"]),
        (["mqar", "--param", "bogus=1"], ["bogus", "allowed"]),
        (["nosuchtask"], ["unknown task 'nosuchtask'"]),
        (["mqar", "--param", "seq_len"], ["NAME=VALUE"]),
        (["mqar", "--split", "[bold]x"], ["split='[bold]x'"]),
    ],
)
def test_show_errors_go_to_stderr_on_one_line(args, words):
    result = runner.invoke(app, ["show", *args])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr


def test_show_pathfinder_writes_a_png(tmp_path):
    png = tmp_path / "pf.png"
    result = runner.invoke(app, ["show", "pathfinder_segmentation", "-p", "seq_len=4096", "--png", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:4] == b"\x89PNG" and "label 2" in result.output


def test_a_pathfinder_image_too_small_for_its_paths_is_one_line_naming_the_fix():
    """At 32 × 32 the default 14 dashes do not fit (the generator used to fail after 20 scenes with a traceback);
    at 44 × 44 they do."""
    result = runner.invoke(app, ["show", "pathfinder_segmentation", "-p", "seq_len=1024"])
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert "has no room for a main path of 14 dashes" in line and "take a larger seq_len or fewer num_dashes" in line
    from seqdyn import tasks

    assert tasks.build("pathfinder_segmentation", seq_len=44 * 44).generate(4, 0, "train")[0].shape == (4, 1936, 1)
