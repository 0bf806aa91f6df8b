"""Key/value codecs: exact sizes, round trips, and errors that say the size and the fix."""

from __future__ import annotations

import array
import ctypes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybpf.codecs import (
    KIND_BYTES,
    KIND_GENERIC,
    KIND_INT,
    KIND_UINT,
    BytesCodec,
    CtypesCodec,
    Int,
    IntCodec,
    MapFdCodec,
    NoKeyCodec,
    PerCpuCodec,
    PerCpuValue,
    StructCodec,
    make_codec,
)


class Pair(ctypes.Structure):
    _fields_ = [("a", ctypes.c_uint32), ("b", ctypes.c_uint16), ("c", ctypes.c_uint16)]


def test_bytes_codec_takes_exact_size_and_ints():
    c = BytesCodec(4, "key")
    assert c.encode(b"abcd") == b"abcd"
    assert c.encode(bytearray(b"wxyz")) == b"wxyz"
    assert c.encode(0x01020304) == b"\x04\x03\x02\x01"
    assert c.decode(b"abcd") == b"abcd"
    assert c.kind == KIND_BYTES


def test_bytes_codec_wrong_length_says_expected_size_and_fix():
    with pytest.raises(ValueError, match=r"key must be exactly 4 bytes, got 3: pad or trim"):
        BytesCodec(4, "key").encode(b"abc")


def test_bytes_codec_wrong_type_is_type_error():
    with pytest.raises(TypeError, match="bytes of length 4 or an int"):
        BytesCodec(4, "key").encode("abcd")


@given(size=st.sampled_from([1, 2, 3, 4, 8, 16]), data=st.data())
def test_unsigned_int_codec_round_trips(size, data):
    value = data.draw(st.integers(0, (1 << (8 * size)) - 1))
    c = IntCodec(size)
    raw = c.encode(value)
    assert len(raw) == size
    assert raw == value.to_bytes(size, "little")
    assert c.decode(raw) == value


@given(size=st.sampled_from([1, 2, 4, 8]), data=st.data())
def test_signed_int_codec_round_trips(size, data):
    value = data.draw(st.integers(-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1))
    c = Int(size, signed=True)
    assert c.decode(c.encode(value)) == value


@given(size=st.sampled_from([1, 2, 4, 8]), signed=st.booleans(), data=st.data())
def test_int_codec_encode_many_and_decode_many_match_one_by_one(size, signed, data):
    lo, hi = ((-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if signed
              else (0, (1 << (8 * size)) - 1))
    values = data.draw(st.lists(st.integers(lo, hi), max_size=20))
    c = IntCodec(size, signed)
    packed = c.encode_many(values)
    assert packed == b"".join(c.encode(v) for v in values)
    assert c.decode_many(bytearray(packed) + b"\xff" * 8, len(values)) == values


@given(size=st.sampled_from([1, 2, 4, 8]), signed=st.booleans(), data=st.data())
def test_int_codec_decode_array_matches_decode_many(size, signed, data):
    lo, hi = ((-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if signed
              else (0, (1 << (8 * size)) - 1))
    values = data.draw(st.lists(st.integers(lo, hi), max_size=20))
    c = IntCodec(size, signed)
    got = c.decode_array(bytearray(c.encode_many(values)) + b"\x01" * 8, len(values))
    assert isinstance(got, array.array) and got.itemsize == size
    assert list(got) == values


def test_decode_array_of_other_codecs_is_a_list():
    assert StructCodec("<HH").decode_array(b"\x01\0\x02\0", 1) == [(1, 2)]


def test_int_codec_out_of_range_names_the_range():
    with pytest.raises(ValueError, match=r"256 does not fit in 1 unsigned bytes \(range 0..255\)"):
        IntCodec(1).encode(256)
    with pytest.raises(ValueError, match=r"range -128..127"):
        IntCodec(1, signed=True).encode(-129)
    with pytest.raises(ValueError, match="does not fit"):
        IntCodec(4).encode_many([1, -1])


def test_int_codec_kinds_tell_the_accelerator_what_it_can_run_natively():
    assert IntCodec(4).kind == KIND_UINT
    assert IntCodec(8, signed=True).kind == KIND_INT
    assert IntCodec(16).kind == KIND_GENERIC


def test_struct_codec_one_field_is_a_bare_value_several_a_tuple():
    one = StructCodec("<I")
    assert one.encode(5) == b"\x05\0\0\0" and one.decode(b"\x05\0\0\0") == 5
    two = StructCodec("<IH")
    assert two.size == 6
    assert two.decode(two.encode((1, 2))) == (1, 2)
    assert two.decode_many(two.encode((1, 2)) + two.encode((3, 4)), 2) == [(1, 2), (3, 4)]


def test_struct_codec_wrong_shape_is_type_error_naming_the_format():
    with pytest.raises(TypeError, match=r"does not fit struct format '<IH' \(a tuple of 2"):
        StructCodec("<IH").encode(1)


@pytest.mark.parametrize("value", [-1, 1 << 32, (1 << 32, 0)])
def test_struct_codec_number_out_of_its_field_range_is_value_error(value):
    codec = StructCodec("<I" if isinstance(value, int) else "<IH")
    with pytest.raises(ValueError, match="does not fit struct format"):
        codec.encode(value)


@pytest.mark.parametrize("ctype,value", [(ctypes.c_uint32, 1 << 32), (ctypes.c_uint32, -1),
                                         (ctypes.c_int8, 128), (ctypes.c_uint8 * 2, [1, 300])])
def test_ctypes_codec_refuses_an_int_ctypes_would_wrap(ctype, value):
    with pytest.raises(ValueError, match="does not fit in"):
        CtypesCodec(ctype).encode(value)


def test_ctypes_array_codec_needs_exactly_its_length():
    codec = CtypesCodec(ctypes.c_uint8 * 2)
    assert codec.encode((3, 4)) == b"\x03\x04"
    for value in ([1], [1, 2, 3]):
        with pytest.raises(ValueError, match="needs 2 elements"):
            codec.encode(value)


def test_bad_struct_format_is_value_error():
    with pytest.raises(ValueError, match="bad struct format"):
        StructCodec("<Z")


def test_ctypes_simple_type_gives_plain_values():
    c = CtypesCodec(ctypes.c_int16)
    assert c.size == 2
    assert c.encode(-2) == b"\xfe\xff"
    assert c.decode(b"\xfe\xff") == -2


def test_ctypes_structure_round_trips_as_instances():
    c = make_codec(Pair, 8)
    raw = c.encode(Pair(1, 2, 3))
    assert raw == b"\x01\0\0\0\x02\0\x03\0"
    got = c.decode(raw)
    assert (got.a, got.b, got.c) == (1, 2, 3)


def test_ctypes_array_takes_a_sequence():
    c = make_codec(ctypes.c_uint8 * 3, 3)
    assert c.encode([1, 2, 3]) == b"\x01\x02\x03"
    assert list(c.decode(b"\x01\x02\x03")) == [1, 2, 3]


def test_ctypes_wrong_object_is_type_error():
    with pytest.raises(TypeError, match="must be a Pair"):
        make_codec(Pair, 8).encode("x")


def test_make_codec_size_mismatch_says_both_sizes_and_a_fix():
    with pytest.raises(ValueError, match=r"key codec struct '<Q' is 8 bytes but the map's "
                                         r"key_size is 4: use a 4-byte codec \(e\.g\. '<I'"):
        make_codec("<Q", 4, "key")
    with pytest.raises(ValueError, match=r"use an 8-byte codec"):
        make_codec("<I", 8)


def test_make_codec_rejects_unknown_specs():
    with pytest.raises(TypeError, match="cannot make a value codec"):
        make_codec(3.5, 4)


def test_make_codec_defaults():
    assert isinstance(make_codec(None, 4), BytesCodec)
    assert isinstance(make_codec(bytes, 4), BytesCodec)
    assert isinstance(make_codec(int, 8), IntCodec)
    assert isinstance(make_codec(None, 0), NoKeyCodec)


def test_no_key_codec_only_takes_none():
    c = NoKeyCodec()
    assert c.encode(None) is None
    with pytest.raises(TypeError, match="no keys"):
        c.encode(1)


def test_percpu_codec_replicates_one_value_with_padding():
    c = PerCpuCodec(IntCodec(4), 3)
    assert c.size == 24
    assert c.encode(7) == (b"\x07\0\0\0" + bytes(4)) * 3


def test_percpu_codec_takes_one_value_per_cpu_and_decodes_to_percpu_value():
    c = PerCpuCodec(IntCodec(4), 2)
    raw = c.encode([1, 2])
    got = c.decode(raw)
    assert isinstance(got, PerCpuValue)
    assert got == [1, 2] and got.sum() == 3 and got.max() == 2 and got.min() == 1
    assert c.decode_many(raw + c.encode(5), 2) == [PerCpuValue([1, 2]), PerCpuValue([5, 5])]


def test_percpu_codec_wrong_count_says_how_many():
    with pytest.raises(ValueError, match="exactly 2 entries"):
        PerCpuCodec(IntCodec(4), 2).encode([1, 2, 3])


def test_percpu_codec_tuple_is_one_value_for_multi_field_structs():
    c = PerCpuCodec(StructCodec("<HH"), 2)
    assert c.decode(c.encode((1, 2))) == [(1, 2), (1, 2)]


def test_map_fd_codec_takes_fd_or_object_with_fd():
    class Handle:
        fd = 9

    c = MapFdCodec()
    assert c.encode(Handle()) == b"\x09\0\0\0"
    assert c.encode(3) == b"\x03\0\0\0"
    assert c.decode(b"\x05\0\0\0") == 5
    with pytest.raises(ValueError, match="closed"):
        c.encode(-1)
    with pytest.raises(TypeError, match="a map-in-map value is a Map"):
        c.encode("x")


@pytest.mark.parametrize("prefixlen", [2**40, 2**32, -1, "8", 8.0])
def test_lpm_key_prefixlen_outside_u32_is_a_value_error(prefixlen):
    from pybpf.codecs import LpmKey

    with pytest.raises(ValueError, match="prefixlen is a u32"):
        LpmKey(4).encode((prefixlen, b"\0" * 4))


@pytest.mark.parametrize("fd", [2**31, 2**63])
def test_map_fd_codec_refuses_what_cannot_be_an_fd(fd):
    from pybpf.codecs import MapFdCodec

    with pytest.raises(ValueError, match="is not an fd"):
        MapFdCodec().encode(fd)
