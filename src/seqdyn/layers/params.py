"""Parameter helpers shared by layers, mixers and models: marks on parameters whose initialization comes from
their paper, the checks of width options, and the names of option types in the docs (``seqdyn mixers NAME``,
``seqdyn config schema``)."""

from __future__ import annotations

import types
import typing
from typing import Any

from torch import Tensor


def keep_init(*parameters: Tensor) -> None:
    """Mark parameters whose initialization comes from their paper (Mamba's Δ bias, xLSTM's gate biases, …) so
    that a model-wide initialization (Zoology's normal(0, 0.02)) leaves them alone."""
    for parameter in parameters:
        parameter._no_reinit = True


def is_kept(parameter: Tensor) -> bool:
    """Whether :func:`keep_init` marked ``parameter``."""
    return getattr(parameter, "_no_reinit", False)


def check_positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return value


def check_positive_eps(name: str, value: Any) -> float:
    """A norm's ε, which must be a positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name}: expected a positive ε, got {value!r}")
    return float(value)


def scaled_width(name: str, d_model: int, factor: float) -> int:
    """``round(factor · d_model)``, which must be a positive integer (expansion options)."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
        raise ValueError(f"{name}: expected a positive number, got {factor!r}")
    width = factor * d_model
    if width != int(width) or width < 1:
        raise ValueError(f"{name}: {factor} × d_model={d_model} = {width} is not a positive integer")
    return int(width)


def type_name(annotation: Any) -> str:
    """An annotation as the YAML configs spell it: ``int``, ``float or null``, ``list[str]``; a ``Literal`` is
    named by the type of its values (``str``)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "any"
    if origin is typing.Literal:
        return " or ".join(sorted({type(value).__name__ for value in args}))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(arg) for arg in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(arg) for arg in args)}]"
    return annotation.__name__
