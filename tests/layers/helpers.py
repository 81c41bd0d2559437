"""The native/torch paths of the tests of layers with a native kernel and a torch definition."""

from __future__ import annotations

import pytest

from seqdyn.kernels import build
from seqdyn.kernels import norm as norm_kernel  # noqa: F401  (registers the kernel with build)


def native_paths(kernel: str) -> tuple[pytest.MarkDecorator, list]:
    """``(needs_kernel, paths)``: a skip mark for machines that cannot build ``kernel``, and the two values of the
    ``path`` fixture — "native" (skipped there) and "torch"."""
    needs_kernel = pytest.mark.skipif(isinstance(build.load(kernel), str),
                                      reason=f"no C++ compiler to build the native kernel {kernel}")
    return needs_kernel, [pytest.param("native", marks=needs_kernel), "torch"]
