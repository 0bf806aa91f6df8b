"""An emulated system whose HASH and ARRAY maps live in a pybpf.shared segment
(``EmulatedSystem(shared=...)``, emulated/maps/shared.py).

The emulated system without a segment is the reference: the same syscalls and the same
programs, on every engine, give the same values, errno and get_next_key order. Then what only
the segment gives: processes forked after the maps were made update the same maps, from
syscalls and from programs, and lose nothing.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import forked_results
from pybpf import shared
from pybpf.asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R4,
    R7,
    add64,
    atomic_add64,
    call,
    exit_,
    jeq,
    label,
    ld_map_fd,
    mov64,
    stdw,
    stw,
    stxdw,
)
from pybpf.emulated import native_missing
from pybpf.emulated.prog import native
from pybpf.emulated.system import EmulatedSystem
from pybpf.errors import BPFError
from pybpf.maps import Map, MapSpec
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import (
    BPF_ANY,
    BPF_F_MMAPABLE,
    BPF_F_NO_COMMON_LRU,
    BPF_F_NO_PREALLOC,
    BPF_F_ZERO_SEED,
    BPF_NOEXIST,
    MapType,
    ProgType,
)

pytestmark = pytest.mark.skipif(not shared.available(),
                                reason="pybpf._shm_maps is not built (no C compiler)")

MIB = 1 << 20
ENGINES = ["interp", "jit"] + ([] if native_missing() else ["native"])


def shared_system(size: int = 8 * MIB, cpus: int = 2) -> EmulatedSystem:
    return EmulatedSystem(cpus=cpus, modeled_time=False,
                          shared=shared.Segment.create(None, size))


def outcome(call_):
    try:
        return ("ok", call_())
    except BPFError as exc:
        return ("errno", exc.errno)


def walk(sys_, fd) -> list:
    keys, key = [], None
    while True:
        try:
            key = sys_.map_get_next_key(fd, key)
        except BPFError:
            return keys
        keys.append(key)


@st.composite
def op_sequence(draw, key_size: int, value_size: int):
    """Syscall ops on keys of a small pool; ``value_size``: the syscall's value bytes."""
    pool = draw(st.lists(st.binary(min_size=key_size, max_size=key_size), min_size=1,
                         max_size=16, unique=True))
    key = st.sampled_from(pool)
    value = st.binary(min_size=value_size, max_size=value_size)
    op = st.one_of(
        st.tuples(st.just("update"), key, value, st.sampled_from([0, 0, 1, 2, 4, 8])),
        st.tuples(st.just("lookup"), key),
        st.tuples(st.just("delete"), key),
        st.tuples(st.just("lookup_and_delete"), key, st.sampled_from([0, 0, 4])),
        st.tuples(st.just("next"), st.one_of(st.none(), key)),
        st.tuples(st.just("batch"), st.sampled_from([None, 0, 1, 5, 40]), st.integers(0, 6),
                  st.booleans()),
    )
    return draw(st.lists(op, max_size=50))


def apply(sys_, fd, op):
    name, *args = op
    if name == "update":
        return outcome(lambda: sys_.map_update_elem(fd, *args))
    if name == "lookup":
        return outcome(lambda: sys_.map_lookup_elem(fd, args[0]))
    if name == "delete":
        return outcome(lambda: sys_.map_delete_elem(fd, args[0]))
    if name == "lookup_and_delete":
        return outcome(lambda: sys_.map_lookup_and_delete_elem(fd, *args))
    if name == "batch":  # a lookup (and delete) batch from bucket token, of count elements
        token, count, delete = args
        in_batch = None if token is None else struct.pack("<I", token)
        call_ = sys_.map_lookup_and_delete_batch if delete else sys_.map_lookup_batch
        return outcome(lambda: call_(fd, in_batch, count))
    return outcome(lambda: sys_.map_get_next_key(fd, args[0]))


PERCPU_TYPES = (MapType.PERCPU_HASH, MapType.PERCPU_ARRAY, MapType.LRU_PERCPU_HASH)
HASH_TYPES = [MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH, MapType.LRU_PERCPU_HASH]


def syscall_value_size(map_type: int, value_size: int, cpus: int = 2) -> int:
    return -(-value_size // 8) * 8 * cpus if map_type in PERCPU_TYPES else value_size


def hash_flags(map_type: int, other: bool) -> int:
    """The flag a hash map type varies: BPF_F_NO_PREALLOC, or an LRU map's
    BPF_F_NO_COMMON_LRU (LRU maps are always preallocated)."""
    if not other:
        return 0
    return BPF_F_NO_COMMON_LRU if map_type in (MapType.LRU_HASH, MapType.LRU_PERCPU_HASH) \
        else BPF_F_NO_PREALLOC


@settings(max_examples=80, database=None, deadline=None)
@given(st.sampled_from(HASH_TYPES), st.sampled_from([1, 4, 13]),
       st.sampled_from([1, 8, 12]), st.integers(1, 10), st.booleans(), st.data())
def test_hash_syscalls_match_the_emulated_reference(map_type, key_size, value_size,
                                                    max_entries, other_flag, data):
    """Every op on each emulated CPU in turn (an LRU map's inserts take their CPU's nodes
    and evict as the reference's lists do)."""
    ops = data.draw(op_sequence(key_size, syscall_value_size(map_type, value_size)))
    cpus = data.draw(st.lists(st.integers(0, 1), min_size=len(ops), max_size=len(ops)))
    mine, ref = shared_system(), EmulatedSystem(cpus=2, modeled_time=False)
    fds = [s.map_create(map_type, key_size, value_size, max_entries,
                        map_flags=hash_flags(map_type, other_flag) | BPF_F_ZERO_SEED)
           for s in (mine, ref)]
    for op, cpu in zip(ops, cpus, strict=True):
        with mine.on_cpu(cpu), ref.on_cpu(cpu):
            assert apply(mine, fds[0], op) == apply(ref, fds[1], op), op
        mine.map_from_fd(fds[0]).check_invariants()
    assert walk(mine, fds[0]) == walk(ref, fds[1])
    assert mine.map_stats(fds[0])["shared_segment"] == "anonymous segment"


@settings(max_examples=40, database=None, deadline=None)
@given(st.sampled_from([MapType.ARRAY, MapType.PERCPU_ARRAY]), st.sampled_from([1, 8, 12]),
       st.integers(1, 5), st.data())
def test_array_syscalls_match_the_emulated_reference(map_type, value_size, max_entries, data):
    ops = data.draw(op_sequence(4, syscall_value_size(map_type, value_size)))
    mine, ref = shared_system(), EmulatedSystem(cpus=2, modeled_time=False)
    fds = [s.map_create(map_type, 4, value_size, max_entries) for s in (mine, ref)]
    for op in ops:
        assert apply(mine, fds[0], op) == apply(ref, fds[1], op), op
    assert walk(mine, fds[0]) == walk(ref, fds[1])
    batch = [s.map_lookup_batch(fd, None, max_entries)
             for s, fd in zip((mine, ref), fds, strict=True)]
    assert batch[0] == batch[1]


def count_program() -> ProgramSpec:
    """counts[1] += 1; h[7] = 5 (BPF_ANY); h[7] += 3: two maps, lookups, an update and
    atomics on looked-up values."""
    return ProgramSpec(ProgType.XDP, [
        ld_map_fd(R1, "counts"), stw(FP, -4, 1), mov64(R2, FP), add64(R2, -4),
        call("map_lookup_elem"), jeq(R0, 0, "out"), mov64(R1, 1), atomic_add64(R0, 0, R1),
        label("out"),
        ld_map_fd(R1, "h"), stw(FP, -4, 7), mov64(R2, FP), add64(R2, -4),
        stdw(FP, -16, 5), mov64(R3, FP), add64(R3, -16), mov64(R4, 0),
        call("map_update_elem"),
        ld_map_fd(R1, "h"), mov64(R2, FP), add64(R2, -4),
        call("map_lookup_elem"), jeq(R0, 0, "out2"), mov64(R1, 3), atomic_add64(R0, 0, R1),
        label("out2"),
        mov64(R0, 2), exit_()], name="count")


@pytest.mark.parametrize("engine", ENGINES)
def test_programs_see_the_same_maps_as_without_a_segment(engine):
    got = []
    for sys_ in (shared_system(), EmulatedSystem(cpus=2, modeled_time=False)):
        sys_.bpf_engine = engine
        counts = Map(MapSpec(MapType.ARRAY, 4, 8, 4, key=int, value=int), sys_)
        h = Map(MapSpec(MapType.HASH, 4, 8, 16, key=int, value=int), sys_)
        with Program.load(count_program(), sys_, maps={"counts": counts, "h": h}) as prog:
            retvals = [prog.test_run(bytes(64)).retval for _ in range(3)]
        got.append((retvals, dict(counts.items()), dict(h.items())))
    assert got[0] == got[1] == ([2, 2, 2], {0: 0, 1: 3, 2: 0, 3: 0}, {7: 8})


@pytest.mark.parametrize("engine", ENGINES)
def test_a_segment_closes_after_tracepoint_runs_that_looked_up_its_values(engine):
    """A tracepoint program that reached values in the segment (each firing's RunState kept
    for the next one) leaves no view of the segment once it is closed: the segment closes
    as soon as its maps are."""
    seg = shared.Segment.create(None, MIB)
    sys_ = EmulatedSystem(cpus=1, modeled_time=False, shared=seg)
    sys_.bpf_engine = engine
    counts = Map(MapSpec(MapType.ARRAY, 4, 8, 4, key=int, value=int), sys_)
    h = Map(MapSpec(MapType.HASH, 4, 8, 16, key=int, value=int), sys_)
    spec = dataclasses.replace(count_program(), prog_type=ProgType.TRACEPOINT)
    with Program.load(spec, sys_, maps={"counts": counts, "h": h}) as prog:
        link = prog.attach_tracepoint("syscalls", "sys_enter_getpid")
        assert [sys_.enter_syscall("getpid", bytes(16)) for _ in range(3)] == [[2]] * 3
        link.close()
    assert (counts[1], h[7]) == (3, 8)
    counts.close()
    h.close()
    seg.close()
    assert seg.closed


@pytest.mark.parametrize("engine", ENGINES)
def test_forked_processes_update_the_same_maps(engine):
    """Two children each run the program 500 times and update keys of their own through
    the syscall: the parent sees every increment and every key."""
    sys_ = shared_system()
    sys_.bpf_engine = engine
    counts = Map(MapSpec(MapType.ARRAY, 4, 8, 4, key=int, value=int), sys_)
    h = Map(MapSpec(MapType.HASH, 4, 8, 2048, key=int, value=int), sys_)
    with Program.load(count_program(), sys_, maps={"counts": counts, "h": h}) as prog:
        prog.test_run(bytes(64))  # compiled before the fork
        pids = []
        for child in range(2):
            pid = os.fork()
            if pid == 0:
                status = 0
                try:
                    for i in range(500):
                        prog.test_run(bytes(64))
                        h[1000 * (child + 1) + i] = i
                except BaseException:  # noqa: BLE001 - the exit status says it
                    status = 1
                os._exit(status)
            pids.append(pid)
        assert [os.waitpid(pid, 0)[1] for pid in pids] == [0, 0]
    assert counts[1] == 1001
    assert h[7] == 8
    assert sorted(k for k in h if k != 7) == [*range(1000, 1500), *range(2000, 2500)]


def test_a_system_with_a_segment_runs_without_modeled_time():
    seg = shared.Segment.create(None, MIB)
    with pytest.raises(ValueError, match="modeled_time=False"):
        EmulatedSystem(cpus=1, modeled_time=True, shared=seg)


def test_other_map_types_stay_in_the_process():
    sys_ = shared_system()
    fd = sys_.map_create(MapType.QUEUE, 0, 8, 16)
    assert "shared_segment" not in sys_.map_stats(fd)
    lru = sys_.map_create(MapType.LRU_HASH, 4, 8, 16)
    assert sys_.map_stats(lru)["shared_segment"] == "anonymous segment"


def test_what_a_segment_cannot_hold_is_refused_saying_so():
    sys_ = shared_system()
    with pytest.raises(BPFError, match="not supported in a shared segment") as exc:
        sys_.map_create(MapType.ARRAY, 4, 8, 4, map_flags=BPF_F_MMAPABLE)
    assert exc.value.errno == errno.EINVAL
    fd = sys_.map_create(MapType.HASH, 4, 8, 4)
    bpf_map = sys_.map_from_fd(fd)
    with pytest.raises(Exception, match="bpf_spin_lock or bpf_timer"):
        bpf_map.set_special_fields(0, -1)
    # the kernel's checks come first, with the kernel's errno
    with pytest.raises(BPFError) as exc:
        sys_.map_create(MapType.HASH, 4, 0, 4)
    assert exc.value.errno == errno.EINVAL


def test_a_full_segment_is_enomem_and_the_system_goes_on():
    sys_ = shared_system(size=64 * 1024)
    with pytest.raises(BPFError) as exc:
        sys_.map_create(MapType.HASH, 4, 8, 100_000)
    assert exc.value.errno == errno.ENOMEM
    fd = sys_.map_create(MapType.HASH, 4, 8, 8)
    sys_.map_update_elem(fd, struct.pack("<I", 1), bytes(8), 0)
    assert sys_.map_lookup_elem(fd, struct.pack("<I", 1)) == bytes(8)


def test_the_segment_stays_mapped_while_a_map_holds_its_memory():
    seg = shared.Segment.create(None, MIB)
    sys_ = EmulatedSystem(cpus=1, modeled_time=False, shared=seg)
    fd = sys_.map_create(MapType.ARRAY, 4, 8, 4)
    with pytest.raises(BufferError, match="close that system first"):
        seg.close()
    assert sys_.map_lookup_elem(fd, struct.pack("<I", 0)) == bytes(8)
    sys_.close(fd)  # the last reference: map_free releases the views
    seg.close()
    assert seg.closed


def test_the_c_helpers_work_in_a_fresh_interpreter():
    """A program's helpers on a segment's maps run in C (OpsHelpers) in an interpreter where
    no other map made the C run-state bindings first (their first use bound them: a build
    that left that to HtabCore crashed here)."""
    script = (
        "from pybpf import shared\n"
        "from pybpf.emulated.system import EmulatedSystem\n"
        "from pybpf.maps import Map, MapSpec\n"
        "from pybpf.programs import Program\n"
        "from pybpf.uapi import MapType\n"
        "import tests_shared_program as p\n"
        "s = EmulatedSystem(cpus=1, modeled_time=False, shared=shared.Segment.create(None, "
        "1 << 20))\n"
        "c = Map(MapSpec(MapType.ARRAY, 4, 8, 4, key=int, value=int), s)\n"
        "h = Map(MapSpec(MapType.HASH, 4, 8, 4, key=int, value=int), s)\n"
        "assert 'lookup' in s.map_from_fd(h.fd).c_helpers\n"
        "with Program.load(p.count_program(), s, maps={'counts': c, 'h': h}) as prog:\n"
        "    print(prog.test_run(bytes(64)).retval, c[1], h[7])\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), *sys.path]))
    run = subprocess.run([sys.executable, "-c", script.replace("tests_shared_program",
                                                               "test_shared")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["2", "1", "8"]


def test_bench_map_perf_scaling_prints_each_test_beside_the_reference():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-m", "pybpf", "bench", "map-perf-scaling",
                          "--rounds", "1", "--max-cnt", "50", "--procs", "2",
                          "--backend-kernel", "off", "--engine", "jit"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = {line.split()[0]: line for line in run.stdout.splitlines()[2:]}
    assert set(rows) == {"0:hash_map_perf", "1:percpu_hash_map_perf", "2:hash_map_perf",
                         "3:percpu_hash_map_perf", "4:lru_hash_map_perf",
                         "5:nocommon_lru_hash_map_perf", "6:lpm_perf", "7:hash_lookup",
                         "8:array_lookup",
                         "9:inner_lru_hash_map_perf", "10:lru_hash_lookup_perf",
                         "reference:"}
    for line in rows.values():
        assert "x ±" in line
    # beside each test, what its 2 processes waited for per 1000 events
    assert "waits per 1000 events (2 processes): locks / reads" in run.stdout.splitlines()[1]
    assert all(re.search(r"\d+\.\d\d / \d+\.\d\d", line)
               for name, line in rows.items() if name != "reference:")


def ops_program(ops) -> ProgramSpec:
    """Each op on map ``h`` (key 4 bytes, or an LPM key (prefixlen, 4 data bytes as a u32);
    value 8), its R0 stored in ``results[i]``: ("update", key, value, flags), ("delete",
    key), ("add", key, n): a lookup and, where found, an atomic add of n to the value (R0 1
    where found, else 0)."""
    insns = []
    for i, op in enumerate(ops):
        name, key, *rest = op
        if isinstance(key, tuple):
            insns += [ld_map_fd(R1, "h"), stw(FP, -8, key[0]), stw(FP, -4, key[1]),
                      mov64(R2, FP), add64(R2, -8)]
        else:
            insns += [ld_map_fd(R1, "h"), stw(FP, -4, key), mov64(R2, FP), add64(R2, -4)]
        if name == "update":
            value, flags = rest
            insns += [stdw(FP, -16, value), mov64(R3, FP), add64(R3, -16), mov64(R4, flags),
                      call("map_update_elem")]
        elif name == "delete":
            insns.append(call("map_delete_elem"))
        else:
            (n,) = rest
            insns += [call("map_lookup_elem"), jeq(R0, 0, f"absent{i}"),
                      mov64(R1, n), atomic_add64(R0, 0, R1), mov64(R0, 1),
                      label(f"absent{i}")]
        insns += [stxdw(FP, -24, R0), ld_map_fd(R1, "results"), stw(FP, -4, i),
                  mov64(R2, FP), add64(R2, -4), mov64(R3, FP), add64(R3, -24), mov64(R4, 0),
                  call("map_update_elem")]
    insns += [mov64(R0, 2), exit_()]
    return ProgramSpec(ProgType.XDP, insns, name="ops")


OPS_CASES = st.lists(st.one_of(
    st.tuples(st.just("update"), st.integers(0, 7), st.integers(0, 99),
              st.sampled_from([0, 1, 2, 3, 4])),
    st.tuples(st.just("delete"), st.integers(0, 7)),
    st.tuples(st.just("add"), st.integers(0, 7), st.integers(1, 5))), min_size=1, max_size=24)


@settings(max_examples=40, database=None, deadline=None)
@given(OPS_CASES, st.booleans(), st.sampled_from(HASH_TYPES))
def test_program_map_ops_match_the_reference_on_every_engine(ops, other_flag, map_type):
    """Updates (flags valid and not, a full map), deletes (present and not) and lookups
    with an atomic on the value, from a program on CPU 0 and then on CPU 1: R0 of each op
    and the map's contents (a per-CPU map's every CPU's value) on each engine over a segment
    equal the interpreter's on a map without one. On the native tier these run in machine
    code (pybpf_shm_lookup, pybpf_shm_op). An LRU map of 4 evicts, from the running CPU's
    lists, what the reference's evicts, its lookups setting the reference bits."""
    flags = hash_flags(map_type, other_flag)
    results = []
    for engine, sys_ in [("interp", EmulatedSystem(cpus=2, modeled_time=False))] + [
            (engine, shared_system(cpus=2)) for engine in ENGINES]:
        sys_.bpf_engine = engine
        h = Map(MapSpec(map_type, 4, 8, 4, flags=flags | BPF_F_ZERO_SEED, key=int,
                        value=int), sys_)
        out = Map(MapSpec(MapType.ARRAY, 4, 8, len(ops), key=int, value=int), sys_)
        runs = []
        with Program.load(ops_program(ops), sys_, maps={"h": h, "results": out}) as prog:
            for cpu in (0, 1, 1):
                with sys_.on_cpu(cpu):
                    assert prog.test_run(bytes(64)).retval == 2
                runs.append([out[i] for i in range(len(ops))])
        results.append((engine, runs, list(h.items())))
    reference = results[0][1:]
    for engine, *got in results[1:]:
        assert tuple(got) == reference, engine


def test_another_process_finds_the_maps_in_a_named_segment():
    """A map of an emulated system on a named segment is there by name (emulated-PID-N-NAME)
    for any process that attaches, through pybpf.shared's face: the same elements."""
    name = f"pybpf-test-{os.getpid()}-emulated"
    seg = shared.Segment.create(name, MIB)
    try:
        sys_ = EmulatedSystem(cpus=1, modeled_time=False, shared=seg)
        fd = sys_.map_create(MapType.HASH, 4, 8, 16, map_name=b"flows")
        sys_.map_update_elem(fd, struct.pack("<I", 7), struct.pack("<Q", 70), 0)
        script = ("import sys\nfrom pybpf import shared\n"
                  "seg = shared.Segment.attach(sys.argv[1])\n"
                  "(found,) = [n for n in seg.map_names() if n.endswith('-flows')]\n"
                  "m = seg.open_map(found, key=int, value=int)\n"
                  "m[8] = 80\nprint(found.split('-')[1], sorted(m.items()))\nseg.close()\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        run = subprocess.run([sys.executable, "-c", script, name], capture_output=True,
                             text=True, env=env, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.split(maxsplit=1) == [str(os.getpid()), "[(7, 70), (8, 80)]\n"]
        assert sys_.map_lookup_elem(fd, struct.pack("<I", 8)) == struct.pack("<Q", 80)
    finally:
        shared.unlink(name)


def test_pins_are_the_segments_for_every_process_on_it():
    """A pin of a map in a segment is a name there: this process gets it again (the same
    map), another process's emulated system on the segment gets it (its type, sizes, flags
    and name), changes it, and unpins it for both; a path taken in the segment is EEXIST
    for any object, and one past the segment's names' length ENAMETOOLONG."""
    name = f"pybpf-test-{os.getpid()}-pins"
    seg = shared.Segment.create(name, MIB)
    path = f"/sys/fs/bpf/pybpf-test-{os.getpid()}"
    try:
        sys_ = EmulatedSystem(cpus=2, modeled_time=False, shared=seg)
        fd = sys_.map_create(MapType.PERCPU_HASH, 4, 8, 16, map_flags=BPF_F_NO_PREALLOC,
                             map_name=b"counters")
        sys_.map_update_elem(fd, struct.pack("<I", 1), struct.pack("<QQ", 10, 11), 0)
        sys_.obj_pin(fd, path)
        array = sys_.map_create(MapType.ARRAY, 4, 8, 2)
        sys_.obj_pin(array, path + "-array")
        again = sys_.obj_get(path)
        assert sys_.map_get_info(again).id == sys_.map_get_info(fd).id
        with pytest.raises(BPFError) as exc:
            sys_.obj_pin(sys_.map_create(MapType.LRU_HASH, 4, 8, 4), path)
        assert exc.value.errno == errno.EEXIST
        with pytest.raises(BPFError) as exc:
            sys_.obj_pin(fd, "/sys/fs/bpf/" + "x" * 60)
        assert exc.value.errno == errno.ENAMETOOLONG
        script = (
            "import struct, sys\n"
            "from pybpf import shared\n"
            "from pybpf.emulated.system import EmulatedSystem\n"
            "s = EmulatedSystem(cpus=2, modeled_time=False, "
            "shared=shared.Segment.attach(sys.argv[1]))\n"
            "fd = s.obj_get(sys.argv[2])\n"
            "info = s.map_get_info(fd)\n"
            "print(info.type, info.key_size, info.value_size, info.max_entries, "
            "info.map_flags, info.name)\n"
            "print(struct.unpack('<QQ', s.map_lookup_elem(fd, struct.pack('<I', 1))))\n"
            "s.map_update_elem(fd, struct.pack('<I', 2), struct.pack('<QQ', 20, 21), 0)\n"
            "s.obj_unpin(sys.argv[2])\n"
            "array = s.obj_get(sys.argv[2] + '-array')\n"
            "s.map_update_elem(array, struct.pack('<I', 1), struct.pack('<Q', 7), 0)\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        run = subprocess.run([sys.executable, "-c", script, name, path], capture_output=True,
                             text=True, env=env, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.splitlines() == [
            f"{int(MapType.PERCPU_HASH)} 4 8 16 {BPF_F_NO_PREALLOC} counters", "(10, 11)"]
        assert sys_.map_lookup_elem(fd, struct.pack("<I", 2)) == struct.pack("<QQ", 20, 21)
        assert sys_.map_lookup_elem(array, struct.pack("<I", 1)) == struct.pack("<Q", 7)
        # the pin outlives this process's map of it: closed, got again, the same elements
        array_id = sys_.map_get_info(array).id
        sys_.close(array)
        array = sys_.obj_get(path + "-array")
        assert sys_.map_get_info(array).id != array_id
        assert sys_.map_lookup_elem(array, struct.pack("<I", 1)) == struct.pack("<Q", 7)
        with pytest.raises(BPFError) as exc:
            sys_.obj_get(path)
        assert exc.value.errno == errno.ENOENT
        with pytest.raises(BPFError) as exc:
            sys_.obj_unpin(path)
        assert exc.value.errno == errno.ENOENT
    finally:
        shared.unlink(name)


def _race(sys_, fd, role: int, keys: int, rounds: int, out) -> None:
    """One side of the race on an emulated system's hash in a segment: role 0 inserts the
    common keys with BPF_NOEXIST, role 1 takes them with lookup_and_delete; both also insert
    and delete keys of their own. Reports (inserted, taken)."""
    inserted = taken = 0
    for r in range(rounds):
        for k in range(keys):
            key = struct.pack("<I", k)
            own = struct.pack("<I", 1000 * (role + 1) + k)
            sys_.map_update_elem(fd, own, struct.pack("<Q", r), 0)
            try:
                if role == 0:
                    sys_.map_update_elem(fd, key, struct.pack("<Q", r), 1)
                    inserted += 1
                else:
                    sys_.map_lookup_and_delete_elem(fd, key)
                    taken += 1
            except BPFError as exc:
                assert exc.errno in (errno.EEXIST, errno.ENOENT)
            sys_.map_delete_elem(fd, own)
    out.put((role, inserted, taken))


def test_two_processes_racing_through_emulated_syscalls_lose_nothing():
    """Two forked processes on one emulated system's hash map in a segment, through its
    syscalls: every common key inserted is taken once or still there, their own keys all
    gone, nothing listed twice."""
    sys_ = shared_system()
    fd = sys_.map_create(MapType.HASH, 4, 8, 4096, map_flags=BPF_F_NO_PREALLOC)
    results = {role: (inserted, taken) for role, inserted, taken in
               forked_results(_race, [(sys_, fd, role, 200, 20) for role in (0, 1)])}
    inserted, taken = results[0][0], results[1][1]
    left = walk(sys_, fd)
    assert len(set(left)) == len(left)
    assert all(struct.unpack("<I", k)[0] < 200 for k in left)
    assert inserted == taken + len(left) and inserted >= 200


@pytest.mark.parametrize("engine", ENGINES)
def test_a_programs_lookup_keeps_an_lru_element_and_a_syscalls_does_not(engine):
    """Keys 0-7 in an LRU map of 16; a program looks up 0 and 1 (setting their reference
    bits), a syscall looks up 2; then 12 inserts evict: 0 and 1 stay, 2-7 go, as in the
    reference."""
    ops = [("add", 0, 1), ("add", 1, 1)] + [("update", k, k, 0) for k in range(8, 20)]
    kept = []
    for sys_ in (shared_system(cpus=1), EmulatedSystem(cpus=1, modeled_time=False)):
        sys_.bpf_engine = engine
        h = Map(MapSpec(MapType.LRU_HASH, 4, 8, 16, flags=BPF_F_ZERO_SEED, key=int,
                        value=int), sys_)
        for k in range(8):
            h[k] = k
        assert h[2] == 2
        out = Map(MapSpec(MapType.ARRAY, 4, 8, len(ops), key=int, value=int), sys_)
        with Program.load(ops_program(ops), sys_, maps={"h": h, "results": out}) as prog:
            prog.test_run(bytes(64))
        kept.append(dict(h.items()))
    assert kept[0] == kept[1] == {0: 1, 1: 2, **{k: k for k in range(10, 20)}}


def _lru_churn(sys_, fd, cpu: int, value_size: int, ops: int, out) -> None:
    """One emulated CPU's side of the LRU churn, in a forked process: inserts (evicting),
    program-side lookups (setting reference bits), syscall lookups and deletes on keys both
    sides use; a value holds its key twice, so a torn or misplaced one shows."""
    import random

    rnd = random.Random(cpu)
    bpf_map = sys_.map_from_fd(fd)
    done = 0
    with sys_.on_cpu(cpu):
        for _ in range(ops):
            k = rnd.randrange(300)
            key = struct.pack("<I", k)
            op = rnd.randrange(8)
            try:
                if op < 4:
                    sys_.map_update_elem(fd, key, struct.pack("<II", k, k) * (value_size // 8),
                                         rnd.choice((0, 0, 1, 2)))
                elif op < 6:
                    bpf_map.map_lookup_elem(key)
                elif op == 6:
                    value = sys_.map_lookup_elem(fd, key)
                    assert value == struct.pack("<II", k, k) * (value_size // 8), (k, value)
                else:
                    sys_.map_delete_elem(fd, key)
                done += 1
            except BPFError as exc:
                assert exc.errno in (errno.EEXIST, errno.ENOENT), exc
                done += 1
    out.put(done)


@pytest.mark.parametrize("map_type,flags", [(MapType.LRU_HASH, 0),
                                            (MapType.LRU_HASH, BPF_F_NO_COMMON_LRU),
                                            (MapType.LRU_PERCPU_HASH, 0)])
def test_two_processes_churning_an_lru_map_leave_it_whole(map_type, flags):
    """Two forked processes, emulated CPUs 0 and 1, insert, look up and delete on one LRU
    map of 64 in a segment (300 keys: it evicts all the time, steals nodes from the other
    CPU's lists): every value read is whole, and at rest the chains, the count and every LRU
    list agree (Map.check), each node on one list."""
    sys_ = shared_system()
    fd = sys_.map_create(map_type, 4, 8, 64, map_flags=flags)
    value_size = syscall_value_size(map_type, 8)
    done = forked_results(_lru_churn, [(sys_, fd, cpu, value_size, 20000) for cpu in (0, 1)])
    assert done == [20000, 20000]
    sys_.map_from_fd(fd).check_invariants()
    keys = walk(sys_, fd)
    assert len(set(keys)) == len(keys) <= 64
    for key in keys:
        k = struct.unpack("<I", key)[0]
        assert sys_.map_lookup_elem(fd, key) == struct.pack("<II", k, k) * (value_size // 8)


LPM_KEYS = st.tuples(st.integers(0, 33), st.sampled_from([0x0000A8C0, 0x0100A8C0, 0x00FFA8C0,
                                                          0x12345678, 0x0000A8C1]))
LPM_CASES = st.lists(st.one_of(
    st.tuples(st.just("update"), LPM_KEYS, st.integers(0, 99), st.sampled_from([0, 1, 2, 3])),
    st.tuples(st.just("delete"), LPM_KEYS),
    st.tuples(st.just("add"), LPM_KEYS, st.integers(1, 5))), min_size=1, max_size=24)


@settings(max_examples=20, database=None, deadline=None)
@given(LPM_CASES)
def test_program_lpm_ops_match_the_reference_on_every_engine(ops):
    """A program's LPM lookups (longest prefix match, with an atomic on the value found),
    updates (all flags, prefixlen past 32, a full trie of 4) and deletes on a trie in the
    segment, on each engine, give the R0s and the trie (get_next_key's order) of the
    interpreter's on a trie without a segment; on the native tier the lookups are
    pybpf_shm_lookup's walk."""
    results = []
    for engine, sys_ in [("interp", EmulatedSystem(cpus=2, modeled_time=False))] + [
            (engine, shared_system(cpus=2)) for engine in ENGINES]:
        sys_.bpf_engine = engine
        h = Map(MapSpec(MapType.LPM_TRIE, 8, 8, 4, flags=BPF_F_NO_PREALLOC, value=int), sys_)
        out = Map(MapSpec(MapType.ARRAY, 4, 8, len(ops), key=int, value=int), sys_)
        with Program.load(ops_program(ops), sys_, maps={"h": h, "results": out}) as prog:
            assert prog.test_run(bytes(64)).retval == 2
        results.append((engine, [out[i] for i in range(len(ops))], list(h.items())))
        if sys_.shared_segment is not None:
            sys_.map_from_fd(h.fd).check_invariants()
    for engine, *got in results[1:]:
        assert tuple(got) == results[0][1:], engine


@st.composite
def lpm_sequence(draw):
    """Syscall ops on an LPM trie with 1 to 16 data bytes: keys of a small pool (prefixes
    of each other, and past the maximum), values of 8 bytes."""
    data_size = draw(st.sampled_from([1, 2, 3, 4, 9, 16]))  # byte, word and u64 compares
    # bytes that part early and late (st.binary's favourite, zeros, would nest every prefix)
    data = st.lists(st.sampled_from([0x00, 0x80, 0xC0, 0x40, 0xFF, 0x0F, 0xA5]),
                    min_size=data_size, max_size=data_size).map(bytes)
    # prefixes that end near where such bytes part (and any, and past the maximum)
    prefixlen = st.one_of(st.integers(0, 8 * data_size + 1),
                          st.sampled_from([0, 1, 2, 3, 4, 5, 8, 9, 8 * data_size]))
    key = st.builds(lambda p, d: p.to_bytes(4, "little") + d, prefixlen, data)
    pool = draw(st.lists(key, min_size=1, max_size=12))
    keys = st.one_of(st.sampled_from(pool), key)
    update = st.tuples(st.just("update"), keys, st.binary(min_size=8, max_size=8),
                       st.sampled_from([0, 0, 0, 1, 2, 4]))
    op = st.one_of(  # updates and deletes most: the trie's shape changes
        update, update, update,
        st.tuples(st.just("delete"), keys), st.tuples(st.just("delete"), keys),
        st.tuples(st.just("lookup"), keys),
        st.tuples(st.just("lookup_and_delete"), keys, st.just(0)),
        st.tuples(st.just("next"), st.one_of(st.none(), keys)))
    return data_size, draw(st.lists(op, min_size=4, max_size=60))


@settings(max_examples=100, database=None, deadline=None)
@given(lpm_sequence(), st.integers(1, 8))
def test_lpm_syscalls_match_the_emulated_reference(sequence, max_entries):
    """A trie in the segment answers every syscall as the reference's does (values, errno:
    ENOSPC when full, EINVAL past the maximum prefixlen, ENOTSUPP for lookup_and_delete),
    its get_next_key walks the same post-order, and its shape checks after every op."""
    data_size, ops = sequence
    mine, ref = shared_system(), EmulatedSystem(cpus=2, modeled_time=False)
    fds = [s.map_create(MapType.LPM_TRIE, 4 + data_size, 8, max_entries,
                        map_flags=BPF_F_NO_PREALLOC) for s in (mine, ref)]
    for op in ops:
        assert apply(mine, fds[0], op) == apply(ref, fds[1], op), op
        mine.map_from_fd(fds[0]).check_invariants()
    assert walk(mine, fds[0]) == walk(ref, fds[1])


def test_deleting_a_leaf_under_an_intermediate_node_puts_its_sibling_in_its_place():
    """Two /8 keys that differ in their first bit hang under an intermediate /0 node;
    deleting one leaves the other where the intermediate node was (trie_delete_elem frees
    both), as the reference's trie does: the same order, and a shape that checks."""
    systems = [shared_system(), EmulatedSystem(cpus=2, modeled_time=False)]
    orders = []
    for sys_ in systems:
        fd = sys_.map_create(MapType.LPM_TRIE, 5, 8, 8, map_flags=BPF_F_NO_PREALLOC)
        for data in (b"\x80", b"\x00", b"\xc0"):
            sys_.map_update_elem(fd, struct.pack("<I", 8) + data, data * 8, 0)
        sys_.map_delete_elem(fd, struct.pack("<I", 8) + b"\x00")
        sys_.map_from_fd(fd).check_invariants()
        orders.append(walk(sys_, fd))
    assert orders[0] == orders[1] == [struct.pack("<I", 8) + b"\x80",
                                      struct.pack("<I", 8) + b"\xc0"]


def found_map_op(i: int, name: str, key: int, *rest: int) -> list:
    """Op ``i`` on the map in slot 0 of ``outer`` (found at run time): ("update", key,
    value, flags) or ("delete", key); R0 its result, 0 where the slot is empty."""
    insns = [ld_map_fd(R1, "outer"), stw(FP, -4, 0), mov64(R2, FP), add64(R2, -4),
             call("map_lookup_elem"), jeq(R0, 0, f"none{i}"), mov64(R1, R0),
             stw(FP, -4, key), mov64(R2, FP), add64(R2, -4)]
    if name == "update":
        insns += [stdw(FP, -16, rest[0]), mov64(R3, FP), add64(R3, -16),
                  mov64(R4, rest[1]), call("map_update_elem")]
    else:
        insns.append(call("map_delete_elem"))
    return [*insns, label(f"none{i}")]


def inner_ops_program(ops) -> ProgramSpec:
    """Each op on the map in slot 0 of ``outer`` (found_map_op), its R0 stored in
    ``results[i]``."""
    insns = []
    for i, op in enumerate(ops):
        insns += [*found_map_op(i, *op), stxdw(FP, -24, R0), ld_map_fd(R1, "results"),
                  stw(FP, -4, i), mov64(R2, FP), add64(R2, -4), mov64(R3, FP), add64(R3, -24),
                  mov64(R4, 0), call("map_update_elem")]
    return ProgramSpec(ProgType.XDP, insns + [mov64(R0, 2), exit_()], name="inner_ops")


@settings(max_examples=15, database=None, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("update"), st.integers(0, 7), st.integers(0, 99),
              st.sampled_from([0, 1, 2, 4])),
    st.tuples(st.just("delete"), st.integers(0, 7))), min_size=1, max_size=16),
    st.sampled_from([MapType.HASH, MapType.LRU_HASH]))
def test_a_segment_map_found_in_a_map_of_maps_is_updated_as_the_reference(ops, inner_type):
    """A program updates and deletes in the segment's map it finds in an array of maps (the
    native tier: pybpf_shm_map_of, then pybpf_shm_op, without Python), on each engine: the
    R0s and the inner map's contents of the interpreter's without a segment."""
    results = []
    for engine, sys_ in [("interp", EmulatedSystem(cpus=2, modeled_time=False))] + [
            (engine, shared_system(cpus=2)) for engine in ENGINES]:
        sys_.bpf_engine = engine
        spec = MapSpec(inner_type, 4, 8, 4, flags=BPF_F_ZERO_SEED, key=int, value=int)
        inner = Map(spec, sys_)
        outer = Map(MapSpec(MapType.ARRAY_OF_MAPS, 4, 4, 1, inner_map=spec), sys_)
        outer[0] = inner
        out = Map(MapSpec(MapType.ARRAY, 4, 8, len(ops), key=int, value=int), sys_)
        with Program.load(inner_ops_program(ops), sys_,
                          maps={"outer": outer, "results": out}) as prog:
            with sys_.on_cpu(1):
                assert prog.test_run(bytes(64)).retval == 2
        results.append((engine, [out[i] for i in range(len(ops))], sorted(inner.items())))
    for engine, *got in results[1:]:
        assert tuple(got) == results[0][1:], engine



@pytest.mark.skipif(native_missing() is not None, reason=str(native_missing()))
@pytest.mark.parametrize("own_map_in_segment", [True, False])
def test_a_segment_map_found_at_run_time_is_changed_without_python(own_map_in_segment,
                                                                    monkeypatch):
    """The native tier finds the segment's map a program found in an array of maps whether
    the program's own maps are the segment's (pybpf_shm_map_of asked first) or not (an
    HtabCore asked first, which it has not): its update, failed update and delete call no
    helper through Python, with the interpreter's R0s (an XDP program's 32 bits) and
    contents."""
    ops = [("update", 3, 7, BPF_ANY), ("update", 3, 8, BPF_NOEXIST), ("delete", 5)]
    insns = [mov64(R7, 0)]
    if own_map_in_segment:  # a lookup in the segment's array: a map of the program's own
        insns += [ld_map_fd(R1, "own"), stw(FP, -4, 0), mov64(R2, FP), add64(R2, -4),
                  call("map_lookup_elem")]
    for i, op in enumerate(ops):
        insns += [*found_map_op(i, *op), add64(R7, R0)]
    spec = ProgramSpec(ProgType.XDP, [*insns, mov64(R0, R7), exit_()], name="found_ops")
    calls, callback = [], native._Run.callback
    monkeypatch.setattr(native._Run, "callback", lambda run, *args: (
        calls.append(args[0]), callback(run, *args))[1])
    results = []
    for engine, sys_ in (("interp", EmulatedSystem(cpus=2, modeled_time=False)),
                         ("native", shared_system(cpus=2))):
        sys_.bpf_engine = engine
        inner_spec = MapSpec(MapType.LRU_HASH, 4, 8, 4, key=int, value=int)
        inner = Map(inner_spec, sys_)
        inner[5 + 1] = 1
        outer = Map(MapSpec(MapType.ARRAY_OF_MAPS, 4, 4, 1, inner_map=inner_spec), sys_)
        outer[0] = inner
        maps = {"outer": outer}
        if own_map_in_segment:
            maps["own"] = Map(MapSpec(MapType.ARRAY, 4, 8, 1, key=int, value=int), sys_)
        calls.clear()
        with Program.load(spec, sys_, maps=maps) as prog:
            with sys_.on_cpu(1):
                results.append((prog.test_run(bytes(64)).retval, sorted(inner.items())))
    assert native.OP_HELPER not in calls, calls
    assert results[0] == results[1]
    assert results[1] == ((-errno.EEXIST - errno.ENOENT) & (2**32 - 1), [(3, 7), (6, 1)])

def test_lru_and_lpm_pins_are_got_by_another_process_with_the_same_cpus():
    """An LRU map (BPF_F_NO_COMMON_LRU: max_entries rounded up to the CPUs, as
    htab_map_alloc does) and an LPM trie pinned in a named segment: another process's
    emulated system of 2 CPUs gets both (sizes, flags, contents) and inserts; one of 4 CPUs
    cannot take the LRU map, whose lists are 2 CPUs' (EINVAL, saying so)."""
    name = f"pybpf-test-{os.getpid()}-lru-pins"
    seg = shared.Segment.create(name, MIB)
    path = f"/sys/fs/bpf/pybpf-test-{os.getpid()}-lru"
    try:
        sys_ = EmulatedSystem(cpus=2, modeled_time=False, shared=seg)
        lru = sys_.map_create(MapType.LRU_HASH, 4, 8, 3, map_flags=BPF_F_NO_COMMON_LRU)
        assert sys_.map_get_info(lru).max_entries == 4
        sys_.map_update_elem(lru, struct.pack("<I", 1), struct.pack("<Q", 10), 0)
        sys_.obj_pin(lru, path)
        trie = sys_.map_create(MapType.LPM_TRIE, 8, 8, 4, map_flags=BPF_F_NO_PREALLOC)
        sys_.map_update_elem(trie, struct.pack("<I", 8) + bytes([10, 0, 0, 0]),
                             struct.pack("<Q", 8), 0)
        sys_.obj_pin(trie, path + "-trie")
        script = (
            "import struct, sys\n"
            "from pybpf import shared\n"
            "from pybpf.emulated.system import EmulatedSystem\n"
            "from pybpf.errors import BPFError\n"
            "s = EmulatedSystem(cpus=int(sys.argv[3]), modeled_time=False, "
            "shared=shared.Segment.attach(sys.argv[1]))\n"
            "try:\n"
            "    lru = s.obj_get(sys.argv[2])\n"
            "except BPFError as exc:\n"
            "    print('errno', exc.errno, 'lists for 2 CPUs' in str(exc))\n"
            "    sys.exit(0)\n"
            "info = s.map_get_info(lru)\n"
            "print(info.max_entries, info.map_flags)\n"
            "print(struct.unpack('<Q', s.map_lookup_elem(lru, struct.pack('<I', 1)))[0])\n"
            "with s.on_cpu(1):\n"
            "    s.map_update_elem(lru, struct.pack('<I', 2), struct.pack('<Q', 20), 0)\n"
            "trie = s.obj_get(sys.argv[2] + '-trie')\n"
            "key = struct.pack('<I', 32) + bytes([10, 1, 2, 3])\n"
            "print(struct.unpack('<Q', s.map_lookup_elem(trie, key))[0])\n"
            "s.map_update_elem(trie, struct.pack('<I', 16) + bytes([10, 1, 0, 0]), "
            "struct.pack('<Q', 16), 0)\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        runs = [subprocess.run([sys.executable, "-c", script, name, path, cpus],
                               capture_output=True, text=True, env=env, timeout=120)
                for cpus in ("2", "4")]
        assert [run.returncode for run in runs] == [0, 0], [run.stderr for run in runs]
        assert runs[0].stdout.splitlines() == [f"4 {BPF_F_NO_COMMON_LRU}", "10", "8"]
        assert runs[1].stdout.splitlines() == [f"errno {errno.EINVAL} True"]
        assert sys_.map_lookup_elem(lru, struct.pack("<I", 2)) == struct.pack("<Q", 20)
        key = struct.pack("<I", 32) + bytes([10, 1, 2, 3])
        assert sys_.map_lookup_elem(trie, key) == struct.pack("<Q", 16)
        sys_.map_from_fd(lru).check_invariants()
        sys_.map_from_fd(trie).check_invariants()
    finally:
        shared.unlink(name)


def test_bench_map_perf_scaling_puts_the_jit_beside():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-m", "pybpf", "bench", "map-perf-scaling",
                          "--rounds", "1", "--max-cnt", "50", "--procs", "2", "--tests", "1",
                          "--backend-kernel", "off", "--engine", "interp", "--jit-beside"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    header, row = run.stdout.splitlines()[1:3]
    assert header.split("  ")[-1].strip() == "interp / JIT" and "JIT, 1 process" in header
    assert row.startswith("0:hash_map_perf") and row.rstrip().endswith("%")


@pytest.mark.parametrize("data_size", [3, 4, 9])
def test_a_trie_key_parting_at_a_nodes_last_bit_does_not_match_it(data_size):
    """/1 0x80.. and /9 0x00.. part at bit 0, under an intermediate node: /8 0x00.. matches
    neither (ENOENT) and /72-ish 0x00.. matches /9, whichever way the prefix match compares
    (bytes, a u32, a u64), as in the reference."""
    def key(prefixlen: int, first: int) -> bytes:
        return struct.pack("<I", prefixlen) + bytes([first]) + bytes(data_size - 1)

    answers = []
    for sys_ in (shared_system(), EmulatedSystem(cpus=2, modeled_time=False)):
        fd = sys_.map_create(MapType.LPM_TRIE, 4 + data_size, 8, 8,
                             map_flags=BPF_F_NO_PREALLOC)
        sys_.map_update_elem(fd, key(1, 0x80), bytes(8), 0)
        sys_.map_update_elem(fd, key(9, 0x00), b"\x01" * 8, 0)
        answers.append([apply(sys_, fd, ("lookup", key(8, 0x00))),
                        apply(sys_, fd, ("lookup", key(8 * data_size, 0x00))),
                        walk(sys_, fd)])
    assert answers[0] == answers[1]
    assert answers[0][0] == ("errno", errno.ENOENT) and answers[0][1] == ("ok", b"\x01" * 8)
