"""The mixer interface and the base class of every mixer that reduces to the one operator.

A mixer maps ``[B, T, D] -> [B, T, D]`` and offers ``forward(x, backend)``, ``init_state(batch)``,
``step(x_t, state)``, ``state_size(seq_len)``, ``coefficients(x)`` (scalar coefficients per head) and ``dsf(x)``
(the DSF of its mixing core).  A :class:`CoefficientMixer` only computes its projections, gates and
discretization (:meth:`CoefficientMixer.core_inputs`) and what it does with the core's output
(:meth:`CoefficientMixer.core_output`); the mixing itself is always ``seqdyn.coefficient_dynamics``.
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from seqdyn.core import stacking
from seqdyn.core.autotune import BackendChoice
from seqdyn.core.backends import REGISTRY
from seqdyn.core.choice import Timing, problem_signature, ruled_out, timed_choice
from seqdyn.core.dsf import DSF, dsf, from_coefficients
from seqdyn.core.dynamics import Dynamics
from seqdyn.core.operator import auto_plan, coefficient_dynamics, coefficients
from seqdyn.core.packing import Packing, Padding, Sequences, from_state, sequences_of
from seqdyn.core.problem import prepare
from seqdyn.core.products import operator_steps
from seqdyn.core.readouts import STATE_NORMALIZERS
from seqdyn.layers.params import check_positive, is_kept, keep_init, scaled_width  # noqa: F401 (the mixers import them here)

OPERATOR_BACKENDS = ("auto", "quadratic", "recurrent", "chunk", "scan")


@functools.cache
def takes_sequences(mixer_class: type) -> bool:
    """Whether ``mixer_class.forward`` takes ``sequences=`` (packed sequences or a padded batch) itself."""
    return "sequences" in inspect.signature(mixer_class.forward).parameters


@dataclass
class MixerState:
    """Streaming state of a :class:`CoefficientMixer`: the operator's state, the short convolutions' inputs, the
    batch size they stream (``None``: any), the position of the next token (rotary embeddings need it) and a
    mixer's running stabilizer ``m`` (RWKV-4 stores its operator state at it, ``core · e^m`` the state; mLSTM's
    normalizer reads ``ε e^m``; ``None``: none yet) — or, for a call on packed sequences, their
    :class:`~seqdyn.core.packing.Packing` (no state then)."""

    core: Any = None
    conv: dict[str, Tensor] = field(default_factory=dict)
    batch: int | None = None
    position: int = 0
    packing: Packing | None = None
    scale: Tensor | None = None

    @property
    def positions(self) -> int | Tensor:
        """The position of the first token, or with packing the position of every token in its sequence ``[T]``."""
        return self.position if self.packing is None else self.packing.position


def check_state_batch(mixer: str, state_batch: int | None, batch: int) -> None:
    """A streaming state serves the batch size it was started with (``init_state(batch)``) and no other."""
    if state_batch is not None and state_batch != batch:
        raise ValueError(
            f"state: streams a batch of {state_batch}, but x_t has {batch} rows; start a state for "
            f"this batch with {mixer}.init_state({batch})"
        )


def split_heads(x: Tensor, heads: int) -> Tensor:
    """``[B, T, H·d] -> [B, T, H, d]``."""
    return x.unflatten(-1, (heads, x.shape[-1] // heads))


def check_heads(heads: int, width: int, what: str = "d_model") -> int:
    """``heads`` must be a positive divisor of ``width`` (named ``what`` in the error)."""
    check_positive("heads", heads)
    if width % heads:
        raise ValueError(f"heads: {heads} does not divide {what}={width}; choose a divisor")
    return heads


def expanded_widths(heads: int, d_model: int, expand_k: float, expand_v: float) -> tuple[int, int]:
    """``(key width, value width)`` ``expand_k·D`` and ``expand_v·D`` over all heads, each a multiple of ``heads``."""
    key_width = scaled_width("expand_k", d_model, expand_k)
    value_width = scaled_width("expand_v", d_model, expand_v)
    check_heads(heads, key_width, "expand_k·d_model")
    check_heads(heads, value_width, "expand_v·d_model")
    return key_width, value_width


def check_choice(name: str, value: Any, allowed) -> Any:
    """``value`` must be one of ``allowed`` with the same type (so ``1`` is not accepted for ``True``)."""
    if not any(value == option and type(value) is type(option) for option in allowed):
        raise ValueError(f"{name}: got {value!r}; allowed: {list(allowed)}")
    return value


class Mixer(nn.Module, ABC):
    """A sequence mixer ``[B, T, D] -> [B, T, D]``."""

    #: registry name (the file name under ``seqdyn/mixers``); a class that sets none is named after itself
    name: ClassVar[str] = ""
    #: whether :meth:`coefficients` exists (all but MIMO LTI mixers)
    scalar_coefficients: ClassVar[bool] = True
    #: a mixer made of other mixers (``parts``), which the analysis inspects part by part
    composite: ClassVar[bool] = False
    #: the backend every other backend of this mixer is checked against
    reference_backend: ClassVar[str] = "quadratic"
    #: the names (or name suffixes after a ".") of the parameters of the state space itself (Λ, Δ)
    ssm_parameter_names: ClassVar[tuple[str, ...]] = ()

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends ``forward`` accepts (``"auto"`` first)."""
        return OPERATOR_BACKENDS

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "name" not in vars(cls):  # a mixer of your own, or a subclass of a built-in one, is not its base
            cls.name = cls.__name__

    def __call__(
        self,
        x: Tensor,
        backend: str = "auto",
        *,
        cu_seqlens: Tensor | Packing | None = None,
        attention_mask: Tensor | Padding | None = None,
        state: Any = None,
        return_state: bool = False,
    ):
        """``[B, T, D] -> [B, T, D]``: the mixer's public entry point.

        ``cu_seqlens`` (int offsets ``[N + 1]``, ``x`` ``[1, T, D]``: packed sequences) or ``attention_mask``
        (``[B, T]``, 1 = token, 0 = left or right padding) become one value here, checked once
        (:func:`~seqdyn.core.packing.sequences_of`; a :class:`~seqdyn.core.packing.Packing` or
        :class:`~seqdyn.core.packing.Padding` made earlier passes through), which ``forward(x, backend,
        sequences=…)`` takes: each sequence is computed as if alone and the outputs at padded steps are 0.  A
        ``forward`` without a ``sequences`` parameter (a mixer of your own; every mixer is causal) gets the sequences
        side by side, each from step 0.  ``state=`` / ``return_state=True``: the forward from a state
        (``init_state``'s layout; ``None``: the start) that returns ``(y, next state)``
        (:meth:`forward_with_state`)."""
        self.chose(backend)
        if state is not None or return_state:
            return from_state(
                lambda u, s: self.forward_with_state(u, s, backend), x, state, return_state, cu_seqlens, attention_mask
            )
        sequences = sequences_of(x, cu_seqlens, attention_mask)
        if sequences is None:
            return super().__call__(x, backend)
        if takes_sequences(type(self)):
            return super().__call__(x, backend, sequences=sequences)
        self.check_input(x)
        return sequences.in_place(super().__call__(sequences.side_by_side(x), backend))

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = check_positive("d_model", d_model)

    def check_input(self, x: Tensor, what: str = "x", with_time: bool = True) -> Tensor:
        layout = "[B, T, D]" if with_time else "[B, D]"
        if not isinstance(x, Tensor) or not x.is_floating_point():
            raise ValueError(
                f"{what}: expected a floating-point tensor {layout}, got "
                f"{x.dtype if isinstance(x, Tensor) else type(x).__name__}"
            )
        if x.dim() != (3 if with_time else 2) or x.shape[-1] != self.d_model:
            raise ValueError(f"{what}: expected {layout} with D={self.d_model} for {self.name}, got {list(x.shape)}")
        if with_time and x.shape[1] < 1:
            raise ValueError(f"{what}: the sequence is empty (T=0)")
        return x

    def check_backend(self, backend: Any) -> str:
        if backend not in self.backends:
            raise ValueError(f"backend: {self.name} computes with {list(self.backends)}, got {backend!r}")
        return backend

    def backend_for(self, x: Tensor, backend: str = "auto", packing: Packing | None = None) -> str:
        """The backend ``forward(x, backend)`` computes with (``packing``: ``x`` holds those packed sequences):
        ``backend`` itself, or for ``"auto"`` the fastest of :meth:`auto_timing`'s candidates, each timed on the
        mixer's whole call once per shape and cached (:func:`~seqdyn.core.choice.timed_choice`): for forward and
        backward where the grad mode is on and ``x`` or a parameter requires gradients, for the forward alone
        otherwise, as ``forward(x)`` would.  The returned name says why (``.why``); a mixer without a timing (its
        parts choose) says ``"auto"``."""
        if self.check_backend(backend) != "auto":
            return BackendChoice.asked(backend)
        timing = self.auto_timing(x, packing)
        return "auto" if timing is None else timed_choice(self, x, timing, packing)

    def auto_timing(self, x: Tensor, packing: Packing | None = None) -> Timing | None:
        """What ``auto`` times on ``x`` (:class:`~seqdyn.core.choice.Timing`): the one hook a mixer that chooses its
        backend gives; ``None`` here (the mixer does not choose)."""
        return None

    @property
    def last_backend(self) -> str | None:
        """The backend the last forward computed with, as that forward chose it: a
        :class:`~seqdyn.core.autotune.BackendChoice` where the mixer chose (with ``.why``), else the name it was
        called with (``"auto"`` for a mixer that leaves the choice to its parts); ``None`` before any forward."""
        return self.__dict__.get("_last_backend")

    def chose(self, backend: str) -> str:
        """Keep ``backend`` as :attr:`last_backend` and return it: what a forward calls with the backend it computes
        with, so that a run record reads the choice instead of making it again."""
        self.__dict__["_last_backend"] = backend
        return backend

    def explain_backend(self, x: Tensor, backend: str = "auto") -> BackendChoice:
        """:meth:`backend_for` with the reason (``.why``): what ``forward(x, backend)`` computes with, and why."""
        chosen = self.backend_for(x, backend)
        if isinstance(chosen, BackendChoice):
            return chosen
        if backend != "auto":
            return BackendChoice.asked(chosen)
        return BackendChoice(chosen, f"{self.name} computes 'auto' with {chosen}", "mixer")

    @abstractmethod
    def forward(self, x: Tensor, backend: str = "auto", *, sequences: Sequences | None = None) -> Tensor:
        """``[B, T, D] -> [B, T, D]``; ``sequences``: packed sequences or a padded batch (:meth:`__call__` makes the
        value), each computed as if alone — a forward may leave the parameter out and get them side by side."""

    @abstractmethod
    def init_state(self, batch: int) -> Any:
        """The state before the first token."""

    def forward_with_state(self, x: Tensor, state: Any = None, backend: str = "auto") -> tuple[Tensor, Any]:
        """``(y [B, T, D], the state after x)`` from ``state`` (``None``: :meth:`init_state`): a prefill, or its
        continuation.  Here token by token with :meth:`step`, which is exact for every mixer; a mixer with a
        parallel form overrides it (:class:`CoefficientMixer` runs the operator from the state)."""
        self.check_input(x)
        self.check_backend(backend)
        state = self.init_state(x.shape[0]) if state is None else state
        outputs = []
        for position in range(x.shape[1]):
            y, state = self.step(x[:, position], state)
            outputs.append(y)
        return torch.stack(outputs, dim=1), state

    @abstractmethod
    def step(self, x_t: Tensor, state: Any) -> tuple[Tensor, Any]:
        """One token ``[B, D]``: ``(y_t [B, D], state)``; token by token equals :meth:`forward`."""

    @abstractmethod
    def state_size(self, seq_len: int) -> int:
        """Floats in the recurrent state of one sequence after ``seq_len`` tokens."""

    def output_projection(self) -> nn.Linear | None:
        """The linear map that writes the mixer's output (``W_O``), or ``None`` when the output is not one.

        A model scales it as a residual projection (Zoology / GPT-2 init: std / √(2·layers)).  Default: the last
        ``nn.Linear`` among ``self.modules()``; a mixer that registers a Linear after its output map overrides this.
        """
        linears = [module for module in self.modules() if isinstance(module, nn.Linear)]
        return linears[-1] if linears else None

    def ssm_parameters(self) -> list[nn.Parameter]:
        """The parameters of the state space itself — its transition Λ and step Δ (and for an LTI layer also its
        B, C, W) — which an optimizer may give their own learning rate and weight decay (S4's convention;
        Gupta et al. 2022 §2.3: "weight decay is not applied to DLR parameters").  A mixer without a state space has
        none."""
        return [
            p
            for name, p in self.named_parameters()
            if any(name == suffix or name.endswith("." + suffix) for suffix in self.ssm_parameter_names)
        ]

    def coefficients(self, x: Tensor) -> Tensor:
        """Normalized coefficients ``[B, H, T, T]`` of the mixing core."""
        raise ValueError(f"{self.name} has no scalar coefficients per head (a MIMO system); use dsf(x) instead")

    @abstractmethod
    def dsf(self, x: Tensor) -> DSF:
        """The DSF matrices of the mixing core for input ``x`` (small sizes)."""

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}"


class ConvolutionMixer(Mixer):
    """A mixer whose only reading across time is one short causal convolution, ``self.conv`` (a
    :class:`~seqdyn.layers.ShortConv` or :class:`~seqdyn.layers.TokenShift`): ``after(conv(u), extras)`` with
    ``(u, extras) = before(x)``; its streaming state the convolution's last inputs.  Subclasses define
    :meth:`before` and :meth:`after`."""

    conv: nn.Module

    @abstractmethod
    def before(self, x: Tensor) -> tuple[Tensor, Any]:
        """The convolution's input ``[B, T, C]`` and what :meth:`after` needs."""

    @abstractmethod
    def after(self, convolved: Tensor, extras: Any) -> Tensor:
        """The mixer's output ``[B, T, D]`` from the convolution's."""

    def forward(self, x: Tensor, backend: str = "auto", *, sequences: Sequences | None = None) -> Tensor:
        """``[B, T, D] -> [B, T, D]``; packed sequences and a padded batch's tokens restart the convolution at each
        sequence's start (nothing is computed for padding)."""
        self.check_input(x)
        self.chose(self.check_backend(backend))
        if sequences is not None and not (isinstance(sequences, Padding) and sequences.whole):
            u, extras = self.before(sequences.packed(x))
            return sequences.unpacked(self.after(self.conv(u, positions=sequences.tokens.position)[0], extras))
        return self.forward_with_state(x, None, backend)[0]

    def init_state(self, batch: int) -> Tensor:
        """The convolution's last inputs ``[B, w − 1, C]`` (zeros before the start)."""
        return self.conv.init_state(check_positive("batch", batch))

    def forward_with_state(self, x: Tensor, state: Any = None, backend: str = "auto") -> tuple[Tensor, Tensor]:
        self.check_input(x)
        self.check_backend(backend)
        u, extras = self.before(x)
        convolved, state = self.conv(u, state)
        return self.after(convolved, extras), state

    def step(self, x_t: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        self.check_input(x_t, "x_t", with_time=False)
        y, state = self.forward_with_state(x_t.unsqueeze(1), state)
        return y[:, 0], state

    def state_size(self, seq_len: int) -> int:
        check_positive("seq_len", seq_len)
        return (self.conv.width - 1) * self.conv.channels


class CoefficientMixer(Mixer):
    """A mixer whose core is ``coefficient_dynamics``: subclasses define :meth:`core_inputs` and :meth:`core_output`.

    Short convolutions (``self.convs``, a ``ModuleDict`` of :class:`seqdyn.layers.ShortConv`) are applied inside
    :meth:`core_inputs` through :meth:`convolve`, which threads their streaming state.

    Args:
        chunk_size: the chunk length of the operator's chunk backend (a speed knob: the output does not depend on
            it beyond rounding); None: the operator's default for the problem (32 for the delta rule, else 64).
    """

    def __init__(self, d_model: int, chunk_size: int | None = 64):
        super().__init__(d_model)
        self.chunk_size = None if chunk_size is None else check_positive("chunk_size", chunk_size)
        self.convs = nn.ModuleDict()

    @abstractmethod
    def core_inputs(self, x: Tensor, state: MixerState) -> tuple[Dynamics, Any]:
        """Projections, gates and discretization: the operator's arguments and what :meth:`core_output` needs.

        ``state`` carries the short convolutions' inputs; :meth:`convolve` updates it in place.
        """

    @abstractmethod
    def core_output(self, core: Tensor, extras: Any) -> Tensor:
        """From the core's output ``[B, T, H, V]`` to the mixer's output ``[B, T, D]`` (gates, skips, projection)."""

    def convolve(self, key: str, x: Tensor, state: MixerState) -> Tensor:
        """Apply short convolution ``key`` to ``x`` ``[B, T, C]``, carrying its state across calls (or, packed,
        restarting at every sequence's start)."""
        if state.packing is not None:
            return self.convs[key](x, positions=state.packing.position)[0]
        y, state.conv[key] = self.convs[key](x, state.conv.get(key))
        return y

    def run_core(
        self,
        inputs: Dynamics,
        backend: str = "auto",
        initial_state: Any = None,
        output_final_state: bool = False,
        cu_seqlens: Packing | None = None,
    ):
        """``coefficient_dynamics`` on the mixer's own inputs."""
        return coefficient_dynamics(
            inputs,
            initial_state=initial_state,
            output_final_state=output_final_state,
            backend=backend,
            chunk_size=self.chunk_size,
            cu_seqlens=cu_seqlens,
        )

    def forward(self, x: Tensor, backend: str = "auto", *, sequences: Sequences | None = None) -> Tensor:
        """``[B, T, D] -> [B, T, D]``; packed sequences and the tokens of a padded batch are computed packed end to
        end (:meth:`forward_packed`), nothing for padding."""
        self.check_input(x)
        if sequences is not None and not (isinstance(sequences, Padding) and sequences.whole):
            return sequences.unpacked(self.forward_packed(sequences.packed(x), sequences.tokens, backend))
        backend = self.chose(self.backend_for(x, backend))
        inputs, extras = self.core_inputs(x, MixerState())
        return self.core_output(self.run_core(inputs, backend), extras)

    def forward_packed(self, x: Tensor, packing: Packing, backend: str = "auto") -> Tensor:
        """Packed sequences ``x`` ``[1, T, D]`` → ``[1, T, D]``, each as if alone.

        Projections, gates and outputs are computed token by token on the packed tokens, short convolutions and
        rotary positions restart at each sequence's start, and the operator keeps every sequence apart
        (``coefficient_dynamics(…, cu_seqlens=packing)``): no step is computed for padding."""
        backend = self.chose(self.backend_for(x, backend, packing))
        inputs, extras = self.core_inputs(x, MixerState(packing=packing))
        return self.core_output(self.run_core(inputs, backend, cu_seqlens=packing), extras)

    def auto_timing(self, x: Tensor, packing: Packing | None = None) -> Timing:
        """The operator's candidates for this mixer's arguments (:func:`~seqdyn.core.operator.auto_plan`), each timed
        on the mixer's whole call (:meth:`forward`, or :meth:`forward_packed` of ``packing``)."""
        state = MixerState(packing=packing)

        def plan() -> tuple[list[str], str, str]:
            with torch.no_grad():
                inputs, _ = self.core_inputs(x, state)
            return auto_plan(inputs, self.chunk_size, packing)

        def ruled() -> dict[str, str]:
            with torch.no_grad():
                return ruled_out(prepare(operator_steps(self.core_inputs(x, state)[0]), chunk_size=self.chunk_size))

        if packing is None:
            run = lambda inputs, name: self.forward(inputs, name)  # noqa: E731
        else:
            run = lambda inputs, name: self.forward_packed(inputs, packing, name)  # noqa: E731
        signature, words = self._operator_signature()
        return Timing(run, plan, ruled, signature, f" (operator: {words})")

    def _operator_signature(self) -> tuple[dict[str, Any], str]:
        """The operator problem's :func:`~seqdyn.core.choice.problem_signature` (heads, widths, combination,
        chunk) and the same in words, fixed by the options: probed once per parameter dtype."""
        dtype = next(self.parameters()).dtype
        if getattr(self, "_signature", (None,))[0] != dtype:
            problem = prepare(operator_steps(self._probe()), chunk_size=self.chunk_size)
            _, heads, _, key_dim, value_dim = problem.shape
            signature = {f"operator {name}": value for name, value in problem_signature(problem).items()}
            self._signature = (dtype, signature, f"H={heads}, K={key_dim}, V={value_dim}, {problem.describe()}")
        return self._signature[1:]

    def init_state(self, batch: int) -> MixerState:
        return MixerState(batch=check_positive("batch", batch))

    def step(self, x_t: Tensor, state: MixerState) -> tuple[Tensor, MixerState]:
        self.check_input(x_t, "x_t", with_time=False)
        y, state = self._from_state(x_t.unsqueeze(1), state, "recurrent")
        return y[:, 0], state

    def forward_with_state(
        self, x: Tensor, state: MixerState | None = None, backend: str = "auto"
    ) -> tuple[Tensor, MixerState]:
        """The operator from the state's core (its ``initial_state``), the short convolutions from their inputs so
        far, positions from the state's: in parallel, with any backend."""
        self.check_input(x)
        return self._from_state(x, self.init_state(x.shape[0]) if state is None else state, self.check_backend(backend))

    def _from_state(self, x: Tensor, state: MixerState, backend: str) -> tuple[Tensor, MixerState]:
        if not isinstance(state, MixerState):
            raise ValueError(
                f"state: expected the MixerState of {self.name}.init_state(batch), got {type(state).__name__}"
            )
        check_state_batch(self.name, state.batch, x.shape[0])
        state = MixerState(state.core, dict(state.conv), x.shape[0], state.position, scale=state.scale)
        inputs, extras = self.core_inputs(x, state)
        core, state.core = self.run_core(inputs, backend, state.core, output_final_state=True)
        state.position += x.shape[1]
        return self.core_output(core, extras), state

    def coefficients(self, x: Tensor) -> Tensor:
        self.check_input(x)
        inputs, _ = self.core_inputs(x, MixerState())
        return coefficients(inputs)

    def core(self, x: Tensor, backend: str = "auto") -> tuple[Tensor, Tensor]:
        """The mixing core's output ``[B, T, H, V]`` and the values it mixes ``[B, T, H, V]`` (analysis, tests); with
        ``n`` Householder factors per step, ``[B, T·n, H, V]``, value ``j·n + s`` in the coefficients' column order."""
        self.check_input(x)
        inputs, _ = self.core_inputs(x, MixerState())
        out = self.run_core(inputs, self.check_backend(backend))
        values = inputs.v if inputs.v.dim() == 4 else inputs.v.movedim(3, 2).flatten(1, 2)  # [B, T·n, H, V]
        return out, values.expand(*values.shape[:2], out.shape[2], values.shape[3])

    def _probe(self) -> Dynamics:
        """The operator's arguments for a one-token input, which fix heads, dimensions and the combination."""
        parameter = next(self.parameters())
        with torch.no_grad():
            inputs, _ = self.core_inputs(
                torch.zeros(1, 1, self.d_model, dtype=parameter.dtype, device=parameter.device), MixerState()
            )
        return inputs

    @property
    def backends(self) -> tuple[str, ...]:
        # the combination (readout, decay, Householder, normalizer) is fixed by the options: probe once, and once
        # for stacked runs (seqdyn.core.stacking), which some backends cannot compute
        known = self.__dict__.setdefault("_backends", {})
        stacked = stacking.runs_stacked()
        if stacked not in known:
            problem = prepare(operator_steps(self._probe()))
            known[stacked] = ("auto",) + tuple(
                name for name, module in REGISTRY.items() if module.unsupported(problem) is None
            )
        return known[stacked]

    def dsf(self, x: Tensor) -> DSF:
        self.check_input(x)
        inputs, _ = self.core_inputs(x, MixerState())
        if inputs.readout == "identity":
            return dsf(inputs)
        # no finite DSF (Sieber et al. 2024 Lemma 1): the realization whose state keeps every value, for this input
        return from_coefficients(self.coefficients(x), inputs.v.shape[3])

    def state_size(self, seq_len: int) -> int:
        check_positive("seq_len", seq_len)
        inputs = self._probe()
        heads = max(inputs.q.shape[2], inputs.k.shape[2], inputs.v.shape[2])
        key_dim, value_dim = operator_steps(inputs).q.shape[3], inputs.v.shape[-1]  # a decay outside: K + 2 cached
        keys_per_token = inputs.k.shape[3] if inputs.k.dim() == 5 else 1  # n Householder factors: n keys each
        conv = sum((module.width - 1) * module.channels for module in self.convs.values())
        linear = inputs.readout == "identity"
        if not linear:  # the key cache grows with the sequence (Sieber et al. 2025 Lemma 1)
            return seq_len * keys_per_token * heads * (key_dim + value_dim) + conv
        normalizer_state = heads * key_dim if inputs.normalizer in STATE_NORMALIZERS else 0
        return heads * key_dim * value_dim + normalizer_state + conv
