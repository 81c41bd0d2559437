"""Softmax attention (Vaswani et al. 2017; Sieber et al. 2024 eq. 2; Sieber et al. 2025 Table 1).

Per head h (K = V = D/H, or ``head_dim``)::

    q_i, k_i, v_i = W_Q u_i, W_K u_i, W_V u_i
    y_i = Σ_{j≤i} exp(q_iᵀ k_j / √K) v_j / Σ_{j≤i} exp(q_iᵀ k_j / √K),      output W_O y_i

Coefficient form: φ = exp, Λ = I, b = K^-½, η_i = Σ_j α_ij.  No finite state (Sieber et al. 2024 Lemma 1): the recurrent
form keeps every key; position information comes from the model (learned positions), since Λ = I (Lemma 3), or
with ``rotary=True`` from rotary embeddings of q and k (RoFormer eq. 34; the ATTENTION block of Gupta et al. 2022 §3.3:
"a 4-head attention layer and rotary positional embeddings").

The options of today's hybrid language models (Qwen3 / Qwen3-Next / Qwen3.5 attention layers): ``kv_heads``
grouped key–value heads (GQA, Ainslie et al. 2023: each key–value head serves H / kv_heads consecutive query
heads), ``qk_norm`` an RMSNorm of each head's query and key before the rotation (Qwen3), ``rotary_fraction``
rotating only the first channels of each head (GPT-NeoX's partial rotary), and ``output_gate`` the elementwise
sigmoid gate after attention, ``y_i ⊙ σ(W_G u_i)`` before W_O (Qiu et al. 2025, "Gated Attention for Large
Language Models", the G1 position).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers.norms import RMSNorm
from seqdyn.layers.params import check_positive, check_positive_eps
from seqdyn.layers.rotary import ROPE_BASE, rotary
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_choice, check_heads, split_heads


class SoftmaxAttention(CoefficientMixer):
    """Causal softmax attention (multi-head), the operator with readout exp and normalizer sum.

    Args:
        heads: the number of (query) heads H; K = V = d_model / H per head unless ``head_dim`` is given.
        bias: biases in the query, key, value and output projections.
        rotary: rotary position embeddings on q and k (RoFormer; needs an even rotated head dimension); False: no
            position information in the mixer.
        kv_heads: grouped key–value heads (a divisor of heads; each serves heads / kv_heads consecutive query
            heads); None: one per query head.
        head_dim: the width K = V of each head; None: d_model / heads.
        qk_norm: an RMSNorm (a learned weight over the head dimension) of every head's query and key.
        qk_norm_eps: its ε (1e-6; LFM2's 1e-5).
        qk_norm_scope: what qk_norm normalizes: "head", each head's query and key (Qwen3); "projection", all the
            query heads together and all the key heads together (OLMo 2, OLMo-hybrid).
        rotary_fraction: the fraction of each head's channels that rotary embeddings rotate (the first ones).
        rotary_base: the base of the rotation frequencies θ_m = base^(−2m/d).
        output_gate: multiply the attention output by σ(W_G u) elementwise before W_O.
        output_width: the width W_O maps to; None: d_model (a block whose attention reads a wider input than it
            writes, as Zamba's shared attention reads [x, embeddings] and writes the model width).
    """

    name = "softmax_attention"

    def __init__(
        self,
        d_model: int,
        heads: int = 1,
        bias: bool = False,
        rotary: bool = False,
        chunk_size: int = 64,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        qk_norm: bool = False,
        rotary_fraction: float = 1.0,
        rotary_base: float = ROPE_BASE,
        output_gate: bool = False,
        qk_norm_scope: str = "head",
        qk_norm_eps: float = 1e-6,
        output_width: int | None = None,
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model) if head_dim is None else check_positive("heads", heads)
        self.head_dim = d_model // heads if head_dim is None else check_positive("head_dim", head_dim)
        self.kv_heads = heads if kv_heads is None else check_positive("kv_heads", kv_heads)
        if heads % self.kv_heads:
            raise ValueError(f"kv_heads: {kv_heads} does not divide heads={heads}; choose a divisor")
        self.rotary = check_choice("rotary", rotary, (False, True))
        self.rotary_dims, self.rotary_base = self._rotary_dims(rotary_fraction), rotary_base
        inner, kv_inner = heads * self.head_dim, self.kv_heads * self.head_dim
        self.widths = [inner, kv_inner, kv_inner]  # of q, k and v
        self.qkv = nn.Linear(d_model, sum(self.widths), bias=bias)
        self.qk_norm_scope = check_choice("qk_norm_scope", qk_norm_scope, ("head", "projection"))
        widths = (self.head_dim, self.head_dim) if qk_norm_scope == "head" else (inner, kv_inner)
        eps = check_positive_eps("qk_norm_eps", qk_norm_eps)
        self.q_norm, self.k_norm = (RMSNorm(widths[0], eps), RMSNorm(widths[1], eps)) if qk_norm else (None, None)
        self.gate = nn.Linear(d_model, inner, bias=bias) if output_gate else None
        width = d_model if output_width is None else check_positive("output_width", output_width)
        self.out = nn.Linear(inner, width, bias=bias)

    def _rotary_dims(self, fraction: float) -> int:
        """The rotated channels of a head, ``int(head_dim · fraction)`` as transformers counts them: even, > 0."""
        if not 0 < fraction <= 1:
            raise ValueError(f"rotary_fraction: expected a fraction in (0, 1], got {fraction}")
        dims = int(self.head_dim * fraction)
        if self.rotary and (dims == 0 or dims % 2):
            raise ValueError(
                f"rotary: rotary embeddings rotate channel pairs, so the rotated head dimension "
                f"{dims} (head dimension {self.head_dim} × rotary_fraction {fraction}) must be even and "
                f"positive; choose another heads, head_dim or rotary_fraction"
            )
        return dims

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        q, k, v = self.qkv(x).split(self.widths, dim=-1)
        if self.q_norm is not None and self.qk_norm_scope == "projection":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (split_heads(t, t.shape[-1] // self.head_dim) for t in (q, k, v))
        if self.q_norm is not None and self.qk_norm_scope == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary:
            q, k = (rotary(t, state.positions, self.rotary_base, self.rotary_dims) for t in (q, k))
        if self.kv_heads != self.heads:  # [B, T, H_kv, K] -> [B, T, H, K]: each serves consecutive query heads
            k, v = (t.repeat_interleave(self.heads // self.kv_heads, dim=2) for t in (k, v))
        return Dynamics(q, k, v, readout="exp", normalizer="sum"), x

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        y = core.flatten(2)
        return self.out(y if self.gate is None else y * torch.sigmoid(self.gate(extras)))

    def extra_repr(self) -> str:
        grouped = f", kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        return f"d_model={self.d_model}, heads={self.heads}, head_dim={self.head_dim}{grouped}, rotary={self.rotary}"


MIXER = SoftmaxAttention
