"""The Pythonic Map layer, on both backends (the ``backend`` fixture): the same calls must give
the same results and the same errno on the kernel and on the emulated backend."""

from __future__ import annotations

import array
import ctypes
import errno
import gc
import ipaddress
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybpf import maps as M
from pybpf.codecs import Int
from pybpf.errors import (
    BPFError,
    BPFPermissionError,
    KeyExistsError,
    KeyNotFoundError,
    MapFullError,
)
from pybpf.maps import MapSpec, UpdateFlags
from pybpf.uapi import MapFlags, MapType


def hash_map(backend, entries=16, **kw):
    return M.HashMap(entries, int, int, key_size=4, value_size=8, system=backend, **kw)


# -- MutableMapping basics --------------------------------------------------------------------

def test_hash_set_get_contains_len_iter(backend):
    with hash_map(backend) as m:
        m[1] = 10
        m[2] = 20
        assert m[1] == 10 and m[2] == 20
        assert 1 in m and 3 not in m
        assert len(m) == 2
        assert sorted(m) == [1, 2]
        assert sorted(m.items()) == [(1, 10), (2, 20)]
        assert sorted(m.values()) == [10, 20]
        assert dict(m) == {1: 10, 2: 20}


def test_missing_key_raises_key_not_found_which_is_a_key_error(backend):
    with hash_map(backend) as m:
        with pytest.raises(KeyError) as info:
            m[5]
        assert isinstance(info.value, KeyNotFoundError)
        assert info.value.errno == errno.ENOENT
        assert m.get(5) is None and m.get(5, "x") == "x"


def test_del_removes_and_del_missing_gives_enoent(backend):
    with hash_map(backend) as m:
        m[1] = 1
        del m[1]
        assert 1 not in m
        with pytest.raises(KeyNotFoundError):
            del m[1]


def test_update_noexist_on_existing_key_gives_eexist(backend):
    with hash_map(backend) as m:
        m[1] = 1
        with pytest.raises(KeyExistsError) as info:
            m.update(1, 2, flags=UpdateFlags.NOEXIST)
        assert info.value.errno == errno.EEXIST
        assert m[1] == 1


@pytest.mark.parametrize("flags", [UpdateFlags.EXIST, 2, "exist"])
def test_update_exist_on_missing_key_gives_enoent_whatever_the_flag_spelling(backend, flags):
    with hash_map(backend) as m:
        with pytest.raises(KeyNotFoundError):
            m.update(9, 1, flags=flags)
        m[9] = 1
        m.update(9, 2, flags=flags)
        assert m[9] == 2


def test_update_with_a_mapping_is_dict_style(backend):
    with hash_map(backend) as m:
        m.update({1: 2, 3: 4})
        m.update([(5, 6)])
        assert dict(m) == {1: 2, 3: 4, 5: 6}


def test_unknown_update_flag_name_is_value_error(backend):
    with hash_map(backend) as m, pytest.raises(ValueError, match="unknown update flag"):
        m.update(1, 1, flags="sometimes")


@pytest.mark.parametrize("flags", [-1, 1 << 64])
def test_update_flags_outside_u64_are_value_error_and_change_nothing(backend, flags):
    with hash_map(backend) as m:
        with pytest.raises(ValueError, match="u64"):
            m.update(1, 1, flags=flags)
        assert dict(m) == {}


def test_array_update_past_max_entries_says_index_out_of_range(backend):
    with M.ArrayMap(4, value=int, value_size=8, system=backend) as m:
        with pytest.raises(MapFullError, match="out of range") as info:
            m[4] = 1
        assert info.value.errno == errno.E2BIG


def test_map_in_map_value_unlike_the_template_is_einval_naming_the_template(backend):
    with M.ArrayOfMaps(2, inner_map=MapSpec("array", 4, 4, 1), system=backend) as outer, \
            M.HashMap(3, key_size=4, value_size=4, system=backend) as wrong:
        with pytest.raises(BPFError, match="template") as info:
            outer[0] = wrong
        assert info.value.errno == errno.EINVAL


def test_array_delete_says_array_elements_cannot_be_deleted(backend):
    with M.ArrayMap(4, value=int, value_size=8, system=backend) as m:
        with pytest.raises(BPFError, match="cannot be deleted") as info:
            del m[1]
        assert info.value.errno == errno.EINVAL


def test_full_hash_map_gives_map_full_e2big(backend):
    with hash_map(backend, entries=2) as m:
        m[1] = 1
        m[2] = 2
        with pytest.raises(MapFullError) as info:
            m[3] = 3
        assert info.value.errno == errno.E2BIG
        m[2] = 22  # replacing an existing key still works when full
        assert m[2] == 22


def test_full_lpm_trie_gives_map_full_enospc(backend):
    """An LPM trie answers a full map with ENOSPC, not E2BIG: the same MapFullError and hint
    (it once said "the batch buffer is too small", the batch lookup's ENOSPC)."""
    with M.LpmTrieMap(1, 4, "<I", system=backend) as m:
        m[(32, bytes([10, 0, 0, 1]))] = 1
        with pytest.raises(MapFullError, match="full") as info:
            m[(32, bytes([10, 0, 0, 2]))] = 2
        assert info.value.errno == errno.ENOSPC


def test_lookup_and_delete_returns_and_removes(backend):
    with hash_map(backend) as m:
        m[4] = 44
        assert m.lookup_and_delete(4) == 44
        assert 4 not in m
        with pytest.raises(KeyNotFoundError):
            m.lookup_and_delete(4)


def test_get_next_key_walks_and_ends_with_enoent(backend):
    with hash_map(backend) as m:
        m[1] = 1
        first = m.get_next_key()
        assert first == 1
        with pytest.raises(KeyNotFoundError):
            m.get_next_key(first)


def test_clear_deletes_everything(backend):
    with hash_map(backend) as m:
        m.update({k: k for k in range(10)})
        m.clear()
        assert len(m) == 0


def test_wrong_key_type_is_type_error_not_a_corrupted_map(backend):
    with hash_map(backend) as m:
        with pytest.raises(TypeError, match="key must be an int"):
            m["one"] = 1
        with pytest.raises(ValueError, match="does not fit in 4 unsigned bytes"):
            m[1 << 40] = 1
        assert len(m) == 0


def test_codec_size_mismatch_is_reported_when_the_map_opens(backend):
    with pytest.raises(ValueError, match="key codec struct '<Q' is 8 bytes but the map's "
                                         "key_size is 4"):
        M.Map(MapSpec(MapType.HASH, 4, 8, 4), backend, key="<Q")


_ops = st.lists(st.tuples(st.sampled_from(["set", "del", "get", "noexist", "exist"]),
                          st.integers(0, 12), st.integers(-2**63, 2**63 - 1)), max_size=40)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_hash_map_behaves_like_a_dict_for_any_op_sequence(backend, ops):
    model: dict[int, int] = {}
    with M.HashMap(16, int, Int(8, signed=True), key_size=4, system=backend) as m:
        for op, key, value in ops:
            if op == "set":
                m[key] = value
                model[key] = value
            elif op == "del":
                with pytest.raises(KeyError) if key not in model else _nothing():
                    del m[key]
                model.pop(key, None)
            elif op == "get":
                assert m.get(key) == model.get(key)
                assert (key in m) == (key in model)
            else:
                flags = UpdateFlags.NOEXIST if op == "noexist" else UpdateFlags.EXIST
                fails = (key in model) == (op == "noexist")
                with pytest.raises(BPFError) if fails else _nothing():
                    m.update(key, value, flags=flags)
                if not fails:
                    model[key] = value
        assert dict(m.items()) == model
        assert len(m) == len(model)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_bad_codec_is_refused_before_the_map_is_created(emulated):
    with hash_map(emulated) as first:
        last_id = first.id
    with pytest.raises(ValueError, match="value codec"):
        M.Map(MapSpec(MapType.HASH, 4, 8, 4), emulated, value="<I")
    with pytest.raises(BPFError) as info:  # no map was made after the first one
        emulated.map_get_next_id(last_id)
    assert info.value.errno == errno.ENOENT


# -- arrays -------------------------------------------------------------------------------

def test_array_has_every_index_and_int_keys_by_default(backend):
    with M.ArrayMap(3, value="<Q", system=backend) as m:
        m[2] = 5
        assert dict(m.items()) == {0: 0, 1: 0, 2: 5}
        assert len(m) == 3


def test_array_delete_gives_einval(backend):
    with M.ArrayMap(3, value="<Q", system=backend) as m:
        with pytest.raises(BPFError) as info:
            del m[0]
        assert info.value.errno == errno.EINVAL


def test_array_out_of_range_update_gives_e2big_and_lookup_enoent(backend):
    with M.ArrayMap(3, value="<I", system=backend) as m:
        with pytest.raises(BPFError) as info:
            m[3] = 1
        assert info.value.errno == errno.E2BIG
        assert 3 not in m


# -- per-CPU --------------------------------------------------------------------------------

def test_percpu_single_value_is_written_to_every_cpu(backend):
    ncpus = backend.num_possible_cpus
    with M.PercpuHashMap(4, int, "<I", key_size=4, system=backend) as m:
        m[1] = 7
        value = m[1]
        assert isinstance(value, M.PerCpuValue)
        assert list(value) == [7] * ncpus
        assert value.sum() == 7 * ncpus and value.max() == 7


def test_percpu_sequence_sets_each_cpu(backend):
    ncpus = backend.num_possible_cpus
    with M.PercpuArrayMap(2, value="<Q", system=backend) as m:
        m[1] = list(range(ncpus))
        assert m[1] == list(range(ncpus))
        assert m[0] == [0] * ncpus
        with pytest.raises(ValueError, match=f"exactly {ncpus} entries"):
            m[0] = [1] * (ncpus + 1)


# -- batches ----------------------------------------------------------------------------------

def test_batch_update_then_batch_lookup_returns_everything(backend):
    with hash_map(backend, entries=100) as m:
        assert m.batch_update(range(50), [k * 3 for k in range(50)]) == 50
        seen = {}
        for keys, values in m.batch_lookup(chunk=16):
            assert len(keys) == len(values) <= 16 or len(keys) > 16  # grown only on ENOSPC
            seen.update(zip(keys, values, strict=True))
        assert seen == {k: k * 3 for k in range(50)}


def test_batch_lookup_arrays_gives_the_same_items_as_arrays(backend):
    with hash_map(backend, entries=64) as m:
        m.batch_update(range(40), [k << 40 for k in range(40)])
        lists = [(list(k), list(v)) for k, v in m.batch_lookup(chunk=16)]
        arrays = list(m.batch_lookup(chunk=16, arrays=True))
        assert all(isinstance(k, array.array) and isinstance(v, array.array)
                   for k, v in arrays)
        assert [(list(k), list(v)) for k, v in arrays] == lists
        assert sorted(k for k, _ in lists for k in k) == list(range(40))


def test_batch_chunk_that_is_not_a_positive_int_is_refused(backend):
    with hash_map(backend) as m:
        with pytest.raises(TypeError, match="chunk must be an int"):
            list(m.batch_lookup(chunk="256"))
        with pytest.raises(ValueError, match="chunk must be positive"):
            list(m.batch_lookup(chunk=0))


def test_batch_cursor_grows_the_chunk_on_enospc(backend):
    # 64 keys in 64 buckets: some bucket holds two (all distinct has odds 64!/64**64, about
    # 3e-27, whatever the seed), which a chunk of 1 cannot take.
    spec = MapSpec(MapType.HASH, 4, 4, 64, key=int, value=int)
    with M.Map.create(spec, backend) as m:
        m.batch_update(range(64), range(64))
        cursor = m.batch_cursor(chunk=1)
        seen = {}
        for keys, values in cursor:
            seen.update(zip(keys, values, strict=True))
        assert seen == {k: k for k in range(64)}
        assert cursor.chunk > 1 and cursor.done


def test_batch_lookup_on_array_uses_key_tokens(backend):
    with M.ArrayMap(10, value=int, value_size=4, system=backend) as m:
        m.batch_update(range(10), range(100, 110))
        chunks = list(m.batch_lookup(chunk=4))
        assert [len(k) for k, _ in chunks] == [4, 4, 2]
        assert [v for _, vs in chunks for v in vs] == list(range(100, 110))


def test_batch_lookup_and_delete_empties_the_map(backend):
    with hash_map(backend, entries=32) as m:
        m.batch_update(range(20), range(20))
        got = sorted(k for keys, _ in m.batch_lookup_and_delete(chunk=8) for k in keys)
        assert got == list(range(20))
        assert len(m) == 0


def test_batch_delete_stops_at_a_missing_key_and_reports_the_count(backend):
    with hash_map(backend) as m:
        m.batch_update([1, 2, 4], [1, 2, 4])
        with pytest.raises(KeyNotFoundError) as info:
            m.batch_delete([1, 2, 3, 4])
        assert info.value.count == 2
        assert dict(m) == {4: 4}


def test_batch_update_needs_as_many_values_as_keys(backend):
    with hash_map(backend) as m, pytest.raises(ValueError, match="as many values as keys"):
        m.batch_update([1, 2], [1])


def test_batch_on_a_percpu_map_gives_percpu_values(backend):
    ncpus = backend.num_possible_cpus
    with M.PercpuHashMap(8, int, "<I", key_size=4, system=backend) as m:
        m.batch_update([1, 2], [5, list(range(ncpus))])
        seen = {k: v for keys, values in m.batch_lookup() for k, v in zip(keys, values,
                                                                          strict=True)}
        assert seen == {1: [5] * ncpus, 2: list(range(ncpus))}


def test_queue_has_no_batch_commands_enotsupp(backend):
    with M.QueueMap(4, "<I", system=backend) as q, pytest.raises(BPFError) as info:
        list(q.batch_lookup())
    assert info.value.errno == 524


# -- map-in-map ------------------------------------------------------------------------------

def test_array_of_maps_takes_maps_and_returns_ids(backend):
    inner_spec = MapSpec(MapType.ARRAY, 4, 4, 2)
    with M.ArrayOfMaps(2, inner_map=inner_spec, system=backend) as outer, \
            M.ArrayMap(2, value=int, value_size=4, system=backend) as inner:
        inner[1] = 77
        outer[0] = inner
        assert outer[0] == inner.id
        assert 1 not in outer  # empty slot: ENOENT
        assert list(outer) == [0]  # iteration skips empty slots, as bpftool does
        with outer.get_inner(0, value_codec=int) as opened:
            assert opened[1] == 77


def test_hash_of_maps_with_an_open_map_as_template(backend):
    with M.ArrayMap(2, value=int, value_size=4, system=backend) as template, \
            M.HashOfMaps(4, inner_map=template, key=int, key_size=4, system=backend) as outer:
        template[0] = 5
        outer[9] = template
        assert dict(outer) == {9: template.id}
        with outer.get_inner(9, value_codec=int) as opened:
            assert opened[0] == 5


# -- queue, stack, LPM, bloom -------------------------------------------------------------------

def test_queue_is_fifo_stack_is_lifo(backend):
    with M.QueueMap(4, "<I", system=backend) as q, M.StackMap(4, "<I", system=backend) as s:
        for v in (1, 2, 3):
            q.push(v)
            s.push(v)
        assert q.peek() == 1 and s.peek() == 3
        assert [q.pop() for _ in range(3)] == [1, 2, 3]
        assert [s.pop() for _ in range(3)] == [3, 2, 1]
        with pytest.raises(KeyNotFoundError):
            q.pop()


def test_full_queue_push_exist_drops_the_oldest(backend):
    with M.QueueMap(2, "<I", system=backend) as q:
        q.push(1)
        q.push(2)
        with pytest.raises(MapFullError):
            q.push(3)
        q.push(3, flags="exist")
        assert [q.pop(), q.pop()] == [2, 3]


def test_queue_key_must_be_none(backend):
    with M.QueueMap(2, "<I", system=backend) as q, pytest.raises(TypeError, match="no keys"):
        q[1]


def test_lpm_trie_longest_prefix_match(backend):
    with M.LpmTrieMap(8, 4, "<I", system=backend) as m:
        m[ipaddress.ip_network("10.0.0.0/8")] = 8
        m[(24, bytes([10, 1, 2, 0]))] = 24
        assert m[(32, bytes([10, 1, 2, 3]))] == 24
        assert m[(32, bytes([10, 9, 9, 9]))] == 8
        assert (32, bytes([11, 0, 0, 0])) not in m
        assert sorted(m) == [(8, bytes([10, 0, 0, 0])), (24, bytes([10, 1, 2, 0]))]


def test_bloom_filter_contains_what_was_added(backend):
    with M.BloomFilterMap(16, "<I", system=backend) as b:
        for v in (1, 2, 3):
            b.add(v)
        assert all(v in b for v in (1, 2, 3))


# -- lifetime, identity, pinning ----------------------------------------------------------------

def test_close_is_idempotent_and_later_ops_give_ebadf(backend):
    m = hash_map(backend)
    m.close()
    m.close()
    assert m.closed
    with pytest.raises(BPFError) as info:
        m[1]
    assert info.value.errno == errno.EBADF
    with pytest.raises(BPFError) as info:
        m[1] = 1
    assert info.value.errno == errno.EBADF


@pytest.mark.parametrize("make, error, match", [
    (lambda s: M.HashMap(4, key_size=4, value_size=8, system="kernel"), TypeError,
     r"system must be a System, e.g. pybpf.system\('kernel'\)"),
    (lambda s: M.HashMap(4, key_size=4, value_size=8, flags="no_prealloc", system=s),
     TypeError, "flags must be an int"),
    (lambda s: M.BloomFilterMap(4, value="<I", nr_hashes="3", system=s), ValueError,
     "nr_hashes must be an int 0..15"),
    (lambda s: M.LpmTrieMap(4, "4", system=s), TypeError, "data_size is the byte count"),
])
def test_typed_map_arguments_of_the_wrong_type_say_what_is_expected(backend, make, error, match):
    with pytest.raises(error, match=match):
        make(backend)


@pytest.mark.parametrize("attrs, label", [
    ({"max_entries": (1 << 32) + 10}, "max_entries"),  # would wrap to 10 in a u32 field
    ({"key_size": -4}, "key_size"),
    ({"map_extra": 1 << 64}, "map_extra"),
])
def test_map_create_attribute_outside_its_field_is_einval_not_wrapped(backend, attrs, label):
    args = {"map_type": MapType.HASH, "key_size": 4, "value_size": 8, "max_entries": 4, **attrs}
    with pytest.raises(BPFError, match=f"{label}=.* is not an unsigned") as info:
        backend.map_create(**args)
    assert info.value.errno == errno.EINVAL


def test_map_from_fd_that_is_not_an_int_is_type_error(backend):
    with pytest.raises(TypeError, match="needs an open map fd"):
        M.Map.from_fd("3", backend)


def test_garbage_collection_closes_the_fd(backend):
    m = hash_map(backend)
    fd, finalizer = m.fd, m._finalizer
    del m
    gc.collect()
    assert not finalizer.alive
    with pytest.raises(OSError) as info:
        backend.map_lookup_elem(fd, bytes(4))
    assert info.value.errno == errno.EBADF


def test_dropping_the_last_reference_closes_the_fd_without_waiting_for_gc(backend):
    gc.disable()  # no reference cycle may keep a dropped Map's fd open
    try:
        m = hash_map(backend)
        m[1] = 1
        assert m[1] == 1 and 2 not in m
        finalizer = m._finalizer
        del m
        assert not finalizer.alive
    finally:
        gc.enable()


def test_info_reports_the_spec(backend):
    with hash_map(backend, name="info_test") as m:
        info = m.info()
        assert (info.type, info.key_size, info.value_size, info.max_entries, info.name) == \
            (MapType.HASH, 4, 8, 16, "info_test")
        assert m.id == info.id


def test_from_id_opens_the_same_map(backend):
    with hash_map(backend) as m:
        m[1] = 2
        with M.Map.from_id(m.id, backend, key=int, value=int) as again:
            assert isinstance(again, M.HashMap)
            assert again[1] == 2 and again.fd != m.fd


def test_pin_and_load_pinned(backend):
    path = f"/sys/fs/bpf/pybpf_test_pin_{os.getpid()}"
    with hash_map(backend) as m:
        m[3] = 4
        m.pin(path)
    try:
        with M.Map.load_pinned(path, backend, key=int, value=int) as again:
            assert again[3] == 4
    finally:
        if backend.name == "kernel":
            os.unlink(path)


def test_freeze_makes_syscall_writes_eperm(backend):
    with hash_map(backend) as m:
        m[1] = 1
        m.freeze()
        with pytest.raises(BPFPermissionError) as info:
            m[2] = 2
        assert info.value.errno == errno.EPERM
        assert m[1] == 1


def test_second_freeze_is_eperm_without_the_run_as_root_hint(backend):
    from pybpf.errors import PERMISSION_HINT

    with hash_map(backend) as m:
        m.freeze()
        with pytest.raises(BPFPermissionError) as info:
            m.freeze()
        assert info.value.errno == errno.EPERM
        assert PERMISSION_HINT not in str(info.value)


def test_pin_outside_bpffs_is_eperm_saying_so_without_the_run_as_root_hint(backend, tmp_path):
    from pybpf.errors import PERMISSION_HINT

    with hash_map(backend) as m, pytest.raises(BPFPermissionError) as info:
        m.pin(str(tmp_path / "pin"))
    assert info.value.errno == errno.EPERM
    assert "bpffs" in str(info.value) and PERMISSION_HINT not in str(info.value)


@pytest.mark.parametrize("node", [0, "auto"])
def test_numa_node_sets_the_numa_flag(backend, node):
    with M.HashMap(4, int, int, key_size=4, value_size=4, numa_node=node,
                   system=backend) as m:
        assert m.info().map_flags & MapFlags.NUMA_NODE


def test_no_numa_node_leaves_the_flag_clear(backend):
    with hash_map(backend) as m:
        assert not m.info().map_flags & MapFlags.NUMA_NODE


def test_create_error_is_the_backends_errno(backend):
    with pytest.raises(BPFError) as info:
        M.Map(MapSpec(MapType.HASH, 4, 8, 0), backend)
    assert info.value.errno == errno.EINVAL


def test_map_create_returns_the_typed_class(backend):
    with M.Map.create(MapSpec("lru_hash", 4, 4, 8), backend) as m:
        assert type(m) is M.LruHashMap


def test_typed_class_refuses_a_spec_of_another_type(backend):
    with pytest.raises(ValueError, match="use Map.create"):
        M.Map.__init__(M.HashMap.__new__(M.HashMap), MapSpec(MapType.ARRAY, 4, 4, 1), backend)


def test_ctypes_struct_values(backend):
    class Pair(ctypes.Structure):
        _fields_ = [("a", ctypes.c_uint32), ("b", ctypes.c_uint32)]

    with M.HashMap(4, ctypes.c_uint32, Pair, system=backend) as m:
        m[1] = Pair(5, 6)
        got = m[1]
        assert (got.a, got.b) == (5, 6)


def test_raw_bytes_by_default(backend):
    with M.Map(MapSpec(MapType.HASH, 2, 3, 4), backend) as m:
        m[b"ab"] = b"xyz"
        m[0x0102] = b"\x01\x02\x03"
        assert m[b"ab"] == b"xyz" and m[b"\x02\x01"] == b"\x01\x02\x03"


def test_handles_compare_by_identity(backend):
    with hash_map(backend) as a, hash_map(backend) as b:
        assert a != b and a == a and len({a, b}) == 2


# -- MapSpec ---------------------------------------------------------------------------------

def test_mapspec_numa_node_sets_the_flag_and_none_does_not():
    assert MapSpec(MapType.HASH, 4, 4, 1, numa_node=0).map_flags & MapFlags.NUMA_NODE
    assert not MapSpec(MapType.HASH, 4, 4, 1).map_flags & MapFlags.NUMA_NODE


@pytest.mark.parametrize("kwargs, error", [
    ({"key_size": -1}, "key_size must be a non-negative int"),
    ({"numa_node": "near"}, "numa_node must be None, 'auto' or a node number"),
    ({"type": "nonsense"}, "unknown map type 'nonsense'"),
])
def test_mapspec_rejects_bad_fields(kwargs, error):
    fields = {"type": MapType.HASH, "key_size": 4, "value_size": 4, "max_entries": 1, **kwargs}
    with pytest.raises(ValueError, match=error):
        MapSpec(**fields)


def test_mapspec_is_frozen():
    spec = MapSpec(MapType.HASH, 4, 4, 1)
    with pytest.raises(AttributeError):
        spec.key_size = 8
