"""Shared pieces of the paper tests (``tests/mixers/test_<name>.py``, issue 18 item 7).

Each paper test writes its mixer's whole layer out from the paper's equations (float64, a plain loop or dense
matrices, reading the mixer's own parameters) and compares it with the mixer: the output of ``forward``, the
state after stepping token by token, and the coefficient matrix of the analysis path.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqdyn import mixers

F64 = torch.float64
#: standard deviation of the noise added to every parameter, so that gates and norms leave their init values
PERTURBATION = 0.2


def double_mixer(name: str, d_model: int, **opts) -> mixers.Mixer:
    """Mixer ``name`` built from seed 0 in float64, every parameter moved by N(0, PERTURBATION²) noise (a zero
    forget-gate weight or a unit norm weight would hide a swapped or dropped term)."""
    torch.manual_seed(0)
    mixer = mixers.build(name, d_model, **opts).double()
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in mixer.parameters():
            parameter.add_(PERTURBATION * torch.randn(parameter.shape, generator=noise, dtype=parameter.dtype))
    return mixer


def inputs(batch: int, length: int, d_model: int, seed: int = 0) -> Tensor:
    """Standard normal input ``[B, T, D]`` in float64."""
    return torch.randn(batch, length, d_model, generator=torch.Generator().manual_seed(seed), dtype=F64)


def assert_close(actual, expected, what: str, tol: float = 1e-10) -> None:
    """``max |actual − expected| ≤ tol · max(1, max |expected|)``, naming ``what`` and the error otherwise."""
    actual, expected = torch.as_tensor(actual).detach(), torch.as_tensor(expected).detach()
    assert actual.shape == expected.shape, f"{what}: shape {list(actual.shape)} != {list(expected.shape)}"
    scale = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
    error = float((actual - expected).abs().max()) if expected.numel() else 0.0
    assert error <= tol * scale, f"{what}: max error {error:.2e} (tolerance {tol * scale:.1e})"


def step_through(mixer: mixers.Mixer, x: Tensor):
    """Feed ``x`` ``[B, T, D]`` token by token through ``mixer.step``: ``(outputs [B, T, D], final_state)``."""
    state = mixer.init_state(x.shape[0])
    outputs = []
    for t in range(x.shape[1]):
        y, state = mixer.step(x[:, t], state)
        outputs.append(y)
    return torch.stack(outputs, dim=1), state


def coefficient_matrix(mixer: mixers.Mixer, x: Tensor) -> Tensor:
    """The mixer's coefficients ``[B, H, T, T]`` as the analysis reads them (``seqdyn.analysis.model``)."""
    from seqdyn.analysis.model import MixerCall, _coefficients

    A = _coefficients(MixerCall(0, mixer.name, mixer, x))
    assert A is not None, f"{mixer.name} has no scalar coefficients"
    return A


#: what a paper test compares: the output of forward, the state after stepping, the coefficient matrix
PARTS = ("output", "state", "coefficients")


def compare_with_paper(
    part: str, mixer: mixers.Mixer, x: Tensor, listing, state_of=lambda state: state.core, tol: float = 1e-10
) -> None:
    """Compare ``mixer`` on ``x`` with ``listing(mixer, x) -> (y [B, T, D], state, A [B, H, T, T])``, the layer
    written from its paper: ``part`` ``"output"`` (forward, and the outputs of stepping), ``"state"`` (the final
    state of stepping, read by ``state_of``, against the listing's, tensor by tensor) or ``"coefficients"``."""
    y, state, A = listing(mixer, x)
    name = mixer.name
    if part == "output":
        assert_close(mixer(x), y, f"{name} forward", tol)
        assert_close(step_through(mixer, x)[0], y, f"{name} step outputs", tol)
    elif part == "state":
        got, want = state_of(step_through(mixer, x)[1]), state
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        assert len(got) == len(want), f"{name} state: {len(got)} parts, the paper's has {len(want)}"
        for index, (actual, expected) in enumerate(zip(got, want)):
            assert_close(actual, expected, f"{name} state part {index}", tol)
    else:
        assert_close(coefficient_matrix(mixer, x), A, f"{name} coefficients", tol)


def softmax_attention_layer(mixer, x, rope=None):
    """``q, k, v = W_Q u, W_K u, W_V u`` per head (``q, k = rope(q), rope(k)`` when given);
    ``A = softmax(q kᵀ / √K + causal mask)``; ``y = W_O (A v)``.

    Returns ``(y, state, A)`` with the state the key cache of the scaled keys ``K^-½ k_j`` and the values."""
    batch, length, _ = x.shape
    w_q, w_k, w_v = mixer.qkv.weight.chunk(3, dim=0)
    q, k, v = ((x @ w.T).view(batch, length, mixer.heads, -1).transpose(1, 2) for w in (w_q, w_k, w_v))  # [B, H, T, K]
    if rope is not None:
        q, k = rope(q), rope(k)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    A = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    y = (A @ v).transpose(1, 2).reshape(batch, length, -1) @ mixer.out.weight.T
    return y, (k / k.shape[-1] ** 0.5, v), A


def rope_by_complex_numbers(x, positions):
    """RoFormer §3.2.2 written with complex numbers: channel pair (m, m + d/2) is the complex number
    ``x_m + i·x_{m+d/2}``, multiplied by ``exp(i·t·θ_m)``, θ_m = 10000^(−2m/d). ``x`` ``[B, H, T, d]``, ``positions``
    ``[T]``."""
    half = x.shape[-1] // 2
    theta = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    phase = torch.polar(
        torch.ones(len(positions), half, dtype=torch.float64), positions[:, None].double() * theta[None, :]
    )  # [T, d/2]
    z = torch.complex(x[..., :half], x[..., half:]) * phase
    return torch.cat([z.real, z.imag], dim=-1)


def rotary_attention_layer(mixer, x):
    """Seed 002's ATTENTION block: softmax attention with rotary embeddings of q and k (RoFormer eq. 34)."""
    return softmax_attention_layer(mixer, x, rope=lambda t: rope_by_complex_numbers(t, torch.arange(x.shape[1])))
