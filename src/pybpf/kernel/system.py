"""KernelSystem: the System interface on the real bpf(2).

Rules this module keeps:
- Every failure is built by ``errors.bpf_error`` with the kernel's errno, the command and
  the map ("hash map 'name' (id 7)", read back with OBJ_GET_INFO_BY_FD only on failure).
- The kernel reads and writes user memory at the sizes it knows; this module checks each
  key, value and batch token against the map's sizes before the call (EINVAL with a detail
  otherwise), so a short ``bytes`` never lets the kernel read past it.
- Map sizes are cached per fd in ``_MAPS``, shared by every KernelSystem of the process:
  set by ``map_create``, learnt on first use otherwise, dropped by ``close`` and whenever
  this module gets a new fd from the kernel (so a reused fd number never keeps old sizes).
  The one thing it cannot see is an fd closed behind pybpf's back (``os.close``) and
  reused by a map made elsewhere: close pybpf's fds with ``close``.
- The element commands reuse one attr struct and one value buffer per thread and size,
  so the hot path allocates nothing but the returned ``bytes``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import threading
from collections.abc import Iterator, Sequence

from ..errors import (
    BPFError,
    VerifierError,
    bpf_error,
    errno_name,
    map_description,
    prog_description,
    strerror,
)
from ..system import (
    BatchLookup,
    FastOps,
    MapInfo,
    ProgInfo,
    System,
    TestRun,
    Topology,
    host_topology,
    test_run_args_problem,
)
from ..uapi import ENOTSUPP, NUMA_NO_NODE, Cmd, MapType, syscall_value_size
from . import perf_event
from .syscall import (
    NR_BPF,
    UNAVAILABLE,
    BpfMapInfo,
    BpfProgInfo,
    GetIdAttr,
    InfoAttr,
    MapBatchAttr,
    MapCreateAttr,
    MapElemAttr,
    ObjPinAttr,
    ProgLoadAttr,
    TestRunAttr,
    bpf,
    get_errno,
    libc_syscall,
    map_name_bytes,
    num_possible_cpus,
    probe_map_create,
)

# Map types whose batch token is a u32 bucket index (htab); the others' token is a key.
_HTAB_TOKEN_TYPES = frozenset({MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH,
                               MapType.LRU_PERCPU_HASH, MapType.HASH_OF_MAPS})
# Array-like maps: E2BIG from an update means an index past max_entries, not a full map.
_INDEXED_TYPES = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY, MapType.PROG_ARRAY,
                            MapType.PERF_EVENT_ARRAY, MapType.CGROUP_ARRAY,
                            MapType.ARRAY_OF_MAPS, MapType.DEVMAP, MapType.CPUMAP,
                            MapType.SOCKMAP})
# Written into the htab token buffer first: the kernel never writes this bucket index, so
# finding it afterwards means it wrote no token.
_NO_TOKEN = b"\xff\xff\xff\xff"

_LOG_SIZES = (1 << 20, 1 << 24)  # verifier log buffer: first try, last try
_SIZEOF_ELEM = ctypes.sizeof(MapElemAttr)


class _MapMeta:
    """What the syscall wrappers need to know about a map fd."""

    __slots__ = ("map_type", "key_size", "value_size", "token_size")

    def __init__(self, map_type: int, key_size: int, value_size: int) -> None:
        self.map_type = map_type
        self.key_size = key_size
        # Bytes of one value through the syscall (per-CPU slots, 4-byte fds/ids).
        self.value_size = syscall_value_size(map_type, value_size, num_possible_cpus())
        self.token_size = 4 if map_type in _HTAB_TOKEN_TYPES else key_size


_MAPS: dict[int, _MapMeta] = {}


class _ThreadState(threading.local):
    """The calling thread's scratch: attrs and value buffers reused call after call.

    ``scratch`` is one tuple so the hot path pays for one thread-local lookup:
    (lookup attr, its address, attr of the other element commands, its address, buffers by
    size). The lookup attr's ``flags`` stays 0: lookups with flags take the general path.
    """

    def __init__(self) -> None:
        lookup, elem = MapElemAttr(), MapElemAttr()
        self.scratch = (lookup, ctypes.c_void_p(ctypes.addressof(lookup)),
                        elem, ctypes.c_void_p(ctypes.addressof(elem)), {})


def _new_buffer(buffers: dict, size: int) -> tuple[ctypes.Array, int]:
    buf = ctypes.create_string_buffer(size)
    entry = buffers[size] = (buf, ctypes.addressof(buf))
    return entry


_tls = _ThreadState()


def _fd_kind(fd: int) -> str:
    """``bpf-map``, ``bpf-prog``... for a bpf fd, "" for another file; raises if closed."""
    target = os.readlink(f"/proc/self/fd/{fd}")
    return target[len("anon_inode:"):] if target.startswith("anon_inode:") else ""


def _check_fd(fd: int, command: str) -> None:
    """EBADF for an fd no process can have: ctypes would wrap it into the u32 attr field and
    name another object (fd + 2**32 is fd)."""
    if not isinstance(fd, int) or not -(1 << 31) <= fd < 1 << 31:
        raise bpf_error(errno.EBADF, command, detail=f"fd {fd!r} is not open")


class KernelSystem(System):
    """bpf(2) on the running kernel."""

    name = "kernel"

    def __init__(self) -> None:
        """Raises OSError (EPERM with the hint, or ENOSYS off Linux) when bpf(2) is refused,
        so ``pybpf.system("kernel")`` fails at once rather than at the first command."""
        _check_bpf_allowed()
        self._topology: Topology | None = None

    # -- machine -------------------------------------------------------------------------------
    @property
    def num_possible_cpus(self) -> int:
        return num_possible_cpus()

    @property
    def topology(self) -> Topology:
        if self._topology is None:
            self._topology = host_topology()
        return self._topology

    @contextlib.contextmanager
    def on_cpu(self, cpu: int) -> Iterator[None]:
        """Pin the calling thread to ``cpu`` for the body, then restore its affinity."""
        previous = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError as exc:
            raise OSError(exc.errno, f"cannot run on CPU {cpu}: {os.strerror(exc.errno)} "
                          f"(online CPUs allowed here: {sorted(previous)})") from None
        try:
            yield
        finally:
            os.sched_setaffinity(0, previous)

    def current_cpu(self) -> int:
        cpu = _sched_getcpu()
        if cpu < 0:
            err = get_errno()
            raise OSError(err, f"sched_getcpu: {os.strerror(err)}")
        return cpu

    # -- helpers -------------------------------------------------------------------------------
    def _error(self, err: int, command: str, fd: int, *, detail: str = "",
               count: int | None = None) -> OSError:
        """The error of ``command`` on map ``fd``, naming the map as its info describes it."""
        try:
            info = self.map_get_info(fd)
        except OSError:
            where = f"map fd {fd}"
        else:
            where = map_description(info.type, info.name, info.id)
            if (not detail and err == errno.E2BIG and info.type in _INDEXED_TYPES
                    and command in ("map_update_elem", "map_update_batch")):
                detail = (f"index out of range: the map's keys are 0..{info.max_entries - 1} "
                          "(max_entries)")
        return bpf_error(err, command, map=where, detail=detail, count=count)

    def _meta(self, fd: int, command: str, cmd: int | None = None, flags: int = 0) -> _MapMeta:
        """The cached sizes of map ``fd``, learnt from the kernel on first use.

        For an element command ``cmd`` on an fd that is not a map, the kernel itself answers:
        some commands check their flags before the fd, so its errno is the one to give."""
        meta = _MAPS.get(fd)
        if meta is not None:
            return meta
        try:
            kind = _fd_kind(fd)
        except OSError:
            kind = None
        if kind != "bpf-map":
            if kind is None:
                err, detail = errno.EBADF, f"fd {fd} is not open" + (
                    " (a closed Map or Program has fd -1)" if fd == -1 else "")
            else:
                err, detail = errno.EINVAL, f"fd {fd} is not a BPF map ({kind or 'another file'})"
            if cmd is not None and isinstance(fd, int) and fd < 1 << 31:  # not wrapped to a u32
                ret = bpf(cmd, MapElemAttr(map_fd=fd, flags=flags))
                if ret < 0 and -ret != err:  # refused by a check made before the fd's
                    raise self._error(-ret, command, fd)
            raise bpf_error(err, command, detail=detail)
        info = self.map_get_info(fd)
        meta = _MAPS[fd] = _MapMeta(info.type, info.key_size, info.value_size)
        return meta

    def _key_arg(self, meta: _MapMeta, key, fd: int, command: str) -> bytes:
        """``key`` as bytes of the map's key_size (the slow path of the element commands)."""
        key = self._as_bytes(key, "key", fd, command)
        if meta.key_size and len(key) != meta.key_size:
            raise self._error(errno.EINVAL, command, fd,
                              detail=f"key is {len(key)} bytes, the map's key_size is "
                                     f"{meta.key_size}")
        return key

    def _value_arg(self, meta: _MapMeta, value, fd: int, command: str) -> bytes:
        value = self._as_bytes(value, "value", fd, command)
        if len(value) != meta.value_size:
            raise self._error(errno.EINVAL, command, fd,
                              detail=f"value is {len(value)} bytes, the map takes "
                                     f"{meta.value_size} through the syscall")
        return value

    def _as_bytes(self, data, what: str, fd: int, command: str) -> bytes:
        try:
            return memoryview(data).tobytes()  # bytes-like only (bytes(5) would be 5 zeros)
        except TypeError:
            raise self._error(errno.EINVAL, command, fd,
                              detail=f"{what} must be bytes (or bytes-like), not "
                                     f"{type(data).__name__}") from None

    # -- maps ----------------------------------------------------------------------------------
    def map_create(self, map_type: int, key_size: int, value_size: int, max_entries: int,
                   map_flags: int = 0, inner_map_fd: int = 0, numa_node: int = 0,
                   map_name: bytes = b"", map_extra: int = 0) -> int:
        kind = MapType(map_type).name.lower() if map_type in MapType._value2member_map_ \
            else f"type {map_type}"
        what = f"{kind} map" + (f" {_text(map_name)!r}" if map_name else "")
        # ctypes would wrap an out-of-range int into the u32/u64 field (max_entries 2**32 + 10
        # becoming 10): refuse it as the emulated backend does, with the same words.
        for label, number, bits in (("map_type", map_type, 32), ("key_size", key_size, 32),
                                    ("value_size", value_size, 32),
                                    ("max_entries", max_entries, 32),
                                    ("map_flags", map_flags, 32),
                                    ("inner_map_fd", inner_map_fd, 32),
                                    ("numa_node", numa_node & 0xFFFFFFFF
                                     if numa_node == NUMA_NO_NODE else numa_node, 32),
                                    ("map_extra", map_extra, 64)):
            if not isinstance(number, int) or not 0 <= number < 1 << bits:
                raise bpf_error(errno.EINVAL, "map_create", map=what,
                                detail=f"{label}={number!r} is not an unsigned {bits}-bit "
                                       "integer")
        try:
            attr = MapCreateAttr(map_type=map_type, key_size=key_size, value_size=value_size,
                                 max_entries=max_entries, map_flags=map_flags,
                                 inner_map_fd=inner_map_fd, numa_node=numa_node & 0xFFFFFFFF,
                                 map_name=map_name_bytes(map_name), map_extra=map_extra)
        except (ValueError, TypeError, OverflowError) as exc:
            raise bpf_error(errno.EINVAL, "map_create", map=what, detail=str(exc)) from None
        fd = bpf(Cmd.MAP_CREATE, attr)
        if fd < 0:
            detail = "" if inner_map_fd else _create_refusal_detail(
                -fd, map_type=map_type, key_size=key_size, value_size=value_size,
                max_entries=max_entries, map_flags=map_flags, numa_node=numa_node,
                map_name=map_name, map_extra=map_extra)
            raise bpf_error(-fd, "map_create", map=what, detail=detail)
        _MAPS[fd] = _MapMeta(map_type, key_size, value_size)
        return fd

    def map_lookup_elem(self, fd: int, key: bytes | None, flags: int = 0, *,
                        value: bytes | None = None) -> bytes:
        """BPF_MAP_LOOKUP_ELEM. ``value`` is the input of maps that look up by value
        (BLOOM_FILTER: answers ENOENT or returns ``value``)."""
        meta = _MAPS.get(fd) or self._meta(fd, "map_lookup_elem", Cmd.MAP_LOOKUP_ELEM, flags)
        if key is not None and (key.__class__ is not bytes or len(key) != meta.key_size):
            key = self._key_arg(meta, key, fd, "map_lookup_elem")
        if value is None and meta.map_type == MapType.BLOOM_FILTER:
            value = bytes(meta.value_size)  # an input here: none given reads as zeros
        if flags or value is not None:
            if value is None:
                return self._elem_call(Cmd.MAP_LOOKUP_ELEM, "map_lookup_elem", fd, key, -1,
                                       flags)
            value = self._value_arg(meta, value, fd, "map_lookup_elem")
            attr = MapElemAttr(map_fd=fd, key=key, value=value, flags=flags)
            ret = bpf(Cmd.MAP_LOOKUP_ELEM, attr)
            if ret < 0:
                raise self._error(-ret, "map_lookup_elem", fd)
            return value
        attr, ref, _, _, buffers = _tls.scratch
        attr.map_fd = fd
        attr.key = key
        size = meta.value_size
        buf, attr.value = buffers.get(size) or _new_buffer(buffers, size)
        if libc_syscall(NR_BPF, 1, ref, _SIZEOF_ELEM) < 0:
            raise self._error(get_errno(), "map_lookup_elem", fd)
        return buf.raw

    def map_update_elem(self, fd: int, key: bytes | None, value: bytes, flags: int = 0) -> None:
        meta = _MAPS.get(fd) or self._meta(fd, "map_update_elem")
        if key is not None and (key.__class__ is not bytes or len(key) != meta.key_size):
            key = self._key_arg(meta, key, fd, "map_update_elem")
        if value.__class__ is not bytes or len(value) != meta.value_size:
            value = self._value_arg(meta, value, fd, "map_update_elem")
        _, _, attr, ref, _ = _tls.scratch
        attr.map_fd = fd
        attr.key = key
        attr.value = value
        attr.flags = flags
        if libc_syscall(NR_BPF, 2, ref, _SIZEOF_ELEM) < 0:
            raise self._error(get_errno(), "map_update_elem", fd)

    def _elem_call(self, cmd: int, command: str, fd: int, key, out_size: int | None,
                   flags: int = 0) -> bytes | None:
        """One element command with ``key`` in and ``out_size`` bytes out (None: no output)."""
        meta = _MAPS.get(fd) or self._meta(fd, command, cmd, flags)
        if key is not None and (key.__class__ is not bytes or len(key) != meta.key_size):
            key = self._key_arg(meta, key, fd, command)
        _, _, attr, ref, buffers = _tls.scratch
        attr.map_fd = fd
        attr.key = key
        attr.flags = flags
        buf = None
        if out_size is None:
            attr.value = None
        else:
            size = meta.value_size if out_size < 0 else out_size
            buf, attr.value = buffers.get(size) or _new_buffer(buffers, size)
        if libc_syscall(NR_BPF, cmd, ref, _SIZEOF_ELEM) < 0:
            raise self._error(get_errno(), command, fd)
        return None if buf is None else buf.raw

    def map_delete_elem(self, fd: int, key: bytes | None) -> None:
        self._elem_call(Cmd.MAP_DELETE_ELEM, "map_delete_elem", fd, key, None)

    def map_get_next_key(self, fd: int, key: bytes | None) -> bytes:
        meta = _MAPS.get(fd) or self._meta(fd, "map_get_next_key")
        return self._elem_call(Cmd.MAP_GET_NEXT_KEY, "map_get_next_key", fd, key,
                               meta.key_size)

    def map_lookup_and_delete_elem(self, fd: int, key: bytes | None, flags: int = 0) -> bytes:
        return self._elem_call(Cmd.MAP_LOOKUP_AND_DELETE_ELEM, "map_lookup_and_delete_elem",
                               fd, key, -1, flags)

    def map_freeze(self, fd: int) -> None:
        _check_fd(fd, "map_freeze")
        ret = bpf(Cmd.MAP_FREEZE, MapElemAttr(map_fd=fd))
        if ret < 0:
            raise self._error(-ret, "map_freeze", fd)

    def fast_ops(self, fd: int) -> FastOps:
        """A lookup closure for ``fd``: per thread, an attr with the fd and the value buffer
        already in place, so a call sets the key pointer and makes the syscall."""
        meta = self._meta(fd, "map_lookup_elem")
        key_size, size = meta.key_size, meta.value_size
        nr, sizeof_elem, syscall = NR_BPF, _SIZEOF_ELEM, libc_syscall
        slow = self.map_lookup_elem
        per_thread = threading.local()

        def prepare() -> tuple[MapElemAttr, ctypes.c_void_p, ctypes.Array]:
            buf = ctypes.create_string_buffer(size)
            attr = MapElemAttr(map_fd=fd, value=ctypes.addressof(buf))
            per_thread.state = (attr, ctypes.c_void_p(ctypes.addressof(attr)), buf)
            return per_thread.state

        def lookup(key: bytes | None) -> bytes:
            if key.__class__ is not bytes or len(key) != key_size:
                return slow(fd, key)
            try:
                attr, ref, buf = per_thread.state
            except AttributeError:
                attr, ref, buf = prepare()
            attr.key = key
            if syscall(nr, 1, ref, sizeof_elem) < 0:
                raise self._error(get_errno(), "map_lookup_elem", fd)
            return buf.raw

        return FastOps(lookup=lookup)

    # -- batches -------------------------------------------------------------------------------
    def _lookup_batch(self, cmd: int, command: str, fd: int, in_batch: bytes | None,
                      count: int, elem_flags: int, flags: int) -> BatchLookup:
        meta = self._meta(fd, command)
        if in_batch is not None:
            in_batch = bytes(in_batch)
            if len(in_batch) != meta.token_size:
                raise self._error(errno.EINVAL, command, fd,
                                  detail=f"in_batch is {len(in_batch)} bytes; this map's "
                                         f"batch token is {meta.token_size} bytes")
        if not isinstance(count, int) or not 0 <= count < 1 << 32:
            raise self._error(errno.EINVAL, command, fd,
                              detail=f"count {count!r} is not an unsigned 32-bit integer")
        htab = meta.map_type in _HTAB_TOKEN_TYPES
        keys = ctypes.create_string_buffer(count * meta.key_size)
        values = ctypes.create_string_buffer(count * meta.value_size)
        out = ctypes.create_string_buffer(max(meta.token_size, 4))
        if htab:
            out[:4] = _NO_TOKEN
        attr = MapBatchAttr(in_batch=in_batch, out_batch=ctypes.addressof(out),
                            keys=ctypes.addressof(keys), values=ctypes.addressof(values),
                            count=count, map_fd=fd, elem_flags=elem_flags, flags=flags)
        ret = bpf(cmd, attr)
        if ret < 0 and ret != -errno.ENOENT:
            raise self._error(-ret, command, fd, count=attr.count)
        n = attr.count if count else 0
        ks, vs = meta.key_size, meta.value_size
        raw_keys, raw_values = keys.raw, values.raw
        token = out.raw[:meta.token_size]
        if (htab and token == _NO_TOKEN) or (not htab and n == 0) or count == 0:
            token = None
        return BatchLookup(keys=[raw_keys[i * ks:(i + 1) * ks] for i in range(n)],
                           values=[raw_values[i * vs:(i + 1) * vs] for i in range(n)],
                           out_batch=token, end=ret == -errno.ENOENT)

    def map_lookup_batch(self, fd: int, in_batch: bytes | None, count: int,
                         elem_flags: int = 0, flags: int = 0) -> BatchLookup:
        return self._lookup_batch(Cmd.MAP_LOOKUP_BATCH, "map_lookup_batch", fd, in_batch,
                                  count, elem_flags, flags)

    def map_lookup_and_delete_batch(self, fd: int, in_batch: bytes | None, count: int,
                                    elem_flags: int = 0, flags: int = 0) -> BatchLookup:
        return self._lookup_batch(Cmd.MAP_LOOKUP_AND_DELETE_BATCH,
                                  "map_lookup_and_delete_batch", fd, in_batch, count,
                                  elem_flags, flags)

    def _packed(self, items: Sequence[bytes], size: int, what: str, command: str,
                fd: int) -> bytes:
        for i, item in enumerate(items):
            if len(item) != size:
                raise self._error(errno.EINVAL, command, fd,
                                  detail=f"{what}[{i}] is {len(item)} bytes, expected {size}")
        return b"".join(items)

    def _write_batch(self, cmd: int, command: str, fd: int, keys: Sequence[bytes],
                     values: Sequence[bytes] | None, elem_flags: int, flags: int) -> int:
        meta = self._meta(fd, command)
        packed_keys = self._packed(keys, meta.key_size, "keys", command, fd)
        packed_values = None
        if values is not None:
            if len(values) != len(keys):
                raise self._error(errno.EINVAL, command, fd,
                                  detail=f"{len(keys)} keys but {len(values)} values")
            packed_values = self._packed(values, meta.value_size, "values", command, fd)
        attr = MapBatchAttr(keys=packed_keys, values=packed_values, count=len(keys),
                            map_fd=fd, elem_flags=elem_flags, flags=flags)
        ret = bpf(cmd, attr)
        if ret < 0:
            # The generic handlers stop at the failing element, so a count still equal to
            # len(keys) was never written: the command was refused before its first element.
            done = attr.count if attr.count < len(keys) else 0
            raise self._error(-ret, command, fd, count=done)
        return attr.count if keys else 0

    def map_update_batch(self, fd: int, keys: Sequence[bytes], values: Sequence[bytes],
                         elem_flags: int = 0, flags: int = 0) -> int:
        return self._write_batch(Cmd.MAP_UPDATE_BATCH, "map_update_batch", fd, keys, values,
                                 elem_flags, flags)

    def map_delete_batch(self, fd: int, keys: Sequence[bytes], elem_flags: int = 0,
                         flags: int = 0) -> int:
        return self._write_batch(Cmd.MAP_DELETE_BATCH, "map_delete_batch", fd, keys, None,
                                 elem_flags, flags)

    # -- object info and ids -------------------------------------------------------------------
    def _obj_info(self, fd: int, info: ctypes.Structure, command: str, kind: str) -> None:
        """BPF_OBJ_GET_INFO_BY_FD into ``info``, for an fd of ``kind`` (bpf-map, bpf-prog):
        the kernel fills whichever info the fd's object has, so a program's would be read
        as a map's."""
        if not isinstance(fd, int) or not -(1 << 31) <= fd < 1 << 31:  # see _check_fd
            raise bpf_error(errno.EBADFD, command, map=f"fd {fd}")
        try:
            actual = _fd_kind(fd)
        except OSError:  # not open: the kernel answers
            actual = ""
        if actual.startswith("bpf") and actual != kind:
            raise bpf_error(errno.EINVAL, command, map=f"fd {fd}",
                            detail=f"fd {fd} is a {actual}, not a {kind}")
        attr = InfoAttr(bpf_fd=fd, info_len=ctypes.sizeof(info), info=ctypes.addressof(info))
        ret = bpf(Cmd.OBJ_GET_INFO_BY_FD, attr)
        if ret < 0:
            raise bpf_error(-ret, command, map=f"fd {fd}")

    def map_get_info(self, fd: int) -> MapInfo:
        info = BpfMapInfo()
        self._obj_info(fd, info, "map_get_info", "bpf-map")
        return MapInfo(type=info.type, id=info.id, key_size=info.key_size,
                       value_size=info.value_size, max_entries=info.max_entries,
                       map_flags=info.map_flags, name=info.name.decode(errors="replace"),
                       ifindex=info.ifindex, map_extra=info.map_extra)

    def _fd_by_id(self, cmd: int, command: str, obj_id: int, open_flags: int) -> int:
        if not isinstance(obj_id, int) or not 0 <= obj_id < 1 << 32:  # ctypes would wrap it
            raise bpf_error(errno.ENOENT, command, map=f"id {obj_id}")
        fd = bpf(cmd, GetIdAttr(start_id=obj_id, open_flags=open_flags))
        if fd < 0:
            raise bpf_error(-fd, command, map=f"id {obj_id}")
        _MAPS.pop(fd, None)
        return fd

    def map_get_fd_by_id(self, map_id: int, open_flags: int = 0) -> int:
        return self._fd_by_id(Cmd.MAP_GET_FD_BY_ID, "map_get_fd_by_id", map_id, open_flags)

    def map_get_next_id(self, start_id: int) -> int:
        attr = GetIdAttr(start_id=start_id)
        ret = bpf(Cmd.MAP_GET_NEXT_ID, attr)
        if ret < 0:
            raise bpf_error(-ret, "map_get_next_id",
                            detail="no map id after this one" if ret == -errno.ENOENT else "")
        return attr.next_id

    # -- objects -------------------------------------------------------------------------------
    def obj_pin(self, fd: int, path: str) -> None:
        _check_fd(fd, "obj_pin")
        ret = bpf(Cmd.OBJ_PIN, ObjPinAttr(pathname=os.fsencode(path), bpf_fd=fd))
        if ret < 0:
            raise bpf_error(-ret, "obj_pin", map=f"fd {fd}",
                            detail=_pin_detail(-ret, path, pinning=True))

    def obj_get(self, path: str, file_flags: int = 0) -> int:
        fd = bpf(Cmd.OBJ_GET, ObjPinAttr(pathname=os.fsencode(path), file_flags=file_flags))
        if fd < 0:
            raise bpf_error(-fd, "obj_get", detail=_pin_detail(-fd, path))
        _MAPS.pop(fd, None)
        return fd

    def close(self, fd: int) -> None:
        _check_fd(fd, "close")
        _MAPS.pop(fd, None)
        try:
            os.close(fd)
        except OSError as exc:
            raise bpf_error(exc.errno, "close", detail=f"fd {fd}") from None

    # -- programs ------------------------------------------------------------------------------
    def prog_load(self, prog_type: int, insns: bytes, license: str = "GPL",
                  expected_attach_type: int = 0, prog_name: bytes = b"",
                  prog_flags: int = 0, log_level: int = 0) -> int:
        insns = bytes(insns)
        what = prog_description(prog_type, _text(prog_name).split("\0", 1)[0])
        if len(insns) % 8:
            raise bpf_error(errno.EINVAL, "prog_load", map=what,
                            detail=f"{len(insns)} bytes of instructions is not a multiple of 8")
        try:
            attr = ProgLoadAttr(prog_type=prog_type, insn_cnt=len(insns) // 8, insns=insns,
                                license=license.encode(),
                                expected_attach_type=expected_attach_type,
                                prog_name=map_name_bytes(prog_name), prog_flags=prog_flags)
        except (ValueError, TypeError, OverflowError) as exc:
            raise bpf_error(errno.EINVAL, "prog_load", map=what, detail=str(exc)) from None
        fd = -errno.EINVAL
        if not log_level:
            fd = bpf(Cmd.PROG_LOAD, attr)
            if fd >= 0:
                _MAPS.pop(fd, None)
                return fd
            if -fd not in (errno.EACCES, errno.EINVAL):
                raise bpf_error(-fd, "prog_load", map=what)
        # Load (again) with a verifier log; grow the buffer while the log is truncated.
        first_err = -fd
        for size in _LOG_SIZES:
            log = ctypes.create_string_buffer(size)
            attr.log_level, attr.log_size, attr.log_buf = log_level or 1, size, \
                ctypes.addressof(log)
            fd = bpf(Cmd.PROG_LOAD, attr)
            if fd >= 0:
                _MAPS.pop(fd, None)
                return fd
            if -fd != errno.ENOSPC:
                break
        err = -fd if -fd != errno.ENOSPC else first_err
        text = log.value.decode(errors="replace")
        message = f"prog load on {what}: {strerror(err)} ({errno_name(err)})"
        reason = _verifier_reason(text)
        if reason:
            message += f": verifier: {reason}"
        raise VerifierError(err, message, log=text, command="prog_load", map=what,
                            hint="the verifier rejected the program; its log says why")

    def prog_test_run(self, prog_fd: int, data_in: bytes = b"", *,
                      data_size_out: int | None = None, ctx_in: bytes | None = None,
                      ctx_size_out: int | None = None, repeat: int = 1, flags: int = 0,
                      cpu: int = 0) -> TestRun:
        """BPF_PROG_TEST_RUN. ``data_size_out`` defaults to room for the input plus a page
        (programs may grow the packet); ``ctx_size_out`` to the size of ``ctx_in``."""
        _check_fd(prog_fd, "prog_test_run")
        data_in = bytes(data_in)
        if data_size_out is None:
            data_size_out = len(data_in) + 4096 if data_in else 0
        if ctx_size_out is None:
            ctx_size_out = len(ctx_in) if ctx_in else 0
        problem = test_run_args_problem(data_size_out=data_size_out, ctx_size_out=ctx_size_out,
                                        repeat=repeat, flags=flags, cpu=cpu)
        if problem:
            raise bpf_error(errno.EINVAL, "prog_test_run", map=f"program fd {prog_fd}",
                            detail=problem)
        data_out = ctypes.create_string_buffer(data_size_out)
        ctx_out = ctypes.create_string_buffer(ctx_size_out)
        # A private copy: the kernel writes a syscall program's ctx back into ctx_in, and
        # the caller's bytes must stay immutable.
        ctx_buf = ctypes.create_string_buffer(bytes(ctx_in), len(ctx_in)) if ctx_in else None
        attr = TestRunAttr(prog_fd=prog_fd, data_size_in=len(data_in),
                           data_size_out=data_size_out,
                           data_in=data_in if data_in else None,
                           data_out=ctypes.addressof(data_out) if data_size_out else None,
                           repeat=repeat, ctx_size_in=len(ctx_in) if ctx_in else 0,
                           ctx_size_out=ctx_size_out,
                           ctx_in=ctypes.addressof(ctx_buf) if ctx_buf else None,
                           ctx_out=ctypes.addressof(ctx_out) if ctx_size_out else None,
                           flags=flags, cpu=cpu)
        while True:
            ret = bpf(Cmd.PROG_TEST_RUN, attr)
            if ret != -errno.EINTR:  # a signal interrupted a long repeat: run it again
                break
        if ret < 0:
            raise bpf_error(-ret, "prog_test_run", map=f"program fd {prog_fd}")
        return TestRun(retval=attr.retval, duration=attr.duration,
                       data_out=data_out.raw[:min(attr.data_size_out, data_size_out)],
                       ctx_out=ctx_out.raw[:min(attr.ctx_size_out, ctx_size_out)])

    def prog_get_info(self, fd: int) -> ProgInfo:
        info = BpfProgInfo()
        self._obj_info(fd, info, "prog_get_info", "bpf-prog")
        map_ids: tuple[int, ...] = ()
        if info.nr_map_ids:
            ids = (ctypes.c_uint32 * info.nr_map_ids)()
            info = BpfProgInfo(nr_map_ids=len(ids), map_ids=ctypes.addressof(ids))
            self._obj_info(fd, info, "prog_get_info", "bpf-prog")
            map_ids = tuple(ids[:min(info.nr_map_ids, len(ids))])
        return ProgInfo(type=info.type, id=info.id, tag=bytes(info.tag),
                        name=info.name.decode(errors="replace"),
                        xlated_prog_len=info.xlated_prog_len,
                        jited_prog_len=info.jited_prog_len, map_ids=map_ids,
                        run_time_ns=info.run_time_ns, run_cnt=info.run_cnt)

    def prog_get_fd_by_id(self, prog_id: int) -> int:
        return self._fd_by_id(Cmd.PROG_GET_FD_BY_ID, "prog_get_fd_by_id", prog_id, 0)

    def attach_tracepoint(self, prog_fd: int, category: str, name: str) -> int:
        command = "attach_tracepoint"
        _check_fd(prog_fd, command)
        where = f"tracepoint {category}/{name}"
        try:
            perf_fd = perf_event.open_tracepoint(perf_event.tracepoint_id(category, name))
        except OSError as exc:
            raise bpf_error(exc.errno or errno.EINVAL, command, map=where,
                            detail=exc.strerror) from None
        try:
            perf_event.attach_bpf(perf_fd, prog_fd)
        except OSError as exc:
            os.close(perf_fd)
            detail = ("the program must be a tracepoint program (ProgType.TRACEPOINT)"
                      if exc.errno == errno.EINVAL else "")
            raise bpf_error(exc.errno, command, map=where, detail=detail) from None
        _MAPS.pop(perf_fd, None)
        return perf_fd


def _create_refusal_detail(err: int, **attrs) -> str:
    """Which attribute the kernel refused a map for: the emulated backend runs map_create's
    checks in the kernel's order, so when it refuses with the same errno, its detail names the
    attribute. "" when it cannot tell (another errno, or it would create the map)."""
    if err not in (errno.EINVAL, errno.E2BIG, ENOTSUPP):  # attribute errors, not EPERM/ENOMEM
        return ""
    from ..emulated.system import EmulatedSystem

    emulated = EmulatedSystem()  # this host's CPUs and NUMA nodes
    try:
        emulated.close(emulated.map_create(**attrs))
    except BPFError as exc:
        return exc.detail if exc.errno == err else ""
    return ""


def _text(name: bytes | str) -> str:
    return name.decode(errors="replace") if isinstance(name, bytes | bytearray) else str(name)


_bpf_allowed = False  # set once a probe succeeded in this process


def _check_bpf_allowed() -> None:
    """Create and close a 1-entry ARRAY map; raise the kernel's refusal as a BPFError."""
    global _bpf_allowed
    if _bpf_allowed:
        return
    if UNAVAILABLE is not None:
        raise UNAVAILABLE
    err = probe_map_create()
    if err:
        raise bpf_error(err, "map_create", map="array map (probing bpf(2))",
                        detail="this process may not use bpf(2)"
                        if err in (errno.EPERM, errno.EACCES) else "")
    _bpf_allowed = True


def _verifier_reason(log: str) -> str:
    """The line of a verifier log that says why it refused (the last one before the stats)."""
    for line in reversed(log.splitlines()):
        line = line.strip()
        if line and not line.startswith(("processed ", "verification time", "stack depth")):
            return line
    return ""


def _pin_detail(err: int, path: str, pinning: bool = False) -> str:
    if err == errno.ENOENT and pinning:
        return f"{path}: its directory does not exist (create it on bpffs first)"
    if err == errno.ENOENT:
        return f"{path}: no such pin (or its directory is missing)"
    if err == errno.EEXIST:
        return f"{path} exists already"
    if err == errno.EPERM:
        return f"{path}: pins live on bpffs (mount -t bpf bpf /sys/fs/bpf)"
    return path


def _load_sched_getcpu():
    from .syscall import _libc

    if _libc is None:
        return lambda: -1
    return _libc.sched_getcpu


_sched_getcpu = _load_sched_getcpu()
