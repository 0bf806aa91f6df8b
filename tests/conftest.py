"""Shared fixtures: one test suite runs against every backend that can run here."""

from __future__ import annotations

import pytest

from pybpf.system import bpf_allowed

_BPF_OK: bool | None = None


def kernel_available() -> bool:
    global _BPF_OK
    if _BPF_OK is None:
        try:
            _BPF_OK = bpf_allowed()
        except Exception:  # no Linux, no ctypes libc, ...
            _BPF_OK = False
    return _BPF_OK


KERNEL_SKIP_REASON = ("bpf(2) is not permitted here (needs Linux with root or CAP_BPF); "
                      "the emulated backend is tested instead")


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
