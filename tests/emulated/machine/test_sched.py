"""The per-CPU scheduler in virtual time (emulated/machine/sched.py): softirq priority and
__do_softirq's budget, fair sharing, wake-up preemption and costs, where queued work runs,
determinism; and seed 001's shape when the sockmap proxy's work contends on it."""

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybpf.emulated.machine.sched import (
    CPU_STATES,
    MAX_SOFTIRQ_RESTART,
    MAX_SOFTIRQ_TIME_NS,
    SLEEP,
    Run,
    Scheduler,
    Work,
    tunable_scale,
)
from pybpf.profiles import load_profile

SWITCH, WAKEUP = 300.0, 1000.0


def scheduler(cpus: int = 4) -> Scheduler:
    return Scheduler(cpus, context_switch_ns=SWITCH, wakeup_latency_ns=WAKEUP)


def busy(ns: float):
    while True:
        yield Run(ns)


def test_a_softirq_raised_from_another_cpu_preempts_the_running_task_at_once():
    s, seen = scheduler(), []

    def handler(cpu):
        seen.append((cpu, s.now))
        yield Run(50_000)

    task = s.spawn("task", 0, iter([Run(1_000_000)]))
    s.at(100_000, s.raise_softirq, 0, handler)
    s.run()
    assert seen == [(0, 100_000)]  # not after the task's Run: it was interrupted
    stats = s.cpu_stats(0)
    assert task.state == "done" and task.exec_ns == pytest.approx(1_000_000)
    assert stats.time["softirq"] == pytest.approx(50_000)
    assert stats.softirq_entries == 1
    # the task's work was delayed by the softirq's (after the switch that started it)
    assert s.now == pytest.approx(SWITCH + 1_000_000 + 50_000 + SWITCH)


def test_a_softirq_the_task_raises_runs_before_it_continues():
    s, order = scheduler(), []

    def handler(cpu):
        order.append(("softirq", s.now))
        yield Run(20)

    def task():
        yield Run(10)
        s.raise_softirq(0, handler)  # loopback's netif_rx under rcu_read_lock_bh
        order.append(("raised", s.now))
        yield Run(10)
        order.append(("task", s.now))

    s.spawn("t", 0, task())
    s.run()
    assert order == [("raised", SWITCH + 10), ("softirq", SWITCH + 10),
                     ("task", SWITCH + 40)]


def test_a_hard_interrupt_preempts_a_softirq_and_what_it_raises_runs_in_that_softirq():
    s, log = scheduler(), []

    def tagged(name, ns, then=None):
        def handler(cpu):
            log.append((name, s.now))
            yield Run(ns)
            if then is not None:
                then(cpu)
        return handler

    net_rx = tagged("softirq", 100_000)
    timer = tagged("raised by the irq", 5_000)
    irq = tagged("hardirq", 10_000, then=lambda cpu: s.raise_softirq(cpu, timer))
    task = s.spawn("task", 0, iter([Run(1_000_000)]))
    s.at(100_000, s.raise_softirq, 0, net_rx)
    s.at(150_000, s.raise_irq, 0, irq)
    s.run()
    # the irq interrupts the softirq at once; what it raised waits for __do_softirq's next
    # round, after the interrupted handler
    assert log == [("softirq", 100_000), ("hardirq", 150_000),
                   ("raised by the irq", 210_000)]
    stats = s.cpu_stats(0)
    assert (stats.irqs, stats.softirq_entries) == (1, 1)
    assert stats.time["hardirq"] == pytest.approx(10_000)
    assert stats.time["softirq"] == pytest.approx(105_000)
    assert task.exec_ns == pytest.approx(1_000_000)
    assert s.now == pytest.approx(SWITCH + 1_000_000 + 115_000 + SWITCH)


def test_a_softirq_raised_by_a_hard_interrupt_runs_at_its_exit_before_the_task():
    s, log = scheduler(), []

    def softirq(cpu):
        log.append(("softirq", s.now))
        yield Run(1_000)

    def irq(cpu):
        log.append(("irq", s.now))
        yield Run(500)
        s.raise_softirq(cpu, softirq)

    s.spawn("task", 1, iter([Run(100_000)]))
    s.at(10_000, s.raise_irq, 1, irq)
    s.run()
    assert log == [("irq", 10_000), ("softirq", 10_500)]
    assert s.now == pytest.approx(SWITCH + 100_000 + 1_500 + SWITCH)


def test_work_queued_unbound_runs_on_the_queuing_cpu_and_queue_work_on_on_the_chosen_one():
    s, ran = scheduler(), []
    unbound = Work("unbound", lambda cpu: record(cpu, "unbound"))
    bound = Work("bound", lambda cpu: record(cpu, "bound"))

    def record(cpu, name):
        ran.append((name, cpu))
        yield Run(1000)

    def softirq(cpu):
        yield Run(100)
        assert s.queue_work(unbound)  # WORK_CPU_UNBOUND: this CPU
        assert not s.queue_work(unbound)  # pending: not queued twice
        assert s.queue_work_on(3, bound)

    s.at(0, s.raise_softirq, 2, softirq)
    s.run()
    assert sorted(ran) == [("bound", 3), ("unbound", 2)]
    assert s.cpu_stats(2).time["kworker"] == pytest.approx(1000)
    assert s.cpu_stats(3).time["kworker"] == pytest.approx(1000)
    assert s.cpu_stats(0).time["kworker"] == 0
    with pytest.raises(RuntimeError, match="running context"):
        s.queue_work(unbound)  # from outside any context: no local CPU


def test_a_delayed_work_stays_pending_until_it_is_queued():
    s, ran = scheduler(), []

    def fn(cpu):
        ran.append(s.now)
        yield Run(10)

    work = Work("w", fn)
    assert s.queue_delayed_work_on(1, work, 4_000_000)
    s.at(1_000, lambda: ran.append(("again", s.queue_work_on(1, work))))
    s.run()
    assert ran[0] == ("again", False)  # schedule_delayed_work(.., 0) cannot bring it forward
    assert ran[1] >= 4_000_000


@pytest.mark.parametrize(("run_ns", "rounds"), [(300_000, 7), (10_000, MAX_SOFTIRQ_RESTART)])
def test_ksoftirqd_takes_over_after_the_budget_and_shares_the_cpu(run_ns, rounds):
    """A softirq that keeps raising itself: inline for 2 ms or 10 rounds, whichever comes
    first, then ksoftirqd, a fair task beside the user task."""
    s = scheduler()

    def again(cpu):
        yield Run(run_ns)
        s.raise_softirq(cpu, again)

    user = s.spawn("user", 0, busy(10_000))
    s.at(SWITCH, s.raise_softirq, 0, again)
    s.run(until=200e6)
    stats = s.cpu_stats(0)
    assert stats.softirq_entries == 1 and stats.ksoftirqd_wakeups == 1
    inline = stats.time["softirq"]
    assert inline == pytest.approx(rounds * run_ns)
    assert rounds == MAX_SOFTIRQ_RESTART or inline >= MAX_SOFTIRQ_TIME_NS
    ksoftirqd = next(t for t in s.tasks(0) if t.kind == "ksoftirqd")
    assert stats.time["ksoftirqd"] == pytest.approx(ksoftirqd.exec_ns)
    # after the inline budget, the user task and ksoftirqd split the CPU evenly
    slice_ns = s.sched_latency  # two tasks: half a latency each
    assert abs(user.exec_ns - ksoftirqd.exec_ns) <= slice_ns + run_ns + inline
    assert user.exec_ns > 0.4 * 200e6


def test_two_tasks_share_a_cpu_fairly():
    s = scheduler()
    a, b = s.spawn("a", 1, busy(100_000_000)), s.spawn("b", 1, busy(100_000_000))
    s.run(until=1e9)
    stats = s.cpu_stats(1)
    slice_ns = max(s.sched_latency / 2, s.min_granularity)
    assert abs(a.exec_ns - b.exec_ns) <= slice_ns
    assert a.exec_ns + b.exec_ns + stats.time["switch"] == pytest.approx(1e9)
    assert stats.preemptions >= 1e9 / slice_ns - 2
    # each waited while the other ran: the CPU's waiting time is the tasks' wait
    assert stats.waiting == pytest.approx(1e9)
    assert a.wait_ns + b.wait_ns <= 1e9


def test_the_tunables_scale_with_the_cpus_as_the_kernel_scales_them():
    assert [tunable_scale(n) for n in (1, 2, 4, 8, 112)] == [1, 2, 3, 4, 4]
    s = Scheduler(112, context_switch_ns=0, wakeup_latency_ns=0)
    assert (s.sched_latency, s.min_granularity, s.wakeup_granularity) == (24e6, 3e6, 4e6)


def test_a_woken_sleeper_preempts_the_running_task_and_a_remote_wakeup_pays_the_idle_exit():
    s, log = scheduler(), []

    def sleeper(name):
        while True:
            yield SLEEP
            log.append((name, s.now))
            yield Run(1000)

    hog = s.spawn("hog", 0, busy(10_000_000))
    sleepy = s.spawn("sleepy", 0, sleeper("local"))
    remote = s.spawn("remote", 1, sleeper("remote"))
    s.run(until=50e6)  # the hog builds up vruntime; the sleepers sleep
    woke_at = s.now
    s.at(woke_at, s.wake_up, sleepy)
    s.at(woke_at, s.wake_up, remote)
    s.run(until=woke_at + 1e6)
    # the local sleeper had half a latency of credit: it preempted the hog at once (a
    # switch); the remote one's idle CPU first had to wake up
    assert dict(log) == {"local": woke_at + SWITCH, "remote": woke_at + WAKEUP + SWITCH}
    assert hog.preempted >= 1 and s.cpu_stats(1).time["wakeup"] == pytest.approx(WAKEUP)


def random_scenario(seed: int, window: tuple[float, float] | None = None
                    ) -> tuple[Scheduler, list, list]:
    """Tasks on 3 CPUs that run, sleep, wake one another, raise softirqs and queue work;
    with a ``window``, its timeline is recorded and each CPU's stats are taken at its start
    and end (the third item)."""
    rng = random.Random(seed)
    s = Scheduler(3, context_switch_ns=rng.choice([0, 250, 900]),
                  wakeup_latency_ns=rng.choice([0, 1500]))
    tasks: list = []
    work = Work("w", lambda cpu: iter([Run(rng.randrange(1, 5000))]))

    def handler(cpu):
        yield Run(rng.randrange(1, 3000))
        if rng.random() < 0.3:
            s.queue_work(work)

    def body():
        while True:
            yield Run(rng.randrange(1, 20_000))
            choice = rng.random()
            if choice < 0.2:
                yield SLEEP
            elif choice < 0.5:
                s.raise_softirq(rng.randrange(3), handler)
            elif choice < 0.7:
                s.wake_up(rng.choice(tasks))
            elif choice < 0.8:
                s.raise_irq(rng.randrange(3), handler)

    for i in range(6):
        tasks.append(s.spawn(f"t{i}", i % 3, body()))
    marks = []
    if window is not None:
        s.record_timeline(*window)
        for t in window:
            s.run(until=t)
            marks.append([s.cpu_stats(cpu) for cpu in range(3)])
    s.run(until=5e6)
    return s, tasks, marks


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**16))
def test_same_inputs_same_figures_and_every_cpu_ns_is_accounted_once(seed):
    (s1, t1, _), (s2, t2, _) = random_scenario(seed), random_scenario(seed)
    for cpu in range(3):
        one, two = s1.cpu_stats(cpu), s2.cpu_stats(cpu)
        assert one == two
        assert set(one.time) == set(CPU_STATES)
        assert sum(one.time.values()) == pytest.approx(s1.now)
    assert [(t.exec_ns, t.wait_ns, t.preempted, t.state) for t in t1] == \
        [(t.exec_ns, t.wait_ns, t.preempted, t.state) for t in t2]


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**16), st.floats(0, 3e6), st.floats(0, 2e6))
def test_a_timeline_adds_up_to_the_window_per_cpu_and_changes_no_figure(seed, start, length):
    s, _, (first, last) = random_scenario(seed, (start, start + length))
    plain, _, _ = random_scenario(seed)
    for cpu in range(3):
        intervals = s.timeline(cpu)
        assert all(t0 < t1 and state in CPU_STATES for t0, t1, state in intervals)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(intervals))  # no gap
        assert sum(t1 - t0 for t0, t1, _ in intervals) == pytest.approx(length, abs=1e-6)
        if intervals:
            assert intervals[0][0] == start and intervals[-1][1] == start + length
        by_state = dict.fromkeys(CPU_STATES, 0.0)
        for t0, t1, state in intervals:
            by_state[state] += t1 - t0
        window = last[cpu].since(first[cpu]).time
        assert by_state == pytest.approx(window, abs=1e-6)
        ours, theirs = s.cpu_stats(cpu), plain.cpu_stats(cpu)  # stopping to look moves
        assert ours.time == pytest.approx(theirs.time)  # nothing but float rounding
        assert (ours.preemptions, ours.switches) == (theirs.preemptions, theirs.switches)
    assert not s.timeline_truncated


def test_a_timeline_is_bounded_and_refuses_a_window_in_the_past():
    s = scheduler(1)
    s.spawn("a", 0, busy(1000))
    s.spawn("b", 0, busy(1000))
    s.record_timeline(0, 1e9, max_intervals=3)
    s.run(until=1e7)
    assert len(s.timeline(0)) == 3 and s.timeline_truncated
    with pytest.raises(ValueError, match="start <= end"):
        s.record_timeline(0, 1)


@pytest.mark.parametrize("raise_it", ["raise_softirq", "raise_irq"])
def test_an_interrupt_context_may_not_sleep(raise_it):
    s = scheduler()

    def bad(cpu):
        yield SLEEP

    s.at(0, getattr(s, raise_it), 0, bad)
    with pytest.raises(RuntimeError, match="cannot sleep"):
        s.run()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="at least one CPU"):
        Scheduler(0, context_switch_ns=0, wakeup_latency_ns=0)
    s = scheduler(2)
    with pytest.raises(ValueError, match="CPU 2 is not a CPU"):
        s.spawn("x", 2, busy(1))
    with pytest.raises(ValueError, match="task kind"):
        s.spawn("x", 0, busy(1), kind="softirq")


def test_the_profile_gives_the_scheduler_its_costs():
    profile = load_profile("sapphire-rapids-2s")
    s = Scheduler.for_profile(profile, num_cpus=3)
    assert s.num_cpus == 3 and s.context_switch_ns == profile["sched.context_switch"]
    assert s.wakeup_latency_ns == profile["sched.wakeup_latency"]
    assert s.sched_latency == 24e6  # scaled for the machine's 112 CPUs, not the 3 simulated
    assert "estimate" in profile.source("sched.context_switch")


# -- seed 001's shape: the sockmap proxy's work on the scheduler ------------------------------

@pytest.fixture(scope="module")
def sockmap_model():
    from pybpf.bench.sockmap_model import model_sockmap

    return model_sockmap("sapphire-rapids-2s", skbs=3, warmup=1)


def test_the_unbound_proxy_is_below_the_bound_one_because_its_work_contends(sockmap_model):
    m = sockmap_model
    direct, unbound, bound = (m.paths[p] for p in ("direct", "unbound", "bound"))
    assert unbound.gbps < bound.gbps < direct.gbps
    client = unbound.simulated.cpus[m.client_cpu]
    # unbound, the kworker runs on the client's CPU and takes it from the client
    assert client.time["kworker"] > 0 and client.preemptions > 0 and client.waiting > 0
    assert client.time.get("idle", 0) == 0  # the client's CPU is the bottleneck
    bound_client = bound.simulated.cpus[m.client_cpu]
    assert bound_client.time["kworker"] == 0 and bound_client.preemptions == 0
    assert bound.simulated.cpus[m.proxy_cpu].time["kworker"] > 0


def test_the_streamed_model_is_deterministic():
    from pybpf.bench.sockmap_model import model_sockmap, simulate_path

    m = model_sockmap("haswell-ep-2s", skbs=3, warmup=1)
    cpus = (m.client_cpu, m.server_cpu, m.proxy_cpu)
    for path in ("direct", "unbound", "bound"):
        again = simulate_path("haswell-ep-2s", path, m.costs, cpus)
        assert again == m.paths[path].simulated
    with pytest.raises(ValueError, match="path must be one of"):
        simulate_path("haswell-ep-2s", "sideways", m.costs, cpus)
