"""Gated Linear Attention (Yang et al. 2023; Sieber et al. 2025 Table 1).

Per head (key dim K = expand_k·D/H, value dim V = expand_v·D/H)::

    log α_t = logsigmoid(W_2 W_1 u_t) / τ          (low-rank gate, τ = 16)
    S_t = diag(α_t) S_{t-1} + k_t v_tᵀ,   o_t = S_tᵀ (q_t K^-½)
    y_t = W_O (RMSNorm(o_t) ⊙ SiLU(W_g u_t))

Coefficient form: φ = identity, Λ_t = diag(α_t) (diagonal decay), b = K^-½, η = 1.
"""

from __future__ import annotations

from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import HeadOutput, ShortConv
from seqdyn.layers.gates import GLADecay
from seqdyn.mixers.base import CoefficientMixer, MixerState, expanded_widths, split_heads


class GLA(CoefficientMixer):
    """Gated Linear Attention: linear attention with a data-dependent diagonal decay per key channel.

    Args:
        heads: the number of heads H; expand_k·d_model and expand_v·d_model must be multiples of it.
        expand_k: the key (and query) width is expand_k·d_model, K = expand_k·d_model / H per head (GLA: 0.5).
        expand_v: the value width is expand_v·d_model, V = expand_v·d_model / H per head (GLA: 1).
        gate_low_rank: the rank r of the decay gate's bottleneck W_2 W_1 (d_model → r → key width; GLA: 16).
        gate_normalizer: τ in log α_t = logsigmoid(W_2 W_1 u_t) / τ; a larger τ keeps the decay nearer 1 (GLA: 16).
        output_gate: multiply the per-head RMS-normalized output by SiLU(W_g u_t) before W_O, as GLA; False:
            RMSNorm only.
        short_conv: a short causal depthwise convolution with SiLU on q, k and v (the fla implementation's
            option; the paper has none).
        conv_size: the width of that convolution (taps, the current token included).
    """

    name = "gla"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        expand_k: float = 0.5,
        expand_v: float = 1.0,
        gate_low_rank: int = 16,
        gate_normalizer: float = 16.0,
        output_gate: bool = True,
        short_conv: bool = False,
        conv_size: int = 4,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.key_width, self.value_width = expanded_widths(heads, d_model, expand_k, expand_v)
        self.heads = heads
        self.q = nn.Linear(d_model, self.key_width, bias=False)
        self.k = nn.Linear(d_model, self.key_width, bias=False)
        self.v = nn.Linear(d_model, self.value_width, bias=False)
        self.decay = GLADecay(d_model, self.key_width, gate_low_rank, gate_normalizer)
        if short_conv:
            for key, width in (("q", self.key_width), ("k", self.key_width), ("v", self.value_width)):
                self.convs[key] = ShortConv(width, conv_size)
        self.output = HeadOutput(d_model, heads, self.value_width // heads, gate=output_gate)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        q, k, v = self.q(x), self.k(x), self.v(x)
        if self.convs:
            q, k, v = (self.convolve(key, t, state) for key, t in (("q", q), ("k", k), ("v", v)))
        log_decay = self.decay(x)
        heads = self.heads
        return Dynamics(
            split_heads(q, heads), split_heads(k, heads), split_heads(v, heads), log_decay=split_heads(log_decay, heads)
        ), x

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        return self.output(core, extras)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, key_width={self.key_width}, value_width={self.value_width}"


MIXER = GLA
