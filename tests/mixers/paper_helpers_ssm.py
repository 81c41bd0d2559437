"""Pieces the SSM and gated-RNN paper tests share (``tests/mixers/test_<name>.py``, issue 18 item 7), written from
their definitions without the library's convolution, operator or LTI code."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from seqdyn import mixers
from seqdyn.mixers import MixerState


def causal_conv(x: Tensor, weight: Tensor, bias: Tensor | None, silu: bool) -> Tensor:
    """Depthwise causal convolution ``y_t = b + Σ_{s<w} W[:, s] ⊙ x_{t−w+1+s}`` (zeros before the sequence), then
    SiLU if ``silu`` — Mamba's ``conv1d(x)[..., :T]`` and Griffin's ``Conv1D``.  ``x`` ``[B, T, C]``,
    ``W`` ``[C, w]``."""
    width, length = weight.shape[1], x.shape[1]
    padded = F.pad(x, (0, 0, width - 1, 0))
    y = sum(weight[:, s] * padded[:, s : s + length] for s in range(width))
    y = y if bias is None else y + bias
    return F.silu(y) if silu else y


def last_inputs(x: Tensor, count: int) -> Tensor:
    """The last ``count`` rows of ``x`` ``[B, T, C]`` (zeros before the sequence): a short convolution's state."""
    return F.pad(x, (0, 0, count, 0))[:, x.shape[1] :]


def toeplitz(kernel: Tensor) -> Tensor:
    """``A[h, i, j] = K[h, i − j]`` for ``j ≤ i``, else 0: ``[H, T]`` → ``[H, T, T]``."""
    length = kernel.shape[-1]
    A = kernel.new_zeros(kernel.shape[0], length, length)
    for i in range(length):
        for j in range(i + 1):
            A[:, i, j] = kernel[:, i - j]
    return A


def decay_products(log_decay: Tensor) -> Tensor:
    """``Π_{j<l≤i} exp(g_l)`` for ``j ≤ i`` (0 above the diagonal) from the log decays ``g`` ``[B, T, ...]``:
    ``[B, T_i, T_j, ...]``."""
    cumulative = log_decay.cumsum(1)
    span = (cumulative.unsqueeze(2) - cumulative.unsqueeze(1)).clamp(max=0)  # Σ_{j<l≤i} g_l ≤ 0 where j ≤ i
    length = log_decay.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return torch.exp(span) * causal.reshape(1, length, length, *[1] * (log_decay.dim() - 2))


def core_and_convs(state: MixerState) -> tuple[Tensor, ...]:
    """A coefficient mixer's streaming state as a tuple: the operator's state, then each short convolution's last
    inputs (``state_of`` of :func:`tests.mixers.paper_helpers.compare_with_paper`)."""
    return (state.core, *state.conv.values())


def conv_states(mixer, seen: dict[str, Tensor]) -> tuple[Tensor, ...]:
    """The last ``w − 1`` inputs each of ``mixer``'s short convolutions saw (``seen`` by key), in its order."""
    return tuple(last_inputs(seen[key], conv.weight.shape[1] - 1) for key, conv in mixer.convs.items())


def complex_parameter(pair: Tensor) -> Tensor:
    """A parameter stored as (real, imaginary) in its last axis, as a complex tensor."""
    return torch.complex(pair[..., 0], pair[..., 1])


def glu_layer(head, y: Tensor, u: Tensor) -> Tensor:
    """The S4 layer's output (S4, S4D, DSS): ``GLU(W GELU(y + D ⊙ u) + b)`` with ``GLU(a, b) = a ⊙ σ(b)`` over the
    two halves of the ``2H`` channels (S4's ``output_linear``: a 1×1 convolution to 2H, then ``nn.GLU``)."""
    a, b = (F.gelu(y + head.D * u) @ head.proj.weight.T + head.proj.bias).chunk(2, dim=-1)
    return a * torch.sigmoid(b)


def lti_coefficients(kernel: Tensor, batch: int) -> Tensor:
    """The Toeplitz coefficients ``α_ij = K_{i−j}`` ``[B, H, T, T]`` of a SISO kernel ``[H, T]`` per channel."""
    return toeplitz(kernel).expand(batch, -1, -1, -1)


def lti_matrix_coefficients(kernels: Tensor, batch: int) -> Tensor:
    """A MIMO system's kernel as the DSF lays it out: block ``(i, j)`` is ``K_{i−j}`` ``[Dout, Din]`` for ``j ≤ i``,
    else 0; ``kernels`` ``[T, Dout, Din]`` → ``[B, 1, T, T, Dout, Din]``."""
    length = kernels.shape[0]
    blocks = kernels.new_zeros(length, length, *kernels.shape[1:])
    for i in range(length):
        for j in range(i + 1):
            blocks[i, j] = kernels[i - j]
    return blocks.expand(batch, 1, *blocks.shape)


def build64(name: str, d_model: int, **options):
    """Mixer ``name`` built from seed 0 with float64 as the default dtype and left unperturbed, so that its initial
    values are exact to compare with its paper's initialization formulas."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        return mixers.build(name, d_model, **options)
    finally:
        torch.set_default_dtype(previous)


def continuous_eigenvalues(mixer) -> Tensor:
    """The continuous-time eigenvalues ``A = −exp(log_neg_re) + i·im`` (Re A < 0) of S4D and DSS-EXP."""
    return torch.complex(-torch.exp(mixer.log_neg_re), mixer.im)


def as_is(state: Tensor) -> Tensor:
    """An LTI mixer's streaming state, its own tensor (``state_of`` of ``compare_with_paper``)."""
    return state


def mamba2_block(m, u):
    """``mamba_ssm.Mamba2`` with ``ngroups`` = G: ``(out, (S_T [B, H, N, P], conv state), α [B, H, T, T])``::

    z, xBC, Δ = W_in u;   x, B, C = SiLU(conv(xBC));   Δ = clamp(softplus(Δ + b_Δ));   A_h = −exp(A_log_h)
    S_t = exp(Δ_t A_h) S_{t−1} + Δ_t B_t^g x_tᵀ;   y_t = S_tᵀ C_t^g + D_h x_t    (g: the group of head h)
    out = W_out RMSNorm(y ⊙ SiLU(z)),   RMSNorm(g) = g / √(mean(g²) + ε) ⊙ w   (the mean within each group)
    """
    inner, n, heads, groups = m.inner, m.state_dim, m.heads, m.groups
    z, xbc, dt = (u @ m.in_proj.weight.T).split([inner if m.gate else 0, inner + 2 * groups * n, heads], dim=-1)
    conv_in = xbc
    if "xbc" in m.convs:
        xbc = causal_conv(xbc, m.convs["xbc"].weight, m.convs["xbc"].bias, silu=True)
    x, B, C = xbc.split([inner, groups * n, groups * n], dim=-1)
    x = x.unflatten(-1, (heads, m.head_dim))  # [B, T, H, P]
    group_of = torch.arange(heads) // (heads // groups)  # head h reads the B and C of group h // (H / G)
    B, C = (t.unflatten(-1, (groups, n))[:, :, group_of] for t in (B, C))  # [B, T, H, N]
    delta = F.softplus(dt + m.decay.dt_bias)  # [B, T, H]
    delta = torch.clamp(delta, min=m.decay.floor, max=m.decay.ceiling)  # mamba_ssm's dt_limit
    A = -torch.exp(m.decay.a_log)  # [H]
    S = u.new_zeros(u.shape[0], heads, n, m.head_dim)
    ys = []
    for t in range(u.shape[1]):
        dA, dt_t = torch.exp(delta[:, t] * A)[..., None, None], delta[:, t, :, None, None]
        S = dA * S + dt_t * B[:, t, :, :, None] * x[:, t, :, None, :]
        ys.append(torch.einsum("bhn,bhnp->bhp", C[:, t], S) + m.skip[:, None] * x[:, t])
    y = torch.stack(ys, dim=1).flatten(2)
    if m.gate and m.norm is None:  # Falcon-H1's layers without the norm
        y = y * F.silu(z)
    elif m.gate:
        g = (y * F.silu(z)).unflatten(-1, (groups, -1))
        eps = m.norm.eps  # mamba_ssm's RMSNormGated: 1e-5 (item 9 of issue 18), or the norm_eps given
        y = (g / torch.sqrt(g.square().mean(-1, keepdim=True) + eps)).flatten(-2) * m.norm.weight
    alpha = torch.einsum("bihn,bjhn,bijh,bjh->bhij", C, B, decay_products(delta * A), delta)
    return y @ m.out_proj.weight.T, (S, *conv_states(m, {"xbc": conv_in})), alpha
