"""The selective SSM and the gated RNNs of seed 000 — s6, qlstm, qlstm_s6, rglru — against their papers' equations
written out as explicit loops, their DSF forms (eqs. 18–20), their initializations, and the mixer contract
(backends, streaming, coefficients, DSF kernel, long-sequence gradients, parameter counts, bad options)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqdyn import mixers

D = 8
F64 = torch.float64

#: (mixer, options) covering every block variant: the papers' full layers and the bare cells
CONFIGS = [
    ("s6", dict(state_dim=4)),
    ("s6", dict(state_dim=3, short_conv=False, gate=False, dt_rank=3, expand=1)),  # seed 000's bare S6 block
    ("qlstm", dict()),
    ("qlstm", dict(dsf_form=True)),
    ("qlstm", dict(expand=2, short_conv=True, gate=True)),
    ("qlstm_s6", dict()),
    ("qlstm_s6", dict(dsf_form=True, short_conv=True, gate=True)),
    ("rglru", dict()),
    ("rglru", dict(short_conv=False, gate=False)),
    ("rglru", dict(expand=1.5, gate_blocks=3)),
]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in options.items()) or 'default'}" for name, options in CONFIGS]


def build(name: str, noise: float = 0.0, **options) -> mixers.Mixer:
    """A float64 mixer; ``noise`` perturbs every parameter so that gates and decays are far from their init."""
    torch.manual_seed(0)
    mixer = mixers.build(name, D, chunk_size=4, **options).double()
    with torch.no_grad():
        for parameter in mixer.parameters():
            parameter.add_(noise * torch.randn_like(parameter))
    return mixer


def inputs(length: int = 9, batch: int = 2, seed: int = 1, dtype=F64) -> torch.Tensor:
    return torch.randn(batch, length, D, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def close(actual, expected, what, tol=1e-10):
    scale = max(1.0, float(expected.detach().abs().max()))
    error = float((actual - expected).detach().abs().max())
    assert error <= tol * scale, f"{what}: {error:.2e}"


def causal_conv(conv, x: torch.Tensor) -> torch.Tensor:
    """``y_t = Σ_s W[:, s] ⊙ x_{t-w+1+s} + bias`` (zeros before the sequence), SiLU if the conv has it."""
    width, length = conv.width, x.shape[1]
    padded = F.pad(x, (0, 0, width - 1, 0))
    y = sum(conv.weight[:, s] * padded[:, s:s + length] for s in range(width)) + conv.bias
    return F.silu(y) if conv.activation else y


# ------------------------------------------------------------------------------------- the papers' equations
def s6_quantities(m, x):
    """Mamba-1 up to the scan: (x after in-proj and conv, z, Δ [B,T,I], A [I,N], B_t [B,T,N], C_t [B,T,N])."""
    projected = m.in_proj(x)
    u, z = projected[..., :m.inner], projected[..., m.inner:]
    if "x" in m.convs:
        u = causal_conv(m.convs["x"], u)
    low, b, c = m.x_proj(u).split([m.dt_rank, m.state_dim, m.state_dim], dim=-1)
    delta = F.softplus(low @ m.dt_proj.weight.T + m.dt_proj.bias)  # Δ = softplus(W_Δ (W_r u) + b_Δ)
    return u, z, delta, -torch.exp(m.a_log), b, c


def s6_reference(m, x):
    """Mamba-1's ``selective_scan_ref``: h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t x_t, y_t = C_t h_t + D x_t."""
    u, z, delta, A, b, c = s6_quantities(m, x)
    h = x.new_zeros(x.shape[0], m.inner, m.state_dim)
    ys = []
    for t in range(x.shape[1]):
        h = torch.exp(delta[:, t, :, None] * A) * h + delta[:, t, :, None] * b[:, t, None, :] * u[:, t, :, None]
        ys.append((h * c[:, t, None, :]).sum(-1) + m.skip * u[:, t])
    y = torch.stack(ys, dim=1)
    return m.out_proj(y * F.silu(z) if m.gate else y)


def qlstm_gates(m, x):
    """Eq. 8 pre-activations (W_f u, W_i u, W_o u, W_u u) from the (optionally convolved) input."""
    u = causal_conv(m.convs["u"], x) if "u" in m.convs else x
    weights, biases = m.gates.weight.split(m.inner), m.gates.bias.split(m.inner)
    return [u @ w.T + b for w, b in zip(weights, biases)]


def qlstm_reference(m, x, reversed_sigmoid: bool = False):
    """qLSTM eqs. 5–8 (``dsf_form``: eq. 19 without the two tanh); eq. 22's forget gate with ``reversed_sigmoid``."""
    pre_f, pre_i, pre_o, pre_u = qlstm_gates(m, x)
    state = x.new_zeros(x.shape[0], m.inner)
    ys = []
    for t in range(x.shape[1]):
        if reversed_sigmoid:
            f = (1.0 / (1.0 + torch.exp(pre_f[:, t]))) ** m.a  # σ_rev(W_Δ u)^a   (22)
        else:
            f = torch.sigmoid(pre_f[:, t])  # (8)
        i, o = torch.sigmoid(pre_i[:, t]), torch.sigmoid(pre_o[:, t])
        u_bar = pre_u[:, t] if m.dsf_form else torch.tanh(pre_u[:, t])  # (8) / (19b)
        state = f * state + i * u_bar  # (5a)
        ys.append(o * state if m.dsf_form else o * torch.tanh(state))  # (19c) / (5b)
    y = torch.stack(ys, dim=1)
    if m.gate is not None:
        y = y * F.gelu(m.gate(x))
    return m.out(y)


def rglru_quantities(m, x):
    """Griffin's block up to the recurrence: (u, gate branch, a_t, i_t) with eq. 10's gates."""
    projected = m.in_proj(x)
    u, g = projected[..., :m.width], projected[..., m.width:]
    if "u" in m.convs:
        u = causal_conv(m.convs["u"], u)
    dense = lambda layer: torch.block_diag(*layer.weight)  # noqa: E731 — block-diagonal W as one matrix
    r = torch.sigmoid(u @ dense(m.a_gate) + m.a_gate.bias.flatten())  # r_t = σ(W_a u_t)
    i = torch.sigmoid(u @ dense(m.input_gate) + m.input_gate.bias.flatten())  # i_t = σ(W_x u_t)
    a = torch.exp(-m.c * r * F.softplus(m.a_param))  # a_t = exp(−c r_t softplus(Λ))
    return u, g, a, i


def rglru_reference(m, x):
    """RG-LRU eqs. 9–10: h_t = a_t ⊙ h_{t-1} + √(1 − a_t²) ⊙ (i_t ⊙ u_t), y_t = h_t."""
    u, g, a, i = rglru_quantities(m, x)
    h = x.new_zeros(x.shape[0], m.width)
    ys = []
    for t in range(x.shape[1]):
        h = a[:, t] * h + torch.sqrt(1 - a[:, t] ** 2) * (i[:, t] * u[:, t])
        ys.append(h)
    y = torch.stack(ys, dim=1)
    return m.out_proj(y * F.gelu(g, approximate="tanh") if m.gate else y)


REFERENCES = {
    "s6": s6_reference,
    "qlstm": qlstm_reference,
    "qlstm_s6": lambda m, x: qlstm_reference(m, x, reversed_sigmoid=True),
    "rglru": rglru_reference,
}


@pytest.mark.parametrize("name, options", CONFIGS, ids=IDS)
def test_output_follows_the_papers_recurrence(name, options):
    mixer = build(name, noise=0.5, **options)
    x = inputs()
    expected = REFERENCES[name](mixer, x)
    close(mixer(x), expected, f"{name} vs its paper's recurrence")
    close(mixer(x, backend="recurrent"), expected, f"{name} (recurrent) vs its paper's recurrence")


# ------------------------------------------------------------------------------------- DSF forms, eqs. 18–20
def test_s6_dsf_is_seed_000_eq_18():
    """Λ_i = exp(Δ_i^c A^c) (diagonal), B_i = Δ_i^c b_i, C_i = c_iᵀ per channel c."""
    m = build("s6", noise=0.3, state_dim=3)
    x = inputs(length=5)
    _, _, delta, A, b, c = s6_quantities(m, x)
    system = m.dsf(x)
    assert system.Lambda.shape == (2, m.inner, 5, 3, 3)
    close(system.Lambda, torch.diag_embed(torch.exp(delta.unsqueeze(-1) * A)).transpose(1, 2), "Λ")
    close(system.B[..., 0], (delta.unsqueeze(-1) * b.unsqueeze(2)).transpose(1, 2), "B")
    close(system.C[..., 0, :], c.unsqueeze(1).expand(-1, m.inner, -1, -1), "C")


@pytest.mark.parametrize("name", ["qlstm", "qlstm_s6"])
def test_qlstm_dsf_form_is_seed_000_eq_19(name):
    """Λ_i = diag(f_i), B_i = diag(σ(W_i u_i)) (times W_u, which forms the values), C_i = diag(σ(W_o u_i))."""
    m = build(name, noise=0.3, dsf_form=True)
    x = inputs(length=5)
    pre_f, pre_i, pre_o, pre_u = qlstm_gates(m, x)
    forget = torch.sigmoid(pre_f) if name == "qlstm" else (1 / (1 + torch.exp(pre_f))) ** m.a
    system = m.dsf(x)
    close(system.Lambda[..., 0, 0], forget.transpose(1, 2), "Λ")
    close(system.B[..., 0, 0], torch.sigmoid(pre_i).transpose(1, 2), "B")
    close(system.C[..., 0, 0], torch.sigmoid(pre_o).transpose(1, 2), "C")
    _, values = m.core(x)
    close(values[..., 0], pre_u, "values W_u u")


def test_rglru_dsf_is_seed_000_eq_20():
    """Λ_i = a_i, B_i = √(1 − a_i²) ⊙ i_i, C_i = I."""
    m = build("rglru", noise=0.3)
    x = inputs(length=5)
    u, _, a, i = rglru_quantities(m, x)
    system = m.dsf(x)
    close(system.Lambda[..., 0, 0], a.transpose(1, 2), "Λ")
    close(system.B[..., 0, 0], (torch.sqrt(1 - a**2) * i).transpose(1, 2), "B")
    assert torch.all(system.C == 1)
    close(m.core(x)[1][..., 0], u, "values u")


# ------------------------------------------------------------------------------------------- initialization
def test_s6_initialization_is_mamba_1s():
    torch.manual_seed(0)
    m = mixers.build("s6", 64, dt_min=0.002, dt_max=0.05)
    assert m.inner == 128 and m.dt_rank == 4  # expand 2, ceil(64 / 16)
    expected_A = -torch.arange(1, 17, dtype=torch.float32).expand(128, 16)
    close(m.A, expected_A, "S4D-Real A_n = −(n+1)", tol=1e-6)
    step = F.softplus(m.dt_proj.bias.detach())
    assert step.min() >= 0.002 * (1 - 1e-5) and step.max() <= 0.05 * (1 + 1e-5)
    spread = torch.log(step)  # log-uniform: the logs fill the interval
    assert spread.min() < math.log(0.002) + 0.5 and spread.max() > math.log(0.05) - 0.5
    assert m.dt_proj.weight.abs().max() <= 4**-0.5
    assert torch.all(m.skip == 1)


def test_rglru_initialization_puts_a_to_the_c_uniformly_in_0_9_to_0_999():
    torch.manual_seed(0)
    m = mixers.build("rglru", 512, expand=4)
    a_c = torch.exp(m.log_base_decay().detach().double())  # a^c = exp(−c softplus(Λ)), the decay at r_t = 1
    assert a_c.min() >= 0.9 - 1e-6 and a_c.max() <= 0.999 + 1e-6
    assert a_c.min() < 0.905 and a_c.max() > 0.994
    assert abs(float(a_c.mean()) - 0.9495) < 0.005  # uniform, not uniform on a ring or in log space
    assert m.c == 8.0


def test_qlstm_initializations():
    torch.manual_seed(0)
    plain, reversed_ = mixers.build("qlstm", 64), mixers.build("qlstm_s6", 64)
    assert torch.all(plain.gates.bias[:64] == 1) and torch.all(plain.gates.bias[64:] == 0)  # Languini's +1
    assert torch.all(reversed_.gates.bias[:64] == -1)  # σ_rev(W u − 1) ~ σ(W u + 1) at init
    assert float(reversed_.a.detach()) == 1.0
    assert abs(float(plain.gates.weight.detach().std()) - 0.02) < 0.002


# ------------------------------------------------------------------------------------------ mixer contract
@pytest.mark.parametrize("name, options", CONFIGS, ids=IDS)
def test_every_backend_gives_the_same_output_and_gradients(name, options):
    mixer = build(name, noise=0.3, **options)
    backends = [b for b in mixer.backends if b != "auto"]
    assert set(backends) == {"quadratic", "recurrent", "chunk", "scan"}
    params = list(mixer.parameters())
    results = {}
    for backend in backends:
        x = inputs().requires_grad_(True)
        core, _ = mixer.core(x, backend=backend)
        y = mixer(x, backend=backend)
        weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(2), dtype=F64)
        results[backend] = (core, y, torch.autograd.grad((y * weights).sum(), [x, *params]))
    core_ref, y_ref, grads_ref = results["quadratic"]
    for backend, (core, y, grads) in results.items():
        close(core, core_ref, f"{backend} core")
        close(y, y_ref, f"{backend} output")
        for (pname, _), g, g_ref in zip([("x", None), *mixer.named_parameters()], grads, grads_ref):
            close(g, g_ref, f"{backend} gradient of {pname}")


@pytest.mark.parametrize("name, options", CONFIGS, ids=IDS)
def test_step_token_by_token_equals_forward(name, options):
    mixer = build(name, noise=0.3, **options)
    x = inputs()
    state = mixer.init_state(x.shape[0])
    outputs = []
    for t in range(x.shape[1]):
        y, state = mixer.step(x[:, t], state)
        outputs.append(y)
    close(torch.stack(outputs, dim=1), mixer(x), f"{name} step")


@pytest.mark.parametrize("name, options", CONFIGS, ids=IDS)
def test_coefficients_are_causal_and_reproduce_the_core(name, options):
    mixer = build(name, noise=0.3, **options)
    x = inputs()
    A = mixer.coefficients(x)
    core, values = mixer.core(x)
    assert A.shape == (2, core.shape[2], 9, 9)
    assert torch.all(A.triu(1) == 0)
    close(torch.einsum("bhij,bjhv->bihv", A, values), core, "A·v")
    changed = x.clone()
    changed[:, 5:] += torch.randn(2, 4, D, dtype=F64)
    assert torch.equal(mixer.coefficients(changed)[:, :, :5], A[:, :, :5]), "rows before t=5 saw the future"


@pytest.mark.parametrize("name, options", CONFIGS, ids=IDS)
def test_dsf_kernel_reproduces_the_core(name, options):
    mixer = build(name, noise=0.3, **options)
    x = inputs(length=6)
    core, values = mixer.core(x)
    system = mixer.dsf(x)
    close(system.apply(values), core, "Φ u")
    close(system.simulate(values), core, "h_i = Λ_i h_{i-1} + B_i u_i")


def test_rglru_gradients_stay_finite_where_a_rounds_to_one():
    """softplus(Λ) underflows to 0 in float32, so 1 − a² = 0: the clipped √ derivative (Griffin) keeps it finite."""
    torch.manual_seed(0)
    mixer = mixers.build("rglru", 8)
    with torch.no_grad():
        mixer.a_param.fill_(-200.0)
    mixer(torch.randn(2, 16, 8)).square().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in mixer.parameters())


def s6_parameters(d, n=4, expand=2, rank=1, conv=True, gate=True, width=4):
    inner = expand * d
    return (d * inner * (2 if gate else 1) + (inner * width + inner if conv else 0) + inner * (rank + 2 * n)
            + (rank * inner + inner) + inner * n + inner + inner * d)


def qlstm_parameters(d, expand=1, conv=False, gate=False, width=4, s6=False):
    inner = expand * d
    return ((d * width + d if conv else 0) + (d * 4 * inner + 4 * inner) + (d * inner + inner if gate else 0)
            + (inner * d + d) + (1 if s6 else 0))


def rglru_parameters(d, expand=1, blocks=1, conv=True, gate=True, width=4):
    w = int(expand * d)
    projections = 2 if gate else 1
    return ((d * w + w) * projections + (w * width + w if conv else 0) + 2 * (w * w // blocks + w) + w
            + (w * d + d))


PARAMETERS = {
    IDS[0]: s6_parameters(D),
    IDS[1]: s6_parameters(D, n=3, expand=1, rank=3, conv=False, gate=False),
    IDS[2]: qlstm_parameters(D),
    IDS[3]: qlstm_parameters(D),
    IDS[4]: qlstm_parameters(D, expand=2, conv=True, gate=True),
    IDS[5]: qlstm_parameters(D, s6=True),
    IDS[6]: qlstm_parameters(D, conv=True, gate=True, s6=True),
    IDS[7]: rglru_parameters(D),
    IDS[8]: rglru_parameters(D, conv=False, gate=False),
    IDS[9]: rglru_parameters(D, expand=1.5, blocks=3),
}


@pytest.mark.parametrize("name, options", CONFIGS, ids=IDS)
def test_parameter_count_matches_the_formula(name, options, request):
    mixer = build(name, **options)
    assert sum(p.numel() for p in mixer.parameters()) == PARAMETERS[request.node.callspec.id]


def test_default_parameter_counts_and_state_sizes():
    assert sum(p.numel() for p in mixers.build("s6", 32).parameters()) == s6_parameters(32, n=16, rank=2)
    assert sum(p.numel() for p in mixers.build("rglru", 32).parameters()) == rglru_parameters(32)
    assert mixers.build("s6", 32).state_size(100) == 64 * 16 + 3 * 64  # SSM state I·N + conv state (w−1)·I
    assert mixers.build("qlstm", 32).state_size(100) == 32  # n = 1: one float per channel
    assert mixers.build("rglru", 32, expand=2).state_size(100) == 64 + 3 * 64


BAD_OPTIONS = [
    ("s6", dict(state_dim=0), "state_dim"),
    ("s6", dict(expand=0), "expand"),
    ("s6", dict(expand=0.3), "expand"),
    ("s6", dict(dt_rank=0), "dt_rank"),
    ("s6", dict(dt_rank="full"), "dt_rank"),
    ("s6", dict(dt_min=0.2, dt_max=0.1), "dt_min"),
    ("s6", dict(short_conv="yes"), "short_conv"),
    ("s6", dict(gate=None), "gate"),
    ("s6", dict(conv_size=0), "conv_size"),
    ("s6", dict(chunk_size=0), "chunk_size"),
    ("qlstm", dict(expand=-1), "expand"),
    ("qlstm", dict(dsf_form="yes"), "dsf_form"),
    ("qlstm", dict(short_conv=2), "short_conv"),
    ("qlstm", dict(gate="no"), "gate"),
    ("qlstm", dict(conv_size=0), "conv_size"),
    ("qlstm_s6", dict(dsf_form=None), "dsf_form"),
    ("qlstm_s6", dict(expand=0.1), "expand"),
    ("rglru", dict(c=0), "c"),
    ("rglru", dict(c="8"), "c"),
    ("rglru", dict(gate_blocks=3), "gate_blocks"),
    ("rglru", dict(gate_blocks=0), "gate_blocks"),
    ("rglru", dict(expand=0), "expand"),
    ("rglru", dict(gate="x"), "gate"),
    ("rglru", dict(short_conv=None), "short_conv"),
    ("rglru", dict(conv_size=-1), "conv_size"),
]


@pytest.mark.parametrize("name, options, option", BAD_OPTIONS, ids=[f"{n}-{o}" for n, _, o in BAD_OPTIONS])
def test_bad_options_raise_value_errors_naming_the_option(name, options, option):
    with pytest.raises(ValueError, match=rf"^{option}\b"):
        mixers.build(name, D, **options)

