"""BPF array, hash, LRU hash and LPM trie maps in shared memory, shared by processes:
``pybpf.shared``.

A ``Segment`` is one block of shared memory holding maps, anonymous (shared with forked
children) or a named POSIX shared-memory object that other processes attach to by name. Its
table of map names plays the part of bpffs pins: ``create_map(name, ...)`` makes a map there,
``open_map(name)`` opens it from any attached process. A ``SharedMap`` is shaped like
``pybpf.maps.Map`` (``m[k]``, ``m[k] = v``, ``del m[k]``, ``get``, iteration, ``items``,
``update(k, v, flags=...)``, ``lookup_and_delete``, ``get_next_key``) and answers as the kernel
does, errno for errno (the same exceptions as ``Map``: ``KeyNotFoundError``, ``MapFullError``,
...).

Rules this module keeps:
- The maps themselves are the C extension ``pybpf._shm_maps`` (src/pybpf/_shm_maps.c: the
  layout, the locks, the semantics). Without it (no C compiler when pybpf was installed) this
  module still imports, and using it raises ``SharedMapsUnavailable`` naming what to install;
  the rest of pybpf does not depend on it.
- Clean-up: a named segment records the pids attached to it (forked children included).
  ``Segment.create`` on a name whose recorded processes are all dead (or all closed it)
  reclaims it: a crashed run leaves nothing that blocks the next; a name with a live process
  gives EEXIST saying which pids. ``close()`` detaches, ``unlink()`` removes the name (the
  memory goes when the last process unmaps it).
- Sizes are the caller's: a segment that cannot hold a new map gives ENOMEM saying which size
  to ask for; a full hash map gives E2BIG (``MapFullError``) as the kernel's does; a
  BPF_F_NO_PREALLOC hash takes its elements from the segment as it grows, so it can also meet
  a full segment on update (ENOMEM).
- Map memory is never given back to the segment: a map lives as long as its segment.
- An LRU hash (``lru_hash``) is the kernel's LRU: an insert into a full map evicts. Lookups
  here are the syscall's, which leave the reference bits alone (only a BPF program's lookup
  marks a key used; an update of an existing key does too). Its lists are one set per
  possible CPU, as the kernel's: an insert takes a node from those of the CPU its process
  runs on, so a process pinned to a CPU evicts what the kernel's LRU evicts there.
- An LPM trie (``lpm_trie``, BPF_F_NO_PREALLOC as the kernel demands) is the kernel's trie:
  a lookup is a longest-prefix match, updates and deletes hold the trie's lock, lookups and
  get_next_key take none and walk again when a writer changed the trie meanwhile.
- Atomicity per element, as the kernel's, and one guarantee more: an update or delete holds
  its hash bucket's (or array element's) spin lock, in the segment, so two processes never
  lose or duplicate an element; a lookup takes no lock and reads again if a writer changed
  the element meanwhile (a sequence count), so it never returns a torn value. The kernel's
  array takes no lock for a plain update, and a syscall lookup racing a program's write can
  read half of each value there; through this API no reader can.
"""

from __future__ import annotations

import errno
import functools
import mmap
import os
import random
import struct
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .codecs import Codec, CodecSpec, make_codec
from .errors import BPFError, KeyNotFoundError, bpf_error
from .mapcore import MODE_SLOW, MapCore
from .maps import FlaggedUpdate, UpdateFlags, _ItemsView, _ValuesView, update_flags
from .topology import host_topology
from .uapi import MapFlags, MapType, member_named, round_up

__all__ = ["Segment", "SegmentUsage", "SharedMap", "SharedMapsUnavailable", "Waits",
           "available", "unlink", "waits"]

INSTALL_HINT = ("pybpf.shared needs the C extension pybpf._shm_maps, which was not built: "
                "install a C compiler and the Python headers (apt-get install gcc python3-dev) "
                "and install pybpf again (./scripts/setup.sh, or pip install -e .)")
# the segment's map types that need an emulated machine's CPUs (a value for each)
EMULATED_ONLY = (MapType.PERCPU_HASH, MapType.PERCPU_ARRAY, MapType.LRU_PERCPU_HASH)


class SharedMapsUnavailable(RuntimeError):
    """pybpf._shm_maps was not built (no C compiler when pybpf was installed)."""


def _load() -> tuple[ModuleType | None, str]:
    try:
        from . import _shm_maps
    except ImportError as exc:
        return None, str(exc)
    return _shm_maps, ""


SHM, _IMPORT_ERROR = _load()


def available() -> bool:
    """True when the C extension is built: shared maps can be made here."""
    return SHM is not None


def _require() -> ModuleType:
    if SHM is None:
        raise SharedMapsUnavailable(f"{INSTALL_HINT} (import failed: {_IMPORT_ERROR})")
    return SHM


def _segment_error(exc: OSError, what: str) -> BPFError:
    """A segment or map-table failure (not an element's: those go through bpf_error)."""
    return BPFError(exc.errno, f"{what}: {exc.strerror}", command=what.split(" ", 1)[0],
                    detail=exc.strerror or "")


@dataclass(frozen=True)
class SegmentUsage:
    """How much of a segment is used: ``size`` bytes in all, ``used`` by the header and the
    maps so far, ``free`` left for new maps (and for BPF_F_NO_PREALLOC maps as they grow)."""

    size: int
    used: int
    free: int


# Open named segments: a forked child records itself in each (os.register_at_fork), so a
# segment its parent leaves is not taken for stale while the child still uses it.
_OPEN: weakref.WeakSet[Segment] = weakref.WeakSet()


def _register_after_fork() -> None:
    for seg in list(_OPEN):
        if not seg.closed:
            seg._seg.register()


os.register_at_fork(after_in_child=_register_after_fork)


class Segment:
    """A shared memory segment of maps. Make one with ``Segment.create(name, size)`` (name
    None: anonymous, shared with forked children only) or ``Segment.attach(name)``; ``with``
    closes it."""

    def __init__(self, handle: Any) -> None:
        self._seg = handle
        self.name: str | None = handle.name
        if self.name is not None:
            _OPEN.add(self)

    @classmethod
    def create(cls, name: str | None, size: int) -> Segment:
        """A new segment of ``size`` bytes. A name in use by a live process is EEXIST; one
        whose processes are all gone is reclaimed (replaced)."""
        shm = _require()
        _check_size(size)
        try:
            return cls(shm.Segment(name, size, True))
        except OSError as exc:
            raise _segment_error(exc, f"segment create {name!r}") from None

    @classmethod
    def attach(cls, name: str) -> Segment:
        """Attach to the named segment (ENOENT when there is none)."""
        shm = _require()
        try:
            return cls(shm.Segment(name, 0, False))
        except OSError as exc:
            raise _segment_error(exc, f"segment attach {name!r}") from None

    # -- maps ------------------------------------------------------------------------------
    def create_map(self, name: str, map_type: MapType | int | str, key_size: int,
                   value_size: int, max_entries: int, flags: MapFlags | int = 0, *,
                   key: CodecSpec = None, value: CodecSpec = None) -> SharedMap:
        """A new map named ``name`` in the segment: ``map_type`` HASH, LRU_HASH, ARRAY or
        LPM_TRIE; ``flags`` BPF_F_NO_PREALLOC and BPF_F_ZERO_SEED for a hash,
        BPF_F_NO_COMMON_LRU and BPF_F_ZERO_SEED for an LRU hash (whose lists are one set per
        possible CPU: an insert takes a node from the lists of the CPU its process runs on, and
        a full map evicts the least recently used keys, as the kernel's),
        BPF_F_NO_PREALLOC for a trie; ``key``/``value`` codecs as for ``Map`` (array keys
        default to int). EEXIST when the name is taken, ENOMEM when the segment has no room
        for it."""
        kind = member_named(MapType, map_type, "map type") if isinstance(map_type, str) \
            else map_type
        if int(kind) in EMULATED_ONLY:
            raise BPFError(errno.EINVAL, f"map create {name!r}: per-CPU maps in a segment are "
                           "an emulated system's (EmulatedSystem(shared=...), whose CPUs they "
                           "have a value for); here use HASH, LRU_HASH, ARRAY or LPM_TRIE",
                           command="map_create")
        key_codec, value_codec = _codecs(int(kind), key_size, value_size, key, value)
        for field, number in (("key_size", key_size), ("value_size", value_size),
                              ("max_entries", max_entries), ("flags", flags)):
            if not isinstance(number, int) or not 0 <= number < 1 << 32:
                raise BPFError(errno.EINVAL, f"map create {name!r}: {field} must be a u32, "
                               f"got {number!r}", command="map_create")
        ncpus = 1
        if int(kind) == MapType.LRU_HASH:  # its lists: one set per possible CPU, as the
            ncpus = host_topology().num_cpus  # kernel's
            if flags & MapFlags.NO_COMMON_LRU:  # htab_map_alloc: a CPU's share each
                max_entries = round_up(max_entries, ncpus)
        try:
            handle = self._seg.create_map(name, int(kind), key_size, value_size, max_entries,
                                          int(flags), random.getrandbits(32), ncpus)
        except OSError as exc:
            raise _segment_error(exc, f"map_create {name!r} in {self.describe()}") from None
        return SharedMap(handle, self, key_codec, value_codec)

    def open_map(self, name: str, *, key: CodecSpec = None,
                 value: CodecSpec = None) -> SharedMap:
        """The map named ``name`` (ENOENT when there is none; EINVAL for a per-CPU map, an
        emulated system's)."""
        try:
            handle = self._seg.open_map(name)
        except OSError as exc:
            raise _segment_error(exc, f"map_open {name!r} in {self.describe()}") from None
        if handle.type in EMULATED_ONLY:
            raise BPFError(errno.EINVAL, f"map_open {name!r}: a per-CPU map is an emulated "
                           "system's; open HASH, LRU_HASH, ARRAY and LPM_TRIE maps here",
                           command="map_open")
        key_codec, value_codec = _codecs(handle.type, handle.key_size, handle.value_size, key,
                                         value)
        return SharedMap(handle, self, key_codec, value_codec)

    def map_names(self) -> list[str]:
        """The names of the segment's maps, in creation order."""
        return self._call(self._seg.map_names)

    # -- the segment ------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """The live processes attached to the segment."""
        return self._call(self._seg.pids)

    def usage(self) -> SegmentUsage:
        size, _heap_start, used = self._call(self._seg.usage)
        return SegmentUsage(size, min(used, size), max(size - used, 0))

    @property
    def closed(self) -> bool:
        return self._seg.closed

    @property
    def handle(self) -> Any:
        """The C segment (``pybpf._shm_maps.Segment``): what an emulated system whose maps
        live here (``EmulatedSystem(shared=...)``) makes them in."""
        return self._seg

    def close(self) -> None:
        """Detach: this process leaves the pid table and unmaps the segment (its maps then
        answer EBADF). The segment itself stays until unlinked."""
        self._seg.close()

    def unlink(self) -> None:
        """Remove the segment's name (processes that have it mapped keep using it)."""
        if self.name is None:
            raise BPFError(errno.EINVAL, "an anonymous segment has no name to unlink",
                           command="segment")
        unlink(self.name)

    def describe(self) -> str:
        return "anonymous segment" if self.name is None else f"segment {self.name!r}"

    def _call(self, method):
        try:
            return method()
        except OSError as exc:
            raise _segment_error(exc, self.describe()) from None

    def __enter__(self) -> Segment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<Segment {self.describe()} (closed)>"
        use = self.usage()
        return (f"<Segment {self.describe()} {use.used}/{use.size} bytes, "
                f"{len(self.map_names())} maps>")


def unlink(name: str) -> None:
    """Remove the named segment (ENOENT when there is none)."""
    shm = _require()
    try:
        shm.unlink(name)
    except OSError as exc:
        raise _segment_error(exc, f"segment unlink {name!r}") from None


@dataclass(frozen=True)
class Waits:
    """What this process has waited for on segments since it started (forked children start
    from their parent's counts): ``locks``, a bucket's, element's or list's lock it found
    held by another process; ``reads``, lookups (and walks) it read again because another
    process was writing what they read. Counted on the slow paths only: contention between
    processes, not the cost of an operation."""

    locks: int
    reads: int


def waits() -> Waits:
    """This process's ``Waits`` (take two and subtract to see what a stretch waited)."""
    return Waits(*_require().waits())


def lock_trace(capacity: int) -> tuple[list[tuple[int, int, int]], int, float]:
    """The holds of segment locks this thread has made since its last call, the last
    ``capacity`` of the trace then begun, oldest first, each (the lock's address, the
    CLOCK_MONOTONIC ns it was taken, the ns it was let go: 0 while held); how many older
    holds were written over; and the ns one of the trace's clock reads cost (each hold makes
    two). A new trace begun that keeps the last ``capacity`` holds (0: none, recording off).
    For pybpf.bench's simulation of contention."""
    raw, lost, read_ns = _require().lock_trace(capacity)
    return list(struct.iter_unpack("=QQQ", raw)), lost, read_ns


def handoff_ns(first_cpu: int, second_cpu: int, rounds: int = 200_000) -> float:
    """The time a cache line takes to move from host CPU ``first_cpu`` to ``second_cpu`` and
    back, halved: two forked processes pinned there pass a shared word to each other
    ``rounds`` times (_shm_maps.handoff); this process runs on ``first_cpu`` meanwhile and
    may use its CPUs again after. Refused (ValueError) for one CPU (the processes would take
    turns on it, not pass a line) or a CPU this process may not run on; TimeoutError where
    the other side passed nothing back for 10 s."""
    if first_cpu == second_cpu:
        raise ValueError("a cache line moves between two host CPUs: give two different ones")
    allowed = os.sched_getaffinity(0)
    if not {first_cpu, second_cpu} <= allowed:
        raise ValueError(f"host CPUs {first_cpu} and {second_cpu}: this process may run on "
                         f"{sorted(allowed)} only")
    word = mmap.mmap(-1, mmap.PAGESIZE)
    pid = os.fork()
    if pid == 0:  # the other side: pass the word back rounds times, exit without cleanup
        try:
            os.sched_setaffinity(0, {second_cpu})
            _require().handoff(word, rounds, 1)
        finally:
            os._exit(0)
    try:
        os.sched_setaffinity(0, {first_cpu})
        took = _require().handoff(word, rounds, 0)
    finally:
        os.sched_setaffinity(0, allowed)
        os.waitpid(pid, 0)
    return took / (2 * rounds)


def _check_size(size: int) -> None:
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"a segment size is a positive number of bytes, got {size!r}")


def _codecs(map_type: int, key_size: int, value_size: int, key: CodecSpec,
            value: CodecSpec) -> tuple[Codec, Codec]:
    if key is None and map_type == MapType.ARRAY:
        key = int
    return make_codec(key, key_size, "key"), make_codec(value, value_size, "value")


def _element_error(description: str, err: int, command: str, detail: str) -> BPFError:
    """What the C map raises for an element op: Map's exception for the same failure."""
    return bpf_error(err, command, map=description, detail=detail)


class SharedMap(MapCore, FlaggedUpdate):
    """A map in a ``Segment``, shaped like ``pybpf.maps.Map``: ``m[k]``, ``m[k] = v``,
    ``del m[k]`` and ``k in m`` run in the Map layer's core (C with the accelerator: int and
    bytes codecs natively, then the C map, no Python frame). Iteration walks get_next_key in
    the kernel's order; ``len`` counts by iteration, as for ``Map``."""

    def __init__(self, handle: Any, segment: Segment, key_codec: Codec,
                 value_codec: Codec) -> None:
        self._m = handle
        self.segment = segment
        self.name: str = handle.name
        self.type = MapType(handle.type)
        self.key_size: int = handle.key_size
        self.value_size: int = handle.value_size
        self.max_entries: int = handle.max_entries
        self.map_flags: int = handle.map_flags
        self.key_codec, self.value_codec = key_codec, value_codec
        # A partial of the description, not a bound method: no cycle through the C map.
        handle._set_errors(functools.partial(_element_error, self.describe()))
        self._core_setup(MODE_SLOW, -1, key_codec.size, value_codec.size, key_codec.kind,
                         value_codec.kind, key_codec.encode, value_codec.encode,
                         value_codec.decode, None, handle.lookup, handle.update,
                         handle.delete)

    @property
    def raw(self) -> Any:
        """The C map itself: ``lookup(key)``, ``update(key, value, flags)``, ``delete``,
        ``lookup_and_delete``, ``get_next_key`` on bytes (no codecs), raising the same
        exceptions as the map: the fastest path, for hot loops and benchmarks."""
        return self._m

    def describe(self) -> str:
        """As errors name it: its type first, as ``bpf_error`` reads it."""
        return f"{self.type.name.lower()} map {self.name!r} in {self.segment.describe()}"

    def __repr__(self) -> str:
        return (f"<SharedMap {self.describe()} key {self.key_size}B value {self.value_size}B "
                f"max_entries {self.max_entries}>")

    def _no_flags(self, flags: UpdateFlags | int | str, command: str) -> None:
        if update_flags(flags):
            raise bpf_error(errno.EINVAL, command, map=self.describe(),
                            detail=f"flags {update_flags(flags):#x}: shared maps take none "
                            "(BPF_F_LOCK needs a bpf_spin_lock in the value)")

    # -- element ops -------------------------------------------------------------------------
    def lookup(self, key: Any, flags: UpdateFlags | int | str = 0) -> Any:
        """BPF_MAP_LOOKUP_ELEM; any flag is EINVAL (BPF_F_LOCK needs a bpf_spin_lock, which
        shared maps' values do not have)."""
        self._no_flags(flags, "map_lookup_elem")
        return self[key]

    def delete(self, key: Any) -> None:
        del self[key]

    def lookup_and_delete(self, key: Any, flags: UpdateFlags | int | str = 0) -> Any:
        """BPF_MAP_LOOKUP_AND_DELETE_ELEM: the value, removed (an array: ENOTSUPP)."""
        self._no_flags(flags, "map_lookup_and_delete_elem")
        return self.value_codec.decode(self._m.lookup_and_delete(self.key_codec.encode(key)))

    def get_next_key(self, key: Any = None) -> Any:
        """The key after ``key`` in the kernel's order (None: the first); KeyNotFoundError
        at the end. A key that is not in a hash restarts from the first."""
        raw = self._m.get_next_key(None if key is None else self.key_codec.encode(key))
        return self.key_codec.decode(raw)

    # -- iteration ---------------------------------------------------------------------------
    def _raw_keys(self) -> Iterator[bytes]:
        next_key = self._m.get_next_key
        key = None
        while True:
            try:
                key = next_key(key)
            except KeyNotFoundError:
                return
            yield key

    def _raw_items(self) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) bytes, skipping keys deleted meanwhile (by another process too)."""
        lookup = self._m.lookup
        for key in self._raw_keys():
            try:
                yield key, lookup(key)
            except KeyNotFoundError:
                continue

    def __iter__(self) -> Iterator[Any]:
        return map(self.key_codec.decode, self._raw_keys())

    def items(self) -> _ItemsView:
        return _ItemsView(self)

    def values(self) -> _ValuesView:
        return _ValuesView(self)

    def __len__(self) -> int:
        """Elements, counted by iteration (as ``Map``: the kernel keeps no count for user
        space); ``count`` reads the hash's own counter."""
        return sum(1 for _ in self._raw_keys())

    @property
    def count(self) -> int:
        """A hash's live elements from its counter (an array: max_entries)."""
        return self._m.count

    def clear(self) -> None:
        """Delete every key (collected first, so the walk does not restart on each delete;
        an array: EINVAL, its elements always exist)."""
        delete = self._m.delete
        for raw in list(self._raw_keys()):
            try:
                delete(raw)
            except KeyNotFoundError:
                pass
