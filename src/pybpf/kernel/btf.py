"""A small reader of BTF (include/uapi/linux/btf.h): enough to check struct layouts.

The kernel describes its own types in /sys/kernel/btf/vmlinux. ``Btf`` parses the type
section once and answers "which members, at which offsets and sizes, does struct or union
X have", with anonymous struct/union members flattened the way C lets one name them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

BTF_MAGIC = 0xEB9F
VMLINUX = "/sys/kernel/btf/vmlinux"

# BTF_KIND_*
INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT = range(1, 12)
FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT, DECL_TAG, TYPE_TAG, ENUM64 = range(12, 20)

_QUALIFIERS = {TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG}
# Bytes that follow ``struct btf_type`` for each kind: fixed, and per vlen entry.
_EXTRA = {INT: (4, 0), ARRAY: (12, 0), STRUCT: (0, 12), UNION: (0, 12), ENUM: (0, 8),
          FUNC_PROTO: (0, 8), VAR: (4, 0), DATASEC: (0, 12), DECL_TAG: (4, 0),
          ENUM64: (0, 12)}


@dataclass(frozen=True)
class Member:
    """One (possibly nested) member: byte offset, size in bytes, bitfield width (0: none)."""

    name: str
    offset: int
    size: int
    bit_offset: int
    bitfield_size: int = 0


@dataclass(frozen=True)
class _Type:
    kind: int
    name: str
    size_or_type: int
    vlen: int
    kind_flag: bool
    extra: bytes


class Btf:
    """Parsed BTF types; ids start at 1 as in the kernel."""

    def __init__(self, data: bytes) -> None:
        magic = struct.unpack_from("<H", data)[0]
        self._endian = "<" if magic == BTF_MAGIC else ">"
        e = self._endian
        if struct.unpack_from(e + "H", data)[0] != BTF_MAGIC:
            raise ValueError("not BTF data (bad magic)")
        hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from(e + "5I", data, 4)
        self._strings = data[hdr_len + str_off:hdr_len + str_off + str_len]
        self.types: list[_Type | None] = [None]  # id 0 is void
        self._by_name: dict[tuple[int, str], int] = {}
        pos, end = hdr_len + type_off, hdr_len + type_off + type_len
        header = struct.Struct(e + "3I")
        while pos < end:
            name_off, info, size_or_type = header.unpack_from(data, pos)
            pos += 12
            kind = (info >> 24) & 0x1F
            vlen = info & 0xFFFF
            fixed, per_entry = _EXTRA.get(kind, (0, 0))
            extra_len = fixed + per_entry * vlen
            name = self._string(name_off)
            self.types.append(_Type(kind, name, size_or_type, vlen, bool(info >> 31),
                                    data[pos:pos + extra_len]))
            if name and kind in (STRUCT, UNION):
                self._by_name.setdefault((kind, name), len(self.types) - 1)
            pos += extra_len

    @classmethod
    def load(cls, path: str = VMLINUX) -> Btf:
        with open(path, "rb") as f:
            return cls(f.read())

    def _string(self, off: int) -> str:
        return self._strings[off:self._strings.index(b"\0", off)].decode()

    def find(self, name: str, kind: int = STRUCT) -> int:
        """The id of struct (or union) ``name``; KeyError when absent."""
        return self._by_name[(kind, name)]

    def resolve(self, type_id: int) -> int:
        """Skip typedefs and qualifiers."""
        while self.types[type_id] is not None and self.types[type_id].kind in _QUALIFIERS:
            type_id = self.types[type_id].size_or_type
        return type_id

    def size_of(self, type_id: int) -> int:
        t = self.types[self.resolve(type_id)]
        if t is None:
            return 0
        if t.kind == PTR:
            return 8
        if t.kind == ARRAY:
            elem, _index, nelems = struct.unpack_from(self._endian + "3I", t.extra)
            return self.size_of(elem) * nelems
        return t.size_or_type

    def members(self, type_id: int) -> list[tuple[str, int, int, int]]:
        """Direct members of a struct/union: (name, member type id, bit offset, bitfield)."""
        t = self.types[self.resolve(type_id)]
        if t is None or t.kind not in (STRUCT, UNION):
            raise TypeError(f"type {type_id} is not a struct or union")
        out = []
        for i in range(t.vlen):
            name_off, mtype, offset = struct.unpack_from(self._endian + "3I", t.extra, 12 * i)
            bitfield = 0
            if t.kind_flag:
                bitfield, offset = offset >> 24, offset & 0xFFFFFF
            out.append((self._string(name_off), mtype, offset, bitfield))
        return out

    def flat_members(self, type_id: int, base_bits: int = 0) -> dict[str, Member]:
        """Members by name, anonymous structs/unions flattened into their parent."""
        result: dict[str, Member] = {}
        for name, mtype, bits, bitfield in self.members(type_id):
            bits += base_bits
            target = self.types[self.resolve(mtype)]
            if not name and target is not None and target.kind in (STRUCT, UNION):
                for sub_name, member in self.flat_members(mtype, bits).items():
                    result.setdefault(sub_name, member)
                continue
            result.setdefault(name, Member(name, bits // 8, self.size_of(mtype), bits,
                                           bitfield))
        return result

    def union_variants(self, type_id: int) -> list[tuple[str, int]]:
        """The variants of a union: (member name, "" for anonymous ones; type id)."""
        return [(name, mtype) for name, mtype, _bits, _bf in self.members(type_id)]
