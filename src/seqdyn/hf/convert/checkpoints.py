"""Checkpoint folders: ``seqdyn convert`` (:func:`convert_checkpoint`), ``seqdyn inspect`` (:func:`load_model`,
:func:`tokenize`), each refusing what it cannot read in one line.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.hf.convert.registry import SUPPORTED, TEXT_MODEL_OF, UnsupportedModel, from_transformers, missing
from seqdyn.hf.modeling import SeqdynForCausalLM

#: the files a saved transformers tokenizer has one of
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


#: the files a transformers checkpoint keeps its weights in
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")


def convert_checkpoint(model_dir: str | Path, out_dir: str | Path) -> Path:
    """``seqdyn convert``: the transformers checkpoint in ``model_dir`` (``config.json`` and its weights) converted
    by :func:`from_transformers` and saved as a seqdyn checkpoint in ``out_dir`` (``save_pretrained``; loads with
    ``AutoModelForCausalLM.from_pretrained`` once ``seqdyn.hf`` is imported), with the folder's tokenizer and
    generation config (:func:`beside_the_weights`), so that the result is a complete model.  The family is checked
    from the config before any weight is read; ``out_dir`` is written whole or not at all (a folder beside it,
    renamed at the end)."""
    source, target = Path(model_dir), Path(out_dir)
    if target.exists() and any(target.iterdir()):
        raise UnsupportedModel(f"OUT_DIR: {target} exists and is not empty; name a new folder")
    model = load_transformers(source, checkpoint_family(source))
    converted = from_transformers(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        converted.save_pretrained(partial)
        for path in beside_the_weights(source):
            shutil.copyfile(path, partial / path.name)
        if target.exists():
            target.rmdir()  # empty: checked above
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


#: the files of a checkpoint folder besides its config and weights that make it a complete model: the tokenizer's
#: (as transformers and sentencepiece save them) and the generation config
COMPANION_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)


def beside_the_weights(source: Path) -> list[Path]:
    """The files of :data:`COMPANION_FILES` the checkpoint folder ``source`` has."""
    return [source / name for name in COMPANION_FILES if (source / name).is_file()]


def checkpoint_family(source: Path) -> str | None:
    """The ``model_type`` of the checkpoint folder ``source``, after checking that it has a config and weights."""
    from transformers import AutoConfig

    if not (source / "config.json").is_file():
        raise UnsupportedModel(
            f"MODEL_DIR: {source / 'config.json'} not found (a transformers checkpoint folder has "
            "config.json and its weights)"
        )
    if not any(next(source.glob(pattern), None) for pattern in WEIGHT_FILES):
        raise UnsupportedModel(f"MODEL_DIR: {source} has no weights ({' or '.join(WEIGHT_FILES)})")
    family = getattr(AutoConfig.from_pretrained(source), "model_type", None)
    return TEXT_MODEL_OF.get(family, family)


def load_model(model_dir: str | Path) -> SeqdynForCausalLM:
    """The seqdyn model of a checkpoint folder, in eval mode: a seqdyn checkpoint as it is, a transformers one of
    a family in :data:`SUPPORTED` converted by :func:`from_transformers` (what ``seqdyn inspect MODEL_DIR``
    opens)."""
    source = Path(model_dir)
    family = checkpoint_family(source)
    if family == SeqdynConfig.model_type:
        with quiet_transformers():
            return SeqdynForCausalLM.from_pretrained(source).eval()
    return from_transformers(load_transformers(source, family))


def tokenize(model_dir: str | Path, text: str) -> torch.Tensor:
    """``text`` as the token ids ``[1, T]`` of the tokenizer saved in ``model_dir``."""
    from transformers import AutoTokenizer

    if not any((Path(model_dir) / name).is_file() for name in TOKENIZER_FILES):
        raise UnsupportedModel(
            f"--text: {model_dir} has no tokenizer to read the text with "
            f"({' or '.join(TOKENIZER_FILES)}); give token ids with --input instead"
        )
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError, TypeError):
        raise UnsupportedModel(
            f"--text: {model_dir} has no tokenizer to read the text with; give token ids with --input instead"
        ) from None
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    if ids.numel() == 0:
        raise UnsupportedModel("--text: the text has no tokens")
    return ids


def load_transformers(source: Path, family: str | None) -> nn.Module:
    """The transformers model saved in ``source`` (of ``family``, its config's ``model_type``: a supported one),
    every weight loaded with its own shape."""
    from transformers import AutoModelForCausalLM

    if family not in SUPPORTED:
        raise UnsupportedModel(
            f"MODEL_DIR: family {family!r} ({source / 'config.json'}) has no seqdyn converter"
            f"{missing(family)}; supported: {', '.join(sorted(SUPPORTED))}"
        )
    try:  # mismatched weights come back in the loading info, which names them (transformers' own error does not)
        with quiet_transformers():
            model, info = AutoModelForCausalLM.from_pretrained(
                source, output_loading_info=True, ignore_mismatched_sizes=True
            )
    except (RuntimeError, ValueError, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UnsupportedModel(f"MODEL_DIR: the weights in {source} do not load into its config ({first})") from None
    wrong = {
        kind: sorted(str(key[0] if isinstance(key, tuple) else key) for key in info.get(kind, ()))
        for kind in ("mismatched_keys", "missing_keys", "unexpected_keys")
    }
    wrong = {kind.removesuffix("_keys"): keys for kind, keys in wrong.items() if keys}
    if wrong:
        said = "; ".join(
            f"{kind}: {', '.join(keys[:3])}{' …' if len(keys) > 3 else ''}" for kind, keys in wrong.items()
        )
        raise UnsupportedModel(f"MODEL_DIR: the weights in {source} do not load into its config ({said})")
    return model


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers without its progress bars and warnings (a loading report table): the caller says what went
    wrong in one line."""
    from transformers.utils import logging as hf_logging

    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
