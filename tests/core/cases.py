"""Seeded random arguments of the coefficient-dynamics operator for the property tests."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

import seqdyn
from seqdyn.core.backends import REGISTRY
from seqdyn.core.dynamics import Dynamics
from seqdyn.core.problem import prepare

READOUT_NAMES = ("identity", "exp", "softplus", "relu", "sigmoid", "elu1", "square", "tanh_callable")
DECAYS = ("none", "scalar", "diagonal", "scalar_unstable", "diagonal_unstable")
HOUSEHOLDERS = ("none", "keys", "given")
NORMALIZER_NAMES = ("none", "sum", "abs_max1", "tensor")


@dataclass
class Case:
    readout: str
    decay: str
    householder: str
    normalizer: str
    seed: int
    batch: int = 2
    length: int = 9
    heads: int = 2
    key_dim: int = 3
    value_dim: int = 2
    chunk_size: int = 4
    shared: tuple[str, ...] = ()
    with_state: bool = False
    scale: str = "default"
    massless: bool = False
    hard_reset: bool = False
    tensors: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.readout}-{self.decay}-hh_{self.householder}-{self.normalizer}-s{self.seed}"


def all_combinations():
    return itertools.product(READOUT_NAMES, DECAYS, HOUSEHOLDERS, NORMALIZER_NAMES)


def random_case(readout: str, decay: str, householder: str, normalizer: str, seed: int, **overrides) -> Case:
    """A case with shapes drawn from ``seed``: T around chunk boundaries, heads shared at random."""
    gen = torch.Generator().manual_seed(seed)
    pick = lambda options: options[int(torch.randint(len(options), (1,), generator=gen))]  # noqa: E731
    chunk = pick([2, 3, 4, 8])
    shape = dict(
        batch=pick([1, 2]),
        length=pick([1, chunk - 1 if chunk > 1 else 1, chunk + 1, 2 * chunk, 3 * chunk + 2]),
        heads=pick([1, 2, 3]),
        key_dim=pick([2, 3, 4]),
        value_dim=pick([1, 2, 3]),
        chunk_size=chunk,
        shared=tuple(name for name in ("q", "k", "v", "gates") if bool(torch.rand((), generator=gen) < 0.25)),
        with_state=bool(torch.rand((), generator=gen) < 0.5),
        scale=pick(["default", "float", "tensor", "log"]),
    )
    shape.update(overrides)
    return Case(readout, decay, householder, normalizer, seed, **shape)


def build(case: Case, dtype=torch.float64):
    """Leaf tensors (requiring grad) and keyword arguments of ``coefficient_dynamics`` for ``case``."""
    gen = torch.Generator().manual_seed(10_000 + case.seed)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    uniform = lambda *s: torch.rand(*s, generator=gen, dtype=dtype)  # noqa: E731
    b, t, k, v = case.batch, case.length, case.key_dim, case.value_dim
    heads = lambda name: 1 if name in case.shared else case.heads  # noqa: E731
    leaves: dict[str, torch.Tensor] = {}
    positive = case.normalizer == "sum"  # keep Σ_j α_ij away from 0 (relu, identity)
    feature = (lambda x: F.softplus(x) + 0.1) if positive else (lambda x: x)
    leaves["q"] = feature(rand(b, t, heads("q"), k))
    leaves["k"] = feature(rand(b, t, heads("k"), k))
    leaves["v"] = rand(b, t, heads("v"), v)
    if case.massless:  # every third row reads nothing: φ(0) = 0 for relu and square, q·z = 0 for the identity
        leaves["q"][:, ::3] = 0.0
    options: dict = {"readout": torch.tanh if case.readout == "tanh_callable" else case.readout}
    gate_heads = heads("gates")
    if case.decay != "none":
        shape = (b, t, gate_heads) if case.decay.startswith("scalar") else (b, t, gate_heads, k)
        g = -F.softplus(rand(*shape))
        if case.decay.endswith("unstable"):
            g = g + 0.6 * uniform(*shape)  # some steps grow: Principle 6
        if case.hard_reset:  # decay 0: every head and channel in the middle, one channel (or head) near the end
            g[:, t // 2] = float("-inf")
            g[(0, t - 2, 0) + (0,) * (g.dim() - 3)] = float("-inf")
        leaves["log_decay"] = g
    if case.householder != "none":
        leaves["householder"] = 1.5 * uniform(b, t, gate_heads)
        if case.householder == "given":
            leaves["householder_dir"] = F.normalize(rand(b, t, gate_heads, k), dim=-1)
        else:
            leaves["k"] = F.normalize(leaves["k"], dim=-1)
    if case.scale == "float":
        options["scale"] = 0.7
    elif case.scale == "tensor":
        leaves["scale"] = 0.2 + uniform(b, t, gate_heads)
    elif case.scale == "log":
        leaves["log_scale"] = 2 * rand(b, t, gate_heads)
    if case.normalizer == "tensor":
        leaves["normalizer"] = 0.5 + uniform(b, t, gate_heads)
    else:
        options["normalizer"] = case.normalizer
    if case.with_state:
        leaves.update(_state(case, gen, dtype))
    for x in leaves.values():
        x.requires_grad_(True)
    return leaves, options


def _state(case: Case, gen, dtype) -> dict:
    b, h, k, v = case.batch, case.heads, case.key_dim, case.value_dim
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    if case.readout != "identity":
        cached = 1 + int(torch.randint(3, (1,), generator=gen))
        return {"state_keys": 0.5 * rand(b, h, cached, k), "state_values": rand(b, h, cached, v)}
    state = {"state_S": 0.5 * rand(b, h, k, v)}
    if case.normalizer in ("sum", "abs_max1"):
        state["state_z"] = 0.5 * rand(b, h, k).abs() + (1.0 if case.normalizer == "sum" else 0.0)
    return state


def call(leaves: dict, options: dict, backend: str, chunk_size: int = 4, want_state: bool = True):
    """Run the operator on ``leaves`` (state leaves are assembled into ``initial_state``)."""
    inputs = {name: x for name, x in leaves.items() if not name.startswith("state_")}
    state = None
    if "state_S" in leaves:
        state = (leaves["state_S"], leaves["state_z"]) if "state_z" in leaves else leaves["state_S"]
    elif "state_keys" in leaves:
        state = (leaves["state_keys"], leaves["state_values"])
    q, k, v = inputs.pop("q"), inputs.pop("k"), inputs.pop("v")
    return seqdyn.coefficient_dynamics(
        q,
        k,
        v,
        initial_state=state,
        output_final_state=want_state,
        backend=backend,
        chunk_size=chunk_size,
        **inputs,
        **options,
    )


def flatten(output) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    return [t for part in output for t in flatten(part)]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str) -> None:
    """``|actual − expected| ≤ tol · max(1, max|expected|)`` elementwise (NaN-free), with a readable failure."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    actual, expected = actual.detach(), expected.detach()
    scale = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
    error = float((actual - expected).abs().max()) if expected.numel() else 0.0
    assert error <= tol * scale, f"{what}: max error {error:.3e} > {tol:.0e} × {scale:.3g}"


#: readout, decay, Householder and normalizer combinations of the state tests
STATE_COMBOS = [
    ("identity", "diagonal", "none", "none"),
    ("identity", "scalar", "keys", "sum"),
    ("identity", "diagonal_unstable", "given", "abs_max1"),
    ("identity", "none", "none", "tensor"),
    ("exp", "none", "none", "sum"),
    ("exp", "scalar", "none", "sum"),
    ("softplus", "diagonal", "keys", "abs_max1"),
]


def supported(combo, backend: str) -> bool:
    """Whether ``backend`` computes the combination ``combo``."""
    leaves, options = build(random_case(*combo, seed=0, with_state=False))
    q, k, v = leaves.pop("q"), leaves.pop("k"), leaves.pop("v")
    return REGISTRY[backend].unsupported(prepare(Dynamics(q, k, v, **leaves, **options))) is None
