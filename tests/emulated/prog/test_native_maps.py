"""The native tier on map values (prog/native.py): values a helper returned and global data
reached natively, hardware atomics (semantics.py's ATOMIC_RMW in the Python engines), and
array and hash map lookups without Python, charged from machine code with modeled time (the C
cache model's pybpf_native_charge). Every engine gives the same R0, instruction count,
map contents and access statistics, and with modeled time the same clocks and breakdowns."""

from __future__ import annotations

import errno
import functools
import random
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import hash_map_state
from pybpf import asm
from pybpf import system as make_system
from pybpf.accelerator import ATOMIC_RMW
from pybpf.asm import FP, R0, R1, R2, R3, R4, R6, R7
from pybpf.asm import builder as b
from pybpf.asm.opcodes import ATOMIC_FETCH, AtomicOp
from pybpf.btf import Btf, Int, Member, Struct
from pybpf.emulated import VirtualTimeScheduler
from pybpf.emulated.machine import timing as timing_module
from pybpf.emulated.prog import native
from pybpf.emulated.prog.native import _memory_op
from pybpf.errors import ProgramFault
from pybpf.uapi import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_LOCK,
    BPF_F_NO_PREALLOC,
    BPF_NOEXIST,
    MapType,
    ProgType,
)

pytestmark = pytest.mark.skipif(native.native_missing() is not None,
                                reason=str(native.native_missing()))
needs_accel = pytest.mark.skipif(ATOMIC_RMW is None,
                                 reason="the C accelerator (pybpf._accel) is not built: "
                                        "compiled code leaves map values to Python")

ENGINES = ("interp", "jit", "native")


def built(symbol: str) -> bool:
    """Whether the C cache model has the native tier's function ``symbol``."""
    return native._cache_model_symbol(symbol) is not None


def load(system, items, maps: dict[str, int]):
    insns = asm.encode(asm.assemble(items).with_map_fds(lambda name: maps[name]))
    return system.prog_from_fd(system.prog_load(ProgType.SCHED_CLS, insns))


def contents(system, fd, entries: int) -> dict[int, bytes]:
    """The map's values of keys 0..entries-1 (those present)."""
    found = {}
    for k in range(entries):
        try:
            found[k] = system.map_lookup_elem(fd, k.to_bytes(4, "little"))
        except OSError:
            pass
    return found


def run_on_each_engine(items, entries: int = 4, modeled: bool = False, runs: int = 1,
                       map_type: int = MapType.ARRAY, prefill: int = 0, cpu: int = 0,
                       **machine) -> dict:
    """Per engine: (R0s, instruction counts, the map's values, its access statistics) of
    runs on ``cpu`` (of a machine of ``machine``'s topology); ``prefill`` keys from 0 are in
    the map first, each with value 0."""
    results = {}
    for engine in ENGINES:
        system = make_system("emulated", modeled_time=modeled, **machine)
        fd = system.map_create(map_type, 4, 8, entries)
        for k in range(prefill):
            system.map_update_elem(fd, k.to_bytes(4, "little"), bytes(8))
        prog = load(system, items, {"m": fd})
        r0s, counts = [], []
        for _ in range(runs):
            with system.machine.on_cpu(cpu):
                rs = prog.run(bytearray(64), engine=engine)
            r0s.append(rs.retval)
            counts.append(rs.count)
        if engine == "native":
            assert prog.executable.native is not None, prog.executable.native_refused
        stats = system.map_from_fd(fd).access_stats.totals()  # the programs' accesses
        results[engine] = (r0s, counts, contents(system, fd, entries), stats)
    return results


def agree(results: dict) -> None:
    assert len({repr(r) for r in results.values()}) == 1, results


def lookup(index_reg_or_imm, miss_label: str) -> list:
    """R0 = &m[index] (the key stored at fp-4), to ``miss_label`` when NULL."""
    store = (b.stx(4, FP, -4, index_reg_or_imm) if isinstance(index_reg_or_imm, asm.Reg)
             else b.st(4, FP, -4, index_reg_or_imm))
    return [store, b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4),
            b.call("map_lookup_elem"), b.jeq(R0, 0, miss_label)]


def counting_loop(indices: int, iterations: int, stride: int = 1) -> list:
    """Add 1 to m[i % indices * stride] ``iterations`` times; R0 the iterations. (Both ways
    through the NULL check leave the same state, so the verifier prunes the second.)"""
    return [b.mov64(R6, 0), b.label("loop"),
            b.mov64(R3, R6), b.mod64(R3, indices), b.mul64(R3, stride),
            *lookup(R3, "next"), b.mov64(R1, 1), b.atomic_add64(R0, 0, R1),
            b.label("next"), b.mov64(R0, 0), b.mov64(R1, 0), b.add64(R6, 1),
            b.jlt(R6, iterations, "loop"), b.mov64(R0, R6), b.exit_()]


@pytest.mark.parametrize("map_type", [MapType.ARRAY, MapType.PERCPU_ARRAY])
@pytest.mark.parametrize("modeled", [False, True])
# past LOOKUP_CACHE indices a run fills the cache (then Python does the rest)
@pytest.mark.parametrize("indices", [1, 3, 17, native.LOOKUP_CACHE + 6])
def test_array_lookups_and_atomics_agree_across_engines(map_type, modeled, indices):
    results = run_on_each_engine(counting_loop(indices, 200), entries=100, modeled=modeled,
                                 runs=2, map_type=map_type)
    agree(results)
    r0s, _, values, (local, remote) = results["native"]
    assert r0s == [200, 200] and local + remote == 400
    assert sum(int.from_bytes(v, "little") for v in values.values()) == 400  # all CPUs


HASH_MAPS = [MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH, MapType.LRU_PERCPU_HASH]
PER_CPU = (MapType.PERCPU_ARRAY, MapType.PERCPU_HASH, MapType.LRU_PERCPU_HASH)


def value_of(system, map_type: int) -> bytes:
    """A zero value as the syscall takes it (one slot per CPU for a per-CPU map)."""
    return bytes(8 * (system.machine.num_cpus if map_type in PER_CPU else 1))


def hash_churn(keys: int, iterations: int) -> list:
    """Per iteration on key i % keys: add 1 to its value if present, else insert it with 1;
    then every 7th iteration delete it (so keys come and go, and elements are reused)."""
    return [b.st(8, FP, -16, 1), b.mov64(R6, 0), b.label("loop"),
            b.mov64(R3, R6), b.mod64(R3, keys), *lookup(R3, "insert"),
            b.mov64(R1, 1), b.atomic_add64(R0, 0, R1), b.ja("next"),
            b.label("insert"), b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4),
            b.mov64(R3, FP), b.add64(R3, -16), b.mov64(asm.Reg(4), 0), b.call("map_update_elem"),
            b.label("next"), b.mov64(R3, R6), b.mod64(R3, 7), b.jne(R3, 0, "cont"),
            b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4), b.call("map_delete_elem"),
            b.label("cont"), *(b.mov64(asm.Reg(reg), 0) for reg in (0, 1, 2, 3, 4, 5)),
            b.add64(R6, 1), b.jlt(R6, iterations, "loop"), b.mov64(R0, R6), b.exit_()]


@pytest.mark.parametrize("map_type", HASH_MAPS)
@pytest.mark.parametrize("modeled", [False, True])
@pytest.mark.parametrize("keys", [1, 5, 40])
def test_hash_lookups_updates_and_deletes_agree_across_engines(map_type, modeled, keys):
    results = run_on_each_engine(hash_churn(keys, 121), entries=64, modeled=modeled, runs=2,
                                 map_type=map_type)
    agree(results)
    assert results["native"][0] == [121, 121] and results["native"][2]  # i = 120 inserts
    if map_type == MapType.HASH:  # what the C core did with its last key, as Python counts it
        assert results["native"][2] == {k: v.to_bytes(8, "little")
                                        for k, v in churned(keys, 121, runs=2).items()}


def churned(keys: int, iterations: int, runs: int) -> dict[int, int]:
    """The values ``runs`` runs of hash_churn leave."""
    values: dict[int, int] = {}
    for _ in range(runs):
        for i in range(iterations):
            values[i % keys] = values.get(i % keys, 0) + 1
            if i % 7 == 0:
                del values[i % keys]
    return values


@pytest.mark.parametrize("map_type", [MapType.ARRAY, MapType.PERCPU_ARRAY, *HASH_MAPS])
@pytest.mark.parametrize("modeled", [False, True])
def test_lookups_from_another_node_are_counted_remote_on_every_engine(map_type, modeled):
    """Elements made on CPU 0's node, looked up from CPU 1 on node 1: remote, unless a
    per-CPU slot (its own CPU's)."""
    items = hash_churn(5, 60) if map_type in HASH_MAPS else counting_loop(3, 60)
    results = run_on_each_engine(items, entries=16, modeled=modeled, runs=2,
                                 map_type=map_type, cpus=2, nodes=2, cpu=1)
    agree(results)
    local, remote = results["native"][3]
    assert (local, remote) != (0, 0)
    assert (remote == 0) == (map_type in PER_CPU)


@pytest.mark.parametrize("map_type", [MapType.LRU_HASH, MapType.LRU_PERCPU_HASH])
@pytest.mark.parametrize("modeled", [False, True])
def test_lru_lookups_set_the_reference_bits_that_decide_evictions(map_type, modeled):
    """Which elements updates evict depends on the reference bits lookups set: 40 keys
    churned through 16 entries leave the same map on every engine, and so does a run that
    keeps one key alive by looking it up."""
    results = run_on_each_engine(hash_churn(40, 200), entries=16, modeled=modeled, runs=2,
                                 map_type=map_type)
    agree(results)
    # keys 0-7 fill 8 entries; each of 20 new keys evicts one, and a lookup of key 0 after
    # each sets its bit again (the evictions' rotation clears it), so key 0 survives: on
    # every engine, its lookups native after the first
    items = [b.st(8, FP, -16, 1), *lookup(0, "first"), b.label("first")]
    for k in range(10, 30):
        items += [b.st(4, FP, -8, k), b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -8),
                  b.mov64(R3, FP), b.add64(R3, -16), b.mov64(asm.Reg(4), 0),
                  b.call("map_update_elem"), *lookup(0, f"next{k}"), b.label(f"next{k}")]
    items += [b.mov64(R0, 0), b.exit_()]
    for engine in ENGINES:
        system = make_system("emulated", modeled_time=modeled)
        fd = system.map_create(map_type, 4, 8, 8)
        for k in range(8):
            system.map_update_elem(fd, k.to_bytes(4, "little"), value_of(system, map_type))
        load(system, items, {"m": fd}).run(bytearray(64), engine=engine)
        refs = sorted((int.from_bytes(key, "little"), elem.ref)
                      for key, elem in system.map_from_fd(fd).table.items())
        assert refs == [(0, 1), *((k, 0) for k in range(23, 30))], engine


@pytest.mark.parametrize("map_type", PER_CPU)
def test_a_per_cpu_lookup_names_the_running_cpus_slot(map_type):
    items = hash_churn(3, 30) if map_type in HASH_MAPS else counting_loop(3, 30)
    results = run_on_each_engine(items, entries=8, runs=2, map_type=map_type, cpu=1)
    agree(results)
    values = results["native"][2]
    assert values and all(not any(v[:8]) for v in values.values())  # CPU 0's slots untouched
    assert any(any(v[8:16]) for v in values.values())


def test_a_lookup_past_max_entries_is_null_and_not_counted():
    items = [*lookup(4, "miss"), b.mov64(R0, 1), b.exit_(), b.label("miss"), b.mov64(R0, 2),
             b.exit_()]
    results = run_on_each_engine(items, entries=4)
    agree(results)
    assert results["native"][0] == [2] and results["native"][3] == (0, 0)


def test_lookups_of_one_index_give_one_pointer():
    # the second lookup comes from the native cache: the same pointer as the first
    items = [*lookup(2, "miss"), b.mov64(R6, R0), *lookup(2, "miss"), b.sub64(R0, R6),
             b.exit_(), b.label("miss"), b.mov64(R0, 99), b.exit_()]
    results = run_on_each_engine(items, runs=3)
    agree(results)
    assert results["native"][0] == [0, 0, 0]


def test_the_inlined_lookup_reads_a_key_that_is_not_on_the_stack():
    # the key lives in a map value (m[1] holds 3): native through the value table
    items = [*lookup(1, "miss"), b.st(4, R0, 0, 3), b.mov64(R2, R0), b.ld_map_fd(R1, "m"),
             b.call("map_lookup_elem"), b.jeq(R0, 0, "miss"), b.st(8, R0, 0, 77),
             b.mov64(R0, 1), b.exit_(), b.label("miss"), b.mov64(R0, 0), b.exit_()]
    results = run_on_each_engine(items)
    agree(results)
    assert int.from_bytes(results["native"][2][3], "little") == 77


@needs_accel
def test_after_the_first_lookup_of_each_index_the_loop_stays_native(monkeypatch):
    calls = {"lookup": 0, "memory": 0}

    def counted(name, func):
        def call(*args):
            calls[name] += 1
            return func(*args)
        return call

    monkeypatch.setattr(native._Run, "map_lookup",
                        counted("lookup", native._Run.map_lookup))
    monkeypatch.setattr(native, "_memory_op", counted("memory", native._memory_op))
    for map_type in (MapType.ARRAY, MapType.PERCPU_ARRAY, *HASH_MAPS):
        calls.update(lookup=0, memory=0)
        system = make_system("emulated", modeled_time=False)
        fd = system.map_create(map_type, 4, 8, 3 * native.LOOKUP_CACHE)
        if map_type in HASH_MAPS:
            for k in (0, native.LOOKUP_CACHE, 2 * native.LOOKUP_CACHE):
                system.map_update_elem(fd, k.to_bytes(4, "little"), value_of(system, map_type))
        # an array's three indices share a home entry in the cache: probing keeps them all
        prog = load(system, counting_loop(3, 300, stride=native.LOOKUP_CACHE), {"m": fd})
        # the cache is the run's, but a value's first lookup in a run is native too
        # (pybpf_native_value, pybpf_native_array_value), once the element exists: an
        # array's three come to be in the first run's lookups through Python
        in_c = native._value_address() is not None
        made = 3 if map_type in (MapType.ARRAY, MapType.PERCPU_ARRAY) or not in_c else 0
        for run in range(2):
            with system.machine.on_cpu(1):  # a per-CPU map's slot is the running CPU's
                assert prog.run(bytearray(64), engine="native").retval == 300
            expected = made if in_c else 3 * (run + 1)
            assert calls == {"lookup": expected, "memory": 0}, map_type


@pytest.mark.parametrize("map_type, expected", [
    (MapType.ARRAY, True), (MapType.PERCPU_ARRAY, True), (MapType.HASH, True),
    (MapType.PERCPU_HASH, True), (MapType.LRU_HASH, True), (MapType.LRU_PERCPU_HASH, True),
    (MapType.DEVMAP, False)])
def test_which_lookups_run_without_python(map_type, expected):
    """Plain arrays and hash maps, LRU ones included (with modeled time, where the C cache
    model charges them)."""
    for modeled_time in (False, True):
        system = make_system("emulated", modeled_time=modeled_time)
        fd = system.map_create(map_type, 4, 8, 4)
        prog = load(system, counting_loop(1, 1) if expected else [
            b.ld_map_fd(R1, "m"), b.mov64(R0, 0), b.exit_()], {"m": fd})
        chargeable = not modeled_time or (system.machine.timing.cache_model == "C"
                                          and built(native.CHARGE_SYMBOL))
        assert bool(native.native_lookup_maps(prog.executable)) == (
            expected and native.NATIVE_VALUES and chargeable)


@needs_accel
@pytest.mark.parametrize("map_type", [MapType.ARRAY, MapType.HASH])
def test_values_are_released_when_the_run_ends(map_type):
    """A value reached natively is pinned (exported: a memoryview from Python, a BufferPin
    from C) while the run lasts, and only then."""
    system = make_system("emulated", modeled_time=False)
    fd = system.map_create(map_type, 4, 8, 4)
    for k in range(4 if map_type == MapType.HASH else 0):
        system.map_update_elem(fd, k.to_bytes(4, "little"), bytes(8))
    prog = load(system, counting_loop(4, 8), {"m": fd})
    with system.machine.on_cpu(0):
        for _ in range(3):  # the first run's lookups are Python's, the next ones C's
            assert prog.run(bytearray(64), engine="native").retval == 8
    bpf_map = system.map_from_fd(fd)
    value = bpf_map.elems[0] if map_type == MapType.ARRAY else bpf_map.table[bytes(4)].value
    assert int.from_bytes(value, "little") == 6
    value.append(0)  # BufferError while an export pins it
    value.pop()


RMW_OPS = [AtomicOp.ADD, AtomicOp.OR, AtomicOp.AND, AtomicOp.XOR]
atomic_ops = st.sampled_from([*RMW_OPS, *(op | ATOMIC_FETCH for op in RMW_OPS),
                              AtomicOp.XCHG, AtomicOp.CMPXCHG])
u64 = st.integers(0, (1 << 64) - 1)


@settings(max_examples=60, deadline=None)
@given(op=atomic_ops, size=st.sampled_from([4, 8]), initial=u64, src=u64, r0=u64,
       on_stack=st.booleans())
def test_atomics_agree_across_engines(op, size, initial, src, r0, on_stack):
    """Each op of each size on a map value and on the stack: the old value where it goes
    (src for fetches and xchg, R0 for cmpxchg) and the word after it."""
    target = [b.mov64(R6, FP), b.add64(R6, -16)] if on_stack else [*lookup(0, "miss"),
                                                                      b.mov64(R6, R0)]
    items = [*target, b.lddw(R1, initial), b.stx(8, R6, 0, R1), b.lddw(R3, src),
             b.lddw(R0, r0), b.atomic(size, op, R6, 0, R3),
             b.ldx(8, R1, R6, 0), b.xor64(R0, R1), b.lsh64(R3, 1), b.xor64(R0, R3),
             b.exit_()]
    if not on_stack:
        items += [b.label("miss"), b.mov64(R0, 0), b.exit_()]
    agree(run_on_each_engine(items))


@needs_accel
def test_native_and_python_atomics_on_one_value_lose_no_update():
    """Compiled programs run without the GIL: threads adding to one value, some on the
    native tier and some on the JIT, must all be counted."""
    system = make_system("emulated", modeled_time=False)
    fd = system.map_create(MapType.ARRAY, 4, 8, 1)
    prog = load(system, counting_loop(1, 20_000), {"m": fd})

    def work(engine):
        for _ in range(5):
            prog.run(bytearray(64), engine=engine)

    threads = [threading.Thread(target=work, args=(engine,))
               for engine in ("native", "native", "jit", "native")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert int.from_bytes(system.map_lookup_elem(fd, bytes(4)), "little") == 4 * 5 * 20_000


@pytest.mark.parametrize("map_type, helper, keeps", [
    (MapType.ARRAY, None, False),  # lookups inlined, values native: no GIL
    (MapType.HASH, None, True),  # a hash lookup reads the map's table under the GIL
    (MapType.ARRAY, "ktime_get_ns", True),  # a helper through Python
    (MapType.HASH, "map_delete_elem", True),  # HtabCore's op
])
def test_a_run_keeps_the_gil_where_its_code_calls_what_takes_it(map_type, helper, keeps,
                                                                 monkeypatch):
    """A compiled program whose code calls what takes the GIL keeps it for the whole run
    (call_native's keep_gil), one whose code does not lets it go; without modeled time.
    Without the C accelerator map values go through Python, so every run with a map lookup
    keeps it."""
    keeps = keeps or not native.NATIVE_VALUES
    system = make_system("emulated", modeled_time=False)
    fd = system.map_create(map_type, 4, 8, 4)
    items = counting_loop(1, 10)
    if helper == "map_delete_elem":
        items = [*items[:-2], b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4),
                 b.call(helper), b.mov64(R0, 0), b.exit_()]
    elif helper is not None:
        items = [b.call(helper), *items]
    prog = load(system, items, {"m": fd})
    asked = []
    call = native.CALL_NATIVE or native._ctypes_call
    monkeypatch.setattr(native, "CALL_NATIVE",
                        lambda *args: asked.append(args[-1]) or call(*args))
    prog.run(bytearray(64), engine="native")
    assert prog.executable.native.keeps_gil is keeps
    assert asked == [keeps]


@needs_accel
def test_atomic_rmw_refuses_what_is_not_an_aligned_word_of_writable_memory():
    buf = bytearray(16)
    assert ATOMIC_RMW(buf, 8, 8, AtomicOp.ADD | ATOMIC_FETCH, 5, 0) == 0
    assert ATOMIC_RMW(buf, 8, 8, AtomicOp.CMPXCHG, 9, 5) == 5
    assert ATOMIC_RMW(buf, 8, 8, AtomicOp.CMPXCHG, 1, 5) == 9  # no match: unchanged
    assert ATOMIC_RMW(buf, 0, 4, AtomicOp.XCHG, (1 << 32) | 3, 0) == 0  # low 32 bits
    assert buf[:4] == (3).to_bytes(4, "little") and buf[8:] == (9).to_bytes(8, "little")
    for args in ((buf, 1, 8), (buf, 12, 8), (buf, -4, 4), (buf, 0, 2), (bytes(8), 0, 8),
                 (memoryview(bytes(8)), 0, 8), (None, 0, 8)):
        with pytest.raises(TypeError):
            ATOMIC_RMW(*args, AtomicOp.ADD, 1, 0)
    with pytest.raises(TypeError, match="read-modify-write"):
        ATOMIC_RMW(buf, 0, 8, AtomicOp.LOAD_ACQ, 0, 0)


# Keys a hash map holds in the modeled runs: counting_loop's 0 and 18 (its 9 is absent, so
# its lookups walk a whole chain) and enough others to make chains.
HASH_KEYS = (0, 18, *range(100, 130))


def modeled_system(map_type: int, items=None):
    """A machine with modeled time, its map ``m`` (hash maps holding HASH_KEYS) and
    ``items`` (default: counting_loop over keys 0, 9 and 18) loaded: (system, fd, prog)."""
    system = make_system("emulated", modeled_time=True)
    fd = system.map_create(map_type, 4, 8, 40)
    if map_type in HASH_MAPS:
        for k in HASH_KEYS:
            system.map_update_elem(fd, k.to_bytes(4, "little"), value_of(system, map_type))
    return system, fd, load(system, items or counting_loop(3, 100, stride=9), {"m": fd})


def modeled_figures(system, fd) -> tuple:
    """The CPUs' clocks, CPU 0's breakdown, the map's statistics and contents."""
    timing = system.machine.timing
    return (list(timing.clock), timing.breakdown(0),
            system.map_from_fd(fd).access_stats.totals(), contents(system, fd, 200))


def modeled_runs(map_type: int, before_runs=None, items=None) -> dict:
    """Per engine, after two runs of ``items`` (modeled_system's) on a machine with modeled
    time: modeled_figures and what ``before_runs(system)`` returned."""
    results = {}
    for engine in ENGINES:
        system, fd, prog = modeled_system(map_type, items)
        seen = before_runs(system) if before_runs else None
        for _ in range(2):
            prog.run(bytearray(64), engine=engine)
        results[engine] = (*modeled_figures(system, fd), seen)
    return results


LOOKUP_MAPS = [MapType.ARRAY, MapType.PERCPU_ARRAY, *HASH_MAPS]


@needs_accel
@pytest.mark.parametrize("map_type", LOOKUP_MAPS)
def test_modeled_lookups_are_charged_as_python_charges_them(map_type):
    results = modeled_runs(map_type)
    agree(results)
    cost = "array_map_lookup_elem" if map_type in (MapType.ARRAY, MapType.PERCPU_ARRAY) \
        else "htab_map_lookup_elem"
    assert results["native"][0][0] > 0 and cost in results["native"][1]


@needs_accel
@pytest.mark.parametrize("map_type", HASH_MAPS)
def test_modeled_hash_lookups_walk_the_chains_updates_and_deletes_left(map_type):
    results = modeled_runs(map_type, items=hash_churn(40, 121))
    agree(results)


@needs_accel
def test_deferred_work_runs_at_the_same_lookup_on_every_engine():
    """While work waits on the CPU, each lookup goes through Python's sync, which runs it
    once due: at the same point of the loop whatever the engine."""
    def defer(system):
        timing, ran_at = system.machine.timing, []
        # due after the first lookups' cache misses, some 50 lookups into the first run
        timing.defer(0, timing.clock[0] + 460, lambda: ran_at.append(timing.clock[0]))
        return ran_at

    results = modeled_runs(MapType.ARRAY, defer)
    agree(results)
    assert results["native"][4], "the deferred work never ran"


class CountingScheduler:
    """Stands in for a VirtualTimeScheduler: counts the syncs the engines make."""

    def __init__(self) -> None:
        self.syncs = 0

    def sync(self, cpu: int) -> None:
        self.syncs += 1


@needs_accel
@pytest.mark.parametrize("map_type", LOOKUP_MAPS)
def test_with_a_scheduler_attached_every_lookup_syncs_first_on_every_engine(map_type):
    def attach(system):
        scheduler = system.machine.timing.scheduler = CountingScheduler()
        return scheduler

    results = modeled_runs(map_type, attach)
    syncs = {engine: r[4].syncs for engine, r in results.items()}
    assert len(set(syncs.values())) == 1 and syncs["native"] >= 200, syncs


class FailingScheduler:
    """A scheduler whose tenth sync raises."""

    def __init__(self) -> None:
        self.syncs = 0

    def sync(self, cpu: int) -> None:
        self.syncs += 1
        if self.syncs == 10:
            raise RuntimeError("the scheduler gave up")


@needs_accel
@pytest.mark.parametrize("map_type", LOOKUP_MAPS)
def test_what_a_sync_raises_leaves_the_run_on_every_engine(map_type):
    for engine in ENGINES:
        system, fd, prog = modeled_system(map_type)
        scheduler = system.machine.timing.scheduler = FailingScheduler()
        with pytest.raises(RuntimeError, match="the scheduler gave up"):
            prog.run(bytearray(64), engine=engine)
        assert scheduler.syncs == 10, engine


def tasks_on_two_cpus(map_type: int, engine: str, items=None) -> tuple:
    """Two CPUs' tasks each run ``items`` (modeled_system's) 3 times on ``engine`` in virtual
    time, starting together (map-perf's set-up): modeled_figures, and the scheduler's
    handoffs."""
    system, fd, prog = modeled_system(map_type, items)

    def task(cpu: int) -> None:
        with system.on_cpu(cpu):
            system.machine.set_task(1000 + cpu)
            for _ in range(3):
                prog.run(bytearray(64), engine=engine)

    timing = system.machine.timing
    start = max(timing.clock)
    for cpu in range(2):
        timing.wait_until(cpu, start, "idle")
    scheduler = VirtualTimeScheduler(timing, range(2), task_locals=system.machine.task_locals())
    with scheduler:
        scheduler.run({cpu: functools.partial(task, cpu) for cpu in range(2)})
    return (*modeled_figures(system, fd), scheduler.handoffs)


@needs_accel
@pytest.mark.parametrize("map_type", LOOKUP_MAPS)
@pytest.mark.parametrize("runner", ["greenlets", "threads"])
def test_tasks_on_two_cpus_under_the_scheduler_agree_across_engines(map_type, runner,
                                                                    monkeypatch):
    """Two CPUs' tasks loop over one map in virtual time, handing the baton over at lookups
    (map-perf's set-up, on greenlets or on host threads): the same figures on every engine,
    and the native tier's lookups stay native after each value's first."""
    if runner == "threads":
        monkeypatch.setitem(sys.modules, "greenlet", None)  # import greenlet fails
    python_lookups, map_lookup = [], native._Run.map_lookup
    monkeypatch.setattr(native._Run, "map_lookup", lambda run, *args: (
        python_lookups.append(args), map_lookup(run, *args))[1])
    results = {}
    for engine in ENGINES:
        python_lookups.clear()
        results[engine] = tasks_on_two_cpus(map_type, engine)
        if engine == "native":
            # the uncached values' first lookups (through Python, which fills the cache), at
            # most 3 per run: the rest of the 600 went native
            assert len(python_lookups) <= 3 * 6, len(python_lookups)
    agree(results)
    assert results["native"][4] > 10  # the CPUs took turns


def helper_loop(helper: str, iterations: int) -> list:
    """R0 = the results of ``helper`` over ``iterations`` calls, folded in order (R7 =
    R7 * 3 + R0 each time)."""
    r7 = asm.Reg(7)
    return [b.mov64(R6, 0), b.mov64(r7, 0), b.label("loop"),
            b.call(helper), b.mul64(r7, 3), b.add64(r7, R0), b.add64(R6, 1),
            b.jlt(R6, iterations, "loop"), b.mov64(R0, r7), b.exit_()]


def skip_without(caches: str, monkeypatch) -> None:
    """Make the machine's caches ``caches``' (Python's: the C model switched off)."""
    if caches == "Python":
        monkeypatch.setattr(timing_module, "CACHE_MODEL", None)
    elif caches == "C" and (timing_module.CACHE_MODEL is None
                            or not built(native.CHARGE_SYMBOL)):
        pytest.skip("the C cache model (pybpf._cache_model) is not built")


def count_callbacks(monkeypatch) -> list:
    """The ops of the native tier's calls into Python, as they come."""
    calls, callback = [], native._Run.callback
    monkeypatch.setattr(native._Run, "callback", lambda run, *args: (
        calls.append(args[0]), callback(run, *args))[1])
    return calls


@pytest.mark.parametrize("helper", ["get_smp_processor_id", "get_current_pid_tgid",
                                    "get_prandom_u32"])
@pytest.mark.parametrize("caches", ["unmodeled", "C", "Python"])
def test_inlined_helpers_agree_and_are_charged_as_python_charges_them(helper, caches,
                                                                        monkeypatch):
    """The run's CPU, its task, and its CPU's next random numbers without a call into
    Python (bpf_get_prandom_u32's generator called from C); with modeled time each call is
    charged "helper_call" in the program's order, by the C model or (its caches Python's)
    by Python: the same R0s, counts, clocks and breakdown on every engine. A second run as
    another task gives that task."""
    skip_without(caches, monkeypatch)
    calls = count_callbacks(monkeypatch)
    results = {}
    for engine in ENGINES:
        calls.clear()
        system = make_system("emulated", modeled_time=caches != "unmodeled", cpus=2)
        prog = load(system, helper_loop(helper, 50), {})
        r0s = []
        with system.machine.on_cpu(1):
            for pid, tgid in ((1234, 99), (7, 7)):
                system.machine.set_task(pid, tgid)
                rs = prog.run(bytearray(64), engine=engine)
                r0s.append((rs.retval, rs.count))
        timing = system.machine.timing
        results[engine] = (r0s, list(timing.clock), timing.breakdown(1))
        if engine == "native":  # the generator's call is the C model's (else Python's)
            inlined = caches != "Python" and (helper != "get_prandom_u32" or native._inlined(
                native.bpf_get_prandom_u32))
            assert len(calls) == (0 if inlined else 100)
    agree(results)

    def folded(r0: int) -> int:
        return functools.reduce(lambda r7, _: (r7 * 3 + r0) & (2**64 - 1), range(50), 0)

    if helper == "get_smp_processor_id":
        assert [r0 for r0, _ in results["native"][0]] == [folded(1)] * 2
    elif helper == "get_current_pid_tgid":
        assert [r0 for r0, _ in results["native"][0]] == [folded(99 << 32 | 1234),
                                                         folded(7 << 32 | 7)]
    else:  # two runs of one generator: two different sequences
        assert results["native"][0][0][0] != results["native"][0][1][0]
    if caches != "unmodeled":
        assert results["native"][2]["helper_call"][0] == 100



class OwnBitsRandom(random.Random):
    """A generator whose getrandbits is a subclass's own (counted): called, not stepped in
    place."""

    calls = 0

    def getrandbits(self, k: int) -> int:
        OwnBitsRandom.calls += 1
        return super().getrandbits(k)


@pytest.mark.parametrize("generator", ["random.Random", "a subclass's getrandbits"])
def test_prandom_words_are_the_generators_past_its_regeneration(generator, monkeypatch):
    """700 words of bpf_get_prandom_u32 in one run, past the Mersenne Twister's regeneration
    every 624: on every engine the words random.Random(state).getrandbits(32) gives, and the
    CPU's generator goes on from the same state after the run. The native tier steps
    random.Random's own state in C, and calls a subclass's getrandbits."""
    calls = count_callbacks(monkeypatch)
    results = {}
    for engine in ENGINES:
        calls.clear()
        system = make_system("emulated", cpus=2)
        start = system.machine.prandom_source(1).getstate()
        if generator != "random.Random":
            own = OwnBitsRandom()
            own.setstate(start)
            monkeypatch.setattr(system.machine, "_prandom",
                                [system.machine.prandom_source(0), own])
            OwnBitsRandom.calls = 0
        prog = load(system, helper_loop("get_prandom_u32", 700), {})
        with system.machine.on_cpu(1):
            rs = prog.run(bytearray(64), engine=engine)
        results[engine] = (rs.retval, system.machine.prandom_source(1).getstate())
        if engine == "native" and built(native.PRANDOM_SYMBOL):
            assert calls == []
            assert OwnBitsRandom.calls == (0 if generator == "random.Random" else 700)
    agree(results)
    reference = random.Random()
    reference.setstate(start)
    words = [reference.getrandbits(32) for _ in range(700)]
    assert results["native"] == (functools.reduce(lambda r7, w: (r7 * 3 + w) & (2**64 - 1),
                                                  words, 0), reference.getstate())

def probe_read(src: int, size: int) -> list:
    """bpf_probe_read_user of ``size`` bytes at ``src`` to fp-16; R0 its result xor the
    16 bytes there (as two words)."""
    return [b.st(8, FP, -16, -1), b.st(8, FP, -8, -1),
            b.mov64(R1, FP), b.add64(R1, -16), b.mov64(R2, size),
            b.lddw(R3, src), b.call("probe_read_user"), b.ldx(8, R1, FP, -16),
            b.xor64(R0, R1), b.ldx(8, R1, FP, -8), b.xor64(R0, R1), b.exit_()]


@pytest.mark.parametrize("case", ["mapped", "partly mapped", "unmapped", "kernel address",
                                  "nothing", "too long"])
@pytest.mark.parametrize("caches", ["unmodeled", "C", "Python"])
def test_probe_read_user_agrees_and_copies_in_c_where_it_can(case, caches, monkeypatch):
    """bpf_probe_read_user into the stack: user memory is copied by
    pybpf_native_probe_read_user without Python, charged "probe_read_user" as Python
    charges it; what faults (unmapped, past a block, outside user space: -EFAULT, the
    buffer zeroed), asks for nothing, or is longer than the buffer (the verifier refuses
    it) is Python's, with the same outcome on every engine."""
    skip_without(caches, monkeypatch)
    calls = count_callbacks(monkeypatch)
    data = bytes(range(1, 41))
    results = {}
    for engine in ENGINES:
        calls.clear()
        system = make_system("emulated", modeled_time=caches != "unmodeled")
        base = system.machine.user_memory.map(data)
        src, size = {"mapped": (base + 3, 16), "partly mapped": (base + 4090, 16),
                     "unmapped": (base + (1 << 30), 16), "kernel address": (2**63, 16),
                     "nothing": (base, 0), "too long": (base, 17)}[case]
        try:
            prog = load(system, probe_read(src, size), {})
        except OSError as refused:
            results[engine] = ("refused", refused.errno)
            continue
        with system.machine.on_cpu(0):
            rs = prog.run(bytearray(64), engine=engine)
        timing = system.machine.timing
        results[engine] = (rs.retval, rs.count, list(timing.clock), timing.breakdown(0))
        if engine == "native":
            in_c = built(native.PROBE_READ_SYMBOL)
            assert len(calls) == (0 if case == "mapped" and caches != "Python" and in_c else 1)
    agree(results)
    if case == "too long":
        assert results["native"] == ("refused", errno.EINVAL)  # the kernel's too
        return
    r0 = results["native"][0]
    if case == "mapped":
        words = int.from_bytes(data[3:11], "little") ^ int.from_bytes(data[11:19], "little")
        assert r0 == words
    elif case == "nothing":
        assert r0 == 0  # the buffer as it was: two words of ones
    else:
        assert r0 == -errno.EFAULT & (2**64 - 1)  # zeroed
    if caches != "unmodeled" and case != "nothing":
        assert results["native"][3]["probe_read_user"][0] == 1


@needs_accel
def test_a_tracepoint_record_is_read_natively_and_never_written(monkeypatch):
    """The record (bytes) is read where it is: the same sums on every engine, no memory op
    through Python on the native tier. A write to a read-only context (here a tc program
    run with bytes, whose mark the verifier lets it set) goes to Python, which refuses it
    on every engine, and the bytes stay as they were."""
    memory_ops = []
    monkeypatch.setattr(native, "_memory_op", lambda *args: (
        memory_ops.append(args[1]), _memory_op(*args))[1])
    system = make_system("emulated", modeled_time=False)
    reader = [b.mov64(R0, 0), *(item for off in range(8, 48, 8) for item in (
        b.ldxdw(R2, R1, off), b.add64(R0, R2))), b.exit_()]
    insns = asm.encode(asm.assemble(reader).with_map_fds(lambda name: 0))
    prog = system.prog_from_fd(system.prog_load(ProgType.TRACEPOINT, insns))
    record = bytes(range(48))
    sums = {engine: prog.run(record, engine=engine).retval for engine in ENGINES}
    assert sums == dict.fromkeys(ENGINES, sum(int.from_bytes(record[k:k + 8], "little")
                                              for k in range(8, 48, 8)))
    assert memory_ops == []
    writer = load(system, [b.mov64(R2, 7), b.stx(4, R1, 8, R2), b.mov64(R0, 0), b.exit_()], {})
    context = bytes(256)
    for engine in ENGINES:
        with pytest.raises(ProgramFault):
            writer.run(context, engine=engine)
    assert context == bytes(256)


# -- bound updates and deletes on hash maps with an HtabCore (pybpf_native_htab_op) --------
M64 = (1 << 64) - 1
# (op, key, flags, where the key and the value lie): on the stack, in a map value (one the
# program looked up: native memory) or in global data Python has not seen (not native: the
# helper goes through Python). Max entries 4: the map fills and refuses (E2BIG, an LRU map
# evicts instead); BPF_F_LOCK on a value without a lock and bad flags are EINVAL from Python.
HTAB_OPS = [("update", 1, BPF_ANY, "stack"), ("update", 2, BPF_NOEXIST, "value"),
            ("update", 2, BPF_NOEXIST, "stack"), ("update", 3, BPF_EXIST, "stack"),
            ("update", 1, BPF_EXIST, "value"), ("update", 3, BPF_ANY, "global"),
            ("update", 4, BPF_ANY, "value"), ("update", 5, BPF_ANY, "stack"),
            ("update", 5, BPF_NOEXIST, "value"), ("update", 1, BPF_NOEXIST | BPF_EXIST, "stack"),
            ("update", 1, BPF_F_LOCK, "value"), ("update", 1, 1 << 32, "stack"),
            ("update", 1, M64, "stack"), ("delete", 5, 0, "stack"), ("delete", 2, 0, "value"),
            ("delete", 2, 0, "stack"), ("delete", 3, 0, "global"), ("update", 6, BPF_ANY, "value"),
            ("update", 2, BPF_ANY, "stack"), ("delete", 1, 0, "stack")]
KEY_AT, VALUE_AT = 8 * len(HTAB_OPS), 8 * len(HTAB_OPS) + 8  # in the looked-up value
GLOBAL_VALUE_AT = 48  # global data: key k at 4 * k (up to 11), then a value


def htab_ops_program(ops: list, value_size: int = 8) -> list:
    """``ops`` on map "m", each R0 stored in the value of "out" (looked up first) at 8 * n,
    in order; a value written is the op's number + 1 in each word."""
    items = [b.st(4, FP, -4, 0), b.ld_map_fd(R1, "out"), b.mov64(R2, FP), b.add64(R2, -4),
             b.call("map_lookup_elem"), b.jeq(R0, 0, "done"), b.mov64(R7, R0)]
    for n, (op, key, flags, where) in enumerate(ops):
        if where == "stack":
            items += [b.st(4, FP, -4, key), b.mov64(R2, FP), b.add64(R2, -4),
                      *(b.st(8, FP, -32 + w, n + 1) for w in range(0, value_size, 8)),
                      b.mov64(R3, FP), b.add64(R3, -32)]
        elif where == "value":
            items += [b.st(4, R7, KEY_AT, key), b.mov64(R2, R7), b.add64(R2, KEY_AT),
                      b.st(8, R7, VALUE_AT, n + 1), b.mov64(R3, R7), b.add64(R3, VALUE_AT)]
        else:
            items += [b.ld_map_value(R2, "g", 4 * key), b.ld_map_value(R3, "g", GLOBAL_VALUE_AT)]
        items += [b.ld_map_fd(R1, "m")]
        if op == "update":
            items += [b.lddw(R4, flags), b.call("map_update_elem")]
        else:
            items += [b.call("map_delete_elem")]
        items += [b.stx(8, R7, 8 * n, R0)]
    return [*items, b.label("done"), b.mov64(R0, 0), b.exit_()]


def htab_op_runs(map_type: int, map_flags: int, modeled: bool, items: list,
                 spin_lock: bool = False) -> tuple[dict, dict]:
    """Per engine, after runs of ``items`` on CPUs 0, 1, 0 of a 2-CPU machine: each run's
    R0s (the "out" value), the hash map's state, the clocks and breakdowns; and per engine
    the ops of the bound map helpers that went through Python (callbacks). The map's value
    is a u64, or with ``spin_lock`` SPIN_LOCK_TYPES' struct value."""
    value_size = 16 if spin_lock else 8
    results, bound_calls, callback = {}, {}, native._Run.callback

    def counting(run, op, *args):
        if op == native.OP_BOUND:
            bound_calls[engine] += 1
        return callback(run, op, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native._Run, "callback", counting)
        for engine in ENGINES:
            bound_calls[engine] = 0
            system = make_system("emulated", modeled_time=modeled, cpus=2)
            btf = {}
            if spin_lock:
                btf = {"btf_fd": system.btf_load(Btf(SPIN_LOCK_TYPES).to_bytes()),
                       "btf_key_type_id": 1, "btf_value_type_id": 3}
            fd = system.map_create(map_type, 4, value_size, 4, map_flags=map_flags, **btf)
            out = system.map_create(MapType.ARRAY, 4, VALUE_AT + 8, 1)
            globals_ = system.map_create(MapType.ARRAY, 4, GLOBAL_VALUE_AT + value_size, 1)
            system.map_update_elem(globals_, bytes(4), b"".join(
                k.to_bytes(4, "little") for k in range(12)) + bytes([9]) * value_size)
            prog = load(system, items, {"m": fd, "out": out, "g": globals_})
            r0s = []
            for cpu in (0, 1, 0):
                with system.machine.on_cpu(cpu):
                    prog.run(bytearray(64), engine=engine)
                r0s.append(system.map_lookup_elem(out, bytes(4))[:KEY_AT])
            timing = system.machine.timing
            results[engine] = (r0s, hash_map_state(system, fd), list(timing.clock),
                               [timing.breakdown(cpu) for cpu in range(2)])
    return results, bound_calls


def direct_htab_ops() -> bool:
    """Whether compiled code calls a hash map's bound update and delete natively here (the
    map has an HtabCore, with modeled time or without)."""
    return timing_module.CACHE_MODEL is not None and built(native.HTAB_OP_SYMBOL)


@needs_accel
@pytest.mark.parametrize("map_type, map_flags", [
    (MapType.HASH, 0), (MapType.HASH, BPF_F_NO_PREALLOC), (MapType.PERCPU_HASH, 0),
    (MapType.PERCPU_HASH, BPF_F_NO_PREALLOC), (MapType.LRU_HASH, 0)])
@pytest.mark.parametrize("modeled", [True, False])
def test_bound_hash_updates_and_deletes_agree_across_engines(map_type, map_flags, modeled):
    """Every flag, full maps and missing keys, keys and values on the stack, in a map value
    and in global data: the same R0s, map (elements, addresses, free lists, counters),
    clocks and breakdowns on every engine. With an HtabCore (the C extension built) the
    native tier calls its ops without Python where the key and value are native memory;
    only the ops on global data go through Python."""
    results, bound_calls = htab_op_runs(map_type, map_flags, modeled,
                                        htab_ops_program(HTAB_OPS))
    agree(results)
    r0s = {-int.from_bytes(r0s[k:k + 8], "little", signed=True)
           for r0s in results["native"][0] for k in range(0, KEY_AT, 8)}
    full = set() if map_type == MapType.LRU_HASH else {errno.E2BIG}
    assert r0s == {0, errno.EEXIST, errno.ENOENT, errno.EINVAL} | full
    in_python = sum(where == "global" for *_, where in HTAB_OPS) if direct_htab_ops() \
        else len(HTAB_OPS)
    assert bound_calls["native"] == 3 * in_python


SPIN_LOCK_TYPES = [Int("unsigned int", 4, 0, 0, 32),
                   Struct("bpf_spin_lock", 4, (Member("val", 1, 0),)),
                   # struct value { struct bpf_spin_lock lock; u32 cnt; u64 x; }
                   Struct("value", 16, (Member("lock", 2, 0), Member("cnt", 1, 32),
                                        Member("x", 1, 64)))]


@needs_accel
def test_bound_updates_of_a_value_with_a_spin_lock_go_to_python_on_every_engine():
    """A value with special fields (a bpf_spin_lock) is updated by the map's Python method,
    BPF_F_LOCK taken there: the native tier's direct update hands it over as the helper
    does, with the same results."""
    ops = [("update", 1, BPF_ANY, "stack"), ("update", 1, BPF_F_LOCK, "stack"),
           ("update", 2, BPF_F_LOCK | BPF_NOEXIST, "stack"),
           ("update", 2, BPF_F_LOCK | BPF_NOEXIST, "stack"),
           ("update", 3, BPF_F_LOCK | BPF_EXIST, "stack"), ("delete", 1, 0, "stack"),
           ("update", 1, BPF_F_LOCK | 8, "stack")]
    results = {}
    for modeled in (True, False):
        results[modeled], bound_calls = htab_op_runs(MapType.HASH, 0, modeled,
                                                     htab_ops_program(ops, 16), spin_lock=True)
        agree(results[modeled])
        assert bound_calls["native"] == (0 if direct_htab_ops() else 3 * len(ops))
    first_run = results[True]["native"][0][0]
    assert [-int.from_bytes(first_run[k:k + 8], "little", signed=True)
            for k in range(0, 8 * len(ops), 8)] == [0, 0, 0, errno.EEXIST, errno.ENOENT, 0,
                                                    errno.EINVAL]


def update_loop(iterations: int) -> list:
    """bpf_map_update_elem of key i % 3 (on the stack), ``iterations`` times; R0 their
    results' sum."""
    return [b.st(8, FP, -16, 1), b.mov64(R6, 0), b.mov64(R7, 0), b.label("loop"),
            b.mov64(R3, R6), b.mod64(R3, 3), b.stx(4, FP, -4, R3), b.ld_map_fd(R1, "m"),
            b.mov64(R2, FP), b.add64(R2, -4), b.mov64(R3, FP), b.add64(R3, -16),
            b.mov64(asm.Reg(4), 0), b.call("map_update_elem"), b.add64(R7, R0),
            b.add64(R6, 1), b.jlt(R6, iterations, "loop"), b.mov64(R0, R7), b.exit_()]


@needs_accel
def test_what_a_sync_raises_in_a_direct_update_leaves_the_run_on_every_engine():
    """The scheduler's sync raising in an update: the run stops with it after the same
    syncs and the map holds the same on every engine; the native tier's clocks are the
    interpreter's (the JIT charges no instructions to a run that raised)."""
    maps, figures = {}, {}
    for engine in ENGINES:
        system, fd, prog = modeled_system(MapType.HASH, update_loop(30))
        scheduler = system.machine.timing.scheduler = FailingScheduler()
        with pytest.raises(RuntimeError, match="the scheduler gave up"):
            prog.run(bytearray(64), engine=engine)
        assert scheduler.syncs == 10, engine
        maps[engine] = hash_map_state(system, fd)
        figures[engine] = modeled_figures(system, fd)
    agree(maps)
    assert figures["native"] == figures["interp"]
    assert bytes(4) in maps["native"]["keys"]  # the first updates were done


@needs_accel
@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH])
@pytest.mark.parametrize("runner", ["greenlets", "threads"])
def test_direct_updates_of_tasks_on_two_cpus_agree_across_engines(map_type, runner,
                                                                   monkeypatch):
    """Two CPUs' tasks update, look up and delete keys of one map in virtual time, handing
    the baton over in the updates' and deletes' syncs (in C called from machine code on the
    native tier): the same figures on every engine."""
    if runner == "threads":
        monkeypatch.setitem(sys.modules, "greenlet", None)  # import greenlet fails
    bound_calls, callback = [], native._Run.callback
    monkeypatch.setattr(native._Run, "callback", lambda run, op, *args: (
        bound_calls.append(op) if op == native.OP_BOUND else None, callback(run, op, *args))[1])
    results = {engine: tasks_on_two_cpus(map_type, engine, hash_churn(40, 121))
               for engine in ENGINES}
    agree(results)
    assert results["native"][4] > 10  # the CPUs took turns
    assert bound_calls == [] or not direct_htab_ops()


@needs_accel
@pytest.mark.parametrize("inner_type", [MapType.HASH, MapType.LRU_HASH, MapType.PERCPU_HASH,
                                        MapType.LRU_PERCPU_HASH])
def test_updates_of_a_map_found_in_a_map_of_maps_agree_across_engines(inner_type,
                                                                      monkeypatch):
    """A map a program finds at run time (the inner map of an ARRAY_OF_MAPS): its updates and
    deletes, errors included, are the C core's from machine code where the map has one (an
    LRU per-CPU map has none: the helper through Python), with the same R0s and contents on
    every engine; the native tier calls into Python for none of it."""
    calls = count_callbacks(monkeypatch)
    results = {}
    for engine in ENGINES:
        calls.clear()
        system = make_system("emulated", modeled_time=False)
        inner = system.map_create(inner_type, 4, 8, 8)
        system.map_update_elem(inner, (1).to_bytes(4, "little"), bytes(8 * (
            system.num_possible_cpus if inner_type in (MapType.PERCPU_HASH,
                                                       MapType.LRU_PERCPU_HASH) else 1)))
        outer = system.map_create(MapType.ARRAY_OF_MAPS, 4, 4, 1, inner_map_fd=inner)
        system.map_update_elem(outer, bytes(4), inner.to_bytes(4, "little"))
        items = [b.st(4, FP, -4, 0), b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4),
                 b.call("map_lookup_elem"), b.jeq(R0, 0, "none"), b.mov64(R6, R0),
                 b.st(8, FP, -16, 9), b.mov64(R7, 0)]
        for key, flags, helper in ((2, BPF_ANY, "map_update_elem"),
                                   (2, BPF_NOEXIST, "map_update_elem"),
                                   (1, 0, "map_delete_elem"), (1, 0, "map_delete_elem")):
            items += [b.mov64(R1, R6), b.st(4, FP, -4, key), b.mov64(R2, FP),
                      b.add64(R2, -4), b.mov64(R3, FP), b.add64(R3, -16), b.mov64(R4, flags),
                      b.call(helper), b.add64(R7, R0)]
        items += [b.mov64(R0, R7), b.exit_(), b.label("none"), b.mov64(R0, 1), b.exit_()]
        prog = load(system, items, {"m": outer})
        with system.machine.on_cpu(0):
            rs = prog.run(bytearray(64), engine=engine)
        results[engine] = (rs.retval, rs.count, contents(system, inner, 4))
        if engine == "native":  # the inner ops where there is no core
            assert len(calls) == (4 if inner_type == MapType.LRU_PERCPU_HASH else 0), calls
    agree(results)
    assert results["native"][0] == (-errno.EEXIST - errno.ENOENT) & (2**64 - 1)


def map_of_maps_program(slots: list[int]) -> list:
    """For each of ``slots`` in turn: look it up in the ARRAY_OF_MAPS ``m`` and, where it
    holds a map, write the slot's number + 1 there under key 0 (BPF_ANY); R0 counts the
    slots found."""
    items = [b.mov64(R7, 0)]
    for n, slot in enumerate(slots):
        items += [*lookup(slot, f"empty{n}"), b.mov64(R1, R0), b.st(4, FP, -4, 0),
                  b.st(8, FP, -16, slot + 1), b.mov64(R2, FP), b.add64(R2, -4),
                  b.mov64(R3, FP), b.add64(R3, -16), b.mov64(R4, BPF_ANY),
                  b.call("map_update_elem"), b.add64(R7, 1), b.label(f"empty{n}")]
    return [*items, b.mov64(R0, R7), b.exit_()]


@needs_accel
@pytest.mark.parametrize("modeled", [False, True])
def test_map_of_maps_lookups_run_natively_and_agree_across_engines(modeled, monkeypatch):
    """An ARRAY_OF_MAPS's lookup is inlined as an array's (array_of_map_gen_lookup): the
    inner map in a slot from machine code, once per slot a run (the run's cache), an empty
    slot NULL through Python; the map's statistics and (with modeled time) the clocks as
    Python's. A slot's map changed between runs is the one the next run finds."""
    calls = count_callbacks(monkeypatch)
    results = {}
    for engine in ENGINES:
        system = make_system("emulated", modeled_time=modeled, cpus=2, nodes=2)
        inners = [system.map_create(MapType.HASH, 4, 8, 4) for _ in range(2)]
        outer = system.map_create(MapType.ARRAY_OF_MAPS, 4, 4, 3, inner_map_fd=inners[0])
        prog = load(system, map_of_maps_program([0, 1, 2, 0, 1, 5]), {"m": outer})
        r0s, found = [], []
        for run in range(4):
            # slots 0 and 1 hold the inner maps, swapped at each run; slot 2 stays empty
            for slot in (0, 1):
                fd = inners[(slot + run) % 2]
                system.map_update_elem(outer, slot.to_bytes(4, "little"),
                                       fd.to_bytes(4, "little"))
            calls.clear()
            # CPU 1 is on the other node; a run on the last run's CPU is C's (NativeEntry)
            with system.machine.on_cpu(run // 2):
                rs = prog.run(bytearray(64), engine=engine)
            r0s.append((rs.retval, rs.count))
            found.append([contents(system, fd, 1) for fd in inners])
            if engine == "native":  # the empty slot's lookup, through Python
                assert calls == [native.OP_MAP_LOOKUP], calls
        figures = (list(system.machine.timing.clock), system.machine.timing.breakdown(0)) \
            if modeled else None
        results[engine] = (r0s, found, system.map_from_fd(outer).access_stats.by_cpu(),
                           figures)
    agree(results)
    r0s, found, by_cpu, _ = results["native"]
    assert [r0 for r0, _ in r0s] == [4, 4, 4, 4]
    # each run writes 1 to the map in slot 0 and 2 to the one in slot 1
    assert [[int.from_bytes(f[0], "little") for f in run] for run in found] == \
        [[1, 2], [2, 1], [1, 2], [2, 1]]
    # five lookups within max_entries a run, and CPU 0's eight slot updates from user space
    assert by_cpu == {0: (10 + 8, 0), 1: (0, 10)}
