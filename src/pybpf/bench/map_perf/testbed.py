"""The maps and programs of a map-perf run, through the System interface (both backends):
the sample's map creation and resizing (fixup_map), its LPM trie fill and LRU pre-fill, the
inner LRU maps each CPU makes, and the connect() addresses that pick the LRU test case."""

from __future__ import annotations

import socket
import struct

from ... import uapi
from ...uapi import MapFlags, MapType
from .. import report
from .config import (
    LRU_LOOKUP_BATCH,
    MAP_DEFS,
    MAX_NR_CPUS,
    NUMA_AUTO,
    NUMA_NONE,
    TESTS,
    Config,
    Test,
    test_maps,
)


def lru_lookup_keys(test_entries: int) -> list[int]:
    """The start keys s6_addr32[3] takes, in order, before it wraps to 0 (the sample's loop)."""
    keys = [0]
    while keys[-1] < test_entries - LRU_LOOKUP_BATCH:
        keys.append(keys[-1] + LRU_LOOKUP_BATCH)
    return keys


def sockaddr_in6_addr(tcase: int, key: int) -> bytes:
    """sin6_addr as the sample fills it: host-order u16 magic words, test case, u32 key."""
    return struct.pack("=HHHHII", 0xDEAD, 0xBEEF, tcase, 0, 0, key)


def sockaddr_in6(tcase: int, key: int) -> bytes:
    """The whole struct sockaddr_in6 (28 bytes) the sample passes to connect()."""
    return struct.pack("=HHI16sI", socket.AF_INET6, 0, 0, sockaddr_in6_addr(tcase, key), 0)


class Setup:
    """Creates the maps and loads, fills and attaches the programs of the enabled tests.

    Shared by both backends: everything here goes through the System interface.
    """

    def __init__(self, sys_, cfg: Config) -> None:
        self.sys = sys_
        self.cfg = cfg
        self.tests = cfg.tests
        self.fds: dict[str, int] = {}
        self.prog_fds: dict[str, int] = {}
        self.links: list[int] = []
        self.inner_fds: dict[int, int] = {}
        self.inner_numa: dict[int, tuple[int, int | None]] = {}  # cpu: (map_flags, node)
        self.lru_hash_lookup_test_entries = LRU_LOOKUP_BATCH

    def max_entries(self, name: str) -> int:
        return self.cfg.max_entries(name)

    @property
    def inner_lru_hash_size(self) -> int:
        return self.cfg.num_map_entries or MAP_DEFS["inner_lru_hash_map"].max_entries

    def numa_for_cpu(self, node_of_caller: int) -> tuple[int, int]:
        """(map_flags, numa_node) of an inner LRU map made by a CPU of ``node_of_caller``."""
        mode = self.cfg.numa_node
        if mode == NUMA_NONE:
            return 0, 0
        if mode == NUMA_AUTO:
            return int(MapFlags.NUMA_NODE), node_of_caller
        return int(MapFlags.NUMA_NODE), int(mode)

    def needed_maps(self) -> list[str]:
        names: list[str] = []
        for t in self.tests:
            for name in test_maps(t):
                if name not in names:
                    names.append(name)
        if "array_of_lru_hashs" in names and "inner_lru_hash_map" not in names:
            names.insert(names.index("array_of_lru_hashs"), "inner_lru_hash_map")
        return names

    def create_map(self, name: str, max_entries: int, map_flags: int = 0, numa_node: int = 0,
                   inner_map_fd: int = 0) -> int:
        m = MAP_DEFS[name]
        return self.sys.map_create(m.map_type, m.key_size, m.value_size, max_entries,
                                   map_flags=m.map_flags | map_flags, numa_node=numa_node,
                                   inner_map_fd=inner_map_fd, map_name=name.encode()[:15])

    def create_maps(self, cpu0_node: int) -> None:
        for name in self.needed_maps():
            if name == "inner_lru_hash_map":
                # CPU 0's inner map, made by the parent (the sample's static map). The
                # sample hard-codes node 0, which is CPU 0's node; 'auto' says so.
                flags, node = self.numa_for_cpu(cpu0_node)
                fd = self.create_map(name, self.max_entries(name), flags, node)
                self.inner_fds[0] = fd
                self.inner_numa[0] = (flags, node if flags else None)
            elif name == "array_of_lru_hashs":
                fd = self.create_map(name, MAX_NR_CPUS, inner_map_fd=self.fds[
                    "inner_lru_hash_map"])
            else:
                fd = self.create_map(name, self.max_entries(name))
            self.fds[name] = fd
        if "array_of_lru_hashs" in self.fds:
            self.sys.map_update_elem(self.fds["array_of_lru_hashs"], struct.pack("=I", 0),
                                     struct.pack("=I", self.inner_fds[0]))

    def load_and_attach(self) -> None:
        from .progs import build_program, object_program

        spec = None
        if self.cfg.object:
            from ...bpf_object import ObjectSpec

            spec = ObjectSpec.from_file(self.cfg.object)
        for t in self.tests:
            td = TESTS[t]
            if td.prog in self.prog_fds:
                continue
            prog = object_program(spec, td.prog, self.fds) if spec is not None else \
                build_program(td.prog, self.fds)
            fd = prog.load(self.sys)
            self.prog_fds[td.prog] = fd
            self.links.append(self.sys.attach_tracepoint(fd, "syscalls",
                                                         f"sys_enter_{td.syscall}"))

    def fill_lpm_trie(self) -> None:
        """The sample's fill_lpm_trie, into the trie this time: 512 random prefixes plus
        192.168.0.1/32 -> 128, so the 32 lookups of each event hit a populated trie."""
        fd = self.fds.get("lpm_trie_map_alloc")
        if fd is None:
            return
        import random

        rng = random.Random(0)
        for _ in range(512):
            key = struct.pack("=I4B", rng.randrange(33), *(rng.randrange(256) for _ in range(4)))
            self.sys.map_update_elem(fd, key, struct.pack("=q", 0))
        self.sys.map_update_elem(fd, struct.pack("=I4B", 32, 192, 168, 0, 1),
                                 struct.pack("=q", 128))

    def pre_test(self) -> None:
        """LRU_HASH_LOOKUP's pre-fill: keys 0..entries-1, value 1, BPF_NOEXIST."""
        if Test.LRU_HASH_LOOKUP not in self.tests:
            return
        if self.cfg.num_map_entries > self.lru_hash_lookup_test_entries:
            self.lru_hash_lookup_test_entries = self.cfg.num_map_entries
        fd = self.fds["lru_hash_lookup_map"]
        one = struct.pack("=q", 1)
        entries = self.lru_hash_lookup_test_entries
        # Long only where NUM_ENTRIES resized the map; the heartbeat ends before any fork.
        with report.Progress("map-perf: pre-filling lru_hash_lookup_map", entries,
                             enabled=self.cfg.progress and entries > LRU_LOOKUP_BATCH
                             ) as progress:
            for key in range(entries):
                self.sys.map_update_elem(fd, struct.pack("=I", key), one, uapi.BPF_NOEXIST)
                progress.done = key + 1

    def create_inner_map(self, cpu: int, node_of_cpu: int) -> int:
        """A CPU other than 0 makes its own inner LRU map and stores it in outer[cpu]."""
        flags, node = self.numa_for_cpu(node_of_cpu)
        fd = self.create_map("inner_lru_hash_map", self.inner_lru_hash_size, flags, node)
        self.sys.map_update_elem(self.fds["array_of_lru_hashs"], struct.pack("=I", cpu),
                                 struct.pack("=I", fd))
        self.inner_fds[cpu] = fd
        self.inner_numa[cpu] = (flags, node if flags else None)
        return fd

    def no_prealloc_fds(self) -> dict[str, int]:
        """The maps whose elements come from an allocator (BPF_F_NO_PREALLOC hashes)."""
        return {name: fd for name, fd in self.fds.items()
                if MAP_DEFS[name].map_flags & MapFlags.NO_PREALLOC
                and MAP_DEFS[name].map_type in (MapType.HASH, MapType.PERCPU_HASH)}

    def close(self) -> None:
        for fd in self.links + list(self.prog_fds.values()):
            self.sys.close(fd)
        inner = [fd for cpu, fd in self.inner_fds.items() if cpu != 0]
        for fd in inner + list(self.fds.values()):
            try:
                self.sys.close(fd)
            except OSError:
                pass


