"""The records the System contract returns: MapInfo and ProgInfo (BPF_OBJ_GET_INFO_BY_FD),
BatchLookup (a lookup batch's result), TestRun (BPF_PROG_TEST_RUN's output) and FastOps (the
fast-path capability a System hands the Map layer). ``pybpf.system`` re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .errors import BPFError


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
    btf_id: int = 0             # the BTF object the key/value type ids are in (0: none)
    btf_key_type_id: int = 0
    btf_value_type_id: int = 0


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

    __test__ = False

    retval: int
    duration: int  # ns per run, as the kernel reports it
    data_out: bytes = b""
    ctx_out: bytes = b""


@dataclass(frozen=True)
class FastOps:
    """What a backend can do fast on one open map fd: the capability ``System.fast_ops``
    hands the Map layer, which asks it and never the backend's name.

    Always: ``lookup(key)``, ``update(key, value, flags)`` and ``delete(key)`` behave exactly
    as the System commands on the fd (same bytes, same errors); ``error(errno, command,
    count=None)`` builds the System's error for an errno got some faster way.
    Optional, None when the backend has none:
    - ``table``: a live mapping whose ``get(key)`` is exactly what ``lookup`` returns (bytes
      or bytearray of the syscall value size; missing: ENOENT), for the Map layer (and its C
      accelerator) to read directly. What such reads skip is documented by the backend.
    - ``bpf_fd``: the C accelerator's core may make the element commands with bpf(2) itself
      on this fd (what the kernel backend offers when the accelerator is built).
    - ``lookup_batch``, ``update_batch``, ``delete_batch``: batch commands into the caller's
      buffers (``pybpf._accel``'s signatures, the fd already bound).
    All stay valid while the fd is open.
    """

    lookup: Callable[[bytes | None], bytes]
    update: Callable[[bytes | None, bytes, int], None]
    delete: Callable[[bytes | None], None]
    error: Callable[..., BPFError]
    table: Mapping | None = None
    bpf_fd: int | None = None
    lookup_batch: Callable[..., tuple] | None = None
    update_batch: Callable[..., tuple] | None = None
    delete_batch: Callable[..., tuple] | None = None
