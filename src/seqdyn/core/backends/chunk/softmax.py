"""``exp`` readout with ``"sum"`` (softmax): torch's fused ``scaled_dot_product_attention`` (a blockwise online
softmax) when Λ = I, otherwise a blockwise online softmax over key blocks, one checkpointed query block at a
time, so memory stays linear in T.  The state is the key cache (keys carried to the sequence's end, values).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from seqdyn.core.backends.chunk.chunking import along_keys
from seqdyn.core.evolution import causal_mask, cumulative_log_decay, pairwise_gram
from seqdyn.core.problem import Problem

SOFTMAX_QUERY_BLOCK = 128
SOFTMAX_KEY_BLOCK = 1024


def nonlinear(problem: Problem, want_state: bool):
    """``exp`` readout with ``"sum"``: softmax of the decayed scores, blockwise; the state is the key cache
    (``P`` cached keys before the sequence)."""
    cache = problem.initial_state
    if problem.log_decay is None and cache is None:
        out = fused_causal_softmax(problem.q, problem.k, problem.v)
        return out, ((problem.k, problem.v) if want_state else None)
    batch, heads, length, key_dim, value_dim = problem.shape
    prefix = 0 if cache is None else cache[0].shape[2]
    keys = problem.k if cache is None else torch.cat([cache[0], problem.k], dim=2)  # [B, H, P + T, K]
    values = problem.v if cache is None else torch.cat([cache[1], problem.v], dim=2)  # [B, H, P + T, V]
    query_log = key_log = None
    if problem.log_decay is not None:  # cached keys sit at time -1, where G = 0
        query_log = cumulative_log_decay(problem.log_decay)  # G [B, H, T(, K)]
        key_log = torch.cat(
            [query_log.new_zeros(batch, heads, prefix, *query_log.shape[3:]), query_log], dim=2
        )  # [B, H, P + T(, K)]
    pieces = []
    for start in range(0, length, SOFTMAX_QUERY_BLOCK):
        stop = min(length, start + SOFTMAX_QUERY_BLOCK)
        args = (
            problem.q[:, :, start:stop],
            keys[:, :, : prefix + stop],
            values[:, :, : prefix + stop],
            None if query_log is None else query_log[:, :, start:stop],
            None if key_log is None else key_log[:, :, : prefix + stop],
        )
        if torch.is_grad_enabled():
            pieces.append(checkpoint(_softmax_block, *args, prefix + start, use_reentrant=False))
        else:
            pieces.append(_softmax_block(*args, prefix + start))
    out = torch.cat(pieces, dim=2)  # [B, H, T, V]
    if not want_state:
        return out, None
    if query_log is not None:
        final = query_log[:, :, -1:]
        keys = keys * torch.exp(along_keys(final - key_log, problem.diagonal)).to(keys.dtype)
    return out, (keys, values)


def fused_causal_softmax(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``softmax(q kᵀ + causal mask) v`` ``[B, H, T, V]`` by torch's fused attention (scale 1).  Its fused kernels
    take one width for queries, keys and values, and otherwise form every ``T × T`` score: where the widths differ
    (the Forgetting Transformer's two extra channels of queries and keys, :mod:`seqdyn.core.outer`), the narrower
    side is padded with zeros — which add nothing to a score and leave padded output columns, dropped here."""
    extra = q.shape[-1] - v.shape[-1]
    if extra > 0:
        v = F.pad(v, (0, extra))  # [B, H, T, K]
    elif extra < 0:
        q, k = F.pad(q, (0, -extra)), F.pad(k, (0, -extra))  # [B, H, T, V]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)
    return out[..., : out.shape[-1] - extra] if extra > 0 else out


def _softmax_block(
    q: Tensor, keys: Tensor, values: Tensor, query_log: Tensor | None, key_log: Tensor | None, first: int
) -> Tensor:
    """Online softmax of one query block (positions ``first + i``) over key blocks ``[0, first + rows)``."""
    rows = q.shape[2]
    row_max = q.new_full((*q.shape[:3],), float("-inf"))
    row_sum = q.new_zeros(q.shape[:3])
    acc = q.new_zeros(*q.shape[:3], values.shape[-1])
    for start in range(0, keys.shape[2], SOFTMAX_KEY_BLOCK):
        stop = min(keys.shape[2], start + SOFTMAX_KEY_BLOCK)
        valid = causal_mask(rows, stop - start, q.device, offset=first - start)
        scores = pairwise_gram(
            q, keys[:, :, start:stop], query_log, None if key_log is None else key_log[:, :, start:stop], valid
        )
        scores = scores.masked_fill(~valid, float("-inf"))
        new_max = torch.maximum(row_max, scores.detach().amax(-1))
        safe_max = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))
        weights = torch.exp(scores - safe_max.unsqueeze(-1))
        rescale = torch.exp(row_max - safe_max)
        row_sum = row_sum * rescale + weights.sum(-1)
        acc = acc * rescale.unsqueeze(-1) + weights @ values[:, :, start:stop]
        row_max = new_max
    return acc / row_sum.unsqueeze(-1)
