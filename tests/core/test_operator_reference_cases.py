"""``quadratic`` (and every backend) against hand-derived cases: each mixer's own textbook recurrence."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import seqdyn
from tests.core.cases import assert_close

B, T, H, K, V = 2, 23, 3, 4, 5
ALL_BACKENDS = ("quadratic", "recurrent", "chunk", "scan")


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def run_all(q, k, v, expected, backends=ALL_BACKENDS, tol=1e-10, **options):
    """Every backend that computes the combination equals ``expected``; returns how many did."""
    done = 0
    for backend in backends:
        try:
            out = seqdyn.coefficient_dynamics(q, k, v, backend=backend, chunk_size=5, **options)
        except ValueError:
            continue
        assert_close(out, expected, tol, backend)
        done += 1
    return done


def test_softmax_attention_equals_sdpa():
    q, k, v = randn(B, T, H, K, seed=1), randn(B, T, H, K, seed=2), randn(B, T, H, V, seed=3)
    expected = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
    ).transpose(1, 2)
    assert run_all(q, k, v, expected, readout="exp", normalizer="sum") == 3


def test_mamba2_ssd_recurrence():
    """h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t x_tᵀ, y_t = h_tᵀ C_t with B, C shared by heads (Dao & Gu 2024)."""
    C, Bm, x = randn(B, T, 1, K, seed=4), randn(B, T, 1, K, seed=5), randn(B, T, H, V, seed=6)
    delta = F.softplus(randn(B, T, H, seed=7))
    A = -torch.tensor([0.5, 1.0, 4.0], dtype=torch.float64)
    h = torch.zeros(B, H, K, V, dtype=torch.float64)
    ys = []
    for t in range(T):
        decay = torch.exp(delta[:, t] * A)  # [B, H]
        h = decay[..., None, None] * h + delta[:, t, :, None, None] * Bm[:, t, :, :, None] * x[:, t, :, None, :]
        ys.append(torch.einsum("bhkv,bhk->bhv", h, C[:, t].expand(B, H, K)))
    expected = torch.stack(ys, dim=1)
    assert run_all(C, Bm, x, expected, log_decay=delta * A, scale=delta) == 4


def test_gla_recurrence():
    """S_t = diag(α_t) S_{t-1} + k_t v_tᵀ, o_t = S_tᵀ (q_t K^-½), log α_t = logsigmoid(·)/16 (Yang et al. 2023)."""
    q, k, v = randn(B, T, H, K, seed=8), randn(B, T, H, K, seed=9), randn(B, T, H, V, seed=10)
    log_alpha = F.logsigmoid(randn(B, T, H, K, seed=11)) / 16
    S = torch.zeros(B, H, K, V, dtype=torch.float64)
    ys = []
    for t in range(T):
        S = torch.exp(log_alpha[:, t])[..., None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        ys.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t] * K**-0.5))
    assert run_all(q, k, v, torch.stack(ys, dim=1), log_decay=log_alpha) == 4


def _delta_rule(q, k, v, beta, alpha=None):
    """S_t = α_t (S_{t-1} − β_t k_t (k_tᵀ S_{t-1})) + β_t k_t v_tᵀ, o_t = S_tᵀ (q_t K^-½) (Schlag 2021, Yang 2025)."""
    S = torch.zeros(B, H, K, V, dtype=torch.float64)
    ys = []
    for t in range(T):
        kt, bt = k[:, t], beta[:, t, :, None, None]
        S = S - bt * kt[..., :, None] * torch.einsum("bhk,bhkv->bhv", kt, S)[..., None, :]
        if alpha is not None:
            S = alpha[:, t, :, None, None] * S
        S = S + bt * kt[..., :, None] * v[:, t, :, None, :]
        ys.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t] * K**-0.5))
    return torch.stack(ys, dim=1)


def test_deltanet_recurrence():
    q, v = randn(B, T, H, K, seed=12), randn(B, T, H, V, seed=13)
    k = F.normalize(randn(B, T, H, K, seed=14), dim=-1)
    beta = torch.sigmoid(randn(B, T, H, seed=15))
    expected = _delta_rule(q, k, v, beta)
    assert run_all(q, k, v, expected, householder=beta, scale=beta * K**-0.5) == 3


def test_gated_deltanet_recurrence():
    q, v = randn(B, T, H, K, seed=16), randn(B, T, H, V, seed=17)
    k = F.normalize(randn(B, T, H, K, seed=18), dim=-1)
    beta = torch.sigmoid(randn(B, T, H, seed=19))
    log_alpha = -F.softplus(randn(B, T, H, seed=20)) * 0.3
    expected = _delta_rule(q, k, v, beta, torch.exp(log_alpha))
    assert run_all(q, k, v, expected, householder=beta, scale=beta * K**-0.5, log_decay=log_alpha) == 3


def test_mlstm_stabilized_recurrence():
    """xLSTM's mLSTM with its log-space stabilizer m_t (Beck et al. 2024, eqs. 19–27 of the mLSTM cell)."""
    q, k, v = randn(B, T, H, K, seed=21), randn(B, T, H, K, seed=22), randn(B, T, H, V, seed=23)
    i_tilde = 3 * randn(B, T, H, seed=24)
    f_log = F.logsigmoid(randn(B, T, H, seed=25) + 2)
    C = torch.zeros(B, H, K, V, dtype=torch.float64)
    n = torch.zeros(B, H, K, dtype=torch.float64)
    m = torch.zeros(B, H, dtype=torch.float64)
    ys = []
    for t in range(T):
        m_new = torch.maximum(f_log[:, t] + m, i_tilde[:, t])
        i_gate, f_gate = torch.exp(i_tilde[:, t] - m_new), torch.exp(f_log[:, t] + m - m_new)
        kt = k[:, t] * K**-0.5
        C = f_gate[..., None, None] * C + i_gate[..., None, None] * kt[..., :, None] * v[:, t, :, None, :]
        n = f_gate[..., None] * n + i_gate[..., None] * kt
        denominator = torch.maximum(torch.einsum("bhk,bhk->bh", n, q[:, t]).abs(), torch.exp(-m_new))
        ys.append(torch.einsum("bhkv,bhk->bhv", C, q[:, t]) / denominator[..., None])
        m = m_new
    expected = torch.stack(ys, dim=1)
    assert run_all(q, k, v, expected, log_decay=f_log, scale=torch.exp(i_tilde) * K**-0.5, normalizer="abs_max1") == 4


@pytest.mark.parametrize(
    "readout,normalizer",
    list(
        itertools.product(
            ["identity", "exp", "softplus", "sigmoid", "relu", "elu1", "square"], ["none", "sum", "abs_max1"]
        )
    ),
)
def test_coefficients_equal_the_definition(readout, normalizer):
    """α_ij = φ(q_iᵀ Λ_i ⋯ Λ_{j+1} b_j k_j) with explicit matrix products (seed 001 eq. 4), normalized by η_i."""
    t, k_dim = 7, 3
    q = F.softplus(randn(1, t, 1, k_dim, seed=26)) if normalizer == "sum" else randn(1, t, 1, k_dim, seed=26)
    k = F.softplus(randn(1, t, 1, k_dim, seed=27)) if normalizer == "sum" else randn(1, t, 1, k_dim, seed=27)
    g = -F.softplus(randn(1, t, 1, k_dim, seed=28))
    beta = torch.sigmoid(randn(1, t, 1, seed=29))
    w = F.normalize(randn(1, t, 1, k_dim, seed=30), dim=-1)
    scale = 0.5 + torch.rand(1, t, 1, generator=torch.Generator().manual_seed(31), dtype=torch.float64)
    phi = seqdyn.READOUTS[readout]
    lam = [
        torch.diag(torch.exp(g[0, s, 0]))
        @ (torch.eye(k_dim, dtype=torch.float64) - beta[0, s, 0] * torch.outer(w[0, s, 0], w[0, s, 0]))
        for s in range(t)
    ]
    alpha = torch.zeros(t, t, dtype=torch.float64)
    for i in range(t):
        for j in range(i + 1):
            x = scale[0, j, 0] * k[0, j, 0]
            for s in range(j + 1, i + 1):
                x = lam[s] @ x
            alpha[i, j] = phi(q[0, i, 0] @ x)
    row = alpha.sum(-1, keepdim=True)
    eta = {"none": torch.ones_like(row), "sum": row, "abs_max1": row.abs().clamp(min=1.0)}[normalizer]
    expected = alpha / eta
    got = seqdyn.coefficients(
        q, k, readout=readout, log_decay=g, householder=beta, householder_dir=w, scale=scale, normalizer=normalizer
    )
    assert_close(got[0, 0], expected, 1e-12, "coefficients")
    v = randn(1, t, 1, 2, seed=32)
    out = seqdyn.coefficient_dynamics(
        q,
        k,
        v,
        readout=readout,
        log_decay=g,
        householder=beta,
        householder_dir=w,
        scale=scale,
        normalizer=normalizer,
        backend="quadratic",
    )
    assert_close(out[0, :, 0], expected @ v[0, :, 0], 1e-12, "outputs")


def test_coefficients_are_causal_and_agree_across_backends():
    q, k = randn(2, 11, 2, 3, seed=33), randn(2, 11, 2, 3, seed=34)
    g = -F.softplus(randn(2, 11, 2, seed=35))
    A = seqdyn.coefficients(q, k, log_decay=g)
    assert A.shape == (2, 2, 11, 11)
    assert torch.all(A.triu(1) == 0)
    for backend in ("recurrent", "chunk", "scan"):
        assert_close(seqdyn.coefficients(q, k, log_decay=g, backend=backend), A, 1e-12, backend)


def test_mlstm_with_log_scale_survives_input_gates_beyond_the_float_range():
    """ĩ up to 200 overflows exp in float32; with log_scale the stabilized result equals float64 with scale=exp(ĩ)."""
    q, k, v = randn(B, T, H, K, seed=36), randn(B, T, H, K, seed=37), randn(B, T, H, V, seed=38)
    i_tilde = 200 * torch.rand(B, T, H, generator=torch.Generator().manual_seed(39), dtype=torch.float64)
    f_log = F.logsigmoid(randn(B, T, H, seed=40) + 2)
    expected = seqdyn.coefficient_dynamics(
        q, k, v, log_decay=f_log, scale=torch.exp(i_tilde) * K**-0.5, normalizer="abs_max1", backend="recurrent"
    )
    for backend in ALL_BACKENDS:
        out = seqdyn.coefficient_dynamics(
            q.float(),
            k.float(),
            v.float(),
            log_decay=f_log.float(),
            log_scale=(i_tilde - 0.5 * torch.log(torch.tensor(float(K)))).float(),
            normalizer="abs_max1",
            backend=backend,
        )
        assert torch.isfinite(out).all()
        assert_close(out.double(), expected, 1e-4, backend)


def test_log_scale_equals_scale_with_gradients():
    q, k, v = randn(B, T, H, K, seed=41), randn(B, T, H, K, seed=42), randn(B, T, H, V, seed=43)
    g = -F.softplus(randn(B, T, H, K, seed=44))
    ell = randn(B, T, H, seed=45).requires_grad_(True)
    for normalizer in ("none", "abs_max1"):
        for backend in ALL_BACKENDS:
            a = seqdyn.coefficient_dynamics(q, k, v, log_decay=g, log_scale=ell, normalizer=normalizer, backend=backend)
            b = seqdyn.coefficient_dynamics(
                q, k, v, log_decay=g, scale=torch.exp(ell), normalizer=normalizer, backend="quadratic"
            )
            assert_close(a, b, 1e-10, backend)
            (grad_a,) = torch.autograd.grad(a.sum(), ell)
            (grad_b,) = torch.autograd.grad(b.sum(), ell)
            assert_close(grad_a, grad_b, 1e-10, f"{backend} d/dlog_scale")
    for readout in ("exp", "sigmoid"):
        a = seqdyn.coefficient_dynamics(q, k, v, readout=readout, log_scale=ell, normalizer="sum")
        b = seqdyn.coefficient_dynamics(q, k, v, readout=readout, scale=torch.exp(ell), normalizer="sum")
        assert_close(a, b, 1e-12, readout)
    with pytest.raises(ValueError, match="scale/log_scale"):
        seqdyn.coefficient_dynamics(q, k, v, scale=1.0, log_scale=ell)
