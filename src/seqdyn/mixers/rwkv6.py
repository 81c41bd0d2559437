"""RWKV-6 "Finch" (Peng et al. 2024, "Eagle and Finch: RWKV with Matrix-Valued States and Dynamic Recurrence",
https://arxiv.org/abs/2404.05892): the time mixing of one layer, a data-dependent diagonal decay with a bonus for the
current token, every input mixed with the previous token's by a data-dependent interpolation (ddlerp).

Per head (K = expand_k·D/H, V = expand_v·D/H), with ``δ_t = x_{t−1} − x_t`` (the token shift)::

    m_c = W_c2 tanh(W_1 (x + μ ⊙ δ))_c + λ_c                 (c = r, w, k, v, g: five low-rank mixes, eq. 14)
    r, k, v, g = W_r (x + m_r ⊙ δ), W_k (x + m_k ⊙ δ), W_v (x + m_v ⊙ δ), W_g (x + m_g ⊙ δ)
    w_t = −exp(W_w2 tanh(W_w1 (x + m_w ⊙ δ)) + b_w)          (the log decay, eq. 16)
    o_t = r_tᵀ (S_{t−1} + Diag(u) k_t v_tᵀ),   S_t = Diag(e^{w_t}) S_{t−1} + k_t v_tᵀ          (eq. 17–18)
    y_t = W_o (GroupNorm(o_t) ⊙ SiLU(g_t))

Coefficient form: φ = identity, Λ_t = Diag(e^{w_t}), b = 1, η = 1, the output reading the state before its step with
the current token through ``Diag(u)`` — the operator's ``bonus`` (:mod:`seqdyn.core.bonus`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import TokenShift
from seqdyn.layers.params import check_positive, check_positive_eps
from seqdyn.mixers.base import CoefficientMixer, MixerState, expanded_widths, split_heads

#: the data-dependent mixes, in the order of their rows
MIXES = ("r", "w", "k", "v", "g")


class RWKV6(CoefficientMixer):
    """RWKV-6's time mixing: a diagonal decay from the input, the output reading the state before each token plus
    a bonus for the token itself, and the data-dependent token shift on every input.

    Args:
        heads: the number of heads H.
        expand_k: the key width expand_k·D over all heads (0.5 in RWKV-6).
        expand_v: the value width expand_v·D over all heads (1).
        mix_low_rank: the bottleneck of each of the five data-dependent mixes (32).
        decay_low_rank: the bottleneck of the decay's projection (64).
        norm_eps: the ε of the GroupNorm over each head's output (1e-5).
    """

    name = "rwkv6"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        expand_k: float = 0.5,
        expand_v: float = 1.0,
        mix_low_rank: int = 32,
        decay_low_rank: int = 64,
        norm_eps: float = 1e-5,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.key_width, self.value_width = expanded_widths(heads, d_model, expand_k, expand_v)
        self.heads = heads
        self.mix_low_rank = check_positive("mix_low_rank", mix_low_rank)
        self.convs["shift"] = TokenShift(d_model)
        self.shift_mix = nn.Parameter(torch.zeros(d_model))  # μ
        self.mix_down = nn.Linear(d_model, len(MIXES) * mix_low_rank, bias=False)  # W_1
        self.mix_up = nn.Parameter(torch.zeros(len(MIXES), d_model, mix_low_rank))  # W_c2
        self.mix_bias = nn.Parameter(torch.zeros(len(MIXES), d_model))  # λ_c
        rank = check_positive("decay_low_rank", decay_low_rank)
        self.decay = nn.Sequential(
            nn.Linear(d_model, rank, bias=False), nn.Tanh(), nn.Linear(rank, self.key_width, bias=True)
        )
        widths = {"r": self.key_width, "k": self.key_width, "v": self.value_width, "g": self.value_width}
        self.projections = nn.ModuleDict(
            {name: nn.Linear(d_model, width, bias=False) for name, width in widths.items()}
        )
        self.bonus = nn.Parameter(torch.zeros(heads, self.key_width // heads))  # u
        self.norm = nn.GroupNorm(heads, self.value_width, eps=check_positive_eps("norm_eps", norm_eps))
        self.out = nn.Linear(self.value_width, d_model, bias=False)
        self._init_as_authors()

    @torch.no_grad()
    def _init_as_authors(self) -> None:
        """flash-linear-attention's initialization: every Linear Xavier-uniform with gain 2^-2.5 and a zero bias; the
        mixes' up-projections as the rows of its one Linear (the same law over its [D, 5·r] weight); μ, λ and u 0."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight, gain=2**-2.5)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        up = torch.empty(self.d_model, len(MIXES) * self.mix_low_rank)
        nn.init.xavier_uniform_(up, gain=2**-2.5)
        self.mix_up.copy_(up.view(self.d_model, len(MIXES), -1).transpose(0, 1))

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        delta = self.convolve("shift", x, state) - x  # x_{t−1} − x_t
        hidden = torch.tanh(self.mix_down(x + delta * self.shift_mix)).unflatten(-1, (len(MIXES), -1))  # [B, T, 5, r]
        mixes = torch.einsum("btcr,cdr->btcd", hidden, self.mix_up) + self.mix_bias  # m_c [B, T, 5, D]
        inputs = {name: x + delta * mixes[..., index, :] for index, name in enumerate(MIXES)}
        r, k, v, g = (self.projections[name](inputs[name]) for name in ("r", "k", "v", "g"))
        log_decay = -torch.exp(self.decay(inputs["w"]))
        heads = self.heads
        dynamics = Dynamics(
            split_heads(r, heads),
            split_heads(k, heads),
            split_heads(v, heads),
            log_decay=split_heads(log_decay, heads),
            bonus=self.bonus,
            scale=1.0,
        )
        return dynamics, g

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        normed = self.norm(core.flatten(-2).flatten(0, -2)).view(*core.shape[:-2], -1)  # GroupNorm over [B·T, H·V]
        return self.out(normed * F.silu(extras))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, key_width={self.key_width}"


MIXER = RWKV6
