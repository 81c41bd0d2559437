"""A decay outside the readout (the Forgetting Transformer's forget gate, ALiBi): every backend against the definition
``α_ij = φ(q_iᵀ x_i^(j)) · exp(Σ_{l=j+1}^{i} h_l)`` written out, in float64."""

from __future__ import annotations

import pytest
import torch

import seqdyn
from seqdyn.core.readouts import resolve_readout

B, T, H, K, V = 2, 7, 2, 3, 2
EXP_BACKENDS = ("quadratic", "recurrent", "chunk", "auto")


def draw(seed: int = 0, length: int = T, batch: int = B, inner: str = "none") -> dict:
    """Random q, k, v, a forget gate ``h = log f`` with ``f ∈ (0.5, 1)``, and an inner decay (none or scalar)."""
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    rand = lambda *shape: torch.rand(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    arguments = dict(
        q=randn(batch, length, H, K),
        k=randn(batch, length, H, K),
        v=randn(batch, length, H, V),
        outer_log_decay=torch.log(0.5 + 0.5 * rand(batch, length, H)),
    )
    if inner == "scalar":
        arguments["log_decay"] = torch.log(0.7 + 0.3 * rand(batch, length, H))
    return arguments


def reference(arguments: dict, readout: str = "exp", normalizer: str = "sum") -> torch.Tensor:
    """``y_i = (1/η_i) Σ_{j≤i} φ(q_iᵀ Π_{l=j+1}^{i} D_l K^-½ k_j) e^{Σ_{l=j+1}^{i} h_l} v_j`` as ``[B, T, H, V]``."""
    q, k, v, h = arguments["q"], arguments["k"], arguments["v"], arguments["outer_log_decay"]
    g = arguments.get("log_decay", torch.zeros_like(h))
    G, inner = h.cumsum(1), g.cumsum(1)  # [B, T, H]
    phi = resolve_readout(readout).fn
    y = torch.zeros(q.shape[0], q.shape[1], H, V, dtype=torch.float64)
    for i in range(q.shape[1]):
        numerator, mass = 0.0, 0.0
        for j in range(i + 1):
            score = (q[:, i] * k[:, j]).sum(-1) * torch.exp(inner[:, i] - inner[:, j]) * K**-0.5
            alpha = phi(score) * torch.exp(G[:, i] - G[:, j])  # [B, H]
            numerator, mass = numerator + alpha[..., None] * v[:, j], mass + alpha
        y[:, i] = numerator / (mass[..., None] if normalizer == "sum" else 1.0)
    return y


@pytest.mark.parametrize("inner", ["none", "scalar"])
@pytest.mark.parametrize("backend", EXP_BACKENDS)
def test_every_backend_computes_softmax_with_a_forget_gate(backend, inner):
    arguments = draw(seed=1, inner=inner)
    y = seqdyn.coefficient_dynamics(**arguments, readout="exp", normalizer="sum", backend=backend, chunk_size=3)
    torch.testing.assert_close(y, reference(arguments), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("backend", ["quadratic", "recurrent", "chunk", "scan"])
def test_the_identity_readout_takes_it_as_a_decay_inside(backend):
    arguments = draw(seed=2, inner="scalar")
    y = seqdyn.coefficient_dynamics(**arguments, backend=backend)
    torch.testing.assert_close(y, reference(arguments, "identity", "none"), rtol=1e-10, atol=1e-10)


def test_gradients_agree_between_backends():
    grads = {}
    for backend in ("quadratic", "recurrent", "chunk"):
        leaves = {name: value.clone().requires_grad_() for name, value in draw(seed=3, inner="scalar").items()}
        y = seqdyn.coefficient_dynamics(**leaves, readout="exp", normalizer="sum", backend=backend, chunk_size=3)
        (y * torch.randn(y.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)).sum().backward()
        grads[backend] = {name: leaf.grad for name, leaf in leaves.items()}
    for backend in ("recurrent", "chunk"):
        for name, grad in grads["quadratic"].items():
            torch.testing.assert_close(grads[backend][name], grad, rtol=1e-10, atol=1e-10, msg=f"{backend}: {name}")


def test_a_key_cache_continues_the_sequence_and_steps_decode_it():
    """The cache is relative to its end: two halves, and token-by-token steps, equal the whole sequence."""
    arguments = draw(seed=5)
    options = dict(readout="exp", normalizer="sum")
    whole, (keys, values) = seqdyn.coefficient_dynamics(**arguments, **options, output_final_state=True)
    first = {name: value[:, :3] for name, value in arguments.items()}
    second = {name: value[:, 3:] for name, value in arguments.items()}
    y1, middle = seqdyn.coefficient_dynamics(**first, **options, output_final_state=True)
    y2, end = seqdyn.coefficient_dynamics(**second, **options, initial_state=middle, output_final_state=True)
    torch.testing.assert_close(torch.cat([y1, y2], 1), whole, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(end[0], keys, rtol=1e-10, atol=1e-10)
    assert keys.shape == (B, H, T, K + 2)
    state, outputs = None, []
    for t in range(T):
        token = {name: value[:, t] for name, value in arguments.items()}
        y, state = seqdyn.coefficient_dynamics_step(**token, **options, state=state)
        outputs.append(y)
    torch.testing.assert_close(torch.stack(outputs, 1), whole, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("readout", ["exp", "identity"])
def test_packed_sequences_are_each_computed_alone(readout):
    lengths = (3, 1, 4)
    parts = [draw(seed=20 + n, length=length, batch=1) for n, length in enumerate(lengths)]
    packed = {name: torch.cat([part[name] for part in parts], dim=1) for name in parts[0]}
    cu_seqlens = torch.tensor([0, 3, 4, 8])
    options = dict(readout=readout, normalizer="sum" if readout == "exp" else "none")
    y = seqdyn.coefficient_dynamics(**packed, **options, cu_seqlens=cu_seqlens)
    alone = [seqdyn.coefficient_dynamics(**part, **options) for part in parts]
    torch.testing.assert_close(y, torch.cat(alone, dim=1), rtol=1e-10, atol=1e-10)


def test_the_coefficients_are_the_gated_softmax_rows():
    arguments = draw(seed=6)
    values = arguments.pop("v")
    matrix = seqdyn.coefficients(**arguments, readout="exp", normalizer="sum")
    torch.testing.assert_close(matrix.sum(-1), torch.ones(B, H, T, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    y = torch.einsum("bhij,bjhv->bihv", matrix, values)
    torch.testing.assert_close(y, reference({**arguments, "v": values}), rtol=1e-10, atol=1e-10)


def test_alibi_is_the_constant_gate():
    """Press et al. 2022: softmax(q kᵀ/√K − m (i − j)) is a constant ``h = −m``."""
    arguments = draw(seed=7)
    slope = 0.25
    arguments["outer_log_decay"] = torch.full((B, T, H), -slope, dtype=torch.float64)
    q, k, v = arguments["q"], arguments["k"], arguments["v"]
    steps = torch.arange(T)
    scores = torch.einsum("bihk,bjhk->bhij", q, k) * K**-0.5 - slope * (steps[:, None] - steps[None, :])
    scores = scores.masked_fill(steps[:, None] < steps[None, :], float("-inf"))
    expected = torch.einsum("bhij,bjhv->bihv", scores.softmax(-1), v)
    y = seqdyn.coefficient_dynamics(**arguments, readout="exp", normalizer="sum")
    torch.testing.assert_close(y, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(readout="softplus"), "outer_log_decay: the softplus readout does not take a decay outside it"),
        (dict(outer_log_decay=torch.zeros(B, T, H, 1)), r"outer_log_decay: expected h as \[B, T, H\]"),
        (dict(cu_seqlens=torch.tensor([0, 3, 7]), output_final_state=True), "states are not taken"),
    ],
)
def test_what_it_cannot_take_is_named(change, message):
    arguments = {**draw(seed=8, batch=1), "readout": "exp", "normalizer": "sum", **change}
    with pytest.raises(ValueError, match=message):
        seqdyn.coefficient_dynamics(**arguments)


@pytest.mark.parametrize("key_dim, value_dim", [(6, 4), (4, 6), (4, 4)])
def test_the_fused_causal_softmax_pads_the_narrower_side_so_that_torchs_fused_kernel_takes_it(key_dim, value_dim):
    """The Forgetting Transformer's queries and keys carry two channels more than its values: torch's fused
    attention kernel refuses unequal widths (and would form every T × T score instead), so the narrower side is
    padded with zeros; the outputs are the causal softmax's written out."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from seqdyn.core.backends.chunk.softmax import fused_causal_softmax

    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 16, key_dim, generator=generator, dtype=torch.float64) for _ in range(2))
    v = torch.randn(1, 2, 16, value_dim, generator=generator, dtype=torch.float64)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # raises where the fused kernel cannot run
        out = fused_causal_softmax(q, k, v)
    scores = (q @ k.transpose(-1, -2)).masked_fill(~torch.ones(16, 16, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(out, torch.softmax(scores, dim=-1) @ v, rtol=1e-12, atol=1e-12)
