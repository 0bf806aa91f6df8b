"""The BPF_PROG_TEST_RUN probes: small socket-filter programs and the maps they use, and the
samples each probe collects over the rounds."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from ..asm import (
    add64,
    call,
    exit_,
    jeq,
    label,
    ld_map_fd,
    ldxdw,
    ldxw,
    mov64,
    stdw,
    stw,
    stxdw,
    stxw,
)
from ..asm.builder import Item, Label
from ..asm.opcodes import FP, R0, R1, R2, R3, R4, R6
from ..uapi import MapFlags, MapType

DATA_IN = bytes(64)  # a socket filter's test run needs at least an Ethernet header


# -- probes --------------------------------------------------------------------------------

@dataclass
class Samples:
    """One probe's figures, one per round."""

    name: str
    unit: str  # what one figure is: "ns/run", "ns/call", "ns/load", "ns/event"
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def describe(self) -> str:
        return (f"median {self.median:.2f} {self.unit} over {len(self.values)} rounds "
                f"(spread {min(self.values):.2f}-{max(self.values):.2f})")


@dataclass(frozen=True)
class TestRunProbe:
    """A socket-filter program timed with BPF_PROG_TEST_RUN; ``build`` creates its maps and
    returns (program items, map fds) afresh for every measurement."""

    name: str
    repeat: int
    count: int  # operations per run that the probe is about
    build: Callable[[object], tuple[list[Item], list[int]]]
    helper_calls: int = 0  # calls charged as helper_call (get_prandom_u32 in the LRU ones)


def executed(items: list[Item]) -> int:
    """Instructions a straight-line program executes: every one (a lddw counts once)."""
    return sum(1 for item in items if not isinstance(item, Label))


RET = [mov64(R0, 0), exit_()]
# On sys_enter_connect: bpf_probe_read_user(fp-16, 16, uservaddr), as map_perf's LRU program.
READ_SOCKADDR = [mov64(R6, R1), ldxdw(R3, R6, 24), mov64(R1, FP), add64(R1, -16),
                 mov64(R2, 16), call("probe_read_user"), *RET]
KEY1 = [stw(FP, -4, 1), stdw(FP, -16, 1)]  # key 1 at fp-4, value 1 at fp-16


def _key_ptr(off: int) -> list[Item]:
    return [mov64(R2, FP), add64(R2, off)]


def _lookups(fd: int, count: int, key_off: int = -4) -> list[Item]:
    out: list[Item] = []
    for _ in range(count):
        out += [ld_map_fd(R1, fd), *_key_ptr(key_off), call("map_lookup_elem")]
    return out


def _updates(fd: int, count: int, random_key: bool = False) -> list[Item]:
    out: list[Item] = []
    for _ in range(count):
        if random_key:
            out += [call("get_prandom_u32"), stxw(FP, -4, R0)]
        out += [ld_map_fd(R1, fd), *_key_ptr(-4), mov64(R3, FP), add64(R3, -16),
                mov64(R4, 0), call("map_update_elem")]
    return out


def _triples(fd: int) -> list[Item]:
    """map_perf's hash event: 10 x (update, lookup, delete if found) of key 1."""
    out = list(KEY1)
    for i in range(10):
        out += [*_updates(fd, 1), *_lookups(fd, 1), jeq(R0, 0, f"next{i}"),
                ld_map_fd(R1, fd), *_key_ptr(-4), call("map_delete_elem"), label(f"next{i}")]
    return out + RET


def _instruction_mix() -> list[Item]:
    """1024 instructions of the kinds map_perf's programs are made of (8 per block)."""
    out: list[Item] = []
    for _ in range(128):
        out += [mov64(R1, FP), add64(R1, -8), stdw(FP, -16, 1), mov64(R2, 7),
                stxw(FP, -4, R2), stxdw(FP, -24, R2), ldxw(R3, FP, -4), jeq(R3, 0, "out")]
    return [*out, label("out"), *RET]


def _u32(x: int) -> bytes:
    return x.to_bytes(4, "little")


def _u64(x: int) -> bytes:
    return x.to_bytes(8, "little")


def _map(sys_, fds: list[int], map_type: int, key_size: int, max_entries: int,
         flags: int = 0) -> int:
    fd = sys_.map_create(map_type, key_size, 8, max_entries, map_flags=flags)
    fds.append(fd)
    return fd


def _probe_lookup(map_type: int, key_size: int, count: int) -> Callable:
    def build(sys_) -> tuple[list[Item], list[int]]:
        fds: list[int] = []
        fd = _map(sys_, fds, map_type, key_size, 1000)
        key = _u32(1) if key_size == 4 else _u64(1) + bytes(key_size - 8)
        sys_.map_update_elem(fd, key, _u64(1))
        if key_size == 4:
            setup = [stw(FP, -4, 1)]
            return [*setup, *_lookups(fd, count), *RET], fds
        off = -key_size
        setup = [stdw(FP, off + 8 * i, 1 if i == 0 else 0) for i in range(key_size // 8)]
        return [*setup, *_lookups(fd, count, off), *RET], fds
    return build


def _probe_update_existing(sys_) -> tuple[list[Item], list[int]]:
    fds: list[int] = []
    fd = _map(sys_, fds, MapType.HASH, 4, 1000)
    sys_.map_update_elem(fd, _u32(1), _u64(1))
    return [*KEY1, *_updates(fd, 64), *RET], fds


def _probe_triples(flags: int) -> Callable:
    def build(sys_) -> tuple[list[Item], list[int]]:
        fds: list[int] = []
        return _triples(_map(sys_, fds, MapType.HASH, 4, 1000, flags)), fds
    return build


def _probe_lru(full: bool) -> Callable:
    """64 random-key updates into a full 1000-entry LRU map (each evicts), or into an empty
    8192-entry one (run 64 times: 4096 updates, none evicts)."""
    def build(sys_) -> tuple[list[Item], list[int]]:
        fds: list[int] = []
        fd = _map(sys_, fds, MapType.LRU_HASH, 4, 1000 if full else 8192)
        if full:
            for k in range(1000):
                sys_.map_update_elem(fd, _u32(k + (1 << 20)), _u64(1))
        return [stdw(FP, -16, 1), *_updates(fd, 64, random_key=True), *RET], fds
    return build


LPM_KEY = (32).to_bytes(4, "little") + bytes([192, 168, 0, 1])


def _probe_trie(sys_) -> tuple[list[Item], list[int]]:
    """32 lookups of 192.168.0.1/32 in a trie of 512 random prefixes (map_perf's test 6)."""
    fds: list[int] = []
    fd = _map(sys_, fds, MapType.LPM_TRIE, 8, 10000, MapFlags.NO_PREALLOC)
    rng = random.Random(0)
    for _ in range(512):
        sys_.map_update_elem(fd, _u32(rng.randrange(33)) + rng.randbytes(4), _u64(1))
    sys_.map_update_elem(fd, LPM_KEY, _u64(128))
    setup = [stw(FP, -8, 32), stw(FP, -4, int.from_bytes(LPM_KEY[4:], "little", signed=True))]
    return [*setup, *_lookups(fd, 32, -8), *RET], fds


def _no_maps(items: list[Item]) -> Callable:
    return lambda sys_: (items, [])


TEST_RUN_PROBES = (
    TestRunProbe("empty", 100000, 1, _no_maps(RET)),
    TestRunProbe("insns_1024", 20000, 1024, _no_maps(_instruction_mix())),
    TestRunProbe("helper_64", 10000, 64,
                 _no_maps([*(call("get_numa_node_id") for _ in range(64)), *RET])),
    TestRunProbe("array_lookup_64", 10000, 64, _probe_lookup(MapType.ARRAY, 4, 64)),
    TestRunProbe("htab_lookup_64", 10000, 64, _probe_lookup(MapType.HASH, 4, 64)),
    TestRunProbe("htab_lookup_64_key64", 10000, 64, _probe_lookup(MapType.HASH, 64, 64)),
    TestRunProbe("htab_update_existing_64", 10000, 64, _probe_update_existing),
    TestRunProbe("htab_triples_prealloc", 10000, 10, _probe_triples(0)),
    TestRunProbe("htab_triples_kmalloc", 10000, 10, _probe_triples(MapFlags.NO_PREALLOC)),
    TestRunProbe("lru_evict_64", 10000, 64, _probe_lru(True), helper_calls=64),
    TestRunProbe("lru_fill_64", 64, 64, _probe_lru(False), helper_calls=64),
    TestRunProbe("trie_lookup_32", 5000, 32, _probe_trie),
)
