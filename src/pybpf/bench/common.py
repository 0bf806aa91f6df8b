"""Host-side plumbing several benchmarks share (their output is report.py's): a map fd's
fdinfo, the raw record of a syscall tracepoint, pinning to a CPU and asking where one runs, and
a memory cgroup that a benchmark joins so the memory of its maps is charged where it can read
it."""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Sequence

from . import trigger

MIB = 1048576.0


def getcpu() -> tuple[int, int]:
    """getcpu(2) (glibc's wrapper): (cpu, node) of the caller, as the sample asks."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    cpu, node = ctypes.c_uint(), ctypes.c_uint()
    if libc.getcpu(ctypes.byref(cpu), ctypes.byref(node)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"getcpu: {os.strerror(err)}")
    return cpu.value, node.value


def read_fdinfo(fd: int) -> dict[str, str]:
    """/proc/self/fdinfo/<fd> as a dict (map_type, map_flags, memlock, ...)."""
    out: dict[str, str] = {}
    with open(f"/proc/self/fdinfo/{fd}") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key.strip()] = value.strip()
    return out


def pin_to_cpu(cpu: int) -> None:
    """sched_setaffinity to ``cpu``; a CPU that does not exist leaves the caller where it was
    (map_perf_test ignores the call's result too)."""
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        pass


def sys_enter_record(syscall: str, args: Sequence[int] = ()) -> bytes:
    """The raw record of tracepoint syscalls/sys_enter_<syscall> (trace_event_raw_sys_enter):
    common fields (type, flags, preempt_count, pid), __syscall_nr, args[6]."""
    padded = [a & 0xFFFFFFFFFFFFFFFF for a in args] + [0] * (6 - len(args))
    return struct.pack("=HBBii4x6Q", 0, 0, 0, threading.get_native_id(),
                       trigger.X86_64_NR[syscall], *padded)


class MemCgroup:
    """A memory cgroup (v2 or v1) named ``name`` under the memory hierarchy's root, which a
    benchmark joins so that what its maps allocate is charged there."""

    V2_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
    V1_ROOT = "/sys/fs/cgroup/memory"

    def __init__(self, name: str) -> None:
        self.path: str | None = None
        self.current_file = self.peak_file = ""
        self.previous: str | None = None
        self.name = name

    def join(self) -> bool:
        """Create and join the cgroup; False (and nothing done) where that is not possible."""
        for root in self.V2_ROOTS:
            controllers = os.path.join(root, "cgroup.controllers")
            if os.path.exists(controllers) and "memory" in open(controllers).read().split():
                if self._enter(root, "memory.current", "memory.peak"):
                    return True
        if os.path.exists(os.path.join(self.V1_ROOT, "memory.usage_in_bytes")):
            return self._enter(self.V1_ROOT, "memory.usage_in_bytes",
                               "memory.max_usage_in_bytes")
        return False

    def _enter(self, root: str, current: str, peak: str) -> bool:
        path = os.path.join(root, self.name)
        try:
            os.makedirs(path, exist_ok=True)
            self.previous = _own_cgroup(root)
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            return False
        self.path, self.root = path, root
        self.current_file, self.peak_file = current, peak
        self.label = f"cgroup {path}/{current}"
        return True

    def read(self, which: str) -> float | None:
        if self.path is None:
            return None
        try:
            with open(os.path.join(self.path, which)) as f:
                return int(f.read().split()[0]) / MIB
        except (OSError, ValueError):
            return None

    def leave(self) -> None:
        if self.path is None:
            return
        target = os.path.join(self.root, (self.previous or "/").lstrip("/"), "cgroup.procs")
        try:
            with open(target, "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            with open(os.path.join(self.root, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        for _ in range(50):  # the cgroup empties once the producers are reaped
            try:
                os.rmdir(self.path)
                break
            except OSError:
                time.sleep(0.02)
        self.path = None


def _own_cgroup(root: str) -> str | None:
    """This process's cgroup path under the hierarchy mounted at ``root``."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    v1 = root.endswith("/memory")
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (v1 and "memory" in controllers.split(",")) or (not v1 and controllers == ""):
            return path
    return None
