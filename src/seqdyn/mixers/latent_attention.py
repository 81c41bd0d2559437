"""Multi-head latent attention (MLA; DeepSeek-AI 2024, "DeepSeek-V2: A Strong, Economical, and Efficient
Mixture-of-Experts Language Model", https://arxiv.org/abs/2405.04434, §2.1.2–2.1.3, eqs. 9–19): softmax attention
whose keys and values are read from one low-rank latent per token.

Per token u_t and head h (K = nope_dim + rope_dim, V = value_dim)::

    c_t = RMSNorm(W_DKV u_t)                              the latent, kv_rank wide (eq. 9, normed as the released code)
    k_t,h = [W_UK,h c_t ; W_KR u_t]                       eqs. 10, 15, 17: the rope_dim part shared by every head
    v_t,h = W_UV,h c_t                                    eq. 11
    q_t,h = W_Q,h u_t   or   W_UQ,h RMSNorm(W_DQ u_t)     eqs. 12–13, 16 (q_rank: the query's own latent)
    y_t,h = Σ_{j≤t} exp(q_t,hᵀ k_j,h / √K) v_j,h / Σ_{j≤t} exp(q_t,hᵀ k_j,h / √K),   output W_O y_t      eqs. 18–19

With ``rotary`` the last rope_dim channels of every query head and the shared key part are rotated (the decoupled
RoPE of eqs. 14–15); without it there is no position information in the mixer (Kimi Linear's attention layers, Kimi
Team 2025, which keep the shared key part unrotated).  Coefficient form: softmax attention's (φ = exp, Λ = I,
b = K^-½, η_i = Σ_j α_ij); the latent changes what q, k and v are, not the operator.  The state keeps every key and
value as softmax attention does (not the compressed latent: the same outputs, a larger cache).  ``head_gate``
multiplies each head's output by a sigmoid of the input, ``y_t,h ← σ(w_hᵀ u_t) · y_t,h`` before W_O (Ling 3's, the
head-wise gate of Qiu et al. 2025, "Gated Attention for Large Language Models").
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers.norms import RMSNorm
from seqdyn.layers.params import check_positive, check_positive_eps
from seqdyn.layers.rotary import ROPE_BASE, rotary
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_choice, split_heads


class LatentAttention(CoefficientMixer):
    """Causal softmax attention with keys and values up-projected from a normed low-rank latent.

    Args:
        heads: the number of heads H.
        kv_rank: the width of the key–value latent c_t.
        q_rank: the width of the query's latent; None: queries projected from u_t directly.
        nope_dim: the per-head key and query channels read from the latent (W_UK, W_UQ).
        rope_dim: the key channels projected from u_t once for every head (W_KR), and the query channels beside them.
        value_dim: V per head; None: nope_dim.
        rotary: rotate the rope_dim channels of queries and keys (RoFormer eq. 34; needs an even rope_dim).
        rotary_base: the base of the rotation frequencies.
        latent_norm_eps: the ε of the latents' RMSNorms (1e-6).
        head_gate: multiply each head's output by σ(w_hᵀ u_t) before W_O.
    """

    name = "latent_attention"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        kv_rank: int | None = None,
        q_rank: int | None = None,
        nope_dim: int | None = None,
        rope_dim: int = 8,
        value_dim: int | None = None,
        rotary: bool = False,
        rotary_base: float = ROPE_BASE,
        latent_norm_eps: float = 1e-6,
        chunk_size: int = 64,
        head_gate: bool = False,
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_positive("heads", heads)
        self.kv_rank = check_positive("kv_rank", d_model // 2 if kv_rank is None else kv_rank)
        self.nope_dim = check_positive("nope_dim", max(1, d_model // heads) if nope_dim is None else nope_dim)
        self.rope_dim = check_positive("rope_dim", rope_dim)
        self.value_dim = check_positive("value_dim", self.nope_dim if value_dim is None else value_dim)
        self.rotary = check_choice("rotary", rotary, (False, True))
        if rotary and rope_dim % 2:
            raise ValueError(f"rope_dim: rotary embeddings rotate channel pairs, got {rope_dim}; choose an even one")
        self.rotary_base = rotary_base
        eps = check_positive_eps("latent_norm_eps", latent_norm_eps)
        query_width = heads * (self.nope_dim + self.rope_dim)
        if q_rank is None:
            self.q_down, self.q_norm, self.q_up = None, None, nn.Linear(d_model, query_width, bias=False)
        else:
            self.q_down = nn.Linear(d_model, check_positive("q_rank", q_rank), bias=False)
            self.q_norm, self.q_up = RMSNorm(q_rank, eps), nn.Linear(q_rank, query_width, bias=False)
        self.kv_down = nn.Linear(d_model, self.kv_rank + self.rope_dim, bias=False)  # [W_DKV ; W_KR]
        self.kv_norm = RMSNorm(self.kv_rank, eps)
        self.kv_up = nn.Linear(self.kv_rank, heads * (self.nope_dim + self.value_dim), bias=False)  # [W_UK,h ; W_UV,h]
        self.gate = (
            nn.Linear(d_model, heads, bias=False) if check_choice("head_gate", head_gate, (False, True)) else None
        )
        self.out = nn.Linear(heads * self.value_dim, d_model, bias=False)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        query = self.q_up(x if self.q_down is None else self.q_norm(self.q_down(x)))
        q = split_heads(query, self.heads)  # [B, T, H, nope + rope]
        latent, shared_key = self.kv_down(x).split([self.kv_rank, self.rope_dim], dim=-1)
        keys_values = split_heads(self.kv_up(self.kv_norm(latent)), self.heads)  # [B, T, H, nope + V]
        k_latent, v = keys_values.split([self.nope_dim, self.value_dim], dim=-1)
        shared_key = shared_key[:, :, None, :]  # [B, T, 1, rope]: one for every head
        if self.rotary:
            q_latent, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
            q = torch.cat([q_latent, rotary(q_rope, state.positions, self.rotary_base)], dim=-1)
            shared_key = rotary(shared_key, state.positions, self.rotary_base)
        k = torch.cat([k_latent, shared_key.expand(*k_latent.shape[:-1], self.rope_dim)], dim=-1)
        return Dynamics(q, k, v, readout="exp", normalizer="sum"), x

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        if self.gate is not None:
            core = core * torch.sigmoid(self.gate(extras))[..., None]  # [B, T, H, V] by [B, T, H, 1]
        return self.out(core.flatten(2))

    def output_projection(self) -> nn.Linear:
        return self.out

    def extra_repr(self) -> str:
        q_rank = self.q_down.out_features if self.q_down is not None else None
        return (
            f"d_model={self.d_model}, heads={self.heads}, kv_rank={self.kv_rank}, q_rank={q_rank}, "
            f"nope_dim={self.nope_dim}, rope_dim={self.rope_dim}, value_dim={self.value_dim}, rotary={self.rotary}"
        )


MIXER = LatentAttention
