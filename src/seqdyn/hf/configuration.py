"""``SeqdynConfig``: a seqdyn language model as a transformers configuration.

Every field of :class:`seqdyn.models.ModelConfig` (``mixer``, ``mixer_options``, ``d_model``, ``layers``, ``block``,
``positions``, …) is a keyword of the config, checked as a seqdyn run config is; ``model`` keeps them together in
``config.json``.  A hybrid names a mixer per layer::

    SeqdynConfig(vocab_size=256, d_model=64, layers=4,
                 mixer=["gated_deltanet", "gated_deltanet", "gated_deltanet", "softmax_attention"])
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from transformers import PreTrainedConfig

from seqdyn.models.config import ModelConfig, describe_errors
from seqdyn.tasks.base import TaskSpec

__all__ = ["SeqdynConfig"]

#: the model fields transformers has its own names for
ALIASES = {"hidden_size": "d_model", "num_hidden_layers": "layers"}


class SeqdynConfig(PreTrainedConfig):
    """A seqdyn language model: a token embedding, ``layers`` blocks each with its mixer, a final norm and an lm head
    (tied to the embedding unless ``tie_embeddings=False``).

    Args:
        vocab_size: tokens of the vocabulary (the embedding's and the head's size).
        max_position_embeddings: the longest sequence, where the model has learned positions (``positions=True``);
            without them (the default here) a model takes sequences of any length.
        model: the :class:`~seqdyn.models.ModelConfig` fields as a dict; any of them may also be given as a keyword
            (``mixer="mamba2"``, ``d_model=128``, …) and overrides the dict.
    """

    model_type = "seqdyn"
    vocab_size: int = 256
    max_position_embeddings: int = 2048
    model: dict | None = None
    use_cache: bool = True
    tie_word_embeddings: bool = True

    def __post_init__(self, **kwargs: Any):
        given = {
            ALIASES.get(name, name): kwargs.pop(name)
            for name in list(kwargs)
            if ALIASES.get(name, name) in ModelConfig.model_fields
        }
        fields = {"positions": False, **(self.model or {}), **given}
        try:
            checked = ModelConfig.model_validate(fields)
        except ValidationError as error:
            raise ValueError(f"SeqdynConfig: {describe_errors(error, ModelConfig)}") from None
        if not isinstance(self.vocab_size, int) or self.vocab_size < 1:
            raise ValueError(f"SeqdynConfig: vocab_size must be a positive int, got {self.vocab_size!r}")
        self.model = checked.model_dump()
        self.tie_word_embeddings = checked.tie_embeddings
        super().__post_init__(**kwargs)

    @property
    def model_config(self) -> ModelConfig:
        """The :class:`~seqdyn.models.ModelConfig` the model is built from."""
        return ModelConfig.model_validate(self.model)

    @property
    def task_spec(self) -> TaskSpec:
        """Next-token prediction over the vocabulary: what :func:`seqdyn.models.build_model` builds an lm for."""
        return TaskSpec(
            input_kind="tokens",
            input_size=self.vocab_size,
            input_len=self.max_position_embeddings,
            head="lm",
            output_size=self.vocab_size,
            output_len=self.max_position_embeddings,
            primary_metric="loss",
            higher_is_better=False,
        )

    @property
    def hidden_size(self) -> int:
        return self.model["d_model"]

    @property
    def num_hidden_layers(self) -> int:
        return self.model["layers"]
