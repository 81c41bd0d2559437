"""What users read cites nothing they cannot open: the package under src/seqdyn, the README and the pages docs/*.md
name papers by author and year, never by the numbers of the project's source documents ("seed 001"), never a section
of its design notes ("DESIGN §4", DESIGN.md) or an issue of its tracker ("issue 34"); another project's issue,
"transformers issue #48256" or "huggingface/transformers issue 48256", is fine.

Not covered: docs/history/, which records the project's past, and the published docs/reproductions/, which each
run of the reproductions writes anew.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_YET = ()

#: "seed 001" / "seeds 000", "DESIGN §2" / "DESIGN.md", and "issue 34" unless an owner/repository comes before it
INTERNAL = re.compile(r"\bseeds? 00\d|\bDESIGN(?: ?§|\.md)|\bissue \d+", re.IGNORECASE)
_REPOSITORY_ISSUE = re.compile(r"[\w.-]+/[\w.-]+ issue \d+")


def internal_references(text: str) -> list[str]:
    """The internal references in ``text``: each match of :data:`INTERNAL` outside an ``owner/repository issue N``."""
    spared = {match.start() + match.group(0).rindex("issue") for match in _REPOSITORY_ISSUE.finditer(text)}
    return [match.group(0) for match in INTERNAL.finditer(text) if match.start() not in spared]


def _user_files() -> list[Path]:
    files = [*(ROOT / "src" / "seqdyn").rglob("*.py"), ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    return sorted(path for path in files if not any(path == skip or skip in path.parents for skip in NOT_YET))


def test_the_pattern_finds_internal_references_and_spares_other_projects_issues():
    assert internal_references("as in seed 001 eq. 2; Seed 000 Lemma 1") == ["seed 001", "Seed 000"]
    assert internal_references("(DESIGN §4), see DESIGN.md, DESIGN §2") == ["DESIGN §", "DESIGN.md", "DESIGN §"]
    assert internal_references("the targets of issue 34 (issue 7)") == ["issue 34", "issue 7"]
    legitimate = "transformers issue #48256, huggingface/transformers issue 48256, seed 0, seeds 1 and 2, DESIGNS"
    assert internal_references(legitimate) == []


def test_user_facing_text_names_papers_not_seeds_design_sections_or_issues():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {', '.join(references)}"
        for path in _user_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if (references := internal_references(line))
    ]
    assert not found, "name the paper by author and year, state the fact, or drop the issue number:\n" + "\n".join(
        found
    )
