"""``seqdyn bench hf``: a transformers model as it runs on a CPU (its pure-PyTorch fallbacks) against the same model
with :func:`seqdyn.hf.accelerate`, side by side in one process on one thread (or each count of ``--threads``).

Per length: the prompt's forward (prefill) and forward + backward times, and greedy decoding's tokens per second,
of both; the ratio is transformers' time over the accelerated one's (> 1: seqdyn is faster).  Beside them a third
model, the same with the swapped functions at no cost (:func:`costless_model`), gives each ratio's ceiling.  Then
the model's first accelerated layer alone, and each swapped function alone — transformers' fallback against
seqdyn's — on the arguments that layer receives in the model (what the targets compare when the rest of the model,
identical in both, is most of its time).  The models, and the two versions of each layer or function, are timed
alternately, best of the rounds, after a warm-up call each.  All three models share their weights (the others are
copies), and the logits of the two are compared at each length first.  The targets:
prefill ≥ 1.5× and forward + backward ≥ 2× at 4k tokens, decoding not slower.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any

import torch

from seqdyn.bench.measure import pinned_threads, threads_in_words, time_alternately

#: the benchmarked models: a Mamba of 2 layers at width 256 (512 channels of state 16: mamba-130m's proportions); a
#: Mamba-2 of 2 layers at width 256 (8 heads of 64, state 64, one group), transformers'
#: default chunk of 256; a Qwen3.5 of 4 layers at width 256 in the released models' pattern, 3 Gated DeltaNet layers
#: (8 value heads of 64 sharing 4 query/key heads of 64, as Qwen3.5's 2:1) then one gated attention layer (4 heads of
#: 64, 2 key-value heads), SwiGLU of 512 (transformers cannot generate from a model of Gated DeltaNet layers alone:
#: its cache asks an attention layer for the length); a Qwen3-Next of the same layers with a mixture of 8 experts of
#: 128 (the top 2) and a shared expert of 256 in place of each MLP; a RecurrentGemma of 3 layers at width 256 in
#: Griffin's pattern (two recurrent blocks of 256 channels in 4 gate blocks, then local attention of 4 heads of 64,
#: one key-value head, a window of 2048), GeGLU of 384

#: the benchmarked Qwen3.5 and its toy version, whose layers the Qwen3-Next benchmark shares
QWEN3_5: dict[str, Any] = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    layer_types=["linear_attention"] * 3 + ["full_attention"],
    linear_num_key_heads=4,
    linear_num_value_heads=8,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    vocab_size=1024,
)
QUICK_QWEN3_5: dict[str, Any] = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    layer_types=["linear_attention", "full_attention"],
    linear_num_key_heads=1,
    linear_num_value_heads=2,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    vocab_size=64,
)


def _with_experts(fields: dict[str, Any], experts: int, width: int, shared_width: int) -> dict[str, Any]:
    """Qwen3-Next's config of a Qwen3.5's ``fields``: each MLP a mixture of ``experts`` experts of ``width`` (the top
    2) and a shared expert of ``shared_width``."""
    layers = {name: value for name, value in fields.items() if name != "intermediate_size"}
    return {
        **layers,
        "num_experts": experts,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": width,
        "shared_expert_intermediate_size": shared_width,
    }


FAMILIES: dict[str, dict[str, Any]] = {
    "mamba": dict(hidden_size=256, state_size=16, expand=2, num_hidden_layers=2, vocab_size=1024, time_step_rank=16),
    "mamba2": dict(
        hidden_size=256,
        num_heads=8,
        head_dim=64,
        state_size=64,
        n_groups=1,
        expand=2,
        num_hidden_layers=2,
        vocab_size=1024,
        chunk_size=256,
    ),
    "qwen3_5_text": QWEN3_5,
    "qwen3_next": _with_experts(QWEN3_5, experts=8, width=128, shared_width=256),
    "recurrent_gemma": dict(
        hidden_size=256,
        lru_width=256,
        intermediate_size=768,
        num_hidden_layers=3,
        block_types=["recurrent", "recurrent", "attention"],
        num_attention_heads=4,
        num_key_value_heads=1,
        attention_window_size=2048,
        attention_bias=False,
        logits_soft_cap=30.0,
        vocab_size=1024,
    ),
    "kimi_linear": dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        mlp_layer_types=["dense"] * 4,
        linear_num_heads=4,
        linear_head_dim=64,
        num_attention_heads=4,
        num_key_value_heads=4,
        kv_lora_rank=64,
        qk_rope_head_dim=32,
        qk_nope_head_dim=32,
        v_head_dim=64,
        vocab_size=1024,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    ),
    "rwkv": dict(hidden_size=256, num_hidden_layers=2, vocab_size=1024),
    "xlstm": dict(hidden_size=256, num_heads=4, num_hidden_layers=2, vocab_size=1024, chunk_size=64),
    "zamba": dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=3,
        layers_block_type=["mamba", "hybrid", "hybrid"],
        num_attention_heads=4,
        num_key_value_heads=4,
        mamba_d_state=16,
        n_mamba_heads=2,
        vocab_size=1024,
    ),
    "zamba2": dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=3,
        layers_block_type=["mamba", "hybrid", "hybrid"],
        num_mem_blocks=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        adapter_rank=16,
        mamba_d_state=64,
        n_mamba_heads=8,
        mamba_ngroups=1,
        chunk_size=256,
        vocab_size=1024,
    ),
}
#: how the table names each benchmarked model
MODEL_WORDS = {
    "mamba": "Mamba, 2 layers, width 256, 512 channels of state 16",
    "mamba2": "Mamba-2, 2 layers, width 256, 8 heads of 64, state 64",
    "qwen3_5_text": "Qwen3.5, 3 Gated DeltaNet layers (8 value heads of 64, 4 key heads of 64) and 1 gated "
    "attention layer, width 256",
    "qwen3_next": "Qwen3-Next, Qwen3.5's layers with a mixture of 8 experts of 128 (the top 2) and a shared expert "
    "of 256 in place of each MLP",
    "recurrent_gemma": "RecurrentGemma, 2 RG-LRU blocks of 256 channels and 1 local attention layer, width 256",
    "kimi_linear": "Kimi-Linear, 3 KDA layers (4 heads of 64) and 1 latent attention layer, width 256",
    "rwkv": "RWKV-4, 2 blocks of width 256 (256 channels of WKV)",
    "xlstm": "xLSTM 7B's layers, 2 blocks of width 256 (4 mLSTM heads, keys of 32, values of 64)",
    "zamba": "Zamba, 3 Mamba layers of 2 heads (512 channels of state 16), 2 of them with the shared attention "
    "block (4 heads of 128), width 256",
    "zamba2": "Zamba2, 3 Mamba-2 layers (8 heads of 64, state 64), 2 of them with the shared attention block "
    "(4 heads of 128, adapters of rank 16), width 256",
}
LENGTHS = (1024, 4096, 16384)
#: toy versions of :data:`FAMILIES` for ``--quick``
QUICK: dict[str, dict[str, Any]] = {
    "mamba": dict(hidden_size=32, state_size=4, expand=2, num_hidden_layers=1, vocab_size=64, time_step_rank=4),
    "mamba2": dict(
        hidden_size=32,
        num_heads=4,
        head_dim=16,
        state_size=8,
        n_groups=1,
        expand=2,
        num_hidden_layers=1,
        vocab_size=64,
        chunk_size=16,
    ),
    "qwen3_5_text": QUICK_QWEN3_5,
    "qwen3_next": _with_experts(QUICK_QWEN3_5, experts=4, width=16, shared_width=32),
    "recurrent_gemma": dict(
        hidden_size=32,
        lru_width=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        attention_window_size=16,
        vocab_size=64,
    ),
    "kimi_linear": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
        mlp_layer_types=["dense"] * 2,
        linear_num_heads=2,
        linear_head_dim=16,
        num_attention_heads=2,
        num_key_value_heads=2,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
        vocab_size=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    ),
    "rwkv": dict(hidden_size=32, num_hidden_layers=2, vocab_size=64),
    "xlstm": dict(hidden_size=64, num_heads=2, qk_dim_factor=1.0, num_hidden_layers=1, vocab_size=64, chunk_size=16),
    "zamba": dict(hidden_size=32, intermediate_size=64, vocab_size=64),
    "zamba2": dict(hidden_size=32, intermediate_size=64, vocab_size=64),
}


@dataclass
class FunctionRow:
    """One swapped function on the arguments of its first call at one prompt length: seconds (transformers'
    fallback, seqdyn's) of its forward and of its forward + backward (into every floating-point argument)."""

    function: str
    forward_s: tuple[float, float]
    forward_backward_s: tuple[float, float]
    largest_difference: float

    @property
    def ratios(self) -> dict[str, float]:
        """the fallback's time over seqdyn's (> 1: seqdyn is faster)."""
        return {
            "forward": self.forward_s[0] / self.forward_s[1],
            "forward + backward": self.forward_backward_s[0] / self.forward_backward_s[1],
        }


@dataclass
class HfRow:
    """One family at one prompt length: seconds (transformers, accelerated) and decoding's tokens per second."""

    family: str
    length: int
    prefill_s: tuple[float, float]
    forward_backward_s: tuple[float, float]
    decode_tokens_per_s: tuple[float, float]
    largest_difference: float
    functions: tuple[FunctionRow, ...] = ()
    #: seconds of the prefill and of the forward + backward of the model with its swapped functions at no cost
    #: (:func:`costless_model`): what no faster function can go below
    costless_s: tuple[float, float] | None = None

    @property
    def ratios(self) -> dict[str, float]:
        """transformers over seqdyn: > 1 where the accelerated model is faster (decoding: seqdyn's rate over
        transformers')."""
        return {
            "prefill": self.prefill_s[0] / self.prefill_s[1],
            "forward + backward": self.forward_backward_s[0] / self.forward_backward_s[1],
            "decode": self.decode_tokens_per_s[1] / self.decode_tokens_per_s[0],
        }

    @property
    def ceilings(self) -> dict[str, float]:
        """transformers' time over the costless model's: the largest ratio any function in place of the swapped ones
        could reach, the rest of the model (projections, attention, norms, head) being the same in both."""
        if self.costless_s is None:
            return {}
        return {
            "prefill": self.prefill_s[0] / self.costless_s[0],
            "forward + backward": self.forward_backward_s[0] / self.costless_s[1],
        }


def _decode_rates(models: tuple[torch.nn.Module, ...], prompt: torch.Tensor, tokens: int, repeats: int) -> tuple:
    """Greedy decoding's tokens per second of each of ``models`` from ``prompt`` (``tokens`` new tokens, the prompt's
    prefill included), the models timed alternately (:func:`~seqdyn.bench.measure.time_alternately`)."""
    settings = dict(
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=tokens,
        min_new_tokens=tokens,
        do_sample=False,
        pad_token_id=0,
    )

    def generate(model):
        return lambda: model.generate(prompt, **settings)

    with torch.no_grad():
        seconds = time_alternately([generate(model) for model in models], torch.device("cpu"), repeats)
    return tuple(tokens / s for s in seconds)


def measure(family: str, length: int, fields: dict[str, Any], repeats: int = 2, decode_tokens: int = 32) -> HfRow:
    """Both models of ``family`` (config ``fields``) on a random prompt of ``length`` tokens, and the costless one
    (:func:`costless_model`); the three timed alternately, best of ``repeats`` rounds after a warm-up call each."""
    from seqdyn.hf import accelerate

    plain = _model(family, fields)
    fast = accelerate(copy.deepcopy(plain))
    costless = costless_model(plain)
    inputs = torch.randint(0, fields["vocab_size"], (1, length), generator=torch.Generator().manual_seed(0))
    cpu = torch.device("cpu")
    with torch.no_grad():
        expected, got = plain(inputs).logits, fast(inputs).logits
    difference = float((got - expected).abs().max() / expected.abs().max())

    def prefill(model):
        return lambda: model(inputs, use_cache=False)

    def train_step(model):
        def step():
            model.zero_grad(set_to_none=True)
            model(inputs, use_cache=False).logits.float().mean().backward()

        return step

    models = (plain, fast, costless)
    with torch.no_grad():
        prefill_s = time_alternately([prefill(model) for model in models], cpu, repeats)
    backward_s = time_alternately([train_step(model) for model in models], cpu, repeats)
    prompt = inputs[:, : min(length, 256)]
    decode = _decode_rates((plain, fast), prompt, decode_tokens, repeats)
    functions = tuple(_measure_function(*call, repeats) for call in _first_calls(plain, fast, inputs))
    return HfRow(
        family,
        length,
        tuple(prefill_s[:2]),
        tuple(backward_s[:2]),
        decode,
        difference,
        functions,
        (prefill_s[2], backward_s[2]),
    )


def costless_model(plain: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``plain`` whose functions that :func:`~seqdyn.hf.accelerate` swaps cost (nearly) nothing
    (:func:`costless`, each computing seqdyn's function once per argument shapes): the rest of the model computes
    as in both others, so its time is what neither the fallbacks nor seqdyn's functions can change."""
    from seqdyn.hf.acceleration import ACCELERATED, ACCELERATED_LAYERS, ACCELERATED_METHODS, Swapped, rebound_forward

    model = copy.deepcopy(plain)
    for layer in model.modules():
        kind = type(layer).__name__
        if kind in ACCELERATED_LAYERS:
            functions = ACCELERATED[ACCELERATED_LAYERS[kind]]
            layer.forward = rebound_forward(layer, {name: costless(function) for name, function in functions.items()})
        for name in ACCELERATED_METHODS.get(kind, {}):
            setattr(layer, name, costless(Swapped(layer, name)))
    return model


def costless(function: Any) -> Any:
    """``function`` at (nearly) no cost: its outputs for the first arguments of each shapes, computed once, then
    returned plus ``0 · Σ x`` of every floating-point argument ``x`` — one pass over each, through which gradients
    still reach the arguments, so that the layers before it run their backward as with ``function``."""
    outputs: dict[tuple, Any] = {}

    def call(*args, **kwargs):
        tensors = [x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor) and x.is_floating_point()]
        key = tuple(tuple(x.shape) for x in tensors)
        if key not in outputs:
            with torch.no_grad():
                outputs[key] = function(*args, **kwargs)
        link = sum((x.sum() for x in tensors), torch.zeros(())) * 0
        return _linked(outputs[key], link)

    return call


def _linked(output: Any, link: torch.Tensor) -> Any:
    """``output`` (a tensor, or tuples and lists of them and anything else) with ``link`` added to each
    floating-point tensor."""
    if isinstance(output, torch.Tensor):
        return output + link.to(output.dtype) if output.is_floating_point() else output
    if isinstance(output, (tuple, list)):
        items = [_linked(item, link) for item in output]
        return type(output)(*items) if hasattr(output, "_fields") else type(output)(items)  # a named tuple's fields
    return output


#: the benchmarked families built from transformers' own default configuration beyond the benchmark's fields (not
#: the conversion tests' tiny one, whose mixture-of-experts defaults differ): their transformers classes
ACCELERATED_ONLY = {"kimi_linear": ("KimiLinearForCausalLM", "KimiLinearConfig")}


def _model(family: str, fields: dict[str, Any]) -> torch.nn.Module:
    """``family``'s transformers model of ``fields`` in float32 (:func:`~seqdyn.hf.convert.tiny_model`'s, or for a
    family that is only accelerated its classes')."""
    from seqdyn.hf.convert import tiny_model
    from seqdyn.hf.convert.checks import random_model

    if family not in ACCELERATED_ONLY:
        return tiny_model(family, torch.float32, **fields)
    return random_model(*ACCELERATED_ONLY[family], fields)


def _first_calls(
    plain: torch.nn.Module, fast: torch.nn.Module, inputs: torch.Tensor
) -> list[tuple[str, Any, Any, tuple, dict]]:
    """``(name, transformers' version, seqdyn's, args, kwargs)`` with the arguments of the first call in one forward
    of ``inputs`` through ``plain``: first its first accelerated layer against the same layer of ``fast`` (none where
    the layers keep a state between calls — RecurrentGemma's RG-LRU: a second call would continue the first one's),
    then each function that :func:`~seqdyn.hf.accelerate` swaps, transformers' fallback against seqdyn's."""
    from seqdyn.hf.acceleration import ACCELERATED_METHODS, swapped_functions

    swaps, calls = swapped_functions(plain), {}
    originals = [getattr(owner, name) for owner, name, _ in swaps]
    layers = [
        name
        for name, layer in fast.named_modules()
        if getattr(layer, "_seqdyn_accelerated", False) and type(layer).__name__ not in ACCELERATED_METHODS
    ]
    layer_name = f"{type(plain.get_submodule(layers[0])).__name__} (layer)" if layers else None
    recording = _recording(plain, calls, {name: original for (_, name, _), original in zip(swaps, originals)})
    if layers:
        recording.get_submodule(layers[0]).register_forward_pre_hook(
            lambda _, args, kwargs: calls.setdefault(layer_name, (args, kwargs)) and None, with_kwargs=True
        )
    with torch.no_grad():
        recording(inputs, use_cache=False)
    layer_call = (
        [(layer_name, plain.get_submodule(layers[0]), fast.get_submodule(layers[0]), *calls[layer_name])]
        if layers
        else []
    )
    return layer_call + [
        (name, original, _bound(function, owner), *calls[name])
        for (owner, name, function), original in zip(swaps, originals)
        if name in calls
    ]


def _bound(function: Any, owner: Any) -> Any:
    """seqdyn's ``function`` as the fallback is called: bound to ``owner`` where it replaces a whole method of it."""
    return functools.partial(function, owner) if getattr(function, "binds_layer", False) else function


def _recording(
    plain: torch.nn.Module, calls: dict[str, tuple[tuple, dict]], originals: dict[str, Any]
) -> torch.nn.Module:
    """A copy of ``plain`` whose accelerated layers call transformers' fallbacks ``originals`` through a recorder of
    the first call's arguments of each into ``calls`` (in that copy's layers only, as :func:`~seqdyn.hf.accelerate`
    swaps)."""
    from seqdyn.hf.acceleration import ACCELERATED, ACCELERATED_LAYERS, ACCELERATED_METHODS, rebound_forward

    def recorder(name, original):
        def record(*args, **kwargs):
            calls.setdefault(name, (args, kwargs))
            return original(*args, **kwargs)

        return record

    recording = copy.deepcopy(plain)
    for layer in recording.modules():
        kind = type(layer).__name__
        if kind in ACCELERATED_LAYERS:
            names = ACCELERATED[ACCELERATED_LAYERS[kind]]
            layer.forward = rebound_forward(layer, {name: recorder(name, originals[name]) for name in names})
        for name in ACCELERATED_METHODS.get(kind, {}):
            setattr(layer, name, recorder(name, getattr(layer, name)))
    return recording


def _measure_function(
    name: str, original: Any, replacement: Any, args: tuple, kwargs: dict, repeats: int
) -> FunctionRow:
    """Both functions on the same arguments: forward, forward + backward (of the first output's sum), and the
    largest difference of their first outputs relative to the fallback's largest."""
    cpu = torch.device("cpu")

    def call(function, grad: bool):
        leaves = [_leaf(x, grad) for x in args], {key: _leaf(x, grad) for key, x in kwargs.items()}

        def run():
            out = function(*leaves[0], **leaves[1])
            first = out[0] if isinstance(out, tuple) else out
            if grad:
                first.float().sum().backward()
            return first

        return run

    with torch.no_grad():
        expected, got = call(original, False)(), call(replacement, False)()
        forward_s = tuple(time_alternately([call(f, False) for f in (original, replacement)], cpu, repeats))
    difference = float((got.float() - expected.float()).abs().max() / expected.float().abs().max())
    backward_s = tuple(time_alternately([call(f, True) for f in (original, replacement)], cpu, repeats))
    return FunctionRow(name, forward_s, backward_s, difference)


def _leaf(x: Any, grad: bool) -> Any:
    """A floating-point tensor as a fresh leaf (asking for its gradient when ``grad``); anything else as it is."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().clone().requires_grad_(grad)
    return x


def run_hf_benchmark(
    quick: bool = False,
    lengths: tuple[int, ...] = LENGTHS,
    repeats: int = 2,
    markdown: str | None = None,
    families: tuple[str, ...] = tuple(FAMILIES),
) -> list[HfRow]:
    """Each of ``families`` (of :data:`FAMILIES`) at every length (``quick``: a toy model at 64 tokens), on the
    benchmark's threads (:func:`~seqdyn.bench.measure.pinned_threads`);
    prints and returns the rows."""
    from rich.console import Console

    unknown = [family for family in families if family not in FAMILIES]
    if unknown:
        raise ValueError(f"families: {unknown} not benchmarked; choose from {', '.join(FAMILIES)}")
    console, rows = Console(width=140), []
    with pinned_threads():
        for family in families:
            for length in (64,) if quick else lengths:
                fields = (QUICK if quick else FAMILIES)[family]
                rows.append(measure(family, length, fields, repeats, 4 if quick else 32))
                console.print(_line(rows[-1]))
    text = render_markdown(rows, quick)
    console.print(text)
    if markdown:
        with open(markdown, "w") as file:
            file.write(text)
    return rows


def _line(row: HfRow) -> str:
    ratios = ", ".join(f"{name} {value:.2f}×" for name, value in row.ratios.items())
    ceilings = ", ".join(f"{name} {value:.2f}×" for name, value in row.ceilings.items())
    return (
        f"{row.family} L={row.length}: {ratios} (ceilings {ceilings or 'not measured'}; largest logit difference "
        f"{row.largest_difference:.1e})"
    )


def render_markdown(rows: list[HfRow], quick: bool) -> str:
    models = (
        "toy models" if quick else "; ".join(MODEL_WORDS[family] for family in dict.fromkeys(r.family for r in rows))
    )
    lines = [
        f"transformers' PyTorch fallback against `seqdyn.hf.accelerate` ({models}; float32, {threads_in_words()}; "
        "ratio = transformers / seqdyn, decode = seqdyn / transformers tokens per second; ceiling = transformers / "
        "the model with its swapped functions at no cost, the largest ratio any function could reach; the models "
        "timed alternately, best of the rounds, after a warm-up call each):",
        "",
        "| family | tokens | prefill s | ratio | ceiling | forward + backward s | ratio | ceiling | decode tokens/s | "
        "ratio | largest difference |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        ratios, ceilings = row.ratios, row.ceilings
        prefill_ceiling, backward_ceiling = (
            f"{ceilings[name]:.2f}×" if name in ceilings else "—" for name in ("prefill", "forward + backward")
        )
        lines.append(
            f"| {row.family} | {row.length:,} | {row.prefill_s[0]:.3f} → {row.prefill_s[1]:.3f} | "
            f"{ratios['prefill']:.2f}× | {prefill_ceiling} | {row.forward_backward_s[0]:.3f} → "
            f"{row.forward_backward_s[1]:.3f} | {ratios['forward + backward']:.2f}× | {backward_ceiling} | "
            f"{row.decode_tokens_per_s[0]:,.1f} → {row.decode_tokens_per_s[1]:,.1f} | {ratios['decode']:.2f}× | "
            f"{row.largest_difference:.1e} |"
        )
    if any(row.functions for row in rows):
        lines += _function_table(rows)
    return "\n".join(lines) + "\n"


def _part(name: str) -> str:
    """A function's name as code, a layer's (``"Mamba2Mixer (layer)"``) as its class in code and the word."""
    return f"`{name[: -len(' (layer)')]}` (layer)" if name.endswith(" (layer)") else f"`{name}`"


def _function_table(rows: list[HfRow]) -> list[str]:
    lines = [
        "",
        "The first accelerated layer alone, then each swapped function alone — transformers' fallback against "
        "seqdyn's, on the arguments that layer receives in the model (forward + backward: into every "
        "floating-point argument and the layer's weights):",
        "",
        "| family | part | tokens | forward s | ratio | forward + backward s | ratio | largest difference |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        for function in row.functions:
            ratios = function.ratios
            lines.append(
                f"| {row.family} | {_part(function.function)} | {row.length:,} | {function.forward_s[0]:.3f} → "
                f"{function.forward_s[1]:.3f} | {ratios['forward']:.2f}× | "
                f"{function.forward_backward_s[0]:.3f} → {function.forward_backward_s[1]:.3f} | "
                f"{ratios['forward + backward']:.2f}× | {function.largest_difference:.1e} |"
            )
    return lines
