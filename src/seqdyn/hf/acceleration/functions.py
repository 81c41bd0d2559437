"""seqdyn's operator in the signatures of transformers' pure-PyTorch fallbacks (what transformers runs on a CPU, or
wherever ``mamba_ssm``, ``causal_conv1d`` or flash-linear-attention is not installed), each computed by
:func:`seqdyn.coefficient_dynamics` (the ``chunk`` backend; the S6 and RG-LRU scans: ``scan``):

- :func:`selective_scan` for Mamba's ``mamba_selective_scan`` (the S6 scan of ``MambaMixer`` and
  ``FalconMambaMixer`` over a prompt): a diagonal decay per channel, the same recurrence as the fallback's
  token-by-token loop;
- :func:`ssd_chunk_scan` for Mamba-2's ``mamba2_chunk_scan`` (the SSD scan over a prompt of Mamba-2 and of the
  Mamba-2 layers of Bamba, Granite 4.0, Nemotron-H, Zamba2 and Falcon-H1) — the same recurrence, with Δ clamped to
  their limits, without the fallback's float32 upcast of its inputs, with the final state returned for the cache,
  and with ``seq_idx`` (packed sequences, which the fallback ignores) honoured;
- :func:`gated_delta_rule` for Gated DeltaNet's ``torch_chunk_gated_delta_rule`` (Qwen3.5, Qwen3.5-MoE, Qwen3-Next
  and OLMo-hybrid over a prompt) — with ``cu_seqlens`` (packed sequences, which the fallback ignores) honoured;
- :func:`linear_rnn_scan` for RecurrentGemma's ``RecurrentGemmaRglru._rnn_scan`` (the RG-LRU's token-by-token loop
  over a prompt) — the resets as hard ones (decay 0);
- :func:`rwkv_linear_attention` for RWKV-4's ``rwkv_linear_attention`` (the WKV of ``RwkvSelfAttention``, whose
  CPU fallback loops over the tokens) — the same (numerator, denominator, maximum) state;
- :func:`mlstm_backend` for xLSTM 7B's ``xLSTMBackend.forward`` (its chunkwise, sequence and step kernels: the
  mLSTM with its stabilizer and its normalizer's ε·e^{m_t}) — the same (C̃, ñ, m) state;
- :func:`causal_conv1d` for ``causal_conv1d_fn``, the short convolution before the scan in every family but
  RecurrentGemma (:mod:`seqdyn.layers.conv`: read in the projection's own memory instead of a transposed copy;
  packed sequences honoured, which the fallback's convolution runs across).

Inside an accelerated layer they read what the layer knows of its prompt (padding, the cache's state) from
:func:`~seqdyn.hf.acceleration.prompt.current_prompt`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdyn.core.low_rank import householder_as_low_rank
from seqdyn.core.operator import coefficient_dynamics
from seqdyn.core.packing import Packing
from seqdyn.core.problem import DELTA_RULE_CHUNK_SIZE
from seqdyn.hf.acceleration.prompt import current_prompt, real_steps
from seqdyn.layers.conv import causal_depthwise_conv
from seqdyn.layers.norms import l2_normalize
from seqdyn.mixers.mlstm import mlstm_dynamics
from seqdyn.mixers.rwkv4 import wkv_inputs

__all__ = [
    "CHUNK_SIZE",
    "DELTA_RULE_CHUNK_SIZE",
    "causal_conv1d",
    "gated_delta_rule",
    "linear_rnn_scan",
    "mlstm_backend",
    "rwkv_linear_attention",
    "selective_scan",
    "ssd_chunk_scan",
]

#: the chunk of seqdyn's ``chunk`` backend for the SSD scan, whatever the model asks for (Mamba-2 checkpoints: 256):
#: the result does not depend on it, and chunks of 64 steps form 4× fewer intra-chunk decays than chunks of 256 — on
#: one CPU thread at 4k tokens the scan runs about 3× faster (2026-11-27)
CHUNK_SIZE = 64


def ssd_chunk_scan(
    hidden_states: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    chunk_size: int,  # noqa: N803
    D: Tensor | None = None,
    dt_bias: Tensor | None = None,  # noqa: N803
    initial_states: Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    z: Tensor | None = None,
    seq_idx: Tensor | None = None,
    backend: str = "chunk",
    **_: Any,
):
    """``mamba_ssm``'s ``mamba_chunk_scan_combined`` (transformers' ``mamba2_chunk_scan``) by seqdyn's operator::

        Δ = clamp(softplus(dt + dt_bias)),   S_t = exp(Δ_t A_h) S_{t−1} + Δ_t x_t B_tᵀ,   y_t = S_t C_t + D_h x_t

    ``hidden_states`` x ``[b, l, h, p]``, ``dt`` ``[b, l, h]``, ``A`` ``[h]``, ``B``, ``C`` ``[b, l, g, n]`` (g groups
    of heads), ``initial_states`` and the final state ``[b, h, p, n]``; ``z``: the output gated by SiLU(z);
    ``seq_idx`` ``[1, l]``: packed sequences (each starts from a zero state); ``backend``: the operator's (``chunk``,
    at ``chunk_size`` up to :data:`CHUNK_SIZE`)."""
    heads, groups = hidden_states.shape[2], B.shape[2]
    dt = _steps(dt, dt_bias, dt_softplus, dt_limit)
    keys, queries = B, C  # [b, l, 1, n]: one group, shared by every head (its gram C Bᵀ formed once per chunk)
    if groups > 1:  # [b, l, g, n] → [b, l, h, n]: each group's for its heads
        keys, queries = (t.repeat_interleave(heads // groups, dim=2) for t in (B, C))
    state = None if initial_states is None else initial_states.transpose(-1, -2)  # seqdyn's S is [b, h, n, p]
    options = dict(log_decay=dt * A.to(dt.dtype), scale=dt, backend=backend)
    if backend == "chunk":
        options["chunk_size"] = min(chunk_size, CHUNK_SIZE)
    if seq_idx is not None:
        if return_final_states or state is not None:
            raise ValueError("seq_idx: packed sequences run from zero states here, without a final state")
        output = coefficient_dynamics(queries, keys, hidden_states, cu_seqlens=_cu_seqlens(seq_idx), **options)
        final = None
    else:
        output, final = coefficient_dynamics(
            queries, keys, hidden_states, initial_state=state, output_final_state=True, **options
        )
    if D is not None:
        output = output + (D[:, None] if D.dim() == 1 else D) * hidden_states
    if z is not None:
        output = output * F.silu(z)
    output = output.contiguous()  # (Falcon-H1 views it)
    return (output, final.transpose(-1, -2)) if return_final_states else output


def _steps(dt: Tensor, bias: Tensor | None, softplus: bool, limit: tuple[float, float] | None = None) -> Tensor:
    """The steps ``Δ = clamp(softplus(dt + bias))`` ``[b, l, c]`` of ``dt`` ``[b, l, c]`` (c channels or heads; the
    bias ``[c]``, the softplus and the clamp to ``limit`` where given), 0 at the padded steps of the prompt."""
    if bias is not None:
        dt = dt + bias.to(dt.dtype)
    if softplus:
        dt = F.softplus(dt)
    if limit is not None:
        dt = dt.clamp(min=limit[0], max=limit[1])
    real = real_steps(*dt.shape[:2])
    if real is not None:  # a padded step is no step: Δ = 0
        dt = dt * real.unsqueeze(-1)
    return dt


def selective_scan(
    hidden_states: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,  # noqa: N803
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,  # noqa: N803
    delta_softplus: bool = False,
    return_last_state: bool = False,
    backend: str = "scan",
    **_: Any,
):
    """``mamba_ssm``'s ``selective_scan_fn`` (transformers' ``mamba_selective_scan``) by seqdyn's operator (Gu & Dao
    2023, Algorithm 2)::

        Δ = softplus(dt + delta_bias),   h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t,   y_t = C_t · h_t + D x_t

    per channel d with its own state of N: ``hidden_states`` x, ``dt`` and ``z`` ``[b, d, l]``, ``A`` ``[d, N]``,
    ``B``, ``C`` ``[b, N, l]`` (shared by every channel); the last state ``[b, d, N]``; ``z``: y gated by SiLU(z).
    The operator's channels are its heads (K = N, V = 1), keys and queries shared by all of them, on the ``scan``
    backend (an associative scan over the steps; ``backend``: another of the operator's)."""
    step = _steps(dt.transpose(1, 2), delta_bias, delta_softplus)  # [b, l, d]
    queries, keys = (t.transpose(1, 2).unsqueeze(2) for t in (C, B))  # [b, l, 1, N]
    values = hidden_states.transpose(1, 2).unsqueeze(-1)  # [b, l, d, 1]
    prompt = current_prompt()
    previous = None if prompt is None else prompt.previous_state  # [b, d, N]: a prompt's earlier piece
    continued = previous is not None and previous.shape == (dt.shape[0], *A.shape)
    initial = previous.to(step.dtype).unsqueeze(-1) if continued else None  # [b, d, N, 1]
    output, state = coefficient_dynamics(
        queries.to(step.dtype),
        keys.to(step.dtype),
        values.to(step.dtype),
        log_decay=step.unsqueeze(-1) * A.to(step.dtype),
        scale=step,
        backend=backend,
        initial_state=initial,
        output_final_state=True,
    )
    output = output.squeeze(-1).transpose(1, 2).to(hidden_states.dtype)  # [b, l, d, 1] → [b, d, l]
    if D is not None:
        output = output + hidden_states * D[:, None]
    if z is not None:
        output = output * F.silu(z)
    return (output, state.squeeze(-1)) if return_last_state else output


def gated_delta_rule(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor,
    beta: Tensor,
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: Tensor | None = None,
    backend: str = "chunk",
    **_: Any,
):
    """flash-linear-attention's ``chunk_gated_delta_rule`` (transformers' ``torch_chunk_gated_delta_rule``) by seqdyn's
    operator (Yang et al. 2025, eq. 10)::

        S_t = exp(g_t) (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t / √K

    ``query``, ``key`` ``[b, l, h_k, K]`` (each of the h_k heads serves h / h_k consecutive value heads), ``value``
    ``[b, l, h, V]``, ``g``, ``beta`` ``[b, l, h]``, ``initial_state`` and the final state ``[b, h, K, V]``;
    ``use_qk_l2norm_in_kernel``: q, k ← q (‖q‖² + 1e-6)^-½ first (FLA's l2norm); ``cu_seqlens`` ``[N + 1]``: packed
    sequences in a batch of one, each from its own state; ``backend``: the operator's (``recurrent``: the float64
    reference of :mod:`seqdyn.conform`).  Computed in float32 at least, as the fallback does."""
    dtype, work = value.dtype, torch.promote_types(value.dtype, torch.float32)
    query, key, value, g, beta = _delta_rule_inputs(query, key, value, g, beta, use_qk_l2norm_in_kernel)
    queries, keys = _repeated_heads(query * query.shape[-1] ** -0.5, key, value.shape[2])
    state = None if initial_state is None else initial_state.to(work)
    output, final = coefficient_dynamics(
        queries,
        keys,
        value,
        log_decay=g,
        householder=beta,
        scale=beta,
        initial_state=state,
        output_final_state=True,
        backend=backend,
        **({"chunk_size": min(chunk_size, DELTA_RULE_CHUNK_SIZE)} if backend == "chunk" else {}),
        cu_seqlens=cu_seqlens,
    )
    return output.to(dtype), (final if output_final_state else None)


def kimi_delta_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    g: Tensor,
    beta: Tensor,
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: Tensor | None = None,
    **_: Any,
):
    """flash-linear-attention's ``chunk_kda`` and ``fused_recurrent_kda`` (transformers' ``chunk_kimi_delta_attention``
    and ``recurrent_kimi_delta_attention``) by seqdyn's operator (Kimi Team 2025, eq. 1)::

        S_t = (I − β_t k_t k_tᵀ) Diag(e^{g_t}) S_{t−1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t / √K

    as the diagonal-plus-low-rank ``Diag(α_t) − β_t k_t (α_t ⊙ k_t)ᵀ`` (:mod:`seqdyn.core.low_rank`), one step per
    token.  ``query``, ``key``, ``value``, ``g`` ``[b, l, h, K]`` (``g`` per key channel), ``beta`` ``[b, l, h]``,
    ``initial_state`` and the final state ``[b, h, K, V]``; ``use_qk_l2norm_in_kernel``: q, k ← q (‖q‖² + 1e-6)^-½
    first; ``cu_seqlens``: packed sequences, each from its own state; ``chunk_size`` is not used (the operator
    chooses its chunks, which do not change the result).  In float32 at least, as the fallback."""
    dtype, work = value.dtype, torch.promote_types(value.dtype, torch.float32)
    query, key, value, g, beta = _delta_rule_inputs(query, key, value, g, beta, use_qk_l2norm_in_kernel)
    write, read = householder_as_low_rank(beta, key, g, decay_first=True)
    output, final = coefficient_dynamics(
        query * query.shape[-1] ** -0.5,
        key,
        value,
        log_decay=g,
        low_rank_write=write,
        low_rank_read=read,
        scale=beta,
        initial_state=None if initial_state is None else initial_state.to(work),
        output_final_state=True,
        backend="chunk",
        cu_seqlens=cu_seqlens,
    )
    return output.to(dtype), (final if output_final_state else None)


def _delta_rule_inputs(
    query: Tensor, key: Tensor, value: Tensor, g: Tensor, beta: Tensor, l2norm: bool
) -> tuple[Tensor, ...]:
    """A delta rule's arguments as its fallbacks compute them: in float32 at least, a padded step no step (no decay,
    g = 0; no update, β = 0), and with ``l2norm`` q, k ← q (‖q‖² + 1e-6)^-½ (FLA's l2norm, ε inside the root).
    ``query``, ``key``, ``value`` come back in the operator's head-major memory (:func:`_in_head_major_memory`)."""
    work = torch.promote_types(value.dtype, torch.float32)
    query, key, value = (_in_head_major_memory(t) for t in (query, key, value))
    query, key, value, g, beta = (t.to(work) for t in (query, key, value, g, beta))
    real = real_steps(*g.shape[:2])
    if real is not None:
        g = g.masked_fill(~real.view(*real.shape, *(1,) * (g.dim() - 2)), 0.0)
        beta = beta.masked_fill(~real.unsqueeze(-1), 0.0)
    if l2norm:
        query, key = (l2_normalize(t, 1e-6, inside_root=True) for t in (query, key))
    return query, key, value, g, beta


def _in_head_major_memory(x: Tensor) -> Tensor:
    """``x`` ``[b, l, h, ·]`` with its values in ``[b, h, l, ·]`` memory, the operator's layout (copied once where it
    is not: transformers hands over views of its short convolution's ``[b, channels, l]`` output, whose steps are
    innermost; a norm over the channels of such a view, or a copy of it per repeated head, is several times slower
    than on rows in memory)."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def _repeated_heads(query: Tensor, key: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """``query``, ``key`` ``[b, l, h_k, K]`` in head-major memory (:func:`_delta_rule_inputs`) repeated to ``heads``
    heads (each serving ``heads / h_k`` consecutive heads), ``[b, h, l, K]`` in memory handed over as ``[b, l, h, K]``
    views: the operator's head-major layout without a further copy."""
    return tuple(t.transpose(1, 2).repeat_interleave(heads // t.shape[2], dim=1).transpose(1, 2) for t in (query, key))


def linear_rnn_scan(
    hidden_states: Tensor,
    recurrent_gate: Tensor,
    reset: Tensor,
    recurrent_states: Tensor | None = None,
    acc_dtype: torch.dtype = torch.float32,
    backend: str = "scan",
) -> tuple[Tensor, Tensor]:
    """RecurrentGemma's ``_rnn_scan`` (Griffin eq. 4's linear recurrence after its gates) by seqdyn's operator::

        h_t = a_t ⊙ h_{t−1} + x_t,   a_t = 0 where ``reset``

    ``hidden_states`` x and ``recurrent_gate`` a ``[b, l, w]``, ``reset`` ``[b, l, 1]``, ``recurrent_states`` h₀ and
    the last state ``[b, w]`` (in ``acc_dtype`` at least); the output in x's dtype.  Each channel is a head of
    the operator (K = V = 1, q = k = 1, Λ = a_t, log a = −∞ at a reset), on the ``scan`` backend (or ``backend``)."""
    work = torch.promote_types(hidden_states.dtype, acc_dtype)
    log_gate = torch.log(recurrent_gate.to(work)).masked_fill(reset, float("-inf"))
    ones = hidden_states.new_ones(*hidden_states.shape[:2], 1, 1, dtype=work)  # [b, l, 1, 1]: q = k = 1, shared
    state = None if recurrent_states is None else recurrent_states.to(work)[..., None, None]  # [b, w, 1, 1]
    output, final = coefficient_dynamics(
        ones,
        ones,
        hidden_states.to(work).unsqueeze(-1),
        log_decay=log_gate,
        scale=1.0,
        initial_state=state,
        output_final_state=True,
        backend=backend,
    )
    return output.squeeze(-1).to(hidden_states.dtype), final[..., 0, 0]


def rwkv_linear_attention(
    time_decay: Tensor,
    time_first: Tensor,
    key: Tensor,
    value: Tensor,
    state: list[Tensor] | None = None,
    return_state: bool = False,
) -> tuple[Tensor, list[Tensor] | None]:
    """RWKV-4's WKV (Peng et al. 2023 eq. 14; transformers' ``rwkv_linear_attention``) by seqdyn's operator::

        wkv_t = (Σ_{j<t} e^{−(t−1−j) w + k_j} v_j + e^{u + k_t} v_t) / (Σ_{j<t} e^{−(t−1−j) w + k_j} + e^{u + k_t})

    with ``w = exp(time_decay)`` and ``u = time_first`` ``[A]``, ``key`` and ``value`` ``[B, T, A]``; ``state``:
    transformers' ``[numerator, denominator, maximum]`` ``[B, A]`` each (the true sums are the first two times
    ``e^maximum``), returned updated where given or asked for, as the fallback does.  The WKV is computed as the
    ``rwkv4`` mixer computes it (:func:`seqdyn.mixers.rwkv4.wkv_inputs`, the ``chunk`` backend), in float32 at
    least (the fallback's precision)."""
    work = torch.promote_types(key.dtype, torch.float32)
    start = None if state is None else (torch.stack(state[:2], dim=-1).to(work), state[2])
    dynamics, reading = wkv_inputs(key.to(work), value.to(work), time_decay.to(work), time_first.to(work), start)
    read, final = coefficient_dynamics(
        dynamics, initial_state=None if start is None else start[0][:, :, None], output_final_state=True
    )
    output = reading.wkv(read).to(key.dtype)
    if not (return_state or state is not None):
        return output, None
    return output, [final[:, :, 0, 0], final[:, :, 0, 1], reading.levels[:, -1].to(torch.float32)]


def mlstm_backend(
    backend: Any,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    igate: Tensor,
    fgate: Tensor,
    c_initial: Tensor | None = None,
    n_initial: Tensor | None = None,
    m_initial: Tensor | None = None,
    return_last_states: bool | None = None,
    mode: str | None = None,
) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
    """xLSTM 7B's ``xLSTMBackend.forward`` (bound to the backend ``backend``, whose ``config`` it reads) by seqdyn's
    operator: per head, with ``q`` scaled by ``K^-½``, the input gate ``ĩ`` and the forget gate's preactivation ``f̃``
    ``[B, H, T]`` and the stabilizer ``m_t = max(log f_t + m_{t−1}, ĩ_t)``::

        C_t = f_t C_{t−1} + e^{ĩ_t} k_t v_tᵀ,   n_t = f_t n_{t−1} + e^{ĩ_t} k_t,
        h_t = C_tᵀ q_t / (max(|n_tᵀ q_t|, 1) + ε e^{m_t})

    as the ``mlstm`` mixer computes it (``normalizer_log_offset``, the ``chunk`` backend).  The states in and out are
    transformers' stabilized ``C̃ = e^{−m} C``, ``ñ = e^{−m} n`` and ``m`` ``[B, H, 1]`` (zeros where not given);
    they are returned as transformers' backend returns them: always in inference mode, in training mode where
    ``return_last_states`` (default: the config's) asks for them.  One token (decoding) runs transformers' step."""
    if query.shape[2] == 1:  # one decoded token: transformers' own step kernel, cheaper than an operator call
        return type(backend).forward(
            backend, query, key, value, igate, fgate, c_initial, n_initial, m_initial, return_last_states, mode
        )
    config = backend.config
    mode = config.mode if mode is None else mode
    if "inference" not in mode and "train" not in mode:
        raise ValueError(f"mode: unknown mode {mode!r} of the xLSTM backend")
    work = torch.promote_types(query.dtype, torch.float32)
    q, k, v = (x.transpose(1, 2).to(work) for x in (query, key, value))  # [B, T, H, ·]
    input_gate, log_forget = igate.transpose(1, 2).to(work), F.logsigmoid(fgate.transpose(1, 2).to(work))
    start = None if m_initial is None else m_initial[..., 0].to(work)  # [B, H]
    dynamics, levels = mlstm_dynamics(q, k, v, input_gate, log_forget, config.eps, start, levels=True)
    # the operator's state is S = K^-½ e^{m} C̃ (its impulses carry K^-½, transformers' queries do)
    root = q.shape[-1] ** 0.5
    initial = None
    if c_initial is not None:
        scale = torch.exp(start)[..., None] / root  # [B, H, 1]
        initial = (c_initial.to(work) * scale[..., None], n_initial.to(work) * scale)
    h, (state, norm) = coefficient_dynamics(dynamics, initial_state=initial, output_final_state=True, backend="chunk")
    h = h.transpose(1, 2).to(query.dtype)
    final_m = levels[:, -1]  # [B, H]
    unscale = torch.exp(-final_m)[..., None] * root
    states = (state * unscale[..., None], norm * unscale, final_m[..., None])
    wanted = config.return_last_states if return_last_states is None else return_last_states
    return (h, states) if "inference" in mode or wanted else h


#: the layer it swaps is its first argument (a whole method of the layer, steps included)
mlstm_backend.binds_layer = True


def causal_conv1d(
    hidden_states: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
    seq_idx: Tensor | None = None,
    cu_seq_lens_q: Tensor | None = None,
    **_: Any,
) -> Tensor:
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
    prompt = current_prompt()
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
