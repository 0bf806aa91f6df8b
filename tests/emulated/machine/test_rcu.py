"""Deterministic RCU: callbacks wait for the readers that could see the object."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybpf.emulated.machine.machine import Machine
from pybpf.emulated.machine.rcu import (
    BLIMIT,
    MAX_BLIMIT,
    MAX_SOFTIRQ_RESTART,
    QHIMARK,
    QOVLD,
    RCU_DIVISOR,
    Rcu,
    RcuHead,
    SegCbList,
    fqs_jiffies,
    jiffies_to_sched_qs,
)


def test_call_rcu_waits_for_a_reader_that_entered_before():
    rcu = Rcu()
    ran = []
    rcu.read_lock()
    rcu.call_rcu(lambda: ran.append("cb"))
    assert rcu.poll() == 0 and ran == [] and rcu.pending == 1
    rcu.read_unlock()
    assert rcu.poll() == 1 and ran == ["cb"] and rcu.pending == 0


def test_a_reader_entering_after_call_rcu_does_not_delay_it():
    rcu = Rcu()
    ran = []
    rcu.call_rcu(lambda: ran.append("cb"))
    with rcu.read_section():
        assert rcu.poll() == 1
    assert ran == ["cb"]


def test_read_sections_nest_and_only_the_outermost_counts():
    rcu = Rcu()
    rcu.read_lock()
    rcu.read_lock()
    assert rcu.readers == 1
    rcu.read_unlock()
    assert rcu.in_read_section()
    rcu.read_unlock()
    assert rcu.readers == 0 and not rcu.in_read_section()
    with pytest.raises(RuntimeError):
        rcu.read_unlock()


def test_a_reader_in_another_thread_holds_the_grace_period():
    rcu = Rcu()
    entered, release = threading.Event(), threading.Event()
    errors = []

    def reader():
        try:
            with rcu.read_section():
                entered.set()
                release.wait()
        except BaseException as exc:  # reported below instead of leaving the test waiting
            errors.append(exc)
            entered.set()

    thread = threading.Thread(target=reader)
    thread.start()
    entered.wait()
    assert errors == []
    ran = []
    rcu.call_rcu(lambda: ran.append(1))
    assert rcu.poll() == 0
    release.set()
    thread.join()
    assert rcu.poll() == 1 and ran == [1]


def test_synchronize_rcu_inside_a_read_section_raises():
    rcu = Rcu()
    with rcu.read_section(), pytest.raises(RuntimeError, match="deadlock"):
        rcu.synchronize_rcu()


def test_barrier_runs_everything_and_counts():
    rcu = Rcu()
    ran = []
    for i in range(5):
        rcu.call_rcu(lambda i=i: ran.append(i))
    rcu.barrier()
    assert ran == [0, 1, 2, 3, 4]
    stats = rcu.stats()
    assert stats["callbacks_queued"] == 5 and stats["callbacks_run"] == 5
    assert stats["max_pending"] == 5 and stats["callbacks_pending"] == 0


def test_more_than_qhimark_callbacks_force_a_grace_period():
    rcu = Rcu(qhimark=3)
    ran = []
    for i in range(4):
        rcu.call_rcu(lambda i=i: ran.append(i))
    assert ran == [0, 1, 2, 3]


# -- RCU in modeled time: kernel/rcu/tree.c's machinery ----------------------------------------

MODELED = "sapphire-rapids-2s"  # CONFIG_HZ=1000: a 1 ms tick; a force-quiescent-state scan
MS = 1e6                        # every 3 ticks (fqs_jiffies)


def modeled(cpus: int = 1) -> Machine:
    return Machine(cpus=cpus, nodes=1, profile=MODELED)


def syscall_at(machine: Machine, cpu: int, t: float) -> None:
    """The task on ``cpu`` enters a syscall at modeled time ``t``."""
    machine.timing.wait_until(cpu, t)
    with machine.on_cpu(cpu):
        machine.bpf_syscall()


def noop() -> None:
    """A callback with nothing to free."""


def test_fqs_jiffies_follow_the_kernel():
    assert fqs_jiffies(1000, 112) == 3 and fqs_jiffies(250, 2) == 1
    assert fqs_jiffies(1000, 512) == 5  # + nr_cpu_ids / RCU_JIFFIES_FQS_DIV


def test_segcblist_makes_callbacks_ready_only_past_their_grace_period():
    cbs = SegCbList()
    heads = [RcuHead(i, noop, 0, 0) for i in range(4)]
    cbs.enqueue(heads[0])
    cbs.accelerate(1)
    cbs.enqueue(heads[1])
    cbs.accelerate(2)
    cbs.enqueue(heads[2])
    cbs.accelerate(2)  # joins the segment already waiting for grace period 2
    cbs.enqueue(heads[3])  # no grace period assigned yet
    assert len(cbs) == 4 and not cbs.done
    cbs.advance(1)
    assert list(cbs.done) == heads[:1]
    cbs.advance(2)
    assert list(cbs.done) == heads[:3] and list(cbs.next) == heads[3:]
    taken = cbs.take(2, oldest_reader=None)
    assert taken == heads[:2]
    cbs.put_back(taken[1:])
    assert list(cbs.done) == heads[1:3] and not heads[1].done


def test_a_reader_stops_a_batch_at_the_first_callback_it_holds():
    cbs = SegCbList()
    for head in (RcuHead(epoch, noop, 0, 0) for epoch in (3, 5, 7)):
        cbs.enqueue(head)
    cbs.accelerate(1)
    cbs.advance(1)
    assert [h.epoch for h in cbs.take(10, oldest_reader=5)] == [3]


def flood(count: int) -> Machine:
    """``count`` callbacks queued on CPU 0 of an otherwise idle machine, then run."""
    machine = modeled()
    syscall_at(machine, 0, 0.0)
    for _ in range(count):
        machine.rcu.call_rcu(noop)
    assert machine.step() == count
    return machine


def rounds_needed(ready: int) -> int:
    """rcu_do_batch rounds for ``ready`` callbacks at blimit 10: each takes
    max(blimit, ready >> rcu_divisor)."""
    rounds = 0
    while ready:
        ready -= min(ready, max(BLIMIT, ready >> RCU_DIVISOR))
        rounds += 1
    return rounds


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6000))
def test_a_batch_takes_blimit_or_ready_shifted_by_the_divisor(count):
    machine = flood(count)
    rdp = machine.rcu.cpus[0]
    assert rdp.max_batch == min(count, max(BLIMIT, count >> RCU_DIVISOR))
    stats = machine.rcu.stats()
    assert stats["softirq_rounds"] == rounds_needed(count)
    # After MAX_SOFTIRQ_RESTART rounds __do_softirq leaves the rest to ksoftirqd.
    assert stats["ksoftirqd_runs"] == (rounds_needed(count) > MAX_SOFTIRQ_RESTART)
    assert stats["blimit_raised"] == 0 and rdp.blimit == BLIMIT


def test_blimit_rises_past_qhimark_while_a_grace_period_runs_and_falls_back_at_qlowmark():
    machine = modeled()
    rcu = machine.rcu
    rdp = rcu.cpus[0]
    syscall_at(machine, 0, 0.0)
    rcu.call_rcu(noop)
    syscall_at(machine, 0, 1.05 * MS)  # the tick at 1 ms started a grace period
    assert rcu.gp_in_progress
    for _ in range(QHIMARK - 1):
        rcu.call_rcu(noop)
    assert len(rdp.cblist) == QHIMARK and rdp.blimit == BLIMIT  # not over qhimark yet
    rcu.call_rcu(noop)
    assert rdp.blimit == MAX_BLIMIT and rcu.blimit_raised == 1
    assert rdp.qlen_last_fqs_check == QHIMARK + 1
    assert machine.step() == QHIMARK + 1
    # The flood ran in one batch of MAX_BLIMIT (under rcu_resched_ns); once the queue was
    # at most qlowmark the default came back.
    assert rdp.max_batch == MAX_BLIMIT and rdp.blimit == BLIMIT
    assert rdp.qlen_last_fqs_check == 0


def test_a_flood_with_no_grace_period_running_starts_one_instead():
    machine = modeled()
    rcu = machine.rcu
    syscall_at(machine, 0, 0.0)
    for _ in range(QHIMARK + 1):
        rcu.call_rcu(noop)
    assert rcu.gp_in_progress and rcu.cpus[0].blimit == BLIMIT


def test_a_grace_period_waits_for_every_busy_cpu():
    """CPU 1 made a syscall just before the grace period began, so it owes a quiescent
    state. Its syscalls are none (no context tracking): the grace period ends when a
    force-quiescent-state scan finds it idle, or, while it stays busy, once the grace period
    is older than jiffies_to_sched_qs and a tick made its task schedule. CPU 0 runs the
    grace-period kthread, which notes its quiescent state at the start."""

    def grace_period_end(cpu1_syscalls: list[float]) -> float:
        machine = modeled(cpus=2)
        events = [(t, 0) for t in (0.0, 0.5 * MS, *(k * 0.1 * MS for k in range(10, 60)))]
        events += [(t, 1) for t in cpu1_syscalls]
        for t, cpu in sorted(events):
            syscall_at(machine, cpu, t)
            if t == 0.5 * MS:
                with machine.on_cpu(0):
                    machine.rcu.call_rcu(noop)
        machine.step()
        (start, end), *_ = machine.rcu.gps
        assert start == 1 * MS  # CPU 0's tick
        return end

    assert grace_period_end([]) == 2 * MS  # CPU 0 reports at its next tick
    assert grace_period_end([0.95 * MS]) == 4 * MS  # held until the scan at 1 + 3 ticks
    assert grace_period_end([0.95 * MS, 1.5 * MS, 2.01 * MS]) == 4 * MS  # idle by then
    # Busy in a syscall loop: the first scan past jiffies_to_sched_qs (100 ticks at HZ=1000)
    # is at 1 + 3 x 34 ms; CPU 1's next tick asks its task to schedule, the syscall after
    # it passes the quiescent state, the tick after that reports it.
    assert jiffies_to_sched_qs(1000, 2) == 100
    loop = [0.95 * MS + k * 0.1 * MS for k in range(1200)]
    assert grace_period_end(loop) == 105 * MS


def test_callback_overload_cuts_a_grace_period_short():
    """A CPU with QOVLD callbacks queued overloads RCU: the next scans ask every busy holdout
    for a quiescent state at once, so the grace period does not wait for
    jiffies_to_sched_qs."""
    machine = modeled(cpus=2)
    with machine.on_cpu(0):
        machine.rcu.call_rcu(noop)  # a grace period is wanted at CPU 0's first tick
    for k in range(400):  # both CPUs in a syscall loop for 40 ms, CPU 0 flooding call_rcu
        t = k * 0.1 * MS
        for cpu in (0, 1):
            syscall_at(machine, cpu, t)
        with machine.on_cpu(0):
            for _ in range(QOVLD // 100 + 1):
                machine.rcu.call_rcu(noop)
    rcu = machine.rcu
    first_start, first_end = rcu.gps[0]
    # The overload (10 ms in) is seen by the scans that follow; CPU 1 schedules within ticks.
    assert first_end - first_start < 20 * MS
    assert rcu.urgent_qs_raised > 0 and rcu.resched_qs > 0
    machine.step()
    assert rcu.pending == 0


def test_a_reader_from_before_the_grace_period_holds_it_and_its_callbacks():
    machine = modeled()
    rcu = machine.rcu
    ran = []
    syscall_at(machine, 0, 0.0)
    rcu.read_lock()
    rcu.call_rcu(lambda: ran.append(machine.timing.clock[0]))
    for k in range(1, 80):
        syscall_at(machine, 0, k * 0.1 * MS)
    assert rcu.gp_in_progress and rcu.stats()["gp_completed"] == 0 and ran == []
    rcu.read_unlock()
    released = machine.timing.clock[0]
    machine.step()
    (start, end), = rcu.gps
    assert ran and end >= released and ran[0] > end


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 400), st.integers(0, 3)),
                min_size=1, max_size=60))
def test_callbacks_run_on_their_cpu_only_after_a_whole_grace_period(steps):
    """Two CPUs entering syscalls at random times, queueing callbacks in them: every
    callback runs on the CPU that queued it, after a grace period that began after it was
    queued has ended."""
    machine = modeled(cpus=2)
    timing = machine.timing
    queued, ran = {}, {}
    for n, (cpu, gap_us, callbacks) in enumerate(steps):
        syscall_at(machine, cpu, timing.clock[cpu] + gap_us * 1000)
        with machine.on_cpu(cpu):
            for i in range(callbacks):
                key = (n, i)
                queued[key] = (cpu, timing.clock[cpu])

                def callback(key=key):
                    ran[key] = (machine.current_cpu(), timing.clock[machine.current_cpu()])
                machine.rcu.call_rcu(callback)
    machine.step()
    assert ran.keys() == queued.keys()
    gps = machine.rcu.gps
    for key, (cpu, at) in queued.items():
        run_cpu, run_at = ran[key]
        assert run_cpu == cpu
        assert any(start >= at and end <= run_at for start, end in gps), (key, at, run_at)


def rate_run(callbacks_per_syscall: int, machine: Machine | None = None) -> Machine:
    """CPU 0 enters a syscall every 5 us for 10 ms, each freeing 64-byte objects through
    call_rcu."""
    machine = machine or modeled()
    for k in range(2000):
        syscall_at(machine, 0, k * 5000.0)
        for _ in range(callbacks_per_syscall):
            machine.rcu.call_rcu(noop, 64)
    return machine


def test_memory_held_by_pending_callbacks_grows_with_the_call_rcu_rate():
    slow, fast = rate_run(1), rate_run(4)
    held = [m.rcu.max_held_bytes for m in (slow, fast)]
    assert held[0] > 0 and held[1] > 3 * held[0]
    # Over time: the samples at each tick show the bytes held, never more than the maximum.
    samples = fast.rcu.samples
    assert samples and max(b for *_, b in samples) <= held[1]
    assert [t for t, *_ in samples] == sorted(t for t, *_ in samples)
    fast.step()
    assert fast.rcu.held_bytes == 0 and fast.rcu.pending == 0


def test_modeled_rcu_gives_the_same_figures_for_the_same_inputs():
    runs = [rate_run(3) for _ in range(2)]
    for m in runs:
        m.step()
    a, b = runs
    assert a.rcu.stats() == b.rcu.stats()
    assert a.rcu.gps == b.rcu.gps and a.rcu.samples == b.rcu.samples
    assert a.timing.clock == b.timing.clock
    assert a.timing.breakdown(0) == b.timing.breakdown(0)
