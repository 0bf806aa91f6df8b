"""KernelSystem: the System contract translated to the real bpf(2).

Rules this module keeps:
- It only translates: ``pybpf.system.System`` has normalised every argument and turns each
  ``KernelError`` raised here into the public error.
- The kernel answers every check it makes, in its own order. A key, value or batch token of
  the wrong length (which the kernel cannot see) is passed as ``UNREADABLE``: the kernel makes
  all its earlier checks and fails its copy with EFAULT, which becomes EINVAL with the lengths.
  A short ``bytes`` never lets the kernel read past it.
- Map sizes are cached per fd in ``_MAPS``, shared by every KernelSystem of the process:
  set by ``map_create``, learnt on first use otherwise, dropped by ``close`` and whenever
  this module gets a new fd from the kernel (so a reused fd number never keeps old sizes).
  The one thing it cannot see is an fd closed behind pybpf's back (``os.close``) and
  reused by a map made elsewhere: close pybpf's fds with ``close``.
- The element commands reuse one attr struct and one value buffer per thread and size,
  so the hot path allocates nothing but the returned ``bytes``.
- Batch buffers are sized by what the map can hold (max_entries), never by the caller's count.
- Ring buffers and perf event arrays are read, and user ring buffers written, through mmap
  and epoll (ringbuf.py, perf_buffer.py), with the kernel's memory ordering (barrier.py).
- ``fast_ops`` offers the C accelerator's syscall core (element ops and batches) when it is
  built (``pybpf.accelerator``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import threading
from collections.abc import Iterator

from .. import hostinfo
from ..accelerator import ACCEL
from ..attrs import (
    UNREADABLE,
    MapAttr,
    ProgAttr,
    TestRunRequest,
    length_problem,
    value_problem,
)
from ..btf import Btf, Kind
from ..errors import KernelError, bpf_error, file_call
from ..system import BatchLookup, FastOps, MapInfo, ProgInfo, System, TestRun
from ..topology import Topology, host_topology
from ..uapi import BPF_F_SOCKMAP_TARGET_CPU, Cmd, MapType, map_traits, syscall_value_size
from . import perf_event
from .perf_buffer import KernelPerfBufferReader
from .ringbuf import KernelRingBufReader, KernelUserRingBufProducer
from .sockmap import NO_TARGET_CPU, UNMERGED_KFUNCS, SockMapMixin
from .syscall import (
    NR_BPF,
    UNAVAILABLE,
    BpfMapInfo,
    BpfProgInfo,
    BtfLoadAttr,
    GetIdAttr,
    InfoAttr,
    LinkCreateAttr,
    MapBatchAttr,
    MapCreateAttr,
    MapElemAttr,
    ObjPinAttr,
    ProgLoadAttr,
    RawTracepointAttr,
    TestRunAttr,
    bpf,
    get_errno,
    libc_syscall,
    num_possible_cpus,
    probe_map_create,
)

# Written into the htab token buffer first: the kernel never writes this bucket index, so
# finding it afterwards means it wrote no token.
_NO_TOKEN = b"\xff\xff\xff\xff"

_LOG_SIZES = (1 << 20, 1 << 24)  # verifier log buffer: first try, last try
VMLINUX_BTF = "/sys/kernel/btf/vmlinux"
_SIZEOF_ELEM = ctypes.sizeof(MapElemAttr)
class _MapMeta:
    """What the translation needs to know about a map fd."""

    __slots__ = ("map_type", "key_size", "value_size", "token_size", "capacity", "problem",
                 "by_value")

    def __init__(self, map_type: int, key_size: int, value_size: int, max_entries: int) -> None:
        self.map_type = map_type
        self.by_value = map_type == MapType.BLOOM_FILTER  # lookups read the value, not a key
        self.key_size = key_size
        # Bytes of one value through the syscall (per-CPU slots, 4-byte fds/ids).
        self.value_size = syscall_value_size(map_type, value_size, num_possible_cpus())
        self.token_size = 4 if map_traits(map_type).htab_batch else key_size
        # The most elements one batch can return (an LRU map's NO_COMMON_LRU rounding is
        # at most one per CPU).
        self.capacity = max(max_entries, 1) + num_possible_cpus()
        # problem(what, got): the detail of a value of the wrong length.
        self.problem = functools.partial(value_problem, map_type, value_size,
                                         num_possible_cpus())


_MAPS: dict[int, _MapMeta] = {}


class _ThreadState(threading.local):
    """The calling thread's scratch: attrs and value buffers reused call after call.

    Each path pays for one thread-local lookup of one tuple: ``lookup``, ``update`` and
    ``delete`` (the hot paths: attr, its address, and what the attr holds now, so a field is
    set only when it changes: [the map's _MapMeta, the value buffer or the flags]), ``elem``
    (the general path: attr, address, value buffers by size). The lookup attr's ``flags``
    stays 0: lookups with flags take the general path. A _MapMeta is made anew for every fd
    the kernel hands out, so "the same meta" means the same fd and the same sizes.
    """

    def __init__(self) -> None:
        lookup, update, delete, elem = MapElemAttr(), MapElemAttr(), MapElemAttr(), MapElemAttr()
        self.lookup = (lookup, ctypes.c_void_p(ctypes.addressof(lookup)), [None, None])
        self.update = (update, ctypes.c_void_p(ctypes.addressof(update)), [None, 0])
        self.delete = (delete, ctypes.c_void_p(ctypes.addressof(delete)), [None])
        self.elem = (elem, ctypes.c_void_p(ctypes.addressof(elem)), {})


def _new_buffer(buffers: dict, size: int) -> tuple[ctypes.Array, int]:
    buf = ctypes.create_string_buffer(size)
    entry = buffers[size] = (buf, ctypes.addressof(buf))
    return entry


_tls = _ThreadState()


def _fd_kind(fd: int) -> str | None:
    """``bpf-map``, ``bpf-prog``... for a bpf fd, "" for another file, None if not open."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return target[len("anon_inode:"):] if target.startswith("anon_inode:") else ""


def _not_a_map(fd: int, err: int) -> KernelError:
    """The kernel's refusal of a command on ``fd``, which is not a map, with the reason."""
    kind = _fd_kind(fd)
    if err == errno.EBADF and kind is None:
        return KernelError(err, f"fd {fd} is not open" + (
            " (a closed Map or Program has fd -1)" if fd == -1 else ""))
    if err == errno.EINVAL and kind is not None and kind != "bpf-map":
        return KernelError(err, f"fd {fd} is not a BPF map ({kind or 'another file'})")
    return KernelError(err)


def _all_of_size(items: list[bytes], size: int) -> bool:
    lengths = set(map(len, items))
    return not lengths or lengths == {size}


def _fresh(fd: int) -> int:
    """A new fd from the kernel: forget what was cached for an earlier file of that number."""
    _MAPS.pop(fd, None)
    return fd


class KernelSystem(SockMapMixin, System):
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

    # -- map sizes -----------------------------------------------------------------------------
    def _meta(self, fd: int) -> _MapMeta | None:
        """The cached sizes of map ``fd``, learnt on first use; None when ``fd`` is not a map
        (the kernel then answers the command itself, EBADF or EINVAL)."""
        meta = _MAPS.get(fd)
        if meta is None and _fd_kind(fd) == "bpf-map":
            info = self._map_get_info(fd)
            meta = _MAPS[fd] = _MapMeta(info.type, info.key_size, info.value_size,
                                        info.max_entries)
        return meta

    # -- maps ----------------------------------------------------------------------------------
    def _map_create(self, attr: MapAttr) -> int:
        fd = bpf(Cmd.MAP_CREATE, MapCreateAttr(
            map_type=attr.map_type, key_size=attr.key_size, value_size=attr.value_size,
            max_entries=attr.max_entries, map_flags=attr.map_flags,
            inner_map_fd=attr.inner_map_fd, numa_node=attr.numa_node, map_name=attr.map_name,
            map_extra=attr.map_extra, btf_fd=attr.btf_fd,
            btf_key_type_id=attr.btf_key_type_id, btf_value_type_id=attr.btf_value_type_id))
        if fd < 0:
            raise KernelError(-fd)
        _MAPS[fd] = _MapMeta(attr.map_type, attr.key_size, attr.value_size, attr.max_entries)
        return fd

    def _map_lookup_elem(self, fd: int, key: bytes | None, flags: int,
                         value: bytes | None) -> bytes:
        meta = _MAPS.get(fd) or self._meta(fd)
        if (meta is None or flags or value is not None or meta.by_value
                or key.__class__ is not bytes or len(key) != meta.key_size):
            if meta is not None and meta.by_value and value is None:
                value = bytes(meta.value_size)  # an input here: none given reads as zeros
            if value is not None:  # a lookup by value (bloom filter): it comes back on a hit
                self._elem(Cmd.MAP_LOOKUP_ELEM, fd, meta, key, flags, value)
                return value
            return self._elem(Cmd.MAP_LOOKUP_ELEM, fd, meta, key, flags, out=-1)
        attr, ref, holds = _tls.lookup
        if holds[0] is not meta:
            buffers = _tls.elem[2]
            buf, attr.value = buffers.get(meta.value_size) or _new_buffer(buffers,
                                                                          meta.value_size)
            attr.map_fd = fd
            holds[:] = meta, buf
        attr.key = key
        if libc_syscall(NR_BPF, 1, ref, _SIZEOF_ELEM) < 0:
            raise KernelError(get_errno())
        return holds[1].raw

    def _map_update_elem(self, fd: int, key: bytes | None, value: bytes, flags: int) -> None:
        meta = _MAPS.get(fd) or self._meta(fd)
        if (meta is None or key.__class__ is not bytes or len(key) != meta.key_size
                or len(value) != meta.value_size):
            self._elem(Cmd.MAP_UPDATE_ELEM, fd, meta, key, flags, value)
            return
        attr, ref, holds = _tls.update
        if holds[0] is not meta:
            attr.map_fd = fd
            holds[0] = meta
        if holds[1] != flags:
            attr.flags = flags
            holds[1] = flags
        attr.key = key
        attr.value = value
        if libc_syscall(NR_BPF, 2, ref, _SIZEOF_ELEM) < 0:
            err = get_errno()
            if err == errno.EINVAL and flags & BPF_F_SOCKMAP_TARGET_CPU:
                raise KernelError(err, "BPF_F_SOCKMAP_TARGET_CPU (the CPU in the upper 32 "
                                  "bits of flags) is not a kernel flag: " + NO_TARGET_CPU)
            raise KernelError(err)

    def _elem(self, cmd: int, fd: int, meta: _MapMeta | None, key: bytes | None, flags: int,
              value: bytes | None = None, out: int | None = None) -> bytes | None:
        """One element command: ``key`` and ``value`` in (each passed as ``UNREADABLE`` when
        its length is not the map's), or ``out`` bytes back (-1: the value size)."""
        problem = ""
        if meta is None:  # not a map: the kernel refuses before reading any buffer
            # (a field that is not given stays 0: DELETE_ELEM's CHECK_ATTR refuses a value)
            key = UNREADABLE if key is not None else None  # type: ignore[assignment]
            value = UNREADABLE if value is not None else None  # type: ignore[assignment]
        else:
            if key is not None and meta.key_size and len(key) != meta.key_size:
                problem = length_problem("key", len(key), meta.key_size, "the map's key_size "
                                         "is")
                key = UNREADABLE  # type: ignore[assignment]
            if value is not None and len(value) != meta.value_size:
                problem = problem or meta.problem("value", len(value))
                value = UNREADABLE  # type: ignore[assignment]
        attr, ref, buffers = _tls.elem
        attr.map_fd = fd
        attr.key = key
        attr.flags = flags
        buf = None
        if out is None:
            attr.value = value
        else:
            size = (meta.value_size if out < 0 else out) if meta is not None else 0
            buf, attr.value = buffers.get(size) or _new_buffer(buffers, size)
        if libc_syscall(NR_BPF, cmd, ref, _SIZEOF_ELEM) < 0:
            err = get_errno()
            # The key is copied first: with a NULL one (a map that takes a key), its EFAULT
            # is the kernel's answer, not the value's length.
            if problem and err == errno.EFAULT and not (key is None and meta and meta.key_size):
                raise KernelError(errno.EINVAL, problem)
            raise _not_a_map(fd, err) if meta is None else KernelError(err)
        return None if buf is None else buf.raw

    def _map_delete_elem(self, fd: int, key: bytes | None) -> None:
        meta = _MAPS.get(fd) or self._meta(fd)
        if meta is None or key.__class__ is not bytes or len(key) != meta.key_size:
            self._elem(Cmd.MAP_DELETE_ELEM, fd, meta, key, 0)
            return
        attr, ref, holds = _tls.delete
        if holds[0] is not meta:
            attr.map_fd = fd
            holds[0] = meta
        attr.key = key
        if libc_syscall(NR_BPF, 3, ref, _SIZEOF_ELEM) < 0:
            raise KernelError(get_errno())

    def _map_get_next_key(self, fd: int, key: bytes | None) -> bytes:
        meta = _MAPS.get(fd) or self._meta(fd)
        return self._elem(Cmd.MAP_GET_NEXT_KEY, fd, meta, key, 0,
                          out=meta.key_size if meta is not None else 0)

    def _map_lookup_and_delete_elem(self, fd: int, key: bytes | None, flags: int) -> bytes:
        return self._elem(Cmd.MAP_LOOKUP_AND_DELETE_ELEM, fd, _MAPS.get(fd) or self._meta(fd),
                          key, flags, out=-1)

    def _map_freeze(self, fd: int) -> None:
        ret = bpf(Cmd.MAP_FREEZE, MapElemAttr(map_fd=fd))
        if ret < 0:
            raise _not_a_map(fd, -ret) if _fd_kind(fd) != "bpf-map" else KernelError(-ret)

    def fast_ops(self, fd: int) -> FastOps:
        """A lookup closure for ``fd`` (per thread, an attr with the fd and the value buffer
        already in place, so a call sets the key pointer and makes the syscall), and with the
        C accelerator its syscall core: element commands and batches made in C."""
        generic = super().fast_ops(fd)
        meta = self._meta(fd) if isinstance(fd, int) and fd >= 0 else None
        if meta is None:  # not a map: the System commands give the errors
            return generic
        key_size, size = meta.key_size, meta.value_size
        nr, sizeof_elem, syscall = NR_BPF, _SIZEOF_ELEM, libc_syscall
        slow = generic.lookup
        fail = generic.error
        per_thread = threading.local()

        def prepare() -> tuple[MapElemAttr, ctypes.c_void_p, ctypes.Array]:
            buf = ctypes.create_string_buffer(size)
            attr = MapElemAttr(map_fd=fd, value=ctypes.addressof(buf))
            per_thread.state = (attr, ctypes.c_void_p(ctypes.addressof(attr)), buf)
            return per_thread.state

        def lookup(key: bytes | None) -> bytes:
            if key.__class__ is not bytes or len(key) != key_size:
                return slow(key)
            try:
                attr, ref, buf = per_thread.state
            except AttributeError:
                attr, ref, buf = prepare()
            attr.key = key
            if syscall(nr, 1, ref, sizeof_elem) < 0:
                raise fail(get_errno(), "map_lookup_elem")
            return buf.raw

        if ACCEL is None:
            return FastOps(lookup=lookup, update=generic.update, delete=generic.delete,
                           error=fail)
        return FastOps(lookup=lookup, update=generic.update, delete=generic.delete, error=fail,
                       bpf_fd=fd, lookup_batch=functools.partial(ACCEL.lookup_batch, fd),
                       update_batch=functools.partial(ACCEL.update_batch, fd),
                       delete_batch=functools.partial(ACCEL.delete_batch, fd))

    def _ringbuf_reader(self, fd: int, size: int) -> KernelRingBufReader:
        return KernelRingBufReader(fd, size)

    def _user_ringbuf_producer(self, fd: int, size: int) -> KernelUserRingBufProducer:
        return KernelUserRingBufProducer(fd, size)

    def _perf_buffer_reader(self, fd: int, pages: int,
                            max_entries: int) -> KernelPerfBufferReader:
        return KernelPerfBufferReader(fd, max_entries, pages)

    # -- batches -------------------------------------------------------------------------------
    def _map_lookup_batch(self, fd: int, in_batch: bytes | None, count: int, elem_flags: int,
                          flags: int, delete: bool) -> BatchLookup:
        cmd = Cmd.MAP_LOOKUP_AND_DELETE_BATCH if delete else Cmd.MAP_LOOKUP_BATCH
        meta = self._meta(fd)
        if meta is None:  # not a map: the kernel refuses before touching a buffer
            ret = bpf(cmd, MapBatchAttr(map_fd=fd, count=count, elem_flags=elem_flags,
                                        flags=flags))
            raise _not_a_map(fd, -ret if ret < 0 else errno.EINVAL)
        problem = ""
        if in_batch is not None and len(in_batch) != meta.token_size:
            problem = length_problem("in_batch", len(in_batch), meta.token_size,
                                     "this map's batch token is")
            in_batch = UNREADABLE  # type: ignore[assignment]
        htab = map_traits(meta.map_type).htab_batch
        n = min(count, meta.capacity)
        keys = ctypes.create_string_buffer(n * meta.key_size)
        values = ctypes.create_string_buffer(n * meta.value_size)
        out = ctypes.create_string_buffer(max(meta.token_size, 4))
        if htab:
            out[:4] = _NO_TOKEN
        attr = MapBatchAttr(in_batch=in_batch, out_batch=ctypes.addressof(out),
                            keys=ctypes.addressof(keys), values=ctypes.addressof(values),
                            count=n, map_fd=fd, elem_flags=elem_flags, flags=flags)
        ret = bpf(cmd, attr)
        if ret < 0 and ret != -errno.ENOENT:
            if problem and ret == -errno.EFAULT:
                raise KernelError(errno.EINVAL, problem)
            # As for write batches: a count still equal to the one given was never written.
            raise KernelError(-ret, count=attr.count if attr.count < n else 0)
        got = attr.count if n else 0
        ks, vs = meta.key_size, meta.value_size
        raw_keys, raw_values = keys.raw, values.raw
        token = out.raw[:meta.token_size]
        if (htab and token == _NO_TOKEN) or (not htab and got == 0) or n == 0:
            token = None
        return BatchLookup(keys=[raw_keys[i * ks:(i + 1) * ks] for i in range(got)],
                           values=[raw_values[i * vs:(i + 1) * vs] for i in range(got)],
                           out_batch=token, end=ret == -errno.ENOENT)

    def _map_write_batch(self, fd: int, keys: list[bytes], values: list[bytes] | None,
                         elem_flags: int, flags: int) -> int:
        """The generic handlers copy and apply one element at a time: elements before the
        first of a wrong length are applied, and that one fails as the kernel's copy would."""
        cmd = Cmd.MAP_DELETE_BATCH if values is None else Cmd.MAP_UPDATE_BATCH
        meta = self._meta(fd)
        if meta is None:  # not a map: the kernel refuses before touching a buffer
            ret = bpf(cmd, MapBatchAttr(map_fd=fd, count=len(keys), elem_flags=elem_flags,
                                        flags=flags))
            raise _not_a_map(fd, -ret if ret < 0 else errno.EINVAL)
        good, problem = len(keys), ""
        if not (_all_of_size(keys, meta.key_size)
                and (values is None or _all_of_size(values, meta.value_size))):
            for i, key in enumerate(keys):
                if len(key) != meta.key_size:
                    good, problem = i, length_problem(f"keys[{i}]", len(key), meta.key_size,
                                                      "the map's key_size is")
                    break
                if values is not None and len(values[i]) != meta.value_size:
                    good, problem = i, meta.problem(f"values[{i}]", len(values[i]))
                    break
        attr = MapBatchAttr(keys=b"".join(keys[:good]), count=good, map_fd=fd,
                            values=None if values is None else b"".join(values[:good]),
                            elem_flags=elem_flags, flags=flags)
        ret = bpf(cmd, attr)
        if ret < 0:
            # The generic handlers stop at the failing element, so a count still equal to
            # the one given was never written: the command was refused before its first.
            raise KernelError(-ret, count=attr.count if attr.count < good else 0)
        done = attr.count if good else 0
        if problem:
            raise KernelError(errno.EINVAL, problem, count=done)
        return done

    # -- object info and ids -------------------------------------------------------------------
    def _obj_info(self, fd: int, info: ctypes.Structure, kind: str) -> None:
        """BPF_OBJ_GET_INFO_BY_FD into ``info``, for an fd of ``kind`` (bpf-map, bpf-prog):
        the kernel fills whichever info the fd's object has, so a program's would be read
        as a map's."""
        actual = _fd_kind(fd) or ""  # not open: the kernel answers
        if actual.startswith("bpf") and actual != kind:
            raise KernelError(errno.EINVAL, f"fd {fd} is a {actual}, not a {kind}")
        attr = InfoAttr(bpf_fd=fd, info_len=ctypes.sizeof(info), info=ctypes.addressof(info))
        ret = bpf(Cmd.OBJ_GET_INFO_BY_FD, attr)
        if ret < 0:
            raise KernelError(-ret)

    def _map_get_info(self, fd: int) -> MapInfo:
        info = BpfMapInfo()
        self._obj_info(fd, info, "bpf-map")
        return MapInfo(type=info.type, id=info.id, key_size=info.key_size,
                       value_size=info.value_size, max_entries=info.max_entries,
                       map_flags=info.map_flags, name=info.name.decode(errors="replace"),
                       ifindex=info.ifindex, map_extra=info.map_extra, btf_id=info.btf_id,
                       btf_key_type_id=info.btf_key_type_id,
                       btf_value_type_id=info.btf_value_type_id)

    def _fd_by_id(self, cmd: int, obj_id: int, open_flags: int) -> int:
        fd = bpf(cmd, GetIdAttr(start_id=obj_id, open_flags=open_flags))
        if fd < 0:
            raise KernelError(-fd)
        return _fresh(fd)

    def _map_get_fd_by_id(self, map_id: int, open_flags: int) -> int:
        return self._fd_by_id(Cmd.MAP_GET_FD_BY_ID, map_id, open_flags)

    def _map_get_next_id(self, start_id: int) -> int:
        attr = GetIdAttr(start_id=start_id)
        ret = bpf(Cmd.MAP_GET_NEXT_ID, attr)
        if ret < 0:
            raise KernelError(-ret, "no map id after this one" if ret == -errno.ENOENT else "")
        return attr.next_id

    # -- objects -------------------------------------------------------------------------------
    def _obj_pin(self, fd: int, path: str) -> None:
        ret = bpf(Cmd.OBJ_PIN, ObjPinAttr(pathname=os.fsencode(path), bpf_fd=fd))
        if ret < 0:
            raise KernelError(-ret, _pin_detail(-ret, path, pinning=True))

    def _obj_get(self, path: str, file_flags: int) -> int:
        fd = bpf(Cmd.OBJ_GET, ObjPinAttr(pathname=os.fsencode(path), file_flags=file_flags))
        if fd < 0:
            raise KernelError(-fd, _pin_detail(-fd, path))
        return _fresh(fd)

    def _obj_unpin(self, path: str) -> None:
        file_call(os.unlink, path)

    def _mkdir(self, path: str, mode: int) -> None:
        file_call(os.mkdir, path, mode)

    def _rmdir(self, path: str) -> None:
        file_call(os.rmdir, path)

    def _close(self, fd: int) -> None:
        _MAPS.pop(fd, None)
        try:
            os.close(fd)
        except OSError as exc:
            raise KernelError(exc.errno, f"fd {fd}") from None

    # -- programs ------------------------------------------------------------------------------
    def _prog_load(self, prog: ProgAttr) -> int:
        attr = ProgLoadAttr(prog_type=prog.prog_type, insn_cnt=len(prog.insns) // 8,
                            insns=prog.insns, license=prog.license,
                            expected_attach_type=prog.expected_attach_type,
                            prog_name=prog.prog_name, prog_flags=prog.prog_flags,
                            kern_version=prog.kern_version, prog_btf_fd=prog.prog_btf_fd,
                            attach_btf_id=prog.attach_btf_id)
        for what in ("func_info", "line_info"):
            data, size = getattr(prog, what), getattr(prog, f"{what}_rec_size")
            if data:
                setattr(attr, what, data)
                setattr(attr, f"{what}_rec_size", size)
                setattr(attr, f"{what}_cnt", len(data) // size)
        return _load_with_log(Cmd.PROG_LOAD, attr, prog.log_level, "")

    def _btf_load(self, data: bytes, log_level: int) -> int:
        return _load_with_log(Cmd.BTF_LOAD, BtfLoadAttr(btf=data, btf_size=len(data)),
                              log_level, "btf_")

    def _vmlinux_btf(self) -> bytes:
        try:
            with open(VMLINUX_BTF, "rb") as f:
                return f.read()
        except OSError as exc:
            raise KernelError(exc.errno or errno.ENOENT, f"{VMLINUX_BTF}: this kernel was "
                              "built without CONFIG_DEBUG_INFO_BTF") from None

    def _kfunc_btf_id(self, name: str) -> int:
        btf = self.__dict__.get("_kernel_btf")
        if btf is None:  # parsed once: the lookup by name indexes every type
            btf = self.__dict__["_kernel_btf"] = Btf.from_bytes(self._vmlinux_btf())
        try:
            return btf.find(name, Kind.FUNC)
        except KeyError:
            raise KernelError(errno.ENOENT, UNMERGED_KFUNCS.get(
                name, f"this kernel's BTF ({VMLINUX_BTF}) has no function {name!r}")) from None

    def _kernel_version(self) -> int:
        return hostinfo.host_kernel_version()

    def _kernel_config(self) -> str:
        return hostinfo.host_kernel_config()

    def _kallsyms(self) -> str:
        return hostinfo.host_kallsyms()

    def _has_syscall_wrapper(self) -> bool:
        return hostinfo.host_has_syscall_wrapper()

    def _raw_tracepoint_open(self, prog_fd: int, name: str) -> int:
        fd = bpf(Cmd.RAW_TRACEPOINT_OPEN, RawTracepointAttr(name=name.encode(),
                                                            prog_fd=prog_fd))
        if fd < 0:
            raise KernelError(-fd)
        return _fresh(fd)

    def _link_create(self, prog_fd: int, target_fd: int, attach_type: int, flags: int) -> int:
        fd = bpf(Cmd.LINK_CREATE, LinkCreateAttr(prog_fd=prog_fd, target_fd=target_fd,
                                                 attach_type=attach_type, flags=flags))
        if fd < 0:
            raise KernelError(-fd)
        return _fresh(fd)

    def _prog_test_run(self, prog_fd: int, req: TestRunRequest) -> TestRun:
        data_out = ctypes.create_string_buffer(req.data_size_out)
        ctx_out = ctypes.create_string_buffer(req.ctx_size_out)
        # A private copy: the kernel writes a syscall program's ctx back into ctx_in, and
        # the caller's bytes must stay immutable.
        ctx_buf = ctypes.create_string_buffer(req.ctx_in, len(req.ctx_in)) \
            if req.ctx_in else None
        attr = TestRunAttr(prog_fd=prog_fd, data_size_in=len(req.data_in),
                           data_size_out=req.data_size_out,
                           data_in=req.data_in or None,
                           data_out=ctypes.addressof(data_out) if req.data_size_out else None,
                           repeat=req.repeat, ctx_size_in=len(req.ctx_in),
                           ctx_size_out=req.ctx_size_out,
                           ctx_in=ctypes.addressof(ctx_buf) if ctx_buf else None,
                           ctx_out=ctypes.addressof(ctx_out) if req.ctx_size_out else None,
                           flags=req.flags, cpu=req.cpu, batch_size=req.batch_size)
        while True:
            ret = bpf(Cmd.PROG_TEST_RUN, attr)
            if ret != -errno.EINTR:  # a signal interrupted a long repeat: run it again
                break
        if ret < 0:
            raise KernelError(-ret)
        return TestRun(retval=attr.retval, duration=attr.duration,
                       data_out=data_out.raw[:min(attr.data_size_out, req.data_size_out)],
                       ctx_out=ctx_out.raw[:min(attr.ctx_size_out, req.ctx_size_out)])

    def _prog_get_info(self, fd: int) -> ProgInfo:
        info = BpfProgInfo()
        self._obj_info(fd, info, "bpf-prog")
        map_ids: tuple[int, ...] = ()
        if info.nr_map_ids:
            ids = (ctypes.c_uint32 * info.nr_map_ids)()
            info = BpfProgInfo(nr_map_ids=len(ids), map_ids=ctypes.addressof(ids))
            self._obj_info(fd, info, "bpf-prog")
            map_ids = tuple(ids[:min(info.nr_map_ids, len(ids))])
        return ProgInfo(type=info.type, id=info.id, tag=bytes(info.tag),
                        name=info.name.decode(errors="replace"),
                        xlated_prog_len=info.xlated_prog_len,
                        jited_prog_len=info.jited_prog_len, map_ids=map_ids,
                        run_time_ns=info.run_time_ns, run_cnt=info.run_cnt)

    def _prog_get_fd_by_id(self, prog_id: int) -> int:
        return self._fd_by_id(Cmd.PROG_GET_FD_BY_ID, prog_id, 0)

    def _attach_tracepoint(self, prog_fd: int, category: str, name: str) -> int:
        try:
            perf_fd = perf_event.open_tracepoint(perf_event.tracepoint_id(category, name))
        except OSError as exc:
            raise KernelError(exc.errno or errno.EINVAL, exc.strerror or "") from None
        try:
            perf_event.attach_bpf(perf_fd, prog_fd)
        except OSError as exc:
            os.close(perf_fd)
            raise KernelError(exc.errno, "the program must be a tracepoint program "
                              "(ProgType.TRACEPOINT)" if exc.errno == errno.EINVAL else ""
                              ) from None
        return _fresh(perf_fd)


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


def _load_with_log(cmd: int, attr: ctypes.Structure, log_level: int, prefix: str) -> int:
    """BPF_PROG_LOAD or BPF_BTF_LOAD (``prefix`` "btf_" names its log fields): first without
    a log unless one is asked for; on a refusal again with a log, grown while truncated."""
    fd = -errno.EINVAL
    if not log_level:
        fd = bpf(cmd, attr)
        if fd >= 0:
            return _fresh(fd)
        if -fd not in (errno.EACCES, errno.EINVAL):
            raise KernelError(-fd)
    first_err = -fd
    for size in _LOG_SIZES:
        log = ctypes.create_string_buffer(size)
        setattr(attr, f"{prefix}log_level", log_level or 1)
        setattr(attr, f"{prefix}log_size", size)
        setattr(attr, f"{prefix}log_buf", ctypes.addressof(log))
        fd = bpf(cmd, attr)
        if fd >= 0:
            return _fresh(fd)
        if -fd != errno.ENOSPC:
            break
    text = log.value.decode(errors="replace")
    raise KernelError(-fd if -fd != errno.ENOSPC else first_err, _verifier_reason(text),
                      log=text)


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
