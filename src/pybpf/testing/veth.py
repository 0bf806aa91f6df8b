"""A veth pair to run XDP traffic through, on either backend, gone whatever happens.

``veth_pair(system)`` gives the same object on both backends:
- kernel: a fresh anonymous network namespace (``pybpf.netns``) holding the pair; it dies
  with the process, Ctrl-C and SIGKILL included. Only ``b`` gets its address: ``a_addr`` is
  the source traffic claims, and were it local the kernel would drop what arrives on ``b``
  as a martian. Commands that name an
  interface by ifindex (XDP attach, a live test run's ingress device) resolve it in the
  calling thread's namespace, so run them inside ``with pair.entered():``.
- emulated: the pair in the system's machine (``net_of(machine)``); ``entered()`` does nothing.

Rules this module keeps:
- ``close()`` (or the ``with`` block) removes everything the pair made, on failure too;
  closing twice is fine.
- A ``UdpReceiver`` drains one UDP socket on the receiving end in a thread, counting
  datagrams (skbs that reached UDP) and segments (the datagrams GRO merged into them, from
  the UDP_GRO segment size), and keeps the payloads when asked.
- ``snmp()`` reads the UDP tables as /proc/net/snmp and /proc/net/snmp6 give them in the
  pair's namespace.
"""

from __future__ import annotations

import abc
import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any

from .. import netns
from ..handles import Closable

SOL_UDP = 17
UDP_GRO = 104  # include/uapi/linux/udp.h
SO_RCVBUFFORCE = 33
RCVBUF = 32 << 20
_SNMP_TABLES = ("Udp", "Udp6")


class UdpReceiver:
    """A UDP socket read in a thread until ``stop()``."""

    def __init__(self, recv: Callable[[], tuple[bytes, int] | None], close: Callable[[], None],
                 keep: bool) -> None:
        self._recv = recv
        self._close = close
        self.keep = keep
        self.datagrams = 0
        self.segments = 0
        self.bytes = 0
        self.payloads: list[bytes] = []  # every datagram, cut at its segment size, if kept
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pybpf-udp-receiver",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            got = self._recv()
            if got is None:
                continue
            data, gso_size = got
            size = gso_size or len(data) or 1
            segments = -(-len(data) // size) if data else 1
            self.datagrams += 1
            self.segments += segments
            self.bytes += len(data)
            if self.keep:
                self.payloads += [data[i:i + size] for i in range(0, len(data), size)] or [b""]

    def stop(self) -> None:
        """Stop reading (what is still queued stays unread) and close the socket."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self._close()

    @property
    def frames_per_skb(self) -> float:
        return self.segments / self.datagrams if self.datagrams else 0.0


class VethPair(Closable, abc.ABC):
    """Two ends, ``a`` (where traffic is made) and ``b`` (where it is received)."""

    def __init__(self, a: str, b: str, a_addr: str, b_addr: str) -> None:
        self.a, self.b = a, b
        self.a_addr, self.b_addr = a_addr, b_addr
        self.receivers: list[UdpReceiver] = []
        self.closed = False

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for receiver in self.receivers:
            receiver.stop()
        self._teardown()

    # what each backend provides
    @abc.abstractmethod
    def ifindex(self, name: str) -> int: ...

    @abc.abstractmethod
    def mac(self, name: str) -> bytes: ...

    @abc.abstractmethod
    def set_gro(self, name: str, on: bool) -> None:
        """The GRO feature of ``name`` (``ethtool -K name gro on|off``)."""

    @abc.abstractmethod
    def udp_receiver(self, port: int, *, gro: bool = True, v6: bool = False,
                     keep: bool = False, rcvbuf: int = RCVBUF) -> UdpReceiver:
        """A UDP socket on ``port`` of every address (UDP_GRO when ``gro``; SO_RCVBUF
        ``rcvbuf``, so a short stall of the reader drops nothing), drained."""

    @abc.abstractmethod
    def snmp(self) -> dict[str, dict[str, int]]: ...

    def entered(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    @abc.abstractmethod
    def _teardown(self) -> None: ...


class KernelVethPair(VethPair):
    """The pair in a throw-away network namespace of the running kernel."""

    def __init__(self, a: str, b: str, a_addr: str, b_addr: str) -> None:
        super().__init__(a, b, a_addr, b_addr)
        self.ns = netns.NetNamespace()
        try:
            self.ns.add_veth(a, b)
            self.ns.add_address(b, f"{b_addr}/{64 if ':' in b_addr else 24}")
        except BaseException:
            self.ns.close()
            raise

    def ifindex(self, name: str) -> int:
        return self.ns.ifindex(name)

    def mac(self, name: str) -> bytes:
        return self.ns.mac(name)

    def set_gro(self, name: str, on: bool) -> None:
        self.ns.set_gro(name, on)

    def entered(self) -> contextlib.AbstractContextManager:
        return self.ns.entered()

    def udp_receiver(self, port: int, *, gro: bool = True, v6: bool = False,
                     keep: bool = False, rcvbuf: int = RCVBUF) -> UdpReceiver:
        family = socket.AF_INET6 if v6 else socket.AF_INET
        with self.ns.entered():
            sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)  # root: past rmem_max
        sock.bind(("::" if v6 else "0.0.0.0", port))
        if gro:
            sock.setsockopt(SOL_UDP, UDP_GRO, 1)
        sock.settimeout(0.1)

        def recv() -> tuple[bytes, int] | None:
            try:
                data, ancdata, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(4))
            except (TimeoutError, OSError):
                return None
            gso = next((int.from_bytes(d[:4], "little") for level, kind, d in ancdata
                        if level == SOL_UDP and kind == UDP_GRO), 0)
            return data, gso

        receiver = UdpReceiver(recv, sock.close, keep)
        self.receivers.append(receiver)
        return receiver

    def snmp(self) -> dict[str, dict[str, int]]:
        with self.ns.entered():
            text = open("/proc/thread-self/net/snmp").read()
            text6 = open("/proc/thread-self/net/snmp6").read()
        tables = parse_snmp(text)
        tables["Udp6"] = {key[4:]: value for key, value in parse_snmp6(text6).items()
                          if key.startswith("Udp6")}
        return {name: tables.get(name, {}) for name in _SNMP_TABLES}

    def _teardown(self) -> None:
        self.ns.close()


class EmulatedVethPair(VethPair):
    """The pair in an emulated machine's network."""

    def __init__(self, system: Any, a: str, b: str, a_addr: str, b_addr: str) -> None:
        super().__init__(a, b, a_addr, b_addr)
        from ..emulated import net_of

        self.net = net_of(system.machine)
        self.devs = dict(zip((a, b), self.net.add_veth(a, b), strict=True))
        self.devs[b].add_address(b_addr)

    def ifindex(self, name: str) -> int:
        return self.devs[name].ifindex

    def mac(self, name: str) -> bytes:
        return bytes.fromhex(self.devs[name].mac.replace(":", ""))

    def set_gro(self, name: str, on: bool) -> None:
        self.devs[name].set_gro(on)

    def udp_receiver(self, port: int, *, gro: bool = True, v6: bool = False,
                     keep: bool = False, rcvbuf: int = RCVBUF) -> UdpReceiver:
        # the kernel doubles SO_RCVBUF for its bookkeeping; the emulated socket takes that
        sock = self.net.stack.udp_socket(port, gro=gro, family=10 if v6 else 2,
                                         rcvbuf=2 * rcvbuf)

        def recv() -> tuple[bytes, int] | None:
            dgram = sock.recv(timeout=0.1)
            return None if dgram is None else (dgram.data, dgram.gso_size)

        receiver = UdpReceiver(recv, sock.close, keep)
        self.receivers.append(receiver)
        return receiver

    def snmp(self) -> dict[str, dict[str, int]]:
        counters = self.net.stack.counters()
        return {name: counters[name] for name in _SNMP_TABLES}

    def _teardown(self) -> None:
        self.net.del_device(self.devs[self.a])


def parse_snmp(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/snmp: pairs of lines, ``Table: names`` then ``Table: values``."""
    tables: dict[str, dict[str, int]] = {}
    lines = text.splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        table, _, keys = names.partition(":")
        tables[table] = dict(zip(keys.split(), map(int, values.partition(":")[2].split()),
                                 strict=False))
    return tables


def parse_snmp6(text: str) -> dict[str, int]:
    """/proc/net/snmp6: one ``Name value`` per line."""
    return {name: int(value) for name, value in
            (line.split() for line in text.splitlines() if line.strip())}


def veth_pair(system: Any, a: str = "vA", b: str = "vB", *, a_addr: str = "10.0.0.1",
              b_addr: str = "10.0.0.2") -> VethPair:
    """A veth pair ``a`` <-> ``b`` for ``system``'s backend (see the module docstring)."""
    if getattr(system, "machine", None) is not None:
        return EmulatedVethPair(system, a, b, a_addr, b_addr)
    return KernelVethPair(a, b, a_addr, b_addr)
