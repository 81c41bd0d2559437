"""The keywords that make ``pytest -k`` select one mixer's tests (see ``tests/conftest.py``), the code blocks of a
Markdown file (README, docs), the example mixer of docs/writing-a-mixer.md as a module, and a word-level stand-in
for tiktoken's GPT-2 encoding (the real one downloads its BPE file on first use)."""

from __future__ import annotations

import re
import types
from pathlib import Path


def mixer_keyword(name: str) -> str:
    """The keyword that ``pytest -k`` matches for exactly the tests of mixer ``name``."""
    return f"mixer[{name}]"


def mixers_named_in(text: str, names: list[str]) -> set[str]:
    """The names that stand in ``text`` as words: not inside a longer name or word (``s4`` is not in ``s4d``,
    ``qlstm_s6`` or ``args4``), case ignored."""
    longest_first = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return set(re.findall(rf"(?<![a-z0-9])({longest_first})(?![a-z0-9])", text.lower()))


def code_blocks(path: Path, language: str) -> list[str]:
    """The fenced code blocks of ``language`` (```` ```python ````) in the Markdown file ``path``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.S)


WRITING_A_MIXER = Path(__file__).resolve().parents[1] / "docs" / "writing-a-mixer.md"
#: the import path of the example mixer of docs/writing-a-mixer.md, written by :func:`write_example_mixer`
EXAMPLE_MIXER = "my_mixer:DecayedAttention"


def write_example_mixer(folder: Path) -> Path:
    """The first Python block of docs/writing-a-mixer.md (a complete mixer) as ``folder/my_mixer.py``."""
    path = folder / "my_mixer.py"
    path.write_text(code_blocks(WRITING_A_MIXER, "python")[0])
    return path


class WordEncoding:
    """A word-level stand-in for a tiktoken encoding: each new space-separated word gets the next id."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def encode_ordinary(self, text: str) -> list[int]:
        return [self.vocab.setdefault(word, len(self.vocab)) for word in text.split(" ")]

    def decode(self, ids: list[int]) -> str:
        inverse = {i: word for word, i in self.vocab.items()}
        return " ".join(inverse[i] for i in ids)


def stub_tiktoken(monkeypatch) -> None:
    """Make ``import tiktoken`` give a module whose ``get_encoding`` returns a :class:`WordEncoding` (offline)."""
    import sys

    monkeypatch.setitem(sys.modules, "tiktoken", types.SimpleNamespace(get_encoding=lambda name: WordEncoding()))
