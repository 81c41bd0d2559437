"""Hand-written autograd functions under autocast.

Autocast picks a dtype op by op, so inside a hand-written ``forward`` matrix products come out in bfloat16 or
float16 next to float32 exponentials and sums, and the ``backward``, which autograd runs outside autocast, then
meets float32 saved tensors with half-precision gradients.  :func:`float32_under_autocast` runs such a function
in float32 wherever autocast is on for its inputs' device, as autocast runs its own numerically delicate ops
(``exp``, ``cumsum``, norms, FFTs) and as :func:`~seqdyn.core.problem.compute_dtype` lifts half-precision inputs
of the operator.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor


def float32_under_autocast(function: type[torch.autograd.Function]) -> type[torch.autograd.Function]:
    """Class decorator for a ``torch.autograd.Function``: where autocast is on for the device of its first tensor
    argument, the forward takes its floating inputs in float32 and runs with autocast off
    (``torch.amp.custom_fwd(cast_inputs=torch.float32)``), and so does the backward (as ``custom_bwd`` would,
    without entering a context when autocast is off).  Saved tensors, outputs and incoming gradients then share
    float32; autograd casts each returned gradient to its input's dtype, and the next autocast op casts the
    float32 outputs down.  Without autocast the function runs the same ops as undecorated."""
    forward, backward = function.forward, function.backward

    @functools.wraps(forward)
    def forward_in_float32(ctx, *args):
        ctx.autocast_device = device_type = next(arg.device.type for arg in args if isinstance(arg, Tensor))
        if _autocast_on(device_type):
            return _cast_forward(forward, device_type)(ctx, *args)
        return forward(ctx, *args)

    @functools.wraps(backward)
    def backward_as_forward(ctx, *grads):
        if _autocast_on(ctx.autocast_device):  # backward() called inside an autocast region
            with torch.autocast(ctx.autocast_device, enabled=False):
                return backward(ctx, *grads)
        return backward(ctx, *grads)

    function.forward = staticmethod(forward_in_float32)
    function.backward = staticmethod(backward_as_forward)
    function.follows_autocast = True
    return function


def _autocast_on(device_type: str) -> bool:
    """Whether autocast is on for ``device_type``; never for devices autocast does not know (``meta``)."""
    return torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)


@functools.cache
def _cast_forward(forward: Callable, device_type: str) -> Callable:
    return torch.amp.custom_fwd(forward, device_type=device_type, cast_inputs=torch.float32)
