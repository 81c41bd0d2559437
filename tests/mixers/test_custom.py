"""The custom mixer against seed 001 eqs. 2–4 written out (the key-cache form: every key's own linear system),
on two configurations that exercise most of its knobs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.mixers.paper_blocks import head_output, short_conv
from tests.mixers.paper_helpers import PARTS, compare_with_paper, double_mixer, inputs

D = 16
CONFIGS = {  # the shared suite's delta-rule configuration; a gated exp readout over elu+1 features
    "delta_rule": dict(heads=2, decay="scalar", householder="keys", normalizer="abs_max1"),
    "gated_exp": dict(
        heads=2,
        readout="exp",
        feature_map="elu1",
        decay="diagonal",
        decay_param="gla",
        scale="input",
        normalizer="sum",
        short_conv=True,
        output_gate=True,
    ),
}


def custom_layer(options):
    """Seed 001 eqs. 2–4 for ``options`` (the keys of :data:`CONFIGS`)::

        x_j^(j) = b_j ψ(k_j),   x_i^(j) = D_i (I − β_i w_i w_iᵀ) x_{i-1}^(j),   α_ij = φ(ψ(q_i)ᵀ x_i^(j)),
        y_i = W_O [RMSNorm_head(Σ_j α_ij v_j / η_i) ⊙ SiLU(W_g u_i)]

    with ``log D_t = −exp(A_log) softplus(w_Δᵀu_t + b_Δ)`` per head (Mamba-2) or ``logsigmoid(W_2 W_1 u_t + b)/16``
    per key channel (GLA); w = k/‖k‖ and β = σ(w_βᵀu + b_β) for ``householder="keys"``; b = K^-½ or σ(w_bᵀu + b_b).
    Returns ``(y, state, A)``: the state is ``(S, z) = Σ_j x_T^(j) (v_jᵀ, 1)`` for φ = identity, else the cache
    ``(x_T^(j), v_j)`` of every key, followed by the short convolution's last w − 1 inputs where there is one."""

    def layer(mixer, x):
        batch, length, _ = x.shape
        heads = options["heads"]
        projected = x @ mixer.qk.weight.T
        qk = short_conv(projected, mixer.convs["qk"]) if options.get("short_conv") else projected
        q, k = (t.view(batch, length, heads, -1) for t in qk.chunk(2, dim=-1))
        if options.get("feature_map") == "elu1":
            q, k = (torch.where(t > 0, t + 1, torch.exp(t)) for t in (q, k))
        v = (x @ mixer.v.weight.T).view(batch, length, heads, -1)
        if options["decay"] == "scalar":  # Mamba-2
            gate = mixer.decay
            log_d = (-torch.exp(gate.a_log) * F.softplus(x @ gate.proj.weight.T + gate.dt_bias))[..., None]
        else:  # GLA, per key channel
            gate = mixer.decay
            log_d = F.logsigmoid(x @ gate.down.weight.T @ gate.up.weight.T + gate.up.bias).view(q.shape) / 16
        keys = options.get("householder") == "keys"
        k = k / k.norm(dim=-1, keepdim=True) if keys else k
        beta = torch.sigmoid(x @ mixer.beta.weight.T + mixer.beta.bias) if keys else x.new_zeros(batch, length, heads)
        b = (
            torch.sigmoid(x @ mixer.scale_gate.weight.T + mixer.scale_gate.bias)[..., None]
            if options.get("scale") == "input"
            else k.shape[-1] ** -0.5
        )
        cache, scores = x.new_zeros(batch, heads, 0, k.shape[-1]), x.new_zeros(batch, heads, length, length)
        for i in range(length):  # cache [B, H, j ≤ i, K] holds x_i^(j)
            along = (cache * k[:, i, :, None]).sum(-1, keepdim=True)  # w_iᵀ x_{i-1}^(j), w = k
            reflected = cache - beta[:, i, :, None, None] * k[:, i, :, None] * along
            cache = torch.cat([torch.exp(log_d[:, i, :, None]) * reflected, (b * k)[:, i, :, None]], dim=2)
            scores[:, :, i, : i + 1] = torch.einsum("bhk,bhjk->bhj", q[:, i], cache)
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        alpha = (torch.exp(scores) if options.get("readout") == "exp" else scores).masked_fill(~causal, 0.0)
        total = alpha.sum(-1, keepdim=True)
        A = alpha / (total if options["normalizer"] == "sum" else total.abs().clamp(min=1.0))
        y = head_output(mixer.output, torch.einsum("bhij,bjhv->bihv", A, v), x, gated=options.get("output_gate", False))
        values = v.transpose(1, 2)
        state = (cache, values) if options.get("readout") == "exp" else (cache.transpose(-1, -2) @ values, cache.sum(2))
        conv = (projected[:, length - mixer.convs["qk"].width + 1 :],) if options.get("short_conv") else ()
        return y, state + conv, A

    return layer


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_custom_matches_its_paper(config, part):
    mixer = double_mixer("custom", D, **CONFIGS[config])
    compare_with_paper(
        part,
        mixer,
        inputs(2, 9, D, seed=1),
        custom_layer(CONFIGS[config]),
        state_of=lambda state: (*state.core, *state.conv.values()),
    )


@pytest.mark.parametrize("readout", ["exp", "relu", "identity"])
def test_the_state_normalizer_is_the_score_sum_of_mlstms_normalization_state(readout):
    """η_i = max(|q_iᵀ n_i|, 1) with n_i = λ n_{i−1} + K^-½ k_i for an unstable Λ = λI (Principle 6, Fig. 11):
    A_ij = φ(s_ij) / η_i with s_ij = λ^{i−j} K^-½ q_iᵀk_j; for the identity readout the same as "abs_max1"; no
    step()."""
    lam, heads, length = 1.05, 2, 9
    mixer = double_mixer(
        "custom", D, heads=heads, readout=readout, decay="constant", constant_decay=lam, normalizer="state"
    )
    x = inputs(2, length, D, seed=3)
    q, k = ((x @ w.T).view(2, length, heads, -1).transpose(1, 2) for w in mixer.qk.weight.chunk(2, dim=0))
    i = torch.arange(length, dtype=torch.float64)
    causal = i[:, None] >= i[None, :]
    powers = torch.where(causal, lam ** (i[:, None] - i[None, :]).clamp(min=0), 0.0)
    scores = powers * (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    alpha = {"exp": torch.exp, "relu": F.relu, "identity": lambda s: s}[readout](scores).masked_fill(~causal, 0.0)
    eta = scores.sum(-1, keepdim=True).abs().clamp(min=1.0)
    torch.testing.assert_close(mixer.coefficients(x), alpha / eta, rtol=1e-9, atol=1e-12)
    if readout == "identity":
        same = double_mixer(
            "custom", D, heads=heads, readout=readout, decay="constant", constant_decay=lam, normalizer="abs_max1"
        )
        same.load_state_dict(mixer.state_dict())
        torch.testing.assert_close(same(x), mixer(x), rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="^normalizer: 'state'"):
        mixer.step(x[:, 0], mixer.init_state(2))
