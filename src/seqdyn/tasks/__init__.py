"""Task suites: MQAR, MAD, the atomic and higher-order tasks of Gupta et al. 2022, and language modelling.

``build(name, **params)`` returns a :class:`Task`; ``names()`` lists the registered names. Every task generates
``(inputs, targets)`` with ``task.generate(num_examples, seed, split="train")``; see :mod:`seqdyn.tasks.base` for
the layouts, the seed/split convention and the spec a training loop reads (``task.spec``).
"""

from seqdyn.tasks import atomic, listops, lm, mad, mqar, pathfinder  # noqa: F401  (registration)
from seqdyn.tasks.base import IGNORE_INDEX, Param, Task, TaskSpec, build, names, task_class

__all__ = ["IGNORE_INDEX", "Param", "Task", "TaskSpec", "build", "names", "task_class"]
