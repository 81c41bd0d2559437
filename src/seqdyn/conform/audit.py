"""The invariants a user of a transformers model assumes, checked against seqdyn's float64 reference of it.

For a model of a family seqdyn converts, the reference is its conversion in float64 (exact to round-off:
``seqdyn convert --check``), run on each row alone. The model under audit, in float32, must give the reference's
logits (within :data:`TOLERANCE` of the largest logit) however the row reaches it:

- ``alone``: the row by itself;
- ``left-padded`` / ``right-padded``: in a batch beside a longer row, padded on that side, with its attention mask;
- ``two-piece prefill``: the prompt in two forward calls, the second continuing the first's cache;
- ``token by token``: the first token, then every further token decoded from the cache;
- ``generate``: greedy generation with the cache gives the tokens it gives without.

Where an invariant breaks, the audit names the first of the model's layers (its largest ``ModuleList``:
``model.layers``, ``rwkv.blocks``, …) whose output departs from the row's own forward by more than the tolerance —
where the break begins.

The same harness run on seqdyn's float32 conversion of the model is its control: a model that keeps every invariant
passes every check, so a broken one speaks of the model, not of how the harness drives its cache.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

#: an invariant holds where its logits stay within this of the reference's, relative to the largest logit (float32
#: models agree with their float64 conversions to about 1e-6 here; a broken invariant is off by 1e-2 and more)
TOLERANCE = 1e-4
#: what transformers' models call the cache they return and take, newest first (RWKV: its state)
CACHE_NAMES = ("cache", "past_key_values", "cache_params", "state")
INVARIANTS = ("alone", "left-padded", "right-padded", "packed", "two-piece prefill", "token by token", "generate")


def _relative(got: Tensor, reference: Tensor) -> float:
    return float((got.double() - reference).abs().max() / reference.abs().max())


def _padded(model: nn.Module, row: Tensor, longer: int, left: bool) -> tuple[Tensor, list[Tensor]]:
    """``row`` ``[1, T]``'s logits and layer outputs in a batch with a row of ``longer`` tokens, padded on the left
    or the right."""
    pad = longer - row.shape[1]
    filler = torch.zeros(1, pad, dtype=row.dtype)
    tokens = torch.cat([filler, row] if left else [row, filler], 1)
    mask = torch.cat(
        [torch.zeros_like(filler), torch.ones_like(row)] if left else [torch.ones_like(row), torch.zeros_like(filler)],
        1,
    )
    other = torch.randint(1, int(row.max()) + 1, (1, longer), generator=torch.Generator().manual_seed(7))
    where = slice(pad, None) if left else slice(0, row.shape[1])
    with recorded_layers(model) as calls:
        logits = model(torch.cat([other, tokens]), attention_mask=torch.cat([torch.ones_like(mask), mask])).logits
    return logits[1, where], [layer[1, where] for layer in calls[0]] if calls else []


def _packed(model: nn.Module, row: Tensor) -> tuple[Tensor, list[Tensor]]:
    """``row`` ``[1, T]``'s logits and layer outputs packed in one row after another document of ``T + 3`` tokens, the
    positions restarting at 0 where it begins (``position_ids``, as transformers' ``DataCollatorWithFlattening``
    packs), without an attention mask."""
    other = torch.randint(1, int(row.max()) + 1, (1, row.shape[1] + 3), generator=torch.Generator().manual_seed(11))
    positions = torch.cat([torch.arange(other.shape[1]), torch.arange(row.shape[1])])[None]  # [1, 2T + 3]
    where = slice(other.shape[1], None)
    with recorded_layers(model) as calls:
        logits = model(torch.cat([other, row], 1), position_ids=positions).logits
    return logits[0, where], [layer[0, where] for layer in calls[0]] if calls else []


def _continued(model: nn.Module, tokens: Tensor, earlier: Any, start: int, total: int) -> Any:
    """``model`` on ``tokens`` (positions ``start`` …) continuing the cache of the call ``earlier`` returned, its
    inputs prepared as ``generate`` prepares them (``prepare_inputs_for_generation``: each family's own mask, cache
    and position conventions) from the whole sequence so far — or, where that preparation fails for more than one
    new token, as the tokens, the cache, their cache positions and the mask of every token so far."""
    cache = next(getattr(earlier, name) for name in CACHE_NAMES if getattr(earlier, name, None) is not None)
    accepted = inspect.signature(model.forward).parameters
    keyword = next(name for name in CACHE_NAMES if name in accepted)
    so_far = torch.cat([torch.zeros(1, start, dtype=tokens.dtype), tokens], 1)  # only the new tokens are read
    inputs = model.prepare_inputs_for_generation(
        so_far, **{keyword: cache}, use_cache=True, **_positions(start, tokens.shape[1], total)
    )
    inputs["input_ids"] = tokens
    try:
        return model(**inputs)
    except RuntimeError as prepared_failed:  # a family whose preparation assumes one new token: call it directly
        try:
            return model(tokens, **{keyword: cache}, use_cache=True, **_positions(start, tokens.shape[1], total))
        except RuntimeError:
            raise prepared_failed from None


def _positions(start: int, length: int, total: int) -> dict[str, Tensor]:
    """The cache position of ``length`` new tokens after ``start`` and the mask of all ``total`` tokens so far."""
    return {
        "cache_position": torch.arange(start, start + length),
        "attention_mask": torch.ones(1, total, dtype=torch.long),
    }


def _alone(model: nn.Module, row: Tensor) -> tuple[Tensor, list[Tensor]]:
    """``row``'s logits ``[T, vocab]`` and each layer's output ``[T, D]`` from one forward."""
    with recorded_layers(model) as calls:
        logits = model(row).logits[0]
    return logits, [layer[0] for layer in calls[0]] if calls else []


def _pieces(model: nn.Module, row: Tensor, cut: int) -> tuple[Tensor, list[Tensor]]:
    """``row``'s logits and layer outputs from a forward of its first ``cut`` tokens and a second continuing the
    first's cache."""
    with recorded_layers(model) as calls:
        first = model(row[:, :cut], use_cache=True)
        second = _continued(model, row[:, cut:], first, cut, row.shape[1])
    return torch.cat([first.logits, second.logits], 1)[0], _along_time(calls)


def _token_by_token(model: nn.Module, row: Tensor) -> tuple[Tensor, list[Tensor]]:
    with recorded_layers(model) as calls:
        out, logits = model(row[:, :1], use_cache=True), []
        logits.append(out.logits[0])
        for t in range(1, row.shape[1]):
            out = _continued(model, row[:, t : t + 1], out, t, t + 1)
            logits.append(out.logits[0])
    return torch.cat(logits), _along_time(calls)


def _along_time(calls: list[list[Tensor]]) -> list[Tensor]:
    """Each layer's outputs ``[T, D]`` of the first row over successive forward calls, joined along time (none
    where the model runs its layers without calling them: no hook sees them)."""
    if not calls:
        return []
    return [torch.cat([call[index][0] for call in calls]) for index in range(len(calls[0]))]


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's stack of layers: its ``ModuleList`` with the most parameters (``model.layers``, ``rwkv.blocks``,
    seqdyn's ``blocks``; a list of experts sits inside a layer and has fewer)."""
    lists = [module for module in model.modules() if isinstance(module, nn.ModuleList)]
    if not lists:
        raise ValueError(f"model: {type(model).__name__} has no ModuleList of layers to localize a break in")
    return max(lists, key=lambda layers: sum(p.numel() for p in layers.parameters()))


@contextmanager
def recorded_layers(model: nn.Module) -> Iterator[list[list[Tensor]]]:
    """While inside, each forward of ``model`` appends the outputs of its layers (:func:`decoder_layers`; a layer
    that returns a tuple: its first item) ``[B, T, D]`` as one list (nothing where a model runs its layers
    without calling them)."""
    calls: list[list[Tensor]] = []

    def recorder(index: int) -> Callable[..., None]:
        def record(module: nn.Module, args: Any, output: Any) -> None:
            if index == 0:
                calls.append([])
            calls[-1].append((output[0] if isinstance(output, tuple) else output).detach())

        return record

    handles = [layer.register_forward_hook(recorder(index)) for index, layer in enumerate(decoder_layers(model))]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def first_departing_layer(layers: list[Tensor], alone: list[Tensor]) -> int | None:
    """The index of the first layer whose outputs depart from the row's own forward's by more than
    :data:`TOLERANCE` (relative to that layer's largest output), or None."""
    for index, (got, expected) in enumerate(zip(layers, alone)):
        if got.shape != expected.shape or _relative(got, expected.double()) > TOLERANCE:
            return index
    return None


def _generate_agrees(model: nn.Module, row: Tensor, new_tokens: int) -> float:
    """0 where greedy generation gives the same tokens with and without the cache, else 1."""
    settings = dict(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(row))
    cached = model.generate(row, use_cache=True, **settings)
    uncached = model.generate(row, use_cache=False, **settings)
    return 0.0 if torch.equal(cached, uncached) else 1.0


def check_invariants(
    model: nn.Module, reference: Callable[[Tensor], Tensor], row: Tensor, new_tokens: int = 8
) -> dict[str, Any]:
    """Each of :data:`INVARIANTS` of ``model`` on ``row`` ``[1, T]``: its error against ``reference(row)`` (float64
    logits ``[T, vocab]``), whether it holds, or the error the model raised; where one breaks beside a row alone that
    holds, the first layer whose outputs depart from the row alone's (``first_layer``, of ``layers``)."""
    with torch.no_grad():
        expected = reference(row)
    checks: dict[str, Callable[[], tuple[Tensor, list[Tensor]] | float]] = {
        "alone": lambda: _alone(model, row),
        "left-padded": lambda: _padded(model, row, row.shape[1] + 5, left=True),
        "right-padded": lambda: _padded(model, row, row.shape[1] + 5, left=False),
        "packed": lambda: _packed(model, row),
        "two-piece prefill": lambda: _pieces(model, row, row.shape[1] // 2 + 1),
        "token by token": lambda: _token_by_token(model, row),
        "generate": lambda: _generate_agrees(model, row, new_tokens),
    }
    results, alone = {}, None
    for name, check in checks.items():
        try:
            with torch.no_grad():
                results[name] = _judged(check(), expected, alone)
        except Exception as raised:  # the model's own failure is a broken invariant, never the audit's
            message = f"{type(raised).__name__}: {raised}".splitlines()[0][:200]
            results[name] = {"holds": False, "error": None, "raised": message, "first_layer": None}
            continue
        outputs = results[name].pop("outputs", None)
        alone = outputs if name == "alone" and results[name]["holds"] else alone
    results["alone"]["layers"] = len(alone) if alone else None
    return results


def _judged(
    outcome: tuple[Tensor, list[Tensor]] | float, expected: Tensor, alone: list[Tensor] | None
) -> dict[str, Any]:
    """One invariant's result from its check's outcome (logits and layer outputs, or generate's 0 / 1): its error,
    whether it holds, and where it breaks beside a row alone that holds, the first departing layer."""
    if isinstance(outcome, float):
        return {"holds": outcome <= TOLERANCE, "error": outcome, "raised": "", "first_layer": None}
    logits, layers = outcome
    error = _relative(logits, expected)
    first = first_departing_layer(layers, alone) if error > TOLERANCE and alone else None
    return {"holds": error <= TOLERANCE, "error": error, "raised": "", "first_layer": first, "outputs": layers}


def audit_family(
    family: str, length: int = 21, accelerated: bool = False, converted: bool = False
) -> dict[str, Any] | None:
    """The invariants of ``family``'s tiny random transformers model (accelerated by seqdyn where ``accelerated``;
    None where seqdyn accelerates no layer of it; its float32 conversion where ``converted``: the harness's control,
    a model that keeps every invariant), against its float64 conversion."""
    from seqdyn.hf.acceleration import accelerate
    from seqdyn.hf.convert.checkpoints import quiet_transformers
    from seqdyn.hf.convert.checks import tiny_model
    from seqdyn.hf.convert.registry import TINY_CONFIGS, from_transformers

    model = tiny_model(family)
    reference_model = from_transformers(copy.deepcopy(model).to(torch.float64))
    vocab = TINY_CONFIGS[family][2]["vocab_size"]
    row = torch.randint(1, vocab, (1, length), generator=torch.Generator().manual_seed(3))
    with quiet_transformers():
        if converted:
            model = from_transformers(copy.deepcopy(model)).float()
        elif accelerated:
            try:
                model = accelerate(model)
            except ValueError:  # no layer of it that seqdyn accelerates
                return None
        results = check_invariants(model, lambda tokens: reference_model(tokens).logits[0].double(), row)
    return {"family": family, "accelerated": accelerated, "converted": converted, "invariants": results}
