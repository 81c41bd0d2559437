"""The test tree mirrors the source (issue 19, item 7): a folder of tests per package of ``seqdyn``, no test module
importing another (shared pieces live in helper modules and ``conftest.py``), and ``pytest -k <mixer>`` selecting
that mixer's tests (see ``tests/conftest.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from seqdyn import mixers
from tests.helpers import mixer_keyword

TESTS = Path(__file__).resolve().parent
SOURCE = TESTS.parent / "src" / "seqdyn"


def imported_modules(path: Path) -> set[str]:
    """The dotted names that module ``path`` imports (``from a import b`` gives ``a`` and ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.add(base)
            found.update(f"{base}.{alias.name}" if node.module else base + alias.name for alias in node.names)
    return found


def test_no_module_of_the_tests_imports_a_test_module():
    offenders = {
        str(path.relative_to(TESTS)): sorted(
            name for name in imported_modules(path) if any(part.startswith("test_") for part in name.split("."))
        )
        for path in sorted(TESTS.rglob("*.py"))
    }
    offenders = {path: names for path, names in offenders.items() if names}
    assert not offenders, f"move what test modules share into a helper module or conftest.py: {offenders}"


def test_every_folder_of_tests_is_a_package_named_after_one_of_the_source():
    folders = [path for path in TESTS.iterdir() if path.is_dir() and path.name != "__pycache__"]
    assert folders
    for folder in folders:
        assert (SOURCE / folder.name / "__init__.py").is_file(), f"tests/{folder.name}: no package seqdyn.{folder.name}"
        assert (folder / "__init__.py").is_file(), f"tests/{folder.name}: no __init__.py"


# --- pytest -k <mixer> ---------------------------------------------------------------------------------------------
class KeywordSelections:
    """A pytest plugin: after collection, the tests that pytest's own ``-k`` matcher (the one ``pytest -k`` runs)
    selects for each of ``expressions``, and the string parameters of every test."""

    def __init__(self, expressions: list[str]):
        self.expressions = expressions
        self.selected: dict[str, set[str]] = {}
        self.parameters: dict[str, set[str]] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        deselect_by_keyword = config.pluginmanager.get_plugin("mark").deselect_by_keyword
        for expression in self.expressions:
            kept = list(items)
            config.option.keyword = expression
            deselect_by_keyword(kept, config)
            self.selected[expression] = {item.nodeid for item in kept}
        config.option.keyword = ""
        for item in items:
            callspec = getattr(item, "callspec", None)
            values = callspec.params.values() if callspec else ()
            self.parameters[item.nodeid] = {value for value in values if isinstance(value, str)}


@pytest.fixture(scope="module")
def selections() -> KeywordSelections:
    """``pytest -k`` on the whole tree for each mixer's name and for its keyword (one collection, nothing run)."""
    names = mixers.names()
    plugin = KeywordSelections([*names, *map(mixer_keyword, names)])
    exit_code = pytest.main([str(TESTS), "--collect-only", "-q", "-p", "no:cacheprovider"], plugins=[plugin])
    assert exit_code == pytest.ExitCode.OK and plugin.parameters
    return plugin


def paper_tests(selections: KeywordSelections, name: str) -> set[str]:
    return {test for test in selections.parameters if test.split("::")[0] == f"tests/mixers/test_{name}.py"}


@pytest.mark.parametrize("name", mixers.names())
def test_pytest_k_mixer_selects_its_paper_tests_and_its_cases_in_the_suites(selections, name):
    exact, loose = selections.selected[mixer_keyword(name)], selections.selected[name]
    paper = paper_tests(selections, name)
    cases = {test for test, values in selections.parameters.items() if name in values}
    assert paper and cases, f"{name}: no tests/mixers/test_{name}.py or no test parametrized with it"
    assert paper | cases <= exact <= loose, f"{name}: not selected: {sorted(paper | cases - exact)}"
    assert all(name in test.lower() for test in exact)
    other_names = set(mixers.names()) - {name}
    others = {test for other in other_names for test in paper_tests(selections, other)}
    others |= {test for test, values in selections.parameters.items() if values & other_names} - cases
    assert not exact & others, f"{mixer_keyword(name)} selects other mixers' tests: {sorted(exact & others)}"


@pytest.mark.parametrize("name", mixers.names())
def test_pytest_k_mixer_selects_mostly_its_own_tests(selections, name):
    """``-k s4`` selects s4d's tests too (and ``-k lru`` rglru's...): those count as its own, the rest is at most a
    quarter of what it selects (generated ids such as ``args4``)."""
    loose = selections.selected[name]
    holding_the_name = [other for other in mixers.names() if name in other]
    own = set().union(*(selections.selected[mixer_keyword(other)] for other in holding_the_name))
    assert len(loose - own) <= len(loose) / 4, f"-k {name} selects {sorted(loose - own)}"
