"""``Btf``: a BTF blob parsed into records, resolved, and encoded back to bytes.

Rules this module keeps:
- Ids start at 1 as in the kernel; id 0 is void. ``btf[i]`` gives the record of type ``i``.
- Parsing checks every offset and count against the blob; a malformed blob raises
  ``BtfError`` naming the type id at fault, never ``IndexError`` or ``struct.error``.
  Records are decoded when first asked for, so the kernel's own BTF (about 150 000
  types in /sys/kernel/btf/vmlinux) loads in one quick pass over the headers.
- Encoding keeps the parsed string table and appends new names, so string offsets that
  other data refer to (.BTF.ext line info, func info) stay valid in the encoded blob.
- ``resolve`` skips typedefs and modifiers (const, volatile, restrict, type tags);
  ``size_of`` follows btf__resolve_size.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from ..strtab import string_at
from .types import (
    MODIFIERS,
    Array,
    Const,
    Datasec,
    DeclTag,
    Enum,
    Enum64,
    EnumValue,
    Float,
    Func,
    FuncProto,
    Fwd,
    Int,
    Kind,
    Member,
    Param,
    Ptr,
    Restrict,
    Struct,
    Type,
    Typedef,
    TypeTag,
    Union,
    Var,
    VarSecinfo,
    Void,
    Volatile,
)

__all__ = ["Btf", "BtfError", "FlatMember", "StringTable", "VMLINUX"]

BTF_MAGIC = 0xEB9F
BTF_VERSION = 1
VMLINUX = "/sys/kernel/btf/vmlinux"
HEADER = struct.Struct("HBBIIIII")  # magic, version, flags, hdr_len, type/str off+len
# Bytes after ``struct btf_type``: (fixed, per vlen entry), by kind.
_EXTRA = {Kind.INT: (4, 0), Kind.ARRAY: (12, 0), Kind.STRUCT: (0, 12),
          Kind.UNION: (0, 12), Kind.ENUM: (0, 8), Kind.FUNC_PROTO: (0, 8),
          Kind.VAR: (4, 0), Kind.DATASEC: (0, 12), Kind.DECL_TAG: (4, 0),
          Kind.ENUM64: (0, 12)}
_POINTER_SIZE = 8  # BPF is a 64-bit target


class BtfError(ValueError):
    """Malformed BTF, or a question a type cannot answer (the size of a function...)."""


@dataclass(frozen=True)
class FlatMember:
    """A member found through anonymous struct/union members: byte and bit offset, size."""

    name: str
    type_id: int
    offset: int
    size: int
    bit_offset: int
    bitfield_size: int = 0


class StringTable:
    """A BTF string section: offsets of existing strings are kept, new ones appended."""

    def __init__(self, data: bytes = b"\0") -> None:
        self._data = bytearray(data or b"\0")
        self._offsets: dict[str, int] = {}
        pos = 0
        for raw in bytes(self._data).split(b"\0")[:-1]:
            self._offsets.setdefault(raw.decode(errors="replace"), pos)
            pos += len(raw) + 1

    def get(self, offset: int, what: str = "a name") -> str:
        try:
            return string_at(self._data, offset)
        except ValueError as exc:
            raise BtfError(f"{what}: {exc}") from None

    def add(self, text: str) -> int:
        """The offset of ``text``, appended if it is not there yet."""
        offset = self._offsets.get(text)
        if offset is None:
            offset = len(self._data)
            self._data += text.encode() + b"\0"
            self._offsets[text] = offset
        return offset

    def to_bytes(self) -> bytes:
        return bytes(self._data)


class Btf:
    """Parsed BTF: ``btf[type_id]`` is a record from ``pybpf.btf.types``.

    Build one with ``Btf.from_bytes`` (a .BTF section or /sys/kernel/btf/vmlinux),
    ``Btf.load(path)``, or ``Btf(records)`` from records (id 1 first).
    """

    def __init__(self, records: Iterable[Type] = (), *, byteorder: str = "little",
                 strings: bytes = b"\0") -> None:
        self.byteorder = byteorder
        self.endian = "<" if byteorder == "little" else ">"
        self.strings = StringTable(strings)
        self._raw: bytes = b""
        self._offsets: list[int] = [0]          # blob offset of each type (index = id)
        self._cache: dict[int, Type] = {0: Void()}
        self._added: list[Type] = list(records)
        self._by_name: dict[str, list[int]] | None = None

    # -- parsing ---------------------------------------------------------------------------

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Btf:
        data = bytes(data)
        if len(data) < HEADER.size:
            raise BtfError(f"BTF is {len(data)} bytes, shorter than its {HEADER.size}-byte "
                           "header")
        orders = [(e, order) for e, order in (("<", "little"), (">", "big"))
                  if struct.unpack_from(e + "H", data)[0] == BTF_MAGIC]
        if not orders:
            raise BtfError(f"not BTF: magic {data[:2].hex()} is not 0xeb9f in either byte "
                           "order")
        endian, byteorder = orders[0]
        _magic, version, _flags, hdr_len, type_off, type_len, str_off, str_len = \
            struct.unpack_from(endian + HEADER.format, data)
        if version != BTF_VERSION:
            raise BtfError(f"BTF version {version} is not {BTF_VERSION}")
        if hdr_len < HEADER.size or hdr_len > len(data):
            raise BtfError(f"BTF header length {hdr_len} is not between {HEADER.size} and "
                           f"the blob's {len(data)} bytes")
        body = len(data) - hdr_len
        for what, off, length in (("type", type_off, type_len), ("string", str_off, str_len)):
            if off + length > body:
                raise BtfError(f"BTF {what} section (offset {off}, {length} bytes) runs past "
                               f"the end of the blob ({body} bytes after the header)")
        strings = data[hdr_len + str_off:hdr_len + str_off + str_len]
        if strings[:1] != b"\0" or strings[-1:] != b"\0":
            raise BtfError("BTF string section must start and end with a NUL byte")
        btf = cls(byteorder=byteorder, strings=strings)
        btf._raw = data[hdr_len + type_off:hdr_len + type_off + type_len]
        btf._index()
        return btf

    @classmethod
    def load(cls, path: str = VMLINUX) -> Btf:
        """A raw BTF file, e.g. the running kernel's /sys/kernel/btf/vmlinux."""
        with open(path, "rb") as f:
            return cls.from_bytes(f.read())

    def _index(self) -> None:
        raw, offsets = self._raw, self._offsets
        info_of = struct.Struct(self.endian + "I").unpack_from
        pos, end = 0, len(raw)
        while pos < end:
            if pos + 12 > end:
                raise BtfError(f"type [{len(offsets)}]: its header runs past the end of the "
                               "type section")
            info = info_of(raw, pos + 4)[0]
            kind = (info >> 24) & 0x7F
            if kind == Kind.UNKN or kind > Kind.ENUM64:
                raise BtfError(f"type [{len(offsets)}]: unknown BTF kind {kind}")
            fixed, per_entry = _EXTRA.get(Kind(kind), (0, 0))
            offsets.append(pos)
            pos += 12 + fixed + per_entry * (info & 0xFFFFFF)
        if pos != end:
            raise BtfError(f"type [{len(offsets) - 1}]: its data runs past the end of the "
                           "type section")

    def _decode(self, type_id: int) -> Type:
        raw, pos, e = self._raw, self._offsets[type_id], self.endian
        name_off, info, size_or_type = struct.unpack_from(e + "3I", raw, pos)
        kind, vlen, kflag = Kind((info >> 24) & 0x7F), info & 0xFFFFFF, bool(info >> 31)
        name = self.strings.get(name_off, f"name of type [{type_id}]")
        pos += 12

        def entries(fmt: str) -> Iterator[tuple]:
            return struct.Struct(e + fmt).iter_unpack(raw[pos:pos + struct.calcsize(fmt) * vlen])

        def string(off: int, what: str) -> str:
            return self.strings.get(off, f"type [{type_id}] {what}")

        if kind == Kind.INT:
            word = struct.unpack_from(e + "I", raw, pos)[0]
            return Int(name, size_or_type, (word >> 24) & 0xF, (word >> 16) & 0xFF,
                       word & 0xFF)
        if kind == Kind.ARRAY:
            elem, index, nelems = struct.unpack_from(e + "3I", raw, pos)
            return Array(name, elem, index, nelems)
        if kind in (Kind.STRUCT, Kind.UNION):
            members = []
            for i, (m_name, m_type, m_off) in enumerate(entries("3I")):
                bitfield = 0
                if kflag:
                    bitfield, m_off = m_off >> 24, m_off & 0xFFFFFF
                members.append(Member(string(m_name, f"member #{i}"), m_type, m_off,
                                      bitfield))
            cls = Struct if kind == Kind.STRUCT else Union
            return cls(name, size_or_type, tuple(members), kflag)
        if kind == Kind.ENUM:
            values = tuple(EnumValue(string(v_name, f"enumerator #{i}"),
                                     val if kflag else val & 0xFFFFFFFF)
                           for i, (v_name, val) in enumerate(entries("Ii")))
            return Enum(name, size_or_type, values, kflag)
        if kind == Kind.ENUM64:
            values = []
            for i, (v_name, lo, hi) in enumerate(entries("3I")):
                value = hi << 32 | lo
                if kflag and value >= 1 << 63:
                    value -= 1 << 64
                values.append(EnumValue(string(v_name, f"enumerator #{i}"), value))
            return Enum64(name, size_or_type, tuple(values), kflag)
        if kind == Kind.FUNC_PROTO:
            params = tuple(Param(string(p_name, f"parameter #{i}"), p_type)
                           for i, (p_name, p_type) in enumerate(entries("2I")))
            return FuncProto(name, size_or_type, params)
        if kind == Kind.VAR:
            return Var(name, size_or_type, struct.unpack_from(e + "I", raw, pos)[0])
        if kind == Kind.DATASEC:
            return Datasec(name, size_or_type,
                           tuple(VarSecinfo(*entry) for entry in entries("3I")))
        if kind == Kind.DECL_TAG:
            return DeclTag(name, size_or_type, struct.unpack_from(e + "i", raw, pos)[0], kflag)
        simple = {Kind.PTR: Ptr, Kind.TYPEDEF: Typedef, Kind.VOLATILE: Volatile,
                  Kind.CONST: Const, Kind.RESTRICT: Restrict}
        if kind in simple:
            return simple[kind](name, size_or_type)
        if kind == Kind.FWD:
            return Fwd(name, kflag)
        if kind == Kind.FUNC:
            return Func(name, size_or_type, vlen)
        if kind == Kind.FLOAT:
            return Float(name, size_or_type)
        return TypeTag(name, size_or_type, kflag)  # the last kind left

    # -- access ----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of ids, void included (btf__type_cnt)."""
        return len(self._offsets) + len(self._added)

    def __getitem__(self, type_id: int) -> Type:
        record = self._cache.get(type_id)
        if record is not None:
            return record
        if not isinstance(type_id, int) or not 0 <= type_id < len(self):
            raise BtfError(f"type id {type_id} does not exist (this BTF has ids 0.."
                           f"{len(self) - 1})")
        if type_id < len(self._offsets):
            record = self._decode(type_id)
        else:
            record = self._added[type_id - len(self._offsets)]
        self._cache[type_id] = record
        return record

    def __iter__(self) -> Iterator[Type]:
        return (self[i] for i in range(1, len(self)))

    def add(self, record: Type) -> int:
        """Append a record; its id."""
        self._added.append(record)
        if self._by_name is not None:
            self._by_name.setdefault(record.name, []).append(len(self) - 1)
        return len(self) - 1

    def replace(self, updates: Mapping[int, Type]) -> Btf:
        """A copy with the records of some ids replaced (libbpf's in-place fixups)."""
        copy = Btf(byteorder=self.byteorder, strings=self.strings.to_bytes())
        copy._raw, copy._offsets = self._raw, self._offsets
        copy._added = list(self._added)
        copy._cache = {**self._cache, **updates}
        return copy

    def ids_named(self, name: str) -> list[int]:
        """Every id whose type is called ``name``."""
        if self._by_name is None:
            by_name: dict[str, list[int]] = {}
            name_off = struct.Struct(self.endian + "I").unpack_from
            raw_names: dict[int, str] = {}
            for type_id in range(1, len(self._offsets)):
                off = name_off(self._raw, self._offsets[type_id])[0]
                if off not in raw_names:
                    raw_names[off] = self.strings.get(off, f"name of type [{type_id}]")
                by_name.setdefault(raw_names[off], []).append(type_id)
            for type_id in range(len(self._offsets), len(self)):
                by_name.setdefault(self[type_id].name, []).append(type_id)
            self._by_name = by_name
        return self._by_name.get(name, [])

    def find(self, name: str, kind: Kind | None = Kind.STRUCT) -> int:
        """The first id called ``name`` (of ``kind``, unless None); KeyError if none."""
        for type_id in self.ids_named(name):
            if kind is None or self[type_id].kind == kind:
                return type_id
        raise KeyError(f"no {'type' if kind is None else kind.name} named {name!r} in BTF")

    def resolve(self, type_id: int) -> int:
        """Skip typedefs and modifiers: the id of the type they stand for."""
        for _ in range(64):
            record = self[type_id]
            if record.kind not in MODIFIERS and record.kind != Kind.TYPEDEF:
                return type_id
            type_id = record.type_id  # type: ignore[attr-defined]
        raise BtfError(f"type [{type_id}]: a loop of typedefs or modifiers")

    def size_of(self, type_id: int) -> int:
        """Size in bytes (btf__resolve_size); BtfError for void, functions, forwards."""
        nelems = 1
        for _ in range(64):
            record = self[type_id]
            if isinstance(record, Int | Struct | Enum | Float | Datasec):
                return nelems * record.size
            if isinstance(record, Ptr):
                return nelems * _POINTER_SIZE
            if isinstance(record, Array):
                nelems *= record.nelems
            elif not isinstance(record, Typedef | Volatile | Const | Restrict | TypeTag | Var):
                raise BtfError(f"type [{type_id}] {self.describe(type_id)} has no size")
            type_id = record.type_id  # type: ignore[attr-defined]
        raise BtfError(f"type [{type_id}]: too deeply nested to size")

    def members(self, type_id: int) -> tuple[Member, ...]:
        """Direct members of a struct or union."""
        record = self[self.resolve(type_id)]
        if not isinstance(record, Struct):
            raise BtfError(f"type [{type_id}] {self.describe(type_id)} is not a struct or "
                           "union")
        return record.members

    def flat_members(self, type_id: int, base_bits: int = 0,
                     depth: int = 0) -> dict[str, FlatMember]:
        """Members by name, anonymous structs/unions flattened into their parent."""
        if depth > 32:
            raise BtfError(f"type [{type_id}]: anonymous members nest too deeply")
        result: dict[str, FlatMember] = {}
        for member in self.members(type_id):
            bits = base_bits + member.bit_offset
            target = self[self.resolve(member.type_id)]
            if not member.name and isinstance(target, Struct):
                for name, sub in self.flat_members(member.type_id, bits, depth + 1).items():
                    result.setdefault(name, sub)
                continue
            result.setdefault(member.name, FlatMember(
                member.name, member.type_id, bits // 8, self.size_of(member.type_id), bits,
                member.bitfield_size))
        return result

    def describe(self, type_id: int, depth: int = 0) -> str:
        """A C-like name for messages: ``struct pair``, ``__u64``, ``int *``, ``char[16]``."""
        record = self[type_id]
        if depth > 16:
            return "..."
        if isinstance(record, Void):
            return "void"
        if isinstance(record, Struct | Enum | Fwd):
            keyword = ("union" if isinstance(record, Union) or getattr(record, "union", False)
                       else "enum" if isinstance(record, Enum) else "struct")
            return f"{keyword} {record.name or '(anon)'}"
        if isinstance(record, Ptr):
            return f"{self.describe(record.type_id, depth + 1)} *"
        if isinstance(record, Array):
            return f"{self.describe(record.type_id, depth + 1)}[{record.nelems}]"
        if isinstance(record, Volatile | Const | Restrict):
            return f"{record.kind.name.lower()} {self.describe(record.type_id, depth + 1)}"
        return record.name or f"({record.kind.name.lower()})"

    # -- encoding --------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The BTF blob (header, types, strings) in this BTF's byte order."""
        e = self.endian
        strings = StringTable(self.strings.to_bytes())
        types = b"".join(_encode(record, strings, e) for record in self)
        data = strings.to_bytes()
        header = struct.pack(e + HEADER.format, BTF_MAGIC, BTF_VERSION, 0, HEADER.size, 0,
                             len(types), len(types), len(data))
        return header + types + data

    def string_offset(self, text: str) -> int:
        """Offset of ``text`` in the encoded string section (added if new)."""
        return self.strings.add(text)


def _encode(record: Type, strings: StringTable, e: str) -> bytes:
    kind = record.kind
    vlen, kflag, size_or_type, extra = 0, False, 0, b""
    if isinstance(record, Int):
        size_or_type = record.size
        extra = struct.pack(e + "I", record.encoding << 24 | record.bits_offset << 16 |
                            record.nr_bits)
    elif isinstance(record, Array):
        extra = struct.pack(e + "3I", record.type_id, record.index_type_id, record.nelems)
    elif isinstance(record, Struct):
        size_or_type, kflag, vlen = record.size, record.kind_flag, len(record.members)
        extra = b"".join(struct.pack(e + "3I", strings.add(m.name), m.type_id,
                                     m.bitfield_size << 24 | m.bit_offset if kflag
                                     else m.bit_offset)
                         for m in record.members)
    elif isinstance(record, Enum64):
        size_or_type, kflag, vlen = record.size, record.signed, len(record.values)
        extra = b"".join(struct.pack(e + "3I", strings.add(v.name), v.value & 0xFFFFFFFF,
                                     (v.value >> 32) & 0xFFFFFFFF) for v in record.values)
    elif isinstance(record, Enum):
        size_or_type, kflag, vlen = record.size, record.signed, len(record.values)
        extra = b"".join(struct.pack(e + "II", strings.add(v.name), v.value & 0xFFFFFFFF)
                         for v in record.values)
    elif isinstance(record, FuncProto):
        size_or_type, vlen = record.return_type_id, len(record.params)
        extra = b"".join(struct.pack(e + "2I", strings.add(p.name), p.type_id)
                         for p in record.params)
    elif isinstance(record, Var):
        size_or_type, extra = record.type_id, struct.pack(e + "I", record.linkage)
    elif isinstance(record, Datasec):
        size_or_type, vlen = record.size, len(record.vars)
        extra = b"".join(struct.pack(e + "3I", v.type_id, v.offset, v.size)
                         for v in record.vars)
    elif isinstance(record, DeclTag):
        size_or_type, kflag = record.type_id, record.attribute
        extra = struct.pack(e + "i", record.component_idx)
    elif isinstance(record, TypeTag):
        size_or_type, kflag = record.type_id, record.attribute
    elif isinstance(record, Func):
        size_or_type, vlen = record.type_id, record.linkage
    elif isinstance(record, Fwd):
        kflag = record.union
    elif isinstance(record, Float):
        size_or_type = record.size
    elif isinstance(record, Ptr | Typedef | Volatile | Const | Restrict):
        size_or_type = record.type_id
    else:
        raise BtfError(f"cannot encode {record!r}")
    info = kflag << 31 | kind << 24 | vlen
    return struct.pack(e + "3I", strings.add(record.name), info, size_or_type) + extra
