"""The mixer zoo (DESIGN §4): one file per mixer, its only definition, registered by file name.

    seqdyn.mixers.names()                      -> ["deltanet", "gla", "mamba2", ...]
    seqdyn.mixers.build("mamba2", 256, heads=4) -> a Mixer mapping [B, T, 256] -> [B, T, 256]
    seqdyn.mixers.describe("custom").text()    -> its equations and what each option means (`seqdyn mixers custom`)

"Where is Mamba-2 defined?" — in ``seqdyn/mixers/mamba2.py``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import lru_cache
from typing import Any

from seqdyn.mixers._docs import MixerDoc, OptionDoc
from seqdyn.mixers._docs import describe as describe_class
from seqdyn.mixers._lti import LTIMixer
from seqdyn.mixers.base import CoefficientMixer, Mixer, MixerState

__all__ = ["CoefficientMixer", "LTIMixer", "Mixer", "MixerDoc", "MixerState", "OptionDoc", "build", "describe", "get",
           "names", "options"]

_NOT_MIXERS = {"base"}


@lru_cache(maxsize=None)
def _module_names() -> tuple[str, ...]:
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                        if not m.name.startswith("_") and m.name not in _NOT_MIXERS))


def names() -> list[str]:
    """The registered mixer names, sorted."""
    return list(_module_names())


def get(name: str) -> type[Mixer]:
    """The mixer class registered as ``name`` (its file ``seqdyn/mixers/<name>.py`` defines ``MIXER``)."""
    if name not in _module_names():
        raise ValueError(f"mixer: unknown name {name!r}; known mixers: {', '.join(names())}")
    return importlib.import_module(f"seqdyn.mixers.{name}").MIXER


def options(name: str) -> dict[str, Any]:
    """The options of mixer ``name`` with their defaults (``d_model`` excluded)."""
    signature = inspect.signature(get(name).__init__)
    return {p.name: p.default for p in list(signature.parameters.values())[2:]
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def describe(name: str) -> MixerDoc:
    """Mixer ``name``'s equations (its module docstring) and each option's type, allowed values, default and
    meaning (the ``Args:`` of its class docstring); ``.text()`` is what ``seqdyn mixers NAME`` prints."""
    return describe_class(name, get(name))


def build(name: str, d_model: int, **opts: Any) -> Mixer:
    """Build mixer ``name`` of width ``d_model``; unknown options raise ``ValueError`` listing the allowed ones."""
    cls = get(name)
    allowed = options(name)
    unknown = sorted(set(opts) - set(allowed))
    if unknown:
        raise ValueError(f"{name}: unknown option(s) {unknown}; allowed: "
                         + ", ".join(f"{k}={v!r}" for k, v in allowed.items()))
    return cls(d_model, **opts)
