"""Parallel hybrid heads: several mixers on the same input, their outputs added (e.g. Falcon-H1, Hymba).

For parts m = 1 … M, each a mixer of its own with its own projections::

    y_t = Σ_m mixer_m(u)_t

Falcon-H1 (Zuo et al. 2025, "Falcon-H1: A Family of Hybrid-Head Language Models", §2.1) runs softmax attention and
a Mamba-2 SSM side by side in every layer on the same normalized input and adds their outputs (each times a μP
multiplier, which a converted model folds into the projections); Hymba (Dong et al. 2024) also puts attention and
SSM heads side by side in a layer (with norms and weights of its own, which this sum leaves to its parts).  In the
coefficient view the layer is the heads of all parts side by side — as the heads of one attention layer are added
by W_O — so its coefficients are the parts' ``[B, H₁ + H₂ + …, T, T]`` and its state the parts' states together.
Each part keeps its own backends; ``backend`` asks all of them for the same one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from seqdyn.core.autotune import BackendChoice
from seqdyn.core.dsf import DSF
from seqdyn.core.packing import Packing, Padding, Sequences
from seqdyn.mixers.base import Mixer

#: the default parts: a Mamba-2 SSM beside softmax attention with rotary embeddings (e.g. Falcon-H1's layer)
DEFAULT_PARTS = (("mamba2", {}), ("softmax_attention", {"rotary": True}))


class Parallel(Mixer):
    """Mixers side by side on the same input, their outputs added: y_t = Σ_m mixer_m(u)_t.

    Args:
        parts: the mixers, each ``(name, options)`` as a model config names a mixer (at least two); default mamba2
            beside softmax attention with rotary embeddings (e.g. Falcon-H1).
    """

    name = "parallel"
    composite = True

    def __init__(self, d_model: int, parts: Any = DEFAULT_PARTS):
        super().__init__(d_model)
        from seqdyn import mixers

        if (
            not isinstance(parts, (list, tuple))
            or len(parts) < 2
            or not all(isinstance(part, (list, tuple)) and len(part) == 2 for part in parts)
        ):
            raise ValueError(
                f"parts: expected two or more (mixer name, options) pairs, e.g. {list(DEFAULT_PARTS)}, got {parts!r}"
            )
        self.parts = nn.ModuleList(mixers.build(name, d_model, **dict(options)) for name, options in parts)
        self.part_names = [part.name for part in self.parts]
        shared = [name for name in self.parts[0].backends if all(name in part.backends for part in self.parts)]
        self._backends = tuple(shared)
        self.scalar_coefficients = all(part.scalar_coefficients for part in self.parts)

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends every part computes with (``"auto"``: each part picks its own)."""
        return self._backends

    def explain_backend(self, x: Tensor, backend: str = "auto") -> BackendChoice:
        """``backend`` for every part; with ``"auto"``, each part's own choice and why, in order."""
        if self.check_backend(backend) != "auto":
            return BackendChoice.asked(backend)
        choices = [part.explain_backend(x) for part in self.parts]
        why = "; ".join(f"{part.name}: {choice} ({choice.why})" for part, choice in zip(self.parts, choices))
        return BackendChoice("auto", f"each part picks its own — {why}", "parts")

    def forward(self, x: Tensor, backend: str = "auto", *, sequences: Sequences | None = None) -> Tensor:
        """Each part on ``x``; packed sequences and the tokens of a padded batch packed end to end once, for every
        part (:meth:`forward_packed`)."""
        self.check_input(x)
        self.check_backend(backend)
        if sequences is not None and not (isinstance(sequences, Padding) and sequences.whole):
            return sequences.unpacked(self.forward_packed(sequences.packed(x), sequences.tokens, backend))
        return _added(part(x, backend) for part in self.parts)

    def forward_packed(self, x: Tensor, packing: Packing, backend: str = "auto") -> Tensor:
        """Packed sequences ``[1, T, D]``: each part on them, as if each sequence ran alone."""
        return _added(part(x, backend, cu_seqlens=packing) for part in self.parts)

    def init_state(self, batch: int) -> tuple[Any, ...]:
        """Each part's state, in order (a tuple: a list of states is one per sequence)."""
        return tuple(part.init_state(batch) for part in self.parts)

    def forward_with_state(self, x: Tensor, state: Any = None, backend: str = "auto") -> tuple[Tensor, tuple[Any, ...]]:
        self.check_input(x)
        self.check_backend(backend)
        states = self.init_state(x.shape[0]) if state is None else self._checked(state)
        results = [part.forward_with_state(x, part_state, backend) for part, part_state in zip(self.parts, states)]
        return _added(y for y, _ in results), tuple(next_state for _, next_state in results)

    def step(self, x_t: Tensor, state: Any) -> tuple[Tensor, tuple[Any, ...]]:
        self.check_input(x_t, "x_t", with_time=False)
        results = [part.step(x_t, part_state) for part, part_state in zip(self.parts, self._checked(state))]
        return _added(y for y, _ in results), tuple(next_state for _, next_state in results)

    def _checked(self, state: Any) -> tuple[Any, ...]:
        if not isinstance(state, tuple) or len(state) != len(self.parts):
            raise ValueError(f"state: expected the {len(self.parts)} part states of parallel.init_state(batch)")
        return state

    def state_size(self, seq_len: int) -> int:
        return sum(part.state_size(seq_len) for part in self.parts)

    def coefficients(self, x: Tensor) -> Tensor:
        """The parts' coefficients side by side ``[B, H₁ + H₂ + …, T, T]`` (each part's heads, in order)."""
        self.check_input(x)
        return torch.cat([part.coefficients(x) for part in self.parts], dim=1)

    def dsf(self, x: Tensor) -> DSF:
        raise ValueError("parallel: each part has its own DSF, in terms of its own values; use mixer.parts[i].dsf(x)")

    def output_projection(self) -> None:
        """None: the output is the sum of the parts' projections (:meth:`output_projections`)."""
        return None

    def output_projections(self) -> list[nn.Linear]:
        """Each part's output projection (the residual projections a model initializes as such)."""
        return [out for out in (part.output_projection() for part in self.parts) if out is not None]

    def ssm_parameters(self) -> list[nn.Parameter]:
        return [parameter for part in self.parts for parameter in part.ssm_parameters()]

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, parts={self.part_names}"


def _added(outputs) -> Tensor:
    total = None
    for y in outputs:
        total = y if total is None else total + y
    return total


MIXER = Parallel
