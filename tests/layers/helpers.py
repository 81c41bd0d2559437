"""The native/torch paths of the tests of layers with a native kernel and a torch definition."""

from __future__ import annotations

import pytest

from seqdyn.core.backends import native


def native_paths(kernel: str) -> tuple[pytest.MarkDecorator, list]:
    """``(needs_kernel, paths)``: a skip mark for machines that cannot build ``kernel``, and the two values of the
    ``path`` fixture — "native" (skipped there) and "torch"."""
    needs_kernel = pytest.mark.skipif(native.library(kernel) is None,
                                      reason=f"no C++ compiler to build the native kernel {kernel}")
    return needs_kernel, [pytest.param("native", marks=needs_kernel), "torch"]
