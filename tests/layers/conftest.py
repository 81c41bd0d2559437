"""The ``path`` fixture of the tests of layers with a native kernel and a torch definition (see
:func:`tests.layers.helpers.native_paths`)."""

from __future__ import annotations

import pytest


@pytest.fixture
def path(request, monkeypatch):
    """Run the test on the native kernel or, with ``SEQDYN_COMPILE=0``, on the torch definition."""
    monkeypatch.setenv("SEQDYN_COMPILE", "1" if request.param == "native" else "0")
    return request.param
