"""Key and value codecs: Python objects to and from the bytes the bpf(2) layer moves.

Rules this module keeps:
- A codec has a fixed ``size`` in bytes; ``encode(obj)`` returns exactly ``size`` bytes and
  ``decode(data)`` takes exactly ``size`` bytes. Wrong input raises ``TypeError`` (wrong kind
  of object) or ``ValueError`` (right kind, wrong size or range), and the message says the
  expected size and how to fix it.
- ``make_codec(spec, size, what)`` turns what a user writes (``bytes``, ``int``, a
  ``struct`` format, a ctypes type, a ``Codec``) into a codec and checks it against the map's
  key or value size, so a mismatch is reported when the map is opened, not on first use.
- ``kind`` tells the optional C accelerator which codecs it may run natively (raw bytes,
  little-endian integers up to 8 bytes); every other codec is called from C as Python.
"""

from __future__ import annotations

import array
import ctypes
import ipaddress
import struct
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from .uapi import round_up

# Codec kinds the C accelerator understands (mirrored in _accel.c).
KIND_GENERIC = 0
KIND_BYTES = 1
KIND_UINT = 2
KIND_INT = 3


class Codec:
    """Fixed-size conversion between Python objects and bytes."""

    size: int = 0
    kind: int = KIND_GENERIC

    def encode(self, obj: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError

    def decode_many(self, buf: bytes | bytearray | memoryview, count: int) -> list[Any]:
        """Decode ``count`` packed items from the start of ``buf`` (batch results)."""
        size = self.size
        view = memoryview(buf)
        return [self.decode(bytes(view[i * size:(i + 1) * size])) for i in range(count)]

    def decode_array(self, buf: bytes | bytearray | memoryview, count: int) -> Sequence[Any]:
        """Like ``decode_many``, as the most compact sequence this codec has (int codecs: an
        ``array.array`` that makes its ints only when read; others: a list)."""
        return self.decode_many(buf, count)

    def encode_many(self, objs: Iterable[Any]) -> bytes:
        """Pack items back to back (batch arguments)."""
        return b"".join(map(self.encode, objs))

    def describe(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.describe()} codec, {self.size} bytes>"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __hash__(self) -> int:
        return hash((type(self), self.size))


class BytesCodec(Codec):
    """Raw bytes of exactly ``size`` bytes. Also accepts an int (little-endian, unsigned)."""

    kind = KIND_BYTES

    def __init__(self, size: int, what: str = "value") -> None:
        self.size = size
        self.what = what

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, bytes | bytearray | memoryview):
            data = bytes(obj)
            if len(data) != self.size:
                raise ValueError(
                    f"{self.what} must be exactly {self.size} bytes, got {len(data)}: "
                    f"pad or trim it, or open the map with a codec (int, a struct format, "
                    f"a ctypes type) that builds {self.size} bytes")
            return data
        if isinstance(obj, int):
            return _int_to_bytes(obj, self.size, False, self.what)
        raise TypeError(f"{self.what} must be bytes of length {self.size} or an int, "
                        f"got {type(obj).__name__}: pass bytes, or open the map with a "
                        f"codec for this type (struct format or ctypes type)")

    def decode(self, data: bytes) -> bytes:
        return bytes(data)

    def decode_many(self, buf: bytes | bytearray | memoryview, count: int) -> list[Any]:
        size = self.size
        data = bytes(memoryview(buf)[:count * size])
        return [data[i:i + size] for i in range(0, count * size, size)]

    def describe(self) -> str:
        return f"bytes[{self.size}]"


def _int_to_bytes(obj: int, size: int, signed: bool, what: str) -> bytes:
    try:
        return obj.to_bytes(size, "little", signed=signed)
    except OverflowError:
        lo, hi = (-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if signed \
            else (0, (1 << (8 * size)) - 1)
        raise ValueError(f"{what} {obj} does not fit in {size} "
                         f"{'signed' if signed else 'unsigned'} bytes (range {lo}..{hi}): "
                         f"use a wider map field or a smaller number") from None


_INT_FORMATS = {1: "B", 2: "H", 4: "I", 8: "Q"}
# array.array type codes by item size (unsigned; lower case is signed).
_ARRAY_CODES = {array.array(code).itemsize: code for code in ("Q", "L", "I", "H", "B")}


class IntCodec(Codec):
    """A little-endian integer of ``size`` bytes (signed with ``signed=True``)."""

    def __init__(self, size: int, signed: bool = False, what: str = "value") -> None:
        if size <= 0:
            raise ValueError(f"an int codec needs a positive size, got {size}")
        self.size = size
        self.signed = signed
        self.what = what
        self.kind = (KIND_INT if signed else KIND_UINT) if size <= 8 else KIND_GENERIC

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, int):
            return _int_to_bytes(obj, self.size, self.signed, self.what)
        if isinstance(obj, bytes | bytearray) and len(obj) == self.size:
            return bytes(obj)
        raise TypeError(f"{self.what} must be an int ({self.size}-byte "
                        f"{'signed' if self.signed else 'unsigned'}), got {type(obj).__name__}")

    def decode(self, data: bytes) -> int:
        return int.from_bytes(data, "little", signed=self.signed)

    def decode_many(self, buf: bytes | bytearray | memoryview, count: int) -> list[Any]:
        fmt = _INT_FORMATS.get(self.size)
        if fmt is None:
            return super().decode_many(buf, count)
        if self.signed:
            fmt = fmt.lower()
        return memoryview(buf)[:count * self.size].cast("B").cast(fmt).tolist()

    def decode_array(self, buf: bytes | bytearray | memoryview, count: int) -> Sequence[Any]:
        code = _ARRAY_CODES.get(self.size)
        if code is None:
            return self.decode_many(buf, count)
        values = array.array(code.lower() if self.signed else code)
        values.frombytes(memoryview(buf)[:count * self.size])
        if sys.byteorder == "big":
            values.byteswap()
        return values

    def encode_many(self, objs: Iterable[Any]) -> bytes:
        fmt = _INT_FORMATS.get(self.size)
        objs = objs if isinstance(objs, list) else list(objs)
        if fmt is None:
            return super().encode_many(objs)
        try:
            return struct.pack(f"<{len(objs)}{fmt.lower() if self.signed else fmt}", *objs)
        except struct.error:
            return super().encode_many(objs)  # one by one, to name the offending value

    def describe(self) -> str:
        return f"{'' if self.signed else 'u'}int{self.size * 8}"


class StructCodec(Codec):
    """A ``struct`` format. One field encodes/decodes a bare value, several a tuple."""

    def __init__(self, fmt: str, what: str = "value") -> None:
        try:
            self.struct = struct.Struct(fmt)
        except struct.error as exc:
            raise ValueError(f"bad struct format {fmt!r} for the {what}: {exc}") from None
        self.fmt = fmt
        self.size = self.struct.size
        self.what = what
        # Field count of the format: one field means a bare value, not a 1-tuple.
        self.fields = len(self.struct.unpack(bytes(self.size)))

    def encode(self, obj: Any) -> bytes:
        try:
            if self.fields == 1:
                return self.struct.pack(obj)
            return self.struct.pack(*obj)
        except (struct.error, TypeError, OverflowError) as exc:
            shape = "one value" if self.fields == 1 else f"a tuple of {self.fields} values"
            # A number out of its field's range is a bad value, anything else a bad shape/type.
            out_of_range = isinstance(exc, OverflowError) or "range" in str(exc) \
                or "format requires" in str(exc)
            raise (ValueError if out_of_range else TypeError)(
                f"{self.what} {obj!r} does not fit struct format {self.fmt!r} "
                f"({shape}, {self.size} bytes): {exc}") from None

    def decode(self, data: bytes) -> Any:
        values = self.struct.unpack(data)
        return values[0] if self.fields == 1 else values

    def decode_many(self, buf: bytes | bytearray | memoryview, count: int) -> list[Any]:
        view = memoryview(buf)[:count * self.size]
        if self.fields == 1:
            return [v[0] for v in self.struct.iter_unpack(view)]
        return list(self.struct.iter_unpack(view))

    def __eq__(self, other):
        return isinstance(other, StructCodec) and other.fmt == self.fmt

    def __hash__(self):
        return hash(self.fmt)

    def describe(self) -> str:
        return f"struct {self.fmt!r}"


_CTYPES_INT_CODES = frozenset("bBhHiIlLqQ")  # ctypes _type_ codes of the integer types


class CtypesCodec(Codec):
    """A ctypes type. Simple types (c_uint32, c_double, ...) give and take plain values;
    structures, unions and arrays give instances and take instances (or, for a simple
    array, a sequence of its elements)."""

    def __init__(self, ctype: type, what: str = "value") -> None:
        self.ctype = ctype
        self.size = ctypes.sizeof(ctype)
        self.what = what
        self.simple = issubclass(ctype, ctypes._SimpleCData)

    def encode(self, obj: Any) -> bytes:
        ctype = self.ctype
        if isinstance(obj, ctype):
            return bytes(obj)
        if isinstance(obj, bytes | bytearray) and len(obj) == self.size:
            return bytes(obj)
        array = issubclass(ctype, ctypes.Array) and isinstance(obj, Sequence)
        if array and len(obj) != ctype._length_:
            raise ValueError(f"{self.what} needs {ctype._length_} elements for "
                             f"{ctype.__name__}, got {len(obj)}")
        try:
            if self.simple:
                cobj, code, values = ctype(obj), ctype._type_, [obj]
            elif array:
                cobj, code, values = ctype(*obj), getattr(ctype._type_, "_type_", ""), obj
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{self.what} {obj!r} cannot be converted to "
                            f"{ctype.__name__}: {exc}") from None
        if self.simple or array:
            # ctypes wraps an int that does not fit (c_uint32(-1) is 2**32 - 1): refuse it.
            if code in _CTYPES_INT_CODES and list(cobj if array else [cobj.value]) != list(values):
                raise ValueError(f"{self.what} {obj!r} does not fit in {ctype.__name__} "
                                 f"({self.size} bytes): use a wider field or numbers in "
                                 "its range")
            return bytes(cobj)
        raise TypeError(f"{self.what} must be a {ctype.__name__} ({self.size} bytes) "
                        f"or bytes of that size, got {type(obj).__name__}")

    def decode(self, data: bytes) -> Any:
        obj = self.ctype.from_buffer_copy(data)
        return obj.value if self.simple else obj

    def __eq__(self, other):
        return isinstance(other, CtypesCodec) and other.ctype is self.ctype

    def __hash__(self):
        return hash(self.ctype)

    def describe(self) -> str:
        return f"ctypes {self.ctype.__name__}"


class NoKeyCodec(Codec):
    """Key of a map with key_size 0 (queue, stack, bloom filter): only ``None`` is valid."""

    size = 0

    def encode(self, obj: Any) -> None:  # type: ignore[override]
        if obj is not None:
            raise TypeError(f"this map has no keys (key_size 0): pass None, not {obj!r}")
        return None

    def decode(self, data: bytes) -> None:
        return None

    def describe(self) -> str:
        return "no key"


class PerCpuValue(Sequence):
    """One decoded value per possible CPU, in CPU order."""

    __slots__ = ("values",)

    def __init__(self, values: Iterable[Any]) -> None:
        self.values = tuple(values)

    def __getitem__(self, cpu):
        return self.values[cpu]

    def __len__(self) -> int:
        return len(self.values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PerCpuValue):
            return self.values == other.values
        if isinstance(other, list | tuple):
            return self.values == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.values)

    def sum(self) -> Any:
        """Sum over CPUs (numbers only)."""
        return sum(self.values)

    def max(self) -> Any:
        return max(self.values)

    def min(self) -> Any:
        return min(self.values)

    def __repr__(self) -> str:
        return f"PerCpuValue({list(self.values)!r})"


class PerCpuCodec(Codec):
    """A per-CPU value: ``ncpus`` slots of ``round_up(size, 8)`` bytes, as bpf(2) moves it.

    Encoding takes one value (written to every CPU) or a ``list``/``PerCpuValue`` with exactly
    one value per possible CPU; decoding gives a ``PerCpuValue``.
    """

    def __init__(self, inner: Codec, ncpus: int) -> None:
        self.inner = inner
        self.ncpus = ncpus
        self.stride = round_up(inner.size, 8)
        self.size = self.stride * ncpus
        self.pad = bytes(self.stride - inner.size)

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, list | PerCpuValue):
            if len(obj) != self.ncpus:
                raise ValueError(f"per-CPU value needs exactly {self.ncpus} entries (one per "
                                 f"possible CPU), got {len(obj)}: pass a list of "
                                 f"{self.ncpus} values, or a single value for every CPU")
            return b"".join(self.inner.encode(v) + self.pad for v in obj)
        return (self.inner.encode(obj) + self.pad) * self.ncpus

    def decode(self, data: bytes) -> PerCpuValue:
        stride, size, dec = self.stride, self.inner.size, self.inner.decode
        return PerCpuValue(dec(data[i:i + size]) for i in range(0, self.size, stride))

    def decode_many(self, buf: bytes | bytearray | memoryview, count: int) -> list[Any]:
        size = self.size
        data = bytes(memoryview(buf)[:count * size])
        return [self.decode(data[i:i + size]) for i in range(0, count * size, size)]

    def __eq__(self, other):
        return (isinstance(other, PerCpuCodec) and other.inner == self.inner
                and other.ncpus == self.ncpus)

    def __hash__(self):
        return hash((self.inner, self.ncpus))

    def describe(self) -> str:
        return f"per-CPU {self.inner.describe()} x {self.ncpus}"


class MapFdCodec(Codec):
    """Values of map-in-map (and other fd-holding) maps: a ``Map`` or an fd on update, the
    object's id on lookup."""

    size = 4
    kind = KIND_GENERIC

    def encode(self, obj: Any) -> bytes:
        fd = getattr(obj, "fd", obj)
        if not isinstance(fd, int) or isinstance(fd, bool):
            raise TypeError(f"a map-in-map value is a Map (or its fd), got "
                            f"{type(obj).__name__}")
        if fd < 0:
            raise ValueError("the inner map is closed (fd -1): keep it open while inserting")
        if fd >= 1 << 31:
            raise ValueError(f"{fd} is not an fd (fds are below 2**31)")
        return fd.to_bytes(4, "little")

    def decode(self, data: bytes) -> int:
        return int.from_bytes(data, "little")

    def decode_many(self, buf: bytes | bytearray | memoryview, count: int) -> list[Any]:
        return memoryview(buf)[:count * 4].cast("B").cast("I").tolist()

    def describe(self) -> str:
        return "map fd in, map id out"


class SocketCodec(Codec):
    """Values of SOCKMAP / SOCKHASH: a socket (anything with ``fileno()``) or an fd on update,
    sent as a u32 or u64 fd; lookups give the socket's cookie (SO_COOKIE) as an int, which
    the kernel gives only for 8-byte values (4-byte ones are ENOSPC)."""

    kind = KIND_GENERIC

    def __init__(self, size: int) -> None:
        if size not in (4, 8):
            raise ValueError(f"a socket value is 4 or 8 bytes (an fd), not {size}")
        self.size = size

    def encode(self, obj: Any) -> bytes:
        fd = obj if isinstance(obj, int) else getattr(obj, "fileno", None)
        if callable(fd):
            fd = fd()
        if not isinstance(fd, int) or isinstance(fd, bool):
            raise TypeError(f"a sockmap value is a socket (with fileno()) or its fd, got "
                            f"{type(obj).__name__}")
        if fd < 0:
            raise ValueError(f"{obj!r} has no fd (a closed socket?): insert an open socket")
        if fd >= 1 << (8 * self.size):
            raise ValueError(f"fd {fd} does not fit in the map's {self.size}-byte value")
        return fd.to_bytes(self.size, "little")

    def decode(self, data: bytes) -> int:
        return int.from_bytes(data, "little")

    def describe(self) -> str:
        return f"socket fd in ({self.size} bytes), cookie out"


CodecSpec = Codec | str | type | None


def make_codec(spec: CodecSpec, size: int, what: str = "value") -> Codec:
    """The codec for ``spec`` on a field of ``size`` bytes (``what`` names it in errors).

    ``spec`` may be None (raw bytes; ints accepted), ``bytes``, ``int`` (unsigned
    little-endian of the field's size), a ``struct`` format string, a ctypes type, or a
    ``Codec``. The codec's size must equal ``size``.
    """
    if size == 0 and spec is None:
        return NoKeyCodec()
    if spec is None or spec is bytes:
        codec: Codec = BytesCodec(size, what)
    elif spec is int:
        if size == 0:
            raise ValueError(f"an int {what} needs a non-zero {what} size")
        codec = IntCodec(size, what=what)
    elif isinstance(spec, Codec):
        codec = spec
    elif isinstance(spec, str):
        codec = StructCodec(spec, what)
    elif isinstance(spec, type) and issubclass(spec, ctypes._SimpleCData | ctypes.Structure |
                                               ctypes.Union | ctypes.Array):
        codec = CtypesCodec(spec, what)
    else:
        raise TypeError(f"cannot make a {what} codec from {spec!r}: use bytes, int, a struct "
                        f"format like '<I', a ctypes type, or a pybpf.codecs.Codec")
    if codec.size != size:
        raise ValueError(
            f"{what} codec {codec.describe()} is {codec.size} bytes but the map's {what}_size "
            f"is {size}: use {_article(size)} {size}-byte codec (e.g. {_suggest(size)}) or a "
            f"map with "
            f"{what}_size={codec.size}")
    return codec


def _article(number: int) -> str:
    """"an" before a number read with a vowel sound (8, 11, 18, 80-89, 800, 11000...), else "a"."""
    digits = str(number)
    return "an" if digits[0] == "8" or (digits[:2] in ("11", "18") and len(digits) % 3 == 2) \
        else "a"


def _suggest(size: int) -> str:
    if size in _INT_FORMATS:
        return f"'<{_INT_FORMATS[size]}' or int"
    return f"'{size}s' or bytes"


def Int(size: int, signed: bool = False) -> IntCodec:  # noqa: N802 - reads like a type
    """A little-endian integer codec: ``Int(8, signed=True)``."""
    return IntCodec(size, signed)


class LpmKey(Codec):
    """struct bpf_lpm_trie_key_u8: u32 prefixlen (host order) then ``data_size`` bytes.

    Encodes ``(prefixlen, data)``, an ``ipaddress`` network (when its size fits), or raw
    bytes; decodes to ``(prefixlen, data)``.
    """

    def __init__(self, data_size: int) -> None:
        if not isinstance(data_size, int) or isinstance(data_size, bool):
            raise TypeError(f"an LPM trie's data_size is the byte count after the prefixlen "
                            f"(4 for IPv4, 16 for IPv6), got {data_size!r}")
        if data_size <= 0:
            raise ValueError(f"an LPM trie key needs data after the 4-byte prefixlen "
                             f"(key_size >= 5), got data size {data_size}")
        self.data_size = data_size
        self.size = 4 + data_size

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, bytes | bytearray) and len(obj) == self.size:
            return bytes(obj)
        if isinstance(obj, ipaddress.IPv4Network | ipaddress.IPv6Network):
            obj = (obj.prefixlen, obj.network_address.packed)
        if isinstance(obj, tuple) and len(obj) == 2:
            prefixlen, data = obj
            data = bytes(data)
            if len(data) != self.data_size:
                raise ValueError(f"LPM key data must be {self.data_size} bytes, got "
                                 f"{len(data)}")
            if not isinstance(prefixlen, int) or not 0 <= prefixlen < 1 << 32:
                raise ValueError(f"an LPM prefixlen is a u32 (at most the key's "
                                 f"{8 * self.data_size} bits), got {prefixlen!r}")
            return prefixlen.to_bytes(4, "little") + data
        raise TypeError(f"an LPM key is (prefixlen, {self.data_size} data bytes), an "
                        f"ipaddress network or {self.size} raw bytes, got {obj!r}")

    def decode(self, data: bytes) -> tuple[int, bytes]:
        return int.from_bytes(data[:4], "little"), bytes(data[4:])

    def __eq__(self, other):
        return isinstance(other, LpmKey) and other.data_size == self.data_size

    def __hash__(self):
        return hash(("lpm", self.data_size))

    def describe(self) -> str:
        return f"lpm key ({self.data_size} data bytes)"
