"""pybpf bench htab-mem: programs, arguments, both backends, and the allocator counters that
explain the 2022 patch (call_rcu per free against bpf_mem_alloc reuse). Nothing is timed:
runs are a fraction of a second and the checks are on counts, flags and formats."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from pybpf.bench import htab_mem as hm
from pybpf.testing import KERNEL_SKIP_REASON, kernel_available
from pybpf.uapi import MapFlags

needs_kernel = pytest.mark.skipif(not kernel_available(), reason=KERNEL_SKIP_REASON)

SUMMARY = re.compile(r"^Summary: per-prod-op +[\d.]+ \u00b1 +[\d.]+k/s, memory usage +[\d.]+ "
                     r"\u00b1 +[\d.]+MiB, peak memory usage +([\d.]+MiB|n/a)")
ITER = re.compile(r"^Iter +\d+ \( *-?[\d.]+us\): per-prod-op +[\d.]+k/s, memory usage +[\d.]+MiB$")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybpf", "bench", "htab-mem", *args],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))


def quick(backend: str, use_case: str, flavours: list[str], producers: int = 2,
          **kw) -> list[hm.Run]:
    cfg = hm.Config(use_cases=[use_case], flavours=flavours, producers=producers,
                    duration=0.3, warmup=0.0, backend=backend, json=True, progress=False,
                    **kw)
    return hm.run(cfg)


@pytest.mark.parametrize("name", ["overwrite", "batch_add_batch_del", "add_only", "del_only"])
def test_programs_assemble(name):
    from pybpf.asm import assemble

    assembly = assemble(hm.htab_mem_program(name, 4))
    assert {ref.map for ref in assembly.map_refs} <= {"htab", "op_cnt", "zero"}


def test_summary_and_iter_lines_follow_the_selftest():
    run = hm.Run("overwrite", "bpf_ma", 2, samples=[10.0, 12.0], memory=[2.0, 2.0],
                 peak_memory=2.5)
    assert SUMMARY.match(run.summary())
    assert ITER.match(hm.iter_line(0, 12.5, 11.0, 2.0))


@pytest.mark.parametrize("args, message", [
    (["--value-size", "5000"], "too big value size"),
    (["--use-case", "nope"], "invalid choice"),
    (["-p", "3", "--use-case", "add_del_on_diff_cpu"], "even number of producers"),
    (["--backend", "kernel", "--flavour", "call_rcu"], "only the emulated backend"),
    (["--backend", "kernel", "--cpus", "4"], "emulated machine"),
    (["-d", "0"], "--duration must be > 0 seconds, got 0"),
    (["--backend", "emulated", "--cpus", "2", "-p", "4"], "each producer needs one of its own"),
    (["--backend", "kernel", "--profile", "host"], "emulated machine"),
    (["--loops", "3"], "--loops must be >= 8"),
])
def test_bad_arguments_print_usage_and_exit_2(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: pybpf bench htab-mem")
    assert message in proc.stderr


@needs_kernel
def test_kernel_maps_are_preallocated_or_not_as_asked():
    from pybpf import system

    k = system("kernel")
    for flavour, flags in (("prealloc", 0), ("bpf_ma", MapFlags.NO_PREALLOC)):
        bench = hm.KernelBench(k, hm.Config(), "overwrite", flavour)
        bench.setup()
        try:
            info = k.map_get_info(bench.fds["htab"])
            assert info.map_flags == flags
            assert info.max_entries == max(8192, 64 * k.num_possible_cpus)
        finally:
            bench.teardown()


@needs_kernel
def test_kernel_overwrite_counts_ops_and_memory_for_both_flavours():
    runs = quick("kernel", "overwrite", ["prealloc", "bpf_ma"])
    assert [r.flavour for r in runs] == ["prealloc", "bpf_ma"]
    for r in runs:
        assert len(r.samples) == 1 and r.samples[0] > 0
        assert r.memlock and r.memlock > 0
        assert r.memory_source


@needs_kernel
def test_kernel_add_del_on_diff_cpu_pairs_make_progress():
    runs = quick("kernel", "add_del_on_diff_cpu", ["bpf_ma"])
    assert runs[0].samples[0] > 0


@needs_kernel
def test_kernel_json_document():
    proc = run_cli("--backend", "kernel", "--use-case", "batch_add_batch_del", "-d", "0.3",
                   "-w", "0", "--json", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["benchmark"] == "htab_mem" and doc["backend"] == "kernel"
    assert [r["flavour"] for r in doc["runs"]] == ["prealloc", "bpf_ma"]


ROUNDS = 20  # batch_add_batch_del runs per CPU in design_counters


def design_counters(flavour: str) -> dict:
    """The hash map's allocator counters after ROUNDS runs of batch_add_batch_del on each of
    2 emulated CPUs, with a grace period after each round: what a bench run does, minus the
    threads and the clock, so the counts are the same on every machine."""
    from pybpf import system
    from pybpf.bench.common import sys_enter_record

    sys_ = system("emulated", cpus=2, **({"htab_mem": "call_rcu"} if flavour == "call_rcu"
                                          else {}))
    bench = hm.EmulatedBench(sys_, hm.Config(producers=2, backend="emulated"),
                             "batch_add_batch_del", flavour)
    bench.setup()
    try:
        record = sys_enter_record("getpgid", (0,))
        for _ in range(ROUNDS):
            for cpu in range(2):
                with sys_.on_cpu(cpu):
                    assert sys_.trigger_tracepoint("syscalls", "sys_enter_getpgid",
                                                   record) == [0]
            sys_.machine.step()
        assert bench.op_count() == 2 * 2 * ROUNDS  # each run counts its add and its delete
        return sys_.map_stats(bench.fds["htab"])
    finally:
        bench.teardown()


def test_emulated_call_rcu_design_frees_every_element_through_rcu():
    c = design_counters("call_rcu")
    assert c["mem_design"] == "call_rcu"
    assert c["free_calls"] == c["alloc_calls"] > 0
    assert c["call_rcu"] == c["free_calls"]  # one callback per freed element
    assert c["reused"] == 0
    assert c["allocated"] == c["freed"] == c["free_calls"]  # every insert is a new element


def test_emulated_bpf_mem_alloc_reuses_instead_of_calling_rcu():
    c = design_counters("bpf_ma")
    assert c["mem_design"] == "bpf_mem_alloc"
    assert c["free_calls"] == c["alloc_calls"] == c["cache_hits"] > 0
    assert c["call_rcu"] < c["free_calls"] / 10  # batches, not one per element
    assert c["cache_hits"] + c["reused"] > c["allocated"]


def test_emulated_prealloc_only_moves_elements_on_its_free_list():
    c = design_counters("prealloc")
    assert c["freelist_pops"] == c["freelist_pushes"] > 0
    assert c["freelist_free"] == c["max_entries"]  # every element is back on the list
    assert "call_rcu" not in c


def test_emulated_table_explains_the_difference():
    runs = quick("emulated", "overwrite", ["bpf_ma", "call_rcu"], cpus=2, loops=40)
    text = hm.comparison_table(runs, "emulated")
    assert "allocator counters" in text
    assert re.search(r"overwrite: call_rcu design: \d+ RCU callbacks for \d+ frees", text)
    assert "op-loops/s are modeled" in text and "modeled per-prod-op k/s" in text


@pytest.mark.parametrize("use_case", hm.USE_CASES)
def test_emulated_rates_are_modeled_and_the_same_on_every_run(use_case):
    first, second = (quick("emulated", use_case, ["prealloc", "bpf_ma", "call_rcu"], cpus=2,
                           loops=40) for _ in range(2))
    for a, b in zip(first, second, strict=True):
        assert len(a.samples) == len(a.memory) == hm.SAMPLES and all(x > 0 for x in a.samples)
        assert (a.samples, a.memory, a.peak_memory, a.counters) == \
            (b.samples, b.memory, b.peak_memory, b.counters)
        assert a.profile == "host" and a.host_ops_k > 0
    rates = {r.flavour: r.ops_mean for r in first}
    if use_case != "add_del_on_diff_cpu":  # one call_rcu per free costs, reuse does not
        assert rates["call_rcu"] < rates["bpf_ma"] <= rates["prealloc"]


def test_emulated_pairs_take_turns_and_wake_each_other():
    """add_del_on_diff_cpu: each round the adder's syscall, its pipe write, the deleter woken
    (the profile's wake-up latency) and its syscall, then its write wakes the adder."""
    from pybpf import system
    from pybpf.profiles import load_profile

    sys_ = system("emulated", cpus=2)
    run_ = hm.EmulatedBench(sys_, hm.Config(producers=2, loops=40, backend="emulated",
                                            json=True), "add_del_on_diff_cpu", "bpf_ma").run()
    assert run_.counters["alloc_calls"] == run_.counters["free_calls"] == 40 * hm.OP_BATCH
    wake = load_profile("host")["sched.wakeup_latency"]
    for cpu in (0, 1):  # each side waits for the other once a round, a wake-up at least
        woken, waited = sys_.machine.timing.breakdown(cpu)["wakeup"]
        assert woken == 40 and waited >= 40 * wake
    with pytest.raises(ValueError, match="3 producers need as many emulated CPUs"):
        hm.EmulatedBench(system("emulated", cpus=2), hm.Config(producers=3, backend="emulated"),
                         "overwrite", "bpf_ma").run()
