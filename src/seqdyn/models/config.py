"""The configuration of a model: the network around the mixers.  ``train.config.RunConfig`` holds
one as ``model``; :func:`seqdyn.models.build_model` builds it for a task."""

from __future__ import annotations

import typing
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from seqdyn.core.names import did_you_mean
from seqdyn.layers.mlp import check_routing


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


MLPKind = Literal["gelu", "swiglu", "geglu", "gated_gelu", "relu2", "moe", "none"]
NormPosition = Literal["pre", "post", "output", "normed"]


class MixtureOfExperts(Strict):
    """The mixture-of-experts MLP (``mlp: moe``): SwiGLU experts of hidden width round(mlp_ratio · d_model), a
    softmax or sigmoid router choosing ``top_k`` of them per token, and an optional shared expert gated by a sigmoid."""

    experts: int = Field(8, gt=0, description="number of experts E")
    top_k: int = Field(2, gt=0, description="experts per token (at most experts)")
    normalize: bool = Field(True, description="the chosen experts' router probabilities renormalized to sum to 1")
    shared_ratio: float = Field(
        0.0,
        ge=0,
        description="hidden width of a shared SwiGLU expert every token passes "
        "through, gated by σ(w_sᵀ x), in multiples of d_model; 0: none",
    )
    shared_gate: bool = Field(
        True, description="the shared expert gated by σ(w_sᵀ x) (Qwen3-Next); false: added as it is (Granite 4.0)"
    )

    router: Literal["softmax", "sigmoid"] = Field(
        "softmax",
        description="the router's scores: softmax over the experts, or an independent sigmoid per expert "
        "(DeepSeek-V3, Kimi Linear)",
    )
    groups: int = Field(
        1, gt=0, description="the experts in this many equal groups; the top_k are chosen within the top_groups"
    )
    top_groups: int = Field(
        1, gt=0, description="the groups the experts are chosen from: those whose two best scores sum highest"
    )
    normalize_eps: float = Field(
        0.0, ge=0, description="an ε added to the chosen weights' sum where they are renormalized (DeepSeek-V3: 1e-20)"
    )
    routed_scale: float = Field(1.0, gt=0, description="a factor on the chosen experts' weights (after normalize)")
    selection_bias: bool = Field(
        False,
        description="a per-expert bias added to the scores only to choose the experts (DeepSeek-V3's "
        "auxiliary-loss-free balancing; a buffer that converted models load and training leaves at 0)",
    )

    @model_validator(mode="after")
    def _check_routing(self) -> MixtureOfExperts:
        check_routing(self.experts, self.top_k, self.router, self.groups, self.top_groups)
        return self


class SharedBlockConfig(Strict):
    """A block several layers share (Zamba's: Glorioso et al. 2024, https://arxiv.org/abs/2405.16712): softmax
    attention on [x ; embeddings] (width 2·d_model, its output projection back to d_model), then an MLP, no residual;
    each layer of ``shared_inputs`` that names it adds its own projection of the output to its mixer's input."""

    attention: dict[str, Any] = Field(
        default_factory=dict,
        description="softmax_attention's options (heads, kv_heads, head_dim, rotary, …: `seqdyn mixers "
        "softmax_attention`) at width 2·d_model; the block sets output_width",
    )
    mlp: MLPKind = Field("gated_gelu", description="the MLP after the attention (any kind but moe and none)")
    mlp_ratio: float = Field(4.0, gt=0, description="hidden width of the MLP: round(mlp_ratio · d_model)")
    adapter_rank: int = Field(
        0, ge=0, description="rank of each using layer's own low-rank adapter on the MLP's input projection; 0: none"
    )
    attention_adapters: bool = Field(
        False, description="each using layer's adapters also on attention's query, key and value (Zamba2's)"
    )

    @model_validator(mode="after")
    def _check_shared(self) -> SharedBlockConfig:
        from seqdyn import mixers

        if self.mlp in ("moe", "none"):
            raise ValueError(f"mlp: a shared block needs an MLP of one expert, got {self.mlp!r}")
        if self.attention_adapters and not self.adapter_rank:
            raise ValueError("attention_adapters: needs adapter_rank > 0 (the adapters' rank)")
        unknown = sorted(set(self.attention) - (set(mixers.options("softmax_attention")) - {"output_width"}))
        if unknown:
            raise ValueError(f"attention: softmax_attention has no option(s) {unknown} a shared block can set")
        return self


class ModelConfig(Strict):
    """The network around the mixers: blocks, widths, positions, MLP, norms and head tying."""

    block: Literal["transformer", "gated"] = Field(
        "transformer",
        description="the residual block around each mixer: transformer (x + mixer(norm x), then "
        "x + MLP(norm x)) or gated (Mamba / Gated DeltaNet style: the mixer at width expand·d_model between an "
        "input and a gate projection, its RMS-normed output times SiLU(gate), projected back; then the MLP)",
    )
    mixer: Union[str, list[str]] = Field(
        "softmax_attention",
        description="a mixer name (`seqdyn mixers` lists them), the import path of a mixer "
        "of your own (my_package.my_module:MyMixer, importable from sys.path in every process: "
        "docs/writing-a-mixer.md), or one of these per layer (a hybrid stack)",
    )
    mixer_options: Union[dict[str, Any], list[dict[str, Any]]] = Field(
        default_factory=dict,
        description="the mixer's options (`seqdyn mixers` lists them with their defaults; "
        "`seqdyn mixers NAME` says what each means), or one mapping per layer",
    )
    d_model: int = Field(64, gt=0, description="model width D: the embedding and the residual stream")
    layers: int = Field(2, gt=0, description="number of blocks")
    positions: bool = Field(
        True, description="add learned position embeddings, one per position up to the task's input length"
    )
    bidirectional: bool = Field(
        False,
        description="each block runs a second mixer of the same kind on the "
        "reversed sequence and adds its output: a non-causal model (Gupta et al. 2022's "
        "Pathfinder-Segmentation), which cannot step()",
    )
    mlp: Union[MLPKind, list[MLPKind]] = Field(
        "gelu",
        description="the MLP after the mixer in every block (relu2: W₂ ReLU(W₁x)², Primer's, without "
        "biases; geglu: W₂ (GELU_tanh(W_a x) ⊙ W_b x) with biases, Griffin's; gated_gelu: W₂ (GELU(W_a x) ⊙ "
        "W_b x), the exact GELU without biases, Zamba's; moe: a mixture of SwiGLU experts, see moe; none: no MLP "
        "sub-block), or one of these per layer",
    )
    mlp_ratio: Union[float, list[float]] = Field(
        4.0, description="hidden width of the MLP (of each expert): round(mlp_ratio · d_model), or one per layer"
    )
    moe: MixtureOfExperts = Field(default_factory=MixtureOfExperts, description="the experts of mlp: moe")
    norm: Literal["layernorm", "rmsnorm"] = Field(
        "layernorm", description="the norm of the blocks, the final norm and the head: LayerNorm (with bias) or RMSNorm"
    )
    norm_eps: Optional[float] = Field(
        None,
        gt=0,
        description="the ε of every norm of the blocks and the final norm; None: each norm's own "
        "(LayerNorm 1e-5, RMSNorm 1e-6). A converted transformers model keeps its own",
    )
    embedding_norm: bool = Field(
        False,
        description="a norm (of the kind of norm, with norm_eps) of the token embeddings, before any learned positions "
        "and the first block (RWKV's ln0)",
    )
    norm_position: Union[NormPosition, list[NormPosition]] = Field(
        "pre",
        description="where each block's norms sit: pre (x + f(norm x), GPT-2), post (norm(x + f(x)), "
        "Vaswani et al.; Gupta et al. 2022's blocks; a model of post blocks alone has no final norm) or "
        "output (x + norm(f(x)), OLMo 2's), normed (u = norm x, x ← α·u + f(u), MiniMax-01's; α: residual_scale) "
        "or one of these per layer",
    )
    residual_scale: float = Field(
        1.0, gt=0, description="α of the normed residual (norm_position: normed) of every branch; 1 elsewhere"
    )
    expand: float = Field(1.0, gt=0, description="inner width of the gated block, in multiples of d_model")
    short_conv: bool = Field(False, description="gated block: short causal convolution before the mixer")
    conv_size: int = Field(4, gt=0, description="taps of the gated block's short convolution (with short_conv)")
    tie_embeddings: bool = Field(
        True,
        description="the language-model head shares the token embedding's weight "
        "(when the inputs are tokens and both vocabularies are equal)",
    )
    logit_softcap: Optional[float] = Field(
        None,
        gt=0,
        description="the lm head's logits z become c·tanh(z / c) with this c (Gemma 2, Griffin / "
        "RecurrentGemma: 30); None: unbounded logits",
    )
    init_std: float = Field(
        0.02,
        gt=0,
        description="every Linear and Embedding weight ~ N(0, init_std²), Linear "
        "biases 0; the residual projections ~ N(0, (init_std / √(2·layers))²); parameters a "
        "mixer initializes itself (Mamba's Δ, ...) keep their initialization",
    )
    keep_mixer_init: bool = Field(
        True,
        description="parameters a mixer initializes itself (Mamba's Δ projection, the LSTMs' gate biases) "
        "keep their initialization; false: the model-wide one draws them too (every Linear weight ~ "
        "N(0, init_std²), every Linear bias 0: Zoology's _init_weights, which ignores Mamba's _no_reinit mark)",
    )

    shared_blocks: list[SharedBlockConfig] = Field(
        default_factory=list,
        description="blocks several layers share (Zamba, Zamba2): see shared_inputs; [] for none",
    )
    shared_inputs: Optional[list[Optional[int]]] = Field(
        None,
        description="per layer, the index of the shared block (in shared_blocks) whose output, through the layer's "
        "own d_model → d_model projection, is added to the input of the layer's mixer and not to the residual "
        "stream (pre-norm blocks: x + mixer(norm(x + W s))); None for a layer without",
    )

    @field_validator("mlp_ratio")
    @classmethod
    def _check_mlp_ratio(cls, value: float | list[float]) -> float | list[float]:
        if any(ratio <= 0 for ratio in (value if isinstance(value, list) else [value])):
            raise ValueError(f"expected a positive ratio (or one per layer), got {value}")
        return value

    def layer_mixers(self) -> list[tuple[str, dict[str, Any]]]:
        """``(mixer name, options)`` of every layer; a hybrid stack lists one mixer per layer."""
        return list(zip(self._per_layer(self.mixer), self._per_layer(self.mixer_options)))

    def layer_mlps(self) -> list[str]:
        """The MLP kind of every layer."""
        return self._per_layer(self.mlp)

    def layer_mlp_ratios(self) -> list[float]:
        """The MLP's hidden-width ratio of every layer."""
        return self._per_layer(self.mlp_ratio)

    def layer_norm_positions(self) -> list[str]:
        """Where the norms of every layer sit."""
        return self._per_layer(self.norm_position)

    def _per_layer(self, value: Any) -> list[Any]:
        """A field given once for all layers or as a per-layer list, as that list."""
        return value if isinstance(value, list) else [value] * self.layers

    @model_validator(mode="after")
    def _check_mixers(self) -> ModelConfig:
        from seqdyn import mixers

        for field, value in (
            ("mixer", self.mixer),
            ("mixer_options", self.mixer_options),
            ("mlp", self.mlp),
            ("mlp_ratio", self.mlp_ratio),
            ("norm_position", self.norm_position),
        ):
            if isinstance(value, list) and len(value) != self.layers:
                raise ValueError(
                    f"{field}: a per-layer list must have one entry per layer ({self.layers}), got {len(value)}"
                )
        self._check_shared_inputs()
        for name, options in self.layer_mixers():
            mixers.get(name)  # an unknown name, or an import path that does not import, is named
            unknown = sorted(set(options) - set(mixers.options(name)))
            if unknown:
                allowed = sorted(mixers.options(name))
                raise ValueError(
                    f"mixer_options: {name} has no option(s) {unknown}{did_you_mean(unknown, allowed)}; "
                    f"allowed: {allowed}"
                )
        return self

    def _check_shared_inputs(self) -> None:
        """Each layer's shared block exists, each shared block has a layer, and such layers are pre-norm."""
        if self.shared_inputs is None:
            if self.shared_blocks:
                raise ValueError("shared_inputs: shared_blocks need the layers that use them (one entry per layer)")
            return
        if len(self.shared_inputs) != self.layers:
            raise ValueError(
                f"shared_inputs: expected one entry per layer ({self.layers}), got {len(self.shared_inputs)}"
            )
        used = {index for index in self.shared_inputs if index is not None}
        if not used <= set(range(len(self.shared_blocks))):
            raise ValueError(
                f"shared_inputs: names shared blocks {sorted(used)}; shared_blocks has {len(self.shared_blocks)}"
            )
        if len(used) != len(self.shared_blocks):
            raise ValueError(
                f"shared_blocks: blocks {sorted(set(range(len(self.shared_blocks))) - used)} have no layer"
            )
        positions = self.layer_norm_positions()
        odd = [
            layer for layer, index in enumerate(self.shared_inputs) if index is not None and positions[layer] != "pre"
        ]
        if odd or (used and self.bidirectional):
            raise ValueError(
                f"shared_inputs: a shared block's input needs causal pre-norm blocks (layers {odd}, "
                f"bidirectional={self.bidirectional})"
            )

    def layer_shared_inputs(self) -> list[Optional[int]]:
        """The shared block of every layer (``None``: none)."""
        return [None] * self.layers if self.shared_inputs is None else list(self.shared_inputs)


def describe_errors(error: ValidationError, root: type[BaseModel]) -> str:
    """pydantic's errors in one line, each prefixed by its dotted field; a misspelled field gets the closest field
    of its section (``model.d_modl: unknown field (did you mean 'd_model'?); fields: ...``)."""
    parts = []
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        where = ".".join(str(p) for p in item["loc"])  # empty for a whole-config check, whose message names the field
        if item["type"] == "extra_forbidden":
            fields = _fields_at(root, item["loc"])
            message = f"unknown field{did_you_mean(str(item['loc'][-1]), fields)}"
            message += f"; fields here: {', '.join(fields)}" if fields else ""
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The fields of the config section that holds ``loc``'s last part (``[]`` where that is not a section)."""
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        kinds = [field.annotation, *typing.get_args(field.annotation)]
        section = next((kind for kind in kinds if isinstance(kind, type) and issubclass(kind, BaseModel)), None)
        if section is None:
            return []
        model = section
    return list(model.model_fields)
