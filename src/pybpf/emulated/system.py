"""EmulatedSystem: the bpf(2) map commands in user space, checked in syscall.c's order.

Rules this module keeps:
- Each command checks what the kernel checks, in the kernel's order, so the same errno wins:
  flags the command tests before the fd, then the fd (not open -> EBADF, not a map -> EINVAL),
  then permissions (RDONLY / WRONLY fds, a frozen map -> EPERM), then the key and value
  buffers, then the map type's op. In the Python API a key or value of the wrong length is a
  caller's error the kernel cannot see (it copies exactly key_size bytes): it gets EINVAL and
  a message saying which length was expected.
- Internal ``KernelError``s are turned into public errors once, here, by ``errors.bpf_error``.
- Objects live in one fd table; maps are refcounted (fds, pins, programs, outer maps hold
  references) and released when the last goes; maps and programs have separate id spaces.
- Pins live in this system's own namespace (a dict path -> object) with bpffs's path rules.

``map_stats(fd)`` is the public window onto the machine model: NUMA accesses and the
allocator counters of one map.
"""

from __future__ import annotations

import errno
import functools
import importlib
import itertools
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from ..errors import BPFError, KernelError, bpf_error
from ..system import BatchLookup, FastOps, MapInfo, System, Topology
from ..uapi import (
    BPF_F_LOCK,
    BPF_OBJ_NAME_LEN,
    MAP_IN_MAP_TYPES,
    NUMA_NO_NODE,
    MapFlags,
    MapType,
)
from .bpf_map import MAP_OPS, BpfMap, MapAttr
from .machine import Machine
from .progs import ProgramsMixin

# Map family modules; importing one registers its types in MAP_OPS.
_FAMILY_MODULES = ("hashtab", "arraymap", "map_in_map", "queue_stack_maps", "lpm_trie",
                   "bloom_filter", "ringbuf", "devmap", "cpumap", "sock_map")


def _load_families() -> None:
    for name in _FAMILY_MODULES:
        try:
            importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:  # a family not written yet: its types stay EINVAL
            if exc.name != f"{__package__}.{name}":
                raise


_load_families()

# bpf_obj_name_cpy accepts isalnum() (the kernel's ctype is Latin-1: its letters count) and _ .
_NAME_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_."
                        + bytes(range(0xC0, 0xD7)) + bytes(range(0xD8, 0xF7))
                        + bytes(range(0xF8, 0x100)))
BPFFS_ROOT = "/sys/fs/bpf"
# BPF_OBJ_FLAG_MASK: the open flags GET_FD_BY_ID and OBJ_GET accept.
_OBJ_FLAG_MASK = int(MapFlags.RDONLY | MapFlags.WRONLY)
_U32 = 0xFFFFFFFF


class MapFile:
    """An open map fd: the map and what this fd may do (f_mode)."""

    __slots__ = ("map", "can_read", "can_write")

    def __init__(self, bpf_map: BpfMap, file_flags: int) -> None:
        self.map = bpf_map
        self.can_read = not file_flags & MapFlags.WRONLY
        self.can_write = not file_flags & MapFlags.RDONLY


def _file_flags(flags: int) -> int:
    """bpf_get_file_flag: RDONLY and WRONLY together are EINVAL."""
    if flags & MapFlags.RDONLY and flags & MapFlags.WRONLY:
        raise KernelError(errno.EINVAL, "BPF_F_RDONLY and BPF_F_WRONLY exclude each other")
    return flags & _OBJ_FLAG_MASK


def check_map_name(name: bytes, field: str = "map_name") -> None:
    """bpf_obj_name_cpy: [A-Za-z0-9_.] up to a NUL that must fit in 16 bytes (``field``
    names the attribute in messages: map_name, prog_name)."""
    if len(name) > BPF_OBJ_NAME_LEN:
        raise KernelError(errno.EINVAL,
                          f"{field} {name!r} is longer than {BPF_OBJ_NAME_LEN} bytes")
    text, nul, _ = name.partition(b"\0")
    if not nul and len(text) == BPF_OBJ_NAME_LEN:
        raise KernelError(errno.EINVAL, f"{field} {name!r} must leave room for its NUL: "
                          f"at most {BPF_OBJ_NAME_LEN - 1} characters")
    bad = sorted({f"{c:#04x}" for c in text if c not in _NAME_CHARS})
    if bad:
        raise KernelError(errno.EINVAL, f"{field} {name!r} has bytes {bad} that are not "
                          "letters, digits, '_' or '.'")


class EmulatedSystem(ProgramsMixin, System):
    """The BPF map subsystem in user space, on an emulated ``Machine``.

    ``EmulatedSystem(cpus=20, nodes=2)`` declares a topology; ``machine=`` shares one.
    ``htab_mem`` picks how NO_PREALLOC hash maps get element memory: ``"bpf_mem_alloc"``
    (per-CPU caches, freed objects reused after a grace period; the kernel since 6.1) or
    ``"call_rcu"`` (kmalloc per element, one call_rcu per freed element, no reuse; before).
    """

    name = "emulated"

    def __init__(self, cpus: int | None = None, nodes: int | None = None,
                 machine: Machine | None = None, htab_mem: str = "bpf_mem_alloc") -> None:
        if machine is not None and (cpus is not None or nodes is not None):
            raise TypeError("give either machine= or cpus=/nodes=, not both")
        if htab_mem not in ("bpf_mem_alloc", "call_rcu"):
            raise ValueError(f"htab_mem={htab_mem!r}: choose 'bpf_mem_alloc' or 'call_rcu'")
        self.machine = machine if machine is not None else Machine(cpus, nodes)
        self.machine.htab_mem = htab_mem
        self._lock = threading.RLock()  # fd table, idrs, pins, refcounts
        # fd -> object. Each emulated fd holds a real host fd (on /dev/null) of the same number,
        # so emulated objects and the process's real files (sockets for sockmap, say) share one
        # fd namespace, as BPF objects and files do in a real process.
        self._files: dict[int, Any] = {}
        weakref.finalize(self, _close_host_fds, self._files)
        self._map_idr: dict[int, BpfMap] = {}
        self._next_map_id = itertools.count(1)
        self._prog_idr: dict[int, Any] = {}
        self._next_prog_id = itertools.count(1)
        self._pins: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"EmulatedSystem({self.machine!r})"

    # -- machine -----------------------------------------------------------------------------
    @property
    def num_possible_cpus(self) -> int:
        return self.machine.num_cpus

    @property
    def topology(self) -> Topology:
        return self.machine.topology

    def on_cpu(self, cpu: int):
        return self.machine.on_cpu(cpu)

    def current_cpu(self) -> int:
        return self.machine.current_cpu()

    # -- fd table, ids, references -----------------------------------------------------------
    def fd_install(self, obj: Any) -> int:
        """Open a new fd on ``obj``; closing it calls ``obj.fd_release()`` if it has one."""
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        with self._lock:
            self._files[fd] = obj
        return fd

    def fd_get(self, fd: int) -> Any:
        """The object behind ``fd``; KernelError(EBADF) if it is not open."""
        try:
            return self._files[fd]
        except (KeyError, TypeError):
            raise _missing_fd(fd) from None

    def map_from_fd(self, fd: int) -> BpfMap:
        """__bpf_map_get: EBADF when not open, EINVAL when not a map."""
        file = self.fd_get(fd)
        if type(file) is not MapFile:
            raise KernelError(errno.EINVAL, f"fd {fd} is not a BPF map")
        return file.map

    def _map_file(self, fd: int) -> MapFile:
        try:
            file = self._files[fd]
        except (KeyError, TypeError):
            raise _missing_fd(fd) from None
        if type(file) is not MapFile:
            raise KernelError(errno.EINVAL, f"fd {fd} is not a BPF map")
        return file

    def bpf_map_inc(self, bpf_map: BpfMap) -> None:
        with self._lock:
            bpf_map.refcnt += 1

    def bpf_map_put(self, bpf_map: BpfMap) -> None:
        """Drop a reference; the last one frees the id and releases the map's memory."""
        with self._lock:
            bpf_map.refcnt -= 1
            if bpf_map.refcnt:
                return
            self._map_idr.pop(bpf_map.id, None)
        bpf_map.release()

    def _map_new_fd(self, bpf_map: BpfMap, file_flags: int) -> int:
        self.bpf_map_inc(bpf_map)
        return self.fd_install(MapFile(bpf_map, file_flags))

    def prog_from_fd(self, fd: int) -> Any:
        """bpf_prog_get: EBADF when not open, EINVAL when the fd is not a program."""
        obj = self.fd_get(fd)
        if getattr(obj, "prog_type", None) is None:
            raise KernelError(errno.EINVAL, f"fd {fd} is not a BPF program")
        return obj

    def bpf_prog_inc(self, prog: Any) -> None:
        with self._lock:
            prog.refcnt = getattr(prog, "refcnt", 0) + 1

    def bpf_prog_put(self, prog: Any) -> None:
        """Drop a program reference; the last one frees its id and calls ``prog.release()``."""
        with self._lock:
            prog.refcnt = getattr(prog, "refcnt", 0) - 1
            if prog.refcnt > 0:
                return
            self._prog_idr.pop(getattr(prog, "id", 0), None)
        release = getattr(prog, "release", None)
        if release is not None:
            release()

    def prog_idr_alloc(self, prog: Any) -> int:
        """A new program id (the program id space is separate from the maps')."""
        with self._lock:
            prog_id = next(self._next_prog_id)
            self._prog_idr[prog_id] = prog
        return prog_id

    def prog_from_id(self, prog_id: int) -> Any:
        try:
            return self._prog_idr[prog_id]
        except KeyError:
            raise KernelError(errno.ENOENT, f"no program with id {prog_id}") from None

    def prog_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._prog_idr)

    # -- errors ------------------------------------------------------------------------------
    def _error(self, exc: KernelError, command: str, bpf_map: BpfMap | None = None,
               count: int | None = None, fd: int | None = None) -> BPFError:
        """The public error; ``fd`` names the map when the command failed before it held one
        (a permission check on the fd), so every error on a map says which map."""
        if bpf_map is None and fd is not None:
            file = self._files.get(fd) if type(fd) is int else None
            bpf_map = file.map if type(file) is MapFile else None
        return bpf_error(exc.errno, command, map=bpf_map.describe() if bpf_map else "",
                         detail=exc.detail, count=count)

    # -- buffers -----------------------------------------------------------------------------
    @staticmethod
    def _key(bpf_map: BpfMap, key: Any) -> bytes | None:
        """__bpf_copy_key: key_size bytes; key_size 0 takes no key."""
        size = bpf_map.key_size
        if key is None:
            if size:
                raise KernelError(errno.EFAULT, f"a key of {size} bytes is needed, got None")
            return None
        if type(key) is not bytes:
            if not isinstance(key, (bytearray, memoryview)):
                raise KernelError(errno.EINVAL, f"key must be bytes, got {type(key).__name__}")
            key = bytes(key)
        if len(key) != size:
            if not size:
                raise KernelError(errno.EINVAL, "this map has no key (key_size 0): pass None")
            raise KernelError(errno.EINVAL,
                              f"key is {len(key)} bytes, the map's key_size is {size}")
        return key

    def _value(self, bpf_map: BpfMap, value: Any) -> bytes:
        size = bpf_map.sys_value_size
        if type(value) is not bytes:
            if not isinstance(value, (bytearray, memoryview)):
                raise KernelError(errno.EINVAL,
                                  f"value must be bytes, got {type(value).__name__}")
            value = bytes(value)
        if len(value) != size:
            raise KernelError(errno.EINVAL, f"value is {len(value)} bytes, this map takes "
                              f"{size} ({self._value_layout(bpf_map)})")
        return value

    def _value_layout(self, bpf_map: BpfMap) -> str:
        size = bpf_map.sys_value_size
        if size == bpf_map.value_size:
            return f"value_size {size}"
        if size == 4 and bpf_map.value_size == 4:
            return "a 4-byte fd"
        return (f"round_up(value_size {bpf_map.value_size}, 8) x {self.machine.num_cpus} "
                "possible CPUs")

    # -- BPF_MAP_CREATE ----------------------------------------------------------------------
    def map_create(self, map_type: int, key_size: int, value_size: int, max_entries: int,
                   map_flags: int = 0, inner_map_fd: int = 0, numa_node: int = 0,
                   map_name: bytes = b"", map_extra: int = 0) -> int:
        try:
            bpf_map = self._map_create(map_type, key_size, value_size, max_entries, map_flags,
                                       inner_map_fd, numa_node, map_name, map_extra)
        except KernelError as exc:
            raise self._error(exc, "map_create") from None
        return self._map_new_fd(bpf_map, map_flags)

    def _map_create(self, map_type: int, key_size: int, value_size: int, max_entries: int,
                    map_flags: int, inner_map_fd: int, numa_node: int, map_name: bytes,
                    map_extra: int) -> BpfMap:
        if numa_node == NUMA_NO_NODE:
            numa_node = _U32
        for label, number, limit in (("map_type", map_type, _U32), ("key_size", key_size, _U32),
                                     ("value_size", value_size, _U32),
                                     ("max_entries", max_entries, _U32),
                                     ("map_flags", map_flags, _U32),
                                     ("inner_map_fd", inner_map_fd, _U32),
                                     ("numa_node", numa_node, _U32),
                                     ("map_extra", map_extra, (1 << 64) - 1)):
            if not isinstance(number, int) or not 0 <= number <= limit:
                raise KernelError(errno.EINVAL, f"{label}={number!r} is not an unsigned "
                                  f"{'64' if limit >> 32 else '32'}-bit integer")
        if isinstance(map_name, str):  # as the kernel backend takes it
            map_name = map_name.encode()
        if not isinstance(map_name, (bytes, bytearray)):
            raise KernelError(errno.EINVAL, f"map_name must be bytes or str, got {map_name!r}")
        token_flag = map_flags & MapFlags.TOKEN_FD
        map_flags &= ~int(MapFlags.TOKEN_FD)  # int: ~ of an IntFlag keeps only known bits
        if map_extra and map_type not in (MapType.BLOOM_FILTER, MapType.ARENA):
            raise KernelError(errno.EINVAL, "map_extra is only for BLOOM_FILTER maps")
        file_flags = _file_flags(map_flags)
        node = NUMA_NO_NODE
        if map_flags & MapFlags.NUMA_NODE:
            node = numa_node if numa_node != _U32 else NUMA_NO_NODE
            if node != NUMA_NO_NODE and node >= self.machine.num_nodes:
                raise KernelError(errno.EINVAL, f"numa_node {node} does not exist: this "
                                  f"machine has nodes 0-{self.machine.num_nodes - 1}")
        ops = MAP_OPS.get(map_type)
        if ops is None:
            known = MapType(map_type).name if map_type in MapType._value2member_map_ else None
            raise KernelError(errno.EINVAL, f"map type {known} is not emulated" if known and
                              map_type else f"unknown map type {map_type}")
        attr = MapAttr(map_type, key_size, value_size, max_entries, map_flags, inner_map_fd,
                       numa_node if map_flags & MapFlags.NUMA_NODE else 0, bytes(map_name),
                       map_extra)
        ops.alloc_check(attr, self.machine)
        if token_flag:  # bpf_token_get_from_fd: there are no BPF tokens in this backend
            raise KernelError(errno.EINVAL, "BPF_F_TOKEN_FD: map_token_fd is not a BPF token "
                              "(the emulated backend has none)")
        if map_type in MAP_IN_MAP_TYPES:
            attr = MapAttr(map_type, key_size, value_size, max_entries, map_flags,
                           inner_map_fd, attr.numa_node, attr.map_name, map_extra,
                           inner_map=self.map_from_fd(inner_map_fd))
        # Memory goes on the requested node, else on the creating CPU's (as kmalloc places it).
        home = node if node != NUMA_NO_NODE else self.machine.numa_node_id()
        bpf_map = ops(attr, self.machine, home)
        try:
            check_map_name(bytes(map_name))
        except KernelError:
            bpf_map.release()
            raise
        bpf_map.map_flags &= ~int(file_flags | MapFlags.TOKEN_FD)
        bpf_map.system = self
        with self._lock:
            bpf_map.id = next(self._next_map_id)
            self._map_idr[bpf_map.id] = bpf_map
        return bpf_map

    # -- element commands --------------------------------------------------------------------
    def map_lookup_elem(self, fd: int, key: bytes | None, flags: int = 0, *,
                        value: bytes | None = None) -> bytes:
        bpf_map = None
        try:
            if flags & ~BPF_F_LOCK:
                raise KernelError(errno.EINVAL, f"flags {flags:#x}: only BPF_F_LOCK is accepted")
            file = self._map_file(fd)
            bpf_map = file.map
            if not file.can_read:
                raise KernelError(errno.EPERM, "the fd is write-only")
            if flags:
                raise KernelError(errno.EINVAL, "BPF_F_LOCK needs a bpf_spin_lock in the value")
            if type(key) is not bytes or len(key) != bpf_map.key_size:
                key = self._key(bpf_map, key)
            if value is not None:  # maps that look up by value (bloom filter)
                return bpf_map.lookup_elem_sys(key, flags, value=self._value(bpf_map, value))
            return bpf_map.lookup_elem_sys(key, flags)
        except KernelError as exc:
            raise self._error(exc, "map_lookup_elem", bpf_map) from None

    def fast_ops(self, fd: int) -> FastOps:
        """The Map layer's hot path: the map's live lookup table when it has one (hash maps)
        and the fd may read, else the generic lookup. Reads through the table are not
        counted in the map's NUMA access stats (they bypass the element ops)."""
        lookup = functools.partial(self.map_lookup_elem, fd)
        file = self._files.get(fd)
        if type(file) is not MapFile or not file.can_read:
            return FastOps(lookup=lookup)
        return FastOps(lookup=lookup, table=file.map.sys_lookup_table())

    def _writable_map(self, fd: int) -> BpfMap:
        file = self._files.get(fd) if type(fd) is int else None
        if type(file) is not MapFile:  # the hot path skips _map_file's call
            file = self._map_file(fd)
        if not file.can_write:
            raise KernelError(errno.EPERM, "the fd is read-only")
        if file.map.frozen:
            raise KernelError(errno.EPERM, "the map is frozen: syscalls may not write it")
        return file.map

    def map_update_elem(self, fd: int, key: bytes | None, value: bytes, flags: int = 0) -> None:
        bpf_map = None
        try:
            bpf_map = self._writable_map(fd)
            if flags & BPF_F_LOCK:
                raise KernelError(errno.EINVAL, "BPF_F_LOCK needs a bpf_spin_lock in the value")
            if type(key) is not bytes or len(key) != bpf_map.key_size:
                key = self._key(bpf_map, key)
            if type(value) is not bytes or len(value) != bpf_map.sys_value_size:
                value = self._value(bpf_map, value)
            bpf_map.update_elem_sys(key, value, flags)
        except KernelError as exc:
            raise self._error(exc, "map_update_elem", bpf_map, fd=fd) from None

    def map_delete_elem(self, fd: int, key: bytes | None) -> None:
        bpf_map = None
        try:
            bpf_map = self._writable_map(fd)
            if type(key) is not bytes or len(key) != bpf_map.key_size:
                key = self._key(bpf_map, key)
            bpf_map.delete_elem_sys(key)
        except KernelError as exc:
            raise self._error(exc, "map_delete_elem", bpf_map, fd=fd) from None

    def map_get_next_key(self, fd: int, key: bytes | None) -> bytes:
        bpf_map = None
        try:
            file = self._map_file(fd)
            bpf_map = file.map
            if not file.can_read:
                raise KernelError(errno.EPERM, "the fd is write-only")
            if key is not None:
                key = self._key(bpf_map, key)
            return bpf_map.get_next_key(key)
        except KernelError as exc:
            raise self._error(exc, "map_get_next_key", bpf_map) from None

    def map_lookup_and_delete_elem(self, fd: int, key: bytes | None, flags: int = 0) -> bytes:
        bpf_map = None
        try:
            if flags & ~BPF_F_LOCK:
                raise KernelError(errno.EINVAL, f"flags {flags:#x}: only BPF_F_LOCK is accepted")
            file = self._map_file(fd)
            bpf_map = file.map
            if not (file.can_read and file.can_write) or bpf_map.frozen:
                raise KernelError(errno.EPERM, "lookup_and_delete needs a readable and "
                                  "writable fd on a map that is not frozen")
            if flags and bpf_map.map_type in (MapType.QUEUE, MapType.STACK):
                raise KernelError(errno.EINVAL, "queue and stack pops take no flags")
            if flags:
                raise KernelError(errno.EINVAL, "BPF_F_LOCK needs a bpf_spin_lock in the value")
            key = self._key(bpf_map, key)
            return bpf_map.lookup_and_delete_elem_sys(key, flags)
        except KernelError as exc:
            raise self._error(exc, "map_lookup_and_delete_elem", bpf_map) from None

    def map_freeze(self, fd: int) -> None:
        bpf_map = None
        try:
            file = self._map_file(fd)
            bpf_map = file.map
            # map_get_sys_perms drops write from a frozen map, so a second freeze is EPERM
            # (the EBUSY test behind it only catches a freeze racing with another).
            if not file.can_write or bpf_map.frozen:
                raise KernelError(errno.EPERM, "freezing needs a writable fd on a map that "
                                  "is not frozen yet")
            with self._lock:
                if bpf_map.frozen:
                    raise KernelError(errno.EBUSY, "the map is already frozen")
                bpf_map.frozen = True
        except KernelError as exc:
            raise self._error(exc, "map_freeze", bpf_map) from None

    # -- batch commands ----------------------------------------------------------------------
    def _batch_map(self, fd: int, command: str, read: bool, write: bool) -> BpfMap:
        file = self._map_file(fd)
        if read and not file.can_read:
            raise KernelError(errno.EPERM, "the fd is write-only")
        if write and (not file.can_write or file.map.frozen):
            raise KernelError(errno.EPERM, "the fd is read-only or the map is frozen")
        handler = getattr(file.map, command)
        if handler is None:
            raise KernelError(524, "this map type has no batch handler for this command")
        return file.map

    def _lookup_batch(self, command: str, fd: int, in_batch: bytes | None, count: int,
                      elem_flags: int, flags: int, delete: bool) -> BatchLookup:
        bpf_map = None
        try:
            bpf_map = self._batch_map(fd, command, read=True, write=delete)
            if type(count) is not int or not 0 <= count < 1 << 32:
                raise KernelError(errno.EINVAL, f"count {count!r} is not an unsigned 32-bit "
                                  "integer")
            if in_batch is not None and type(in_batch) is not bytes:
                in_batch = bytes(in_batch)
            return getattr(bpf_map, command)(in_batch, count, elem_flags, flags)
        except KernelError as exc:
            # ENOSPC comes after the handler wrote count = 0.
            raise self._error(exc, command, bpf_map,
                              count=0 if exc.errno == errno.ENOSPC else None, fd=fd) from None

    def map_lookup_batch(self, fd: int, in_batch: bytes | None, count: int,
                         elem_flags: int = 0, flags: int = 0) -> BatchLookup:
        return self._lookup_batch("map_lookup_batch", fd, in_batch, count, elem_flags, flags,
                                  delete=False)

    def map_lookup_and_delete_batch(self, fd: int, in_batch: bytes | None, count: int,
                                    elem_flags: int = 0, flags: int = 0) -> BatchLookup:
        return self._lookup_batch("map_lookup_and_delete_batch", fd, in_batch, count,
                                  elem_flags, flags, delete=True)

    def map_update_batch(self, fd: int, keys: Sequence[bytes], values: Sequence[bytes],
                         elem_flags: int = 0, flags: int = 0) -> int:
        bpf_map = None
        try:
            bpf_map = self._batch_map(fd, "map_update_batch", read=False, write=True)
            if len(keys) != len(values):
                raise KernelError(errno.EINVAL, f"{len(keys)} keys but {len(values)} values")
            done, err = bpf_map.map_update_batch(keys, values, elem_flags, flags)
        except KernelError as exc:
            raise self._error(exc, "map_update_batch", bpf_map, count=0, fd=fd) from None
        if err is not None:
            raise self._error(err, "map_update_batch", bpf_map, count=done)
        return done

    def map_delete_batch(self, fd: int, keys: Sequence[bytes], elem_flags: int = 0,
                         flags: int = 0) -> int:
        bpf_map = None
        try:
            bpf_map = self._batch_map(fd, "map_delete_batch", read=False, write=True)
            done, err = bpf_map.map_delete_batch(keys, elem_flags, flags)
        except KernelError as exc:
            raise self._error(exc, "map_delete_batch", bpf_map, count=0, fd=fd) from None
        if err is not None:
            raise self._error(err, "map_delete_batch", bpf_map, count=done)
        return done

    # -- info and ids ------------------------------------------------------------------------
    def map_get_info(self, fd: int) -> MapInfo:
        try:
            bpf_map = self.map_from_fd(fd)
        except KernelError as exc:
            raise self._error(exc, "obj_get_info_by_fd") from None
        return MapInfo(type=bpf_map.map_type, id=bpf_map.id, key_size=bpf_map.key_size,
                       value_size=bpf_map.value_size, max_entries=bpf_map.max_entries,
                       map_flags=bpf_map.map_flags, name=bpf_map.name,
                       map_extra=bpf_map.map_extra)

    def map_get_fd_by_id(self, map_id: int, open_flags: int = 0) -> int:
        try:
            if open_flags & ~_OBJ_FLAG_MASK:
                raise KernelError(errno.EINVAL, f"open_flags {open_flags:#x}: only "
                                  "BPF_F_RDONLY or BPF_F_WRONLY are accepted")
            file_flags = _file_flags(open_flags)
            with self._lock:
                bpf_map = self._map_idr.get(map_id)
                if bpf_map is None:
                    raise KernelError(errno.ENOENT, f"no map with id {map_id}")
                return self._map_new_fd(bpf_map, file_flags)
        except KernelError as exc:
            raise self._error(exc, "map_get_fd_by_id") from None

    def map_get_next_id(self, start_id: int) -> int:
        with self._lock:
            later = [map_id for map_id in self._map_idr if map_id > start_id]
        if not later:
            raise bpf_error(errno.ENOENT, "map_get_next_id",
                            detail=f"no map id after {start_id}")
        return min(later)

    # -- pins --------------------------------------------------------------------------------
    @staticmethod
    def _check_path(path: str) -> str:
        if not isinstance(path, str) or not path:
            raise KernelError(errno.EINVAL, f"path {path!r} is not a path")
        if path != BPFFS_ROOT and not path.startswith(BPFFS_ROOT + "/"):
            raise KernelError(errno.EPERM, f"{path!r} is not on bpffs: the emulated bpffs is "
                              f"mounted at {BPFFS_ROOT}")
        if path.endswith("/") or path == BPFFS_ROOT:
            raise KernelError(errno.EISDIR if path == BPFFS_ROOT else errno.ENOENT,
                              f"{path!r} names a directory, not an object")
        if "/" in path[len(BPFFS_ROOT) + 1:]:
            raise KernelError(errno.ENOENT, f"{path!r}: its directory does not exist (the "
                              f"emulated bpffs has no subdirectories: pin under {BPFFS_ROOT}/)")
        return path

    def obj_pin(self, fd: int, path: str) -> None:
        try:
            path = self._check_path(path)
            file = self.fd_get(fd)
            with self._lock:
                if path in self._pins:
                    raise KernelError(errno.EEXIST, f"{path} is pinned already")
                if type(file) is MapFile:
                    self.bpf_map_inc(file.map)
                    self._pins[path] = file.map
                elif getattr(file, "prog_type", None) is not None:
                    self.bpf_prog_inc(file)
                    self._pins[path] = file
                else:
                    raise KernelError(errno.EINVAL, f"fd {fd} is not a map or a program")
        except KernelError as exc:
            raise self._error(exc, "obj_pin") from None

    def obj_get(self, path: str, file_flags: int = 0) -> int:
        try:
            if file_flags & ~_OBJ_FLAG_MASK:
                raise KernelError(errno.EINVAL, f"file_flags {file_flags:#x}: only "
                                  "BPF_F_RDONLY or BPF_F_WRONLY are accepted")
            flags = _file_flags(file_flags)
            path = self._check_path(path)
            with self._lock:
                obj = self._pins.get(path)
                if obj is None:
                    raise KernelError(errno.ENOENT, f"nothing is pinned at {path}")
                if isinstance(obj, BpfMap):
                    return self._map_new_fd(obj, flags)
                if flags:  # bpf_obj_get_user: programs open read-write only
                    raise KernelError(errno.EINVAL, "a pinned program opens without "
                                      "BPF_F_RDONLY / BPF_F_WRONLY")
                self.bpf_prog_inc(obj)
            return self.fd_install(obj)
        except KernelError as exc:
            raise self._error(exc, "obj_get") from None

    def obj_unpin(self, path: str) -> None:
        """unlink(2) of a pin: drop the pin's reference."""
        try:
            path = self._check_path(path)
            with self._lock:
                obj = self._pins.pop(path, None)
            if obj is None:
                raise KernelError(errno.ENOENT, f"nothing is pinned at {path}")
        except KernelError as exc:
            raise self._error(exc, "obj_unpin") from None
        if isinstance(obj, BpfMap):
            self.bpf_map_put(obj)
        else:
            self.bpf_prog_put(obj)

    # -- close -------------------------------------------------------------------------------
    def close(self, fd: int) -> None:
        with self._lock:
            file = self._files.pop(fd, None) if isinstance(fd, int) else None
        if file is None:
            raise bpf_error(errno.EBADF, "close", detail=f"fd {fd!r} is not open")
        os.close(fd)
        if type(file) is MapFile:
            self.bpf_map_put(file.map)
        elif hasattr(file, "fd_release"):
            file.fd_release()

    def open_fds(self) -> list[int]:
        """Fds open now (for leak checks in tests)."""
        with self._lock:
            return sorted(self._files)

    # -- the machine model, per map ----------------------------------------------------------
    def map_stats(self, fd: int) -> dict:
        """Counters of the map behind ``fd``: what the machine model saw it do.

        Always: ``numa_node`` (where its memory lives), ``local_accesses`` and
        ``remote_accesses`` (element accesses from CPUs on the same / another node),
        ``access_by_cpu`` ({cpu: (local, remote)}). Hash maps add their allocator's counters
        (see ``hashtab``): element counts, free-list or bpf_mem_alloc traffic (allocated,
        freed, reused, call_rcu, bulk refills and frees) and LRU activity.
        """
        try:
            bpf_map = self.map_from_fd(fd)
        except KernelError as exc:
            raise self._error(exc, "map_stats") from None
        return bpf_map.mem_stats()


def _missing_fd(fd: object) -> KernelError:
    """The error for an fd the emulated table lacks. The emulated objects share the process's
    fd namespace with its real files, so an fd open on the host is, as on the kernel, open
    but not a BPF object (EINVAL); any other is not open (EBADF)."""
    try:
        os.fstat(fd)  # type: ignore[arg-type]
    except (OSError, TypeError, ValueError, OverflowError):
        return KernelError(errno.EBADF, f"fd {fd!r} is not open")
    return KernelError(errno.EINVAL, f"fd {fd} is not a BPF object (an open file of this process)")


def _close_host_fds(files: dict[int, Any]) -> None:
    """When the emulated system goes away, its fds' host halves go too."""
    for fd in list(files):
        try:
            os.close(fd)
        except OSError:
            pass
