"""Per-layer, per-head measurements of a whole model (Sieber et al. 2025 §5 and appendix D, on trained networks).

    rows = inspect_model(model, inputs)          one HeadReport per (layer, head)
    console.print(format_table(rows))            a rich table
    layers = layer_coefficients(model, inputs)   {"layer 0 · softmax_attention": A [B, H, T, T], ...} for plots

Each mixer's input activations are captured with a forward pre-hook during one forward pass of ``inputs``; the
mixer then recomputes its coefficients (``mixer.coefficients(x)``) and evolution spectra from them.  Mixers
without scalar coefficients (MIMO LTI: ``s5``, ``lru``) get ``None`` for every coefficient metric.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seqdyn.analysis.coefficients import (
    COMBINATION_CLASSES,
    COMBINATION_TOL,
    NEAR_ZERO_EPS,
    combination_class_shares,
    large_fraction,
    mean_zero_count,
    near_zero_fraction,
    zero_count_per_row,
)
from seqdyn.analysis.mixers import dsf_radii, evolution_radii, is_lti, positional_heads

__all__ = [
    "DSF_MAX_ENTRIES",
    "HeadReport",
    "MixerCall",
    "capture_mixer_inputs",
    "format_table",
    "inspect_model",
    "layer_coefficients",
    "layer_dsfs",
    "table_legend",
]

#: the most entries of Λ ``[B, H, T, N, N]`` that :func:`layer_dsfs` forms for one layer (256 MiB in float32)
DSF_MAX_ENTRIES = 2**26


@dataclass
class MixerCall:
    """One mixer of a model and the input ``x`` ``[B, T, D]`` it received in the captured forward pass."""

    layer: int
    module: str
    mixer: nn.Module
    x: Tensor

    @property
    def label(self) -> str:
        """``layer l · <mixer>`` (and ``(part p)`` for a part of a parallel layer)."""
        part = _owner_and_part(self.module)[1]
        return f"layer {self.layer} · {self.mixer.name}" + (f" (part {part})" if part is not None else "")


@dataclass
class HeadReport:
    """Measurements of one head of one layer (``None``: not defined for this mixer).

    Attributes:
        layer, module, mixer, head: position in the model (``module`` is the qualified module name).
        key_dim: K, the head's key / state dimension (for LTI mixers the real state size per channel).
        readout: the readout φ of the coefficient dynamics (``"identity"`` for LTI mixers).
        near_zero_fraction, large_fraction: at ``eps`` (Sieber et al. 2025 Principle 2, appendix D.2).
        max_zero_count: largest number of zero coefficients in any row (Corollary 2.2).
        mean_zero_count: Sieber et al. 2025 Fig. 9's count — per row index, the batch's mean number of zero coefficients
            (rows of a zero query left out: :func:`~seqdyn.analysis.mean_zero_count`) — its largest value.
        zero_bound: K − 1 where Corollary 2.2 applies (identity readout), else ``None``.
        class_shares: share of rows per combination class (appendix A, Table 2).
        spectral_bound: largest |eigenvalue| of Λ_t over batch and time (Principle 6).
        positional: whether a repeated token gets different coefficients at different positions (Sieber et al. 2025
            Definition 1, Lemma 3: :func:`~seqdyn.analysis.positional_heads`).
    """

    layer: int
    module: str
    mixer: str
    head: int
    key_dim: int | None
    readout: str | None
    near_zero_fraction: float | None
    large_fraction: float | None
    max_zero_count: int | None
    mean_zero_count: float | None
    zero_bound: int | None
    class_shares: dict[str, float] | None
    spectral_bound: float | None
    positional: bool | None = None

    @property
    def within_bound(self) -> bool | None:
        """``max_zero_count ≤ K − 1`` where the bound applies, else ``None``."""
        if self.max_zero_count is None or self.zero_bound is None:
            return None
        return self.max_zero_count <= self.zero_bound

    def as_dict(self) -> dict[str, Any]:
        """Plain values (for JSON or a results store), ``within_bound`` included."""
        return {**asdict(self), "within_bound": self.within_bound}


def _top_level_mixers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The ``Mixer`` modules of ``model`` in registration order, skipping mixers nested inside another mixer; a
    composite mixer (a parallel one) counts as its parts."""
    from seqdyn.mixers.base import Mixer

    found: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if (
            isinstance(module, Mixer)
            and not module.composite
            and not any(name.startswith(outer + ".") for outer, _ in found)
        ):
            found.append((name, module))
    return found


@contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode and no gradients inside; the model's training mode is restored afterwards."""
    training = model.training
    try:
        model.eval()
        with torch.no_grad():
            yield
    finally:
        model.train(training)


def capture_mixer_inputs(model: nn.Module, inputs: Tensor) -> list[MixerCall]:
    """Run ``model(inputs)`` once (eval mode, no gradients) and return the input of every mixer, in layer order.

    A forward pre-hook on each top-level mixer records the ``x`` of its first call; the hooks are removed and the
    model's training mode restored afterwards.  ``ValueError`` if ``model`` holds no seqdyn mixer.
    """
    mixers = _top_level_mixers(model)
    if not mixers:
        raise ValueError(f"model: no seqdyn mixer found in {type(model).__name__}")
    captured: dict[int, Tensor] = {}

    def hook(index: int):
        def record(module: nn.Module, args: tuple) -> None:
            if index not in captured and args:
                captured[index] = args[0].detach()

        return record

    handles = [module.register_forward_pre_hook(hook(index)) for index, (_, module) in enumerate(mixers)]
    try:
        with _evaluating(model):
            model(inputs)
    finally:
        for handle in handles:
            handle.remove()
    owners = list(dict.fromkeys(_owner_and_part(name)[0] for name, _ in mixers))  # a composite's parts: one layer
    return [
        MixerCall(owners.index(_owner_and_part(name)[0]), name, module, captured[index])
        for index, (name, module) in enumerate(mixers)
        if index in captured
    ]


def _owner_and_part(name: str) -> tuple[str, str | None]:
    """The module a mixer is the layer of — itself, or the composite mixer whose ``parts`` it is one of — and its
    index among those parts (None for a mixer of its own)."""
    owner, found, rest = name.partition(".parts.")
    return owner, rest.split(".")[0] if found else None


def _coefficients(call: MixerCall) -> Tensor | None:
    """``mixer.coefficients(x)`` ``[B, H, T, T]``, or ``None`` for a mixer without scalar coefficients."""
    if not getattr(call.mixer, "scalar_coefficients", True):
        return None
    try:
        with torch.no_grad():
            return call.mixer.coefficients(call.x)
    except NotImplementedError:
        return None


def layer_coefficients(model: nn.Module, inputs: Tensor) -> dict[str, Tensor]:
    """``{"layer l · <mixer>": A [B, H, T, T]}`` for every layer with scalar coefficients (for
    :func:`seqdyn.analysis.plots.plot_coefficients`)."""
    out = {}
    with _evaluating(model):
        for call in capture_mixer_inputs(model, inputs):
            A = _coefficients(call)
            if A is not None:
                out[call.label] = A
    return out


def layer_dsfs(
    model: nn.Module, inputs: Tensor, max_entries: int = DSF_MAX_ENTRIES
) -> tuple[dict[str, Any], dict[str, str]]:
    """The DSF matrices (Sieber et al. 2024 eq. 12: ``h_i = Λ_i h_{i−1} + B_i u_i``, ``y_i = C_i h_i + D_i u_i``) of
    every layer's mixer on the activations it receives for ``inputs``: ``{label: DSF}``, and ``{label: why}`` for the
    layers left out because their Λ would hold more than ``max_entries`` numbers — a Gated DeltaNet head with
    K = V = 64 has N = 4,096 states (16.8M entries per step), a softmax head's realization keeps every past value
    (N = T·V)."""
    dsfs, skipped = {}, {}
    with _evaluating(model):
        for call in capture_mixer_inputs(model, inputs):
            entries = _dsf_entries(call)
            if entries > max_entries:
                skipped[call.label] = f"its Λ would hold {entries:,} numbers (more than {max_entries:,})"
            else:
                dsfs[call.label] = call.mixer.dsf(call.x)
    return dsfs, skipped


def _dsf_entries(call: MixerCall) -> int:
    """``B·H·T·N²``: the entries of the Λ that ``call``'s mixer would form over its input, with the state N read off
    its DSF over the first one and two steps (a state that grows with T, as a nonlinear readout's, grows by the
    same amount each step)."""
    batch, length = call.x.shape[:2]
    first, second = (call.mixer.dsf(call.x[:1, :steps]).B for steps in (1, min(2, length)))
    heads, states = first.shape[1], first.shape[3] + (second.shape[3] - first.shape[3]) * (length - 1)
    return batch * heads * length * states**2


def _structure(call: MixerCall, spectral: bool) -> tuple[str, int, Tensor | None]:
    """``(readout name, key dim K, spectral radii [H])`` of a mixer on its captured input; the radii are ``None``
    when not ``spectral`` (mixers built on ``coefficient_dynamics``) — the DSF of others is computed anyway."""
    from seqdyn.core.problem import prepare
    from seqdyn.core.products import transition_steps
    from seqdyn.mixers.base import CoefficientMixer, MixerState

    mixer, x = call.mixer, call.x
    with torch.no_grad():
        if isinstance(mixer, CoefficientMixer):
            inputs, _ = mixer.core_inputs(x, MixerState())
            problem = prepare(transition_steps(inputs))
            return problem.readout.name, problem.q.shape[-1], evolution_radii(mixer, x) if spectral else None
        system = mixer.dsf(x[:1, :1] if is_lti(mixer) else x)  # an LTI system's DSF does not depend on x
        return "identity", system.B.shape[-2] // system.B.shape[-1], dsf_radii(system)


def inspect_model(
    model: nn.Module,
    inputs: Tensor,
    eps: float = NEAR_ZERO_EPS,
    zero_tol: float | None = None,
    class_tol: float = COMBINATION_TOL,
    spectral: bool = True,
) -> list[HeadReport]:
    """Measure every head of every layer of ``model`` on ``inputs`` (what ``model(inputs)`` accepts).

    For each layer's mixer, on the activations it receives: the near-zero and large fractions at ``eps``, the
    largest zero count per row at ``zero_tol`` (see :func:`~seqdyn.analysis.zero_count_per_row`) against the
    bound K − 1 of Sieber et al. 2025 Corollary 2.2 (identity readouts only), the shares of the combination classes
    (appendix A) at ``class_tol``, and — when ``spectral`` — the largest |eigenvalue| of Λ_t (Principle 6).
    Returns one :class:`HeadReport` per (layer, head), in layer then head order.
    """
    with _evaluating(model):
        return [
            row
            for call in capture_mixer_inputs(model, inputs)
            for row in _head_reports(call, eps, zero_tol, class_tol, spectral)
        ]


def _head_reports(
    call: MixerCall, eps: float, zero_tol: float | None, class_tol: float, spectral: bool
) -> list[HeadReport]:
    """The rows of one layer (see :func:`inspect_model`)."""
    rows: list[HeadReport] = []
    A = _coefficients(call)
    readout, key_dim, radii = _structure(call, spectral)
    heads = A.shape[1] if A is not None else radii.shape[0]
    if radii is not None:
        if radii.shape[0] not in (1, heads):
            raise ValueError(
                f"model: layer {call.layer} ({call.mixer.name}) has {heads} coefficient heads but "
                f"{radii.shape[0]} evolution heads"
            )
        radii = radii.expand(heads)
    positional = positional_heads(call.mixer).expand(heads)
    zeros = zero_count_per_row(A, zero_tol) if A is not None else None
    mean_zeros = mean_zero_count(A, zero_tol).nan_to_num(nan=0.0) if A is not None else None  # [H, T]
    for head in range(heads):
        one = A[:, head : head + 1] if A is not None else None
        rows.append(
            HeadReport(
                layer=call.layer,
                module=call.module,
                mixer=call.mixer.name,
                head=head,
                key_dim=int(key_dim),
                readout=readout,
                near_zero_fraction=None if one is None else near_zero_fraction(one, eps),
                large_fraction=None if one is None else large_fraction(one, eps),
                max_zero_count=None if zeros is None else int(zeros[:, head].max()),
                mean_zero_count=None if mean_zeros is None else float(mean_zeros[head].max()),
                zero_bound=int(key_dim) - 1 if readout == "identity" and one is not None else None,
                class_shares=None if one is None else combination_class_shares(one, class_tol),
                spectral_bound=float(radii[head]) if spectral and radii is not None else None,
                positional=bool(positional[head]),
            )
        )
    return rows


def _number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


#: ``format_table``'s columns (name, justification) and what each one measures, for :func:`table_legend`
COLUMNS = (
    ("layer", "right", None),
    ("mixer", "left", None),
    ("head", "right", None),
    ("K", "right", "the head's key (state) dimension"),
    ("φ", "left", "the readout φ of the coefficient dynamics (identity: linear attention and SSMs; exp: softmax)"),
    (
        "near-zero",
        "right",
        "share of the causal coefficients α_ij (j ≤ i) with |α_ij| < {eps} (Sieber et al. 2025, "
        "Principle 2); the rest are large",
    ),
    (
        "max zeros / K−1",
        "right",
        "the most exactly-zero coefficients in one row, against the bound K − 1 that an "
        "identity readout cannot exceed with a nonzero query (Corollary 2.2)",
    ),
    (
        "rows by class",
        "left",
        "share of the rows i that are convex (α ≥ 0, Σα = 1: a weighted mean, as softmax), "
        "conical (α ≥ 0 only), affine (Σα = 1 only) or linear (neither) (appendix A, Table 2)",
    ),
    (
        "max |eig Λ|",
        "right",
        "largest |eigenvalue| of the state transition Λ_t over the batch and the steps: "
        "below 1 the state forgets, at 1 it keeps (Principle 6)",
    ),
    (
        "positions",
        "left",
        "whether one token repeated gets different coefficients at different positions, so "
        "that the layer tells positions apart without position embeddings (Definition 1; "
        "Lemma 3: Λ ≠ I, or rotary embeddings inside the mixer)",
    ),
)

#: why a cell is empty
NO_COEFFICIENTS = "— : this mixer has no scalar coefficients (a MIMO state space, s5 or lru): nothing to count"


def _yes_no(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _zeros_cell(row: HeadReport) -> str:
    if row.max_zero_count is None:
        return "—"
    if row.zero_bound is None:
        return f"{row.max_zero_count} (bound for φ identity only)"
    flag = "" if row.within_bound in (None, True) else " [red]exceeds*[/red]"
    return f"{row.max_zero_count} / {row.zero_bound}{flag}"


#: why a row can hold more exact zeros than K − 1 (the legend line under a table where one does)
BEYOND_THE_BOUND = (
    "exceeds*: more exactly-zero coefficients than K − 1, which exact arithmetic rules out: the extra zeros are "
    "coefficients of old keys whose decay (the product of Λ over the steps between) fell below the smallest number "
    "the dtype holds — round-off, not the readout (with Λ = I there is no decay to fall below it)"
)


def _classes_cell(row: HeadReport) -> str:
    if row.class_shares is None:
        return "—"
    return ", ".join(
        f"{name} {100 * row.class_shares[name]:.0f}%" for name in COMBINATION_CLASSES if row.class_shares[name] > 0
    )


def format_table(rows: list[HeadReport], title: str | None = "Coefficient analysis") -> Any:
    """A ``rich.table.Table`` of :func:`inspect_model`'s rows, one per layer and head (classes as percentages of
    the rows, classes of no row left out); :func:`table_legend` says what each column means.  The large fraction
    is ``1 −`` the near-zero one at the same ``eps`` and is not shown."""
    from rich.table import Table

    table = Table(title=title)
    for column, justify, _ in COLUMNS:
        table.add_column(column, justify=justify)
    for row in rows:
        table.add_row(
            str(row.layer),
            row.mixer,
            str(row.head),
            "—" if row.key_dim is None else str(row.key_dim),
            row.readout or "—",
            _number(row.near_zero_fraction),
            _zeros_cell(row),
            _classes_cell(row),
            _number(row.spectral_bound, 4),
            _yes_no(row.positional),
        )
    return table


def table_legend(rows: list[HeadReport], eps: float = NEAR_ZERO_EPS) -> list[str]:
    """One line per column of :func:`format_table` that needs one, with ``eps`` filled in, and a line on empty
    cells where a row has one."""
    lines = [f"{name}: {meaning.format(eps=f'eps = {eps:g}')}" for name, _, meaning in COLUMNS if meaning]
    if any(row.class_shares is None for row in rows):
        lines.append(NO_COEFFICIENTS)
    if any(row.within_bound is False for row in rows):
        lines.append(BEYOND_THE_BOUND)
    return lines
