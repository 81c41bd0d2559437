"""The shared linear time-invariant (LTI) operator of the SSM mixers: complex diagonal state spaces
(and, for S4, a dense real one) computed by FFT convolution, a parallel scan or a step-by-step recurrence.

Diagonal linear RNN (DLR, Gupta et al. 2022 §2.1), per channel and complex state n (λ_n, b_n, c_n ∈ ℂ)::

    x_{k,n} = λ_n x_{k-1,n} + b_n u_k,       y_k = Re( Σ_n c_n x_{k,n} )                 (Gupta et al. 2022 eqs. 1-2)

which unrolls (x_{-1} = 0) into a causal convolution with a real kernel (the cast to ℝ of Gupta et al. 2022 §2.1)::

    y_k = Σ_{j≤k} K_j u_{k-j},     K_j = Re( Σ_n w_n λ_n^j ),   w_n = c_n b_n            (Gupta et al. 2022 eqs. 3-4)

* ``fft``: the kernel is materialized with λ^j = exp(j·log λ) and applied as a circulant product of size ≥ 2T
  (Gupta et al. 2022 §A.1), O(T log T).  The Vandermonde product Σ_n w_n λ_n^j is factored as j = a·S + s (S ≈ √T), so
  it is one batched matmul ``[A, N] @ [N, S]`` with O(N·√T) memory instead of an ``[N, T]`` power table; the
  convolution's backward pass is two real inverse FFTs of the saved spectra.  MIMO systems convolve each state's
  input sequence (B u)_n with λ_n^j instead (a complex FFT; the D×D kernel is never formed).
* ``scan``: all states by a parallel associative scan over the pairs (λ, b u_k) (Blelloch; as S5, Smith et al. 2023).
* ``recurrent``: the recurrence token by token (what ``step`` does); the reference.
* DLR-prod (Gupta et al. 2022 §2.1) casts with K_j = Re(K̃_j)·Im(K̃_j) instead.  By Gupta et al. 2022 §A.2 this is again
  a DLR kernel: Re(z)·Im(z) = ½ Im(z²) = Re(−i/2 · z²), and K̃² is the kernel of the Kronecker square (λ⊗λ, w⊗w) (§A.2,
  "Kronecker product of DLRs").  Merging the symmetric pairs (m, n), (n, m) leaves N(N+1)/2 states (fewer than
  the 4N² of §A.2); ``scan``, ``recurrent`` and streaming states use that realization, ``fft`` the direct kernel.
* Bidirectional DLR (Gupta et al. 2022 eqs. 5-6): y_k = Σ_{j≤k} K→_{k-j} u_j + Σ_{j>k} K←_{j-k-1} u_j, one circulant
  product (Gupta et al. 2022 §A.1) or a second system run on the reversed input.

The discretizations of the SSMs (Gupta et al. 2022 §2.1 DSS-EXP; S4, Gu et al. 2022a; S5) are zero-order holds:
λ = exp(Δa), b̄ = (exp(Δa) − 1)/a · b for a diagonal a (:func:`zoh`), and Ā = exp(ΔA), B̄ = A⁻¹(Ā − I)B for a
dense A (:func:`zoh_dense`, computed as one matrix exponential of ``[[ΔA, ΔB], [0, 0]]``).

Three systems share one interface (``__call__``, ``init_state``, ``state_floats``, ``dsf``):

    DiagonalSISO(log_lam [H,N], b [H,N], c [H,N], prod)   u [B,T,H] -> y [B,T,H]     DLR, DSS-EXP, S4D
    DenseSISO(A [H,N,N], b [H,N], c [H,N])                 u [B,T,H] -> y [B,T,H]     S4 (HiPPO is not normal)
    DiagonalMIMO(log_lam [N], B [N,Din], C [Dout,N])       u [B,T,Din] -> y [B,T,Dout]  S5, LRU

States enter as the state at time −1 (``initial_state``) and leave as the state after the last token
(``output_final_state=True``), complex ``[B, H, N]`` (``[B, N]`` for MIMO; real for :class:`DenseSISO`).
Parameters stay real in the mixers; complex numbers appear only inside these computations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from seqdyn.core import stacking
from seqdyn.core.dsf import DSF
from seqdyn.core.precision import float32_under_autocast

__all__ = [
    "BACKENDS",
    "DenseSISO",
    "DiagonalMIMO",
    "DiagonalSISO",
    "bidirectional",
    "check_backend",
    "fft_conv",
    "kernel",
    "kronecker",
    "prod_system",
    "toeplitz",
    "vandermonde",
    "vandermonde_transpose",
    "zoh",
    "zoh_dense",
]

BACKENDS = ("auto", "fft", "scan", "recurrent")


def check_backend(backend: str) -> str:
    """The backend to run: ``auto`` is ``fft`` (O(T log T) and fastest for every shape we measured)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: the LTI operator computes with {list(BACKENDS)}, got {backend!r}")
    return "fft" if backend == "auto" else backend


def complex_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype in (torch.float64, torch.complex128) else torch.complex64


# ---------------------------------------------------------------------------------------------------------------
# discretization


def zoh(a: Tensor, dt: Tensor) -> tuple[Tensor, Tensor]:
    """Zero-order hold of ``x' = diag(a) x + b u`` with step Δ (Gupta et al. 2022 §2.1, DSS-EXP; S4).

    Returns ``log λ = Δ·a`` and the input factor ``(exp(Δa) − 1)/a``, so that ``b̄ = factor · b``.
    """
    log_lam = dt * a
    return log_lam, torch.expm1(log_lam) / a


def zoh_dense(A: Tensor, b: Tensor, dt: Tensor) -> tuple[Tensor, Tensor]:
    """Zero-order hold of ``x' = A x + b u``: ``Ā = exp(ΔA)``, ``b̄ = A⁻¹(exp(ΔA) − I) b`` (S4, Gu et al. 2022a).

    ``A`` ``[..., N, N]``, ``b`` ``[..., N]``, ``dt`` ``[...]``.  ``exp([[ΔA, Δb], [0, 0]]) = [[Ā, b̄], [0, 1]]``
    needs no inverse of A.
    """
    n = A.shape[-1]
    dt = dt[..., None, None]
    top = torch.cat([dt * A, dt * b.unsqueeze(-1)], dim=-1)
    augmented = torch.cat([top, torch.zeros_like(top[..., :1, :])], dim=-2)
    exp = torch.linalg.matrix_exp(augmented)
    return exp[..., :n, :n], exp[..., :n, n]


# ---------------------------------------------------------------------------------------------------------------
# kernels


def _split(length: int) -> tuple[int, int]:
    """``(S, A)`` with S a power of two ≈ √length and ``A·S ≥ length``: positions j = a·S + s."""
    step = 1
    while step * step < length:
        step *= 2
    return step, -(-length // step)


def _exp_table(log_lam: Tensor, count: int, stride: int = 1) -> Tensor:
    """``λ^(stride·k)`` for k < count: ``[..., N, count]``.

    Computed in double precision where the device has it: in single precision the phase k·arg λ of a long lag
    (k ~ 10⁴) loses ~10⁻³ rad, and the FFT path would be less exact than the recurrence.
    """
    wide = log_lam if log_lam.device.type == "mps" else log_lam.to(torch.complex128)
    k = torch.arange(count, dtype=wide.real.dtype, device=log_lam.device) * stride
    return torch.exp(wide.unsqueeze(-1) * k).to(log_lam.dtype)


def vandermonde(log_lam: Tensor, weights: Tensor, length: int) -> Tensor:
    """``Σ_n w_n λ_n^j`` for j < length (Gupta et al. 2022 eq. 4 before the cast, ``K = w P`` with ``P_nj = λ_n^j``).

    ``log_lam`` ``[..., N]`` complex, ``weights`` broadcastable to it; returns complex ``[..., length]``.  Computed as
    ``(w ⊙ λ^{aS})ᵀ @ λ^s`` over j = a·S + s: O(N·length) work, O(N·√length) memory.
    """
    step, blocks = _split(length)
    outer = weights.unsqueeze(-1) * _exp_table(log_lam, blocks, step)  # [..., N, A]
    return (outer.mT @ _exp_table(log_lam, step)).flatten(-2)[..., :length]


def vandermonde_transpose(log_lam: Tensor, values: Tensor) -> Tensor:
    """``Σ_j λ_n^j v_j`` for ``values`` ``[..., T]`` (real or complex): ``[..., N]``, the same factorization."""
    length = values.shape[-1]
    step, blocks = _split(length)
    padded = torch.nn.functional.pad(values, (0, blocks * step - length)).to(log_lam.dtype)
    partial = padded.unflatten(-1, (blocks, step)) @ _exp_table(log_lam, step).mT  # [..., A, N]
    return (partial.mT * _exp_table(log_lam, blocks, step)).sum(-1)


def kernel(log_lam: Tensor, weights: Tensor, length: int, prod: bool = False) -> Tensor:
    """The real DLR kernel: ``Re(K̃_j)`` (Gupta et al. 2022 eq. 4 cast to ℝ), or ``Re(K̃_j)·Im(K̃_j)`` for DLR-prod
    (Gupta et al. 2022 §2.1)."""
    full = vandermonde(log_lam, weights, length)
    return full.real * full.imag if prod else full.real


def kronecker(log_lam1: Tensor, w1: Tensor, log_lam2: Tensor, w2: Tensor) -> tuple[Tensor, Tensor]:
    """The Kronecker product of two DLRs (Gupta et al. 2022 §A.2): ``(Λ ⊗ Λ̃, w ⊗ w̃)``, ``[..., M·N]``.

    Its (complex) kernel is the elementwise product ``K(Λ, w)_k · K(Λ̃, w̃)_k``.  Logs add: ``log(λ_m λ̃_n)``.
    """
    log_lam = (log_lam1.unsqueeze(-1) + log_lam2.unsqueeze(-2)).flatten(-2)
    return log_lam, (w1.unsqueeze(-1) * w2.unsqueeze(-2)).flatten(-2)


def prod_system(log_lam: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """A DLR of N(N+1)/2 states whose real kernel is the DLR-prod kernel ``Re(K̃)·Im(K̃)`` of ``(Λ, w)``
    (Gupta et al. 2022 §A.2).

    ``Re(K̃)Im(K̃) = Re(−i/2 · K̃²)`` and ``K̃²`` is the kernel of the Kronecker square; the pairs m < n appear twice.
    """
    n = log_lam.shape[-1]
    first, second = torch.triu_indices(n, n, device=log_lam.device)
    multiplicity = torch.where(first == second, 1.0, 2.0).to(log_lam.real.dtype)
    return log_lam[..., first] + log_lam[..., second], -0.5j * multiplicity * w[..., first] * w[..., second]


def toeplitz(kernel: Tensor, anticausal: Tensor | None = None) -> Tensor:
    """The matrix ``M_ij = K_{i-j}`` for j ≤ i and ``K←_{j-i-1}`` for j > i (0 without ``anticausal``)
    (Gupta et al. 2022 eq. 6).

    ``kernel`` ``[..., T]`` -> ``[..., T, T]``; row i holds the coefficients of output i.
    """
    length = kernel.shape[-1]
    positions = torch.arange(length, device=kernel.device)
    lag = positions[:, None] - positions[None, :]
    causal = kernel[..., lag.clamp(min=0)]
    other = torch.zeros_like(causal) if anticausal is None else anticausal[..., (-lag - 1).clamp(min=0)]
    return torch.where(lag >= 0, causal, other)


def _fft_size(minimum: int) -> int:
    """The smallest 2^a·3^b·5^c ≥ minimum (fast sizes for the FFT)."""
    size = minimum
    while True:
        rest = size
        for prime in (2, 3, 5):
            while rest % prime == 0:
                rest //= prime
        if rest == 1:
            return size
        size += 1


@float32_under_autocast
class _CircularConv(torch.autograd.Function):
    """The first T outputs of the circular convolution of size n of ``u`` (zero-padded) with ``kernel``.

    Written out so that the backward pass is two real inverse FFTs of the saved spectra (the adjoint of a
    convolution is the correlation, ``ĝ·conj(K̂)`` and ``ĝ·conj(û)``) instead of autograd's complex FFTs.
    """

    @staticmethod
    def forward(ctx, u: Tensor, kernel: Tensor, size: int) -> Tensor:
        u_hat, kernel_hat = torch.fft.rfft(u, n=size), torch.fft.rfft(kernel, n=size)
        ctx.save_for_backward(u_hat, kernel_hat)
        ctx.size, ctx.shapes = size, (u.shape, kernel.shape)
        return torch.fft.irfft(u_hat * kernel_hat, n=size)[..., : u.shape[-1]]

    @staticmethod
    def plain(u: Tensor, kernel: Tensor, size: int) -> Tensor:
        return torch.fft.irfft(torch.fft.rfft(u, n=size) * torch.fft.rfft(kernel, n=size), n=size)[..., : u.shape[-1]]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        u_hat, kernel_hat = ctx.saved_tensors
        (u_shape, kernel_shape), size = ctx.shapes, ctx.size
        grad_hat = torch.fft.rfft(grad, n=size)
        grad_u = grad_kernel = None
        if ctx.needs_input_grad[0]:
            grad_u = torch.fft.irfft(grad_hat * kernel_hat.conj(), n=size)[..., : u_shape[-1]].sum_to_size(u_shape)
        if ctx.needs_input_grad[1]:
            correlation = (grad_hat * u_hat.conj()).sum_to_size(*kernel_shape[:-1], grad_hat.shape[-1])
            grad_kernel = torch.fft.irfft(correlation, n=size)[..., : kernel_shape[-1]]
        return grad_u, grad_kernel, None


def fft_conv(u: Tensor, kernel: Tensor, anticausal: Tensor | None = None) -> Tensor:
    """``y_k = Σ_{j≤k} K_{k-j} u_j (+ Σ_{j>k} K←_{j-k-1} u_j)`` along the last axis by FFT (Gupta et al. 2022 §A.1).

    ``u`` ``[..., T]`` real, ``kernel`` (and ``anticausal``) ``[..., T]`` broadcastable to it.  The circulant has
    size n ≥ 2T − 1: the causal kernel first, the reversed anticausal one at the end, zeros between.
    """
    length = u.shape[-1]
    size = _fft_size(2 * length - 1)
    if anticausal is not None:
        gap = kernel.new_zeros(*kernel.shape[:-1], size - 2 * length + 1)
        kernel = torch.cat([kernel, gap, anticausal[..., : length - 1].flip(-1)], dim=-1)
    return stacking.apply(_CircularConv, u, kernel, size)


# ---------------------------------------------------------------------------------------------------------------
# scan and DSF helpers


def _scan(inputs: Tensor, transition, apply: Callable, square: Callable) -> Tensor:
    """All prefixes ``x_t = A x_{t-1} + inputs_t`` (x_{-1} = 0) along dim 1, by recursive pairing (Blelloch).

    Pairs (2i, 2i+1) combine to ``A·inputs_{2i} + inputs_{2i+1}``; the half-length sequence is scanned with A²,
    then the even positions are filled in.  O(T) work, O(log T) depth.
    """
    length = inputs.shape[1]
    if length == 1:
        return inputs
    half = length // 2
    left, right = inputs[:, 0 : 2 * half : 2], inputs[:, 1 : 2 * half : 2]
    odd = _scan(apply(transition, left) + right, square(transition), apply, square)  # prefixes 1, 3, 5, ...
    even = torch.cat([inputs[:, :1], apply(transition, odd[:, : (length - 1) // 2]) + inputs[:, 2::2]], dim=1)
    paired = torch.stack([even[:, :half], odd], dim=2).flatten(1, 2)
    return torch.cat([paired, even[:, half:]], dim=1)


def _diagonal_scan(inputs: Tensor, log_lam: Tensor, initial_state: Tensor | None) -> Tensor:
    """States of ``x_t = λ ⊙ x_{t-1} + inputs_t`` along dim 1; the initial state is folded into the first input."""
    lam = torch.exp(log_lam)
    if initial_state is not None:
        inputs = torch.cat([(inputs[:, 0] + lam * initial_state).unsqueeze(1), inputs[:, 1:]], dim=1)
    return _scan(inputs, lam, lambda a, x: a * x, lambda a: a * a)


def _realify(matrix: Tensor) -> Tensor:
    """A complex ``[..., M, N]`` map as a real ``[..., 2M, 2N]`` one on interleaved (Re, Im) coordinates.

    Entry (m, n) becomes the 2×2 block ``[[Re, −Im], [Im, Re]]`` (a rotation-scaling for a diagonal λ).
    """
    re, im = matrix.real, matrix.imag
    blocks = torch.stack([torch.stack([re, -im], dim=-3), torch.stack([im, re], dim=-3)], dim=-4)  # [..,2,2,M,N]
    rows, cols = matrix.shape[-2:]
    return blocks.permute(*range(blocks.dim() - 4), -2, -4, -1, -3).reshape(*matrix.shape[:-2], 2 * rows, 2 * cols)


def _realify_input(b: Tensor) -> Tensor:
    """Complex input map ``[..., N, V]`` (real inputs) -> real ``[..., 2N, V]`` rows (Re b_n, Im b_n)."""
    return torch.stack([b.real, b.imag], dim=-2).flatten(-3, -2)


def _realify_output(c: Tensor) -> Tensor:
    """Complex output map ``[..., V, N]`` read as ``Re(c x)`` -> real ``[..., V, 2N]`` columns (Re c_n, −Im c_n)."""
    return torch.stack([c.real, -c.imag], dim=-1).flatten(-2)


def _time_invariant_dsf(transition: Tensor, inputs: Tensor, outputs: Tensor, batch: int, length: int) -> DSF:
    """A DSF whose matrices ``[H, ...]`` are the same at every step (``D = 0``: skips stay outside the core)."""
    heads, width = inputs.shape[0], inputs.shape[-1]

    def repeat(x: Tensor) -> Tensor:
        return x.unsqueeze(1).expand(heads, length, *x.shape[1:]).unsqueeze(0).expand(batch, -1, -1, -1, -1)

    return DSF(
        Lambda=repeat(transition),
        B=repeat(inputs),
        C=repeat(outputs),
        D=inputs.new_zeros(batch, heads, length, outputs.shape[-2], width),
    )


def _check_state(state: Tensor | None, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor | None:
    if state is not None and (not isinstance(state, Tensor) or tuple(state.shape) != shape):
        got = list(state.shape) if isinstance(state, Tensor) else type(state).__name__
        raise ValueError(f"initial_state: expected a {dtype} tensor of shape {list(shape)}, got {got}")
    return None if state is None else state.to(dtype)


def _check_input(u: Tensor, width: int) -> None:
    if not isinstance(u, Tensor) or u.dim() != 3 or u.shape[-1] != width or u.shape[1] < 1:
        got = list(u.shape) if isinstance(u, Tensor) else type(u).__name__
        raise ValueError(f"u: expected a real tensor [B, T, {width}] with T ≥ 1, got {got}")


def _finish(y: Tensor, state: Tensor, output_final_state: bool):
    return (y, state) if output_final_state else y


# ---------------------------------------------------------------------------------------------------------------
# the three systems


@dataclass
class DiagonalSISO:
    """H independent single-input single-output DLRs of N complex states each (Gupta et al. 2022 eqs. 1-4).

    ``x_k = λ ⊙ x_{k-1} + b u_k``, ``y_k = Re(cᵀ x_k)`` per channel; ``prod=True`` gives the DLR-prod kernel
    ``Re(K̃)·Im(K̃)`` (Gupta et al. 2022 §2.1, §A.2).  ``b``, ``c`` ``[H, N]`` (``b=None``: ones); ``log_lam``
    ``[H, N]``, or ``[N]`` when the channels share λ (DLR), which the kernel then computes once.
    """

    log_lam: Tensor
    b: Tensor | None
    c: Tensor
    prod: bool = False

    def __post_init__(self) -> None:
        b = torch.ones_like(self.c) if self.b is None else self.b
        self.b, self.c = torch.broadcast_tensors(b, self.c)  # λ keeps its shape: [N] when shared by channels

    @property
    def channels(self) -> int:
        return self.c.shape[0]

    def kernel(self, length: int) -> Tensor:
        """The real kernel ``[H, length]`` (Gupta et al. 2022 eq. 4, cast by Re or by Re·Im)."""
        return kernel(self.log_lam, self.b * self.c, length, self.prod)

    def realization(self) -> DiagonalSISO:
        """The DLR whose states ``scan``/``recurrent`` carry: itself, or the N(N+1)/2-state system of DLR-prod."""
        if not self.prod:
            return self
        log_lam, w = prod_system(self.log_lam, self.b * self.c)
        return DiagonalSISO(log_lam, None, w)

    def init_state(self, batch: int) -> Tensor:
        system = self.realization()
        return system.c.new_zeros(batch, *system.c.shape)

    def state_floats(self) -> int:
        """Real floats of the streaming state (a complex state counts twice)."""
        return 2 * self.realization().c.numel()

    def __call__(
        self, u: Tensor, backend: str = "auto", initial_state: Tensor | None = None, output_final_state: bool = False
    ):
        """``u`` ``[B, T, H]`` -> ``y`` ``[B, T, H]`` (and the final state ``[B, H, N]`` if asked)."""
        _check_input(u, self.channels)
        backend = check_backend(backend)
        system = self.realization()
        state = _check_state(initial_state, (u.shape[0], *system.c.shape), system.c.dtype)
        if backend == "fft":
            return self._fft(u, system, state, output_final_state)
        if backend == "scan":
            states = _diagonal_scan(system.b * u.unsqueeze(-1), system.log_lam, state)  # [B, T, H, N]
            return _finish((states * system.c).sum(-1).real, states[:, -1], output_final_state)
        return system._recurrent(u, state, output_final_state)

    def _fft(self, u: Tensor, system: DiagonalSISO, state: Tensor | None, output_final_state: bool):
        length = u.shape[1]
        signal = u.transpose(1, 2)  # [B, H, T]
        y = fft_conv(signal, self.kernel(length))
        if state is not None:  # y_k += Re(Σ_n c_n λ_n^{k+1} x_{-1,n})
            y = y + vandermonde(system.log_lam, system.c * torch.exp(system.log_lam) * state, length).real
        if not output_final_state:
            return y.transpose(1, 2)
        final = system.b * vandermonde_transpose(system.log_lam, signal.flip(-1))  # Σ_j λ^{T-1-j} b u_j
        if state is not None:
            final = final + torch.exp(length * system.log_lam) * state
        return y.transpose(1, 2), final

    def _recurrent(self, u: Tensor, state: Tensor | None, output_final_state: bool):
        lam = torch.exp(self.log_lam)
        x = self.init_state(u.shape[0]) if state is None else state
        outputs = []
        for u_t in u.unbind(1):
            x = lam * x + self.b * u_t[:, :, None]
            outputs.append((self.c * x).sum(-1).real)
        return _finish(torch.stack(outputs, dim=1), x, output_final_state)

    def dsf(self, batch: int, length: int) -> DSF:
        """A real DSF realization: 2×2 rotation-scaling blocks per complex state, ``N_real = 2N`` per channel."""
        system = self.realization()
        return _time_invariant_dsf(
            _realify(torch.diag_embed(torch.exp(system.log_lam).expand_as(system.c))),
            _realify_input(system.b.unsqueeze(-1)),
            _realify_output(system.c.unsqueeze(-2)),
            batch,
            length,
        )


@dataclass
class DenseSISO:
    """H single-input single-output systems with a dense real transition (S4: HiPPO is not diagonalizable stably).

    ``x_k = Ā x_{k-1} + b̄ u_k``, ``y_k = cᵀ x_k`` with ``A`` ``[H, N, N]``, ``b``, ``c`` ``[H, N]`` (S4).
    The kernel ``K_j = c Ā^j b̄`` is built from two Krylov blocks, ``(c Ā^{aS}) @ (Ā^s b̄)`` (S ≈ √T), in
    O(N²√T + N·T) per channel — stable, unlike a diagonalization of HiPPO-LegS.
    """

    A: Tensor
    b: Tensor
    c: Tensor

    @property
    def channels(self) -> int:
        return self.c.shape[0]

    @staticmethod
    def _krylov(matrix: Tensor, vector: Tensor, count: int) -> tuple[Tensor, Tensor]:
        """``[v, M v, …, M^{count-1} v]`` ``[..., H, N, count]`` by doubling, and ``M^{2^⌈log2 count⌉}``."""
        block, power = vector.unsqueeze(-1), matrix
        while block.shape[-1] < count:
            block = torch.cat([block, torch.einsum("hmn,...hnk->...hmk", power, block)], dim=-1)
            power = power @ power
        return block[..., :count], power

    def _kernel(self, vector: Tensor, length: int) -> Tensor:
        """``c Ā^j v`` for j < length and ``v`` ``[..., H, N]``: ``[..., H, length]``."""
        step, blocks = _split(length)
        right, power = self._krylov(self.A, vector, step)  # power = Ā^S
        left, _ = self._krylov(power.mT, self.c, blocks)  # columns (c Ā^{aS})ᵀ
        return torch.einsum("hna,...hns->...has", left, right).flatten(-2)[..., :length]

    def kernel(self, length: int) -> Tensor:
        """``K_j = c Ā^j b̄`` ``[H, length]`` (S4's K̄ = (CB̄, CĀB̄, CĀ²B̄, …))."""
        return self._kernel(self.b, length)

    def init_state(self, batch: int) -> Tensor:
        return self.c.new_zeros(batch, *self.c.shape)

    def state_floats(self) -> int:
        return self.c.numel()

    def __call__(
        self, u: Tensor, backend: str = "auto", initial_state: Tensor | None = None, output_final_state: bool = False
    ):
        """``u`` ``[B, T, H]`` -> ``y`` ``[B, T, H]`` (and the final state ``[B, H, N]`` if asked)."""
        _check_input(u, self.channels)
        backend = check_backend(backend)
        state = _check_state(initial_state, (u.shape[0], *self.c.shape), self.c.dtype)
        if backend == "fft":
            return self._fft(u, state, output_final_state)
        if backend == "scan":
            inputs = self.b * u.unsqueeze(-1)
            if state is not None:
                inputs = torch.cat([(inputs[:, 0] + self._apply(self.A, state)).unsqueeze(1), inputs[:, 1:]], 1)
            states = _scan(inputs, self.A, self._apply, lambda a: a @ a)
            return _finish((states * self.c).sum(-1), states[:, -1], output_final_state)
        return self._recurrent(u, state, output_final_state)

    @staticmethod
    def _apply(matrix: Tensor, x: Tensor) -> Tensor:
        """``Ā x`` for ``matrix`` ``[H, N, N]`` and ``x`` ``[..., H, N]`` (einsum: no per-batch copies of Ā)."""
        return torch.einsum("hmn,...hn->...hm", matrix, x)

    def _fft(self, u: Tensor, state: Tensor | None, output_final_state: bool):
        length = u.shape[1]
        signal = u.transpose(1, 2)  # [B, H, T]
        y = fft_conv(signal, self.kernel(length))
        if state is not None:  # y_k += c Ā^k (Ā x_{-1})
            y = y + self._kernel(self._apply(self.A, state), length)
        if not output_final_state:
            return y.transpose(1, 2)
        # x_{T-1} = Σ_a (Ā^S)^a r_a with r_a = Σ_s Ā^s b̄ u_{T-1-aS-s}, by Horner over a; plus Ā^T x_{-1}
        step, blocks = _split(length)
        right, power = self._krylov(self.A, self.b, step)
        reversed_u = torch.nn.functional.pad(signal.flip(-1), (0, blocks * step - length))
        partial = reversed_u.unflatten(-1, (blocks, step)) @ right.mT  # [B, H, A, N]
        final = partial[:, :, -1]
        for a in range(blocks - 2, -1, -1):
            final = self._apply(power, final) + partial[:, :, a]
        if state is not None:
            final = final + self._apply(torch.linalg.matrix_power(self.A, length), state)
        return y.transpose(1, 2), final

    def _recurrent(self, u: Tensor, state: Tensor | None, output_final_state: bool):
        x = self.init_state(u.shape[0]) if state is None else state
        outputs = []
        for u_t in u.unbind(1):
            x = self._apply(self.A, x) + self.b * u_t[:, :, None]
            outputs.append((self.c * x).sum(-1))
        return _finish(torch.stack(outputs, dim=1), x, output_final_state)

    def dsf(self, batch: int, length: int) -> DSF:
        """The DSF is the system itself (real, N states per channel)."""
        return _time_invariant_dsf(self.A, self.b.unsqueeze(-1), self.c.unsqueeze(-2), batch, length)


@dataclass
class DiagonalMIMO:
    """One multi-input multi-output complex diagonal system (S5, Smith et al. 2023; LRU): D channels in, D out.

    ``x_k = λ ⊙ x_{k-1} + B u_k``, ``y_k = Re(C x_k)`` with ``log_lam`` ``[N]``, ``B`` ``[N, Din]``, ``C`` ``[Dout, N]``
    complex.  ``fft`` and ``scan`` project all inputs at once and convolve / scan each state (the kernel of state n
    is λ_n^k); ``recurrent`` projects, updates and reads out token by token, as ``step`` does.
    """

    log_lam: Tensor
    B: Tensor
    C: Tensor

    def __post_init__(self) -> None:
        self._in = torch.cat([self.B.real, self.B.imag]).T  # [Din, 2N]: B u as one real matmul
        self._out = torch.cat([self.C.real, -self.C.imag], dim=-1).T  # [2N, Dout]: Re(C x) as one real matmul

    def init_state(self, batch: int) -> Tensor:
        return self.B.new_zeros(batch, self.B.shape[0])

    def state_floats(self) -> int:
        return 2 * self.B.shape[0]

    def project_in(self, u: Tensor) -> Tensor:
        """``B u``: real ``[..., Din]`` -> complex ``[..., N]`` in the system's precision (under autocast the
        product comes out in half precision, which has no complex dtype that the FFT and the scan take)."""
        return torch.complex(*(u @ self._in).to(self._in.dtype).chunk(2, dim=-1))

    def project_out(self, x: Tensor) -> Tensor:
        """``Re(C x)``: complex ``[..., N]`` -> real ``[..., Dout]``."""
        return torch.cat([x.real, x.imag], dim=-1) @ self._out

    def kernel(self, length: int) -> Tensor:
        """The matrix kernel ``K_j = Re(C diag(λ^j) B)`` ``[length, Dout, Din]`` (small sizes)."""
        powers = _exp_table(self.log_lam, length).T  # [T, N]
        return torch.einsum("on,tn,ni->toi", self.C, powers, self.B).real

    def __call__(
        self, u: Tensor, backend: str = "auto", initial_state: Tensor | None = None, output_final_state: bool = False
    ):
        """``u`` ``[B, T, Din]`` -> ``y`` ``[B, T, Dout]`` (and the final state ``[B, N]`` if asked)."""
        _check_input(u, self.B.shape[1])
        backend = check_backend(backend)
        state = _check_state(initial_state, (u.shape[0], self.B.shape[0]), self.B.dtype)
        if backend == "recurrent":
            return self._recurrent(u, state, output_final_state)
        inputs = self.project_in(u)  # [B, T, N]
        states = self._fft_states(inputs, state) if backend == "fft" else _diagonal_scan(inputs, self.log_lam, state)
        return _finish(self.project_out(states), states[:, -1], output_final_state)

    def _fft_states(self, inputs: Tensor, state: Tensor | None) -> Tensor:
        """``x_t = Σ_{j≤t} λ^{t-j} (B u)_j (+ λ^{t+1} x_{-1})`` per state by a complex FFT convolution."""
        length = inputs.shape[1]
        size = _fft_size(2 * length - 1)
        powers = _exp_table(self.log_lam, length)  # [N, T]
        signal = inputs.transpose(1, 2)  # [B, N, T]
        states = torch.fft.ifft(torch.fft.fft(signal, n=size) * torch.fft.fft(powers, n=size), n=size)[..., :length]
        if state is not None:
            states = states + state.unsqueeze(-1) * powers * torch.exp(self.log_lam).unsqueeze(-1)
        return states.transpose(1, 2)

    def _recurrent(self, u: Tensor, state: Tensor | None, output_final_state: bool):
        lam = torch.exp(self.log_lam)
        x = self.init_state(u.shape[0]) if state is None else state
        outputs = []
        for u_t in u.unbind(1):
            x = lam * x + self.project_in(u_t)
            outputs.append(self.project_out(x))
        return _finish(torch.stack(outputs, dim=1), x, output_final_state)

    def dsf(self, batch: int, length: int) -> DSF:
        """A real DSF with one head (H = 1, V = D): 2×2 rotation-scaling blocks, ``N_real = 2N``."""
        return _time_invariant_dsf(
            _realify(torch.diag_embed(torch.exp(self.log_lam))).unsqueeze(0),
            _realify_input(self.B).unsqueeze(0),
            _realify_output(self.C).unsqueeze(0),
            batch,
            length,
        )


def bidirectional(forward: DiagonalSISO, backward: DiagonalSISO, u: Tensor, backend: str = "auto") -> Tensor:
    """Bidirectional DLR (Gupta et al. 2022 eqs. 5-6): ``y_k = Σ_{j≤k} K→_{k-j} u_j + Σ_{j>k} K←_{j-k-1} u_j``.

    ``fft`` forms one circulant of size ≥ 2T (Gupta et al. 2022 §A.1); the other backends run ``backward`` on the
    reversed input, whose output at position T−2−k is the anticausal sum of position k.  Not causal: no streaming.
    """
    backend = check_backend(backend)
    length = u.shape[1]
    if backend == "fft":
        _check_input(u, forward.channels)
        return fft_conv(u.transpose(1, 2), forward.kernel(length), backward.kernel(length)).transpose(1, 2)
    reverse = backward(u.flip(1), backend)
    return forward(u, backend) + torch.cat([reverse[:, :-1].flip(1), torch.zeros_like(reverse[:, :1])], dim=1)
