"""The mixer zoo: one file per mixer, its only definition, registered by file name.

    seqdyn.mixers.names()                      -> ["deltanet", "gla", "mamba2", ...]
    seqdyn.mixers.build("mamba2", 256, heads=4) -> a Mixer mapping [B, T, 256] -> [B, T, 256]
    seqdyn.mixers.describe("custom").text()    -> its equations and what each option means (`seqdyn mixers custom`)

"Where is Mamba-2 defined?" — in ``seqdyn/mixers/mamba2.py``.

A mixer of your own (docs/writing-a-mixer.md) needs no file in the package: every function here that takes a
name also takes an import path ``"my_package.my_module:MyMixer"`` (as does ``mixer:`` in a config, in every
process of a sweep), and ``register(MyMixer)`` adds a name in this process only.  ``check(MyMixer)`` runs the
checks every built-in mixer passes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import lru_cache
from typing import Any

from seqdyn.core.names import did_you_mean
from seqdyn.mixers._docs import MixerDoc, OptionDoc
from seqdyn.mixers._docs import describe as describe_class
from seqdyn.mixers._lti import LTIMixer
from seqdyn.mixers.base import CoefficientMixer, Mixer, MixerState
from seqdyn.mixers.checks import CheckReport, check

__all__ = [
    "CheckReport",
    "CoefficientMixer",
    "LTIMixer",
    "Mixer",
    "MixerDoc",
    "MixerState",
    "OptionDoc",
    "build",
    "check",
    "describe",
    "get",
    "is_import_path",
    "known_here_only",
    "names",
    "options",
    "register",
]

_NOT_MIXERS = {"base", "checks"}
#: the mixers registered from code in this process (:func:`register`), by name
_REGISTERED: dict[str, type[Mixer]] = {}
#: what the errors say of a name that another process cannot see
IN_THIS_PROCESS_ONLY = (
    "a name added by seqdyn.mixers.register is known only in the process that registered it, "
    "not in sweep workers or later commands: use its import path there"
)


@lru_cache(maxsize=None)
def _module_names() -> tuple[str, ...]:
    return tuple(
        sorted(
            m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name not in _NOT_MIXERS
        )
    )


def names() -> list[str]:
    """The registered mixer names, sorted: the built-in ones and those :func:`register` added in this process."""
    return sorted({*_module_names(), *_REGISTERED})


def known_here_only(name: str) -> bool:
    """Whether ``name`` was added by :func:`register`: other processes (sweep workers, later commands) do not
    know it, while they find built-in names and import paths."""
    return name in _REGISTERED


def is_import_path(name: str) -> bool:
    """Whether ``name`` names a mixer class by its import path, ``"module:Class"``."""
    return ":" in name


def get(name: str) -> type[Mixer]:
    """The mixer class of ``name``: a built-in name (its file ``seqdyn/mixers/<name>.py`` defines ``MIXER``), a
    name :func:`register` added, or an import path ``"my_package.my_module:MyMixer"``."""
    if is_import_path(name):
        return _imported(name)
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _module_names():
        module, _, attribute = name.rpartition(".")
        hint = f" (did you mean {module}:{attribute}?)" if module else ""
        raise ValueError(
            f"mixer: unknown name {name!r}{did_you_mean(name, names())}; known mixers: "
            f"{', '.join(names())}, or an import path module:Class{hint}; {IN_THIS_PROCESS_ONLY}"
        )
    return importlib.import_module(f"seqdyn.mixers.{name}").MIXER


def _imported(path: str) -> type[Mixer]:
    """The class at import path ``"module:Class"`` (``Class`` may be dotted: ``Outer.Inner``)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"mixer: {path!r} is not an import path; write module:Class (my_package.my_module:MyMixer)")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"mixer: cannot import {path!r}: {error} (is its folder on sys.path? e.g. PYTHONPATH=.)"
        ) from None
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ValueError(f"mixer: cannot import {path!r}: module {module_name!r} has no {attribute!r}")
        found = getattr(found, part)
    return _checked_class(found, repr(path))


def _checked_class(cls: Any, what: str) -> type[Mixer]:
    if not (isinstance(cls, type) and issubclass(cls, Mixer)):
        raise ValueError(f"mixer: {what} is not a Mixer class (a subclass of seqdyn.mixers.Mixer or CoefficientMixer)")
    return cls


def register(cls: type[Mixer] | None = None, *, name: str | None = None):
    """Register mixer class ``cls`` under ``name`` (default: its ``name`` attribute) in this process, so that
    :func:`build` and ``mixer:`` in a config find it; ``@register`` and ``@register(name=...)`` decorate a class.
    Returns the class.  A built-in name, or a name another class holds, is an error.  Only this process knows the
    name: sweep workers and later commands do not; an import path ``"module:Class"`` works everywhere."""
    if cls is None:
        return lambda klass: register(klass, name=name)
    cls = _checked_class(cls, getattr(cls, "__qualname__", repr(cls)))
    name = name or cls.name
    if not isinstance(name, str) or not name or is_import_path(name):
        raise ValueError(
            f"register: {cls.__qualname__} needs a name without ':'; set `name = \"my_mixer\"` on the "
            f'class or call register({cls.__qualname__}, name="my_mixer"), got {name!r}'
        )
    if name in _module_names():
        raise ValueError(
            f"register: {name!r} is a built-in mixer (seqdyn/mixers/{name}.py); register "
            f"{cls.__qualname__} under another name: register({cls.__qualname__}, name=...)"
        )
    held = _REGISTERED.get(name)
    if held is not None and (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(
            f"register: {name!r} is already {held.__module__}.{held.__qualname__}; register "
            f"{cls.__qualname__} under another name"
        )
    _REGISTERED[name] = cls  # the same class defined again (a notebook cell run twice) replaces the old one
    return cls


def options(name: str) -> dict[str, Any]:
    """The options of mixer ``name`` with their defaults (``d_model`` excluded)."""
    signature = inspect.signature(get(name).__init__)
    return {
        p.name: p.default
        for p in list(signature.parameters.values())[2:]
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


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
        raise ValueError(
            f"{name}: unknown option(s) {unknown}{did_you_mean(unknown, allowed)}; allowed: "
            + ", ".join(f"{k}={v!r}" for k, v in allowed.items())
        )
    return cls(d_model, **opts)
