"""The C cache model (pybpf._cache_model) against the Python reference in Timing.

Both are driven by the same random sequences of accesses, atomics, spinlocks, work (charge) and
waits on machines of 1-4 CPUs on 1-2 nodes with caches of a few lines (so lines are evicted,
forgotten and transferred all the time); every returned stall, clock, statistic, count, hit
count, lock field and cache (contents and LRU order) must be the same after every step.
"""

import os
import random
import subprocess
import sys
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers import hash_map_state, retvals_on_cpu
from pybpf import asm, system
from pybpf.asm import FP, R0, R1, R2, R3, R4, R6
from pybpf.asm import builder as b
from pybpf.btf import Btf, Int, Member, Struct
from pybpf.emulated.machine import timing as timing_module
from pybpf.emulated.machine.timing import NODE_SHIFT, PAGE, SpinLock, Timing
from pybpf.emulated.prog import native
from pybpf.errors import BPFError, KernelError
from pybpf.profiles import Value, load_profile
from pybpf.uapi import BPF_F_NO_PREALLOC, MapType, ProgType

pytestmark = pytest.mark.skipif(
    timing_module.CACHE_MODEL is None,
    reason="pybpf._cache_model is not built (setup.py build_ext --inplace) or PYBPF_NO_ACCEL "
           "is set: nothing to compare the Python cache model with")

# 4 private lines per CPU, 8 shared per node: the sequences below touch up to 16 lines.
LINE = 256
TINY = load_profile("haswell-ep-2s").replace({
    "memory.line_bytes": Value(LINE, "test"),
    "memory.private_kib": Value(1, "test: 4 lines"),
    "memory.shared_kib": Value(2, "test: 8 lines")})
LINES = 16
EVENTS = ("htab_map_update_elem", "jhash_byte", "kmalloc", "spin_lock")
LOCKS = 3


def machines(cpu_node: list[int]) -> tuple[Timing, Timing]:
    """(C, Python) timing models of the same machine."""
    native = Timing(TINY, cpu_node)
    with mock.patch.object(timing_module, "CACHE_MODEL", None):
        reference = Timing(TINY, cpu_node)
    assert (native.cache_model, reference.cache_model) == ("C", "Python")
    return native, reference


def c_and_python_systems(modeled: bool = True) -> list:
    """Two emulated machines of 2 CPUs on the TINY profile: the first with the C extension
    (the C cache model, a hash map's HtabCore), the second its Python reference (the Python
    caches and HtabMap's methods); with modeled time or without (HtabCore then charges
    nothing)."""
    systems = [system("emulated", cpus=2, profile=TINY, modeled_time=modeled)]
    with mock.patch.object(timing_module, "CACHE_MODEL", None):
        systems.append(system("emulated", cpus=2, profile=TINY, modeled_time=modeled))
    return systems


def address(node: int, line: int, offset: int) -> int:
    return (node << NODE_SHIFT) + PAGE + line * LINE + offset


def observed(t: Timing, locks: list[SpinLock]) -> dict:
    return {"clock": list(t.clock), "hits": list(t.hits),
            "stats": [list(s.items()) for s in t.stats],  # insertion order counts (breakdown)
            "counts": [list(c.items()) for c in t.counts],
            "locks": [(lock.held, lock.acquired_at, lock.holder, lock.last_end)
                      for lock in locks],
            "caches": t.cache_state()}


def step(t: Timing, locks: list[SpinLock], op: tuple) -> object:
    kind, cpu, *args = op
    if kind == "access":
        node, line, offset, write = args
        addr = 0 if line < 0 else address(node, line, offset)
        return t.access(cpu, addr, write=write) if write else t.access(cpu, addr)
    if kind == "atomic":
        node, line = args
        return t.atomic(cpu, address(node, line, 0))
    if kind == "lock":
        return t.spin_lock(cpu, locks[args[0]])
    if kind == "unlock":
        return t.spin_unlock(cpu, locks[args[0]])
    if kind == "locked_access":
        lock, node, line, write = args
        if write is None:
            return t.locked_access(cpu, locks[lock], address(node, line, 8))
        return t.locked_access(cpu, locks[lock], address(node, line, 8), write=write)
    if kind == "section":  # a critical section: other CPUs behind it wait for the lock
        lock, n = args
        t.spin_lock(cpu, locks[lock])
        t.charge(cpu, "htab_map_update_elem", n)
        return t.spin_unlock(cpu, locks[lock])
    if kind == "work":
        event, n = args
        return t.charge(cpu, event) if n is None else t.charge(cpu, event, n)
    return t.wait_until(cpu, t.now(cpu) + args[0])


@st.composite
def scenarios(draw) -> tuple[list[int], list[tuple]]:
    nodes = draw(st.integers(1, 2))
    cpus = draw(st.integers(nodes, 4))
    on_node0 = draw(st.integers(1, cpus - 1)) if nodes == 2 else cpus
    cpu_node = [0] * on_node0 + [1] * (cpus - on_node0)
    cpu = st.integers(0, len(cpu_node) - 1)
    node = st.integers(0, nodes - 1)
    line = st.integers(0, LINES - 1)
    op = st.one_of(
        st.tuples(st.just("access"), cpu, node, st.integers(-1, LINES - 1),
                  st.integers(0, LINE - 1), st.booleans()),
        st.tuples(st.just("atomic"), cpu, node, line),
        st.tuples(st.just("lock"), cpu, st.integers(0, LOCKS - 1)),
        st.tuples(st.just("unlock"), cpu, st.integers(0, LOCKS - 1)),
        st.tuples(st.just("locked_access"), cpu, st.integers(0, LOCKS - 1), node, line,
                  st.one_of(st.none(), st.booleans())),
        st.tuples(st.just("section"), cpu, st.integers(0, LOCKS - 1), st.integers(1, 3)),
        st.tuples(st.just("work"), cpu, st.sampled_from(EVENTS),
                  st.one_of(st.none(), st.integers(0, 3), st.just(2.5))),
        st.tuples(st.just("wait"), cpu, st.floats(0.5, 500.0)))
    return cpu_node, draw(st.lists(op, min_size=20, max_size=150))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_c_and_python_models_agree_step_for_step(scenario):
    cpu_node, ops = scenario
    models = machines(cpu_node)
    locks = [[t.new_lock(address(i % 2 if max(cpu_node) else 0, LINES + i, 0))
              for i in range(LOCKS)] for t in models]
    for op in ops:
        results = [step(t, lk, op) for t, lk in zip(models, locks, strict=True)]
        assert results[0] == results[1], op
        assert observed(models[0], locks[0]) == observed(models[1], locks[1]), op


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 300.0), st.integers(1, 3)),
                min_size=40, max_size=120))
def test_one_lock_many_sections_keeps_the_same_history(steps):
    """Sections of three CPUs far apart in time on one lock: intervals arrive out of order
    (sorted in) and the history outgrows LOCK_HISTORY (its older half dropped)."""
    models = machines([0, 0, 0])
    locks = [[t.new_lock(address(0, LINES, 0))] for t in models]
    longest = 0
    for cpu, wait, n in steps:
        for op in (("wait", cpu, wait), ("section", cpu, 0, n)):
            for t, lk in zip(models, locks, strict=True):
                step(t, lk, op)
            assert observed(models[0], locks[0]) == observed(models[1], locks[1]), op
        longest = max(longest, len(locks[0][0].held))
    assert longest > timing_module.LOCK_HISTORY // 2


HASH_OPS = st.lists(st.tuples(st.sampled_from(["update", "lookup", "delete", "next"]),
                               st.integers(0, 23), st.integers(0, 1)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(HASH_OPS, st.sampled_from([MapType.HASH, MapType.LRU_HASH, MapType.PERCPU_HASH,
                                  MapType.LRU_PERCPU_HASH]), st.booleans())
def test_hash_map_costs_in_c_agree_with_pythons(ops, map_type, no_prealloc):
    """HtabMap's costs through the C model (htab_op_cost, htab_walk_cost: one call each)
    and through the Python reference: the same clocks, counts, hits and caches after every
    operation, on a map of 16 elements over 16 buckets (so chains form), from two CPUs."""
    flags = BPF_F_NO_PREALLOC if no_prealloc and map_type in (MapType.HASH,
                                                              MapType.PERCPU_HASH) else 0
    systems = c_and_python_systems()
    timings = [e.machine.timing for e in systems]
    assert [t.cache_model for t in timings] == ["C", "Python"]
    fds = [e.map_create(map_type, 4, 8, 16, map_flags=flags) for e in systems]
    width = 8 * (2 if map_type in (MapType.PERCPU_HASH, MapType.LRU_PERCPU_HASH) else 1)
    for op, key, cpu in ops:
        results = []
        for e, fd in zip(systems, fds, strict=True):
            k = key.to_bytes(4, "little")
            with e.on_cpu(cpu):
                try:
                    if op == "update":
                        e.map_update_elem(fd, k, bytes([key]) * width, 0)
                    elif op == "lookup":
                        results.append(e.map_lookup_elem(fd, k))
                    elif op == "delete":
                        e.map_delete_elem(fd, k)
                    else:
                        results.append(e.map_get_next_key(fd, k))
                except BPFError as exc:
                    results.append(exc.errno)
        assert observed(timings[0], []) == observed(timings[1], []), (op, key, cpu)
        assert results[:len(results) // 2] == results[len(results) // 2:]


CORE_MAP_TYPES = [MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH]
HASH_CORE_OPS = st.lists(st.tuples(
    st.sampled_from(["update", "prog_update", "lookup", "prog_lookup", "delete", "prog_delete",
                     "lookup_and_delete"]),
    st.integers(0, 11), st.integers(0, 1), st.sampled_from([0, 0, 1, 2, 4, 8])),
    min_size=1, max_size=60)


# Fill both CPUs' shares past max_entries, then delete, re-insert, replace and read on both
# CPUs, so free lists fill and drain, spares turn over and full-map errors come.
CHURN = [("prog_update", 20, 0, 0), ("prog_update", 20, 1, 0), ("prog_delete", 20, 0, 0),
         ("prog_update", 21, 0, 0), ("lookup", 21, 0, 0)] + [
    (op, key, cpu, flags) for key in range(10) for cpu in (0, 1)
         for op, flags in (("prog_update", 0), ("update", 1), ("prog_lookup", 0))] + [
    (op, key, cpu, flags) for key in range(0, 12, 2) for cpu in (1, 0)
    for op, flags in (("prog_delete", 0), ("prog_update", 2), ("update", 1),
                      ("prog_update", 0), ("lookup_and_delete", 0), ("update", 4),
                      ("prog_update", 8), ("delete", 0), ("prog_lookup", 0))]


@settings(max_examples=200, deadline=None)
@given(HASH_CORE_OPS, st.sampled_from(CORE_MAP_TYPES), st.booleans(), st.booleans())
@example(CHURN, MapType.HASH, False, True).via("churn")
@example(CHURN, MapType.HASH, True, True).via("churn")
@example(CHURN, MapType.PERCPU_HASH, False, True).via("churn")
@example(CHURN, MapType.LRU_HASH, False, True).via("churn")
@example(CHURN, MapType.HASH, True, False).via("churn without modeled time")
@example(CHURN, MapType.LRU_HASH, False, False).via("churn without modeled time")
def test_hash_map_ops_in_c_leave_what_pythons_leave(ops, map_type, no_prealloc, modeled):
    """HtabCore (a hash map's lookup, update and delete in C; an LRU map's lookup) against
    the Python methods it stands for, on a full map of 8 elements: the same results and
    errors, clocks, counts and caches after every operation, from syscalls and as a program
    calls them (the map's own methods), with every flag (BPF_F_LOCK and bad flags go back to
    Python), with modeled time and without; then the same elements in the same buckets at
    the same addresses, the same reference bits, free lists and counters."""
    flags = BPF_F_NO_PREALLOC if no_prealloc and map_type != MapType.LRU_HASH else 0
    ops_agree(ops, map_type, flags, 8, modeled)


def ops_agree(ops: list[tuple[str, int, int, int]], map_type: MapType, flags: int,
              max_entries: int, modeled: bool = True) -> None:
    """``ops`` (op, key, cpu, update flags) on a map made on a machine with the C extension
    and on its Python reference: the same results and errors, clocks, counts and caches
    after each, and the same map at the end."""
    percpu = map_type == MapType.PERCPU_HASH
    systems = c_and_python_systems(modeled)
    fds = [e.map_create(map_type, 4, 8, max_entries, map_flags=flags) for e in systems]
    maps = [e.map_from_fd(fd) for e, fd in zip(systems, fds, strict=True)]
    assert [type(m.map_lookup_elem).__name__ for m in maps] == ["builtin_function_or_method",
                                                                 "method"]
    for op, key, cpu, update_flags in ops:
        results = []
        for e, fd, bpf_map in zip(systems, fds, maps, strict=True):
            k = key.to_bytes(4, "little")
            value = bytes([key % 256, cpu]) * (8 if percpu else 4)
            with e.on_cpu(cpu):
                try:
                    if op == "update":
                        results.append(e.map_update_elem(fd, k, value, update_flags))
                    elif op == "prog_update":
                        results.append(bpf_map.map_update_elem(k, value[:8], update_flags))
                    elif op == "lookup":
                        results.append(e.map_lookup_elem(fd, k))
                    elif op == "prog_lookup":
                        found = bpf_map.map_lookup_elem(k)
                        results.append(None if found is None else bytes(found))
                    elif op == "delete":
                        results.append(e.map_delete_elem(fd, k))
                    elif op == "prog_delete":
                        results.append(bpf_map.map_delete_elem(k))
                    else:
                        results.append(e.map_lookup_and_delete_elem(fd, k))
                except (BPFError, KernelError) as exc:
                    results.append(exc.errno)
        assert results[0] == results[1], (op, key, cpu, update_flags)
        assert observed(systems[0].machine.timing, []) == \
            observed(systems[1].machine.timing, []), (op, key, cpu, update_flags)
    states = [hash_map_state(e, fd) for e, fd in zip(systems, fds, strict=True)]
    assert states[0] == states[1]
    assert states[0]["problems"] == []
    if map_type == MapType.LRU_HASH:
        maps[0].lru_list.check_invariants()


# Past bpf_mem_alloc's watermarks (low 32, high 96 objects a CPU): one CPU allocates what the
# other frees, so a cache refills from new objects, trims to RCU, and refills from what waits
# for it; replacements free as they allocate; the map fills (E2BIG).
MEM_ALLOC_CHURN = [("prog_update", key, 0, 0) for key in range(110)] + [
    ("prog_delete", key, 1, 0) for key in range(110)] + [
    (op, key, 1, 0) for key in range(0, 110, 3) for op in ("prog_update", "prog_update")] + [
    ("delete", key, 0, 0) for key in range(0, 110, 6)] + [
    ("prog_update", key, cpu, 0) for key in range(110, 200) for cpu in (0, 1)] + [
    ("prog_update", key, 1, 0) for key in range(200, 330)]


@pytest.mark.parametrize("modeled", [True, False], ids=["modeled", "unmodeled"])
@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.PERCPU_HASH])
@pytest.mark.parametrize("max_entries", [120, 256])  # the count an atomic_t, a percpu_counter
def test_bpf_mem_alloc_in_c_leaves_what_pythons_leaves(map_type, max_entries, modeled):
    """A NO_PREALLOC map's allocations and frees through the allocator's unit_alloc and
    unit_free in C (_memalloc.c) against BpfMemAlloc's, over its refills and trims: the
    same errors (E2BIG past max_entries), clocks, caches, counters and free lists."""
    ops_agree(MEM_ALLOC_CHURN, map_type, BPF_F_NO_PREALLOC, max_entries, modeled)


# An LRU of 400 nodes on 2 CPUs refills 100 at a time, flushing the pending ones into
# INACTIVE, whose rotation scans 128 nodes a time and so leaves its cursor on a node once
# more are there; lookups set reference bits that rotations read; deleting every key frees
# the node the cursor rests on, pending nodes to their CPU's list and the others globally,
# and the map refills past its size (evictions, steals).
LRU_DELETED = [("prog_update", key, 0, 0) for key in range(300)] + [
    ("prog_lookup", key, 1, 0) for key in range(0, 300, 7)] + [
    ("prog_update", key, 1, 0) for key in range(300, 420)] + [
    ("prog_lookup", key, 0, 0) for key in range(0, 420, 3)] + [
    ("prog_delete", key, key % 2, 0) for key in range(420)]
LRU_ROTATION = LRU_DELETED + [("prog_update", key, key % 2, 0) for key in range(500, 950)]
# Every node ACTIVE and referenced: a refill's rotation clears the bits of the 128 it scans,
# and its shrink takes a node it did not scan, bit set, which a pop then hands out.
LRU_REFERENCED = [(op, key, 0, 0) for key in range(400) for op in ("prog_update", "prog_lookup")
                  ] + [("prog_lookup", key, 0, 0) for key in range(400)] + [
    ("prog_update", key, 0, 0) for key in range(400, 410)]


@pytest.mark.parametrize("modeled", [True, False], ids=["modeled", "unmodeled"])
@pytest.mark.parametrize("ops", [LRU_DELETED, LRU_ROTATION, LRU_REFERENCED],
                         ids=["deleted", "rotation", "referenced"])
def test_lru_lists_in_c_leave_what_pythons_leave(ops, modeled):
    """A common LRU's pop and push in C (_bpf_lru_list.c) against BpfLru's over refills,
    rotations, deletions and evictions: the same lists in the same order (reference bits
    too), cursor, counters and clocks."""
    ops_agree(ops, MapType.LRU_HASH, 0, 400, modeled)


# the native tier calls the helpers bound to a map too, with its frames as memoryviews
ENGINES = ["interp", "jit"] + (["native"] if native.native_missing() is None else [])
PROGRAM_OPS = st.lists(st.tuples(st.sampled_from(["update", "lookup", "delete"]),
                                  st.integers(0, 11), st.sampled_from([0, 1, 2, 4])),
                       min_size=1, max_size=30)


def hash_map_program(ops: list[tuple[str, int, int]]) -> list:
    """The helpers ``ops`` name, on map "m" with the key at fp-4 and the value at fp-16; R0
    sums the updates' and deletes' results and the values the lookups found."""
    items = [b.st(8, FP, -16, 7), b.mov64(R6, 0)]
    for n, (op, key, flags) in enumerate(ops):
        items += [b.st(4, FP, -4, key), b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4)]
        if op == "update":
            items += [b.mov64(R3, FP), b.add64(R3, -16), b.mov64(R4, flags),
                      b.call("map_update_elem"), b.add64(R6, R0)]
        elif op == "delete":
            items += [b.call("map_delete_elem"), b.add64(R6, R0)]
        else:
            items += [b.call("map_lookup_elem"), b.jeq(R0, 0, f"miss{n}"), b.ldx(8, R1, R0),
                      b.add64(R6, R1), b.label(f"miss{n}")]
    return [*items, b.mov64(R0, R6), b.exit_()]


@settings(max_examples=60, deadline=None)
@given(PROGRAM_OPS, st.sampled_from(CORE_MAP_TYPES), st.booleans(), st.sampled_from(ENGINES),
       st.booleans())
def test_hash_map_helpers_in_c_leave_what_pythons_leave(ops, map_type, no_prealloc, engine,
                                                        modeled):
    """A program's bpf_map_{lookup,update,delete}_elem on a hash map of 8 elements, run on
    each CPU: through HtabCore's helpers (the JIT binds them to the map) with the C model and
    through the Python helpers with the Python model (or both without modeled time), the
    same R0s, clocks, counts, caches and map, on every engine."""
    systems = c_and_python_systems(modeled)
    flags = BPF_F_NO_PREALLOC if no_prealloc and map_type != MapType.LRU_HASH else 0
    fds = [e.map_create(map_type, 4, 8, 8, map_flags=flags) for e in systems]
    items = hash_map_program(ops)
    progs = [e.prog_from_fd(e.prog_load(ProgType.SCHED_CLS, asm.encode(
        asm.assemble(items).with_map_fds(lambda name, fd=fd: fd))))
        for e, fd in zip(systems, fds, strict=True)]
    for cpu in (0, 1, 0):
        r0s = retvals_on_cpu(systems, progs, cpu, engine)
        assert r0s[0] == r0s[1]
        assert observed(systems[0].machine.timing, []) == observed(systems[1].machine.timing, [])
    assert hash_map_state(systems[0], fds[0]) == hash_map_state(systems[1], fds[1])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("modeled", [True, False])
def test_a_runs_helpers_work_on_the_cpu_the_run_began_on(engine, modeled):
    """run_prog reads the running CPU once, into RunState.cpu (a program stays on its CPU for
    the run, as under the kernel's migrate_disable), and HtabCore's helpers take it from
    there: a per-CPU hash map's update on CPU 1 fills CPU 1's slot, on either machine."""
    items = hash_map_program([("update", 3, 0), ("lookup", 3, 0)])
    for e in c_and_python_systems(modeled):
        fd = e.map_create(MapType.PERCPU_HASH, 4, 8, 8)
        prog = e.prog_from_fd(e.prog_load(ProgType.SCHED_CLS, asm.encode(
            asm.assemble(items).with_map_fds(lambda name, fd=fd: fd))))
        with e.machine.on_cpu(1):
            rs = prog.run(bytearray(64), engine=engine)
        assert (rs.cpu, rs.retval) == (1, 7)
        slots = e.map_lookup_elem(fd, (3).to_bytes(4, "little"))
        assert slots == bytes(8) + (7).to_bytes(8, "little")  # CPU 0's slot, then CPU 1's


# BTF of a value with a special field at its start (a HASH map's bpf_spin_lock, an LRU_HASH
# map's bpf_timer, which may not hold a lock), then a u32 count: type ids 1-5
SPECIAL_VALUE_TYPES = [
    Int("unsigned int", 4, 0, 0, 32), Struct("bpf_spin_lock", 4, (Member("val", 1, 0),)),
    Struct("bpf_timer", 16, (Member("a", 1, 0), Member("b", 1, 32), Member("c", 1, 64),
                             Member("d", 1, 96))),
    Struct("with_lock", 24, (Member("lock", 2, 0), Member("cnt", 1, 128))),
    Struct("with_timer", 24, (Member("t", 3, 0), Member("cnt", 1, 128)))]


@pytest.mark.parametrize(("map_type", "value_id", "field_size"),
                         [(MapType.HASH, 4, 4), (MapType.LRU_HASH, 5, 16)])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_value_with_special_fields_is_updated_by_the_python_reference(map_type, value_id,
                                                                       field_size, engine):
    """BTF gives a map its special fields after it is made (map_check_btf): HtabCore is told,
    and a program's update of such a value goes to the Python method, which leaves a new
    element's lock free (the kernel's copy_map_value skips it), not copied from the
    program's bytes; the same element on the C machine and the reference."""
    items = [b.st(8, FP, -32, -1), b.st(8, FP, -24, -1), b.st(8, FP, -16, 5),
             b.st(4, FP, -4, 3), b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4),
             b.mov64(R3, FP), b.add64(R3, -32), b.mov64(R4, 0), b.call("map_update_elem"),
             b.exit_()]
    values = []
    for e in c_and_python_systems():
        btf = e.btf_load(Btf(SPECIAL_VALUE_TYPES).to_bytes())
        fd = e.map_create(map_type, 4, 24, 8, btf_fd=btf, btf_key_type_id=1,
                          btf_value_type_id=value_id)
        bpf_map = e.map_from_fd(fd)
        assert bpf_map.special_fields == ((0, field_size),)
        if bpf_map._core is not None:
            assert bpf_map._core.special_fields
        prog = e.prog_from_fd(e.prog_load(ProgType.SCHED_CLS, asm.encode(
            asm.assemble(items).with_map_fds(lambda name, fd=fd: fd))))
        assert retvals_on_cpu([e], [prog], 0, engine) == [0]
        values.append(bytes(bpf_map.table[(3).to_bytes(4, "little")].value))
    assert values[0] == values[1]
    if map_type == MapType.HASH:  # (an emulated bpf_timer lives beside its bytes)
        assert values[0] == bytes(4) + b"\xff" * 12 + (5).to_bytes(8, "little")


@pytest.mark.parametrize("seed", range(3))
def test_larger_caches_over_many_lines_agree(seed):
    """Caches of hundreds of lines over thousands: the C tables grow and delete at a scale the
    tiny caches above do not reach."""
    profile = load_profile("haswell-ep-2s")
    models = (Timing(profile, [0, 0, 1, 1], cache_scale=1 / 1024),)
    with mock.patch.object(timing_module, "CACHE_MODEL", None):
        models += (Timing(profile, [0, 0, 1, 1], cache_scale=1 / 1024),)
    assert models[0].private_lines == 64 and models[0].shared_lines == 400
    rng = random.Random(seed)
    for _ in range(30000):
        cpu, node = rng.randrange(4), rng.randrange(2)
        line = rng.randrange(200) if rng.random() < 0.7 else rng.randrange(20000)  # hot, cold
        write = rng.random() < 0.3
        results = [t.access(cpu, (node << NODE_SHIFT) + PAGE + 64 * line, write) for t in models]
        assert results[0] == results[1]
    assert observed(models[0], []) == observed(models[1], [])


def test_evictions_forget_lines_and_keep_lru_order():
    """A hand-checked case: 4 private lines, 8 shared; the fifth line evicts the first from
    the private cache, the ninth line the first from the shared one, which no cache then
    holds, so its version and owner go."""
    for t in machines([0, 0]):
        t.access(0, address(0, 0, 0), write=True)
        for line in range(1, 9):
            t.access(0, address(0, line, 0))
        t.access(0, address(0, 5, 0))  # a hit: most recently used now
        state = t.cache_state()
        assert [line for line, _ in state["private"][0]] == \
            [address(0, n, 0) // LINE for n in (6, 7, 8, 5)]
        assert state["shared"][0] == [address(0, n, 0) // LINE for n in range(1, 9)]
        assert state["version"] == {} and state["dirty"] == {}
        assert list(t.hits) == [1, 0]


def test_a_line_transfers_from_the_cpu_that_wrote_it():
    for t in machines([0, 1]):
        addr = address(0, 3, 0)
        t.access(0, addr, write=True)
        assert t.access(1, addr) == t.transfer[1][0]
        assert t.stats[1]["transfer_remote"] == [1, t.transfer[1][0]]
        assert t.cache_state()["dirty"] == {}  # written back: shared and clean


def test_an_address_on_a_node_the_machine_lacks_is_an_index_error():
    for t in machines([0]):
        with pytest.raises(IndexError):
            t.access(0, address(1, 0, 0))


def test_the_c_model_takes_addresses_of_64_bits_and_refuses_others():
    """An address is an int of 0 to 2**64 - 1: below or above is an OverflowError (not a
    wrapped address); the largest one is taken, and its node, which no machine has, is the
    IndexError above."""
    native, _ = machines([0])
    for bad in (-1, 1 << 64, -(1 << 70), 1 << 90):
        with pytest.raises(OverflowError):
            native.access(0, bad)
    with pytest.raises(IndexError):
        native.access(0, (1 << 64) - 1)
    assert native.access(0, address(0, 3, 8)) > 0


def test_an_unknown_event_is_the_same_error():
    errors = []
    for t in machines([0]):
        with pytest.raises(ValueError) as raised:
            t.charge(0, "htab_lookup")
        errors.append(str(raised.value))
        assert t.clock == [0.0] and t.counts == [{}]
    assert errors[0] == errors[1] and "no cost 'htab_lookup'" in errors[0]


def test_pybpf_no_accel_picks_the_python_model():
    code = ("from pybpf.emulated.machine.timing import Timing; from pybpf.profiles import "
            "load_profile; print(Timing(load_profile('host')).cache_model)")
    env = dict(os.environ, PYBPF_NO_ACCEL="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "Python"
    assert Timing(load_profile("host")).cache_model == "C"


def test_swap_dicts_in_c_does_what_the_reference_does():
    """The scheduler's switch of task-local state: the live dicts (the same objects, refilled
    in place) get the incoming contents, the same value objects, and the old ones come back
    as new dicts in order."""
    values = [[], {"nested": 1}, 7, "task", (1000, 1000)]

    def switched(swap) -> tuple:
        live = [{"cpu": values[2], "task": values[4]}, {}, {"flush": values[0]}]
        incoming = [{"cpu": values[3]}, {"depth": values[1]}, {}]
        ids = [id(state) for state in live]
        saved = swap(live, incoming)
        contents = [[(key, id(value)) for key, value in d.items()] for d in (*live, *saved)]
        return [id(state) for state in live] == ids, contents, len(saved)

    assert switched(timing_module.CACHE_MODEL.swap_dicts) == switched(timing_module._swap_dicts)
    assert switched(timing_module.swap_dicts)[0]
    for swap in (timing_module.CACHE_MODEL.swap_dicts, timing_module._swap_dicts):
        with pytest.raises(ValueError):
            swap([{}], [])


def test_the_c_model_has_its_own_locks_with_the_same_fields():
    """Timing.new_lock gives the C model's SpinLock (its fields in C) when the C model runs;
    a lock of the Python type is refused there rather than read field by field."""
    native, reference = machines([0, 0])
    lock, ref = native.new_lock(address(0, 1, 0)), reference.new_lock(address(0, 1, 0))
    assert type(lock) is timing_module.CACHE_MODEL.SpinLock
    assert type(ref) is SpinLock

    def fields(lk) -> tuple:
        return lk.addr, lk.held, lk.acquired_at, lk.holder, lk.last_end

    assert fields(lock) == fields(ref) == (address(0, 1, 0), [], 0.0, -1, 0.0)
    with pytest.raises(TypeError):
        native.spin_lock(0, ref)


def test_the_c_locks_history_reads_and_writes_as_the_python_locks_list():
    """The C lock keeps its history as an array: ``held`` gives it as the Python lock's list
    of (start, end, cpu), takes such a list, and refuses anything else without changing."""
    native, _ = machines([0, 0])
    lock = native.new_lock(address(0, 1, 0))
    lock.held = [(1.0, 2.5, 0), (2.5, 4.0, 1)]
    assert lock.held == [(1.0, 2.5, 0), (2.5, 4.0, 1)]
    native.clock[1] = 5.0
    native.spin_unlock(1, lock)  # not taken by CPU 1: the interval starts at the release
    assert lock.held == [(1.0, 2.5, 0), (2.5, 4.0, 1), (5.0, 5.0, 1)] and lock.last_end == 5.0
    for bad in ([(1.0, 2.0)], [(0.0, 1.0, 0), ("a", 2.0, 0)], ((1.0, 2.0, 0),)):
        with pytest.raises(TypeError):
            lock.held = bad
    with pytest.raises(TypeError):
        del lock.held
    assert lock.held == [(1.0, 2.5, 0), (2.5, 4.0, 1), (5.0, 5.0, 1)]


@pytest.mark.parametrize("modeled", [True, False])
def test_a_map_helper_asks_the_scheduler_only_while_one_is_attached(modeled):
    """Timing.scheduler counts the attached schedulers for the C extension, whose map cores
    look for one only while some machine has one: a program's lookup asks an attached
    scheduler (one that is not a VirtualTimeScheduler is always asked) and, once it is
    detached, nothing."""
    e = c_and_python_systems(modeled)[0]
    fd = e.map_create(MapType.HASH, 4, 8, 8)
    prog = e.prog_from_fd(e.prog_load(ProgType.SCHED_CLS, asm.encode(
        asm.assemble(hash_map_program([("lookup", 1, 0)])).with_map_fds(lambda name: fd))))
    asked = []

    class Scheduler:
        def sync(self, cpu: int) -> None:
            asked.append(cpu)

    timing = e.machine.timing
    timing.scheduler = Scheduler()
    try:
        retvals_on_cpu([e], [prog], 1, "jit")
        assert asked == [1]
    finally:
        timing.scheduler = None
    retvals_on_cpu([e], [prog], 1, "jit")
    assert asked == [1]
    with pytest.raises(ValueError, match="detached"):
        timing.c_extension.count_schedulers(-1 << 40)
