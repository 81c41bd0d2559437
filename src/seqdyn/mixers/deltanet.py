"""DeltaNet: linear attention trained by the delta rule (Schlag et al. 2021; Yang et al. 2024).

Per head (K = D/H or ``key_dim``, V = expand_v·D/H), keys and queries L2-normalized after a short convolution with
SiLU::

    β_t = σ(w_βᵀ u_t)
    S_t = (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,   o_t = S_tᵀ (q_t K^-½)
    y_t = W_O RMSNorm(o_t)

— one step of online regression ``min_S ½‖Sᵀk_t − v_t‖²`` with step size β_t.
Coefficient form: φ = identity, Λ_t = I − β_t k_t k_tᵀ (Householder factor with w = k), b_t = β_t K^-½, η = 1.
The options of the released models (Qwen3-Next, Qwen3.5): ``key_heads`` query/key heads fewer than the value heads
(each serves H / key_heads consecutive value heads, "grouped value attention"), a per-head ``key_dim``, and
``qk_norm_eps``, the L2 norm as flash-linear-attention computes it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import HeadOutput, ShortConv
from seqdyn.layers.norms import l2_normalize
from seqdyn.layers.params import check_positive, check_positive_eps
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_choice, check_heads, scaled_width, split_heads


class DeltaNet(CoefficientMixer):
    """DeltaNet: linear attention whose state is updated by the delta rule, one regression step per token.

    Args:
        heads: the number of heads H; keys and queries have K = d_model / H channels per head.
        expand_v: the value width is expand_v·d_model, V = expand_v·d_model / H per head (the state is K × V).
        short_conv: a short causal depthwise convolution with SiLU on q, k and v before the delta rule (Yang et
            al. 2024); False: the projections go straight in.
        conv_size: the width of that convolution (taps, the current token included).
        output_gate: multiply the per-head RMS-normalized output by SiLU(W_g u_t) before W_O; False: RMSNorm only.
        key_heads: the number of query/key heads (a divisor of heads); each serves heads / key_heads consecutive
            value heads, whose states are their own; None: one per head.
        key_dim: the width K of each query and key head; None: d_model / heads.
        qk_norm_eps: None: q/‖q‖ (clamped at 1e-12); a value ε: q (‖q‖² + ε)^-½, flash-linear-attention's l2norm
            (ε = 1e-6 in Qwen3-Next and Qwen3.5), likewise for k.
        conv_bias: a bias in the short convolution.
        negative_eigenvalues: β_t = 2σ(w_βᵀ u_t) ∈ (0, 2), so that I − β_t k_t k_tᵀ has the eigenvalue 1 − β_t ∈ (−1, 1)
            along k_t (Grazzi et al. 2025, "Unlocking state-tracking in linear RNNs through negative eigenvalues",
            OLMo-hybrid's allow_neg_eigval); False: β_t = σ(w_βᵀ u_t).
        output_norm_eps: the ε of the per-head RMSNorm of the output (1e-6 as Qwen3.5; OLMo-hybrid: 1e-5).
        householders: n, the Householder factors per token (DeltaProduct, Siems et al. 2025): n keys, values and
            step sizes per token, ``S_t = Π_{s=n}^{1}(I − β_ts k_ts k_tsᵀ) S_{t−1}`` with each value written after
            its factor; 1: DeltaNet.
    """

    name = "deltanet"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        expand_v: float = 1.0,
        short_conv: bool = True,
        conv_size: int = 4,
        output_gate: bool = False,
        chunk_size: int | None = None,
        key_heads: int | None = None,
        key_dim: int | None = None,
        qk_norm_eps: float | None = None,
        conv_bias: bool = True,
        negative_eigenvalues: bool = False,
        output_norm_eps: float = 1e-6,
        householders: int = 1,
    ):
        super().__init__(d_model, chunk_size)
        self.householders = check_positive("householders", householders)
        self.negative_eigenvalues = check_choice("negative_eigenvalues", negative_eigenvalues, (False, True))
        self.heads = check_heads(heads, d_model) if key_dim is None else check_positive("heads", heads)
        self.key_heads = heads if key_heads is None else check_positive("key_heads", key_heads)
        if heads % self.key_heads:
            raise ValueError(f"key_heads: {key_heads} does not divide heads={heads}; choose a divisor")
        self.key_dim = d_model // heads if key_dim is None else check_positive("key_dim", key_dim)
        self.qk_norm_eps = qk_norm_eps
        self.value_width = scaled_width("expand_v", d_model, expand_v)
        check_heads(heads, self.value_width, "expand_v·d_model")
        key_width = self.key_heads * self.key_dim
        factors = self.householders
        self.widths = [key_width, factors * key_width, factors * self.value_width]  # of q, k and v (n of each)
        self.qkv = nn.Linear(d_model, sum(self.widths), bias=False)  # W_Q, W_K, W_V stacked: one product
        self.beta = nn.Linear(d_model, factors * heads, bias=False)
        if short_conv:  # the three convolutions of q, k and v as one over their stacked channels
            self.convs["qkv"] = ShortConv(sum(self.widths), conv_size, bias=conv_bias)
        self.output = HeadOutput(
            d_model,
            heads,
            self.value_width // heads,
            gate=output_gate,
            norm_eps=check_positive_eps("output_norm_eps", output_norm_eps),
        )

    def log_decay(self, u: Tensor) -> Tensor | None:
        """The decay multiplying the Householder factor: none for DeltaNet."""
        return None

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        qkv = self.qkv(x)
        if self.convs:
            q, k, v = self.convolve("qkv", qkv, state).split(self.widths, dim=-1)
        else:
            q, k, v = qkv.split(self.widths, dim=-1)
            q, k = F.silu(q), F.silu(k)
        q, k = self._normalize(split_heads(q, self.key_heads)), self._normalize(self._per_factor(k, self.key_heads))
        if self.key_heads != self.heads:  # [B, T, H_k, (n,) K] -> [B, T, H, (n,) K]: each serves consecutive heads
            q, k = (t.repeat_interleave(self.heads // self.key_heads, dim=2) for t in (q, k))
        beta = torch.sigmoid(self._per_factor(self.beta(x), self.heads, 1)) * (
            2.0 if self.negative_eigenvalues else 1.0
        )
        inputs = Dynamics(
            q,
            k,
            self._per_factor(v, self.heads),
            householder=beta,
            scale=beta * q.shape[-1] ** -0.5,
            log_decay=self.log_decay(x),
        )
        return inputs, x

    def _per_factor(self, x: Tensor, heads: int, width: int | None = None) -> Tensor:
        """``[B, T, n·H·d] -> [B, T, H, n, d]`` (factor-major channels, as flash-linear-attention's DeltaProduct),
        ``[B, T, H, d]`` for one factor; ``width=1``: ``[B, T, H, n]`` or ``[B, T, H]``."""
        if self.householders == 1:
            return x if width == 1 else split_heads(x, heads)
        per = x.unflatten(-1, (self.householders, heads, -1)).movedim(2, 3)  # [B, T, H, n, d]
        return per.squeeze(-1) if width == 1 else per

    def _normalize(self, x: Tensor) -> Tensor:
        if self.qk_norm_eps is None:
            return l2_normalize(x)
        return l2_normalize(x, self.qk_norm_eps, inside_root=True)

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        return self.output(core, extras)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, value_width={self.value_width}"


MIXER = DeltaNet
