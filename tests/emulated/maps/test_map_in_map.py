"""ARRAY_OF_MAPS and HASH_OF_MAPS on the emulated backend: programs get inner maps, and the
outer map's references keep inner maps alive exactly as long as it holds them."""

from __future__ import annotations

import errno
import threading

import pytest

from helpers import u32
from pybpf.uapi import BPF_F_INNER_MAP, MapType


@pytest.mark.parametrize("outer_type", [MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS])
def test_program_lookup_returns_the_inner_map_object(emulated, outer_type):
    template = emulated.map_create(MapType.ARRAY, 4, 4, 1)
    outer = emulated.map_create(outer_type, 4, 4, 4, inner_map_fd=template)
    emulated.map_update_elem(outer, u32(1), u32(template))
    outer_map = emulated.map_from_fd(outer)
    assert outer_map.map_lookup_elem(u32(1)) is emulated.map_from_fd(template)
    assert outer_map.map_lookup_elem(u32(2)) is None


@pytest.mark.parametrize("outer_type", [MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS])
def test_inner_map_lives_while_the_outer_map_holds_it(emulated, outer_type):
    template = emulated.map_create(MapType.ARRAY, 4, 4, 1)
    outer = emulated.map_create(outer_type, 4, 4, 4, inner_map_fd=template)
    inner = emulated.map_create(MapType.ARRAY, 4, 4, 1)
    inner_id = emulated.map_get_info(inner).id
    emulated.map_update_elem(outer, u32(0), u32(inner))
    emulated.map_update_elem(outer, u32(1), u32(inner))
    emulated.close(inner)
    emulated.map_delete_elem(outer, u32(0))
    emulated.close(emulated.map_get_fd_by_id(inner_id))  # one element still holds it
    emulated.close(outer)
    with pytest.raises(OSError) as info:
        emulated.map_get_fd_by_id(inner_id)
    assert info.value.errno == errno.ENOENT


def test_replacing_an_inner_map_drops_the_old_one(emulated):
    template = emulated.map_create(MapType.ARRAY, 4, 4, 2, map_flags=BPF_F_INNER_MAP)
    outer = emulated.map_create(MapType.HASH_OF_MAPS, 4, 4, 4, inner_map_fd=template)
    first = emulated.map_create(MapType.ARRAY, 4, 4, 8, map_flags=BPF_F_INNER_MAP)
    first_id = emulated.map_get_info(first).id
    emulated.map_update_elem(outer, u32(5), u32(first))
    emulated.close(first)
    emulated.map_update_elem(outer, u32(5), u32(template))
    with pytest.raises(OSError) as info:
        emulated.map_get_fd_by_id(first_id)
    assert info.value.errno == errno.ENOENT
    assert emulated.map_lookup_elem(outer, u32(5)) == u32(emulated.map_get_info(template).id)


def test_failed_hash_of_maps_update_takes_no_reference(emulated):
    template = emulated.map_create(MapType.ARRAY, 4, 4, 1)
    outer = emulated.map_create(MapType.HASH_OF_MAPS, 4, 4, 1, inner_map_fd=template)
    inner = emulated.map_create(MapType.ARRAY, 4, 4, 1)
    inner_map = emulated.map_from_fd(inner)
    emulated.map_update_elem(outer, u32(0), u32(template))
    refs = inner_map.refcnt
    with pytest.raises(OSError) as info:
        emulated.map_update_elem(outer, u32(1), u32(inner))  # full
    assert info.value.errno == errno.E2BIG
    assert inner_map.refcnt == refs


def test_the_template_is_a_snapshot_not_a_reference(emulated):
    template = emulated.map_create(MapType.ARRAY, 4, 4, 3)
    outer = emulated.map_create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    emulated.close(template)  # the outer map keeps only the template's shape
    same_shape = emulated.map_create(MapType.ARRAY, 4, 4, 3)
    emulated.map_update_elem(outer, u32(0), u32(same_shape))
    assert emulated.map_lookup_elem(outer, u32(0)) == u32(emulated.map_get_info(same_shape).id)


class _InterleavedHolders(dict):
    """HASH_OF_MAPS' inner-map holder table, where another thread runs ``hook`` in the middle
    of the first ``setdefault``: between finding an inner map's entry and counting on it."""

    def __init__(self, hook):
        super().__init__()
        self.hook = hook

    def setdefault(self, key, default=None):
        held = super().setdefault(key, default)
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return held


def test_hash_of_maps_counts_holders_of_an_inner_map_across_threads(emulated):
    inner = emulated.map_create(MapType.ARRAY, 4, 4, 1)
    outer = emulated.map_create(MapType.HASH_OF_MAPS, 4, 4, 4, inner_map_fd=inner)
    emulated.map_update_elem(outer, u32(1), u32(inner))
    m = emulated.map_from_fd(outer)
    deleter = threading.Thread(target=emulated.map_delete_elem, args=(outer, u32(1)))

    def delete_the_other_holder():
        deleter.start()
        deleter.join(0.2)  # it must wait for the holder table, not slip in between

    holders = _InterleavedHolders(delete_the_other_holder)
    holders.update(m.inner_maps)
    m.inner_maps = holders
    emulated.map_update_elem(outer, u32(2), u32(inner))
    deleter.join()
    inner_map = emulated.map_from_fd(inner)
    assert m.map_lookup_elem(u32(2)) is inner_map
    assert m.inner_maps == {inner_map.id: [inner_map, 1]}


class _ReplacedOnce(dict):
    """The holder table as a program lookup sees it while another thread replaces the key's
    inner map: the first look finds the old map's entry already gone."""

    missed = False

    def _first_look_misses(self) -> bool:
        missed, self.missed = self.missed, True
        return not missed

    def get(self, key, default=None):
        return default if self._first_look_misses() else super().get(key, default)

    def __getitem__(self, key):
        if self._first_look_misses():
            raise KeyError(key)
        return super().__getitem__(key)


def test_hash_of_maps_program_lookup_rereads_a_value_replaced_meanwhile(emulated):
    inner = emulated.map_create(MapType.ARRAY, 4, 4, 1)
    outer = emulated.map_create(MapType.HASH_OF_MAPS, 4, 4, 4, inner_map_fd=inner)
    emulated.map_update_elem(outer, u32(1), u32(inner))
    m = emulated.map_from_fd(outer)
    holders = _ReplacedOnce(m.inner_maps)
    m.inner_maps = holders
    assert m.map_lookup_elem(u32(1)) is emulated.map_from_fd(inner)
