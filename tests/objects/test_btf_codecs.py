"""Codecs from BTF types: values decode as the C declared them, encode back, and bad
values are clear errors; maps made from an object's specs give typed keys and values."""

from __future__ import annotations

import enum
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybpf.bpf_object import ObjectSpec
from pybpf.btf import (
    Array,
    Btf,
    Datasec,
    Enum,
    Enum64,
    EnumValue,
    Float,
    Int,
    Member,
    Ptr,
    Struct,
    Typedef,
    Union,
    Var,
    VarSecinfo,
)
from pybpf.btf.codecs import btf_codec
from pybpf.codecs import IntCodec
from pybpf.maps import Map

U8, S16, U32, S32, U64, BOOL, CHAR, DOUBLE = range(1, 9)
BASE = [Int("unsigned char", 1, 0, 0, 8), Int("short", 2, 1, 0, 16),
        Int("unsigned int", 4, 0, 0, 32), Int("int", 4, 1, 0, 32),
        Int("unsigned long long", 8, 0, 0, 64), Int("_Bool", 1, 4, 0, 8),
        Int("char", 1, 1, 0, 8), Float("double", 8)]


def codec(*records, type_id: int | None = None):
    btf = Btf([*BASE, *records])
    return btf_codec(btf, type_id or len(btf) - 1)


def test_integers_are_ints_of_their_size_and_sign():
    assert isinstance(codec(type_id=U32), IntCodec)  # the C accelerator runs it natively
    assert codec(type_id=S32).decode(b"\xff\xff\xff\xff") == -1
    assert codec(type_id=U64).encode(2**64 - 1) == b"\xff" * 8
    assert codec(Typedef("__u16", S16)).decode(b"\x00\x80") == -32768
    assert codec(type_id=BOOL).decode(b"\x01") is True
    with pytest.raises(ValueError, match="does not fit"):
        codec(type_id=U32).encode(-1)


def test_enums_decode_to_their_names():
    c = codec(Enum("colour", 4, (EnumValue("RED", 0), EnumValue("BLUE", 7))))
    value = c.decode(struct.pack("<I", 7))
    assert isinstance(value, enum.IntEnum) and value.name == "BLUE" and value == 7
    assert c.decode(struct.pack("<I", 3)) == 3  # a value the enum does not name
    assert c.encode("RED") == bytes(4) and c.encode(7) == struct.pack("<I", 7)
    big = codec(Enum64("big", 8, (EnumValue("NEG", -5),), signed=True))
    assert big.decode(struct.pack("<q", -5)).name == "NEG"
    with pytest.raises(ValueError, match="'GREEN' is not one of RED, BLUE"):
        c.encode("GREEN")


def test_floats_pointers_and_char_arrays():
    assert codec(type_id=DOUBLE).decode(struct.pack("<d", 1.5)) == 1.5
    assert codec(Ptr(type_id=U32)).decode(struct.pack("<Q", 0xFFFF0000)) == 0xFFFF0000
    name = codec(Array("", CHAR, U32, 6))
    assert name.decode(b"abc\0\0\0") == b"abc\0\0\0"
    assert name.encode(b"hi") == b"hi\0\0\0\0" and name.encode("hi") == b"hi\0\0\0\0"
    with pytest.raises(ValueError, match="holds 6 bytes"):
        name.encode(b"too long!")
    words = codec(Array("", S16, U32, 3))
    assert words.decode(struct.pack("<3h", -1, 0, 1)) == (-1, 0, 1)
    with pytest.raises(ValueError, match="needs 3 elements"):
        words.encode([1, 2])


PAIR = Struct("pair", 16, (Member("key", U32, 0), Member("value", U64, 64)))


def test_structs_are_hashable_named_tuples():
    c = codec(PAIR)
    value = c.decode(struct.pack("<IIQ", 1, 0xDEAD, 2))  # padding is not a field
    assert value == (1, 2) and value.key == 1 and type(value).__name__ == "pair"
    assert {value: "a struct key works in a dict"}[c.decode(c.encode(value))]
    assert c.encode((1, 2)) == struct.pack("<IIQ", 1, 0, 2)
    assert c.encode({"value": 3}) == struct.pack("<IIQ", 0, 0, 3)
    with pytest.raises(ValueError, match="has no field colour"):
        c.encode({"colour": 1})
    with pytest.raises(ValueError, match="needs 2 fields"):
        c.encode((1,))
    with pytest.raises(TypeError, match="must be a pair, a tuple, a dict"):
        c.encode(5)


def test_anonymous_members_are_flattened_and_unions_take_one_member():
    inner = Union("", 4, (Member("as_int", S32, 0), Member("as_bytes", 11, 0)))
    outer = Struct("tagged", 8, (Member("tag", U32, 0), Member("", 10, 32)))
    c = codec(outer, inner, Array("", U8, U32, 4), type_id=9)
    value = c.decode(struct.pack("<Ii", 1, -2))
    assert value._fields == ("tag", "as_int", "as_bytes")
    assert value.as_int == -2 and value.as_bytes == (0xFE, 0xFF, 0xFF, 0xFF)
    assert c.encode(value) == struct.pack("<Ii", 1, -2)
    union = codec(outer, inner, Array("", U8, U32, 4), type_id=10)
    assert union.encode({"as_int": 5}) == struct.pack("<i", 5)
    with pytest.raises(ValueError, match="is a union: give one member"):
        union.encode({"as_int": 5, "as_bytes": (0, 0, 0, 0)})


def test_bitfields_read_and_write_by_bit():
    flags = Struct("flags", 4, (Member("on", U32, 0, 1), Member("level", S32, 1, 3),
                                Member("mode", U32, 4, 4)), kind_flag=True)
    c = codec(flags)
    value = c.decode(struct.pack("<I", 0b1010_111_1))
    assert (value.on, value.level, value.mode) == (1, -1, 0b1010)
    assert c.encode(value) == struct.pack("<I", 0b1010_111_1)
    assert c.encode({"level": 3}) == struct.pack("<I", 0b0110)
    with pytest.raises(ValueError, match="3-bit bitfield\\) takes -4..3, got 4"):
        c.encode({"level": 4})


def test_datasec_is_a_tuple_of_its_variables():
    c = codec(Var("count", U64, 1), Var("ready", BOOL, 1),
              Datasec(".data", 16, (VarSecinfo(9, 0, 8), VarSecinfo(10, 8, 1))))
    value = c.decode(struct.pack("<Q?7x", 9, True))
    assert value == (9, True) and value.ready is True


@pytest.fixture(scope="module")
def corpus_codecs(build_object) -> list:
    out = []
    for name in ("btf_maps", "globals"):
        spec = ObjectSpec.from_file(build_object(name))
        for m in spec.maps.values():
            out += [c for c in (m.spec.key, m.spec.value) if c is not None]
    return out


@given(st.data())
def test_decoding_is_stable_through_encoding(corpus_codecs, data):
    c = data.draw(st.sampled_from(corpus_codecs))
    raw = data.draw(st.binary(min_size=c.size, max_size=c.size))
    value = c.decode(raw)
    assert c.decode(c.encode(value)) == value
    assert len(c.encode(value)) == c.size


def test_maps_of_an_object_spec_give_typed_values(build_object):
    from pybpf import system

    spec = ObjectSpec.from_file(build_object("btf_maps"))
    sys_ = system("emulated")
    with Map.create(spec.maps["points"].spec, sys_) as points, \
            Map.create(spec.maps["routes"].spec, sys_) as routes:
        points[1] = {"x": 3, "y": -4, "weight": 5}
        assert points[1] == (3, -4, 5) and points[1].y == -4
        routes[(24, (10, 0, 0, 0))] = 7
        key, = routes.keys()
        assert key.prefixlen == 24 and key.addr == (10, 0, 0, 0)
