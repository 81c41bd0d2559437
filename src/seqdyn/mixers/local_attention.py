"""Local attention, the tractable attention baseline of the DLR paper (Gupta et al. 2022 §3.4, "LOCALATTENTION").

The sequence is cut into non-overlapping chunks of ``window`` tokens; a query attends, causally, to its own chunk
and the whole previous chunk::

    α_ij = exp(q_iᵀ k_j / √K)  for  ⌊i/C⌋ − 1 ≤ ⌊j/C⌋,  j ≤ i   (else 0),      y_i = Σ_j α_ij v_j / Σ_j α_ij

This is softmax attention (φ = exp, Λ = I, b = K^-½, η = Σ_j α_ij) with a band mask — not an instance of the
coefficient dynamics, since an ``exp`` readout never makes a coefficient exactly zero; so it computes its masked
softmax directly.  Backends: ``quadratic`` (the T×T mask), ``chunk`` (each chunk against itself and its
predecessor, linear in T) and ``recurrent`` (a cache of at most 2C − 1 keys).

With ``sliding=True`` the band is the sliding window of Mistral, Gemma 2 and Griffin's local attention
(RecurrentGemma): a query reads the last ``window`` keys, itself included::

    α_ij = exp(q_iᵀ k_j / √K)  for  i − window < j ≤ i   (else 0)

its ``recurrent`` backend keeping the last ``window − 1`` keys.  Grouped key–value heads, a head width of its
own, partial rotary embeddings and their base are :class:`~seqdyn.mixers.softmax_attention.SoftmaxAttention`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.nn.attention.bias import causal_lower_right

from seqdyn.core.choice import Timing, fixed_plan, too_large_to_time
from seqdyn.core.dsf import DSF, from_coefficients
from seqdyn.core.packing import Packing, Sequences
from seqdyn.core.precision import float32_under_autocast
from seqdyn.layers.rotary import ROPE_BASE, rotary
from seqdyn.mixers.base import Mixer, check_choice, check_positive, check_state_batch
from seqdyn.mixers.softmax_attention import SoftmaxAttention, split_heads


@dataclass
class WindowCache:
    """Keys and values ``[B, H, n, ·]`` from the start of the previous chunk, the next position and the batch
    size B it streams (``None``: any)."""

    keys: Tensor | None = None
    values: Tensor | None = None
    position: int = 0
    batch: int | None = None


def band_mask(
    length: int, window: int, device, offset: int = 0, keys: int | None = None, sliding: bool = False
) -> Tensor:
    """``[T, S]`` mask of the pairs a query ``offset + i`` may read from key ``j``: own or previous chunk, ``j ≤ i``
    (``sliding``: ``i − window < j ≤ i``)."""
    keys = length + offset if keys is None else keys
    rows = torch.arange(offset, offset + length, device=device)[:, None]
    cols = torch.arange(keys, device=device)[None, :]
    if sliding:
        return (cols <= rows) & (cols > rows - window)
    return (cols <= rows) & (cols // window >= rows // window - 1)


def first_kept(position: int, window: int, sliding: bool) -> int:
    """The oldest key that the token after ``position`` tokens reads (own or previous chunk, or the window)."""
    if sliding:
        return max(0, position + 1 - window)
    return max(0, (position // window - 1) * window)


class LocalAttention(SoftmaxAttention):
    """Local attention: softmax attention over the query's own chunk of window tokens and the previous one.

    Args:
        window: the chunk length C; a query reads its own chunk (causally) and the whole previous one, so at most
            2C keys (a window above the sequence length is causal softmax attention).
        rotary: rotary position embeddings on q and k (RoFormer), as the ATTENTION block that Gupta et al. 2022's
            LOCALATTENTION chunks ("a 4-head attention layer and rotary positional embeddings", §3.3).
        sliding: a query reads the last ``window`` keys, itself included (Mistral, Gemma 2, Griffin) instead of
            its own chunk and the previous one.
        kv_heads, head_dim, rotary_fraction, rotary_base, bias: as softmax attention's.
    """

    name = "local_attention"

    def __init__(
        self,
        d_model: int,
        heads: int = 1,
        window: int = 1024,
        bias: bool = False,
        rotary: bool = False,
        sliding: bool = False,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        rotary_fraction: float = 1.0,
        rotary_base: float = ROPE_BASE,
    ):
        super().__init__(
            d_model,
            heads,
            bias,
            rotary,
            kv_heads=kv_heads,
            head_dim=head_dim,
            rotary_fraction=rotary_fraction,
            rotary_base=rotary_base,
        )
        self.window = check_positive("window", window)
        self.sliding = check_choice("sliding", sliding, (False, True))

    @property
    def backends(self) -> tuple[str, ...]:
        return ("auto", "quadratic", "chunk", "recurrent")

    def _qkv(self, x: Tensor, scaled: bool = True, offset: int = 0) -> tuple[Tensor, Tensor, Tensor]:
        """Head-major ``[B, H, T, d]`` queries (scaled by K^-½ unless ``scaled=False``), keys and values; with
        ``rotary``, queries and keys rotated for positions ``offset …`` (RoFormer eq. 34)."""
        q, k, v = (split_heads(t, t.shape[-1] // self.head_dim) for t in self.qkv(x).split(self.widths, dim=-1))
        if self.rotary:  # [B, T, H, d] (k and v: H_kv heads)
            q, k = (rotary(t, offset, self.rotary_base, self.rotary_dims) for t in (q, k))
        if self.kv_heads != self.heads:  # each key–value head serves consecutive query heads
            k, v = (t.repeat_interleave(self.heads // self.kv_heads, dim=2) for t in (k, v))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        return (q * q.shape[-1] ** -0.5 if scaled else q), k, v

    def _coefficients(self, q: Tensor, k: Tensor) -> Tensor:
        mask = band_mask(q.shape[2], self.window, q.device, sliding=self.sliding)
        return torch.softmax((q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf")), dim=-1)

    def _chunked(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # q unscaled: the fused kernel scales it
        """Chunk 0 by causal attention over itself; every later chunk n by attention of its queries over the keys
        of chunks ``[n − 1, n]``, causal in its own (query i of chunk n reads all of chunk n − 1 and keys ``≤ i``
        of its own).  On CPUs the two parts are fused attentions of their own (:class:`_TwoPartAttention`: the
        previous chunk unmasked, the own chunk causal, whose kernel skips the masked blocks) merged by their
        log-sum-exps, ``C²/2 + (N − 1)·1.5C²`` score entries against ``T²/2`` for causal attention; elsewhere one
        fused attention over both with the causal mask aligned to the bottom right.  No band mask is formed."""
        batch, heads, length, _ = q.shape
        size = min(self.window, length)
        chunks = -(-length // size)
        padding = chunks * size - length
        pad = lambda t: (F.pad(t, (0, 0, 0, padding)) if padding else t).unflatten(2, (chunks, size))  # noqa: E731
        q, k, v = pad(q), pad(k), pad(v)
        first = F.scaled_dot_product_attention(q[:, :, 0], k[:, :, 0], v[:, :, 0], is_causal=True)
        if chunks == 1:
            return first[:, :, :length]
        if _TwoPartAttention.available(q) and not self.sliding:
            later = _TwoPartAttention.apply(
                *(t.flatten(1, 2) for t in (q[:, :, 1:], k[:, :, :-1], v[:, :, :-1], k[:, :, 1:], v[:, :, 1:]))
            )
        else:
            pairs = lambda t: torch.cat([t[:, :, :-1], t[:, :, 1:]], dim=3).flatten(1, 2)  # [B, H·(N−1), 2C, ·]  # noqa: E731
            later = F.scaled_dot_product_attention(
                q[:, :, 1:].flatten(1, 2), pairs(k), pairs(v), attn_mask=self._pair_mask(size, q.device)
            )
        out = torch.cat([first.unsqueeze(2), later.unflatten(1, (heads, chunks - 1))], dim=2)  # [B, H, N, C, ·]
        return out.flatten(2, 3)[:, :, :length]

    def _pair_mask(self, size: int, device):
        """What the queries of a chunk read of the keys of the previous chunk and their own ``[C, 2C]``."""
        if self.sliding:  # query s of the chunk is key C + s of the pair; it reads the window before it
            return band_mask(size, size, device, offset=size, keys=2 * size, sliding=True)
        return causal_lower_right(size, 2 * size)

    def auto_timing(self, x: Tensor, packing: Packing | None = None) -> Timing:
        """``chunk``, ``quadratic`` (and ``recurrent`` for T ≤ 64), timed on the masked softmax alone."""
        ruled = lambda: too_large_to_time(x.shape[1], {})  # noqa: E731
        return Timing(
            lambda inputs, name: self._core(inputs, name)[0],
            fixed_plan(
                ["chunk", "quadratic", "recurrent"], "chunk", "fused attention over chunks of the window", ruled
            ),
            ruled,
            about=" (its core alone)",
        )

    def core(self, x: Tensor, backend: str = "auto") -> tuple[Tensor, Tensor]:
        """The masked softmax's output ``[B, T, H, V]`` and its values ``[B, T, H, V]``."""
        self.check_input(x)
        return self._core(x, self.chose(self.backend_for(x, backend)))

    def _core(self, x: Tensor, backend: str) -> tuple[Tensor, Tensor]:
        q, k, v = self._qkv(x, scaled=backend in ("quadratic", "recurrent"))
        if backend == "quadratic":
            out = self._coefficients(q, k) @ v
        elif backend == "recurrent":
            out = self._stream(q, k, v)
        else:
            out = self._chunked(q, k, v)
        return out.transpose(1, 2), v.transpose(1, 2)

    def forward(self, x: Tensor, backend: str = "auto", *, sequences: Sequences | None = None) -> Tensor:
        """``[B, T, D] -> [B, T, D]``; packed sequences or a padded batch side by side, each from step 0."""
        self.check_input(x)
        u = x if sequences is None else sequences.side_by_side(x)
        y = self.out(self.core(u, backend)[0].flatten(2))
        return y if sequences is None else sequences.in_place(y)

    def coefficients(self, x: Tensor) -> Tensor:
        self.check_input(x)
        q, k, _ = self._qkv(x)
        return self._coefficients(q, k)

    def dsf(self, x: Tensor) -> DSF:
        return from_coefficients(self.coefficients(x), self.head_dim)

    def init_state(self, batch: int) -> WindowCache:
        return WindowCache(batch=check_positive("batch", batch))

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, cache: WindowCache) -> tuple[Tensor, WindowCache]:
        """One token: append to the cache, attend to the window, drop what the next token no longer sees."""
        keys = k if cache.keys is None else torch.cat([cache.keys, k], dim=2)
        values = v if cache.values is None else torch.cat([cache.values, v], dim=2)
        out = torch.softmax(q @ keys.transpose(-1, -2), dim=-1) @ values
        position = cache.position + 1
        first = first_kept(position, self.window, self.sliding)
        drop = keys.shape[2] - (position - first)
        return out, WindowCache(keys[:, :, drop:], values[:, :, drop:], position)

    def _stream(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        cache, outputs = WindowCache(), []
        for t in range(q.shape[2]):
            out, cache = self._attend(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], cache)
            outputs.append(out)
        return torch.cat(outputs, dim=2)

    #: its state is a window cache, not the operator's: from a state it runs token by token
    forward_with_state = Mixer.forward_with_state

    def step(self, x_t: Tensor, state: WindowCache) -> tuple[Tensor, WindowCache]:
        self.check_input(x_t, "x_t", with_time=False)
        if not isinstance(state, WindowCache):
            raise ValueError(f"state: expected the WindowCache of {self.name}.init_state(batch)")
        check_state_batch(self.name, state.batch, x_t.shape[0])
        q, k, v = self._qkv(x_t.unsqueeze(1), offset=state.position)
        out, state = self._attend(q, k, v, state)
        state.batch = x_t.shape[0]
        return self.out(out.transpose(1, 2).flatten(2))[:, 0], state

    def state_size(self, seq_len: int) -> int:
        check_positive("seq_len", seq_len)
        first = first_kept(seq_len, self.window, self.sliding)
        return (seq_len - first) * 2 * self.heads * self.head_dim

    def extra_repr(self) -> str:
        sliding = ", sliding=True" if self.sliding else ""
        return f"{super().extra_repr()}, window={self.window}{sliding}"


@float32_under_autocast
class _TwoPartAttention(torch.autograd.Function):
    """Softmax attention of queries ``[B, H', C, d]`` over two key sets at once — the previous chunk (every key)
    and their own chunk (causal) — from one fused CPU attention per part.

    Each part returns its output ``o_p`` and log-sum-exp ``ℓ_p`` per query; the joint softmax is
    ``y = Σ_p e^{ℓ_p − ℓ} o_p`` with ``ℓ = log Σ_p e^{ℓ_p}``.  The backward of a part given the joint ``y`` and
    ``ℓ`` is exactly that part's share of the joint gradient (its probabilities are ``e^{s − ℓ}``, and the row
    term ``⟨∂y, y⟩`` is the joint one), so the two backwards add up — as ring attention merges its blocks.
    Scores are scaled by ``d^{-½}``."""

    OP = "_scaled_dot_product_flash_attention_for_cpu"

    @staticmethod
    def available(q: Tensor) -> bool:
        return q.device.type == "cpu" and hasattr(torch.ops.aten, _TwoPartAttention.OP)

    @staticmethod
    def forward(ctx, q: Tensor, k_before: Tensor, v_before: Tensor, k_own: Tensor, v_own: Tensor) -> Tensor:
        attend = getattr(torch.ops.aten, _TwoPartAttention.OP)
        q, k_before, v_before, k_own, v_own = (t.contiguous() for t in (q, k_before, v_before, k_own, v_own))
        out_before, log_before = attend(q, k_before, v_before, 0.0, False)
        out_own, log_own = attend(q, k_own, v_own, 0.0, True)
        log_sum = torch.logaddexp(log_before, log_own)
        out = out_before * torch.exp(log_before - log_sum).unsqueeze(-1)
        out.addcmul_(out_own, torch.exp(log_own - log_sum).unsqueeze(-1))
        ctx.save_for_backward(q, k_before, v_before, k_own, v_own, out, log_sum)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        q, k_before, v_before, k_own, v_own, out, log_sum = ctx.saved_tensors
        part = getattr(torch.ops.aten, _TwoPartAttention.OP + "_backward")
        grad_out = grad_out.contiguous()
        grad_q, grad_k_before, grad_v_before = part(grad_out, q, k_before, v_before, out, log_sum, 0.0, False)
        grad_q_own, grad_k_own, grad_v_own = part(grad_out, q, k_own, v_own, out, log_sum, 0.0, True)
        return grad_q + grad_q_own, grad_k_before, grad_v_before, grad_k_own, grad_v_own


MIXER = LocalAttention
