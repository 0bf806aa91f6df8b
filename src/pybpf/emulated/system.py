"""EmulatedSystem: the System contract translated to the map subsystem in user space.

Rules this module keeps:
- It only translates (``pybpf.system.System`` normalised the arguments and turns each
  ``KernelError`` raised here into the public error), and it checks what the kernel checks,
  in syscall.c's order, so the same errno wins: flags the command tests before the fd, then
  the fd (not open -> EBADF, not a map -> EINVAL), then permissions (RDONLY / WRONLY fds, a
  frozen map -> EPERM), then the key and value as ``__bpf_copy_key`` copies them (a key on
  a keyless map -> EINVAL; one of the wrong length -> EINVAL, the System's rule), then the
  map type's op.
- Objects live in one fd table; maps are refcounted (fds, pins, programs, outer maps hold
  references) and released when the last goes; maps and programs have separate id spaces.
- Pins live in this system's own bpffs (``inode.BpfFs``), with the VFS's path rules.

``map_stats(fd)`` is the public window onto the machine model: NUMA accesses and the
allocator counters of one map.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import os
import posixpath
import threading
import weakref
from typing import Any

from .. import hostinfo
from ..attrs import MapAttr, length_problem, value_problem
from ..errors import KernelError
from ..system import BatchLookup, FastOps, MapInfo, System
from ..topology import Topology
from ..uapi import (
    BPF_ANY,
    BPF_F_LOCK,
    BPF_F_RDONLY,
    BPF_F_WRONLY,
    ENOTSUPP,
    NUMA_NO_NODE,
    MapFlags,
    MapType,
    map_traits,
)
from .bpf_types import MAP_OPS
from .inode import BpfFs
from .links import LinksMixin
from .machine.machine import Machine
from .machine.memalloc import HTAB_MEM_DESIGNS
from .machine.perf_event import EmulatedPerfBufferReader, PerfEvent
from .maps.bpf_map import BpfMap, bpf_map_attr_numa_node
from .maps.bpf_spin_lock import check_and_init_map_value, read_map_value
from .maps.ringbuf import RingBufConsumer, UserRingBufWriter
from .maps.shared import (
    SHARED_OPS,
    SharedSegmentMap,
    open_pinned,
    pin_in_segment,
    segment_pin,
    unpin_in_segment,
)
from .net.netdev import net_of
from .prog.btf import BtfMixin, map_check_btf
from .progs import ProgramsMixin
from .sockmap_progs import SockMapMixin
from .syscall import bpf_get_file_flag, bpf_obj_file_flags, bpf_obj_name_cpy


class MapFile:
    """An open map fd: the map and what this fd may do (f_mode)."""

    __slots__ = ("map", "can_read", "can_write")

    def __init__(self, bpf_map: BpfMap, file_flags: int) -> None:
        self.map = bpf_map
        self.can_read = not file_flags & BPF_F_WRONLY
        self.can_write = not file_flags & BPF_F_RDONLY


def bpf_copy_key(bpf_map: BpfMap, key: bytes | None) -> bytes | None:
    """__bpf_copy_key: key_size bytes (None is a NULL pointer: EFAULT); a map without keys
    takes none (EINVAL, whatever is given, b"" included)."""
    size = bpf_map.key_size
    if not size:
        if key is not None:
            raise KernelError(errno.EINVAL, "this map has no key (key_size 0): pass None")
        return None
    if key is None:
        raise KernelError(errno.EFAULT, f"a key of {size} bytes is needed, got None")
    if len(key) != size:
        raise KernelError(errno.EINVAL, length_problem("key", len(key), size,
                                                       "the map's key_size is"))
    return key


def bpf_copy_value(bpf_map: BpfMap, value: bytes) -> bytes:
    """The value as the kernel copies it: bpf_map_value_size bytes (none, whatever is given,
    when that is 0: a ring buffer's)."""
    if not bpf_map.sys_value_size:
        return b""
    if len(value) != bpf_map.sys_value_size:
        raise KernelError(errno.EINVAL, value_problem(
            bpf_map.map_type, bpf_map.value_size, bpf_map.machine.num_cpus, "value",
            len(value)))
    return value


def bpf_map_flags_retain_permanent(flags: int) -> int:
    """The map_flags a map keeps: the fd's access flags (RDONLY, WRONLY) are the fd's."""
    return flags & ~(BPF_F_RDONLY | BPF_F_WRONLY)


class EmulatedSystem(LinksMixin, SockMapMixin, ProgramsMixin, BtfMixin, System):
    """The BPF map subsystem in user space, on an emulated ``Machine``.

    ``EmulatedSystem(cpus=20, nodes=2)`` declares a topology; ``machine=`` shares one.
    ``profile`` (a shipped profile's name, a file or a ``Profile``; default ``host``) gives the
    costs of the modeled time, and its topology when cpus/nodes are not given; ``cache_scale``
    shrinks the modeled caches for a scaled-down experiment; ``seed`` seeds the machine's
    randomness (hash seeds, bpf_get_prandom_u32).
    ``htab_mem`` picks how NO_PREALLOC hash maps get element memory: ``"bpf_mem_alloc"``
    (per-CPU caches, freed objects reused at once; the kernel since 6.1), ``"call_rcu"``
    (kmalloc per element, one call_rcu per freed element, no reuse; before) or
    ``"bpf_mem_alloc_call_rcu"`` (per-CPU caches, but each freed element through call_rcu
    first: the 2022 series between its bpf_mem_alloc patch and 0fd7c5d43339).
    ``modeled_time`` False switches the timing model off (work costs nothing, RCU polls; see
    ``Machine``); the default is on unless ``PYBPF_NO_MODELED_TIME`` is set.
    ``cpumap_skb_alloc`` picks where cpumap's kthreads get skb heads:
    ``"napi_skb_cache_get_bulk"`` (the CPU's NAPI cache, refilled in bulk; since 6.15) or
    ``"kmem_cache_alloc_bulk"`` (straight from the slab; before). ``cpumap_rx`` picks how
    they pass skbs up: ``"gro_receive_skb"`` (the entry's GRO node; since 6.15) or
    ``"netif_receive_skb_list"`` (one list per pass, no GRO node; before).
    ``shared`` (a ``pybpf.shared.Segment``) puts the system's hash, LRU hash, LPM trie and
    array maps (per-CPU ones too) and their pins in that segment, so processes forked after
    they were made share them, and systems of other processes on the segment get its pins
    (emulated/maps/shared.py); such a system runs without modeled time, which the segment's
    maps do not charge.
    """

    name = "emulated"

    def __init__(self, cpus: int | None = None, nodes: int | None = None,
                 machine: Machine | None = None, htab_mem: str = "bpf_mem_alloc",
                 profile: Any = None, cache_scale: float = 1.0, seed: int = 0,
                 cpumap_skb_alloc: str = "napi_skb_cache_get_bulk",
                 cpumap_rx: str = "gro_receive_skb", modeled_time: bool | None = None,
                 shared: Any = None) -> None:
        if machine is not None and (cpus is not None or nodes is not None
                                    or profile is not None or modeled_time is not None):
            raise TypeError("give either machine= or cpus=/nodes=/profile=/modeled_time=, "
                            "not both")
        if htab_mem not in HTAB_MEM_DESIGNS:
            raise ValueError(f"htab_mem={htab_mem!r}: choose one of "
                             f"{', '.join(HTAB_MEM_DESIGNS)}")
        if cpumap_skb_alloc not in ("napi_skb_cache_get_bulk", "kmem_cache_alloc_bulk"):
            raise ValueError(f"cpumap_skb_alloc={cpumap_skb_alloc!r}: choose "
                             "'napi_skb_cache_get_bulk' or 'kmem_cache_alloc_bulk'")
        if cpumap_rx not in ("gro_receive_skb", "netif_receive_skb_list"):
            raise ValueError(f"cpumap_rx={cpumap_rx!r}: choose 'gro_receive_skb' or "
                             "'netif_receive_skb_list'")
        self.machine = machine if machine is not None else Machine(
            cpus, nodes, profile=profile, cache_scale=cache_scale, seed=seed,
            modeled_time=modeled_time)
        self.machine.htab_mem = htab_mem
        if cpumap_skb_alloc != "napi_skb_cache_get_bulk":
            net_of(self.machine).cpumap_skb_alloc = cpumap_skb_alloc
        if cpumap_rx != "gro_receive_skb":
            net_of(self.machine).cpumap_rx = cpumap_rx
        if shared is not None and self.machine.modeled_time:
            raise ValueError("shared=: maps in a shared segment charge no modeled time; create "
                             "the system with modeled_time=False")
        self.shared_segment = shared
        # a segment's map (by where it is there) -> this system's map of it, while it lives:
        # a pin got again, here or from another process's, is the same map
        self._segment_maps: dict[int, SharedSegmentMap] = {}
        self._lock = threading.RLock()  # fd table, idrs, pins, refcounts
        # fd -> object. Each emulated fd holds a real host fd (on /dev/null) of the same number,
        # so emulated objects and the process's real files (sockets for sockmap, say) share one
        # fd namespace, as BPF objects and files do in a real process.
        self._files: dict[int, Any] = {}
        # The finalizer holds only the host fd numbers: holding the objects (a map refers to
        # its system) would keep a dropped system, and its host fds, alive for ever.
        self._host_fds: set[int] = set()
        weakref.finalize(self, _close_host_fds, self._host_fds)
        self._map_idr: dict[int, BpfMap] = {}
        self._next_map_id = itertools.count(1)
        self._prog_idr: dict[int, Any] = {}
        self._next_prog_id = itertools.count(1)
        self.bpffs = BpfFs()

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

    # -- what the kernel says about itself (an object's externs) -----------------------------
    # The emulated kernel models this host's: its release and build config are the host's,
    # so an object's LINUX_KERNEL_VERSION and CONFIG_* externs read as they do on the kernel
    # backend here. It has no kernel symbols (no kernel memory a program could reach at an
    # address; its BTF has no VARs), so typeless __ksym externs find nothing, and no kprobes,
    # so libbpf's syscall wrapper probe answers 0.
    def _kernel_version(self) -> int:
        return hostinfo.host_kernel_version()

    def _kernel_config(self) -> str:
        return hostinfo.host_kernel_config()

    def _kallsyms(self) -> str:
        return ""

    def _has_syscall_wrapper(self) -> bool:
        return False

    # -- fd table, ids, references -----------------------------------------------------------
    def fd_install(self, obj: Any) -> int:
        """Open a new fd on ``obj``; closing it calls ``obj.fd_release()`` if it has one."""
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        with self._lock:
            self._files[fd] = obj
            self._host_fds.add(fd)
        return fd

    def fd_get(self, fd: int) -> Any:
        """The object behind ``fd``; KernelError(EBADF) if it is not open."""
        try:
            return self._files[fd]
        except (KeyError, TypeError):
            raise _missing_fd(fd) from None

    def map_from_fd(self, fd: int) -> BpfMap:
        """__bpf_map_get: EBADF when not open, EINVAL when not a map."""
        return self._map_file(fd).map

    def _map_file(self, fd: int) -> MapFile:
        file = self.fd_get(fd)
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
            if isinstance(bpf_map, SharedSegmentMap):
                self._segment_maps.pop(bpf_map.shm.offset, None)
        bpf_map.map_free()
        if bpf_map.btf is not None:
            self.btf_put(bpf_map.btf)
        # The kernel frees a map's memory after a grace period (bpf_mem_alloc_destroy waits
        # in a worker), with nobody's help: here it comes back as soon as no reader holds it.
        rcu = self.machine.rcu
        if rcu.pending and not rcu.in_read_section():
            rcu.poll()

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

    # -- BPF_MAP_CREATE ----------------------------------------------------------------------
    def _map_create(self, attr: MapAttr) -> int:
        """map_create: its checks in syscall.c's order, then the type's map_alloc_check and
        map_alloc, then the name (bpf_obj_name_cpy comes after the allocation)."""
        self.machine.bpf_syscall()
        if attr.btf_key_type_id and not attr.btf_value_type_id:
            raise KernelError(errno.EINVAL, "a BTF key type needs a BTF value type")
        token_flag = attr.map_flags & MapFlags.TOKEN_FD
        if token_flag:  # cleared before anything else reads map_flags
            attr = dataclasses.replace(attr, map_flags=attr.map_flags & ~int(MapFlags.TOKEN_FD))
        if attr.map_extra and attr.map_type not in (MapType.BLOOM_FILTER, MapType.ARENA):
            raise KernelError(errno.EINVAL, "map_extra is only for BLOOM_FILTER maps")
        file_flags = bpf_get_file_flag(attr.map_flags)
        node = bpf_map_attr_numa_node(attr)
        if node != NUMA_NO_NODE and not 0 <= node < self.machine.num_nodes:
            raise KernelError(errno.EINVAL, f"numa_node {attr.numa_node} does not exist: this "
                              f"machine has nodes 0-{self.machine.num_nodes - 1}")
        ops = MAP_OPS.get(attr.map_type)
        if ops is None:
            known = MapType(attr.map_type).name \
                if attr.map_type in MapType._value2member_map_ else None
            raise KernelError(errno.EINVAL, f"map type {known} is not emulated"
                              if known and attr.map_type else f"unknown map type {attr.map_type}")
        if self.shared_segment is not None:
            ops = SHARED_OPS.get(attr.map_type, ops)
        ops.map_alloc_check(attr, self.machine)
        if token_flag:  # bpf_token_get_from_fd: there are no BPF tokens in this backend
            raise KernelError(errno.EINVAL, "BPF_F_TOKEN_FD: map_token_fd is not a BPF token "
                              "(the emulated backend has none)")
        # Memory goes on the requested node, else on the creating CPU's (as kmalloc places it).
        home = node if node != NUMA_NO_NODE else self.machine.numa_node_id()
        if issubclass(ops, SharedSegmentMap):
            bpf_map = ops(attr, self.machine, home, self.shared_segment)
        elif map_traits(attr.map_type).map_in_map:  # bpf_map_meta_alloc reads inner_map_fd
            bpf_map = ops(attr, self.machine, home,
                          inner_map=self.map_from_fd(attr.inner_map_fd))
        else:
            bpf_map = ops(attr, self.machine, home)
        try:
            bpf_map.name = bpf_obj_name_cpy(attr.map_name)
        except KernelError:
            bpf_map.map_free()
            raise
        if attr.btf_key_type_id or attr.btf_value_type_id:
            try:
                self._map_set_btf(bpf_map, attr)
            except KernelError:
                bpf_map.map_free()
                raise
        bpf_map.map_flags = bpf_map_flags_retain_permanent(bpf_map.map_flags)
        self._map_register(bpf_map)
        return self._map_new_fd(bpf_map, file_flags)

    def _map_register(self, bpf_map: BpfMap) -> None:
        """The map's id (and, in a segment, its place there, for pins got again)."""
        bpf_map.system = self
        with self._lock:
            bpf_map.id = next(self._next_map_id)
            self._map_idr[bpf_map.id] = bpf_map
            if isinstance(bpf_map, SharedSegmentMap):
                self._segment_maps[bpf_map.shm.offset] = bpf_map

    def _map_set_btf(self, bpf_map: BpfMap, attr: MapAttr) -> None:
        """map_create's BTF part: the object behind btf_fd, then map_check_btf."""
        btf = self.btf_get_by_fd(attr.btf_fd)
        try:
            if attr.btf_value_type_id:
                # The map's flags, not the attribute's: devmaps gain BPF_F_RDONLY_PROG at
                # allocation (dev_map_init_map), which the special-field check then sees.
                bpf_map.set_special_fields(*map_check_btf(
                    attr.map_type, attr.key_size, attr.value_size, attr.max_entries, btf.btf,
                    attr.btf_key_type_id, attr.btf_value_type_id, bpf_map.map_flags))
        except KernelError:
            self.btf_put(btf)
            raise
        bpf_map.btf = btf
        bpf_map.btf_key_type_id = attr.btf_key_type_id
        bpf_map.btf_value_type_id = attr.btf_value_type_id

    # -- element commands --------------------------------------------------------------------
    def _map_lookup_elem(self, fd: int, key: bytes | None, flags: int,
                         value: bytes | None) -> bytes:
        self.machine.bpf_syscall()
        if flags and flags & ~BPF_F_LOCK:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: only BPF_F_LOCK is accepted")
        file = self._files.get(fd)
        if file.__class__ is not MapFile:  # the hot path skips _map_file's call
            file = self._map_file(fd)
        if not file.can_read:
            raise KernelError(errno.EPERM, "the fd is write-only")
        bpf_map = file.map
        if flags and bpf_map.spin_lock_off < 0:
            raise KernelError(errno.EINVAL, "BPF_F_LOCK needs a bpf_spin_lock in the value")
        if key is None or not key or len(key) != bpf_map.key_size:
            key = bpf_copy_key(bpf_map, key)
        if bpf_map.special_fields:  # read around them (under the lock: BPF_F_LOCK)
            live = bpf_map.map_lookup_elem(key)
            if live is None:
                raise KernelError(errno.ENOENT, "key not found")
            return read_map_value(bpf_map, live, bool(flags))
        if value is not None:  # maps that look up by value (bloom filter)
            return bpf_map.bpf_map_copy_value(key, flags, value=bpf_copy_value(bpf_map, value))
        return bpf_map.bpf_map_copy_value(key, flags)

    def fast_ops(self, fd: int) -> FastOps:
        """The System commands, and for a map that has one (hash maps) read through a
        readable fd, its live lookup table. Reads through the table are not counted in the
        map's NUMA access statistics (``map_stats``: they bypass the element ops); lookups
        through ``lookup``, System calls and programs are."""
        generic = super().fast_ops(fd)
        file = self._files.get(fd) if type(fd) is int else None
        if type(file) is not MapFile or not file.can_read:
            return generic
        table = file.map.sys_lookup_table()
        if table is None:
            return generic
        return dataclasses.replace(generic, table=table)

    def _writable_map(self, fd: int) -> BpfMap:
        file = self._files.get(fd)
        if file.__class__ is not MapFile:  # the hot path skips _map_file's call
            file = self._map_file(fd)
        if not file.can_write:
            raise KernelError(errno.EPERM, "the fd is read-only")
        if file.map.frozen:
            raise KernelError(errno.EPERM, "the map is frozen: syscalls may not write it")
        return file.map

    def _map_update_elem(self, fd: int, key: bytes | None, value: bytes, flags: int,
                         target_cpu: int | None = None) -> None:
        """map_update_elem; with ``target_cpu``, the 2024 patch's separate attr field
        (sockmaps only: EINVAL elsewhere, after the checks every update makes)."""
        self.machine.bpf_syscall()
        bpf_map = self._writable_map(fd)
        if flags & BPF_F_LOCK and bpf_map.spin_lock_off < 0:
            raise KernelError(errno.EINVAL, "BPF_F_LOCK needs a bpf_spin_lock in the value")
        if key is None or not key or len(key) != bpf_map.key_size:
            key = bpf_copy_key(bpf_map, key)
        if len(value) != bpf_map.sys_value_size:
            value = bpf_copy_value(bpf_map, value)
        if target_cpu is None:
            bpf_map.bpf_map_update_value(key, value, flags)
            return
        if not map_traits(bpf_map.map_type).sockets:
            raise KernelError(errno.EINVAL, f"target_cpu is for SOCKMAP and SOCKHASH updates, "
                                            f"not {bpf_map.describe()}")
        bpf_map.sock_map_update_elem_sys(key, value, flags, target_cpu)

    _map_update_elem_target_cpu = _map_update_elem

    def _map_delete_elem(self, fd: int, key: bytes | None) -> None:
        self.machine.bpf_syscall()
        bpf_map = self._writable_map(fd)
        if key is None or not key or len(key) != bpf_map.key_size:
            key = bpf_copy_key(bpf_map, key)
        bpf_map.map_delete_elem(key)

    def _map_get_next_key(self, fd: int, key: bytes | None) -> bytes:
        self.machine.bpf_syscall()
        file = self._map_file(fd)
        if not file.can_read:
            raise KernelError(errno.EPERM, "the fd is write-only")
        return file.map.map_get_next_key(None if key is None else bpf_copy_key(file.map, key))

    def _map_lookup_and_delete_elem(self, fd: int, key: bytes | None, flags: int) -> bytes:
        self.machine.bpf_syscall()
        if flags & ~BPF_F_LOCK:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: only BPF_F_LOCK is accepted")
        file = self._map_file(fd)
        bpf_map = file.map
        if not (file.can_read and file.can_write) or bpf_map.frozen:
            raise KernelError(errno.EPERM, "lookup_and_delete needs a readable and writable "
                              "fd on a map that is not frozen")
        if flags and map_traits(bpf_map.map_type).keyless:
            raise KernelError(errno.EINVAL, "queue and stack pops take no flags")
        if flags and bpf_map.spin_lock_off < 0:
            raise KernelError(errno.EINVAL, "BPF_F_LOCK needs a bpf_spin_lock in the value")
        return check_and_init_map_value(
            bpf_map, bpf_map.map_lookup_and_delete_elem(bpf_copy_key(bpf_map, key), flags))

    def _map_freeze(self, fd: int) -> None:
        self.machine.bpf_syscall()
        file = self._map_file(fd)
        # Before the permission check: a value with special fields (its btf_record) is never
        # frozen, whatever the fd may do.
        if file.map.special_fields:
            raise KernelError(ENOTSUPP, "a map whose value holds a bpf_spin_lock or bpf_timer "
                              "cannot be frozen")
        # map_get_sys_perms drops write from a frozen map, so a second freeze is EPERM
        # (the EBUSY test behind it only catches a freeze racing with another).
        if not file.can_write or file.map.frozen:
            raise KernelError(errno.EPERM, "freezing needs a writable fd on a map that is not "
                              "frozen yet")
        with self._lock:
            if file.map.frozen:
                raise KernelError(errno.EBUSY, "the map is already frozen")
            file.map.frozen = True

    # -- batch commands ----------------------------------------------------------------------
    def _batch_handler(self, fd: int, command: str, read: bool, write: bool):
        """bpf_map_do_batch: fd, permissions, then the type's handler (none: ENOTSUPP)."""
        file = self._map_file(fd)
        if read and not file.can_read:
            raise KernelError(errno.EPERM, "the fd is write-only")
        if write and (not file.can_write or file.map.frozen):
            raise KernelError(errno.EPERM, "the fd is read-only or the map is frozen")
        if getattr(file.map, command) is None:
            raise KernelError(ENOTSUPP, "this map type has no batch handler for this command")
        return getattr(file.map, command)

    def _map_lookup_batch(self, fd: int, in_batch: bytes | None, count: int, elem_flags: int,
                          flags: int, delete: bool) -> BatchLookup:
        self.machine.bpf_syscall()
        command = "map_lookup_and_delete_batch" if delete else "map_lookup_batch"
        handler = self._batch_handler(fd, command, read=True, write=delete)
        return handler(in_batch, count, elem_flags, flags)

    def _map_write_batch(self, fd: int, keys: list[bytes], values: list[bytes] | None,
                         elem_flags: int, flags: int) -> int:
        self.machine.bpf_syscall()
        if values is None:
            handler = self._batch_handler(fd, "map_delete_batch", read=False, write=True)
            return handler(keys, elem_flags, flags)
        handler = self._batch_handler(fd, "map_update_batch", read=False, write=True)
        return handler(keys, values, elem_flags, flags)

    # -- info and ids ------------------------------------------------------------------------
    def info_fd_get(self, fd: int) -> Any:
        """bpf_obj_get_info_by_fd's fdget: the object, EBADFD when the fd is not open."""
        file = self._files.get(fd)
        if file is None:
            exc = _missing_fd(fd)
            if exc.errno == errno.EBADF:
                exc.errno = errno.EBADFD
            raise exc
        return file

    def _map_get_info(self, fd: int) -> MapInfo:
        self.machine.bpf_syscall()
        file = self.info_fd_get(fd)
        if type(file) is not MapFile:
            raise KernelError(errno.EINVAL, f"fd {fd} is not a BPF map")
        bpf_map = file.map
        return MapInfo(type=bpf_map.map_type, id=bpf_map.id, key_size=bpf_map.key_size,
                       value_size=bpf_map.value_size, max_entries=bpf_map.max_entries,
                       map_flags=bpf_map.map_flags, name=bpf_map.name,
                       map_extra=bpf_map.map_extra,
                       btf_id=bpf_map.btf.id if bpf_map.btf is not None else 0,
                       btf_key_type_id=bpf_map.btf_key_type_id,
                       btf_value_type_id=bpf_map.btf_value_type_id)

    def _ringbuf_reader(self, fd: int, size: int) -> RingBufConsumer:
        ring = self.map_from_fd(fd)
        self.bpf_map_inc(ring)  # the reader's reference, as a mapping of the ring holds one
        return RingBufConsumer(ring, lambda: self.bpf_map_put(ring))

    def _perf_buffer_reader(self, fd: int, pages: int,
                            max_entries: int) -> EmulatedPerfBufferReader:
        """perf_buffer__new: a BPF output event with a ring of ``pages`` pages for each CPU
        the map has a slot for (every possible CPU is online here), each event an fd of its
        own put in its CPU's slot as BPF_MAP_UPDATE_ELEM puts it; closing the reader empties
        those slots and closes the fds. The reader holds a reference on the map (as the
        kernel reader's own fd of it does)."""
        perf_map = self.map_from_fd(fd)
        wakeup = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        event_fds: dict[int, int] = {}
        self.bpf_map_inc(perf_map)

        def release() -> None:
            for cpu, event_fd in event_fds.items():
                with contextlib.suppress(KernelError):  # emptied by someone else
                    perf_map.map_delete_elem(cpu.to_bytes(4, "little"))
                self._close(event_fd)
            self.bpf_map_put(perf_map)

        events = {}
        try:
            for cpu in range(min(max_entries, self.machine.num_cpus)):
                events[cpu] = PerfEvent(self.machine, cpu, pages, wakeup)
                event_fds[cpu] = self.fd_install(events[cpu])
                perf_map.bpf_map_update_value(cpu.to_bytes(4, "little"),
                                              event_fds[cpu].to_bytes(4, "little"), BPF_ANY)
        except BaseException:
            release()
            os.close(wakeup)
            raise
        return EmulatedPerfBufferReader(events, wakeup, release)

    def _user_ringbuf_producer(self, fd: int, size: int) -> UserRingBufWriter:
        ring = self.map_from_fd(fd)
        self.bpf_map_inc(ring)  # the producer's reference, as a mapping of the ring holds one
        return UserRingBufWriter(ring, lambda: self.bpf_map_put(ring))

    def _map_get_fd_by_id(self, map_id: int, open_flags: int) -> int:
        self.machine.bpf_syscall()
        file_flags = bpf_obj_file_flags(open_flags, "open_flags")
        with self._lock:
            bpf_map = self._map_idr.get(map_id)
            if bpf_map is None:
                raise KernelError(errno.ENOENT, f"no map with id {map_id}")
            return self._map_new_fd(bpf_map, file_flags)

    def _map_get_next_id(self, start_id: int) -> int:
        self.machine.bpf_syscall()
        with self._lock:
            later = [map_id for map_id in self._map_idr if map_id > start_id]
        if not later:
            raise KernelError(errno.ENOENT, f"no map id after {start_id}")
        return min(later)

    # -- pins --------------------------------------------------------------------------------
    def _obj_pin(self, fd: int, path: str) -> None:
        """bpf_obj_pin_user: the fd is resolved first (bpf_fd_probe_obj: anything but a map or
        a program, a closed fd included, is EINVAL), then the path."""
        self.machine.bpf_syscall()
        file = self._files.get(fd)
        if type(file) is MapFile:
            obj, inc = file.map, self.bpf_map_inc
        elif getattr(file, "prog_type", None) is not None:
            obj, inc = file, self.bpf_prog_inc
        else:
            raise KernelError(errno.EINVAL, f"fd {fd} is not an open map or program")
        with self._lock:
            target = self.bpffs.new_pin(path)
            if self.shared_segment is not None and segment_pin(self.shared_segment, target):
                raise KernelError(errno.EEXIST, f"{path} exists already (a pin in the "
                                  f"{self.shared_segment.describe()})")
            if isinstance(obj, SharedSegmentMap):
                # the segment holds the pin, for every process on it, and the map's memory
                # lives as long as the segment: no reference is taken here
                pin_in_segment(obj, target)
                return
            self.bpffs.pin(path, obj)
            inc(obj)

    def _obj_get(self, path: str, file_flags: int) -> int:
        self.machine.bpf_syscall()
        # bpf_obj_get also takes BPF_F_PATH_FD (a relative path is then resolved from
        # path_fd, which the System leaves 0); the access bits are the rest.
        flags = bpf_obj_file_flags(file_flags & ~int(MapFlags.PATH_FD), "file_flags")
        with self._lock:
            try:
                obj = self.bpffs.get(path)
            except KernelError as exc:
                pinned = self._segment_pinned(path, exc)
                return self._map_new_fd(pinned, flags)
            if isinstance(obj, BpfMap):
                return self._map_new_fd(obj, flags)
            # bpf_obj_get_user: a program's fd is read-write whatever the flags asked
            self.bpf_prog_inc(obj)
        return self.fd_install(obj)

    def _segment_target(self, path: str, exc: KernelError) -> str:
        """Where ``path`` points, as a segment's pin names it, for a path the bpffs here
        has nothing at (``exc``, re-raised without a segment or for other failures). The
        path is resolved lexically: its directories may be another process's."""
        if self.shared_segment is None or exc.errno != errno.ENOENT or path.endswith("/"):
            raise exc
        return posixpath.normpath(posixpath.join(os.getcwd(), path))

    def _segment_pinned(self, path: str, exc: KernelError) -> BpfMap:
        """obj_get of a pin in the segment: this system's map of it (made the first time)."""
        shm = segment_pin(self.shared_segment, self._segment_target(path, exc))
        if shm is None:
            raise exc
        bpf_map = self._segment_maps.get(shm.offset)
        if bpf_map is None:
            bpf_map = open_pinned(shm, self.shared_segment, self.machine,
                                  self.machine.numa_node_id())
            self._map_register(bpf_map)
        return bpf_map

    def _obj_unpin(self, path: str) -> None:
        with self._lock:
            try:
                obj = self.bpffs.unlink(path)
            except KernelError as exc:
                if not unpin_in_segment(self.shared_segment, self._segment_target(path, exc)):
                    raise
                return
        if isinstance(obj, BpfMap):
            self.bpf_map_put(obj)
        else:
            self.bpf_prog_put(obj)

    def _mkdir(self, path: str, mode: int) -> None:
        with self._lock:
            self.bpffs.mkdir(path, mode)

    def _rmdir(self, path: str) -> None:
        with self._lock:
            self.bpffs.rmdir(path)

    # -- close -------------------------------------------------------------------------------
    def _close(self, fd: int) -> None:
        self.machine.bpf_syscall()
        with self._lock:
            file = self._files.pop(fd, None)
            self._host_fds.discard(fd)
        if file is None:
            raise KernelError(errno.EBADF, f"fd {fd} is not open")
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
            raise self._fail(exc, "map_stats") from None
        return bpf_map.mem_stats()


# The System's backend commands: every one is a syscall of the task on the current CPU, so
# each begins with ``self.machine.bpf_syscall()`` (a modeled operation begins, the entry is
# charged), before it looks at any argument; tests/emulated/test_syscall_entry.py holds each
# to it. A call, not a wrapper: the wrapper's generic call cost about as much as an element
# command's own checks.
SYSCALL_COMMANDS = ("_map_create", "_map_lookup_elem", "_map_update_elem", "_map_delete_elem",
                    "_map_get_next_key", "_map_lookup_and_delete_elem", "_map_freeze",
                    "_map_lookup_batch", "_map_write_batch", "_map_get_info",
                    "_map_get_fd_by_id", "_map_get_next_id", "_obj_pin", "_obj_get", "_close",
                    "_prog_load", "_prog_test_run", "_prog_get_info", "_prog_get_fd_by_id",
                    "_attach_tracepoint", "_map_update_elem_target_cpu", "_prog_attach",
                    "_prog_detach")


def _missing_fd(fd: object) -> KernelError:
    """The error for an fd the emulated table lacks. The emulated objects share the process's
    fd namespace with its real files, so an fd open on the host is, as on the kernel, open
    but not a BPF object (EINVAL); any other is not open (EBADF)."""
    try:
        os.fstat(fd)  # type: ignore[arg-type]
    except (OSError, TypeError, ValueError, OverflowError):
        return KernelError(errno.EBADF, f"fd {fd!r} is not open")
    return KernelError(errno.EINVAL, f"fd {fd} is not a BPF object (an open file of this process)")


def _close_host_fds(host_fds: set[int]) -> None:
    """When the emulated system goes away, its fds' host halves go too."""
    for fd in list(host_fds):
        try:
            os.close(fd)
        except OSError:
            pass
