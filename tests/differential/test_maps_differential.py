"""Kernel vs emulated: the same map-operation sequences, every returned byte and errno.

The kernel is the oracle. Each family runs a fixed number of seeded random sequences
(``pybpf.testing.differential``) on both backends and must show zero mismatches; a mismatch
fails with the shrunk sequence and both results. Hash-family sequences also come from
hypothesis. Everything here needs bpf(2) and skips with the reason where it is not allowed.
The session summary prints how many sequences and operations were compared.
"""

from __future__ import annotations

import errno

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import u32
from pybpf.testing import differential as d
from pybpf.uapi import BPF_ANY, BPF_EXIST, BPF_NOEXIST, MapFlags, MapType, syscall_value_size

SEED = 20250
# Sequences per family: enough to reach full maps, eviction, deletes during walks and batch
# resumption in every family, small enough that the whole module stays well under a minute.
SEQUENCES = {
    "hash": 100, "lru": 100, "array": 50, "map_in_map": 50, "queue_stack": 40, "lpm_trie": 60,
    "bloom_filter": 30, "devmap": 30, "cpumap": 15, "sockmap": 30, "create": 80,
}
assert set(SEQUENCES) == set(d.GENERATORS), "every generator family runs in the suite"


def _report(summary: d.Summary, a: str, b: str) -> str:
    shown = "\n\n".join(m.format() for m in summary.mismatches[:3])
    more = len(summary.mismatches) - 3
    return (summary.report(a, b) + "\n\n" + shown
            + (f"\n\n... and {more} more mismatching sequences" if more > 0 else ""))


@pytest.mark.kernel
@pytest.mark.parametrize("family", sorted(SEQUENCES))
def test_random_sequences_give_the_kernels_bytes_and_errnos(family, kernel, emulated,
                                                             differential_tally,
                                                             lookup_programs_off):
    summary = d.compare([family], SEQUENCES[family], SEED, kernel, emulated, "kernel",
                        "emulated", shrink_budget=100, shrink_first=3,
                        programs_off=lookup_programs_off)
    differential_tally.add("kernel", "emulated", family, summary.sequences, summary.ops,
                           len(summary.mismatches))
    if summary.mismatches:
        pytest.fail(_report(summary, "kernel", "emulated"), pytrace=False)


@pytest.mark.kernel
@pytest.mark.parametrize("family", sorted(SEQUENCES))
def test_harness_two_kernel_runs_agree(family, kernel, differential_tally):
    """The harness's own check: sequences are deterministic data and the kernel answers them
    the same way twice (so a kernel-vs-emulated mismatch is never the harness's noise)."""
    other = type(kernel)()
    summary = d.compare([family], 3, SEED, kernel, other, "kernel", "kernel", programs_off=None)
    differential_tally.add("kernel", "kernel", family, summary.sequences, summary.ops,
                           len(summary.mismatches))
    if summary.mismatches:
        pytest.fail(_report(summary, "kernel", "kernel"), pytrace=False)


def test_generated_sequences_are_the_same_for_the_same_seed():
    for family in d.GENERATORS:
        assert d.generate(family, 7, 3, 2).ops == d.generate(family, 7, 3, 2).ops
        assert d.generate(family, 7, 3, 2).ops != d.generate(family, 8, 3, 2).ops


class _FlipFirstLookupByte:
    """A System that answers like the one it wraps, except that every lookup comes back with
    its first byte flipped: the harness must point at exactly that op."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def map_lookup_elem(self, fd, key, flags=0, **kw):
        value = self._inner.map_lookup_elem(fd, key, flags, **kw)
        return bytes([value[0] ^ 1]) + value[1:]


def test_comparator_reports_the_first_differing_op_and_shrinks_to_it(backend):
    k1, k2 = b"\x01\0\0\0", b"\x02\0\0\0"
    ops = [d.Create(0, MapType.HASH, 4, 4, 8, int(MapFlags.ZERO_SEED)),
           d.Update(0, k1, b"aaaa"), d.Update(0, k2, b"bbbb"), d.Walk(0), d.Delete(0, k2),
           d.Lookup(0, k2), d.Lookup(0, k1), d.Walk(0)]
    seq = d.OpSequence("flip", ops)
    flipped = _FlipFirstLookupByte(backend)
    found, compared = d.first_mismatch(seq, backend, flipped, "backend", "flipped")
    assert found is not None and found.index == 6 and compared == 7
    assert found.a == ("ok", b"aaaa".hex()) and found.b == ("ok", b"`aaa".hex())
    assert "<-- here" in found.format()
    shrunk = d.shrink(found, backend, flipped)
    assert shrunk.seq.ops == [ops[0], ops[1], ops[6]]


def test_ids_and_cookies_are_normalised_to_handles(backend):
    """Map-in-map lookups name the inner map by creation slot, sockmap lookups the socket."""
    seq = d.OpSequence("normalise", [
        d.Create(1, MapType.ARRAY, 4, 8, 2),
        d.Create(0, MapType.ARRAY_OF_MAPS, 4, 4, 2, inner=1),
        d.Update(0, b"\0\0\0\0", d.MapRef(1)),
        d.Lookup(0, b"\0\0\0\0"),
        d.Create(2, MapType.SOCKMAP, 4, 8, 2),
        d.OpenSocket(0, "tcp_listen"),
        d.Update(2, b"\x01\0\0\0", d.SockRef(0)),
        d.Lookup(2, b"\x01\0\0\0"),
    ])
    results = d.Runner(backend).run(seq)
    assert results[3] == ("ok", "map#1")
    assert results[7] == ("ok", "sock#0")


def test_failing_write_batch_count_is_elements_done(backend):
    """A write batch that fails on its third key reports two done; one refused before any
    element (no handler: ENOTSUPP) reports none."""
    keys = tuple(bytes([i, 0, 0, 0]) for i in range(4))
    seq = d.OpSequence("batch count", [
        d.Create(0, MapType.HASH, 4, 4, 2),
        d.UpdateBatch(0, keys, (b"vvvv",) * 4),
        d.Create(1, MapType.QUEUE, 0, 4, 2),
        d.UpdateBatch(1, (b"", b""), (b"vvvv", b"vvvv")),
    ])
    results = d.Runner(backend).run(seq)
    assert results[1] == ("err", "E2BIG", 2)
    assert results[3] == ("err", "ENOTSUPP", 0)


# Sequences that once showed (or still show) a kernel/emulated difference, shrunk by the
# harness; each must agree from now on.
RECORDED = {
    "create_with_a_map_flag_no_kernel_defines_gives_einval": [
        d.Create(0, MapType.ARRAY, 4, 8, 1, 1 << 19),
        d.Create(1, MapType.HASH, 4, 8, 1, 1 << 24),
    ],
    "array_of_maps_lookup_batch_token_is_the_last_slot_visited": [
        d.Create(1, MapType.ARRAY, 4, 8, 4, int(MapFlags.INNER_MAP)),
        d.Create(0, MapType.ARRAY_OF_MAPS, 4, 4, 4, inner=1),
        d.Create(3, MapType.ARRAY, 4, 8, 2, int(MapFlags.INNER_MAP)),
        d.Update(0, u32(2), d.MapRef(3)),
        d.LookupBatch(0, 4),
    ],
    "hash_of_maps_update_of_an_existing_key_keeps_its_bucket_position": [
        d.Create(1, MapType.HASH, 4, 8, 4),
        d.Create(2, MapType.HASH, 4, 8, 4),
        d.Create(0, MapType.HASH_OF_MAPS, 4, 4, 2, int(MapFlags.ZERO_SEED), inner=1),
        d.Update(0, u32(0), d.MapRef(1)),
        d.Update(0, u32(2), d.MapRef(1)),
        d.Update(0, u32(0), d.MapRef(2)),
        d.Walk(0),
        d.NextKey(0, u32(2)),
    ],
    "program_reading_a_wronly_prog_map_value_is_refused_with_eacces": [
        d.Create(0, MapType.ARRAY, 4, 8, 4, int(MapFlags.WRONLY_PROG)),
        d.ProgLookup(0, u32(1)),
        d.Create(1, MapType.LRU_HASH, 4, 8, 4, int(MapFlags.WRONLY_PROG)),
        d.ProgLookup(1, u32(1)),
    ],
    # map_create checks the BPF token before map_alloc, where cpumap and sockhash check
    # their attributes (neither has a map_alloc_check): EINVAL, not their E2BIG
    "create_with_a_token_flag_fails_on_the_token_before_cpumap_and_sockhash_checks": [
        d.Create(0, MapType.CPUMAP, 4, 4, 1 << 20, int(MapFlags.TOKEN_FD)),
        d.Create(1, MapType.CPUMAP, 4, 4, 1 << 20),
        d.Create(2, MapType.SOCKHASH, 513, 4, 4, int(MapFlags.TOKEN_FD)),
        d.Create(3, MapType.SOCKHASH, 513, 4, 4),
    ],
    # bpf_map_direct_read: array_map_direct_value_addr has no address for 8 elements
    "program_reading_a_frozen_rdonly_prog_array_of_8_is_refused_with_enotsupp": [
        d.Create(0, MapType.ARRAY, 4, 3, 8, int(MapFlags.RDONLY_PROG)),
        d.Freeze(0),
        d.ProgLookup(0, u32(3)),
        d.Create(1, MapType.ARRAY, 4, 3, 1, int(MapFlags.RDONLY_PROG)),
        d.Freeze(1),
        d.ProgLookup(1, u32(0)),
    ],
    "program_writing_a_rdonly_prog_map_is_refused_with_eacces": [
        d.Create(0, MapType.HASH, 4, 8, 4, int(MapFlags.RDONLY_PROG)),
        d.ProgUpdate(0, u32(1), b"12345678"),
        d.ProgDelete(0, u32(1)),
    ],
}


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_sequence_agrees_with_the_kernel(name, kernel, emulated, differential_tally,
                                                   lookup_programs_off):
    ops = RECORDED[name]
    if lookup_programs_off and any(isinstance(op, d.ProgLookup) for op in ops):
        pytest.skip(f"program-side lookups cannot run: {lookup_programs_off}")
    found, compared = d.first_mismatch(d.OpSequence(name, ops), kernel, emulated, "kernel",
                                       "emulated")
    differential_tally.add("kernel", "emulated", "recorded", 1, compared, found is not None)
    if found is not None:
        pytest.fail(found.format(), pytrace=False)


def _lru_fill_sequence(with_program_lookup: bool) -> d.OpSequence:
    key = [u32(i) for i in range(14)]
    ops: list[d.Op] = [d.Create(0, MapType.LRU_HASH, 4, 4, 8)]
    ops += [d.Update(0, key[i], b"vvvv") for i in range(8)]
    if with_program_lookup:
        ops.append(d.ProgLookup(0, key[0]))
    ops += [d.Update(0, key[i], b"vvvv") for i in range(8, 14)]
    ops.append(d.Walk(0))
    return d.OpSequence("lru fill", ops)


@pytest.mark.kernel
def test_program_lookup_sets_the_lru_reference_bit_so_the_key_survives(kernel, emulated,
                                                                        lookup_programs_off):
    """ProgLookup is the program path: on the kernel (and so on the emulated backend) the
    looked-up key gets a second chance when the LRU evicts, unlike after a syscall lookup."""
    if lookup_programs_off:
        pytest.skip(f"program-side lookups cannot run: {lookup_programs_off}")
    plain = d.Runner(kernel).run(_lru_fill_sequence(False))[-1]
    referenced = d.Runner(kernel).run(_lru_fill_sequence(True))[-1]
    first = (0).to_bytes(4, "little").hex()
    assert first not in plain[1] and first in referenced[1]
    found, _ = d.first_mismatch(_lru_fill_sequence(True), kernel, emulated)
    assert found is None, found.format()


# -- hypothesis: the hash family -------------------------------------------------------------
_HASH_TYPES = [MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH, MapType.LRU_PERCPU_HASH]


@st.composite
def hash_sequences(draw, ncpu: int, programs: bool):
    """One hash-family map (BPF_F_ZERO_SEED: order is compared exactly) and ops on it."""
    mt = draw(st.sampled_from(_HASH_TYPES))
    lru = mt in (MapType.LRU_HASH, MapType.LRU_PERCPU_HASH)
    flags = int(MapFlags.ZERO_SEED)
    if lru and draw(st.booleans()):
        flags |= MapFlags.NO_COMMON_LRU
    if not lru and draw(st.booleans()):
        flags |= MapFlags.NO_PREALLOC
    ks = draw(st.sampled_from([1, 3, 4, 8]))
    vs = draw(st.sampled_from([1, 4, 8, 12]))
    me = draw(st.integers(1, 8))
    pool = draw(st.lists(st.binary(min_size=ks, max_size=ks), min_size=1,
                         max_size=3 * me + 2, unique=True))
    key = st.sampled_from(pool)
    n = syscall_value_size(mt, vs, ncpu)
    value = st.binary(min_size=n, max_size=n)
    pairs = st.lists(st.tuples(key, value), max_size=4)
    op = st.one_of(
        st.builds(d.Update, st.just(0), key, value,
                  st.sampled_from([BPF_ANY, BPF_NOEXIST, BPF_EXIST])),
        st.builds(d.Lookup, st.just(0), key),
        st.builds(d.Delete, st.just(0), key),
        st.builds(d.NextKey, st.just(0), st.one_of(st.just(d.CURSOR), st.none(), key)),
        st.builds(d.LookupAndDelete, st.just(0), key),
        st.builds(d.LookupBatch, st.just(0), st.integers(0, 6), st.booleans(), st.booleans()),
        pairs.map(lambda kv: d.UpdateBatch(0, tuple(k for k, _ in kv),
                                           tuple(v for _, v in kv))),
        st.lists(key, max_size=4).map(lambda ks_: d.DeleteBatch(0, tuple(ks_))),
        st.builds(d.Walk, st.just(0)),
        st.builds(d.SetCpu, st.integers(0, ncpu - 1)),
        *([st.builds(d.ProgLookup, st.just(0), key),
           st.builds(d.ProgDelete, st.just(0), key)] if programs else []),
        # Program updates of per-CPU maps only without slot padding (see ProgUpdate).
        *([st.builds(d.ProgUpdate, st.just(0), key, st.binary(min_size=vs, max_size=vs),
                     st.sampled_from([BPF_ANY, BPF_NOEXIST, BPF_EXIST]))]
          if programs and (mt in (MapType.HASH, MapType.LRU_HASH) or vs % 8 == 0) else []),
    )
    ops = draw(st.lists(op, min_size=5, max_size=60))
    return d.OpSequence("hypothesis hash family", [d.Create(0, mt, ks, vs, me, flags), *ops])


@pytest.mark.kernel
def test_hypothesis_hash_family_sequences_match_the_kernel(kernel, emulated,
                                                           differential_tally,
                                                           lookup_programs_off):
    ncpu = kernel.num_possible_cpus
    tally = [0, 0, 0]

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(hash_sequences(ncpu, lookup_programs_off is None))
    def check(seq):
        found, compared = d.first_mismatch(seq, kernel, emulated, "kernel", "emulated")
        tally[0] += 1
        tally[1] += compared
        tally[2] += found is not None
        assert found is None, found.format()

    try:
        check()
    finally:
        differential_tally.add("kernel", "emulated", "hash (hypothesis)", *tally)


def test_bad_map_handle_has_an_fd_no_backend_opened(emulated):
    """Ops on BAD_MAP exercise EBADF on both backends."""
    res = d.Runner(emulated).run(d.OpSequence("bad", [d.Lookup(d.BAD_MAP, b"\0\0\0\0")]))
    assert res == [("err", errno.errorcode[errno.EBADF])]
