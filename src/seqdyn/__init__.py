"""seqdyn: sequence mixers as dynamical systems.

Attention, linear attention, state space models and gated RNNs compute the same thing: a linear combination of
past values whose coefficients are the outputs of linear dynamics driven by impulses (the keys).  Everything in
seqdyn reduces to one operator, :func:`coefficient_dynamics` (Sieber et al. 2025).

Sub-packages (``layers``, ``mixers``, ``models``, ``tasks``, ``train``, ``analysis``, ``bench``, ``features``) are
imported on first use so that ``import seqdyn`` stays light.

The docstrings cite papers by author and year, most often these three: Sieber et al. 2024, "Understanding the
differences in Foundation Models: Attention, State Space Models, and Recurrent Neural Networks"
(https://arxiv.org/abs/2405.15731); Sieber et al. 2025, "Design Principles for Sequence Models via Coefficient
Dynamics" (https://arxiv.org/abs/2510.09389); Gupta et al. 2022, "Simplifying and Understanding State Space Models
with Diagonal Linear RNNs" (https://arxiv.org/abs/2212.00768).
"""

from importlib import import_module

from seqdyn.core.dsf import DSF, dsf
from seqdyn.core.dynamics import Dynamics
from seqdyn.core.operator import (
    BACKENDS,
    NORMALIZERS,
    coefficient_dynamics,
    coefficient_dynamics_step,
    coefficients,
    select_backend,
)
from seqdyn.core.readouts import READOUTS

__version__ = "0.1.0"

_LAZY_SUBMODULES = ("features", "layers", "mixers", "models", "tasks", "train", "analysis", "bench", "reproduce")

__all__ = [
    "BACKENDS",
    "DSF",
    "Dynamics",
    "NORMALIZERS",
    "READOUTS",
    "coefficient_dynamics",
    "coefficient_dynamics_step",
    "coefficients",
    "dsf",
    "select_backend",
    *_LAZY_SUBMODULES,
]


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        return import_module(f"seqdyn.{name}")
    raise AttributeError(f"module 'seqdyn' has no attribute {name!r}")
