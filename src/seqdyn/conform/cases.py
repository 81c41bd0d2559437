"""The cases a conformance sweep runs: one problem shape, its decays and initial state, and the dtype it is computed
in — with the smaller cases a failing one shrinks to."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

#: the dtypes a sweep may compute in, by name
DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: the decays a case may draw: typical (log-decays in [−0.5, 0]), none (g = 0, a plain delta rule) and extreme
#: (g down to −30 per step: a state forgotten within a step; chunked forms that divide decays overflow there)
DECAYS = ("typical", "none", "extreme")


@dataclass(frozen=True)
class Case:
    """One problem: ``batch`` sequences of ``length`` steps, ``heads`` value heads served by ``key_heads`` query/key
    heads, key and value widths (value width 0: a scan of channels with a state of N = ``key_dim`` each), an initial
    state or none, a kind of decay (:data:`DECAYS`), in ``dtype``; ``documents`` > 1: one row of ``length`` steps
    packed with that many documents of unequal lengths (:meth:`offsets`), each from its own initial state."""

    batch: int
    length: int
    heads: int
    key_dim: int
    value_dim: int
    key_heads: int | None = None  # None: as many as the value heads
    initial_state: bool = False
    decay: str = "typical"
    dtype: str = "float32"
    documents: int = 1

    def __post_init__(self) -> None:
        if self.documents > 1 and (self.batch != 1 or self.documents > self.length):
            raise ValueError(f"documents: {self.documents} packed documents need one row of at least as many steps")

    @property
    def offsets(self) -> tuple[int, ...]:
        """Where each packed document starts, then the row's end (``cu_seqlens``): document i of the n is about
        ``2i + 1`` parts of ``n²`` long (uneven, so that boundaries fall inside chunks and across them), ≥ 1 step."""
        n = self.documents
        ends = [max(i + 1, (self.length * (i + 1) ** 2) // n**2) for i in range(n)]
        return (0, *ends[:-1], self.length)

    @property
    def groups(self) -> int:
        return self.heads if self.key_heads is None else self.key_heads

    @property
    def size(self) -> int:
        """What a failing case is shrunk to make smaller: the elements of its inputs."""
        return self.batch * self.length * (2 * self.groups * self.key_dim + self.heads * (self.value_dim + 2))

    def label(self) -> str:
        grouped = f", {self.groups} key heads" if self.key_heads is not None else ""
        widths = f"K={self.key_dim} V={self.value_dim}" if self.value_dim else f"N={self.key_dim}"
        packed = f" ({self.documents} documents packed)" if self.documents > 1 else ""
        return (
            f"B={self.batch} T={self.length}{packed} H={self.heads}{grouped} {widths}, "
            f"{'initial state' if self.initial_state else 'zero state'}, {self.decay} decay, {self.dtype}"
        )

    def smaller(self) -> list[Case]:
        """The cases one step smaller than this one, each along one axis (what :func:`minimized` tries)."""
        steps = [
            replace(self, batch=1) if self.batch > 1 else None,
            replace(self, length=self.length // 2) if self.length // 2 >= self.documents else None,
            replace(self, length=self.length - 1) if self.length > self.documents else None,
            replace(self, heads=self.groups, key_heads=None) if self.key_heads is not None else None,
            replace(self, heads=1) if self.heads > 1 and self.key_heads is None else None,
            replace(self, key_dim=self.key_dim // 2) if self.key_dim > 1 else None,
            replace(self, value_dim=self.value_dim // 2) if self.value_dim > 1 else None,
            replace(self, initial_state=False) if self.initial_state else None,
            replace(self, decay="typical") if self.decay != "typical" else None,
            replace(self, documents=self.documents - 1) if self.documents > 1 else None,
        ]
        return [case for case in steps if case is not None]


def sweep(quick: bool = False, dtypes: tuple[str, ...] = ("float32", "bfloat16")) -> list[Case]:
    """The sweep: odd lengths and lengths around the chunk boundaries (63, 64, 65, 127, 129), head widths 16–256,
    grouped heads, initial states, every decay and packed rows (documents ending inside a chunk and across one), in
    each of ``dtypes``; ``quick``: a dozen cases per dtype."""
    lengths = (1, 7, 64, 65) if quick else (1, 2, 7, 31, 63, 64, 65, 127, 129)
    widths = ((16, 16), (64, 64)) if quick else ((16, 16), (32, 64), (64, 64), (128, 128), (256, 256))
    cases = []
    for dtype in dtypes:
        cases += [Case(2, length, 2, 32, 32, dtype=dtype) for length in lengths]
        cases += [Case(1, 33, 2, key, value, dtype=dtype) for key, value in widths]
        cases += [Case(1, 65, 4, 32, 32, initial_state=True, decay=decay, dtype=dtype) for decay in DECAYS]
        cases.append(Case(2, 65, 4, 32, 16, key_heads=2, dtype=dtype))
        cases.append(Case(1, 65, 2, 32, 32, initial_state=True, dtype=dtype, documents=3))
        if not quick:
            cases.append(Case(1, 130, 2, 32, 32, dtype=dtype, documents=4))
            cases.append(Case(1, 130, 4, 32, 16, key_heads=2, initial_state=True, dtype=dtype, documents=5))
    return cases
