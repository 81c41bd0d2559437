"""qLSTM with the S6 state transition (Sieber et al. 2024 §4.3, eq. 22, Fig. 3, appendix G).

S6's transition with a scalar A = a·I is a reversed sigmoid raised to the power a (appendix G, eq. 29)::

    exp(−a · softplus(W_Δ u_t)) = (1 + e^{W_Δ u_t})^{−a} = σ_rev(W_Δ u_t)^a,   σ_rev(x) = 1 / (1 + e^x)

``qlstm_s6`` is :mod:`seqdyn.mixers.qlstm` with only the forget gate replaced by it (eq. 22 with n = 1)::

    f_t = σ_rev(W_Δ u_t)^a,   log f_t = −a · softplus(W_Δ u_t),   a = exp(a_log) > 0 learned   (22)

everything else (input/output gates, ū, tanh, layer, options) as in ``qlstm``.  Coefficient form: as qlstm with
Λ_t = f_t above.  As in appendix G and the authors' code, a is one scalar shared by all channels, initialized
to 1.  The forget bias starts at −1, so that at initialization ``σ_rev(W_Δ u − 1) = σ(1 − W_Δ u)`` has the same
distribution as qLSTM's ``σ(W_f u + 1)``: the two models of Fig. 3 differ only in the transition's form.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqdyn.mixers.base import keep_init
from seqdyn.mixers.qlstm import QLSTM


class QLSTMS6(QLSTM):
    """qLSTM with S6's transition as its forget gate, f_t = σ_rev(W_Δ u_t)^a (Sieber et al. 2024 eq. 22);
    options as qlstm."""

    name = "qlstm_s6"
    ssm_parameter_names = ("a_log",)  # the S6 transition's A
    forget_bias = -1.0

    def __init__(
        self,
        d_model: int,
        expand: float = 1,
        dsf_form: bool = False,
        short_conv: bool = False,
        conv_size: int = 4,
        gate: bool = False,
        chunk_size: int = 64,
    ):
        super().__init__(d_model, expand, dsf_form, short_conv, conv_size, gate, chunk_size)
        self.a_log = nn.Parameter(torch.zeros(()))  # a = 1
        keep_init(self.a_log)

    @property
    def a(self) -> Tensor:
        """The learned exponent a > 0 of eq. 22."""
        return torch.exp(self.a_log)

    def log_forget(self, pre: Tensor) -> Tensor:
        """``log σ_rev(W_Δ u_t)^a = −a · softplus(W_Δ u_t)`` (eq. 22), computed without forming σ_rev."""
        return -self.a * F.softplus(pre)


MIXER = QLSTMS6
