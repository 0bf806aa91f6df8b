"""The System contract: one object shaped like bpf(2), written once; backends only translate.

``System`` is a base class in the manner of CPython's ``selectors.BaseSelector``: each public
command is implemented here, once, and calls a small backend method (``_map_lookup_elem``, ...)
that only translates it, to bpf(2) (``pybpf.kernel``) or to the emulated subsystem
(``pybpf.emulated``). Rules every System keeps (the kernel is the oracle):

- Arguments are the kernel's: integers from ``pybpf.uapi``, keys and values as ``bytes``
  (bytes-like accepted). Per-CPU values are ``round_up(value_size, 8) * num_possible_cpus``
  bytes; map-in-map and prog-array values are 4-byte fds on update and 4-byte ids on lookup.
- Normalised once, here (with ``pybpf.attrs``): an argument that cannot be put into its attr
  field is refused before a backend sees it, so nothing is wrapped or cut the way ctypes
  would: an int outside its u32/u64 field (flags too: a negative flag is EINVAL), a key,
  value or token that is not bytes-like, a name over 16 bytes, a path with a NUL byte
  (EINVAL); an fd that is not an int of the fd range (EBADF; EBADFD for OBJ_GET_INFO, as the
  kernel says for a closed fd).
- Everything else is checked where the kernel checks it, in syscall.c's order, so the same
  errno wins on both backends: flags some commands test first, the fd (not open -> EBADF, not
  a map -> EINVAL), permissions (read-only, write-only, frozen -> EPERM), then the key and
  value as the kernel copies them, then the map type's op.
- A key or value whose length is not the map's is refused with EINVAL, saying both lengths, at
  the point where the kernel copies it. The kernel cannot see a length: the kernel backend
  hands it an unreadable address instead (``UNREADABLE``), so the kernel itself answers every
  earlier check and its EFAULT at the copy becomes that EINVAL; the emulated backend checks at
  the same point. So a wrong-size key on a read-only or frozen map is EPERM on both, as the
  kernel answers; a key given to a keyless map (queue, stack, bloom filter) is EINVAL, as the
  kernel answers (``__bpf_copy_key``), after the same permission checks.
- Failures: backends raise ``errors.KernelError``; ``_fail`` turns it into the public
  ``BPFError`` (command, object, detail, ``count`` for batches) here, once.
- Batch lookups return what the kernel wrote even when it ended with ENOENT (``end=True``);
  a write batch that stops early raises with ``count`` = elements done before the error, and
  a refused batch (a lookup, or a write refused before its first element) with ``count`` 0.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import functools
import os
import socket
from collections.abc import Callable, Iterator, Sequence

from .attrs import (
    INT_MAX,
    U32_MAX,
    MapAttr,
    ProgAttr,
    TestRunRequest,
    bytes_arg,
    fd_arg,
    key_arg,
    name_arg,
    pin_path,
    sock_fd_arg,
    timeout_arg,
    unsigned,
)
from .errors import (
    BPFError,
    KernelError,
    KeyNotFoundError,
    VerifierError,
    bpf_error,
    errno_name,
    map_description,
    prog_description,
    strerror,
)
from .perf_buffer import PerfBufferReader
from .records import BatchLookup, FastOps, MapInfo, ProgInfo, TestRun
from .ringbuf import RingBufReader, UserRingBufProducer
from .topology import Topology
from .uapi import NUMA_NO_NODE, MapType, map_traits

# ``flags is _NO_FLAGS``: the int 0 (CPython keeps one), the flags of nearly every call.
_NO_FLAGS = 0


def _bytes_list(items: Sequence[object], what: str) -> list[bytes]:
    """A batch's keys or values as a list of bytes (``what[i]`` named in an error)."""
    items = items if items.__class__ is list else list(items)
    if not set(map(type, items)) <= _BYTES_ONLY:
        items = list(items)  # a copy: the caller's list stays as it was
        for i, item in enumerate(items):
            items[i] = bytes_arg(item, f"{what}[{i}]")
    return items  # type: ignore[return-value]


_BYTES_ONLY = frozenset({bytes})


def map_describe(info: MapInfo) -> str:
    return map_description(info.type, info.name, info.id)


class System(abc.ABC):
    """The bpf(2)-shaped interface: commands in, bytes out, ``BPFError`` on failure.

    Subclasses (the backends) implement the machine properties and the underscored
    translation methods; every public command is here.
    """

    name: str = "abstract"
    # The kernel backend's refused creates say only an errno; ``pybpf.backends`` sets this to
    # explain_create_refusal(errno, attr) -> detail ("" when it cannot tell).
    explain_create_refusal: Callable[[int, MapAttr], str] | None = None

    # -- machine -----------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def num_possible_cpus(self) -> int:
        """Number of possible CPUs: per-CPU values have this many slots."""

    @property
    @abc.abstractmethod
    def topology(self) -> Topology:
        """CPU to NUMA node mapping of this (real or emulated) machine."""

    @abc.abstractmethod
    def on_cpu(self, cpu: int) -> contextlib.AbstractContextManager[None]:
        """Run the body on ``cpu`` (kernel: pin this thread; emulated: set its current CPU)."""

    @abc.abstractmethod
    def current_cpu(self) -> int:
        """The CPU the calling thread runs on."""

    # -- the error boundary ------------------------------------------------------------------
    def _fail(self, exc: KernelError, command: str, where: str = "") -> BPFError:
        """The public error for ``exc`` from ``command`` on ``where`` (the object's words)."""
        return bpf_error(exc.errno, command, map=where, detail=exc.detail, count=exc.count)

    def _map_fail(self, exc: KernelError, command: str, fd: object) -> BPFError:
        """The public error of a command on map ``fd``, naming the map as its info does."""
        info = None
        if isinstance(fd, int) and not isinstance(fd, bool) and -(1 << 31) <= fd < 1 << 31:
            with contextlib.suppress(KernelError):
                info = self._map_get_info(fd)
        if (info is not None and not exc.detail and exc.errno == errno.E2BIG
                and map_traits(info.type).indexed
                and command in ("map_update_elem", "map_update_batch")):
            exc.detail = (f"index out of range: the map's keys are 0..{info.max_entries - 1} "
                          "(max_entries)")
        return self._fail(exc, command, map_describe(info) if info is not None else "")

    def map_error(self, fd: int, err: int, command: str, count: int | None = None) -> BPFError:
        """The error for ``err`` from ``command`` on map ``fd`` when the call was made some
        faster way (``FastOps.error``): the same exception as the command's own."""
        return self._map_fail(KernelError(err, count=count), command, fd)

    # -- maps --------------------------------------------------------------------------------
    def map_create(self, map_type: int, key_size: int, value_size: int, max_entries: int,
                   map_flags: int = 0, inner_map_fd: int = 0, numa_node: int = 0,
                   map_name: bytes | str = b"", map_extra: int = 0, btf_fd: int = 0,
                   btf_key_type_id: int = 0, btf_value_type_id: int = 0) -> int:
        """BPF_MAP_CREATE; returns the new map's fd. ``numa_node`` is read with
        BPF_F_NUMA_NODE only; NUMA_NO_NODE (-1) is the u32 field's 0xFFFFFFFF. With type ids
        (of the BTF loaded as ``btf_fd``) the map's key and value are typed (map_check_btf)."""
        try:
            attr = MapAttr(
                unsigned(map_type, 32, "map_type"), unsigned(key_size, 32, "key_size"),
                unsigned(value_size, 32, "value_size"),
                unsigned(max_entries, 32, "max_entries"),
                unsigned(map_flags, 32, "map_flags"),
                unsigned(inner_map_fd, 32, "inner_map_fd"),
                U32_MAX if numa_node == NUMA_NO_NODE and isinstance(numa_node, int)
                else unsigned(numa_node, 32, "numa_node"),
                name_arg(map_name, "map_name"), unsigned(map_extra, 64, "map_extra"),
                unsigned(btf_fd, 32, "btf_fd"), unsigned(btf_key_type_id, 32, "btf_key_type_id"),
                unsigned(btf_value_type_id, 32, "btf_value_type_id"))
        except KernelError as exc:
            what = f"type {map_type!r}" if not isinstance(map_type, int) else \
                MapAttr(map_type, 0, 0, 0).describe()
            raise self._fail(exc, "map_create", what) from None
        try:
            return self._map_create(attr)
        except KernelError as exc:
            if not exc.detail and self.explain_create_refusal is not None:
                exc.detail = self.explain_create_refusal(exc.errno, attr)
            raise self._fail(exc, "map_create", attr.describe()) from None

    def map_lookup_elem(self, fd: int, key: bytes | None, flags: int = 0, *,
                        value: bytes | None = None) -> bytes:
        """BPF_MAP_LOOKUP_ELEM. ``value`` is the input of a map that looks up by value
        (BLOOM_FILTER peek, key None): ENOENT when absent, else ``value`` comes back."""
        try:
            # The hot case in one cheap test; anything else is normalised (or refused).
            if not (fd.__class__ is int and flags is _NO_FLAGS and value is None
                    and key.__class__ is bytes and -0x8000_0000 <= fd < 0x8000_0000):
                fd = fd_arg(fd)
                key = key_arg(key)
                flags = unsigned(flags, 64, "flags")
                if value is not None:
                    value = bytes_arg(value, "value")
            return self._map_lookup_elem(fd, key, flags, value)
        except KernelError as exc:
            raise self._map_fail(exc, "map_lookup_elem", fd) from None

    def map_update_elem(self, fd: int, key: bytes | None, value: bytes, flags: int = 0, *,
                        target_cpu: int | None = None) -> None:
        """BPF_MAP_UPDATE_ELEM (flags: BPF_ANY, BPF_NOEXIST, BPF_EXIST, BPF_F_LOCK).

        ``target_cpu`` is the attr field of the unmerged sockmap CPU-affinity patch (v1, 2024:
        the CPU that runs the socket's psock backlog work; None leaves it unset). Only the
        emulated backend has it; the kernel answers EINVAL (a non-zero attr byte it does not
        know). The reviewers' design, the CPU in the upper 32 bits of ``flags`` with
        ``BPF_F_SOCKMAP_TARGET_CPU``, goes through ``flags``."""
        if target_cpu is not None:
            try:
                cpu = unsigned(target_cpu, 64, "target_cpu")
                fd = fd_arg(fd)
                self._map_update_elem_target_cpu(fd, key_arg(key), bytes_arg(value, "value"),
                                                 unsigned(flags, 64, "flags"), cpu)
            except KernelError as exc:
                raise self._map_fail(exc, "map_update_elem", fd) from None
            return
        try:
            if not (fd.__class__ is int and value.__class__ is bytes
                    and key.__class__ is bytes and -0x8000_0000 <= fd < 0x8000_0000
                    and (flags is _NO_FLAGS or flags.__class__ is int
                         and 0 < flags <= 0xFFFF_FFFF_FFFF_FFFF)):
                fd = fd_arg(fd)
                key = key_arg(key)
                value = bytes_arg(value, "value")
                flags = unsigned(flags, 64, "flags")
            self._map_update_elem(fd, key, value, flags)
        except KernelError as exc:
            raise self._map_fail(exc, "map_update_elem", fd) from None

    def map_delete_elem(self, fd: int, key: bytes | None) -> None:
        """BPF_MAP_DELETE_ELEM."""
        try:
            if not (fd.__class__ is int and key.__class__ is bytes
                    and -0x8000_0000 <= fd < 0x8000_0000):
                fd = fd_arg(fd)
                key = key_arg(key)
            self._map_delete_elem(fd, key)
        except KernelError as exc:
            raise self._map_fail(exc, "map_delete_elem", fd) from None

    def map_get_next_key(self, fd: int, key: bytes | None) -> bytes:
        """Next key after ``key``; None (or a missing key, for most types) gives the first."""
        try:
            fd = fd_arg(fd)
            return self._map_get_next_key(fd, key_arg(key))
        except KernelError as exc:
            raise self._map_fail(exc, "map_get_next_key", fd) from None

    def map_lookup_and_delete_elem(self, fd: int, key: bytes | None, flags: int = 0) -> bytes:
        """BPF_MAP_LOOKUP_AND_DELETE_ELEM (queue and stack: pop, key None)."""
        try:
            fd = fd_arg(fd)
            return self._map_lookup_and_delete_elem(fd, key_arg(key),
                                                    unsigned(flags, 64, "flags"))
        except KernelError as exc:
            raise self._map_fail(exc, "map_lookup_and_delete_elem", fd) from None

    def map_freeze(self, fd: int) -> None:
        """BPF_MAP_FREEZE: syscalls may no longer write the map."""
        try:
            self._map_freeze(fd_arg(fd))
        except KernelError as exc:
            raise self._map_fail(exc, "map_freeze", fd) from None

    def fast_ops(self, fd: int) -> FastOps:
        """The hot-path capability of map ``fd`` (see ``FastOps``): here the System commands
        themselves; a backend overrides it with what it can do faster."""
        return FastOps(lookup=functools.partial(self.map_lookup_elem, fd),
                       update=functools.partial(self.map_update_elem, fd),
                       delete=functools.partial(self.map_delete_elem, fd),
                       error=functools.partial(self.map_error, fd))

    # -- ring buffers ------------------------------------------------------------------------
    def ringbuf_reader(self, fd: int) -> RingBufReader:
        """A consumer of RINGBUF map ``fd`` (libbpf's ring_buffer__add): iterate, ``read`` or
        ``poll`` the records programs commit (``pybpf.ringbuf``). It maps the ring itself,
        so it stays valid after ``fd`` is closed, until its own ``close``. A map of another
        type: EINVAL, as libbpf answers."""
        try:
            fd = fd_arg(fd)
            info = self._map_get_info(fd)
            if info.type != MapType.RINGBUF:
                raise KernelError(errno.EINVAL, f"not a ring buffer: a reader reads "
                                  f"BPF_MAP_TYPE_RINGBUF maps, this is {map_describe(info)}")
            return self._ringbuf_reader(fd, info.max_entries)
        except KernelError as exc:
            raise self._map_fail(exc, "ringbuf_reader", fd) from None

    def _ringbuf_reader(self, fd: int, size: int) -> RingBufReader:
        """The backend's reader of ring buffer ``fd`` (``size`` bytes of data); a backend
        that can read ring buffers overrides this."""
        raise KernelError(errno.EOPNOTSUPP, f"the {self.name} backend has no ring buffer "
                          "reader")

    def user_ringbuf_producer(self, fd: int) -> UserRingBufProducer:
        """A producer of USER_RINGBUF map ``fd`` (libbpf's user_ring_buffer__new): ``reserve``,
        ``reserve_blocking``, ``submit``, ``discard`` the samples programs drain with
        bpf_user_ringbuf_drain (``pybpf.ringbuf``). It maps the ring itself, so it stays valid
        after ``fd`` is closed, until its own ``close``. A map of another type: EINVAL, as
        libbpf answers."""
        try:
            fd = fd_arg(fd)
            info = self._map_get_info(fd)
            if info.type != MapType.USER_RINGBUF:
                raise KernelError(errno.EINVAL, f"not a user ring buffer: a producer writes "
                                  f"BPF_MAP_TYPE_USER_RINGBUF maps, this is "
                                  f"{map_describe(info)}")
            return self._user_ringbuf_producer(fd, info.max_entries)
        except KernelError as exc:
            raise self._map_fail(exc, "user_ringbuf_producer", fd) from None

    def _user_ringbuf_producer(self, fd: int, size: int) -> UserRingBufProducer:
        """The backend's producer of user ring buffer ``fd`` (``size`` bytes of data); a
        backend that can write user ring buffers overrides this."""
        raise KernelError(errno.EOPNOTSUPP, f"the {self.name} backend has no user ring "
                          "buffer producer")

    def perf_buffer_reader(self, fd: int, pages: int = 8) -> PerfBufferReader:
        """A reader of what programs send to PERF_EVENT_ARRAY map ``fd`` with
        bpf_perf_event_output (libbpf's perf_buffer__new): a BPF output event per online CPU
        the map has a slot for, in that slot, each with a ring of ``pages`` pages (a power of
        two); read, poll, lost counts: ``pybpf.perf_buffer``. Closing the reader empties the
        slots. A map of another type or a page count that is not a power of two: EINVAL."""
        try:
            fd = fd_arg(fd)
            if not isinstance(pages, int) or isinstance(pages, bool) or pages <= 0 \
                    or pages & (pages - 1):
                raise KernelError(errno.EINVAL, f"pages must be a power of two, got {pages!r}")
            info = self._map_get_info(fd)
            if info.type != MapType.PERF_EVENT_ARRAY:
                raise KernelError(errno.EINVAL, f"not a perf event array: a perf buffer reads "
                                  f"BPF_MAP_TYPE_PERF_EVENT_ARRAY maps, this is "
                                  f"{map_describe(info)}")
            return self._perf_buffer_reader(fd, pages, info.max_entries)
        except KernelError as exc:
            raise self._map_fail(exc, "perf_buffer_reader", fd) from None

    def _perf_buffer_reader(self, fd: int, pages: int, max_entries: int) -> PerfBufferReader:
        """The backend's perf buffer reader of map ``fd``; a backend that has one overrides
        this."""
        raise KernelError(errno.EOPNOTSUPP, f"the {self.name} backend has no perf buffer "
                          "reader")

    # -- batches -----------------------------------------------------------------------------
    def _lookup_batch(self, command: str, fd: int, in_batch: bytes | None, count: int,
                      elem_flags: int, flags: int, delete: bool) -> BatchLookup:
        try:
            fd = fd_arg(fd)
            in_batch = None if in_batch is None else bytes_arg(in_batch, "in_batch")
            return self._map_lookup_batch(fd, in_batch, unsigned(count, 32, "count"),
                                          unsigned(elem_flags, 64, "elem_flags"),
                                          unsigned(flags, 64, "flags"), delete)
        except KernelError as exc:
            # A refused lookup returns no element: the kernel leaves count as given (refused
            # before the handler) or writes 0 (after its put_user(0)), never more.
            if exc.count is None:
                exc.count = 0
            raise self._map_fail(exc, command, fd) from None

    def map_lookup_batch(self, fd: int, in_batch: bytes | None, count: int,
                         elem_flags: int = 0, flags: int = 0) -> BatchLookup:
        """BPF_MAP_LOOKUP_BATCH: up to ``count`` elements after the token ``in_batch``."""
        return self._lookup_batch("map_lookup_batch", fd, in_batch, count, elem_flags, flags,
                                  delete=False)

    def map_lookup_and_delete_batch(self, fd: int, in_batch: bytes | None, count: int,
                                    elem_flags: int = 0, flags: int = 0) -> BatchLookup:
        """BPF_MAP_LOOKUP_AND_DELETE_BATCH."""
        return self._lookup_batch("map_lookup_and_delete_batch", fd, in_batch, count,
                                  elem_flags, flags, delete=True)

    def _write_batch(self, command: str, fd: int, keys: Sequence[bytes],
                     values: Sequence[bytes] | None, elem_flags: int, flags: int) -> int:
        try:
            fd = fd_arg(fd)
            keys = _bytes_list(keys, "keys")
            if values is not None:
                values = _bytes_list(values, "values")
                if len(values) != len(keys):
                    raise KernelError(errno.EINVAL, f"{len(keys)} keys but {len(values)} "
                                      "values", count=0)
            unsigned(len(keys), 32, "count")
            return self._map_write_batch(fd, keys, values, unsigned(elem_flags, 64,
                                                                     "elem_flags"),
                                         unsigned(flags, 64, "flags"))
        except KernelError as exc:
            if exc.count is None:
                exc.count = 0
            raise self._map_fail(exc, command, fd) from None

    def map_update_batch(self, fd: int, keys: Sequence[bytes], values: Sequence[bytes],
                         elem_flags: int = 0, flags: int = 0) -> int:
        """BPF_MAP_UPDATE_BATCH; returns the count updated; on error raises with ``count``
        set to the elements updated before it."""
        return self._write_batch("map_update_batch", fd, keys, values, elem_flags, flags)

    def map_delete_batch(self, fd: int, keys: Sequence[bytes], elem_flags: int = 0,
                         flags: int = 0) -> int:
        """BPF_MAP_DELETE_BATCH; returns the count deleted (``count`` on error, as above)."""
        return self._write_batch("map_delete_batch", fd, keys, None, elem_flags, flags)

    # -- info and ids ------------------------------------------------------------------------
    def map_get_info(self, fd: int) -> MapInfo:
        """BPF_OBJ_GET_INFO_BY_FD on a map (EBADFD for an fd that is not open)."""
        try:
            return self._map_get_info(fd_arg(fd, errno.EBADFD))
        except KernelError as exc:
            raise self._fail(exc, "map_get_info", f"fd {fd}") from None

    def map_get_fd_by_id(self, map_id: int, open_flags: int = 0) -> int:
        """BPF_MAP_GET_FD_BY_ID (open_flags: BPF_F_RDONLY or BPF_F_WRONLY)."""
        try:
            open_flags = unsigned(open_flags, 32, "open_flags")
            if not isinstance(map_id, int) or not 0 <= map_id <= U32_MAX:
                raise KernelError(errno.ENOENT, f"no map has id {map_id!r}")
            return self._map_get_fd_by_id(int(map_id), open_flags)
        except KernelError as exc:
            raise self._fail(exc, "map_get_fd_by_id", f"id {map_id}") from None

    def map_get_next_id(self, start_id: int) -> int:
        """The next map id after ``start_id``; ENOENT past the last, EINVAL from INT_MAX on
        (bpf_obj_get_next_id)."""
        try:
            start_id = unsigned(start_id, 32, "start_id")
            if start_id >= INT_MAX:
                raise KernelError(errno.EINVAL, f"start_id {start_id} is not below INT_MAX")
            return self._map_get_next_id(start_id)
        except KernelError as exc:
            raise self._fail(exc, "map_get_next_id") from None

    # -- objects -----------------------------------------------------------------------------
    def obj_pin(self, fd: int, path: str | bytes | os.PathLike) -> None:
        """BPF_OBJ_PIN: pin map or program ``fd`` at ``path`` on bpffs."""
        try:
            fd = fd_arg(fd)
            self._obj_pin(fd, pin_path(path))
        except KernelError as exc:
            raise self._fail(exc, "obj_pin", f"fd {fd}") from None

    def obj_get(self, path: str | bytes | os.PathLike, file_flags: int = 0) -> int:
        """BPF_OBJ_GET: a new fd on what is pinned at ``path``."""
        try:
            file_flags = unsigned(file_flags, 32, "file_flags")
            return self._obj_get(pin_path(path), file_flags)
        except KernelError as exc:
            raise self._fail(exc, "obj_get") from None

    def obj_unpin(self, path: str | bytes | os.PathLike) -> None:
        """unlink(2) of a pin: the pinned object loses the pin's reference."""
        try:
            self._obj_unpin(pin_path(path))
        except KernelError as exc:
            raise self._fail(exc, "obj_unpin") from None

    def mkdir(self, path: str | bytes | os.PathLike, mode: int = 0o700) -> None:
        """mkdir(2), for directories of pins on bpffs (``mode`` 0700: libbpf's for the
        directories it makes)."""
        try:
            self._mkdir(pin_path(path), unsigned(mode, 32, "mode"))
        except KernelError as exc:
            raise self._fail(exc, "mkdir") from None

    def rmdir(self, path: str | bytes | os.PathLike) -> None:
        """rmdir(2) of an empty directory (of pins, on bpffs)."""
        try:
            self._rmdir(pin_path(path))
        except KernelError as exc:
            raise self._fail(exc, "rmdir") from None

    def close(self, fd: int) -> None:
        """close(2) of an fd this System gave out (a map, program or attachment)."""
        try:
            self._close(fd_arg(fd))
        except KernelError as exc:
            raise self._fail(exc, "close") from None

    # -- programs ----------------------------------------------------------------------------
    def prog_load(self, prog_type: int, insns: bytes, license: str | bytes = "GPL",
                  expected_attach_type: int = 0, prog_name: bytes | str = b"",
                  prog_flags: int = 0, log_level: int = 0, *, kern_version: int = 0,
                  prog_btf_fd: int = 0, func_info: bytes = b"", func_info_rec_size: int = 8,
                  line_info: bytes = b"", line_info_rec_size: int = 16,
                  attach_btf_id: int = 0) -> int:
        """BPF_PROG_LOAD of raw instructions (map fds already in the lddw immediates).
        With ``prog_btf_fd`` (a loaded BTF), ``func_info`` and ``line_info`` are packed
        records (bpf_func_info, bpf_line_info) whose insn_off counts instructions.
        A verifier refusal is a ``VerifierError`` with the log."""
        try:
            if isinstance(license, str):
                license = license.encode()
            if not isinstance(license, bytes | bytearray):
                raise KernelError(errno.EINVAL, f"license must be a str such as 'GPL', got "
                                  f"{license!r}")
            code = bytes_arg(insns, "insns")
            if len(code) % 8:
                raise KernelError(errno.EINVAL, f"{len(code)} bytes of instructions is not "
                                  "a multiple of 8")
            infos = {what: (bytes_arg(data, what), unsigned(size, 32, f"{what}_rec_size"))
                     for what, data, size in (("func_info", func_info, func_info_rec_size),
                                              ("line_info", line_info, line_info_rec_size))}
            for what, (data, size) in infos.items():
                if data and (not size or len(data) % size):
                    raise KernelError(errno.EINVAL, f"{what} is {len(data)} bytes, not whole "
                                      f"{size}-byte records")
            attr = ProgAttr(unsigned(prog_type, 32, "prog_type"), code, bytes(license),
                            unsigned(expected_attach_type, 32, "expected_attach_type"),
                            name_arg(prog_name, "prog_name"),
                            unsigned(prog_flags, 32, "prog_flags"),
                            unsigned(log_level, 32, "log_level"),
                            unsigned(kern_version, 32, "kern_version"),
                            unsigned(prog_btf_fd, 32, "prog_btf_fd"), *infos["func_info"],
                            *infos["line_info"], unsigned(attach_btf_id, 32, "attach_btf_id"))
        except KernelError as exc:
            raise self._fail(exc, "prog_load", f"program type {prog_type!r}") from None
        try:
            return self._prog_load(attr)
        except KernelError as exc:
            what = attr.describe()
            if exc.log is None or exc.errno not in (errno.EACCES, errno.EINVAL):
                raise self._fail(exc, "prog_load", what) from None
            message = f"prog load on {what}: {strerror(exc.errno)} ({errno_name(exc.errno)})"
            if exc.detail:
                message += f": verifier: {exc.detail}"
            raise VerifierError(exc.errno, message, log=exc.log, command="prog_load",
                                map=what, detail=exc.detail,
                                hint="the verifier rejected the program; its log says why"
                                ) from None

    def prog_test_run(self, prog_fd: int, data_in: bytes = b"", *,
                      data_size_out: int | None = None, ctx_in: bytes | None = None,
                      ctx_size_out: int | None = None, repeat: int = 1, flags: int = 0,
                      cpu: int = 0, batch_size: int = 0) -> TestRun:
        """BPF_PROG_TEST_RUN. ``data_size_out`` defaults to room for the input plus a page
        (programs may grow the packet); ``ctx_size_out`` to the size of ``ctx_in``.
        ``batch_size`` is for XDP runs in live-frames mode (``flags`` has
        BPF_F_TEST_XDP_LIVE_FRAMES: every frame really goes where the program sends it;
        ``data_size_out`` and ``ctx_size_out`` must then be 0)."""
        try:
            prog_fd = fd_arg(prog_fd)
            data = bytes_arg(data_in, "data_in")
            ctx = b"" if ctx_in is None else bytes_arg(ctx_in, "ctx_in")
            if data_size_out is None:
                data_size_out = len(data) + 4096 if data else 0
            if ctx_size_out is None:
                ctx_size_out = len(ctx)
            request = TestRunRequest(
                data, unsigned(data_size_out, 32, "data_size_out"), ctx,
                unsigned(ctx_size_out, 32, "ctx_size_out"), unsigned(repeat, 32, "repeat"),
                unsigned(flags, 32, "flags"), unsigned(cpu, 32, "cpu"),
                unsigned(batch_size, 32, "batch_size"))
            return self._prog_test_run(prog_fd, request)
        except KernelError as exc:
            raise self._fail(exc, "prog_test_run", self._prog_where(prog_fd)) from None

    def prog_get_info(self, fd: int) -> ProgInfo:
        """BPF_OBJ_GET_INFO_BY_FD on a program (EBADFD for an fd that is not open)."""
        try:
            return self._prog_get_info(fd_arg(fd, errno.EBADFD))
        except KernelError as exc:
            raise self._fail(exc, "prog_get_info", f"fd {fd}") from None

    def prog_get_fd_by_id(self, prog_id: int) -> int:
        """BPF_PROG_GET_FD_BY_ID."""
        try:
            if not isinstance(prog_id, int) or not 0 <= prog_id <= U32_MAX:
                raise KernelError(errno.ENOENT, f"no program has id {prog_id!r}")
            return self._prog_get_fd_by_id(int(prog_id))
        except KernelError as exc:
            raise self._fail(exc, "prog_get_fd_by_id", f"id {prog_id}") from None

    def attach_tracepoint(self, prog_fd: int, category: str, name: str) -> int:
        """Attach a tracepoint program; returns a handle (an fd) that ``close`` detaches."""
        where = f"tracepoint {category}/{name}"
        try:
            prog_fd = fd_arg(prog_fd)
            for part in (category, name):
                if not isinstance(part, str) or not part or "/" in part or "\0" in part:
                    raise KernelError(errno.EINVAL, f"{part!r} is not a tracepoint category "
                                      "or name (e.g. 'syscalls', 'sys_enter_getpid')")
            return self._attach_tracepoint(prog_fd, category, name)
        except KernelError as exc:
            raise self._fail(exc, "attach_tracepoint", where) from None

    def raw_tracepoint_open(self, prog_fd: int, name: str) -> int:
        """BPF_RAW_TRACEPOINT_OPEN to ``name`` (``sys_enter``); ``close`` the fd detaches."""
        try:
            prog_fd = fd_arg(prog_fd)
            if not isinstance(name, str) or not name or "\0" in name:
                raise KernelError(errno.EINVAL, f"{name!r} is not a raw tracepoint name "
                                  "(e.g. 'sys_enter')")
            return self._raw_tracepoint_open(prog_fd, name)
        except KernelError as exc:
            raise self._fail(exc, "raw_tracepoint_open", f"raw tracepoint {name}") from None

    def link_create(self, prog_fd: int, target_fd: int, attach_type: int,
                    flags: int = 0) -> int:
        """BPF_LINK_CREATE of ``prog_fd`` on ``target_fd`` (an ifindex for XDP) as
        ``attach_type``; ``close`` the link's fd detaches."""
        try:
            return self._link_create(fd_arg(prog_fd), unsigned(target_fd, 32, "target_fd"),
                                     unsigned(attach_type, 32, "attach_type"),
                                     unsigned(flags, 32, "flags"))
        except KernelError as exc:
            raise self._fail(exc, "link_create", f"target {target_fd}") from None

    # -- sockmap: attaching to a map, the sockets' data path ---------------------------------
    def prog_attach(self, prog_fd: int, target_fd: int, attach_type: int,
                    attach_flags: int = 0, replace_prog_fd: int = 0) -> None:
        """BPF_PROG_ATTACH of ``prog_fd`` to ``target_fd`` as ``attach_type`` (SK_SKB and
        SK_MSG programs: ``target_fd`` is a SOCKMAP or SOCKHASH fd; sockets inserted after
        the attach take the program)."""
        try:
            self._prog_attach(fd_arg(prog_fd), fd_arg(target_fd),
                              unsigned(attach_type, 32, "attach_type"),
                              unsigned(attach_flags, 32, "attach_flags"),
                              unsigned(replace_prog_fd, 32, "replace_prog_fd"))
        except KernelError as exc:
            raise self._map_fail(exc, "prog_attach", target_fd) from None

    def prog_detach(self, target_fd: int, attach_type: int, prog_fd: int = 0) -> None:
        """BPF_PROG_DETACH of ``prog_fd`` (attached as ``attach_type``) from ``target_fd``."""
        try:
            self._prog_detach(fd_arg(target_fd), unsigned(attach_type, 32, "attach_type"),
                              unsigned(prog_fd, 32, "prog_fd"))
        except KernelError as exc:
            raise self._map_fail(exc, "prog_detach", target_fd) from None

    def sock_recv(self, sock: int | socket.socket, bufsize: int, *,
                  timeout: float | None = None) -> bytes:
        """Read up to ``bufsize`` bytes from a socket as its application does (recvmsg):
        for a socket in a sockmap with a psock, what the psock delivered to it (data passed
        by its verdict, or redirected to its ingress) before the socket's own queue, as
        tcp_bpf_recvmsg reads. b"" at end of stream; ``timeout`` seconds at most (None:
        block; 0: EAGAIN when nothing is there)."""
        try:
            return self._sock_recv(sock_fd_arg(sock), unsigned(bufsize, 31, "bufsize"),
                                   timeout_arg(timeout))
        except KernelError as exc:
            raise self._fail(exc, "sock_recv", f"socket fd {sock!r}") from None

    def sock_send(self, sock: int | socket.socket, data: bytes, *,
                  timeout: float | None = None) -> int:
        """Send ``data`` on a socket as its application does (sendmsg): for a socket in a
        sockmap with an SK_MSG verdict program, the program sees each message first
        (tcp_bpf_sendmsg: pass, drop -> EACCES, or redirect). Returns the bytes taken."""
        try:
            return self._sock_send(sock_fd_arg(sock), bytes_arg(data, "data"),
                                   timeout_arg(timeout))
        except KernelError as exc:
            raise self._fail(exc, "sock_send", f"socket fd {sock!r}") from None

    # -- BTF ---------------------------------------------------------------------------------
    def btf_load(self, btf: bytes, log_level: int = 0) -> int:
        """BPF_BTF_LOAD of a BTF blob (``pybpf.btf.Btf.to_bytes()``); returns its fd. A
        refusal by the kernel's BTF checker is a ``VerifierError`` with its log."""
        try:
            data = bytes_arg(btf, "btf")
            level = unsigned(log_level, 32, "log_level")
            return self._btf_load(data, level)
        except KernelError as exc:
            if exc.log is None or exc.errno != errno.EINVAL:
                raise self._fail(exc, "btf_load", "BTF") from None
            raise VerifierError(exc.errno, f"btf load: {strerror(exc.errno)}: {exc.detail}",
                                log=exc.log, command="btf_load", map="BTF", detail=exc.detail,
                                hint="the kernel's BTF checker refused the type information; "
                                     "its log says why") from None

    def vmlinux_btf(self) -> bytes:
        """The kernel's own BTF, what CO-RE relocates against: /sys/kernel/btf/vmlinux on
        the kernel backend, the types the emulated backend models (program contexts) on it."""
        try:
            return self._vmlinux_btf()
        except KernelError as exc:
            raise self._fail(exc, "vmlinux_btf") from None

    def kfunc_btf_id(self, name: str) -> int:
        """The BTF id of kernel function ``name`` in this system's kernel BTF, what a kfunc
        call's imm names (``call_kfunc("name")`` gets it at ``Program.load``). A kernel
        without it: ENOENT, as a BTF lookup by name answers."""
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"a kernel function name is a C identifier (str), not {name!r}")
        try:
            return self._kfunc_btf_id(name)
        except KernelError as exc:
            raise self._fail(exc, "kfunc_btf_id", f"kernel function {name}") from None

    # -- what a kernel says about itself outside bpf(2) (an object's externs) -----------------
    def kernel_version(self) -> int:
        """LINUX_KERNEL_VERSION, ``KERNEL_VERSION(major, minor, patch)``, as libbpf's
        get_kernel_version() computes it (``pybpf.hostinfo.kernel_version_code``); 0 when
        the release names no three numbers."""
        return self._kernel_version()

    def kernel_config(self) -> str:
        """The kernel's build config (``.config`` text) that ``__kconfig`` externs read;
        ENOENT when the kernel does not publish it."""
        try:
            return self._kernel_config()
        except KernelError as exc:
            raise self._fail(exc, "kernel_config") from None

    def kallsyms(self) -> str:
        """The kernel's symbol table (``/proc/kallsyms`` text) that typeless ``__ksym``
        externs are looked up in."""
        try:
            return self._kallsyms()
        except KernelError as exc:
            raise self._fail(exc, "kallsyms") from None

    def has_syscall_wrapper(self) -> bool:
        """LINUX_HAS_SYSCALL_WRAPPER: whether syscalls go through ``__<arch>_sys_*``
        wrappers that a kprobe can be put on (libbpf's probe_kern_syscall_wrapper)."""
        return self._has_syscall_wrapper()

    def _prog_where(self, fd: object) -> str:
        """A program as errors name it ("" when ``fd`` is not one)."""
        if not isinstance(fd, int) or isinstance(fd, bool) or not -(1 << 31) <= fd < 1 << 31:
            return ""
        try:
            info = self._prog_get_info(fd)
        except KernelError:
            return f"program fd {fd}"
        return prog_description(info.type, info.name, info.id)

    # -- what a backend translates -----------------------------------------------------------
    # Arguments arrive normalised (see the module rules); failures are KernelError.
    @abc.abstractmethod
    def _map_create(self, attr: MapAttr) -> int: ...

    @abc.abstractmethod
    def _map_lookup_elem(self, fd: int, key: bytes | None, flags: int,
                         value: bytes | None) -> bytes: ...

    @abc.abstractmethod
    def _map_update_elem(self, fd: int, key: bytes | None, value: bytes, flags: int) -> None:
        ...

    @abc.abstractmethod
    def _map_delete_elem(self, fd: int, key: bytes | None) -> None: ...

    @abc.abstractmethod
    def _map_get_next_key(self, fd: int, key: bytes | None) -> bytes: ...

    @abc.abstractmethod
    def _map_lookup_and_delete_elem(self, fd: int, key: bytes | None, flags: int) -> bytes:
        ...

    @abc.abstractmethod
    def _map_freeze(self, fd: int) -> None: ...

    @abc.abstractmethod
    def _map_lookup_batch(self, fd: int, in_batch: bytes | None, count: int, elem_flags: int,
                          flags: int, delete: bool) -> BatchLookup: ...

    @abc.abstractmethod
    def _map_write_batch(self, fd: int, keys: list[bytes], values: list[bytes] | None,
                         elem_flags: int, flags: int) -> int:
        """UPDATE_BATCH (``values`` given) or DELETE_BATCH; KernelError.count on failure."""

    @abc.abstractmethod
    def _map_get_info(self, fd: int) -> MapInfo: ...

    @abc.abstractmethod
    def _map_get_fd_by_id(self, map_id: int, open_flags: int) -> int: ...

    @abc.abstractmethod
    def _map_get_next_id(self, start_id: int) -> int: ...

    @abc.abstractmethod
    def _obj_pin(self, fd: int, path: str) -> None: ...

    @abc.abstractmethod
    def _obj_get(self, path: str, file_flags: int) -> int: ...

    @abc.abstractmethod
    def _obj_unpin(self, path: str) -> None: ...

    @abc.abstractmethod
    def _mkdir(self, path: str, mode: int) -> None: ...

    @abc.abstractmethod
    def _rmdir(self, path: str) -> None: ...

    @abc.abstractmethod
    def _close(self, fd: int) -> None: ...

    @abc.abstractmethod
    def _prog_load(self, attr: ProgAttr) -> int:
        """A verifier refusal is KernelError(EACCES or EINVAL, reason, log=the log)."""

    @abc.abstractmethod
    def _prog_test_run(self, prog_fd: int, request: TestRunRequest) -> TestRun: ...

    @abc.abstractmethod
    def _prog_get_info(self, fd: int) -> ProgInfo: ...

    @abc.abstractmethod
    def _prog_get_fd_by_id(self, prog_id: int) -> int: ...

    @abc.abstractmethod
    def _attach_tracepoint(self, prog_fd: int, category: str, name: str) -> int: ...

    @abc.abstractmethod
    def _raw_tracepoint_open(self, prog_fd: int, name: str) -> int: ...

    @abc.abstractmethod
    def _link_create(self, prog_fd: int, target_fd: int, attach_type: int, flags: int) -> int:
        ...

    @abc.abstractmethod
    def _map_update_elem_target_cpu(self, fd: int, key: bytes | None, value: bytes,
                                    flags: int, target_cpu: int) -> None: ...

    @abc.abstractmethod
    def _btf_load(self, data: bytes, log_level: int) -> int:
        """A refusal is KernelError(EINVAL, reason, log=the BTF checker's log)."""

    @abc.abstractmethod
    def _vmlinux_btf(self) -> bytes: ...

    @abc.abstractmethod
    def _kfunc_btf_id(self, name: str) -> int:
        """The id of FUNC ``name`` in the kernel's BTF; KernelError(ENOENT) when none."""

    @abc.abstractmethod
    def _kernel_version(self) -> int: ...

    @abc.abstractmethod
    def _kernel_config(self) -> str:
        """KernelError(ENOENT) when there is none."""

    @abc.abstractmethod
    def _kallsyms(self) -> str: ...

    @abc.abstractmethod
    def _has_syscall_wrapper(self) -> bool: ...


def iter_keys(sys: System, fd: int) -> Iterator[bytes]:
    """Walk a map's keys with get_next_key, as user space does."""
    key = None
    while True:
        try:
            key = sys.map_get_next_key(fd, key)
        except KeyNotFoundError:
            return
        yield key

    @abc.abstractmethod
    def _prog_attach(self, prog_fd: int, target_fd: int, attach_type: int,
                     attach_flags: int, replace_prog_fd: int) -> None: ...

    @abc.abstractmethod
    def _prog_detach(self, target_fd: int, attach_type: int, prog_fd: int) -> None: ...

    @abc.abstractmethod
    def _sock_recv(self, fd: int, bufsize: int, timeout: float | None) -> bytes: ...

    @abc.abstractmethod
    def _sock_send(self, fd: int, data: bytes, timeout: float | None) -> int: ...
