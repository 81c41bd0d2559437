"""The qLSTM layer of seed 000 (eqs. 5, 8 and 19; Languini's layer around it) written as a plain loop in float64 on a
mixer's own weights, with its forget gate as an argument: qLSTM's sigmoid (``test_qlstm``) or qLSTM-S6's reversed
sigmoid raised to a learned power (``test_qlstm_s6``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.mixers.paper_helpers import assert_close, compare_with_paper, double_mixer, inputs
from tests.mixers.paper_helpers_ssm import causal_conv, conv_states, core_and_convs, decay_products

D = 4


def sigmoid_forget(m, pre):
    """``log f_t = log σ(W_f u_t)`` (eq. 8)."""
    return F.logsigmoid(pre)


def qlstm_gates(m, x, log_forget=sigmoid_forget):
    """Eq. 8 from the (optionally convolved) input ũ: ``(log f, i, o, W_u ũ)``, each ``[B, T, I]``."""
    u = causal_conv(x, m.convs["u"].weight, m.convs["u"].bias, silu=False) if m.convs else x
    pre_f, pre_i, pre_o, pre_u = (u @ m.gates.weight.T + m.gates.bias).split(m.inner, dim=-1)
    return log_forget(m, pre_f), torch.sigmoid(pre_i), torch.sigmoid(pre_o), pre_u


def qlstm_layer(m, x, log_forget=sigmoid_forget):
    """The qLSTM layer: ``(out, (x_T, conv state), α [B, I, T, T])``::

    ū_t = tanh(W_u ũ_t),  f_t = σ(W_f ũ_t),  i_t = σ(W_i ũ_t),  o_t = σ(W_o ũ_t),  ũ = conv(x)   (8)
    x_t = f_t ⊙ x_{t−1} + i_t ⊙ ū_t,   y_t = o_t ⊙ tanh(x_t)                                     (5)
    dsf_form: ū_t = W_u ũ_t and y_t = o_t ⊙ x_t                                                   (19)
    out = W_out (y ⊙ GeLU(W_g x)) + b_out
    """
    log_f, i, o, pre_u = qlstm_gates(m, x, log_forget)
    f, u_bar = torch.exp(log_f), pre_u if m.dsf_form else torch.tanh(pre_u)
    state = x.new_zeros(x.shape[0], m.inner)
    ys = []
    for t in range(x.shape[1]):
        state = f[:, t] * state + i[:, t] * u_bar[:, t]
        ys.append(o[:, t] * (state if m.dsf_form else torch.tanh(state)))
    y = torch.stack(ys, dim=1)
    if m.gate is not None:
        y = y * F.gelu(x @ m.gate.weight.T + m.gate.bias)
    # α_ij = q_i f_{j+1} ⋯ f_i i_j, q = o in the DSF form (its C_i, eq. 19c), else 1 (o acts after the tanh)
    query = o if m.dsf_form else torch.ones_like(o)
    alpha = torch.einsum("bic,bijc,bjc->bcij", query, decay_products(log_f), i)
    return y @ m.out.weight.T + m.out.bias, (state[..., None, None], *conv_states(m, {"u": x})), alpha


def compare_with_qlstm(name, options, log_forget, part, seed):
    """``part`` of :func:`compare_with_paper` for mixer ``name`` against the qLSTM layer with ``log_forget``."""
    mixer, x = double_mixer(name, D, chunk_size=4, **options), inputs(2, 9, D, seed=seed)
    compare_with_paper(part, mixer, x, lambda m, u: qlstm_layer(m, u, log_forget), state_of=core_and_convs)


def check_dsf_form(name, log_forget):
    """Eq. 19: Λ_i = diag(f_i), B_i = diag(σ(W_i u_i)) (times W_u, which forms the values),
    C_i = diag(σ(W_o u_i))."""
    m, x = double_mixer(name, D, dsf_form=True), inputs(2, 5, D, seed=4)
    log_f, i, o, pre_u = qlstm_gates(m, x, log_forget)
    system = m.dsf(x)
    assert_close(system.Lambda[..., 0, 0], torch.exp(log_f).transpose(1, 2), f"{name} Λ")
    assert_close(system.B[..., 0, 0], i.transpose(1, 2), f"{name} B")
    assert_close(system.C[..., 0, 0], o.transpose(1, 2), f"{name} C")
    assert_close(m.core(x)[1][..., 0], pre_u, f"{name} values W_u u")
