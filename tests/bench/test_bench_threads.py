"""``--threads``: every benchmark runs and reports at each thread count it is given, pinned to that count, and a
count that is not a positive integer is one line naming the option."""

from __future__ import annotations

import pytest
import torch
import typer
from typer.testing import CliRunner

from seqdyn.bench.measure import benchmark_threads, one_thread, pinned_threads, threads_in_words
from seqdyn.cli import app
from seqdyn.cli.bench import app as bench_app
from seqdyn.cli.common import thread_counts


def test_every_benchmark_takes_a_list_of_thread_counts():
    commands = typer.main.get_command(bench_app).commands
    assert len(commands) >= 8
    for name, command in commands.items():
        assert "--threads" in {opt for param in command.params for opt in param.opts}, name


def test_a_benchmark_measures_at_its_thread_count_and_restores_the_one_before():
    before = torch.get_num_threads()
    with benchmark_threads(2):
        assert torch.get_num_threads() == 2 and threads_in_words() == "2 threads"
        with pinned_threads():
            assert torch.get_num_threads() == 2
        with one_thread():
            assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before and threads_in_words() == "one thread"
    with pinned_threads():
        assert torch.get_num_threads() == 1


@pytest.mark.parametrize("text", ["0", "1,0", "two", "", "1.5"])
def test_a_thread_count_that_is_not_a_positive_integer_is_refused_naming_the_option(text):
    with pytest.raises(ValueError, match="--threads: expected comma-separated thread counts"):
        thread_counts(text)
    result = CliRunner().invoke(app, ["bench", "tasks", "--scale", "0.001", "--threads", text])
    assert result.exit_code == 2 and "--threads" in result.output


def test_each_count_is_reported_under_its_own_heading():
    result = CliRunner().invoke(app, ["bench", "tasks", "--scale", "0.001", "--skip-512", "--threads", "1,2"])
    assert result.exit_code == 0, result.output
    assert thread_counts("2, 1") == [2, 1]
    first, second = result.output.index("at 1 torch thread"), result.output.index("at 2 torch threads")
    assert first < result.output.index("(one thread)") < second < result.output.index("(2 threads)")
