"""BPF_MAP_CREATE rules, errno for errno, on every backend (the kernel is the oracle).

Each case is one create call and the errno the kernel answers (0: created). The cases follow
kernel-map-semantics.md §2.4 (order of checks), §2.5 (NUMA) and §3 (per-type checks), limited
to what this machine shows: one NUMA node, 4 KiB pages, root with CAP_BPF.
"""

from __future__ import annotations

import errno

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybpf.uapi import ENOTSUPP
from pybpf.uapi import MapFlags as F
from pybpf.uapi import MapType as T

EINVAL, E2BIG, EBADF = errno.EINVAL, errno.E2BIG, errno.EBADF
NODE = F.NUMA_NODE


def case(name, map_type, key_size, value_size, max_entries, flags=0, err=0, **kw):
    return pytest.param(dict(map_type=map_type, key_size=key_size, value_size=value_size,
                             max_entries=max_entries, map_flags=int(flags), **kw), err,
                        id=name)


CREATE_CASES = [
    # -- generic checks, in map_create's order ----------------------------------------------
    case("type_0_unspec_gives_einval", 0, 4, 4, 4, err=EINVAL),
    case("unknown_type_gives_einval", 999, 4, 4, 4, err=EINVAL),
    case("map_extra_on_hash_gives_einval", T.HASH, 4, 4, 4, map_extra=1, err=EINVAL),
    case("map_extra_checked_before_lru_no_prealloc", T.LRU_HASH, 4, 4, 4, F.NO_PREALLOC,
         map_extra=1, err=EINVAL),
    case("rdonly_and_wronly_gives_einval", T.HASH, 4, 4, 4, F.RDONLY | F.WRONLY, err=EINVAL),
    case("rdonly_prog_and_wronly_prog_gives_einval", T.HASH, 4, 4, 4,
         F.RDONLY_PROG | F.WRONLY_PROG, err=EINVAL),
    case("token_fd_flag_without_token_gives_einval", T.HASH, 4, 4, 4, F.TOKEN_FD, err=EINVAL),
    # -- NUMA (§2.5): only node 0 exists here ------------------------------------------------
    case("numa_node_0_ok", T.HASH, 4, 4, 4, NODE, numa_node=0),
    case("numa_node_1_nonexistent_gives_einval", T.HASH, 4, 4, 4, NODE, numa_node=1,
         err=EINVAL),
    case("numa_node_minus_1_means_no_node", T.HASH, 4, 4, 4, NODE, numa_node=-1),
    case("numa_node_ignored_without_flag", T.HASH, 4, 4, 4, numa_node=5),
    case("numa_checked_before_lru_no_prealloc", T.LRU_HASH, 4, 4, 4, NODE | F.NO_PREALLOC,
         numa_node=1, err=EINVAL),
    case("percpu_hash_with_node_gives_einval", T.PERCPU_HASH, 4, 4, 4, NODE, numa_node=0,
         err=EINVAL),
    case("percpu_hash_with_no_node_ok", T.PERCPU_HASH, 4, 4, 4, NODE, numa_node=-1),
    case("lru_percpu_hash_with_node_gives_einval", T.LRU_PERCPU_HASH, 4, 4, 4, NODE,
         numa_node=0, err=EINVAL),
    case("lru_hash_with_node_ok", T.LRU_HASH, 4, 4, 4, NODE, numa_node=0),
    case("lru_no_common_lru_with_node_gives_einval", T.LRU_HASH, 4, 4, 4,
         NODE | F.NO_COMMON_LRU, numa_node=0, err=EINVAL),
    case("array_with_node_0_ok", T.ARRAY, 4, 4, 4, NODE, numa_node=0),
    case("array_with_node_1_gives_einval", T.ARRAY, 4, 4, 4, NODE, numa_node=1, err=EINVAL),
    case("percpu_array_with_node_gives_einval", T.PERCPU_ARRAY, 4, 4, 4, NODE, numa_node=0,
         err=EINVAL),
    # -- map_name: [A-Za-z0-9_.] (kernel isalnum: Latin-1 letters too), NUL within 16 bytes -
    case("name_letters_digits_underscore_dot_ok", T.HASH, 4, 4, 4, map_name=b"good_name.1"),
    case("name_with_dash_gives_einval", T.HASH, 4, 4, 4, map_name=b"bad-name", err=EINVAL),
    case("name_with_space_gives_einval", T.HASH, 4, 4, 4, map_name=b"bad name", err=EINVAL),
    case("name_15_chars_ok", T.HASH, 4, 4, 4, map_name=b"x" * 15),
    case("name_16_chars_without_nul_gives_einval", T.HASH, 4, 4, 4, map_name=b"x" * 16,
         err=EINVAL),
    case("name_latin1_letter_counts_as_alnum", T.HASH, 4, 4, 4, map_name=b"\xe9t\xe9"),
    case("name_latin1_multiplication_sign_gives_einval", T.HASH, 4, 4, 4, map_name=b"\xd7",
         err=EINVAL),
    case("name_checked_after_type_checks", T.LRU_HASH, 4, 4, 4, F.NO_PREALLOC,
         map_name=b"bad-name", err=ENOTSUPP),
    # -- hash family (§3.1) ------------------------------------------------------------------
    case("hash_ok", T.HASH, 4, 8, 16),
    case("hash_key_size_0_gives_einval", T.HASH, 0, 4, 4, err=EINVAL),
    case("hash_value_size_0_gives_einval", T.HASH, 4, 0, 4, err=EINVAL),
    case("hash_max_entries_0_gives_einval", T.HASH, 4, 4, 0, err=EINVAL),
    case("hash_mmapable_gives_einval", T.HASH, 4, 4, 4, F.MMAPABLE, err=EINVAL),
    case("hash_inner_map_flag_gives_einval", T.HASH, 4, 4, 4, F.INNER_MAP, err=EINVAL),
    case("hash_no_common_lru_gives_einval", T.HASH, 4, 4, 4, F.NO_COMMON_LRU, err=EINVAL),
    case("hash_zero_seed_ok_as_root", T.HASH, 4, 4, 4, F.ZERO_SEED),
    case("hash_no_prealloc_ok", T.HASH, 4, 4, 4, F.NO_PREALLOC),
    case("lru_no_prealloc_gives_enotsupp", T.LRU_HASH, 4, 4, 4, F.NO_PREALLOC, err=ENOTSUPP),
    case("lru_percpu_no_prealloc_gives_enotsupp", T.LRU_PERCPU_HASH, 4, 4, 4, F.NO_PREALLOC,
         err=ENOTSUPP),
    case("hash_key_plus_value_at_limit_ok", T.HASH, 4, 4194251, 1, F.NO_PREALLOC),
    case("hash_key_plus_value_over_limit_gives_e2big", T.HASH, 4, 4194252, 1, F.NO_PREALLOC,
         err=E2BIG),
    case("hash_max_entries_over_2_27_gives_e2big", T.HASH, 4, 4, 2**27 + 1, F.NO_PREALLOC,
         err=E2BIG),
    case("hash_max_entries_over_2_31_gives_e2big", T.HASH, 4, 4, 2**31 + 1, F.NO_PREALLOC,
         err=E2BIG),
    case("percpu_hash_value_32k_ok", T.PERCPU_HASH, 4, 32768, 4),
    case("percpu_hash_value_over_32k_gives_e2big", T.PERCPU_HASH, 4, 32769, 4, err=E2BIG),
    # -- arrays (§3.2) -----------------------------------------------------------------------
    case("array_ok", T.ARRAY, 4, 4, 4),
    case("array_key_size_8_gives_einval", T.ARRAY, 8, 4, 4, err=EINVAL),
    case("array_value_size_0_gives_einval", T.ARRAY, 4, 0, 4, err=EINVAL),
    case("array_max_entries_0_gives_einval", T.ARRAY, 4, 4, 0, err=EINVAL),
    case("array_no_prealloc_gives_einval", T.ARRAY, 4, 4, 4, F.NO_PREALLOC, err=EINVAL),
    case("array_mmapable_ok", T.ARRAY, 4, 4, 4, F.MMAPABLE),
    case("array_inner_map_flag_ok", T.ARRAY, 4, 4, 4, F.INNER_MAP),
    case("percpu_array_mmapable_gives_einval", T.PERCPU_ARRAY, 4, 4, 4, F.MMAPABLE,
         err=EINVAL),
    case("percpu_array_inner_map_flag_gives_einval", T.PERCPU_ARRAY, 4, 4, 4, F.INNER_MAP,
         err=EINVAL),
    case("array_preserve_elems_gives_einval", T.ARRAY, 4, 4, 4, F.PRESERVE_ELEMS, err=EINVAL),
    case("perf_event_array_preserve_elems_ok", T.PERF_EVENT_ARRAY, 4, 4, 4, F.PRESERVE_ELEMS),
    case("array_value_int_max_ok_when_unallocated", T.ARRAY, 4, 2**31 - 1, 1),
    case("array_value_over_int_max_gives_e2big", T.ARRAY, 4, 2**31, 1, err=E2BIG),
    case("percpu_array_value_over_32k_gives_e2big", T.PERCPU_ARRAY, 4, 32769, 4, err=E2BIG),
    # -- queue / stack (§3.7) ----------------------------------------------------------------
    case("queue_ok", T.QUEUE, 0, 8, 4),
    case("queue_key_size_4_gives_einval", T.QUEUE, 4, 8, 4, err=EINVAL),
    case("stack_value_size_0_gives_einval", T.STACK, 0, 0, 4, err=EINVAL),
    case("stack_value_over_kmalloc_max_gives_e2big", T.STACK, 0, 4 * 1024 * 1024 + 1, 1,
         err=E2BIG),
    # -- LPM trie (§3.8) ---------------------------------------------------------------------
    case("lpm_ok_with_no_prealloc", T.LPM_TRIE, 8, 4, 4, F.NO_PREALLOC),
    case("lpm_without_no_prealloc_gives_einval", T.LPM_TRIE, 8, 4, 4, err=EINVAL),
    case("lpm_key_size_4_gives_einval", T.LPM_TRIE, 4, 4, 4, F.NO_PREALLOC, err=EINVAL),
    case("lpm_key_size_5_ok", T.LPM_TRIE, 5, 4, 4, F.NO_PREALLOC),
    case("lpm_key_size_260_ok", T.LPM_TRIE, 260, 4, 4, F.NO_PREALLOC),
    case("lpm_key_size_261_gives_einval", T.LPM_TRIE, 261, 4, 4, F.NO_PREALLOC, err=EINVAL),
    # -- bloom filter (§3.9) -----------------------------------------------------------------
    case("bloom_ok", T.BLOOM_FILTER, 0, 4, 4),
    case("bloom_map_extra_hash_count_ok", T.BLOOM_FILTER, 0, 4, 4, map_extra=3),
    case("bloom_map_extra_over_4_bits_gives_einval", T.BLOOM_FILTER, 0, 4, 4, map_extra=16,
         err=EINVAL),
    case("bloom_key_size_4_gives_einval", T.BLOOM_FILTER, 4, 4, 4, err=EINVAL),
    case("bloom_zero_seed_ok", T.BLOOM_FILTER, 0, 4, 4, F.ZERO_SEED),
    # -- ring buffer (§3.10) -----------------------------------------------------------------
    case("ringbuf_one_page_ok", T.RINGBUF, 0, 0, 4096),
    case("ringbuf_not_power_of_2_gives_einval", T.RINGBUF, 0, 0, 12288, err=EINVAL),
    case("ringbuf_under_a_page_gives_einval", T.RINGBUF, 0, 0, 2048, err=EINVAL),
    case("ringbuf_rdonly_gives_einval", T.RINGBUF, 0, 0, 8192, F.RDONLY, err=EINVAL),
    case("ringbuf_key_size_4_gives_einval", T.RINGBUF, 4, 0, 4096, err=EINVAL),
    # -- devmap / cpumap / sockmap (§3.4-3.6) ------------------------------------------------
    case("devmap_ok", T.DEVMAP, 4, 4, 4),
    case("devmap_rdonly_prog_from_user_gives_einval", T.DEVMAP, 4, 4, 4, F.RDONLY_PROG,
         err=EINVAL),
    case("devmap_hash_max_entries_over_2_31_gives_einval", T.DEVMAP_HASH, 4, 4, 2**31 + 1,
         err=EINVAL),
    case("cpumap_ok", T.CPUMAP, 4, 4, 2),
    case("cpumap_rdonly_gives_einval", T.CPUMAP, 4, 4, 4, F.RDONLY, err=EINVAL),
    case("sockmap_ok", T.SOCKMAP, 4, 4, 4),
    case("sockhash_key_over_512_gives_e2big", T.SOCKHASH, 513, 4, 4, err=E2BIG),
]


def create_errno(system, spec: dict) -> int:
    """0 if the map was created (and is closed again), else the errno."""
    try:
        fd = system.map_create(**spec)
    except OSError as exc:
        return exc.errno
    system.close(fd)
    return 0


@pytest.mark.parametrize("spec,err", CREATE_CASES)
def test_map_create(backend, spec, err):
    assert create_errno(backend, spec) == err


def test_create_failure_says_command_and_errno(backend):
    with pytest.raises(OSError) as info:
        backend.map_create(T.LRU_HASH, 4, 4, 4, map_flags=F.NO_PREALLOC)
    assert info.value.errno == ENOTSUPP
    assert "map create" in str(info.value) and "ENOTSUPP" in str(info.value)


# -- what map info shows after create ----------------------------------------------------------

def _info(system, **spec):
    fd = system.map_create(**spec)
    try:
        return system.map_get_info(fd)
    finally:
        system.close(fd)


@pytest.mark.parametrize("max_entries", [1, 3, 4, 5])
def test_no_common_lru_rounds_max_entries_up_to_cpu_multiple(backend, max_entries):
    ncpu = backend.num_possible_cpus
    for map_type in (T.LRU_HASH, T.LRU_PERCPU_HASH):
        info = _info(backend, map_type=map_type, key_size=4, value_size=4,
                     max_entries=max_entries, map_flags=F.NO_COMMON_LRU)
        assert info.max_entries == -(-max_entries // ncpu) * ncpu


def test_common_lru_keeps_max_entries(backend):
    info = _info(backend, map_type=T.LRU_HASH, key_size=4, value_size=4, max_entries=3)
    assert info.max_entries == 3


@pytest.mark.parametrize("flags,kept", [
    (F.NUMA_NODE | F.NO_PREALLOC | F.RDONLY | F.ZERO_SEED,
     F.NUMA_NODE | F.NO_PREALLOC | F.ZERO_SEED),
    (F.WRONLY, 0),
    (F.RDONLY_PROG, F.RDONLY_PROG),
    (F.WRONLY_PROG | F.NO_PREALLOC, F.WRONLY_PROG | F.NO_PREALLOC),
])
def test_map_flags_retained_in_info_except_rdonly_wronly(backend, flags, kept):
    info = _info(backend, map_type=T.HASH, key_size=4, value_size=4, max_entries=4,
                 map_flags=flags)
    assert info.map_flags == kept


def test_devmap_info_shows_kernel_added_rdonly_prog(backend):
    info = _info(backend, map_type=T.DEVMAP, key_size=4, value_size=4, max_entries=4)
    assert info.map_flags == F.RDONLY_PROG


def test_info_reports_create_attributes(backend):
    info = _info(backend, map_type=T.BLOOM_FILTER, key_size=0, value_size=8, max_entries=10,
                 map_name=b"blm", map_extra=3)
    assert (info.type, info.key_size, info.value_size, info.max_entries, info.name,
            info.map_extra) == (T.BLOOM_FILTER, 0, 8, 10, "blm", 3)
    assert info.id > 0


def test_map_ids_are_distinct_and_increasing(backend):
    first = _info(backend, map_type=T.ARRAY, key_size=4, value_size=4, max_entries=1)
    second = _info(backend, map_type=T.ARRAY, key_size=4, value_size=4, max_entries=1)
    assert second.id > first.id


# -- map-in-map creation (§3.3) ----------------------------------------------------------------

@pytest.fixture
def inner_array(backend):
    fd = backend.map_create(T.ARRAY, 4, 4, 4)
    yield fd
    backend.close(fd)


@pytest.mark.parametrize("outer", [T.ARRAY_OF_MAPS, T.HASH_OF_MAPS])
def test_map_in_map_with_array_inner_ok(backend, inner_array, outer):
    fd = backend.map_create(outer, 4, 4, 4, inner_map_fd=inner_array)
    try:
        info = backend.map_get_info(fd)
    finally:
        backend.close(fd)
    assert (info.type, info.key_size, info.value_size, info.max_entries) == (outer, 4, 4, 4)


@pytest.mark.parametrize("outer", [T.ARRAY_OF_MAPS, T.HASH_OF_MAPS])
def test_map_in_map_value_size_8_gives_einval(backend, inner_array, outer):
    assert create_errno(backend, dict(map_type=outer, key_size=4, value_size=8,
                                      max_entries=4, inner_map_fd=inner_array)) == EINVAL


@pytest.mark.parametrize("outer", [T.ARRAY_OF_MAPS, T.HASH_OF_MAPS])
def test_map_in_map_closed_inner_fd_gives_ebadf(backend, outer):
    fd = backend.map_create(T.ARRAY, 4, 4, 4)
    backend.close(fd)
    assert create_errno(backend, dict(map_type=outer, key_size=4, value_size=4,
                                      max_entries=4, inner_map_fd=fd)) == EBADF


@pytest.mark.parametrize("inner_type,err", [
    (T.PROG_ARRAY, ENOTSUPP),
    (T.HASH, 0),
    (T.LRU_HASH, 0),
])
def test_map_in_map_inner_type(backend, inner_type, err):
    inner = backend.map_create(inner_type, 4, 4, 4)
    try:
        assert create_errno(backend, dict(map_type=T.HASH_OF_MAPS, key_size=4, value_size=4,
                                          max_entries=4, inner_map_fd=inner)) == err
    finally:
        backend.close(inner)


def test_map_in_map_inner_that_is_map_in_map_gives_einval(backend, inner_array):
    middle = backend.map_create(T.ARRAY_OF_MAPS, 4, 4, 4, inner_map_fd=inner_array)
    try:
        assert create_errno(backend, dict(map_type=T.ARRAY_OF_MAPS, key_size=4, value_size=4,
                                          max_entries=4, inner_map_fd=middle)) == EINVAL
    finally:
        backend.close(middle)


def test_inner_map_fd_ignored_by_other_types(backend):
    assert create_errno(backend, dict(map_type=T.HASH, key_size=4, value_size=4,
                                      max_entries=4, inner_map_fd=12345)) == 0


# -- kernel vs emulated over random attributes -------------------------------------------------

IN_SCOPE_TYPES = [T.HASH, T.ARRAY, T.PROG_ARRAY, T.PERCPU_HASH, T.PERCPU_ARRAY, T.LRU_HASH,
                  T.LRU_PERCPU_HASH, T.LPM_TRIE, T.DEVMAP, T.SOCKMAP, T.CPUMAP, T.SOCKHASH,
                  T.QUEUE, T.STACK, T.DEVMAP_HASH, T.RINGBUF, T.BLOOM_FILTER]
SIZES = [0, 1, 4, 5, 8, 12, 64, 260, 261]


@st.composite
def create_specs(draw):
    flags = draw(st.sampled_from([0, 0, 0, F.NO_PREALLOC, F.NUMA_NODE, F.NO_COMMON_LRU,
                                  F.ZERO_SEED, F.RDONLY, F.WRONLY_PROG, F.MMAPABLE,
                                  F.INNER_MAP, F.PRESERVE_ELEMS]))
    flags |= draw(st.sampled_from([0, 0, F.NO_PREALLOC, F.NUMA_NODE, F.RDONLY_PROG,
                                   F.WRONLY, F.NO_COMMON_LRU]))
    return dict(map_type=draw(st.sampled_from(IN_SCOPE_TYPES)),
                key_size=draw(st.sampled_from(SIZES)),
                value_size=draw(st.sampled_from(SIZES)),
                max_entries=draw(st.sampled_from([0, 1, 3, 4, 64, 4096])),
                map_flags=int(flags),
                numa_node=draw(st.sampled_from([0, 0, 1, -1])),
                map_name=draw(st.sampled_from([b"", b"ok_name", b"bad-name"])),
                map_extra=draw(st.sampled_from([0, 0, 0, 2, 16])))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spec=create_specs())
def test_random_create_attributes_give_the_kernels_errno(kernel, emulated, spec):
    assert create_errno(emulated, spec) == create_errno(kernel, spec), spec
