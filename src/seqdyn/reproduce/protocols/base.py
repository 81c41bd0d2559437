"""What every training protocol gives a reproduction, under the same names and one signature.

- ``Budget``, a subclass of :class:`Budget`: how long a run trains and on how much data (the fields every protocol
  has), and what else the protocol fixes per scale;
- a model descriptor, a subclass of :class:`Model`: a model of the paper as the authors ran it;
- ``SMOKE``: the budget of the smoke scale (a whole pipeline in seconds);
- ``PAPER_LRS``: the paper's learning rates;
- ``PLATEAU_WORDS``: what a model scores before it learns the protocol's tasks, in words (the plateau rule's
  description, :class:`~seqdyn.reproduce.claims.Plateau`);
- a sweep builder of the signature :class:`SweepBuilder`: ``(part, models, tasks, seeds, budget, lrs)`` and the
  protocol's own keyword-only axes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from seqdyn.train.config import SweepConfig


@dataclass(frozen=True, kw_only=True)
class Budget:
    """How long and on how much data: ``steps`` (else ``epochs``), the test examples, the batch size and an
    evaluation every ``eval_every`` steps (None: the trainer's default)."""

    steps: int | None = None
    epochs: int | None = None
    test_examples: int
    batch_size: int | None
    eval_every: int | None = None

    def train_options(self, batch_size: int, **options: Any) -> dict[str, Any]:
        """The ``train`` section of a sweep config: ``batch_size``, the protocol's ``options`` (an early stop, a
        backend), the steps (else the epochs) and the evaluation interval where the budget sets one."""
        train = {"batch_size": batch_size, **options}
        train.update({"steps": self.steps} if self.steps else {"epochs": self.epochs})
        if self.eval_every:
            train["eval_every"] = self.eval_every
        return train


@dataclass(frozen=True, kw_only=True)
class Model:
    """A model of a paper as the authors ran it: the seqdyn ``mixer`` and its ``options``, and how the paper names
    it (``label``; the mixer's name where the paper's is the same)."""

    mixer: str
    options: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    @property
    def name(self) -> str:
        """The paper's name of the model."""
        return self.label or self.mixer


class SweepBuilder(Protocol):
    """A protocol's sweep builder: the sweeps (named ``PART-…``) that train ``models`` on ``tasks`` for every seed
    of ``seeds`` within ``budget``, over the learning rates ``lrs`` (None: the protocol's own — the paper's grid, or
    each model's rate); a protocol's further axes (widths, weight decays, lengths) are keyword-only arguments."""

    def __call__(
        self,
        part: str,
        models: Sequence[Any],
        tasks: Sequence[Any] | Mapping[str, Any],
        seeds: Sequence[int],
        budget: Budget,
        lrs: Sequence[float] | None = None,
        **axes: Any,
    ) -> list[SweepConfig]: ...
