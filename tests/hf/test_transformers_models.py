"""seqdyn models as transformers models (issue 33, item 4): the config, save/load, the cache, ``generate`` — greedy,
sampling, beam search, padded batches — each against the model computed whole or each prompt alone."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM  # noqa: E402

import seqdyn.mixers  # noqa: E402
from seqdyn.core.rows import tensors  # noqa: E402
from seqdyn.hf import SeqdynCache, SeqdynConfig, SeqdynForCausalLM, SeqdynModel  # noqa: E402  (registers the Auto classes)

VOCAB = 40
#: one of each kind of state: a recurrent state with short convolutions, a key–value cache with rotary positions
#: (in a hybrid), a diagonal LTI state, a sliding window, learned positions
MODELS = {
    "gated_deltanet": dict(mixer="gated_deltanet"),
    "mamba2": dict(mixer="mamba2", mixer_options={"head_dim": 8, "state_dim": 8}),
    "hybrid": dict(mixer=["gated_deltanet", "softmax_attention"], mixer_options=[{}, {"rotary": True}]),
    "s4d": dict(mixer="s4d", mixer_options={"state_dim": 8}),
    "local_attention": dict(mixer="local_attention", mixer_options={"window": 4}, positions=True),
}


def tiny(kind: str = "hybrid", **fields) -> SeqdynForCausalLM:
    """A float64 model whose greedy tokens vary (a large init_std spreads the logits)."""
    torch.manual_seed(0)
    config = SeqdynConfig(
        vocab_size=VOCAB,
        d_model=16,
        layers=2,
        mlp_ratio=2.0,
        init_std=0.3,
        max_position_embeddings=64,
        **{**MODELS[kind], **fields},
    )
    return AutoModelForCausalLM.from_config(config).double().eval()


def prompts(*lengths: int, seed: int = 1) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (1, length), generator=generator) for length in lengths]


def left_padded(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(row.shape[1] for row in rows)
    ids = torch.zeros(len(rows), longest, dtype=torch.long)
    mask = torch.zeros(len(rows), longest, dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, longest - row.shape[1] :], mask[index, longest - row.shape[1] :] = row[0], 1
    return ids, mask


def greedy(model, ids, **kwargs):
    out = model.generate(
        ids, max_new_tokens=8, do_sample=False, output_logits=True, return_dict_in_generate=True, **kwargs
    )
    return out.sequences, torch.stack(out.logits, dim=1)


# --- the config -----------------------------------------------------------------------------------------------------
def test_the_config_takes_the_model_fields_and_the_auto_classes_know_it(tmp_path):
    config = SeqdynConfig(vocab_size=VOCAB, mixer="mamba2", hidden_size=32, num_hidden_layers=3)
    assert (config.model["mixer"], config.hidden_size, config.num_hidden_layers) == ("mamba2", 32, 3)
    assert config.model_config.d_model == 32 and not config.model_config.positions
    config.save_pretrained(tmp_path)
    again = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(again, SeqdynConfig) and again.model == config.model
    assert type(AutoModel.from_config(again)) is SeqdynModel


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(d_modl=16), "unknown field 'd_modl' \\(did you mean 'd_model'"),
        (dict(mixer="mamba3"), "mamba3"),
        (dict(mixer="mamba2", mixer_options={"head_dims": 4}), "did you mean 'head_dim'"),
        (dict(layers=0), "layers"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_field(fields, words):
    with pytest.raises(ValueError, match=words) as error:
        SeqdynConfig(vocab_size=VOCAB, **fields)
    assert "\n" not in str(error.value) and str(error.value).startswith("SeqdynConfig: ")


# --- weights ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["hybrid", "mamba2"])
def test_save_and_load_round_trip_exactly(tmp_path, kind):
    model = tiny(kind)
    (ids,) = prompts(9)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64).eval()
    assert type(loaded) is SeqdynForCausalLM and loaded.config.model == model.config.model
    saved, again = model.state_dict(), loaded.state_dict()
    assert saved.keys() == again.keys() and all(torch.equal(saved[key], again[key]) for key in saved)
    with torch.no_grad():  # the same weights; auto may pick another backend for a call: round-off apart
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=1e-12)
        body = AutoModel.from_pretrained(tmp_path, dtype=torch.float64).eval()
        hidden = body(ids, use_cache=False).last_hidden_state
    torch.testing.assert_close(hidden, model.seqdyn(ids, head=False), rtol=0, atol=1e-12)
    assert loaded.seqdyn.tied and loaded.seqdyn.head.weight is loaded.seqdyn.embedding.weight


def test_the_loss_is_the_shifted_next_token_cross_entropy():
    model = tiny("gated_deltanet")
    (ids,) = prompts(10)
    out = model(ids, labels=ids)
    expected = torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[0, 1:])
    torch.testing.assert_close(out.loss, expected.float())  # transformers computes the loss in float32
    assert out.cache is None  # training: no cache unless asked


# --- the cache ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(MODELS))
def test_a_prefill_in_chunks_then_steps_equals_one_forward(kind):
    model = tiny(kind)
    (ids,) = prompts(13)
    with torch.no_grad():
        whole = model(ids, use_cache=False).logits
        parts, cache = [], None
        for start, end in [(0, 5), (5, 6), (6, 11), (11, 12), (12, 13)]:
            out = model(ids[:, start:end], cache=cache)
            parts.append(out.logits)
            cache = out.cache
    assert isinstance(cache, SeqdynCache) and cache.get_seq_length() == 13
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", list(MODELS))
def test_greedy_generation_reads_the_cache_as_the_whole_sequence(kind):
    model = tiny(kind)
    (ids,) = prompts(6)
    tokens, logits = greedy(model, ids)
    uncached, _ = greedy(model, ids, use_cache=False)
    assert torch.equal(tokens, uncached) and tokens.shape == (1, 14)
    with torch.no_grad():
        whole = model(tokens, use_cache=False).logits[:, 5:-1]
    torch.testing.assert_close(logits, whole.float(), rtol=1e-6, atol=1e-6)  # generate keeps float32 logits


@pytest.mark.parametrize("kind", ["hybrid", "mamba2", "local_attention"])
def test_a_left_padded_batch_generates_what_each_prompt_generates_alone(kind):
    model = tiny(kind)
    rows = prompts(7, 3, 5)
    ids, mask = left_padded(rows)
    tokens, logits = greedy(model, ids, attention_mask=mask)
    for index, row in enumerate(rows):
        alone_tokens, alone_logits = greedy(model, row)
        assert torch.equal(tokens[index, ids.shape[1] :], alone_tokens[0, row.shape[1] :])
        torch.testing.assert_close(logits[index], alone_logits[0], rtol=1e-6, atol=1e-6)
    uncached, _ = greedy(model, ids, attention_mask=mask, use_cache=False)
    assert torch.equal(tokens, uncached)


def test_a_padded_prefill_leaves_each_row_the_state_of_its_tokens_alone():
    model = tiny("hybrid")
    rows = prompts(6, 2)
    ids, mask = left_padded(rows)
    step = torch.tensor([[5], [5]])
    with torch.no_grad():
        padded = model(ids, attention_mask=mask)
        assert padded.cache.padded and torch.all(padded.logits[1, :4] == 0)  # the padded steps
        following = model(step, attention_mask=torch.cat([mask, torch.ones_like(step)], dim=1), cache=padded.cache)
        for index, row in enumerate(rows):
            alone = model(row)
            torch.testing.assert_close(padded.logits[index, -row.shape[1] :], alone.logits[0], rtol=0, atol=1e-10)
            torch.testing.assert_close(
                following.logits[index], model(step[:1], cache=alone.cache).logits[0], rtol=0, atol=1e-10
            )


@pytest.mark.parametrize("kind", ["hybrid", "gated_deltanet"])
def test_beam_search_reorders_the_cache(kind):
    model = tiny(kind)
    (ids,) = prompts(5)
    beams = model.generate(ids, max_new_tokens=6, num_beams=3, do_sample=False)
    uncached = model.generate(ids, max_new_tokens=6, num_beams=3, do_sample=False, use_cache=False)
    assert torch.equal(beams, uncached)
    rows = prompts(5, 3)
    padded_ids, mask = left_padded(rows)
    padded = model.generate(padded_ids, attention_mask=mask, max_new_tokens=6, num_beams=3, do_sample=False)
    alone = model.generate(rows[1], max_new_tokens=6, num_beams=3, do_sample=False)
    assert torch.equal(padded[1, padded_ids.shape[1] :], alone[0, rows[1].shape[1] :])


def test_sampling_draws_the_same_tokens_with_and_without_the_cache():
    model = tiny("hybrid")
    rows = prompts(5, 3)
    ids, mask = left_padded(rows)
    drawn = []
    for use_cache in (True, False):
        torch.manual_seed(3)
        drawn.append(
            model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=6,
                do_sample=True,
                top_k=10,
                num_return_sequences=2,
                use_cache=use_cache,
            )
        )
    assert drawn[0].shape == (4, 11) and torch.equal(*drawn)


def test_a_recurrent_models_cache_stays_the_same_size_while_a_softmax_cache_grows():
    def cache_floats(model, new_tokens):
        (ids,) = prompts(4)
        out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, return_dict_in_generate=True)
        return sum(t.numel() for layer in out.cache.layers for t in tensors(layer.state))

    recurrent, attention = tiny("gated_deltanet"), tiny("hybrid")
    assert cache_floats(recurrent, 3) == cache_floats(recurrent, 12) > 0
    assert cache_floats(attention, 12) > cache_floats(attention, 3)


# --- bad input ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, words",
    [
        (lambda m, ids: m(inputs_embeds=torch.zeros(1, 3, 16, dtype=torch.float64)), "inputs_embeds"),
        (lambda m, ids: m(ids[0]), "input_ids: expected token ids"),
        (lambda m, ids: m(ids, attention_mask=torch.ones(1, 2)), "attention_mask: expected"),
        (lambda m, ids: m(ids, attention_mask=torch.full_like(ids, 2)), "0 \\(padding\\) or 1"),
        (lambda m, ids: m(ids, cache=transformers.DynamicCache()), "cache: expected the SeqdynCache"),
        (lambda m, ids: m(ids, attention_mask=torch.zeros_like(ids)), "every step of every row is padding"),
    ],
)
def test_bad_input_is_one_line_naming_the_argument(call, words):
    model = tiny("gated_deltanet")
    (ids,) = prompts(4)
    with pytest.raises(ValueError, match=words) as error:
        call(model, ids)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", seqdyn.mixers.names())
def test_every_registered_mixer_generates_from_its_cache_as_without(name):
    torch.manual_seed(0)
    config = SeqdynConfig(vocab_size=VOCAB, d_model=16, layers=1, mlp_ratio=2.0, init_std=0.3, mixer=name)
    model = SeqdynForCausalLM(config).double().eval()
    rows = prompts(5, 3)
    ids, mask = left_padded(rows)
    for batch, batch_mask in ((rows[0], None), (ids, mask)):
        cached, logits = greedy(model, batch, attention_mask=batch_mask)
        uncached, uncached_logits = greedy(model, batch, attention_mask=batch_mask, use_cache=False)
        assert torch.equal(cached, uncached)
        torch.testing.assert_close(logits, uncached_logits, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("typo", "meant"), [("d_modle", "d_model"), ("mixr", "mixer"), ("num_hiden_layers", "num_hidden_layers")]
)
def test_a_misspelled_config_field_is_one_line_with_the_closest_name(typo, meant):
    with pytest.raises(ValueError, match=rf"^SeqdynConfig: unknown field '{typo}' \(did you mean '{meant}'\?\)"):
        SeqdynConfig(vocab_size=VOCAB, **{typo: 2})


def test_tie_word_embeddings_false_builds_an_untied_head_and_stays_false():
    untied = SeqdynConfig(vocab_size=VOCAB, d_model=16, layers=1, tie_word_embeddings=False)
    tied = SeqdynConfig(vocab_size=VOCAB, d_model=16, layers=1)
    assert untied.tie_word_embeddings is False and tied.tie_word_embeddings is True
    assert not SeqdynForCausalLM(untied).seqdyn.tied and SeqdynForCausalLM(tied).seqdyn.tied
    untied_size = sum(p.numel() for p in SeqdynForCausalLM(untied).parameters())
    assert untied_size == sum(p.numel() for p in SeqdynForCausalLM(tied).parameters()) + VOCAB * 16


def test_from_pretrained_takes_transformers_overrides_of_the_models_size(tmp_path):
    tiny("gated_deltanet").save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, num_hidden_layers=1)
    assert model.config.num_hidden_layers == 1 and len(model.seqdyn.blocks) == 1
    config = AutoConfig.from_pretrained(tmp_path, hidden_size=32)
    assert config.model["d_model"] == 32 and config.hidden_size == 32
    with pytest.raises(ValueError, match="^SeqdynConfig: layers"):
        config.num_hidden_layers = 0


def test_past_key_values_is_the_cache_by_its_older_name():
    model = tiny("hybrid")
    ids = prompts(12)[0]
    with torch.no_grad():
        whole = model(ids, use_cache=False).logits
        prefix = model(ids[:, :7], use_cache=True)
        by_old_name = model(ids[:, 7:], past_key_values=prefix.cache).logits
    torch.testing.assert_close(by_old_name, whole[:, 7:], rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="^past_key_values: give the cache once"):
        model(ids[:, 7:], cache=prefix.cache, past_key_values=SeqdynCache(2))


def _packed(lengths=(5, 7, 4)):
    docs = prompts(*lengths, seed=3)
    ids = torch.cat(docs, dim=1)
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    positions = torch.cat([torch.arange(length) for length in lengths])[None]
    return docs, ids, offsets, positions


@pytest.mark.parametrize("how", ["cu_seqlens", "position_ids", "cu_seq_lens_q"])
def test_packed_documents_give_each_documents_logits_and_the_loss_within_documents(how):
    """As each document alone, through seqdyn's cu_seqlens and through transformers' packing arguments (what
    DataCollatorWithFlattening gives); the loss is the mean over every document's own next-token predictions."""
    model = tiny("hybrid", mixer_options=[{}, {"rotary": True}])
    docs, ids, offsets, positions = _packed()
    packing = {
        "cu_seqlens": dict(cu_seqlens=offsets),
        "position_ids": dict(position_ids=positions),
        "cu_seq_lens_q": dict(cu_seq_lens_q=offsets, cu_seq_lens_k=offsets, position_ids=positions),
    }[how]
    with torch.no_grad():
        packed = model(ids, labels=ids, **packing)
        alone = [model(doc, labels=doc, use_cache=False) for doc in docs]
    torch.testing.assert_close(packed.logits, torch.cat([out.logits for out in alone], dim=1), rtol=0, atol=1e-10)
    predictions = [doc.shape[1] - 1 for doc in docs]
    expected = sum(out.loss * count for out, count in zip(alone, predictions)) / sum(predictions)
    torch.testing.assert_close(packed.loss, expected, rtol=1e-12, atol=0)


def test_packed_documents_are_one_row_without_a_cache():
    model = tiny("hybrid")
    _, ids, offsets, _ = _packed()
    with pytest.raises(ValueError, match=r"^cu_seqlens: packed documents come as one row"):
        model(torch.cat([ids, ids]), cu_seqlens=offsets)
    with pytest.raises(ValueError, match="^cu_seqlens: packed documents run without a cache"):
        model(ids, cu_seqlens=offsets, cache=SeqdynCache(2))
    with pytest.raises(ValueError, match="^cu_seq_lens_q: differs from the packing given before it"):
        model(ids, cu_seqlens=offsets, cu_seq_lens_q=offsets + 1)
