"""The ops of a differential sequence: plain data that names maps and sockets by handle.

Each op's ``run`` performs it through a ``Runner`` (runner.py) and returns its Result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ...uapi import BPF_ANY

__all__ = ["BAD_MAP", "BloomPeek", "CURSOR", "Close", "CloseSocket", "Create", "Delete",
    "DeleteBatch", "Dump", "Freeze", "Info", "Lookup", "LookupAndDelete", "LookupBatch", "MapRef",
    "NextKey", "Op", "OpSequence", "OpenSocket", "ProgDelete", "ProgLookup", "ProgUpdate", "Result",
    "SOCKET_KINDS", "SetCpu", "SockRef", "Update", "UpdateBatch", "Value", "Walk"]

if TYPE_CHECKING:
    from ...system import System

# A handle that never names an open map: its fd is one no backend has open.
BAD_MAP = -1
BAD_FD = 999_999
# Stands for "the key the previous get_next_key on this map returned" (None at the start or
# after ENOENT), so a walk interleaved with other ops is plain data.
CURSOR = "cursor"

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


class Runner(Protocol):
    """What an op performs itself through: runner.Runner on one System (this protocol keeps
    the ops free of the runner, which imports them)."""

    def call(self, handle: int, fn: Callable[[System, int], object]) -> Result: ...
    def info(self, fd: int) -> tuple: ...
    def encode_value(self, value: Value) -> bytes: ...
    def decode_value(self, handle: int, raw: bytes) -> object: ...
    def create(self, op: Create) -> Result: ...
    def next_key(self, op: NextKey) -> Result: ...
    def lookup_batch(self, op: LookupBatch) -> Result: ...
    def walk(self, handle: int) -> Result: ...
    def dump(self, op: Dump) -> Result: ...
    def close_map(self, handle: int) -> Result: ...
    def set_cpu(self, cpu: int) -> Result: ...
    def prog_call(self, handle: int, helper: str, key: bytes, value: bytes = b"",
                  flags: int = 0) -> Result: ...
    def open_socket(self, s: int, kind: str) -> Result: ...
    def close_socket(self, s: int) -> Result: ...


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



@dataclass(frozen=True)
class BloomPeek(Op):
    """BLOOM_FILTER lookup: the value is the input (found, or ENOENT)."""

    m: int
    value: bytes

    def run(self, r: Runner) -> Result:
        return r.call(self.m, lambda s, fd: s.map_lookup_elem(fd, None, 0,
                                                              value=self.value).hex())
