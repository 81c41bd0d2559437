"""The ``chunk`` backend: chunkwise-parallel coefficient dynamics, linear in T.

Identity readout (GLA / SSD / DeltaNet chunk form; Dao & Gu 2024 on structured masks, Yang et al. 2024 for the UT
transform).  Split the sequence into chunks of C steps and let ``γ_t`` be the log decay accumulated inside the
chunk.  With the state ``S`` entering the chunk:
  1. intra-chunk coefficients ``A[t,j] = q_tᵀ diag(e^{γ_t − γ_j}) k_j`` (``j ≤ t``) and ``y = A V``;
  2. with a Householder factor, the corrections ``u_t = S_{t-1}ᵀ w_t`` solve the unit lower-triangular system
     ``(I + M_e) U = W̃ S + M_k V`` (see :func:`seqdyn.core.backends.quadratic.scores` for the matrices);
  3. between chunks ``S ← P S + ΔS`` and ``y += Q̃ S`` with ``P = diag(e^{Γ})`` (minus ``Ẽᵀ W`` with a
     Householder factor), ``ΔS = K̃ᵀ V`` and ``Q̃_t = q_t ⊙ e^{γ_t}``.
All exponents are differences ``γ_t − γ_j ≤ 0`` for decays.  Diagonal decays are factorized inside a chunk
around the chunk's middle log decay; the chunk is halved where that would leave the float range.  Factors too
small to be normal floats are 0 (:func:`~seqdyn.core.evolution.decay_factor`).  :mod:`.minimal` writes these
steps in plain autograd code; the modules below are the fast paths, each checked against it:

- :mod:`.decayed`: no, scalar or diagonal decay without a Householder factor, hand-written backward;
- :mod:`.delta_rule`: DeltaNet's Householder factor with no or scalar decay, hand-written backward that computes
  its blocks again from the inputs and one state per chunk, a segment of chunks at a time (carries the
  corrected values ``V' = U − W S`` from chunk to chunk instead of a ``[K, K]`` transition);
- :mod:`.householder`: the general Householder factor (a given direction, or a diagonal decay), autograd a segment
  of chunks at a time, the blocks computed again in the backward where keeping them all would take much memory;
- :mod:`.softmax`: the ``exp`` readout with ``"sum"``, a blockwise online softmax;
- :mod:`.chunking` and :mod:`.triangular`: the pieces they share.
"""

from __future__ import annotations

from torch import Tensor

from seqdyn.core import stacking
from seqdyn.core.backends.chunk.chunking import dense, diagonal_chunking, safe_chunk_size, to_chunks, unchunked
from seqdyn.core.backends.chunk.decayed import decayed_chunks
from seqdyn.core.backends.chunk.delta_rule import delta_rule_chunks
from seqdyn.core.backends.chunk.householder import householder_chunks
from seqdyn.core.backends.chunk.softmax import SOFTMAX_KEY_BLOCK, SOFTMAX_QUERY_BLOCK, nonlinear
from seqdyn.core.problem import Problem

NAME = "chunk"

__all__ = ["NAME", "SOFTMAX_KEY_BLOCK", "SOFTMAX_QUERY_BLOCK", "linear", "nonlinear", "safe_chunk_size", "unsupported"]


def unsupported(problem: Problem) -> str | None:
    if stacking.runs_stacked() and not (problem.readout.linear and problem.beta is None):
        return stacking.unstackable("chunk") + " (chunk stacks the identity readout without a Householder factor)"
    if problem.readout.linear:
        return None
    if not (problem.readout.is_exp and problem.normalizer_kind == "sum"):
        return (
            f"readout={problem.readout.name!r} with normalizer={problem.normalizer_kind!r} has no chunked form; "
            "chunk computes readout='identity' (any normalizer) and readout='exp' with normalizer='sum'"
        )
    if problem.householder:
        return "householder with readout='exp' has no chunked form; chunk's softmax supports no/scalar/diagonal decay"
    return None


def linear(problem: Problem, want_state: bool) -> tuple[Tensor, Tensor]:
    """Chunkwise-parallel identity readout; returns ``y`` ``[B, H, T, V]`` and ``S_T``: the inputs chunked
    ``[B, H, N, C, ...]`` and handed to the fast path that computes them."""
    delta_rule = problem.direction_is_key and not problem.diagonal  # DeltaNet / Gated DeltaNet
    key_scale = problem.scale_per_step() if delta_rule else None  # the impulses b_t w_t, from the unscaled keys
    if not delta_rule:
        problem = problem.with_scale_applied()
    batch, heads, length, key_dim, value_dim = problem.shape
    size = min(problem.chunk_size, length)
    g = problem.log_decay
    if problem.diagonal:
        g, size = diagonal_chunking(g, size)
    chunks = -(-length // size)

    def chunked(x: Tensor | None) -> Tensor | None:
        return to_chunks(x, chunks, size)

    q, v, direction = (dense(chunked(x)) for x in (problem.q, problem.v, problem.direction))
    g, beta = chunked(g), chunked(problem.beta)
    if beta is None:
        out, state = decayed_chunks(q, dense(chunked(problem.k)), v, g, problem.initial_state)
    elif delta_rule:
        out, state = delta_rule_chunks(q, direction, v, g, beta, chunked(key_scale), problem.initial_state)
    else:
        keys, written = dense(chunked(problem.k)), dense(chunked(problem.written))
        heads_of = (batch, heads)
        out, state = householder_chunks(
            q, keys, v, direction, g, beta, problem.initial_state, problem.diagonal, heads_of, written
        )
    return unchunked(out, length), state
