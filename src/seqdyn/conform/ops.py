"""The ops a conformance sweep knows: what each computes (its float64 reference, seqdyn's operator), how its inputs
are drawn for a :class:`~seqdyn.conform.cases.Case`, and the calling conventions of the implementations the field
ships (:data:`ADAPTERS`), recognized by their parameters' names."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdyn.conform.cases import Case

#: the inputs of the gated delta rule, in the order of transformers' fallback: query, key ``[B, T, H_k, K]``, value
#: ``[B, T, H, V]``, log-decay g and β ``[B, T, H]``, and the initial state ``[B, H, K, V]`` (where the case has one;
#: ``[N, H, K, V]`` for a row of N packed documents, whose offsets are ``cu_seqlens`` ``[N + 1]``)
DELTA_RULE_INPUTS = ("query", "key", "value", "g", "beta", "initial_state")


def delta_rule_inputs(case: Case, generator: torch.Generator) -> dict[str, Tensor]:
    """A gated delta rule problem in float64: unit-norm keys (the delta rule's state stays bounded only for ‖k‖ ≤ 1),
    β in (0, 1), the case's decays."""

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    b, t, h, hk = case.batch, case.length, case.heads, case.groups
    low = {"typical": -0.5, "none": 0.0, "extreme": -30.0}[case.decay]
    inputs = {
        "query": draw(b, t, hk, case.key_dim),
        "key": F.normalize(draw(b, t, hk, case.key_dim), dim=-1),
        "value": draw(b, t, h, case.value_dim),
        "g": low * torch.rand(b, t, h, generator=generator, dtype=torch.float64),
        "beta": torch.rand(b, t, h, generator=generator, dtype=torch.float64),
    }
    if case.initial_state:
        inputs["initial_state"] = 0.1 * draw(
            case.documents if case.documents > 1 else b, h, case.key_dim, case.value_dim
        )
    if case.documents > 1:
        inputs["cu_seqlens"] = torch.tensor(case.offsets)
    return inputs


def per_document(
    reference: Callable[[dict[str, Tensor]], dict[str, Tensor]], packing: str, time_dim: int
) -> Callable[[dict[str, Tensor]], dict[str, Tensor]]:
    """``reference`` run on each packed document of a row alone (the inputs' ``packing`` entry: ``cu_seqlens``
    ``[N + 1]`` or ``seq_idx`` ``[1, T]``), each from its own row of the initial state; the outputs concatenated along
    time (dimension ``time_dim``), the final states stacked — packing's definition, without the packed path."""

    def reference_of_rows(inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        if packing not in inputs:
            return reference(inputs)
        marks = inputs[packing]
        offsets = marks.tolist() if packing == "cu_seqlens" else _offsets_of(marks)
        pieces = [
            reference(_document(inputs, packing, time_dim, n, start, end))
            for n, (start, end) in enumerate(zip(offsets[:-1], offsets[1:]))
        ]
        return {
            name: torch.cat([piece[name] for piece in pieces], dim=time_dim if name == "output" else 0)
            for name in pieces[0]
        }

    return reference_of_rows


def _document(
    inputs: dict[str, Tensor], packing: str, time_dim: int, n: int, start: int, end: int
) -> dict[str, Tensor]:
    """Document ``n`` of a packed row (steps ``start:end``) as a row of its own: its initial state's row ``n``, the
    time-indexed inputs narrowed, the rest (weights) as they are."""
    document = {}
    for name, tensor in inputs.items():
        if name == "initial_state":
            document[name] = tensor[n : n + 1]
        elif name != packing:
            document[name] = tensor.narrow(time_dim, start, end - start) if tensor.dim() > time_dim else tensor
    return document


def _offsets_of(seq_idx: Tensor) -> list[int]:
    """``seq_idx`` ``[1, T]`` (the document of each step) as offsets ``[0, …, T]``."""
    counts = torch.unique_consecutive(seq_idx[0], return_counts=True)[1]
    return [0, *counts.cumsum(0).tolist()]


def delta_rule_reference(inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    """Yang et al. 2025 (Gated DeltaNet), eq. 10, by seqdyn's recurrent backend in the inputs' dtype (float64), each
    packed document alone (:func:`per_document`)::

    S_t = e^{g_t} (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t / √K"""
    from seqdyn.hf.acceleration.functions import gated_delta_rule

    def one_row(row: dict[str, Tensor]) -> dict[str, Tensor]:
        output, state = gated_delta_rule(**row, output_final_state=True, backend="recurrent")
        return {"output": output, "final_state": state}

    return per_document(one_row, "cu_seqlens", time_dim=1)(inputs)


@dataclass(frozen=True)
class Adapter:
    """A calling convention of ``op``: the parameter names that recognize it, whether it takes grouped key heads,
    and how to call an implementation with seqdyn's inputs (→ its ``{"output", "final_state"}``)."""

    name: str
    op: str
    parameters: tuple[str, ...]
    grouped_heads: bool
    call: Callable[[Callable[..., Any], dict[str, Tensor]], dict[str, Tensor]]
    initial_state: bool = True
    #: whether a packed row can start its documents from states of their own (``seq_idx`` cannot say)
    packed_initial_state: bool = True

    def takes(self, case: Case, fn: Callable[..., Any] | None = None) -> bool:
        """Whether the convention can state ``case`` (grouped heads, an initial state) — a packed row only where
        ``fn`` takes the op's packing input by name."""
        packs = case.documents == 1 or (fn is not None and OPS[self.op].packing in parameters_of(fn))
        heads = self.grouped_heads or case.key_heads is None
        states = not case.initial_state or (self.initial_state and (case.documents == 1 or self.packed_initial_state))
        return packs and heads and states


def parameters_of(fn: Callable[..., Any]) -> set[str]:
    """The names of ``fn``'s parameters (none where its signature cannot be read)."""
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _transformers_delta_rule(fn: Callable[..., Any], inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    output, state = fn(**inputs, output_final_state=True, use_qk_l2norm_in_kernel=False)
    return {"output": output, "final_state": state}


def _fla_delta_rule(fn: Callable[..., Any], inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    q, k, v, g, beta = (inputs[name] for name in DELTA_RULE_INPUTS[:5])
    packed = {"cu_seqlens": inputs["cu_seqlens"]} if "cu_seqlens" in inputs else {}
    output, state = fn(
        q, k, v, beta=beta, g=g, initial_state=inputs.get("initial_state"), output_final_state=True, **packed
    )
    return {"output": output, "final_state": state}


#: the inputs of the selective scan in mamba_ssm's order: x, Δ (before its bias and softplus) ``[B, D, T]``, A
#: ``[D, N]``, B and C ``[B, N, T]``, D ``[D]``, the gate z ``[B, D, T]`` and Δ's bias ``[D]``
SCAN_INPUTS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


def scan_inputs(case: Case, generator: torch.Generator) -> dict[str, Tensor]:
    """A selective scan problem in float64: ``case.heads`` channels with a state of N = ``case.key_dim`` each; A < 0,
    from S4D-real's −(1 … N) at typical decays, × 30 at extreme ones, 0 for none."""

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    b, t, d, n = case.batch, case.length, case.heads, case.key_dim
    scale = {"typical": 1.0, "none": 0.0, "extreme": 30.0}[case.decay]
    return {
        "u": draw(b, d, t),
        "delta": draw(b, d, t),
        "A": -scale * torch.arange(1, n + 1, dtype=torch.float64).expand(d, n) / n,
        "B": draw(b, n, t),
        "C": draw(b, n, t),
        "D": draw(d),
        "z": draw(b, d, t),
        "delta_bias": draw(d) - 2.0,
    }


def scan_reference(inputs: dict[str, Tensor], backend: str = "recurrent") -> dict[str, Tensor]:
    """Gu & Dao 2023 (Mamba), Algorithm 2, by the operator's ``backend`` (the recurrent one: the reference) in the
    inputs' dtype (float64 for the reference)::

    Δ = softplus(δ + bias),   h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t,   y_t = (C_t · h_t + D x_t) · SiLU(z_t)"""
    from seqdyn.hf.acceleration.functions import selective_scan

    names = dict(zip(SCAN_INPUTS, ("hidden_states", "dt", "A", "B", "C", "D", "z", "delta_bias")))
    renamed = {names[name]: tensor for name, tensor in inputs.items()}
    output, state = selective_scan(**renamed, delta_softplus=True, return_last_state=True, backend=backend)
    return {"output": output, "final_state": state}


def _mamba_scan(fn: Callable[..., Any], inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    output, state = fn(*(inputs[name] for name in SCAN_INPUTS), delta_softplus=True, return_last_state=True)
    return {"output": output, "final_state": state}


#: the inputs of the short causal convolution in the ``causal_conv1d`` package's order: x ``[B, C, T]``, the
#: depthwise kernel ``[C, w]`` and its bias ``[C]``
CONV_INPUTS = ("x", "weight", "bias")
#: the kernel width of the convolution's cases (Mamba's, Mamba-2's, Gated DeltaNet's and GLA's short convolution)
CONV_WIDTH = 4


def conv_inputs(case: Case, generator: torch.Generator) -> dict[str, Tensor]:
    """A short convolution problem in float64: ``case.heads × case.key_dim`` channels of ``case.length`` steps, a
    kernel of :data:`CONV_WIDTH` taps (a case's decay and initial state do not apply)."""
    channels = case.heads * case.key_dim
    inputs = {
        "x": torch.randn(case.batch, channels, case.length, generator=generator, dtype=torch.float64),
        "weight": torch.randn(channels, CONV_WIDTH, generator=generator, dtype=torch.float64) / CONV_WIDTH**0.5,
        "bias": torch.randn(channels, generator=generator, dtype=torch.float64),
    }
    if case.documents > 1:  # the document of each step, as the causal_conv1d package's seq_idx
        lengths = torch.tensor(case.offsets).diff()
        inputs["seq_idx"] = torch.repeat_interleave(torch.arange(case.documents), lengths)[None].to(torch.int32)
    return inputs


def conv_reference(inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    """The short causal convolution with SiLU (Gu & Dao 2023's conv before the scan), by its definition with torch's
    depthwise ``conv1d`` in the inputs' dtype (float64 for the reference)::

    y_t = SiLU(b + Σ_{l<w} W[:, w−1−l] ⊙ x_{t−l}),   zeros before the start (of each packed document)"""

    def one_row(row: dict[str, Tensor]) -> dict[str, Tensor]:
        x, weight, bias = (row[name] for name in CONV_INPUTS)
        padded = F.pad(x, (weight.shape[1] - 1, 0))
        return {"output": F.silu(F.conv1d(padded, weight.unsqueeze(1), bias, groups=weight.shape[0]))}

    return per_document(one_row, "seq_idx", time_dim=2)(inputs)


def _conv(fn: Callable[..., Any], inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    packed = {"seq_idx": inputs["seq_idx"]} if "seq_idx" in inputs else {}
    return {"output": fn(*(inputs[name] for name in CONV_INPUTS), activation="silu", **packed)}


#: the inputs of Mamba-2's SSD scan in mamba_ssm's order: x ``[B, T, H, P]``, Δ (before its bias and softplus)
#: ``[B, T, H]``, A ``[H]``, B and C ``[B, T, G, N]`` (G groups of heads), D and Δ's bias ``[H]``, the initial state
#: ``[B, H, P, N]`` (where the case has one)
SSD_INPUTS = ("x", "dt", "A", "B", "C", "D", "dt_bias", "initial_states")
#: the chunk size the SSD cases are called with (the sweep's lengths straddle it)
SSD_CHUNK = 64


def ssd_inputs(case: Case, generator: torch.Generator) -> dict[str, Tensor]:
    """An SSD problem in float64: ``case.heads`` heads of P = ``case.value_dim`` channels, a state of N =
    ``case.key_dim`` per channel, ``case.groups`` groups of B and C; A = −(1 … H)/H (× 30 at extreme decays, 0 for
    none), Δ's bias around −2."""

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    b, t, h, g = case.batch, case.length, case.heads, case.groups
    scale = {"typical": 1.0, "none": 0.0, "extreme": 30.0}[case.decay]
    inputs = {
        "x": draw(b, t, h, case.value_dim),
        "dt": draw(b, t, h),
        "A": -scale * torch.arange(1, h + 1, dtype=torch.float64) / h,
        "B": draw(b, t, g, case.key_dim),
        "C": draw(b, t, g, case.key_dim),
        "D": draw(h),
        "dt_bias": draw(h) - 2.0,
    }
    if case.initial_state:
        inputs["initial_states"] = 0.1 * draw(b, h, case.value_dim, case.key_dim)
    if case.documents > 1:  # the document of each step, as mamba_ssm's seq_idx
        lengths = torch.tensor(case.offsets).diff()
        inputs["seq_idx"] = torch.repeat_interleave(torch.arange(case.documents), lengths)[None].to(torch.int32)
    return inputs


def ssd_reference(inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    """Dao & Gu 2024 (Mamba-2, SSD), eq. 1 with a scalar A per head, step by step in the inputs' dtype (float64)::

    Δ = softplus(δ + bias),   S_t = exp(Δ_t A_h) S_{t−1} + Δ_t x_t B_tᵀ,   y_t = S_t C_t + D_h x_t

    A packed row (``seq_idx``): each document from a zero state, its outputs only (mamba_ssm's convention)."""
    if "seq_idx" in inputs:
        return per_document(lambda row: {"output": ssd_reference(row)["output"]}, "seq_idx", time_dim=1)(inputs)
    x, dt, a, b, c, d, bias = (inputs[name] for name in SSD_INPUTS[:7])
    heads, groups = x.shape[2], b.shape[2]
    b, c = (t.repeat_interleave(heads // groups, dim=2) for t in (b, c))  # [B, T, G, N] → [B, T, H, N]
    step = F.softplus(dt + bias)  # [B, T, H]
    state = inputs.get("initial_states", x.new_zeros(x.shape[0], heads, x.shape[3], b.shape[3]))
    outputs = []
    for t in range(x.shape[1]):
        decay = torch.exp(step[:, t] * a)[..., None, None]  # [B, H, 1, 1]
        state = decay * state + (step[:, t, :, None] * x[:, t])[..., None] * b[:, t, :, None, :]
        outputs.append((state * c[:, t, :, None, :]).sum(-1) + d[:, None] * x[:, t])
    return {"output": torch.stack(outputs, dim=1), "final_state": state}


def ssd_call(fn: Callable[..., Any], inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    x, dt, a, b, c, d, bias = (inputs[name] for name in SSD_INPUTS[:7])
    if "seq_idx" in inputs:  # a packed row: outputs only
        output = fn(
            x, dt, a, b, c, chunk_size=SSD_CHUNK, D=d, dt_bias=bias, dt_softplus=True, seq_idx=inputs["seq_idx"]
        )
        return {"output": output}
    output, state = fn(
        x,
        dt,
        a,
        b,
        c,
        chunk_size=SSD_CHUNK,
        D=d,
        dt_bias=bias,
        initial_states=inputs.get("initial_states"),
        dt_softplus=True,
        return_final_states=True,
    )
    return {"output": output, "final_state": state}


#: the inputs of RecurrentGemma's linear recurrence (Griffin's RG-LRU after its gates): x and the gate a ``[B, T, W]``
#: (W = H × K channels of the case), the resets ``[B, T, 1]`` (where packed documents begin) and the initial state
#: ``[B, W]`` (where the case has one)
RNN_INPUTS = ("hidden_states", "recurrent_gate", "reset", "recurrent_states")


def rnn_inputs(case: Case, generator: torch.Generator) -> dict[str, Tensor]:
    """A linear-recurrence problem in float64: gates a = e^{−c} with c uniform in [0, 1] (typical; in [0, 30]
    extreme; a = 1 for none), resets at the starts of a packed row's documents after the first."""
    width = case.heads * case.key_dim
    high = {"typical": 1.0, "none": 0.0, "extreme": 30.0}[case.decay]
    reset = torch.zeros(case.batch, case.length, 1, dtype=torch.bool)
    reset[:, list(case.offsets[1:-1]) if case.documents > 1 else []] = True
    inputs = {
        "hidden_states": torch.randn(case.batch, case.length, width, generator=generator, dtype=torch.float64),
        "recurrent_gate": torch.exp(
            -high * torch.rand(case.batch, case.length, width, generator=generator, dtype=torch.float64)
        ),
        "reset": reset,
    }
    if case.initial_state:
        inputs["recurrent_states"] = torch.randn(case.batch, width, generator=generator, dtype=torch.float64)
    return inputs


def rnn_reference(inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    """De et al. 2024 (Griffin), eq. 4's linear recurrence after its gates, step by step in float64::

    h_t = a_t ⊙ h_{t−1} + x_t,   h_{t−1} taken as 0 where ``reset_t``"""
    x, gate, reset = (inputs[name] for name in RNN_INPUTS[:3])
    state = inputs.get("recurrent_states", x.new_zeros(x.shape[0], x.shape[2]))
    outputs = []
    for t in range(x.shape[1]):
        state = torch.where(reset[:, t], 0.0, gate[:, t] * state) + x[:, t]
        outputs.append(state)
    return {"output": torch.stack(outputs, dim=1), "final_state": state}


def rnn_call(fn: Callable[..., Any], inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    arguments = [inputs[name] for name in RNN_INPUTS[:3]] + [inputs.get("recurrent_states")]
    if "self" in parameters_of(fn):  # transformers' RecurrentGemmaRglru._rnn_scan, which never reads its self
        arguments.insert(0, None)
    output, state = fn(*arguments)
    return {"output": output, "final_state": state}


ADAPTERS = (
    # transformers' torch_chunk_gated_delta_rule and torch_recurrent_gated_delta_rule (Qwen3-Next, Qwen3.5, OLMo-hybrid)
    Adapter(
        "transformers", "gated_delta_rule", ("query", "key", "value", "g", "beta"), False, _transformers_delta_rule
    ),
    # flash-linear-attention's chunk_gated_delta_rule, fused_recurrent_gated_delta_rule and naive references (their
    # naive ones take as many key heads as value heads)
    Adapter("fla", "gated_delta_rule", ("q", "k", "v", "g", "beta"), False, _fla_delta_rule),
    # seqdyn's own, in transformers' names and with grouped key heads (seqdyn.hf.acceleration.functions)
    Adapter(
        "seqdyn",
        "gated_delta_rule",
        ("query", "key", "value", "g", "beta", "cu_seqlens"),
        True,
        _transformers_delta_rule,
    ),
    # mamba_ssm's selective_scan_fn and selective_scan_ref (transformers' mamba_selective_scan kernel)
    Adapter("mamba_ssm", "selective_scan", ("u", "delta", "A", "B", "C"), False, _mamba_scan, initial_state=False),
    # seqdyn's own, in transformers' names (seqdyn.hf.acceleration.functions.selective_scan)
    Adapter(
        "transformers",
        "selective_scan",
        ("hidden_states", "dt", "A", "B", "C"),
        False,
        _mamba_scan,
        initial_state=False,
    ),
    # the causal_conv1d package's causal_conv1d_fn (and transformers' fallback of that name)
    Adapter("causal_conv1d", "causal_conv1d", ("x", "weight", "bias", "activation"), False, _conv, False),
    # seqdyn's own, in transformers' names (seqdyn.hf.acceleration.functions.causal_conv1d)
    Adapter("transformers", "causal_conv1d", ("hidden_states", "weight", "bias", "activation"), False, _conv, False),
    # mamba_ssm's mamba_chunk_scan_combined
    Adapter("mamba_ssm", "ssd", ("x", "dt", "A", "B", "C", "chunk_size"), True, ssd_call, packed_initial_state=False),
    # transformers' mamba2_chunk_scan (Mamba-2, Bamba, Granite 4.0, Nemotron-H, Zamba2, Falcon-H1) and seqdyn's own
    # (seqdyn.hf.acceleration.functions.ssd_chunk_scan)
    Adapter(
        "transformers",
        "ssd",
        ("hidden_states", "dt", "A", "B", "C", "chunk_size"),
        True,
        ssd_call,
        packed_initial_state=False,
    ),
    # transformers' RecurrentGemmaRglru._rnn_scan and seqdyn's own (seqdyn.hf.acceleration.functions.linear_rnn_scan)
    Adapter(
        "transformers", "linear_rnn", ("hidden_states", "recurrent_gate", "reset", "recurrent_states"), False, rnn_call
    ),
)


@dataclass(frozen=True)
class Op:
    """An op: its inputs per case, its float64 reference, and which inputs take gradients."""

    name: str
    description: str
    inputs: Callable[[Case, torch.Generator], dict[str, Tensor]]
    reference: Callable[[dict[str, Tensor]], dict[str, Tensor]]
    differentiable: tuple[str, ...]
    #: the value width of its cases (0: a scan of channels, each with its own state, no value width)
    value_dim: int | None = None
    #: the input that marks a row's packed documents (``cu_seqlens``, ``seq_idx``); None: no packed form here
    packing: str | None = None

    def case(self, case: Case) -> Case:
        """``case`` as this op states it."""
        return case if self.value_dim is None else replace(case, value_dim=self.value_dim)


OPS = {
    "gated_delta_rule": Op(
        "gated_delta_rule",
        "the gated delta rule (Yang et al. 2025, Gated DeltaNet, eq. 10), outputs and final state",
        delta_rule_inputs,
        delta_rule_reference,
        DELTA_RULE_INPUTS,
        packing="cu_seqlens",
    ),
    "selective_scan": Op(
        "selective_scan",
        "Mamba's selective scan (Gu & Dao 2023, Algorithm 2), outputs and last state",
        scan_inputs,
        scan_reference,
        SCAN_INPUTS,
        value_dim=0,
    ),
    "causal_conv1d": Op(
        "causal_conv1d",
        "the short causal depthwise convolution with SiLU (Mamba's, Gated DeltaNet's), outputs",
        conv_inputs,
        conv_reference,
        CONV_INPUTS,
        value_dim=0,
        packing="seq_idx",
    ),
    "ssd": Op(
        "ssd",
        "Mamba-2's SSD scan (Dao & Gu 2024), outputs and final state, with grouped B and C",
        ssd_inputs,
        ssd_reference,
        SSD_INPUTS,
        packing="seq_idx",
    ),
    "linear_rnn": Op(
        "linear_rnn",
        "RecurrentGemma's linear recurrence after the RG-LRU's gates (De et al. 2024, Griffin eq. 4), with resets "
        "where packed documents begin",
        rnn_inputs,
        rnn_reference,
        ("hidden_states", "recurrent_gate", "recurrent_states"),
        value_dim=0,
        packing="reset",
    ),
}


def check_op(name: str) -> Op:
    if name not in OPS:
        raise ValueError(f"--op: seqdyn knows {', '.join(OPS)}; got {name!r}")
    return OPS[name]


def adapter_for(fn: Callable[..., Any], op: str, name: str | None = None) -> Adapter:
    """The adapter of ``op`` named ``name``, else the one whose parameters ``fn`` takes."""
    known = [adapter for adapter in ADAPTERS if adapter.op == op]
    if name is not None:
        for adapter in known:
            if adapter.name == name:
                return adapter
        raise ValueError(f"--adapter: {op} has the adapters {', '.join(a.name for a in known)}; got {name!r}")
    parameters = parameters_of(fn)
    for adapter in sorted(known, key=lambda adapter: -len(adapter.parameters)):  # the most specific first
        if set(adapter.parameters) <= parameters:
            return adapter
    conventions = "; ".join(f"{a.name}: ({', '.join(a.parameters)})" for a in known)
    raise ValueError(
        f"the callable's parameters ({', '.join(sorted(parameters)) or 'unreadable'}) match no calling convention of "
        f"{op} ({conventions}); wrap it in a function of one of them, or name one with --adapter"
    )
