"""Every number of the bpf(2) ABI that pybpf uses, in one place.

Values are those of include/uapi/linux/bpf.h as of Linux 6.18. Both backends
and the Pythonic layer take their constants from here, never from literals.
"""

from __future__ import annotations

import enum


class Cmd(enum.IntEnum):
    """enum bpf_cmd."""

    MAP_CREATE = 0
    MAP_LOOKUP_ELEM = 1
    MAP_UPDATE_ELEM = 2
    MAP_DELETE_ELEM = 3
    MAP_GET_NEXT_KEY = 4
    PROG_LOAD = 5
    OBJ_PIN = 6
    OBJ_GET = 7
    PROG_ATTACH = 8
    PROG_DETACH = 9
    PROG_TEST_RUN = 10
    PROG_GET_NEXT_ID = 11
    MAP_GET_NEXT_ID = 12
    PROG_GET_FD_BY_ID = 13
    MAP_GET_FD_BY_ID = 14
    OBJ_GET_INFO_BY_FD = 15
    PROG_QUERY = 16
    RAW_TRACEPOINT_OPEN = 17
    BTF_LOAD = 18
    BTF_GET_FD_BY_ID = 19
    TASK_FD_QUERY = 20
    MAP_LOOKUP_AND_DELETE_ELEM = 21
    MAP_FREEZE = 22
    BTF_GET_NEXT_ID = 23
    MAP_LOOKUP_BATCH = 24
    MAP_LOOKUP_AND_DELETE_BATCH = 25
    MAP_UPDATE_BATCH = 26
    MAP_DELETE_BATCH = 27
    LINK_CREATE = 28
    LINK_UPDATE = 29
    LINK_GET_FD_BY_ID = 30
    LINK_GET_NEXT_ID = 31
    ENABLE_STATS = 32
    ITER_CREATE = 33
    LINK_DETACH = 34
    PROG_BIND_MAP = 35
    TOKEN_CREATE = 36


class MapType(enum.IntEnum):
    """enum bpf_map_type."""

    UNSPEC = 0
    HASH = 1
    ARRAY = 2
    PROG_ARRAY = 3
    PERF_EVENT_ARRAY = 4
    PERCPU_HASH = 5
    PERCPU_ARRAY = 6
    STACK_TRACE = 7
    CGROUP_ARRAY = 8
    LRU_HASH = 9
    LRU_PERCPU_HASH = 10
    LPM_TRIE = 11
    ARRAY_OF_MAPS = 12
    HASH_OF_MAPS = 13
    DEVMAP = 14
    SOCKMAP = 15
    CPUMAP = 16
    XSKMAP = 17
    SOCKHASH = 18
    CGROUP_STORAGE = 19
    REUSEPORT_SOCKARRAY = 20
    PERCPU_CGROUP_STORAGE = 21
    QUEUE = 22
    STACK = 23
    SK_STORAGE = 24
    DEVMAP_HASH = 25
    STRUCT_OPS = 26
    RINGBUF = 27
    INODE_STORAGE = 28
    TASK_STORAGE = 29
    BLOOM_FILTER = 30
    USER_RINGBUF = 31
    CGRP_STORAGE = 32
    ARENA = 33


# Element-operation flags (attr->flags, batch.elem_flags).
BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2
BPF_F_LOCK = 4


class MapFlags(enum.IntFlag):
    """map_flags of BPF_MAP_CREATE."""

    NO_PREALLOC = 0x1
    NO_COMMON_LRU = 0x2
    NUMA_NODE = 0x4
    RDONLY = 0x8
    WRONLY = 0x10
    STACK_BUILD_ID = 0x20
    ZERO_SEED = 0x40
    RDONLY_PROG = 0x80
    WRONLY_PROG = 0x100
    CLONE = 0x200
    MMAPABLE = 0x400
    PRESERVE_ELEMS = 0x800
    INNER_MAP = 0x1000
    LINK = 0x2000
    PATH_FD = 0x4000
    VTYPE_BTF_OBJ_FD = 0x8000
    TOKEN_FD = 0x10000
    SEGV_ON_FAULT = 0x20000
    NO_USER_CONV = 0x40000


BPF_F_NO_PREALLOC = MapFlags.NO_PREALLOC
BPF_F_NO_COMMON_LRU = MapFlags.NO_COMMON_LRU
BPF_F_NUMA_NODE = MapFlags.NUMA_NODE
BPF_F_RDONLY = MapFlags.RDONLY
BPF_F_WRONLY = MapFlags.WRONLY
BPF_F_ZERO_SEED = MapFlags.ZERO_SEED
BPF_F_RDONLY_PROG = MapFlags.RDONLY_PROG
BPF_F_WRONLY_PROG = MapFlags.WRONLY_PROG
BPF_F_MMAPABLE = MapFlags.MMAPABLE
BPF_F_PRESERVE_ELEMS = MapFlags.PRESERVE_ELEMS
BPF_F_INNER_MAP = MapFlags.INNER_MAP

# include/linux/bpf.h: the flags that restrict access from syscalls or programs.
BPF_F_ACCESS_MASK = BPF_F_RDONLY | BPF_F_RDONLY_PROG | BPF_F_WRONLY | BPF_F_WRONLY_PROG

# numa_node value meaning "no preference" (NUMA_NO_NODE as an unsigned field).
NUMA_NO_NODE = -1

BPF_OBJ_NAME_LEN = 16

# errno values the map code returns that the errno module has no name for.
ENOTSUPP = 524

# Kernel limits the map code checks against (x86-64, 4 KiB pages).
KMALLOC_MAX_SIZE = 4 * 1024 * 1024
PCPU_MIN_UNIT_SIZE = 32 * 1024
MAX_BPF_STACK = 512


def round_up(value: int, align: int) -> int:
    """Round ``value`` up to a multiple of ``align``."""
    return (value + align - 1) // align * align


PERCPU_MAP_TYPES = frozenset(
    {MapType.PERCPU_HASH, MapType.LRU_PERCPU_HASH, MapType.PERCPU_ARRAY,
     MapType.PERCPU_CGROUP_STORAGE}
)

# Maps whose syscall values are fds on update and object ids on lookup.
FD_VALUE_MAP_TYPES = frozenset(
    {MapType.PROG_ARRAY, MapType.PERF_EVENT_ARRAY, MapType.CGROUP_ARRAY,
     MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS}
)

MAP_IN_MAP_TYPES = frozenset({MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS})


def syscall_value_size(map_type: int, value_size: int, ncpus: int) -> int:
    """Bytes of a value buffer through the syscall (bpf_map_value_size)."""
    if map_type in PERCPU_MAP_TYPES:
        return round_up(value_size, 8) * ncpus
    if map_type in FD_VALUE_MAP_TYPES:
        return 4
    return value_size
