"""Output heads: from the final hidden states ``h [n, T, D]`` to ``[n, T, output_size]`` (``TaskSpec.head``).

- ``lm``: logits ``h W_Eᵀ`` over the vocabulary, no bias, the weight tied to the token embedding ``W_E`` when the
  model's input is tokens of the same vocabulary (Press & Wolf 2017; Zoology), else its own matrix;
- ``regression``: ``h W + b`` per position (the loss reads the ``output_len`` rightmost positions);
- ``tagging``: class logits ``h W + b`` per position (ListOps sub-trees, Pathfinder segmentation);
- ``classification``: causal mean pooling, ``y_t = W (1/(t+1) Σ_{s≤t} h_s) + b``: the last position classifies the
  mean over the whole sequence (LRA-style mean pooling), and every prefix has its own prediction, so the head
  streams and its output keeps the ``[n, T, classes]`` layout (a classification task reads the last position);
- ``autoencoder`` (MAD compression, mad-lab ``AutoEncoder`` with ``global_pool="last"``): the encoding
  ``e = h_{T−1}`` of the last position is decoded at every output position i by
  ``norm → Linear → GELU → norm → Linear → GELU → norm → Linear`` (width D, then the vocabulary) applied to
  ``e + P_i``, with the fixed sinusoidal positions P of fairseq/mad-lab.  Every output depends on the whole input,
  so this head does not stream.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.models.blocks import make_norm

HEAD_KINDS = ("lm", "regression", "tagging", "classification", "autoencoder")


class Head(nn.Module):
    """A head maps ``h [n, T, D]`` to ``[n, T, out]``; heads that stream also map one position ``[n, D]``."""

    streams = True
    #: maps every position by itself (so packed sequences need nothing of it)
    token_wise = False

    def init_state(self, batch: int) -> Any:
        return None

    def step(self, h_t: Tensor, state: Any) -> tuple[Tensor, Any]:
        """One position ``[n, D]``: ``(out_t [n, out], state)``."""
        return self(h_t.unsqueeze(1))[:, 0], state

    def forward_with_state(self, h: Tensor, state: Any) -> tuple[Tensor, Any]:
        """Positions ``[n, T, D]`` that follow ``state``: ``(out [n, T, out], state)`` (a per-position head keeps
        none)."""
        return self(h), state


class LinearHead(Head):
    """``h W + b`` at every position (lm, regression, tagging).  ``tied``: use that embedding's weight as ``W``;
    ``softcap`` c: ``c·tanh((h W + b) / c)`` (Gemma 2's and Griffin's logit soft-capping)."""

    token_wise = True

    def __init__(
        self, d_model: int, out: int, bias: bool = True, tied: nn.Embedding | None = None, softcap: float | None = None
    ):
        super().__init__()
        self.softcap = softcap
        if tied is not None and tuple(tied.weight.shape) != (out, d_model):
            raise ValueError(f"tie_embeddings: the embedding {tuple(tied.weight.shape)} is not {(out, d_model)}")
        # A tied head keeps its embedding outside its submodules (a tuple), so the shared weight is one parameter
        # and one state_dict entry (safetensors refuses tensors that share memory).
        self._tied = (tied,) if tied is not None else None
        self.proj = nn.Linear(d_model, out, bias=bias) if tied is None else None
        self.bias = nn.Parameter(torch.zeros(out)) if tied is not None and bias else None

    @property
    def tied(self) -> bool:
        return self._tied is not None

    @property
    def weight(self) -> Tensor:
        """``W`` ``[out, D]`` (the embedding's own tensor when tied)."""
        return self._tied[0].weight if self._tied is not None else self.proj.weight

    def forward(self, h: Tensor) -> Tensor:
        out = self.proj(h) if self.proj is not None else F.linear(h, self.weight, self.bias)
        return out if self.softcap is None else self.softcap * torch.tanh(out / self.softcap)


class MeanPoolHead(Head):
    """Classification by causal mean pooling: ``y_t = W (1/(t+1) Σ_{s≤t} h_s) + b``."""

    def __init__(self, d_model: int, out: int):
        super().__init__()
        self.proj = nn.Linear(d_model, out)

    def forward(self, h: Tensor) -> Tensor:
        counts = torch.arange(1, h.shape[1] + 1, device=h.device, dtype=h.dtype)
        return self.proj(h.cumsum(1) / counts[:, None])

    def init_state(self, batch: int) -> tuple[Tensor | None, int]:
        return None, 0  # running sum, positions seen

    def step(self, h_t: Tensor, state: tuple[Tensor | None, int]) -> tuple[Tensor, tuple[Tensor, int]]:
        total, count = state
        total = h_t if total is None else total + h_t
        return self.proj(total / (count + 1)), (total, count + 1)

    def forward_with_state(self, h: Tensor, state: tuple[Tensor | None, int]) -> tuple[Tensor, tuple[Tensor, int]]:
        total, count = state
        sums = h.cumsum(1) if total is None else h.cumsum(1) + total[:, None]  # [n, T, D]: Σ_{s≤t} h_s
        counts = torch.arange(count + 1, count + h.shape[1] + 1, device=h.device, dtype=h.dtype)
        return self.proj(sums / counts[:, None]), (sums[:, -1], count + h.shape[1])


def sinusoidal_positions(length: int, dim: int) -> Tensor:
    """``[length, dim]``: ``sin(i ω_k)`` then ``cos(i ω_k)``, ``ω_k = 10000^(−k/(dim/2 − 1))``
    (fairseq, mad-lab); an odd ``dim`` gets a zero last column."""
    half = dim // 2
    rate = math.log(10000) / max(half - 1, 1)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * torch.exp(-rate * torch.arange(half))[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    return F.pad(table, (0, dim - 2 * half)).to(torch.get_default_dtype())


class AutoEncoderHead(Head):
    """MAD compression: decode every position from the last position's encoding plus a sinusoidal position."""

    streams = False

    def __init__(self, d_model: int, out: int, length: int, norm: str = "rmsnorm"):
        super().__init__()
        self.register_buffer("positions", sinusoidal_positions(length, d_model), persistent=False)
        self.decoder = nn.Sequential(
            make_norm(norm, d_model),
            nn.Linear(d_model, d_model),
            nn.GELU(),
            make_norm(norm, d_model),
            nn.Linear(d_model, d_model),
            nn.GELU(),
        )
        self.unembed = nn.Sequential(make_norm(norm, d_model), nn.Linear(d_model, out))

    def forward(self, h: Tensor) -> Tensor:
        length = h.shape[1]
        if length > self.positions.shape[0]:
            raise ValueError(
                f"inputs: {length} positions, but the auto-encoder head decodes at most "
                f"{self.positions.shape[0]} (spec.input_len)"
            )
        codes = h[:, -1:] + self.positions[:length].to(h.dtype)  # [n, T, D]
        return self.unembed(self.decoder(codes))

    def step(self, h_t: Tensor, state: Any) -> tuple[Tensor, Any]:
        raise ValueError("head: the autoencoder head decodes from the last position and cannot stream; use forward")


def build_head(
    kind: str,
    d_model: int,
    out: int,
    length: int,
    norm: str = "layernorm",
    tied: nn.Embedding | None = None,
    softcap: float | None = None,
) -> Head:
    """The head of ``kind`` (one of :data:`HEAD_KINDS`); ``tied`` and ``softcap`` only apply to ``lm``."""
    if softcap is not None and kind != "lm":
        raise ValueError(
            f"model.logit_softcap: caps the logits of the lm head, not of a {kind} head; leave it unset (None)"
        )
    if kind == "lm":
        return LinearHead(d_model, out, bias=False, tied=tied, softcap=softcap)
    if kind in ("regression", "tagging"):
        return LinearHead(d_model, out, bias=True)
    if kind == "classification":
        return MeanPoolHead(d_model, out)
    if kind == "autoencoder":
        return AutoEncoderHead(d_model, out, length, norm)
    raise ValueError(f"head: unknown kind {kind!r}; expected one of {list(HEAD_KINDS)}")
