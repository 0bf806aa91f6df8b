"""The BTF type records (include/uapi/linux/btf.h): one frozen dataclass per kind.

A record holds what its ``struct btf_type`` and the data after it say, with names as
``str`` and references as type ids (0 is void). Records know nothing of the BTF blob
they came from: ``Btf`` (spec.py) holds them, resolves ids and encodes them back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["Array", "BTF_FUNC_EXTERN", "BTF_FUNC_GLOBAL", "BTF_FUNC_STATIC", "BTF_INT_BOOL",
    "BTF_INT_CHAR", "BTF_INT_SIGNED", "BTF_VAR_GLOBAL_ALLOCATED", "BTF_VAR_GLOBAL_EXTERN",
    "BTF_VAR_STATIC", "Const", "Datasec", "DeclTag", "Enum", "Enum64", "EnumValue", "Float", "Func",
    "FuncProto", "Fwd", "Int", "Kind", "MODIFIERS", "Member", "Param", "Ptr", "RefType", "Restrict",
    "Struct", "Type", "TypeTag", "Typedef", "Union", "Var", "VarSecinfo", "Void", "Volatile"]


class Kind(enum.IntEnum):
    """BTF_KIND_* (Linux 6.18: every kind up to ENUM64)."""

    UNKN = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


# BTF_INT_ENCODING bits.
BTF_INT_SIGNED, BTF_INT_CHAR, BTF_INT_BOOL = 1, 2, 4
# VAR linkage (BTF_VAR_*) and FUNC linkage (btf_func_linkage).
BTF_VAR_STATIC, BTF_VAR_GLOBAL_ALLOCATED, BTF_VAR_GLOBAL_EXTERN = 0, 1, 2
BTF_FUNC_STATIC, BTF_FUNC_GLOBAL, BTF_FUNC_EXTERN = 0, 1, 2


@dataclass(frozen=True)
class Type:
    """Base of every record; ``kind`` is a class constant."""

    kind: ClassVar[Kind] = Kind.UNKN
    name: str = ""


@dataclass(frozen=True)
class Void(Type):
    """Type id 0: void (never encoded)."""


@dataclass(frozen=True)
class Int(Type):
    size: int = 0
    encoding: int = 0          # BTF_INT_SIGNED | BTF_INT_CHAR | BTF_INT_BOOL
    bits_offset: int = 0       # legacy bitfield encoding; 0 in everything clang emits now
    nr_bits: int = 0
    kind: ClassVar[Kind] = Kind.INT

    @property
    def signed(self) -> bool:
        return bool(self.encoding & BTF_INT_SIGNED)


@dataclass(frozen=True)
class RefType(Type):
    """A kind whose ``struct btf_type`` only refers to another type."""

    type_id: int = 0


class Ptr(RefType):
    kind: ClassVar[Kind] = Kind.PTR


@dataclass(frozen=True)
class Array(Type):
    type_id: int = 0           # element type
    index_type_id: int = 0
    nelems: int = 0
    kind: ClassVar[Kind] = Kind.ARRAY


@dataclass(frozen=True)
class Member:
    """A struct/union member: bit offset and, for a bitfield, its width in bits."""

    name: str
    type_id: int
    bit_offset: int
    bitfield_size: int = 0


@dataclass(frozen=True)
class Struct(Type):
    size: int = 0
    members: tuple[Member, ...] = ()
    kind_flag: bool = False    # members encode bitfield_size << 24 | bit_offset
    kind: ClassVar[Kind] = Kind.STRUCT


@dataclass(frozen=True)
class Union(Struct):
    kind: ClassVar[Kind] = Kind.UNION


@dataclass(frozen=True)
class EnumValue:
    name: str
    value: int


@dataclass(frozen=True)
class Enum(Type):
    size: int = 4
    values: tuple[EnumValue, ...] = ()
    signed: bool = False       # kind_flag
    kind: ClassVar[Kind] = Kind.ENUM


@dataclass(frozen=True)
class Enum64(Enum):
    size: int = 8
    kind: ClassVar[Kind] = Kind.ENUM64


@dataclass(frozen=True)
class Fwd(Type):
    union: bool = False        # kind_flag: a forward-declared union, else struct
    kind: ClassVar[Kind] = Kind.FWD


class Typedef(RefType):
    kind: ClassVar[Kind] = Kind.TYPEDEF


class Volatile(RefType):
    kind: ClassVar[Kind] = Kind.VOLATILE


class Const(RefType):
    kind: ClassVar[Kind] = Kind.CONST


class Restrict(RefType):
    kind: ClassVar[Kind] = Kind.RESTRICT


@dataclass(frozen=True)
class Func(Type):
    type_id: int = 0           # its FUNC_PROTO
    linkage: int = BTF_FUNC_STATIC
    kind: ClassVar[Kind] = Kind.FUNC


@dataclass(frozen=True)
class Param:
    name: str
    type_id: int


@dataclass(frozen=True)
class FuncProto(Type):
    return_type_id: int = 0
    params: tuple[Param, ...] = ()
    kind: ClassVar[Kind] = Kind.FUNC_PROTO


@dataclass(frozen=True)
class Var(Type):
    type_id: int = 0
    linkage: int = BTF_VAR_STATIC
    kind: ClassVar[Kind] = Kind.VAR


@dataclass(frozen=True)
class VarSecinfo:
    type_id: int               # a VAR (or a FUNC for .ksyms)
    offset: int
    size: int


@dataclass(frozen=True)
class Datasec(Type):
    size: int = 0
    vars: tuple[VarSecinfo, ...] = ()
    kind: ClassVar[Kind] = Kind.DATASEC


@dataclass(frozen=True)
class Float(Type):
    size: int = 0
    kind: ClassVar[Kind] = Kind.FLOAT


@dataclass(frozen=True)
class DeclTag(Type):
    type_id: int = 0
    component_idx: int = -1    # -1: the type itself, else a member or parameter index
    attribute: bool = False    # kind_flag: an __attribute__ rather than a btf_decl_tag
    kind: ClassVar[Kind] = Kind.DECL_TAG


@dataclass(frozen=True)
class TypeTag(Type):
    type_id: int = 0
    attribute: bool = False    # kind_flag
    kind: ClassVar[Kind] = Kind.TYPE_TAG


# Kinds that only qualify another type; ``Btf.resolve`` skips them (and typedefs).
MODIFIERS = frozenset({Kind.VOLATILE, Kind.CONST, Kind.RESTRICT, Kind.TYPE_TAG})
RECORDS: dict[Kind, type[Type]] = {
    cls.kind: cls for cls in (Int, Ptr, Array, Struct, Union, Enum, Fwd, Typedef, Volatile,
                              Const, Restrict, Func, FuncProto, Var, Datasec, Float, DeclTag,
                              TypeTag, Enum64)}
