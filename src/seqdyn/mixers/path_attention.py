"""PaTH attention (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating Householder Transformations",
https://arxiv.org/abs/2505.16381): softmax attention whose key j reaches query i through the Householder
transformations of the tokens between them — positions from the data, in place of RoPE.

Per head (K = V = D/H)::

    w_t = L2(SiLU(ShortConv(W_w2 W_w1 u_t))),   β_t = 2σ(w_βᵀ u_t + b_β)             (rank-32 w, eigenvalues ∈ (−1, 1])
    α_ij ∝ exp(q_iᵀ (I − β_i w_i w_iᵀ) ⋯ (I − β_{j+1} w_{j+1} w_{j+1}ᵀ) k_j / √K)   (eq. 3)
    y_i = W_O Σ_j α_ij v_j   (PaTH-FoX: times FoX's forget gate (Π_{l=j+1}^{i} f_l)^{1/√K} outside the exponential)

The authors' kernel (flash-linear-attention's ``parallel_path_attn``) scales the gate's log with the scores,
``exp((s_ij + Σ log f_l) / √K)``; so does this mixer.

Coefficient form: this is the one operator as it stands — φ = exp, Λ_t = I − β_t w_t w_tᵀ (a Householder factor
with its own direction), b = K^-½, η = Σ_j α_ij — with, for PaTH-FoX, ``outer_log_decay = log f``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.layers import ShortConv, rms_norm
from seqdyn.layers.norms import l2_normalize
from seqdyn.layers.params import check_positive
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_heads, split_heads


class PaTHAttention(CoefficientMixer):
    """PaTH attention: softmax attention with accumulated data-dependent Householder transformations of the keys.

    Args:
        heads: the number of heads H (a divisor of d_model).
        direction_rank: the rank of the projection W_w2 W_w1 that makes the Householder directions (32).
        conv_size: the width of the short convolution with SiLU on the directions (3; 0: none).
        forget_gate: multiply the weights by FoX's forget gate f_t = σ(w_fᵀ u_t + b_f) outside the exponential,
            its log scaled by K^-½ as the scores (PaTH-FoX, as the authors' kernel); False: PaTH alone.
        qk_norm: RMS-normalize q and k per head with a learned weight shared by the heads.
    """

    name = "path_attention"

    def __init__(
        self,
        d_model: int,
        heads: int = 4,
        direction_rank: int = 32,
        conv_size: int = 3,
        forget_gate: bool = False,
        qk_norm: bool = False,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)  # W_Q, W_K, W_V stacked: one product
        rank = check_positive("direction_rank", direction_rank)
        self.direction = nn.Sequential(nn.Linear(d_model, rank, bias=False), nn.Linear(rank, d_model, bias=False))
        if conv_size:
            self.convs["w"] = ShortConv(d_model, conv_size, bias=False)
        self.beta = nn.Linear(d_model, heads, bias=True)
        self.forget = nn.Linear(d_model, heads, bias=True) if forget_gate else None
        self.qk_norm = nn.Parameter(torch.ones(2, d_model // heads)) if qk_norm else None
        self.out = nn.Linear(d_model, d_model, bias=False)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))
        if self.qk_norm is not None:
            q, k = rms_norm(q, self.qk_norm[0], 1e-6), rms_norm(k, self.qk_norm[1], 1e-6)
        w = self.direction(x)
        w = self.convolve("w", w, state) if self.convs else w
        return Dynamics(
            q,
            k,
            v,
            readout="exp",
            normalizer="sum",
            householder=2 * torch.sigmoid(self.beta(x)),
            householder_dir=l2_normalize(split_heads(w, self.heads)),
            outer_log_decay=None if self.forget is None else F.logsigmoid(self.forget(x)) * q.shape[-1] ** -0.5,
        ), x

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        return self.out(core.flatten(-2))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}"


MIXER = PaTHAttention
