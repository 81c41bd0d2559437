"""Defaults that work: Mamba-2's head size divides any width, its gated norm's ε is mamba_ssm's."""

import pytest
import torch

from seqdyn import mixers


@pytest.mark.parametrize("d_model, head_dim", [(16, 32), (24, 48), (32, 64), (48, 48), (64, 64), (100, 50), (7, 14)])
def test_mamba2_default_head_size_divides_the_inner_width(d_model, head_dim):
    mixer = mixers.build("mamba2", d_model, state_dim=8)
    assert mixer.head_dim == head_dim and mixer.heads * mixer.head_dim == 2 * d_model
    x = torch.randn(2, 5, d_model)
    assert mixer(x).shape == x.shape


def test_mamba2_refuses_a_head_size_that_does_not_divide():
    with pytest.raises(ValueError, match="head_dim: 64 does not divide expand·d_model=48"):
        mixers.build("mamba2", 24, head_dim=64)


def test_mamba2_gated_norm_uses_the_reference_epsilon():
    """mamba_ssm's Mamba2: ``RMSNormGated(d_ssm, eps=1e-5, norm_before_gate=False)``; at rows of mean square
    ~1e-6 the ε decides the output."""
    norm = mixers.build("mamba2", 16, state_dim=8).norm
    x, z = torch.full((1, 32), 1e-3, dtype=torch.float64), torch.full((1, 32), 5.0, dtype=torch.float64)
    gated = x * torch.nn.functional.silu(z)
    expected = gated / torch.sqrt(gated.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(norm.double()(x, z), expected)
