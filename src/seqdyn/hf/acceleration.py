"""seqdyn's backends inside a loaded transformers model: :func:`accelerate` swaps a family's pure-PyTorch fallback
(what transformers runs on a CPU, or wherever ``mamba_ssm`` is not installed) for seqdyn's operator, in that model
only, leaving every weight and every other function of transformers as it is.

Swapped so far, each computed by :func:`seqdyn.coefficient_dynamics` (the ``chunk`` backend; the S6 scan: ``scan``):

- Mamba's ``mamba_selective_scan`` (the S6 scan of ``MambaMixer`` and ``FalconMambaMixer`` over a prompt): a
  diagonal decay per channel, the same recurrence as the fallback's token-by-token loop;

- Mamba-2's ``mamba2_chunk_scan`` (the SSD scan over a prompt of Mamba-2 and of the Mamba-2 layers of Bamba, Granite
  4.0, Nemotron-H, Zamba2 and Falcon-H1) — the same recurrence, with Δ clamped to their limits, without
  the fallback's float32 upcast of its inputs, with the final state returned for the cache, and with ``seq_idx``
  (packed sequences, which the fallback ignores) honoured;
- Gated DeltaNet's ``torch_chunk_gated_delta_rule`` (Qwen3.5, Qwen3.5-MoE, Qwen3-Next and OLMo-hybrid over a
  prompt) — with ``cu_seqlens`` (packed sequences, which the fallback ignores) honoured;
- RecurrentGemma's ``RecurrentGemmaRglru._rnn_scan`` (the RG-LRU's token-by-token loop over a prompt; a method, so
  swapped on each layer of the model) — on the ``scan`` backend, the resets as hard ones (decay 0);
- and, in every family but RecurrentGemma, the short convolution before the scan, ``causal_conv1d_fn``, by
  seqdyn's (:mod:`seqdyn.layers.conv`: read in the projection's own memory instead of a transposed copy; packed
  sequences honoured, which the fallback's convolution runs across).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core.operator import coefficient_dynamics
from seqdyn.core.packing import Packing
from seqdyn.layers.conv import causal_depthwise_conv
from seqdyn.layers.norms import l2_normalize

__all__ = ["ACCELERATED", "ACCELERATED_METHODS", "accelerate", "causal_conv1d", "gated_delta_rule", "linear_rnn_scan",
           "selective_scan", "ssd_chunk_scan", "swapped_functions"]

#: the chunk of seqdyn's ``chunk`` backend for the SSD scan, whatever the model asks for (Mamba-2 checkpoints: 256):
#: the result does not depend on it, and chunks of 64 steps form 4× fewer intra-chunk decays than chunks of 256 — on
#: one CPU thread at 4k tokens the scan runs about 3× faster (2026-11-27)
CHUNK_SIZE = 64
#: the delta rule's chunk, at most (transformers asks for 64): on one CPU thread at 4k tokens, 8 heads of 64 or of
#: 128, chunks of 32 run the forward 1.1–1.3× faster than chunks of 64 (the UT transform's inverse and grams shrink
#: with the chunk; the sequential hand-over of states grows with the count of chunks) (2026-11-28)
DELTA_RULE_CHUNK_SIZE = 32


@dataclass
class _Prompt:
    """What an accelerated layer's forward knows of its prompt that transformers does not tell the scan inside it.

    ``real`` ``[b, l]``: True at the real steps of a padded prompt (transformers passes the attention mask to the
    layer, not to its scan): the swapped scans make a padded step no step — decay 1, no input —, so that each row's
    final state is its state at its last real token (right padding: the fallbacks run on through the padding,
    decaying the state; left padding leaves a zero state zero in both); ``conv_input``: what the swapped convolution
    read, for the cache's convolution state.  ``previous_state``: the cache's recurrent state before the call, which
    Mamba's fallback does not continue from when a prompt comes in several pieces (it starts each from zeros)."""

    real: Tensor | None = None
    previous_state: Tensor | None = None
    conv_input: Tensor | None = None


_PROMPT: ContextVar[_Prompt | None] = ContextVar("seqdyn_accelerated_prompt", default=None)


def _real_steps(batch: int, length: int) -> Tensor | None:
    """``[b, l]`` True at the real steps of the prompt the accelerated layer runs, or ``None`` without padding."""
    prompt = _PROMPT.get()
    real = None if prompt is None else prompt.real
    return real if real is not None and real.shape == (batch, length) else None


def ssd_chunk_scan(hidden_states: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,  # noqa: N803
                   D: Tensor | None = None, dt_bias: Tensor | None = None,  # noqa: N803
                   initial_states: Tensor | None = None, dt_softplus: bool = False,
                   dt_limit: tuple[float, float] = (0.0, float("inf")), return_final_states: bool = False,
                   z: Tensor | None = None, seq_idx: Tensor | None = None, **_: Any):
    """``mamba_ssm``'s ``mamba_chunk_scan_combined`` (transformers' ``mamba2_chunk_scan``) by seqdyn's operator::

        Δ = clamp(softplus(dt + dt_bias)),   S_t = exp(Δ_t A_h) S_{t−1} + Δ_t x_t B_tᵀ,   y_t = S_t C_t + D_h x_t

    ``hidden_states`` x ``[b, l, h, p]``, ``dt`` ``[b, l, h]``, ``A`` ``[h]``, ``B``, ``C`` ``[b, l, g, n]`` (g groups
    of heads), ``initial_states`` and the final state ``[b, h, p, n]``; ``z``: the output gated by SiLU(z);
    ``seq_idx`` ``[1, l]``: packed sequences (each starts from a zero state)."""
    heads, groups = hidden_states.shape[2], B.shape[2]
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if dt_softplus:
        dt = F.softplus(dt)
    dt = dt.clamp(min=dt_limit[0], max=dt_limit[1])
    real = _real_steps(*dt.shape[:2])
    if real is not None:  # a padded step is no step: Δ = 0
        dt = dt * real.unsqueeze(-1)
    keys, queries = B, C  # [b, l, 1, n]: one group, shared by every head (its gram C Bᵀ formed once per chunk)
    if groups > 1:  # [b, l, g, n] → [b, l, h, n]: each group's for its heads
        keys, queries = (t.repeat_interleave(heads // groups, dim=2) for t in (B, C))
    state = None if initial_states is None else initial_states.transpose(-1, -2)  # seqdyn's S is [b, h, n, p]
    options = dict(log_decay=dt * A.to(dt.dtype), scale=dt, backend="chunk", chunk_size=min(chunk_size, CHUNK_SIZE))
    if seq_idx is not None:
        if return_final_states or state is not None:
            raise ValueError("seq_idx: packed sequences run from zero states here, without a final state")
        output = coefficient_dynamics(queries, keys, hidden_states, cu_seqlens=_cu_seqlens(seq_idx), **options)
        final = None
    else:
        output, final = coefficient_dynamics(queries, keys, hidden_states, initial_state=state,
                                             output_final_state=True, **options)
    if D is not None:
        output = output + (D[:, None] if D.dim() == 1 else D) * hidden_states
    if z is not None:
        output = output * F.silu(z)
    output = output.contiguous()  # (Falcon-H1 views it)
    return (output, final.transpose(-1, -2)) if return_final_states else output


def selective_scan(hidden_states: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,  # noqa: N803
                   D: Tensor | None = None, z: Tensor | None = None, delta_bias: Tensor | None = None,  # noqa: N803
                   delta_softplus: bool = False, return_last_state: bool = False, **_: Any):
    """``mamba_ssm``'s ``selective_scan_fn`` (transformers' ``mamba_selective_scan``) by seqdyn's operator (Gu & Dao
    2023, Algorithm 2)::

        Δ = softplus(dt + delta_bias),   h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t,   y_t = C_t · h_t + D x_t

    per channel d with its own state of N: ``hidden_states`` x, ``dt`` and ``z`` ``[b, d, l]``, ``A`` ``[d, N]``,
    ``B``, ``C`` ``[b, N, l]`` (shared by every channel); the last state ``[b, d, N]``; ``z``: y gated by SiLU(z).
    The operator's channels are its heads (K = N, V = 1), keys and queries shared by all of them, on the ``scan``
    backend (an associative scan over the steps)."""
    if delta_bias is not None:
        dt = dt + delta_bias.to(dt.dtype)[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    real = _real_steps(dt.shape[0], dt.shape[2])
    if real is not None:  # a padded step is no step: Δ = 0
        dt = dt * real.unsqueeze(1)
    step = dt.transpose(1, 2)  # [b, l, d]
    queries, keys = (t.transpose(1, 2).unsqueeze(2) for t in (C, B))  # [b, l, 1, N]
    values = hidden_states.transpose(1, 2).unsqueeze(-1)  # [b, l, d, 1]
    prompt = _PROMPT.get()
    previous = None if prompt is None else prompt.previous_state  # [b, d, N]: a prompt's earlier piece
    continued = previous is not None and previous.shape == (dt.shape[0], *A.shape)
    initial = previous.to(step.dtype).unsqueeze(-1) if continued else None  # [b, d, N, 1]
    output, state = coefficient_dynamics(queries.to(step.dtype), keys.to(step.dtype), values.to(step.dtype),
                                         log_decay=step.unsqueeze(-1) * A.to(step.dtype), scale=step, backend="scan",
                                         initial_state=initial, output_final_state=True)
    output = output.squeeze(-1).transpose(1, 2).to(hidden_states.dtype)  # [b, l, d, 1] → [b, d, l]
    if D is not None:
        output = output + hidden_states * D[:, None]
    if z is not None:
        output = output * F.silu(z)
    return (output, state.squeeze(-1)) if return_last_state else output


def gated_delta_rule(query: Tensor, key: Tensor, value: Tensor, g: Tensor, beta: Tensor, chunk_size: int = 64,
                     initial_state: Tensor | None = None, output_final_state: bool = False,
                     use_qk_l2norm_in_kernel: bool = False, cu_seqlens: Tensor | None = None, **_: Any):
    """flash-linear-attention's ``chunk_gated_delta_rule`` (transformers' ``torch_chunk_gated_delta_rule``) by seqdyn's
    operator (Yang et al. 2025, eq. 10)::

        S_t = exp(g_t) (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t / √K

    ``query``, ``key`` ``[b, l, h_k, K]`` (each of the h_k heads serves h / h_k consecutive value heads), ``value``
    ``[b, l, h, V]``, ``g``, ``beta`` ``[b, l, h]``, ``initial_state`` and the final state ``[b, h, K, V]``;
    ``use_qk_l2norm_in_kernel``: q, k ← q (‖q‖² + 1e-6)^-½ first (FLA's l2norm); ``cu_seqlens`` ``[N + 1]``: packed
    sequences in a batch of one, each from its own state.  Computed in float32 at least, as the fallback does."""
    dtype = value.dtype
    work = torch.promote_types(dtype, torch.float32)
    query, key, value, g, beta = (t.to(work) for t in (query, key, value, g, beta))
    real = _real_steps(*g.shape[:2])
    if real is not None:  # a padded step is no step: no decay (g = 0), no update (β = 0)
        g, beta = g.masked_fill(~real.unsqueeze(-1), 0.0), beta.masked_fill(~real.unsqueeze(-1), 0.0)
    if use_qk_l2norm_in_kernel:
        query, key = (l2_normalize(t, 1e-6, inside_root=True) for t in (query, key))
    heads = value.shape[2]
    # [b, h, l, ·] in memory, handed over as [b, l, h, ·] views: the operator's head-major layout without a copy
    queries, keys = (t.transpose(1, 2).repeat_interleave(heads // t.shape[2], dim=1).transpose(1, 2)
                     for t in (query * query.shape[-1] ** -0.5, key))
    value = value.transpose(1, 2).contiguous().transpose(1, 2)
    state = None if initial_state is None else initial_state.to(work)
    output, final = coefficient_dynamics(queries, keys, value, log_decay=g, householder=beta, scale=beta,
                                         initial_state=state, output_final_state=True, backend="chunk",
                                         chunk_size=min(chunk_size, DELTA_RULE_CHUNK_SIZE), cu_seqlens=cu_seqlens)
    return output.to(dtype), (final if output_final_state else None)


def linear_rnn_scan(hidden_states: Tensor, recurrent_gate: Tensor, reset: Tensor,
                    recurrent_states: Tensor | None = None, acc_dtype: torch.dtype = torch.float32
                    ) -> tuple[Tensor, Tensor]:
    """RecurrentGemma's ``_rnn_scan`` (Griffin eq. 4's linear recurrence after its gates) by seqdyn's operator::

        h_t = a_t ⊙ h_{t−1} + x_t,   a_t = 0 where ``reset``

    ``hidden_states`` x and ``recurrent_gate`` a ``[b, l, w]``, ``reset`` ``[b, l, 1]``, ``recurrent_states`` h₀ and
    the last state ``[b, w]`` (in ``acc_dtype`` at least); the output in x's dtype.  Each channel is a head of
    the operator (K = V = 1, q = k = 1, Λ = a_t, log a = −∞ at a reset), on the ``scan`` backend."""
    work = torch.promote_types(hidden_states.dtype, acc_dtype)
    log_gate = torch.log(recurrent_gate.to(work)).masked_fill(reset, float("-inf"))
    ones = hidden_states.new_ones(*hidden_states.shape[:2], 1, 1, dtype=work)  # [b, l, 1, 1]: q = k = 1, shared
    state = None if recurrent_states is None else recurrent_states.to(work)[..., None, None]  # [b, w, 1, 1]
    output, final = coefficient_dynamics(ones, ones, hidden_states.to(work).unsqueeze(-1), log_decay=log_gate,
                                         scale=1.0, initial_state=state, output_final_state=True, backend="scan")
    return output.squeeze(-1).to(hidden_states.dtype), final[..., 0, 0]


def causal_conv1d(hidden_states: Tensor, weight: Tensor, bias: Tensor | None = None, activation: str | None = None,
                  seq_idx: Tensor | None = None, cu_seq_lens_q: Tensor | None = None, **_: Any) -> Tensor:
    """The ``causal_conv1d`` package's ``causal_conv1d_fn`` (transformers' fallback of that name) by seqdyn's short
    convolution (:func:`~seqdyn.layers.conv.causal_depthwise_conv`)::

        y_t = act(b + Σ_{l<w} W[:, w−1−l] ⊙ x_{t−l})   (zeros before the start; act SiLU or none)

    ``hidden_states`` ``[b, c, l]`` — a transposed view of a projection's ``[b, l, c]``, read in place instead of
    transposed into a copy —, ``weight`` ``[c, w]``, the output ``[b, c, l]`` (a view of ``[b, l, c]`` memory);
    ``seq_idx`` ``[1, l]`` or ``cu_seq_lens_q`` ``[N + 1]``: packed sequences, whose steps never read the sequence
    before (the fallback's convolution runs across them)."""
    if activation not in (None, "silu", "swish"):
        raise ValueError(f"activation: {activation!r} after the convolution is not accelerated (SiLU or none)")
    x = hidden_states.transpose(1, 2).to(weight.dtype)  # [b, l, c]
    prompt = _PROMPT.get()
    if prompt is not None and prompt.real is not None:
        prompt.conv_input = hidden_states
    positions = None
    if seq_idx is not None or cu_seq_lens_q is not None:
        offsets = _cu_seqlens(seq_idx) if cu_seq_lens_q is None else cu_seq_lens_q
        positions = Packing.of(offsets, x.shape[1], x.shape[0], x.device).position
    y = causal_depthwise_conv(x, weight, bias, positions)
    if activation is not None:
        y = F.silu(y)
    return y.to(hidden_states.dtype).transpose(1, 2)


def _cu_seqlens(seq_idx: Tensor) -> Tensor:
    """``seq_idx`` ``[1, l]`` (the sequence of each packed step, non-decreasing) as offsets ``[N + 1]``."""
    if seq_idx.dim() != 2 or seq_idx.shape[0] != 1:
        raise ValueError(f"seq_idx: expected [1, l] for a batch of one packed row, got {tuple(seq_idx.shape)}")
    counts = torch.unique_consecutive(seq_idx[0], return_counts=True)[1]
    return F.pad(counts.cumsum(0), (1, 0)).to(torch.int32)


#: transformers module → {its fallback's name: seqdyn's function}: what :func:`accelerate` swaps, per family
ACCELERATED: dict[str, dict[str, Callable[..., Any]]] = {
    **{f"transformers.models.{name}.modeling_{name}": {"mamba_selective_scan": selective_scan,
                                                        "causal_conv1d_fn": causal_conv1d}
       for name in ("mamba", "falcon_mamba")},
    **{f"transformers.models.{name}.modeling_{name}": {"mamba2_chunk_scan": ssd_chunk_scan,
                                                        "causal_conv1d_fn": causal_conv1d}
       for name in ("mamba2", "bamba", "granitemoehybrid", "nemotron_h", "zamba2", "falcon_h1")},
    **{f"transformers.models.{name}.modeling_{name}": {"torch_chunk_gated_delta_rule": gated_delta_rule,
                                                        "causal_conv1d_fn": causal_conv1d}
       for name in ("qwen3_5", "qwen3_5_moe", "qwen3_next", "olmo_hybrid")},
}
#: transformers layer class → {its method that runs a fallback: seqdyn's function}, swapped on each such layer
ACCELERATED_METHODS: dict[str, dict[str, Callable[..., Any]]] = {
    "RecurrentGemmaRglru": {"_rnn_scan": linear_rnn_scan},
}
#: the transformers layer classes whose forward runs the functions above
_LAYERS = {"MambaMixer": "transformers.models.mamba.modeling_mamba",
           "FalconMambaMixer": "transformers.models.falcon_mamba.modeling_falcon_mamba",
           "Mamba2Mixer": "transformers.models.mamba2.modeling_mamba2",
           "BambaMixer": "transformers.models.bamba.modeling_bamba",
           "GraniteMoeHybridMambaLayer": "transformers.models.granitemoehybrid.modeling_granitemoehybrid",
           "NemotronHMamba2Mixer": "transformers.models.nemotron_h.modeling_nemotron_h",
           "Zamba2MambaMixer": "transformers.models.zamba2.modeling_zamba2",
           "FalconH1Mixer": "transformers.models.falcon_h1.modeling_falcon_h1",
           "Qwen3_5GatedDeltaNet": "transformers.models.qwen3_5.modeling_qwen3_5",
           "Qwen3_5MoeGatedDeltaNet": "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
           "Qwen3NextGatedDeltaNet": "transformers.models.qwen3_next.modeling_qwen3_next",
           "OlmoHybridGatedDeltaNet": "transformers.models.olmo_hybrid.modeling_olmo_hybrid"}


@contextmanager
def _swapped(module_name: str) -> Iterator[None]:
    """Within the block, the functions of :data:`ACCELERATED` for ``module_name`` replace transformers' own."""
    module = importlib.import_module(module_name)
    originals = {name: getattr(module, name) for name in ACCELERATED[module_name]}
    try:
        for name, function in ACCELERATED[module_name].items():
            setattr(module, name, function)
        yield
    finally:
        for name, function in originals.items():
            setattr(module, name, function)


def accelerate(model: nn.Module) -> nn.Module:
    """``model`` (a loaded transformers model) with each layer of a family in :data:`ACCELERATED` running seqdyn's
    function instead of transformers' fallback, in this model only (its layers' ``forward`` swap them in for the
    duration of their own call); returns ``model``.  Raises ``ValueError`` where no layer of it is accelerated."""
    found = 0
    for layer in model.modules():
        kind = type(layer).__name__
        if kind not in _LAYERS and kind not in ACCELERATED_METHODS:
            continue
        found += 1
        if getattr(layer, "_seqdyn_accelerated", False):  # accelerated once: not wrapped twice
            continue
        if kind in _LAYERS:
            layer.forward = _accelerated_forward(layer.forward, _LAYERS[kind], layer)
        for name, function in ACCELERATED_METHODS.get(kind, {}).items():
            setattr(layer, name, _accelerated_method(getattr(layer, name), function))
        layer._seqdyn_accelerated = True
    if not found:
        raise ValueError(f"model: {type(model).__name__} has no layer seqdyn accelerates (supported: "
                         f"{', '.join([*_LAYERS, *ACCELERATED_METHODS])})")
    return model


def swapped_functions(model: nn.Module) -> list[tuple[Any, str, Callable[..., Any]]]:
    """What :func:`accelerate` swaps in ``model``, once each: ``(owner, name, seqdyn's function)`` with ``owner``
    the transformers module whose function ``name`` is the fallback, or the first layer whose method it is."""
    swaps: dict[tuple[str, str], tuple[Any, str, Callable[..., Any]]] = {}
    for layer in model.modules():
        kind = type(layer).__name__
        if kind in _LAYERS:
            module = importlib.import_module(_LAYERS[kind])
            for name, function in ACCELERATED[_LAYERS[kind]].items():
                swaps.setdefault((_LAYERS[kind], name), (module, name, function))
        for name, function in ACCELERATED_METHODS.get(kind, {}).items():
            swaps.setdefault((kind, name), (layer, name, function))
    return list(swaps.values())


def _accelerated_method(method: Callable[..., Any], function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` in place of a layer's bound ``method``, except for one decoded token (the step update)."""
    @functools.wraps(method)
    def accelerated(hidden_states: Tensor, *args: Any, **kwargs: Any) -> Any:
        if hidden_states.shape[1] == 1:
            return method(hidden_states, *args, **kwargs)
        return function(hidden_states, *args, **kwargs)

    return accelerated


def _accelerated_forward(forward: Callable[..., Any], module_name: str, layer: nn.Module) -> Callable[..., Any]:
    """``forward(hidden_states, cache=None, attention_mask=None, ...)`` of a transformers layer, with the functions
    of :data:`ACCELERATED` for ``module_name`` swapped in and told what the layer knows of its prompt
    (:class:`_Prompt`)."""
    @functools.wraps(forward)
    def accelerated(*args: Any, **kwargs: Any) -> Any:
        hidden = args[0] if args else kwargs.get("hidden_states")
        if isinstance(hidden, Tensor) and hidden.dim() == 3 and hidden.shape[1] == 1:
            return forward(*args, **kwargs)  # one decoded token: the step update, no scan to swap
        cache = args[1] if len(args) > 1 else kwargs.get("cache")
        mask = args[2] if len(args) > 2 else kwargs.get("attention_mask")
        layer_idx = getattr(layer, "layer_idx", None)
        prompt = _Prompt(_real_of(mask, hidden), _recurrent_state(cache, layer_idx))
        token = _PROMPT.set(prompt)
        try:
            with _swapped(module_name):
                output = forward(*args, **kwargs)
        finally:
            _PROMPT.reset(token)
        if prompt.real is not None and cache is not None:
            _keep_real_conv_state(cache, layer_idx, prompt)
        return output

    return accelerated


def _real_of(mask: Any, hidden: Any) -> Tensor | None:
    """The real steps ``[b, l]`` of a padded prompt from the layer's ``attention_mask`` (1 at real tokens)."""
    if not isinstance(mask, Tensor) or not isinstance(hidden, Tensor) or mask.dim() != 2:
        return None
    if mask.shape != hidden.shape[:2] or bool(mask.all()):
        return None
    return mask.bool()


def _recurrent_state(cache: Any, layer_idx: int | None) -> Tensor | None:
    """The cache's recurrent state of the layer before this call (``None`` before its first piece)."""
    if cache is None or layer_idx is None or not hasattr(cache, "get_recurrent_state"):
        return None
    try:
        return cache.get_recurrent_state(layer_idx)
    except (ValueError, IndexError):  # no state of this layer kept yet
        return None


def _keep_real_conv_state(cache: Any, layer_idx: int | None, prompt: _Prompt) -> None:
    """The cache's convolution state of each row as its last inputs up to its last real step (transformers keeps
    the last inputs of the prompt, right padding included), from what the swapped convolution read."""
    inputs = prompt.conv_input  # [b, c, l]
    state = cache.get_conv_state(layer_idx) if layer_idx is not None and inputs is not None else None
    if state is None or inputs.shape[-1] != prompt.real.shape[1]:
        return
    width, length = state.shape[-1], inputs.shape[-1]
    ends = length - prompt.real.flip(-1).int().argmax(-1)  # [b]: one past each row's last real step
    window = torch.arange(width, device=inputs.device) - width  # [w]: the steps before the end
    steps = ends.unsqueeze(-1) + window  # [b, w]
    taken = inputs.gather(-1, steps.clamp(min=0).unsqueeze(1).expand(-1, inputs.shape[1], -1))  # [b, c, w]
    state.copy_(taken.masked_fill((steps < 0).unsqueeze(1), 0.0).to(state.dtype))
