"""The shared LTI operator (seqdyn.core.lti): every backend against the materialized kernel and each other (values,
final states, gradients, float64), the DLR kernel of seed 002 eq. 4 written out, DLR-prod and the Kronecker
product of §A.2, the bidirectional Toeplitz of eq. 6, zero-order holds against matrix exponentials, the DSF."""

from __future__ import annotations

import math

import pytest
import torch

from seqdyn.core import lti

F64, C128 = torch.float64, torch.complex128
BACKENDS = ("fft", "scan", "recurrent")


def close(actual, expected, what, tol=1e-10):
    scale = max(1.0, float(expected.detach().abs().max()))
    error = float((actual - expected).detach().abs().max())
    assert error <= tol * scale, f"{what}: {error:.2e}"


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def crandn(*shape, seed: int, std: float = 1.0) -> torch.Tensor:
    g = generator(seed)
    return torch.complex(torch.randn(*shape, generator=g, dtype=F64), torch.randn(*shape, generator=g, dtype=F64)) * std


def stable_log_lam(*shape, seed: int) -> torch.Tensor:
    """log λ with |λ| ∈ [0.5, 0.99] and arbitrary phase."""
    g = generator(seed)
    modulus = 0.5 + 0.49 * torch.rand(*shape, generator=g, dtype=F64)
    return torch.complex(torch.log(modulus), 2 * math.pi * torch.rand(*shape, generator=g, dtype=F64))


def direct_kernel(log_lam: torch.Tensor, w: torch.Tensor, length: int) -> torch.Tensor:
    """Seed 002 eq. 4 before the cast: K_k = Σ_n w_n λ_n^k, as a plain sum over n and k."""
    lam = torch.exp(log_lam)
    return torch.stack([(w * lam**k).sum(-1) for k in range(length)], dim=-1)


def run_all(system, u, state, weights, leaves):
    """Outputs, final states and gradients of every backend for one system builder."""
    results = {}
    for backend in BACKENDS:
        y, final = system()(u, backend, state, output_final_state=True)
        loss = (y * weights).sum() + (final * final.conj()).real.sum() * 0.1
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)  # λ is unused by a scan of T = 1
        results[backend] = (y, final, [torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves)])
    return results


def compare(results, reference, what):
    y_ref, final_ref, grads_ref = results[reference]
    for backend, (y, final, grads) in results.items():
        close(y, y_ref, f"{what}/{backend} output")
        close(final, final_ref, f"{what}/{backend} final state")
        for i, (g, g_ref) in enumerate(zip(grads, grads_ref)):
            close(g, g_ref, f"{what}/{backend} gradient {i}")


# (batch, length, channels, states): T = 1, odd T, a power of two, T not a multiple of the √T block
SHAPES = [(1, 1, 2, 3), (2, 2, 3, 1), (2, 7, 3, 4), (1, 16, 2, 5), (3, 33, 2, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("prod", [False, True], ids=["re", "prod"])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
def test_siso_backends_agree_with_the_kernel_values_states_and_gradients(shape, prod, with_state):
    batch, length, channels, states = shape
    seed = sum(shape) + 7 * prod + 13 * with_state
    log_lam = stable_log_lam(channels, states, seed=seed).requires_grad_()
    b = crandn(channels, states, seed=seed + 1).requires_grad_()
    c = crandn(channels, states, seed=seed + 2).requires_grad_()
    u = torch.randn(batch, length, channels, generator=generator(seed + 3), dtype=F64, requires_grad=True)
    system = lambda: lti.DiagonalSISO(log_lam, b, c, prod=prod)  # noqa: E731
    state_states = states * (states + 1) // 2 if prod else states
    state = crandn(batch, channels, state_states, seed=seed + 4).requires_grad_() if with_state else None
    weights = torch.randn(batch, length, channels, generator=generator(seed + 5), dtype=F64)
    leaves = [log_lam, b, c, u] + ([state] if with_state else [])
    results = run_all(system, u, state, weights, leaves)
    compare(results, "recurrent", f"siso prod={prod}")
    if not with_state:  # the materialized kernel as a Toeplitz matrix, and eq. 4 written out
        K = direct_kernel(log_lam, b * c, length)
        K = K.real * K.imag if prod else K.real
        close(system().kernel(length), K, "kernel vs eq. 4")
        expected = torch.einsum("hij,bjh->bih", lti.toeplitz(K), u)
        close(results["fft"][0], expected, "fft vs Toeplitz kernel")
        materialized = torch.einsum("hij,bjh->bih", lti.toeplitz(system().kernel(length)), u)
        for backend in BACKENDS:  # gradients through the materialized-kernel path
            grads = torch.autograd.grad((system()(u, backend) * weights).sum(), leaves, allow_unused=True)
            expected_grads = torch.autograd.grad((materialized * weights).sum(), leaves, retain_graph=True)
            for i, (g, g_ref) in enumerate(zip(grads, expected_grads)):
                close(torch.zeros_like(g_ref) if g is None else g, g_ref, f"{backend} gradient {i} vs Toeplitz")


def test_siso_lambda_shared_by_channels_broadcasts():
    """DLR shares λ ∈ ℂ^N across channels (seed 002 §2.3); the result equals the expanded [H, N] system."""
    log_lam = stable_log_lam(4, seed=1)
    w = crandn(3, 4, seed=2)
    u = torch.randn(2, 9, 3, generator=generator(3), dtype=F64)
    for backend in BACKENDS:
        shared = lti.DiagonalSISO(log_lam, None, w)(u, backend)
        expanded = lti.DiagonalSISO(log_lam.expand(3, 4), None, w)(u, backend)
        close(shared, expanded, backend)


@pytest.mark.parametrize("shape", [(1, 1, 2, 3, 2), (2, 6, 3, 4, 2), (2, 17, 2, 3, 4)], ids=str)
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
def test_mimo_backends_agree_with_the_matrix_kernel(shape, with_state):
    batch, length, d_in, states, d_out = shape
    seed = sum(shape) + 11 * with_state
    log_lam = stable_log_lam(states, seed=seed).requires_grad_()
    B = crandn(states, d_in, seed=seed + 1).requires_grad_()
    C = crandn(d_out, states, seed=seed + 2).requires_grad_()
    u = torch.randn(batch, length, d_in, generator=generator(seed + 3), dtype=F64, requires_grad=True)
    state = crandn(batch, states, seed=seed + 4).requires_grad_() if with_state else None
    weights = torch.randn(batch, length, d_out, generator=generator(seed + 5), dtype=F64)
    system = lambda: lti.DiagonalMIMO(log_lam, B, C)  # noqa: E731
    results = run_all(system, u, state, weights, [log_lam, B, C, u] + ([state] if with_state else []))
    compare(results, "recurrent", "mimo")
    if not with_state:  # y_k = Σ_j K_{k-j} u_j with K_j = Re(C diag(λ^j) B)
        lam = torch.exp(log_lam)
        K = torch.stack([(C * lam**j) @ B for j in range(length)]).real
        close(system().kernel(length), K, "matrix kernel")
        expected = torch.stack([sum(K[k - j] @ u[:, j].T for j in range(k + 1)).T for k in range(length)], dim=1)
        close(results["fft"][0], expected, "fft vs matrix kernel")


@pytest.mark.parametrize("shape", [(1, 1, 2, 3), (2, 9, 3, 4), (1, 20, 2, 6)], ids=str)
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
def test_dense_backends_agree_with_the_kernel(shape, with_state):
    batch, length, channels, states = shape
    seed = sum(shape) + 5 * with_state
    raw = torch.randn(channels, states, states, generator=generator(seed), dtype=F64)
    A = (0.9 * raw / torch.linalg.matrix_norm(raw, ord=2)[:, None, None]).requires_grad_()
    b = torch.randn(channels, states, generator=generator(seed + 1), dtype=F64, requires_grad=True)
    c = torch.randn(channels, states, generator=generator(seed + 2), dtype=F64, requires_grad=True)
    u = torch.randn(batch, length, channels, generator=generator(seed + 3), dtype=F64, requires_grad=True)
    state = (
        torch.randn(batch, channels, states, generator=generator(seed + 4), dtype=F64).requires_grad_()
        if with_state
        else None
    )
    weights = torch.randn(batch, length, channels, generator=generator(seed + 5), dtype=F64)
    system = lambda: lti.DenseSISO(A, b, c)  # noqa: E731
    results = run_all(system, u, state, weights, [A, b, c, u] + ([state] if with_state else []))
    compare(results, "recurrent", "dense")
    powers = [torch.linalg.matrix_power(A, j) for j in range(length)]
    K = torch.stack([torch.einsum("hn,hnm,hm->h", c, P, b) for P in powers], dim=-1)
    close(system().kernel(length), K, "K_j = c Ā^j b̄")


def test_dlr_prod_kernel_and_its_realizations_follow_appendix_a2():
    """Re(K)·Im(K) equals the 4N²-term expansion of §A.2 and the kernel of our N(N+1)/2-state DLR."""
    log_lam, w, length = stable_log_lam(2, 4, seed=5), crandn(2, 4, seed=6), 12
    K = direct_kernel(log_lam, w, length)
    lam = torch.exp(log_lam)
    k = torch.arange(length, dtype=F64)

    def term(wm, wn, lm, ln):  # w_m w_n (λ_m λ_n)^k for every channel: [2, T]
        return (wm * wn)[:, None] * (lm * ln)[:, None] ** k

    expansion = sum(
        -0.25j
        * (
            term(w[:, m], w[:, n], lam[:, m], lam[:, n])
            - term(w[:, m], w[:, n].conj(), lam[:, m], lam[:, n].conj())
            + term(w[:, m].conj(), w[:, n], lam[:, m].conj(), lam[:, n])
            - term(w[:, m].conj(), w[:, n].conj(), lam[:, m].conj(), lam[:, n].conj())
        )
        for m in range(4)
        for n in range(4)
    )
    close(expansion.imag, torch.zeros_like(expansion.imag), "the 4N² expansion is real")
    close(expansion.real, K.real * K.imag, "§A.2 expansion")
    close(lti.kernel(log_lam, w, length, prod=True), K.real * K.imag, "prod kernel")
    log_lam2, w2 = lti.prod_system(log_lam, w)
    assert log_lam2.shape == (2, 10)
    close(lti.kernel(log_lam2, w2, length), K.real * K.imag, "N(N+1)/2-state realization")


def test_kronecker_product_of_dlrs_multiplies_their_kernels():
    """§A.2: K(Λ ⊗ Λ̃, w ⊗ w̃)_k = K(Λ, w)_k · K(Λ̃, w̃)_k, with ⊗ the Kronecker product of the vectors."""
    log_lam1, w1 = stable_log_lam(3, seed=7), crandn(3, seed=8)
    log_lam2, w2 = stable_log_lam(2, seed=9), crandn(2, seed=10)
    log_lam, w = lti.kronecker(log_lam1, w1, log_lam2, w2)
    close(torch.exp(log_lam), torch.kron(torch.exp(log_lam1), torch.exp(log_lam2)), "Λ ⊗ Λ̃")
    close(w, torch.kron(w1, w2), "w ⊗ w̃")
    length = 15
    product = direct_kernel(log_lam1, w1, length) * direct_kernel(log_lam2, w2, length)
    close(lti.vandermonde(log_lam, w, length), product, "kernel of the Kronecker product")


@pytest.mark.parametrize("length", [1, 2, 9])
def test_bidirectional_dlr_is_the_toeplitz_product_of_eq_6(length):
    forward = lti.DiagonalSISO(stable_log_lam(3, seed=1), None, crandn(2, 3, seed=2))
    backward = lti.DiagonalSISO(stable_log_lam(3, seed=3), None, crandn(2, 3, seed=4))
    u = torch.randn(2, length, 2, generator=generator(5), dtype=F64)
    Kf, Kb = forward.kernel(length), backward.kernel(length)
    # eq. 6: y_k = Σ_{j≤k} K→_{k-j} u_j + Σ_{j>k} K←_{j-(k+1)} u_j
    zero = torch.zeros_like(u[:, 0])
    expected = torch.stack(
        [
            sum((Kf[:, k - j] * u[:, j] for j in range(k + 1)), zero)
            + sum((Kb[:, j - k - 1] * u[:, j] for j in range(k + 1, length)), zero)
            for k in range(length)
        ],
        dim=1,
    )
    close(torch.einsum("hij,bjh->bih", lti.toeplitz(Kf, Kb), u), expected, "Toeplitz")
    for backend in BACKENDS:
        close(lti.bidirectional(forward, backward, u, backend), expected, backend)


def test_fft_convolution_gradients_pass_gradcheck():
    u = torch.randn(2, 3, 5, dtype=F64, requires_grad=True)
    k = torch.randn(3, 5, dtype=F64, requires_grad=True)
    kb = torch.randn(3, 5, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda u, k: lti.fft_conv(u, k), (u, k))
    assert torch.autograd.gradcheck(lambda u, k, kb: lti.fft_conv(u, k, kb), (u, k, kb))


def test_zoh_matches_the_matrix_exponential():
    """Ā = exp(ΔA), B̄ = A⁻¹(Ā − I)B (seed 004), diagonal complex and dense real."""
    a = torch.complex(-torch.rand(4, dtype=F64) - 0.1, torch.randn(4, dtype=F64))
    b = crandn(4, seed=1)
    dt = torch.tensor(0.3, dtype=F64)
    log_lam, factor = lti.zoh(a, dt)
    A_bar = torch.linalg.matrix_exp(dt * torch.diag(a))
    close(torch.diag(torch.exp(log_lam)), A_bar, "diagonal Ā")
    close(factor * b, torch.linalg.solve(torch.diag(a), (A_bar - torch.eye(4, dtype=C128)) @ b), "diagonal B̄")

    A = torch.randn(2, 5, 5, dtype=F64) - 2 * torch.eye(5, dtype=F64)
    b = torch.randn(2, 5, dtype=F64)
    dt = torch.tensor([0.1, 0.7], dtype=F64)
    A_bar, b_bar = lti.zoh_dense(A, b, dt)
    expected = torch.linalg.matrix_exp(dt[:, None, None] * A)
    close(A_bar, expected, "dense Ā")
    close(b_bar, torch.linalg.solve(A, ((expected - torch.eye(5, dtype=F64)) @ b[..., None]))[..., 0], "dense B̄")


def test_dsf_realizations_reproduce_the_operator():
    """Real DSF matrices (2×2 rotation-scaling blocks per complex state) give the operator's output."""
    u = torch.randn(2, 5, 3, generator=generator(1), dtype=F64)
    siso = lti.DiagonalSISO(stable_log_lam(3, 2, seed=2), crandn(3, 2, seed=3), crandn(3, 2, seed=4))
    for system in (siso, lti.DiagonalSISO(siso.log_lam, siso.b, siso.c, prod=True)):
        dsf = system.dsf(2, 5)
        states = 2 * system.realization().c.shape[-1]
        assert dsf.Lambda.shape == (2, 3, 5, states, states) and not dsf.Lambda.is_complex()
        close(dsf.apply(u.unsqueeze(-1))[..., 0], system(u, "recurrent"), f"siso prod={system.prod}")
    lam = torch.exp(siso.log_lam[0, 0])
    block = siso.dsf(1, 1).Lambda[0, 0, 0, :2, :2]
    close(block, torch.stack([torch.stack([lam.real, -lam.imag]), torch.stack([lam.imag, lam.real])]), "2×2 block")

    mimo = lti.DiagonalMIMO(stable_log_lam(4, seed=5), crandn(4, 3, seed=6), crandn(2, 4, seed=7))
    dsf = mimo.dsf(2, 5)
    assert dsf.B.shape == (2, 1, 5, 8, 3) and dsf.C.shape == (2, 1, 5, 2, 8)
    close(dsf.simulate(u.unsqueeze(2))[:, :, 0], mimo(u, "recurrent"), "mimo")

    raw = torch.randn(3, 4, 4, generator=generator(8), dtype=F64)
    dense = lti.DenseSISO(
        0.5 * raw / torch.linalg.matrix_norm(raw, ord=2)[:, None, None],
        torch.randn(3, 4, dtype=F64),
        torch.randn(3, 4, dtype=F64),
    )
    close(dense.dsf(2, 5).apply(u.unsqueeze(-1))[..., 0], dense(u, "recurrent"), "dense")


def test_bad_backend_input_and_state_raise_value_errors():
    system = lti.DiagonalSISO(stable_log_lam(2, 3, seed=1), None, crandn(2, 3, seed=2))
    u = torch.randn(1, 4, 2, dtype=F64)
    with pytest.raises(ValueError, match="backend: .*'chunk'"):
        system(u, "chunk")
    with pytest.raises(ValueError, match=r"u: expected a real tensor \[B, T, 2\]"):
        system(torch.randn(1, 4, 3, dtype=F64))
    with pytest.raises(ValueError, match=r"initial_state: expected .*\[1, 2, 3\]"):
        system(u, "fft", torch.zeros(1, 2, 4, dtype=C128))
