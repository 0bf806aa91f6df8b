"""The emulated machine: topology, current CPU per thread, NUMA access accounting."""

from __future__ import annotations

import threading

import pytest

from pybpf.emulated.machine.machine import NO_MODELED_TIME_ENV, AccessStats, Machine
from pybpf.emulated.machine.timing import UnmodeledTiming
from pybpf.topology import parse_cpu_list


def test_declared_topology_spreads_nodes_contiguously():
    machine = Machine(cpus=20, nodes=2)
    assert machine.num_cpus == 20 and machine.num_nodes == 2
    assert [machine.cpu_to_node(c) for c in range(20)] == [0] * 10 + [1] * 10
    assert machine.topology.cpus_of_node(1) == list(range(10, 20))


def test_declared_topology_with_uneven_nodes_covers_every_node():
    machine = Machine(cpus=5, nodes=3)
    assert sorted(set(machine.cpu_node)) == [0, 1, 2]
    assert machine.cpu_node == sorted(machine.cpu_node)


@pytest.mark.parametrize("cpus,nodes", [(0, 1), (4, 0), (2, 3)])
def test_impossible_topology_is_rejected(cpus, nodes):
    with pytest.raises(ValueError):
        Machine(cpus=cpus, nodes=nodes)


def test_host_topology_has_every_possible_cpu():
    machine = Machine()
    assert machine.num_cpus >= 1
    assert all(0 <= machine.cpu_to_node(c) < machine.num_nodes for c in range(machine.num_cpus))


def test_parse_cpu_list_reads_ranges_and_singles():
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]


def test_on_cpu_sets_and_restores_the_current_cpu_and_node():
    machine = Machine(cpus=4, nodes=2)
    assert machine.current_cpu() == 0
    with machine.on_cpu(3):
        assert machine.current_cpu() == 3 and machine.numa_node_id() == 1
        with machine.on_cpu(1):
            assert machine.current_cpu() == 1 and machine.numa_node_id() == 0
        assert machine.current_cpu() == 3
    assert machine.current_cpu() == 0


@pytest.mark.parametrize("cpu", [-1, 4, "1", 1.0])
def test_on_cpu_outside_the_machine_gives_valueerror(cpu):
    machine = Machine(cpus=4)
    with pytest.raises(ValueError, match="does not exist"):
        with machine.on_cpu(cpu):
            pass


def test_current_cpu_is_per_thread():
    machine = Machine(cpus=4)
    seen = {}

    def worker(cpu):
        try:
            with machine.on_cpu(cpu):
                barrier.wait()
                seen[cpu] = machine.current_cpu()
        except BaseException:
            barrier.abort()  # the others stop waiting; seen shows what went wrong
            raise

    barrier = threading.Barrier(3)
    threads = [threading.Thread(target=worker, args=(c,)) for c in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {1: 1, 2: 2, 3: 3}
    assert machine.current_cpu() == 0


def test_access_stats_count_local_and_remote_per_cpu():
    machine = Machine(cpus=4, nodes=2)
    stats = AccessStats(machine.cpu_node)
    stats.access(0, 0)
    stats.access(0, 1)
    stats.access(3, 1)
    stats.access(3, 1)
    assert stats.by_cpu() == {0: (1, 1), 3: (2, 0)}
    assert stats.remote_share(0) == 0.5
    assert stats.remote_share(3) == 0.0
    assert stats.remote_share() == 0.25
    assert stats.remote_share(1) == 0.0
    stats.c_remote[3] += 2  # what C counts (the map cores, the native tier) is added in
    stats.c_local[1] += 1
    assert stats.by_cpu() == {0: (1, 1), 1: (1, 0), 3: (2, 2)}
    assert stats.totals() == (4, 3) and stats.remote_share(3) == 0.5


def test_machine_step_runs_due_rcu_callbacks():
    machine = Machine(cpus=2)
    ran = []
    machine.rcu.call_rcu(lambda: ran.append(1))
    assert ran == []
    assert machine.step() == 1
    assert ran == [1]


@pytest.mark.parametrize("kw", [dict(cpus="4"), dict(cpus=4, nodes=2.0)])
def test_declared_topology_refuses_non_int_sizes(kw):
    with pytest.raises(TypeError, match="must be an int"):
        Machine(**kw)


# -- modeled time switched off -------------------------------------------------------------------

def test_modeled_time_is_on_unless_switched_off(monkeypatch):
    monkeypatch.delenv(NO_MODELED_TIME_ENV, raising=False)
    assert Machine(cpus=2).modeled_time and Machine(cpus=2).timing.modeled
    monkeypatch.setenv(NO_MODELED_TIME_ENV, "1")
    assert not Machine(cpus=2).modeled_time
    assert Machine(cpus=2, modeled_time=True).modeled_time  # the argument wins
    off = Machine(cpus=2, modeled_time=False)
    assert isinstance(off.timing, UnmodeledTiming) and off.rcu.timing is None
    assert "modeled_time=False" in repr(off)


def test_modeled_time_must_be_a_bool():
    with pytest.raises(TypeError, match="modeled_time"):
        Machine(cpus=2, modeled_time="off")


def test_without_modeled_time_work_costs_nothing():
    from pybpf import system
    from pybpf.uapi import MapType

    s = system("emulated", cpus=2, modeled_time=False)
    fd = s.map_create(MapType.HASH, 4, 8, 16)
    s.map_update_elem(fd, bytes(4), bytes(8))
    assert s.map_lookup_elem(fd, bytes(4)) == bytes(8)
    timing = s.machine.timing
    timing.charge(0, "htab_map_update_elem")  # even a direct charge
    assert timing.clock == [0.0, 0.0] and timing.breakdown(0) == {}


def test_without_modeled_time_deferred_work_runs_at_step():
    """Timers and other deferred work fire when the machine is stepped: the clocks move by
    waiting only."""
    machine = Machine(cpus=2, modeled_time=False)
    fired = []
    machine.timing.defer(1, 1000.0, lambda: fired.append(machine.current_cpu()))
    machine.bpf_syscall()
    assert not fired
    machine.step()
    assert fired == [1] and machine.timing.now(1) >= 1000.0


def test_without_modeled_time_rcu_callbacks_run_on_the_queuing_cpu():
    machine = Machine(cpus=2, modeled_time=False)
    ran_on = []
    with machine.on_cpu(1):
        machine.rcu.call_rcu(lambda: ran_on.append(machine.current_cpu()))
    machine.step()
    assert ran_on == [1] and machine.current_cpu() == 0


def test_figures_refuse_a_machine_without_modeled_time():
    Machine(cpus=2, modeled_time=True).require_modeled_time("a modeled rate")
    with pytest.raises(ValueError,
                       match=f"a modeled rate: these figures are modeled.*{NO_MODELED_TIME_ENV}"):
        Machine(cpus=2, modeled_time=False).require_modeled_time("a modeled rate")


def test_a_shared_machine_takes_no_modeled_time_argument():
    from pybpf.emulated.system import EmulatedSystem

    with pytest.raises(TypeError, match="modeled_time"):
        EmulatedSystem(machine=Machine(cpus=2), modeled_time=False)
