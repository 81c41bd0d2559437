"""The position-wise MLP of a block: GELU (GPT-2, Zoology), SwiGLU (Shazeer 2020; Sieber et al. 2025, appendix E),
GeGLU with biases (Griffin / RecurrentGemma), squared ReLU (Primer), or a mixture of SwiGLU experts (Shazeer et al.
2017; with the shared expert of Qwen-MoE / Qwen3-Next)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MLPS = ("gelu", "swiglu", "geglu", "relu2", "moe", "none")


def hidden_width(d_model: int, ratio: float) -> int:
    """``round(ratio · d_model)``, at least 1 (the MLP's inner width)."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
        raise ValueError(f"mlp_ratio: expected a positive number, got {ratio!r}")
    return max(1, round(ratio * d_model))


class MLP(nn.Module):
    """``fc2(GELU(fc1 x))`` (``"gelu"``, with biases), ``fc2(SiLU(x W_a) ⊙ x W_b)`` (``"swiglu"``, no biases),
    ``fc2(GELU_tanh(x W_a + b_a) ⊙ (x W_b + b_b)) + b_2`` (``"geglu"``, Shazeer 2020 eq. 6 with the tanh GELU and
    biases, Griffin's MLP block as RecurrentGemma computes it) or ``fc2(ReLU(fc1 x)²)`` (``"relu2"``, the squared
    ReLU of So et al. 2021 "Primer", eq. 1; Nemotron-H's; no biases).

    ``fc1`` maps ``d_model`` to the hidden width (twice that for the gated kinds: ``[W_a | W_b]``); ``fc2`` maps
    back and is the block's residual projection (Zoology scales its init by 1/√(2·layers)).
    """

    GATED = ("swiglu", "geglu")

    def __init__(self, d_model: int, hidden: int, kind: str = "gelu"):
        super().__init__()
        if kind not in ("gelu", "swiglu", "geglu", "relu2"):
            raise ValueError(f"mlp: expected 'gelu', 'swiglu', 'geglu' or 'relu2', got {kind!r}")
        self.kind, self.hidden = kind, hidden
        bias = kind in ("gelu", "geglu")
        self.fc1 = nn.Linear(d_model, hidden * (2 if kind in self.GATED else 1), bias=bias)
        self.fc2 = nn.Linear(hidden, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc1(x)
        if self.kind == "gelu":
            return self.fc2(F.gelu(h))
        if self.kind == "relu2":
            return self.fc2(F.relu(h).square())
        gate, value = h.chunk(2, dim=-1)
        if self.kind == "geglu":
            return self.fc2(F.gelu(gate, approximate="tanh") * value)
        return self.fc2(F.silu(gate) * value)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, hidden={self.hidden}"

    def output_projections(self) -> list[nn.Linear]:
        """The projections that write into the residual stream (Zoology scales their init)."""
        return [self.fc2]


class MixtureOfExperts(nn.Module):
    """``Σ_{e ∈ top-k} p̃_e · SwiGLU_e(x)  [+ σ(w_sᵀ x) · SwiGLU_s(x)]`` per token, with ``p = softmax(W_r x)``
    (Shazeer et al. 2017, eqs. 1–3 with softmax gating over the top k) and ``p̃`` the top-k probabilities,
    renormalized to sum to 1 with ``normalize``; the optional shared expert is gated by a sigmoid (Qwen-MoE,
    Qwen3-Next) or, without ``shared_gate``, added as it is (Granite 4.0's shared MLP).  Each expert's weights are
    ``gate_up`` ``[E, 2·hidden, D]`` (the SiLU gate's rows, then the up projection's) and ``down`` ``[E, D, hidden]``;
    the router's softmax runs in float32 at least."""

    def __init__(
        self,
        d_model: int,
        hidden: int,
        experts: int = 8,
        top_k: int = 2,
        normalize: bool = True,
        shared_hidden: int = 0,
        shared_gate: bool = True,
    ):
        super().__init__()
        if not 0 < top_k <= experts:
            raise ValueError(f"moe.top_k: expected 1 ≤ top_k ≤ experts={experts}, got {top_k}")
        self.experts, self.top_k, self.normalize, self.hidden = experts, top_k, normalize, hidden
        self.router = nn.Linear(d_model, experts, bias=False)
        self.gate_up = nn.Parameter(torch.randn(experts, 2 * hidden, d_model) * 0.02)
        self.down = nn.Parameter(torch.randn(experts, d_model, hidden) * 0.02)
        self.shared = MLP(d_model, shared_hidden, "swiglu") if shared_hidden else None
        self.shared_gate = nn.Linear(d_model, 1, bias=False) if shared_hidden and shared_gate else None

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(weights, experts)`` ``[N, k]`` of the tokens ``x`` ``[N, D]``: the top-k router probabilities (in
        ``x``'s dtype) and the experts they choose."""
        logits = self.router(x)
        probabilities = torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
        weights, chosen = torch.topk(probabilities, self.top_k, dim=-1)
        if self.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), chosen

    def forward(self, x: Tensor) -> Tensor:
        tokens = x.reshape(-1, x.shape[-1])  # [B, T, D] -> [N, D]
        weights, chosen = self.route(tokens)
        out = torch.zeros_like(tokens)
        for expert in torch.unique(chosen).tolist():
            rows, slot = torch.where(chosen == expert)
            gate, up = F.linear(tokens[rows], self.gate_up[expert]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down[expert]) * weights[rows, slot, None]
            out.index_add_(0, rows, y)
        if self.shared is not None:
            shared = self.shared(tokens)
            out = out + (shared if self.shared_gate is None else torch.sigmoid(self.shared_gate(tokens)) * shared)
        return out.reshape(x.shape)

    def extra_repr(self) -> str:
        shared = f", shared_hidden={self.shared.hidden}" if self.shared is not None else ""
        return f"experts={self.experts}, top_k={self.top_k}, hidden={self.hidden}{shared}"

    def output_projections(self) -> list[nn.Linear]:
        """The shared expert's output projection (the experts' ``down`` is initialized here, at 0.02)."""
        return [] if self.shared is None else [self.shared.fc2]


def build_mlp(kind: str, d_model: int, ratio: float, moe: dict[str, Any] | None = None) -> nn.Module | None:
    """The MLP of ``kind`` with hidden width ``round(ratio · d_model)`` (each expert's, for ``"moe"``, whose
    ``moe`` options are ``experts``, ``top_k``, ``normalize``, ``shared_ratio``: a shared expert of hidden width
    ``round(shared_ratio · d_model)``, none at 0, and ``shared_gate``); ``None`` for ``"none"``."""
    if kind not in MLPS:
        raise ValueError(f"mlp: expected one of {list(MLPS)}, got {kind!r}")
    if kind == "none":
        return None
    if kind != "moe":
        return MLP(d_model, hidden_width(d_model, ratio), kind)
    options = dict(moe or {})
    shared_ratio = options.pop("shared_ratio", 0.0)
    shared = hidden_width(d_model, shared_ratio) if shared_ratio else 0
    return MixtureOfExperts(d_model, hidden_width(d_model, ratio), shared_hidden=shared, **options)
