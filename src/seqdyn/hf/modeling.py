"""``SeqdynModel`` and ``SeqdynForCausalLM``: a seqdyn :class:`~seqdyn.models.SequenceModel` as a transformers model.

The weights are the sequence model's own (``seqdyn.`` + its parameter names), so ``save_pretrained`` /
``from_pretrained`` round-trip exactly and ``AutoModel`` loads the body of a causal-LM checkpoint.  ``generate``
streams each layer's state in a :class:`~seqdyn.hf.cache.SeqdynCache`: the prompt is one parallel forward from the
state (any backend), every new token a forward of one step from it.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from seqdyn.hf.cache import SeqdynCache
from seqdyn.hf.configuration import SeqdynConfig
from seqdyn.models.model import SequenceModel

__all__ = ["SeqdynForCausalLM", "SeqdynModel", "SeqdynPreTrainedModel"]


class SeqdynPreTrainedModel(PreTrainedModel):
    """Builds the sequence model of a :class:`SeqdynConfig`; seqdyn initializes it (the papers' initializations,
    Zoology's for the rest), so transformers' weight initialization leaves it alone."""

    config_class = SeqdynConfig
    base_model_prefix = "seqdyn"
    main_input_name = "input_ids"
    _supports_cache_class = True

    def __init__(self, config: SeqdynConfig):
        super().__init__(config)
        self.seqdyn = SequenceModel(config.model_config, config.task_spec)
        self.post_init()

    def _init_weights(self, module: torch.nn.Module) -> None:
        pass

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the layers keep their own states: a SeqdynCache, made by the first forward

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.seqdyn.embedding

    def set_input_embeddings(self, embedding: torch.nn.Embedding) -> None:
        raise NotImplementedError(
            "set_input_embeddings: the lm head is tied to the embedding and the vocabulary "
            "sized by the config; build a SeqdynConfig with the new vocab_size instead"
        )

    def _run(
        self,
        input_ids: Tensor | None,
        attention_mask: Tensor | None,
        cache: SeqdynCache | None,
        use_cache: bool,
        head: bool,
        inputs_embeds: Tensor | None,
        cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, SeqdynCache | None]:
        """``(outputs [B, t, ·], cache)`` of the tokens ``input_ids`` ``[B, t]`` that follow ``cache``.

        ``attention_mask`` ``[B, seen + t]`` (or ``[B, t]``), 1 = token, 0 = padding: each row is the sequence of
        its tokens, computed as if alone; the outputs at padded steps are 0.  ``cu_seqlens`` (offsets ``[N + 1]``,
        ``input_ids`` ``[1, T]``): packed documents, each computed as if alone, without a cache.
        """
        if inputs_embeds is not None:
            raise ValueError("inputs_embeds: a seqdyn model takes input_ids (its embedding is part of the model)")
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
            got = list(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
            raise ValueError(f"input_ids: expected token ids [batch, length], got {got}")
        if cache is not None and not isinstance(cache, SeqdynCache):
            raise ValueError(f"cache: expected the SeqdynCache this model returned, got {type(cache).__name__}")
        if cu_seqlens is not None:
            if cache is not None:
                raise ValueError("cu_seqlens: packed documents run without a cache; drop cache / past_key_values")
            return self.seqdyn(input_ids, cu_seqlens=cu_seqlens, head=head), None
        mask = _step_mask(attention_mask, input_ids)
        if cache is None and not use_cache:
            return self.seqdyn(input_ids, attention_mask=mask, head=head), None
        cache = SeqdynCache(len(self.seqdyn.blocks)) if cache is None else cache
        if mask is None and not cache.padded:
            out, state = self.seqdyn(input_ids, state=cache.model_state(), return_state=True, head=head)
            cache.store(state, input_ids.shape[1])
            return out, cache
        return self._run_rows(input_ids, mask, cache, head), cache

    def _run_rows(self, input_ids: Tensor, mask: Tensor | None, cache: SeqdynCache, head: bool) -> Tensor:
        """A padded batch: every row's tokens from that row's own state (:func:`seqdyn.core.packing.from_state`)."""
        batch = input_ids.shape[0]
        cache.split_rows(batch)
        outputs, states = self.seqdyn(
            input_ids,
            attention_mask=mask,
            head=head,
            return_state=True,
            state=[cache.row_state(row) for row in range(batch)],
        )
        for row, state in enumerate(states):
            if state is not None:
                cache.store_row(row, state)
        cache.seen += input_ids.shape[1]
        return outputs


class SeqdynModel(SeqdynPreTrainedModel):
    """The body: ``last_hidden_state`` ``[B, T, D]`` is the final norm's output (the lm head's input)."""

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        cache: SeqdynCache | None = None,
        use_cache: bool | None = None,
        inputs_embeds: Tensor | None = None,
        return_dict: bool | None = None,
        cu_seqlens: Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast | tuple:
        cache, cu_seqlens = _cache_of(cache, kwargs), _packing_of(cu_seqlens, input_ids, kwargs)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        hidden, cache = self._run(input_ids, attention_mask, cache, use_cache, False, inputs_embeds, cu_seqlens)
        output = BaseModelOutputWithPast(last_hidden_state=hidden, cache=cache)
        return output if return_dict is not False else output.to_tuple()


class SeqdynForCausalLM(SeqdynPreTrainedModel, GenerationMixin):
    """Next-token logits ``[B, T, vocab_size]``; ``labels`` (the inputs, shifted inside) give the loss."""

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        cache: SeqdynCache | None = None,
        use_cache: bool | None = None,
        labels: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        logits_to_keep: int | Tensor = 0,
        return_dict: bool | None = None,
        cu_seqlens: Tensor | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast | tuple:
        """Logits of ``input_ids`` (after ``cache``, or transformers' older name for it, ``past_key_values``), and
        with ``labels`` the loss.  Packed documents — ``cu_seqlens``, or transformers' packing arguments
        (``position_ids`` restarting at each document, ``cu_seq_lens_q`` / ``cu_seq_lens_k``) — are each computed as
        if alone, and the loss never predicts a document's first token from the one before."""
        cache, cu_seqlens = _cache_of(cache, kwargs), _packing_of(cu_seqlens, input_ids, kwargs)
        use_cache = (self.config.use_cache and labels is None) if use_cache is None else use_cache
        logits, cache = self._run(input_ids, attention_mask, cache, use_cache, True, inputs_embeds, cu_seqlens)
        if isinstance(logits_to_keep, int):
            logits = logits[:, -logits_to_keep:] if logits_to_keep else logits
        else:
            logits = logits[:, logits_to_keep]
        loss = None
        if labels is not None:
            labels = _within_documents(labels, cu_seqlens)
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        output = CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache)
        return output if return_dict is not False else output.to_tuple()


def _cache_of(cache: SeqdynCache | None, kwargs: dict) -> SeqdynCache | None:
    """The cache, given as ``cache`` or by transformers' older name ``past_key_values`` (taken out of ``kwargs``)."""
    old = kwargs.pop("past_key_values", None)
    if old is not None and cache is not None and old is not cache:
        raise ValueError("past_key_values: give the cache once, as cache or as past_key_values")
    return cache if cache is not None else old


def _packing_of(cu_seqlens: Tensor | None, input_ids: Tensor | None, kwargs: dict) -> Tensor | None:
    """The offsets of packed documents in ``input_ids`` ``[1, T]``: ``cu_seqlens``, else transformers' own
    ``cu_seq_lens_q`` / ``cu_seq_lens_k`` (taken out of ``kwargs``; they must agree), else where ``position_ids``
    ``[1, T]`` restarts at 0 (``DataCollatorWithFlattening``); None for one unpacked row."""
    given = [kwargs.pop(name, None) for name in ("cu_seq_lens_q", "cu_seq_lens_k")]
    position_ids = kwargs.pop("position_ids", None)
    for name, other in zip(("cu_seq_lens_q", "cu_seq_lens_k"), given):
        if other is None:
            continue
        if cu_seqlens is not None and not torch.equal(cu_seqlens.to(other.device).long(), other.long()):
            raise ValueError(f"{name}: differs from the packing given before it; give the documents' offsets once")
        cu_seqlens = other
    if cu_seqlens is None and isinstance(position_ids, Tensor) and position_ids.dim() == 2:
        starts = (position_ids[0] == 0).nonzero().flatten()
        if position_ids.shape[0] == 1 and len(starts) > 1 and int(starts[0]) == 0:
            cu_seqlens = torch.cat([starts, starts.new_tensor([position_ids.shape[1]])])
    if cu_seqlens is not None and (input_ids is None or input_ids.shape[0] != 1):
        raise ValueError("cu_seqlens: packed documents come as one row, input_ids [1, total tokens]")
    return None if cu_seqlens is None else cu_seqlens.long()


def _within_documents(labels: Tensor, cu_seqlens: Tensor | None) -> Tensor:
    """``labels`` with each packed document's first token ignored (-100), so that the shifted loss never predicts
    it from the previous document."""
    if cu_seqlens is None:
        return labels
    labels = labels.clone()
    labels[0, cu_seqlens[1:-1].to(labels.device)] = -100
    return labels


def _step_mask(attention_mask: Tensor | None, input_ids: Tensor) -> Tensor | None:
    """The part of ``attention_mask`` for this call's tokens as bool ``[B, t]``; ``None`` where it masks nothing."""
    if attention_mask is None:
        return None
    if (
        not isinstance(attention_mask, Tensor)
        or attention_mask.dim() != 2
        or attention_mask.shape[0] != input_ids.shape[0]
        or attention_mask.shape[1] < input_ids.shape[1]
    ):
        got = list(attention_mask.shape) if isinstance(attention_mask, Tensor) else type(attention_mask).__name__
        raise ValueError(
            f"attention_mask: expected [batch, tokens so far] with batch {input_ids.shape[0]} and at "
            f"least {input_ids.shape[1]} tokens (1 = token, 0 = padding), got {got}"
        )
    if ((attention_mask != 0) & (attention_mask != 1)).any():
        raise ValueError("attention_mask: values must be 0 (padding) or 1 (token)")
    mask = attention_mask[:, -input_ids.shape[1] :].bool()
    return None if bool(mask.all()) else mask
