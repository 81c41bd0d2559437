"""``seqdyn bench decode``: a language model's prefill and decode against the context length.

For each model — softmax attention (rotary), Mamba-2 and Gated DeltaNet, each a :class:`~seqdyn.hf.SeqdynForCausalLM`
of ``layers`` blocks at width ``d_model``, float32, one torch thread — and each context length:

* **prefill**: the context in one forward from an empty cache, and in chunks of ``chunk`` tokens (each chunk a
  forward from the cache the last one left);
* **decode**: ``steps`` greedy tokens from the prefilled cache, one forward of one token each (what ``generate`` does
  per token), as tokens per second; the memory the cache holds after them (its tensors' bytes) and the peak memory
  the decoding added (the resident set on the CPU).

Then **packed against padded training**: forward and backward of a batch of documents of mixed lengths, packed
(``cu_seqlens``) and right-padded to the longest (as unpacked training computes them), as real tokens per second,
timed alternately.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from seqdyn.bench.measure import PeakMemory, pinned_threads, resolve_device, threads_in_words
from seqdyn.core.autotune import elapsed_seconds
from seqdyn.core.packing import pack_documents
from seqdyn.core.rows import tensors
from seqdyn.tasks import IGNORE_INDEX

#: the models: name -> SeqdynConfig fields
MODELS = {
    "softmax_attention": dict(mixer="softmax_attention", mixer_options={"rotary": True, "heads": 4}),
    "mamba2": dict(mixer="mamba2", mixer_options={"head_dim": 16, "state_dim": 16}),
    "gated_deltanet": dict(mixer="gated_deltanet"),
}
CONTEXTS = (1024, 4096, 16384)
QUICK_CONTEXTS = (128, 512)


@dataclass
class DecodeRow:
    model: str
    context: int
    prefill_s: float
    chunked_prefill_s: float
    decode_tokens_per_s: float
    cache_bytes: int
    decode_peak_bytes: int | None


@dataclass
class PackingRow:
    documents: int
    real_tokens: int
    padded_tokens: int
    packed_tokens_per_s: float
    padded_tokens_per_s: float
    lengths: list[int] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.packed_tokens_per_s / self.padded_tokens_per_s


def build(name: str, d_model: int, layers: int, vocab: int = 256):
    """A :class:`~seqdyn.hf.SeqdynForCausalLM` of mixer ``name`` (:data:`MODELS`)."""
    from seqdyn.hf import SeqdynConfig, SeqdynForCausalLM

    torch.manual_seed(0)
    config = SeqdynConfig(vocab_size=vocab, d_model=d_model, layers=layers, **MODELS[name])
    return SeqdynForCausalLM(config).eval()


@torch.no_grad()
def measure_decode(model, name: str, context: int, chunk: int, steps: int, device: torch.device) -> DecodeRow:
    """One :class:`DecodeRow`.  Every call is made once untimed first: ``auto`` measures a shape the first time it
    meets it, which no later call pays."""
    prompt = torch.randint(1, model.config.vocab_size, (1, context), generator=torch.Generator().manual_seed(0))
    prompt = prompt.to(device)

    def chunked():
        cache = None
        for start in range(0, context, chunk):
            cache = model(prompt[:, start : start + chunk], cache=cache).cache
        return cache

    model(prompt)
    prefill_s = elapsed_seconds(lambda: model(prompt), device)
    model(prompt[:, -1:], cache=chunked())  # the chunks' shapes and one decoded token's
    chunked_prefill_s = elapsed_seconds(chunked, device)
    cache = chunked()
    token = prompt[:, -1:]
    with PeakMemory(device) as peak:

        def decode():
            nonlocal token
            for _ in range(steps):
                out = model(token, cache=cache)
                token = out.logits[:, -1:].argmax(-1)

        decode_s = elapsed_seconds(decode, device)
    cache_bytes = sum(t.numel() * t.element_size() for layer in cache.layers for t in tensors(layer.state))
    return DecodeRow(name, context, prefill_s, chunked_prefill_s, steps / decode_s, cache_bytes, peak.peak_bytes)


def measure_packing(
    model, documents: int, shortest: int, longest: int, repeats: int, device: torch.device
) -> PackingRow:
    """Packed against padded forward + backward of ``documents`` random documents of ``shortest``–``longest``
    tokens (lengths drawn with seed 0): padded, the batch of right-padded documents that unpacked training computes
    (every step, padding included; the loss skips the padding), packed, the same documents end to end
    (:func:`~seqdyn.core.packing.pack_documents`).  The loss is the next-token cross-entropy over the real tokens."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(shortest, longest + 1, (documents,), generator=generator).tolist()
    padded = torch.zeros(documents, max(lengths), dtype=torch.long)
    targets = torch.full_like(padded, IGNORE_INDEX)
    for row, length in enumerate(lengths):
        document = torch.randint(1, model.config.vocab_size, (length + 1,), generator=generator)
        padded[row, :length], targets[row, :length] = document[:-1], document[1:]
    packed, packed_targets, cu_seqlens = (t.to(device) for t in pack_documents(padded, targets, IGNORE_INDEX))
    padded, targets = padded.to(device), targets.to(device)
    body = model.seqdyn

    def loss(logits: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), wanted.flatten(), ignore_index=IGNORE_INDEX)

    def packed_step():
        loss(body(packed, cu_seqlens=cu_seqlens), packed_targets).backward()

    def padded_step():
        loss(body(padded), targets).backward()

    packed_step(), padded_step()  # warm-up
    pairs = [(elapsed_seconds(packed_step, device), elapsed_seconds(padded_step, device)) for _ in range(repeats)]
    real = sum(lengths)
    return PackingRow(
        documents,
        real,
        documents * max(lengths),
        real / statistics.median(p for p, _ in pairs),
        real / statistics.median(q for _, q in pairs),
        lengths,
    )


def run_decode_benchmark(
    quick: bool = False,
    device: str = "cpu",
    d_model: int = 64,
    layers: int = 2,
    chunk: int = 512,
    steps: int = 32,
    models: list[str] | None = None,
    markdown: str | None = None,
) -> tuple[list[DecodeRow], list[PackingRow]]:
    """Every :data:`MODELS` entry (or ``models``) at every context length, then packing; prints the tables."""
    from rich.console import Console

    unknown = sorted(set(models or []) - set(MODELS))
    if unknown:
        raise ValueError(f"--models: unknown {unknown}; choose from {sorted(MODELS)}")
    where = resolve_device(device)
    contexts = QUICK_CONTEXTS if quick else CONTEXTS
    chunk = min(chunk, min(contexts))
    rows, packing = [], []
    console = Console(width=120)
    with pinned_threads():
        for name in models or list(MODELS):
            model = build(name, d_model, layers).to(where)
            for context in contexts:
                rows.append(measure_decode(model, name, context, chunk, steps, where))
                console.print(_decode_line(rows[-1]))
            packing.append(
                measure_packing(model, 16 if quick else 32, 16 if quick else 64, 128 if quick else 1024, 3, where)
            )
            console.print(
                f"{name}: packed {packing[-1].packed_tokens_per_s:,.0f} tokens/s, padded "
                f"{packing[-1].padded_tokens_per_s:,.0f} tokens/s ({packing[-1].ratio:.2f}×)"
            )
    text = render_markdown(rows, packing, models or list(MODELS), d_model, layers, chunk, steps)
    console.print(text)
    if markdown:
        with open(markdown, "w") as file:
            file.write(text)
    return rows, packing


def _decode_line(row: DecodeRow) -> str:
    return (
        f"{row.model} T={row.context}: prefill {row.prefill_s:.3f} s, in chunks {row.chunked_prefill_s:.3f} s, "
        f"decode {row.decode_tokens_per_s:,.1f} tokens/s, cache {row.cache_bytes / 2**20:.2f} MiB"
    )


def render_markdown(
    rows: list[DecodeRow],
    packing: list[PackingRow],
    models: list[str],
    d_model: int,
    layers: int,
    chunk: int,
    steps: int,
) -> str:
    lines = [
        f"Decode (d_model {d_model}, {layers} layers, float32, {threads_in_words()}; prefill chunks of {chunk}; "
        f"{steps} decoded tokens):",
        "",
        "| model | context | prefill s | in chunks s | decode tokens/s | cache MiB | decode peak MiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        peak = "—" if row.decode_peak_bytes is None else f"{row.decode_peak_bytes / 2**20:.1f}"
        lines.append(
            f"| {row.model} | {row.context:,} | {row.prefill_s:.3f} | {row.chunked_prefill_s:.3f} | "
            f"{row.decode_tokens_per_s:,.1f} | {row.cache_bytes / 2**20:.2f} | {peak} |"
        )
    lines += [
        "",
        "Packed against padded training (forward + backward, real tokens per second):",
        "",
        "| model | documents | real tokens | padded tokens | packed tokens/s | padded tokens/s | packed / padded |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in zip(models, packing):
        lines.append(
            f"| {name} | {row.documents} | {row.real_tokens:,} | {row.padded_tokens:,} | "
            f"{row.packed_tokens_per_s:,.0f} | {row.padded_tokens_per_s:,.0f} | {row.ratio:.2f}× |"
        )
    return "\n".join(lines) + "\n"
