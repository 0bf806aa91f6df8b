"""pybpf map-perf: the sample's arguments, output lines, programs and map placement.

Nothing here times anything: runs use a handful of events and check formats, flags and the
emulated NUMA accounting, which are counts.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import socket
import struct
import subprocess
import sys

import pytest

from pybpf import reproduce
from pybpf.bench import map_perf as mp
from pybpf.bench import trigger
from pybpf.bench.map_perf import config as mp_config
from pybpf.bench.map_perf import emulated_run
from pybpf.bench.map_perf.kernel_run import kernel_trigger
from pybpf.bench.map_perf.progs import BUILDERS, build_program
from pybpf.bench.map_perf.results import plot
from pybpf.bench.map_perf.testbed import Setup, lru_lookup_keys, sockaddr_in6
from pybpf.emulated.prog.core import ENGINES
from pybpf.emulated.prog.native import native_missing
from pybpf.testing import KERNEL_SKIP_REASON, kernel_available
from pybpf.uapi import MapFlags, MapType

SAMPLE_LINE = re.compile(
    r"^(?P<cpu>\d+):(?P<label>[a-z_]+(?: (?:pre-alloc|kmalloc))?) (?P<rate>\d+) "
    r"(?P<unit>events|lookups) per sec(?P<rest>.*)$")

EXPECTED_LABELS = {
    mp.Test.HASH_PREALLOC: "hash_map_perf pre-alloc",
    mp.Test.PERCPU_HASH_PREALLOC: "percpu_hash_map_perf pre-alloc",
    mp.Test.HASH_KMALLOC: "hash_map_perf kmalloc",
    mp.Test.PERCPU_HASH_KMALLOC: "percpu_hash_map_perf kmalloc",
    mp.Test.LRU_HASH_PREALLOC: "lru_hash_map_perf pre-alloc",
    mp.Test.NOCOMMON_LRU_HASH_PREALLOC: "nocommon_lru_hash_map_perf pre-alloc",
    mp.Test.LPM_KMALLOC: "lpm_perf kmalloc",
    mp.Test.HASH_LOOKUP: "hash_lookup",
    mp.Test.ARRAY_LOOKUP: "array_lookup",
    mp.Test.INNER_LRU_HASH_PREALLOC: "inner_lru_hash_map_perf pre-alloc",
    mp.Test.LRU_HASH_LOOKUP: "lru_hash_lookup_perf pre-alloc",
}

needs_kernel = pytest.mark.skipif(not kernel_available(), reason=KERNEL_SKIP_REASON)


def emulated_programs_available() -> bool:
    from pybpf import system

    return hasattr(system("emulated", cpus=1), "trigger_tracepoint")


needs_emulated_programs = pytest.mark.skipif(
    not emulated_programs_available(),
    reason="the emulated backend has no trigger_tracepoint (interpreter not wired) yet")


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybpf.bench.map_perf", *args],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


# -- the test table and the sample's arithmetic -----------------------------------------------

def test_test_bits_are_the_samples_enum_positions():
    assert [t.bit for t in mp.Test] == [1 << i for i in range(11)]
    assert mp.Test.INNER_LRU_HASH_PREALLOC.bit == 512
    assert mp.Test.HASH_KMALLOC.bit == 4  # "map_perf_test 4" is HASH_KMALLOC


@pytest.mark.parametrize("test", list(mp.Test))
def test_line_format_is_the_samples(test):
    line = mp.TESTS[test].line(5, 1628380)
    m = SAMPLE_LINE.match(line)
    assert m and m["cpu"] == "5" and m["rate"] == "1628380"
    assert m["label"] == EXPECTED_LABELS[test]
    assert m["unit"] == ("lookups" if test in (mp.Test.HASH_LOOKUP, mp.Test.ARRAY_LOOKUP)
                         else "events")


def test_inner_lru_line_matches_the_patch_message():
    line = mp.TESTS[mp.Test.INNER_LRU_HASH_PREALLOC].line(5, 1628380)
    assert line == "5:inner_lru_hash_map_perf pre-alloc 1628380 events per sec"


def test_rate_uses_integer_arithmetic_and_the_lookup_factor():
    assert mp.rate_of(10000, 3_000_000_000) == 3333
    assert mp.rate_of(10000, 1_000_000_000, 64) == 640000


def test_maps_are_declared_as_in_the_sample():
    d = mp.MAP_DEFS
    assert d["hash_map_alloc"].map_flags == MapFlags.NO_PREALLOC
    assert d["percpu_hash_map_alloc"].map_flags == MapFlags.NO_PREALLOC
    assert d["nocommon_lru_hash_map"].map_flags == MapFlags.NO_COMMON_LRU
    assert d["lru_hash_map"].max_entries == 10000
    assert d["lpm_trie_map_alloc"].map_type == MapType.LPM_TRIE
    assert d["array_of_lru_hashs"].max_entries == mp.MAX_NR_CPUS


def test_lru_lookup_start_keys_wrap_like_the_sample():
    assert lru_lookup_keys(32) == [0]
    assert lru_lookup_keys(100) == [0, 32, 64, 96]
    assert lru_lookup_keys(1000)[-1] == 992


def test_connect_address_carries_host_order_magic_and_test_case():
    addr = sockaddr_in6(2, 0x01020304)
    assert len(addr) == 28
    family, = struct.unpack_from("=H", addr, 0)
    assert family == socket.AF_INET6
    assert struct.unpack_from("=HHH", addr, 8) == (0xDEAD, 0xBEEF, 2)
    assert struct.unpack_from("=I", addr, 20) == (0x01020304,)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_program_assembles_with_its_maps(name):
    fds = {m: 3 for m in mp.MAP_DEFS}
    prog = build_program(name, fds)
    assert len(prog.insns) % 8 == 0 and len(prog.insns) > 0


def test_program_without_its_map_is_refused():
    with pytest.raises(KeyError, match="hash_map"):
        build_program("stress_hmap", {})


def test_resizing_touches_only_the_enabled_tests_maps():
    cfg = mp.Config(test_flags=mp.Test.HASH_KMALLOC.bit, num_map_entries=77)
    setup = Setup(None, cfg)
    assert setup.max_entries("hash_map_alloc") == 77
    assert setup.max_entries("hash_map") == 1000
    assert setup.inner_lru_hash_size == 77


# -- argument handling --------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["abc"], "TEST_FLAGS must be an integer"),
    (["4096"], "has bits outside the 11 tests (0x1000): use 0 for all, or a sum of bits"),
    (["4097"], "(1 to 2047; e.g. 512"),
    (["-5"], "TEST_FLAGS -5 is negative"),
    (["1", "-2"], "NUM_PROCS must be >= 0"),
    (["1", "1", "x"], "NUM_ENTRIES must be an integer"),
    (["1", "1", "0", "0"], "MAX_CNT must be >= 1"),
    (["1", "1", "0", "10", "5"], "unrecognized arguments"),
    (["512", "--numa-node", "far"], "--numa-node takes"),
    (["512", "--cpus", "2", "--nodes", "3"], "exceeds --cpus"),
    (["1", "--backend", "kernel", "--cpus", "4"], "declare an emulated machine"),
    (["1", "--backend", "emulated", "--baseline"], "--baseline"),
    (["1", "--c-trigger", "/nonexistent/trigger"], "not an executable"),
    (["1", "--backend", "kernel", "--engine", "jit"], "--engine picks what runs the emulated"),
    (["1", "--engine", "fast"], "invalid choice: 'fast'"),
    (["1", "--backend", "kernel", "--modeled-time", "off"], "--modeled-time off switches"),
    (["1", "--modeled-time", "off", "--profile", "host"], "--profile and --cache-scale shape"),
    (["1", "--modeled-time", "off", "--cache-scale", "0.5"], "which --modeled-time off"),
    (["1", "--modeled-time", "maybe"], "invalid choice: 'maybe'"),
    (["1", "--processes"], "--processes needs --modeled-time off"),
    (["1", "--backend", "kernel", "--processes"], "--processes runs the emulated CPUs"),
])
def test_bad_arguments_print_usage_and_exit_2(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: pybpf map-perf")
    assert message in proc.stderr


@pytest.mark.parametrize("text, flags", [("0", mp.ALL_TESTS_MASK), ("-1", mp.ALL_TESTS_MASK),
                                         ("512", 512), ("0x204", 0x204)])
def test_test_flags_zero_means_all_like_atoi(text, flags):
    parser = mp.configure_parser(argparse.ArgumentParser())
    assert parser.parse_args([text]).test_flags == flags


def test_defaults_are_the_samples():
    parser = mp.configure_parser(argparse.ArgumentParser())
    ns = parser.parse_args([])
    assert (ns.test_flags, ns.num_procs, ns.num_map_entries, ns.max_cnt) == (
        mp.ALL_TESTS_MASK, 0, 0, 10000)
    assert ns.numa_node == "auto"


# -- kernel backend -----------------------------------------------------------------------------

@needs_kernel
def test_kernel_run_prints_one_sample_line_per_test_and_cpu():
    proc = run_cli("0", "2", "0", "30", "--backend", "kernel", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if SAMPLE_LINE.match(line)]
    seen = {(int(SAMPLE_LINE.match(line)["cpu"]), SAMPLE_LINE.match(line)["label"])
            for line in lines}
    assert seen == {(cpu, label) for cpu in (0, 1) for label in EXPECTED_LABELS.values()}
    assert all(int(SAMPLE_LINE.match(line)["rate"]) > 0 for line in lines)


@needs_kernel
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for tools/map_perf_trigger.c")
def test_kernel_c_trigger_is_compared_test_by_test(tmp_path):
    source = pathlib.Path(__file__).parent.parent / "tools" / "map_perf_trigger.c"
    exe = tmp_path / "map_perf_trigger"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(source)], check=True)
    proc = run_cli("4", "1", "0", "50", "--backend", "kernel", "--no-progress",
                   "--c-trigger", str(exe))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^0:hash_map_perf kmalloc \d+ events per sec \(C trigger; \d+ per "
                     r"CPU-second\)$", proc.stdout, re.M)
    assert re.search(rf"^# 0:HASH_KMALLOC: best of {mp.COMPARE_ROUNDS}, pybpf \(\w+ trigger\) "
                     r"vs C: \d+ vs \d+ events/s", proc.stdout, re.M)


@needs_kernel
def test_kernel_json_has_every_test_and_the_inner_maps_flags():
    proc = run_cli("0", "2", "0", "20", "--backend", "kernel", "--json", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["backend"] == "kernel" and not doc["emulated"]
    assert {r["test"] for r in doc["results"]} == {t.name for t in mp.Test}
    inner = [r for r in doc["results"] if r["test"] == "INNER_LRU_HASH_PREALLOC"]
    assert all(r["map_flags"] & MapFlags.NUMA_NODE for r in inner)
    assert all(r["numa_node"] == 0 for r in inner)  # this machine has node 0 only


@needs_kernel
@pytest.mark.parametrize("mode, numa_flag", [("auto", True), ("none", False), ("0", True)])
def test_kernel_inner_maps_carry_bpf_f_numa_node_as_asked(mode, numa_flag):
    cfg = mp.Config(test_flags=mp.Test.INNER_LRU_HASH_PREALLOC.bit, num_procs=2, max_cnt=10,
                    backend="kernel", numa_node=mode, json=True, progress=False)
    result = mp.run(cfg)
    assert sorted(r.cpu for r in result.results) == [0, 1]
    for r in result.results:  # map_flags as /proc/self/fdinfo reports them
        assert bool(r.map_flags & MapFlags.NUMA_NODE) is numa_flag
        assert r.numa_node == (0 if numa_flag else None)


@needs_kernel
def test_kernel_maps_get_the_declared_flags():
    from pybpf import system

    k = system("kernel")
    setup = Setup(k, mp.Config(numa_node="none"))
    try:
        setup.create_maps(0)
        for name, fd in setup.fds.items():
            info = k.map_get_info(fd)
            assert info.map_flags == mp.MAP_DEFS[name].map_flags, name
            assert info.type == mp.MAP_DEFS[name].map_type, name
    finally:
        setup.close()


@needs_kernel
def test_kernel_lpm_trie_is_really_filled():
    from pybpf import system

    k = system("kernel")
    setup = Setup(k, mp.Config(test_flags=mp.Test.LPM_KMALLOC.bit))
    try:
        setup.create_maps(0)
        setup.fill_lpm_trie()
        value = k.map_lookup_elem(setup.fds["lpm_trie_map_alloc"],
                                  struct.pack("=I4B", 32, 192, 168, 0, 1))
        assert struct.unpack("=q", value) == (128,)
    finally:
        setup.close()


# -- emulated backend ---------------------------------------------------------------------------

@needs_emulated_programs
@pytest.mark.parametrize("test", list(mp.Test))
def test_emulated_every_test_runs_a_few_events(test):
    cfg = mp.Config(test_flags=test.bit, num_procs=2, max_cnt=5, backend="emulated", cpus=2,
                    json=True, progress=False)
    result = mp.run(cfg)
    assert sorted(r.cpu for r in result.results) == [0, 1]
    for r in result.results:
        assert r.events == 5 and r.rate > 0
        assert SAMPLE_LINE.match(mp.result_line(r, "emulated"))["rest"].startswith(
            " " + mp.EMULATED_LABEL)


@needs_emulated_programs
@pytest.mark.skipif(native_missing() is not None, reason=str(native_missing()))
def test_emulated_modeled_rates_are_the_same_on_every_engine():
    """--engine changes what runs the programs, not one modeled figure: on two CPUs taking
    turns under the scheduler, every test's rate and per-event breakdown per engine."""
    figures = {}
    for engine in ENGINES:
        cfg = mp.Config(test_flags=mp.ALL_TESTS_MASK, num_procs=2, max_cnt=40,
                        backend="emulated", cpus=2, json=True, progress=False, engine=engine)
        result = mp.run(cfg)
        assert f"on the {engine} engine" in result.notes[-1]
        figures[engine] = sorted((r.cpu, r.test, r.rate, r.breakdown) for r in result.results)
    assert figures["native"] == figures["jit"] == figures["interp"]


def test_native_engine_without_llvmlite_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(mp_config, "native_missing", lambda: "the native tier needs llvmlite")
    cfg = mp.Config(backend="emulated", engine="native")
    assert mp_config.validate(cfg) == "--engine native: the native tier needs llvmlite"


@needs_emulated_programs
def test_emulated_rates_keep_modeled_time_when_it_is_switched_off(monkeypatch):
    """PYBPF_NO_MODELED_TIME does not reach map-perf: its emulated rates are modeled time."""
    monkeypatch.setenv("PYBPF_NO_MODELED_TIME", "1")
    cfg = mp.Config(test_flags=mp.Test.HASH_PREALLOC.bit, num_procs=1, max_cnt=5,
                    backend="emulated", cpus=1, json=True, progress=False)
    assert mp.run(cfg).results[0].rate > 0


@needs_emulated_programs
@pytest.mark.parametrize("engine", ENGINES)
def test_without_modeled_time_the_rates_are_the_hosts(engine, monkeypatch):
    """--modeled-time off: the same programs on a machine without the timing model (its
    clocks stand still, nothing is charged), every CPU's events run, and each rate is its
    host rate, labelled so; the maps end as with the model (the hash test leaves them
    empty). The CPUs' tasks run one after another with no virtual-time scheduler, which
    would only ask at every operation whether to hand over."""
    if engine == "native" and native_missing() is not None:
        pytest.skip(str(native_missing()))
    monkeypatch.setattr(emulated_run, "VirtualTimeScheduler", None)  # not made
    cfg = mp.Config(test_flags=mp.Test.HASH_PREALLOC.bit | mp.Test.LRU_HASH_PREALLOC.bit
                    | mp.Test.INNER_LRU_HASH_PREALLOC.bit, num_procs=2, max_cnt=30,
                    backend="emulated", cpus=2, nodes=2, json=True, progress=False,
                    engine=engine, modeled_time=False)
    result = mp.run(cfg)
    assert "modeled time off" in result.notes[-1] and "host CPU time" in result.notes[-1]
    assert [(r.cpu, r.test) for r in result.results] == [
        (cpu, t.name) for cpu in (0, 1) for t in cfg.tests]
    for r in result.results:
        assert r.events == 30 and r.rate == r.host_rate > 0
        assert r.profile is None and r.breakdown is None
        assert mp.result_line(r, "emulated").endswith(
            f"{mp.EMULATED_LABEL} modeled time off: per second of host CPU time"
            + ("" if r.test != mp.Test.INNER_LRU_HASH_PREALLOC.name
               else " remote 0.0% of 30 accesses"))
    assert result.rcu_samples == [] and result.grace_periods == []


@needs_emulated_programs
def test_without_modeled_time_the_cli_prints_host_rates():
    proc = run_cli("1", "1", "0", "20", "--modeled-time", "off", "--cpus", "1",
                   "--no-progress")
    assert proc.returncode == 0, proc.stderr
    line, note = proc.stdout.splitlines()
    assert SAMPLE_LINE.match(line)["rest"] == (f" {mp.EMULATED_LABEL} modeled time off: "
                                               "per second of host CPU time")
    assert note.startswith("# emulated backend: 1 CPUs on 1 NUMA node(s), modeled time off")


@needs_emulated_programs
@pytest.mark.skipif(not __import__("pybpf.shared").shared.available(),
                    reason="pybpf._shm_maps is not built (no C compiler)")
def test_processes_run_each_cpu_in_a_process_on_shared_maps(capsys):
    """--processes: each CPU's task in a forked child, the maps in a shared segment
    (tests/emulated/maps/test_shared.py: forked processes share its maps; the inner LRU
    test's array of maps is each process's, its inner maps the segment's);
    every CPU's results come back, the lines are printed by CPU, and each test's aggregate
    counts all processes' events over its wall time. Every map of the sample but the array
    of maps is of a type the segment holds."""
    from pybpf.emulated.maps.shared import SHARED_OPS

    assert {m.map_type for m in mp.MAP_DEFS.values()} - {MapType.ARRAY_OF_MAPS} \
        <= set(SHARED_OPS)
    cfg = mp.Config(test_flags=mp.ALL_TESTS_MASK, num_procs=2, max_cnt=40,
                    backend="emulated", cpus=2, progress=False, modeled_time=False,
                    processes=True)
    result = mp.run(cfg)
    assert sorted((r.cpu, r.test) for r in result.results) == sorted(
        (cpu, t.name) for cpu in (0, 1) for t in cfg.tests)
    assert all(r.events == 40 and r.rate == r.host_rate > 0 for r in result.results)
    printed = [line for line in capsys.readouterr().out.splitlines() if SAMPLE_LINE.match(line)]
    n = len(cfg.tests)
    assert [int(SAMPLE_LINE.match(line)["cpu"]) for line in printed] == [0] * n + [1] * n
    assert list(result.aggregate_rates) == [t.name for t in cfg.tests]
    assert all(rate > 0 for rate in result.aggregate_rates.values())
    assert result.notes[0].startswith("all:hash_map_perf pre-alloc ")
    assert "over 2 processes on host CPUs" in result.notes[0]
    assert "80 events in" in result.notes[0]
    # what the processes waited for on the segment, counted in each and summed
    waits = re.search(r"waited (\d+) times for a lock another held and read again (\d+) "
                      r"times as another wrote \(([\d.]+) and ([\d.]+) per 1000 events\)",
                      result.notes[0])
    assert waits and float(waits[3]) == pytest.approx(1000 * int(waits[1]) / 80, abs=0.01)


@needs_emulated_programs
@pytest.mark.skipif(not __import__("pybpf.shared").shared.available(),
                    reason="pybpf._shm_maps is not built (no C compiler)")
def test_a_process_killed_mid_run_is_reported_and_the_others_stop_waiting(monkeypatch):
    """CPU 1's process is killed in its first test: the run ends (the others, waiting for
    it at the next test's barrier, are released and say so) with an error naming it."""
    import signal

    run_test = emulated_run.EmulatedRun.run_test

    def killed_on_cpu_1(self, setup, t, cpu, *args):
        if cpu == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return run_test(self, setup, t, cpu, *args)

    monkeypatch.setattr(emulated_run.EmulatedRun, "run_test", killed_on_cpu_1)
    cfg = mp.Config(test_flags=mp.Test.HASH_PREALLOC.bit | mp.Test.HASH_KMALLOC.bit,
                    num_procs=2, max_cnt=20, backend="emulated", cpus=2, progress=False,
                    modeled_time=False, processes=True, json=True)
    with pytest.raises(RuntimeError) as info:
        mp.run(cfg)
    message = str(info.value)
    assert "CPU 1's process: it died without a report" in message
    assert "CPU 0's process: BrokenBarrierError" in message


def test_emulated_run_refuses_a_machine_without_modeled_time():
    from pybpf import system
    from pybpf.bench.map_perf.emulated_run import EmulatedRun

    untimed = system("emulated", cpus=1, modeled_time=False)
    with pytest.raises(ValueError, match="map-perf's emulated rates: these figures are modeled"):
        EmulatedRun(untimed, mp.Config(backend="emulated"))


def _numa_run(mode: str):
    cfg = mp.Config(test_flags=mp.Test.INNER_LRU_HASH_PREALLOC.bit, num_procs=20, max_cnt=20,
                    backend="emulated", cpus=20, nodes=2, numa_node=mode, parent_cpu=10,
                    json=True, progress=False)
    return {r.cpu: r for r in mp.run(cfg).results}


@needs_emulated_programs
def test_emulated_without_numa_node_cpu0s_map_is_remote():
    rows = _numa_run("none")
    assert rows[0].map_node == 1  # made by the parent on CPU 10
    assert rows[0].remote_share == 1.0
    assert all(rows[cpu].remote_share == 0.0 for cpu in range(1, 20))


@needs_emulated_programs
def test_emulated_numa_auto_makes_every_inner_map_local():
    rows = _numa_run("auto")
    assert all(rows[cpu].remote_share == 0.0 for cpu in range(20))
    assert [rows[cpu].map_node for cpu in range(20)] == [0] * 10 + [1] * 10
    assert all(rows[cpu].map_flags & MapFlags.NUMA_NODE for cpu in range(20))


@needs_emulated_programs
def test_emulated_forced_node_puts_every_inner_map_there():
    rows = _numa_run("1")
    assert all(rows[cpu].map_node == 1 for cpu in range(20))
    assert all(rows[cpu].remote_share == 1.0 for cpu in range(10))
    assert all(rows[cpu].remote_share == 0.0 for cpu in range(10, 20))


@needs_emulated_programs
def test_emulated_output_is_labelled_and_shows_remote_share():
    proc = run_cli("512", "4", "0", "5", "--backend", "emulated", "--cpus", "4", "--nodes", "2",
                   "--numa-node", "none", "--parent-cpu", "2", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    inner = [line for line in proc.stdout.splitlines()
             if line.split(":", 1)[0].isdigit()]
    assert len(inner) == 4
    assert all(mp.EMULATED_LABEL in line and "remote" in line for line in inner)
    assert any(line.startswith("0:") and "remote 100.0%" in line for line in inner)
    assert "inner_lru_hash_map placement" in proc.stdout


def test_plot_without_matplotlib_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    result = mp.RunResult("emulated", mp.Config(), [0], [
        mp.Result(0, "HASH_PREALLOC", "0:x 1 events per sec", 1, "events", 1, 1)])
    with pytest.raises(RuntimeError, match="pip install 'pybpf\\[plot\\]'"):
        plot(result, "/tmp/never.png")


# -- pybpf reproduce ----------------------------------------------------------------------------

def test_reproduce_shows_the_seeds_published_and_modeled_on_the_emulated_backend():
    proc = subprocess.run([sys.executable, "-m", "pybpf", "reproduce", "--backend", "emulated",
                           "--scale", "20000", "--events", "10"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    table = out.split("\n\n")[0]
    for seed, published in (("000", "1.24M -> 1.62M events/s"), ("001", "34 -> 66.7 Gbit/s"),
                            ("002", "2.7M -> 4.7M pps"), ("003", "100k -> 250k events/s")):
        assert re.search(rf"^{seed} .*{re.escape(published)}", table, re.M), table
    assert re.search(r"^000 .*haswell-ep-2s +1\.18-1\.44x +(within|MISS)", table, re.M)
    assert re.search(r"^003 .*sapphire-rapids-2s +1\.90-3\.10x +(within|MISS)", table, re.M)
    assert re.search(r"^002 .*pps +\d\.\d\dx +sapphire-rapids-2s +1\.31-2\.18x +(within|MISS)",
                     table, re.M), table
    assert re.search(r"^001 .*Gbit/s +\d\.\d\dx +sapphire-rapids-2s +1\.47-2\.45x +(within|MISS)",
                     table, re.M), table
    assert "where each CPU's time goes, modeled ns per skb" in out
    assert re.search(r"after: 6\.15, GRO on, napi_skb_cache_get_bulk +\d+\.\d\d +4\.7 +\d+ +64 "
                     r"+1008/1024", out), out
    assert re.search(r"after: 6\.15, GRO off +\d+\.\d\d +2\.4 +\d+ +1 +0/1024", out), out
    assert re.search(r"^002 +GRO off after the patch .*2\.7M -> 2\.4M pps +0\.89x .*"
                     r"0\.67-1\.11x +(within|MISS)$", table, re.M), table
    for seed in re.findall(r"^(\d{3}) .*MISS$", table, re.M):  # a miss says its cause
        assert re.search(rf"^seed {seed} misses: \w+", table, re.M), table
    assert "CPU 0's inner map: 100% remote accesses before the patch" in out
    assert "0% after (BPF_F_NUMA_NODE, node 0)" in out
    m = re.search(r"\((\d+) call_rcu for (\d+) frees\) and (\d+) elements come new from "
                  r"kmalloc; after it, (\d+) call_rcu", out)
    assert m and int(m[1]) >= int(m[2]) > 0 and int(m[4]) == 0
    assert "Where to look next" in out


def test_reproduce_figures_are_the_same_on_every_run():
    args = [sys.executable, "-m", "pybpf", "reproduce", "--backend", "emulated", "--scale",
            "40000", "--events", "5"]
    first, second = (subprocess.run(args, capture_output=True, text=True, timeout=300)
                     for _ in range(2))
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout


def test_reproduce_in_parallel_processes_prints_what_one_after_another_does():
    args = [sys.executable, "-m", "pybpf", "reproduce", "--backend", "emulated", "--scale",
            "40000", "--events", "5"]
    alone, together = (subprocess.run(args + ["--jobs", jobs], capture_output=True, text=True,
                                      timeout=300) for jobs in ("1", "4"))
    assert alone.returncode == together.returncode == 0, together.stderr
    assert alone.stdout == together.stdout


def test_map_perf_jobs_run_in_processes_of_their_own_and_come_back_by_name():
    cfg = {name: mp.Config(test_flags=mp.Test.HASH_KMALLOC.bit, num_procs=2, max_cnt=5,
                           backend="emulated", cpus=2, htab_mem=name, json=True,
                           progress=False)
           for name in ("bpf_mem_alloc", "call_rcu")}
    jobs = {("003", name): c for name, c in cfg.items()}
    done = reproduce.run_map_perf_jobs(jobs, 2)
    assert set(done) == set(jobs)
    for (_, name), result in done.items():
        assert result.alloc_stats["hash_map_alloc"]["mem_design"] == name
        assert [r.rate for r in result.results] == [r.rate for r in mp.run(cfg[name]).results]
    assert reproduce.run_map_perf_jobs(jobs, 1) == {}  # one worker: the seeds run them


def test_reproduce_json_is_one_document_with_every_seeds_figures_and_verdict():
    proc = subprocess.run([sys.executable, "-m", "pybpf", "reproduce", "--backend", "emulated",
                           "--scale", "40000", "--events", "5", "--json"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    seeds = {s["seed"]: s for s in json.loads(proc.stdout)["seeds"]}
    assert set(seeds) == {"000", "001", "002", "003"}
    assert seeds["001"]["published"] == {"before": 34, "after": 66.7,
                                         "ratio": pytest.approx(66.7 / 34)}
    for seed in seeds.values():
        modeled, (lo, hi) = seed["modeled"], seed["target"]
        assert modeled["ratio"] == pytest.approx(modeled["after"] / modeled["before"])
        assert seed["verdict"] == ("within" if lo <= modeled["ratio"] <= hi else "MISS")
        assert (seed["miss_cause"] is None) == (seed["verdict"] == "within")


def test_map_perf_htab_mem_switch_shows_the_allocator_counters():
    cfg = mp.Config(test_flags=mp.Test.HASH_KMALLOC.bit, num_procs=2, max_cnt=5,
                    backend="emulated", cpus=2, htab_mem="call_rcu", json=True, progress=False)
    counters = mp.run(cfg).alloc_stats["hash_map_alloc"]
    assert counters["mem_design"] == "call_rcu"
    assert counters["call_rcu"] == counters["free_calls"] == 2 * 5 * 10
    cfg.htab_mem = "bpf_mem_alloc_call_rcu"
    counters = mp.run(cfg).alloc_stats["hash_map_alloc"]
    assert counters["mem_design"] == "bpf_mem_alloc_call_rcu"
    assert counters["call_rcu"] >= counters["free_calls"] == 2 * 5 * 10


def test_emulated_results_split_each_cpus_time_by_context():
    """Freeing through call_rcu puts RCU's callbacks in softirq on the CPUs and the
    allocator's refills in hardirq; reusing at once leaves nearly all to the task."""
    by_design = {}
    for design in ("bpf_mem_alloc_call_rcu", "bpf_mem_alloc"):
        cfg = mp.Config(test_flags=mp.Test.HASH_KMALLOC.bit, num_procs=2, max_cnt=1500,
                        backend="emulated", cpus=2, nodes=1, htab_mem=design,
                        profile="sapphire-rapids-2s", json=True, progress=False)
        by_design[design] = mp.run(cfg).results
    for results in by_design.values():
        for r in results:
            assert 0 <= sum(r.contexts.values()) < r.elapsed_ns / r.events
    assert all(r.contexts.get("softirq", 0) > 0 and r.contexts.get("hardirq", 0) > 0
               for r in by_design["bpf_mem_alloc_call_rcu"])
    assert all(r.contexts.get("softirq", 0) == 0 for r in by_design["bpf_mem_alloc"])


def test_plot_draws_per_cpu_bars_with_remote_share(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    result = mp.RunResult("emulated", mp.Config(), [0, 1], [
        mp.Result(cpu, "INNER_LRU_HASH_PREALLOC", f"{cpu}:x 1 events per sec", 100 + cpu,
                  "events", 1, 1, local_accesses=cpu, remote_accesses=1 - cpu)
        for cpu in (0, 1)])
    path = tmp_path / "perf.png"
    plot(result, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_emulated_json_document_is_labelled():
    proc = run_cli("0x40", "2", "0", "3", "--backend", "emulated", "--cpus", "2", "--json",
                   "--no-progress")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["emulated"] is True and doc["tests"] == ["LPM_KMALLOC"]
    assert all(mp.EMULATED_LABEL in line and "modeled on host" in line for line in doc["lines"])
    assert all(r["wall_rate"] > 0 for r in doc["results"])


# -- trigger loops: each fires its tracepoint exactly once per call --------------------------

def _counting_program(pid: int) -> list:
    from pybpf.asm import (
        FP,
        R0,
        R1,
        R2,
        add64,
        atomic_add64,
        call,
        exit_,
        jeq,
        jne,
        label,
        ld_map_fd,
        mov64,
        rsh64,
        stw,
    )

    return [call("get_current_pid_tgid"), rsh64(R0, 32), jne(R0, pid, "out"),
            stw(FP, -4, 0), ld_map_fd(R1, "count"), mov64(R2, FP), add64(R2, -4),
            call("map_lookup_elem"), jeq(R0, 0, "out"), mov64(R1, 1),
            atomic_add64(R0, 0, R1), label("out"), mov64(R0, 0), exit_()]


@needs_kernel
@pytest.mark.parametrize("kind", [mp.TRIGGER_PYTHON, mp.TRIGGER_NATIVE])
@pytest.mark.parametrize("test", [mp.Test.HASH_PREALLOC, mp.Test.PERCPU_HASH_PREALLOC,
                                  mp.Test.HASH_KMALLOC, mp.Test.PERCPU_HASH_KMALLOC,
                                  mp.Test.LRU_HASH_PREALLOC, mp.Test.LPM_KMALLOC,
                                  mp.Test.HASH_LOOKUP, mp.Test.ARRAY_LOOKUP])
def test_trigger_loop_fires_the_tracepoint_once_per_event(kind, test):
    from pybpf import system
    from pybpf.asm import assemble, encode
    from pybpf.uapi import ProgType

    if kind == mp.TRIGGER_NATIVE and not trigger.native_available():
        pytest.skip(trigger.native_unavailable_reason())
    k = system("kernel")
    count = k.map_create(MapType.ARRAY, 4, 8, 1)
    insns = encode(assemble(_counting_program(os.getpid())).with_map_fds(lambda m: count))
    prog = k.prog_load(ProgType.TRACEPOINT, insns)
    link = k.attach_tracepoint(prog, "syscalls", f"sys_enter_{mp.TESTS[test].syscall}")
    try:
        kernel_trigger(test, 32, kind)(1000)
    finally:
        k.close(link)
        k.close(prog)
    assert struct.unpack("=Q", k.map_lookup_elem(count, bytes(4))) == (1000,)
    k.close(count)


@pytest.mark.skipif(not trigger.native_available(),
                    reason="the native trigger needs x86-64 Linux and executable memory")
def test_native_connect_loop_walks_the_start_key_like_the_sample():
    entries = 100  # keys 0, 32, 64, 96, then back to 0
    run_n = trigger.native_connect_loop(sockaddr_in6(3, 0), entries - 32)
    run_n(5)
    assert struct.unpack_from("=I", run_n.sockaddr.raw, 24) == (lru_lookup_keys(entries)[1],)
    run_n(3)
    assert struct.unpack_from("=I", run_n.sockaddr.raw, 24) == (0,)


def test_an_atomic_element_count_contended_by_every_cpu_runs_at_its_lines_rate():
    """The 2022 series' element-count patch (86fe28f7692d): with max_entries / 2 at most
    CPUs x 32 the non-preallocated map counts its elements in one atomic_t, which every
    update and delete of every CPU takes; above it, a percpu_counter each CPU keeps to
    itself. Eight CPUs: 1000 entries is the percpu_counter, 500 the shared atomic, whose
    line serves one CPU's RMW at a time."""
    def rate(entries: int) -> float:
        cfg = mp.Config(test_flags=mp.Test.HASH_KMALLOC.bit, num_procs=8, num_map_entries=entries,
                        max_cnt=40, backend="emulated", cpus=8, json=True, progress=False,
                        profile="sapphire-rapids-2s")
        results = mp.run(cfg).results
        return sum(r.rate for r in results) / len(results)

    assert rate(500) < rate(1000) / 2
