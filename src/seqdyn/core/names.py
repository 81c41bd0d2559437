"""Did-you-mean hints for misspelled names (config fields, mixer options, task parameters, mixer and task names)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]

#: how alike (difflib's ratio) a known name must be to a misspelled one to be suggested
CUTOFF = 0.6


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name most like ``name`` (case ignored), if one is alike enough, else ``None``."""
    known = [str(item) for item in known]
    lowered = {item.lower(): item for item in known}
    match = difflib.get_close_matches(str(name).lower(), list(lowered), n=1, cutoff=CUTOFF)
    return lowered[match[0]] if match else None


def did_you_mean(names: str | Iterable[str], known: Iterable[str]) -> str:
    """``" (did you mean 'seq_len'?)"`` for the first of ``names`` that has a close known name, else ``""``."""
    known = list(known)
    for name in [names] if isinstance(names, str) else names:
        match = closest(name, known)
        if match is not None and match != name:
            return f" (did you mean {match!r}?)"
    return ""
