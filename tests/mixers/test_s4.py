"""S4 pinned to its paper: the S4 layer (Gu et al. 2022a; seed 004 §S4) written out from its normal-plus-low-rank
parameters — the full conjugate-closed complex system A = diag(Λ) − p p* of N states, zero-order hold by a matrix
exponential (seed 004: Ā = exp(ΔA), B̄ = (Ā − I)A⁻¹B), the recurrence as a plain loop, y = Re(C z), the D skip and
the GELU/GLU output — in float64 on the mixer's own weights, compared with its output, its state after stepping
(in the real coordinates (Re z, Im z) of the first conjugate half) and its Toeplitz coefficients."""

from __future__ import annotations

import pytest
import torch

from seqdyn.mixers._lti import hippo_legs, hippo_legs_nplr
from tests.mixers.paper_helpers import PARTS, assert_close, compare_with_paper, double_mixer, inputs
from tests.mixers.paper_helpers_ssm import as_is, build64, complex_parameter, glu_layer, lti_coefficients

D = 4
CONFIGS = [dict(state_dim=4), dict(state_dim=6, n_ssm=2)]


def s4_layer(m, u):
    """Per channel h, with the NPLR parameters of copy h mod n_ssm (S4's ``(v t)`` channel layout)::

    A = diag(Λ, Λ̄) − [p; p̄][p; p̄]*,   B = [b; b̄],   C = [c; c̄]      (N complex states, conjugate-closed)
    Ā = exp(ΔA),   B̄ = A⁻¹(Ā − I) B                                   (ZOH, seed 004)
    z_k = Ā z_{k−1} + B̄ u_k,   y_k = Re(C z_k),   K_j = Re(C Ā^j B̄);   out = GLU(W GELU(y + D ⊙ u) + b)
    """
    copy = torch.arange(m.d_model) % m.n_ssm
    lam = torch.complex(-torch.exp(m.log_neg_re), m.im)[copy]  # [H, N/2]
    p, b, c = complex_parameter(m.P)[copy], complex_parameter(m.B)[copy], complex_parameter(m.C)
    p, b, c, lam = (torch.cat([v, v.conj()], dim=-1) for v in (p, b, c, lam))  # [H, N]
    A = torch.diag_embed(lam) - p[:, :, None] * p.conj()[:, None, :]
    step = torch.exp(m.log_dt)[:, None, None]
    A_bar = torch.linalg.matrix_exp(step * A)
    B_bar = torch.linalg.solve(A, (A_bar - torch.eye(A.shape[-1])) @ b[..., None])[..., 0]
    z = torch.zeros(u.shape[0], *b.shape, dtype=b.dtype)
    ys = []
    for k in range(u.shape[1]):
        z = torch.einsum("hnm,bhm->bhn", A_bar, z) + B_bar * u[:, k, :, None]
        ys.append((c * z).sum(-1).real)
    powers = [torch.linalg.matrix_power(A_bar, j) for j in range(u.shape[1])]
    kernel = torch.stack([torch.einsum("hn,hnm,hm->h", c, P, B_bar).real for P in powers], dim=-1)
    half = z[..., : z.shape[-1] // 2]
    state = torch.cat([half.real, half.imag], dim=-1)  # the mixer's real coordinates of the first half
    return glu_layer(m.head, torch.stack(ys, dim=1), u), state, lti_coefficients(kernel, u.shape[0])


@pytest.mark.parametrize("options", CONFIGS, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_s4_is_the_zoh_discretized_nplr_layer(options, part):
    mixer, x = double_mixer("s4", D, **options), inputs(2, 9, D, seed=1)
    compare_with_paper(part, mixer, x, s4_layer, state_of=as_is)


@pytest.mark.parametrize("state_dim", [8, 16])
def test_s4_kernel_is_the_zoh_discretized_hippo_legs_system(state_dim):
    """At init S4 computes K_j = C Ā^j B̄ with Ā = exp(ΔA), B̄ = A⁻¹(Ā − I)B and A, B = HiPPO-LegS (seed 004), for the
    output map C = 2 Re(c V_h*) that its complex parameter c stands for."""
    mixer = build64("s4", D, state_dim=state_dim)
    _, _, _, half = hippo_legs_nplr(state_dim)
    A, B = hippo_legs(state_dim)
    c = torch.complex(mixer.C[..., 0], mixer.C[..., 1])
    C_orig = 2 * (c @ half.conj().T).real  # [H, N]
    length = 20
    for h in range(D):
        dt = torch.exp(mixer.log_dt[h])
        A_bar = torch.linalg.matrix_exp(dt * A)
        B_bar = torch.linalg.solve(A, (A_bar - torch.eye(state_dim, dtype=torch.float64)) @ B)
        expected = torch.stack([C_orig[h] @ torch.linalg.matrix_power(A_bar, j) @ B_bar for j in range(length)])
        assert_close(mixer.system().kernel(length)[h], expected, f"channel {h}")
    # the real coordinates r = (Re z, Im z) of z = V_h* x: r = Q x with Q Qᵀ = I/2, so A_r = 2 Q A Qᵀ
    Q = torch.cat([half.conj().T.real, half.conj().T.imag])
    assert_close(Q @ Q.T, 0.5 * torch.eye(state_dim, dtype=torch.float64), "Q Qᵀ = I/2")
    A_r, B_r, _ = mixer.continuous()
    assert_close(A_r[0], 2 * Q @ A @ Q.T, "A_r similar to HiPPO-LegS")
    assert_close(B_r[0], Q @ B, "B_r = Q B")
