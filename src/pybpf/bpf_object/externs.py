"""Extern variables: ``__kconfig`` and ``__ksym`` (libbpf's ``extern_desc`` of EXT_KCFG and
of EXT_KSYM variables; kernel functions, ``KfuncExtern``, are the spec's and the loader's).

At open (``collect_externs``, libbpf's bpf_object__collect_externs):
- each undefined ELF symbol whose BTF VAR lies in the ``.kconfig`` DATASEC is a kconfig
  extern: its type must be one libbpf can fill (``find_kcfg_type``: bool, char, an integer
  of 1, 2, 4 or 8 bytes, ``enum libbpf_tristate``, a char array), else the object is
  refused as libbpf refuses it. They are laid out in one value, sorted by alignment
  (largest first), then size, then name (cmp_externs), each at its alignment; that value is
  the ``.kconfig`` map (``kconfig_map``: an ARRAY of one element, named as libbpf names
  it, ``BPF_F_RDONLY_PROG | BPF_F_MMAPABLE``, frozen once filled), and a program's load of
  such an extern becomes a map value load of it at the extern's offset;
- each one in ``.ksyms`` that is a VAR is a kernel variable: typed (``extern const struct
  rq runqueues __ksym``) or typeless (``extern const void init_task __ksym``);
- the BTF is fixed up as libbpf fixes it before BTF_LOAD: the ``.kconfig`` VARs become
  allocated, at their offsets, the DATASEC as large as the value (``.ksyms``: the spec's
  ``fixup_ksyms``).

At load (``resolve_kconfig``, ``resolve_ksyms``: bpf_object__resolve_externs):
- the virtual externs LINUX_KERNEL_VERSION, LINUX_HAS_BPF_COOKIE (a program calling
  bpf_get_attach_cookie loads: libbpf's probe) and LINUX_HAS_SYSCALL_WRAPPER come from the
  System; CONFIG_* from the ``kconfig=`` text given to ``load`` first, then the System's
  kernel config, line by line as libbpf reads it (``y``/``n``/``m``, quoted strings,
  integers as strtoull reads them, each checked against the extern's type); another
  LINUX_* that is weak stays 0, any other name is refused;
- a typed ksym is the VAR of that name in the System's kernel BTF, whose type must be
  compatible with the extern's (bpf_core_types_are_compat); the load becomes a
  ``BPF_PSEUDO_BTF_ID`` of it (module BTFs are not searched: pybpf passes no fd array);
  a typeless one is the address of that name in the System's kallsyms, loaded as a
  constant; a weak one that is not found loads 0, a strong one stops the load: ESRCH
  "not resolved", or EINVAL for a typed one missing from the kernel's BTF, as libbpf
  returns them.
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..btf import Array, Btf, BtfError, Datasec, Enum, Enum64, Int, Ptr, Struct, Var, VarSecinfo
from ..btf.codecs import btf_codec
from ..btf.types import BTF_INT_BOOL, BTF_INT_SIGNED, BTF_VAR_GLOBAL_ALLOCATED
from ..errors import BPFError
from ..hostinfo import parse_kallsyms
from ..maps import MapSpec
from ..system import System
from ..uapi import BPF_F_MMAPABLE, BPF_F_RDONLY_PROG, BPF_PSEUDO_BTF_ID, MapType, ProgType
from .elf import STB_WEAK, ElfFile
from .errors import ObjectError
from .map_defs import GlobalVariable, ObjectMap, internal_map_name
from .relo_core import types_are_compat

KCONFIG_SEC = ".kconfig"
KSYMS_SEC = ".ksyms"
TRI_NO, TRI_YES, TRI_MODULE = 0, 1, 2  # enum libbpf_tristate
_INSN = struct.Struct("<BBhi")
_POINTER_SIZE = 8
_COMMAND = "resolve_externs"
# libbpf's probe_kern_bpf_cookie(): call bpf_get_attach_cookie (174); exit.
_COOKIE_PROBE = _INSN.pack(0x85, 0, 0, 174) + _INSN.pack(0x95, 0, 0, 0)
# strtoull(value, &end, 0): optional sign, then 0x.. hex, 0.. octal or decimal digits.
_STRTOULL = re.compile(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


class KcfgType(enum.Enum):
    """What value a kconfig extern takes (libbpf's enum kcfg_type)."""

    UNKNOWN = "unknown"
    CHAR = "char"
    BOOL = "bool"
    INT = "int"
    TRISTATE = "tristate"
    CHAR_ARR = "char array"


@dataclass(frozen=True)
class KconfigExtern:
    """An ``extern ... __kconfig`` variable: where it lies in the ``.kconfig`` map's value."""

    name: str
    type_id: int       # its type in the object's BTF
    kcfg_type: KcfgType
    size: int
    align: int
    signed: bool
    weak: bool
    offset: int = 0


@dataclass(frozen=True)
class KsymExtern:
    """An ``extern ... __ksym`` kernel variable; ``type_id`` is its type (modifiers and
    typedefs skipped) in the object's BTF, 0 for a typeless one (``const void``)."""

    name: str
    type_id: int
    weak: bool


@dataclass(frozen=True)
class Externs:
    """What ``collect_externs`` finds, and the BTF fixed up for them."""

    kconfig: dict[str, KconfigExtern]
    ksyms: dict[str, KsymExtern]
    btf: Btf | None


# -- open -----------------------------------------------------------------------------------

def collect_externs(elf: ElfFile, btf: Btf | None) -> Externs:
    """bpf_object__collect_externs() for variables (see the module doc). An undefined
    symbol the BTF does not declare in ``.kconfig`` or ``.ksyms`` is left alone: loading a
    program that uses it fails naming it."""
    if btf is None:
        return Externs({}, {}, btf)
    var_ids = {btf[i].name: i for i in range(len(btf) - 1, 0, -1) if isinstance(btf[i], Var)}
    section_of: dict[int, int] = {}
    for type_id in range(1, len(btf)):
        record = btf[type_id]
        if isinstance(record, Datasec):
            for info in record.vars:
                section_of.setdefault(info.type_id, type_id)
    kconfig: list[KconfigExtern] = []
    ksyms: dict[str, KsymExtern] = {}
    for symbol in elf.symbols:
        var_id = var_ids.get(symbol.name)
        if not symbol.is_extern or var_id is None or var_id not in section_of:
            continue
        var = btf[var_id]
        section = btf[section_of[var_id]].name
        weak = symbol.bind == STB_WEAK
        if section == KCONFIG_SEC:
            kconfig.append(_kconfig_extern(btf, var, weak))
        elif section == KSYMS_SEC:
            ksyms[var.name] = KsymExtern(var.name, btf.resolve(var.type_id), weak)
    if not kconfig:
        return Externs({}, ksyms, btf)
    kconfig.sort(key=lambda e: (-e.align, e.size, e.name))
    laid_out, off = {}, 0
    for ext in kconfig:
        data_off = -(-off // ext.align) * ext.align
        laid_out[ext.name] = dataclasses.replace(ext, offset=data_off)
        off = data_off + ext.size
    return Externs(laid_out, ksyms, _fixup_kconfig_datasec(btf, laid_out, off))


def _kconfig_extern(btf: Btf, var: Var, weak: bool) -> KconfigExtern:
    where = f"extern (kcfg) '{var.name}'"
    try:
        size = btf.size_of(var.type_id)
        align = align_of(btf, var.type_id)
    except BtfError as exc:
        raise ObjectError(f"failed to resolve size of {where}: {exc}") from None
    kcfg_type, signed = find_kcfg_type(btf, var.type_id)
    if kcfg_type == KcfgType.UNKNOWN:
        raise ObjectError(f"{where}: type is unsupported ({btf.describe(var.type_id)}; a "
                          "kconfig extern is a bool, char, integer, enum libbpf_tristate or "
                          "char array)")
    return KconfigExtern(var.name, var.type_id, kcfg_type, size, align, signed, weak)


def find_kcfg_type(btf: Btf, type_id: int) -> tuple[KcfgType, bool]:
    """libbpf's find_kcfg_type(): the kind of value a kconfig extern of this type takes,
    and whether it is a signed integer."""
    record = btf[btf.resolve(type_id)]
    if isinstance(record, Int):
        if record.encoding & BTF_INT_BOOL:
            return (KcfgType.BOOL if record.size == 1 else KcfgType.UNKNOWN), False
        signed = bool(record.encoding & BTF_INT_SIGNED)
        if record.size == 1:
            return KcfgType.CHAR, signed
        if record.size not in (2, 4, 8):
            return KcfgType.UNKNOWN, signed
        return KcfgType.INT, signed
    if isinstance(record, Enum):  # ENUM of 4 bytes, or ENUM64, named libbpf_tristate
        if record.name != "libbpf_tristate" or (not isinstance(record, Enum64) and
                                                record.size != 4):
            return KcfgType.UNKNOWN, False
        return KcfgType.TRISTATE, False
    if isinstance(record, Array):
        if record.nelems == 0 or find_kcfg_type(btf, record.type_id)[0] != KcfgType.CHAR:
            return KcfgType.UNKNOWN, False
        return KcfgType.CHAR_ARR, False
    return KcfgType.UNKNOWN, False


def align_of(btf: Btf, type_id: int) -> int:
    """btf__align_of(): an integer's size up to a pointer's, an array's element's, a
    struct's largest member's (1 when packed)."""
    record = btf[btf.resolve(type_id)]
    if isinstance(record, Int | Enum):
        return min(record.size, _POINTER_SIZE)
    if isinstance(record, Ptr):
        return _POINTER_SIZE
    if isinstance(record, Array):
        return align_of(btf, record.type_id)
    if isinstance(record, Struct):
        align = 1
        for member in record.members:
            member_align = align_of(btf, member.type_id)
            if member.bitfield_size == 0 and member.bit_offset % (8 * member_align):
                return 1  # a member off its natural alignment: the struct is packed
            align = max(align, member_align)
        return 1 if record.size % align else align
    raise BtfError(f"type [{type_id}] {btf.describe(type_id)} has no alignment")


def _fixup_kconfig_datasec(btf: Btf, externs: Mapping[str, KconfigExtern], size: int) -> Btf:
    """The ``.kconfig`` DATASEC as libbpf leaves it: the value's size, each VAR allocated
    at its extern's offset, sorted by offset (btf_fixup_datasec's sort_vars)."""
    updates: dict[int, Any] = {}
    for type_id in btf.ids_named(KCONFIG_SEC):
        record = btf[type_id]
        if not isinstance(record, Datasec):
            continue
        infos = []
        for info in record.vars:
            var = btf[info.type_id]
            ext = externs.get(var.name)
            if ext is None:
                raise ObjectError(f"failed to find extern definition for BTF var '{var.name}'")
            updates[info.type_id] = dataclasses.replace(var, linkage=BTF_VAR_GLOBAL_ALLOCATED)
            infos.append(VarSecinfo(info.type_id, ext.offset, info.size))
        infos.sort(key=lambda info: info.offset)
        updates[type_id] = dataclasses.replace(record, size=size, vars=tuple(infos))
    return btf.replace(updates)


def kconfig_map(btf: Btf, externs: Mapping[str, KconfigExtern], obj_name: str) -> ObjectMap:
    """bpf_object__init_kconfig_map(): the internal map holding the kconfig externs' values
    (zero until ``resolve_kconfig`` fills them at load)."""
    last = max(externs.values(), key=lambda e: e.offset)
    size = last.offset + last.size
    datasec_id = next(i for i in btf.ids_named(KCONFIG_SEC) if isinstance(btf[i], Datasec))
    spec = MapSpec(MapType.ARRAY, 4, size, 1, flags=BPF_F_RDONLY_PROG | BPF_F_MMAPABLE,
                   name=internal_map_name(obj_name, KCONFIG_SEC),
                   value=btf_codec(btf, datasec_id, KCONFIG_SEC))
    variables = {e.name: GlobalVariable(e.name, KCONFIG_SEC, e.offset, e.size, e.type_id,
                                        btf_codec(btf, e.type_id, e.name))
                 for e in externs.values()}
    return ObjectMap(spec.name, KCONFIG_SEC, spec, 0, datasec_id, data=bytearray(size),
                     variables=variables, frozen=True)


# -- load: kconfig --------------------------------------------------------------------------

class _KcfgError(Exception):
    """A value libbpf would not put in an extern (set_kcfg_value_*): errno and message."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(message)
        self.errno = err


def _error(err: int, message: str, hint: str = "") -> BPFError:
    return BPFError(err, message, command=_COMMAND, hint=hint)


def resolve_kconfig(externs: Mapping[str, KconfigExtern], system: System,
                    extra: str | None = None) -> bytes:
    """The ``.kconfig`` map's value: each extern's value as libbpf's
    bpf_object__resolve_externs() sets it (see the module doc); ``extra`` is text in the
    kernel config's format, read before the kernel's (libbpf's ``kconfig`` open option)."""
    if not externs:
        return b""
    last = max(externs.values(), key=lambda e: e.offset)
    data = bytearray(last.offset + last.size)
    is_set: set[str] = set()
    need_config = False
    for ext in externs.values():
        if ext.name.startswith("CONFIG_"):
            need_config = True
            continue
        if ext.name == "LINUX_KERNEL_VERSION":
            value = system.kernel_version()
            if not value:
                raise _error(errno.EINVAL, f"extern (kcfg) '{ext.name}': failed to get kernel "
                             "version")
        elif ext.name == "LINUX_HAS_BPF_COOKIE":
            value = int(_has_bpf_cookie(system))
        elif ext.name == "LINUX_HAS_SYSCALL_WRAPPER":
            value = int(system.has_syscall_wrapper())
        elif not ext.name.startswith("LINUX_") or not ext.weak:
            raise _error(errno.EINVAL, f"extern (kcfg) '{ext.name}': unrecognized virtual "
                         "extern", hint="libbpf fills CONFIG_* externs from the kernel "
                         "config and knows LINUX_KERNEL_VERSION, LINUX_HAS_BPF_COOKIE and "
                         "LINUX_HAS_SYSCALL_WRAPPER; another LINUX_* extern must be __weak")
        else:
            continue  # an unknown LINUX_* that is weak: 0
        try:
            set_kcfg_value_num(ext, data, value)
        except _KcfgError as exc:
            raise _error(exc.errno, str(exc)) from None
        is_set.add(ext.name)
    if need_config and extra:
        _read_kconfig(externs, data, is_set, extra, "in-memory Kconfig")
        need_config = any(e.name not in is_set for e in externs.values())
    if need_config:
        try:
            text = system.kernel_config()
        except BPFError as exc:
            raise _error(errno.EINVAL, f"failed to open system Kconfig: {exc.strerror}",
                         hint="pass the config's lines as load(kconfig=...)") from None
        _read_kconfig(externs, data, is_set, text, "system Kconfig")
    for ext in externs.values():
        if ext.name not in is_set and not ext.weak:
            raise _error(errno.ESRCH, f"extern '{ext.name}' (strong): not resolved",
                         hint="the kernel's config does not set it: declare it __weak to "
                              "take 0 when it is not set")
    return bytes(data)


def _has_bpf_cookie(system: System) -> bool:
    """libbpf's probe_kern_bpf_cookie(): a tracepoint program calling
    bpf_get_attach_cookie loads."""
    try:
        fd = system.prog_load(int(ProgType.TRACEPOINT), _COOKIE_PROBE, license="GPL")
    except BPFError:
        return False
    system.close(fd)
    return True


def _read_kconfig(externs: Mapping[str, KconfigExtern], data: bytearray, is_set: set[str],
                  text: str, what: str) -> None:
    for line in text.splitlines():
        try:
            process_kconfig_line(externs, data, is_set, line)
        except _KcfgError as exc:
            raise _error(errno.EINVAL, f"error parsing {what} line '{line}': {exc} "
                         f"({errno.errorcode.get(exc.errno, exc.errno)})") from None


def process_kconfig_line(externs: Mapping[str, KconfigExtern], data: bytearray,
                         is_set: set[str], line: str) -> None:
    """bpf_object__process_kconfig_line(): ``CONFIG_X=value`` sets extern CONFIG_X if the
    object has it and nothing set it yet; other lines (``# CONFIG_X is not set``) are
    skipped. Raises ``_KcfgError`` for a value the extern cannot take."""
    if not line.startswith("CONFIG_"):
        return
    name, sep, value = line.rstrip("\n").partition("=")
    if not sep:
        raise _KcfgError(errno.EINVAL, f"failed to parse '{line}': no separator")
    if not value:
        raise _KcfgError(errno.EINVAL, f"failed to parse '{line}': no value")
    ext = externs.get(name)
    if ext is None or name in is_set:
        return
    if value[0] in "ynm":
        set_kcfg_value_tri(ext, data, value[0])
    elif value[0] == '"':
        set_kcfg_value_str(ext, data, value)
    else:
        number = parse_u64(value)
        if number is None:
            raise _KcfgError(errno.EINVAL, f"extern (kcfg) '{name}': value '{value}' isn't a "
                             "valid integer")
        if ext.kcfg_type not in (KcfgType.INT, KcfgType.CHAR):
            raise _KcfgError(errno.EINVAL, f"extern (kcfg) '{name}': value '{value}' implies "
                             "integer type")
        set_kcfg_value_num(ext, data, number)
    is_set.add(name)


def parse_u64(value: str) -> int | None:
    """strtoull(value, &end, 0) that must read all of ``value``: None if it does not (or
    overflows); a negative number wraps, as in C."""
    match = _STRTOULL.fullmatch(value)
    if match is None:
        return None
    sign, digits = match.groups()
    number = int(digits, 16 if digits[:2].lower() == "0x" else 8 if digits[0] == "0" else 10)
    if number >> 64:
        return None  # ERANGE
    return -number & (1 << 64) - 1 if sign == "-" else number


def set_kcfg_value_tri(ext: KconfigExtern, data: bytearray, value: str) -> None:
    """set_kcfg_value_tri(): ``y``/``n``/``m`` into a bool, a tristate or a char."""
    off = ext.offset
    if ext.kcfg_type == KcfgType.BOOL:
        if value == "m":
            raise _KcfgError(errno.EINVAL, f"extern (kcfg) '{ext.name}': value '{value}' "
                             "implies tristate or char type")
        data[off] = value == "y"
    elif ext.kcfg_type == KcfgType.TRISTATE:
        tri = {"y": TRI_YES, "m": TRI_MODULE}.get(value, TRI_NO)
        data[off:off + 4] = tri.to_bytes(4, "little")
    elif ext.kcfg_type == KcfgType.CHAR:
        data[off] = ord(value)
    else:
        raise _KcfgError(errno.EINVAL, f"extern (kcfg) '{ext.name}': value '{value}' implies "
                         "bool, tristate, or char type")


def set_kcfg_value_str(ext: KconfigExtern, data: bytearray, value: str) -> None:
    """set_kcfg_value_str(): a quoted string into a char array, cut to fit (NUL-ended)."""
    if ext.kcfg_type != KcfgType.CHAR_ARR:
        raise _KcfgError(errno.EINVAL, f"extern (kcfg) '{ext.name}': value '{value}' implies "
                         "char array type")
    raw = value.encode(errors="surrogateescape")
    if len(raw) < 2 or not raw.endswith(b'"'):
        raise _KcfgError(errno.EINVAL, f"extern (kcfg) '{ext.name}': invalid string config "
                         f"'{value}'")
    text = raw[1:-1][:ext.size - 1]  # libbpf warns that a long string is truncated
    data[ext.offset:ext.offset + len(text) + 1] = text + b"\0"


def set_kcfg_value_num(ext: KconfigExtern, data: bytearray, value: int) -> None:
    """set_kcfg_value_num(): an integer into an int, a char or a bool (0 or 1), which it
    must fit (is_kcfg_value_in_range: ERANGE)."""
    if ext.kcfg_type not in (KcfgType.INT, KcfgType.CHAR, KcfgType.BOOL):
        raise _KcfgError(errno.EINVAL, f"extern (kcfg) '{ext.name}': value '{value}' implies "
                         "integer, char, or boolean type")
    if ext.kcfg_type == KcfgType.BOOL and value > 1:
        raise _KcfgError(errno.EINVAL, f"extern (kcfg) '{ext.name}': value '{value}' isn't "
                         "boolean compatible")
    bits = ext.size * 8
    if ext.size != 8:
        fits = ((value + (1 << (bits - 1))) & (1 << 64) - 1) < 1 << bits if ext.signed \
            else value >> bits == 0
        if not fits:
            raise _KcfgError(errno.ERANGE, f"extern (kcfg) '{ext.name}': value '{value}' "
                             f"doesn't fit in {ext.size} bytes")
    data[ext.offset:ext.offset + ext.size] = (value & (1 << bits) - 1).to_bytes(ext.size,
                                                                              "little")


# -- load: ksyms ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ResolvedKsym:
    """Where a ksym extern resolved: ``btf_id`` of its VAR in the kernel's BTF (typed), or
    ``addr`` (typeless; 0 for a weak one not found)."""

    btf_id: int = 0
    addr: int = 0


def resolve_ksyms(externs: Mapping[str, KsymExtern], local_btf: Btf, system: System,
                  kernel_btf: Btf | None) -> dict[str, ResolvedKsym]:
    """bpf_object__read_kallsyms_file() for typeless ksyms, then
    bpf_object__resolve_ksym_var_btf_id() for typed ones (see the module doc)."""
    out: dict[str, ResolvedKsym] = {}
    typeless = {name for name, ext in externs.items() if not ext.type_id}
    if typeless:
        try:
            symbols = parse_kallsyms(system.kallsyms())
        except (BPFError, ValueError) as exc:
            raise _error(errno.EINVAL, f"failed to read kallsyms: {exc}") from None
        for addr, sym_type, sym_name in symbols:
            llvm = sym_name.find(".llvm.")
            if sym_type == "d" and llvm >= 0:
                sym_name = sym_name[:llvm]
            if sym_name not in typeless:
                continue
            if sym_name in out and out[sym_name].addr != addr:
                raise _error(errno.EINVAL, f"extern (ksym) '{sym_name}': resolution is "
                             f"ambiguous: {out[sym_name].addr:#x} or {addr:#x}")
            out[sym_name] = ResolvedKsym(addr=addr)
    for name, ext in externs.items():
        if not ext.type_id:
            continue
        var_id = _kernel_var(kernel_btf, name)
        if var_id is None:
            if ext.weak:
                continue
            raise _error(errno.EINVAL, f"extern (var ksym) '{name}': not found in kernel BTF "
                         f"(the {system.name} backend's vmlinux; module BTFs are not "
                         "searched)", hint="declare it __weak to load 0 when it is missing")
        targ_id = kernel_btf.resolve(kernel_btf[var_id].type_id)
        if not types_are_compat(local_btf, ext.type_id, kernel_btf, targ_id):
            raise _error(errno.EINVAL, f"extern (var ksym) '{name}': incompatible types, "
                         f"expected [{ext.type_id}] {local_btf.describe(ext.type_id)}, but "
                         f"kernel has [{targ_id}] {kernel_btf.describe(targ_id)}")
        out[name] = ResolvedKsym(btf_id=var_id)
    for name, ext in externs.items():
        if name not in out and not ext.weak:
            raise _error(errno.ESRCH, f"extern '{name}' (strong): not resolved",
                         hint=f"no symbol '{name}' in the {system.name} backend's kallsyms: "
                              "declare it __weak to load 0 when it is missing")
    return out


def _kernel_var(kernel_btf: Btf | None, name: str) -> int | None:
    if kernel_btf is None:
        return None
    return next((i for i in kernel_btf.ids_named(name) if isinstance(kernel_btf[i], Var)),
                None)


def patch_ksym(code: bytearray, insn: int, resolved: ResolvedKsym | None) -> None:
    """bpf_object__relocate_data(), RELO_EXTERN_LD64 of a ksym: a typed one found becomes a
    BPF_PSEUDO_BTF_ID load of its VAR (vmlinux: btf obj fd 0), anything else the constant
    address (0 when not found)."""
    pos = insn * 8
    opcode, regs, off, _imm = _INSN.unpack_from(code, pos)
    hi = _INSN.unpack_from(code, pos + 8)
    resolved = resolved or ResolvedKsym()
    if resolved.btf_id:
        _INSN.pack_into(code, pos, opcode, BPF_PSEUDO_BTF_ID << 4 | regs & 0xF, off,
                        resolved.btf_id)
        _INSN.pack_into(code, pos + 8, hi[0], hi[1], hi[2], 0)
        return
    lo, high = resolved.addr & 0xFFFFFFFF, resolved.addr >> 32 & 0xFFFFFFFF
    _INSN.pack_into(code, pos, opcode, regs, off, lo - (1 << 32) if lo >> 31 else lo)
    _INSN.pack_into(code, pos + 8, hi[0], hi[1], hi[2],
                    high - (1 << 32) if high >> 31 else high)
