"""Language modelling: next-token prediction on a local corpus (Sieber et al. 2024 §4 and appendix I.2).

Sources (exactly one):

- ``path``: one text file. Its token stream is split in order into train (the first ``1 − 2·holdout``),
  valid and test (``holdout`` each).
- ``data_dir``: a local copy of WikiText-103 (Merity et al. 2016) holding ``wiki.train.tokens``,
  ``wiki.valid.tokens`` and ``wiki.test.tokens``; each split reads its own file. Without either, the
  environment variable ``SEQDYN_WIKITEXT103`` names the directory.

Tokenizers: ``"bytes"`` (UTF-8 bytes, vocabulary 256) or ``"gpt2"`` (GPT-2 BPE through the optional package
``tiktoken``, vocabulary 50257; tiktoken downloads its BPE file on first use).

``generate(n, seed, split)`` cuts ``n`` windows of ``seq_len + 1`` tokens at uniformly random offsets of the
split's stream: ``inputs = window[:-1]``, ``targets = window[1:]``. ``windows(split)`` gives the consecutive
non-overlapping windows, for evaluating perplexity on a whole split. Default context: 1024 (Sieber et al. 2024
appendix I.2).

Documents: with ``document_separator`` (e.g. ``"\n\n"``) the split's text is cut into documents at every
separator, and an example is one whole document drawn at random (its first ``seq_len + 1`` tokens), right-padded:
inputs 0 and targets ``IGNORE_INDEX`` after its end, so the loss counts its real tokens only.  Training packs such
documents end to end with ``train.pack: true`` (``cu_seqlens``: nothing computed on padding, no document reads
another).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from seqdyn.tasks.base import IGNORE_INDEX, Param, Task, TaskSpec, register, token_accuracy

WIKITEXT_ENV = "SEQDYN_WIKITEXT103"
WIKITEXT_FILES = {"train": "wiki.train.tokens", "valid": "wiki.valid.tokens", "test": "wiki.test.tokens"}
GPT2_VOCAB = 50257


def _gpt2_encoding():
    try:
        import tiktoken
    except ImportError:
        raise ValueError(
            "lm: parameter tokenizer='gpt2' needs the optional package tiktoken (pip install tiktoken); "
            "tokenizer='bytes' needs nothing"
        ) from None
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as error:  # tiktoken fetches its BPE file on first use
        raise ValueError(
            f"lm: parameter tokenizer='gpt2': tiktoken could not load the GPT-2 encoding ({error}); it downloads "
            "its BPE file on first use, so run once with network access or set TIKTOKEN_CACHE_DIR to a copy"
        ) from error


@register
class LanguageModeling(Task):
    """Next-token prediction on a local text file or a local WikiText-103."""

    name = "lm"
    family = "lm"
    reference = "Sieber et al. 2024 §4, appendix I.2 (WikiText-103, context 1024)"
    splits = ("train", "valid", "test")
    PARAMS = {
        "seq_len": Param(1024, int, "context length", low=1),
        "path": Param(None, str, "a local text file", optional=True),
        "data_dir": Param(None, str, "a local WikiText-103 directory (wiki.{train,valid,test}.tokens)", optional=True),
        "tokenizer": Param("bytes", str, "'bytes' or 'gpt2' (tiktoken)", choices=("bytes", "gpt2")),
        "holdout": Param(0.05, float, "fraction of a single file for valid and for test", low=0.0, below=0.5),
        "document_separator": Param(
            None,
            str,
            "cut the text into documents at this separator (e.g. '\\n\\n'); "
            "an example is then one whole document, right-padded",
            optional=True,
        ),
    }

    def _check(self) -> None:
        if self.path is not None and self.data_dir is not None:
            self._fail(f"parameters path={self.path!r} and data_dir={self.data_dir!r}: give only one")
        if self.path is None and self.data_dir is None and os.environ.get(WIKITEXT_ENV):
            self.data_dir = self.params["data_dir"] = os.environ[WIKITEXT_ENV]
        if self.path is not None and not Path(self.path).is_file():
            self._fail(f"parameter path={self.path!r} is not a readable file")
        if self.data_dir is not None:
            missing = [f for f in WIKITEXT_FILES.values() if not (Path(self.data_dir) / f).is_file()]
            if missing:
                self._fail(f"parameter data_dir={self.data_dir!r} lacks {', '.join(missing)} (a WikiText-103 copy)")
        if self.document_separator == "":
            self._fail("parameter document_separator='' would cut nothing: give a separator such as '\\n\\n'")
        self._encoding = _gpt2_encoding() if self.tokenizer == "gpt2" else None
        self._streams: dict[str, np.ndarray] = {}
        self._documents: dict[str, list[np.ndarray]] = {}

    def _spec(self) -> TaskSpec:
        vocab = GPT2_VOCAB if self.tokenizer == "gpt2" else 256
        return TaskSpec(
            "tokens", vocab, self.seq_len, self.head_kind, vocab, self.seq_len, "perplexity", higher_is_better=False
        )

    # --- corpus ---------------------------------------------------------------------------------------
    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` with this task's tokenizer."""
        if self._encoding is None:
            return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        return np.asarray(self._encoding.encode_ordinary(text), dtype=np.int32)

    def decode(self, tokens) -> str:
        tokens = [int(t) for t in tokens]
        if self._encoding is None:
            return bytes(tokens).decode("utf-8", errors="replace")
        return self._encoding.decode(tokens)

    def stream(self, split: str = "train") -> np.ndarray:
        """The whole token stream of ``split`` (read and tokenized once, then kept)."""
        self._check_seed_split(0, split)
        if split not in self._streams:
            self._streams[split] = self._load(split)
        return self._streams[split]

    def _load(self, split: str) -> np.ndarray:
        if self.data_dir is not None:
            return self._tokenize_file(Path(self.data_dir) / WIKITEXT_FILES[split])
        if self.path is None:
            self._fail(f"no corpus: give path= (a text file) or data_dir= (a WikiText-103 copy), or set {WIKITEXT_ENV}")
        tokens = self._tokenize_file(Path(self.path))
        cut_valid = int(round(len(tokens) * (1 - 2 * self.holdout)))
        cut_test = int(round(len(tokens) * (1 - self.holdout)))
        return {"train": tokens[:cut_valid], "valid": tokens[cut_valid:cut_test], "test": tokens[cut_test:]}[split]

    def _tokenize_file(self, file: Path) -> np.ndarray:
        if self._encoding is None:
            return np.fromfile(file, dtype=np.uint8)
        return self.encode(file.read_text(encoding="utf-8"))

    def documents(self, split: str = "train") -> list[np.ndarray]:
        """The documents of ``split``: its text cut at ``document_separator`` (separators dropped), each of at least
        two tokens (one prediction)."""
        if self.document_separator is None:
            self._fail("documents() needs parameter document_separator (e.g. '\\n\\n')")
        if split not in self._documents:
            stream = self.stream(split)
            if self._encoding is None:
                pieces = [
                    np.frombuffer(piece, dtype=np.uint8)
                    for piece in stream.tobytes().split(self.document_separator.encode("utf-8"))
                ]
            else:
                pieces = [self.encode(piece) for piece in self.decode(stream).split(self.document_separator)]
            self._documents[split] = [piece for piece in pieces if len(piece) >= 2]
            if not self._documents[split]:
                self._fail(
                    f"the {split} split has no document of two tokens or more between separators "
                    f"{self.document_separator!r}"
                )
        return self._documents[split]

    # --- data -----------------------------------------------------------------------------------------
    def _generate(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        if self.document_separator is not None:
            return self._generate_documents(n, rng, split)
        tokens = self._long_enough(split)
        offsets = rng.integers(0, len(tokens) - self.seq_len, size=n)
        windows = tokens[offsets[:, None] + np.arange(self.seq_len + 1)].astype(np.int64)
        return windows[:, :-1], windows[:, 1:]

    def _generate_documents(self, n: int, rng: np.random.Generator, split: str) -> tuple[np.ndarray, np.ndarray]:
        """``n`` documents drawn at random, each right-padded (inputs 0, targets ``IGNORE_INDEX``)."""
        documents = self.documents(split)
        inputs = np.zeros((n, self.seq_len), dtype=np.int64)
        targets = np.full((n, self.seq_len), IGNORE_INDEX, dtype=np.int64)
        for row, index in enumerate(rng.integers(0, len(documents), size=n)):
            document = documents[index][: self.seq_len + 1].astype(np.int64)
            inputs[row, : len(document) - 1], targets[row, : len(document) - 1] = document[:-1], document[1:]
        return inputs, targets

    def windows(self, split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
        """All consecutive non-overlapping windows of ``split`` (the tail shorter than a window is dropped)."""
        tokens = self._long_enough(split)
        count = (len(tokens) - 1) // self.seq_len
        used = tokens[: count * self.seq_len + 1].astype(np.int64)
        inputs = used[:-1].reshape(count, self.seq_len)
        targets = used[1:].reshape(count, self.seq_len)
        return torch.from_numpy(inputs.copy()), torch.from_numpy(targets.copy())

    def _long_enough(self, split: str) -> np.ndarray:
        tokens = self.stream(split)
        if len(tokens) < self.seq_len + 1:
            self._fail(f"the {split} split has {len(tokens)} tokens, fewer than seq_len + 1 = {self.seq_len + 1}")
        return tokens

    # --- metrics and rendering ---------------------------------------------------------------------------
    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """Mean cross-entropy (nats per token), its exponential (perplexity) and next-token accuracy."""
        outputs = self._output_window(outputs.detach(), targets)
        targets = targets.to(outputs.device)
        loss = float(self.loss(outputs, targets))
        return {"perplexity": float(np.exp(loss)), "loss": loss, "accuracy": token_accuracy(outputs, targets)}

    def render(self, inputs: torch.Tensor, targets: torch.Tensor, index: int = 0, chars: int = 240) -> str:
        real = targets[index] != IGNORE_INDEX  # a document's padding is not shown
        text = self.decode(inputs[index][real].tolist())
        following = self.decode(targets[index][real][-1:].tolist())
        shown = text if len(text) <= chars else "…" + text[-chars:]
        header = f"lm ({self.tokenizer}, {int(real.sum())} tokens); the model reads:"
        return f"{header}\n{shown!r}\nnext token: {following!r}"
