"""Where bpf(2) cannot be called (not Linux, unknown architecture), pybpf says so plainly:
probe_bpf answers False and the kernel backend refuses with ENOSYS and the way out."""

from __future__ import annotations

import errno

import pytest

from pybpf.kernel import syscall
from pybpf.kernel import system as kernel_system
from pybpf.uapi import Cmd


@pytest.fixture
def no_bpf(monkeypatch):
    reason = OSError(errno.ENOSYS, "bpf(2) needs Linux; use the emulated backend: "
                                   "pybpf.system('emulated')")
    monkeypatch.setattr(syscall, "UNAVAILABLE", reason)
    monkeypatch.setattr(kernel_system, "UNAVAILABLE", reason)
    monkeypatch.setattr(kernel_system, "_bpf_allowed", False)
    return reason


def test_probe_bpf_answers_false_without_raising(no_bpf):
    assert syscall.probe_bpf() is False


def test_bpf_call_raises_the_reason(no_bpf):
    with pytest.raises(OSError) as info:
        syscall.bpf(Cmd.MAP_CREATE, syscall.MapCreateAttr())
    assert info.value.errno == errno.ENOSYS and "emulated" in str(info.value)


def test_kernel_system_refuses_at_construction(no_bpf):
    with pytest.raises(OSError) as info:
        kernel_system.KernelSystem()
    assert info.value is no_bpf
