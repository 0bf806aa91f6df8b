"""Allocators: pcpu_freelist, bpf_mem_alloc and the call_rcu design it replaced."""

from __future__ import annotations

import collections
import errno

import pytest

from helpers import u32
from pybpf import system
from pybpf.emulated.machine.machine import Machine
from pybpf.emulated.machine.memalloc import BpfMemAlloc, KmallocRcu, watermarks
from pybpf.emulated.maps.percpu_freelist import PcpuFreelist
from pybpf.uapi import BPF_F_NO_PREALLOC, MapType


@pytest.mark.parametrize("unit,expected", [(64, (32, 96, 48)), (256, (32, 96, 48)),
                                           (512, (16, 48, 24)), (4096, (2, 6, 3))])
def test_watermarks_follow_unit_size(unit, expected):
    assert watermarks(unit) == expected


def test_freelist_pops_own_cpu_first_then_steals():
    machine = Machine(cpus=2)
    fl = PcpuFreelist(2, machine.current_cpu)
    fl.populate(list("abcd"))  # 3 per CPU: a b c on CPU 0, d on CPU 1
    assert fl.free_counts() == [3, 1]
    assert {fl.pop() for _ in range(3)} == {"a", "b", "c"}
    assert fl.steals == 0
    assert fl.pop() == "d" and fl.steals == 1
    assert fl.pop() is None and fl.empty_pops == 1
    with machine.on_cpu(1):
        fl.push("x")
    assert fl.free_counts() == [0, 1]


def test_lazy_freelist_has_the_same_capacity():
    machine = Machine(cpus=3)
    fl = PcpuFreelist(3, machine.current_cpu)
    made = []
    fl.populate_lazy(7, lambda: made.append(1) or object())
    assert fl.available() == 7 and made == []
    objs = [fl.pop() for _ in range(7)]
    assert None not in objs and fl.pop() is None and len(made) == 7


def test_bpf_mem_alloc_prefills_refills_in_batches_and_reuses_after_free():
    machine = Machine(cpus=1)
    ma = BpfMemAlloc(machine, 40, lambda node: bytearray(40))
    assert ma.counters.allocated == 4  # prefill
    objs = [ma.alloc() for _ in range(200)]
    assert None not in objs
    assert ma.refills >= 4 and ma.counters.allocated == 4 + ma.refills * ma.batch
    for obj in objs:
        ma.free(obj)
    stats = ma.stats()
    assert stats["free_bulk"] >= 1 and stats["call_rcu"] >= 1
    assert stats["call_rcu"] < 200 / 10  # batched: far fewer than one per free
    before = ma.counters.allocated
    again = [ma.alloc() for _ in range(200)]
    assert None not in again
    # Most come back from the cache and the RCU lists; only the refill's slack is new.
    assert ma.counters.allocated - before <= ma.batch
    assert ma.counters.reused >= 100


def test_bpf_mem_alloc_frees_parked_objects_after_a_grace_period():
    machine = Machine(cpus=1)
    ma = BpfMemAlloc(machine, 40, lambda node: bytearray(40))
    objs = [ma.alloc() for _ in range(300)]
    for obj in objs:
        ma.free(obj)
    assert ma.counters.freed == 0
    machine.rcu.barrier()
    assert ma.counters.freed > 0


def test_bpf_mem_alloc_grace_period_does_not_requeue_what_was_parked_meanwhile():
    # __free_rcu frees waiting_for_gp_ttrace and clears the in-flight mark, nothing more:
    # objects parked during the grace period wait for the next free_bulk (or a refill).
    machine = Machine(cpus=1)
    ma = BpfMemAlloc(machine, 40, lambda node: bytearray(40))
    objs = [ma.alloc() for _ in range(200)]
    for obj in objs:
        ma.free(obj)
    cache = ma.caches[0]
    assert ma.counters.call_rcu == 1 and cache.call_rcu_ttrace_in_progress
    in_flight, parked = len(cache.waiting_for_gp_ttrace), len(cache.free_by_rcu_ttrace)
    assert in_flight and parked
    machine.rcu.barrier()
    assert ma.counters.call_rcu == 1 and ma.counters.freed == in_flight
    assert len(cache.free_by_rcu_ttrace) == parked and not cache.call_rcu_ttrace_in_progress
    for obj in [ma.alloc() for _ in range(100)]:  # refills reuse the parked objects first
        ma.free(obj)
    assert ma.counters.reused > 0


def test_call_rcu_design_queues_one_callback_per_free_and_never_reuses():
    machine = Machine(cpus=1)
    ma = KmallocRcu(machine, -1, lambda node: bytearray(40))
    objs = [ma.alloc() for _ in range(100)]
    for obj in objs:
        ma.free(obj)
    assert ma.counters.call_rcu == 100 and ma.counters.freed == 0
    assert machine.rcu.pending == 100
    ma.alloc()
    assert ma.counters.allocated == 101 and ma.counters.reused == 0
    machine.step()
    assert ma.counters.freed == 100


def _churn(sys):
    fd = sys.map_create(MapType.HASH, 4, 8, 64, map_flags=BPF_F_NO_PREALLOC)
    for _round in range(20):
        for i in range(64):
            sys.map_update_elem(fd, u32(i), bytes(8))
        for i in range(64):
            sys.map_delete_elem(fd, u32(i))
    return sys.map_stats(fd)


def test_same_workload_shows_the_2022_patch_mechanism():
    new = _churn(system("emulated", cpus=2, htab_mem="bpf_mem_alloc"))
    old = _churn(system("emulated", cpus=2, htab_mem="call_rcu"))
    assert new["mem_design"] == "bpf_mem_alloc" and old["mem_design"] == "call_rcu"
    assert old["call_rcu"] == 64 * 20 and old["allocated"] == 64 * 20
    assert new["call_rcu"] < old["call_rcu"] // 10
    assert new["allocated"] < old["allocated"] // 4
    assert new["elements"] == old["elements"] == 0


def test_rejected_create_touches_no_allocator():
    sys = system("emulated", cpus=2)
    with pytest.raises(OSError) as info:
        sys.map_create(MapType.HASH, 4, 0, 64, map_flags=BPF_F_NO_PREALLOC)
    assert info.value.errno == errno.EINVAL
    assert sys.machine.rcu.stats()["callbacks_queued"] == 0
    with pytest.raises(OSError) as info:  # no map id was taken
        sys.map_get_next_id(0)
    assert info.value.errno == errno.ENOENT


def test_htab_mem_must_be_a_known_design():
    with pytest.raises(ValueError):
        system("emulated", htab_mem="slab")


def test_closing_a_map_frees_its_cached_elements_after_a_grace_period():
    sys = system("emulated", cpus=2)
    fd = sys.map_create(MapType.HASH, 4, 8, 64, map_flags=BPF_F_NO_PREALLOC)
    for i in range(64):
        sys.map_update_elem(fd, u32(i), bytes(8))
    ma = sys.map_from_fd(fd).ma
    with sys.machine.rcu.read_section():  # a program still running
        sys.close(fd)
        assert sys.machine.step() == 0
    sys.machine.rcu.barrier()
    assert ma.counters.freed == ma.counters.allocated


# -- memory held by RCU in modeled time ----------------------------------------------------------

class Elem:
    """An element with a slab address (its kmalloc charged to the allocating CPU)."""

    __slots__ = ("addr",)

    def __init__(self, addr: int) -> None:
        self.addr = addr


def churn_in_syscalls(design: str, per_syscall: int):
    """CPU 0 enters a syscall every 5 us for 10 ms of modeled time, allocating and freeing
    ``per_syscall`` elements in each (map_perf_test's update / delete pairs)."""
    machine = Machine(cpus=1, nodes=1, profile="sapphire-rapids-2s")

    def new_object(node: int) -> Elem:
        return Elem(machine.timing.slub.kmalloc(machine.current_cpu(), 48, node))

    if design == "call_rcu":
        ma = KmallocRcu(machine, 0, new_object, unit_size=48)
    else:
        ma = BpfMemAlloc(machine, 40, new_object,
                         free_through_rcu=design == "bpf_mem_alloc_call_rcu")
    for k in range(2000):
        machine.timing.wait_until(0, k * 5000.0)
        machine.bpf_syscall()
        objs = [ma.alloc() for _ in range(per_syscall)]
        for obj in objs:
            ma.free(obj)
    return machine, ma


@pytest.mark.parametrize("design", ["bpf_mem_alloc_call_rcu", "call_rcu"])
def test_memory_held_until_callbacks_run_grows_with_the_free_rate(design):
    (m1, slow), (m4, fast) = (churn_in_syscalls(design, n) for n in (1, 4))
    held = [ma.counters.max_held_by_rcu_bytes for ma in (slow, fast)]
    assert held[0] > 0 and held[1] > 3 * held[0]
    # Freed memory still waits, so the allocator goes back to kmalloc, more the faster it frees.
    new = [ma.counters.kmalloc_while_held for ma in (slow, fast)]
    assert 0 < new[0] < new[1]
    assert m4.timing.breakdown(0)["kmalloc"][0] > m1.timing.breakdown(0)["kmalloc"][0]
    series = fast.counters.held_over_time()
    assert len(series) > 5 and max(b for _, b in series) <= held[1]
    assert [t for t, _ in series] == sorted(t for t, _ in series)
    m4.step()
    m4.rcu.barrier()
    assert fast.counters.held_by_rcu_bytes == 0 == m4.rcu.held_bytes


def test_call_rcu_design_goes_to_kmalloc_for_every_element_once_one_is_held():
    _, ma = churn_in_syscalls("call_rcu", 2)
    c = ma.counters
    assert c.allocated == 4000 and c.kmalloc_while_held == 4000 - 2


def test_bpf_mem_alloc_reuse_holds_nothing_back_from_a_balanced_churn():
    machine, ma = churn_in_syscalls("bpf_mem_alloc", 4)
    assert ma.counters.call_rcu == 0 and ma.counters.max_held_by_rcu_bytes == 0
    assert ma.counters.kmalloc_while_held == 0 and machine.rcu.max_held_bytes == 0


def test_the_2022_allocator_refills_with_new_objects_and_frees_what_it_trims_at_once():
    """Before 0fd7c5d43339 the caches were patch 1's allocator: a refill never takes freed
    objects back, and free_bulk gives what it trims straight to the slab (each object's
    grace period has passed: its call_rcu callback did the unit_free). So there is one
    call_rcu per freed object and no batch callbacks."""
    machine, ma = churn_in_syscalls("bpf_mem_alloc_call_rcu", 4)
    c = ma.counters
    assert c.reused == 0 and c.allocated > 4000 and c.freed > 0
    assert c.call_rcu == c.free_calls == machine.rcu.callbacks_queued
    assert machine.timing.breakdown(0)["kfree"][0] == c.freed
    assert ma.stats()["waiting_for_rcu"] == 0  # nothing parked


@pytest.mark.parametrize("design", ["call_rcu", "bpf_mem_alloc_call_rcu", "bpf_mem_alloc"])
def test_every_element_kmalloc_and_kfree_is_accounted_to_the_memory_cgroup(design):
    """Map elements are __GFP_ACCOUNT (the map's objcg, 5.11+): each new object from the slab
    costs a memcg charge and each one given back an uncharge; reuse from a cache costs
    neither."""
    sys = system("emulated", cpus=1, htab_mem=design)
    stats = _churn(sys)
    sys.machine.step()
    sys.machine.rcu.barrier()
    spent = sys.machine.timing.breakdown(0)
    assert spent["memcg_charge"][0] == spent["kmalloc"][0] == stats["allocated"] > 0
    freed = spent.get("kfree", (0, 0.0))[0]
    assert spent.get("memcg_uncharge", (0, 0.0))[0] == freed
    if design == "call_rcu":  # every element went back to the slab once its callback ran
        assert freed == stats["allocated"]
    if design == "bpf_mem_alloc":  # the cache reuses: the prefill and a few refills only
        assert stats["allocated"] < 64 * 20 // 4


@pytest.mark.parametrize("free_through_rcu,touches", [(True, 6), (False, 7)])
def test_the_allocator_touches_each_object_its_lists_move(free_through_rcu, touches):
    """Every llist operation reads or writes the node inside the object, so an object's
    line is touched by kmalloc (the slab's free pointer), the refill's add, unit_alloc,
    unit_free (in the 2022 design from its call_rcu callback), free_bulk's take, in today's
    design do_call_rcu's move, and kfree (the slab's free pointer again)."""
    machine = Machine(cpus=1, nodes=1, profile="sapphire-rapids-2s")
    touched: collections.Counter[int] = collections.Counter()
    kfreed: list[int] = []
    access, kfree = machine.timing.access, machine.timing.slub.kfree

    def counting_access(cpu: int, addr: int, write: bool = False) -> float:
        touched[addr] += 1
        return access(cpu, addr, write)

    def recording_kfree(cpu: int, addr: int, account: bool = False) -> None:
        kfreed.append(addr)
        kfree(cpu, addr, account)

    machine.timing.access = counting_access
    machine.timing.slub.kfree = recording_kfree
    ma = BpfMemAlloc(machine, 40, lambda node: Elem(machine.timing.slub.kmalloc(0, 48, node)),
                     free_through_rcu=free_through_rcu)
    objs = [ma.alloc() for _ in range(300)]
    for obj in objs:
        ma.free(obj)
    machine.step()  # the per-object grace period, or the batch's
    machine.rcu.barrier()
    assert kfreed and len(kfreed) == ma.counters.freed
    assert {touched[addr] for addr in kfreed} == {touches}
