"""Running a sequence on one System: the handle -> fd tables, the sockets and pipes ops
open, and the SYSCALL programs behind the program-side ops."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from ...errors import errno_name
from ...system import MapInfo, System
from ...uapi import MapFlags, MapType, map_traits
from .ops import (
    BAD_FD,
    BAD_MAP,
    CURSOR,
    SOCKET_KINDS,
    Create,
    Dump,
    LookupBatch,
    MapRef,
    NextKey,
    OpSequence,
    Result,
    SockRef,
    Value,
)

__all__ = ["PROG_LOOKUP_TYPES", "Runner", "load_map_program", "prog_ctx", "programs_supported"]

_SO_COOKIE = 57  # include/uapi/asm-generic/socket.h


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
        return not (map_traits(self.create.map_type).htab_batch
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
        return st.fd if st is not None else BAD_FD

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
            fd = sock.fileno() if sock is not None else BAD_FD
            return fd.to_bytes(value.width, "little")
        return value

    def decode_value(self, handle: int, raw: bytes) -> object:
        mt = self.maps[handle].create.map_type if handle in self.maps else None
        if map_traits(mt).map_in_map and len(raw) == 4:
            map_id = int.from_bytes(raw, "little")
            return f"map#{self.id_to_handle.get(map_id, f'?id{map_id}')}"
        if map_traits(mt).sockets and len(raw) == 8:
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
    from ... import asm
    from ...uapi import BPF_F_SLEEPABLE, ProgType

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
