"""The keywords that make ``pytest -k`` select one mixer's tests (see ``tests/conftest.py``)."""

from __future__ import annotations

import re


def mixer_keyword(name: str) -> str:
    """The keyword that ``pytest -k`` matches for exactly the tests of mixer ``name``."""
    return f"mixer[{name}]"


def mixers_named_in(text: str, names: list[str]) -> set[str]:
    """The names that stand in ``text`` as words: not inside a longer name or word (``s4`` is not in ``s4d``,
    ``qlstm_s6`` or ``args4``), case ignored."""
    longest_first = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return set(re.findall(rf"(?<![a-z0-9])({longest_first})(?![a-z0-9])", text.lower()))
