"""Two rules of the whole test tree (issue 19, item 7), kept here as the tests run.

**A test leaves no file in the checkout.** Tests write under ``tmp_path``: a checkpoint folder, a results store, a
figure. The files of the checkout are listed when the session starts and again after every test; a test after which
a new one stands fails at its teardown, naming the paths. Version control, virtual environments and the caches of
Python and its tools (``__pycache__``, ``.pytest_cache``, ``.hypothesis``) are not looked at. Whatever else writes
into the checkout while the tests run (``make main`` in the same folder) trips the check too.

**``pytest -k <mixer>`` selects a mixer's tests.** A test concerns a mixer when its file is
``tests/mixers/test_<mixer>.py`` or, elsewhere, when its name or parameter ids hold the mixer's name as a word
(``[s4d-...]``, ``test_mamba2_...``); such a test carries the keyword ``mixer[<mixer>]``. ``-k`` matches parts of
names, so ``pytest -k s4`` also selects the tests of the mixers whose names hold another (``s4`` of ``s4d``, ``s6``
and ``qlstm`` of ``qlstm_s6``, ``lru`` of ``rglru``, ``deltanet`` of ``gated_deltanet``) and a few tests whose
generated ids end in the same letters (``args4``); ``pytest -k "mixer[s4]"`` selects exactly one mixer's tests (quote
it: the brackets are a shell pattern). ``tests/test_test_tree.py`` checks both for every registered mixer.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from seqdyn import mixers
from tests.helpers import EXAMPLE_MIXER, mixer_keyword, mixers_named_in, write_example_mixer

#: ``auto`` measures the backends as for a user, but keeps its choices in memory: no cache file outside tmp_path
os.environ.setdefault("SEQDYN_AUTOTUNE", "memory")

#: folders the checkout check does not enter: version control, virtual environments, caches of Python and its tools
UNWATCHED = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "__pycache__",
        ".pytest_cache",
        ".hypothesis",
        ".mypy_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
    }
)
CHECKOUT_FILES = pytest.StashKey[set]()


def checkout_files(root: Path) -> set[str]:
    """The files and folders below ``root`` (paths relative to it), but for the :data:`UNWATCHED` folders and
    virtual environments of any name (a folder holding ``pyvenv.cfg``)."""
    found = set()
    for folder, subfolders, files in os.walk(root):
        if "pyvenv.cfg" in files:
            subfolders.clear()
            continue
        subfolders[:] = [name for name in subfolders if name not in UNWATCHED]
        relative = os.path.relpath(folder, root)
        found.update(os.path.normpath(os.path.join(relative, name)) for name in (*subfolders, *files))
    return found


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[CHECKOUT_FILES] = checkout_files(session.config.rootpath)


@pytest.fixture(autouse=True)
def _leaves_no_file_in_the_checkout(request: pytest.FixtureRequest):
    """Fails the test after which the checkout holds files it did not hold before (they stay, and are reported
    once)."""
    yield
    config = request.config
    now = checkout_files(config.rootpath)
    new = sorted(now - config.stash[CHECKOUT_FILES])
    config.stash[CHECKOUT_FILES] = now
    if new:
        pytest.fail(
            f"the test wrote into the checkout {config.rootpath}: {', '.join(new)} (write under tmp_path)",
            pytrace=False,
        )


@pytest.hookimpl(tryfirst=True)  # before ``-k`` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    names = mixers.names()
    for item in items:
        for name in mixers_of(item, names):
            item.extra_keyword_matches.add(mixer_keyword(name))


def mixers_of(item: pytest.Item, names: list[str]) -> set[str]:
    """The mixers a test concerns: the one of its file ``tests/mixers/test_<name>.py``, else those its name and
    parameter ids hold."""
    folder, paper_of = item.path.parent, item.path.stem.removeprefix("test_")
    if (folder.parent.name, folder.name) == ("tests", "mixers") and paper_of in names:
        return {paper_of}
    return mixers_named_in(item.name, names)


@pytest.fixture
def example_mixer(tmp_path, monkeypatch) -> str:
    """The example mixer of docs/writing-a-mixer.md as module ``my_mixer`` in ``tmp_path``, on ``sys.path`` (and
    ``PYTHONPATH``, for the processes a test starts); its import path. Names that ``seqdyn.mixers.register``
    gives during the test are forgotten after it."""
    write_example_mixer(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.delitem(sys.modules, "my_mixer", raising=False)
    monkeypatch.setattr(mixers, "_REGISTERED", dict(mixers._REGISTERED))
    yield EXAMPLE_MIXER
    sys.modules.pop("my_mixer", None)
