"""RMSNorm's and the L2 normalization's hand-written backwards against the formulas written out."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqdyn.layers import GatedRMSNorm, HeadOutput, RMSNorm
from seqdyn.layers.norms import rms_norm


def _reference(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def test_rms_norm_and_its_gradients_equal_the_formula():
    gen = torch.Generator().manual_seed(0)
    norm = RMSNorm(7).double()
    with torch.no_grad():
        norm.weight.normal_(generator=gen)
    x = torch.randn(3, 5, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(3, 5, 7, generator=gen, dtype=torch.float64)
    y, exact = norm(x), _reference(x, norm.weight, norm.eps)
    torch.testing.assert_close(y, exact, rtol=0, atol=1e-13)
    for got, want in zip(
        torch.autograd.grad(y, (x, norm.weight), upstream), torch.autograd.grad(exact, (x, norm.weight), upstream)
    ):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("gated", [True, False])
def test_rms_norm_times_silu_of_a_gate_with_every_gradient(gated):
    """``RMSNorm(x) ⊙ w ⊙ SiLU(z)`` (the output stage of GLA / DeltaNet / Gated DeltaNet) on strided inputs,
    with rows of all sizes of the kernel's loops (1, 3, 128) and a zero row (the ε floor)."""
    gen = torch.Generator().manual_seed(4)
    for width in (1, 3, 128):
        wide = torch.randn(2, 5, 3, 2 * width, generator=gen, dtype=torch.float64)
        wide[0, 0, 0] = 0.0
        x = wide.requires_grad_()[..., ::2]
        weight = torch.randn(width, generator=gen, dtype=torch.float64, requires_grad=True)
        gate = torch.randn(2, 5, 3, width, generator=gen, dtype=torch.float64, requires_grad=gated) if gated else None
        y = rms_norm(x, weight, 1e-6, gate)
        exact = _reference(x, weight, 1e-6) * (F.silu(gate) if gated else 1)
        torch.testing.assert_close(y, exact, rtol=0, atol=1e-13)
        leaves = (wide, weight) + ((gate,) if gated else ())
        upstream = torch.randn(y.shape, generator=gen, dtype=torch.float64)
        for got, want in zip(torch.autograd.grad(y, leaves, upstream), torch.autograd.grad(exact, leaves, upstream)):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)  # the zero row's gradients are ~1e3


def test_rms_norm_checks_its_gate():
    with pytest.raises(ValueError, match="gate"):
        rms_norm(torch.randn(2, 4), torch.ones(4), 1e-6, torch.randn(1, 4))


@pytest.mark.parametrize("gate", [True, False])
def test_head_output_is_its_formula(gate):
    """``W_O (RMSNorm_head(o) ⊙ SiLU(W_g u))``, the per-head norm sharing one weight over heads."""
    torch.manual_seed(6)
    head = HeadOutput(8, heads=2, head_dim=3, gate=gate).double()
    with torch.no_grad():
        head.norm.weight.normal_()
    o, u = torch.randn(2, 5, 2, 3, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    normed = _reference(o, head.norm.weight, head.norm.eps).flatten(2)
    exact = head.out(normed * F.silu(head.gate(u)) if gate else normed)
    torch.testing.assert_close(head(o, u), exact, rtol=0, atol=1e-13)


def test_gated_rms_norm_with_a_frozen_weight_and_strided_input():
    gen = torch.Generator().manual_seed(1)
    norm = GatedRMSNorm(4).double().requires_grad_(False)
    wide = torch.randn(2, 6, 9, generator=gen, dtype=torch.float64, requires_grad=True)
    gate = torch.randn(2, 6, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    x = wide[..., 1:5]
    y = norm(x, gate)
    exact = _reference(x * torch.nn.functional.silu(gate), norm.weight, norm.eps)
    torch.testing.assert_close(y, exact, rtol=0, atol=1e-13)
    upstream = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    for got, want in zip(
        torch.autograd.grad(y, (wide, gate), upstream), torch.autograd.grad(exact, (wide, gate), upstream)
    ):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("scale", [1.0, 1e-14])  # 1e-14: norms below ε, clamped
def test_l2_normalize_matches_f_normalize_with_gradients(scale):
    from seqdyn.layers.norms import l2_normalize

    x = (torch.randn(3, 5, 7, dtype=torch.float64) * scale).requires_grad_()
    x.data[0, 0] = 0.0  # a zero row
    grad = torch.randn(3, 5, 7, dtype=torch.float64)
    got = l2_normalize(x)
    want = torch.nn.functional.normalize(x, dim=-1)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    (got_grad,) = torch.autograd.grad(got, x, grad)
    (want_grad,) = torch.autograd.grad(want, x, grad)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-9, atol=1e-9 / scale)
    if scale == 1.0:  # finite differences would cross the clamp at the tiny scale
        assert torch.autograd.gradcheck(l2_normalize, (x[1:, :2].detach().clone().requires_grad_(),))
