"""A mixer's documentation, read from its code (``seqdyn mixers NAME``): the equations are the module docstring;
each option's type and default come from the signature of ``__init__``, its allowed values from a ``Literal``
annotation, and its meaning from the ``Args:`` section of the class docstring (Google style, one entry per option;
an option of a base class may be documented there instead)::

    class MyMixer(CoefficientMixer):
        \"\"\"What it is, in a line.

        Args:
            heads: the number of heads H; each head mixes d_model / H channels.
            decay: ``"none"`` (Λ = I) or ``"scalar"`` (Λ_t = exp(g_t)·I with g_t from the input).
        \"\"\"

        def __init__(self, d_model: int, heads: int = 1, decay: Literal["none", "scalar"] = "none"): ...
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any

from seqdyn.layers.params import type_name

#: an entry of an ``Args:`` section: ``name: meaning`` (an optional ``(type)`` after the name is ignored)
ENTRY = re.compile(r"(\w+)(?:\s*\([^)]*\))?:\s*(.*)")


@dataclass(frozen=True)
class OptionDoc:
    """One option of a mixer: ``allowed`` holds the values of a ``Literal`` annotation (empty: any value of the
    type); ``meaning`` is empty where the class docstring does not document it."""

    name: str
    type: str
    allowed: tuple[Any, ...]
    default: Any
    meaning: str


@dataclass(frozen=True)
class MixerDoc:
    """A registered mixer: its name, what its class docstring says before ``Args:``, its module docstring (the
    equations, the paper, the coefficient form) and its options in the order of the signature."""

    name: str
    summary: str
    equations: str
    options: tuple[OptionDoc, ...]

    def text(self, width: int = 100) -> str:
        """The documentation as plain text (:func:`plain`), lines at most ``width`` characters (the equations as
        written)."""
        lines = [
            *textwrap.wrap(f"{self.name}: {plain(self.summary)}", width),
            "",
            plain(self.equations),
            "",
            f"Options (seqdyn.mixers.build({self.name!r}, d_model, **options), or mixer_options in a config):",
        ]
        for option in self.options:
            lines.append(f"  {option.name}: {option_kind(option)}")
            lines += textwrap.wrap(
                plain(option.meaning) or "(not documented)",
                width,
                initial_indent=" " * 6,
                subsequent_indent=" " * 6,
                break_on_hyphens=False,
            )
        return "\n".join(lines) + "\n"


#: reST roles (``:func:`~seqdyn.core.x```, ``:class:`text <target>```) and inline literals (````x````)
_ROLE = re.compile(r":[a-z]+:`(~?)([^`<]*?)(?:\s*<[^`>]*>)?`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain(text: str) -> str:
    """A docstring's reST as a terminal shows it: a role as its text (``~a.b.c`` as ``c``), a literal without its
    backquotes, ``::`` before a code block as ``:``."""

    def role(match: re.Match) -> str:
        short, target = match.group(1), match.group(2).strip()
        return target.rsplit(".", 1)[-1] if short else target

    text = _LITERAL.sub(r"\1", _ROLE.sub(role, text))
    return re.sub(r"(?<=\S)::(?=\s*$)", ":", text, flags=re.MULTILINE)


def option_kind(option: OptionDoc) -> str:
    """``int; default 1`` or ``str, one of "none", "sum"; default "none"``: values as a YAML config writes them."""
    allowed = f", one of {', '.join(map(json.dumps, option.allowed))}" if option.allowed else ""
    return f"{option.type}{allowed}; default {json.dumps(option.default, ensure_ascii=False)}"


def describe(name: str, cls: type) -> MixerDoc:
    """The documentation of mixer class ``cls`` registered as ``name``."""
    summary, _ = split_docstring(cls.__doc__ or "")
    meanings = option_meanings(cls)
    hints = typing.get_type_hints(cls.__init__, vars(sys.modules[cls.__module__]))
    parameters = list(inspect.signature(cls.__init__).parameters.values())[2:]  # self, d_model
    options = tuple(
        OptionDoc(
            p.name,
            type_name(hints.get(p.name, Any)),
            allowed_values(hints.get(p.name, Any)),
            p.default,
            meanings.get(p.name, ""),
        )
        for p in parameters
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )
    equations = inspect.cleandoc(sys.modules[cls.__module__].__doc__ or "")
    return MixerDoc(name, summary, equations, options)


def option_meanings(cls: type) -> dict[str, str]:
    """The ``Args:`` entries of ``cls`` and of the classes it derives from, a class's own entry winning over its
    bases': an option a base class documents (``chunk_size`` of every coefficient mixer, the options Gated DeltaNet
    shares with DeltaNet) is documented once."""
    meanings: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        meanings.update(split_docstring(vars(klass).get("__doc__") or "")[1])
    return meanings


def split_docstring(docstring: str) -> tuple[str, dict[str, str]]:
    """The text before ``Args:`` on one line, and the ``Args:`` entries ``{name: meaning}`` (continuation lines,
    indented deeper than the entry, joined with single spaces)."""
    head, _, args = inspect.cleandoc(docstring).partition("\nArgs:\n")
    meanings: dict[str, list[str]] = {}
    entry_indent = None
    for line in args.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip():
            continue
        if entry_indent is None:
            entry_indent = indent
        if indent < entry_indent:  # the next section (Returns:, ...)
            break
        match = ENTRY.fullmatch(line.strip())
        if indent == entry_indent and match:
            meanings[match[1]] = [match[2]]
        elif meanings:
            meanings[list(meanings)[-1]].append(line.strip())
    return " ".join(head.split()), {name: " ".join(" ".join(parts).split()) for name, parts in meanings.items()}


def allowed_values(annotation: Any) -> tuple[Any, ...]:
    """The values of a ``Literal`` annotation, ``None`` too for ``Literal[...] | None``; ``()`` for any other
    annotation, ``Literal["auto"] | int`` included (its meaning says what the number is)."""
    members = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    literals = [arg for arg in members if typing.get_origin(arg) is typing.Literal]
    if not literals or any(arg not in literals and arg is not type(None) for arg in members):
        return ()
    values = tuple(value for arg in literals for value in typing.get_args(arg))
    return (*values, None) if type(None) in members else values
