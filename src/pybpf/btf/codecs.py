"""Codecs built from BTF types: map keys and values as the C declared them.

``btf_codec(btf, type_id)`` gives a ``pybpf.codecs.Codec`` for a type:
- integers are ints (signed or not as declared; ``_Bool`` is a bool), pointers u64 ints,
  floats floats, enums ``IntEnum`` members (an unnamed value stays an int);
- ``char`` arrays are ``bytes``; other arrays tuples of their elements;
- structs, unions and DATASECs (global data) are named tuples, one field per named
  member, anonymous struct/union members flattened into their parent as C lets one
  name them. Named tuples, not ctypes structures: they are immutable and hashable (a
  struct key can be a dict key or a set member), compare equal to plain tuples and by
  value, and print readably; ctypes structures compare by identity and are not hashable.
  Bitfields are read and written by their bit offset and width.

Encoding takes what decoding gives, a plain tuple, a dict by field name (missing fields
are zero), or raw bytes of the right size. Padding encodes as zeros. A union encodes the
one member given in a dict, or from a decoded value its largest member (every member of a
decoded union was read from the same bytes, so the largest one carries them all).
Byte order is the BTF's: an object's BTF is in its target's order, which is the host's
for any object the host can load (the kernel keeps map values in its own order).
"""

from __future__ import annotations

import collections
import enum
import keyword
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from ..codecs import Codec, IntCodec
from .spec import Btf, BtfError
from .types import (
    BTF_INT_BOOL,
    BTF_INT_CHAR,
    Array,
    Datasec,
    Enum,
    Float,
    Int,
    Ptr,
    Struct,
    Union,
    Var,
)


class _IntField(Codec):
    """An integer of any size in either byte order (``bool`` for _Bool)."""

    def __init__(self, size: int, signed: bool, boolean: bool, what: str,
                 byteorder: str) -> None:
        self.size, self.signed, self.boolean, self.what = size, signed, boolean, what
        self.byteorder = byteorder

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, bytes | bytearray) and len(obj) == self.size:
            return bytes(obj)
        if not isinstance(obj, int):
            raise TypeError(f"{self.what} must be an int, got {type(obj).__name__}")
        try:
            return int(obj).to_bytes(self.size, self.byteorder, signed=self.signed)
        except OverflowError:
            raise ValueError(f"{self.what} {obj} does not fit in {self.size} "
                             f"{'signed' if self.signed else 'unsigned'} bytes") from None

    def decode(self, data: bytes) -> int | bool:
        value = int.from_bytes(data, self.byteorder, signed=self.signed)
        return bool(value) if self.boolean else value

    def describe(self) -> str:
        return "bool" if self.boolean else f"{'' if self.signed else 'u'}int{self.size * 8}"


class _EnumCodec(_IntField):
    def __init__(self, size: int, signed: bool, members: type[enum.IntEnum] | None,
                 what: str, byteorder: str) -> None:
        super().__init__(size, signed, False, what, byteorder)
        self.members = members

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, str) and self.members is not None:
            try:
                obj = self.members[obj]
            except KeyError:
                raise ValueError(f"{self.what} {obj!r} is not one of "
                                 f"{', '.join(self.members.__members__)}") from None
        return super().encode(obj)

    def decode(self, data: bytes) -> int:
        value = super().decode(data)
        if self.members is not None:
            try:
                return self.members(value)
            except ValueError:
                pass
        return value

    def describe(self) -> str:
        return f"enum {self.members.__name__}" if self.members else "enum"


class _FloatCodec(Codec):
    def __init__(self, size: int, what: str, byteorder: str) -> None:
        self.size, self.what = size, what
        self.struct = struct.Struct(("<" if byteorder == "little" else ">") +
                                    ("f" if size == 4 else "d"))

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, bytes | bytearray) and len(obj) == self.size:
            return bytes(obj)
        if not isinstance(obj, int | float):
            raise TypeError(f"{self.what} must be a float, got {type(obj).__name__}")
        return self.struct.pack(obj)

    def decode(self, data: bytes) -> float:
        return self.struct.unpack(data)[0]

    def describe(self) -> str:
        return f"float{self.size * 8}"


class _RawCodec(Codec):
    """Bytes of a fixed size (char arrays, and types with nothing better to decode to)."""

    def __init__(self, size: int, what: str, label: str) -> None:
        self.size, self.what, self.label = size, what, label

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, str):
            obj = obj.encode()
        if not isinstance(obj, bytes | bytearray | memoryview):
            raise TypeError(f"{self.what} ({self.label}) must be bytes, got "
                            f"{type(obj).__name__}")
        data = bytes(obj)
        if len(data) > self.size:
            raise ValueError(f"{self.what} ({self.label}) holds {self.size} bytes, got "
                             f"{len(data)}")
        return data.ljust(self.size, b"\0")

    def decode(self, data: bytes) -> bytes:
        return bytes(data)

    def describe(self) -> str:
        return self.label


class _ArrayCodec(Codec):
    def __init__(self, element: Codec, nelems: int, what: str) -> None:
        self.element, self.nelems, self.what = element, nelems, what
        self.size = element.size * nelems

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, bytes | bytearray) and len(obj) == self.size:
            return bytes(obj)
        if not isinstance(obj, Sequence) or isinstance(obj, str):
            raise TypeError(f"{self.what} must be a sequence of {self.nelems} elements, got "
                            f"{type(obj).__name__}")
        if len(obj) != self.nelems:
            raise ValueError(f"{self.what} needs {self.nelems} elements, got {len(obj)}")
        return b"".join(self.element.encode(item) for item in obj)

    def decode(self, data: bytes) -> tuple:
        size = self.element.size
        return tuple(self.element.decode(data[i * size:(i + 1) * size])
                     for i in range(self.nelems))

    def describe(self) -> str:
        return f"{self.element.describe()}[{self.nelems}]"


class _Field:
    """One named field of a record codec: where it lies and how it converts."""

    __slots__ = ("name", "offset", "codec", "bit_offset", "bits", "signed")

    def __init__(self, name: str, offset: int, codec: Codec, bit_offset: int = 0,
                 bits: int = 0, signed: bool = False) -> None:
        self.name, self.offset, self.codec = name, offset, codec
        self.bit_offset, self.bits, self.signed = bit_offset, bits, signed


class _RecordCodec(Codec):
    """A struct, union or DATASEC as a named tuple."""

    def __init__(self, label: str, size: int, fields: list[_Field], union: bool,
                 what: str, byteorder: str) -> None:
        self.label, self.size, self.fields, self.union, self.what = \
            label, size, fields, union, what
        self.byteorder = byteorder
        self.tuple = collections.namedtuple(_identifier(label), [f.name for f in fields],
                                            rename=True)
        self.tuple.__doc__ = f"{label} ({size} bytes), decoded from BTF"
        self._largest = max(fields, key=lambda f: f.codec.size) if fields else None

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, bytes | bytearray) and len(obj) == self.size:
            return bytes(obj)
        values = self._values(obj)
        buf = bytearray(self.size)
        for field in self.fields:
            if field.name not in values:
                continue
            value = values[field.name]
            if field.bits:
                self._put_bits(buf, field, value)
            else:
                buf[field.offset:field.offset + field.codec.size] = field.codec.encode(value)
        return bytes(buf)

    def _values(self, obj: Any) -> dict[str, Any]:
        names = [f.name for f in self.fields]
        if isinstance(obj, Mapping):
            unknown = set(obj) - set(names)
            if unknown:
                raise ValueError(f"{self.what} ({self.label}) has no field "
                                 f"{', '.join(sorted(map(str, unknown)))}: its fields are "
                                 f"{', '.join(names)}")
            if self.union and len(obj) > 1:
                raise ValueError(f"{self.what} ({self.label}) is a union: give one member, "
                                 f"got {', '.join(obj)}")
            return dict(obj)
        if isinstance(obj, tuple):
            if len(obj) != len(names):
                raise ValueError(f"{self.what} ({self.label}) needs {len(names)} fields "
                                 f"({', '.join(names)}), got {len(obj)}")
            if self.union and self._largest is not None:
                return {self._largest.name: obj[self.fields.index(self._largest)]}
            return dict(zip(names, obj, strict=True))
        raise TypeError(f"{self.what} ({self.label}) must be a {self.tuple.__name__}, a "
                        f"tuple, a dict by field name or {self.size} bytes, got "
                        f"{type(obj).__name__}")

    def _put_bits(self, buf: bytearray, field: _Field, value: Any) -> None:
        if not isinstance(value, int):
            raise TypeError(f"{self.what} field {field.name} is a bitfield: give an int")
        lo, hi = (-(1 << (field.bits - 1)), (1 << (field.bits - 1)) - 1) if field.signed \
            else (0, (1 << field.bits) - 1)
        if not lo <= value <= hi:
            raise ValueError(f"{self.what} field {field.name} ({field.bits}-bit bitfield) "
                             f"takes {lo}..{hi}, got {value}")
        start, end, shift = self._bit_span(field)
        word = int.from_bytes(buf[start:end], self.byteorder)
        mask = ((1 << field.bits) - 1) << shift
        word = (word & ~mask) | ((value << shift) & mask)
        buf[start:end] = word.to_bytes(end - start, self.byteorder)

    def _bit_span(self, field: _Field) -> tuple[int, int, int]:
        """The bytes holding a bitfield and the shift of its lowest bit in them (bit
        offsets count from the first byte's lowest bit little-endian, highest big-endian)."""
        start, end = field.bit_offset // 8, (field.bit_offset + field.bits + 7) // 8
        if self.byteorder == "little":
            return start, end, field.bit_offset - start * 8
        return start, end, end * 8 - field.bit_offset - field.bits

    def decode(self, data: bytes) -> Any:
        values = []
        for field in self.fields:
            if field.bits:
                start, end, shift = self._bit_span(field)
                word = int.from_bytes(data[start:end], self.byteorder) >> shift
                value = word & ((1 << field.bits) - 1)
                if field.signed and value >> (field.bits - 1):
                    value -= 1 << field.bits
                values.append(value)
            else:
                values.append(field.codec.decode(data[field.offset:
                                                      field.offset + field.codec.size]))
        return self.tuple(*values)

    def describe(self) -> str:
        return self.label


def _identifier(label: str) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in label.split()[-1])
    if not name or name[0].isdigit() or keyword.iskeyword(name):
        name = f"t_{name}"
    return name


def btf_codec(btf: Btf, type_id: int, what: str = "value") -> Codec:
    """The codec of BTF type ``type_id`` (``what`` names it in errors)."""
    return _Builder(btf, what).codec(type_id)


class _Builder:
    def __init__(self, btf: Btf, what: str) -> None:
        self.btf, self.what = btf, what
        self.byteorder = btf.byteorder

    def codec(self, type_id: int, depth: int = 0) -> Codec:
        btf = self.btf
        if depth > 32:
            raise BtfError(f"type [{type_id}] nests too deeply for a codec")
        resolved = btf.resolve(type_id)
        record = btf[resolved]
        label = btf.describe(type_id)
        if isinstance(record, Var):
            return self.codec(record.type_id, depth + 1)
        if isinstance(record, Int):
            return self.integer(record.size, record.signed,
                                bool(record.encoding & BTF_INT_BOOL))
        if isinstance(record, Ptr):
            return self.integer(8, False)
        if isinstance(record, Enum):
            return _EnumCodec(record.size, record.signed, _enum_class(record), self.what,
                              self.byteorder)
        if isinstance(record, Float) and record.size in (4, 8):
            return _FloatCodec(record.size, self.what, self.byteorder)
        if isinstance(record, Array):
            element = btf[btf.resolve(record.type_id)]
            if isinstance(element, Int) and element.size == 1 and \
                    (element.encoding & BTF_INT_CHAR or element.name == "char"):
                return _RawCodec(record.nelems, self.what, label)
            return _ArrayCodec(self.codec(record.type_id, depth + 1), record.nelems,
                               self.what)
        if isinstance(record, Struct | Datasec):
            return _RecordCodec(label, btf.size_of(resolved), self.fields(resolved, 0, depth),
                                isinstance(record, Union), self.what, self.byteorder)
        return _RawCodec(btf.size_of(resolved), self.what, label)

    def integer(self, size: int, signed: bool, boolean: bool = False) -> Codec:
        # IntCodec is little-endian, and the C accelerator runs it natively.
        if not boolean and size in (1, 2, 4, 8) and self.byteorder == "little":
            return IntCodec(size, signed, self.what)
        return _IntField(size, signed, boolean, self.what, self.byteorder)

    def fields(self, type_id: int, base_bits: int, depth: int) -> list[_Field]:
        btf = self.btf
        record = btf[type_id]
        out: list[_Field] = []
        if isinstance(record, Datasec):
            for info in record.vars:
                var = btf[info.type_id]
                out.append(_Field(var.name, info.offset, self.codec(info.type_id, depth + 1)))
            return out
        for member in record.members:
            bits = base_bits + member.bit_offset
            target_id = btf.resolve(member.type_id)
            target = btf[target_id]
            if not member.name and isinstance(target, Struct):
                out += self.fields(target_id, bits, depth + 1)
            elif member.bitfield_size or (isinstance(target, Int) and
                                          target.nr_bits != target.size * 8):
                width = member.bitfield_size or target.nr_bits
                signed = isinstance(target, Int | Enum) and target.signed
                out.append(_Field(member.name, bits // 8, IntCodec(1), bits, width, signed))
            else:
                out.append(_Field(member.name, bits // 8,
                                  self.codec(member.type_id, depth + 1)))
        return out


def _enum_class(record: Enum) -> type[enum.IntEnum] | None:
    names = [v.name for v in record.values if v.name.isidentifier()]
    if not record.name or not names:
        return None
    try:
        return enum.IntEnum(_identifier(record.name),
                            [(v.name, v.value) for v in record.values
                             if v.name.isidentifier()])
    except (TypeError, ValueError):  # e.g. a name that clashes with IntEnum's own
        return None
