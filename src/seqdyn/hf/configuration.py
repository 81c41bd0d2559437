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

from seqdyn.core.names import did_you_mean
from seqdyn.models.config import ModelConfig, describe_errors
from seqdyn.tasks.base import TaskSpec

__all__ = ["SeqdynConfig"]

#: the model fields transformers has its own names for
ALIASES = {"hidden_size": "d_model", "num_hidden_layers": "layers"}
#: the keywords transformers' configs take besides their fields (``PreTrainedConfig.__post_init__``)
TRANSFORMERS_KEYWORDS = (
    "torch_dtype",
    "name_or_path",
    "_commit_hash",
    "output_attentions",
    "attn_implementation",
    "experts_implementation",
    "per_layer_config",
    "_attn_implementation_internal",
    "_experts_implementation_internal",
    "auto_map",
    "tokenizer_class",
)


def _transformers_names(config: type) -> set[str]:
    """Every keyword a transformers config takes: its dataclass fields, the keywords above, generation parameters."""
    from transformers import GenerationConfig

    return (
        set(getattr(config, "__dataclass_fields__", {}))
        | set(TRANSFORMERS_KEYWORDS)
        | set(GenerationConfig._get_default_generation_params())
    )


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
        self._refuse_unknown(kwargs)
        fields = {"positions": False, **(self.model or {}), **given}
        if self.tie_word_embeddings is False:  # transformers' name for it, set to untie
            fields["tie_embeddings"] = False
        self.model = self._checked(fields)
        if not isinstance(self.vocab_size, int) or self.vocab_size < 1:
            raise ValueError(f"SeqdynConfig: vocab_size must be a positive int, got {self.vocab_size!r}")
        self.tie_word_embeddings = self.model["tie_embeddings"]
        super().__post_init__(**kwargs)

    @staticmethod
    def _checked(fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` checked as a :class:`~seqdyn.models.ModelConfig` (one line naming the field where not)."""
        try:
            return ModelConfig.model_validate(fields).model_dump()
        except ValidationError as error:
            raise ValueError(f"SeqdynConfig: {describe_errors(error, ModelConfig)}") from None

    def _refuse_unknown(self, kwargs: dict[str, Any]) -> None:
        """One line for a keyword that is neither a seqdyn model field, nor transformers' name for one, nor a
        keyword transformers' configs take (token ids included), with the closest known name."""
        known = _transformers_names(type(self))
        unknown = [name for name in kwargs if name not in known and not name.endswith("_token_id")]
        if unknown:
            names = [*ModelConfig.model_fields, *ALIASES, *sorted(known)]
            raise ValueError(
                f"SeqdynConfig: unknown field {unknown[0]!r}{did_you_mean(unknown[0], names)}; the model's fields "
                f"are {', '.join(ModelConfig.model_fields)} (or hidden_size, num_hidden_layers)"
            )

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

    @hidden_size.setter
    def hidden_size(self, value: int) -> None:  # transformers sets it (from_pretrained(..., hidden_size=...))
        self.model = self._checked({**self.model, "d_model": value})

    @property
    def num_hidden_layers(self) -> int:
        return self.model["layers"]

    @num_hidden_layers.setter
    def num_hidden_layers(self, value: int) -> None:
        self.model = self._checked({**self.model, "layers": value})
