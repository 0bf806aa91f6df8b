"""The timing model: clocks, costs, memory by NUMA distance and cache state, locks, grace
periods, deferred work, and the virtual-time scheduler that makes figures independent of how
the host interleaves the emulated CPUs' threads."""

import functools
import itertools
import random
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybpf.emulated.machine.machine import Machine
from pybpf.emulated.machine.timing import Timing, VirtualTimeScheduler
from pybpf.profiles import load_profile

PROFILE = load_profile("haswell-ep-2s")  # 20 CPUs: 0-9 on node 0, 10-19 on node 1
LOCAL_CPU, REMOTE_CPU = 0, 10


def timing(**kw) -> Timing:
    return Timing(PROFILE, **kw)


def test_charge_adds_the_profile_cost_and_counts_it():
    t = timing()
    t.charge(3, "htab_map_lookup_elem", 5)
    assert t.now(3) == pytest.approx(5 * PROFILE["ops.htab_map_lookup_elem"])
    assert t.now(2) == 0
    assert t.breakdown(3)["htab_map_lookup_elem"][0] == 5


def test_unknown_event_is_a_clear_error():
    with pytest.raises(ValueError, match="no cost 'htab_lookup'.*htab_map_lookup_elem"):
        timing().charge(0, "htab_lookup")


def test_first_access_goes_to_dram_then_hits_the_private_cache():
    t = timing()
    addr = t.alloc_region(4096, node=0)
    assert t.access(LOCAL_CPU, addr) == PROFILE["memory.dram_local"]
    assert t.access(LOCAL_CPU, addr + 8) == 0  # same line
    assert t.access(REMOTE_CPU, addr) == PROFILE["memory.dram_remote"]


def test_node_llc_serves_a_line_another_cpu_of_the_node_loaded():
    t = timing()
    addr = t.alloc_region(64, node=0)
    t.access(0, addr)
    assert t.access(1, addr) == PROFILE["memory.shared_hit"]


def test_a_write_makes_the_next_access_from_another_cpu_a_transfer():
    t = timing()
    addr = t.alloc_region(64, node=0)
    t.access(0, addr)
    t.access(1, addr, write=True)
    assert t.access(0, addr) == PROFILE["memory.transfer_local"]
    t.access(REMOTE_CPU, addr, write=True)
    assert t.access(1, addr) == PROFILE["memory.transfer_remote"]
    assert t.access(1, addr) == 0  # a read leaves a shared copy


def test_private_cache_capacity_is_the_profile_l2_scaled():
    t = timing(cache_scale=1 / 32)  # 256 KiB / 32 = 128 lines
    base = t.alloc_region(1 << 20, node=0)
    lines = [base + 64 * i for i in range(t.private_lines + 1)]
    for addr in lines:
        t.access(0, addr)
    assert t.private_lines == 128
    assert t.access(0, lines[-1]) == 0
    assert t.access(0, lines[0]) > 0  # evicted: least recently used


def test_a_scaled_cache_keeps_room_for_the_hot_lines():
    t = timing(cache_scale=1e-6)
    assert t.private_lines == t.shared_lines == 64


def test_contended_lock_waits_for_the_release_then_pays_the_transfer():
    t = timing()
    lock = t.new_lock(t.alloc_region(64, node=0))
    t.spin_lock(0, lock)
    t.charge(0, "htab_map_update_elem")
    t.spin_unlock(0, lock)
    (acquired, released, _), = lock.held
    t.wait_until(1, (acquired + released) / 2)
    t.spin_lock(1, lock)  # CPU 1 asks while CPU 0 holds it
    assert t.now(1) == pytest.approx(released + PROFILE["memory.transfer_local"]
                                     + PROFILE["cpu.spin_lock"])
    assert t.breakdown(1)["lock_wait"][0] == 1


def test_atomics_of_two_cpus_on_one_line_take_turns():
    t = timing()
    counter = t.alloc_region(64, node=0)
    t.atomic(0, counter)  # from DRAM: the line is CPU 0's until this RMW is done
    first = t.now(0)
    t.atomic(1, counter)  # asked at time 0, while CPU 0's RMW holds the line
    rmw = PROFILE["memory.transfer_local"] + PROFILE["cpu.atomic"]
    assert t.now(1) == pytest.approx(first + rmw)
    assert t.breakdown(1)["line_wait"] == (1, pytest.approx(first))
    t.atomic(2, t.alloc_region(64, node=0))  # another line: no wait
    assert "line_wait" not in t.breakdown(2)


def test_a_contended_counter_runs_at_the_lines_rate():
    """N CPUs hammering one line finish no sooner than N x K transfers back to back; the
    same work on N lines of their own costs each CPU its own RMWs only."""
    cpus, rounds = 8, 50
    t = timing()
    counter = t.alloc_region(64, node=0)
    for _ in range(rounds):
        for cpu in range(cpus):  # in virtual-time order, as the scheduler runs them
            t.atomic(cpu, counter)
    rmw = PROFILE["memory.transfer_local"] + PROFILE["cpu.atomic"]
    assert max(t.now(cpu) for cpu in range(cpus)) >= (cpus * rounds - 1) * rmw
    own = timing()
    lines = [own.alloc_region(64, node=0) for _ in range(cpus)]
    for _ in range(rounds):
        for cpu in range(cpus):
            own.atomic(cpu, lines[cpu])
    assert max(own.now(cpu) for cpu in range(cpus)) < rounds * rmw


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 400)), min_size=1, max_size=40))
def test_atomic_rmws_on_a_line_never_overlap(steps):
    """Whatever order and clocks the CPUs ask in, no two RMWs hold the line at once, and a
    CPU never starts its RMW before it asked."""
    t = timing()
    counter = t.alloc_region(64, node=0)
    asked_and_done = []
    for cpu, work in steps:
        t.wait_until(cpu, t.now(cpu) + work)
        asked = t.now(cpu)
        t.atomic(cpu, counter)
        asked_and_done.append((asked, t.now(cpu)))
    spans = sorted(t._line_rmws[counter >> t.line_shift])
    assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(spans))
    assert all(done > asked for asked, done in asked_and_done)


def test_grace_periods_run_one_after_another():
    t = timing()
    gp = PROFILE["rcu.grace_period"]
    assert t.rcu_gp_end(100.0) == 100.0 + gp
    assert t.rcu_gp_end(200.0) == 100.0 + 2 * gp  # queued during the first: waits for the next
    assert t.rcu_gp_end(50.0) == 100.0 + gp  # a later-starting one covers an earlier queue time


def test_deferred_work_runs_on_its_cpu_once_the_clock_reaches_it():
    t = timing()
    ran = []
    t.defer(0, 1000.0, lambda: ran.append("b"))
    t.defer(0, 500.0, lambda: ran.append("a"))
    t.sync(0)
    assert ran == [] and t.deferred(0) == 2
    t.wait_until(0, 600.0)
    t.sync(0)
    assert ran == ["a"]
    assert t.run_deferred(0, until=2000.0) == 1
    assert ran == ["a", "b"] and t.now(0) == 1000.0


# -- properties ----------------------------------------------------------------------------

ops = st.lists(st.tuples(st.integers(0, 200), st.booleans()), min_size=1, max_size=80)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_remote_memory_never_costs_less_than_local(accesses):
    """The same access sequence from CPU 0, to memory on its node and on the other one."""
    clocks = []
    for node in (0, 1):
        t = timing(cache_scale=1 / 512)  # a small cache, so lines get evicted
        base = t.alloc_region(1 << 16, node)
        for line, write in accesses:
            t.access(0, base + 64 * line, write)
        clocks.append(t.now(0))
    assert clocks[1] >= clocks[0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.booleans()), min_size=1, max_size=60),
       st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), max_size=60),
       st.integers(1, 19))
def test_contention_never_speeds_a_cpu_up(own, theirs, other):
    """CPU 0 warms its lines, then works; another CPU's locks and atomics on the same lines,
    interleaved at any points, never make CPU 0 finish earlier."""
    def run(with_other: bool) -> float:
        t = timing()
        base = t.alloc_region(1 << 16, 0)
        lock = t.new_lock(base + 64 * 41)
        for line in range(42):
            t.access(0, base + 64 * line, write=True)
        extra = iter(theirs if with_other else [])
        for line, write in own:
            step = next(extra, None)
            if step is not None:
                other_line, kind = step
                if kind == 0:
                    t.spin_lock(other, lock)
                    t.charge(other, "htab_map_update_elem")
                    t.spin_unlock(other, lock)
                else:
                    t.atomic(other, base + 64 * other_line)
            if line % 5 == 0:
                t.spin_lock(0, lock)
                t.spin_unlock(0, lock)
            else:
                t.access(0, base + 64 * line, write)
        return t.now(0)

    assert run(True) >= run(False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("charge"), st.integers(1, 5)),
                          st.tuples(st.just("wait"), st.floats(-1e4, 1e4)))))
def test_a_clock_never_goes_back(steps):
    t = timing()
    previous = 0.0
    for kind, x in steps:
        if kind == "charge":
            t.charge(0, "bpf_insn", x)
        else:
            t.wait_until(0, t.now(0) + x)
        assert t.now(0) >= previous
        previous = t.now(0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e8), min_size=1, max_size=30))
def test_a_grace_period_never_ends_before_its_length_has_passed(times):
    t = timing()
    for x in times:
        assert t.rcu_gp_end(x) >= x + PROFILE["rcu.grace_period"]


# -- determinism under host threads --------------------------------------------------------

CPUS = (0, 1, 10, 11)


def contended_workload(jitter: random.Random | None) -> tuple:
    """Four CPU threads (two per node) hammer one lock, one counter and a shared table under
    the virtual-time scheduler; with ``jitter`` each thread also sleeps or yields at random
    host moments. Returns everything that could differ."""
    t = timing(cache_scale=1 / 256)
    table = t.alloc_region(64 * 64, 0)
    counter = t.alloc_region(64, 1)
    lock = t.new_lock(t.alloc_region(64, 0))
    order: list[tuple[int, int]] = []
    sched = VirtualTimeScheduler(t, CPUS)
    errors = []

    def worker(cpu: int, seed: int) -> None:
        rng = random.Random(seed)
        try:
            with sched.running(cpu):
                for i in range(40):
                    t.sync(cpu)
                    if jitter is not None and jitter.random() < 0.3:
                        time.sleep(jitter.random() / 2000)
                    t.spin_lock(cpu, lock)
                    order.append((cpu, i))  # who got the lock, in order
                    t.access(cpu, table + 64 * rng.randrange(64), write=rng.random() < 0.5)
                    t.charge(cpu, "htab_map_update_elem")
                    t.spin_unlock(cpu, lock)
                    if jitter is not None and jitter.random() < 0.3:
                        time.sleep(0)
                    t.sync(cpu)
                    t.atomic(cpu, counter)
                    t.charge(cpu, "bpf_insn", rng.randrange(1, 200))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with sched:
        threads = [threading.Thread(target=worker, args=(cpu, cpu)) for cpu in CPUS]
        if jitter is not None:
            jitter.shuffle(threads)  # start them in a different host order too
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not errors, errors
    return (tuple(t.clock), tuple(order),
            tuple(tuple(sorted((e, c, round(ns, 6)) for e, (c, ns) in t.breakdown(cpu).items()))
                  for cpu in CPUS))


def run_workload(runner: str, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """The contended workload's bodies given to ``VirtualTimeScheduler.run``: as greenlets
    (``greenlet``), or as host threads when the greenlet package is missing (``threads``)."""
    if runner == "threads":
        monkeypatch.setitem(sys.modules, "greenlet", None)  # import greenlet fails
    t = timing(cache_scale=1 / 256)
    counter = t.alloc_region(64, 1)
    lock = t.new_lock(t.alloc_region(64, 0))
    order: list[tuple[int, int]] = []
    sched = VirtualTimeScheduler(t, CPUS)

    def body(cpu: int) -> None:
        rng = random.Random(cpu)
        for i in range(40):
            t.sync(cpu)
            t.spin_lock(cpu, lock)
            order.append((cpu, i))
            t.charge(cpu, "htab_map_update_elem")
            t.spin_unlock(cpu, lock)
            t.sync(cpu)
            t.atomic(cpu, counter)
            t.charge(cpu, "bpf_insn", rng.randrange(1, 200))

    with sched:
        sched.run({cpu: functools.partial(body, cpu) for cpu in CPUS})
    return tuple(t.clock), tuple(order), sched.handoffs


def test_run_on_greenlets_and_on_threads_gives_the_same_figures(monkeypatch):
    pytest.importorskip("greenlet")
    on_greenlets = run_workload("greenlet", monkeypatch)
    assert run_workload("threads", monkeypatch) == on_greenlets
    assert on_greenlets[2] > 40  # the CPUs did take turns


def expected_turns(costs: dict[int, list[int]], insn_ns: float) -> list[int]:
    """Who runs each operation under the scheduler's rule, worked out by hand: at each sync
    the holder keeps the baton unless a participant's clock is below its own, and the baton
    goes to the least clock, the lowest CPU of a tie; one that is done leaves."""
    clock = dict.fromkeys(costs, 0.0)
    left = {cpu: list(ops) for cpu, ops in costs.items()}
    turns = []
    holder = min(left, key=lambda c: (clock[c], c))
    while left:
        least = min(left, key=lambda c: (clock[c], c))
        if clock[holder] > clock[least]:
            holder = least
        turns.append(holder)
        clock[holder] += left[holder].pop(0) * insn_ns
        if not left[holder]:
            del left[holder]
            if left:
                holder = min(left, key=lambda c: (clock[c], c))
    return turns


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, 3), st.lists(st.integers(1, 4), min_size=1, max_size=12),
                       min_size=1))
def test_the_baton_goes_to_the_least_clock_and_the_lower_cpu_of_a_tie(costs):
    """Small integer costs make ties frequent, and participants that end at different times
    leave the others to share the baton."""
    pytest.importorskip("greenlet")
    t = timing()
    turns: list[int] = []

    def body(cpu: int) -> None:
        for n in costs[cpu]:
            t.sync(cpu)
            turns.append(cpu)
            t.charge(cpu, "bpf_insn", n)

    with VirtualTimeScheduler(t, costs) as sched:
        sched.run({cpu: functools.partial(body, cpu) for cpu in costs})
    assert turns == expected_turns(costs, PROFILE["cpu.bpf_insn"])


def test_greenlets_switch_each_tasks_thread_local_state():
    """A task's thread-local state (here a machine's current CPU and RCU read-side nesting)
    stays its own across the switches: a body that sets it finds it unchanged after every
    other body ran meanwhile."""
    pytest.importorskip("greenlet")
    machine = Machine(cpus=2, nodes=1, profile="sapphire-rapids-2s")
    t = machine.timing
    sched = VirtualTimeScheduler(t, (0, 1), task_locals=machine.task_locals())
    seen: list[tuple[int, int, bool]] = []

    def body(cpu: int) -> None:
        with machine.on_cpu(cpu):
            if cpu == 0:
                machine.rcu.read_lock()
            for _ in range(20):
                t.charge(cpu, "bpf_insn", 10 + cpu)
                t.sync(cpu)
                seen.append((cpu, machine.current.cpu, machine.rcu.in_read_section()))
            if cpu == 0:
                machine.rcu.read_unlock()

    machine.current.cpu = 1  # the caller's own state comes back after the run
    with sched:
        sched.run({0: functools.partial(body, 0), 1: functools.partial(body, 1)})
    assert machine.current.cpu == 1
    # A module's task-local state (initialised per thread) is the caller's again, not emptied.
    from pybpf.emulated.net import xdp
    assert xdp.cpu_map_flush_list() == [] and xdp.dev_flush_list() == []
    assert sched.handoffs > 10
    assert all(cpu == current and reading == (cpu == 0) for cpu, current, reading in seen)
    assert machine.rcu.readers == 0 and not machine.rcu.in_read_section()
    for cpu in (0, 1):
        assert 0 < sched.host_cpu_ns(cpu) < 10**10


def test_run_raises_what_a_body_raised_and_still_runs_the_others():
    t = timing()
    sched = VirtualTimeScheduler(t, (0, 1))
    ran = []

    def failing() -> None:
        t.charge(0, "bpf_insn", 5)
        t.sync(0)
        raise ValueError("body 0 failed")

    def fine() -> None:
        for _ in range(3):
            t.charge(1, "bpf_insn", 5)
            t.sync(1)
        ran.append(1)

    with sched, pytest.raises(ValueError, match="body 0 failed"):
        sched.run({0: failing, 1: fine})
    assert ran == [1]
    with pytest.raises(ValueError, match="a body for each participant"):
        VirtualTimeScheduler(t, (0, 1)).run({0: fine})


def test_figures_are_identical_whatever_the_host_interleaving():
    calm = contended_workload(None)
    assert contended_workload(None) == calm
    for seed in range(3):
        assert contended_workload(random.Random(seed)) == calm
    clocks, order, _ = calm
    assert len(order) == 4 * 40 and {cpu for cpu, _ in order} == set(CPUS)


def test_a_participant_that_never_runs_is_reported_not_waited_for_forever():
    t = timing()
    sched = VirtualTimeScheduler(t, (0, 1), timeout_s=0.2)
    with sched, pytest.raises(RuntimeError, match="CPU 0 waited.*held by CPU 1"):
        t.charge(0, "bpf_insn", 10)  # CPU 1 (clock 0) is behind and its thread never comes
        with sched.running(0):
            t.sync(0)


def test_running_needs_the_scheduler_attached_and_a_participant():
    t = timing()
    sched = VirtualTimeScheduler(t, (0,))
    with pytest.raises(RuntimeError, match="not attached"):
        with sched.running(0):
            pass
    with sched, pytest.raises(ValueError, match="CPU 5 is not a participant"):
        with sched.running(5):
            pass


def test_time_in_contexts_nests_and_excludes_the_task():
    """in_context counts a context's own time: a hardirq inside a softirq is the hardirq's,
    and what the task does outside both is in neither."""
    t = timing()
    t.charge(0, "bpf_insn", 10)  # the task
    with t.in_context(0, "softirq"):
        t.charge(0, "rcu_core")
        with t.in_context(0, "hardirq"):
            t.charge(0, "irq_work")
        t.charge(0, "rcu_callback")
    cost = t.cost
    assert t.context_ns[0] == pytest.approx(
        {"softirq": cost["rcu_core"] + cost["rcu_callback"], "hardirq": cost["irq_work"]})
    assert t.clock[0] - sum(t.context_ns[0].values()) == pytest.approx(10 * cost["bpf_insn"])
    assert t.context_ns[1] == {}


def unmodeled_turns(c_extension: bool, wait_after: int | None) -> tuple[list[int], list[int]]:
    """Two CPUs' tasks on greenlets of a machine without modeled time, each syncing five
    times; with ``wait_after``, CPU 0 waits 100 ns (its clock moves) after that many syncs.
    Returns who ran each turn and the CPUs whose sync reached the scheduler's ``sync``."""
    machine = Machine(cpus=2, nodes=1, modeled_time=False)
    t = machine.timing
    if not c_extension:
        t.c_extension = None  # the Python reference: every sync asks the scheduler
    asked: list[int] = []

    class CountedScheduler(VirtualTimeScheduler):
        __slots__ = ()

        def sync(self, cpu: int) -> None:
            asked.append(cpu)
            super().sync(cpu)

    sched = CountedScheduler(t, (0, 1))
    turns: list[int] = []

    def body(cpu: int) -> None:
        for i in range(5):
            if cpu == 0 and i == wait_after:
                t.wait_until(0, t.clock[0] + 100, "idle")
            t.sync(cpu)
            turns.append(cpu)

    with sched:
        sched.run({cpu: functools.partial(body, cpu) for cpu in (0, 1)})
    return turns, asked


@pytest.mark.parametrize("wait_after", [None, 2])
def test_without_modeled_time_a_sync_that_would_do_nothing_skips_the_scheduler(wait_after):
    """The clocks stand still without modeled time, so each task runs to its end and the C
    extension answers every sync without calling the scheduler's (each operation's cost
    then); a clock moved by a wait still hands the baton over, in the Python reference's
    order."""
    pytest.importorskip("greenlet")
    if Machine(cpus=1, nodes=1, modeled_time=False).timing.c_extension is None:
        pytest.skip("the C extension (pybpf._cache_model) is not built")
    turns, asked = unmodeled_turns(True, wait_after)
    reference_turns, reference_asked = unmodeled_turns(False, wait_after)
    assert turns == reference_turns
    assert sorted(reference_asked) == sorted(reference_turns)  # it asks at every sync
    if wait_after is None:
        assert turns == [0] * 5 + [1] * 5
        assert asked == []
    else:  # CPU 0, ahead after its wait, lets CPU 1 run to its end first
        assert turns == [0, 0, 1, 1, 1, 1, 1, 0, 0, 0]
        assert asked == [0]
