"""The selective SSM and the gated RNNs of seed 000 — s6, qlstm, qlstm_s6, rglru — and the mixer contract over every
block variant (backends, streaming, coefficients, DSF kernel, long-sequence gradients, parameter counts, bad options).
Each mixer's paper (its layer written out, its DSF form, its initialization) is in ``tests/mixers/test_<name>.py``."""

from __future__ import annotations

import pytest
import torch

from seqdyn import mixers
from tests.mixers.parameter_counts import qlstm_parameters, rglru_parameters, s6_parameters

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
