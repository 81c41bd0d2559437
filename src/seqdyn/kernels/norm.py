"""The RMS normalization's native CPU kernel (``norm_kernel.cpp``), its output gate fused, as the operators
``seqdyn::rms_norm`` and ``seqdyn::rms_norm_backward``.

``y = x r ⊙ w ⊙ SiLU(z)`` (or ``x r ⊙ w`` without a gate ``z``) with ``r = (mean(x²) + ε)^{-½}`` per row, and its
backward ``∂x = r (u − x̂ ⟨u, x̂⟩ / n)`` with ``x̂ = x r``, ``u = ∂y ⊙ SiLU(z) ⊙ w``; ``∂w = Σ_rows ∂y ⊙ SiLU(z) ⊙ x̂``;
``∂z = ∂y ⊙ x̂ ⊙ w ⊙ SiLU'(z)`` — one pass over each row, forward and backward, recomputing ``r`` and the gate's
activation instead of saving them.  Its torch definition is ``rms_norm``'s other path in
``seqdyn/layers/norms.py`` (``_RMSNorm`` and torch's SiLU), which runs wherever :func:`available` is false.  Each
operator has a fake (meta) implementation, so ``torch.compile`` and other devices see its shapes through it, and
the forward its autograd formula.
"""

import ctypes

import torch
from torch import Tensor

from seqdyn.kernels import build

NAME = "norm_kernel"


class NormArgs(ctypes.Structure):
    """Mirror of ``struct NormArgs`` in ``norm_kernel.cpp`` (checked against it when the kernel is loaded)."""

    _fields_ = (build.fields(ctypes.c_int64, "rows", "width") + [("eps", ctypes.c_double)]
                + build.fields(ctypes.c_void_p, "x", "gate", "weight", "y", "grad_y", "grad_x", "grad_gate",
                               "grad_weight"))


build.KERNELS[NAME] = ("seqdyn_norm", NormArgs)


def available(x: Tensor, weight: Tensor, gate: Tensor | None) -> bool:
    """Whether the kernel takes these tensors: CPU, float32 or float64, one dtype, and the kernel built."""
    return build.available(NAME, x, weight, gate)


def rms_norm(x: Tensor, weight: Tensor, gate: Tensor | None, eps: float) -> Tensor:
    """``x r ⊙ w`` (times ``SiLU(gate)``) over the last axis of ``x`` ``[..., n]`` by the kernel; ``weight``
    ``[n]``, ``gate`` shaped as ``x`` or ``None``."""
    gate = None if gate is None else gate.contiguous()
    return rms_norm_op(x.contiguous(), weight.contiguous(), gate, eps)


def _arguments(x: Tensor, weight: Tensor, gate: Tensor | None, eps: float) -> NormArgs:
    """The kernel's arguments (outputs are set by the caller); every tensor contiguous and kept alive by it."""
    width = x.shape[-1]
    return NormArgs(rows=x.numel() // max(width, 1), width=width, eps=eps, x=x.data_ptr(),
                    gate=None if gate is None else gate.data_ptr(), weight=weight.data_ptr())


@torch.library.custom_op("seqdyn::rms_norm", mutates_args=())
def rms_norm_op(x: Tensor, weight: Tensor, gate: Tensor | None, eps: float) -> Tensor:
    """``y`` by the kernel's forward (``x``, ``weight``, ``gate`` contiguous)."""
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    args = _arguments(x, weight, gate, eps)
    args.y = y.data_ptr()
    build.run(NAME, "forward", args, x.dtype, build.split_items(args.rows))
    return y


@rms_norm_op.register_fake
def _(x, weight, gate, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("seqdyn::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(x: Tensor, weight: Tensor, gate: Tensor | None, grad_y: Tensor,
                         eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(∂x, ∂w, ∂z)`` by the kernel's backward (``∂z`` empty without a gate)."""
    args = _arguments(x, weight, gate, eps)
    cut = build.split_items(args.rows)
    grad_y = grad_y.contiguous()
    grad_x = torch.empty_like(x)
    grad_gate = x.new_empty(0) if gate is None else torch.empty_like(gate)
    grad_weight = weight.new_zeros(len(cut), weight.shape[0])  # [parts, n], summed below
    args.grad_y, args.grad_x, args.grad_weight = grad_y.data_ptr(), grad_x.data_ptr(), grad_weight.data_ptr()
    args.grad_gate = None if gate is None else grad_gate.data_ptr()
    build.run(NAME, "backward", args, x.dtype, cut)
    return grad_x, grad_weight.sum(0), grad_gate


@rms_norm_backward_op.register_fake
def _(x, weight, gate, grad_y, eps):
    return torch.empty_like(x), torch.empty_like(weight), x.new_empty(0) if gate is None else torch.empty_like(gate)


def _setup_context(ctx, inputs, output) -> None:
    x, weight, gate, eps = inputs
    ctx.save_for_backward(x, weight, gate)
    ctx.eps = eps


def _backward(ctx, grad_y: Tensor):
    x, weight, gate = ctx.saved_tensors
    grad_x, grad_weight, grad_gate = rms_norm_backward_op(x, weight, gate, grad_y, ctx.eps)
    return grad_x, grad_weight, None if gate is None else grad_gate, None


rms_norm_op.register_autograd(_backward, setup_context=_setup_context)
torch.library.register_autocast("seqdyn::rms_norm", "cpu", torch.float32)
