"""CO-RE: relocate field offsets, sizes, type and enum facts from the program's BTF to a
target BTF (the running kernel's /sys/kernel/btf/vmlinux, or the context types a backend
models). A pure function of (local BTF, relocation record, target BTF), following libbpf's
relo_core.c step by step (its names are kept so the two read side by side):

1. ``parse_spec``: the access string ``"0:1:2"`` over the local root type becomes a spec:
   the raw indices, the named fields and array indices ("accessors"), the bit offset.
2. Candidates: target types of a compatible kind whose *essential* name (without a
   ``___flavor`` suffix) equals the local one.
3. ``spec_match`` per candidate: find each named field by name (through anonymous
   members), check array bounds and field compatibility; a target spec results.
4. ``calc_relo``: the value the instruction holds now (local) and the one it must hold
   (target); every matching candidate must agree, or the relocation is ambiguous.
5. ``patch_insn``: rewrite the immediate (ALU, 64-bit load) or the offset (load/store),
   checking the old value; an access that cannot be satisfied is poisoned (the
   instruction becomes ``call 0xbad2310``) so that it fails only if it is reachable.

Errors are ``CoreRelocationError`` naming the program, the relocation number (its index
in the section's .BTF.ext records, as libbpf counts) and the access in libbpf's format.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..btf import (
    Array,
    Btf,
    BtfError,
    CoreRelo,
    CoreReloKind,
    Enum,
    Float,
    FuncProto,
    Fwd,
    Int,
    Kind,
    Ptr,
    Struct,
    Union,
)
from ..btf.types import BTF_INT_SIGNED
from .errors import CoreRelocationError

BPF_CORE_SPEC_MAX_LEN = 64
POISON_IMM = 0xBAD2310  # "bad relo": the verifier reports "invalid func unknown#195896080"
_INSN = struct.Struct("<BBhi")
_FIELD_KINDS = frozenset({CoreReloKind.FIELD_BYTE_OFFSET, CoreReloKind.FIELD_BYTE_SIZE,
                          CoreReloKind.FIELD_EXISTS, CoreReloKind.FIELD_SIGNED,
                          CoreReloKind.FIELD_LSHIFT_U64, CoreReloKind.FIELD_RSHIFT_U64})
_TYPE_KINDS = frozenset({CoreReloKind.TYPE_ID_LOCAL, CoreReloKind.TYPE_ID_TARGET,
                         CoreReloKind.TYPE_EXISTS, CoreReloKind.TYPE_MATCHES,
                         CoreReloKind.TYPE_SIZE})
_ENUMVAL_KINDS = frozenset({CoreReloKind.ENUMVAL_EXISTS, CoreReloKind.ENUMVAL_VALUE})


class _NoMatch(Exception):
    """A candidate does not match (libbpf: return 0); not an error."""


@dataclass
class Accessor:
    type_id: int          # struct/union, or the array element type
    idx: int              # member index, or array index
    name: str | None      # member name; None for an array index


@dataclass
class CoreSpec:
    btf: Btf
    root_type_id: int
    kind: CoreReloKind
    spec: list[Accessor] = field(default_factory=list)
    raw_spec: list[int] = field(default_factory=list)
    bit_offset: int = 0

    def format(self) -> str:
        """bpf_core_format_spec(): ``<byte_off> [7] struct s.a[3] (0:1:3 @ offset 12)``."""
        btf = self.btf
        root = btf[self.root_type_id]
        text = (f"<{self.kind.label}> [{self.root_type_id}] {root.kind.name.lower()} "
                f"{root.name or '<anon>'}")
        if self.kind in _TYPE_KINDS:
            return text
        if self.kind in _ENUMVAL_KINDS:
            enum = btf[btf.resolve(self.root_type_id)]
            if isinstance(enum, Enum) and self.raw_spec:
                value = enum.values[self.raw_spec[0]]
                text += f"::{value.name} = {value.value}"
            return text
        for i, acc in enumerate(self.spec):
            if acc.name:
                text += f".{acc.name}"
            elif i > 0 or acc.idx > 0:
                text += f"[{acc.idx}]"
        raw = ":".join(map(str, self.raw_spec))
        offset = (f"{self.bit_offset // 8}.{self.bit_offset % 8}" if self.bit_offset % 8
                  else f"{self.bit_offset // 8}")
        return f"{text} ({raw} @ offset {offset})"


@dataclass
class CoreResult:
    """bpf_core_relo_res: the expected and new values, and how to patch."""

    orig_val: int = 0
    new_val: int = 0
    poison: bool = False
    validate: bool = True
    fail_memsz_adjust: bool = False
    orig_sz: int = 0
    orig_type_id: int = 0
    new_sz: int = 0
    new_type_id: int = 0
    description: str = ""  # the local spec, for messages


def essential_name(name: str) -> str:
    """bpf_core_essential_name_len(): ``task_struct___v2`` -> ``task_struct``."""
    for i in range(len(name) - 5, -1, -1):
        s = name[i:i + 5]
        if s[0] != "_" and s[1:4] == "___" and s[4] != "_":
            return name[:i + 1]
    return name


def _kind_compat(a, b) -> bool:
    """btf_kind_core_compat()."""
    return a.kind == b.kind or (isinstance(a, Enum) and isinstance(b, Enum))


def _resolve_size(btf: Btf, type_id: int, what: str) -> int:
    try:
        return btf.size_of(type_id)
    except BtfError as exc:
        raise CoreRelocationError(f"{what}: {exc}") from None


def _skip(btf: Btf, type_id: int) -> tuple[int, object]:
    resolved = btf.resolve(type_id)
    return resolved, btf[resolved]


# -- 1. the local spec --------------------------------------------------------------------

def parse_spec(btf: Btf, relo: CoreRelo, what: str) -> CoreSpec:
    """bpf_core_parse_spec()."""
    access = relo.access_str
    bad = CoreRelocationError(f"{what}: parsing [{relo.type_id}] + {access!r} failed")
    if not access or access.startswith(":"):
        raise bad
    spec = CoreSpec(btf, relo.type_id, relo.kind)
    if relo.kind in _TYPE_KINDS:
        if access != "0":
            raise bad
        return spec
    try:
        raw = [int(part) for part in access.split(":")]
    except ValueError:
        raise bad from None
    if not raw or any(i < 0 for i in raw) or len(raw) > BPF_CORE_SPEC_MAX_LEN:
        raise bad
    spec.raw_spec = raw
    type_id, t = _skip(btf, relo.type_id)
    spec.spec.append(Accessor(type_id, raw[0], None))
    if relo.kind in _ENUMVAL_KINDS:
        if not isinstance(t, Enum) or len(raw) > 1 or raw[0] >= len(t.values):
            raise bad
        spec.spec[0].name = t.values[raw[0]].name
        return spec
    if relo.kind not in _FIELD_KINDS:
        raise bad
    spec.bit_offset = raw[0] * _resolve_size(btf, type_id, what) * 8
    for access_idx in raw[1:]:
        type_id, t = _skip(btf, type_id)
        if isinstance(t, Struct):
            if access_idx >= len(t.members):
                raise bad
            member = t.members[access_idx]
            spec.bit_offset += member.bit_offset
            if member.name:
                spec.spec.append(Accessor(type_id, access_idx, member.name))
            type_id = member.type_id
        elif isinstance(t, Array):
            flex = _is_flex_arr(btf, spec.spec[-1], t)
            type_id, _elem = _skip(btf, t.type_id)
            if not flex and access_idx >= t.nelems:
                raise bad
            spec.spec.append(Accessor(type_id, access_idx, None))
            spec.bit_offset += access_idx * _resolve_size(btf, type_id, what) * 8
        else:
            raise CoreRelocationError(
                f"{what}: relo for [{relo.type_id}] {access} captures type [{type_id}] of "
                f"unexpected kind {t.kind.name}")
    return spec


def _is_flex_arr(btf: Btf, acc: Accessor, arr: Array) -> bool:
    if not acc.name or arr.nelems > 0:
        return False
    parent = btf[acc.type_id]
    return isinstance(parent, Struct) and acc.idx == len(parent.members) - 1


# -- 2. candidates ------------------------------------------------------------------------

_essential_index: weakref.WeakKeyDictionary[Btf, dict[str, list[int]]] = \
    weakref.WeakKeyDictionary()


def find_candidates(local_btf: Btf, local_id: int, target_btf: Btf) -> list[int]:
    """bpf_core_add_cands(): target ids with a compatible kind and the same essential
    name as local type ``local_id``."""
    index = _essential_index.get(target_btf)
    if index is None:
        index = {}
        for type_id in range(1, len(target_btf)):
            name = target_btf[type_id].name
            if name:
                index.setdefault(essential_name(name), []).append(type_id)
        _essential_index[target_btf] = index
    local = local_btf[local_id]
    return [i for i in index.get(essential_name(local.name), [])
            if _kind_compat(target_btf[i], local)]


# -- 3. matching --------------------------------------------------------------------------

def types_are_compat(local_btf: Btf, local_id: int, targ_btf: Btf, targ_id: int,
                     level: int = 2) -> bool:
    """__bpf_core_types_are_compat() (TYPE_* relocations other than TYPE_MATCHES)."""
    if not _kind_compat(local_btf[local_id], targ_btf[targ_id]):
        return False
    for _depth in range(32):
        local_id, lt = _skip(local_btf, local_id)
        targ_id, tt = _skip(targ_btf, targ_id)
        if not _kind_compat(lt, tt):
            return False
        if isinstance(lt, Struct | Enum | Fwd) or lt.kind == Kind.UNKN:
            return True
        if isinstance(lt, Int):
            return lt.bits_offset == 0 and tt.bits_offset == 0  # type: ignore[attr-defined]
        if isinstance(lt, Ptr | Array):
            local_id, targ_id = lt.type_id, tt.type_id  # type: ignore[attr-defined]
            continue
        if isinstance(lt, FuncProto):
            if len(lt.params) != len(tt.params):  # type: ignore[attr-defined]
                return False
            for lp, tp in zip(lt.params, tt.params, strict=True):  # type: ignore[attr-defined]
                if level <= 0:
                    raise CoreRelocationError("type compatibility check nests too deeply")
                if not types_are_compat(local_btf, local_btf.resolve(lp.type_id), targ_btf,
                                        targ_btf.resolve(tp.type_id), level - 1):
                    return False
            local_id, targ_id = lt.return_type_id, tt.return_type_id  # type: ignore
            continue
        return False
    raise CoreRelocationError("type compatibility check nests too deeply")


def _fields_are_compat(local_btf: Btf, local_id: int, targ_btf: Btf, targ_id: int) -> bool:
    """bpf_core_fields_are_compat()."""
    for _depth in range(32):
        local_id, lt = _skip(local_btf, local_id)
        targ_id, tt = _skip(targ_btf, targ_id)
        if isinstance(lt, Struct) and isinstance(tt, Struct):
            return True
        if not _kind_compat(lt, tt):
            return False
        if isinstance(lt, Ptr | Float):
            return True
        if isinstance(lt, Fwd | Enum):
            ln, tn = essential_name(lt.name), essential_name(tt.name)
            return not ln or not tn or ln == tn
        if isinstance(lt, Int):
            return lt.bits_offset == 0 and tt.bits_offset == 0  # type: ignore[attr-defined]
        if isinstance(lt, Array):
            local_id, targ_id = lt.type_id, tt.type_id  # type: ignore[attr-defined]
            continue
        return False
    return False


def _match_member(local_btf: Btf, local_acc: Accessor, targ_btf: Btf, targ_id: int,
                  spec: CoreSpec) -> int | None:
    """bpf_core_match_member(): the target field's type id, or None if absent."""
    targ_id, tt = _skip(targ_btf, targ_id)
    if not isinstance(tt, Struct):
        return None
    local_member = local_btf[local_acc.type_id].members[local_acc.idx]  # type: ignore
    for i, member in enumerate(tt.members):
        if len(spec.raw_spec) == BPF_CORE_SPEC_MAX_LEN:
            raise CoreRelocationError("struct/union/array nesting is too deep")
        spec.bit_offset += member.bit_offset
        spec.raw_spec.append(i)
        if not member.name:
            found = _match_member(local_btf, local_acc, targ_btf, member.type_id, spec)
            if found is not None:
                return found
        elif member.name == local_member.name:
            if not _fields_are_compat(local_btf, local_member.type_id, targ_btf,
                                      member.type_id):
                raise _NoMatch
            spec.spec.append(Accessor(targ_id, i, member.name))
            return member.type_id
        spec.bit_offset -= member.bit_offset
        spec.raw_spec.pop()
    return None


def spec_match(local: CoreSpec, targ_btf: Btf, targ_id: int) -> CoreSpec | None:
    """bpf_core_spec_match(): the target spec, or None when the candidate does not match."""
    targ = CoreSpec(targ_btf, targ_id, local.kind)
    if local.kind in _TYPE_KINDS:
        if local.kind == CoreReloKind.TYPE_MATCHES:
            ok = types_match(local.btf, local.root_type_id, targ_btf, targ_id)
        else:
            ok = types_are_compat(local.btf, local.root_type_id, targ_btf, targ_id)
        return targ if ok else None
    if local.kind in _ENUMVAL_KINDS:
        targ_id, tt = _skip(targ_btf, targ_id)
        if not isinstance(tt, Enum):
            return None
        wanted = essential_name(local.spec[0].name or "")
        for i, value in enumerate(tt.values):
            if essential_name(value.name) == wanted:
                targ.spec.append(Accessor(targ_id, i, value.name))
                targ.raw_spec.append(i)
                return targ
        return None
    try:
        for i, acc in enumerate(local.spec):
            targ_id, tt = _skip(targ_btf, targ_id)
            if acc.name:
                found = _match_member(local.btf, acc, targ_btf, targ_id, targ)
                if found is None:
                    return None
                targ_id = found
                continue
            if i > 0:
                if not isinstance(tt, Array):
                    return None
                flex = _is_flex_arr(targ_btf, targ.spec[-1], tt)
                if not flex and acc.idx >= tt.nelems:
                    return None
                targ_id, _elem = _skip(targ_btf, tt.type_id)
            if len(targ.raw_spec) == BPF_CORE_SPEC_MAX_LEN:
                raise CoreRelocationError("struct/union/array nesting is too deep")
            targ.spec.append(Accessor(targ_id, acc.idx, None))
            targ.raw_spec.append(acc.idx)
            targ.bit_offset += acc.idx * _resolve_size(targ_btf, targ_id, "target") * 8
    except _NoMatch:
        return None
    return targ


def _names_match(local: str, targ: str) -> bool:
    if not targ:
        return not local
    return essential_name(local) == essential_name(targ)


def types_match(local_btf: Btf, local_id: int, targ_btf: Btf, targ_id: int,
                behind_ptr: bool = False, level: int = 32) -> bool:
    """__bpf_core_types_match() (TYPE_MATCHES)."""
    if level <= 0:
        raise CoreRelocationError("type match check nests too deeply")
    for _depth in range(32):
        local_id, lt = _skip(local_btf, local_id)
        targ_id, tt = _skip(targ_btf, targ_id)
        if not _names_match(lt.name, tt.name):
            return False
        if lt.kind == Kind.UNKN:
            return tt.kind == Kind.UNKN
        if isinstance(lt, Fwd):
            if behind_ptr and isinstance(tt, Struct):
                return isinstance(tt, Union) == lt.union
            return isinstance(tt, Fwd) and tt.union == lt.union
        if isinstance(lt, Enum):
            if not isinstance(tt, Enum) or lt.size != tt.size or \
                    len(lt.values) > len(tt.values):
                return False
            return all(any(_names_match(lv.name, tv.name) for tv in tt.values)
                       for lv in lt.values)
        if isinstance(lt, Struct):
            if behind_ptr:
                if lt.kind == tt.kind:
                    return True
                return isinstance(tt, Fwd) and tt.union == isinstance(lt, Union)
            if lt.kind != tt.kind or len(lt.members) > len(tt.members):  # type: ignore
                return False
            return all(any(_names_match(lm.name, tm.name) and
                           types_match(local_btf, lm.type_id, targ_btf, tm.type_id,
                                       behind_ptr, level - 1)
                           for tm in tt.members)  # type: ignore[attr-defined]
                       for lm in lt.members)
        if isinstance(lt, Int):
            return isinstance(tt, Int) and lt.size == tt.size and \
                (lt.encoding & BTF_INT_SIGNED) == (tt.encoding & BTF_INT_SIGNED)
        if isinstance(lt, Ptr):
            if not isinstance(tt, Ptr):
                return False
            behind_ptr = True
            local_id, targ_id = lt.type_id, tt.type_id
            continue
        if isinstance(lt, Array):
            if not isinstance(tt, Array) or lt.nelems != tt.nelems:
                return False
            local_id, targ_id = lt.type_id, tt.type_id
            continue
        if isinstance(lt, FuncProto):
            if not isinstance(tt, FuncProto) or len(lt.params) != len(tt.params):
                return False
            if not all(types_match(local_btf, lp.type_id, targ_btf, tp.type_id, behind_ptr,
                                   level - 1)
                       for lp, tp in zip(lt.params, tt.params, strict=True)):
                return False
            local_id, targ_id = lt.return_type_id, tt.return_type_id
            continue
        return False
    raise CoreRelocationError("type match check nests too deeply")


# -- 4. values ----------------------------------------------------------------------------

_POISON = object()


def _calc_field(relo: CoreRelo, spec: CoreSpec | None, what: str
                ) -> tuple[int, int, int, bool] | object:
    """bpf_core_calc_field_relo(): (value, field size, field type id, validate), or
    _POISON when the field is absent from the target."""
    if relo.kind == CoreReloKind.FIELD_EXISTS:
        return (1 if spec else 0), 0, 0, True
    if spec is None:
        return _POISON
    btf = spec.btf
    acc = spec.spec[-1]
    if not acc.name:  # a[n]: the element
        if relo.kind == CoreReloKind.FIELD_BYTE_OFFSET:
            elem_id = _innermost_element(btf, acc.type_id)
            return spec.bit_offset // 8, _resolve_size(btf, elem_id, what), acc.type_id, True
        if relo.kind == CoreReloKind.FIELD_BYTE_SIZE:
            return _resolve_size(btf, acc.type_id, what), 0, 0, True
        raise CoreRelocationError(f"{what}: relo {relo.kind.label} can't be applied to an "
                                  "array access")
    parent = btf[acc.type_id]
    member = parent.members[acc.idx]  # type: ignore[attr-defined]
    field_type_id, mt = _skip(btf, member.type_id)
    bit_off, bit_sz = spec.bit_offset, member.bitfield_size
    bitfield = bit_sz > 0
    if bitfield:
        byte_sz = mt.size  # type: ignore[attr-defined]
        byte_off = bit_off // 8 // byte_sz * byte_sz
        while bit_off + bit_sz - byte_off * 8 > byte_sz * 8:
            if byte_sz >= 8:
                raise CoreRelocationError(f"{what}: relo {relo.kind.label} can't be "
                                          "satisfied for a bitfield")
            byte_sz *= 2
            byte_off = bit_off // 8 // byte_sz * byte_sz
    else:
        byte_sz = _resolve_size(btf, field_type_id, what)
        byte_off = bit_off // 8
        bit_sz = byte_sz * 8
    validate = not bitfield
    field_sz = type_id = 0
    if relo.kind == CoreReloKind.FIELD_BYTE_OFFSET:
        value = byte_off
        if not bitfield:
            field_sz = _resolve_size(btf, _innermost_element(btf, field_type_id), what)
            type_id = field_type_id
    elif relo.kind == CoreReloKind.FIELD_BYTE_SIZE:
        value = byte_sz
    elif relo.kind == CoreReloKind.FIELD_SIGNED:
        value = int((isinstance(mt, Enum) and mt.signed) or
                    (isinstance(mt, Int) and bool(mt.encoding & BTF_INT_SIGNED)))
        validate = True
    elif relo.kind == CoreReloKind.FIELD_LSHIFT_U64:
        value = 64 - (bit_off + bit_sz - byte_off * 8)  # little-endian target
    else:  # FIELD_RSHIFT_U64
        value = 64 - bit_sz
        validate = True
    return value, field_sz, type_id, validate


def _innermost_element(btf: Btf, type_id: int) -> int:
    type_id, t = _skip(btf, type_id)
    while isinstance(t, Array):
        type_id, t = _skip(btf, t.type_id)
    return type_id


def _calc_type(relo: CoreRelo, spec: CoreSpec | None, what: str) -> tuple[int, bool]:
    """bpf_core_calc_type_relo(): (value, validate)."""
    if spec is None:
        return 0, True
    if relo.kind == CoreReloKind.TYPE_ID_TARGET:
        return spec.root_type_id, False
    if relo.kind in (CoreReloKind.TYPE_EXISTS, CoreReloKind.TYPE_MATCHES):
        return 1, True
    return _resolve_size(spec.btf, spec.root_type_id, what), True  # TYPE_SIZE


def _calc_enumval(relo: CoreRelo, spec: CoreSpec | None) -> int | object:
    if relo.kind == CoreReloKind.ENUMVAL_EXISTS:
        return 1 if spec else 0
    if spec is None:
        return _POISON
    enum = spec.btf[spec.spec[0].type_id]
    return enum.values[spec.spec[0].idx].value & 0xFFFFFFFFFFFFFFFF  # type: ignore


def calc_relo(relo: CoreRelo, local: CoreSpec, targ: CoreSpec | None,
              what: str) -> CoreResult:
    """bpf_core_calc_relo()."""
    res = CoreResult(description=local.format())
    if relo.kind in _FIELD_KINDS:
        orig = _calc_field(relo, local, what)
        new = _calc_field(relo, targ, what)
        if new is _POISON or orig is _POISON:
            res.poison = True
            return res
        res.orig_val, res.orig_sz, res.orig_type_id, res.validate = orig  # type: ignore
        res.new_val, res.new_sz, res.new_type_id, _ = new  # type: ignore
        if res.orig_sz != res.new_sz:
            ot, nt = local.btf[res.orig_type_id], targ.btf[res.new_type_id]  # type: ignore
            unsigned = isinstance(ot, Int) and isinstance(nt, Int) and \
                not ot.encoding & BTF_INT_SIGNED and not nt.encoding & BTF_INT_SIGNED
            res.fail_memsz_adjust = not (isinstance(ot, Ptr) and isinstance(nt, Ptr)) and \
                not unsigned
    elif relo.kind in _TYPE_KINDS:
        res.orig_val, res.validate = _calc_type(relo, local, what)
        res.new_val, _ = _calc_type(relo, targ, what)
    else:
        orig, new = _calc_enumval(relo, local), _calc_enumval(relo, targ)
        if new is _POISON:
            res.poison = True
            return res
        res.orig_val, res.new_val = orig, new  # type: ignore[assignment]
    return res


def resolve_relo(local_btf: Btf, relo: CoreRelo, targ_btf: Btf, what: str) -> CoreResult:
    """bpf_core_calc_relo_insn(): the result for one relocation against ``targ_btf``."""
    local = parse_spec(local_btf, relo, what)
    if relo.kind == CoreReloKind.TYPE_ID_LOCAL:
        return CoreResult(relo.type_id, relo.type_id, validate=False,
                          description=local.format())
    local_name = local_btf[relo.type_id].name
    if not local_name:
        raise CoreRelocationError(f"{what}: <{relo.kind.label}> relocation doesn't support "
                                  "anonymous types")
    result: CoreResult | None = None
    chosen: CoreSpec | None = None
    for cand in find_candidates(local_btf, relo.type_id, targ_btf):
        targ = spec_match(local, targ_btf, cand)
        if targ is None:
            continue
        res = calc_relo(relo, local, targ, what)
        if result is None:
            result, chosen = res, targ
        elif targ.bit_offset != chosen.bit_offset:  # type: ignore[union-attr]
            raise CoreRelocationError(f"{what}: {local.format()}: field offset ambiguity: "
                                      f"{targ.bit_offset} != {chosen.bit_offset}")
        elif res.poison != result.poison or res.new_val != result.new_val:
            raise CoreRelocationError(f"{what}: {local.format()}: relocation decision "
                                      f"ambiguity: {res.new_val} != {result.new_val}")
    if result is None:
        result = calc_relo(relo, local, None, what)
    return result


# -- 5. patching --------------------------------------------------------------------------

def patch_insn(code: bytearray, insn_idx: int, res: CoreResult, what: str) -> None:
    """bpf_core_patch_insn(): rewrite instruction ``insn_idx`` of ``code``."""
    pos = insn_idx * 8
    if pos + 8 > len(code):
        raise CoreRelocationError(f"{what}: insn #{insn_idx} is past the end of the program")
    opcode, regs, off, imm = _INSN.unpack_from(code, pos)
    cls = opcode & 0x07
    is_ldimm64 = opcode == 0x18
    if res.poison:
        _poison(code, pos, is_ldimm64)
        return
    orig, new = res.orig_val, res.new_val
    if cls in (0x04, 0x07):  # ALU, ALU64
        if opcode & 0x08:  # BPF_X
            raise CoreRelocationError(f"{what}: insn #{insn_idx} (ALU) does not take an "
                                      "immediate")
        if res.validate and imm != _s32(orig):
            raise CoreRelocationError(f"{what}: unexpected insn #{insn_idx} (ALU/ALU64) "
                                      f"value: got {imm}, exp {orig} -> {new}")
        _INSN.pack_into(code, pos, opcode, regs, off, _s32(new))
    elif cls in (0x01, 0x02, 0x03):  # LDX, ST, STX
        if res.validate and off != orig:
            raise CoreRelocationError(f"{what}: unexpected insn #{insn_idx} (LDX/ST/STX) "
                                      f"value: got {off}, exp {orig} -> {new}")
        if new > 0x7FFF:
            raise CoreRelocationError(f"{what}: insn #{insn_idx} (LDX/ST/STX) value too "
                                      f"big: {new}")
        if res.fail_memsz_adjust:
            _poison(code, pos, False)
            return
        if res.new_sz != res.orig_sz:
            sizes = {8: 0x18, 4: 0x00, 2: 0x08, 1: 0x10}
            current = {v: k for k, v in sizes.items()}.get(opcode & 0x18)
            if current != res.orig_sz:
                raise CoreRelocationError(f"{what}: insn #{insn_idx} (LDX/ST/STX) unexpected "
                                          f"mem size: got {current}, exp {res.orig_sz}")
            if res.new_sz not in sizes:
                raise CoreRelocationError(f"{what}: insn #{insn_idx} (LDX/ST/STX) invalid "
                                          f"new mem size: {res.new_sz}")
            opcode = (opcode & ~0x18) | sizes[res.new_sz]
        _INSN.pack_into(code, pos, opcode, regs, new, imm)
    elif is_ldimm64:
        if pos + 16 > len(code):
            raise CoreRelocationError(f"{what}: insn #{insn_idx} (LDIMM64) is cut short")
        hi = _INSN.unpack_from(code, pos + 8)
        if regs >> 4 or off or hi[0] or hi[1] or hi[2]:
            raise CoreRelocationError(f"{what}: insn #{insn_idx} (LDIMM64) has unexpected "
                                      "form")
        current = (imm & 0xFFFFFFFF) | (hi[3] & 0xFFFFFFFF) << 32
        if res.validate and current != orig:
            raise CoreRelocationError(f"{what}: unexpected insn #{insn_idx} (LDIMM64) value: "
                                      f"got {current}, exp {orig} -> {new}")
        _INSN.pack_into(code, pos, opcode, regs, off, _s32(new))
        _INSN.pack_into(code, pos + 8, 0, 0, 0, _s32(new >> 32))
    else:
        raise CoreRelocationError(f"{what}: trying to relocate unrecognized insn "
                                  f"#{insn_idx}, code {opcode:#x}")


def _poison(code: bytearray, pos: int, is_ldimm64: bool) -> None:
    """bpf_core_poison_insn(): ``call 0xbad2310``, in both slots of a 64-bit load."""
    for p in ((pos, pos + 8) if is_ldimm64 else (pos,)):
        _INSN.pack_into(code, p, 0x85, 0, 0, POISON_IMM)


def _s32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


@dataclass(frozen=True)
class Poisoned:
    """A CO-RE relocation that found no target: its instruction and what it asked for."""

    insn: int
    relo_index: int
    description: str


def apply_core_relos(insns: bytes, relos: Iterable[tuple[int, CoreRelo]], local_btf: Btf,
                     targ_btf: Btf, prog_name: str) -> tuple[bytes, list[Poisoned]]:
    """``insns`` with every CO-RE relocation applied against ``targ_btf``, and the
    relocations that were poisoned (their instruction now fails verification if reached)."""
    code = bytearray(insns)
    poisoned = []
    for insn_idx, relo in relos:
        what = f"prog '{prog_name}': relo #{relo.index}"
        res = resolve_relo(local_btf, relo, targ_btf, what)
        patch_insn(code, insn_idx, res, f"{what}: {res.description}")
        if res.poison or (res.fail_memsz_adjust and code[insn_idx * 8] == 0x85):
            poisoned.append(Poisoned(insn_idx, relo.index, res.description))
    return bytes(code), poisoned
