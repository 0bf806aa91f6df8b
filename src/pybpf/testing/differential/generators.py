"""Random sequences per map family: ``GENERATORS[family](Gen)`` and ``generate``, seeded
so that a sequence is the same on every run and machine."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import replace

from ...uapi import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_LOCK,
    BPF_NOEXIST,
    MapFlags,
    MapType,
    map_traits,
    syscall_value_size,
)
from .ops import (
    BAD_FD,
    BAD_MAP,
    CURSOR,
    SOCKET_KINDS,
    BloomPeek,
    Close,
    CloseSocket,
    Create,
    Delete,
    DeleteBatch,
    Dump,
    Freeze,
    Info,
    Lookup,
    LookupAndDelete,
    LookupBatch,
    MapRef,
    NextKey,
    Op,
    OpenSocket,
    OpSequence,
    ProgDelete,
    ProgLookup,
    ProgUpdate,
    SetCpu,
    SockRef,
    Update,
    UpdateBatch,
    Value,
    Walk,
)
from .runner import PROG_LOOKUP_TYPES

__all__ = ["CREATE_TYPES", "GENERATORS", "Gen", "gen_array", "gen_bloom", "gen_cpumap",
    "gen_create", "gen_devmap", "gen_hash", "gen_lpm", "gen_lru", "gen_map_in_map",
    "gen_queue_stack", "gen_sockmap", "generate"]


class Gen:
    """Random choices for one sequence: a seeded ``random.Random`` and the CPU count."""

    def __init__(self, rng: random.Random, ncpu: int, programs: bool = True) -> None:
        self.rng = rng
        self.ncpu = ncpu
        self.programs = programs  # whether to issue program-side lookups

    def pick(self, weighted: dict) -> object:
        return self.rng.choices(list(weighted), weights=list(weighted.values()))[0]

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def data(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def keys(self, key_size: int, n: int) -> list[bytes]:
        n = min(n, 256 ** key_size)
        pool: set[bytes] = set()
        while len(pool) < n:
            pool.add(self.data(key_size))
        return sorted(pool)

    def value(self, map_type: int, value_size: int) -> bytes:
        return self.data(syscall_value_size(map_type, value_size, self.ncpu))

    def update_flags(self) -> int:
        return self.pick({BPF_ANY: 50, BPF_NOEXIST: 20, BPF_EXIST: 20, BPF_F_LOCK: 2,
                          3: 1, 8: 1})

    def lookup_flags(self) -> int:
        return self.pick({0: 60, BPF_F_LOCK: 1, BPF_NOEXIST: 1, 8: 1})

    def batch_elem_flags(self) -> int:
        return self.pick({0: 40, BPF_F_LOCK: 1, BPF_NOEXIST: 1, BPF_EXIST: 1})

    def batch_flags(self) -> int:
        return self.pick({0: 40, 1: 1})

    def access_flags(self, p: float = 0.05) -> int:
        if not self.chance(p):
            return 0
        return self.pick({MapFlags.RDONLY: 2, MapFlags.WRONLY: 2, MapFlags.RDONLY_PROG: 1,
                          MapFlags.WRONLY_PROG: 1})


def _u32(i: int) -> bytes:
    return struct.pack("<I", i & 0xFFFFFFFF)


def _element_ops(g: Gen, m: int, create: Create, n: int, keys: Callable[[], bytes | None],
                 value: Callable[[], Value], ordered: bool, weights: dict[str, float],
                 max_batch: int = 4) -> list[Op]:
    """``n`` random element ops on map ``m``; ``weights`` picks among the op kinds."""
    ops: list[Op] = []
    for _ in range(n):
        kind = g.pick(weights)
        if kind == "update":
            ops.append(Update(m, keys(), value(), g.update_flags()))
        elif kind == "lookup":
            ops.append(Lookup(m, keys(), g.lookup_flags()))
        elif kind == "delete":
            ops.append(Delete(m, keys()))
        elif kind == "next_key":
            if ordered:
                ops.append(NextKey(m, g.pick({CURSOR: 14, None: 2, "key": 4})))
                if ops[-1].key == "key":
                    ops[-1] = NextKey(m, keys())
            else:
                ops.append(Walk(m))
        elif kind == "lookup_and_delete":
            ops.append(LookupAndDelete(m, keys(), g.lookup_flags()))
        elif kind == "lookup_batch":
            delete = g.chance(0.3)
            if ordered:
                count = g.pick({0: 1, 1: 4, 2: 4, 3: 3, 4: 2, 5: 1,
                                create.max_entries + 2: 2})
                ops.append(LookupBatch(m, count, g.chance(0.6), delete,
                                       g.batch_elem_flags(), g.batch_flags()))
            elif g.chance(0.2):  # only answers the seed cannot change
                ops.append(LookupBatch(m, 0, False, delete, g.batch_elem_flags(), 0))
            else:
                ops.append(Dump(m, delete))
        elif kind == "update_batch":
            k = g.rng.randint(0, max_batch)
            ops.append(UpdateBatch(m, tuple(keys() or b"" for _ in range(k)),
                                   tuple(value() for _ in range(k)),
                                   g.batch_elem_flags(), g.batch_flags()))
        elif kind == "delete_batch":
            k = g.rng.randint(0, max_batch)
            ops.append(DeleteBatch(m, tuple(keys() or b"" for _ in range(k)),
                                   g.batch_elem_flags(), g.batch_flags()))
        elif kind == "walk":
            ops.append(Walk(m))
        elif kind == "dump":
            ops.append(Dump(m, g.chance(0.2)))
        elif kind == "freeze":
            ops.append(Freeze(m))
        elif kind == "info":
            ops.append(Info(m))
        elif kind == "set_cpu":
            ops.append(SetCpu(g.rng.randrange(g.ncpu)))
        elif kind.startswith("prog_"):
            if g.programs and create.map_type in PROG_LOOKUP_TYPES:
                if kind == "prog_lookup":
                    ops.append(ProgLookup(m, keys()))
                elif kind == "prog_update":
                    # A program's per-CPU update copies round_up(value_size, 8) bytes from
                    # its stack and zeroes only value_size bytes of the other CPUs' slots, so
                    # padding would hold stack garbage and stale bytes: no padding here.
                    if not map_traits(create.map_type).percpu or create.value_size % 8 == 0:
                        ops.append(ProgUpdate(m, keys(), g.data(create.value_size),
                                              g.update_flags()))
                else:
                    ops.append(ProgDelete(m, keys()))
        else:
            raise ValueError(f"unknown op kind {kind!r}")
    return ops


_HASH_WEIGHTS = {"update": 30, "lookup": 12, "delete": 8, "next_key": 12,
                 "lookup_and_delete": 5, "lookup_batch": 7, "update_batch": 4,
                 "delete_batch": 3, "walk": 3, "dump": 2, "freeze": 0.3, "info": 0.5}


def _hash_family(g: Gen, types: Sequence[int], lru: bool) -> list[Op]:
    mt = g.rng.choice(types)
    zero_seed = g.chance(0.8)
    flags = MapFlags.ZERO_SEED if zero_seed else 0
    if map_traits(mt).lru and g.chance(0.4):
        flags |= MapFlags.NO_COMMON_LRU
    if g.chance(0.02 if lru else 0.3):
        flags |= MapFlags.NO_PREALLOC
    flags |= g.access_flags(0.03)
    ks = g.pick({1: 2, 2: 2, 3: 2, 4: 3, 5: 2, 6: 1, 8: 3, 12: 2, 16: 2, 20: 1, 33: 1, 64: 1})
    vs = g.rng.choice([1, 2, 4, 7, 8, 12, 16, 24])
    me = g.pick({2: 1, 3: 1, 4: 1, 5: 1, 8: 1, 9: 1, 16: 1, 31: 1, 64: 1, 130: 0.3,
                 300: 0.2} if lru else {1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 8: 1, 16: 1, 31: 1})
    create = Create(0, mt, ks, vs, me, int(flags))
    pool = g.keys(ks, me * (3 if lru else 2) + 2)
    weights = dict(_HASH_WEIGHTS)
    if lru:
        weights.update(update=45, prog_lookup=10, prog_update=6, prog_delete=2, set_cpu=0.7)
    else:
        weights.update(prog_lookup=2, prog_update=3, prog_delete=1,
                       set_cpu=0.5 if mt == MapType.PERCPU_HASH else 0)
    n = g.rng.randint(20, 120 if lru else 90) + (2 * me if me > 64 else 0)
    return [create] + _element_ops(
        g, 0, create, n, lambda: g.rng.choice(pool), lambda: g.value(mt, vs), zero_seed,
        weights)


def gen_hash(g: Gen) -> list[Op]:
    """HASH and PERCPU_HASH: flags, full maps, deletes during walks, batches."""
    return _hash_family(g, [MapType.HASH, MapType.PERCPU_HASH], lru=False)


def gen_lru(g: Gen) -> list[Op]:
    """LRU_HASH and LRU_PERCPU_HASH (common and NO_COMMON_LRU): eviction, ref bits."""
    return _hash_family(g, [MapType.LRU_HASH, MapType.LRU_PERCPU_HASH], lru=True)


def gen_array(g: Gen) -> list[Op]:
    """ARRAY and PERCPU_ARRAY: every index exists, out-of-range indices, freeze."""
    mt = g.rng.choice([MapType.ARRAY, MapType.PERCPU_ARRAY])
    flags = g.pick({0: 20, MapFlags.MMAPABLE: 2, MapFlags.NUMA_NODE: 2,
                    MapFlags.INNER_MAP: 1, MapFlags.PRESERVE_ELEMS: 0.5})
    flags |= g.access_flags()
    ks = 4 if g.chance(0.97) else 8
    vs = g.rng.choice([1, 3, 4, 8, 12, 16, 32])
    me = g.rng.choice([1, 2, 3, 4, 7, 8, 16])
    create = Create(0, mt, ks, vs, me, int(flags))

    def key() -> bytes:
        if g.chance(0.03):
            return _u32(0xFFFFFFFF)
        return _u32(g.rng.randrange(me + 2))[:ks].ljust(ks, b"\0")

    weights = dict(_HASH_WEIGHTS, freeze=0.7, prog_lookup=2, prog_update=2, prog_delete=0.5,
                   set_cpu=0.5)
    return [create] + _element_ops(g, 0, create, g.rng.randint(15, 70), key,
                                   lambda: g.value(mt, vs), True, weights)


def gen_map_in_map(g: Gen) -> list[Op]:
    """ARRAY_OF_MAPS and HASH_OF_MAPS: inner maps compatible or not, ids, closed inners."""
    outer_type = g.rng.choice([MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS])
    inner_type = g.rng.choice([MapType.HASH, MapType.ARRAY, MapType.LRU_HASH,
                               MapType.PERCPU_ARRAY, MapType.QUEUE])
    iks = 0 if inner_type == MapType.QUEUE else 4
    inner_flags = int(MapFlags.INNER_MAP) if (inner_type == MapType.ARRAY
                                              and g.chance(0.4)) else 0
    ops: list[Op] = [Create(1, inner_type, iks, 8, 4, inner_flags)]
    inner = g.pick({1: 20, BAD_MAP: 1})
    zero_seed = outer_type != MapType.HASH_OF_MAPS or g.chance(0.8)
    oflags = int(MapFlags.ZERO_SEED) if (outer_type == MapType.HASH_OF_MAPS and zero_seed) else 0
    oks = 4 if outer_type == MapType.ARRAY_OF_MAPS else g.rng.choice([4, 8, 3])
    ovs = 4 if g.chance(0.97) else 8
    me = g.rng.choice([1, 2, 3, 4, 8])
    create = Create(0, outer_type, oks, ovs, me, oflags, inner=inner)
    ops.append(create)
    # Candidates 2..5: like the template, or differing in one attribute.
    for h in range(2, 6):
        variant = g.pick({"same": 6, "entries": 2, "type": 1, "flags": 1, "value": 1})
        c = Create(h, inner_type, iks, 8, 4, inner_flags)
        if variant == "entries":
            c = replace(c, max_entries=g.rng.choice([1, 2, 8]))
        elif variant == "type":
            c = replace(c, map_type=MapType.HASH if inner_type != MapType.HASH
                        else MapType.LRU_HASH, key_size=4)
        elif variant == "flags":
            c = replace(c, map_flags=(int(MapFlags.NO_PREALLOC) if inner_type == MapType.HASH
                                      else int(MapFlags.RDONLY_PROG)))
        elif variant == "value":
            c = replace(c, value_size=16)
        ops.append(c)
    pool = ([_u32(i) for i in range(me + 2)] if outer_type == MapType.ARRAY_OF_MAPS
            else g.keys(oks, me * 2 + 2))
    refs = [MapRef(h) for h in (1, 2, 3, 4, 5)] + [MapRef(BAD_MAP), MapRef(0)]
    weights = dict(_HASH_WEIGHTS, update=25, lookup_and_delete=2, freeze=0.2)
    n = g.rng.randint(15, 60)
    body = _element_ops(g, 0, create, n, lambda: g.rng.choice(pool),
                        lambda: g.rng.choice(refs), zero_seed, weights)
    # Close some inner maps part-way: the outer map keeps them (and their ids) alive.
    for h in (2, 3):
        if g.chance(0.4):
            body.insert(g.rng.randrange(len(body) + 1), Close(h))
    return ops + body


def gen_queue_stack(g: Gen) -> list[Op]:
    """QUEUE and STACK: push/peek/pop, full with and without BPF_EXIST, invalid commands."""
    mt = g.rng.choice([MapType.QUEUE, MapType.STACK])
    ks = 0 if g.chance(0.97) else 4
    vs = g.rng.choice([1, 4, 8, 13])
    me = g.rng.choice([1, 2, 3, 5, 8])
    flags = g.pick({0: 30, MapFlags.NUMA_NODE: 1, MapFlags.ZERO_SEED: 1,
                    MapFlags.NO_PREALLOC: 1}) | g.access_flags()
    create = Create(0, mt, ks, vs, me, int(flags))
    ops: list[Op] = [create]
    for _ in range(g.rng.randint(10, 60)):
        kind = g.pick({"push": 10, "peek": 5, "pop": 6, "other": 2, "freeze": 0.2})
        if kind == "push":
            ops.append(Update(0, None, g.data(vs),
                              g.pick({BPF_ANY: 12, BPF_EXIST: 6, BPF_NOEXIST: 1, 3: 1,
                                      BPF_F_LOCK: 1})))
        elif kind == "peek":
            ops.append(Lookup(0, None, g.lookup_flags()))
        elif kind == "pop":
            ops.append(LookupAndDelete(0, None, g.pick({0: 20, BPF_F_LOCK: 1, 1: 1})))
        elif kind == "freeze":
            ops.append(Freeze(0))
        else:
            ops.append(g.rng.choice([Delete(0, None), NextKey(0, None), LookupBatch(0, 2),
                                     UpdateBatch(0, (b"",), (g.data(vs),)), Info(0)]))
    return ops


def _lpm_key(prefixlen: int, data: bytes) -> bytes:
    return struct.pack("<I", prefixlen) + data


def gen_lpm(g: Gen) -> list[Op]:
    """LPM_TRIE: nested prefixes, longest-prefix lookups, post-order walks, full tries."""
    ds = g.rng.choice([1, 2, 4, 8, 16])
    ks = 4 + ds
    vs = g.rng.choice([1, 4, 8, 12])
    me = g.rng.choice([1, 2, 4, 8, 16])
    flags = int(MapFlags.NO_PREALLOC) if g.chance(0.95) else 0
    flags |= g.access_flags(0.03)
    create = Create(0, MapType.LPM_TRIE, ks, vs, me, flags)
    maxlen = ds * 8
    prefixes: list[bytes] = []
    for _ in range(me * 2 + 2):
        if prefixes and g.chance(0.5):  # nest under an existing prefix
            base = g.rng.choice(prefixes)
            plen = min(maxlen, struct.unpack("<I", base[:4])[0] + g.rng.randint(0, 8))
            data = base[4:]
            # keep the base's leading bits, randomise the rest
            mask = int.from_bytes(b"\xff" * ds, "big") >> min(plen, maxlen) if plen < maxlen \
                else 0
            rnd = int.from_bytes(g.data(ds), "big") & mask
            data = (int.from_bytes(data, "big") & ~mask & ((1 << maxlen) - 1) | rnd).to_bytes(
                ds, "big")
            prefixes.append(_lpm_key(plen, data))
        else:
            plen = g.pick({g.rng.randint(0, maxlen): 20, maxlen: 4, 0: 1, maxlen + 1: 1})
            prefixes.append(_lpm_key(plen, g.data(ds)))

    def key() -> bytes:
        if g.chance(0.25):  # a full-length address: longest-prefix match
            base = g.rng.choice(prefixes)
            return _lpm_key(maxlen, base[4:] if g.chance(0.6) else g.data(ds))
        return g.rng.choice(prefixes)

    weights = dict(_HASH_WEIGHTS, lookup_and_delete=2, freeze=0.2)
    return [create] + _element_ops(g, 0, create, g.rng.randint(15, 80), key,
                                   lambda: g.data(vs), True, weights)


def gen_bloom(g: Gen) -> list[Op]:
    """BLOOM_FILTER: push and peek (peeks of absent values too, with BPF_F_ZERO_SEED)."""
    vs = g.rng.choice([1, 3, 4, 8, 16])
    me = g.rng.choice([1, 2, 4, 16, 100])
    zero_seed = g.chance(0.85)
    # Without the zero seed a peek is only seed-independent for a value that certainly went
    # in, so those maps get no access flags and no freeze (either would make pushes fail).
    flags = int(MapFlags.ZERO_SEED) | g.access_flags(0.03) if zero_seed else 0
    extra = g.pick({0: 5, g.rng.randint(1, 15): 10, 16: 1})
    ks = 0 if g.chance(0.97) else 4
    ops: list[Op] = [Create(0, MapType.BLOOM_FILTER, ks, vs, me, flags, map_extra=extra)]
    pool = g.keys(vs, me * 3 + 3)
    pushed: list[bytes] = []
    for _ in range(g.rng.randint(10, 60)):
        kind = g.pick({"push": 10, "peek": 10, "other": 2})
        if kind == "push":
            v = g.rng.choice(pool)
            flag = g.pick({BPF_ANY: 20, BPF_EXIST: 1, BPF_NOEXIST: 1})
            if flag == BPF_ANY:
                pushed.append(v)
            ops.append(Update(0, None, v, flag))
        elif kind == "peek":
            # Without the zero seed only pushed values have a seed-independent answer.
            candidates = pool if zero_seed else pushed
            if candidates:
                ops.append(BloomPeek(0, g.rng.choice(candidates)))
        else:
            ops.append(g.rng.choice([Delete(0, None), NextKey(0, None), LookupBatch(0, 2),
                                     LookupAndDelete(0, None), Info(0)]
                                    + [Freeze(0)] * zero_seed))
    return ops


def _devmap_value(g: Gen, vs: int) -> bytes:
    ifindex = g.pick({1: 16, 0: 3, 424242: 1})
    prog = g.pick({0: 20, 0xFFFFFFFF: 2, BAD_FD: 1})
    return (_u32(ifindex) + _u32(prog))[:vs]


def gen_devmap(g: Gen) -> list[Op]:
    """DEVMAP and DEVMAP_HASH with ifindex 1 (lo), 0 and a missing device."""
    mt = g.rng.choice([MapType.DEVMAP, MapType.DEVMAP_HASH])
    vs = g.rng.choice([4, 8])
    me = g.rng.choice([1, 2, 4, 8])
    flags = g.pick({0: 20, MapFlags.NUMA_NODE: 1, MapFlags.RDONLY_PROG: 1}) | \
        g.access_flags(0.03)
    ks = 4 if g.chance(0.97) else 8
    create = Create(0, mt, ks, vs, me, int(flags))
    if mt == MapType.DEVMAP:
        pool = [_u32(i) for i in range(me + 2)]
    else:
        pool = [_u32(g.rng.getrandbits(32)) for _ in range(me * 2 + 2)] + [_u32(i) for i in
                                                                             range(3)]
    weights = dict(_HASH_WEIGHTS, lookup_and_delete=1, lookup_batch=1, update_batch=1,
                   delete_batch=1, dump=0, freeze=0.2)
    return [create] + _element_ops(g, 0, create, g.rng.randint(10, 50),
                                   lambda: g.rng.choice(pool), lambda: _devmap_value(g, vs),
                                   True, weights)


def gen_cpumap(g: Gen) -> list[Op]:
    """CPUMAP: qsize values (0 removes, > 16384 overflows), CPUs that do not exist."""
    vs = g.rng.choice([4, 8])
    me = g.rng.choice([1, 2, 4])
    flags = g.pick({0: 20, MapFlags.NUMA_NODE: 1, MapFlags.RDONLY: 1})
    create = Create(0, MapType.CPUMAP, 4, vs, me, int(flags))

    def value() -> bytes:
        qsize = g.pick({0: 3, 1: 2, 64: 4, 192: 4, 16384: 1, 16385: 1})
        return (_u32(qsize) + _u32(g.pick({0: 20, 0xFFFFFFFF: 1})))[:vs]

    weights = {"update": 10, "lookup": 8, "delete": 4, "next_key": 5, "walk": 2,
               "lookup_and_delete": 1, "lookup_batch": 1, "info": 0.5}
    return [create] + _element_ops(g, 0, create, g.rng.randint(6, 25),
                                   lambda: _u32(g.rng.randrange(me + 2)), value, True,
                                   weights)


def gen_sockmap(g: Gen) -> list[Op]:
    """SOCKMAP and SOCKHASH with real sockets: listening, established, unbound, UDP, a pipe."""
    mt = g.rng.choice([MapType.SOCKMAP, MapType.SOCKHASH])
    vs = 8 if g.chance(0.8) else 4
    me = g.rng.choice([1, 2, 4, 8])
    ks = 4 if mt == MapType.SOCKMAP else g.rng.choice([1, 4, 8])
    create = Create(0, mt, ks, vs, me, int(g.pick({0: 20, MapFlags.NUMA_NODE: 1})))
    ops: list[Op] = [create]
    nsock = 5
    for s in range(nsock):
        ops.append(OpenSocket(s, g.rng.choice(SOCKET_KINDS)))
    pool = ([_u32(i) for i in range(me + 2)] if mt == MapType.SOCKMAP
            else g.keys(ks, me * 2 + 2))
    weights = {"update": 12, "lookup": 8, "delete": 5, "next_key": 5, "walk": 2,
               "lookup_and_delete": 1, "lookup_batch": 1, "info": 0.3}
    body = _element_ops(g, 0, create, g.rng.randint(10, 40), lambda: g.rng.choice(pool),
                        lambda: SockRef(g.rng.randrange(nsock), vs), True, weights)
    # Closing a socket removes it from every map.
    if g.chance(0.5):
        body.insert(g.rng.randrange(len(body) + 1), CloseSocket(g.rng.randrange(nsock)))
    return ops + body


# Types whose creation both backends can do, for the random-attribute creates.
CREATE_TYPES = (MapType.HASH, MapType.ARRAY, MapType.PERCPU_HASH, MapType.PERCPU_ARRAY,
                MapType.LRU_HASH, MapType.LRU_PERCPU_HASH, MapType.LPM_TRIE,
                MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS, MapType.DEVMAP, MapType.SOCKMAP,
                MapType.CPUMAP, MapType.SOCKHASH, MapType.QUEUE, MapType.STACK,
                MapType.DEVMAP_HASH, MapType.RINGBUF, MapType.USER_RINGBUF,
                MapType.BLOOM_FILTER)
_RING_TYPES = (MapType.RINGBUF, MapType.USER_RINGBUF)  # max_entries bytes, nothing per entry
# Large max_entries values that each listed type rejects before allocating anything.
_HUGE_OK = {
    MapType.HASH: (1 << 27) + 1, MapType.PERCPU_HASH: (1 << 27) + 1,
    MapType.LRU_HASH: (1 << 27) + 1, MapType.LRU_PERCPU_HASH: (1 << 27) + 1,
    MapType.HASH_OF_MAPS: (1 << 27) + 1, MapType.SOCKHASH: (1 << 27) + 1,
    MapType.CPUMAP: 8193, MapType.DEVMAP_HASH: (1 << 31) + 1,
}
_MEM_LIMIT = 16 << 20


def _random_create(g: Gen, m: int, inner: int) -> Create:
    mt = g.pick({t: 4 for t in CREATE_TYPES} | {0: 1, 34: 0.5, 1000: 0.3})
    ks = g.pick({0: 3, 1: 1, 2: 1, 3: 1, 4: 8, 5: 2, 8: 3, 16: 2, 64: 1, 260: 1, 261: 1,
                 512: 1, 513: 1})
    vs = g.pick({0: 3, 1: 1, 4: 8, 7: 1, 8: 6, 16: 2, 24: 1, 4096: 1, 32768: 1, 32769: 1,
                 4194255 - 16: 0.5, 1 << 23: 0.5})
    me = g.pick({0: 3, 1: 4, 2: 2, 3: 2, 4: 4, 8: 2, 64: 2, 4095: 1, 4096: 4, 8192: 2,
                 12288: 1, 1 << 16: 1, "huge": 3, (1 << 31) + 1: 1, 0xFFFFFFFF: 1})
    if me == "huge":
        me = _HUGE_OK.get(mt, 4096)
    flags = 0
    if g.chance(0.35):
        for bit in range(20):
            if g.chance(0.05):
                flags |= 1 << bit
    if g.chance(0.04):  # a bit no kernel defines (yet)
        flags |= 1 << g.rng.randint(20, 31)
    if g.chance(0.15):
        flags |= int(MapFlags.ZERO_SEED)
    if g.chance(0.15):
        flags |= int(MapFlags.NO_PREALLOC)
    numa = g.pick({0: 10, 1: 2, 0xFFFFFFFF: 2, 7: 1})
    if g.chance(0.2):
        flags |= int(MapFlags.NUMA_NODE)
    extra = 0
    if mt == MapType.BLOOM_FILTER:
        extra = g.pick({0: 4, g.rng.randint(1, 15): 6, 16: 1, 1 << 40: 0.5})
    elif g.chance(0.03):
        extra = 1
    name = g.pick({b"": 6, b"pybpf_map": 3, b"x.y_9": 1, b"bad-name": 1, b"A" * 15: 1,
                   b"B" * 16: 1})
    # Never ask for more memory than the machine should spend on one create.
    if me not in _HUGE_OK.values() and me <= 1 << 16:
        ncpu = g.ncpu if mt in (MapType.PERCPU_HASH, MapType.PERCPU_ARRAY,
                                MapType.LRU_PERCPU_HASH) else 1
        if mt in _RING_TYPES:
            cost = me
        elif mt == MapType.BLOOM_FILTER:
            cost = me * 16
        else:
            cost = (me + 2) * (ks + vs + 64) * ncpu
        if cost > _MEM_LIMIT:
            me = g.rng.choice([1, 2, 4])
            if (me + 2) * (ks + vs + 64) * ncpu > _MEM_LIMIT:
                vs = 8
    # Past 2^16 entries only types that reject the size before allocating (or, the rings and
    # LPM_TRIE, allocate nothing per entry) keep it: an ARRAY of 2^31 entries is created.
    if me > 1 << 16 and mt not in _HUGE_OK and mt != MapType.LPM_TRIE and mt not in _RING_TYPES:
        me = 4096
    if mt in _RING_TYPES and me > 1 << 20 and me not in (0xFFFFFFFF, (1 << 31) + 1):
        me = 1 << 20
    return Create(m, mt, ks, vs, me, flags,
                  inner=inner if map_traits(mt).map_in_map else None, numa_node=numa,
                  map_name=name, map_extra=extra)


def _create_elem_ops(g: Gen, c: Create) -> list[Op]:
    """A few element ops fitting a random create (they answer 'nomap' if it failed)."""
    def key() -> bytes | None:
        return None if c.key_size == 0 else g.data(c.key_size)

    def value() -> Value:
        if map_traits(c.map_type).fd_values:
            return MapRef(BAD_MAP)
        if c.map_type in (MapType.DEVMAP, MapType.DEVMAP_HASH):
            return _devmap_value(g, min(c.value_size, 8)).ljust(c.value_size, b"\0")
        if c.map_type == MapType.CPUMAP:
            return (_u32(g.pick({0: 1, 64: 2, 16385: 1})) + b"\0" * 12)[:c.value_size]
        if map_traits(c.map_type).sockets:
            return (_u32(g.pick({0x7FFFFFFF: 1, 0x80000000: 1})) + b"\0" * 12)[:c.value_size]
        return g.value(c.map_type, c.value_size) if c.value_size <= 1 << 16 else b""

    ops: list[Op] = []
    for _ in range(g.rng.randint(0, 3)):
        kind = g.pick({"update": 3, "lookup": 2, "delete": 1, "next": 1, "lad": 1, "batch": 1,
                       "freeze": 0.5})
        if kind == "update":
            v = value()
            if v != b"" or c.value_size == 0:
                ops.append(Update(c.m, key(), v, g.pick({0: 4, BPF_NOEXIST: 1, BPF_EXIST: 1})))
        elif kind == "lookup":
            ops.append(Lookup(c.m, key()))
        elif kind == "delete":
            ops.append(Delete(c.m, key()))
        elif kind == "next":
            ops.append(NextKey(c.m, None) if not map_traits(c.map_type).htab_batch
                       or c.map_flags & MapFlags.ZERO_SEED else Walk(c.m))
        elif kind == "lad":
            ops.append(LookupAndDelete(c.m, key()))
        elif kind == "batch":
            ops.append(LookupBatch(c.m, 0 if map_traits(c.map_type).htab_batch else 4))
        else:
            ops.append(Freeze(c.m))
    return ops


def gen_create(g: Gen) -> list[Op]:
    """Random map_create attributes across every type: errno, or success and map info."""
    ops: list[Op] = [Create(0, MapType.ARRAY, 4, 8, 4)]  # an inner map template
    for i in range(g.rng.randint(8, 24)):
        # Each create gets its own handle, so a shrunk sequence never aims an op at another
        # create's map.
        inner = g.pick({0: 10, BAD_MAP: 1, 1: 1})
        c = _random_create(g, 1 + i, inner)
        ops.append(c)
        ops.extend(_create_elem_ops(g, c))
        if g.chance(0.7):
            ops.append(Close(c.m))
    return ops


GENERATORS: dict[str, Callable[[Gen], list[Op]]] = {
    "hash": gen_hash,
    "lru": gen_lru,
    "array": gen_array,
    "map_in_map": gen_map_in_map,
    "queue_stack": gen_queue_stack,
    "lpm_trie": gen_lpm,
    "bloom_filter": gen_bloom,
    "devmap": gen_devmap,
    "cpumap": gen_cpumap,
    "sockmap": gen_sockmap,
    "create": gen_create,
}


def generate(family: str, seed: int, index: int, ncpu: int,
             programs: bool = True) -> OpSequence:
    """Sequence ``index`` of ``family`` for ``seed`` (the same on every run and machine);
    ``programs=False`` leaves out the program-side lookups."""
    rng = random.Random(f"pybpf-differential:{seed}:{family}:{index}")
    return OpSequence(f"{family} seed={seed} #{index}",
                     GENERATORS[family](Gen(rng, ncpu, programs)))
