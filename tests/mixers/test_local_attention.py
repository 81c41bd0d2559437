"""Local attention's chunked path (seed 002 §3.4) against the band-masked softmax written out, on both of its
forms: two fused attentions merged by their log-sum-exps (CPU) and one attention with a bottom-right causal mask;
and the whole layer against the paper's definition (output, window cache after stepping, coefficients); the
sliding window (Mistral, Griffin) with grouped key–value heads and partial rotary embeddings the same way."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from seqdyn.mixers import local_attention
from seqdyn.mixers.local_attention import _TwoPartAttention
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

F64 = torch.float64


def _band_softmax(q, k, v, window, sliding=False):
    """``y_i = Σ_j softmax_j(q_i·k_j / √d) v_j`` over own and previous chunk, ``j ≤ i`` — the definition; with
    ``sliding`` over the ``window`` keys ``i − window < j ≤ i``."""
    length = q.shape[2]
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    allowed = (j <= i) & ((j > i - window) if sliding else (j // window >= i // window - 1))
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v


def _graph_names(tensor) -> set[str]:
    visited, stack = set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in visited:
            visited.add(node)
            stack.extend(fn for fn, _ in node.next_functions)
    return {type(node).__name__ for node in visited}


@pytest.mark.parametrize("two_part,sliding", [(True, False), (False, False), (True, True)])
@pytest.mark.parametrize("length", [3, 8, 13, 24])  # shorter than the window, whole chunks, a padded last chunk
def test_chunked_local_attention_is_the_band_masked_softmax(monkeypatch, two_part, sliding, length):
    if not two_part:
        monkeypatch.setattr(_TwoPartAttention, "available", staticmethod(lambda q: False))
    torch.manual_seed(length)
    mixer = mixers.build("local_attention", 8, heads=2, window=4, sliding=sliding).double()
    x = torch.randn(2, length, 8, dtype=F64, requires_grad=True)
    core, _ = mixer.core(x, "chunk")
    assert ("_TwoPartAttentionBackward" in _graph_names(core)) == (two_part and length > 4 and not sliding)
    q, k, v = mixer._qkv(x, scaled=False)
    exact = _band_softmax(q, k, v, 4, sliding).transpose(1, 2)
    torch.testing.assert_close(core, exact, rtol=0, atol=1e-12)
    upstream = torch.randn(core.shape, dtype=F64)
    leaves = [x, *mixer.qkv.parameters()]  # the core is before the output projection
    for got, want in zip(torch.autograd.grad(core, leaves, upstream), torch.autograd.grad(exact, leaves, upstream)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-11)


def test_two_part_attention_passes_gradcheck():
    """The merged backward (each part's flash backward given the joint output and log-sum-exp) is the exact
    gradient of the joint softmax."""
    gen = torch.Generator().manual_seed(3)
    inputs = [torch.randn(2, 3, 5, 4, generator=gen, dtype=F64, requires_grad=True) for _ in range(5)]
    if not _TwoPartAttention.available(inputs[0]):
        pytest.skip("this torch has no fused CPU attention with log-sum-exp")
    assert torch.autograd.gradcheck(_TwoPartAttention.apply, inputs)
    q, k_before, v_before, k_own, v_own = inputs
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    joint = torch.nn.functional.scaled_dot_product_attention(
        q,
        torch.cat([k_before, k_own], 2),
        torch.cat([v_before, v_own], 2),
        attn_mask=torch.cat([torch.ones_like(causal), causal], 1),
    )
    torch.testing.assert_close(_TwoPartAttention.apply(*inputs), joint, rtol=0, atol=1e-12)


def test_the_mask_form_runs_off_the_cpu_path():
    assert local_attention._TwoPartAttention.available(torch.zeros(1, device="meta")) is False


def local_attention_layer(mixer, x):
    """Seed 002 §3.4 as dense matrices: chunks of C = window tokens; query i reads keys j ≤ i of its own and the
    previous chunk, ``A = softmax(q kᵀ / √K)`` over them, ``y = W_O (A v)``.

    Returns ``(y, state, A)`` with the state the keys and values from the start of the chunk before the last
    token's own (all the next token reads) and the position."""
    batch, length, _ = x.shape
    w_q, w_k, w_v = mixer.qkv.weight.chunk(3, dim=0)
    q, k, v = ((x @ w.T).view(batch, length, mixer.heads, -1).transpose(1, 2) for w in (w_q, w_k, w_v))
    if mixer.rotary:
        q, k = _roformer(q), _roformer(k)
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    band = (j <= i) & (j // mixer.window >= i // mixer.window - 1)
    A = torch.softmax((q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).masked_fill(~band, float("-inf")), dim=-1)
    y = (A @ v).transpose(1, 2).reshape(batch, length, -1) @ mixer.out.weight.T
    first = max(0, (length // mixer.window - 1) * mixer.window)
    return y, (k[:, :, first:], v[:, :, first:], torch.tensor(length)), A


def _roformer(x):
    """RoFormer eq. 34 on ``[B, H, T, d]`` as complex numbers: the pair ``(x_m, x_{m + d/2})`` of position t
    times ``e^{i t θ_m}``, ``θ_m = 10000^(−2m/d)``."""
    half = x.shape[-1] // 2
    theta = 10000.0 ** (-2 * torch.arange(half, dtype=F64) / x.shape[-1])
    turned = torch.complex(x[..., :half], x[..., half:]) * torch.polar(
        torch.ones((), dtype=F64), torch.arange(x.shape[2], dtype=F64)[:, None] * theta
    )
    return torch.cat([turned.real, turned.imag], dim=-1)


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("length", [3, 11])  # within the first chunk; three chunks, the last one partial
@pytest.mark.parametrize("rotary", [False, True])
def test_local_attention_matches_its_paper(part, length, rotary):
    mixer = double_mixer("local_attention", 16, heads=2, window=4, rotary=rotary)
    compare_with_paper(
        part,
        mixer,
        inputs(2, length, 16, seed=1),
        local_attention_layer,
        state_of=lambda cache: (cache.keys, cache.values, torch.tensor(cache.position)),
    )


def sliding_window_layer(mixer, x):
    """Sliding-window attention with grouped key–value heads and partial rotary embeddings, as Mistral (Jiang et
    al. 2023, §2: each token attends to the previous W tokens) and Griffin's local attention (De et al. 2024
    §2.4; RecurrentGemma's MQA with a rotary half), in transformers' convention that the W tokens include the
    query's own: ``A = softmax(q kᵀ / √K)`` over ``i − W < j ≤ i``, key–value head ``h // (H / H_kv)`` for query
    head h, the first ``rotary_dims`` channels of each head rotated (RoFormer eq. 34, pairs ``(m, m + r/2)``),
    ``y = W_O (A v) + b_O``.

    Returns ``(y, state, A)`` with the state the last ``W − 1`` keys and values (all the next token reads)."""
    batch, length, _ = x.shape
    heads, groups, dim, rot = mixer.heads, mixer.heads // mixer.kv_heads, mixer.head_dim, mixer.rotary_dims
    w_q, w_k, w_v = mixer.qkv.weight.split(mixer.widths, dim=0)
    b_q, b_k, b_v = mixer.qkv.bias.split(mixer.widths, dim=0)
    q, k, v = (
        (x @ w.T + b).view(batch, length, -1, dim).transpose(1, 2) for w, b in ((w_q, b_q), (w_k, b_k), (w_v, b_v))
    )
    k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
    half = rot // 2
    theta = mixer.rotary_base ** (-2 * torch.arange(half, dtype=F64) / rot)
    turn = torch.polar(torch.ones((), dtype=F64), torch.arange(length, dtype=F64)[:, None] * theta)
    q, k = (
        torch.cat(
            [
                torch.view_as_real(torch.complex(t[..., :half], t[..., half:rot]) * turn).movedim(-1, -2).flatten(-2),
                t[..., rot:],
            ],
            dim=-1,
        )
        for t in (q, k)
    )
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    band = (j <= i) & (j > i - mixer.window)
    A = torch.softmax((q @ k.transpose(-1, -2) / dim**0.5).masked_fill(~band, float("-inf")), dim=-1)
    y = (A @ v).transpose(1, 2).reshape(batch, length, heads * dim) @ mixer.out.weight.T + mixer.out.bias
    first = max(0, length + 1 - mixer.window)
    return y, (k[:, :, first:], v[:, :, first:], torch.tensor(length)), A


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("length", [3, 11])  # within the window; past it, the last chunk partial
def test_sliding_window_attention_matches_its_paper(part, length):
    mixer = double_mixer(
        "local_attention",
        16,
        heads=4,
        kv_heads=2,
        head_dim=8,
        window=4,
        sliding=True,
        rotary=True,
        rotary_fraction=0.5,
        rotary_base=50.0,
        bias=True,
    )
    compare_with_paper(
        part,
        mixer,
        inputs(2, length, 16, seed=2),
        sliding_window_layer,
        state_of=lambda cache: (cache.keys, cache.values, torch.tensor(cache.position)),
    )


def test_sliding_window_state_is_the_last_window_of_keys():
    mixer = mixers.build("local_attention", 8, heads=2, window=5, sliding=True)
    assert mixer.state_size(3) == 3 * 2 * 8 and mixer.state_size(40) == 4 * 2 * 8
    with pytest.raises(ValueError, match="sliding"):
        mixers.build("local_attention", 8, sliding="yes")
