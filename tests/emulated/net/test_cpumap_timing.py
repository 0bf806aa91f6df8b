"""Modeled time on the emulated cpumap path: what each step charges, the modeled kthread rate
(bench/cpumap_model.py) is deterministic and keeps the model's order (GRO never dearer for one
flow, a remote ring never cheaper), and seed 002's row in ``pybpf reproduce``."""

from __future__ import annotations

import argparse

import pytest

from pybpf import reproduce
from pybpf.bench.cpumap_model import BURST, model_cpumap_rate
from pybpf.profiles import load_profile

ALLOCS = ("kmem_cache_alloc_bulk", "napi_skb_cache_get_bulk")


def test_two_runs_give_identical_figures():
    first, second = (model_cpumap_rate("host", gro=True, bursts=4, warmup=2).as_dict()
                     for _ in range(2))
    assert first == second
    assert first["mpps"] > 0 and first["frames"] == 4 * BURST


@pytest.mark.parametrize("profile", ["host", "haswell-ep-2s", "sapphire-rapids-2s"])
@pytest.mark.parametrize("skb_alloc", ALLOCS)
def test_gro_on_never_costs_more_per_frame_than_off_for_one_flow(profile, skb_alloc):
    on, off = (model_cpumap_rate(profile, gro=gro, skb_alloc=skb_alloc, bursts=4, warmup=2)
               for gro in (True, False))
    assert on.frames_per_skb == BURST and off.frames_per_skb == 1
    assert on.kthread_ns <= off.kthread_ns


def test_the_stack_is_charged_per_skb_and_gro_per_frame():
    profile = load_profile("sapphire-rapids-2s")
    on, off = (model_cpumap_rate(profile.path, gro=gro, bursts=4, warmup=2)
               for gro in (True, False))
    stack = profile["net.netif_receive_skb"]
    assert off.breakdown["netif_receive_skb"] == pytest.approx(stack)
    assert on.breakdown["netif_receive_skb"] == pytest.approx(stack / BURST)
    assert on.breakdown["gro_receive"] == pytest.approx(profile["net.gro_receive"])
    assert on.breakdown["gro_merge"] == pytest.approx(profile["net.gro_merge"] * 63 / 64)
    assert "gro_receive" not in off.breakdown  # the device elides GRO


def test_slab_heads_cost_the_bulk_allocator_and_cache_heads_come_back_hot():
    before = model_cpumap_rate("sapphire-rapids-2s", gro=False,
                               skb_alloc="kmem_cache_alloc_bulk", bursts=4, warmup=2)
    after = model_cpumap_rate("sapphire-rapids-2s", gro=True, bursts=4, warmup=2)
    assert before.heads_recycled == 0 and "napi_skb_cache_get" not in before.breakdown
    assert before.breakdown["kmem_cache_alloc_bulk"] > 0
    assert after.heads_recycled == after.heads * 63 // 64
    assert after.breakdown["napi_skb_cache_get"] > after.breakdown.get("kmem_cache_alloc_bulk",
                                                                       0)


def test_a_remote_ring_is_never_cheaper_than_a_local_one():
    profile = load_profile("sapphire-rapids-2s")
    remote_cpu = profile.cpu_node.index(1)  # the first CPU of node 1; the producer is on 0
    for gro in (True, False):
        local, remote = (model_cpumap_rate(profile.path, gro=gro, cpu=cpu, bursts=4, warmup=2)
                         for cpu in (1, remote_cpu))
        assert remote.kthread_ns > local.kthread_ns
        assert "transfer_remote" in remote.breakdown and "transfer_remote" not in local.breakdown


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="cpu=5: profile 'host' has CPUs 0-1"):
        model_cpumap_rate("host", gro=True, cpu=5)
    with pytest.raises(ValueError, match="must differ"):
        model_cpumap_rate("host", gro=True, cpu=0)
    with pytest.raises(ValueError, match="skb_alloc='slab'"):
        model_cpumap_rate("host", gro=True, skb_alloc="slab")


def test_seed_002_row_has_modeled_figures_and_a_verdict():
    run = reproduce.seed_002(argparse.Namespace(profile=None, kernel=False))
    table = reproduce.seeds_table({"002": run.modeled})
    row = next(line for line in table.splitlines() if line.startswith("002 "))
    assert "2.7M -> 4.7M pps" in row and "sapphire-rapids-2s" in row
    assert "1.31-2.18x" in row and ("within" in row or "MISS" in row)
    m = run.modeled
    assert m.after > m.before > 0 and row.count("pps") == 2
    assert "heads from the NAPI cache" in run.section and "netif_receive_skb" in run.section
