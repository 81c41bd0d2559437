"""The chunk backend's minimal listing against the recurrent reference, and every hand-written backward of the
chunk package against the listing's autograd gradients, in float64."""

from __future__ import annotations

import pytest
import torch

import seqdyn
from seqdyn.core.backends.chunk import chunking, delta_rule
from seqdyn.core.backends.chunk import householder as householder_module
from seqdyn.core.backends.chunk.chunking import to_chunks, unchunked
from seqdyn.core.backends.chunk.decayed import decayed_chunks
from seqdyn.core.backends.chunk.delta_rule import delta_rule_chunks
from seqdyn.core.backends.chunk.householder import householder_chunks
from seqdyn.core.backends.chunk.minimal import chunked
from tests.core.cases import assert_close

TOL = 1e-10
BATCH, HEADS, KEY_DIM, VALUE_DIM, CHUNK = 2, 3, 4, 3, 4
LENGTHS = [11, 12]  # three chunks, the last one padded or full


def _inputs(seed: int, length: int, decay: str, householder: str, initial: bool, shared: bool = False) -> dict:
    """Head-major float64 leaves ``[B, H, T, ...]``; with ``shared`` queries and keys (directions) of one head."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).requires_grad_()

    key_heads = 1 if shared else HEADS
    x = dict(
        q=rand(BATCH, key_heads, length, KEY_DIM),
        k=rand(BATCH, key_heads, length, KEY_DIM),
        v=rand(BATCH, HEADS, length, VALUE_DIM),
    )
    if decay == "scalar":
        x["g"] = (-torch.rand(BATCH, HEADS, length, generator=gen, dtype=torch.float64)).requires_grad_()
    elif decay == "diagonal":
        x["g"] = (-2 * torch.rand(BATCH, HEADS, length, KEY_DIM, generator=gen, dtype=torch.float64)).requires_grad_()
    if householder != "none":
        x["beta"] = (2 * torch.rand(BATCH, HEADS, length, generator=gen, dtype=torch.float64)).requires_grad_()
    if householder == "keys":  # DeltaNet: unit directions d, keys k = s ⊙ d
        x["d"] = torch.nn.functional.normalize(x.pop("k").detach(), dim=-1).requires_grad_()
        x["s"] = torch.rand(BATCH, HEADS, length, generator=gen, dtype=torch.float64).requires_grad_()
    elif householder == "given":
        x["w"] = torch.nn.functional.normalize(rand(BATCH, HEADS, length, KEY_DIM).detach(), dim=-1).requires_grad_()
    if initial:
        x["initial"] = rand(BATCH, HEADS, KEY_DIM, VALUE_DIM, scale=0.5)
    return x


def _minimal(x: dict, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The listing on the inputs of :func:`_inputs`, heads expanded."""
    full = lambda t: t.expand(BATCH, HEADS, *t.shape[2:])  # noqa: E731
    keys = full(x["s"].unsqueeze(-1) * x["d"]) if "d" in x else full(x["k"])
    direction = full(x["d"]) if "d" in x else x.get("w")
    return chunked(full(x["q"]), keys, x["v"], x.get("g"), x.get("beta"), direction, x.get("initial"), CHUNK)


def _gradients(result: tuple[torch.Tensor, torch.Tensor], x: dict) -> dict[str, torch.Tensor]:
    """Gradients of every leaf for a random linear functional of the outputs and the final state."""
    gen = torch.Generator().manual_seed(99)
    loss = sum((part * torch.randn(part.shape, generator=gen, dtype=part.dtype)).sum() for part in result)
    return dict(zip(x, torch.autograd.grad(loss, list(x.values()))))


def _assert_same(fast: tuple, x: dict, length: int, what: str) -> None:
    """A fast path's outputs, final state and gradients against the listing's."""
    reference = _minimal(x, length)
    assert_close(fast[0], reference[0], TOL, f"{what}: outputs")
    assert_close(fast[1], reference[1], TOL, f"{what}: final state")
    expected = _gradients(reference, x)
    for name, grad in _gradients(fast, x).items():
        assert_close(grad, expected[name], TOL, f"{what}: gradient of {name}")


def _chunks(x: dict, name: str, length: int) -> torch.Tensor | None:
    return to_chunks(x.get(name), -(-length // CHUNK), CHUNK)  # [B, H, N, C, ...]


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("householder", ["none", "keys", "given"])
@pytest.mark.parametrize("decay", ["none", "scalar", "diagonal"])
def test_the_minimal_listing_matches_the_recurrent_reference(decay, householder, initial, length):
    """Outputs, final state and every gradient of the listing against the step-by-step recurrence."""
    x = _inputs(1, length, decay, householder, initial)
    listing = _minimal(x, length)
    to_public = lambda t: None if t is None else t.transpose(1, 2)  # noqa: E731  [B, H, T, ...] -> [B, T, H, ...]
    keys = x["s"].unsqueeze(-1) * x["d"] if "d" in x else x["k"]
    direction = x["d"] if "d" in x else x.get("w")
    y, final = seqdyn.coefficient_dynamics(
        to_public(x["q"]),
        to_public(keys),
        to_public(x["v"]),
        log_decay=to_public(x.get("g")),
        householder=to_public(x.get("beta")),
        householder_dir=to_public(direction),
        scale=1.0,
        initial_state=x.get("initial"),
        output_final_state=True,
        backend="recurrent",
    )
    reference = (y.transpose(1, 2), final)
    assert_close(listing[0], reference[0], TOL, "outputs")
    assert_close(listing[1], reference[1], TOL, "final state")
    expected = _gradients(reference, x)
    for name, grad in _gradients(listing, x).items():
        assert_close(grad, expected[name], TOL, f"gradient of {name}")


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("decay", ["none", "scalar", "diagonal"])
def test_decayed_chunks_backward_matches_the_listing(decay, initial, shared, length):
    """:mod:`~seqdyn.core.backends.chunk.decayed`'s hand-written backward; queries and keys of one head for all
    (Mamba-2) with ``shared``."""
    x = _inputs(2, length, decay, "none", initial, shared)
    out, state = decayed_chunks(*(_chunks(x, name, length) for name in ("q", "k", "v", "g")), x.get("initial"))
    _assert_same((unchunked(out, length), state), x, length, "decayed")


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("decay", ["none", "scalar"])
def test_delta_rule_backward_matches_the_listing(decay, initial, shared, length):
    """:mod:`~seqdyn.core.backends.chunk.delta_rule`'s hand-written backward (keys ``k = s ⊙ d``); queries and
    directions of one head for all with ``shared``."""
    x = _inputs(3, length, decay, "keys", initial, shared)
    out, state = delta_rule_chunks(
        *(_chunks(x, name, length) for name in ("q", "d", "v", "g", "beta", "s")), x.get("initial")
    )
    _assert_same((unchunked(out, length), state), x, length, "delta rule")


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("householder", ["keys", "given"])
@pytest.mark.parametrize("decay", ["none", "scalar", "diagonal"])
def test_householder_chunks_backward_matches_the_listing(decay, householder, initial, length):
    """:mod:`~seqdyn.core.backends.chunk.householder`, autograd through the hand-written backwards of the unit
    lower-triangular solve and (diagonal decays) of the opposite decay factors."""
    x = _inputs(4, length, decay, householder, initial)
    out, state = _householder_chunks(x, decay, length)
    _assert_same((unchunked(out, length), state), x, length, "householder")


def _householder_chunks(x: dict, decay: str, length: int):
    """:func:`householder_chunks` on the chunked inputs of :func:`_inputs` (keys or given directions)."""
    keys = x["s"].unsqueeze(-1) * x["d"] if "d" in x else x["k"]
    direction = x["d"] if "d" in x else x["w"]
    chunked_keys, chunked_direction = (to_chunks(t, -(-length // CHUNK), CHUNK) for t in (keys, direction))
    return householder_chunks(
        _chunks(x, "q", length),
        chunked_keys,
        _chunks(x, "v", length),
        chunked_direction,
        _chunks(x, "g", length),
        _chunks(x, "beta", length),
        x.get("initial"),
        decay == "diagonal",
        (BATCH, HEADS),
    )


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("per_segment", [1, 3])
@pytest.mark.parametrize("householder", ["keys", "given"])
@pytest.mark.parametrize("decay", ["none", "scalar", "diagonal"])
def test_householder_chunks_in_segments_match_the_listing(decay, householder, per_segment, recompute, monkeypatch):
    """The general Householder path a segment of chunks at a time, its blocks kept or (``recompute``) computed again
    in the backward: chunks one by one and three by three, with an initial state, are the listing's to 1e-10."""
    monkeypatch.setattr(chunking, "SEGMENT_TOKEN_HEADS", 1)
    monkeypatch.setattr(chunking, "SEGMENT_MIN_CHUNKS", per_segment)
    monkeypatch.setattr(householder_module, "KEPT_BLOCKS_BYTES", 0 if recompute else 2**40)
    length = 37  # ten chunks
    x = _inputs(8, length, decay, householder, initial=True)
    out, state = _householder_chunks(x, decay, length)
    what = f"householder, {per_segment} chunks per segment, recompute={recompute}"
    _assert_same((unchunked(out, length), state), x, length, what)


@pytest.mark.parametrize("recompute", [False, True])
def test_the_householder_path_computing_again_keeps_its_inputs_and_a_state_per_segment(recompute, monkeypatch):
    """What autograd keeps of the general Householder path: where its blocks are computed again, no more than its
    inputs and the state entering each segment; where they are kept, more (the blocks)."""
    monkeypatch.setattr(chunking, "SEGMENT_TOKEN_HEADS", 1)
    monkeypatch.setattr(chunking, "SEGMENT_MIN_CHUNKS", 2)
    monkeypatch.setattr(householder_module, "KEPT_BLOCKS_BYTES", 0 if recompute else 2**40)
    length = 40  # five segments of two chunks
    x = _inputs(9, length, "diagonal", "given", initial=True)
    chunked_inputs = [_chunks(x, name, length) for name in ("q", "k", "v", "w", "g", "beta")]
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t.numel()) or t, lambda t: t):
        out, state = householder_chunks(*chunked_inputs[:4], *chunked_inputs[4:], x["initial"], True, (BATCH, HEADS))
    states = 5 * BATCH * HEADS * KEY_DIM * VALUE_DIM
    bound = sum(t.numel() for t in chunked_inputs) + x["initial"].numel() + states
    assert (sum(kept) <= bound) == recompute, f"kept {sum(kept)} numbers, inputs and states {bound}"


@pytest.mark.parametrize("per_segment", [1, 3])
@pytest.mark.parametrize("decay", ["none", "scalar"])
def test_delta_rule_in_segments_matches_the_listing(decay, per_segment, monkeypatch):
    """The delta rule a segment of chunks at a time (blocks computed again in the backward): chunks one by one and
    three by three (the last segment shorter), with an initial state, are the listing's to 1e-10."""
    monkeypatch.setattr(chunking, "SEGMENT_TOKEN_HEADS", 1)
    monkeypatch.setattr(chunking, "SEGMENT_MIN_CHUNKS", per_segment)
    length = 37  # ten chunks
    x = _inputs(5, length, decay, "keys", initial=True)
    out, state = delta_rule_chunks(
        *(_chunks(x, name, length) for name in ("q", "d", "v", "g", "beta", "s")), x.get("initial")
    )
    _assert_same((unchunked(out, length), state), x, length, f"delta rule, {per_segment} chunks per segment")


def test_the_delta_rule_keeps_its_inputs_one_state_per_chunk_and_one_segment(monkeypatch):
    """What the forward keeps for the backward: its inputs, the state entering each chunk and the blocks of its last
    segment (of 2 chunks of 10 here), nothing else of size ``C²`` or ``C (K + V)`` per chunk."""
    monkeypatch.setattr(chunking, "SEGMENT_TOKEN_HEADS", 1)
    monkeypatch.setattr(chunking, "SEGMENT_MIN_CHUNKS", 2)
    length = 37
    x = _inputs(6, length, "scalar", "keys", initial=True)
    chunked_inputs = [_chunks(x, name, length) for name in ("q", "d", "v", "g", "beta", "s")]
    out, _ = delta_rule_chunks(*chunked_inputs, x["initial"])
    kept_blocks = out.grad_fn.last_blocks
    kept = sum(t.numel() for t in (*out.grad_fn.saved_tensors, *kept_blocks.factors, *kept_blocks[1:]) if t is not None)
    states = BATCH * HEADS * chunked_inputs[0].shape[2] * KEY_DIM * VALUE_DIM
    with torch.no_grad():
        last = delta_rule.segment_blocks(*(t[:, :, -2:] for t in chunked_inputs), (BATCH, HEADS, 2))
    last_blocks = sum(t.numel() for t in (*last.factors, *last[1:]))
    assert kept == sum(t.numel() for t in chunked_inputs) + x["initial"].numel() + states + last_blocks


@pytest.mark.parametrize("per_segment", [1, 3])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("decay", ["none", "scalar", "diagonal"])
def test_decayed_chunks_in_segments_match_the_listing(decay, shared, per_segment, monkeypatch):
    """The decayed chunks a segment at a time (the other segments' blocks computed again in the backward): chunks
    one by one and three by three, with an initial state, queries and keys of one head with ``shared``."""
    monkeypatch.setattr(chunking, "SEGMENT_TOKEN_HEADS", 1)
    monkeypatch.setattr(chunking, "SEGMENT_MIN_CHUNKS", per_segment)
    length = 37  # ten chunks
    x = _inputs(7, length, decay, "none", initial=True, shared=shared)
    chunked_inputs = [_chunks(x, name, length) for name in ("q", "k", "v", "g")]
    out, state = decayed_chunks(*chunked_inputs, x["initial"])
    kept = sum(t.numel() for t in out.grad_fn.saved_tensors if t is not None)
    inputs = sum(t.numel() for t in chunked_inputs if t is not None) + x["initial"].numel()
    states = BATCH * HEADS * 10 * KEY_DIM * VALUE_DIM
    assert kept <= inputs + states + 10 * CHUNK  # (the zero log decays of no decay) the last segment's blocks apart
    _assert_same((unchunked(out, length), state), x, length, f"decayed, {per_segment} chunks per segment")


def test_segments_are_an_eighth_of_the_problem_within_their_bounds_or_the_largest_without_a_backward():
    """With a backward to follow, a segment is an eighth of all the tokens × batch × heads, between 2,048 and 4,096
    of them; a forward alone runs segments of 4,096."""
    sizes = lambda full, backward=True: [s.stop - s.start for s in chunking.segments(full, 32, backward)]  # noqa: E731
    assert sizes((2, 4, 40)) == [8] * 5  # 2·4·40·32 / 8 = 1,280 → 2,048 // (2·4·32) = 8 chunks
    assert sizes((2, 4, 128)) == [16] * 8  # 32,768 / 8 = 4,096 → 16 chunks
    assert sizes((2, 4, 512)) == [16] * 32  # 131,072 / 8 beyond 4,096: 16 chunks
    assert sizes((2, 4, 40), backward=False) == [16, 16, 8]  # 4,096 // (2·4·32) chunks


def test_the_segment_size_is_a_setting(monkeypatch):
    """``SEQDYN_CHUNK_SEGMENT``: tokens × batch × heads per segment, 0 for one segment; anything else is refused
    naming the setting."""
    monkeypatch.setenv("SEQDYN_CHUNK_SEGMENT", "4096")
    assert [s.stop - s.start for s in chunking.segments((2, 4, 40), 32)] == [16, 16, 8]  # 4096 // (2·4·32) chunks
    monkeypatch.setenv("SEQDYN_CHUNK_SEGMENT", "0")
    assert chunking.segments((2, 4, 40), 32) == [slice(0, 40)]
    monkeypatch.setenv("SEQDYN_CHUNK_SEGMENT", "2048")
    assert [s.stop - s.start for s in chunking.segments((2, 4, 40), 32)] == [8] * 5
    monkeypatch.setenv("SEQDYN_CHUNK_SEGMENT", "large")
    with pytest.raises(ValueError, match="SEQDYN_CHUNK_SEGMENT: got 'large'"):
        chunking.segments((2, 4, 40), 32)
