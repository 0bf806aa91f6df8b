"""Modeled time off vs on: the emulated backend gives the same results either way.

``modeled_time=False`` (PYBPF_NO_MODELED_TIME) only stops the cost model; map contents,
errno, iteration and LRU eviction order, program results and the RCU-deferred frees must be
what the modeled machine gives. The same seeded sequences as the kernel-vs-emulated suite
run on two emulated systems, one with modeled time and one without; no bpf(2) is needed.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import u32
from pybpf import system
from pybpf.emulated.machine.rcu import QHIMARK
from pybpf.testing import differential as d
from pybpf.testing.differential import fuzz as f
from pybpf.uapi import BPF_F_NO_PREALLOC, MapType

SEED = 20260
SEQUENCES = 25  # per family: every family reaches full maps, eviction and batch resumption


def _pair(**kwargs):
    return (system("emulated", modeled_time=True, **kwargs),
            system("emulated", modeled_time=False, **kwargs))


@pytest.mark.parametrize("family", sorted(d.GENERATORS))
def test_random_sequences_give_the_same_bytes_and_errnos_without_modeled_time(
        family, differential_tally):
    on, off = _pair(cpus=2)
    summary = d.compare([family], SEQUENCES, SEED, on, off, "modeled", "unmodeled",
                        shrink_budget=50, shrink_first=1, programs_off=None)
    differential_tally.add("modeled", "unmodeled", family, summary.sequences, summary.ops,
                           len(summary.mismatches))
    assert summary.ops > SEQUENCES
    if summary.mismatches:
        pytest.fail(summary.report("modeled", "unmodeled") + "\n\n"
                    + summary.mismatches[0].format(), pytrace=False)


def test_system_fuzz_agrees_without_modeled_time(differential_tally):
    on, off = _pair(cpus=2)
    summary = f.fuzz(on, off, 12, 100, 40, "modeled", "unmodeled")
    differential_tally.add("modeled", "unmodeled", "system_fuzz", summary.sequences,
                           summary.calls, len(summary.disagreements))
    assert summary.ok, summary.report("modeled", "unmodeled")


def _dump(sys_, fd) -> list[tuple[bytes, bytes]]:
    out, key = [], None
    while True:
        try:
            key = sys_.map_get_next_key(fd, key)
        except OSError:
            return out
        out.append((key, sys_.map_lookup_elem(fd, key)))


@settings(max_examples=40)
@given(ops=st.lists(st.tuples(st.sampled_from(["update", "lookup", "delete"]),
                              st.integers(0, 40), st.integers(0, 1)), max_size=120),
       map_type=st.sampled_from([MapType.LRU_HASH, MapType.HASH, MapType.LRU_PERCPU_HASH]))
def test_lru_and_hash_contents_and_order_do_not_depend_on_modeled_time(ops, map_type):
    """Any sequence of updates, lookups and deletes, spread over two CPUs, leaves the same
    elements in the same order (so the LRU evicted the same ones), with the same errno."""
    systems = _pair(cpus=2)
    fds = [s.map_create(map_type, 4, 8, 16, map_flags=0) for s in systems]
    value_size = 8 * 2 if map_type == MapType.LRU_PERCPU_HASH else 8
    for op, key, cpu in ops:
        results = []
        for s, fd in zip(systems, fds, strict=True):
            with s.on_cpu(cpu):
                try:
                    if op == "update":
                        s.map_update_elem(fd, u32(key), bytes([key]) * value_size)
                        results.append("ok")
                    elif op == "lookup":
                        results.append(s.map_lookup_elem(fd, u32(key)))
                    else:
                        s.map_delete_elem(fd, u32(key))
                        results.append("ok")
                except OSError as exc:
                    results.append(exc.errno)
        assert results[0] == results[1], (op, key, cpu)
    assert _dump(systems[0], fds[0]) == _dump(systems[1], fds[1])


@pytest.mark.parametrize("htab_mem", ["bpf_mem_alloc", "call_rcu", "bpf_mem_alloc_call_rcu"])
def test_rcu_deferred_frees_still_happen_without_modeled_time(htab_mem):
    """Freed elements wait for a grace period and are freed by Machine.step, as with modeled
    time; contents are the same, and nothing stays held by RCU afterwards."""
    stats = []
    for s in _pair(cpus=2, htab_mem=htab_mem):
        fd = s.map_create(MapType.HASH, 4, 8, 512, map_flags=BPF_F_NO_PREALLOC)
        for round_ in range(4):
            for cpu in (0, 1):
                with s.on_cpu(cpu):
                    for k in range(200):
                        s.map_update_elem(fd, u32(k), u32(round_) * 2)
                    for k in range(0, 200, 2):
                        s.map_delete_elem(fd, u32(k))
        assert s.machine.rcu.pending  # frees wait for a grace period
        s.machine.step()
        assert not s.machine.rcu.pending
        stats.append((_dump(s, fd), s.map_stats(fd)))
    (dump_on, on), (dump_off, off) = stats
    assert dump_on == dump_off and len(dump_on) == 100
    for st_ in (on, off):
        assert st_["held_by_rcu_bytes"] == 0 and st_["call_rcu"] > 0
        # bpf_mem_alloc reuses what waits for a grace period before its callback frees it
        assert st_["freed"] > 0 or htab_mem == "bpf_mem_alloc"
    for counter in ("free_calls", "alloc_calls", "freed", "call_rcu"):
        assert on[counter] == off[counter], counter


def test_a_flood_of_callbacks_is_bounded_without_step():
    """Without modeled time there are no ticks: RCU polls once more than qhimark callbacks
    wait, so a long run that never steps the machine does not hold every freed element."""
    s = system("emulated", cpus=2, htab_mem="call_rcu", modeled_time=False)
    fd = s.map_create(MapType.HASH, 4, 8, 64, map_flags=BPF_F_NO_PREALLOC)
    for i in range(QHIMARK + 500):
        s.map_update_elem(fd, u32(i % 64), u32(i) * 2)
        s.map_delete_elem(fd, u32(i % 64))
    rcu = s.machine.rcu
    assert rcu.callbacks_queued > QHIMARK
    assert rcu.pending <= QHIMARK and rcu.callbacks_run >= QHIMARK
