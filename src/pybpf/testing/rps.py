"""RPS (receive packet steering) on a device, set for a block and restored after it: the
knob the BPF maintainers pointed at instead of a sockmap CPU binding (on loopback, the psock
backlog work of a redirect runs where lo's receive processing runs).

Rules this module keeps:
- ``with rps_cpus("lo", [1], netns=ns):`` writes the CPU mask to every
  ``/sys/class/net/<dev>/queues/rx-*/rps_cpus`` of the device in ``ns`` (default: the
  calling thread's network namespace, so ``with ns.entered():`` works too), and writes back
  what each queue had when the block ends, however it ends. ``[]`` turns RPS off.
- sysfs shows the devices of the namespace that mounted it, so the files are read and
  written by a short shell in that namespace with its own private mount of sysfs (as
  ``NetNamespace.write_sysfs`` does); nothing is mounted in this process.
- Errors say what is wrong: a bad name or CPU is ValueError/TypeError before anything is
  written; a missing device ENODEV; a device without RPS (no rx queues, a kernel without
  CONFIG_RPS) EOPNOTSUPP; a refused write the kernel's errno with its message.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import subprocess
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from ..topology import parse_cpu_list

SYS_CPU_ONLINE = "/sys/devices/system/cpu/online"
_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_NO_DEVICE, _NO_RPS = 3, 4  # exit statuses of the shell snippets below


def _netns_fd(netns: Any) -> int:
    """A new fd on ``netns`` (a NetNamespace) or on the calling thread's namespace."""
    if netns is None:
        path = f"/proc/self/task/{threading.get_native_id()}/ns/net"
    else:
        if getattr(netns, "fd", -1) < 0:
            raise ValueError("the network namespace is closed")
        path = f"/proc/self/fd/{netns.fd}"
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def _sysfs_shell(netns: Any, dev: str, script: str) -> str:
    """Run ``script`` in ``/sys/class/net/<dev>`` of ``netns`` (a fresh sysfs mount)."""
    fd = _netns_fd(netns)
    try:
        body = (f"mount -t sysfs sysfs /sys && cd /sys/class/net/{dev} 2>/dev/null "
                f"|| exit {_NO_DEVICE}; set -- queues/rx-*/rps_cpus; "
                f"[ -e \"$1\" ] || exit {_NO_RPS}; {script}")
        proc = subprocess.run(["setpriv", "--pdeathsig", "KILL", "nsenter",
                               f"--net=/proc/self/fd/{fd}", "--", "unshare", "--mount", "sh",
                               "-c", body], pass_fds=(fd,), capture_output=True, text=True,
                              timeout=30)
    finally:
        os.close(fd)
    if proc.returncode == _NO_DEVICE:
        raise OSError(errno.ENODEV, f"no network device {dev!r} in that network namespace")
    if proc.returncode == _NO_RPS:
        raise OSError(errno.EOPNOTSUPP, f"device {dev!r} has no rx-*/rps_cpus (no receive "
                      "queues, or a kernel built without CONFIG_RPS)")
    if proc.returncode:
        message = proc.stderr.strip()
        err = errno.EINVAL
        if "ermission denied" in message or "not permitted" in message:
            err = errno.EPERM
        raise OSError(err, f"RPS on {dev!r}: {message or f'status {proc.returncode}'} "
                      "(writing rps_cpus and mounting sysfs need root)")
    return proc.stdout


def _check_dev(dev: str) -> None:
    if not isinstance(dev, str) or not _IFNAME.fullmatch(dev) or dev in (".", ".."):
        raise ValueError(f"interface name {dev!r}: 1-15 letters, digits, '_', '.' or '-'")


def cpu_mask(cpus: Iterable[int]) -> str:
    """The rps_cpus text for ``cpus``: hex, in comma-separated 32-bit groups as the kernel's
    bitmap parser reads them ("0" for none)."""
    mask = 0
    for cpu in cpus:
        if not isinstance(cpu, int) or isinstance(cpu, bool):
            raise TypeError(f"a CPU is an int, got {cpu!r}")
        if cpu < 0:
            raise ValueError(f"CPU {cpu} is negative")
        mask |= 1 << cpu
    groups = []
    while True:
        groups.append(mask & 0xFFFF_FFFF)
        mask >>= 32
        if not mask:
            break
    return ",".join([f"{groups[-1]:x}"] + [f"{g:08x}" for g in reversed(groups[:-1])])


def parse_cpu_mask(text: str) -> frozenset[int]:
    """The CPUs of a mask as rps_cpus prints it ("00000000,00000003")."""
    mask = int(text.strip().replace(",", "") or "0", 16)
    return frozenset(cpu for cpu in range(mask.bit_length()) if mask >> cpu & 1)


def read_rps_cpus(dev: str, *, netns: Any = None) -> dict[str, frozenset[int]]:
    """The RPS CPUs of each rx queue of ``dev`` (``{"rx-0": frozenset({1})}``; empty: off)."""
    return {queue: parse_cpu_mask(mask) for queue, mask in _read_masks(dev, netns).items()}


def _read_masks(dev: str, netns: Any) -> dict[str, str]:
    _check_dev(dev)
    out = _sysfs_shell(netns, dev, 'for f; do printf "%s %s\\n" "$f" "$(cat "$f")"; done')
    masks = {}
    for line in out.splitlines():
        path, _, mask = line.partition(" ")
        masks[path.split("/")[1]] = mask.strip()
    return masks


def _write_masks(dev: str, netns: Any, masks: dict[str, str]) -> None:
    for queue, mask in masks.items():
        if not re.fullmatch(r"rx-\d+", queue) or not re.fullmatch(r"[0-9a-fA-F,]+", mask):
            raise ValueError(f"rps mask {queue}={mask!r}: a queue rx-N and a hex mask")
    script = " && ".join(f"printf %s {mask} > queues/{queue}/rps_cpus"
                         for queue, mask in masks.items())
    _sysfs_shell(netns, dev, script)


@contextlib.contextmanager
def rps_cpus(dev: str, cpus: Iterable[int], *, netns: Any = None
             ) -> Iterator[frozenset[int]]:
    """Steer the receive processing of every rx queue of ``dev`` to ``cpus`` for the block
    (``[]``: RPS off), then restore each queue's mask. ``netns`` is a
    ``pybpf.netns.NetNamespace`` (default: the calling thread's namespace). Yields the CPUs
    set. CPUs must be online (ValueError otherwise, before anything is written)."""
    _check_dev(dev)
    wanted = frozenset(cpus)
    mask = cpu_mask(sorted(wanted))
    with open(SYS_CPU_ONLINE) as f:
        online = set(parse_cpu_list(f.read()))
    if not wanted <= online:
        raise ValueError(f"CPUs {sorted(wanted - online)} are not online (online: "
                         f"{sorted(online)})")
    saved = _read_masks(dev, netns)
    _write_masks(dev, netns, dict.fromkeys(saved, mask))
    try:
        yield wanted
    finally:
        _write_masks(dev, netns, saved)
