"""Differential testing of the map subsystem: one operation sequence, two Systems, every byte.

Rules the harness keeps:
- A sequence is plain data: ops that name maps and sockets by *handle* (their creation slot),
  never by fd, so it runs unchanged on any ``System``, prints readably and can be shrunk.
- Every op records what came back: the bytes (per-CPU values in full, every slot), the errno
  (ENOTSUPP 524 kept apart from EOPNOTSUPP 95), for batches the keys, values, token and end
  flag, and the count a failing write batch reports. What differs between backends by nature
  is normalised, nothing else: map ids become the handle of the map they name (creation
  order), socket cookies become socket handles, fds never appear in a result.
- Order is compared exactly wherever the kernel's is deterministic: every type, and the hash
  family created with BPF_F_ZERO_SEED. Hash maps created without it get walks and dumps
  compared as sorted lists, and the generators issue no single step whose answer depends on
  the seed (get_next_key, partial batches) on them.
- A sequence runs inside ``on_cpu(0)`` (the kernel backend pins the thread), which makes LRU
  eviction and per-CPU placement deterministic; ``SetCpu`` moves it on purpose.
- The first differing op ends the comparison of a sequence (the states have diverged);
  ``shrink`` then cuts the sequence down to the ops the difference needs.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import random
import socket
import struct
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from ..errors import errno_name
from ..system import MapInfo, System
from ..uapi import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_LOCK,
    BPF_NOEXIST,
    FD_VALUE_MAP_TYPES,
    MAP_IN_MAP_TYPES,
    PERCPU_MAP_TYPES,
    MapFlags,
    MapType,
    syscall_value_size,
)

# A handle that never names an open map: its fd is one no backend has open.
BAD_MAP = -1
_BAD_FD = 999_999
# Stands for "the key the previous get_next_key on this map returned" (None at the start or
# after ENOENT), so a walk interleaved with other ops is plain data.
CURSOR = "cursor"
_SO_COOKIE = 57  # include/uapi/asm-generic/socket.h

HASH_TYPES = frozenset({MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH,
                        MapType.LRU_PERCPU_HASH, MapType.HASH_OF_MAPS})
LRU_TYPES = frozenset({MapType.LRU_HASH, MapType.LRU_PERCPU_HASH})
SOCK_TYPES = frozenset({MapType.SOCKMAP, MapType.SOCKHASH})

Result = tuple


# -- operands ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class MapRef:
    """A value that is the fd of map ``handle`` (map-in-map updates), as a u32."""

    handle: int


@dataclass(frozen=True)
class SockRef:
    """A value that is the fd of socket ``handle``, as a u32 or u64 (sockmap updates)."""

    handle: int
    width: int = 8


Value = bytes | MapRef | SockRef


# -- ops --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    """One step of a sequence. ``run`` performs it through a Runner and returns its Result."""

    def run(self, r: Runner) -> Result:  # pragma: no cover - every op overrides it
        raise NotImplementedError

    def maps(self) -> tuple[int, ...]:
        """Map handles this op uses (for shrinking and for the context of a diff)."""
        return (self.m,) if hasattr(self, "m") else ()


@dataclass(frozen=True)
class Create(Op):
    m: int
    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int = 0
    inner: int | None = None  # handle of the inner map template (map-in-map)
    numa_node: int = 0
    map_name: bytes = b""
    map_extra: int = 0

    def run(self, r: Runner) -> Result:
        return r.create(self)

    def maps(self) -> tuple[int, ...]:
        return (self.m,) if self.inner is None else (self.m, self.inner)


@dataclass(frozen=True)
class Update(Op):
    m: int
    key: bytes | None
    value: Value
    flags: int = BPF_ANY

    def run(self, r: Runner) -> Result:
        return r.call(self.m, lambda s, fd: s.map_update_elem(
            fd, self.key, r.encode_value(self.value), self.flags))


@dataclass(frozen=True)
class Lookup(Op):
    m: int
    key: bytes | None
    flags: int = 0

    def run(self, r: Runner) -> Result:
        return r.call(self.m, lambda s, fd: r.decode_value(
            self.m, s.map_lookup_elem(fd, self.key, self.flags)))


@dataclass(frozen=True)
class Delete(Op):
    m: int
    key: bytes | None

    def run(self, r: Runner) -> Result:
        return r.call(self.m, lambda s, fd: s.map_delete_elem(fd, self.key))


@dataclass(frozen=True)
class NextKey(Op):
    """get_next_key from ``key``: bytes, None (first key) or CURSOR."""

    m: int
    key: bytes | None | str = CURSOR

    def run(self, r: Runner) -> Result:
        return r.next_key(self)


@dataclass(frozen=True)
class LookupAndDelete(Op):
    m: int
    key: bytes | None
    flags: int = 0

    def run(self, r: Runner) -> Result:
        return r.call(self.m, lambda s, fd: r.decode_value(
            self.m, s.map_lookup_and_delete_elem(fd, self.key, self.flags)))


@dataclass(frozen=True)
class Freeze(Op):
    m: int

    def run(self, r: Runner) -> Result:
        return r.call(self.m, lambda s, fd: s.map_freeze(fd))


@dataclass(frozen=True)
class LookupBatch(Op):
    """A lookup (``delete``: lookup-and-delete) batch; ``resume`` passes the token the previous
    batch on this map returned (None if none did)."""

    m: int
    count: int
    resume: bool = False
    delete: bool = False
    elem_flags: int = 0
    flags: int = 0

    def run(self, r: Runner) -> Result:
        return r.lookup_batch(self)


@dataclass(frozen=True)
class UpdateBatch(Op):
    m: int
    keys: tuple[bytes, ...]
    values: tuple[Value, ...]
    elem_flags: int = 0
    flags: int = 0

    def run(self, r: Runner) -> Result:
        return r.call(self.m, lambda s, fd: s.map_update_batch(
            fd, list(self.keys), [r.encode_value(v) for v in self.values],
            self.elem_flags, self.flags))


@dataclass(frozen=True)
class DeleteBatch(Op):
    m: int
    keys: tuple[bytes, ...]
    elem_flags: int = 0
    flags: int = 0

    def run(self, r: Runner) -> Result:
        return r.call(self.m, lambda s, fd: s.map_delete_batch(
            fd, list(self.keys), self.elem_flags, self.flags))


@dataclass(frozen=True)
class Walk(Op):
    """Every key by get_next_key from None to ENOENT (sorted where order is the seed's)."""

    m: int

    def run(self, r: Runner) -> Result:
        return r.walk(self.m)


@dataclass(frozen=True)
class Dump(Op):
    """Every element by lookup (and delete) batches, growing the count on ENOSPC as user
    space does; sorted where order is the seed's."""

    m: int
    delete: bool = False

    def run(self, r: Runner) -> Result:
        return r.dump(self)


@dataclass(frozen=True)
class Info(Op):
    m: int

    def run(self, r: Runner) -> Result:
        return r.call(self.m, lambda s, fd: r.info(fd))


@dataclass(frozen=True)
class Close(Op):
    m: int

    def run(self, r: Runner) -> Result:
        return r.close_map(self.m)


@dataclass(frozen=True)
class SetCpu(Op):
    """Move the running thread to ``cpu`` for the ops that follow."""

    cpu: int

    def run(self, r: Runner) -> Result:
        return r.set_cpu(self.cpu)


@dataclass(frozen=True)
class ProgLookup(Op):
    """bpf_map_lookup_elem from a BPF program (sets the LRU reference bit, unlike syscalls)."""

    m: int
    key: bytes

    def run(self, r: Runner) -> Result:
        return r.prog_call(self.m, "map_lookup_elem", self.key)


@dataclass(frozen=True)
class ProgUpdate(Op):
    """bpf_map_update_elem from a BPF program: ``value`` is value_size bytes (one CPU's)."""

    m: int
    key: bytes
    value: bytes
    flags: int = BPF_ANY

    def run(self, r: Runner) -> Result:
        return r.prog_call(self.m, "map_update_elem", self.key, self.value, self.flags)


@dataclass(frozen=True)
class ProgDelete(Op):
    """bpf_map_delete_elem from a BPF program."""

    m: int
    key: bytes

    def run(self, r: Runner) -> Result:
        return r.prog_call(self.m, "map_delete_elem", self.key)


SOCKET_KINDS = ("tcp_listen", "tcp_established", "tcp_unbound", "udp", "udp_bound", "pipe")


@dataclass(frozen=True)
class OpenSocket(Op):
    """A socket (or, as ``pipe``, a non-socket fd) of the given kind, named ``s``."""

    s: int
    kind: str

    def run(self, r: Runner) -> Result:
        return r.open_socket(self.s, self.kind)


@dataclass(frozen=True)
class CloseSocket(Op):
    s: int

    def run(self, r: Runner) -> Result:
        return r.close_socket(self.s)


@dataclass
class OpSequence:
    """A named list of ops, run from CPU ``cpu``."""

    label: str
    ops: list[Op]
    cpu: int = 0


# -- running ----------------------------------------------------------------------------------
def _errno(err: int) -> str:
    # Python names 95 ENOTSUP; the map code's name for it is EOPNOTSUPP (ENOTSUPP is 524).
    return "EOPNOTSUPP" if err == errno.EOPNOTSUPP else errno_name(err)


def _err(exc: BaseException) -> Result:
    if isinstance(exc, OSError) and exc.errno is not None:
        count = getattr(exc, "count", None)
        if count is not None:
            return ("err", _errno(exc.errno), count)
        return ("err", _errno(exc.errno))
    return ("crash", f"{type(exc).__name__}: {exc}")


def _lookup_batch_error(res: Result) -> Result:
    """A failing lookup batch returns no elements; what its count field holds then is not
    part of the contract (the kernel may not have written it), so it is not compared."""
    return res[:2] if res[0] == "err" else res


def _info_fields(i: MapInfo) -> tuple:
    return (MapType(i.type).name if i.type in MapType._value2member_map_ else i.type,
            i.key_size, i.value_size, i.max_entries, hex(i.map_flags), i.name, i.map_extra)


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


@dataclass
class _MapState:
    fd: int
    create: Create
    cursor: bytes | None = None
    token: bytes | None = None

    @property
    def ordered(self) -> bool:
        return not (self.create.map_type in HASH_TYPES
                    and not self.create.map_flags & MapFlags.ZERO_SEED)


class Runner:
    """Runs one sequence on one System, keeping the handle -> fd tables."""

    def __init__(self, system: System) -> None:
        self.sys = system
        self.maps: dict[int, _MapState] = {}
        self.id_to_handle: dict[int, int] = {}
        self.sockets: dict[int, object] = {}
        self.cookie_to_handle: dict[int, int] = {}
        self.programs: dict[tuple[int, str], int] = {}  # (map handle, helper) -> prog fd
        self._cpu_stack = contextlib.ExitStack()

    # plumbing
    def fd_of(self, handle: int) -> int:
        st = self.maps.get(handle)
        return st.fd if st is not None else _BAD_FD

    def call(self, handle: int, fn: Callable[[System, int], object]) -> Result:
        if handle != BAD_MAP and handle not in self.maps:
            return ("nomap",)
        try:
            out = fn(self.sys, self.fd_of(handle))
        except Exception as exc:  # a backend crash is a result to compare
            return _err(exc)
        if isinstance(out, bytes):
            out = out.hex()
        return ("ok",) if out is None else ("ok", out)

    def info(self, fd: int) -> tuple:
        """map_get_info without the id (ids differ between backends; see decode_value)."""
        return _info_fields(self.sys.map_get_info(fd))

    def encode_value(self, value: Value) -> bytes:
        if isinstance(value, MapRef):
            return struct.pack("<I", self.fd_of(value.handle))
        if isinstance(value, SockRef):
            sock = self.sockets.get(value.handle)
            fd = sock.fileno() if sock is not None else _BAD_FD
            return fd.to_bytes(value.width, "little")
        return value

    def decode_value(self, handle: int, raw: bytes) -> object:
        mt = self.maps[handle].create.map_type if handle in self.maps else None
        if mt in MAP_IN_MAP_TYPES and len(raw) == 4:
            map_id = int.from_bytes(raw, "little")
            return f"map#{self.id_to_handle.get(map_id, f'?id{map_id}')}"
        if mt in SOCK_TYPES and len(raw) == 8:
            cookie = int.from_bytes(raw, "little")
            return f"sock#{self.cookie_to_handle.get(cookie, f'?cookie{cookie}')}"
        return raw.hex()

    # ops
    def create(self, op: Create) -> Result:
        inner_fd = 0 if op.inner is None else self.fd_of(op.inner)
        try:
            fd = self.sys.map_create(op.map_type, op.key_size, op.value_size, op.max_entries,
                                     op.map_flags, inner_fd, op.numa_node, op.map_name,
                                     op.map_extra)
        except Exception as exc:
            return _err(exc)
        old = self.maps.pop(op.m, None)
        if old is not None:
            self._close_fd(old.fd)
        self.maps[op.m] = _MapState(fd, op)
        try:
            info = self.sys.map_get_info(fd)
        except Exception as exc:
            return ("ok", "info failed", _err(exc))
        self.id_to_handle[info.id] = op.m
        return ("ok", _info_fields(info))

    def next_key(self, op: NextKey) -> Result:
        st = self.maps.get(op.m)
        key = (st.cursor if st is not None else None) if op.key == CURSOR else op.key
        res = self.call(op.m, lambda s, fd: s.map_get_next_key(fd, key))
        if st is not None:
            st.cursor = bytes.fromhex(res[1]) if res[0] == "ok" else None
        return res

    def _batch_result(self, handle: int, out) -> tuple:
        return (tuple(k.hex() for k in out.keys),
                tuple(self.decode_value(handle, v) for v in out.values),
                _hex(out.out_batch), out.end)

    def lookup_batch(self, op: LookupBatch) -> Result:
        st = self.maps.get(op.m)
        token = st.token if (st is not None and op.resume) else None
        fn = "map_lookup_and_delete_batch" if op.delete else "map_lookup_batch"

        def go(s: System, fd: int):
            out = getattr(s, fn)(fd, token, op.count, op.elem_flags, op.flags)
            if st is not None:
                st.token = out.out_batch
            return self._batch_result(op.m, out)

        return _lookup_batch_error(self.call(op.m, go))

    def walk(self, handle: int) -> Result:
        st = self.maps.get(handle)
        if st is None:
            return ("nomap",)
        keys: list[str] = []
        key = None
        # A correct walk ends within max_entries steps; the bound stops a looping backend.
        for _ in range(min(st.create.max_entries, 1 << 16) * 2 + 8):
            try:
                key = self.sys.map_get_next_key(st.fd, key)
            except Exception as exc:
                end = _err(exc)
                break
            keys.append(key.hex())
        else:
            end = ("no end",)
        if not st.ordered:
            keys.sort()
        return ("walk", tuple(keys), end)

    def dump(self, op: Dump) -> Result:
        st = self.maps.get(op.m)
        if st is None:
            return ("nomap",)
        fn = getattr(self.sys, "map_lookup_and_delete_batch" if op.delete
                     else "map_lookup_batch")
        pairs: list[tuple] = []
        token, count = None, 4
        end: Result = ("no end",)
        for _ in range(st.create.max_entries * 2 + 16):
            try:
                out = fn(st.fd, token, count)
            except Exception as exc:
                if getattr(exc, "errno", None) == errno.ENOSPC and count < 1 << 16:
                    count *= 2
                    continue
                end = _lookup_batch_error(_err(exc))
                break
            keys, values, _, done = self._batch_result(op.m, out)
            pairs.extend(zip(keys, values, strict=True))
            token = out.out_batch
            if done:
                end = ("end",)
                break
        if not st.ordered:
            pairs.sort(key=repr)
        return ("dump", tuple(pairs), end)

    def close_map(self, handle: int) -> Result:
        st = self.maps.pop(handle, None)
        if st is None:
            return ("nomap",)
        for key in [k for k in self.programs if k[0] == handle]:
            self._close_fd(self.programs.pop(key))
        self._close_fd(st.fd)
        return ("ok",)

    def _close_fd(self, fd: int) -> None:
        with contextlib.suppress(Exception):
            self.sys.close(fd)

    def set_cpu(self, cpu: int) -> Result:
        try:
            self._cpu_stack.enter_context(self.sys.on_cpu(cpu))
        except Exception as exc:
            return _err(exc)
        return ("ok",)

    def prog_call(self, handle: int, helper: str, key: bytes, value: bytes = b"",
                  flags: int = 0) -> Result:
        st = self.maps.get(handle)
        if st is None:
            return ("nomap",)
        try:
            prog = self.programs.get((handle, helper))
            if prog is None:
                prog = self.programs[(handle, helper)] = load_map_program(
                    self.sys, st.fd, helper, st.create.key_size,
                    st.create.value_size if helper == "map_update_elem" else 0)
            run = self.sys.prog_test_run(prog, ctx_in=prog_ctx(key, value, flags),
                                         ctx_size_out=0, repeat=0)
        except Exception as exc:  # a backend crash is a result to compare
            return _err(exc)
        if helper != "map_lookup_elem":
            return ("ok", _helper_result(run.retval))
        return ("ok", "miss" if run.retval == _PROG_MISS else f"hit {run.retval & 0xFF:02x}")

    def open_socket(self, s: int, kind: str) -> Result:
        self.close_socket(s)
        obj = _make_socket(kind)
        self.sockets[s] = obj
        if isinstance(obj, socket.socket):
            with contextlib.suppress(OSError):
                cookie = int.from_bytes(obj.getsockopt(socket.SOL_SOCKET, _SO_COOKIE, 8),
                                        "little")
                self.cookie_to_handle[cookie] = s
        return ("ok",)

    def close_socket(self, s: int) -> Result:
        obj = self.sockets.pop(s, None)
        if obj is None:
            return ("nosock",)
        obj.close()
        for extra in getattr(obj, "_keep", ()):
            extra.close()
        return ("ok",)

    def run(self, seq: OpSequence) -> list[Result]:
        results: list[Result] = []
        try:
            with self.sys.on_cpu(seq.cpu), self._cpu_stack:
                for op in seq.ops:
                    results.append(op.run(self))
        finally:
            for key in list(self.programs):
                self._close_fd(self.programs.pop(key))
            for handle in list(self.maps):
                self.close_map(handle)
            for s in list(self.sockets):
                self.close_socket(s)
        return results


class _Pipe:
    """A non-socket fd (a pipe's read end) standing where a socket is expected."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()

    def fileno(self) -> int:
        return self._r

    def close(self) -> None:
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


class _Socket(socket.socket):
    """A socket that keeps the peers it needs alive (an established TCP pair)."""

    _keep: tuple = ()


def _make_socket(kind: str):
    if kind == "pipe":
        return _Pipe()
    if kind == "udp" or kind == "udp_bound":
        sock = _Socket(socket.AF_INET, socket.SOCK_DGRAM)
        if kind == "udp_bound":
            sock.bind(("127.0.0.1", 0))
        return sock
    sock = _Socket(socket.AF_INET, socket.SOCK_STREAM)
    if kind == "tcp_listen":
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
    elif kind == "tcp_established":
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        sock.connect(server.getsockname())
        peer, _ = server.accept()
        sock._keep = (server, peer)
    elif kind != "tcp_unbound":
        raise ValueError(f"unknown socket kind {kind!r}: choose one of {SOCKET_KINDS}")
    return sock


# -- program-side lookups -------------------------------------------------------------------
_PROG_MISS = 0xFFFF
# Map types a sleepable (SYSCALL) program may use that program-side ops are generated for.
PROG_LOOKUP_TYPES = frozenset({MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH,
                               MapType.LRU_PERCPU_HASH, MapType.ARRAY, MapType.PERCPU_ARRAY})


def _round8(n: int) -> int:
    return (n + 7) // 8 * 8


def prog_ctx(key: bytes, value: bytes = b"", flags: int = 0) -> bytes:
    """The ctx the map programs read: u64 flags, the key and the value, each 8-byte aligned."""
    return (struct.pack("<Q", flags & (1 << 64) - 1) + key.ljust(_round8(len(key)), b"\0")
            + value)


def load_map_program(system: System, map_fd: int, helper: str, key_size: int,
                     value_size: int = 0) -> int:
    """A SYSCALL program that calls ``helper`` (map_lookup_elem, map_update_elem or
    map_delete_elem) on the map with the key (and value, and flags) from its ctx
    (``prog_ctx``). Lookup returns 0x100 | the value's first byte (this CPU's slot for per-CPU
    maps) or 0xFFFF if absent; update and delete return the helper's result (0 or -errno).

    These are the program paths: a program lookup sets an LRU element's reference bit, which
    no syscall does, and a program update of a per-CPU map writes only this CPU's slot.
    """
    from .. import asm
    from ..uapi import BPF_F_SLEEPABLE, ProgType

    key_at = 8
    value_at = key_at + _round8(key_size)
    key_stack = -_round8(key_size)
    value_stack = key_stack - _round8(value_size)
    items: list = [asm.mov64(asm.R6, asm.R1)]
    # ctx -> stack a byte at a time (any size; helpers take stack pointers, not ctx ones)
    for i in range(key_size):
        items += [asm.ldxb(asm.R0, asm.R6, key_at + i), asm.stxb(asm.R10, key_stack + i, asm.R0)]
    for i in range(value_size):
        items += [asm.ldxb(asm.R0, asm.R6, value_at + i),
                  asm.stxb(asm.R10, value_stack + i, asm.R0)]
    items += [asm.ld_map_fd(asm.R1, map_fd), asm.mov64(asm.R2, asm.R10),
              asm.add64(asm.R2, key_stack)]
    if helper == "map_update_elem":
        items += [asm.mov64(asm.R3, asm.R10), asm.add64(asm.R3, value_stack),
                  asm.ldxdw(asm.R4, asm.R6, 0)]
    items.append(asm.call(helper))
    if helper == "map_lookup_elem":
        items += [asm.jeq(asm.R0, 0, "miss"), asm.ldxb(asm.R0, asm.R0, 0),
                  asm.or64(asm.R0, 0x100), asm.exit_(), asm.label("miss"),
                  asm.mov64(asm.R0, _PROG_MISS)]
    items.append(asm.exit_())
    insns = asm.encode(asm.assemble(items).instructions)
    return system.prog_load(ProgType.SYSCALL, insns, prog_name=b"pybpf_diffmap",
                            prog_flags=BPF_F_SLEEPABLE)


def _helper_result(retval: int) -> str:
    ret = retval - (1 << 32) if retval >> 31 else retval
    return f"ret {ret}" if ret >= 0 else f"ret -{_errno(-ret)}"


def programs_supported(system: System) -> str | None:
    """None if ``system`` can run the lookup program, else why not."""
    fd = None
    try:
        fd = system.map_create(MapType.HASH, 4, 4, 1)
        prog = load_map_program(system, fd, "map_lookup_elem", 4)
        try:
            run = system.prog_test_run(prog, ctx_in=prog_ctx(b"\0" * 4), ctx_size_out=0,
                                       repeat=0)
        finally:
            system.close(prog)
        if run.retval != _PROG_MISS:
            return f"the lookup program returned {run.retval:#x} on an empty map"
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        if fd is not None:
            system.close(fd)


# -- comparing --------------------------------------------------------------------------------
@dataclass
class Mismatch:
    """The first op of a sequence whose results differ between the two backends."""

    seq: OpSequence
    index: int
    a_name: str
    b_name: str
    a: Result
    b: Result

    def format(self, context: int = 12) -> str:
        op = self.seq.ops[self.index]
        handles = set(op.maps())
        lines = [f"MISMATCH in {self.seq.label} at op {self.index} of {len(self.seq.ops)}:"]
        earlier = [(i, o) for i, o in enumerate(self.seq.ops[:self.index])
                   if len(self.seq.ops) <= 2 * context or not handles
                   or set(o.maps()) & handles or isinstance(o, SetCpu | OpenSocket | CloseSocket)]
        if len(earlier) > context:
            lines.append(f"  ... {len(earlier) - context} earlier ops on these maps")
        for i, o in earlier[-context:]:
            lines.append(f"  [{i}] {_show(o, 400)}")
        lines.append(f"  [{self.index}] {_show(op, 400)}   <-- here")
        lines.append(f"    {self.a_name:>9}: {_show(self.a)}")
        lines.append(f"    {self.b_name:>9}: {_show(self.b)}")
        return "\n".join(lines)


def _show(thing: object, limit: int = 600) -> str:
    text = repr(thing)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def first_mismatch(seq: OpSequence, a: System, b: System, a_name: str = "A",
                   b_name: str = "B") -> tuple[Mismatch | None, int]:
    """Run ``seq`` on both; the first mismatch (or None) and the number of ops compared."""
    ra = Runner(a).run(seq)
    rb = Runner(b).run(seq)
    for i, (x, y) in enumerate(zip(ra, rb, strict=True)):
        if x != y:
            return Mismatch(seq, i, a_name, b_name, x, y), i + 1
    return None, len(ra)


def _signature(m: Mismatch) -> tuple:
    """What makes two mismatches the same finding: the kind of op and of both results
    (ok, or which errno), not the exact bytes."""
    def kind(r: Result) -> tuple:
        return r[:2] if r[0] in ("err", "crash") else r[:1]

    return type(m.seq.ops[m.index]), kind(m.a), kind(m.b)


def shrink(mismatch: Mismatch, a: System, b: System, budget: int = 400) -> Mismatch:
    """A shorter sequence with the same mismatch (same op kind, same kinds of results): drop
    ops greedily, halves first, then smaller chunks, down to single ops."""
    best = mismatch
    ops = list(mismatch.seq.ops[:mismatch.index + 1])
    tries = 0
    want = _signature(mismatch)

    def attempt(candidate: list[Op]) -> Mismatch | None:
        nonlocal tries
        tries += 1
        seq = replace(mismatch.seq, ops=candidate, label=mismatch.seq.label + " (shrunk)")
        found, _ = first_mismatch(seq, a, b, mismatch.a_name, mismatch.b_name)
        return found if found is not None and _signature(found) == want else None

    chunk = max(1, len(ops) // 2)
    while chunk >= 1 and tries < budget:
        i = 0
        changed = False
        while i < len(ops) and tries < budget:
            candidate = ops[:i] + ops[i + chunk:]
            found = attempt(candidate) if candidate else None
            if found is not None:
                ops = candidate[:found.index + 1]
                best = found
                changed = True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return best


@dataclass
class Summary:
    sequences: int = 0
    ops: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    per_family: dict[str, list[int]] = field(default_factory=dict)
    programs_off: str | None = None  # why program-side lookups were left out, if they were

    def add(self, family: str, found: Mismatch | None, ops: int) -> None:
        self.sequences += 1
        self.ops += ops
        fam = self.per_family.setdefault(family, [0, 0, 0])
        fam[0] += 1
        fam[1] += ops
        if found is not None:
            fam[2] += 1
            self.mismatches.append(found)

    def report(self, a_name: str, b_name: str) -> str:
        lines = [f"differential {a_name} vs {b_name}: compared {self.sequences} sequences, "
                 f"{self.ops} operations, {len(self.mismatches)} mismatching sequences"]
        for fam, (n, ops, bad) in sorted(self.per_family.items()):
            lines.append(f"  {fam:<14} {n:>5} sequences {ops:>7} ops {bad:>4} mismatches")
        if self.programs_off:
            lines.append(f"  program-side lookups left out: {self.programs_off}")
        return "\n".join(lines)


# -- generating -------------------------------------------------------------------------------
class Gen:
    """Random choices for one sequence: a seeded ``random.Random`` and the CPU count."""

    def __init__(self, rng: random.Random, ncpu: int, programs: bool = True) -> None:
        self.rng = rng
        self.ncpu = ncpu
        self.programs = programs  # whether to issue program-side lookups

    def pick(self, weighted: dict) -> object:
        return self.rng.choices(list(weighted), weights=list(weighted.values()))[0]

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def data(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def keys(self, key_size: int, n: int) -> list[bytes]:
        n = min(n, 256 ** key_size)
        pool: set[bytes] = set()
        while len(pool) < n:
            pool.add(self.data(key_size))
        return sorted(pool)

    def value(self, map_type: int, value_size: int) -> bytes:
        return self.data(syscall_value_size(map_type, value_size, self.ncpu))

    def update_flags(self) -> int:
        return self.pick({BPF_ANY: 50, BPF_NOEXIST: 20, BPF_EXIST: 20, BPF_F_LOCK: 2,
                          3: 1, 8: 1})

    def lookup_flags(self) -> int:
        return self.pick({0: 60, BPF_F_LOCK: 1, BPF_NOEXIST: 1, 8: 1})

    def batch_elem_flags(self) -> int:
        return self.pick({0: 40, BPF_F_LOCK: 1, BPF_NOEXIST: 1, BPF_EXIST: 1})

    def batch_flags(self) -> int:
        return self.pick({0: 40, 1: 1})

    def access_flags(self, p: float = 0.05) -> int:
        if not self.chance(p):
            return 0
        return self.pick({MapFlags.RDONLY: 2, MapFlags.WRONLY: 2, MapFlags.RDONLY_PROG: 1,
                          MapFlags.WRONLY_PROG: 1})


def _u32(i: int) -> bytes:
    return struct.pack("<I", i & 0xFFFFFFFF)


def _element_ops(g: Gen, m: int, create: Create, n: int, keys: Callable[[], bytes | None],
                 value: Callable[[], Value], ordered: bool, weights: dict[str, float],
                 max_batch: int = 4) -> list[Op]:
    """``n`` random element ops on map ``m``; ``weights`` picks among the op kinds."""
    ops: list[Op] = []
    for _ in range(n):
        kind = g.pick(weights)
        if kind == "update":
            ops.append(Update(m, keys(), value(), g.update_flags()))
        elif kind == "lookup":
            ops.append(Lookup(m, keys(), g.lookup_flags()))
        elif kind == "delete":
            ops.append(Delete(m, keys()))
        elif kind == "next_key":
            if ordered:
                ops.append(NextKey(m, g.pick({CURSOR: 14, None: 2, "key": 4})))
                if ops[-1].key == "key":
                    ops[-1] = NextKey(m, keys())
            else:
                ops.append(Walk(m))
        elif kind == "lookup_and_delete":
            ops.append(LookupAndDelete(m, keys(), g.lookup_flags()))
        elif kind == "lookup_batch":
            delete = g.chance(0.3)
            if ordered:
                count = g.pick({0: 1, 1: 4, 2: 4, 3: 3, 4: 2, 5: 1,
                                create.max_entries + 2: 2})
                ops.append(LookupBatch(m, count, g.chance(0.6), delete,
                                       g.batch_elem_flags(), g.batch_flags()))
            elif g.chance(0.2):  # only answers the seed cannot change
                ops.append(LookupBatch(m, 0, False, delete, g.batch_elem_flags(), 0))
            else:
                ops.append(Dump(m, delete))
        elif kind == "update_batch":
            k = g.rng.randint(0, max_batch)
            ops.append(UpdateBatch(m, tuple(keys() or b"" for _ in range(k)),
                                   tuple(value() for _ in range(k)),
                                   g.batch_elem_flags(), g.batch_flags()))
        elif kind == "delete_batch":
            k = g.rng.randint(0, max_batch)
            ops.append(DeleteBatch(m, tuple(keys() or b"" for _ in range(k)),
                                   g.batch_elem_flags(), g.batch_flags()))
        elif kind == "walk":
            ops.append(Walk(m))
        elif kind == "dump":
            ops.append(Dump(m, g.chance(0.2)))
        elif kind == "freeze":
            ops.append(Freeze(m))
        elif kind == "info":
            ops.append(Info(m))
        elif kind == "set_cpu":
            ops.append(SetCpu(g.rng.randrange(g.ncpu)))
        elif kind.startswith("prog_"):
            if g.programs and create.map_type in PROG_LOOKUP_TYPES:
                if kind == "prog_lookup":
                    ops.append(ProgLookup(m, keys()))
                elif kind == "prog_update":
                    # A program's per-CPU update copies round_up(value_size, 8) bytes from
                    # its stack and zeroes only value_size bytes of the other CPUs' slots, so
                    # padding would hold stack garbage and stale bytes: no padding here.
                    if create.map_type not in PERCPU_MAP_TYPES or create.value_size % 8 == 0:
                        ops.append(ProgUpdate(m, keys(), g.data(create.value_size),
                                              g.update_flags()))
                else:
                    ops.append(ProgDelete(m, keys()))
        else:
            raise ValueError(f"unknown op kind {kind!r}")
    return ops


_HASH_WEIGHTS = {"update": 30, "lookup": 12, "delete": 8, "next_key": 12,
                 "lookup_and_delete": 5, "lookup_batch": 7, "update_batch": 4,
                 "delete_batch": 3, "walk": 3, "dump": 2, "freeze": 0.3, "info": 0.5}


def _hash_family(g: Gen, types: Sequence[int], lru: bool) -> list[Op]:
    mt = g.rng.choice(types)
    zero_seed = g.chance(0.8)
    flags = MapFlags.ZERO_SEED if zero_seed else 0
    if mt in LRU_TYPES and g.chance(0.4):
        flags |= MapFlags.NO_COMMON_LRU
    if g.chance(0.02 if lru else 0.3):
        flags |= MapFlags.NO_PREALLOC
    flags |= g.access_flags(0.03)
    ks = g.pick({1: 2, 2: 2, 3: 2, 4: 3, 5: 2, 6: 1, 8: 3, 12: 2, 16: 2, 20: 1, 33: 1, 64: 1})
    vs = g.rng.choice([1, 2, 4, 7, 8, 12, 16, 24])
    me = g.pick({2: 1, 3: 1, 4: 1, 5: 1, 8: 1, 9: 1, 16: 1, 31: 1, 64: 1, 130: 0.3,
                 300: 0.2} if lru else {1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 8: 1, 16: 1, 31: 1})
    create = Create(0, mt, ks, vs, me, int(flags))
    pool = g.keys(ks, me * (3 if lru else 2) + 2)
    weights = dict(_HASH_WEIGHTS)
    if lru:
        weights.update(update=45, prog_lookup=10, prog_update=6, prog_delete=2, set_cpu=0.7)
    else:
        weights.update(prog_lookup=2, prog_update=3, prog_delete=1,
                       set_cpu=0.5 if mt == MapType.PERCPU_HASH else 0)
    n = g.rng.randint(20, 120 if lru else 90) + (2 * me if me > 64 else 0)
    return [create] + _element_ops(
        g, 0, create, n, lambda: g.rng.choice(pool), lambda: g.value(mt, vs), zero_seed,
        weights)


def gen_hash(g: Gen) -> list[Op]:
    """HASH and PERCPU_HASH: flags, full maps, deletes during walks, batches."""
    return _hash_family(g, [MapType.HASH, MapType.PERCPU_HASH], lru=False)


def gen_lru(g: Gen) -> list[Op]:
    """LRU_HASH and LRU_PERCPU_HASH (common and NO_COMMON_LRU): eviction, ref bits."""
    return _hash_family(g, [MapType.LRU_HASH, MapType.LRU_PERCPU_HASH], lru=True)


def gen_array(g: Gen) -> list[Op]:
    """ARRAY and PERCPU_ARRAY: every index exists, out-of-range indices, freeze."""
    mt = g.rng.choice([MapType.ARRAY, MapType.PERCPU_ARRAY])
    flags = g.pick({0: 20, MapFlags.MMAPABLE: 2, MapFlags.NUMA_NODE: 2,
                    MapFlags.INNER_MAP: 1, MapFlags.PRESERVE_ELEMS: 0.5})
    flags |= g.access_flags()
    ks = 4 if g.chance(0.97) else 8
    vs = g.rng.choice([1, 3, 4, 8, 12, 16, 32])
    me = g.rng.choice([1, 2, 3, 4, 7, 8, 16])
    create = Create(0, mt, ks, vs, me, int(flags))

    def key() -> bytes:
        if g.chance(0.03):
            return _u32(0xFFFFFFFF)
        return _u32(g.rng.randrange(me + 2))[:ks].ljust(ks, b"\0")

    weights = dict(_HASH_WEIGHTS, freeze=0.7, prog_lookup=2, prog_update=2, prog_delete=0.5,
                   set_cpu=0.5)
    return [create] + _element_ops(g, 0, create, g.rng.randint(15, 70), key,
                                   lambda: g.value(mt, vs), True, weights)


def gen_map_in_map(g: Gen) -> list[Op]:
    """ARRAY_OF_MAPS and HASH_OF_MAPS: inner maps compatible or not, ids, closed inners."""
    outer_type = g.rng.choice([MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS])
    inner_type = g.rng.choice([MapType.HASH, MapType.ARRAY, MapType.LRU_HASH,
                               MapType.PERCPU_ARRAY, MapType.QUEUE])
    iks = 0 if inner_type == MapType.QUEUE else 4
    inner_flags = int(MapFlags.INNER_MAP) if (inner_type == MapType.ARRAY
                                              and g.chance(0.4)) else 0
    ops: list[Op] = [Create(1, inner_type, iks, 8, 4, inner_flags)]
    inner = g.pick({1: 20, BAD_MAP: 1})
    zero_seed = outer_type != MapType.HASH_OF_MAPS or g.chance(0.8)
    oflags = int(MapFlags.ZERO_SEED) if (outer_type == MapType.HASH_OF_MAPS and zero_seed) else 0
    oks = 4 if outer_type == MapType.ARRAY_OF_MAPS else g.rng.choice([4, 8, 3])
    ovs = 4 if g.chance(0.97) else 8
    me = g.rng.choice([1, 2, 3, 4, 8])
    create = Create(0, outer_type, oks, ovs, me, oflags, inner=inner)
    ops.append(create)
    # Candidates 2..5: like the template, or differing in one attribute.
    for h in range(2, 6):
        variant = g.pick({"same": 6, "entries": 2, "type": 1, "flags": 1, "value": 1})
        c = Create(h, inner_type, iks, 8, 4, inner_flags)
        if variant == "entries":
            c = replace(c, max_entries=g.rng.choice([1, 2, 8]))
        elif variant == "type":
            c = replace(c, map_type=MapType.HASH if inner_type != MapType.HASH
                        else MapType.LRU_HASH, key_size=4)
        elif variant == "flags":
            c = replace(c, map_flags=(int(MapFlags.NO_PREALLOC) if inner_type == MapType.HASH
                                      else int(MapFlags.RDONLY_PROG)))
        elif variant == "value":
            c = replace(c, value_size=16)
        ops.append(c)
    pool = ([_u32(i) for i in range(me + 2)] if outer_type == MapType.ARRAY_OF_MAPS
            else g.keys(oks, me * 2 + 2))
    refs = [MapRef(h) for h in (1, 2, 3, 4, 5)] + [MapRef(BAD_MAP), MapRef(0)]
    weights = dict(_HASH_WEIGHTS, update=25, lookup_and_delete=2, freeze=0.2)
    n = g.rng.randint(15, 60)
    body = _element_ops(g, 0, create, n, lambda: g.rng.choice(pool),
                        lambda: g.rng.choice(refs), zero_seed, weights)
    # Close some inner maps part-way: the outer map keeps them (and their ids) alive.
    for h in (2, 3):
        if g.chance(0.4):
            body.insert(g.rng.randrange(len(body) + 1), Close(h))
    return ops + body


def gen_queue_stack(g: Gen) -> list[Op]:
    """QUEUE and STACK: push/peek/pop, full with and without BPF_EXIST, invalid commands."""
    mt = g.rng.choice([MapType.QUEUE, MapType.STACK])
    ks = 0 if g.chance(0.97) else 4
    vs = g.rng.choice([1, 4, 8, 13])
    me = g.rng.choice([1, 2, 3, 5, 8])
    flags = g.pick({0: 30, MapFlags.NUMA_NODE: 1, MapFlags.ZERO_SEED: 1,
                    MapFlags.NO_PREALLOC: 1}) | g.access_flags()
    create = Create(0, mt, ks, vs, me, int(flags))
    ops: list[Op] = [create]
    for _ in range(g.rng.randint(10, 60)):
        kind = g.pick({"push": 10, "peek": 5, "pop": 6, "other": 2, "freeze": 0.2})
        if kind == "push":
            ops.append(Update(0, None, g.data(vs),
                              g.pick({BPF_ANY: 12, BPF_EXIST: 6, BPF_NOEXIST: 1, 3: 1,
                                      BPF_F_LOCK: 1})))
        elif kind == "peek":
            ops.append(Lookup(0, None, g.lookup_flags()))
        elif kind == "pop":
            ops.append(LookupAndDelete(0, None, g.pick({0: 20, BPF_F_LOCK: 1, 1: 1})))
        elif kind == "freeze":
            ops.append(Freeze(0))
        else:
            ops.append(g.rng.choice([Delete(0, None), NextKey(0, None), LookupBatch(0, 2),
                                     UpdateBatch(0, (b"",), (g.data(vs),)), Info(0)]))
    return ops


def _lpm_key(prefixlen: int, data: bytes) -> bytes:
    return struct.pack("<I", prefixlen) + data


def gen_lpm(g: Gen) -> list[Op]:
    """LPM_TRIE: nested prefixes, longest-prefix lookups, post-order walks, full tries."""
    ds = g.rng.choice([1, 2, 4, 8, 16])
    ks = 4 + ds
    vs = g.rng.choice([1, 4, 8, 12])
    me = g.rng.choice([1, 2, 4, 8, 16])
    flags = int(MapFlags.NO_PREALLOC) if g.chance(0.95) else 0
    flags |= g.access_flags(0.03)
    create = Create(0, MapType.LPM_TRIE, ks, vs, me, flags)
    maxlen = ds * 8
    prefixes: list[bytes] = []
    for _ in range(me * 2 + 2):
        if prefixes and g.chance(0.5):  # nest under an existing prefix
            base = g.rng.choice(prefixes)
            plen = min(maxlen, struct.unpack("<I", base[:4])[0] + g.rng.randint(0, 8))
            data = base[4:]
            # keep the base's leading bits, randomise the rest
            mask = int.from_bytes(b"\xff" * ds, "big") >> min(plen, maxlen) if plen < maxlen \
                else 0
            rnd = int.from_bytes(g.data(ds), "big") & mask
            data = (int.from_bytes(data, "big") & ~mask & ((1 << maxlen) - 1) | rnd).to_bytes(
                ds, "big")
            prefixes.append(_lpm_key(plen, data))
        else:
            plen = g.pick({g.rng.randint(0, maxlen): 20, maxlen: 4, 0: 1, maxlen + 1: 1})
            prefixes.append(_lpm_key(plen, g.data(ds)))

    def key() -> bytes:
        if g.chance(0.25):  # a full-length address: longest-prefix match
            base = g.rng.choice(prefixes)
            return _lpm_key(maxlen, base[4:] if g.chance(0.6) else g.data(ds))
        return g.rng.choice(prefixes)

    weights = dict(_HASH_WEIGHTS, lookup_and_delete=2, freeze=0.2)
    return [create] + _element_ops(g, 0, create, g.rng.randint(15, 80), key,
                                   lambda: g.data(vs), True, weights)


def gen_bloom(g: Gen) -> list[Op]:
    """BLOOM_FILTER: push and peek (peeks of absent values too, with BPF_F_ZERO_SEED)."""
    vs = g.rng.choice([1, 3, 4, 8, 16])
    me = g.rng.choice([1, 2, 4, 16, 100])
    zero_seed = g.chance(0.85)
    # Without the zero seed a peek is only seed-independent for a value that certainly went
    # in, so those maps get no access flags and no freeze (either would make pushes fail).
    flags = int(MapFlags.ZERO_SEED) | g.access_flags(0.03) if zero_seed else 0
    extra = g.pick({0: 5, g.rng.randint(1, 15): 10, 16: 1})
    ks = 0 if g.chance(0.97) else 4
    ops: list[Op] = [Create(0, MapType.BLOOM_FILTER, ks, vs, me, flags, map_extra=extra)]
    pool = g.keys(vs, me * 3 + 3)
    pushed: list[bytes] = []
    for _ in range(g.rng.randint(10, 60)):
        kind = g.pick({"push": 10, "peek": 10, "other": 2})
        if kind == "push":
            v = g.rng.choice(pool)
            flag = g.pick({BPF_ANY: 20, BPF_EXIST: 1, BPF_NOEXIST: 1})
            if flag == BPF_ANY:
                pushed.append(v)
            ops.append(Update(0, None, v, flag))
        elif kind == "peek":
            # Without the zero seed only pushed values have a seed-independent answer.
            candidates = pool if zero_seed else pushed
            if candidates:
                ops.append(BloomPeek(0, g.rng.choice(candidates)))
        else:
            ops.append(g.rng.choice([Delete(0, None), NextKey(0, None), LookupBatch(0, 2),
                                     LookupAndDelete(0, None), Info(0)]
                                    + [Freeze(0)] * zero_seed))
    return ops


@dataclass(frozen=True)
class BloomPeek(Op):
    """BLOOM_FILTER lookup: the value is the input (found, or ENOENT)."""

    m: int
    value: bytes

    def run(self, r: Runner) -> Result:
        return r.call(self.m, lambda s, fd: s.map_lookup_elem(fd, None, 0,
                                                              value=self.value).hex())


def _devmap_value(g: Gen, vs: int) -> bytes:
    ifindex = g.pick({1: 16, 0: 3, 424242: 1})
    prog = g.pick({0: 20, 0xFFFFFFFF: 2, _BAD_FD: 1})
    return (_u32(ifindex) + _u32(prog))[:vs]


def gen_devmap(g: Gen) -> list[Op]:
    """DEVMAP and DEVMAP_HASH with ifindex 1 (lo), 0 and a missing device."""
    mt = g.rng.choice([MapType.DEVMAP, MapType.DEVMAP_HASH])
    vs = g.rng.choice([4, 8])
    me = g.rng.choice([1, 2, 4, 8])
    flags = g.pick({0: 20, MapFlags.NUMA_NODE: 1, MapFlags.RDONLY_PROG: 1}) | \
        g.access_flags(0.03)
    ks = 4 if g.chance(0.97) else 8
    create = Create(0, mt, ks, vs, me, int(flags))
    if mt == MapType.DEVMAP:
        pool = [_u32(i) for i in range(me + 2)]
    else:
        pool = [_u32(g.rng.getrandbits(32)) for _ in range(me * 2 + 2)] + [_u32(i) for i in
                                                                             range(3)]
    weights = dict(_HASH_WEIGHTS, lookup_and_delete=1, lookup_batch=1, update_batch=1,
                   delete_batch=1, dump=0, freeze=0.2)
    return [create] + _element_ops(g, 0, create, g.rng.randint(10, 50),
                                   lambda: g.rng.choice(pool), lambda: _devmap_value(g, vs),
                                   True, weights)


def gen_cpumap(g: Gen) -> list[Op]:
    """CPUMAP: qsize values (0 removes, > 16384 overflows), CPUs that do not exist."""
    vs = g.rng.choice([4, 8])
    me = g.rng.choice([1, 2, 4])
    flags = g.pick({0: 20, MapFlags.NUMA_NODE: 1, MapFlags.RDONLY: 1})
    create = Create(0, MapType.CPUMAP, 4, vs, me, int(flags))

    def value() -> bytes:
        qsize = g.pick({0: 3, 1: 2, 64: 4, 192: 4, 16384: 1, 16385: 1})
        return (_u32(qsize) + _u32(g.pick({0: 20, 0xFFFFFFFF: 1})))[:vs]

    weights = {"update": 10, "lookup": 8, "delete": 4, "next_key": 5, "walk": 2,
               "lookup_and_delete": 1, "lookup_batch": 1, "info": 0.5}
    return [create] + _element_ops(g, 0, create, g.rng.randint(6, 25),
                                   lambda: _u32(g.rng.randrange(me + 2)), value, True,
                                   weights)


def gen_sockmap(g: Gen) -> list[Op]:
    """SOCKMAP and SOCKHASH with real sockets: listening, established, unbound, UDP, a pipe."""
    mt = g.rng.choice([MapType.SOCKMAP, MapType.SOCKHASH])
    vs = 8 if g.chance(0.8) else 4
    me = g.rng.choice([1, 2, 4, 8])
    ks = 4 if mt == MapType.SOCKMAP else g.rng.choice([1, 4, 8])
    create = Create(0, mt, ks, vs, me, int(g.pick({0: 20, MapFlags.NUMA_NODE: 1})))
    ops: list[Op] = [create]
    nsock = 5
    for s in range(nsock):
        ops.append(OpenSocket(s, g.rng.choice(SOCKET_KINDS)))
    pool = ([_u32(i) for i in range(me + 2)] if mt == MapType.SOCKMAP
            else g.keys(ks, me * 2 + 2))
    weights = {"update": 12, "lookup": 8, "delete": 5, "next_key": 5, "walk": 2,
               "lookup_and_delete": 1, "lookup_batch": 1, "info": 0.3}
    body = _element_ops(g, 0, create, g.rng.randint(10, 40), lambda: g.rng.choice(pool),
                        lambda: SockRef(g.rng.randrange(nsock), vs), True, weights)
    # Closing a socket removes it from every map.
    if g.chance(0.5):
        body.insert(g.rng.randrange(len(body) + 1), CloseSocket(g.rng.randrange(nsock)))
    return ops + body


# Types whose creation both backends can do, for the random-attribute creates.
CREATE_TYPES = (MapType.HASH, MapType.ARRAY, MapType.PERCPU_HASH, MapType.PERCPU_ARRAY,
                MapType.LRU_HASH, MapType.LRU_PERCPU_HASH, MapType.LPM_TRIE,
                MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS, MapType.DEVMAP, MapType.SOCKMAP,
                MapType.CPUMAP, MapType.SOCKHASH, MapType.QUEUE, MapType.STACK,
                MapType.DEVMAP_HASH, MapType.RINGBUF, MapType.BLOOM_FILTER)
# Large max_entries values that each listed type rejects before allocating anything.
_HUGE_OK = {
    MapType.HASH: (1 << 27) + 1, MapType.PERCPU_HASH: (1 << 27) + 1,
    MapType.LRU_HASH: (1 << 27) + 1, MapType.LRU_PERCPU_HASH: (1 << 27) + 1,
    MapType.HASH_OF_MAPS: (1 << 27) + 1, MapType.SOCKHASH: (1 << 27) + 1,
    MapType.CPUMAP: 8193, MapType.DEVMAP_HASH: (1 << 31) + 1,
}
_MEM_LIMIT = 16 << 20


def _random_create(g: Gen, m: int, inner: int) -> Create:
    mt = g.pick({t: 4 for t in CREATE_TYPES} | {0: 1, 34: 0.5, 1000: 0.3})
    ks = g.pick({0: 3, 1: 1, 2: 1, 3: 1, 4: 8, 5: 2, 8: 3, 16: 2, 64: 1, 260: 1, 261: 1,
                 512: 1, 513: 1})
    vs = g.pick({0: 3, 1: 1, 4: 8, 7: 1, 8: 6, 16: 2, 24: 1, 4096: 1, 32768: 1, 32769: 1,
                 4194255 - 16: 0.5, 1 << 23: 0.5})
    me = g.pick({0: 3, 1: 4, 2: 2, 3: 2, 4: 4, 8: 2, 64: 2, 4095: 1, 4096: 4, 8192: 2,
                 12288: 1, 1 << 16: 1, "huge": 3, (1 << 31) + 1: 1, 0xFFFFFFFF: 1})
    if me == "huge":
        me = _HUGE_OK.get(mt, 4096)
    flags = 0
    if g.chance(0.35):
        for bit in range(20):
            if g.chance(0.05):
                flags |= 1 << bit
    if g.chance(0.04):  # a bit no kernel defines (yet)
        flags |= 1 << g.rng.randint(20, 31)
    if g.chance(0.15):
        flags |= int(MapFlags.ZERO_SEED)
    if g.chance(0.15):
        flags |= int(MapFlags.NO_PREALLOC)
    numa = g.pick({0: 10, 1: 2, 0xFFFFFFFF: 2, 7: 1})
    if g.chance(0.2):
        flags |= int(MapFlags.NUMA_NODE)
    extra = 0
    if mt == MapType.BLOOM_FILTER:
        extra = g.pick({0: 4, g.rng.randint(1, 15): 6, 16: 1, 1 << 40: 0.5})
    elif g.chance(0.03):
        extra = 1
    name = g.pick({b"": 6, b"pybpf_map": 3, b"x.y_9": 1, b"bad-name": 1, b"A" * 15: 1,
                   b"B" * 16: 1})
    # Never ask for more memory than the machine should spend on one create.
    if me not in _HUGE_OK.values() and me <= 1 << 16:
        ncpu = g.ncpu if mt in (MapType.PERCPU_HASH, MapType.PERCPU_ARRAY,
                                MapType.LRU_PERCPU_HASH) else 1
        if mt == MapType.RINGBUF:
            cost = me
        elif mt == MapType.BLOOM_FILTER:
            cost = me * 16
        else:
            cost = (me + 2) * (ks + vs + 64) * ncpu
        if cost > _MEM_LIMIT:
            me = g.rng.choice([1, 2, 4])
            if (me + 2) * (ks + vs + 64) * ncpu > _MEM_LIMIT:
                vs = 8
    # Past 2^16 entries only types that reject the size before allocating (or, RINGBUF and
    # LPM_TRIE, allocate nothing per entry) keep it: an ARRAY of 2^31 entries is created.
    if me > 1 << 16 and mt not in _HUGE_OK and mt not in (MapType.LPM_TRIE, MapType.RINGBUF):
        me = 4096
    if mt == MapType.RINGBUF and me > 1 << 20 and me not in (0xFFFFFFFF, (1 << 31) + 1):
        me = 1 << 20
    return Create(m, mt, ks, vs, me, flags,
                  inner=inner if mt in MAP_IN_MAP_TYPES else None, numa_node=numa,
                  map_name=name, map_extra=extra)


def _create_elem_ops(g: Gen, c: Create) -> list[Op]:
    """A few element ops fitting a random create (they answer 'nomap' if it failed)."""
    def key() -> bytes | None:
        return None if c.key_size == 0 else g.data(c.key_size)

    def value() -> Value:
        if c.map_type in FD_VALUE_MAP_TYPES:
            return MapRef(BAD_MAP)
        if c.map_type in (MapType.DEVMAP, MapType.DEVMAP_HASH):
            return _devmap_value(g, min(c.value_size, 8)).ljust(c.value_size, b"\0")
        if c.map_type == MapType.CPUMAP:
            return (_u32(g.pick({0: 1, 64: 2, 16385: 1})) + b"\0" * 12)[:c.value_size]
        if c.map_type in SOCK_TYPES:
            return (_u32(g.pick({0x7FFFFFFF: 1, 0x80000000: 1})) + b"\0" * 12)[:c.value_size]
        return g.value(c.map_type, c.value_size) if c.value_size <= 1 << 16 else b""

    ops: list[Op] = []
    for _ in range(g.rng.randint(0, 3)):
        kind = g.pick({"update": 3, "lookup": 2, "delete": 1, "next": 1, "lad": 1, "batch": 1,
                       "freeze": 0.5})
        if kind == "update":
            v = value()
            if v != b"" or c.value_size == 0:
                ops.append(Update(c.m, key(), v, g.pick({0: 4, BPF_NOEXIST: 1, BPF_EXIST: 1})))
        elif kind == "lookup":
            ops.append(Lookup(c.m, key()))
        elif kind == "delete":
            ops.append(Delete(c.m, key()))
        elif kind == "next":
            ops.append(NextKey(c.m, None) if c.map_type not in HASH_TYPES
                       or c.map_flags & MapFlags.ZERO_SEED else Walk(c.m))
        elif kind == "lad":
            ops.append(LookupAndDelete(c.m, key()))
        elif kind == "batch":
            ops.append(LookupBatch(c.m, 0 if c.map_type in HASH_TYPES else 4))
        else:
            ops.append(Freeze(c.m))
    return ops


def gen_create(g: Gen) -> list[Op]:
    """Random map_create attributes across every type: errno, or success and map info."""
    ops: list[Op] = [Create(0, MapType.ARRAY, 4, 8, 4)]  # an inner map template
    for i in range(g.rng.randint(8, 24)):
        # Each create gets its own handle, so a shrunk sequence never aims an op at another
        # create's map.
        inner = g.pick({0: 10, BAD_MAP: 1, 1: 1})
        c = _random_create(g, 1 + i, inner)
        ops.append(c)
        ops.extend(_create_elem_ops(g, c))
        if g.chance(0.7):
            ops.append(Close(c.m))
    return ops


GENERATORS: dict[str, Callable[[Gen], list[Op]]] = {
    "hash": gen_hash,
    "lru": gen_lru,
    "array": gen_array,
    "map_in_map": gen_map_in_map,
    "queue_stack": gen_queue_stack,
    "lpm_trie": gen_lpm,
    "bloom_filter": gen_bloom,
    "devmap": gen_devmap,
    "cpumap": gen_cpumap,
    "sockmap": gen_sockmap,
    "create": gen_create,
}


def generate(family: str, seed: int, index: int, ncpu: int,
             programs: bool = True) -> OpSequence:
    """Sequence ``index`` of ``family`` for ``seed`` (the same on every run and machine);
    ``programs=False`` leaves out the program-side lookups."""
    rng = random.Random(f"pybpf-differential:{seed}:{family}:{index}")
    return OpSequence(f"{family} seed={seed} #{index}",
                     GENERATORS[family](Gen(rng, ncpu, programs)))


def compare(families: Iterable[str], sequences: int, seed: int, a: System, b: System,
            a_name: str = "A", b_name: str = "B", *, shrink_budget: int = 0,
            shrink_first: int = 1 << 30, programs_off: str | None | bool = True,
            progress: Callable[[str], None] | None = None) -> Summary:
    """Run ``sequences`` generated sequences of each family on ``a`` and ``b``.

    ``shrink_budget`` re-runs are spent shrinking each of the first ``shrink_first``
    mismatches. ``programs_off``: why program-side lookups are left out (None: they are
    included); the default, True, probes both backends for it."""
    if a.num_possible_cpus != b.num_possible_cpus:
        raise ValueError(f"the backends disagree on the CPU count ({a.num_possible_cpus} vs "
                         f"{b.num_possible_cpus}); give the emulated one cpus= to match")
    summary = Summary()
    if programs_off is True:
        programs_off = "; ".join(f"{name}: {why}" for name, why in (
            (a_name, programs_supported(a)), (b_name, programs_supported(b))) if why) or None
    summary.programs_off = programs_off
    for family in families:
        for i in range(sequences):
            seq = generate(family, seed, i, a.num_possible_cpus, programs=not programs_off)
            found, nops = first_mismatch(seq, a, b, a_name, b_name)
            if found is not None and shrink_budget and len(summary.mismatches) < shrink_first:
                found = shrink(found, a, b, shrink_budget)
            summary.add(family, found, nops)
        if progress is not None:
            fam = summary.per_family[family]
            progress(f"{family}: {fam[0]} sequences, {fam[1]} ops, {fam[2]} mismatches")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pybpf.testing.differential",
        description="Run random map-operation sequences on two backends and compare every "
                    "returned byte and errno (the kernel is the oracle).")
    p.add_argument("--sequences", type=int, default=20, help="sequences per family")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--family", action="append", choices=sorted(GENERATORS),
                   help="map family to test (repeatable; default: all)")
    p.add_argument("--a", default="kernel", choices=["kernel", "emulated"])
    p.add_argument("--b", default="emulated", choices=["kernel", "emulated"])
    p.add_argument("--shrink", type=int, default=200, metavar="TRIES",
                   help="re-runs spent shrinking each mismatch (0: report as found)")
    args = p.parse_args(argv)
    from ..system import system

    try:
        a, b = system(args.a), system(args.b)
    except OSError as exc:  # bpf(2) not allowed here: nothing to compare against
        print(f"cannot compare {args.a} with {args.b}: {exc}", file=sys.stderr)
        return 2
    families = args.family or list(GENERATORS)
    summary = compare(families, args.sequences, args.seed, a, b, args.a, args.b,
                      shrink_budget=args.shrink, progress=lambda s: print(s, flush=True))
    for m in summary.mismatches:
        print(m.format())
        print()
    print(summary.report(args.a, args.b))
    return 1 if summary.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
