"""Swapping transformers' fallbacks for seqdyn's functions in one model's layers, and in nothing else.

A transformers layer calls its fallbacks as globals of its module (``mamba2_chunk_scan(...)`` inside
``Mamba2Mixer.forward``), or, in RecurrentGemma, as a method of its own (``self._rnn_scan(...)``).  Neither the
module nor the class is changed here: an accelerated layer gets, as an attribute of its own,

- a ``forward`` that is a copy of its class's forward whose globals are the module's with the fallbacks' names bound
  to seqdyn's functions (:func:`rebound_forward`; the class's decorators copied around it), run with what the layer
  knows of its prompt (:mod:`seqdyn.hf.acceleration.prompt`), read from its arguments by name;
- or the method, bound to seqdyn's function.

So any other model — another instance of the same class, in another thread at the same time — runs transformers'
functions as before, and an accelerated model runs seqdyn's whichever thread calls it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

from seqdyn.hf.acceleration.functions import (
    causal_conv1d,
    gated_delta_rule,
    kimi_delta_attention,
    linear_rnn_scan,
    mlstm_backend,
    rwkv_linear_attention,
    selective_scan,
    ssd_chunk_scan,
)
from seqdyn.hf.acceleration.prompt import keep_real_conv_state, prompt_of, running

__all__ = [
    "ACCELERATED",
    "ACCELERATED_LAYERS",
    "ACCELERATED_METHODS",
    "Swapped",
    "accelerate",
    "fallback_of",
    "rebound_forward",
    "swapped_functions",
]

#: transformers module → {its fallback's name: seqdyn's function}: what :func:`accelerate` swaps, per family
ACCELERATED: dict[str, dict[str, Callable[..., Any]]] = {
    **{
        f"transformers.models.{name}.modeling_{name}": {
            "mamba_selective_scan": selective_scan,
            "causal_conv1d_fn": causal_conv1d,
        }
        for name in ("mamba", "falcon_mamba", "zamba")
    },
    **{
        f"transformers.models.{name}.modeling_{name}": {
            "mamba2_chunk_scan": ssd_chunk_scan,
            "causal_conv1d_fn": causal_conv1d,
        }
        for name in ("mamba2", "bamba", "granitemoehybrid", "nemotron_h", "zamba2", "falcon_h1")
    },
    **{
        f"transformers.models.{name}.modeling_{name}": {
            "torch_chunk_gated_delta_rule": gated_delta_rule,
            "causal_conv1d_fn": causal_conv1d,
        }
        for name in ("qwen3_5", "qwen3_5_moe", "qwen3_next", "olmo_hybrid")
    },
    **{
        f"transformers.models.{name}.modeling_{name}": {
            "chunk_kimi_delta_attention": kimi_delta_attention,
            "recurrent_kimi_delta_attention": kimi_delta_attention,
            "causal_conv1d_fn": causal_conv1d,
        }
        for name in ("kimi_linear", "bailing_hybrid", "glm5_next")
    },
    "transformers.models.rwkv.modeling_rwkv": {"rwkv_linear_attention": rwkv_linear_attention},
}


def fallback_of(name: str) -> Callable[..., Any]:
    """transformers' own function ``name`` (a key of :data:`ACCELERATED`'s, e.g. ``"torch_chunk_gated_delta_rule"``),
    from the first family module that defines it: what the benchmarks time seqdyn's functions against."""
    modules = [module for module, functions in ACCELERATED.items() if name in functions]
    if not modules:
        known = sorted({function for functions in ACCELERATED.values() for function in functions})
        raise ValueError(f"name: transformers has no fallback {name!r} that seqdyn swaps; known: {known}")
    return getattr(importlib.import_module(modules[0]), name)


#: transformers layer class → {its method that runs a fallback: seqdyn's function}, swapped on each such layer
ACCELERATED_METHODS: dict[str, dict[str, Callable[..., Any]]] = {
    "RecurrentGemmaRglru": {"_rnn_scan": linear_rnn_scan},
    "xLSTMBackend": {"forward": mlstm_backend},
}
#: the transformers layer classes whose forward calls the functions of :data:`ACCELERATED`, with their module
ACCELERATED_LAYERS = {
    "MambaMixer": "transformers.models.mamba.modeling_mamba",
    "FalconMambaMixer": "transformers.models.falcon_mamba.modeling_falcon_mamba",
    "ZambaMambaMixer": "transformers.models.zamba.modeling_zamba",
    "Mamba2Mixer": "transformers.models.mamba2.modeling_mamba2",
    "BambaMixer": "transformers.models.bamba.modeling_bamba",
    "GraniteMoeHybridMambaLayer": "transformers.models.granitemoehybrid.modeling_granitemoehybrid",
    "NemotronHMamba2Mixer": "transformers.models.nemotron_h.modeling_nemotron_h",
    "Zamba2MambaMixer": "transformers.models.zamba2.modeling_zamba2",
    "FalconH1Mixer": "transformers.models.falcon_h1.modeling_falcon_h1",
    "Qwen3_5GatedDeltaNet": "transformers.models.qwen3_5.modeling_qwen3_5",
    "Qwen3_5MoeGatedDeltaNet": "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
    "Qwen3NextGatedDeltaNet": "transformers.models.qwen3_next.modeling_qwen3_next",
    "OlmoHybridGatedDeltaNet": "transformers.models.olmo_hybrid.modeling_olmo_hybrid",
    "KimiLinearDeltaAttention": "transformers.models.kimi_linear.modeling_kimi_linear",
    "BailingHybridDeltaAttention": "transformers.models.bailing_hybrid.modeling_bailing_hybrid",
    "Glm5NextTextLinearAttention": "transformers.models.glm5_next.modeling_glm5_next",
    "RwkvSelfAttention": "transformers.models.rwkv.modeling_rwkv",
}


def accelerate(model: nn.Module) -> nn.Module:
    """``model`` (a loaded transformers model) with each layer of a family in :data:`ACCELERATED` running seqdyn's
    functions instead of transformers' fallbacks, in this model only (each such layer gets a forward or a method
    of its own; transformers' modules and classes stay as they are); returns ``model``.  Raises ``ValueError`` where
    no layer of it is accelerated."""
    found = 0
    for layer in model.modules():
        kind = type(layer).__name__
        if kind not in ACCELERATED_LAYERS and kind not in ACCELERATED_METHODS:
            continue
        found += 1
        if getattr(layer, "_seqdyn_accelerated", False):  # accelerated once: not wrapped twice
            continue
        if kind in ACCELERATED_LAYERS:
            layer.forward = Swapped(layer, "forward")
        for name in ACCELERATED_METHODS.get(kind, {}):
            setattr(layer, name, Swapped(layer, name))
        layer._seqdyn_accelerated = True
    if not found:
        raise ValueError(
            f"model: {type(model).__name__} has no layer seqdyn accelerates (supported: "
            f"{', '.join([*ACCELERATED_LAYERS, *ACCELERATED_METHODS])})"
        )
    return model


class Swapped:
    """An accelerated layer's forward (or its method ``name`` of :data:`ACCELERATED_METHODS`), bound to ``layer``
    and called as the bound method would be.  Copied (``copy.deepcopy``) or saved and loaded (``torch.save``,
    pickle) with its layer, it is made anew for the copy — bound to the copy, with seqdyn's functions — where a
    bound method would be copied bound to the original or loaded as the class's own forward."""

    def __init__(self, layer: nn.Module, name: str):
        self.layer, self.name = layer, name
        self.call = _swapped_call(layer, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return Swapped, (self.layer, self.name)

    @property
    def __func__(self) -> Callable[..., Any]:
        """The function the call runs (a bound method's ``__func__``)."""
        return self.call.__func__

    @property
    def __self__(self) -> nn.Module:
        """The layer it is bound to (a bound method's ``__self__``)."""
        return self.layer


def _swapped_call(layer: nn.Module, name: str) -> Callable[..., Any]:
    """The method ``name`` of ``layer`` with seqdyn's functions: the forward of a layer of :data:`ACCELERATED_LAYERS`
    (:func:`rebound_forward`), or a method of :data:`ACCELERATED_METHODS`, bound to ``layer``."""
    kind = type(layer).__name__
    if name == "forward" and kind in ACCELERATED_LAYERS:
        return rebound_forward(layer, ACCELERATED[ACCELERATED_LAYERS[kind]], around=_with_prompt)
    function = ACCELERATED_METHODS[kind][name]
    if getattr(function, "binds_layer", False):  # the whole method, steps included, the layer its first argument
        return types.MethodType(function, layer)
    return types.MethodType(_accelerated_method(getattr(type(layer), name), function), layer)


def swapped_functions(model: nn.Module) -> list[tuple[Any, str, Callable[..., Any]]]:
    """What :func:`accelerate` swaps in ``model``, once each: ``(owner, name, seqdyn's function)`` with ``owner``
    the transformers module whose function ``name`` is the fallback, or the first layer whose method it is."""
    swaps: dict[tuple[str, str], tuple[Any, str, Callable[..., Any]]] = {}
    for layer in model.modules():
        kind = type(layer).__name__
        if kind in ACCELERATED_LAYERS:
            module = importlib.import_module(ACCELERATED_LAYERS[kind])
            for name, function in ACCELERATED[ACCELERATED_LAYERS[kind]].items():
                swaps.setdefault((ACCELERATED_LAYERS[kind], name), (module, name, function))
        for name, function in ACCELERATED_METHODS.get(kind, {}).items():
            swaps.setdefault((kind, name), (layer, name, function))
    return list(swaps.values())


def rebound_forward(
    layer: nn.Module,
    functions: Mapping[str, Callable[..., Any]],
    around: Callable[[Callable[..., Any], Callable[..., Any]], Callable[..., Any]] | None = None,
) -> Callable[..., Any]:
    """The forward of ``layer``'s class, bound to ``layer``, in which each global name of ``functions`` (a function of
    the class's module that the forward calls) is that function: a copy of the undecorated forward with globals of
    its own (the module's, those names replaced), inside copies of the class's decorators.  ``around(swapped,
    original)``, where given, runs in place of that copy (``original``: the undecorated forward as transformers
    wrote it).  Assign it to ``layer.forward``; the class, its module and every other layer stay as they are (the
    copy reads the module's other globals as they are now)."""

    def swap(original: Callable[..., Any]) -> Callable[..., Any]:
        unknown = [name for name in functions if name not in original.__globals__]
        if unknown:
            raise ValueError(f"functions: {unknown} are not globals of {original.__module__}")
        swapped = types.FunctionType(
            original.__code__,
            {**original.__globals__, **functions},
            original.__name__,
            original.__defaults__,
            original.__closure__,
        )
        swapped.__kwdefaults__ = original.__kwdefaults__
        functools.update_wrapper(swapped, original)
        return swapped if around is None else around(swapped, original)

    return types.MethodType(_rewrapped(type(layer).forward, swap), layer)


def _rewrapped(
    function: Callable[..., Any], replace: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> Callable[..., Any]:
    """``function`` with the innermost of the functions its decorators wrap (followed by ``__wrapped__``) replaced by
    ``replace(innermost)``: each decorator's wrapper copied, the closure cell that held the function it wraps now
    holding the replaced one."""
    inner = getattr(function, "__wrapped__", None)
    if inner is None:
        return replace(function)
    cells = function.__closure__ or ()
    held = [index for index, cell in enumerate(cells) if _holds(cell, inner)]
    if len(held) != 1:
        raise TypeError(
            f"{function.__qualname__}: its decorator does not keep the function it wraps in one closure "
            "cell, so its forward cannot be copied with other functions"
        )
    replaced = _rewrapped(inner, replace)
    closure = tuple(types.CellType(replaced) if index == held[0] else cell for index, cell in enumerate(cells))
    copy = types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__, closure
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__dict__.update(function.__dict__)
    copy.__qualname__, copy.__wrapped__ = function.__qualname__, replaced
    return copy


def _holds(cell: types.CellType, value: Any) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False


def _with_prompt(swapped: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    """``forward(self, hidden_states, cache=None, attention_mask=None, ...)`` of a transformers layer running
    ``swapped`` (the forward with seqdyn's functions) within what it knows of its prompt, its arguments read by name
    (:func:`~seqdyn.hf.acceleration.prompt.prompt_of`; the input is the first argument, whatever its name); one
    decoded token runs ``original``, the step update."""
    signature = inspect.signature(original)
    first = list(signature.parameters)[1]  # the layer's input, after self: hidden_states (RWKV: hidden)

    @functools.wraps(original)
    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        call = signature.bind(self, *args, **kwargs).arguments
        hidden, cache = call.get(first), call.get("cache")
        if isinstance(hidden, Tensor) and hidden.dim() == 3 and hidden.shape[1] == 1:
            return original(self, *args, **kwargs)  # one decoded token: the step update, no scan to swap
        layer_idx = getattr(self, "layer_idx", None)
        with running(prompt_of(hidden, cache, call.get("attention_mask"), layer_idx)) as prompt:
            output = swapped(self, *args, **kwargs)
        keep_real_conv_state(cache, layer_idx, prompt)
        return output

    return forward


def _accelerated_method(method: Callable[..., Any], function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` in place of the class's ``method`` (to be bound to a layer), except for one decoded token (the
    step update)."""

    @functools.wraps(method)
    def accelerated(self: nn.Module, hidden_states: Tensor, *args: Any, **kwargs: Any) -> Any:
        if hidden_states.shape[1] == 1:
            return method(self, hidden_states, *args, **kwargs)
        return function(hidden_states, *args, **kwargs)

    return accelerated
