"""The kernel backend leaks no fds, and refusals read as sentences, not ctypes tracebacks."""

from __future__ import annotations

import errno
import json
import os
import struct

import pytest

from pybpf.errors import PERMISSION_HINT, BPFPermissionError
from pybpf.uapi import MapFlags, MapType, ProgType

NOBODY = 65534


def open_fds() -> int:
    """How many fds this process has open (tests that compare counts take no_gc, so no
    finalizer of an earlier test's garbage closes one in between)."""
    return len(os.listdir("/proc/self/fd"))


def test_100k_maps_created_and_closed_leave_fd_count_unchanged(kernel, no_gc):
    before = open_fds()
    for _ in range(100_000):
        kernel.close(kernel.map_create(MapType.ARRAY, 4, 4, 1))
    assert open_fds() == before


def test_failed_creates_and_ops_leave_fd_count_unchanged(kernel, no_gc):
    before = open_fds()
    for _ in range(1000):
        with pytest.raises(OSError):
            kernel.map_create(MapType.LRU_HASH, 4, 4, 4, map_flags=MapFlags.NO_PREALLOC)
    fd = kernel.map_create(MapType.HASH, 4, 4, 4)
    for _ in range(1000):
        with pytest.raises(KeyError):
            kernel.map_lookup_elem(fd, b"\0\0\0\0")
        kernel.close(kernel.map_get_fd_by_id(kernel.map_get_info(fd).id))
    kernel.close(fd)
    assert open_fds() == before


def test_failed_prog_load_and_attach_leave_fd_count_unchanged(kernel, no_gc):
    exit_only = struct.pack("<BBhi", 0x95, 0, 0, 0)  # exit without setting r0: rejected
    ret0 = struct.pack("<BBhi", 0xB7, 0, 0, 0) + exit_only
    socket_prog = kernel.prog_load(ProgType.SOCKET_FILTER, ret0)
    before = open_fds()
    for _ in range(50):
        with pytest.raises(OSError):
            kernel.prog_load(ProgType.SOCKET_FILTER, exit_only)
        with pytest.raises(OSError):  # wrong program type: the perf event is closed again
            kernel.attach_tracepoint(socket_prog, "syscalls", "sys_enter_getpid")
    assert open_fds() == before
    kernel.close(socket_prog)


def _run_as_nobody(call) -> dict:
    """Run ``call()`` in a forked child that dropped root for nobody; return what it saw."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        try:
            os.close(read_end)
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            except OSError as exc:
                result = {"dropped": False, "why": str(exc)}
            else:
                try:
                    call()
                    result = {"dropped": True, "ok": True}
                except Exception as exc:  # anything else is reported, and fails the test
                    result = {"dropped": True, "ok": False,
                              "errno": getattr(exc, "errno", None),
                              "type": type(exc).__name__, "message": str(exc),
                              "is_permission_error": isinstance(exc, BPFPermissionError)}
            os.write(write_end, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    assert data, "the unprivileged child died without reporting"
    return json.loads(data)


def test_unprivileged_create_gives_eperm_with_hint(kernel):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop privileges to nobody in a child")

    # The child uses the parent's KernelSystem: nobody may not be able to read the Python
    # installation to import anything new.
    seen = _run_as_nobody(lambda: kernel.map_create(MapType.LRU_HASH, 4, 8, 16,
                                                    map_name=b"unpriv"))
    if not seen["dropped"]:
        pytest.skip(f"cannot drop privileges here: {seen['why']}")
    if seen["ok"]:
        pytest.skip("unprivileged LRU map creation is allowed on this kernel")
    assert seen["errno"] == errno.EPERM
    assert seen["is_permission_error"]
    assert "map create" in seen["message"] and "lru_hash map" in seen["message"]
    assert PERMISSION_HINT in seen["message"]
    assert "ctypes" not in seen["message"] and "Traceback" not in seen["message"]


def test_unprivileged_kernel_system_refuses_at_construction_with_hint(kernel):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop privileges to nobody in a child")
    from pybpf.kernel import system as kernel_system

    def construct():
        kernel_system._bpf_allowed = False  # the child has not probed yet
        kernel_system.KernelSystem()

    seen = _run_as_nobody(construct)
    if not seen["dropped"]:
        pytest.skip(f"cannot drop privileges here: {seen['why']}")
    if seen["ok"]:
        pytest.skip("unprivileged bpf(2) is allowed on this kernel")
    assert seen["errno"] == errno.EPERM and seen["is_permission_error"]
    assert PERMISSION_HINT in seen["message"]
