"""Models take packed sequences and padded batches: positions restart, the short convolution and every mixer stay
inside a sequence, outputs equal each sequence alone (issue 33, item 2)."""

from __future__ import annotations

import pytest
import torch

from seqdyn.models import build_model, recording_backends
from tests.models.helpers import config, inputs, spec

CU_SEQLENS = torch.tensor([0, 5, 6, 15, 18])


def hybrid(**fields):
    torch.manual_seed(0)
    options = dict(mixer=["gated_deltanet", "softmax_attention"], positions=True, block="gated", short_conv=True)
    return build_model(config(**{**options, **fields}), spec(input_len=18)).double()


def test_a_packed_model_equals_each_sequence_alone():
    model = hybrid()
    tokens = inputs(spec(input_len=18), batch=1, length=18)
    packed = model(tokens, cu_seqlens=CU_SEQLENS)
    alone = torch.cat(
        [model(tokens[:, start:end]) for start, end in zip(CU_SEQLENS[:-1].tolist(), CU_SEQLENS[1:].tolist())], dim=1
    )
    torch.testing.assert_close(packed, alone, rtol=0, atol=1e-12)


def test_a_left_and_right_padded_model_batch_equals_each_sequence_alone():
    model = hybrid()
    tokens = inputs(spec(input_len=18), batch=3, length=7)
    mask = torch.tensor([[1] * 7, [0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]])
    padded = model(tokens, attention_mask=mask)
    for row in range(3):
        kept = mask[row].bool()
        torch.testing.assert_close(padded[row, kept], model(tokens[row : row + 1, kept])[0], rtol=0, atol=1e-12)
        assert padded[row, ~kept].abs().max() == 0 if (~kept).any() else True


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: build_model(config(bidirectional=True), spec()), "model.bidirectional reads the whole sequence"),
        (lambda: build_model(config(), spec(head="autoencoder")), "the autoencoder head reads the whole sequence"),
    ],
)
def test_models_that_read_the_whole_sequence_refuse_packing(build, words):
    model = build()
    with pytest.raises(ValueError, match=words):
        model(inputs(model.spec, batch=1), cu_seqlens=torch.tensor([0, 4, 12]))


@pytest.mark.parametrize("head", ["lm", "classification"])
@pytest.mark.parametrize("block", ["gated", "transformer"])
def test_a_model_prefilled_in_chunks_then_stepped_equals_one_forward(head, block):
    torch.manual_seed(0)
    fields = dict(mixer=["gated_deltanet", "softmax_attention"], positions=True, block=block)
    if block == "gated":
        fields["short_conv"] = True
    model = build_model(config(**fields), spec(head=head, input_len=13)).double()
    tokens = inputs(model.spec, batch=2, length=13)
    whole = model(tokens)
    state, outputs = None, []
    for start, end in ((0, 5), (5, 6), (6, 10)):
        out, state = model(tokens[:, start:end], state=state, return_state=True)
        outputs.append(out)
    for position in range(10, 13):
        out, state = model.step(tokens[:, position], state)
        outputs.append(out[:, None])
    torch.testing.assert_close(torch.cat(outputs, dim=1), whole, rtol=0, atol=1e-11)
    assert state.position == 13
    with pytest.raises(ValueError, match=r"^state: positions 13 … 13 run past the learned positions"):
        model(tokens[:, :1], state=state)


def test_a_padded_prefill_gives_each_row_its_own_state_and_positions():
    """Left- and right-padded prompts, then more tokens: every row continues as its tokens alone do — the learned
    positions, rotary positions, short convolutions and key–value caches of a row start at its first token."""
    model = hybrid(mixer_options=[{}, {"rotary": True}])
    tokens = inputs(spec(input_len=18), batch=3, length=6)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    more = inputs(spec(input_len=18), batch=3, length=4, seed=1)
    _, states = model(tokens, attention_mask=mask, return_state=True)
    continued = model(more, state=states)
    for row in range(3):
        alone = torch.cat([tokens[row : row + 1, mask[row].bool()], more[row : row + 1]], dim=1)
        torch.testing.assert_close(continued[row : row + 1], model(alone)[:, -4:], rtol=0, atol=1e-11)
        assert states[row].position == int(mask[row].sum())


def test_a_packed_forward_records_the_backend_its_packed_call_chose(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQDYN_AUTOTUNE_CACHE", str(tmp_path))
    model = hybrid()
    tokens = inputs(spec(input_len=18), batch=1, length=18)
    with recording_backends(model) as picked:
        model(tokens, cu_seqlens=CU_SEQLENS)
    assert len(picked) == 2
    assert all("packed N ≤ 4 sequences of L ≤ 16" in choice.why for choice in picked), [c.why for c in picked]


def test_the_record_reads_the_choice_each_forward_made_without_choosing_again(tmp_path, monkeypatch):
    """Recording asks no mixer for its backend: it reads the one each layer's forward chose and kept, for a padded
    batch the choice of its packed tokens (what was computed), not one of the padded shape."""
    monkeypatch.setenv("SEQDYN_AUTOTUNE_CACHE", str(tmp_path))
    model = hybrid()
    tokens = inputs(spec(input_len=18), batch=2, length=9)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    asked = []
    for block in model.blocks:
        backend_for = block.mixer.backend_for
        monkeypatch.setattr(block.mixer, "backend_for", lambda *a, f=backend_for, **k: asked.append(1) or f(*a, **k))
    model(tokens, attention_mask=mask)  # measures and caches the choices
    asked.clear()
    model(tokens, attention_mask=mask)
    by_the_forward = len(asked)
    asked.clear()
    with recording_backends(model) as picked:
        model(tokens, attention_mask=mask)
    assert len(asked) == by_the_forward == 2 and len(picked) == 2  # each layer's forward asks once, recording never
    assert picked == [block.mixer.last_backend for block in model.blocks]
    assert all("packed N ≤ 2 sequences of L ≤ 16" in choice.why for choice in picked), [c.why for c in picked]


@pytest.mark.parametrize("backend", ["chunk", "auto"])
def test_a_packed_forward_checks_its_offsets_once(tmp_path, monkeypatch, backend):
    """``cu_seqlens`` become one value at the model's entry, checked there once (one host synchronization on a GPU);
    the blocks, the mixers, the backend choice and the operator take that value."""
    from seqdyn.core import packing

    monkeypatch.setenv("SEQDYN_AUTOTUNE_CACHE", str(tmp_path))
    model = hybrid()
    tokens = inputs(spec(input_len=18), batch=1, length=18)
    checks = []
    check = packing.check_cu_seqlens
    monkeypatch.setattr(packing, "check_cu_seqlens", lambda *args, **kwargs: checks.append(1) or check(*args, **kwargs))
    model(tokens, cu_seqlens=CU_SEQLENS, backend=backend)
    assert len(checks) == 1
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, :3] = 0
    masks = []
    check_mask = packing.check_attention_mask
    monkeypatch.setattr(packing, "check_attention_mask", lambda *a, **k: masks.append(1) or check_mask(*a, **k))
    model(tokens[:, :18].reshape(2, 9), attention_mask=mask, backend=backend)
    assert len(masks) == 1 and len(checks) == 1
