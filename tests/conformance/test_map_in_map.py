"""Conformance of ARRAY_OF_MAPS and HASH_OF_MAPS and their inner maps (kernel/bpf/map_in_map.c,
arraymap.c, hashtab.c), on both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture; differential tests (``kmaps`` and ``emaps``
together) compare orders and hash-dependent results that no simple expectation captures.
"""

from __future__ import annotations

import errno

import pytest

from helpers import err_of, u32
from pybpf.asm import FP, R0, R1, R2, R3, R6
from pybpf.asm import builder as b
from pybpf.errors import VerifierError
from pybpf.system import iter_keys
from pybpf.uapi import (
    BPF_EXIST,
    BPF_F_INNER_MAP,
    BPF_F_ZERO_SEED,
    BPF_NOEXIST,
    ENOTSUPP,
    MapType,
    ProgType,
)

from .conftest import load


def test_array_of_maps_create_checks_inner_map(maps):
    prog_array = maps.create(MapType.PROG_ARRAY, 4, 4, 1)
    assert maps.create_errno(MapType.ARRAY_OF_MAPS, 4, 4, 2,
                             inner_map_fd=prog_array) == ENOTSUPP
    inner = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=inner)
    assert maps.create_errno(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=outer) == errno.EINVAL
    assert maps.create_errno(MapType.ARRAY_OF_MAPS, 4, 4, 2,
                             inner_map_fd=999_999) == errno.EBADF


def test_array_of_maps_value_size_error_wins_over_inner_fd(maps):
    assert maps.create_errno(MapType.ARRAY_OF_MAPS, 4, 8, 2,
                             inner_map_fd=999_999) == errno.EINVAL


def test_array_of_maps_lookup_gives_inner_id_and_holds_a_reference(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    inner = sys.map_create(MapType.ARRAY, 4, 4, 1)
    inner_id = sys.map_get_info(inner).id
    sys.map_update_elem(outer, u32(1), u32(inner))
    sys.close(inner)  # the outer map keeps the inner one alive
    assert sys.map_lookup_elem(outer, u32(1)) == u32(inner_id)
    again = sys.map_get_fd_by_id(inner_id)
    maps.fds.append(again)
    assert err_of(sys.map_lookup_elem, outer, u32(0)) == errno.ENOENT
    sys.map_delete_elem(outer, u32(1))
    assert err_of(sys.map_delete_elem, outer, u32(1)) == errno.ENOENT
    assert err_of(sys.map_delete_elem, outer, u32(2)) == errno.E2BIG


def test_array_of_maps_inner_array_max_entries_must_match_unless_inner_map_flag(maps):
    sys = maps.sys
    strict = maps.create(MapType.ARRAY, 4, 4, 4)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=strict)
    bigger = maps.create(MapType.ARRAY, 4, 4, 8)
    assert err_of(sys.map_update_elem, outer, u32(0), u32(bigger)) == errno.EINVAL
    loose = maps.create(MapType.ARRAY, 4, 4, 4, map_flags=BPF_F_INNER_MAP)
    outer2 = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=loose)
    bigger_loose = maps.create(MapType.ARRAY, 4, 4, 8, map_flags=BPF_F_INNER_MAP)
    sys.map_update_elem(outer2, u32(0), u32(bigger_loose))
    # Flags must still match exactly.
    assert err_of(sys.map_update_elem, outer2, u32(0), u32(bigger)) == errno.EINVAL


def test_array_of_maps_inner_of_other_shape_gives_einval(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 4)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    other_value = maps.create(MapType.ARRAY, 4, 8, 4)
    queue = maps.create(MapType.QUEUE, 0, 4, 4)
    assert err_of(sys.map_update_elem, outer, u32(0), u32(other_value)) == errno.EINVAL
    assert err_of(sys.map_update_elem, outer, u32(0), u32(queue)) == errno.EINVAL
    assert err_of(sys.map_update_elem, outer, u32(0), u32(999_999)) == errno.EBADF


def test_array_of_maps_update_flags_and_range(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 4)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    assert err_of(sys.map_update_elem, outer, u32(0), u32(template), BPF_EXIST) == errno.EINVAL
    assert err_of(sys.map_update_elem, outer, u32(2), u32(template)) == errno.E2BIG
    assert err_of(sys.map_update_elem, outer, u32(2), u32(999_999)) == errno.E2BIG


def test_inner_map_of_any_non_array_type_may_differ_in_max_entries(maps):
    sys = maps.sys
    template = maps.create(MapType.QUEUE, 0, 4, 4)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    bigger = maps.create(MapType.QUEUE, 0, 4, 64)
    sys.map_update_elem(outer, u32(0), u32(bigger))
    assert sys.map_lookup_elem(outer, u32(0)) == u32(sys.map_get_info(bigger).id)


def test_hash_of_maps_create_checks(maps):
    inner = maps.create(MapType.ARRAY, 4, 4, 1)
    assert maps.create_errno(MapType.HASH_OF_MAPS, 4, 8, 4, inner_map_fd=inner) == errno.EINVAL
    prog_array = maps.create(MapType.PROG_ARRAY, 4, 4, 1)
    assert maps.create_errno(MapType.HASH_OF_MAPS, 4, 4, 4, inner_map_fd=prog_array) == ENOTSUPP
    assert maps.create_errno(MapType.HASH_OF_MAPS, 4, 4, 4, inner_map_fd=999_999) == errno.EBADF


def test_hash_of_maps_resolves_the_fd_before_checking_flags(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.HASH_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    assert err_of(sys.map_update_elem, outer, u32(1), u32(999_999), 3) == errno.EBADF
    assert err_of(sys.map_update_elem, outer, u32(1), u32(template), 3) == errno.EINVAL


def test_hash_of_maps_update_rules_and_ids(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.HASH_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    inner = sys.map_create(MapType.ARRAY, 4, 4, 1)
    inner_id = sys.map_get_info(inner).id
    assert err_of(sys.map_update_elem, outer, u32(1), u32(inner), BPF_EXIST) == errno.ENOENT
    sys.map_update_elem(outer, u32(1), u32(inner), BPF_NOEXIST)
    sys.close(inner)  # the outer map holds a reference
    assert sys.map_lookup_elem(outer, u32(1)) == u32(inner_id)
    assert err_of(sys.map_update_elem, outer, u32(1), u32(template), BPF_NOEXIST) \
        == errno.EEXIST
    sys.map_update_elem(outer, u32(2), u32(template))
    assert err_of(sys.map_update_elem, outer, u32(3), u32(template)) == errno.E2BIG
    assert err_of(sys.map_lookup_and_delete_elem, outer, u32(1)) == ENOTSUPP
    assert err_of(sys.map_delete_elem, outer, u32(3)) == errno.ENOENT
    assert err_of(sys.map_lookup_elem, outer, u32(3)) == errno.ENOENT
    again = sys.map_get_fd_by_id(inner_id)
    maps.fds.append(again)
    sys.map_delete_elem(outer, u32(1))
    assert err_of(sys.map_lookup_elem, outer, u32(1)) == errno.ENOENT
    assert sys.map_get_info(again).id == inner_id  # the fd taken by id keeps the inner map


def test_hash_of_maps_order_and_batch_match_the_kernel(kmaps, emaps):
    results = []
    for m in (kmaps, emaps):
        sys = m.sys
        template = m.create(MapType.ARRAY, 4, 4, 1)
        outer = m.create(MapType.HASH_OF_MAPS, 4, 4, 16, inner_map_fd=template,
                         map_flags=BPF_F_ZERO_SEED)
        for i in range(10):
            sys.map_update_elem(outer, u32(i * 37), u32(template))
        walk = list(iter_keys(sys, outer))
        batch = sys.map_lookup_batch(outer, None, 16)
        template_id = sys.map_get_info(template).id
        results.append((walk, batch.keys, batch.end,
                        all(v == u32(template_id) for v in batch.values)))
    assert results[1] == results[0]
    assert results[0][3]


def test_array_of_maps_lookup_batch_skips_empty_slots(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 4, inner_map_fd=template)
    sys.map_update_batch(outer, [u32(1), u32(3)], [u32(template), u32(template)])
    template_id = u32(sys.map_get_info(template).id)
    got = sys.map_lookup_batch(outer, None, 4)
    assert got.keys == [u32(1), u32(3)] and got.values == [template_id, template_id]
    assert got.end


def test_hash_of_maps_replacement_keeps_the_elements_position(kmaps, emaps):
    walks = []
    for m in (kmaps, emaps):
        sys = m.sys
        template = m.create(MapType.ARRAY, 4, 4, 1)
        outer = m.create(MapType.HASH_OF_MAPS, 4, 4, 1, inner_map_fd=template,
                         map_flags=BPF_F_ZERO_SEED)
        other = m.create(MapType.ARRAY, 4, 4, 1)
        bigger = m.create(MapType.HASH_OF_MAPS, 4, 4, 2, inner_map_fd=template,
                          map_flags=BPF_F_ZERO_SEED)
        for fd in (outer, bigger):
            for key in (1, 2):
                try:
                    sys.map_update_elem(fd, u32(key), u32(template))
                except OSError as e:
                    walks.append(e.errno)
            sys.map_update_elem(fd, u32(1), u32(other))  # replaced in place even when full
            walks.append(list(iter_keys(sys, fd)))
    assert walks[len(walks) // 2:] == walks[:len(walks) // 2]


def test_hash_of_maps_lookup_and_delete_batch_gives_ids_and_lets_inner_maps_go(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.HASH_OF_MAPS, 4, 4, 4, inner_map_fd=template)
    inner = sys.map_create(MapType.ARRAY, 4, 4, 1)
    inner_id = sys.map_get_info(inner).id
    sys.map_update_batch(outer, [u32(1), u32(2)], [u32(inner), u32(inner)])
    sys.close(inner)
    got = sys.map_lookup_and_delete_batch(outer, None, 4)
    assert sorted(got.keys) == [u32(1), u32(2)] and got.values == [u32(inner_id)] * 2
    assert err_of(sys.map_get_next_key, outer, None) == errno.ENOENT
    assert map_is_freed(sys, inner_id)


def map_is_freed(sys, map_id: int) -> bool:
    """True when no map has ``map_id``. The kernel frees the id as the last reference goes
    (bpf_map_put), before the call that dropped it returns; only the memory waits for RCU."""
    try:
        sys.close(sys.map_get_fd_by_id(map_id))
    except OSError as e:
        assert e.errno == errno.ENOENT
        return True
    return False


def test_an_inner_percpu_array_must_match_the_templates_max_entries(maps):
    """array_map_meta_equal covers PERCPU_ARRAY too (a differential run found the emulated
    backend storing a 2-entry per-CPU array under a 4-entry template)."""
    sys = maps.sys
    template = maps.create(MapType.PERCPU_ARRAY, 4, 8, 4)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    for max_entries in (2, 8):
        other = maps.create(MapType.PERCPU_ARRAY, 4, 8, max_entries)
        assert err_of(sys.map_update_elem, outer, u32(0), u32(other)) == errno.EINVAL
    same = maps.create(MapType.PERCPU_ARRAY, 4, 8, 4)
    sys.map_update_elem(outer, u32(0), u32(same))
    assert maps.create_errno(MapType.PERCPU_ARRAY, 4, 8, 4, map_flags=BPF_F_INNER_MAP) == \
        errno.EINVAL



# -- programs: the verifier knows an inner map by the outer map's template ---------------------
def inner_map_verdict(maps, template_flags: int, body: list) -> tuple[int, str]:
    """The errno and message of loading a program that looks up the inner map at outer[0]
    of an ARRAY_OF_MAPS (whose template is a 4-entry ARRAY of 16-byte values, with
    ``template_flags``), then runs ``body`` with R1 = that inner map, R2 = fp-16 (key 0, a
    constant); (0, '') when it loads."""
    template = maps.create(MapType.ARRAY, 4, 16, 4, map_flags=template_flags)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    items = [b.st(4, FP, -4, 0), b.ld_map_fd(R1, outer), b.mov64(R2, FP), b.add64(R2, -4),
             b.call("map_lookup_elem"), b.jeq(R0, 0, "out"), b.mov64(R6, R0),
             b.st(4, FP, -16, 0), b.mov64(R1, R6), b.mov64(R2, FP), b.add64(R2, -16), *body,
             b.label("out"), b.mov64(R0, 0), b.exit_()]
    try:
        load(maps, ProgType.SCHED_CLS, items)
    except VerifierError as exc:
        return exc.errno, str(exc)
    return 0, ""


LOOKUP_THEN_READ_8_AT = [b.call("map_lookup_elem"), b.ldx(8, R0, R0, 8), b.exit_()]


def test_an_inner_array_lookup_with_a_constant_in_range_key_is_not_null(maps):
    """can_elide_value_nullness on the template: a constant key below its max_entries needs
    no NULL check, unless the template allows inner arrays of any size (BPF_F_INNER_MAP)."""
    assert inner_map_verdict(maps, 0, LOOKUP_THEN_READ_8_AT) == (0, "")
    err, message = inner_map_verdict(maps, BPF_F_INNER_MAP, LOOKUP_THEN_READ_8_AT)
    assert err == errno.EACCES
    assert "R0 invalid mem access 'map_value_or_null'" in message


def test_an_array_created_with_bpf_f_inner_map_keeps_its_null_check(maps):
    fd = maps.create(MapType.ARRAY, 4, 16, 4, map_flags=BPF_F_INNER_MAP)
    items = [b.st(4, FP, -8, 0), b.ld_map_fd(R1, fd), b.mov64(R2, FP), b.add64(R2, -8),
             *LOOKUP_THEN_READ_8_AT]
    with pytest.raises(VerifierError) as refused:
        load(maps, ProgType.SCHED_CLS, items)
    assert refused.value.errno == errno.EACCES
    assert "R0 invalid mem access 'map_value_or_null'" in str(refused.value)


@pytest.mark.parametrize("label,body,expected,message", [
    ("a read past the value",
     [b.call("map_lookup_elem"), b.jeq(R0, 0, "out"), b.ldx(8, R0, R0, 16), b.exit_()],
     errno.EACCES, "invalid access to map value, value_size=16 off=16 size=8"),
    ("a push into an array", [b.mov64(R3, 0), b.call("map_push_elem"), b.exit_()],
     errno.EINVAL, "cannot pass map_type 2 into func bpf_map_push_elem#87"),
    ("a spin lock in a value without BTF",
     [b.call("map_lookup_elem"), b.jeq(R0, 0, "out"), b.mov64(R1, R0),
      b.call("spin_lock"), b.exit_()],
     errno.EINVAL, "map '' has to have BTF in order to use bpf_spin_lock"),
])
def test_a_programs_inner_map_is_checked_against_the_template(maps, label, body, expected,
                                                              message):
    """bpf_map_meta_alloc's template is what the verifier checks an inner map's uses
    against: its type, sizes and special fields (it has no name)."""
    err, text = inner_map_verdict(maps, 0, body)
    assert err == expected, label
    assert message in text, label
