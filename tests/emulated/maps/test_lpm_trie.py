"""LPM_TRIE on the emulated backend: lookups against a brute-force longest-prefix match, the
kernel's trie shape, and get_next_key visiting every element once in post-order."""

from __future__ import annotations

import errno
import struct
import threading
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pybpf
from helpers import op_errno, retvals_on_cpu
from pybpf import asm
from pybpf.accelerator import CACHE_MODEL, LPM_TRIE_WALK
from pybpf.asm import FP, R0, R1, R2, R6
from pybpf.asm import builder as b
from pybpf.emulated.machine import timing as timing_module
from pybpf.emulated.maps.lpm_trie import trie_walk
from pybpf.emulated.prog import native
from pybpf.system import iter_keys
from pybpf.uapi import BPF_F_NO_PREALLOC, MapType, ProgType

DATA_SIZE = 2
MAX_PREFIXLEN = 8 * DATA_SIZE


def key(prefixlen: int, bits: int) -> bytes:
    return struct.pack("<I", prefixlen) + bits.to_bytes(DATA_SIZE, "big")


def prefix_of(k: bytes) -> tuple[int, int]:
    """(prefixlen, the prefix's bits) that identify an element."""
    prefixlen = int.from_bytes(k[:4], "little")
    bits = int.from_bytes(k[4:], "big")
    return prefixlen, bits >> (MAX_PREFIXLEN - prefixlen)


def brute_force_match(stored: dict, probe_bits: int, probe_len: int):
    best = None
    for (prefixlen, prefix), value in stored.items():
        if prefixlen <= probe_len and probe_bits >> (MAX_PREFIXLEN - prefixlen) == prefix:
            if best is None or prefixlen > best[0]:
                best = (prefixlen, value)
    return None if best is None else best[1]


elements = st.tuples(st.integers(0, MAX_PREFIXLEN), st.integers(0, 2**MAX_PREFIXLEN - 1))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.booleans(), elements), max_size=40),
       st.lists(elements, min_size=1, max_size=20))
def test_lpm_matches_brute_force_and_keeps_the_kernel_shape(ops, probes):
    sys = pybpf.system("emulated", cpus=1)
    fd = sys.map_create(MapType.LPM_TRIE, 4 + DATA_SIZE, 4, 64, map_flags=BPF_F_NO_PREALLOC)
    trie = sys.map_from_fd(fd)
    stored: dict[tuple[int, int], bytes] = {}
    for n, (insert, (prefixlen, bits)) in enumerate(ops):
        k = key(prefixlen, bits)
        if insert:
            value = struct.pack("<I", n)
            sys.map_update_elem(fd, k, value)
            stored[prefix_of(k)] = value
        else:
            try:
                sys.map_delete_elem(fd, k)
                assert stored.pop(prefix_of(k))
            except OSError as e:
                assert e.errno == errno.ENOENT and prefix_of(k) not in stored
        trie.check_invariants()
    for probe_len, probe_bits in probes:
        want = brute_force_match(stored, probe_bits, probe_len)
        try:
            got = sys.map_lookup_elem(fd, key(probe_len, probe_bits))
        except OSError as e:
            assert e.errno == errno.ENOENT
            got = None
        assert got == want
    walk = [prefix_of(k) for k in iter_keys(sys, fd)]
    assert sorted(walk) == sorted(stored)
    # Post-order: a prefix never comes before a more specific prefix inside it.
    for i, (prefixlen, prefix) in enumerate(walk):
        for later_len, later in walk[i + 1:]:
            if later_len > prefixlen:
                assert later >> (later_len - prefixlen) != prefix


def test_program_lookup_returns_the_live_value(emulated):
    fd = emulated.map_create(MapType.LPM_TRIE, 8, 4, 4, map_flags=BPF_F_NO_PREALLOC)
    emulated.map_update_elem(fd, struct.pack("<I", 8) + bytes([10, 0, 0, 0]), b"aaaa")
    trie = emulated.map_from_fd(fd)
    value = trie.map_lookup_elem(struct.pack("<I", 32) + bytes([10, 1, 2, 3]))
    value[:] = b"bbbb"
    assert emulated.map_lookup_elem(fd, struct.pack("<I", 8) + bytes([10, 0, 0, 0])) == b"bbbb"
    assert op_errno(trie.map_update_elem, struct.pack("<I", 40) + bytes(4), b"cccc",
                    0) == errno.EINVAL


def test_nodes_live_on_the_inserting_cpus_node():
    sys = pybpf.system("emulated", cpus=2, nodes=2)
    fd = sys.map_create(MapType.LPM_TRIE, 8, 4, 4, map_flags=BPF_F_NO_PREALLOC)
    with sys.on_cpu(1):
        sys.map_update_elem(fd, struct.pack("<I", 8) + bytes([10, 0, 0, 0]), b"aaaa")
    trie = sys.map_from_fd(fd)
    with sys.on_cpu(0):
        trie.map_lookup_elem(struct.pack("<I", 32) + bytes([10, 1, 2, 3]))
    assert trie.access_stats.by_cpu() == {0: (0, 1)}


def test_concurrent_inserts_keep_the_trie_whole():
    sys = pybpf.system("emulated", cpus=4)
    fd = sys.map_create(MapType.LPM_TRIE, 4 + DATA_SIZE, 4, 4096, map_flags=BPF_F_NO_PREALLOC)
    trie = sys.map_from_fd(fd)

    results = []  # an assert in a thread would not fail the test: check them here

    def writer(part: int) -> None:
        for n in range(part, 2**MAX_PREFIXLEN, 64):
            results.append(op_errno(trie.map_update_elem, key(MAX_PREFIXLEN, n),
                                    struct.pack("<I", n), 0))

    threads = [threading.Thread(target=writer, args=(part,)) for part in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0] * (4 * (2**MAX_PREFIXLEN // 64))
    trie.check_invariants()
    assert trie.n_entries == len(list(iter_keys(sys, fd))) == 4 * (2**MAX_PREFIXLEN // 64)


@pytest.mark.skipif(LPM_TRIE_WALK is None, reason="pybpf._cache_model is not built")
@settings(max_examples=150, deadline=None)
@given(st.sampled_from([1, 2, 4, 7, 16]), st.data())
def test_the_c_walk_finds_what_the_python_walk_finds(data_size, data):
    """lpm_trie_walk (_lpm_trie.c) against trie_walk, its reference, on tries of random
    prefixes (intermediate nodes among them) of every data size, for random keys, their
    prefixes' own keys and prefix lengths past the data: the same node, or None."""
    max_prefixlen = 8 * data_size
    prefixes = st.tuples(st.integers(0, max_prefixlen), st.integers(0, 2**max_prefixlen - 1))
    sys = pybpf.system("emulated", cpus=1)
    fd = sys.map_create(MapType.LPM_TRIE, 4 + data_size, 4, 64, map_flags=BPF_F_NO_PREALLOC)
    trie = sys.map_from_fd(fd)
    stored = data.draw(st.lists(prefixes, max_size=40))
    for n, (prefixlen, bits) in enumerate(stored):
        sys.map_update_elem(fd, struct.pack("<I", prefixlen) + bits.to_bytes(data_size, "big"),
                            struct.pack("<I", n))
    probes = stored + data.draw(st.lists(
        st.tuples(st.integers(0, max_prefixlen + 2), st.integers(0, 2**max_prefixlen - 1)),
        min_size=1, max_size=30))
    for prefixlen, bits in probes:
        k = struct.pack("<I", prefixlen) + bits.to_bytes(data_size, "big")
        assert LPM_TRIE_WALK(trie.root, k, data_size) is trie_walk(trie.root, k, data_size)


LPM_ENGINES = ["interp", "jit"] + (["native"] if native.native_missing() is None else [])


def key32(prefixlen: int, bits: int) -> bytes:
    """An LPM key of 4 data bytes (an IPv4 prefix)."""
    return struct.pack("<I", prefixlen) + bits.to_bytes(4, "big")


def lpm_lookup_program(probes: list[bytes]) -> list:
    """bpf_map_lookup_elem of each probe (a key written to the stack at fp-8) on map "m"; R0
    sums the first byte of each value found plus 1000 per miss."""
    items = [b.mov64(R6, 0)]
    for n, probe in enumerate(probes):
        items += [b.st(4, FP, -8, int.from_bytes(probe[:4], "little", signed=True)),
                  b.st(4, FP, -4, int.from_bytes(probe[4:], "little", signed=True)),
                  b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -8),
                  b.call("map_lookup_elem"), b.jeq(R0, 0, f"miss{n}"), b.ldx(1, R1, R0),
                  b.add64(R6, R1), b.ja(f"next{n}"), b.label(f"miss{n}"), b.add64(R6, 1000),
                  b.label(f"next{n}")]
    return [*items, b.mov64(R0, R6), b.exit_()]


@pytest.mark.skipif(getattr(CACHE_MODEL, "LpmCore", None) is None,
                    reason="pybpf._cache_model is not built: lookups run in Python")
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 32), st.integers(0, 2**32 - 1)), min_size=1,
                max_size=12),
       st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2**32 - 1)), min_size=1,
                max_size=12),
       st.sampled_from(LPM_ENGINES), st.booleans())
def test_the_c_lookup_helper_does_what_the_python_one_does(entries, probes, engine, modeled):
    """A program's LPM lookups through LpmCore's helper (C) and through the Python helper
    with the Python model (or both without modeled time), on each CPU of a 2-node machine
    whose CPUs inserted: the same R0s, clocks, counts and local/remote accesses."""
    systems = [pybpf.system("emulated", cpus=2, nodes=2, modeled_time=modeled)]
    with mock.patch.object(timing_module, "CACHE_MODEL", None):
        systems.append(pybpf.system("emulated", cpus=2, nodes=2, modeled_time=modeled))
    progs, tries = [], []
    for e in systems:
        fd = e.map_create(MapType.LPM_TRIE, 8, 4, 16, map_flags=BPF_F_NO_PREALLOC)
        for n, (prefixlen, bits) in enumerate(entries):
            with e.on_cpu(n % 2):
                e.map_update_elem(fd, key32(prefixlen, bits), bytes([n, 0, 0, 0]))
        tries.append(e.map_from_fd(fd))
        insns = asm.encode(asm.assemble(lpm_lookup_program(
            [key32(prefixlen, bits) for prefixlen, bits in probes])).with_map_fds(
                lambda name, fd=fd: fd))
        progs.append(e.prog_from_fd(e.prog_load(ProgType.SCHED_CLS, insns)))
    assert "lookup" in tries[0].c_helpers and "lookup" not in tries[1].c_helpers
    for cpu in (0, 1, 0):
        r0s = retvals_on_cpu(systems, progs, cpu, engine)
        assert r0s[0] == r0s[1]
        c_timing, python_timing = (e.machine.timing for e in systems)
        assert (c_timing.clock, c_timing.counts, c_timing.stats) == \
            (python_timing.clock, python_timing.counts, python_timing.stats)
        assert tries[0].access_stats.by_cpu() == tries[1].access_stats.by_cpu()


needs_native_lpm = pytest.mark.skipif(
    native.native_missing() is not None or getattr(CACHE_MODEL, "LpmCore", None) is None,
    reason="the native tier or pybpf._cache_model is not built: no LPM lookup in C")


def counting_program() -> list:
    """Three lookups of 10.1.2.3/32 (a key on the stack at fp-8) on map "m", each adding 1 to
    the second byte of the value found through R0; R0 that byte at the end (1000: a miss)."""
    probe = key32(32, 0x0A010203)
    items = [b.st(4, FP, -8, int.from_bytes(probe[:4], "little", signed=True)),
             b.st(4, FP, -4, int.from_bytes(probe[4:], "little", signed=True))]
    for _ in range(3):
        items += [b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -8),
                  b.call("map_lookup_elem"), b.jeq(R0, 0, "miss"), b.ldx(1, R1, R0, 1),
                  b.add64(R1, 1), b.stx(1, R0, 1, R1)]
    return [*items, b.mov64(R0, R1), b.exit_(), b.label("miss"), b.mov64(R0, 1000), b.exit_()]


def loaded_trie(system, items: list) -> tuple[int, object]:
    """An LPM trie "m" holding 10.0.0.0/8 with the value 7, 0, 0, 0 and ``items`` loaded on it."""
    fd = system.map_create(MapType.LPM_TRIE, 8, 4, 16, map_flags=BPF_F_NO_PREALLOC)
    system.map_update_elem(fd, key32(8, 0x0A000000), bytes([7, 0, 0, 0]))
    insns = asm.encode(asm.assemble(items).with_map_fds(lambda name: fd))
    return fd, system.prog_from_fd(system.prog_load(ProgType.SCHED_CLS, insns))


@needs_native_lpm
@pytest.mark.parametrize("modeled", [False, True])
def test_native_lpm_lookups_run_without_python_and_write_the_value(modeled, monkeypatch):
    """Compiled code calls LpmCore's lookup itself (pybpf_native_lpm_lookup): no callback into
    Python; its R0 points at the trie's value, written through it as the JIT writes it, with
    the same modeled clock."""
    callbacks = []
    callback = native._Run.callback
    monkeypatch.setattr(native._Run, "callback",
                        lambda run, op, *args: callbacks.append(op) or callback(run, op, *args))
    results = {}
    for engine in ("jit", "native"):
        system = pybpf.system("emulated", cpus=2, nodes=2, modeled_time=modeled)
        fd, prog = loaded_trie(system, counting_program())
        r0s = [prog.run(bytearray(64), engine=engine).retval for _ in range(2)]
        results[engine] = (r0s, system.map_lookup_elem(fd, key32(8, 0x0A000000)),
                           system.machine.timing.clock)
    assert results["native"] == results["jit"]
    assert results["native"][:2] == ([3, 6], bytes([7, 6, 0, 0]))
    assert callbacks == []


@needs_native_lpm
def test_a_native_lpm_lookup_raises_what_the_helper_raises():
    """An error in the lookup (here a trie whose root is not a node) leaves the run with the
    exception the helper raises on the JIT."""
    raised = {}
    for engine in ("jit", "native"):
        system = pybpf.system("emulated", modeled_time=False)
        fd, prog = loaded_trie(system, counting_program())
        system.map_from_fd(fd).root = "not a node"
        with pytest.raises(TypeError) as error:
            prog.run(bytearray(64), engine=engine)
        raised[engine] = str(error.value)
    assert raised["native"] == raised["jit"]


@needs_native_lpm
@pytest.mark.parametrize("modeled", [False, True])
def test_native_lookups_in_two_tries_give_each_value_its_own_region(modeled):
    """A value's region is numbered after those the run made before it: writes through the
    pointers of two tries' values (and one of the first again) land each in its own trie."""
    probe = key32(32, 0x0A010203)
    items = [b.st(4, FP, -8, int.from_bytes(probe[:4], "little", signed=True)),
             b.st(4, FP, -4, int.from_bytes(probe[4:], "little", signed=True))]
    for n, (name, byte) in enumerate((("a", 11), ("b", 22), ("a", 33))):
        items += [b.ld_map_fd(R1, name), b.mov64(R2, FP), b.add64(R2, -8),
                  b.call("map_lookup_elem"), b.jeq(R0, 0, "miss"), b.ldx(1, R6, R0, n),
                  b.add64(R6, byte), b.stx(1, R0, n, R6)]
    items += [b.mov64(R0, R6), b.exit_(), b.label("miss"), b.mov64(R0, 1000), b.exit_()]
    results = {}
    for engine in ("jit", "native"):
        system = pybpf.system("emulated", modeled_time=modeled)
        fds = {}
        for name in ("a", "b"):
            fds[name] = system.map_create(MapType.LPM_TRIE, 8, 4, 16,
                                          map_flags=BPF_F_NO_PREALLOC)
            system.map_update_elem(fds[name], key32(8, 0x0A000000), bytes(4))
        insns = asm.encode(asm.assemble(items).with_map_fds(fds.__getitem__))
        prog = system.prog_from_fd(system.prog_load(ProgType.SCHED_CLS, insns))
        r0 = prog.run(bytearray(64), engine=engine).retval
        results[engine] = (r0, [system.map_lookup_elem(fds[name], key32(8, 0x0A000000))
                                for name in ("a", "b")])
    assert results["native"] == results["jit"] == (33, [bytes([11, 0, 33, 0]),
                                                        bytes([0, 22, 0, 0])])
