"""MapSpec and Map: the Pythonic layer over any System (kernel or emulated).

Rules this module keeps:
- ``MapSpec`` is a plain frozen description and knows nothing of backends; what depends on
  the machine (``numa_node="auto"``, the per-CPU count) is resolved when a ``Map`` is created
  or opened on a ``System``.
- A ``Map`` owns its fd: ``close()``, leaving a ``with`` block, or garbage collection closes
  it exactly once (``weakref.finalize``).
- A ``Map`` is a ``MutableMapping``: ``m[k]`` is BPF_MAP_LOOKUP_ELEM (a missing key raises
  ``KeyNotFoundError``, a ``KeyError``), ``m[k] = v`` is UPDATE_ELEM with BPF_ANY, ``del m[k]``
  is DELETE_ELEM, iteration is GET_NEXT_KEY. Every error is the backend's errno, raised as a
  ``BPFError`` by ``errors.bpf_error``.
- Keys and values go through codecs (``pybpf.codecs``), checked against the map's sizes when
  the map is opened. Per-CPU maps give ``PerCpuValue``; map-in-map values are ``Map``s on
  update and ids on lookup.
- The hot element ops (``m[k]``, ``m[k] = v``, ``del m[k]``, ``k in m``) and the batches run
  on what the System hands out for the fd (``System.fast_ops``, a ``FastOps`` capability),
  never on a branch on the backend's name: bpf(2) made in C where the capability offers an
  fd for it, a live table where it offers one, else its callables (``pybpf.mapcore``: the C
  accelerator's core when it was built, else its pure-Python twin; both give the same
  results and errors; ``PYBPF_NO_ACCEL=1`` forces the pure-Python core).
"""

from __future__ import annotations

import collections.abc
import enum
import errno
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import codecs as _codecs
from .accelerator import ACCEL, accelerated
from .backends import resolve_system
from .codecs import (
    Codec,
    CodecSpec,
    LpmKey,
    MapFdCodec,
    PerCpuCodec,
    PerCpuValue,
    SocketCodec,
    make_codec,
)
from .errors import BPFError, KeyNotFoundError, map_description
from .handles import FdHandle
from .mapcore import MODE_KERNEL, MODE_SLOW, MODE_TABLE, MapCore
from .perf_buffer import PerfBufferReader, PerfSample
from .ringbuf import RingBufReader, UserRingBufProducer
from .system import FastOps, MapInfo, System
from .uapi import (
    BPF_F_NO_PREALLOC,
    BPF_F_NUMA_NODE,
    MapType,
    map_traits,
    member_named,
    syscall_value_size,
)

__all__ = [
    "ArrayMap", "ArrayOfMaps", "BatchCursor", "BloomFilterMap", "HashMap", "HashOfMaps",
    "LpmKey", "LpmTrieMap", "LruHashMap", "LruPercpuHashMap", "Map", "MapSpec",
    "PercpuArrayMap", "PercpuHashMap", "PerCpuValue", "PerfEventArray", "QueueMap", "RingBuf",
    "StackMap", "UpdateFlags", "UserRingBuf",
    "accelerated",
]


class UpdateFlags(enum.IntFlag):
    """Element-update flags (attr->flags): BPF_ANY, BPF_NOEXIST, BPF_EXIST, BPF_F_LOCK."""

    ANY = 0
    NOEXIST = 1
    EXIST = 2
    LOCK = 4


def update_flags(flags: UpdateFlags | int | str) -> int:
    """``UpdateFlags``, a uapi int, or a name ("any", "noexist", "exist", "lock", "exist|lock")."""
    if isinstance(flags, str):
        value = 0
        for part in flags.lower().replace(" ", "").split("|"):
            try:
                value |= UpdateFlags[part.upper()]
            except KeyError:
                raise ValueError(f"unknown update flag {part!r}: use any, noexist, exist "
                                 "or lock") from None
        return value
    if isinstance(flags, int) and not isinstance(flags, bool):
        if not 0 <= flags < 1 << 64:
            raise ValueError(f"update flags must fit in the u64 attr->flags, got {flags}: "
                             "use UpdateFlags (ANY, NOEXIST, EXIST, LOCK) or their names")
        return int(flags)
    raise TypeError(f"update flags must be UpdateFlags, an int or a name, got {flags!r}")


@dataclass(frozen=True)
class MapSpec:
    """What a map is: the attributes of BPF_MAP_CREATE, plus optional key/value codecs.

    ``numa_node=N`` (0 included) sets BPF_F_NUMA_NODE by itself; ``numa_node="auto"`` picks the
    node of the CPU that creates the map; None leaves placement to the kernel.
    ``inner_map`` (map-in-map) is a MapSpec (a template map is created and closed) or an open
    Map whose fd is used.
    """

    type: MapType | int
    key_size: int
    value_size: int
    max_entries: int
    flags: int = 0
    numa_node: int | str | None = None
    inner_map: MapSpec | Map | None = None
    name: str = ""
    map_extra: int = 0
    key: CodecSpec = None
    value: CodecSpec = None

    def __post_init__(self) -> None:
        if isinstance(self.type, str):
            object.__setattr__(self, "type", member_named(MapType, self.type, "map type"))
        elif self.type in MapType._value2member_map_:
            object.__setattr__(self, "type", MapType(self.type))
        for field in ("key_size", "value_size", "max_entries", "flags", "map_extra"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"MapSpec.{field} must be a non-negative int, got {value!r}")
        node = self.numa_node
        if not (node is None or node == "auto" or
                (isinstance(node, int) and not isinstance(node, bool) and node >= -1)):
            raise ValueError(f"numa_node must be None, 'auto' or a node number, got {node!r}")
        if self.inner_map is not None and not isinstance(self.inner_map, MapSpec | Map):
            raise TypeError(f"inner_map must be a MapSpec or a Map, got {self.inner_map!r}")
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {self.name!r}")

    @property
    def map_flags(self) -> int:
        """The create flags as passed to the kernel (BPF_F_NUMA_NODE added for a node)."""
        return self.flags | (BPF_F_NUMA_NODE if self.numa_node is not None else 0)

    @classmethod
    def from_info(cls, info: MapInfo) -> MapSpec:
        """The spec of an existing map (inner-map template and NUMA node are not reported)."""
        return cls(info.type, info.key_size, info.value_size, info.max_entries,
                   flags=info.map_flags, name=info.name, map_extra=info.map_extra)


def _close_fd(system: System, fd: int) -> None:
    try:
        system.close(fd)
    except OSError:
        pass  # already gone (the system itself was torn down)


class FlaggedUpdate(collections.abc.MutableMapping):
    """``update`` of a map: one element with flags, or dict-style (``Map``, ``SharedMap``)."""

    def update(self, *args: Any, flags: UpdateFlags | int | str = UpdateFlags.ANY,
               **kwargs: Any) -> None:
        """``update(key, value, flags=...)``: one BPF_MAP_UPDATE_ELEM with ``flags`` (any,
        noexist, exist, lock; an UpdateFlags, a uapi int or a name; a map that cannot take
        one refuses it). ``update(mapping_or_pairs)``: dict-style, one BPF_ANY update per
        item."""
        if len(args) == 2 and not kwargs:
            self._update(args[0], args[1], update_flags(flags))
            return
        if flags:
            raise TypeError("flags= only goes with update(key, value, flags=...)")
        super().update(*args, **kwargs)


class Map(MapCore, FlaggedUpdate, FdHandle):
    """A live BPF map: owns one fd on one System.

    ``Map(spec, system=None, key=None, value=None)`` creates the map (``system`` defaults to
    ``pybpf.system()``, made once); ``Map.create(spec)`` does the same and returns the typed
    class for the spec's map type. ``key``/``value`` override the spec's codecs.
    """

    map_type: int | None = None  # set by the typed subclasses

    def __init__(self, spec: MapSpec, system: System | None = None, *, key: CodecSpec = None,
                 value: CodecSpec = None, btf: tuple[int, int, int] = (0, 0, 0)) -> None:
        if not isinstance(spec, MapSpec):
            raise TypeError(f"Map() takes a MapSpec, got {type(spec).__name__}: "
                            "e.g. Map(MapSpec(MapType.HASH, 4, 8, 1024))")
        if self.map_type is not None and spec.type != self.map_type:
            raise ValueError(f"{type(self).__name__} is for {MapType(self.map_type).name} "
                             f"maps, the spec says {spec.type!r}: use Map.create(spec)")
        system = resolve_system(system)
        codecs = _codecs_for(spec, system, key, value)  # bad codecs fail before the create
        fd = _create(spec, system, btf)
        try:
            self._attach(system, fd, spec, codecs)
        except BaseException:
            _close_fd(system, fd)
            raise

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def create(cls, spec: MapSpec, system: System | None = None, *, key: CodecSpec = None,
               value: CodecSpec = None, btf: tuple[int, int, int] = (0, 0, 0)) -> Map:
        """Create the map; the result is the typed class of its type (HashMap, ...). ``btf``:
        (btf_fd, key type id, value type id) of a BTF loaded with ``System.btf_load``."""
        klass = cls if cls is not Map else _CLASS_FOR_TYPE.get(spec.type, Map)
        obj = klass.__new__(klass)
        Map.__init__(obj, spec, system, key=key, value=value, btf=btf)
        return obj

    @classmethod
    def from_fd(cls, fd: int, system: System | None = None, *, key: CodecSpec = None,
                value: CodecSpec = None) -> Map:
        """Wrap an open map fd; the Map takes ownership and closes it."""
        if not isinstance(fd, int) or isinstance(fd, bool):
            raise TypeError(f"Map.from_fd needs an open map fd (an int), got {fd!r}")
        system = resolve_system(system)
        try:
            spec = MapSpec.from_info(system.map_get_info(fd))
            klass = cls if cls is not Map else _CLASS_FOR_TYPE.get(spec.type, Map)
            obj = klass.__new__(klass)
            obj._attach(system, fd, spec, _codecs_for(spec, system, key, value))
        except BaseException:
            _close_fd(system, fd)
            raise
        return obj

    @classmethod
    def from_id(cls, map_id: int, system: System | None = None, *, key: CodecSpec = None,
                value: CodecSpec = None) -> Map:
        """Open the map with this id (BPF_MAP_GET_FD_BY_ID)."""
        system = resolve_system(system)
        return cls.from_fd(system.map_get_fd_by_id(map_id), system, key=key, value=value)

    @classmethod
    def load_pinned(cls, path: str, system: System | None = None, *, key: CodecSpec = None,
                    value: CodecSpec = None) -> Map:
        """Open the map pinned at ``path`` (BPF_OBJ_GET)."""
        system = resolve_system(system)
        return cls.from_fd(system.obj_get(path), system, key=key, value=value)

    def _attach(self, system: System, fd: int, spec: MapSpec,
                codecs: tuple[Codec, Codec]) -> None:
        self.system = system
        self.fd = fd
        self.spec = spec
        self.type = spec.type
        self.key_size = spec.key_size
        self.value_size = spec.value_size
        self.max_entries = spec.max_entries
        self.name = spec.name
        self.key_codec, self.value_codec = codecs
        self._vsize = syscall_value_size(spec.type, spec.value_size, system.num_possible_cpus)
        # Every index iterates, but an empty slot has no value (skipped, as bpftool does).
        self._sparse = map_traits(spec.type).sparse
        self._finalizer = weakref.finalize(self, _close_fd, system, fd)
        self._setup_core()

    def _setup_core(self) -> None:
        kc, vc, fd = self.key_codec, self.value_codec, self.fd
        if fd < 0:  # closed: every op goes to the System, which answers EBADF
            ops = System.fast_ops(self.system, fd)
        else:
            ops = self.system.fast_ops(fd)
        self._ops: FastOps = ops
        if ops.bpf_fd is not None and ACCEL is not None:
            mode = MODE_KERNEL
        else:
            mode = MODE_TABLE if ops.table is not None else MODE_SLOW
        self._core_mode = mode
        # m[k] = v and del m[k] call the capability directly (the C core: no Python frame)
        self._core_setup(mode, fd, kc.size, self._vsize, kc.kind, vc.kind, kc.encode,
                         vc.encode, vc.decode, ops.table, ops.lookup, ops.update, ops.delete)

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the fd (idempotent). The map itself lives on while pinned or referenced."""
        if self._finalizer.detach():
            _close_fd(self.system, self.fd)
        self.fd = -1
        self._setup_core()

    def __eq__(self, other: object) -> bool:  # a handle compares by identity, not content
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def describe(self) -> str:
        """The map as errors name it, the same text as the backends' (errors.map_description)."""
        try:
            return map_description(self.type, self.name, self.id)
        except OSError:  # closed: no id to give
            kind = self.type.name.lower() if isinstance(self.type, MapType) else str(self.type)
            return f"{kind} map" + (f" {self.name!r}" if self.name else "") + " (closed)"

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.describe()} key {self.key_size}B "
                f"value {self.value_size}B max_entries {self.max_entries}>")

    def _error(self, err: int, command: str, count: int | None = None) -> BPFError:
        """The System's error for ``err`` from ``command`` made through the capability (the
        C accelerator calls this)."""
        return self._ops.error(err, command, count)

    # -- byte-level ops (the slow path of the core, and the non-hot commands) ---------------
    def _update_bytes(self, key: bytes | None, value: bytes, flags: int) -> None:
        self.system.map_update_elem(self.fd, key, value, flags)

    def _delete_bytes(self, key: bytes | None) -> None:
        self.system.map_delete_elem(self.fd, key)

    # -- element ops -------------------------------------------------------------------------
    def lookup(self, key: Any = None, flags: UpdateFlags | int | str = 0) -> Any:
        """BPF_MAP_LOOKUP_ELEM (``flags``: BPF_F_LOCK); KeyNotFoundError when absent."""
        if not flags:
            return self[key]
        data = self.system.map_lookup_elem(self.fd, self.key_codec.encode(key),
                                           update_flags(flags))
        return self.value_codec.decode(data)

    def delete(self, key: Any = None) -> None:
        """BPF_MAP_DELETE_ELEM."""
        del self[key]

    def lookup_and_delete(self, key: Any = None, flags: UpdateFlags | int | str = 0) -> Any:
        """BPF_MAP_LOOKUP_AND_DELETE_ELEM: the value, removed (queue/stack: pop)."""
        data = self.system.map_lookup_and_delete_elem(self.fd, self.key_codec.encode(key),
                                                      update_flags(flags))
        return self.value_codec.decode(data)

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyNotFoundError:
            return default

    def get_next_key(self, key: Any = None) -> Any:
        """BPF_MAP_GET_NEXT_KEY: the key after ``key`` (None: the first)."""
        raw = None if key is None else self.key_codec.encode(key)
        return self.key_codec.decode(self.system.map_get_next_key(self.fd, raw))

    def freeze(self) -> None:
        """BPF_MAP_FREEZE: syscalls may no longer write the map."""
        self.system.map_freeze(self.fd)

    def info(self) -> MapInfo:
        """BPF_OBJ_GET_INFO_BY_FD."""
        return self.system.map_get_info(self.fd)

    @property
    def id(self) -> int:
        return self.info().id

    def pin(self, path: str) -> None:
        """BPF_OBJ_PIN at ``path`` (bpffs, e.g. /sys/fs/bpf/name)."""
        self.system.obj_pin(self.fd, path)

    # -- iteration ---------------------------------------------------------------------------
    def _raw_keys(self) -> Iterator[bytes]:
        key = None
        get_next = self.system.map_get_next_key
        fd = self.fd
        while True:
            try:
                key = get_next(fd, key)
            except KeyNotFoundError:
                return
            yield key

    def _raw_items(self) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) bytes, skipping keys that vanish (or fd-array slots that are empty)."""
        lookup = self.system.map_lookup_elem
        fd = self.fd
        for key in self._raw_keys():
            try:
                yield key, lookup(fd, key)
            except KeyNotFoundError:
                continue

    def __iter__(self) -> Iterator[Any]:
        decode = self.key_codec.decode
        if self._sparse:
            return (decode(k) for k, _ in self._raw_items())
        return map(decode, self._raw_keys())

    def __len__(self) -> int:
        """Elements, counted by iteration (the kernel keeps no count for user space)."""
        return sum(1 for _ in (self._raw_items() if self._sparse else self._raw_keys()))

    def items(self) -> _ItemsView:
        return _ItemsView(self)

    def values(self) -> _ValuesView:
        return _ValuesView(self)

    def clear(self) -> None:
        """Delete every key (collected first, so the walk does not restart on each delete)."""
        for raw in list(self._raw_keys()):
            try:
                self._delete_bytes(raw)
            except KeyNotFoundError:
                pass

    # -- batches -----------------------------------------------------------------------------
    def batch_cursor(self, *, delete: bool = False, chunk: int = 256,
                     arrays: bool = False) -> BatchCursor:
        return BatchCursor(self, delete=delete, chunk=chunk, arrays=arrays)

    def batch_lookup(self, chunk: int = 256, *, arrays: bool = False
                     ) -> Iterator[tuple[Sequence, Sequence]]:
        """``for keys, values in m.batch_lookup(chunk=N)``: the map by BPF_MAP_LOOKUP_BATCH.
        Keys and values are lists; ``arrays=True`` gives int codecs' results as
        ``array.array`` (no int objects made until read)."""
        return iter(BatchCursor(self, chunk=chunk, arrays=arrays))

    def batch_lookup_and_delete(self, chunk: int = 256, *, arrays: bool = False
                                ) -> Iterator[tuple[Sequence, Sequence]]:
        """Like batch_lookup, deleting what it returns (LOOKUP_AND_DELETE_BATCH)."""
        return iter(BatchCursor(self, delete=True, chunk=chunk, arrays=arrays))

    def batch_update(self, keys: Iterable[Any], values: Iterable[Any],
                     flags: UpdateFlags | int | str = 0) -> int:
        """BPF_MAP_UPDATE_BATCH; returns the count. On error the exception's ``count`` says
        how many were updated before it."""
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            raise ValueError(f"batch_update needs as many values as keys: {len(keys)} keys, "
                             f"{len(values)} values")
        kbuf = self.key_codec.encode_many(keys)
        vbuf = self.value_codec.encode_many(values)
        return self._write_batch("map_update_batch", kbuf, vbuf, len(keys),
                                 update_flags(flags))

    def batch_delete(self, keys: Iterable[Any], flags: UpdateFlags | int | str = 0) -> int:
        """BPF_MAP_DELETE_BATCH; returns the count (``count`` on the exception on error)."""
        keys = list(keys)
        kbuf = self.key_codec.encode_many(keys)
        return self._write_batch("map_delete_batch", kbuf, None, len(keys),
                                 update_flags(flags))

    def _write_batch(self, command: str, kbuf: bytes, vbuf: bytes | None, count: int,
                     elem_flags: int) -> int:
        ops = self._ops
        if vbuf is None and ops.delete_batch is not None:
            err, done = ops.delete_batch(self.key_size, kbuf, count, elem_flags, 0)
        elif vbuf is not None and ops.update_batch is not None:
            err, done = ops.update_batch(self.key_size, self._vsize, kbuf, vbuf, count,
                                         elem_flags, 0)
        else:
            ks, vs = self.key_size, self._vsize
            keys = [kbuf[i * ks:(i + 1) * ks] for i in range(count)]
            if vbuf is None:
                return self.system.map_delete_batch(self.fd, keys, elem_flags)
            values = [vbuf[i * vs:(i + 1) * vs] for i in range(count)]
            return self.system.map_update_batch(self.fd, keys, values, elem_flags)
        if err:
            raise self._error(err, command, count=done)
        return done


class _ItemsView(collections.abc.ItemsView):
    def __iter__(self):
        m = self._mapping
        kdec, vdec = m.key_codec.decode, m.value_codec.decode
        for key, value in m._raw_items():
            yield kdec(key), vdec(value)


class _ValuesView(collections.abc.ValuesView):
    def __iter__(self):
        vdec = self._mapping.value_codec.decode
        for _, value in self._mapping._raw_items():
            yield vdec(value)


def _codecs_for(spec: MapSpec, system: System, key: CodecSpec,
                value: CodecSpec) -> tuple[Codec, Codec]:
    """The key and value codecs of a map of ``spec`` on ``system`` (``key``/``value``
    override the spec's; defaults: int keys for index maps, LpmKey for LPM tries, raw bytes
    otherwise; fd maps take Maps and give ids, socket maps sockets and give cookies; per-CPU
    values are PerCpuValues)."""
    key = key if key is not None else spec.key
    value = value if value is not None else spec.value
    traits = map_traits(spec.type)
    if key is None and traits.indexed:
        key = int
    if key is None and spec.type == MapType.LPM_TRIE and spec.key_size > 4:
        key = LpmKey(spec.key_size - 4)
    key_codec = make_codec(key, spec.key_size, "key")
    ncpus = system.num_possible_cpus
    if traits.fd_values and value is None:
        value_codec: Codec = MapFdCodec()
    elif traits.sockets and value is None and spec.value_size in (4, 8):
        value_codec = SocketCodec(spec.value_size)
    elif traits.percpu:
        value_codec = PerCpuCodec(make_codec(value, spec.value_size, "value"), ncpus)
    else:
        value_codec = make_codec(value, syscall_value_size(spec.type, spec.value_size, ncpus),
                                 "value")
    return key_codec, value_codec


def _create(spec: MapSpec, system: System, btf: tuple[int, int, int] = (0, 0, 0)) -> int:
    node = spec.numa_node
    if node == "auto":
        node = system.topology.cpu_node[system.current_cpu()]
    inner = spec.inner_map
    template: Map | None = None
    if isinstance(inner, MapSpec):
        template = Map.create(inner, system)
        inner_fd = template.fd
    elif isinstance(inner, Map):
        inner_fd = inner.fd
    else:
        inner_fd = 0
    try:
        return system.map_create(int(spec.type), spec.key_size, spec.value_size,
                                 spec.max_entries, map_flags=spec.map_flags,
                                 inner_map_fd=inner_fd, numa_node=node or 0,
                                 map_name=spec.name.encode(), map_extra=spec.map_extra,
                                 btf_fd=btf[0], btf_key_type_id=btf[1], btf_value_type_id=btf[2])
    finally:
        if template is not None:
            template.close()


# -- typed convenience classes ----------------------------------------------------------------

def _field_size(size: int | None, codec: CodecSpec, what: str, cls: str) -> int:
    if size is not None:
        return size
    if isinstance(codec, Codec):
        return codec.size
    if isinstance(codec, str):
        return _codecs.StructCodec(codec, what).size
    if isinstance(codec, type) and codec not in (int, bytes):
        import ctypes

        return ctypes.sizeof(codec)
    raise TypeError(f"{cls}: give {what}_size= (or a {what} codec with a size, like '<I' or "
                    f"ctypes.c_uint32)")


class _TypedMap(Map):
    """A Map of one type, built from keyword arguments instead of a MapSpec."""

    fixed_key_size: int | None = None
    extra_flags: int = 0

    def __init__(self, max_entries: int, key: CodecSpec = None, value: CodecSpec = None, *,
                 key_size: int | None = None, value_size: int | None = None, flags: int = 0,
                 name: str = "", numa_node: int | str | None = None, map_extra: int = 0,
                 inner_map: MapSpec | Map | None = None, system: System | None = None) -> None:
        cls = type(self).__name__
        if self.fixed_key_size is not None:
            key_size = self.fixed_key_size if key_size is None else key_size
        ks = _field_size(key_size, key, "key", cls)
        vs = _field_size(value_size, value, "value", cls)
        if not isinstance(flags, int) or isinstance(flags, bool):
            raise TypeError(f"{cls}: flags must be an int (pybpf.uapi.MapFlags), got {flags!r}")
        spec = MapSpec(self.map_type, ks, vs, max_entries, flags=flags | self.extra_flags,
                       numa_node=numa_node, inner_map=inner_map, name=name,
                       map_extra=map_extra, key=key, value=value)
        super().__init__(spec, system)


class HashMap(_TypedMap):
    map_type = MapType.HASH


class LruHashMap(_TypedMap):
    map_type = MapType.LRU_HASH


class PercpuHashMap(_TypedMap):
    map_type = MapType.PERCPU_HASH


class LruPercpuHashMap(_TypedMap):
    map_type = MapType.LRU_PERCPU_HASH


class ArrayMap(_TypedMap):
    """Indices 0..max_entries-1, all present from the start; ``del`` is EINVAL."""

    map_type = MapType.ARRAY
    fixed_key_size = 4


class PercpuArrayMap(_TypedMap):
    map_type = MapType.PERCPU_ARRAY
    fixed_key_size = 4


class _MapOfMaps(_TypedMap):
    """Values are Maps on update (their fd) and ids on lookup; ``get_inner`` opens one."""

    def __init__(self, max_entries: int, inner_map: MapSpec | Map, key: CodecSpec = None, *,
                 key_size: int | None = None, flags: int = 0, name: str = "",
                 numa_node: int | str | None = None, system: System | None = None) -> None:
        super().__init__(max_entries, key, None, key_size=key_size, value_size=4, flags=flags,
                         name=name, numa_node=numa_node, inner_map=inner_map, system=system)

    def get_inner(self, key: Any, *, key_codec: CodecSpec = None,
                  value_codec: CodecSpec = None) -> Map:
        """Open the inner map stored at ``key`` (a new fd, owned by the returned Map)."""
        return Map.from_id(self[key], self.system, key=key_codec, value=value_codec)


class ArrayOfMaps(_MapOfMaps):
    map_type = MapType.ARRAY_OF_MAPS
    fixed_key_size = 4


class HashOfMaps(_MapOfMaps):
    map_type = MapType.HASH_OF_MAPS


class _QueueStack(_TypedMap):
    """No keys: ``push`` (update with a None key), ``pop`` (lookup_and_delete), ``peek``."""

    fixed_key_size = 0

    def __init__(self, max_entries: int, value: CodecSpec = None, *,
                 value_size: int | None = None, flags: int = 0, name: str = "",
                 numa_node: int | str | None = None, system: System | None = None) -> None:
        super().__init__(max_entries, None, value, value_size=value_size, flags=flags,
                         name=name, numa_node=numa_node, system=system)

    def push(self, value: Any, flags: UpdateFlags | int | str = UpdateFlags.ANY) -> None:
        """Push; when full, BPF_EXIST drops the oldest element instead of failing E2BIG."""
        self._update(None, value, update_flags(flags))

    def pop(self, *args: Any) -> Any:  # type: ignore[override]
        """Remove and return the next element (queue: oldest, stack: newest)."""
        if args:
            raise TypeError(f"{type(self).__name__}.pop() takes no key")
        return self.lookup_and_delete(None)

    def peek(self) -> Any:
        return self[None]


class QueueMap(_QueueStack):
    map_type = MapType.QUEUE


class StackMap(_QueueStack):
    map_type = MapType.STACK


class LpmTrieMap(_TypedMap):
    """Longest-prefix match: ``m[(32, ip_bytes)]`` finds the most specific prefix. Keys are
    ``(prefixlen, data)`` (or ``ipaddress`` networks); BPF_F_NO_PREALLOC is set for you."""

    map_type = MapType.LPM_TRIE
    extra_flags = BPF_F_NO_PREALLOC

    def __init__(self, max_entries: int, data_size: int, value: CodecSpec = None, *,
                 value_size: int | None = None, flags: int = 0, name: str = "",
                 numa_node: int | str | None = None, system: System | None = None) -> None:
        super().__init__(max_entries, LpmKey(data_size), value, value_size=value_size,
                         flags=flags, name=name, numa_node=numa_node, system=system)


class BloomFilterMap(_TypedMap):
    """``add(v)`` pushes a value; ``v in m`` asks "maybe present?" (False means absent)."""

    map_type = MapType.BLOOM_FILTER
    fixed_key_size = 0

    def __init__(self, max_entries: int, value: CodecSpec = None, *,
                 value_size: int | None = None, nr_hashes: int = 0, flags: int = 0,
                 name: str = "", numa_node: int | str | None = None,
                 system: System | None = None) -> None:
        if not isinstance(nr_hashes, int) or isinstance(nr_hashes, bool) \
                or not 0 <= nr_hashes <= 15:
            raise ValueError(f"nr_hashes must be an int 0..15 (0 means the kernel's 5), got "
                             f"{nr_hashes!r}")
        super().__init__(max_entries, None, value, value_size=value_size, flags=flags,
                         name=name, numa_node=numa_node, map_extra=nr_hashes, system=system)

    def add(self, value: Any) -> None:
        self._update_bytes(None, self.value_codec.encode(value), 0)

    def __contains__(self, value: Any) -> bool:
        try:
            self.system.map_lookup_elem(self.fd, None, value=self.value_codec.encode(value))
        except KeyNotFoundError:
            return False
        return True


class RingBuf(_TypedMap):
    """BPF_MAP_TYPE_RINGBUF: ``size`` bytes (a power of two, whole pages) of records that
    programs write (bpf_ringbuf_output, bpf_ringbuf_reserve + submit); it has no elements
    (lookups: ENOTSUPP). ``poll(timeout)``, ``read()`` and ``records()`` read the committed
    records, oldest first, through ``reader``: the System's reader of this map
    (``System.ringbuf_reader``), made on first use and closed with the map."""

    map_type = MapType.RINGBUF
    fixed_key_size = 0
    _reader: RingBufReader | None = None

    def __init__(self, size: int, *, flags: int = 0, name: str = "",
                 numa_node: int | str | None = None, system: System | None = None) -> None:
        super().__init__(size, None, None, value_size=0, flags=flags, name=name,
                         numa_node=numa_node, system=system)

    @property
    def reader(self) -> RingBufReader:
        if self._reader is None:
            self._reader = self.system.ringbuf_reader(self.fd)
        return self._reader

    def poll(self, timeout: float | None = None, limit: int | None = None) -> list[bytes]:
        """The records there now, or those committed within ``timeout`` seconds (None: wait
        for some); [] when none came."""
        return self.reader.poll(timeout, limit)

    def read(self, limit: int | None = None) -> list[bytes]:
        """The records there now (at most ``limit``), without waiting."""
        return self.reader.read(limit)

    def records(self) -> Iterator[bytes]:
        """The records there now, each consumed as it is yielded."""
        return iter(self.reader)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        super().close()


class PerfEventArray(_TypedMap):
    """BPF_MAP_TYPE_PERF_EVENT_ARRAY: a perf event fd per CPU, where programs send records
    with bpf_perf_event_output (``max_entries`` None: one slot per possible CPU).
    ``poll(timeout)`` and ``read()`` give them as ``PerfSample(cpu, data)`` through
    ``reader``, the System's perf buffer (``System.perf_buffer_reader``: it fills the slots
    with its own events), made on first use with ``pages`` pages a CPU and closed with the
    map."""

    map_type = MapType.PERF_EVENT_ARRAY
    fixed_key_size = 4
    _reader: PerfBufferReader | None = None
    pages = 8

    def __init__(self, max_entries: int | None = None, *, flags: int = 0, name: str = "",
                 numa_node: int | str | None = None, system: System | None = None) -> None:
        system = resolve_system(system)
        super().__init__(system.num_possible_cpus if max_entries is None else max_entries,
                         int, int, value_size=4, flags=flags, name=name,
                         numa_node=numa_node, system=system)

    @property
    def reader(self) -> PerfBufferReader:
        if self._reader is None:
            self._reader = self.system.perf_buffer_reader(self.fd, self.pages)
        return self._reader

    def poll(self, timeout: float | None = None) -> list[PerfSample]:
        """The records there now, or those sent within ``timeout`` seconds (None: wait for
        some); [] when none came."""
        return self.reader.poll(timeout)

    def read(self) -> list[PerfSample]:
        """The records there now, CPU by CPU, without waiting."""
        return self.reader.read()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        super().close()


class UserRingBuf(_TypedMap):
    """BPF_MAP_TYPE_USER_RINGBUF: ``size`` bytes (a power of two, whole pages) of samples that
    user space writes and programs drain (bpf_user_ringbuf_drain); it has no elements
    (lookups: ENOTSUPP). ``reserve``, ``reserve_blocking``, ``submit`` and ``discard`` are
    libbpf's user_ring_buffer calls, through ``producer``: the System's producer of this map
    (``System.user_ringbuf_producer``), made on first use and closed with the map."""

    map_type = MapType.USER_RINGBUF
    fixed_key_size = 0
    _producer: UserRingBufProducer | None = None

    def __init__(self, size: int, *, flags: int = 0, name: str = "",
                 numa_node: int | str | None = None, system: System | None = None) -> None:
        super().__init__(size, None, None, value_size=0, flags=flags, name=name,
                         numa_node=numa_node, system=system)

    @property
    def producer(self) -> UserRingBufProducer:
        if self._producer is None:
            self._producer = self.system.user_ringbuf_producer(self.fd)
        return self._producer

    def reserve(self, size: int) -> memoryview:
        """A writable sample of ``size`` bytes (E2BIG: too big for the ring; ENOSPC: no room)."""
        return self.producer.reserve(size)

    def reserve_blocking(self, size: int, timeout: float | None = None) -> memoryview:
        """``reserve``, waiting up to ``timeout`` seconds for room (ETIMEDOUT)."""
        return self.producer.reserve_blocking(size, timeout)

    def submit(self, sample: memoryview) -> None:
        self.producer.submit(sample)

    def discard(self, sample: memoryview) -> None:
        self.producer.discard(sample)

    def write(self, data: bytes) -> None:
        """One sample holding ``data``: reserve, copy, submit."""
        sample = self.producer.reserve(len(data))
        sample[:] = data
        self.producer.submit(sample)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None
        super().close()


def register_typed_class(cls: type[Map]) -> type[Map]:
    """Make ``cls`` the class ``Map.create`` / ``from_fd`` give for its ``map_type`` (typed
    classes defined outside this module: sock_maps.py)."""
    _CLASS_FOR_TYPE[cls.map_type] = cls
    return cls


_CLASS_FOR_TYPE: dict[int, type[Map]] = {
    cls.map_type: cls for cls in (HashMap, LruHashMap, PercpuHashMap, LruPercpuHashMap,
                                  ArrayMap, PercpuArrayMap, ArrayOfMaps, HashOfMaps, QueueMap,
                                  StackMap, LpmTrieMap, BloomFilterMap, RingBuf,
                                  UserRingBuf, PerfEventArray)
}


class BatchCursor:
    """A walk over a map with BPF_MAP_LOOKUP_BATCH (``delete=True``: LOOKUP_AND_DELETE_BATCH).

    It keeps the in/out token between calls (``max(key_size, 4)`` bytes: a bucket index for
    hash maps, a key for the others), treats ENOENT as the end (with the elements that came
    with it), and on ENOSPC (a hash bucket larger than the chunk) doubles the chunk and
    retries. ``next()`` gives one chunk; iterating gives chunks until the end. Keys and
    values come as lists, or with ``arrays=True`` as ``Codec.decode_array`` gives them
    (``array.array`` for int codecs).
    """

    def __init__(self, m: Map, *, delete: bool = False, chunk: int = 256,
                 arrays: bool = False) -> None:
        if not isinstance(chunk, int) or isinstance(chunk, bool):
            raise TypeError(f"chunk must be an int (elements per batch call), got {chunk!r}")
        if chunk <= 0:
            raise ValueError(f"chunk must be positive, got {chunk}")
        self.map = m
        self.delete = delete
        self.arrays = arrays
        self.chunk = chunk
        self.token: bytes | None = None
        self.done = False
        self._command = "map_lookup_and_delete_batch" if delete else "map_lookup_batch"
        self._bufs: tuple[bytearray, bytearray] | None = None

    def __iter__(self) -> Iterator[tuple[Sequence, Sequence]]:
        while not self.done:
            keys, values = self.next()
            if keys:
                yield keys, values

    def next(self, chunk: int | None = None) -> tuple[Sequence, Sequence]:
        """One batch of up to ``chunk`` elements: (keys, values), decoded."""
        if chunk is not None:
            self.chunk = chunk
        if self.done:
            return [], []
        m = self.map
        while True:
            try:
                return self._batch()
            except BPFError as exc:
                if exc.errno != errno.ENOSPC or self.chunk >= max(m.max_entries, 1):
                    raise
                self.chunk = min(self.chunk * 2, max(m.max_entries, 1))

    def _batch(self) -> tuple[Sequence, Sequence]:
        m = self.map
        chunk = self.chunk
        kc, vc = m.key_codec, m.value_codec
        if self.arrays:
            kdec, vdec, kkind, vkind = kc.decode_array, vc.decode_array, 0, 0
        else:
            kdec, vdec, kkind, vkind = kc.decode_many, vc.decode_many, kc.kind, vc.kind
        lookup_batch = m._ops.lookup_batch
        if lookup_batch is not None:
            chunk = min(chunk, max(m.max_entries, 1))  # what one call can return at most
            bufs = self._bufs
            if bufs is None or len(bufs[0]) < chunk * m.key_size or \
                    len(bufs[1]) < chunk * m._vsize:
                bufs = self._bufs = (bytearray(chunk * m.key_size), bytearray(chunk * m._vsize))
            # The accelerator decodes int keys and values into lists itself (None: decode
            # here).
            err, count, token, keys, values = lookup_batch(
                self.delete, self.token, m.key_size, m._vsize, bufs[0], bufs[1], chunk, 0, 0,
                kkind, vkind)
            if err and err != errno.ENOENT:
                raise m._error(err, self._command, count=count)
            self.done = err == errno.ENOENT
            if token is not None:
                self.token = token
            return (kdec(bufs[0], count) if keys is None else keys,
                    vdec(bufs[1], count) if values is None else values)
        batch = (m.system.map_lookup_and_delete_batch if self.delete
                 else m.system.map_lookup_batch)
        result = batch(m.fd, self.token, chunk)
        self.done = result.end
        if result.out_batch is not None:
            self.token = result.out_batch
        count = len(result.keys)
        return kdec(b"".join(result.keys), count), vdec(b"".join(result.values), count)
