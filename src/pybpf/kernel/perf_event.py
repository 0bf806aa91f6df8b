"""perf_event_open(2) for tracepoints, and attaching a BPF program to one.

The program is attached the way libbpf does without a link: open a tracepoint perf event
(``PERF_TYPE_TRACEPOINT``, config = the tracepoint id from tracefs, pid -1 / CPU 0: the
program runs on every CPU because it hangs off the tracepoint, not the event), then
``PERF_EVENT_IOC_SET_BPF`` and ``PERF_EVENT_IOC_ENABLE``. Closing the perf event fd detaches
the program.
"""

from __future__ import annotations

import ctypes
import errno
import os

from .syscall import UNAVAILABLE, get_errno, libc_syscall, syscall_number, u16, u32, u64

PERF_TYPE_TRACEPOINT = 2
PERF_SAMPLE_RAW = 1 << 10
PERF_FLAG_FD_CLOEXEC = 1 << 3

# _IO('$', 0) and _IOW('$', 8, __u32) (include/uapi/linux/perf_event.h).
PERF_EVENT_IOC_ENABLE = 0x2400
PERF_EVENT_IOC_SET_BPF = 0x40042408

TRACEFS_ROOTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


class PerfEventAttr(ctypes.Structure):
    """struct perf_event_attr (PERF_ATTR_SIZE_VER8, 136 bytes).

    ``flags`` holds the bitfield word that starts with ``disabled`` (bit 0); unions keep
    their first member's name (``sample_period``, ``wakeup_events``, ``config1``...).
    """

    _fields_ = [
        ("type", u32),
        ("size", u32),
        ("config", u64),
        ("sample_period", u64),
        ("sample_type", u64),
        ("read_format", u64),
        ("flags", u64),
        ("wakeup_events", u32),
        ("bp_type", u32),
        ("config1", u64),
        ("config2", u64),
        ("branch_sample_type", u64),
        ("sample_regs_user", u64),
        ("sample_stack_user", u32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", u64),
        ("aux_watermark", u32),
        ("sample_max_stack", u16),
        ("__reserved_2", u16),
        ("aux_sample_size", u32),
        ("aux_action", u32),
        ("sig_data", u64),
        ("config3", u64),
    ]


def tracepoint_id(category: str, name: str) -> int:
    """The id of tracepoint ``category/name`` from tracefs (events/<category>/<name>/id).

    Raises FileNotFoundError (ENOENT) saying where it looked when there is no such event.
    """
    if "/" in category or "/" in name or not category or not name:
        raise OSError(errno.EINVAL, f"bad tracepoint name {category!r}/{name!r}")
    for root in TRACEFS_ROOTS:
        try:
            with open(os.path.join(root, "events", category, name, "id")) as f:
                return int(f.read())
        except FileNotFoundError:
            continue
    raise FileNotFoundError(
        errno.ENOENT, f"no tracepoint {category}/{name} under "
        f"{' or '.join(r + '/events' for r in TRACEFS_ROOTS)} (is tracefs mounted? "
        "mount -t tracefs tracefs /sys/kernel/tracing; is the name right? see "
        "available_events there)")


def perf_event_open(attr: PerfEventAttr, pid: int, cpu: int, group_fd: int,
                    flags: int) -> int:
    """perf_event_open(2); returns the fd, raises OSError(errno) on failure."""
    if UNAVAILABLE is not None:
        raise UNAVAILABLE
    nr = syscall_number("perf_event_open")
    fd = libc_syscall(nr, ctypes.byref(attr), pid, cpu, group_fd, ctypes.c_ulong(flags))
    if fd < 0:
        err = get_errno()
        raise OSError(err, f"perf_event_open: {os.strerror(err)}")
    return fd


def open_tracepoint(tp_id: int) -> int:
    """A perf event fd on tracepoint ``tp_id`` (all CPUs see the attached program)."""
    attr = PerfEventAttr(type=PERF_TYPE_TRACEPOINT, size=ctypes.sizeof(PerfEventAttr),
                         config=tp_id, sample_period=1, sample_type=PERF_SAMPLE_RAW,
                         wakeup_events=1)
    return perf_event_open(attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC)


def attach_bpf(perf_fd: int, prog_fd: int) -> None:
    """PERF_EVENT_IOC_SET_BPF then PERF_EVENT_IOC_ENABLE; raises OSError(errno)."""
    import fcntl  # Unix only: imported here so the module loads everywhere

    fcntl.ioctl(perf_fd, PERF_EVENT_IOC_SET_BPF, prog_fd)
    fcntl.ioctl(perf_fd, PERF_EVENT_IOC_ENABLE, 0)
