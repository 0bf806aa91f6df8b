"""Modeled time on the emulated cpumap path: what each step charges, the modeled kthread rate
(bench/cpumap_model.py) is deterministic and keeps the model's order (GRO never dearer for one
flow, a remote ring never cheaper), and seed 002's row in ``pybpf reproduce``."""

from __future__ import annotations

import argparse

import pytest

from pybpf import reproduce
from pybpf.bench.cpumap_model import BURST, model_cpumap_rate
from pybpf.profiles import Value, dump_profile, load_profile

ALLOCS = ("kmem_cache_alloc_bulk", "napi_skb_cache_get_bulk")


@pytest.mark.parametrize("gro, rx", [(True, "gro_receive_skb"), (False, "gro_receive_skb"),
                                     (False, "netif_receive_skb_list")])
def test_two_runs_give_identical_figures(gro, rx):
    first, second = (model_cpumap_rate("host", gro=gro, rx=rx, bursts=4, warmup=2).as_dict()
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
    for node_cost in ("gro_receive_skb", "gro_normal_one"):  # ... but not the node
        assert off.breakdown[node_cost] == pytest.approx(profile[f"net.{node_cost}"])
    assert on.breakdown["gro_receive_skb"] == pytest.approx(profile["net.gro_receive_skb"])
    assert on.breakdown["gro_normal_one"] == pytest.approx(profile["net.gro_normal_one"] / BURST)


def test_gro_off_pays_the_gro_nodes_machinery_the_old_kthread_did_not_have():
    """6.15 with the device's GRO off against 6.14: the same heads from the slab, the same
    stack per skb, plus what the GRO node does with each skb, each pass and each flush, and
    the NAPI cache every head passes through since none comes back to it."""
    profile = load_profile("sapphire-rapids-2s")
    bursts = 4
    old, off = (model_cpumap_rate(profile.path, gro=False, skb_alloc=alloc, rx=rx,
                                  bursts=bursts, warmup=2)
                for alloc, rx in (("kmem_cache_alloc_bulk", "netif_receive_skb_list"),
                                  ("napi_skb_cache_get_bulk", "gro_receive_skb")))
    frames = bursts * BURST
    assert old.frames == off.frames == frames
    assert not any(cost.startswith("gro_") for cost in old.events)
    assert off.events["gro_receive_skb"] == off.events["gro_normal_one"] == frames
    assert off.events["gro_flush"] == bursts  # the ring runs empty once a burst
    assert off.events["napi_skb_cache_get"] == off.events["kmem_cache_alloc_bulk"] == frames
    assert off.heads_recycled == 0  # the reader frees every head to the slab on its CPU
    machinery = sum(profile[f"net.{cost}"] * off.events[cost]
                    for cost in ("gro_receive_skb", "gro_normal_one", "gro_flush",
                                 "napi_skb_cache_get"))
    assert (off.kthread_ns - old.kthread_ns) * frames == pytest.approx(machinery)
    assert off.mpps < old.mpps


def test_gro_off_costs_follow_the_profile_not_a_constant(tmp_path):
    profile = load_profile("sapphire-rapids-2s")
    dump_profile(profile.replace({"net.gro_receive_skb": Value(
        2 * profile["net.gro_receive_skb"], "test: twice the estimate")}), tmp_path / "p.toml")
    base, doubled = (model_cpumap_rate(str(path), gro=False, bursts=2, warmup=1)
                     for path in (profile.path, tmp_path / "p.toml"))
    assert doubled.kthread_ns - base.kthread_ns == pytest.approx(
        profile["net.gro_receive_skb"])


def test_the_old_kthread_has_no_gro_node_whatever_the_device_says():
    on, off = (model_cpumap_rate("sapphire-rapids-2s", gro=gro, skb_alloc="kmem_cache_alloc_bulk",
                                 rx="netif_receive_skb_list", bursts=2, warmup=1)
               for gro in (True, False))
    assert on.frames_per_skb == off.frames_per_skb == 1
    assert on.kthread_ns == off.kthread_ns and "gro_receive" not in on.breakdown


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
    with pytest.raises(ValueError, match="rx='napi'"):
        model_cpumap_rate("host", gro=True, rx="napi")


def test_seed_002_row_has_modeled_figures_and_a_verdict():
    run = reproduce.seed_002(argparse.Namespace(profile=None, kernel=False))
    table = reproduce.seeds_table({"002": run.modeled})
    row = next(line for line in table.splitlines() if line.startswith("002 "))
    assert "2.7M -> 4.7M pps" in row and "sapphire-rapids-2s" in row
    assert "1.31-2.18x" in row and ("within" in row or "MISS" in row)
    m = run.modeled
    assert m.after > m.before > 0 and row.count("pps") == 2
    assert "heads from the NAPI cache" in run.section and "netif_receive_skb" in run.section
    off_row = next(line for line in table.splitlines() if "GRO off after the patch" in line)
    assert off_row.startswith("002 ") and "2.7M -> 2.4M pps" in off_row
    assert "0.89x" in off_row and "0.67-1.11x" in off_row
    assert ("within" in off_row or "MISS" in off_row)
    record = next(r for r in reproduce.seed_records({"002": m}) if r["seed"] == "002")
    (variant,) = record["variants"]
    assert variant["key"] == "gro_off" and variant["published"]["after"] == 2.4e6
    assert variant["modeled"]["after"] == m.variants["gro_off"] < m.before
    assert variant["verdict"] == reproduce.verdict_of(variant["modeled"]["ratio"], (0.67, 1.11))
    assert "gro_receive_skb" in run.section and "after (GRO off)" in run.section


def test_seed_002_section_sets_the_series_middle_step_beside_its_published_figures():
    """Patch 3 alone (the GRO node, heads still from the slab) against the cover letter's 4.0
    and 2.3 Mpps, and the step the NAPI cache made, in the model and as measured."""
    run = reproduce.seed_002(argparse.Namespace(profile=None, kernel=False))
    rows = {line.split("  ")[0]: line for line in run.section.splitlines()
            if line.startswith("patch 3: ")}
    assert set(rows) == {"patch 3: GRO on, kmem_cache_alloc_bulk",
                         "patch 3: GRO off, kmem_cache_alloc_bulk"}
    on = model_cpumap_rate("sapphire-rapids-2s", gro=True, skb_alloc="kmem_cache_alloc_bulk")
    assert f"{on.mpps:.2f}" in rows["patch 3: GRO on, kmem_cache_alloc_bulk"]
    assert "4.0" in rows["patch 3: GRO on, kmem_cache_alloc_bulk"]
    assert "2.3" in rows["patch 3: GRO off, kmem_cache_alloc_bulk"]
    assert "where the series measured +17% and +4%" in run.section
