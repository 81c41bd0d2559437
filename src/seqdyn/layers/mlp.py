"""The position-wise MLP of a block: GELU (GPT-2, Zoology), SwiGLU (Shazeer 2020; Sieber et al. 2025, appendix E),
GeGLU with biases (Griffin / RecurrentGemma), GeGLU with the exact GELU and no biases (Zamba), squared ReLU (Primer),
or a mixture of SwiGLU experts (Shazeer et al. 2017; with the shared expert of Qwen-MoE / Qwen3-Next)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MLPS = ("gelu", "swiglu", "geglu", "gated_gelu", "relu2", "moe", "none")


def hidden_width(d_model: int, ratio: float) -> int:
    """``round(ratio · d_model)``, at least 1 (the MLP's inner width)."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
        raise ValueError(f"mlp_ratio: expected a positive number, got {ratio!r}")
    return max(1, round(ratio * d_model))


class MLP(nn.Module):
    """``fc2(GELU(fc1 x))`` (``"gelu"``, with biases), ``fc2(SiLU(x W_a) ⊙ x W_b)`` (``"swiglu"``, no biases),
    ``fc2(GELU_tanh(x W_a + b_a) ⊙ (x W_b + b_b)) + b_2`` (``"geglu"``, Shazeer 2020 eq. 6 with the tanh GELU and
    biases, Griffin's MLP block as RecurrentGemma computes it), ``fc2(GELU(x W_a) ⊙ x W_b)`` (``"gated_gelu"``,
    Shazeer 2020 eq. 6 as written: the exact GELU, no biases; Zamba's shared MLP) or ``fc2(ReLU(fc1 x)²)``
    (``"relu2"``, the squared ReLU of So et al. 2021 "Primer", eq. 1; Nemotron-H's; no biases).

    ``fc1`` maps ``d_model`` to the hidden width (twice that for the gated kinds: ``[W_a | W_b]``); ``fc2`` maps
    back and is the block's residual projection (Zoology scales its init by 1/√(2·layers)).
    """

    GATED = ("swiglu", "geglu", "gated_gelu")
    KINDS = ("gelu", "swiglu", "geglu", "gated_gelu", "relu2")

    def __init__(self, d_model: int, hidden: int, kind: str = "gelu"):
        super().__init__()
        if kind not in self.KINDS:
            raise ValueError(f"mlp: expected one of {list(self.KINDS)}, got {kind!r}")
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
        if self.kind == "gated_gelu":
            return self.fc2(F.gelu(gate) * value)
        return self.fc2(F.silu(gate) * value)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, hidden={self.hidden}"

    def output_projections(self) -> list[nn.Linear]:
        """The projections that write into the residual stream (Zoology scales their init)."""
        return [self.fc2]


def check_routing(experts: int, top_k: int, router: str, groups: int, top_groups: int) -> None:
    """Raise, naming the option, where the router cannot choose ``top_k`` of ``experts``."""
    if top_k < 1:
        raise ValueError(f"moe.top_k: expected at least 1 expert per token, got {top_k}")
    if top_k > experts:
        raise ValueError(f"moe.top_k: {top_k} exceeds experts={experts}; choose top_k ≤ experts")
    if router not in MixtureOfExperts.ROUTERS:
        raise ValueError(f"moe.router: expected one of {list(MixtureOfExperts.ROUTERS)}, got {router!r}")
    if groups < 1 or experts % groups:
        raise ValueError(f"moe.groups: {groups} does not divide experts={experts}; choose a divisor")
    if not 0 < top_groups <= groups:
        raise ValueError(f"moe.top_groups: expected 1 ≤ top_groups ≤ groups={groups}, got {top_groups}")
    if top_k > top_groups * (experts // groups):
        raise ValueError(
            f"moe.top_k: {top_k} exceeds the {top_groups * (experts // groups)} experts of the top_groups={top_groups} "
            f"groups; choose a smaller top_k or more top_groups"
        )


class MixtureOfExperts(nn.Module):
    """``Σ_{e ∈ top-k} g_e · SwiGLU_e(x)  [+ σ(w_sᵀ x) · SwiGLU_s(x)]`` per token.

    The router scores ``s = softmax(W_r x)`` (Shazeer et al. 2017, eqs. 1–3 with softmax gating over the top k) or
    ``s = σ(W_r x)`` (``router="sigmoid"``, DeepSeek-AI 2024, "DeepSeek-V3 Technical Report",
    https://arxiv.org/abs/2412.19437, eq. 15).  The top k experts are chosen on ``s + b`` with ``b`` a per-expert
    ``selection_bias`` that only chooses (its eq. 16, the auxiliary-loss-free balancing; a buffer, which training
    here leaves at 0: its update rule is not implemented), among the ``top_groups`` of ``groups`` equal groups of
    experts whose two best ``s + b`` sum highest (its node-limited routing).  The chosen ``s_e`` are the weights
    ``g_e``, renormalized with ``normalize`` as ``g / (Σ g + normalize_eps)`` (eq. 13) and times ``routed_scale``
    (DeepSeek-V3's routed scaling factor).  The optional shared expert is gated by a sigmoid (Qwen-MoE, Qwen3-Next)
    or, without ``shared_gate``, added as it is (Granite 4.0, DeepSeek-V3's shared experts, eq. 12).  Each expert's
    weights are ``gate_up`` ``[E, 2·hidden, D]`` (the SiLU gate's rows, then the up projection's) and ``down``
    ``[E, D, hidden]``; the router runs in float32 at least."""

    ROUTERS = ("softmax", "sigmoid")

    def __init__(
        self,
        d_model: int,
        hidden: int,
        experts: int = 8,
        top_k: int = 2,
        normalize: bool = True,
        shared_hidden: int = 0,
        shared_gate: bool = True,
        router: str = "softmax",
        groups: int = 1,
        top_groups: int = 1,
        routed_scale: float = 1.0,
        selection_bias: bool = False,
        normalize_eps: float = 0.0,
    ):
        super().__init__()
        check_routing(experts, top_k, router, groups, top_groups)
        self.normalize_eps = normalize_eps
        self.experts, self.top_k, self.normalize, self.hidden = experts, top_k, normalize, hidden
        self.scoring, self.groups, self.top_groups, self.routed_scale = router, groups, top_groups, routed_scale
        self.router = nn.Linear(d_model, experts, bias=False)
        self.gate_up = nn.Parameter(torch.randn(experts, 2 * hidden, d_model) * 0.02)
        self.down = nn.Parameter(torch.randn(experts, d_model, hidden) * 0.02)
        self.shared = MLP(d_model, shared_hidden, "swiglu") if shared_hidden else None
        self.shared_gate = nn.Linear(d_model, 1, bias=False) if shared_hidden and shared_gate else None
        self.selection_bias = nn.Buffer(torch.zeros(experts)) if selection_bias else None

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(weights, experts)`` ``[N, k]`` of the tokens ``x`` ``[N, D]``: the chosen experts' weights ``g`` (in
        ``x``'s dtype) and the experts they choose."""
        logits = self.router(x)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        scores = torch.softmax(logits, dim=-1) if self.scoring == "softmax" else torch.sigmoid(logits)
        choice = scores if self.selection_bias is None else scores + self.selection_bias
        if self.groups > 1:
            choice = self._best_groups(choice)
        chosen = torch.topk(choice, self.top_k, dim=-1).indices
        weights = scores.gather(-1, chosen)
        if self.normalize:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + self.normalize_eps)
        return (weights * self.routed_scale).to(x.dtype), chosen

    def _best_groups(self, choice: Tensor) -> Tensor:
        """``choice`` ``[N, E]`` with ``-inf`` outside the ``top_groups`` groups whose two best scores sum highest."""
        grouped = choice.unflatten(-1, (self.groups, -1))  # [N, E] -> [N, G, E/G]
        group_scores = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(dim=-1)
        best = torch.topk(group_scores, self.top_groups, dim=-1).indices
        kept = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(-1, best, True)
        return grouped.masked_fill(~kept[..., None], float("-inf")).flatten(-2)

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
        routing = f", router={self.scoring!r}" if self.scoring != "softmax" else ""
        routing += f", groups={self.groups}, top_groups={self.top_groups}" if self.groups > 1 else ""
        return f"experts={self.experts}, top_k={self.top_k}, hidden={self.hidden}{shared}{routing}"

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
