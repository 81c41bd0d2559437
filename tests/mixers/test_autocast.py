"""Every registered mixer trains under CPU autocast in bfloat16 and float16 (what ``train.dtype`` turns on), on
every backend it accepts (issue 18): the hand-written autograd functions run in float32 there
(:func:`seqdyn.core.precision.float32_under_autocast`), so that their backward no longer meets float32 saved
tensors with half-precision gradients."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch

import seqdyn
from seqdyn import mixers
from tests.mixers.helpers import SMALL

D, LENGTH, CHUNK, STEPS = 16, 24, 8, 3  # T: three chunks of 8 steps, six of local attention's windows of 4
HALF = {"bfloat16": torch.bfloat16, "float16": torch.float16}
#: mixers with their options: the registry (small sizes) and the chunk backend's general Householder path
MIXERS = {name: (name, SMALL.get(name, {})) for name in mixers.names()}
MIXERS["custom_diagonal_learned"] = ("custom", dict(heads=2, decay="diagonal", householder="learned"))
#: the largest relative error of the first step's gradient (all parameters as one vector) against float32's, about
#: twice the largest seen (0.074 and 0.020, DeltaNet's); later steps start from weights trained in half precision
GRADIENT_TOLERANCE = {torch.bfloat16: 0.15, torch.float16: 0.05}


def build(label: str) -> mixers.Mixer:
    name, options = MIXERS[label]
    options = dict(options)
    if "chunk_size" in mixers.options(name):
        options["chunk_size"] = CHUNK
    torch.manual_seed(0)
    return mixers.build(name, D, **options)


CASES = [(label, backend) for label in MIXERS for backend in build(label).backends if backend != "auto"]


def autocast(dtype: torch.dtype) -> torch.autocast:
    """CPU autocast in ``dtype``; skips where this torch's CPU autocast does not take it."""
    with torch.autocast("cpu", dtype=dtype):  # where it does not, it warns and stays off
        supported = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == dtype
    if not supported:
        pytest.skip(f"CPU autocast in {dtype} is not supported by torch {torch.__version__}")
    return torch.autocast("cpu", dtype=dtype)


def gradients(mixer: mixers.Mixer) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in mixer.parameters() if p.grad is not None])


def loss_of(mixer: mixers.Mixer, x: torch.Tensor, backend: str) -> torch.Tensor:
    return mixer(x, backend=backend).float().square().mean()


@pytest.mark.parametrize("dtype_name", HALF)
@pytest.mark.parametrize(("label", "backend"), CASES)
def test_a_few_steps_under_autocast_have_finite_losses_and_gradients_near_float32(label, backend, dtype_name):
    dtype = HALF[dtype_name]
    mixer = build(label)
    optimizer = torch.optim.AdamW(mixer.parameters(), lr=1e-2)
    x = torch.randn(2, LENGTH, D, generator=torch.Generator().manual_seed(0))
    loss_of(mixer, x, backend).backward()
    expected = gradients(mixer)
    for step in range(STEPS):
        optimizer.zero_grad()
        with autocast(dtype):  # the forward under autocast, the backward after it, as the train loop does
            loss = loss_of(mixer, x, backend)
        loss.backward()
        actual = gradients(mixer)
        assert torch.isfinite(loss) and torch.isfinite(actual).all(), f"step {step}: loss {float(loss)}"
        if step == 0:
            error = float((actual - expected).norm() / expected.norm())
            assert error < GRADIENT_TOLERANCE[dtype], f"gradient off float32's by {error:.3f}"
        optimizer.step()
        x = torch.randn(2, LENGTH, D, generator=torch.Generator().manual_seed(step + 1))


@pytest.mark.parametrize(
    ("label", "backend"),
    [
        ("gated_deltanet", "chunk"),
        ("gla", "chunk"),
        ("mamba2", "chunk"),
        ("s6", "scan"),
        ("rglru", "chunk"),
        ("lru", "fft"),
        ("custom_diagonal_learned", "chunk"),
    ],
)
def test_a_backward_called_inside_the_autocast_region_gives_the_same_gradients(label, backend):
    """The hand-written backwards run with autocast off, as their forwards did (torch's own backwards ignore it)."""
    results = []
    for inside in (False, True):
        mixer = build(label)
        with autocast(torch.bfloat16):
            loss = loss_of(mixer, torch.randn(2, LENGTH, D, generator=torch.Generator().manual_seed(0)), backend)
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        results.append(gradients(mixer))
    assert torch.equal(*results)


def test_every_hand_written_autograd_function_follows_autocast():
    for package in (seqdyn.core, seqdyn.layers, seqdyn.mixers):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
    functions, unvisited = [], [torch.autograd.Function]
    while unvisited:
        for subclass in unvisited.pop().__subclasses__():
            unvisited.append(subclass)
            if subclass.__module__.startswith("seqdyn."):
                functions.append(subclass)
    assert len(functions) >= 11  # the native kernels are operators, their autocast checked in tests/kernels
    missing = [f"{f.__module__}.{f.__qualname__}" for f in functions if not getattr(f, "follows_autocast", False)]
    assert not missing, f"decorate with seqdyn.core.precision.float32_under_autocast: {missing}"


def test_hand_written_functions_run_on_the_meta_device_where_autocast_does_not_exist():
    """Config checks build models on the meta device, which autocast does not know: the hand-written functions
    must not ask autocast about it."""
    from seqdyn.layers.conv import ShortConv
    from seqdyn.layers.norms import l2_normalize, rms_norm

    with torch.device("meta"):
        x = torch.empty(2, 8, 32)
        outputs = [ShortConv(32, 4)(x)[0], rms_norm(x, torch.ones(32), 1e-5, gate=x), l2_normalize(x)]
    assert all(out.shape[:2] == (2, 8) and out.device.type == "meta" for out in outputs)
