"""The sequence model of a run: input map, optional learned positions, blocks, final norm, head.

    x = E(inputs) (+ P[0:T])              token embedding [V, D] or Linear(C_in → D); P learned, T ≤ input_len
    x = block_l(x),  l = 1 … layers       transformer or gated block, each with its layer's mixer (hybrid stacks)
    out = head(norm(x))                   [n, T, output_size]: what ``task.loss`` / ``task.metrics`` take
                                          (post-norm blocks: no final norm)

Initialization (Zoology ``_init_weights``, after GPT-2 / nanoGPT): every ``nn.Linear`` and ``nn.Embedding`` weight
~ N(0, init_std²), Linear biases 0, then the residual projections (each block's mixer output projection or gated
out-projection, and its MLP's ``fc2``) ~ N(0, (init_std / √(2·layers))²).  Parameters a mixer marked with
:func:`seqdyn.mixers.base.keep_init` (paper inits: Mamba's Δ, xLSTM's gate biases, …) are left alone, unless the
config's ``keep_mixer_init`` is false (Zoology's own init draws them too); norms, short convolutions and the mixers'
other plain parameters keep their own initialization.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from seqdyn import mixers
from seqdyn.core.packing import Packing, Padding, from_state, sequences_of
from seqdyn.layers.params import is_kept, scaled_width
from seqdyn.models.blocks import Bidirectional, GatedBlock, TransformerBlock, make_norm
from seqdyn.models.config import ModelConfig
from seqdyn.models.heads import HEAD_KINDS, Head, build_head
from seqdyn.models.shared import SharedBlock, SharedInputBlock, shared_inputs

if TYPE_CHECKING:
    from seqdyn.tasks.base import Task, TaskSpec


@dataclass
class ModelState:
    """Streaming state of a :class:`SequenceModel`: the next position, each block's state and the head's."""

    position: int
    blocks: list[Any]
    head: Any


class SequenceModel(nn.Module):
    """Embedding, optional learned positions, ``config.layers`` blocks, final norm and the head of ``spec.head``.

    Attributes: ``config`` (the :class:`~seqdyn.models.config.ModelConfig`), ``spec`` (the
    :class:`~seqdyn.tasks.base.TaskSpec`), ``embedding``, ``positions`` (``None`` when off), ``blocks``, ``norm``,
    ``head``, ``tied`` (whether the lm head shares the embedding's weight).
    """

    def __init__(self, config: ModelConfig, spec: TaskSpec):
        super().__init__()
        _check_spec(spec)
        self.config, self.spec = config, spec
        d = config.d_model
        tokens = spec.input_kind == "tokens"
        self.embedding = nn.Embedding(spec.input_size, d) if tokens else nn.Linear(spec.input_size, d)
        self.positions = nn.Embedding(spec.input_len, d) if config.positions else None
        self.embedding_norm = make_norm(config.norm, d, config.norm_eps) if config.embedding_norm else None
        self.shared = nn.ModuleList(_build_shared(config, index) for index in range(len(config.shared_blocks)))
        self.blocks = nn.ModuleList(
            self._with_shared_input(index, _build_block(config, index, name, options))
            for index, (name, options) in enumerate(config.layer_mixers())
        )
        # post-norm blocks end on a norm already
        post = set(config.layer_norm_positions()) == {"post"}
        self.norm = nn.Identity() if post else make_norm(config.norm, d, config.norm_eps)
        tie = config.tie_embeddings and spec.head == "lm" and tokens and spec.input_size == spec.output_size
        self.head: Head = build_head(
            spec.head,
            d,
            spec.output_size,
            spec.input_len,
            config.norm,
            tied=self.embedding if tie else None,
            softcap=config.logit_softcap,
        )
        self.tied = tie
        init_weights(self)

    # --- full sequences --------------------------------------------------------------------------------------
    def forward(
        self,
        inputs: Tensor,
        backend: str = "auto",
        *,
        cu_seqlens: Tensor | None = None,
        attention_mask: Tensor | None = None,
        state: ModelState | None = None,
        return_state: bool = False,
        head: bool = True,
    ):
        """``inputs`` (tokens ``[n, T]`` or channels ``[n, T, C_in]``) -> ``[n, T, output_size]``; ``head=False``:
        the head's input ``[n, T, D]`` (the final norm's output, the hidden states).

        ``cu_seqlens`` (int offsets ``[N + 1]``, ``inputs`` ``[1, T, …]``): packed sequences; ``attention_mask``
        (``[n, T]``, 1 = token, 0 = left or right padding): a padded batch.  Either way every sequence's outputs are
        those it has alone — positions restart, no mixer or convolution reads across a boundary — and a padded step's
        outputs are 0 (:mod:`seqdyn.core.packing`: the value is made here once and passed down).

        ``state`` (:meth:`init_state`'s, or one returned before) and ``return_state=True``: the positions that follow
        that state, and ``(outputs, the next state)`` — a prefill in chunks of any size, then :meth:`step`, equals
        one forward over the whole sequence.
        """
        if state is not None or return_state:
            return from_state(
                lambda u, s: self._forward_with_state(u, s, backend, head),
                inputs,
                state,
                return_state,
                cu_seqlens,
                attention_mask,
            )
        sequences = sequences_of(inputs, cu_seqlens, attention_mask)
        if sequences is None:
            return self._forward(inputs, backend, head)
        if self.config.bidirectional or not self.head.streams:
            what = "model.bidirectional" if self.config.bidirectional else f"the {self.spec.head} head"
            raise ValueError(
                f"cu_seqlens/attention_mask: {what} reads the whole sequence, so padding or a packed "
                "neighbour would change it; run such sequences one by one (or as a batch of equal "
                "length)"
            )
        if not self.head.token_wise:
            return sequences.in_place(self._forward(sequences.side_by_side(inputs), backend, head))
        if isinstance(sequences, Padding) and sequences.whole:
            return self._forward(inputs, backend, head)
        return sequences.unpacked(self._forward_packed(sequences.packed(inputs), sequences.tokens, backend, head))

    def _forward_with_state(
        self, inputs: Tensor, state: ModelState | None, backend: str, head: bool = True
    ) -> tuple[Tensor, ModelState]:
        self._check_inputs(inputs, with_time=True)
        state = self.init_state(inputs.shape[0]) if state is None else state
        if not isinstance(state, ModelState):
            raise ValueError(f"state: expected the ModelState of init_state(batch), got {type(state).__name__}")
        x = self._input_map(inputs)
        end = state.position + inputs.shape[1]
        if self.positions is not None:
            if end > self.spec.input_len:
                raise ValueError(
                    f"state: positions {state.position} … {end - 1} run past the learned positions "
                    f"(input_len={self.spec.input_len})"
                )
            x = x + self.positions.weight[state.position : end]
        block_states, embeddings = [], x
        for block, block_state in zip(self.blocks, state.blocks):
            x, block_state = block.forward_with_state(x, block_state, backend, **shared_inputs(block, embeddings))
            block_states.append(block_state)
        if not head:
            return self.norm(x), ModelState(end, block_states, state.head)
        out, head_state = self.head.forward_with_state(self.norm(x), state.head)
        return out, ModelState(end, block_states, head_state)

    def _forward(self, inputs: Tensor, backend: str, head: bool = True) -> Tensor:
        x = self._blocks(self.embed(inputs), backend)
        return self.head(self.norm(x)) if head else self.norm(x)

    def _blocks(self, x: Tensor, backend: str, packing: Packing | None = None) -> Tensor:
        """The blocks on their input ``x`` (the embeddings, which the layers of a shared block read too)."""
        embeddings = x
        for block in self.blocks:
            x = block(x, backend=backend, packing=packing, **shared_inputs(block, embeddings))
        return x

    def _forward_packed(self, inputs: Tensor, packing: Packing, backend: str, head: bool = True) -> Tensor:
        """Packed sequences ``[1, T, …]``: embeddings, norms, MLPs and the head token by token, the positions
        restarting at each sequence's start, the blocks' mixers and convolutions keeping the sequences apart."""
        self._check_inputs(inputs, with_time=True, length=packing.longest)
        x = self._input_map(inputs)
        if self.positions is not None:
            x = x + self.positions.weight[packing.position]
        x = self._blocks(x, backend, packing)
        return self.head(self.norm(x)) if head else self.norm(x)

    def embed(self, inputs: Tensor) -> Tensor:
        """The blocks' input ``[n, T, D]``: embedded inputs plus the learned positions ``0 … T−1``."""
        self._check_inputs(inputs, with_time=True)
        x = self._input_map(inputs)
        if self.positions is not None:
            x = x + self.positions.weight[: inputs.shape[1]]
        return x

    # --- streaming -------------------------------------------------------------------------------------------
    def init_state(self, batch: int) -> ModelState:
        """The state before the first position (``batch`` sequences)."""
        if not self.head.streams:
            raise ValueError(f"head: the {self.spec.head} head cannot stream (it decodes from the last position)")
        return ModelState(0, [block.init_state(batch) for block in self.blocks], self.head.init_state(batch))

    def step(self, inputs_t: Tensor, state: ModelState) -> tuple[Tensor, ModelState]:
        """One position — tokens ``[n]`` or channels ``[n, C_in]`` — to ``(outputs [n, output_size], state)``.

        Fed ``inputs[:, t]`` for t = 0, 1, … from :meth:`init_state`, it returns ``forward(inputs)[:, t]``; the
        state counts the positions (which index the learned position embedding).
        """
        if not isinstance(state, ModelState):
            raise ValueError(f"state: expected the ModelState of init_state(batch), got {type(state).__name__}")
        self._check_inputs(inputs_t, with_time=False)
        x = self._input_map(inputs_t)
        if self.positions is not None:
            if state.position >= self.spec.input_len:
                raise ValueError(
                    f"state: position {state.position} is past the learned positions (input_len={self.spec.input_len})"
                )
            x = x + self.positions.weight[state.position]
        block_states, embeddings = [], x
        for block, block_state in zip(self.blocks, state.blocks):
            x, block_state = block.step(x, block_state, **shared_inputs(block, embeddings))
            block_states.append(block_state)
        out, head_state = self.head.step(self.norm(x), state.head)
        return out, ModelState(state.position + 1, block_states, head_state)

    # --- helpers ---------------------------------------------------------------------------------------------
    def _with_shared_input(self, index: int, block: nn.Module) -> nn.Module:
        """Layer ``index``'s block, reading its shared block (``shared_inputs``) where it has one."""
        shared = self.config.layer_shared_inputs()[index]
        return block if shared is None else SharedInputBlock(block, self.shared[shared], index, self.config.d_model)

    def _input_map(self, inputs: Tensor) -> Tensor:
        """The embedded inputs, normed with ``embedding_norm``."""
        if self.spec.input_kind == "tokens":
            x = self.embedding(inputs)
        else:
            x = self.embedding(inputs.to(self.embedding.weight.dtype))
        return x if self.embedding_norm is None else self.embedding_norm(x)

    def _check_inputs(self, inputs: Tensor, with_time: bool, length: int | None = None) -> None:
        """``length``: the longest sequence (packed sequences), else ``inputs.shape[1]``."""
        tokens = self.spec.input_kind == "tokens"
        layout = ("[n, T]" if with_time else "[n]") if tokens else ("[n, T, C]" if with_time else "[n, C]")
        dims = (2 if with_time else 1) if tokens else (3 if with_time else 2)
        what = "inputs" if with_time else "inputs_t"
        if not isinstance(inputs, Tensor) or inputs.dim() != dims:
            shape = list(inputs.shape) if isinstance(inputs, Tensor) else type(inputs).__name__
            raise ValueError(f"{what}: expected {self.spec.input_kind} {layout}, got {shape}")
        if tokens and (inputs.is_floating_point() or inputs.is_complex()):
            raise ValueError(f"{what}: expected integer tokens, got {inputs.dtype}")
        if not tokens and inputs.shape[-1] != self.spec.input_size:
            raise ValueError(f"{what}: expected C={self.spec.input_size} channels, got {inputs.shape[-1]}")
        length = inputs.shape[1] if length is None and with_time else length
        if (
            with_time
            and not 1 <= length <= self.spec.input_len
            and (self.positions is not None or self.spec.head == "autoencoder")
        ):
            raise ValueError(f"{what}: {length} positions; this model takes 1 … {self.spec.input_len}")

    def extra_repr(self) -> str:
        return f"head={self.spec.head!r}, tied={self.tied}"


def _check_spec(spec: TaskSpec) -> None:
    if spec.input_kind not in ("tokens", "channels"):
        raise ValueError(f"input_kind: expected 'tokens' or 'channels', got {spec.input_kind!r}")
    if spec.head not in HEAD_KINDS:
        raise ValueError(f"head: unknown kind {spec.head!r}; expected one of {list(HEAD_KINDS)}")
    for name in ("input_size", "input_len", "output_size"):
        if getattr(spec, name) < 1:
            raise ValueError(f"{name}: expected a positive size, got {getattr(spec, name)}")


def _build_block(config: ModelConfig, index: int, name: str, options: dict[str, Any]) -> nn.Module:
    """Layer ``index``: its mixer (at the model width, or expand·d_model in a gated block) inside its block."""
    d = config.d_model
    width = d if config.block == "transformer" else scaled_width("expand", d, config.expand)
    try:
        mixer = mixers.build(name, width, **options)
        if config.bidirectional:
            mixer = Bidirectional(mixer, mixers.build(name, width, **options))
    except ValueError as error:
        raise ValueError(f"mixer_options (layer {index}, {name}): {error}") from None
    common = dict(
        norm=config.norm,
        mlp=config.layer_mlps()[index],
        mlp_ratio=config.layer_mlp_ratios()[index],
        norm_position=config.layer_norm_positions()[index],
        norm_eps=config.norm_eps,
        moe=config.moe.model_dump(),
        residual_scale=config.residual_scale,
    )
    if config.block == "transformer":
        return TransformerBlock(d, mixer, **common)
    if config.block == "gated":
        return GatedBlock(d, mixer, short_conv=config.short_conv, conv_size=config.conv_size, **common)
    raise ValueError(f"block: expected 'transformer' or 'gated', got {config.block!r}")


def _build_shared(config: ModelConfig, index: int) -> SharedBlock:
    """Shared block ``index``, with adapters for each layer that uses it."""
    shared = config.shared_blocks[index]
    uses = [layer for layer, used in enumerate(config.layer_shared_inputs()) if used == index]
    try:
        return SharedBlock(
            config.d_model,
            shared.attention,
            shared.mlp,
            shared.mlp_ratio,
            config.norm,
            config.norm_eps,
            uses,
            shared.adapter_rank,
            shared.attention_adapters,
        )
    except ValueError as error:
        raise ValueError(f"shared_blocks ({index}): {error}") from None


@torch.no_grad()
def init_weights(model: SequenceModel) -> None:
    """Zoology's initialization of ``model`` in place (module docstring); parameters marked kept are skipped unless
    the config's ``keep_mixer_init`` is false."""
    std = model.config.init_std
    kept = is_kept if model.config.keep_mixer_init else lambda parameter: False
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)) and not kept(module.weight):
            nn.init.normal_(module.weight, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None and not kept(module.bias):
            nn.init.zeros_(module.bias)
    residual_std = std / math.sqrt(2 * model.config.layers)
    for projection in residual_projections(model):
        if not kept(projection.weight):
            nn.init.normal_(projection.weight, std=residual_std)


@contextmanager
def recording_backends(model: SequenceModel) -> Iterator[list[str]]:
    """A list that every forward pass of ``model`` inside the ``with`` block extends with the backend each layer's
    mixer computed with, in layer order: the choice that forward made and kept
    (:attr:`~seqdyn.mixers.base.Mixer.last_backend`), read after it — nothing is chosen again."""
    picked: list[str] = []

    def record(mixer: nn.Module, args: tuple, output: Any) -> None:
        picked.append(mixer.last_backend)

    hooks = [block.mixer.register_forward_hook(record) for block in model.blocks]
    try:
        yield picked
    finally:
        for hook in hooks:
            hook.remove()


def residual_projections(model: SequenceModel) -> list[nn.Linear]:
    """The last linear map of every residual branch (mixer output / gated out-projection, MLP ``fc2``)."""
    return [projection for block in model.blocks for projection in block.residual_projections()]


def count_parameters(model: nn.Module, embeddings: bool = True, trainable_only: bool = False) -> int:
    """Number of distinct parameters (a tied weight counts once).  ``embeddings=False`` leaves out a
    :class:`SequenceModel`'s input embedding and learned positions (the "non-embedding" count)."""
    skip: set[int] = set()
    if not embeddings and isinstance(model, SequenceModel):
        skip = {id(p) for part in (model.embedding, model.positions) if part is not None for p in part.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in skip and (p.requires_grad or not trainable_only))


def build_model(config: ModelConfig | Mapping[str, Any], spec: TaskSpec | Task) -> SequenceModel:
    """The model of ``config`` for the task ``spec`` (a :class:`TaskSpec`, or a task whose ``spec`` is used).

    ``config`` may be a mapping, validated as a :class:`~seqdyn.models.config.ModelConfig`.  The lm head is tied
    to the token embedding when ``tie_embeddings`` is set, the input is tokens and the vocabularies agree;
    otherwise (channel inputs, other sizes) it has its own weight — ``model.tied`` says which.
    """
    if isinstance(config, Mapping):
        config = ModelConfig.model_validate(dict(config))
    spec = getattr(spec, "spec", spec)
    return SequenceModel(config, spec)
