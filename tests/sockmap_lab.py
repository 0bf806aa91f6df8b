"""A sockmap proxy on loopback for the data-path tests, on either backend:
c1 <-> p1 (in the map at key 0) and c2 <-> p2; key 1 holds p2 (egress redirect: p1's data
leaves on p2 towards c2) or c2 (ingress redirect: straight into c2's receive side). The
verdict program redirects everything to key 1; an optional stream parser returns the skb's
length or a fixed message size; ``verdict`` replaces the program (its bytes, or a function of
the map's fd giving them)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from helpers import u32
from pybpf.asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R4,
    add64,
    assemble,
    call,
    encode,
    exit_,
    ld_map_fd,
    ldxw,
    mov64,
    stw,
)
from pybpf.uapi import BPF_F_INGRESS, AttachType, MapType, ProgType


def pattern(n: int, seed: int = 0) -> bytes:
    """``n`` bytes no shift or repeat of a chunk can reproduce: a counter's bytes."""
    out = bytearray()
    i = seed * 1_000_003
    while len(out) < n:
        out += i.to_bytes(8, "little")
        i += 1
    return bytes(out[:n])


def verdict_insns(map_fd: int, map_type: int, key: int, flags: int) -> bytes:
    if map_type == MapType.SOCKMAP:
        body = [ld_map_fd(R2, map_fd), mov64(R3, key), mov64(R4, flags),
                call("sk_redirect_map")]
    else:
        body = [stw(FP, -4, key), ld_map_fd(R2, map_fd), mov64(R3, FP), add64(R3, -4),
                mov64(R4, flags), call("sk_redirect_hash")]
    return encode(assemble([*body, exit_()]).instructions)


def msg_verdict_insns(map_fd: int, map_type: int, key: int, flags: int) -> bytes:
    if map_type == MapType.SOCKMAP:
        body = [ld_map_fd(R2, map_fd), mov64(R3, key), mov64(R4, flags),
                call("msg_redirect_map")]
    else:
        body = [stw(FP, -4, key), ld_map_fd(R2, map_fd), mov64(R3, FP), add64(R3, -4),
                mov64(R4, flags), call("msg_redirect_hash")]
    return encode(assemble([*body, exit_()]).instructions)


def returning(value: int) -> bytes:
    return encode(assemble([mov64(R0, value), exit_()]).instructions)


SKB_LEN_PARSER = encode(assemble([ldxw(R0, R1, 0), exit_()]).instructions)


def psock_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("psock-")]


def wait_for(predicate, timeout: float = 3.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    lst = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(lst.getsockname())
    srv, _ = lst.accept()
    lst.close()
    return cli, srv


class Proxy:
    """The map, the programs and the four sockets; ``close`` releases everything."""

    def __init__(self, sys, *, map_type: int = MapType.SOCKMAP, mode: str = "egress",
                 parser: bytes | None = None, verdict_type: int = AttachType.SK_SKB_VERDICT,
                 verdict: bytes | Callable[[int], bytes] | None = None, insert: bool = True,
                 **update_kw) -> None:
        self.sys = sys
        self.fds: list[int] = []
        self.map_type = map_type
        self.map = self._keep(sys.map_create(map_type, 4, 4, 4))
        flags = BPF_F_INGRESS if mode == "ingress" else 0
        if callable(verdict):
            verdict = verdict(self.map)
        code = verdict if verdict is not None else verdict_insns(self.map, map_type, 1, flags)
        self.verdict = self._keep(sys.prog_load(ProgType.SK_SKB, code))
        if parser is not None:
            verdict_type = AttachType.SK_SKB_STREAM_VERDICT
            self.parser = self._keep(sys.prog_load(ProgType.SK_SKB, parser))
            sys.prog_attach(self.parser, self.map, AttachType.SK_SKB_STREAM_PARSER)
        sys.prog_attach(self.verdict, self.map, verdict_type)
        self.c1, self.p1 = tcp_pair()
        self.c2, self.p2 = tcp_pair()
        self.mode = mode
        if insert:
            self.insert(**update_kw)

    def _keep(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def insert(self, **update_kw) -> None:
        second = self.c2 if self.mode == "ingress" else self.p2
        self.sys.map_update_elem(self.map, u32(0), u32(self.p1.fileno()), **update_kw)
        self.sys.map_update_elem(self.map, u32(1), u32(second.fileno()), **update_kw)

    def send_in_thread(self, data: bytes, write_size: int) -> threading.Thread:
        def send() -> None:
            view = memoryview(data)
            while view:
                n = self.c1.send(view[:write_size])
                view = view[n:]

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        return thread

    def receive(self, n: int, timeout: float = 20.0, sock: socket.socket | None = None) -> bytes:
        """``n`` bytes from c2 (or ``sock``) as its application reads them (sock_recv)."""
        out = bytearray()
        sock = sock or self.c2
        while len(out) < n:
            chunk = self.sys.sock_recv(sock, 1 << 20, timeout=timeout)
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def close(self) -> None:
        for sock in (self.c1, self.p1, self.c2, self.p2):
            sock.close()
        for fd in reversed(self.fds):
            try:
                self.sys.close(fd)
            except OSError:
                pass
