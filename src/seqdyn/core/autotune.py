"""What ``backend="auto"`` chooses: the fastest exact backend, measured once per problem shape and cached.

Which backend is fastest depends on the whole problem — batch, length, heads, key and value widths, the
parameterization, the device, torch's thread count — and the cost of each backend is not a simple function of
them (a per-channel recurrence with 64 one-element states scans 16× faster than it materializes; a head of
K = V = 64 chunks faster than it scans).  So ``auto`` does what Triton's autotuner does: the first time it sees a
problem *shape* (:func:`shape_key`) it runs every candidate backend on the problem itself — forward and backward
on detached copies of its inputs when the call records gradients, the forward alone otherwise — keeps the fastest,
and caches the choice in memory and in a JSON file per machine (:func:`cache_path`).  Later calls of that shape
read the cache: a dict lookup.  A cost model (the operator's) orders the candidates, drops the ones that cannot be
fastest (the step-by-step ``recurrent`` backend on long sequences, materialized coefficients beyond memory) and
decides alone where nothing may be timed: while ``torch.compile`` traces or a CUDA graph captures, or with
``SEQDYN_AUTOTUNE=0``.

Guarantees: for a given cache the choice is deterministic (no timing happens for a cached shape); a cache written
on another machine, under another torch version or thread count is not read (its file has another name and its
fingerprint is checked); every backend computes the same outputs within its documented agreement, so the choice
changes timings, never results beyond that.

Settings (environment): ``SEQDYN_AUTOTUNE`` is ``1`` (default: measure, keep the choices in a file), ``memory``
(measure, keep them for this process only) or ``0`` (measure nothing: the cost model decides).  The file lies in
``$SEQDYN_AUTOTUNE_CACHE``, by default ``$SEQDYN_CACHE/backends`` (``~/.cache/seqdyn/backends``, beside the native
kernels).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seqdyn.core import stacking

__all__ = [
    "BackendChoice",
    "BackendFailed",
    "BackendKey",
    "cache_path",
    "choose",
    "clear_cache",
    "elapsed_seconds",
    "fingerprint",
    "is_out_of_memory",
    "setting",
    "tuning_enabled",
]

#: timed rounds over the candidates after their warm-up (the fastest call counts)
REPEATS = 3
#: after the first timed round, a candidate this many times slower than the fastest is not timed again
HOPELESS = 3.0
#: a candidate whose warm-up alone took this many times the fastest timed call is not timed at all (a warm-up
#: carries one-time costs — allocation, lazy set-up — of up to ~4× at small sizes, so a slow warm-up below this is
#: timed once before it is judged)
HOPELESS_WARMUP = 10.0
#: a close call: the runner-up within this factor of the fastest after ``REPEATS`` rounds ...
CLOSE = 1.25
#: ... is timed for up to this many rounds in all (the candidates within ``CLOSE``), each fastest call counting
CLOSE_REPEATS = 9
#: cache file format; a file of another version is not read (2: structured keys, :class:`BackendKey`)
CACHE_VERSION = 2


@dataclass(frozen=True)
class BackendKey:
    """Everything but the data that the speed of a problem depends on: the cache key of a choice (hashable).

    Attributes:
        computes: what computes — ``"operator"``, or a module's class path (``seqdyn.mixers.mamba2.Mamba2``).
        options: ``(name, value)`` pairs of what fixes its work besides the shapes: every constructor option a module
            keeps (:func:`module_options`), or the operator problem's combination.
        shape: ``(name, size)`` pairs of the sizes (``B``, ``T``, ``D``; packed sequences by size class).
        dtype: the input's dtype.
        mode: ``"train"`` (forward and backward) or ``"forward"``.
    """

    computes: str
    options: tuple[tuple[str, Any], ...] = ()
    shape: tuple[tuple[str, int], ...] = ()
    dtype: str = ""
    mode: str = "forward"

    def text(self) -> str:
        """The key as canonical JSON (sorted keys): the cache file's key, equal for equal keys (made once per key
        object; the operator and the mixers keep their keys, so a cached choice makes none)."""
        if "_text" not in self.__dict__:
            described = {
                "computes": self.computes,
                "options": dict(self.options),
                "shape": dict(self.shape),
                "dtype": self.dtype,
                "mode": self.mode,
            }
            object.__setattr__(self, "_text", json.dumps(described, sort_keys=True, default=str))
        return self.__dict__["_text"]


def module_options(module: torch.nn.Module) -> tuple[tuple[str, Any], ...]:
    """Every option a module and its submodules keep, as ``(name, value)`` pairs: per submodule (by its name in
    ``module``), its class and its public attributes of plain values (numbers, strings, booleans, ``None`` and
    tuples or lists of them), and the shape and dtype of every parameter and buffer.  Two modules built with
    different options (another width, a gate, a convolution, a floor on the step) differ here."""
    options: list[tuple[str, Any]] = []
    for prefix, sub in module.named_modules():
        at = f"{prefix}." if prefix else ""
        options.append((f"{at}class", f"{type(sub).__module__}.{type(sub).__qualname__}"))
        options.extend(
            (f"{at}{name}", tuple(value) if isinstance(value, list) else value)
            for name, value in vars(sub).items()
            if not name.startswith("_") and name != "training" and _plain(value)
        )
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        options.append((f"{name}:tensor", f"{list(tensor.shape)} {tensor.dtype}"))
    return tuple(options)


def _plain(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain(item) for item in value)
    return value is None or isinstance(value, (bool, int, float, str))


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says the device ran out of memory (CUDA's ``OutOfMemoryError``, the CPU allocator's
    ``RuntimeError``, Python's ``MemoryError``): the one failure ``auto`` skips a candidate for."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    message = str(error).lower()
    return isinstance(error, RuntimeError) and ("out of memory" in message or "can't allocate memory" in message)


class BackendFailed(RuntimeError):
    """A backend raised (other than out of memory) while ``auto`` timed it: a bug, named with the backend."""


class BackendChoice(str):
    """A backend name (it compares and prints as the name) that says why it was chosen.

    Attributes:
        why: one sentence: what decided and, where measured, every candidate's time.
        source: ``"measured"`` (timed now), ``"cache"`` (timed earlier, read back), ``"cost model"``, ``"only"``
            (the one backend that can compute the problem) or ``"asked"`` (not ``auto``).
        times_ms: the candidates' measured times in milliseconds, fastest first (empty unless measured).
    """

    why: str
    source: str
    times_ms: dict[str, float]

    def __new__(cls, name: str, why: str = "", source: str = "", times_ms: dict[str, float] | None = None):
        choice = super().__new__(cls, name)
        choice.why, choice.source, choice.times_ms = why, source, dict(times_ms or {})
        return choice

    @classmethod
    def asked(cls, name: str) -> BackendChoice:
        """A backend named by the caller (not ``auto``)."""
        return cls(name, "asked for by name", "asked")

    def __repr__(self) -> str:
        return f"BackendChoice({str(self)!r}, why={self.why!r})"

    def __reduce__(self):  # pickles (Ray, multiprocessing) as the same choice
        return BackendChoice, (str(self), self.why, self.source, self.times_ms)


#: the values of ``SEQDYN_AUTOTUNE``
SETTINGS = ("1", "memory", "0")


def setting() -> str:
    """``SEQDYN_AUTOTUNE``: ``1`` (measure, cache in a file), ``memory`` (measure, cache in memory) or ``0``."""
    chosen = os.environ.get("SEQDYN_AUTOTUNE", "1").strip().lower() or "1"
    if chosen not in SETTINGS:
        raise ValueError(f"SEQDYN_AUTOTUNE: expected one of {', '.join(SETTINGS)}, got {chosen!r}")
    return chosen


def tuning_enabled() -> bool:
    """Whether ``auto`` may time backends (``SEQDYN_AUTOTUNE`` is not ``0``)."""
    return setting() != "0"


def can_time_now(device: torch.device) -> bool:
    """Whether timing code is allowed here: not while ``torch.compile`` traces or a CUDA graph captures, not on
    the ``meta`` device (no data), not for stacked runs (:mod:`seqdyn.core.stacking`: ``vmap`` cannot time), and
    not where measuring is turned off."""
    if not tuning_enabled() or device.type == "meta" or stacking.runs_stacked():
        return False
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    return not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())


@functools.cache
def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return _cpu_model()
    return device.type


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(device: torch.device) -> dict[str, Any]:
    """What a cached choice depends on besides the problem: the machine, the device, torch and its threads."""
    from seqdyn.kernels import build

    return {
        "version": CACHE_VERSION,
        "torch": torch.__version__,
        "device": device.type,
        "device_name": _device_name(device),
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "native_kernels": build.mode(),
    }


def cache_dir() -> Path | None:
    """The folder of the cache files (``None`` with ``SEQDYN_AUTOTUNE=memory``: no file)."""
    if setting() == "memory":
        return None
    configured = os.environ.get("SEQDYN_AUTOTUNE_CACHE")
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("SEQDYN_CACHE", Path.home() / ".cache" / "seqdyn")).expanduser() / "backends"


def cache_path(device: torch.device) -> Path | None:
    """The cache file of this machine, device, torch version and thread count (``None``: memory only)."""
    folder = cache_dir()
    if folder is None:
        return None
    described = json.dumps(fingerprint(device), sort_keys=True)
    return folder / f"backends-{hashlib.sha256(described.encode()).hexdigest()[:16]}.json"


#: cache file path (or "memory:<fingerprint>") -> {shape key -> {"backend": name, "times_ms": {...}}}
_CACHES: dict[str, dict[str, dict]] = {}


#: what :func:`_entries` depends on, cheap to read on every call -> its result (the fingerprint is not)
_SETTINGS_SEEN: dict[tuple, tuple[dict[str, dict], Path | None]] = {}
_ENVIRONMENT = ("SEQDYN_AUTOTUNE", "SEQDYN_AUTOTUNE_CACHE", "SEQDYN_CACHE", "SEQDYN_KERNELS", "SEQDYN_COMPILE")


def _entries(device: torch.device) -> tuple[dict[str, dict], Path | None]:
    """The choices of ``device`` in this setting (loaded from the cache file once) and the file."""
    seen = (device, torch.get_num_threads(), torch.__version__, *(os.environ.get(name) for name in _ENVIRONMENT))
    if seen not in _SETTINGS_SEEN:
        _SETTINGS_SEEN[seen] = _load(device)
    return _SETTINGS_SEEN[seen]


def _load(device: torch.device) -> tuple[dict[str, dict], Path | None]:
    path = cache_path(device)
    name = str(path) if path is not None else f"memory:{json.dumps(fingerprint(device), sort_keys=True)}"
    if name not in _CACHES:
        _CACHES[name] = _read(path, fingerprint(device)) if path is not None else {}
    return _CACHES[name], path


def _read(path: Path, expected: dict[str, Any]) -> dict[str, dict]:
    """The choices of a cache file, or none when it is absent, unreadable or of another fingerprint."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("fingerprint") != expected or not isinstance(data.get("choices"), dict):
        return {}
    return {
        key: entry
        for key, entry in data["choices"].items()
        if isinstance(entry, dict) and isinstance(entry.get("backend"), str)
    }


def _write(path: Path, device: torch.device, entries: dict[str, dict]) -> None:
    """Merge ``entries`` into the file (other processes may have added theirs) and replace it atomically."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        merged = {**_read(path, fingerprint(device)), **entries}
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(
            json.dumps({"fingerprint": fingerprint(device), "choices": merged}, indent=1, sort_keys=True)
        )
        os.replace(temporary, path)
    except OSError:  # a read-only home: the choice stays in memory
        pass


def clear_cache(device: torch.device | None = None, files: bool = False) -> None:
    """Forget the choices held in memory (every device, or ``device``'s); ``files=True`` also deletes the file."""
    _SETTINGS_SEEN.clear()
    _HITS.clear()
    if device is None:
        _CACHES.clear()
        return
    entries, path = _entries(device)
    entries.clear()
    if files and path is not None and path.exists():
        path.unlink()


def cached(key: BackendKey, device: torch.device) -> dict | None:
    """The cached entry of ``key`` on ``device``, if any."""
    return _entries(device)[0].get(key.text())


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def elapsed_seconds(call: Callable[[], object], device: torch.device) -> float:
    """Wall time of ``call()``, with the device synchronized before and after (CUDA runs asynchronously)."""
    _synchronize(device)
    start = time.perf_counter()
    call()
    _synchronize(device)
    return time.perf_counter() - start


def measure(candidates: Sequence[str], trial: Callable[[str], None], device: torch.device) -> dict[str, float]:
    """Milliseconds of ``trial(name)`` per candidate, fastest first.  In the order given (the likeliest first), a
    warm-up call each (a first call may load a kernel or allocate: it is not counted), then one timed call — unless
    the warm-up already took ``HOPELESS_WARMUP`` × the fastest timed call so far: a first call is never much faster
    than a later one, so that candidate cannot win (its warm-up is reported).  Then ``REPEATS − 1`` more rounds over the
    candidates within ``HOPELESS`` × the fastest, the fastest call counting; where the runner-up is still within
    ``CLOSE`` × the fastest (the choice could go either way on one noisy call), more rounds over the candidates
    within ``CLOSE``, up to ``CLOSE_REPEATS`` in all or until the runner-up falls behind.  A candidate that runs out
    of memory is dropped; any other exception is raised as :class:`BackendFailed`, naming the candidate."""
    times: dict[str, float] = {}
    for name in candidates:
        try:
            warm = elapsed_seconds(lambda: trial(name), device)
        except Exception as error:
            if is_out_of_memory(error):
                continue
            raise BackendFailed(
                f"backend {name!r} raised while 'auto' timed it ({type(error).__name__}: {error}); "
                f"call it with backend={name!r} to see the error alone"
            ) from error
        fastest = min(times.values(), default=math.inf)
        times[name] = warm if warm > HOPELESS_WARMUP * fastest else elapsed_seconds(lambda: trial(name), device)
    for timed_round in range(2, max(REPEATS, CLOSE_REPEATS) + 1):
        fastest = min(times.values(), default=math.inf)
        within = HOPELESS if timed_round <= REPEATS else CLOSE
        contenders = [name for name, seconds in times.items() if seconds <= within * fastest]
        if len(contenders) < 2:
            break
        for name in contenders:
            times[name] = min(times[name], elapsed_seconds(lambda: trial(name), device))
    return {name: seconds * 1e3 for name, seconds in sorted(times.items(), key=lambda item: item[1])}


def _described(times_ms: dict[str, float]) -> str:
    return " < ".join(f"{name} {ms:.3g} ms" for name, ms in times_ms.items())


#: (the choices' dict, key text) -> the choice a cached entry gave: a cache hit is two dict lookups
_HITS: dict[tuple[int, str], BackendChoice] = {}
#: at most this many remembered hits (a padded batch has a key per shape)
HITS_KEPT = 4096


def _where(path: Path | None) -> str:
    """Where the choices are kept, in words: the cache file, or this process's memory."""
    return str(path) if path is not None else "this process's memory"


def _cached_choice(
    entries: dict[str, dict], key: str, path: Path | None, valid: Callable[[str], bool], shape: Callable[[], str]
) -> BackendChoice | None:
    """The choice the cache holds for ``key`` (remembered in ``_HITS``), or None where it holds none that is valid."""
    entry = entries.get(key)
    if entry is None or not valid(entry["backend"]):
        return None
    where = _where(path)
    times = dict(sorted(entry.get("times_ms", {}).items(), key=lambda item: item[1]))
    if len(_HITS) >= HITS_KEPT:
        _HITS.clear()
    _HITS[id(entries), key] = hit = BackendChoice(
        entry["backend"], f"cached in {where}: measured {_described(times)} for {shape()}", "cache", times
    )
    return hit


def _stacked_choice(plan: Callable[[], tuple[list[str], str, str]]) -> BackendChoice:
    """For stacked runs, where nothing can be timed under ``vmap``: the cost model's choice among the candidates
    that stack (the cached choices were made among every backend, for one run at a time)."""
    candidates, modelled, reason = plan()
    chosen = modelled if modelled in candidates else candidates[0]
    return BackendChoice(chosen, f"cost model (stacked runs: nothing timed): {reason}", "cost model")


def choose(
    key: BackendKey,
    device: torch.device,
    plan: Callable[[], tuple[list[str], str, str]],
    trial: Callable[[str], None],
    shape: Callable[[], str],
    valid: Callable[[str], bool],
) -> BackendChoice:
    """The backend for the problem of shape ``key``: cached, else measured (and cached), else the cost model's.

    Args:
        key: everything but the data that the speed depends on (:class:`BackendKey`).
        plan: ``() -> (candidates, modelled, reason)``, called on a cache miss only: the backends that can compute
            the problem and may be fastest (the likeliest first), the cost model's choice and why.
        trial: runs the problem once with a backend (forward, or forward and backward).
        shape: ``() -> the problem in words``, for the explanation (called where one is made).
        valid: whether a backend can compute the problem (a cached name that cannot — a file edited by hand — is
            a cache miss).
    """
    if stacking.runs_stacked():
        return _stacked_choice(plan)
    entries, path = _entries(device)
    key = key.text()
    hit = _HITS.get((id(entries), key)) or _cached_choice(entries, key, path, valid, shape)
    if hit is not None:
        return hit
    where = _where(path)
    shape = shape()
    candidates, modelled, reason = plan()
    if len(candidates) == 1:
        return BackendChoice(candidates[0], f"the only candidate for {shape}: {reason}", "only")
    if not can_time_now(device):
        return BackendChoice(modelled, f"cost model (nothing timed here): {reason}", "cost model")
    times = measure(candidates, trial, device)
    if not times:
        return BackendChoice(modelled, f"cost model (every timed candidate failed): {reason}", "cost model")
    times = {name: round(ms, 4) for name, ms in times.items()}
    winner = next(iter(times))
    entries[key] = {"backend": winner, "times_ms": times}
    if path is not None:
        _write(path, device, {key: entries[key]})
    return BackendChoice(winner, f"measured now, cached in {where}: {_described(times)} for {shape}", "measured", times)
