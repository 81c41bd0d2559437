"""What the LTI mixers (dlr, dss_exp, s4d, s4, s5, lru) share: a base class over the LTI operator
(:mod:`seqdyn.core.lti`), the layer's output head, and the HiPPO / S4D initializations.

An :class:`LTIMixer` only turns its parameters into a discretized system (:meth:`LTIMixer.system`); mixing, streaming,
coefficients and the DSF all come from that system.  Coefficient form: a SISO LTI mixer is, per
channel, φ = identity with the time-invariant coefficients ``α_ij = K_{i-j}`` (a Toeplitz matrix); MIMO systems
(S5, LRU) mix channels and have a matrix kernel, so no scalar coefficients.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.core import lti
from seqdyn.core.autotune import BackendChoice
from seqdyn.core.choice import Timing, fixed_plan, timed_choice, too_large_to_time
from seqdyn.core.dsf import DSF
from seqdyn.core.packing import Packing, Sequences
from seqdyn.mixers.base import Mixer, check_choice, check_positive

SKIPS = ("learned", "identity", "none")
Activation = Literal["gelu", "none"]
Output = Literal["glu", "half_glu", "linear", "none"]
ACTIVATIONS, OUTPUTS = get_args(Activation), get_args(Output)


#: the half-precision dtypes, whose complex counterpart (complex32) most operations lack
HALF = (torch.float16, torch.bfloat16)


def check_even(name: str, value: Any) -> int:
    check_positive(name, value)
    if value % 2:
        raise ValueError(f"{name}: got {value}; it must be even (complex states come in conjugate pairs)")
    return value


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None) -> float:
    """A real number in ``[low, high]`` (either bound optional)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(
            f"{name}: got {value}; allowed: [{low if low is not None else '-inf'}, "
            f"{high if high is not None else 'inf'}]"
        )
    return float(value)


def check_dt(dt_min: Any, dt_max: Any) -> tuple[float, float]:
    check_number("dt_min", dt_min)
    check_number("dt_max", dt_max)
    if not 0 < dt_min <= dt_max:
        raise ValueError(f"dt_min, dt_max: need 0 < dt_min ≤ dt_max, got dt_min={dt_min}, dt_max={dt_max}")
    return float(dt_min), float(dt_max)


def log_uniform(shape: tuple[int, ...], low: float, high: float) -> Tensor:
    """``log Δ`` with Δ log-uniform in ``[low, high]`` (the Δ init of S4, S4D, DSS, S5)."""
    return torch.rand(shape, dtype=torch.float64) * (math.log(high) - math.log(low)) + math.log(low)


def as_complex(pair: Tensor) -> Tensor:
    """A real parameter ``[..., 2]`` (real, imaginary) as a complex tensor ``[...]``."""
    return torch.complex(pair[..., 0], pair[..., 1])


def as_pair(z: Tensor) -> Tensor:
    """A complex tensor as the real ``[..., 2]`` parameter layout, in the default dtype."""
    return torch.stack([z.real, z.imag], dim=-1).to(torch.get_default_dtype())


def complex_normal(*shape: int, std: float) -> Tensor:
    """``[*shape, 2]``: real and imaginary parts i.i.d. N(0, std²)."""
    return torch.randn(*shape, 2, dtype=torch.float64) * std


# ---------------------------------------------------------------------------------------------------------------
# initializations


def hippo_legs(n: int) -> tuple[Tensor, Tensor]:
    """HiPPO-LegS (Gu et al. 2020): ``A_nk = −√(2n+1)√(2k+1)`` (n > k), ``−(n+1)`` (n = k), 0 (n < k);
    ``B_n = √(2n+1)``."""
    index = torch.arange(n, dtype=torch.float64)
    root = torch.sqrt(2 * index + 1)
    A = torch.tril(-root[:, None] * root[None, :], diagonal=-1) - torch.diag(index + 1)
    return A, root.clone()


def hippo_legs_nplr(n: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The normal-plus-low-rank form of HiPPO-LegS (S4, Gu et al. 2022a §3): ``A = V (diag Λ − p p*) V*``.

    With ``P_n = √(n+½)``, ``A + P Pᵀ = −½ I + S`` (S skew-symmetric) is normal; its eigenvalues ``−½ ± iω`` come in
    conjugate pairs.  Returns the half with ω > 0: ``Λ`` ``[n/2]``, ``p = V_h* P``, ``b = V_h* B`` ``[n/2]`` and
    ``V_h`` ``[n, n/2]``; the full unitary ``V = [V_h, conj(V_h)]``.  All complex128.
    """
    A, B = hippo_legs(n)
    P = torch.sqrt(torch.arange(n, dtype=torch.float64) + 0.5)
    skew = A + P[:, None] * P[None, :] + 0.5 * torch.eye(n, dtype=torch.float64)
    omega, vectors = torch.linalg.eigh(-1j * skew.to(torch.complex128))  # ascending: −ω_max … ω_max
    half = vectors[:, n // 2 :]
    lam = torch.complex(torch.full((n // 2,), -0.5, dtype=torch.float64), omega[n // 2 :])
    return lam, half.conj().T @ P.to(torch.complex128), half.conj().T @ B.to(torch.complex128), half


def s4d_init(modes: int, kind: str) -> Tensor:
    """Diagonal inits (Gu et al. 2022b), N = 2·modes: S4D-Lin ``−½ + iπn``; S4D-Inv ``−½ + i(N/π)(N/(2n+1) − 1)``;
    ``lin2pi`` ``−½ + 2πin`` (Gupta et al. 2022 §A, the DSS-EXP runs)."""
    n = torch.arange(modes, dtype=torch.float64)
    full = 2 * modes
    imag = {"lin": math.pi * n, "inv": full / math.pi * (full / (2 * n + 1) - 1), "lin2pi": 2 * math.pi * n}[kind]
    return torch.complex(torch.full_like(n, -0.5), imag)


# ---------------------------------------------------------------------------------------------------------------
# the layer around the core


class OutputHead(nn.Module):
    """What an SSM layer does after the convolution (S4/S4D, DLR of Gupta et al. 2022 §2.3, S5, LRU):
    ``out(act(y + D ⊙ u))``.

    ``skip``: learned D ~ N(0, 1) (S4, S5, LRU) | identity (DLR's residual) | none.  ``activation``: gelu | none.
    ``output``: glu (``Linear(H, 2H)`` then GLU, S4) | half_glu (``y ⊙ σ(W y + b)``, S5) | linear | none.
    """

    def __init__(self, width: int, skip: str, activation: str, output: str, bias: bool = True):
        super().__init__()
        self.skip = check_choice("skip", skip, SKIPS)
        self.activation = check_choice("activation", activation, ACTIVATIONS)
        self.output = check_choice("output", output, OUTPUTS)
        self.D = nn.Parameter(torch.randn(width)) if skip == "learned" else None
        sizes = {"glu": 2 * width, "half_glu": width, "linear": width}
        self.proj = nn.Linear(width, sizes[output], bias=bias) if output in sizes else None

    def forward(self, y: Tensor, u: Tensor) -> Tensor:
        if self.skip == "learned":
            y = y + self.D * u
        elif self.skip == "identity":
            y = y + u
        if self.activation == "gelu":
            y = F.gelu(y)
        if self.output == "glu":
            return F.glu(self.proj(y), dim=-1)
        if self.output == "half_glu":
            return y * torch.sigmoid(self.proj(y))
        return self.proj(y) if self.output == "linear" else y


class LTIMixer(Mixer):
    """A mixer whose core is one LTI system of :mod:`seqdyn.core.lti` (SISO per channel, or MIMO).

    Subclasses build ``self.head`` (:class:`OutputHead`) and define :meth:`system`.  The core maps the mixer's input
    ``u = x`` ``[B, T, D]`` to ``y`` ``[B, T, D]``; ``core(x)`` returns it as ``[B, T, H, V]`` with the values it
    convolves (SISO: H = D, V = 1; MIMO: H = 1, V = D).

    The options of the layer around the core that its mixers share (a mixer without one of them ignores the entry):

    Args:
        skip: add the skip D ⊙ u to the core's output y, with D ~ N(0, 1) learned per channel (S4, S5, LRU);
            False: no skip.
        activation: gelu (GELU after the skip, as S4, S4D and S5) or none.
        output: the position-wise output map after the activation: glu (Linear(H, 2H) then GLU, as S4 and S4D),
            half_glu (y ⊙ σ(W y + b), S5's "half GLU"), linear (one linear map) or none (the identity).
        dt_min: the smallest discretization step Δ at initialization: log Δ is uniform in [log dt_min,
            log dt_max].
        dt_max: the largest step Δ at initialization.
    """

    reference_backend = "recurrent"
    head: OutputHead

    @property
    def backends(self) -> tuple[str, ...]:
        return lti.BACKENDS

    def ssm_parameters(self) -> list[nn.Parameter]:
        """Every parameter of the LTI system (Λ, Δ, B, C, W, D): all but the output head's."""
        head = {id(p) for p in self.head.parameters()}
        return [p for p in self.parameters() if id(p) not in head]

    def output_projection(self) -> nn.Linear | None:
        """The residual output projection: the head's Linear for "linear"/"glu" outputs; none for S5's half-GLU,
        whose Linear is a gate."""
        return self.head.proj if self.head.output in ("linear", "glu") else None

    @abstractmethod
    def system(self) -> lti.DiagonalSISO | lti.DenseSISO | lti.DiagonalMIMO:
        """The discretized LTI system of the current parameters."""

    def widened(self, parameter: Tensor) -> Tensor:
        """A parameter as the system computes with it: in float32 where the weights are half precision (bfloat16 or
        float16), so that its complex kernels are complex64 — complex32 lacks most operations — else as it is."""
        return parameter.float() if parameter.dtype in HALF else parameter

    def run_core(self, u: Tensor, backend: str, state: Tensor | None = None, output_final_state: bool = False):
        """The core's output on ``u`` (and the final state with ``output_final_state``): half-precision inputs are
        computed in float32 (:meth:`widened`) and the output returned in their dtype; the state stays complex64."""
        dtype = u.dtype
        out = self.compute_core(u.float() if dtype in HALF else u, backend, state, output_final_state)
        if dtype not in HALF:
            return out
        return (out[0].to(dtype), out[1]) if isinstance(out, tuple) else out.to(dtype)

    def compute_core(self, u: Tensor, backend: str, state: Tensor | None, output_final_state: bool):
        """:meth:`run_core` in the system's own dtype."""
        if backend == "auto":
            backend = self.chose(self._auto_backend(u, state, output_final_state))
        return self.system()(u, backend, state, output_final_state)

    def forward(self, x: Tensor, backend: str = "auto", *, sequences: Sequences | None = None) -> Tensor:
        """``[B, T, D] -> [B, T, D]``; packed sequences or a padded batch side by side, each from step 0."""
        self.check_input(x)
        u = x if sequences is None else sequences.side_by_side(x)
        y = self.head(self.run_core(u, self.check_backend(backend)), u)
        return y if sequences is None else sequences.in_place(y)

    def auto_timing(self, x: Tensor, packing: Packing | None = None) -> Timing:
        """``fft``, ``scan`` (and ``recurrent`` for T ≤ 64), timed on the LTI core alone (:meth:`_timing`)."""
        return self._timing(x, None, False)

    def _auto_backend(self, u: Tensor, state: Tensor | None, output_final_state: bool) -> BackendChoice:
        """``auto`` of the LTI core on ``u``, from ``state`` (:func:`~seqdyn.core.choice.timed_choice`)."""
        return timed_choice(self, u, self._timing(u, state, output_final_state))

    def _timing(self, u: Tensor, state: Tensor | None, output_final_state: bool) -> Timing:
        start = None if state is None else state.detach()

        def run(x: Tensor, name: str) -> Tensor:
            y = self.system()(x, name, start, output_final_state)
            return y[0] if isinstance(y, tuple) else y

        def ruled() -> dict[str, str]:
            """``scan`` materializes every step's state, ``B·T`` times the state's floats; ``recurrent`` is a loop."""
            with torch.no_grad():
                states = u.shape[0] * u.shape[1] * self.system().state_floats()
            return too_large_to_time(u.shape[1], {"scan": states})

        plan = fixed_plan(["fft", "scan", "recurrent"], "fft", "the FFT convolution: O(T log T) per channel", ruled)
        return Timing(
            run, plan, ruled, {"state in": state is not None, "state out": output_final_state}, " (its core alone)"
        )

    def core(self, x: Tensor, backend: str = "auto") -> tuple[Tensor, Tensor]:
        """The LTI core's output and the values it convolves, ``[B, T, H, V]`` each."""
        self.check_input(x)
        y = self.run_core(x, self.check_backend(backend))
        axis = 3 if self.scalar_coefficients else 2
        return y.unsqueeze(axis), x.unsqueeze(axis)

    def init_state(self, batch: int) -> Tensor:
        """Zeros: complex ``[B, H, N]`` (SISO), real ``[B, H, N]`` (S4) or complex ``[B, N]`` (MIMO)."""
        check_positive("batch", batch)
        with torch.no_grad():
            return self.system().init_state(batch)

    def step(self, x_t: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        self.check_input(x_t, "x_t", with_time=False)
        system = self.system()
        expected = system.init_state(x_t.shape[0])
        if not isinstance(state, Tensor) or state.shape != expected.shape or state.dtype != expected.dtype:
            got = f"{state.dtype} {list(state.shape)}" if isinstance(state, Tensor) else type(state).__name__
            raise ValueError(
                f"state: expected {self.name}.init_state(batch), a {expected.dtype} tensor "
                f"{list(expected.shape)}, got {got}"
            )
        u = x_t.unsqueeze(1)
        y, state = self.run_core(u, "recurrent", state, output_final_state=True)
        return self.head(y, u)[:, 0], state

    def state_size(self, seq_len: int) -> int:
        """Real floats of the recurrent state (complex counts twice); independent of ``seq_len``."""
        check_positive("seq_len", seq_len)
        with torch.no_grad():
            return self.system().state_floats()

    def coefficients(self, x: Tensor) -> Tensor:
        """The causal Toeplitz matrix ``A[b, h, i, j] = K_{i-j}`` ``[B, H, T, T]`` of each channel's kernel."""
        if not self.scalar_coefficients:
            return super().coefficients(x)
        self.check_input(x)
        batch, length = x.shape[:2]
        return lti.toeplitz(self.system().kernel(length)).expand(batch, -1, -1, -1)

    def dsf(self, x: Tensor) -> DSF:
        """The real DSF realization of the core (``D = 0``: the skip is outside the core)."""
        self.check_input(x)
        return self.system().dsf(x.shape[0], x.shape[1])
