"""Every mixer documents itself where users look (issue 36): ``seqdyn mixers NAME`` prints its equations and each
option's type, allowed values, default and meaning, all read from the code."""

from __future__ import annotations

import re
from typing import Literal

import pytest
from typer.testing import CliRunner

from seqdyn import mixers
from seqdyn.cli import app
from seqdyn.mixers import describe


@pytest.mark.parametrize("name", mixers.names())
def test_every_option_of_every_mixer_is_documented(name):
    doc = describe(name)
    assert doc.summary, f"{name}: the class {mixers.get(name).__name__} has no docstring"
    assert doc.equations, f"{name}: the module has no docstring"
    undocumented = [option.name for option in doc.options if not option.meaning]
    assert not undocumented, f"{name}: no entry in the class docstring's Args: for {undocumented}"
    assert [option.name for option in doc.options] == list(mixers.options(name))


@pytest.mark.parametrize("name", mixers.names())
def test_the_args_of_every_mixer_name_only_its_options(name):
    """A misspelt or stale ``Args:`` entry is an error, not a meaning that no option shows."""
    from seqdyn.mixers._docs import split_docstring

    _, meanings = split_docstring(mixers.get(name).__doc__)
    assert set(meanings) <= set(mixers.options(name)), f"{name}: {sorted(set(meanings) - set(mixers.options(name)))}"


def test_allowed_values_come_from_literal_annotations():
    from seqdyn.layers.params import type_name
    from seqdyn.mixers._docs import allowed_values

    assert allowed_values(Literal["a", "b"]) == ("a", "b")
    assert allowed_values(Literal["a", "b"] | None) == ("a", "b", None)
    assert allowed_values(Literal["auto"] | int) == ()  # its meaning says what the number is
    assert allowed_values(int | None) == ()
    assert type_name(Literal["a"] | None) == "str or null" and type_name(tuple[float, float]) == "tuple[float, float]"


def test_seqdyn_mixers_custom_prints_equations_options_values_and_meanings():
    result = CliRunner().invoke(app, ["mixers", "custom"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "α_ij = φ(ψ(q_i)ᵀ x_i^(j))" in text  # the equations: the module docstring
    decay = text[text.index("\n  decay: ") : text.index("\n  decay_param: ")]
    assert '"none", "constant", "scalar", "diagonal"' in decay and 'default "none"' in decay
    assert "one gate per key channel" in decay  # what the value diagonal means
    assert "not documented" not in text
    assert max(map(len, text.splitlines())) <= 120


def test_seqdyn_mixers_lists_every_mixer_and_a_bad_name_is_one_line():
    runner = CliRunner()
    listing = runner.invoke(app, ["mixers"])
    assert listing.exit_code == 0 and all(name in listing.output for name in mixers.names())
    bad = runner.invoke(app, ["mixers", "mamba3"])
    assert bad.exit_code == 2
    [line] = bad.stderr.strip().splitlines()
    assert line.startswith(
        f"error: NAME: mixer: unknown name 'mamba3' (did you mean 'mamba2'?); known mixers: {', '.join(mixers.names())}"
    )


def test_every_mixer_page_is_plain_text_without_rest_markup():
    """`seqdyn mixers NAME` prints what a terminal shows: no ``literal`` backquotes, no :role:`target`."""
    from seqdyn.mixers._docs import plain

    markup = re.compile(r":[a-z]+:`|``")
    for name in mixers.names():
        text = mixers.describe(name).text()
        assert not markup.search(text), (name, markup.findall(text)[:3])
    assert plain(
        "see :func:`~seqdyn.core.coefficients`, :class:`the cache <seqdyn.hf.cache.SeqdynCache>` and ``x``"
    ) == ("see coefficients, the cache and x")
    assert plain("computed as::\n\n    y = A v") == "computed as:\n\n    y = A v"
