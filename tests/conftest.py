"""Shared fixtures: one test suite runs against every backend that can run here."""

from __future__ import annotations

import pytest

from pybpf.testing import KERNEL_SKIP_REASON, kernel_available


@pytest.fixture
def kernel():
    if not kernel_available():
        pytest.skip(KERNEL_SKIP_REASON)
    from pybpf import system

    return system("kernel")


@pytest.fixture
def emulated():
    from pybpf import system

    return system("emulated")


@pytest.fixture(params=["kernel", "emulated"])
def backend(request):
    """Each backend in turn: the conformance suite runs against both."""
    if request.param == "kernel":
        return request.getfixturevalue("kernel")
    return request.getfixturevalue("emulated")
