"""The pieces of ``pybpf bench sockmap``: traffic (iperf3 or pybpf's own sender and receiver),
the proxies (user-space copy, splice, a sockmap with a verdict program), per-CPU busy time.

Rules this module keeps:
- Every socket is made by a thread inside the benchmark's network namespace (``entered``), and
  every thread is a ``Worker``: pinned, in the namespace, its exception kept for the caller.
- Nothing blocks without a bound: sockets have timeouts or are shut down at teardown (which
  wakes a blocked recv, send or splice), processes are killed past their deadline, joins
  have timeouts. Teardown never raises.
- The builtin traffic checks every byte: the sender writes a pattern of period 251 (so a lost,
  duplicated or reordered chunk shows), the receiver compares each read with it. Like iperf3,
  the sender writes a 37-byte cookie right after connect and waits until the receiver has
  it before streaming: the trap of a sockmap proxy that inserts its sockets after those bytes
  arrived (see ``SockmapPath.add_pair``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R4,
    R6,
    add64,
    call,
    call_kfunc,
    exit_,
    jne,
    label,
    ld_map_fd,
    ldxw,
    mov64,
    stxw,
)
from ..programs import Program, ProgramSpec
from ..uapi import BPF_F_INGRESS, BPF_F_SOCKMAP_TARGET_CPU, SK_PASS, AttachType, MapType, ProgType

PERIOD = 251  # the pattern's period: a prime, so no chunk size hides a shift
CHUNK = PERIOD * 4177  # about 1 MiB of whole periods: every full send starts at offset 0
PATTERN = bytes(range(PERIOD)) * (CHUNK // PERIOD + 1)  # a chunk plus a period
COOKIE_LEN = 37  # iperf3's cookie (COOKIE_SIZE)
DRAIN_SECONDS = 3.0  # after a builtin run's window, for the bytes still on their way
F_SETPIPE_SZ = 1031
SKB_REMOTE_PORT, SKB_LOCAL_PORT = 132, 136  # struct __sk_buff
WORKER_FIELDS = ("verdicts", "backlog_runs", "bytes", "eagain_retries", "drops", "busy_ns")


class RunFailed(Exception):
    """One run that did not complete (a timeout, a wrong byte, iperf3's error): its reason."""


def entered(ns: Any):
    """The namespace ``ns`` for the calling thread (no namespace: where it is)."""
    return ns.entered() if ns is not None else contextlib.nullcontext()


class Worker(threading.Thread):
    """A daemon thread running ``body`` on ``cpu`` (None: anywhere) inside ``ns``."""

    def __init__(self, name: str, body: Callable[[], None], *, ns: Any, cpu: int | None) -> None:
        super().__init__(name=name, daemon=True)
        self.body, self.ns, self.cpu = body, ns, cpu
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.cpu is not None:
                os.sched_setaffinity(0, {self.cpu})
            with entered(self.ns):
                self.body()
        except BaseException as exc:  # noqa: BLE001 (the caller reports it)
            self.error = exc


def close_socket(sock: socket.socket) -> None:
    """Shut down (which wakes a thread blocked on it) and close, ignoring every error."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def listener(ns: Any) -> socket.socket:
    """A TCP listener on 127.0.0.1, an ephemeral port, in ``ns``."""
    with entered(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    return sock


def free_port(ns: Any) -> int:
    """A port nothing listens on in ``ns`` (for iperf3's server)."""
    sock = listener(ns)
    port = sock.getsockname()[1]
    sock.close()
    return port


# -- builtin traffic --------------------------------------------------------------------------
@dataclass
class Traffic:
    """What one run's traffic measured."""

    gbps: float  # received by the server during the measured window
    bytes: int  # received, all told
    sent_gbps: float  # written by the client during the window
    complete: bool  # everything sent arrived (within DRAIN_SECONDS of the window's end)


class BuiltinReceiver:
    """The server: accepts one stream, reads it and checks every byte against the pattern.
    ``accepted`` maps a peer address to the accepted socket (a proxy's ingress redirect puts
    that socket in its map)."""

    def __init__(self, ns: Any, cpu: int | None, deadline: float, rcvbuf: int = 0) -> None:
        self.sock = listener(ns)
        if rcvbuf:  # the accepted socket inherits it (0: the kernel's default, autotuned)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.port = self.sock.getsockname()[1]
        self.deadline = deadline
        self.accepted: dict[tuple, socket.socket] = {}
        self.cookie_seen = threading.Event()
        self.stop = threading.Event()
        self.expected: int | None = None  # the sender's total, once it has finished
        self.received = 0
        self.worker = Worker("sockmap bench receiver", self._serve, ns=ns, cpu=cpu)
        self.worker.start()

    def peer_socket(self, addr: tuple, timeout: float) -> socket.socket:
        """The accepted socket whose peer is ``addr`` (waits for the accept)."""
        end = time.monotonic() + timeout
        while addr not in self.accepted:
            if time.monotonic() > end or not self.worker.is_alive():
                raise RunFailed(f"the receiver did not accept the proxy's connection {addr}")
            time.sleep(0.001)
        return self.accepted[addr]

    def _serve(self) -> None:
        while True:
            try:
                conn, addr = self.sock.accept()
                break
            except TimeoutError:
                if time.monotonic() > self.deadline or self.stop.is_set():
                    raise RunFailed("nothing connected to the receiver") from None
        self.accepted[addr] = conn
        conn.settimeout(0.2)
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while not self.stop.is_set() and (self.expected is None
                                          or self.received < self.expected):
            if time.monotonic() > self.deadline:
                raise RunFailed(f"timed out: {self.received} bytes arrived")
            try:
                n = conn.recv_into(buf)
            except TimeoutError:
                continue
            if n == 0:
                raise RunFailed(f"the stream ended after {self.received} bytes")
            offset = self.received % PERIOD
            if not PATTERN.startswith(view[:n], offset):
                bad = next(i for i in range(n) if buf[i] != PATTERN[offset + i])
                raise RunFailed(f"byte {self.received + bad} differs from what was sent "
                                "(lost, duplicated or reordered data)")
            self.received += n
            if self.received >= COOKIE_LEN:
                self.cookie_seen.set()

    def close(self) -> None:
        self.stop.set()
        close_socket(self.sock)
        for conn in list(self.accepted.values()):
            close_socket(conn)
        self.worker.join(timeout=2)


def builtin_run(ns: Any, receiver: BuiltinReceiver, port: int, cpu: int | None,
                seconds: float, deadline: float, watch: Sequence[Worker] = ()) -> Traffic:
    """Stream the pattern to ``port`` (cookie first, as iperf3 does), measure what the
    receiver gets in the ``seconds`` after the cookie arrived, then give the rest up to
    DRAIN_SECONDS to arrive (a queue in the path may hold more than it moves in that time).
    A thread of ``watch`` (the proxy's) that fails ends the run with its error."""
    started, stop, done = threading.Event(), threading.Event(), threading.Event()
    stopped = threading.Event()  # the sender has written its last byte
    state = {"sent": 0, "start": 0.0}

    def send() -> None:
        with entered(ns):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock.connect(("127.0.0.1", port))
            sock.sendall(PATTERN[:COOKIE_LEN])
            if not receiver.cookie_seen.wait(max(0.0, deadline - time.monotonic())):
                raise RunFailed(f"the first {COOKIE_LEN} bytes, sent right after connect, "
                                "never reached the receiver")
            state["start"] = time.perf_counter()
            started.set()
            sock.settimeout(0.2)
            sent, pattern = COOKIE_LEN, memoryview(PATTERN)
            while not stop.is_set():
                offset = sent % PERIOD
                try:
                    sent += sock.send(pattern[offset:offset + CHUNK])
                except TimeoutError:
                    continue
                state["sent"] = sent
            stopped.set()
            done.wait(max(0.0, deadline - time.monotonic()))  # open until the reading ends
        finally:
            close_socket(sock)

    sender = Worker("sockmap bench sender", send, ns=ns, cpu=cpu)
    sender.start()
    try:
        while not started.wait(0.05):
            _raise_failed(sender, receiver, *watch)
            if time.monotonic() > deadline:
                raise RunFailed(f"timed out: the first {COOKIE_LEN} bytes did not arrive")
        window_end = state["start"] + seconds
        while (now := time.perf_counter()) < window_end:
            _raise_failed(sender, receiver, *watch)
            time.sleep(min(0.05, window_end - now))
        received, elapsed = receiver.received, time.perf_counter() - state["start"]
        stop.set()
        if not stopped.wait(max(0.0, deadline - time.monotonic())):
            _raise_failed(sender)
            raise RunFailed("timed out: the sender did not stop")
        sent = state["sent"]
        receiver.expected = sent
        receiver.worker.join(max(0.0, min(DRAIN_SECONDS, deadline - time.monotonic())))
        _raise_failed(sender, receiver)
    finally:
        stop.set()
        receiver.stop.set()
        done.set()
        sender.join(timeout=2)
    return Traffic((received - COOKIE_LEN) * 8 / elapsed / 1e9, receiver.received,
                   (sent - COOKIE_LEN) * 8 / elapsed / 1e9, receiver.received == sent)


def _raise_failed(*parts: Any) -> None:
    for part in parts:
        worker = getattr(part, "worker", part)
        if worker.error is not None:
            raise worker.error


# -- iperf3 -----------------------------------------------------------------------------------
def spawn(ns: Any, args: list[str]) -> subprocess.Popen:
    kwargs: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    return ns.popen(args, **kwargs) if ns is not None else subprocess.Popen(args, **kwargs)


def wait_listening(ns: Any, port: int, deadline: float) -> None:
    """Until something listens on ``port`` in ``ns`` (/proc/net/tcp{,6} of the namespace; a
    probe connection would be iperf3's one test)."""
    want = f":{port:04X} "
    while time.monotonic() < deadline:
        with entered(ns):
            for table in ("tcp", "tcp6"):
                with open(f"/proc/thread-self/net/{table}") as f:
                    if any(want in line and line.split()[3] == "0A" for line in f):
                        return
        time.sleep(0.02)
    raise RunFailed(f"iperf3's server did not listen on port {port}")


def iperf3_run(ns: Any, iperf3: str, server_port: int, connect_port: int,
               server_cpu: int | None, client_cpu: int | None, seconds: int,
               deadline: float, watch: Sequence[Worker] = ()) -> Traffic:
    """``iperf3 -s -1`` on ``server_port``, ``iperf3 -c -t seconds -J`` to ``connect_port``
    (the server's, or the proxy's); ``watch`` as in builtin_run."""
    def pinned(cpu: int | None, args: list[str]) -> list[str]:
        return (["taskset", "-c", str(cpu)] if cpu is not None else []) + args

    server = spawn(ns, pinned(server_cpu, [iperf3, "-s", "-1", "-p", str(server_port)]))
    procs = [server]
    try:
        wait_listening(ns, server_port, deadline)
        client = spawn(ns, pinned(client_cpu, [iperf3, "-c", "127.0.0.1", "-p",
                                               str(connect_port), "-t", str(seconds), "-J"]))
        procs.append(client)
        while client.poll() is None:
            _raise_failed(*watch)
            if time.monotonic() > deadline:
                raise RunFailed("timed out: iperf3's client did not finish")
            time.sleep(0.05)
        out = client.stdout.read()
        try:
            doc = json.loads(out)
        except ValueError:
            raise RunFailed(f"iperf3's client wrote no JSON (status {client.returncode})") \
                from None
        if doc.get("error"):
            raise RunFailed(f"iperf3: {doc['error']}")
        received, sent = doc["end"]["sum_received"], doc["end"]["sum_sent"]
        return Traffic(received["bits_per_second"] / 1e9, int(received["bytes"]),
                       sent["bits_per_second"] / 1e9, True)
    finally:
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2)
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# -- proxies ----------------------------------------------------------------------------------
class Proxy:
    """Listens on its port; each accepted connection (p1) gets a connection to the server
    (p2), and ``path.add_pair(p1, p2)`` moves the bytes between them."""

    def __init__(self, ns: Any, cpu: int | None, upstream_port: int, path: Any) -> None:
        self.sock = listener(ns)
        self.port = self.sock.getsockname()[1]
        self.upstream_port, self.path = upstream_port, path
        self.stop = threading.Event()
        self.sockets: list[socket.socket] = []
        self.worker = Worker("sockmap bench proxy", self._accept, ns=ns, cpu=cpu)
        self.worker.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                p1, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:  # closed at teardown
                return
            p2 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sockets += [p1, p2]
            p2.settimeout(5)
            p2.connect(("127.0.0.1", self.upstream_port))
            for sock in (p1, p2):
                sock.settimeout(None)  # blocking: teardown's shutdown wakes a waiter
            self.path.add_pair(p1, p2)

    def close(self) -> None:
        self.stop.set()
        close_socket(self.sock)
        self.worker.join(timeout=2)
        self.path.close()
        for sock in self.sockets:
            close_socket(sock)

    def check(self) -> None:
        """Raise what the proxy's threads failed with."""
        for worker in [self.worker, *getattr(self.path, "workers", ())]:
            if worker.error is not None and not isinstance(worker.error, OSError):
                raise worker.error
        if self.worker.error is not None:
            raise RunFailed(f"the proxy failed: {self.worker.error}")


class CopyPath:
    """The user-space proxy: per direction a thread doing recv_into (1 MiB) + sendall, or
    with ``splice`` os.splice through a pipe (socket -> pipe -> socket, no copy to user)."""

    def __init__(self, ns: Any, cpu: int | None, splice: bool) -> None:
        self.ns, self.cpu, self.splice = ns, cpu, splice
        self.workers: list[Worker] = []

    def add_pair(self, p1: socket.socket, p2: socket.socket) -> None:
        relay = self._splice if self.splice else self._copy
        for src, dst in ((p1, p2), (p2, p1)):
            worker = Worker("sockmap bench relay", lambda s=src, d=dst: relay(s, d),
                            ns=self.ns, cpu=self.cpu)
            worker.start()
            self.workers.append(worker)

    @staticmethod
    def _copy(src: socket.socket, dst: socket.socket) -> None:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while n := src.recv_into(buf):
            dst.sendall(view[:n])
        dst.shutdown(socket.SHUT_WR)

    @staticmethod
    def _splice(src: socket.socket, dst: socket.socket) -> None:
        rd, wr = os.pipe()
        try:
            with contextlib.suppress(OSError):  # a smaller pipe works too, only slower
                fcntl.fcntl(wr, F_SETPIPE_SZ, CHUNK)
            while n := os.splice(src.fileno(), wr, CHUNK):
                while n:
                    n -= os.splice(rd, dst.fileno(), n)
            dst.shutdown(socket.SHUT_WR)
        finally:
            os.close(rd)
            os.close(wr)

    def close(self) -> None:
        for worker in self.workers:
            worker.join(timeout=2)


def verdict_program(flags: int, redirect_cpu: int | None = None) -> list:
    """SK_SKB verdict: redirect to the socket the SOCKHASH ``peers`` holds for the key
    (local_port, remote_port) of the socket the data arrived on; no entry: SK_PASS (the data
    stays with that socket). ``flags``: 0 (egress) or BPF_F_INGRESS. ``redirect_cpu``: first
    bpf_sk_skb_set_redirect_cpu(skb, redirect_cpu), as the 2025 series' bench program did."""
    set_cpu = [] if redirect_cpu is None else [
        mov64(R1, R6), mov64(R2, redirect_cpu), call_kfunc("bpf_sk_skb_set_redirect_cpu")]
    return [mov64(R6, R1), *set_cpu,
            ldxw(R2, R6, SKB_LOCAL_PORT), stxw(FP, -8, R2),
            ldxw(R2, R6, SKB_REMOTE_PORT), stxw(FP, -4, R2),
            mov64(R1, R6), ld_map_fd(R2, "peers"), mov64(R3, FP), add64(R3, -8),
            mov64(R4, flags), call("sk_redirect_hash"),
            jne(R0, 0, "out"), mov64(R0, SK_PASS), label("out"), exit_()]


def socket_key(sock: socket.socket) -> bytes:
    """The program's key of ``sock``: __sk_buff.local_port (host order, u32) then
    remote_port (network order in the upper half of a u32, as a little-endian load gives)."""
    local, remote = sock.getsockname()[1], sock.getpeername()[1]
    return local.to_bytes(4, "little") + b"\0\0" + remote.to_bytes(2, "big")


class SockmapPath:
    """The sockmap proxy on ``system`` (kernel or emulated, the same System calls): a SOCKHASH
    with the verdict program attached before any socket is inserted. Egress: p1's data is
    sent on p2 and p2's on p1. Ingress (``receiver`` given, builtin traffic): p1's data goes
    straight into the receiving socket's queue. ``target_cpu``: the psocks' backlog work on
    that CPU (BPF_F_SOCKMAP_TARGET_CPU, the reviewers' design); ``redirect_cpu``: the verdict
    asks for that CPU with the kfunc bpf_sk_skb_set_redirect_cpu (the 2025 design)."""

    def __init__(self, system: Any, *, ingress: bool, target_cpu: int | None,
                 receiver: BuiltinReceiver | None = None,
                 redirect_cpu: int | None = None) -> None:
        self.system, self.ingress, self.receiver = system, ingress, receiver
        self.flags = 0 if target_cpu is None else BPF_F_SOCKMAP_TARGET_CPU | target_cpu << 32
        self.keys: list[bytes] = []
        self.map_fd = system.map_create(MapType.SOCKHASH, 8, 4, 64, map_name=b"bench_peers")
        self.prog = None
        self.attached = False
        try:
            verdict = verdict_program(BPF_F_INGRESS if ingress else 0, redirect_cpu)
            self.prog = Program.load(ProgramSpec(ProgType.SK_SKB, verdict), system,
                                     maps={"peers": self.map_fd})
            system.prog_attach(self.prog.fd, self.map_fd, AttachType.SK_SKB_VERDICT)
            self.attached = True
        except BaseException:
            self.close()
            raise

    def add_pair(self, p1: socket.socket, p2: socket.socket) -> None:
        """Insert the pair, then forward what arrived before the insertion: those bytes sit
        in the socket's own queue, which no verdict sees until more data arrives (iperf3's
        cookie waits there for an answer that never comes). A non-blocking read after the
        insertion moves them: the kernel's tcp_bpf_recvmsg_parser runs the verdict on a
        non-empty receive queue (they are redirected, and the read gets EAGAIN); whatever
        the read returns instead is sent on by hand."""
        if self.ingress:
            target = self.receiver.peer_socket(p2.getsockname(), timeout=5)
            self._insert(socket_key(p1), target)
            # p1 must be in the map to get a psock; under p2's key, which no data carries
            # (p2 itself stays out of the map: what it sends goes to the receiver as TCP)
            self._insert(socket_key(p2), p1)
            self._forward_queued(p1, p2)
            return
        self._insert(socket_key(p1), p2)
        self._insert(socket_key(p2), p1)
        self._forward_queued(p1, p2)
        self._forward_queued(p2, p1)

    def _insert(self, key: bytes, sock: socket.socket) -> None:
        self.system.map_update_elem(self.map_fd, key, sock.fileno().to_bytes(4, "little"),
                                    self.flags)
        self.keys.append(key)

    def _forward_queued(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = self.system.sock_recv(src, CHUNK, timeout=0)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    return
                raise
            if not data:
                return
            view = memoryview(data)
            while view:
                view = view[self.system.sock_send(dst, bytes(view), timeout=5):]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.attached:
                self.system.prog_detach(self.map_fd, AttachType.SK_SKB_VERDICT, self.prog.fd)
        for key in self.keys:
            with contextlib.suppress(OSError):
                self.system.map_delete_elem(self.map_fd, key)
        if self.prog is not None:
            self.prog.close()
        with contextlib.suppress(OSError):
            self.system.close(self.map_fd)


# -- where the work ran -----------------------------------------------------------------------
def cpu_ticks() -> dict[int, list[int]]:
    """Per CPU: /proc/stat's user, nice, system, idle, iowait, irq, softirq, steal ticks."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu":
                out[int(name[3:])] = [int(v) for v in fields[:8]]
    return out


def cpu_busy(before: Mapping[int, list[int]], after: Mapping[int, list[int]]) -> dict:
    """Per CPU, the share (percent) of its time in user (+nice), system and softirq."""
    out = {}
    for cpu, now in after.items():
        delta = [a - b for a, b in zip(now, before.get(cpu, now), strict=True)]
        total = sum(delta) or 1
        out[cpu] = {"user": 100.0 * (delta[0] + delta[1]) / total,
                    "system": 100.0 * delta[2] / total, "softirq": 100.0 * delta[6] / total}
    return out


def kworker_ticks() -> dict[int, tuple[int, int]]:
    """Per pid of a per-CPU workqueue worker (``kworker/N:M``, which runs the kernel's psock
    backlog work): (N, its utime + stime in clock ticks)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:]
        cpu = comm.removeprefix("kworker/").split(":")[0]
        if comm.startswith("kworker/") and cpu.isdigit():
            fields = rest.split()  # from field 3 (state): utime and stime are 14 and 15
            out[int(pid)] = (int(cpu), int(fields[11]) + int(fields[12]))
    return out


def kworker_busy(before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]],
                 seconds: float) -> dict[int, float]:
    """Per CPU, the share (percent) of ``seconds`` its kworkers ran in between."""
    ticks: dict[int, int] = {}
    for pid, (cpu, now) in after.items():
        ticks[cpu] = ticks.get(cpu, 0) + now - before.get(pid, (cpu, 0))[1]
    hz = os.sysconf("SC_CLK_TCK")
    return {cpu: 100.0 * n / hz / seconds for cpu, n in sorted(ticks.items())}


def worker_counters(system: Any) -> dict[int, dict[str, int]]:
    """The emulated psock workers' counters per emulated CPU (``sockmap_stats``); {} for a
    backend without them."""
    stats = getattr(system, "sockmap_stats", None)
    if stats is None:
        return {}
    out = {}
    for cpu, record in stats().items():
        def get(name: str, record: Any = record) -> int:
            return int(record[name] if isinstance(record, Mapping) else getattr(record, name))
        out[int(cpu)] = {name: get(name) for name in WORKER_FIELDS}
    return out


def counters_delta(before: Mapping[int, Mapping[str, int]],
                   after: Mapping[int, Mapping[str, int]]) -> dict[int, dict[str, int]]:
    return {cpu: {k: v - before.get(cpu, {}).get(k, 0) for k, v in rec.items()}
            for cpu, rec in after.items()}
