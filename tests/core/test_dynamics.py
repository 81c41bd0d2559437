"""``Dynamics``, the one description every entry point takes: passing it equals passing its keywords."""

from __future__ import annotations

import pytest
import torch

import seqdyn
from seqdyn import Dynamics


def _dynamics(**changes) -> Dynamics:
    gen = torch.Generator().manual_seed(3)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    fields = dict(
        q=rand(2, 7, 3, 4),
        k=rand(2, 7, 1, 4),
        v=rand(2, 7, 3, 2),
        log_decay=-rand(2, 7, 3).abs(),
        householder=torch.rand(2, 7, 3, generator=gen, dtype=torch.float64),
        scale=0.7,
        normalizer="sum",
    )
    fields.update(changes)
    return Dynamics(**fields)


def test_every_entry_point_takes_a_dynamics_as_its_keywords():
    dynamics = _dynamics()
    q, k, v, options = dynamics.q, dynamics.k, dynamics.v, dynamics.options()
    for backend in ("quadratic", "chunk"):
        assert torch.equal(
            seqdyn.coefficient_dynamics(dynamics, backend=backend),
            seqdyn.coefficient_dynamics(q, k, v, backend=backend, **options),
        )
    assert torch.equal(seqdyn.coefficients(dynamics), seqdyn.coefficients(q, k, **options))
    assert seqdyn.select_backend(dynamics) == seqdyn.select_backend(q, k, v, **options)
    assert torch.equal(seqdyn.dsf(dynamics).B, seqdyn.dsf(q, k, v, **options).B)
    token = dynamics.replace(
        q=q[:, 0], k=k[:, 0], v=v[:, 0], log_decay=dynamics.log_decay[:, 0], householder=dynamics.householder[:, 0]
    )
    y, state = seqdyn.coefficient_dynamics_step(token)
    y_keywords, state_keywords = seqdyn.coefficient_dynamics_step(token.q, token.k, token.v, **token.options())
    assert torch.equal(y, y_keywords) and all(torch.equal(a, b) for a, b in zip(state, state_keywords))


@pytest.mark.parametrize("beside", [{"k": torch.zeros(1)}, {"readout": "exp"}, {"scale": 1.0}])
def test_a_dynamics_leaves_no_keyword_beside_it(beside):
    name = next(iter(beside))
    with pytest.raises(ValueError, match=f"{name}: given beside a Dynamics"):
        seqdyn.coefficient_dynamics(_dynamics(), **beside)


def test_a_dynamics_is_frozen_and_replace_knows_its_fields():
    with pytest.raises(AttributeError):
        _dynamics().scale = 2.0
    assert _dynamics().replace(scale=2.0).scale == 2.0
    with pytest.raises(TypeError, match="no field nope"):
        _dynamics().replace(nope=1.0)
