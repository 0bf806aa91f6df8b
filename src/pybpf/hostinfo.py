"""What the running kernel says about itself outside bpf(2): its version, build config and
symbols, read as libbpf reads them to fill an object's ``__kconfig`` and ``__ksym`` externs.

Rules this module keeps:
- Parsing is pure (``kernel_version_code``, ``parse_kallsyms``, ``read_config_file``'s
  decompression) and separate from the few reads of the host's files, so the parsing can be
  tested with any input.
- A file the host does not have is ``KernelError(ENOENT)`` naming the paths tried; the
  System turns it into the public error.
"""

from __future__ import annotations

import errno
import gzip
import os
import platform
import re

from .errors import KernelError

UBUNTU_SIGNATURE = "/proc/version_signature"
PROC_CONFIG = "/proc/config.gz"
KALLSYMS = "/proc/kallsyms"
KPROBE_PMU = "/sys/bus/event_source/devices/kprobe/type"
KPROBE_EVENTS = ("/sys/kernel/tracing/kprobe_events", "/sys/kernel/debug/tracing/kprobe_events")
# libbpf's arch_specific_syscall_pfx(): the prefix of the syscall wrappers' symbols.
_SYSCALL_PREFIX = {"x86_64": "x64", "i386": "ia32", "i686": "ia32", "s390x": "s390x",
                   "armv7l": "arm", "aarch64": "arm64", "mips": "mips", "riscv64": "riscv",
                   "ppc64le": "powerpc64", "ppc64": "powerpc64"}
_UINT = r"\s*\+?(\d+)"  # what scanf's %u takes (a '-' wraps in C; no kernel writes one)
_VERSION = re.compile(rf"{_UINT}\.{_UINT}\.{_UINT}")


def kernel_version(major: int, minor: int, patch: int) -> int:
    """KERNEL_VERSION(a, b, c) of <linux/version.h>: the patch level saturates at 255."""
    return ((major << 16) + (minor << 8) + min(patch, 255)) & 0xFFFFFFFF


def kernel_version_code(release: str, version: str = "", signature: str = "") -> int:
    """libbpf's get_kernel_version(): from Ubuntu's ``/proc/version_signature`` (its third
    word, ``Ubuntu 5.15.0-91.101-generic 5.15.131``) when there is one, else Debian's upstream
    version in ``uname -v`` (``... Debian 6.1.76-1 ...``), else ``uname -r``'s first three
    numbers (``6.18.44-fc-v1272`` -> 6.18.44); 0 when none of them gives three numbers (a
    release of two, ``6.8-rc1``, is not parsed)."""
    words = signature.split()
    if len(words) >= 3:
        match = _VERSION.match(words[2])
        if match:
            return kernel_version(*map(int, match.groups()))
    debian = version.find("Debian ")
    if debian >= 0:
        match = _VERSION.match(version, debian + len("Debian "))
        if match:
            return kernel_version(*map(int, match.groups()))
    match = _VERSION.match(release)
    return kernel_version(*map(int, match.groups())) if match else 0


def host_kernel_version() -> int:
    """``kernel_version_code`` of the running kernel (0: libbpf could not tell either)."""
    uname = os.uname()
    try:
        with open(UBUNTU_SIGNATURE) as f:
            signature = f.readline()
    except OSError:
        signature = ""
    return kernel_version_code(uname.release, uname.version, signature)


def read_config_file(data: bytes) -> str:
    """A kernel config's text; gzip-compressed or not (libbpf opens it with gzopen, which
    reads either)."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode(errors="replace")


def host_kernel_config() -> str:
    """The running kernel's build config, as libbpf's bpf_object__read_kconfig_file() finds
    it: ``/boot/config-$(uname -r)``, else ``/proc/config.gz``."""
    paths = (f"/boot/config-{os.uname().release}", PROC_CONFIG)
    for path in paths:
        try:
            with open(path, "rb") as f:
                return read_config_file(f.read())
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
    raise KernelError(errno.ENOENT, f"failed to open system Kconfig (tried {', '.join(paths)})")


def host_kallsyms() -> str:
    """``/proc/kallsyms``: ``address type name [module]`` per line. Without
    CONFIG_KALLSYMS_ALL it lists functions only; without privilege the addresses read 0."""
    try:
        with open(KALLSYMS) as f:
            return f.read()
    except OSError as exc:
        raise KernelError(exc.errno or errno.ENOENT, f"failed to open {KALLSYMS}: "
                          f"{exc.strerror}") from None


def parse_kallsyms(text: str) -> list[tuple[int, str, str]]:
    """``(address, type, name)`` of each line of a kallsyms text (libbpf_kallsyms_parse)."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or len(fields[1]) != 1:
            raise ValueError(f"failed to read kallsyms entry: {line!r}")
        out.append((int(fields[0], 16), fields[1], fields[2]))
    return out


def syscall_wrapper_symbol(machine: str | None = None) -> str | None:
    """The symbol of the bpf syscall's wrapper on this architecture (``__x64_sys_bpf``)."""
    prefix = _SYSCALL_PREFIX.get(machine or platform.machine())
    return f"__{prefix}_sys_bpf" if prefix else None


def host_has_syscall_wrapper() -> bool:
    """libbpf's probe_kern_syscall_wrapper() answers whether a kprobe can be put on
    ``__<arch>_sys_bpf``; pybpf opens no kprobe, so: the kernel has kprobes (the kprobe PMU,
    or tracefs' legacy kprobe_events) and a symbol of that name. A kernel without kprobes
    answers 0, as libbpf's probe does there."""
    symbol = syscall_wrapper_symbol()
    if symbol is None:
        return False
    if not os.path.exists(KPROBE_PMU) and not any(map(os.path.exists, KPROBE_EVENTS)):
        return False
    try:
        text = host_kallsyms()
    except KernelError:
        return False
    return re.search(rf"^\S+ [tT] {re.escape(symbol)}$", text, re.MULTILINE) is not None
