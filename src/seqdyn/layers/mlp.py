"""The position-wise MLP of a block: GELU (GPT-2, Zoology) or SwiGLU (Shazeer 2020; seed 001 appendix E)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

MLPS = ("gelu", "swiglu", "none")


def hidden_width(d_model: int, ratio: float) -> int:
    """``round(ratio · d_model)``, at least 1 (the MLP's inner width)."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
        raise ValueError(f"mlp_ratio: expected a positive number, got {ratio!r}")
    return max(1, round(ratio * d_model))


class MLP(nn.Module):
    """``fc2(GELU(fc1 x))`` (``"gelu"``, with biases) or ``fc2(SiLU(x W_a) ⊙ x W_b)`` (``"swiglu"``, no biases).

    ``fc1`` maps ``d_model`` to the hidden width (twice that for SwiGLU: ``[W_a | W_b]``); ``fc2`` maps back and
    is the block's residual projection (Zoology scales its init by 1/√(2·layers)).
    """

    def __init__(self, d_model: int, hidden: int, kind: str = "gelu"):
        super().__init__()
        if kind not in ("gelu", "swiglu"):
            raise ValueError(f"mlp: expected 'gelu' or 'swiglu', got {kind!r}")
        self.kind, self.hidden = kind, hidden
        bias = kind == "gelu"
        self.fc1 = nn.Linear(d_model, hidden * (2 if kind == "swiglu" else 1), bias=bias)
        self.fc2 = nn.Linear(hidden, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc1(x)
        if self.kind == "gelu":
            return self.fc2(F.gelu(h))
        gate, value = h.chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * value)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, hidden={self.hidden}"


def build_mlp(kind: str, d_model: int, ratio: float) -> MLP | None:
    """The MLP of ``kind`` with hidden width ``round(ratio · d_model)``; ``None`` for ``"none"``."""
    if kind not in MLPS:
        raise ValueError(f"mlp: expected one of {list(MLPS)}, got {kind!r}")
    return None if kind == "none" else MLP(d_model, hidden_width(d_model, ratio), kind)
