"""The System interface: one object shaped like bpf(2), with a kernel and an emulated backend.

Rules every backend keeps (the kernel is the oracle):
- Arguments are the kernel's: integers from ``pybpf.uapi``, keys and values as ``bytes``.
  Per-CPU values are ``round_up(value_size, 8) * num_possible_cpus`` bytes; map-in-map and
  prog-array values are 4-byte fds on update and 4-byte ids on lookup.
- A failure raises ``pybpf.errors.BPFError`` (an ``OSError``) carrying the errno the kernel
  returns for the same call, built by ``errors.bpf_error``.
- Batch lookups return what the kernel wrote even when it ended with ENOENT (``end=True``);
  a write batch that stops early raises with ``count`` = elements done before the error.

``system()`` picks a backend: ``PYBPF_BACKEND`` (kernel|emulated) if set, else the kernel when
bpf(2) is allowed here, else the emulated one.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class MapInfo:
    """struct bpf_map_info, the fields pybpf reads."""

    type: int
    id: int
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int
    name: str
    ifindex: int = 0
    map_extra: int = 0


@dataclass(frozen=True)
class ProgInfo:
    """struct bpf_prog_info, the fields pybpf reads."""

    type: int
    id: int
    tag: bytes
    name: str
    xlated_prog_len: int = 0
    jited_prog_len: int = 0
    map_ids: tuple[int, ...] = ()
    run_time_ns: int = 0
    run_cnt: int = 0


@dataclass(frozen=True)
class BatchLookup:
    """What a lookup (and delete) batch returned.

    ``keys`` and ``values`` are lists of per-element bytes; ``out_batch`` is the token to pass
    as the next ``in_batch`` (None when the kernel wrote none); ``end`` is True when the kernel
    answered ENOENT, i.e. the walk ran off the end (elements may still be returned with it).
    """

    keys: list[bytes]
    values: list[bytes]
    out_batch: bytes | None
    end: bool


@dataclass(frozen=True)
class TestRun:
    """BPF_PROG_TEST_RUN's results."""

    retval: int
    duration: int  # ns per run, as the kernel reports it
    data_out: bytes = b""
    ctx_out: bytes = b""


@dataclass
class Topology:
    """CPUs and NUMA nodes: ``cpu_node[cpu]`` is the node of each possible CPU."""

    cpu_node: list[int] = field(default_factory=list)

    @property
    def num_cpus(self) -> int:
        return len(self.cpu_node)

    @property
    def num_nodes(self) -> int:
        return max(self.cpu_node, default=0) + 1

    def cpus_of_node(self, node: int) -> list[int]:
        return [cpu for cpu, n in enumerate(self.cpu_node) if n == node]


@dataclass(frozen=True)
class FastOps:
    """Hot-path access to one open map fd, offered by ``System.fast_ops`` to the Map layer.

    ``lookup(key)`` behaves exactly as ``map_lookup_elem(fd, key)`` (bytes out, the same
    errors). ``table``, when a backend can offer it, is a live dict whose ``table.get(key)``
    is exactly what that lookup returns (bytes or bytearray of the syscall value size), a
    missing key meaning ENOENT; the Map layer (and its C accelerator) then reads it directly.
    Both stay valid while the fd is open.
    """

    lookup: Callable[[bytes | None], bytes]
    table: dict | None = None


SYS_CPU_POSSIBLE = "/sys/devices/system/cpu/possible"
SYS_NODE_DIR = "/sys/devices/system/node"


def parse_cpu_list(text: str) -> list[int]:
    """Parse a kernel CPU list such as ``0-3,5,8-9`` into sorted CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def host_topology() -> Topology:
    """This host's possible CPUs and their NUMA nodes (one node when /sys says nothing)."""
    try:
        with open(SYS_CPU_POSSIBLE) as f:
            ncpus = max(parse_cpu_list(f.read())) + 1
    except (OSError, ValueError):
        ncpus = os.cpu_count() or 1
    cpu_node = [0] * ncpus
    try:
        entries = os.listdir(SYS_NODE_DIR)
    except OSError:
        entries = []
    for entry in entries:
        if not (entry.startswith("node") and entry[4:].isdigit()):
            continue
        try:
            with open(os.path.join(SYS_NODE_DIR, entry, "cpulist")) as f:
                cpus = parse_cpu_list(f.read())
        except (OSError, ValueError):
            continue
        for cpu in cpus:
            if cpu < ncpus:
                cpu_node[cpu] = int(entry[4:])
    return Topology(cpu_node)


def test_run_args_problem(**u32_fields: object) -> str:
    """What is wrong with BPF_PROG_TEST_RUN's integer arguments, all u32 fields of the attr
    (repeat, cpu, flags, data_size_out, ctx_size_out), or "" when nothing is."""
    for name, value in u32_fields.items():
        if type(value) is not int or not 0 <= value < 1 << 32:
            return f"{name} {value!r} is not an unsigned 32-bit integer"
    return ""


class System(abc.ABC):
    """The bpf(2)-shaped interface both backends implement."""

    name: str = "abstract"

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

    # -- maps --------------------------------------------------------------------------------
    @abc.abstractmethod
    def map_create(self, map_type: int, key_size: int, value_size: int, max_entries: int,
                   map_flags: int = 0, inner_map_fd: int = 0, numa_node: int = 0,
                   map_name: bytes = b"", map_extra: int = 0) -> int:
        """BPF_MAP_CREATE; returns the new map's fd."""

    @abc.abstractmethod
    def map_lookup_elem(self, fd: int, key: bytes | None, flags: int = 0, *,
                        value: bytes | None = None) -> bytes:
        """BPF_MAP_LOOKUP_ELEM. ``value`` is the input of a map that looks up by value
        (BLOOM_FILTER peek, key None): ENOENT when absent, else ``value`` comes back."""

    @abc.abstractmethod
    def map_update_elem(self, fd: int, key: bytes | None, value: bytes, flags: int = 0) -> None:
        ...

    @abc.abstractmethod
    def map_delete_elem(self, fd: int, key: bytes | None) -> None: ...

    @abc.abstractmethod
    def map_get_next_key(self, fd: int, key: bytes | None) -> bytes:
        """Next key after ``key``; None (or a missing key, for most types) gives the first."""

    @abc.abstractmethod
    def map_lookup_and_delete_elem(self, fd: int, key: bytes | None, flags: int = 0) -> bytes:
        ...

    @abc.abstractmethod
    def map_freeze(self, fd: int) -> None: ...

    def fast_ops(self, fd: int) -> FastOps:
        """Hot-path callables for map ``fd`` (see ``FastOps``); backends may override this
        with something leaner than the generic commands."""
        return FastOps(lookup=functools.partial(self.map_lookup_elem, fd))

    @abc.abstractmethod
    def map_lookup_batch(self, fd: int, in_batch: bytes | None, count: int,
                         elem_flags: int = 0, flags: int = 0) -> BatchLookup: ...

    @abc.abstractmethod
    def map_lookup_and_delete_batch(self, fd: int, in_batch: bytes | None, count: int,
                                    elem_flags: int = 0, flags: int = 0) -> BatchLookup: ...

    @abc.abstractmethod
    def map_update_batch(self, fd: int, keys: Sequence[bytes], values: Sequence[bytes],
                         elem_flags: int = 0, flags: int = 0) -> int:
        """Returns the count updated; on error raises with ``count`` set."""

    @abc.abstractmethod
    def map_delete_batch(self, fd: int, keys: Sequence[bytes], elem_flags: int = 0,
                         flags: int = 0) -> int: ...

    @abc.abstractmethod
    def map_get_info(self, fd: int) -> MapInfo:
        """BPF_OBJ_GET_INFO_BY_FD on a map."""

    @abc.abstractmethod
    def map_get_fd_by_id(self, map_id: int, open_flags: int = 0) -> int: ...

    @abc.abstractmethod
    def map_get_next_id(self, start_id: int) -> int:
        """The next map id after ``start_id``; ENOENT past the last."""

    # -- objects -----------------------------------------------------------------------------
    @abc.abstractmethod
    def obj_pin(self, fd: int, path: str) -> None: ...

    @abc.abstractmethod
    def obj_get(self, path: str, file_flags: int = 0) -> int: ...

    @abc.abstractmethod
    def close(self, fd: int) -> None: ...

    # -- programs ----------------------------------------------------------------------------
    @abc.abstractmethod
    def prog_load(self, prog_type: int, insns: bytes, license: str = "GPL",
                  expected_attach_type: int = 0, prog_name: bytes = b"",
                  prog_flags: int = 0, log_level: int = 0) -> int:
        """BPF_PROG_LOAD of raw instructions (map fds already in the lddw immediates)."""

    @abc.abstractmethod
    def prog_test_run(self, prog_fd: int, data_in: bytes = b"", *,
                      data_size_out: int | None = None, ctx_in: bytes | None = None,
                      ctx_size_out: int | None = None, repeat: int = 1, flags: int = 0,
                      cpu: int = 0) -> TestRun: ...

    @abc.abstractmethod
    def prog_get_info(self, fd: int) -> ProgInfo: ...

    @abc.abstractmethod
    def prog_get_fd_by_id(self, prog_id: int) -> int: ...

    @abc.abstractmethod
    def attach_tracepoint(self, prog_fd: int, category: str, name: str) -> int:
        """Attach a tracepoint program; returns a handle (an fd) that ``close`` detaches."""


def bpf_allowed() -> bool:
    """True when bpf(2) works here (a tiny array map can be created)."""
    from .kernel.syscall import probe_bpf

    return probe_bpf()


def default_backend() -> str:
    """``PYBPF_BACKEND`` if set, else "kernel" when bpf(2) is allowed here, else "emulated"."""
    return os.environ.get("PYBPF_BACKEND") or ("kernel" if bpf_allowed() else "emulated")


_BACKENDS = ("kernel", "emulated")


def system(backend: str | None = None, **kwargs) -> System:
    """A System: ``"kernel"``, ``"emulated"`` (kwargs: cpus=, nodes=), or None for the default.

    The default is ``PYBPF_BACKEND`` if set, else the kernel when bpf(2) is allowed, else the
    emulated backend.
    """
    if backend is None:
        backend = default_backend()
    if backend == "kernel":
        if kwargs:
            raise TypeError(f"the kernel backend takes no options, got {sorted(kwargs)}")
        from .kernel.system import KernelSystem

        return KernelSystem()
    if backend == "emulated":
        from .emulated.system import EmulatedSystem

        return EmulatedSystem(**kwargs)
    raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(_BACKENDS)}")


def iter_keys(sys: System, fd: int) -> Iterator[bytes]:
    """Walk a map's keys with get_next_key, as user space does."""
    from .errors import KeyNotFoundError

    key = None
    while True:
        try:
            key = sys.map_get_next_key(fd, key)
        except KeyNotFoundError:
            return
        yield key
