"""RWKV-7 "Goose" (Peng et al. 2025, "RWKV-7 Goose with Expressive Dynamic State Evolution",
https://arxiv.org/abs/2503.14456): the time mixing of one layer, a generalized delta rule with a vector-valued decay
and in-context learning rate.

Per head (K = V = D/H), each input mixed with the previous token's (the token shift ``x_{t−1}``)::

    x^c_t = x_t + μ_c ⊙ (x_{t−1} − x_t)                    (c = r, w, k, v, a, g)
    r, k, v = W_r x^r, W_k x^k, W_v x^v
    w_t = −e^{−½} σ(W_w2 tanh(W_w1 x^w) + b_w)              (the log decay, so decays in (e^{−e^{−½}}, 1))
    a_t = σ(W_a2 W_a1 x^a + b_a),   g_t = W_g2 σ(W_g1 x^g)   (the in-context learning rate, the output gate)
    κ̂_t = normalize(k_t ⊙ ξ) per head,   k̃_t = k_t ⊙ (1 + (a_t − 1) ⊙ α)
    S_t = (Diag(e^{w_t}) − (a_t ⊙ κ̂_t) κ̂_tᵀ) S_{t−1} + k̃_t v_tᵀ,   o_t = S_tᵀ r_t
    y_t = W_o ((GroupNorm(o_t) + (r_tᵀ (ρ ⊙ k̃_t)) v_t) ⊙ g_t)

(ξ, α, ρ are flash-linear-attention's ``k_k``, ``k_a``, ``r_k``; the GroupNorm has ε = K·10⁻⁵.)  Coefficient form:
φ = identity, the diagonal-plus-low-rank ``Λ_t = Diag(e^{w_t}) + u_t z_tᵀ`` with ``u = −a ⊙ κ̂``, ``z = κ̂``
(:mod:`seqdyn.core.low_rank`), b = 1, η = 1.  The bonus ``(r_tᵀ (ρ ⊙ k̃_t)) v_t`` is added after the norm, outside
the operator.  The value residual of RWKV-7's later layers (``v ← lerp(v, v_first, σ(·))``, the first layer's values)
belongs to the stack; this is its first layer, which has none.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import TokenShift
from seqdyn.layers.params import check_positive, check_positive_eps
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, split_heads

#: the token-shift mixes, in the order of their rows in ``RWKV7.mix``
MIXES = ("r", "w", "k", "v", "a", "g")
#: ``e^{−½}``: the largest rate of the log decay ``w = −e^{−½} σ(·)``
DECAY_BOUND = math.exp(-0.5)


def low_rank_width(d_model: int, factor: float, head_dim: int) -> int:
    """flash-linear-attention's LoRA widths: ``factor·√D·(K/64)`` rounded to a multiple of 32, at least 32."""
    return max(32, int(round(factor * d_model**0.5 * head_dim / 64 / 32) * 32))


class RWKV7(CoefficientMixer):
    """RWKV-7's time mixing: a generalized delta rule (decay plus a rank-one removal along a normalized key, at an
    in-context learning rate per channel), the token shift on every input and a bonus for the current token.

    Args:
        heads: the number of heads H (a divisor of d_model); K = V = d_model / H.
        decay_low_rank: the bottleneck of the decay's projection; None: flash-linear-attention's 2.5·√D·K/64 as a
            multiple of 32 (at least 32).
        rate_low_rank: the bottleneck of the learning rate's projection; None: the same width.
        gate_low_rank: the bottleneck of the output gate's projection; None: 5·√D as a multiple of 32.
        norm_eps: the GroupNorm's ε per channel (ε = K·norm_eps, 1e-5).
    """

    name = "rwkv7"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        decay_low_rank: int | None = None,
        rate_low_rank: int | None = None,
        gate_low_rank: int | None = None,
        norm_eps: float = 1e-5,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        head_dim = d_model // heads
        ranks = [
            low_rank_width(d_model, 2.5, head_dim) if rank is None else check_positive(name, rank)
            for name, rank in (("decay_low_rank", decay_low_rank), ("rate_low_rank", rate_low_rank))
        ]
        gate_rank = low_rank_width(d_model, 5.0, 64) if gate_low_rank is None else check_positive("gate", gate_low_rank)
        self.convs["shift"] = TokenShift(d_model)
        self.mix = nn.Parameter(torch.zeros(len(MIXES), d_model))  # μ_r … μ_g
        self.rkv = nn.Linear(d_model, 3 * d_model, bias=False)  # W_r, W_k, W_v stacked
        self.decay = _low_rank(d_model, ranks[0], nn.Tanh(), bias=True)
        self.rate = _low_rank(d_model, ranks[1], nn.Identity(), bias=True)
        self.gate = _low_rank(d_model, gate_rank, nn.Sigmoid(), bias=False)
        self.removal_scale = nn.Parameter(torch.zeros(d_model))  # ξ (k_k)
        self.rate_key_mix = nn.Parameter(torch.zeros(d_model))  # α (k_a)
        self.bonus = nn.Parameter(torch.zeros(heads, head_dim))  # ρ (r_k)
        self.norm = nn.GroupNorm(heads, d_model, eps=head_dim * check_positive_eps("norm_eps", norm_eps))
        self.out = nn.Linear(d_model, d_model, bias=False)
        self._init_as_first_layer()

    @torch.no_grad()
    def _init_as_first_layer(self) -> None:
        """flash-linear-attention's initialization of RWKV-7's first layer (of one): mixes ``1 − (n/D)^p``, the
        decay's bias ``−6 + 6n/(D−1) + ½ + 2.5 ζ_n`` (ζ a zigzag over each head's channels), orthogonal
        projections (W_k with gain 0.1).  The output projection keeps torch's default, which a model replaces as it
        does every mixer's residual projection (the authors start it at zero)."""
        d_model, head_dim = self.d_model, self.d_model // self.heads
        n = torch.arange(d_model, dtype=torch.float64)
        ratio = n / d_model
        linear = n / (d_model - 1) - 0.5 if d_model > 1 else n
        centre = (head_dim - 1) / 2 if head_dim > 1 else 1.0
        zigzag = ((n % head_dim) - centre) / centre
        zigzag = zigzag * zigzag.abs()
        for row, power in zip(self.mix, (0.2, 0.9, 0.7, 0.7, 0.9, 0.2)):
            row.copy_(1.0 - ratio**power)
        self.rate_key_mix.fill_(1.02)
        self.bonus.fill_(-0.04)
        self.removal_scale.copy_(0.71 - linear * 0.1)
        self.decay[2].bias.copy_(-6 + 6 * n / max(d_model - 1, 1) + 0.5 + zigzag * 2.5)
        self.rate[2].bias.copy_(-0.19 + zigzag * 0.3 + linear * 0.4)
        for block, gain in zip(self.rkv.weight.chunk(3), (1.0, 0.1, 1.0)):
            nn.init.orthogonal_(block, gain=gain)
        for projection in (self.decay, self.rate, self.gate):
            nn.init.zeros_(projection[0].weight)
            rows, columns = projection[2].weight.shape
            nn.init.orthogonal_(projection[2].weight, gain=math.sqrt(columns / rows) if columns > rows else 1.0)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, tuple]:
        shift = self.convolve("shift", x, state) - x  # x_{t−1} − x_t
        xr, xw, xk, xv, xa, xg = (x + mu * shift for mu in self.mix)
        r, k, v = (xr @ w.T for w, xr in zip(self.rkv.weight.chunk(3), (xr, xk, xv)))
        log_decay = -DECAY_BOUND * torch.sigmoid(self.decay(xw))
        rate = torch.sigmoid(self.rate(xa))
        heads = self.heads
        removal = F.normalize(split_heads(k * self.removal_scale, heads), dim=-1)  # κ̂ [B, T, H, K]
        key = k * (1 + (rate - 1) * self.rate_key_mix)  # k̃
        r, key, v, rate = (split_heads(t, heads) for t in (r, key, v, rate))
        dynamics = Dynamics(
            r,
            key,
            v,
            log_decay=split_heads(log_decay, heads),
            low_rank_write=-rate * removal,
            low_rank_read=removal,
            scale=1.0,
        )
        return dynamics, (r, key, v, self.gate(xg))

    def core_output(self, core: Tensor, extras: tuple) -> Tensor:
        r, key, v, gate = extras
        normed = self.norm(core.flatten(-2).flatten(0, -2)).view(*core.shape[:-2], -1)  # GroupNorm over [B·T, D]
        bonus = ((r * key * self.bonus).sum(-1, keepdim=True) * v).flatten(-2)
        return self.out((normed + bonus) * gate)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}"


def _low_rank(d_model: int, rank: int, activation: nn.Module, bias: bool) -> nn.Sequential:
    """``W_2 act(W_1 x) (+ b)``: RWKV's low-rank projections, ``D → rank → D``."""
    return nn.Sequential(nn.Linear(d_model, rank, bias=False), activation, nn.Linear(rank, d_model, bias=bias))


MIXER = RWKV7
