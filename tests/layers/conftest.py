"""The ``path`` fixture of the tests of layers with a native kernel and a torch definition (see
:func:`tests.layers.helpers.native_paths`)."""

from __future__ import annotations

import pytest


@pytest.fixture
def path(request, monkeypatch):
    """Run the test on the native kernel (``SEQDYN_KERNELS=require``) or on the torch definition
    (``SEQDYN_KERNELS=off``)."""
    monkeypatch.delenv("SEQDYN_COMPILE", raising=False)
    monkeypatch.setenv("SEQDYN_KERNELS", "require" if request.param == "native" else "off")
    return request.param
