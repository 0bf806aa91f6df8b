"""The modeled throughput of the emulated sockmap proxy on a declared machine: Gbit/s of one
TCP flow over loopback, direct and through the proxy with its backlog work unbound or on a
CPU of its own, from the emulated CPUs' modeled time (emulated/machine/timing.py), the same on every
run (issue 10; the sockmap CPU-affinity patch, shared/reference/patches-followups.md 1.1-1.3).

Rules this module keeps:
- The setup is ``pybpf bench sockmap``'s egress proxy on an emulated system of the profile:
  real loopback TCP sockets c1 -> p1 ... p2 -> c2, p1 and p2 in a SOCKHASH whose verdict
  program (sockmap_paths.verdict_program) redirects p1's data out of p2; ``direct`` is
  c1 -> c2 with no proxy. The unbound psock's work runs on the CPU that queued it (the
  client's: loopback runs the receive softirq, and so the verdict, on the sending CPU); the
  bound one on ``proxy_cpu`` (BPF_F_SOCKMAP_TARGET_CPU).
- Traffic is one skb at a time: the client sends one full-sized segment (the connection's
  MSS once warm, 64 KiB less headers, in one skb), and the next goes only once the server has read
  all of it and the psock's verdict and backlog work have returned, so the verdict reads
  exactly one skb and the work sends exactly one per run, whatever the host's scheduling;
  a run whose psock saw anything else is refused, with what it saw.
- The client and the server are not emulated code: the model charges their kernel work on
  their emulated CPUs (the client's send syscall, tcp_sendmsg with its copy from user memory,
  the loopback transmit and the receive softirq loopback runs on the sending CPU; the
  server's receive syscall, tcp_recvmsg with its copy out, the ACK). The psock's work is
  charged by emulated/net/skmsg.py where it happens, and the verdict's instructions by the
  engine. Costs are the profile's ([net]: cycle estimates of what each kernel function
  does); nothing here looks at a published result.
- Figures: per CPU, modeled ns per skb over the measured skbs (after warm-up ones) and what
  they went on; the busiest CPU bounds the flow: Gbit/s = bits of an skb / its ns.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any

PROFILE = "sapphire-rapids-2s"
PATHS = ("direct", "unbound", "bound")
SKBS, WARMUP = 16, 4
ATTEMPTS = 3  # runs of a path the host split before the model gives up (NotOneSkbEach)
BUF_BYTES = 1 << 20  # socket buffers: the receive window never bounds the MSS (half of it)
WAIT_S = 10.0  # the most one skb may take through the real sockets
LINE = 64  # copy_user_line's bytes
WARM_BYTES = 1 << 16


@dataclass(frozen=True)
class ModeledPath:
    """One path's modeled figures (ns are modeled ns of the emulated CPUs, per skb)."""

    path: str
    skb_bytes: int
    skbs: int  # measured skbs
    cpu_ns: dict[int, float]  # CPU -> busy ns per skb
    breakdown: dict[int, dict[str, float]] = field(default_factory=dict)  # CPU -> cost -> ns

    @property
    def busiest_cpu(self) -> int:
        return max(self.cpu_ns, key=lambda cpu: (self.cpu_ns[cpu], -cpu))

    @property
    def gbps(self) -> float:
        """The flow's rate when the busiest CPU is saturated."""
        return self.skb_bytes * 8 / self.cpu_ns[self.busiest_cpu]

    def as_dict(self) -> dict:
        return {**asdict(self), "busiest_cpu": self.busiest_cpu, "gbps": self.gbps}


@dataclass(frozen=True)
class ModeledSockmap:
    """The three paths on one profile."""

    profile: str
    client_cpu: int
    server_cpu: int
    proxy_cpu: int
    paths: dict[str, ModeledPath]

    def x_direct(self, path: str) -> float:
        return self.paths[path].gbps / self.paths["direct"].gbps

    def as_dict(self) -> dict:
        return {"profile": self.profile, "client_cpu": self.client_cpu,
                "server_cpu": self.server_cpu, "proxy_cpu": self.proxy_cpu,
                "paths": {name: {**p.as_dict(), "x_direct": self.x_direct(name)}
                          for name, p in self.paths.items()}}


def model_sockmap(profile: str = PROFILE, *, proxy_cpu: int | None = None,
                  skbs: int = SKBS, warmup: int = WARMUP) -> ModeledSockmap:
    """Direct, unbound and bound on ``profile`` (a shipped name or a file). The client's CPU
    is the emulated CPU of the first host CPU this process may use (the verdict runs where
    the host's loopback softirq ran); the server's is the next; ``proxy_cpu`` (default: the
    one after, or the server's on a 2-CPU machine) takes the bound psock's work."""
    import pybpf

    from ..emulated import psock_table

    if skbs < 1 or warmup < 0:
        raise ValueError(f"skbs must be >= 1 and warmup >= 0, got {skbs}, {warmup}")
    paths, cpus = {}, None
    for path, attempt in ((p, a) for p in PATHS for a in range(ATTEMPTS)):
        if path in paths:
            continue
        emulated = pybpf.system("emulated", profile=profile)
        machine = emulated.machine
        table = psock_table(machine)
        host_cpu = table.host_cpus[0]
        client = table.emulated_cpu(host_cpu)
        others = [c for c in range(machine.num_cpus) if c != client]
        if not others:
            raise ValueError(f"profile {machine.profile.name!r} has one CPU: the model needs "
                             "the client's and another")
        server = others[0]
        proxy = others[len(others) > 1] if proxy_cpu is None else proxy_cpu
        machine.check_cpu(proxy)
        if proxy == client:
            raise ValueError(f"proxy_cpu={proxy} is the client's CPU: the bound psock's "
                             "work must run on another CPU")
        cpus = (client, server, proxy)
        try:
            paths[path] = _run_path(emulated, path, cpus, host_cpu, skbs, warmup)
        except NotOneSkbEach:
            if attempt == ATTEMPTS - 1:
                raise
    return ModeledSockmap(machine.profile.name, *cpus, paths)


def _run_path(emulated: Any, path: str, cpus: tuple[int, int, int], host_cpu: int,
              skbs: int, warmup: int) -> ModeledPath:
    from ..emulated import psock_table
    from .sockmap_paths import SockmapPath

    client, server, proxy = cpus
    machine = emulated.machine
    timing, table = machine.timing, psock_table(machine)
    socks: list[socket.socket] = []
    sockmap = None
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {host_cpu})  # this thread sends: the softirq runs here
        if path == "direct":
            c1, c2 = _connect(socks)
        else:
            (c1, p1), (p2, c2) = _connect(socks), _connect(socks)
            sockmap = SockmapPath(emulated, ingress=False,
                                  target_cpu=proxy if path == "bound" else None)
            sockmap.add_pair(p1, p2)
        size = min(c1.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG), 1 << 16)
        data = (bytes(range(251)) * (size // 251 + 1))[:size]
        lines = -(-size // LINE)
        used = (client, server) if path != "bound" else (client, server, proxy)
        snaps: dict[int, Any] = {}
        before = table.snapshot()
        for i in range(warmup + skbs):
            if i == warmup:
                snaps = {cpu: timing.snapshot(cpu) for cpu in used}
                before = table.snapshot()
            _send_one(timing, c1, data, client, lines)
            _recv_one(timing, c2, size, server, lines)
            if path != "direct":
                _wait_psock(table, i + 1)
        after = table.snapshot()
        spent = {cpu: timing.since(cpu, snaps[cpu]) for cpu in used}  # before the teardown
    finally:
        os.sched_setaffinity(0, mask)
        if sockmap is not None:
            sockmap.close()
        for sock in socks:
            sock.close()
    if path != "direct":
        _check_one_skb_each(path, before, after, skbs, client, proxy if path == "bound"
                            else client, size)
    cpu_ns, breakdown = {}, {}
    for cpu, (ns, costs) in spent.items():
        cpu_ns[cpu] = ns / skbs
        breakdown[cpu] = {cost: c_ns / skbs for cost, (_, c_ns) in costs.items() if c_ns}
    return ModeledPath(path, size, skbs, cpu_ns, breakdown)


def _connect(socks: list[socket.socket]) -> tuple[socket.socket, socket.socket]:
    """A loopback connection with large buffers, (connecting, accepted), both kept in
    ``socks``, and warm: 64 KiB went through it, so the sender's MSS is no longer bound by
    half the SYN's unscaled window (32 KiB) but by loopback's MTU (64 KiB less headers)."""
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            lst.setsockopt(socket.SOL_SOCKET, opt, BUF_BYTES)
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        cli = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        socks.append(cli)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            cli.setsockopt(socket.SOL_SOCKET, opt, BUF_BYTES)
        cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cli.connect(lst.getsockname())
        srv, _ = lst.accept()
        srv.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(srv)
    finally:
        lst.close()
    for sock in (cli, srv):
        sock.settimeout(WAIT_S)
    cli.sendall(bytes(WARM_BYTES))
    _read_exactly(srv, WARM_BYTES)
    return cli, srv


def _send_one(timing: Any, sock: socket.socket, data: bytes, cpu: int, lines: int) -> None:
    """The client's write of one skb, and what its kernel does for it on its CPU: the
    syscall, tcp_sendmsg and the copy, the loopback transmit and the receive softirq into the
    next socket (c2 or p1), which loopback runs here."""
    for event, n in (("syscall_entry", 1), ("tcp_sendmsg_skb", 1), ("copy_user_line", lines),
                     ("tcp_write_xmit_skb", 1), ("tcp_v4_rcv_skb", 1)):
        timing.charge(cpu, event, n)
    sock.sendall(data)


def _recv_one(timing: Any, sock: socket.socket, size: int, cpu: int, lines: int) -> None:
    """The server's read of one skb (however many host reads it takes: one recvmsg of the
    model) and its kernel's work on its CPU: the syscall, tcp_recvmsg, the copy out, the
    ACK."""
    _read_exactly(sock, size)
    for event, n in (("syscall_entry", 1), ("tcp_recvmsg_skb", 1), ("copy_user_line", lines),
                     ("tcp_ack", 1)):
        timing.charge(cpu, event, n)


def _read_exactly(sock: socket.socket, size: int) -> None:
    got = 0
    while got < size:
        chunk = sock.recv(size - got)
        if not chunk:
            raise RuntimeError(f"the receiving socket closed after {got} of {size} bytes")
        got += len(chunk)


def _wait_psock(table: Any, runs: int) -> None:
    """Until the psock's verdict and backlog work for skb ``runs`` have returned (they
    charge their CPUs until then)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        stats = table.snapshot().values()
        if sum(s.verdicts for s in stats) >= runs and sum(s.backlog_runs for s in stats) >= runs:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the psock's work for skb {runs} did not finish within "
                               f"{WAIT_S:g} s")
        time.sleep(0.0002)


class NotOneSkbEach(RuntimeError):
    """The host split a run's skbs (a loaded host can: a send cut short by memory pressure,
    a read that came between two halves), so its figures would not be the model's."""


def _check_one_skb_each(path: str, before: dict, after: dict, skbs: int, verdict_cpu: int,
                        work_cpu: int, size: int) -> None:
    """The measured skbs went one per verdict on the client's CPU and one per work run on
    ``work_cpu``, or the figures would depend on the host's scheduling."""
    delta = {cpu: {k: getattr(after[cpu], k) - getattr(before[cpu], k)
                   for k in ("verdicts", "backlog_runs", "bytes")} for cpu in after}
    busy = {cpu: d for cpu, d in delta.items() if any(d.values())}
    want = {verdict_cpu: {"verdicts": skbs}}
    want.setdefault(work_cpu, {}).update(backlog_runs=skbs, bytes=skbs * size)
    if any(busy.get(cpu, {}).get(k) != v for cpu, rec in want.items() for k, v in rec.items()) \
            or set(busy) - set(want):
        raise NotOneSkbEach(f"{path}: the psock did not take one skb per verdict on CPU "
                           f"{verdict_cpu} and send one per work run on CPU {work_cpu} "
                           f"({skbs} skbs of {size} bytes); per CPU it did {busy}")


def modeled_text(doc: dict) -> str:
    """``ModeledSockmap.as_dict()`` as a table and, per path and CPU, where the ns of an skb
    go."""
    from .report import format_table

    roles: dict[int, str] = {}
    for role in ("client", "server", "proxy"):
        cpu = doc[f"{role}_cpu"]
        roles[cpu] = f"{roles[cpu]}+{role}" if cpu in roles else role
    paths = doc["paths"]
    skb = next(iter(paths.values()))["skb_bytes"]
    rows = [[name, f"{p['gbps']:.1f}", f"{p['x_direct']:.2f}x",
             f"cpu{p['busiest_cpu']} ({roles[p['busiest_cpu']]})",
             " ".join(f"cpu{cpu}={ns:.0f}" for cpu, ns in p["cpu_ns"].items())]
            for name, p in paths.items()]
    out = [f"modeled on {doc['profile']} (the emulated proxy, one {skb}-byte skb at a time: "
           f"client on CPU {doc['client_cpu']}, server on CPU {doc['server_cpu']}, the bound "
           f"psock's work on CPU {doc['proxy_cpu']}; Gbit/s when the busiest CPU is "
           "saturated):",
           format_table(["path", "modeled Gbit/s", "x direct", "busiest", "ns per skb by CPU"],
                        rows),
           "where each CPU's time goes, modeled ns per skb:"]
    for name, p in paths.items():
        for cpu, ns in p["cpu_ns"].items():
            costs = ", ".join(f"{cost} {c_ns:.0f}" for cost, c_ns in p["breakdown"][cpu].items())
            out.append(f"  {name} cpu{cpu} ({roles[cpu]}) {ns:.0f}: {costs}")
    return "\n".join(out)
