"""BTF, the BPF Type Format: one reader, writer and resolver for the whole project.

- ``types``: one record per BTF kind (Linux 6.18: INT ... ENUM64).
- ``spec``: ``Btf``, a parsed blob (an object's .BTF section or the kernel's
  /sys/kernel/btf/vmlinux): ids, lookup by name, ``resolve``/``size_of``, encoding back.
- ``ext``: .BTF.ext (func_info, line_info, CO-RE relocation records).
- ``codecs``: ``btf_codec(btf, id)``, a key/value codec that decodes as the C declared. It
  belongs to the layer of ``pybpf.codecs`` (above ``System``), so this package does not
  import it: the backends may import ``pybpf.btf``; import ``pybpf.btf.codecs`` for codecs.
"""

from .ext import BtfExt, CoreRelo, CoreReloKind, FuncInfo, LineInfo
from .spec import VMLINUX, Btf, BtfError, FlatMember, StringTable
from .types import (
    BTF_FUNC_EXTERN,
    BTF_FUNC_GLOBAL,
    BTF_FUNC_STATIC,
    BTF_INT_BOOL,
    BTF_INT_CHAR,
    BTF_INT_SIGNED,
    BTF_VAR_GLOBAL_ALLOCATED,
    BTF_VAR_GLOBAL_EXTERN,
    BTF_VAR_STATIC,
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
    RefType,
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

__all__ = [
    "BTF_FUNC_EXTERN", "BTF_FUNC_GLOBAL", "BTF_FUNC_STATIC", "BTF_INT_BOOL", "BTF_INT_CHAR",
    "BTF_INT_SIGNED", "BTF_VAR_GLOBAL_ALLOCATED", "BTF_VAR_GLOBAL_EXTERN", "BTF_VAR_STATIC",
    "MODIFIERS", "VMLINUX", "Array", "Btf", "BtfError", "BtfExt", "Const", "CoreRelo",
    "CoreReloKind", "Datasec", "DeclTag", "Enum", "Enum64", "EnumValue", "FlatMember",
    "Float", "Func", "FuncInfo", "FuncProto", "Fwd", "Int", "Kind", "LineInfo", "Member",
    "Param", "Ptr", "RefType", "Restrict", "StringTable", "Struct", "Type", "TypeTag", "Typedef",
    "Union", "Var", "VarSecinfo", "Void", "Volatile",
]
