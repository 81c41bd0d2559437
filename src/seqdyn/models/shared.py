"""Blocks shared by several layers (Zamba: Glorioso et al. 2024, https://arxiv.org/abs/2405.16712, eq. 6 and Fig. 2;
Zamba2: Glorioso et al. 2024, https://arxiv.org/abs/2411.15242, Fig. 2).

A shared block reads a layer's input ``x`` and the blocks' input ``e`` (the embeddings) and writes the model width D;
it has no residual of its own::

    u = norm_a([x ; e])                  width 2D
    a = attention(u)                     softmax attention at width 2D, its output projection 2D → D
    s = MLP(norm_m(a))

Each layer ``l`` that uses it adds its own projection of ``s`` to its mixer's input, not to the residual stream::

    x ← x + mixer(norm₁(x + W_l s))      then the layer's MLP as usual

With ``adapter_rank`` every use has its own low-rank adapters (:mod:`seqdyn.layers.adapters`) on the MLP's input
projection, and with ``attention_adapters`` on the attention's query, key and value projections too (Zamba2's).
The attention keeps a key–value state per use: a layer's streaming state holds its use's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seqdyn import mixers
from seqdyn.core.packing import Packing
from seqdyn.layers.adapters import AdaptedLinear, adapted_as
from seqdyn.layers.mlp import build_mlp
from seqdyn.models.blocks import make_norm

__all__ = ["SharedBlock", "SharedInputBlock", "SharedInputState", "shared_inputs"]


class SharedBlock(nn.Module):
    """Attention on ``[x ; e]`` then an MLP (module docstring), run by the layers ``uses`` (their indices), each
    with its own adapters where ``adapter_rank`` > 0."""

    def __init__(
        self,
        d_model: int,
        attention: dict[str, Any],
        mlp: str,
        mlp_ratio: float,
        norm: str,
        norm_eps: float | None,
        uses: list[int],
        adapter_rank: int = 0,
        attention_adapters: bool = False,
    ):
        super().__init__()
        self.norm_in = make_norm(norm, 2 * d_model, norm_eps)
        self.attention = mixers.build("softmax_attention", 2 * d_model, **attention, output_width=d_model)
        self.norm_mlp = make_norm(norm, d_model, norm_eps)
        self.mlp = build_mlp(mlp, d_model, mlp_ratio)
        if adapter_rank:
            self.mlp.fc1 = AdaptedLinear(self.mlp.fc1, uses, adapter_rank)
        if attention_adapters:
            qkv = self.attention.qkv
            self.attention.qkv = AdaptedLinear(qkv, uses, adapter_rank, parts=self.attention.widths)

    def _run(
        self, x: Tensor, embeddings: Tensor, use: int, attend: Callable[[Tensor], tuple[Tensor, Any]]
    ) -> tuple[Tensor, Any]:
        """``(s, what attend returned beside its output)``: ``attend`` runs the attention on ``norm_a([x ; e])``."""
        with adapted_as(self, use):
            a, state = attend(self.norm_in(torch.cat([x, embeddings], dim=-1)))  # [..., 2D] -> [..., D]
            return self.mlp(self.norm_mlp(a)), state

    def forward(
        self, x: Tensor, embeddings: Tensor, use: int, backend: str = "auto", packing: Packing | None = None
    ) -> Tensor:
        """``s`` ``[B, T, D]`` of layer ``use`` (packed sequences ``[1, T, D]`` with ``packing``)."""
        packed = {} if packing is None else {"cu_seqlens": packing}
        return self._run(x, embeddings, use, lambda u: (self.attention(u, backend=backend, **packed), None))[0]

    def forward_with_state(
        self, x: Tensor, embeddings: Tensor, use: int, state: Any, backend: str = "auto"
    ) -> tuple[Tensor, Any]:
        """Positions ``[B, T, D]`` that follow the attention's ``state`` of this use: ``(s, state)``."""
        return self._run(
            x, embeddings, use, lambda u: self.attention(u, backend=backend, state=state, return_state=True)
        )

    def step(self, x_t: Tensor, embeddings_t: Tensor, use: int, state: Any) -> tuple[Tensor, Any]:
        """One position ``[B, D]``: ``(s_t, state)``."""
        return self._run(x_t, embeddings_t, use, lambda u: self.attention.step(u, state))

    def init_state(self, batch: int) -> Any:
        return self.attention.init_state(batch)


@dataclass
class SharedInputState:
    """Streaming state of a :class:`SharedInputBlock`: its use of the shared attention, and its own block's."""

    shared: Any
    block: Any


class SharedInputBlock(nn.Module):
    """A layer's block whose mixer also reads a shared block: ``x + mixer(norm₁(x + W s))`` with ``s`` the shared
    block's output for this layer (module docstring), then the block's MLP.  The shared block belongs to the model
    (several layers run it), so it is not a submodule here."""

    def __init__(self, block: nn.Module, shared: SharedBlock, use: int, d_model: int):
        super().__init__()
        self.block = block
        self.projection = nn.Linear(d_model, d_model, bias=False)
        self.use = use
        self._shared = (shared,)  # a tuple: nn.Module registers no submodule through it

    @property
    def shared(self) -> SharedBlock:
        return self._shared[0]

    @property
    def mixer(self) -> nn.Module:
        return self.block.mixer

    def forward(
        self, x: Tensor, backend: str = "auto", packing: Packing | None = None, *, embeddings: Tensor
    ) -> Tensor:
        side = self.projection(self.shared(x, embeddings, self.use, backend, packing))
        return self.block(x, backend=backend, packing=packing, side=side)

    def init_state(self, batch: int) -> SharedInputState:
        return SharedInputState(self.shared.init_state(batch), self.block.init_state(batch))

    def forward_with_state(
        self, x: Tensor, state: SharedInputState, backend: str = "auto", *, embeddings: Tensor
    ) -> tuple[Tensor, SharedInputState]:
        s, shared = self.shared.forward_with_state(x, embeddings, self.use, state.shared, backend)
        x, block = self.block.forward_with_state(x, state.block, backend, side=self.projection(s))
        return x, SharedInputState(shared, block)

    def step(self, x_t: Tensor, state: SharedInputState, *, embeddings: Tensor) -> tuple[Tensor, SharedInputState]:
        s, shared = self.shared.step(x_t, embeddings, self.use, state.shared)
        x_t, block = self.block.step(x_t, state.block, side=self.projection(s))
        return x_t, SharedInputState(shared, block)

    def residual_projections(self) -> list[nn.Linear]:
        return self.block.residual_projections()

    def extra_repr(self) -> str:
        return f"use={self.use}"


def shared_inputs(block: nn.Module, embeddings: Tensor) -> dict[str, Tensor]:
    """The keyword a block takes besides ``x``: the embeddings, for a :class:`SharedInputBlock`."""
    return {"embeddings": embeddings} if isinstance(block, SharedInputBlock) else {}
