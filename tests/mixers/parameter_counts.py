"""Parameter counts of the mixers as functions of ``d_model``, written from the papers' layer definitions: the suites
that check every mixer (``test_mixer_suite``) and each family (``test_rnn_mixers``, ``test_lti_mixers``) share them."""

from __future__ import annotations


def s6_parameters(d, n=4, expand=2, rank=1, conv=True, gate=True, width=4):
    """Mamba's S6 block: in (and gate) projection, short convolution, x → (Δ low-rank, B, C), Δ up-projection,
    A, D and the out projection."""
    inner = expand * d
    return (
        d * inner * (2 if gate else 1)
        + (inner * width + inner if conv else 0)
        + inner * (rank + 2 * n)
        + (rank * inner + inner)
        + inner * n
        + inner
        + inner * d
    )


def qlstm_parameters(d, expand=1, conv=False, gate=False, width=4, s6=False):
    """Languini's qLSTM layer: short convolution, the four gates (f, i, o, u), GeLU gate, out projection; qlstm_s6
    adds its power ``a``."""
    inner = expand * d
    return (
        (d * width + d if conv else 0)
        + (d * 4 * inner + 4 * inner)
        + (d * inner + inner if gate else 0)
        + (inner * d + d)
        + (1 if s6 else 0)
    )


def rglru_parameters(d, expand=1, blocks=1, conv=True, gate=True, width=4):
    """Griffin's recurrent block: in (and gate) projection, short convolution, the block-diagonal recurrence and
    input gates, Λ, out projection."""
    w = int(expand * d)
    projections = 2 if gate else 1
    return (d * w + w) * projections + (w * width + w if conv else 0) + 2 * (w * w // blocks + w) + w + (w * d + d)


def glu_parameters(d):
    """A GLU output layer ``(W₁ x + b₁) ⊙ σ(W₂ x + b₂)`` at width d."""
    return 2 * d * d + 2 * d


#: (name, options, count at d_model d) of the LTI mixers, from the papers' layer definitions (complex numbers
#: count twice)
LTI_PARAMETERS = [
    ("dlr", {}, lambda d: 2 * 64 + 2 * d * 64 + d * d),  # (logΛ)_re, (logΛ)_im, W, W_out (no bias)
    ("dlr", dict(state_dim=8, bidirectional=True), lambda d: 2 * (2 * 8 + 2 * d * 8) + d * d),
    ("dlr", dict(state_dim=8, residual=False, output="none"), lambda d: 2 * 8 + 2 * d * 8),
    ("dss_exp", {}, lambda d: 2 * 64 + 2 * d * 64 + d + d + glu_parameters(d)),  # Λ, W, log Δ, D, GLU
    ("s4d", {}, lambda d: d * 32 * (2 + 2 + 2) + d + d + glu_parameters(d)),  # A, B, C per channel; log Δ, D, GLU
    ("s4d", dict(state_dim=8, skip=False, output="linear"), lambda d: d * 4 * 6 + d + d * d + d),
    # Λ, P, B per copy; C; log Δ; D; GLU
    ("s4", {}, lambda d: d * 32 * (2 + 2 + 2) + d * 64 + d + d + glu_parameters(d)),
    ("s4", dict(state_dim=8, n_ssm=1), lambda d: 4 * 6 + d * 8 + d + d + glu_parameters(d)),
    ("s5", {}, lambda d: 64 + 64 * d + 64 * d + 32 + d + d * d + d),  # Λ, B̃, C̃, log Δ, D, half-GLU
    ("lru", {}, lambda d: 3 * 64 + 2 * 64 * d + 2 * d * 64 + d),  # ν, θ, γ, B, C, D
]
