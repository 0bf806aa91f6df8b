"""Modeled time in the emulated machine: what advances the clocks, what the profile decides,
and that map-perf's modeled figures do not depend on the host."""

import random
import struct
import time

import pytest

from pybpf import system
from pybpf.asm import FP, R0, R1, R2, add64, assemble, call, encode, exit_, ld_map_fd, mov64, stw
from pybpf.bench import map_perf as mp
from pybpf.emulated.machine import timing as timing_mod
from pybpf.profiles import load_profile
from pybpf.uapi import MapFlags, MapType, ProgType

HASWELL = load_profile("haswell-ep-2s")


def test_a_profile_without_cpus_brings_its_topology():
    e = system("emulated", profile="haswell-ep-2s")
    assert e.num_possible_cpus == 20
    assert e.topology.cpu_node == [0] * 10 + [1] * 10
    assert system("emulated", cpus=4, profile="haswell-ep-2s").num_possible_cpus == 4


def test_every_syscall_advances_the_calling_cpus_clock():
    e = system("emulated", cpus=2)
    clock = e.machine.timing.clock
    fd = e.map_create(MapType.HASH, 4, 8, 16)
    with e.on_cpu(1):
        before = clock[1]
        e.map_update_elem(fd, b"\1\0\0\0", bytes(8))
        spent = clock[1] - before
    assert spent >= e.machine.profile["cpu.syscall_entry"] + \
        e.machine.profile["ops.htab_map_update_elem"]
    assert e.machine.timing.breakdown(1)["syscall_entry"][0] == 1


def test_ktime_is_the_current_cpus_modeled_clock():
    e = system("emulated", cpus=2)
    with e.on_cpu(1):
        e.map_create(MapType.ARRAY, 4, 8, 1)
        assert e.machine.ktime_get_ns() == int(e.machine.timing.clock[1])
    assert e.machine.ktime_get_ns() == int(e.machine.timing.clock[0])


def _lookup_prog(e, fd: int, lookups: int) -> int:
    items = [stw(FP, -4, 1)]
    for _ in range(lookups):
        items += [ld_map_fd(R1, fd), mov64(R2, FP), add64(R2, -4), call("map_lookup_elem")]
    items += [mov64(R0, 0), exit_()]
    insns = encode(assemble(items).with_map_fds(lambda m: m))
    return e.prog_load(ProgType.SOCKET_FILTER, insns)


def test_test_run_duration_is_modeled_and_the_same_on_every_machine():
    durations = []
    for _ in range(2):
        e = system("emulated", cpus=1, profile="host")
        fd = e.map_create(MapType.ARRAY, 4, 8, 4)
        prog = _lookup_prog(e, fd, 8)
        durations.append(e.prog_test_run(prog, bytes(64), repeat=100).duration)
    p = load_profile("host")
    assert durations[0] == durations[1]
    assert durations[0] >= int(p["cpu.prog_test_run"] + 8 * p["ops.array_map_lookup_elem"])


def test_memory_on_the_far_node_costs_more_than_on_the_near_one():
    costs = {}
    for node in (0, 1):
        e = system("emulated", profile="haswell-ep-2s", cache_scale=1 / 4096)
        fd = e.map_create(MapType.HASH, 4, 8, 4096, map_flags=MapFlags.NUMA_NODE,
                          numa_node=node)
        keys = [struct.pack("<I", k) for k in range(4096)]
        for key in keys:
            e.map_update_elem(fd, key, bytes(8))
        random.Random(1).shuffle(keys)
        clock = e.machine.timing.clock
        start = clock[0]
        for key in keys:
            e.map_lookup_elem(fd, key)
        costs[node] = clock[0] - start
    assert costs[1] > costs[0] * 1.05


def test_a_program_charges_its_instructions_and_helper_calls():
    e = system("emulated", cpus=1)
    items = [call("get_numa_node_id"), call("get_numa_node_id"), mov64(R0, 0), exit_()]
    prog = e.prog_load(ProgType.SOCKET_FILTER, encode(assemble(items).instructions))
    e.prog_test_run(prog, bytes(64))
    spent = e.machine.timing.breakdown(0)
    assert spent["helper_call"][0] == 2
    assert spent["bpf_insn"][0] == 4
    assert spent["prog_test_run"][0] == 1


def test_a_freed_element_comes_back_when_its_grace_period_ends_in_modeled_time():
    e = system("emulated", cpus=1, htab_mem="bpf_mem_alloc_call_rcu")
    timing = e.machine.timing
    fd = e.map_create(MapType.HASH, 4, 8, 64, map_flags=MapFlags.NO_PREALLOC)
    e.map_update_elem(fd, b"\1\0\0\0", bytes(8))
    e.map_delete_elem(fd, b"\1\0\0\0")
    timing.sync(0)
    assert e.machine.rcu.pending == 1  # CPU 0's clock has not reached the grace period's end
    timing.wait_until(0, timing.clock[0] + 2 * e.machine.profile["rcu.grace_period"])
    timing.sync(0)  # the CPU's next modeled operation runs its due callbacks first
    assert e.machine.rcu.pending == 0
    assert timing.breakdown(0)["rcu_callback"][0] == 1


# -- map-perf: modeled figures do not depend on the host --------------------------------------

def _modeled(jitter: random.Random | None, monkeypatch) -> list:
    if jitter is not None:
        real_sync = timing_mod.VirtualTimeScheduler.sync

        def sync(self, cpu):  # the host interleaves the threads at random moments
            if jitter.random() < 0.2:
                time.sleep(jitter.random() / 5000)
            return real_sync(self, cpu)

        monkeypatch.setattr(timing_mod.VirtualTimeScheduler, "sync", sync)
    cfg = mp.Config(test_flags=mp.Test.HASH_KMALLOC.bit | mp.Test.INNER_LRU_HASH_PREALLOC.bit,
                    num_procs=3, max_cnt=30, backend="emulated", cpus=4, nodes=2,
                    numa_node=mp.NUMA_NONE, parent_cpu=3, json=True, progress=False)
    result = mp.run(cfg)
    monkeypatch.undo()
    return sorted((r.test, r.cpu, r.rate, r.elapsed_ns, sorted(r.breakdown.items()))
                  for r in result.results)


def test_map_perf_modeled_rates_are_identical_whatever_the_host_does(monkeypatch):
    calm = _modeled(None, monkeypatch)
    assert _modeled(None, monkeypatch) == calm
    assert _modeled(random.Random(7), monkeypatch) == calm
    rates = {(test, cpu): rate for test, cpu, rate, _, _ in calm}
    # CPU 0's inner map was made by the parent on CPU 3 (node 1): remote, so slower.
    assert rates[("INNER_LRU_HASH_PREALLOC", 0)] < rates[("INNER_LRU_HASH_PREALLOC", 1)]


@pytest.mark.parametrize("cpus", [1, 2])
def test_map_perf_lines_say_the_rate_is_modeled_on_a_profile(cpus):
    cfg = mp.Config(test_flags=mp.Test.ARRAY_LOOKUP.bit, num_procs=cpus, max_cnt=5,
                    backend="emulated", cpus=cpus, profile="sapphire-rapids-2s", json=True,
                    progress=False)
    result = mp.run(cfg)
    for r in result.results:
        assert r.profile == "sapphire-rapids-2s" and r.host_rate > 0 and r.rate > 0
        assert "modeled on sapphire-rapids-2s" in mp.result_line(r, "emulated")
