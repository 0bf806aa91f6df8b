"""The simulation of N processes' contention on a shared segment's locks (bench/
shm_contention.py), the lock holds it replays (pybpf.shared.lock_trace, map-perf's
Config.lock_trace) and the line move it charges (pybpf.shared.handoff_ns)."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybpf import shared
from pybpf.uapi import MapType

simpy = pytest.importorskip("simpy", reason="the simulation needs SimPy (pip install simpy)")
from pybpf.bench import shm_contention as sc  # noqa: E402 - after SimPy's check

needs_segments = pytest.mark.skipif(not shared.available(),
                                    reason="pybpf._shm_maps is not built (no C compiler)")


def periodic(lock: int, every: int, hold: int, times: int, start: int = 0) -> list:
    """Holds of ``lock``: ``times`` of them, ``hold`` ns each, one every ``every`` ns."""
    return [(lock, start + i * every, start + i * every + hold) for i in range(times)]


def test_a_timeline_is_the_holds_in_order_less_the_clock_reads():
    holds = [(0xA, 100, 400), (0xB, 200, 300), (0xC, 500, 600), (0xD, 700, 0)]
    tl = sc.timeline(holds, read_ns=10)
    assert tl.steps == ((0, True, 0xA), (90, True, 0xB), (90, False, 0xB),
                        (90, False, 0xA), (90, True, 0xC), (90, False, 0xC))
    # where no lock is held: the start, and after A's let-go (C's ends the timeline)
    assert tl.free_at == (0, 4)
    assert sc.timeline([]).steps == ()


def test_locks_more_than_one_process_took_are_shared():
    first = sc.timeline([(1, 0, 5), (2, 10, 15)])
    second = sc.timeline([(2, 0, 5), (3, 10, 15)])
    assert sc.shared_locks([first, second]) == {2}
    assert sc.shared_locks([first]) == set()


def test_one_process_replays_at_its_own_speed():
    tl = sc.timeline(periodic(1, 1000, 400, 50))
    got = sc.simulate([tl], 1, handoff_ns=50)
    assert got.speedup == pytest.approx(1.0)
    assert (got.waits, got.moves) == (0, 0)


def test_processes_on_locks_of_their_own_scale_with_their_count():
    """Each recorded process took only its own lock (its CPU's lists): N processes never
    wait, and a lock's line never moves."""
    tls = [sc.timeline(periodic(1, 1000, 900, 40)), sc.timeline(periodic(2, 1000, 900, 40))]
    for n in (2, 5, 16):
        got = sc.simulate(tls, n, handoff_ns=100)
        assert got.speedup == pytest.approx(n)
        assert (got.waits, got.moves) == (0, 0)


def test_one_lock_for_all_caps_the_speedup_at_its_share_of_the_time():
    """Both recorded processes hold lock 7 a quarter of their time: however many
    processes, together they hold it at most all the time, so N / 1 stays at most 4 (and
    the line moves and waits grow with N)."""
    tls = [sc.timeline(periodic(7, 1000, 250, 200)),
           sc.timeline(periodic(7, 1000, 250, 200, start=500))]
    got = {n: sc.simulate(tls, n, handoff_ns=0) for n in (2, 4, 8, 16)}
    assert got[2].speedup == pytest.approx(2, rel=0.02)
    for n in (8, 16):
        assert got[n].speedup <= 4 * 1.02
    assert got[16].speedup == pytest.approx(4, rel=0.05)
    assert got[16].waits > got[2].waits
    # a line's move costs the lock's next holder: fewer processes get through
    assert sc.simulate(tls, 4, handoff_ns=200).speedup < got[4].speedup
    assert sc.simulate(tls, 4, handoff_ns=200).moves > 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 500),
                                   st.integers(1, 500)), min_size=1, max_size=20),
                min_size=1, max_size=3),
       st.integers(1, 6), st.floats(0, 200))
def test_n_processes_go_at_most_n_times_as_fast_as_one(recorded, n, handoff):
    """Whatever the holds (one lock at a time per process, with gaps), N / 1 is above 0 and
    at most N (waiting for another only slows a process), and one process gives 1."""
    timelines = []
    for holds in recorded:
        at, made = 0, []
        for lock, gap, hold in holds:
            made.append((lock, at + gap, at + gap + hold))
            at += gap + hold
        timelines.append(sc.timeline(made))
    got = sc.simulate(timelines, n, handoff)
    assert 0 < got.speedup <= n + 1e-9
    assert sc.simulate(timelines, 1, handoff).speedup == pytest.approx(1.0)


@needs_segments
def test_lock_trace_records_the_holds_of_a_segments_lru_map():
    """An LRU map's updates in a segment take its locks: recorded with their ends after
    their starts, oldest first; a trace that keeps 2 keeps the last 2 and counts the older
    ones; 0 turns it off."""
    from pybpf.emulated.system import EmulatedSystem

    sys_ = EmulatedSystem(cpus=1, modeled_time=False,
                          shared=shared.Segment.create(None, 1 << 20))
    fd = sys_.map_create(MapType.LRU_HASH, 4, 8, 16)
    shared.lock_trace(10_000)
    for key in range(40):
        sys_.map_update_elem(fd, struct.pack("<I", key), bytes(8), 0)
    holds, lost, read_ns = shared.lock_trace(2)
    assert len(holds) >= 40 and lost == 0 and read_ns > 0
    assert all(0 < taken <= released for _, taken, released in holds)
    assert [taken for _, taken, _ in holds] == sorted(taken for _, taken, _ in holds)
    for key in (99, 98, 97):  # each update takes a bucket's lock and its CPU's lists'
        sys_.map_update_elem(fd, struct.pack("<I", key), bytes(8), 0)
    holds, lost, _ = shared.lock_trace(0)
    assert len(holds) == 2 and lost >= 4 and holds[0][1] < holds[1][1]
    sys_.map_update_elem(fd, struct.pack("<I", 96), bytes(8), 0)
    assert shared.lock_trace(0)[:2] == ([], 0)
    with pytest.raises(ValueError, match="capacity"):
        shared.lock_trace(-1)


@needs_segments
def test_a_trace_records_the_thread_that_began_it_and_only_it_ends_it():
    """Another thread's holds are not recorded (it would race on the ring), and it cannot
    end or begin a trace while this one records (RuntimeError, saying so)."""
    import threading

    from pybpf.emulated.system import EmulatedSystem

    sys_ = EmulatedSystem(cpus=1, modeled_time=False,
                          shared=shared.Segment.create(None, 1 << 20))
    fd = sys_.map_create(MapType.HASH, 4, 8, 16)
    shared.lock_trace(100)
    errors = []

    def other() -> None:
        sys_.map_update_elem(fd, struct.pack("<I", 1), bytes(8), 0)
        try:
            shared.lock_trace(0)
        except RuntimeError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert shared.lock_trace(0)[:2] == ([], 0)
    assert errors and "another thread" in errors[0]
    sys_.map_update_elem(fd, struct.pack("<I", 2), bytes(8), 0)  # no trace: nothing kept


@needs_segments
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 host CPUs")
def test_a_line_moves_between_two_host_cpus_in_a_measured_time():
    cpus = sorted(os.sched_getaffinity(0))
    assert 0 < shared.handoff_ns(cpus[0], cpus[1], rounds=2000) < 100_000
    assert os.sched_getaffinity(0) == set(cpus)  # given back
    with pytest.raises(ValueError, match="two different"):
        shared.handoff_ns(cpus[0], cpus[0])
    with pytest.raises(ValueError, match="may run on"):
        shared.handoff_ns(cpus[0], max(cpus) + 1)


@needs_segments
def test_map_perf_records_each_processs_holds_of_each_test():
    from pybpf.bench.map_perf import Config, Test, run

    cfg = Config(test_flags=Test.LRU_HASH_PREALLOC.bit | Test.HASH_LOOKUP.bit, num_procs=2,
                 max_cnt=300, backend="emulated", json=True, progress=False, cpus=2,
                 modeled_time=False, processes=True, engine="jit", lock_trace=5000)
    traces = run(cfg).lock_traces
    lru = traces[Test.LRU_HASH_PREALLOC.name]
    assert len(lru) == 2 and all(t.events == 300 and len(t.holds) >= 300 for t in lru)
    # the processes share the map's buckets and common lists: some locks both took
    assert sc.shared_locks([sc.timeline(t.holds) for t in lru])
    # lookups take no lock
    assert all(t.holds == [] for t in traces[Test.HASH_LOOKUP.name])


@needs_segments
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 host CPUs")
def test_bench_map_perf_scaling_simulates_more_processes():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-m", "pybpf", "bench", "map-perf-scaling",
                          "--rounds", "1", "--max-cnt", "200", "--procs", "2", "--tests", "48",
                          "--backend-kernel", "off", "--engine", "jit", "--simulate", "4,8",
                          "--window", "500"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("simulated:"))
    assert "a cache line's move between host CPUs" in lines[at]
    header, *rows = lines[at + 1:]
    assert header.split()[:7] == ["test", "2", "/", "1", "measured", "2", "/"]
    assert [row.split()[0] for row in rows] == ["4:lru_hash_map_perf",
                                                "5:nocommon_lru_hash_map_perf"]
    for row in rows:
        simulated = [float(cell.rstrip("x")) for cell in row.split() if cell.endswith("x")]
        assert len(simulated) == 4  # the measured 2 / 1, then 2, 4 and 8 simulated
        assert 0 < simulated[1] <= 2 and 0 < simulated[2] <= 4 and 0 < simulated[3] <= 8
        # each simulated cell: the rounds' median [range] (waits / moves)
        assert len(re.findall(r"\d+\.\d\dx \[\d+\.\d\d-\d+\.\d\d\] \(\d+ / \d+\)",
                              row)) == 3


def test_simulate_takes_process_counts():
    from pybpf.bench.map_perf_scaling import counts_arg

    assert counts_arg("16,4,8,4") == [4, 8, 16]
    for bad in ("", "1", "4,x"):
        with pytest.raises(Exception, match="--simulate"):
            counts_arg(bad)
