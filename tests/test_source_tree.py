"""The source keeps the shape issue 19 gave it: short functions, no private names taken across modules."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "seqdyn"
LONGEST_FUNCTION = 50


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in sorted(SOURCE.rglob("*.py"))]


def test_no_function_is_longer_than_fifty_lines():
    long = [
        f"{path.relative_to(SOURCE)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION
    ]
    assert not long, "split these functions: " + "; ".join(long)


def _package_of(path: Path) -> str:
    return ".".join(("seqdyn", *path.relative_to(SOURCE).parent.parts))


def test_no_module_imports_a_private_name_of_another_module():
    """No ``from seqdyn.x import _name``; a private module (``mixers/_lti.py``) is imported only inside its own
    package."""
    taken = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("seqdyn"):
                continue
            private = [alias.name for alias in node.names if alias.name.startswith("_")]
            parent, _, last = node.module.rpartition(".")
            if last.startswith("_") and _package_of(path) != parent:
                private.append(node.module)
            if private:
                taken.append(f"{path.relative_to(SOURCE)} takes {', '.join(private)} from {node.module}")
    assert not taken, "make these names public where they are defined: " + "; ".join(taken)
