"""Network namespaces and veth pairs for tests and benchmarks, gone whatever happens.

Rules this module keeps:
- A namespace is anonymous: ``unshare(CLONE_NEWNET)`` in a short-lived thread, held by one open
  fd of that thread's ``ns/net``. It has no name under /run/netns, so nothing can outlive the
  process: when the fd closes (``close()``, the ``with`` block, or the process dying by any
  signal, Ctrl-C and SIGKILL included) the kernel destroys the namespace and every interface in
  it (a veth pair goes with either end).
- Only the calling thread moves into it (``with ns.entered():``), because setns(2) with
  CLONE_NEWNET moves one thread; a socket stays in the namespace it was made in.
- Commands run inside through nsenter(1), which is handed the namespace fd, under
  ``setpriv --pdeathsig KILL``: a process started here dies with the thread that started it,
  and ``close()`` kills the ones still running, so none keeps the namespace alive.
- Everything needs CAP_SYS_ADMIN (``unavailable()`` says why not, for skips).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import socket
import struct
import subprocess
import threading
from collections.abc import Iterator, Sequence

from .handles import Closable

CLONE_NEWNET = 0x40000000
SIOCETHTOOL = 0x8946
ETHTOOL_GGRO = 0x2B
ETHTOOL_SGRO = 0x2C
IFNAMSIZ = 16

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _setns(fd: int) -> None:
    _check(_libc.setns(fd, CLONE_NEWNET), "setns(CLONE_NEWNET)")


def _thread_netns() -> int:
    """An fd on the calling thread's network namespace."""
    return os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net",
                   os.O_RDONLY | os.O_CLOEXEC)


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_SYS_ADMIN)"
    try:
        NetNamespace().close()
    except OSError as exc:
        return f"cannot create a network namespace: {exc.strerror or exc}"
    return None


class NetNamespace(Closable):
    """An anonymous network namespace with its loopback up.

    ``with NetNamespace() as ns:`` ... ``ns.add_veth("vA", "vB")``, ``with ns.entered():``
    (sockets made in the block live in ``ns``), ``ns.run(["ip", "-j", "link"])``.
    """

    def __init__(self) -> None:
        box: list[int | BaseException] = []

        def make() -> None:  # in its own thread: unshare moves only the calling thread
            try:
                _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
                box.append(_thread_netns())
            except BaseException as exc:  # noqa: BLE001 (handed to the caller's thread)
                box.append(exc)

        thread = threading.Thread(target=make, name="pybpf-netns")
        thread.start()
        thread.join()
        if isinstance(box[0], BaseException):
            raise box[0]
        self.fd: int = box[0]
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        try:
            self.ip("link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def __del__(self) -> None:
        if getattr(self, "fd", -1) >= 0:
            self.close()

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def close(self) -> None:
        """Kill the processes started here, then drop the namespace (idempotent)."""
        with self._lock:
            procs, self._procs = self._procs, []
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def _require_open(self) -> None:
        if self.fd < 0:
            raise ValueError("the network namespace is closed")

    # -- threads -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def entered(self) -> Iterator[NetNamespace]:
        """Move the calling thread into the namespace for the body, then back."""
        self._require_open()
        home = _thread_netns()
        try:
            _setns(self.fd)
            try:
                yield self
            finally:
                _setns(home)
        finally:
            os.close(home)

    # -- processes -----------------------------------------------------------------------------
    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` wrapped to run in this namespace (the fd must be passed to the child)."""
        self._require_open()
        return ["setpriv", "--pdeathsig", "KILL", "nsenter", f"--net=/proc/self/fd/{self.fd}",
                "--", *args]

    def popen(self, args: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start ``args`` in the namespace; ``close()`` kills it if it still runs."""
        kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), self.fd)
        proc = subprocess.Popen(self.command(args), **kwargs)
        with self._lock:
            self._procs = [p for p in self._procs if p.poll() is None] + [proc]
        return proc

    def run(self, args: Sequence[str], *, check: bool = True, timeout: float = 60,
            input: bytes | None = None) -> subprocess.CompletedProcess:
        """Run ``args`` in the namespace to completion; stdout/stderr are captured (text)."""
        proc = subprocess.run(self.command(args), pass_fds=(self.fd,), capture_output=True,
                              text=input is None, input=input, timeout=timeout)
        if check and proc.returncode:
            err = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode()
            raise OSError(errno.EINVAL, f"{' '.join(args)} (in a network namespace) failed "
                          f"with status {proc.returncode}: {err.strip()}")
        return proc

    def ip(self, *args: str) -> str:
        """``ip ARGS`` in the namespace; its stdout."""
        return self.run(["ip", *args]).stdout

    # -- interfaces ----------------------------------------------------------------------------
    def add_veth(self, name: str, peer: str, *, up: bool = True) -> tuple[int, int]:
        """A veth pair ``name`` <-> ``peer`` in this namespace; their ifindexes."""
        for ifname in (name, peer):
            _check_ifname(ifname)
        self.ip("link", "add", name, "type", "veth", "peer", "name", peer)
        if up:
            self.ip("link", "set", name, "up")
            self.ip("link", "set", peer, "up")
        return self.ifindex(name), self.ifindex(peer)

    def ifindex(self, name: str) -> int:
        with self.entered():
            return socket.if_nametoindex(name)

    def mac(self, name: str) -> bytes:
        """The 6-byte hardware address of ``name``."""
        _check_ifname(name)
        return bytes.fromhex(self.read_sysfs(f"class/net/{name}/address").replace(":", ""))

    def add_address(self, name: str, cidr: str) -> None:
        extra = ["nodad"] if ":" in cidr else []
        self.ip("addr", "add", cidr, "dev", name, *extra)

    def gro(self, name: str) -> bool:
        """Whether the GRO feature of ``name`` is on (ETHTOOL_GGRO)."""
        return bool(self._ethtool(name, ETHTOOL_GGRO, 0))

    def set_gro(self, name: str, on: bool) -> None:
        """Turn the GRO feature of ``name`` on or off (ETHTOOL_SGRO, as ``ethtool -K``)."""
        self._ethtool(name, ETHTOOL_SGRO, int(bool(on)))

    def _ethtool(self, name: str, cmd: int, data: int) -> int:
        _check_ifname(name)
        value = ctypes.create_string_buffer(struct.pack("=II", cmd, data), 8)
        ifreq = struct.pack("16sP", name.encode(), ctypes.addressof(value)).ljust(40, b"\0")
        with self.entered(), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
        return struct.unpack("=II", value.raw)[1]

    def write_sysfs(self, path: str, value: str) -> None:
        """Write ``value`` to ``/sys/<path>`` as this namespace sees sysfs (a private mount of
        sysfs made inside the namespace, e.g. ``class/net/lo/queues/rx-0/rps_cpus``)."""
        self._sysfs(f"printf %s '{_shell_word(value)}' > /sys/{_sys_path(path)}")

    def read_sysfs(self, path: str) -> str:
        return self._sysfs(f"cat /sys/{_sys_path(path)}").strip()

    def _sysfs(self, script: str) -> str:
        return self.run(["unshare", "--mount", "sh", "-c",
                         f"mount -t sysfs sysfs /sys && {script}"]).stdout

    def set_rps(self, name: str, cpus: Sequence[int], queue: int = 0) -> None:
        """Steer receive processing of ``name``'s rx queue to ``cpus`` (RPS); [] turns it off."""
        mask = sum(1 << cpu for cpu in cpus)
        self.write_sysfs(f"class/net/{name}/queues/rx-{queue}/rps_cpus", f"{mask:x}")


def _check_ifname(name: str) -> None:
    if (not isinstance(name, str) or not 0 < len(name.encode()) < IFNAMSIZ
            or any(c in name for c in "/ \0:") or name in (".", "..")):
        raise ValueError(f"interface name {name!r}: 1-15 bytes, no '/', ':', spaces or NUL")


def _sys_path(path: str) -> str:
    parts = path.strip("/").split("/")
    if not path or any(p in ("", ".", "..") for p in parts) or any(
            not all(c.isalnum() or c in "-_." for c in p) for p in parts):
        raise ValueError(f"sysfs path {path!r}: plain names separated by '/'")
    return "/".join(parts)


def _shell_word(value: str) -> str:
    if "'" in value or "\0" in value:
        raise ValueError(f"value {value!r} may not contain quotes or NUL")
    return value
