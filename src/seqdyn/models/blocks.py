"""The two residual blocks around a mixer (Sieber et al. 2025 appendix E, "Block Design").

``transformer`` (Type 1, pre-norm; Vaswani et al. 2017, GPT-2)::

    x = x + mixer(norm₁ x)
    x = x + MLP(norm₂ x)                                (no MLP: the second line is skipped)

``gated`` (Type 2, Gated-DeltaNet / Mamba style; Yang et al. 2025, Gu & Dao 2023), inner width I = expand·D::

    u = norm₁ x
    a = W_in u,  g = W_gate u                            (D → I each, no bias)
    a = SiLU(conv(a))                                    (short causal depthwise conv when ``short_conv``; else SiLU(a))
    x = x + W_out (RMSNorm(mixer(a)) ⊙ SiLU(g))          (the mixer runs at width I; W_out: I → D, no bias)
    x = x + MLP(norm₂ x)

With ``bidirectional`` models (:class:`Bidirectional`) a block's mixer is a pair that reads the sequence both ways.

With ``norm_position="post"`` (Vaswani et al. 2017's original order; Gupta et al. 2022 §A.6: "All experiments use
post-norm Layer Normalization") every residual branch ``x + f(norm x)`` becomes ``norm(x + f(x))``; with ``"output"``
(OLMo 2's reordered norm, OLMo-hybrid's attention layers) ``x + norm(f(x))``; with ``"normed"`` (MiniMax-01's) the
residual is the normed stream, ``u = norm(x)``, ``x ← α·u + f(u)`` (α the block's ``residual_scale``).

The residual projections — the last linear map of each residual branch, which the model's initialization scales
by 1/√(2·layers) — are the mixer's output projection and ``fc2`` (transformer), ``W_out`` and ``fc2`` (gated).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.packing import Packing
from seqdyn.layers.conv import ShortConv
from seqdyn.layers.mlp import build_mlp
from seqdyn.layers.norms import RMSNorm
from seqdyn.mixers.base import Mixer

NORMS = ("layernorm", "rmsnorm")
BLOCKS = ("transformer", "gated")
NORM_POSITIONS = ("pre", "post", "output", "normed")


def make_norm(kind: str, dim: int, eps: float | None = None) -> nn.Module:
    """``nn.LayerNorm(dim)`` (with bias) or :class:`RMSNorm` ``(dim)``, with ``eps`` where given (else each one's
    default: 1e-5 and 1e-6)."""
    if kind == "layernorm":
        return nn.LayerNorm(dim) if eps is None else nn.LayerNorm(dim, eps=eps)
    if kind == "rmsnorm":
        return RMSNorm(dim) if eps is None else RMSNorm(dim, eps=eps)
    raise ValueError(f"norm: expected one of {list(NORMS)}, got {kind!r}")


#: why a bidirectional model has no streaming state
NO_STEP = (
    "model.bidirectional: a bidirectional model reads the whole sequence both ways; it cannot be run "
    "position by position (init_state / step)"
)


class Bidirectional(nn.Module):
    """A non-causal mixer made of two of the same kind, ``y = f(x) + flip(b(flip(x)))``: ``forward_mixer`` reads
    the sequence left to right, ``backward_mixer`` right to left (Gupta et al. 2022 §3.4: "we trained bidirectional
    models" on Pathfinder-Segmentation).  Having read the whole sequence, it cannot stream."""

    def __init__(self, forward_mixer: Mixer, backward_mixer: Mixer):
        super().__init__()
        self.forward_mixer, self.backward_mixer = forward_mixer, backward_mixer
        self.d_model, self.name = forward_mixer.d_model, forward_mixer.name

    def forward(self, x: Tensor, backend: str = "auto") -> Tensor:
        backward = self.backward_mixer(x.flip(1), backend=backend).flip(1)  # x: [B, T, D], time reversed
        return self.forward_mixer(x, backend=backend) + backward

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(self.forward_mixer.backends)

    def backend_for(self, x: Tensor, backend: str = "auto") -> str:
        return self.forward_mixer.backend_for(x, backend)

    @property
    def last_backend(self) -> str | None:
        """The backend the left-to-right mixer's last forward computed with."""
        return self.forward_mixer.last_backend

    def output_projections(self) -> list[nn.Linear]:
        return [
            out
            for out in (self.forward_mixer.output_projection(), self.backward_mixer.output_projection())
            if out is not None
        ]

    def init_state(self, batch: int) -> Any:
        raise ValueError(NO_STEP)

    def step(self, x_t: Tensor, state: Any) -> tuple[Tensor, Any]:
        raise ValueError(NO_STEP)


def mixer_projections(mixer: Mixer | Bidirectional) -> list[nn.Linear]:
    """The output projections of a block's mixer (two for a :class:`Bidirectional` one, one per part of a
    parallel one)."""
    if hasattr(mixer, "output_projections"):
        return mixer.output_projections()
    out = mixer.output_projection()
    return [] if out is None else [out]


class _Block(nn.Module):
    """What both blocks share: where the norms sit, and the optional MLP sub-block ``x + MLP(norm₂ x)``."""

    def _init_mlp(
        self,
        d_model: int,
        norm: str,
        mlp: str,
        mlp_ratio: float,
        norm_position: str,
        norm_eps: float | None = None,
        moe: dict[str, Any] | None = None,
        residual_scale: float = 1.0,
    ) -> None:
        if norm_position not in NORM_POSITIONS:
            raise ValueError(f"norm_position: expected one of {list(NORM_POSITIONS)}, got {norm_position!r}")
        self.norm_position, self.residual_scale = norm_position, residual_scale
        module = build_mlp(mlp, d_model, mlp_ratio, moe)
        self.norm2 = make_norm(norm, d_model, norm_eps) if module is not None else None
        self.mlp = module

    def _residual(
        self, x: Tensor, norm: nn.Module, branch: Callable[[Tensor], Tensor], side: Tensor | None = None
    ) -> Tensor:
        """Pre-norm ``x + branch(norm x)``, post-norm ``norm(x + branch(x))``, output-norm ``x + norm(branch(x))`` or
        the normed residual ``α·norm(x) + branch(norm(x))``; a ``side`` input (pre-norm only: a shared block's, see
        :mod:`seqdyn.models.shared`) enters the branch and not the residual, ``x + branch(norm(x + side))``."""
        if side is not None:
            if self.norm_position != "pre":
                raise ValueError(f"side: a shared block's input needs pre-norm blocks, not {self.norm_position!r}")
            return x + branch(norm(x + side))
        if self.norm_position == "post":
            return norm(x + branch(x))
        if self.norm_position == "output":
            return x + norm(branch(x))
        if self.norm_position == "normed":
            u = norm(x)
            return self.residual_scale * u + branch(u)
        return x + branch(norm(x))

    def _mix(self, u: Tensor, backend: str, packing: Packing | None) -> Tensor:
        """The mixer on ``u``, on packed sequences with ``packing``."""
        if packing is None:
            return self.mixer(u, backend=backend)
        return self.mixer(u, backend=backend, cu_seqlens=packing)

    def _mlp(self, x: Tensor) -> Tensor:
        return x if self.mlp is None else self._residual(x, self.norm2, self.mlp)

    def _mlp_projection(self) -> list[nn.Linear]:
        return [] if self.mlp is None else self.mlp.output_projections()


class TransformerBlock(_Block):
    """Type 1: ``x + mixer(norm x)`` then ``x + MLP(norm x)``; the mixer runs at the model width."""

    def __init__(
        self,
        d_model: int,
        mixer: Mixer,
        norm: str = "layernorm",
        mlp: str = "gelu",
        mlp_ratio: float = 4.0,
        norm_position: str = "pre",
        norm_eps: float | None = None,
        moe: dict[str, Any] | None = None,
        residual_scale: float = 1.0,
    ):
        super().__init__()
        if mixer.d_model != d_model:
            raise ValueError(
                f"mixer: a transformer block needs a mixer of width d_model={d_model}, got {mixer.d_model}"
            )
        self.norm1 = make_norm(norm, d_model, norm_eps)
        self.mixer = mixer
        self._init_mlp(d_model, norm, mlp, mlp_ratio, norm_position, norm_eps, moe, residual_scale)

    def forward(
        self, x: Tensor, backend: str = "auto", packing: Packing | None = None, side: Tensor | None = None
    ) -> Tensor:
        """``[B, T, D]``, or packed sequences ``[1, T, D]`` with ``packing`` (only the mixer reads across steps);
        ``side``: a shared block's input to the mixer."""
        return self._mlp(self._residual(x, self.norm1, lambda u: self._mix(u, backend, packing), side))

    def init_state(self, batch: int) -> Any:
        return self.mixer.init_state(batch)

    def forward_with_state(
        self, x: Tensor, state: Any, backend: str = "auto", side: Tensor | None = None
    ) -> tuple[Tensor, Any]:
        """Positions ``[B, T, D]`` that follow ``state``: ``(x [B, T, D], state)``, the mixer run from its state."""
        ran = []

        def branch(u: Tensor) -> Tensor:
            y, new_state = self.mixer(u, backend=backend, state=state, return_state=True)
            ran.append(new_state)
            return y

        x = self._mlp(self._residual(x, self.norm1, branch, side))
        return x, ran[0]

    def step(self, x_t: Tensor, state: Any, side: Tensor | None = None) -> tuple[Tensor, Any]:
        """One position ``[B, D]``: ``(x_t [B, D], state)``."""
        stepped = []

        def branch(u: Tensor) -> Tensor:
            y, new_state = self.mixer.step(u, state)
            stepped.append(new_state)
            return y

        x_t = self._mlp(self._residual(x_t, self.norm1, branch, side))
        return x_t, stepped[0]

    def residual_projections(self) -> list[nn.Linear]:
        return mixer_projections(self.mixer) + self._mlp_projection()


@dataclass
class GatedState:
    """Streaming state of a :class:`GatedBlock`: the short convolution's last inputs and the mixer's state."""

    conv: Tensor | None
    mixer: Any


class GatedBlock(_Block):
    """Type 2: in- and gate projections to the mixer's width, short conv + SiLU, mixer, RMSNorm ⊙ SiLU(gate),
    out-projection, residual; then the MLP sub-block.  The inner width is the mixer's ``d_model``."""

    def __init__(
        self,
        d_model: int,
        mixer: Mixer,
        norm: str = "layernorm",
        mlp: str = "gelu",
        mlp_ratio: float = 4.0,
        short_conv: bool = False,
        conv_size: int = 4,
        norm_position: str = "pre",
        norm_eps: float | None = None,
        moe: dict[str, Any] | None = None,
        residual_scale: float = 1.0,
    ):
        super().__init__()
        inner = mixer.d_model
        self.norm1 = make_norm(norm, d_model, norm_eps)
        self.in_proj = nn.Linear(d_model, inner, bias=False)
        self.gate_proj = nn.Linear(d_model, inner, bias=False)
        self.conv = ShortConv(inner, conv_size, activation=True) if short_conv else None
        self.mixer = mixer
        self.out_norm = RMSNorm(inner)
        self.out_proj = nn.Linear(inner, d_model, bias=False)
        self._init_mlp(d_model, norm, mlp, mlp_ratio, norm_position, norm_eps, moe, residual_scale)

    def _mixer_input(
        self, u: Tensor, conv_state: Tensor | None, packing: Packing | None = None
    ) -> tuple[Tensor, Tensor | None]:
        a = self.in_proj(u)
        if self.conv is None:
            return F.silu(a), None
        if packing is not None:
            return self.conv(a, positions=packing.position)
        return self.conv(a, conv_state)  # SiLU inside

    def _output(self, m: Tensor, u: Tensor) -> Tensor:
        return self.out_proj(self.out_norm(m) * F.silu(self.gate_proj(u)))

    def forward(
        self, x: Tensor, backend: str = "auto", packing: Packing | None = None, side: Tensor | None = None
    ) -> Tensor:
        """``[B, T, D]``, or packed sequences ``[1, T, D]`` with ``packing`` (the short convolution restarts at each
        sequence's start; the mixer keeps them apart); ``side``: a shared block's input to the mixer."""

        def branch(u: Tensor) -> Tensor:
            a, _ = self._mixer_input(u, None, packing)
            return self._output(self._mix(a, backend, packing), u)

        return self._mlp(self._residual(x, self.norm1, branch, side))

    def init_state(self, batch: int) -> GatedState:
        conv = None if self.conv is None else self.conv.init_state(batch)
        return GatedState(conv, self.mixer.init_state(batch))

    def forward_with_state(
        self, x: Tensor, state: GatedState, backend: str = "auto", side: Tensor | None = None
    ) -> tuple[Tensor, GatedState]:
        """Positions ``[B, T, D]`` that follow ``state``: the short convolution from its last inputs, the mixer
        from its state."""
        ran = []

        def branch(u: Tensor) -> Tensor:
            a, conv = self._mixer_input(u, state.conv)
            m, mixer_state = self.mixer(a, backend=backend, state=state.mixer, return_state=True)
            ran.append(GatedState(conv, mixer_state))
            return self._output(m, u)

        x = self._mlp(self._residual(x, self.norm1, branch, side))
        return x, ran[0]

    def step(self, x_t: Tensor, state: GatedState, side: Tensor | None = None) -> tuple[Tensor, GatedState]:
        """One position ``[B, D]``: ``(x_t [B, D], state)``."""
        stepped = []

        def branch(u: Tensor) -> Tensor:
            a, conv = self._mixer_input(u.unsqueeze(1), state.conv)
            m, mixer_state = self.mixer.step(a[:, 0], state.mixer)
            stepped.append(GatedState(conv, mixer_state))
            return self._output(m, u)

        x_t = self._mlp(self._residual(x_t, self.norm1, branch, side))
        return x_t, stepped[0]

    def residual_projections(self) -> list[nn.Linear]:
        return [self.out_proj] + self._mlp_projection()
