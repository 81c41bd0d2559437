"""The backends of the coefficient-dynamics operator, one module each.

Every module exposes ``NAME``, ``unsupported(problem) -> reason | None``, ``linear(problem, want_state)`` for the
identity readout and, where it can, ``nonlinear(problem, want_state)`` for the other readouts.  Tests loop over
:data:`REGISTRY`.
"""

from seqdyn.core.backends import chunk, quadratic, recurrent, scan

#: name -> backend module: the reference first, then the recurrence, the chunked form and the scan.
REGISTRY = {module.NAME: module for module in (quadratic, recurrent, chunk, scan)}

__all__ = ["REGISTRY"]
