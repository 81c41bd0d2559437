"""The Gated DeltaNet forward of seqdyn's operator at its own chunk size against transformers' fallback.

``coefficient_dynamics`` with Gated DeltaNet's transition (Yang et al. 2025, eq. 10: ``S_t = e^{g_t} (I − β_t k_t
k_tᵀ) S_{t−1} + β_t k_t v_tᵀ``), the chunk size left to the operator (32 for the delta rule) and at 64, against
transformers' ``torch_chunk_gated_delta_rule`` on the same inputs: B = 1, H = 4, K = V = 64, unit-norm keys, at T
tokens.  After a warm-up call each, the three are timed in turn, one call each per round, at each thread count;
the best of the rounds is kept and the ratio to the fallback printed (< 1: seqdyn faster).  Forward only, or
forward + backward with ``--backward``.

Run: python examples/pilots/delta_rule_forward.py [--length 4096] [--threads 1,2] [--rounds 5] [--backward]
(one JSON line per thread count).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from seqdyn.core.operator import coefficient_dynamics


def _inputs(length: int, heads: int = 4, dim: int = 64, requires_grad: bool = False):
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, length, heads, dim, generator=generator)
    k = F.normalize(torch.randn(1, length, heads, dim, generator=generator), dim=-1)
    v = torch.randn(1, length, heads, dim, generator=generator)
    g = -F.softplus(torch.randn(1, length, heads, generator=generator))
    beta = torch.sigmoid(torch.randn(1, length, heads, generator=generator))
    return [x.requires_grad_(requires_grad) for x in (q, k, v, g, beta)]


def _seqdyn(chunk_size: int | None):
    def call(q, k, v, g, beta):
        return coefficient_dynamics(
            q * q.shape[-1] ** -0.5,
            k,
            v,
            log_decay=g,
            householder=beta,
            scale=beta,
            backend="chunk",
            chunk_size=chunk_size,
        )

    return call


def _fallback(q, k, v, g, beta):
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    return torch_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64)[0]


def _timed(call, inputs, backward: bool) -> float:
    begun = time.perf_counter()
    out = call(*inputs)
    if backward:
        out.sum().backward()
    return time.perf_counter() - begun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backward", action="store_true")
    args = parser.parse_args()
    inputs = _inputs(args.length, requires_grad=args.backward)
    reference = _fallback(*inputs)
    calls = {"operator (its chunk)": _seqdyn(None), "operator (chunk 64)": _seqdyn(64), "fallback": _fallback}
    torch.testing.assert_close(calls["operator (its chunk)"](*inputs), reference, rtol=1e-3, atol=1e-3)
    for threads in (int(count) for count in args.threads.split(",")):
        torch.set_num_threads(threads)
        for call in calls.values():
            _timed(call, inputs, args.backward)  # warm-up
        best = {name: float("inf") for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                best[name] = min(best[name], _timed(call, inputs, args.backward))
        ratios = {name: round(seconds / best["fallback"], 3) for name, seconds in best.items()}
        print(json.dumps({"threads": threads, "length": args.length, "backward": args.backward, "ratio": ratios}))


if __name__ == "__main__":
    main()
