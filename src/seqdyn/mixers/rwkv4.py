"""RWKV-4's time mixing (Peng et al. 2023, "RWKV: Reinventing RNNs for the Transformer Era",
https://arxiv.org/abs/2305.13048; transformers' ``RwkvSelfAttention``): per channel an exponentially decayed average
of the values weighted by e^{k}, with a bonus for the current token, gated by the receptance.

Per channel c of the attention width A, with ``x'_t = x_{t−1}`` (the token shift, 0 before the start)::

    k_t = W_k (μ_k ⊙ x_t + (1 − μ_k) ⊙ x'_t),   v_t, r_t likewise with μ_v, μ_r      (eqs. 11–13)
    wkv_t = (Σ_{j<t} e^{−(t−1−j) w + k_j} v_j + e^{u + k_t} v_t)
            / (Σ_{j<t} e^{−(t−1−j) w + k_j} + e^{u + k_t})                            (eq. 14, w = e^{time_decay})
    y_t = W_o (σ(r_t) ⊙ wkv_t)                                                         (eq. 15)

Coefficient form: every channel a head (K = 1) with the identity readout, the query 1, the impulse b_j = e^{k_j}
and the scalar decay Λ = e^{−w}; the values are ``[v_t, 1]``, so the operator's state holds the numerator and the
denominator together, and ``wkv_t`` reads the state before the token's step plus the token's own term e^{u + k_t}
(the bonus of RWKV-5/6, here inside the normalizer's sum as well): the normalized coefficients
``α_tj = e^{−(t−1−j) w + k_j} / Σ_i (…)``, ``α_tt = e^{u + k_t} / Σ_i (…)``.

The state is kept at the reference ``M_t = max(M_{t−1} − w, k_t)`` (transformers' running maximum, in closed form
``M_t = max_{j≤t} (k_j − (t − j) w)``): the operator runs on ``S_t e^{−M_t}``, whose impulse ``e^{k_t − M_t}`` and
decay ``e^{−w − (M_t − M_{t−1})}`` never exceed 1 and whose denominator lies in [1, t + 1] — exact for keys of any
size, as transformers' (numerator, denominator, maximum) state is; the streaming state carries ``M``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqdyn.core.dsf import DSF, from_coefficients
from seqdyn.core.dynamics import Dynamics
from seqdyn.core.evolution import running_log_maximum
from seqdyn.core.operator import coefficients as operator_coefficients
from seqdyn.core.packing import Packing
from seqdyn.layers import TokenShift
from seqdyn.layers.params import check_positive
from seqdyn.mixers.base import CoefficientMixer, MixerState


def shift_mixed(x: Tensor, previous: Tensor, mix: Tensor) -> Tensor:
    """RWKV's token-shift interpolation ``μ ⊙ x_t + (1 − μ) ⊙ x_{t−1}`` (Peng et al. 2023 eqs. 11–13, 17–18)."""
    return x * mix + previous * (1 - mix)


def _decayed_maxima(k: Tensor, rate: Tensor, initial: Tensor) -> tuple[Tensor, Tensor]:
    """``(M_{t−1}, M_t)`` of ``M_t = max(M_{t−1} − w, k_t)`` from ``M_{−1} = initial`` ``[B, 1, A]``, for ``k``
    ``[B, T, A]`` and ``w`` ``[A]`` (float64; ``j w`` stays exact to ~1e-10 up to millions of steps)."""
    decayed = (torch.arange(k.shape[1], dtype=k.dtype, device=k.device)[None, :, None] + 1) * rate  # (t + 1) w
    levels = running_log_maximum(k, -decayed, initial, dim=1)  # G_t = −(t + 1) w from M_{−1}
    return torch.cat([initial, levels[:, :-1]], dim=1), levels


@dataclass
class Reading:
    """What turns the operator's outputs (the states ``S_t e^{−M_t}`` read by q = 1, ``[B, T, A, 2]``) into
    ``wkv``: ``u + k_t``, the values, ``M_{t−1}`` and ``M_t`` (float64), the state the call starts from
    ``[B, 1, A, 2]`` (None: zeros) and the packing (whose sequences start from zeros)."""

    current: Tensor
    values: Tensor
    before: Tensor
    levels: Tensor
    start: Tensor | None
    packing: Packing | None

    def weights(self) -> tuple[Tensor, Tensor]:
        """``(e^{M_{t−1} − p_t}, e^{u + k_t − p_t})`` with ``p_t = max(M_{t−1}, u + k_t)`` ``[B, T, A]``: the
        weights of the state before token t and of the token's own term, the larger one 1."""
        current = self.current.double()
        top = torch.maximum(self.before, current)
        dtype = self.current.dtype
        return torch.exp(self.before - top).to(dtype), torch.exp(current - top).to(dtype)

    def wkv(self, read: Tensor) -> Tensor:
        """``wkv_t = (e₁ a_{t−1} + e₂ v_t) / (e₁ b_{t−1} + e₂)`` ``[B, T, A]`` from the read states ``[B, T, A, 2]``."""
        start = torch.zeros_like(read[:, :1]) if self.start is None else self.start.to(read.dtype)
        earlier = torch.cat([start, read[:, :-1]], dim=1)  # the state before each token
        if self.packing is not None:
            earlier = earlier.masked_fill(self.packing.starts[None, :, None, None], 0.0)
        earlier_weight, own_weight = self.weights()
        numerator = earlier_weight * earlier[..., 0] + own_weight * self.values
        return numerator / (earlier_weight * earlier[..., 1] + own_weight)


def wkv_inputs(
    k: Tensor,
    v: Tensor,
    time_decay: Tensor,
    time_first: Tensor,
    start: tuple[Tensor, Tensor] | None = None,
    packing: Packing | None = None,
) -> tuple[Dynamics, Reading]:
    """The operator's description of RWKV-4's WKV (eq. 14) for keys and values ``[B, T, A]``, ``time_decay``
    (log w) and ``time_first`` (u) ``[A]`` (module docstring), and what reads ``wkv`` off its outputs.  ``start``:
    the state the call continues, its numerator and denominator ``[B, A, 2]`` stored at the reference
    ``M`` ``[B, A]``; packed sequences each start from zeros."""
    rate = torch.exp(time_decay).detach().double()  # w [A]
    initial = None if start is None else start[1].double().unsqueeze(1)  # [B, 1, A]
    before, levels = references(k.detach().double(), rate, initial, packing)  # M_{t−1}, M_t [B, T, A]
    ones = torch.ones_like(v)
    dynamics = Dynamics(
        ones.unsqueeze(-1),  # q = 1 [B, T, A, 1]
        ones.unsqueeze(-1),
        torch.stack([v, ones], dim=-1),  # [v, 1]: numerator and denominator [B, T, A, 2]
        log_decay=-torch.exp(time_decay) - (levels - before).to(k.dtype),  # −w − (M_t − M_{t−1})
        log_scale=k - levels.to(k.dtype),  # b_t = e^{k_t − M_t}
        scale=None,
    )
    first = None if start is None else start[0].unsqueeze(1)  # [B, 1, A, 2]
    return dynamics, Reading(k + time_first, v, before, levels, first, packing)


def references(
    k: Tensor, rate: Tensor, initial: Tensor | None, packing: Packing | None = None
) -> tuple[Tensor, Tensor]:
    """``(M_{t−1}, M_t)`` ``[B, T, A]`` in float64: ``M_t = max(M_{t−1} − w, k_t)`` from ``initial`` ``[B, 1, A]``
    (``−10^30`` at a start), in closed form ``M_t + t w = max(M_{−1} − w, max_{j≤t} (k_j + j w))``; packed
    sequences each from ``−10^30``."""
    if initial is None:
        initial = k.new_full((k.shape[0], 1, k.shape[2]), -1e30)
    if packing is None:
        return _decayed_maxima(k, rate, initial)
    before, levels = torch.empty_like(k), torch.empty_like(k)
    bounds = packing.cu_seqlens.tolist()
    for first, end in zip(bounds[:-1], bounds[1:]):  # each packed sequence from its own start
        before[:, first:end], levels[:, first:end] = _decayed_maxima(k[:, first:end], rate, initial[:1])
    return before, levels


class RWKV4(CoefficientMixer):
    """RWKV-4's time mixing: per channel a decayed, normalized average of the values weighted by e^{k}, a bonus for
    the current token, gated by σ(r).

    Args:
        attention_width: A, the channels of the key, value and receptance (None: d_model, RWKV-4's
            ``attention_hidden_size``).
    """

    name = "rwkv4"

    def __init__(self, d_model: int, attention_width: int | None = None, chunk_size: int = 64):
        super().__init__(d_model, chunk_size)
        width = d_model if attention_width is None else check_positive("attention_width", attention_width)
        self.attention_width = width
        self.convs["shift"] = TokenShift(d_model)
        self.time_decay = nn.Parameter(torch.zeros(width))  # log w
        self.time_first = nn.Parameter(torch.zeros(width))  # u
        self.time_mix_key = nn.Parameter(torch.zeros(d_model))  # μ_k
        self.time_mix_value = nn.Parameter(torch.zeros(d_model))  # μ_v
        self.time_mix_receptance = nn.Parameter(torch.zeros(d_model))  # μ_r
        self.key = nn.Linear(d_model, width, bias=False)
        self.value = nn.Linear(d_model, width, bias=False)
        self.receptance = nn.Linear(d_model, width, bias=False)
        self.output = nn.Linear(width, d_model, bias=False)
        self._init_as_authors()

    @torch.no_grad()
    def _init_as_authors(self) -> None:
        """The first layer's initialization of the authors (transformers' ``RwkvPreTrainedModel._init_weights`` at
        layer 0): decay speeds −5 + 8 (c / (A − 1))^0.7, the bonus 1 (as transformers writes it), μ_k = μ_v =
        c / D and μ_r = (c / D)^½."""
        width, channels = self.attention_width, torch.arange(self.d_model) / self.d_model
        self.time_decay.copy_(-5 + 8 * (torch.arange(width) / max(width - 1, 1)) ** 0.7)
        self.time_first.fill_(1.0)
        self.time_mix_key.copy_(channels)
        self.time_mix_value.copy_(channels)
        self.time_mix_receptance.copy_(channels**0.5)

    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, tuple[Tensor, Reading]]:
        previous = self.convolve("shift", x, state)  # x_{t−1}
        k = self.key(shift_mixed(x, previous, self.time_mix_key))  # [B, T, A]
        v = self.value(shift_mixed(x, previous, self.time_mix_value))
        r = torch.sigmoid(self.receptance(shift_mixed(x, previous, self.time_mix_receptance)))
        start = None
        if state.packing is None and state.core is not None:
            start = (state.core[:, :, 0], state.scale[:, 0])  # [B, A, 2], [B, A]
        dynamics, reading = wkv_inputs(k, v, self.time_decay, self.time_first, start, state.packing)
        if state.packing is None:
            state.scale = reading.levels[:, -1:]
        return dynamics, (r, reading)

    def core_output(self, core: Tensor, extras: tuple[Tensor, Reading]) -> Tensor:
        receptance, reading = extras
        return self.output(receptance * reading.wkv(core))  # W_o (σ(r) ⊙ wkv)

    def core(self, x: Tensor, backend: str = "auto") -> tuple[Tensor, Tensor]:
        """``wkv`` and the values it averages, ``[B, T, A, 1]`` each."""
        self.check_input(x)
        inputs, (_, reading) = self.core_inputs(x, MixerState())
        return reading.wkv(self.run_core(inputs, self.check_backend(backend))).unsqueeze(-1), reading.values[..., None]

    def coefficients(self, x: Tensor) -> Tensor:
        """``α_tj = e^{−(t−1−j) w + k_j} / Σ_i (…)`` for ``j < t``, ``e^{u + k_t} / Σ_i (…)`` on the diagonal
        ``[B, A, T, T]``: the operator's rows of the state before each token, with the token's own term."""
        self.check_input(x)
        inputs, (_, reading) = self.core_inputs(x, MixerState())
        earlier, own = reading.weights()  # [B, T, A] each
        rows = operator_coefficients(inputs)  # [B, A, T, T], row t: the state after token t
        before = torch.cat([torch.zeros_like(rows[:, :, :1]), rows[:, :, :-1]], dim=2)  # row t: the state before it
        unnormalized = before * earlier.transpose(1, 2)[..., None] + torch.diag_embed(own.transpose(1, 2))
        return unnormalized / unnormalized.sum(-1, keepdim=True)

    def dsf(self, x: Tensor) -> DSF:
        """A normalized average has no finite DSF of its own: the realization that keeps every value."""
        return from_coefficients(self.coefficients(x), 1)

    def state_size(self, seq_len: int) -> int:
        return super().state_size(seq_len) + self.attention_width  # and the stabilizer m

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, attention_width={self.attention_width}"


MIXER = RWKV4
