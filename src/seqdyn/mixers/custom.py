"""A mixer that exposes the operator's knobs directly, so Sieber et al. 2025's ablations (§5, appendix D) are configs.

Per head (key dim K, value dim V), from projections ``q, k, v`` of the input u (optionally through a short
convolution, the Type-2 block's preprocessing) and an optional feature map ψ on q and k::

    x_i^(j) = Λ_i ⋯ Λ_{j+1} b_j ψ(k_j),   α_ij = φ(ψ(q_i)ᵀ x_i^(j)),   y_i = (1/η_i) Σ_j α_ij v_j

with every choice of the coefficient dynamics of Sieber et al. 2025 (eqs. 2–4) an option: the readout φ (Principle 2),
the transition Λ_t = D_t (I − β_t w_t w_tᵀ) through ``decay`` and ``householder`` (Principles 3, 4 and 6), the key scale
b_t (Principle 5) and the normalizer η.  ``seqdyn mixers custom`` says what each value means.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor, nn

from seqdyn.core.dynamics import Dynamics
from seqdyn.core.readouts import READOUTS
from seqdyn.features import FEATURE_MAPS, FeatureMap
from seqdyn.layers import HeadOutput, ShortConv
from seqdyn.layers.gates import GLADecay, MambaDecay
from seqdyn.mixers.base import CoefficientMixer, MixerState, check_choice, check_heads, check_positive, split_heads

Decay = Literal["none", "constant", "scalar", "diagonal"]
DecayParam = Literal["gla", "mamba2"]
Householder = Literal["none", "keys", "learned"]
Scale = Literal["inv_sqrt", "one", "input", "input_inv_sqrt", "delta"]
Normalizer = Literal["none", "sum", "abs_max1", "learned", "state"]
Readout = Literal[tuple(READOUTS)]
DECAYS, DECAY_PARAMS, HOUSEHOLDERS = get_args(Decay), get_args(DecayParam), get_args(Householder)
SCALES, NORMALIZERS = get_args(Scale), get_args(Normalizer)


def _check_combination(
    decay: Decay,
    decay_param: DecayParam,
    constant_decay: float,
    householder: Householder,
    householder_beta: object,
    scale: Scale,
) -> None:
    """Raise ``ValueError`` for options of :class:`Custom` that are valid alone but not together: scale delta
    without Mamba-2's step, a constant decay λ ≤ 0, a Householder β that is neither ``"input"`` nor a number."""
    if scale == "delta" and not (decay in ("scalar", "diagonal") and decay_param == "mamba2"):
        raise ValueError(
            "scale: 'delta' couples b to the Mamba-2 step Δ; it needs decay='scalar' or 'diagonal' "
            "with decay_param='mamba2'"
        )
    if decay == "constant" and not constant_decay > 0:
        raise ValueError(f"constant_decay: expected λ > 0, got {constant_decay}")
    if householder != "none" and not (householder_beta == "input" or isinstance(householder_beta, (int, float))):
        raise ValueError(f"householder_beta: expected 'input' or a number, got {householder_beta!r}")


class Custom(CoefficientMixer):
    """The operator with every knob an option: Sieber et al. 2025's ablations as configs (GLA, Mamba-2, DeltaNet, mLSTM,
    normalized attention, ReLU or softmax readouts, ... by choosing values; docs/recipes.md has the recipes).

    Args:
        heads: the number of heads H; each has its own decay, β and scale gates.
        key_dim: the key (and query) dimension K of a head, the state's rows; None: d_model / heads.
        value_dim: the value dimension V of a head, the state's columns; None: d_model / heads.
        readout: the readout φ of the scores s_ij = ψ(q_i)ᵀ x_i^(j) (Sieber et al. 2025 §4.1, Principle 2): identity
            (linear: linear attention and every SSM; the only readout with a finite state), exp (softmax attention
            with normalizer sum), softplus, relu (ReLU attention), sigmoid, elu1 (elu(s) + 1 = relu(s) + e^{min(s,
            0)}), square (s²). Any but identity keeps every key: cost quadratic in the length.
        feature_map: a map ψ applied to q and k before the operator, ψ(q)ᵀψ(k) ≈ a kernel of q and k (linear
            attention's kernel trick, Principle 2.1): identity, elu1 (elu + 1, Katharopoulos et al. 2020), relu,
            softplus, exp, square (elementwise x²); None: no map.
        decay: the diagonal part D_t of the transition Λ_t (Principles 3 and 4): none (D = I, nothing forgotten:
            plain linear attention), constant (D = λ·I with the fixed λ = constant_decay for every token: relative
            position as in RetNet or ALiBi), scalar (D_t = exp(g_t)·I, one gate g_t ≤ 0 per head computed from the
            token, as Mamba-2 and mLSTM), diagonal (D_t = diag(exp(g_t)), one gate per key channel, as GLA and
            Mamba-1); how g_t is computed is decay_param.
        decay_param: how an input-dependent decay (scalar, diagonal) is computed: gla (g_t = logsigmoid(W₂W₁u_t) /
            16 through a rank-16 bottleneck, Yang et al. 2023) or mamba2 (g_t = Δ_t·A with the step Δ_t =
            softplus(W_Δ u_t + b_Δ) and a learned A = −exp(A_log) < 0, Dao & Gu 2024; diagonal takes the mean Δ over a
            head's channels for scale delta).
        constant_decay: λ of decay constant; λ < 1 forgets geometrically, λ = 1 is no decay, λ > 1 is the unstable
            transition of Principle 6.
        householder: the Householder factor (I − β_t w_t w_tᵀ) of Λ_t (Principle 4): none (Λ_t = D_t), keys (w_t =
            the normalized key k_t: the delta rule of DeltaNet, Schlag et al. 2021, and with a decay Gated DeltaNet),
            learned (a learned unit vector w per head, the same for every token).
        householder_beta: β_t of the Householder factor: input (β_t = σ(W_β u_t) ∈ (0, 1), the delta rule's
            learning rate) or a fixed number (1 projects the old value out, 2 is a reflection; beyond 2 the
            transition is unstable).
        scale: the scale b_j of the key when it enters the state, x_j^(j) = b_j k_j (Principle 5): inv_sqrt (b =
            K^-½, attention's scaling), one (b = 1), input (b_t = σ(W_b u_t), an input gate), input_inv_sqrt (σ(W_b
            u_t)·K^-½), delta (b_t = Δ_t, Mamba-2's discretization; needs decay scalar or diagonal with decay_param
            mamba2). DeltaNet's b_t = β_t·K^-½ is the operator's, not one of these (docs/recipes.md).
        normalizer: the normalizer η_i of y_i = (1/η_i) Σ_j α_ij v_j: none (η = 1), sum (η_i = Σ_j α_ij: a weighted
            mean, softmax attention with readout exp), abs_max1 (η_i = max(|Σ_j α_ij|, 1), mLSTM's bound), learned
            (η_t = exp(W_η u_t) from the token, normalized attention), state (η_i = max(|q_iᵀ n_i|, 1) with mLSTM's
            normalizer state n_i = Λ_i n_{i−1} + b_i k_i, for any readout; over the whole sequence, so no step()).
        short_conv: a short causal depthwise convolution with SiLU on q and k before the operator (the Type-2
            block's preprocessing of Mamba and DeltaNet).
        conv_size: the width of that convolution (taps, the current token included).
        output_gate: multiply the per-head RMS-normalized output by SiLU(W_g u_t) before the output projection (GLA,
            RetNet); False: normalize and project only.
    """

    name = "custom"

    def __init__(
        self,
        d_model: int,
        heads: int = 1,
        key_dim: int | None = None,
        value_dim: int | None = None,
        readout: Readout = "identity",
        feature_map: FeatureMap | None = None,
        decay: Decay = "none",
        decay_param: DecayParam = "mamba2",
        constant_decay: float = 0.99,
        householder: Householder = "none",
        householder_beta: Literal["input"] | float = "input",
        scale: Scale = "inv_sqrt",
        normalizer: Normalizer = "none",
        short_conv: bool = False,
        conv_size: int = 4,
        output_gate: bool = False,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, chunk_size)
        self.heads = check_heads(heads, d_model)
        self.key_dim = check_positive("key_dim", d_model // heads if key_dim is None else key_dim)
        self.value_dim = check_positive("value_dim", d_model // heads if value_dim is None else value_dim)
        self.readout = check_choice("readout", readout, READOUTS)
        self.feature_map = None if feature_map is None else check_choice("feature_map", feature_map, FEATURE_MAPS)
        self.decay_kind = check_choice("decay", decay, DECAYS)
        self.decay_param = check_choice("decay_param", decay_param, DECAY_PARAMS)
        self.householder_kind = check_choice("householder", householder, HOUSEHOLDERS)
        self.scale_kind = check_choice("scale", scale, SCALES)
        self.normalizer_kind = check_choice("normalizer", normalizer, NORMALIZERS)
        _check_combination(decay, decay_param, constant_decay, householder, householder_beta, scale)

        key_width, value_width = heads * self.key_dim, heads * self.value_dim
        self.qk = nn.Linear(d_model, 2 * key_width, bias=False)
        self.v = nn.Linear(d_model, value_width, bias=False)
        if short_conv:
            self.convs["qk"] = ShortConv(2 * key_width, conv_size)
        self.log_constant = math.log(constant_decay)
        self.decay = self._decay_module(d_model, key_width)
        self.direction = nn.Parameter(torch.randn(heads, self.key_dim)) if householder == "learned" else None
        self.householder_beta = householder_beta
        self.beta = nn.Linear(d_model, heads) if householder != "none" and householder_beta == "input" else None
        self.scale_gate = nn.Linear(d_model, heads) if scale in ("input", "input_inv_sqrt") else None
        self.eta = nn.Linear(d_model, heads) if normalizer == "learned" else None
        self.output = HeadOutput(d_model, heads, self.value_dim, gate=output_gate)

    def _decay_module(self, d_model: int, key_width: int) -> nn.Module | None:
        if self.decay_kind not in ("scalar", "diagonal"):
            return None
        width = self.heads if self.decay_kind == "scalar" else key_width
        if self.decay_param == "gla":
            return GLADecay(d_model, width)
        return MambaDecay(d_model, width)

    def _decays(self, x: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """The log decay ``[B, T, H]`` or ``[B, T, H, K]`` and, for Mamba-2's parameterization, the step Δ."""
        if self.decay_kind == "none":
            return None, None
        if self.decay_kind == "constant":
            return x.new_full((*x.shape[:2], self.heads), self.log_constant), None
        if self.decay_param == "gla":
            log_decay, step = self.decay(x), None
        else:
            log_decay, step = self.decay(x)
        if self.decay_kind == "diagonal":
            log_decay = split_heads(log_decay, self.heads)
            step = None if step is None else split_heads(step, self.heads).mean(-1)
        return log_decay, step

    def _scale(self, x: Tensor, step: Tensor | None):
        if self.scale_kind == "inv_sqrt":
            return self.key_dim**-0.5
        if self.scale_kind == "one":
            return 1.0
        if self.scale_kind == "delta":
            return step
        gate = torch.sigmoid(self.scale_gate(x))
        return gate * self.key_dim**-0.5 if self.scale_kind == "input_inv_sqrt" else gate

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Tensor]:
        qk = self.qk(x)
        if self.convs:
            qk = self.convolve("qk", qk, state)
        q, k = (split_heads(t, self.heads) for t in qk.chunk(2, dim=-1))
        if self.feature_map is not None:
            q, k = FEATURE_MAPS[self.feature_map](q), FEATURE_MAPS[self.feature_map](k)
        log_decay, step = self._decays(x)
        householder = {}
        if self.householder_kind != "none":
            if self.householder_kind == "keys":
                k = torch.nn.functional.normalize(k, dim=-1)
            else:
                direction = torch.nn.functional.normalize(self.direction, dim=-1).to(x.dtype)
                householder["householder_dir"] = direction.expand(*x.shape[:2], self.heads, self.key_dim)
            householder["householder"] = (
                torch.sigmoid(self.beta(x))
                if self.beta is not None
                else x.new_full((*x.shape[:2], self.heads), float(self.householder_beta))
            )
        scale = self._scale(x, step)
        normalizer = torch.exp(self.eta(x)) if self.normalizer_kind == "learned" else self.normalizer_kind
        if self.normalizer_kind == "state":
            normalizer = self._state_normalizer(q, k, log_decay, scale, householder)
        inputs = Dynamics(
            q,
            k,
            split_heads(self.v(x), self.heads),
            readout=self.readout,
            log_decay=log_decay,
            scale=scale,
            normalizer=normalizer,
            **householder,
        )
        return inputs, x

    def _state_normalizer(self, q: Tensor, k: Tensor, log_decay: Tensor | None, scale, householder: dict) -> Tensor:
        """η_i = max(|q_iᵀ n_i|, 1), n_i = Λ_i n_{i−1} + b_i k_i: the operator with the identity readout on values 1
        (``q_iᵀ n_i = Σ_j s_ij``, the sum of the scores), ``[B, T, H]``."""
        ones = q.new_ones(*q.shape[:3], 1)
        if q.is_meta:  # configs probe their models on the meta device: only the shape is wanted
            return ones[..., 0]
        sums = self.run_core(
            Dynamics(q, k, ones, readout="identity", log_decay=log_decay, scale=scale, normalizer="none", **householder)
        )
        return sums[..., 0].abs().clamp(min=1.0)

    def step(self, x_t: Tensor, state: MixerState) -> tuple[Tensor, MixerState]:
        self._check_streams("step()")
        return super().step(x_t, state)

    def forward_with_state(
        self, x: Tensor, state: MixerState | None = None, backend: str = "auto"
    ) -> tuple[Tensor, MixerState]:
        self._check_streams("run from a state")
        return super().forward_with_state(x, state, backend)

    def _check_streams(self, what: str) -> None:
        if self.normalizer_kind == "state":
            raise ValueError(
                f"normalizer: 'state' is computed over the whole sequence here; custom with it cannot "
                f"{what} — use normalizer='abs_max1' (the same η for the identity readout) to stream"
            )

    def core_output(self, core: Tensor, extras: Tensor) -> Tensor:
        return self.output(core, extras)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, heads={self.heads}, key_dim={self.key_dim}, readout={self.readout!r}, "
            f"decay={self.decay_kind!r}/{self.decay_param!r}, householder={self.householder_kind!r}, "
            f"scale={self.scale_kind!r}, normalizer={self.normalizer_kind!r}"
        )


MIXER = Custom
