"""BTF objects (kernel/bpf/btf.c): BPF_BTF_LOAD, what map_create and prog_load check with
them, and the type information this backend describes itself with.

Rules this module keeps:
- A BTF object is an fd like a map's; closing the last reference frees it. Loading checks
  lightly, with the kernel's errnos: the blob parses (header, kinds, string offsets), every
  type id a type refers to exists, struct/union members lie inside their type, DATASEC
  variables inside their section; a refusal is EINVAL with a log line, as the kernel's BTF
  checker writes one. A blob over BTF_MAX_SIZE is E2BIG.
- map_create with type ids runs ``map_check_btf``: the key and value types' sizes must be the
  map's, and the map type's own rule (syscall.c and each type's ``map_check_btf`` op).
- prog_load with func_info runs ``check_btf_func``'s rules: one FUNC record per subprogram,
  the first at instruction 0, each at a subprogram's start.
- A global subprogram's arguments come from its FUNC_PROTO (``btf_prepare_func_args``): an
  int or enum is a scalar; a pointer to the program type's context struct (or tagged
  ``arg:ctx``) the context; a pointer to a sized type memory of that size, maybe NULL unless
  tagged ``arg:nonnull``. The verifier checks the subprogram alone with them, and each call
  against them.
- ``vmlinux_btf_types()`` is the kernel BTF of this machine: the program contexts the
  emulated backend models (``struct xdp_md``, ``struct __sk_buff``, ``struct sk_msg_md``)
  and the uapi enums, laid out as include/uapi/linux/bpf.h lays them out, the packet
  headers a program parses (``PACKET_HEADERS``: ethhdr, iphdr, ipv6hdr, tcphdr, ...) as
  6.18's vmlinux has them, bitfields, anonymous unions and typedefs (``__be16``, ``__u32``
  a typedef of ``unsigned int``) included, and of the kernel's own types those the
  emulated machine has values for: ``struct bpf_map``'s fields that an emulated map
  keeps, where 6.18's vmlinux has them (``BPF_MAP_FIELDS``). CO-RE relocates against it;
  another kernel-internal type (``struct task_struct``, ``struct sk_buff``) or field
  (``bpf_map.ops``) is not there, so a relocation that needs one fails as on a kernel
  without it. After them come the kfuncs the emulated kernel offers (``kfuncs.KFUNCS``):
  a FUNC each, whose id a kfunc call names (``vmlinux_kfuncs()``: the kfuncs by that id),
  and the types only they use (``struct bpf_iter_num``, ``int *``) with the first kfunc
  that uses them.
"""

from __future__ import annotations

import errno
import functools
import struct
from typing import Any, NamedTuple

from ...btf import (
    BTF_FUNC_GLOBAL,
    BTF_INT_BOOL,
    BTF_INT_SIGNED,
    Array,
    Btf,
    BtfError,
    Datasec,
    DeclTag,
    Enum,
    EnumValue,
    Func,
    FuncProto,
    Int,
    Kind,
    Member,
    Param,
    Ptr,
    Struct,
    Typedef,
    Union,
)
from ...btf.spec import BTF_MAGIC, BTF_VERSION, HEADER
from ...errors import KernelError
from ...uapi import (
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY_PROG,
    ENOTSUPP,
    AttachType,
    MapType,
    ProgType,
)
from ..maps.bpf_map import BPF_MAP_FIELDS, BPF_MAP_SIZE
from .filter import SK_BUFF_SIZE, SK_MSG_MD_SIZE, XDP_MD_SIZE
from .kfuncs import (
    KF_ARG_PTR_TO_CTX,
    KF_ARG_PTR_TO_ITER,
    KF_RET_INT_PTR,
    KF_RET_VOID,
    KFUNCS,
    KfuncProto,
)
from .log import bpf_vlog_init

BTF_MAX_SIZE = 16 * 1024 * 1024
BPF_SPIN_LOCK_SIZE = 4  # sizeof(struct bpf_spin_lock)
BPF_TIMER_SIZE = 16  # sizeof(struct bpf_timer)


class BtfObject:
    """struct btf loaded with BPF_BTF_LOAD."""

    def __init__(self, system: Any, btf: Btf) -> None:
        self.system = system
        self.btf = btf
        self.refcnt = 1
        self.id = 0

    def fd_release(self) -> None:
        self.system.btf_put(self)


def _reject(message: str) -> KernelError:
    return KernelError(errno.EINVAL, message, log=message + "\n")


def btf_parse(data: bytes, log_level: int = 0) -> Btf:
    """btf_parse(): the blob as a ``Btf``, or KernelError(EINVAL) with a log line."""
    if len(data) > BTF_MAX_SIZE:
        raise KernelError(errno.E2BIG, f"BTF is {len(data)} bytes, over {BTF_MAX_SIZE}")
    bpf_vlog_init(log_level)
    if len(data) >= HEADER.size:  # btf_parse_hdr: a known magic, then version and flags
        magic, version, flags = struct.unpack_from("<HBB", data)
        if magic == BTF_MAGIC and version != BTF_VERSION:
            raise KernelError(ENOTSUPP, f"Unsupported version {version}", log="Unsupported "
                              "version\n")
        if magic == BTF_MAGIC and flags:
            raise KernelError(ENOTSUPP, f"Unsupported flags {flags:#x}",
                              log="Unsupported flags\n")
    try:
        btf = Btf.from_bytes(data)
        if len(btf) < 2:  # btf_parse_type_sec
            raise BtfError("No type found")
        for type_id in range(1, len(btf)):
            _check_meta(btf, type_id)
    except BtfError as exc:
        raise _reject(str(exc)) from None
    btf_parse_struct_metas(btf)
    return btf


class BtfFields(NamedTuple):
    """The special fields of a map value (struct btf_record, the parts emulated)."""

    spin_lock_off: int = -1
    timer_off: int = -1


NO_FIELDS = BtfFields()


MAX_RESOLVE_DEPTH = 32  # nested structs and array dimensions btf_find_field follows


class _RecordError(Exception):
    """btf_parse_fields fails: map_check_btf ignores a record that is an error (the value
    then has no special field)."""


def btf_parse_fields(btf: Btf, type_id: int) -> BtfFields:
    """btf_parse_fields: the value's bpf_spin_lock and bpf_timer, found as btf_find_field
    finds them (as measured on 6.18): only in a struct (a union is not searched), a member
    whose own type is named for the field (a typedef or const of it is not one), in nested
    structs and arrays of them too. A record that is an error (two locks or two timers in
    one struct, one repeated by an array, a member off a byte boundary, fields that
    overlap) is ignored: the value then has no special field."""
    record = btf[btf.resolve(type_id)]
    if record.kind != Kind.STRUCT:
        return NO_FIELDS
    try:
        found = _struct_fields(btf, record, 0, 0)
    except _RecordError:
        return NO_FIELDS
    offsets = {"bpf_spin_lock": -1, "bpf_timer": -1}
    next_off = 0
    for name, off in found:
        if off < next_off:  # -EEXIST
            return NO_FIELDS
        next_off = off + _FIELD_SIZE_ALIGN[name][0]
        offsets[name] = off  # of two nested locks, the last (the kernel warns)
    return BtfFields(offsets["bpf_spin_lock"], offsets["bpf_timer"])


# btf_field_type_size / btf_field_type_align of the special fields emulated.
_FIELD_SIZE_ALIGN = {"bpf_spin_lock": (BPF_SPIN_LOCK_SIZE, 4), "bpf_timer": (BPF_TIMER_SIZE, 8)}


def _struct_fields(btf: Btf, record: Struct, base: int, level: int) -> list[tuple[str, int]]:
    """btf_find_struct_field: (field, byte offset) of each special field in member order;
    each struct level has its own "seen" set (one lock and one timer per struct)."""
    seen: set[str] = set()
    found: list[tuple[str, int]] = []
    for member in record.members:
        if member.bit_offset % 8:
            raise _RecordError
        found += _member_fields(btf, member.type_id, base + member.bit_offset // 8, seen,
                                level)
    return found


def _member_fields(btf: Btf, type_id: int, off: int, seen: set[str],
                   level: int) -> list[tuple[str, int]]:
    """btf_find_field_one: the member's type through its array dimensions, matched by name
    (btf_get_field_type), else searched as a nested struct (btf_find_nested_struct)."""
    member_type, nelems = btf[type_id], 1
    for _ in range(MAX_RESOLVE_DEPTH):
        if not isinstance(member_type, Array):
            break
        nelems *= member_type.nelems
        member_type = btf[member_type.type_id]
    else:
        raise _RecordError
    if nelems == 0:
        return []
    name = member_type.name
    if name not in _FIELD_SIZE_ALIGN:
        if member_type.kind != Kind.STRUCT:
            return []
        if level + 1 >= MAX_RESOLVE_DEPTH:
            raise _RecordError
        inner = _struct_fields(btf, member_type, off, level + 1)
        if inner and nelems > 1:  # btf_repeat_fields repeats no lock or timer
            raise _RecordError
        return inner
    if name in seen:
        raise _RecordError
    seen.add(name)
    size, align = _FIELD_SIZE_ALIGN[name]
    if off % align or member_type.kind != Kind.STRUCT or member_type.size != size:
        return []  # btf_find_struct: BTF_FIELD_IGNORE
    if nelems > 1:
        raise _RecordError
    return [(name, off)]


def btf_parse_struct_metas(btf: Btf) -> None:
    """btf_parse_struct_metas at BTF load: each struct (not a union) with a member whose own
    type is the BTF's first ``struct bpf_spin_lock`` (btf_find_by_name_kind; a const or
    typedef of it does not count) has its fields parsed now, so a second such lock is E2BIG
    and one not 4-byte aligned EFAULT (as measured on 6.18)."""
    lock_id = next((i for i in range(1, len(btf)) if btf[i].kind == Kind.STRUCT
                    and btf[i].name == "bpf_spin_lock"), 0)
    if not lock_id:
        return
    for type_id in range(1, len(btf)):
        record = btf[type_id]
        if record.kind != Kind.STRUCT:
            continue
        locks = [m for m in record.members if m.type_id == lock_id]
        if len(locks) > 1:
            raise KernelError(errno.E2BIG, f"[{type_id}] {record.name or '(anon)'}: more than "
                              "one bpf_spin_lock")
        if locks and locks[0].bit_offset % (8 * BPF_SPIN_LOCK_SIZE):
            raise KernelError(errno.EFAULT, f"[{type_id}] {record.name or '(anon)'}: "
                              f"bpf_spin_lock {locks[0].name} is not 4-byte aligned")


def _check_meta(btf: Btf, type_id: int) -> None:
    """The kind-by-kind checks (btf_*_check_meta / resolve) that pybpf makes."""
    record = btf[type_id]
    refs = [getattr(record, "type_id", 0)]
    if isinstance(record, Struct):
        size = record.size
        for member in record.members:
            refs.append(member.type_id)
            end = member.bit_offset + (member.bitfield_size or
                                       8 * _sized(btf, member.type_id, type_id))
            if end > 8 * size:
                raise BtfError(f"[{type_id}] {record.kind.name} {record.name or '(anon)'} "
                               f"member {member.name or '(anon)'}: Member exceeds struct_size")
    elif isinstance(record, Array):
        refs += [record.index_type_id]
    elif isinstance(record, FuncProto):
        refs += [record.return_type_id, *(p.type_id for p in record.params)]
    elif isinstance(record, Datasec):
        for info in record.vars:
            refs.append(info.type_id)
            if info.offset + info.size > record.size:
                raise BtfError(f"[{type_id}] DATASEC {record.name}: Invalid offset+size")
    for ref in refs:
        btf[ref]  # an id that does not exist raises
    if isinstance(record, Func) and not isinstance(btf[record.type_id], FuncProto):
        raise BtfError(f"[{type_id}] FUNC {record.name}: Invalid type_id")


def _sized(btf: Btf, member_type: int, owner: int) -> int:
    try:
        return btf.size_of(member_type)
    except BtfError:
        raise BtfError(f"[{owner}] member type [{member_type}]: Invalid member") from None


def btf_type_id_size(btf: Btf, type_id: int) -> int | None:
    """The size of a type a map key or value may have (btf_type_id_size); None if none."""
    try:
        record = btf[btf.resolve(type_id)]
        if record.kind in (Kind.FUNC, Kind.FUNC_PROTO, Kind.FWD, Kind.UNKN):
            return None
        return btf.size_of(type_id)
    except BtfError:
        return None


def _sized_type_id(btf: Btf, type_id: int) -> int:
    """The type btf_type_id_size hands map_check_btf (its resolved_ids): typedefs and
    modifiers skipped, and a VAR's type for a VAR."""
    type_id = btf.resolve(type_id)
    record = btf[type_id]
    return btf.resolve(record.type_id) if record.kind == Kind.VAR else type_id  # type: ignore


# Map types whose map_check_btf op is map_check_no_btf (ENOTSUPP), and the others that have
# an op, so that a value type may come without a key type.
_NO_BTF = frozenset({MapType.PERF_EVENT_ARRAY, MapType.CGROUP_ARRAY, MapType.DEVMAP,
                     MapType.DEVMAP_HASH, MapType.CPUMAP, MapType.SOCKMAP, MapType.SOCKHASH,
                     MapType.XSKMAP, MapType.STACK_TRACE, MapType.ARRAY_OF_MAPS,
                     MapType.HASH_OF_MAPS})
# The hash maps' own check (6.18's htab ops have a map_check_btf) refuses a keyless BTF,
# after the value's special fields were checked: a keyless hash map's errno is theirs first.
_HTAB = frozenset({MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH,
                   MapType.LRU_PERCPU_HASH})
# Types with a map_check_btf op: a keyless BTF reaches it (the others are EINVAL at once).
_KEYLESS_OK = _NO_BTF | _HTAB | {MapType.ARRAY, MapType.PERCPU_ARRAY, MapType.BLOOM_FILTER,
                                 MapType.LPM_TRIE}


def map_check_btf(map_type: int, key_size: int, value_size: int, max_entries: int,
                  btf: Btf, key_id: int, value_id: int, map_flags: int = 0) -> BtfFields:
    """map_check_btf(): the key and value types' sizes, the value's special fields (a
    bpf_spin_lock: only in HASH and ARRAY maps, a bpf_timer: also LRU_HASH; maps programs
    may read and write), then the map type's op. Returns the special fields found."""
    if key_id:
        if btf_type_id_size(btf, key_id) != key_size:
            raise KernelError(errno.EINVAL, f"BTF key type [{key_id}] is not {key_size} "
                              "bytes, the map's key_size")
    elif map_type not in _KEYLESS_OK:
        raise KernelError(errno.EINVAL, "a map of this type needs a BTF key type with its "
                          "value type")
    if btf_type_id_size(btf, value_id) != value_size:
        raise KernelError(errno.EINVAL, f"BTF value type [{value_id}] is not {value_size} "
                          "bytes, the map's value_size")
    key_type = btf[_sized_type_id(btf, key_id)] if key_id else None
    value_type = btf[_sized_type_id(btf, value_id)]
    fields = btf_parse_fields(btf, _sized_type_id(btf, value_id))
    if fields != NO_FIELDS and map_flags & (BPF_F_RDONLY_PROG | BPF_F_WRONLY_PROG):
        raise KernelError(errno.EACCES, "a value with a bpf_spin_lock or bpf_timer must be "
                          "readable and writable by programs")
    if fields.spin_lock_off >= 0 and map_type not in (MapType.HASH, MapType.ARRAY):
        raise KernelError(errno.EOPNOTSUPP, f"{MapType(map_type).name} maps cannot hold a "
                          "bpf_spin_lock")
    if fields.timer_off >= 0 and map_type not in (MapType.HASH, MapType.LRU_HASH,
                                                  MapType.ARRAY):
        raise KernelError(errno.EOPNOTSUPP, f"{MapType(map_type).name} maps cannot hold a "
                          "bpf_timer")
    if map_type in _NO_BTF:  # map_check_no_btf
        raise KernelError(ENOTSUPP, f"{MapType(map_type).name} maps take no BTF types")
    if map_type in (MapType.ARRAY, MapType.PERCPU_ARRAY):  # array_map_check_btf
        if key_type is None:  # keyless: only the global data maps (.bss, .data, .rodata)
            if map_type != MapType.ARRAY or max_entries != 1 or \
                    not isinstance(value_type, Datasec):
                raise KernelError(errno.EINVAL, "a keyless BTF array must be a one-element "
                                  "ARRAY of a DATASEC (global data)")
        elif not (isinstance(key_type, Int) and key_type.size == 4 and key_type.nr_bits == 32
                  and key_type.bits_offset == 0):
            raise KernelError(errno.EINVAL, "an array's BTF key type must be a 32-bit int")
    elif map_type in _HTAB and key_type is None:  # htab_map_check_btf
        raise KernelError(errno.EINVAL, "a hash map needs a BTF key type with its value type")
    elif map_type == MapType.LPM_TRIE and not isinstance(key_type, Struct):  # trie_check_btf
        raise KernelError(errno.EINVAL, "an LPM trie's BTF key type must be a struct")
    elif map_type == MapType.BLOOM_FILTER and key_type is not None:  # bloom_map_check_btf
        raise KernelError(errno.EINVAL, "a bloom filter has no key: give no BTF key type")
    return fields


class FuncInfo(NamedTuple):
    """A program's func_info, checked: its BTF and each subprogram's FUNC by its first
    instruction (bpf_prog_aux's func_info and func_info_aux)."""

    btf: Btf
    func_ids: dict[int, int]

    def func(self, start: int) -> Func:
        return self.btf[self.func_ids[start]]


def check_btf_func(insns: bytes, btf: Btf, func_info: bytes, rec_size: int) -> FuncInfo:
    """check_btf_func(): one FUNC per subprogram, in order, the first at instruction 0."""
    starts = _subprog_starts(insns)
    records = [int.from_bytes(func_info[i:i + 4], "little") for i in range(0, len(func_info),
                                                                         rec_size)]
    types = [int.from_bytes(func_info[i + 4:i + 8], "little")
             for i in range(0, len(func_info), rec_size)]
    if len(records) != len(starts):
        raise _reject("number of funcs in func_info doesn't match number of subprogs")
    if records and records[0]:
        raise _reject(f"nonzero insn_off {records[0]} for the first func info record")
    for insn_off, type_id, start in zip(records, types, starts, strict=True):
        if insn_off != start:
            raise _reject("func_info BTF section doesn't match subprog layout in BPF program")
        if type_id >= len(btf) or not isinstance(btf[type_id], Func):
            raise _reject(f"invalid type id {type_id} in func info")
    return FuncInfo(btf, dict(zip(starts, types, strict=True)))


# include/linux/bpf_types.h: the context struct a program of each type is given, as the
# program names it (TRACEPOINT's is a __u64 and SYSCALL's void: no struct, so only an
# ``arg:ctx`` tag makes an argument their context), and the kernel structs that
# btf_is_projection_of accepts for it.
PROG_CTX_STRUCTS = {
    **dict.fromkeys((ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT,
                     ProgType.CGROUP_SKB, ProgType.LWT_IN, ProgType.LWT_OUT, ProgType.LWT_XMIT,
                     ProgType.LWT_SEG6LOCAL, ProgType.SK_SKB), ("__sk_buff", "sk_buff")),
    ProgType.XDP: ("xdp_md", "xdp_buff"),
    ProgType.SK_MSG: ("sk_msg_md",),
    ProgType.KPROBE: ("bpf_user_pt_regs_t", "pt_regs"),  # a typedef of struct pt_regs
    ProgType.PERF_EVENT: ("bpf_perf_event_data",),
    ProgType.RAW_TRACEPOINT: ("bpf_raw_tracepoint_args",),
}
MAX_BPF_FUNC_REG_ARGS = 5
# What a global subprogram's argument is (struct bpf_subprog_arg_info's arg_type).
ARG_ANYTHING, ARG_PTR_TO_CTX, ARG_PTR_TO_MEM = "scalar", "ctx", "mem"
# The argument tags (decl_tag "arg:<tag>") the kernel knows; those naming kernel objects or
# arena memory have no meaning on the emulated machine, which has neither.
_ARG_TAGS = frozenset({"ctx", "nonnull", "nullable", "trusted", "untrusted", "arena"})
_KERNEL_OBJECT_TAGS = frozenset({"trusted", "untrusted", "arena"})


class SubprogArg(NamedTuple):
    """struct bpf_subprog_arg_info: what an argument is, and for memory its size and
    whether it may be NULL (PTR_MAYBE_NULL)."""

    arg_type: str
    mem_size: int = 0
    maybe_null: bool = False


def btf_type_str(btf: Btf, type_id: int) -> str:
    """btf_type_str: the kind's name as the kernel's messages write it."""
    kind = btf[type_id].kind
    return "UNKNOWN" if kind == Kind.UNKN else kind.name


def btf_prepare_func_args(info: FuncInfo, start: int, prog_type: int) -> tuple[SubprogArg, ...]:
    """btf_prepare_func_args for the global subprogram at ``start``: its arguments from its
    FUNC_PROTO (see the module rules). Raises KernelError with the kernel's message and
    errno."""
    btf, func_id = info.btf, info.func_ids[start]
    func = btf[func_id]
    proto = btf[func.type_id]
    if len(proto.params) > MAX_BPF_FUNC_REG_ARGS:
        raise _arg_error(errno.EINVAL, f"Global function {func.name}() with "
                         f"{len(proto.params)} > {MAX_BPF_FUNC_REG_ARGS} args. Buggy compiler.")
    if not isinstance(btf[btf.resolve(proto.return_type_id)], Int | Enum):
        raise _arg_error(errno.EINVAL, f"Global function {func.name}() doesn't return scalar. "
                         "Only those are supported.")
    tags_by_arg: dict[int, set[str]] = {}
    for type_id in range(1, len(btf)):
        record = btf[type_id]
        if isinstance(record, DeclTag) and record.type_id == func_id \
                and record.name.startswith("arg:"):
            tags_by_arg.setdefault(record.component_idx, set()).add(record.name[4:])
    args = []
    for i, param in enumerate(proto.params):
        tags = tags_by_arg.get(i, set())
        if tags - _ARG_TAGS:
            raise _arg_error(errno.EOPNOTSUPP, f"arg#{i} has unsupported set of tags")
        record = btf[btf.resolve(param.type_id)]
        if not isinstance(record, Ptr):
            if tags:
                raise _arg_error(errno.EINVAL, f"arg#{i} has pointer tag, but is not a "
                                 "pointer type")
            if not isinstance(record, Int | Enum):
                raise _arg_error(errno.EINVAL, f"Arg#{i} type {record.kind.name} in "
                                 f"{func.name}() is not supported yet.")
            args.append(SubprogArg(ARG_ANYTHING))
            continue
        if "ctx" in tags or _is_prog_ctx_type(btf, record.type_id, prog_type):
            if tags - {"ctx"}:
                raise _arg_error(errno.EINVAL, f"arg#{i} has invalid combination of tags")
            args.append(SubprogArg(ARG_PTR_TO_CTX))
            continue
        if tags & _KERNEL_OBJECT_TAGS:
            raise _arg_error(errno.EOPNOTSUPP, f"arg#{i}: the emulated kernel has no kernel "
                             f"objects nor arenas for tags {', '.join(sorted(tags))}")
        if "nullable" in tags:  # only for trusted kernel objects
            raise _arg_error(errno.EINVAL, f"arg#{i} has invalid combination of tags")
        pointee = btf.resolve(record.type_id)
        try:
            size = btf.size_of(pointee)
        except BtfError:
            raise _arg_error(errno.EINVAL, f"arg#{i} reference type('{btf_type_str(btf, pointee)} "
                             f"{btf[pointee].name}') size cannot be determined: "
                             f"-{errno.EINVAL}") from None
        args.append(SubprogArg(ARG_PTR_TO_MEM, size, "nonnull" not in tags))
    return tuple(args)


def _is_prog_ctx_type(btf: Btf, pointee_id: int, prog_type: int) -> bool:
    """btf_is_prog_ctx_type: the pointer's target is the program type's context struct (or
    the kernel struct it projects), found by name."""
    names = PROG_CTX_STRUCTS.get(prog_type, ())
    record = btf[pointee_id]
    while record.kind in (Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.TYPE_TAG,
                          Kind.TYPEDEF):
        if record.kind == Kind.TYPEDEF and record.name in names:
            return True  # KPROBE's bpf_user_pt_regs_t, before typedefs are skipped
        record = btf[record.type_id]
    return isinstance(record, Struct) and record.name in names  # a union is a Struct too


def _arg_error(err: int, message: str) -> KernelError:
    return KernelError(err, message, log=message + "\n")


def _subprog_starts(insns: bytes) -> list[int]:
    """Instruction 0 and every bpf-to-bpf call or callback target (add_subprog_and_kfunc)."""
    starts = {0}
    pc, n = 0, len(insns) // 8
    while pc < n:
        code, regs = insns[8 * pc], insns[8 * pc + 1]
        imm = int.from_bytes(insns[8 * pc + 4:8 * pc + 8], "little", signed=True)
        if code == 0x85 and regs >> 4 == 1:  # BPF_PSEUDO_CALL
            starts.add(pc + imm + 1)
        elif code == 0x18 and regs >> 4 == 4:  # BPF_PSEUDO_FUNC
            starts.add(pc + imm + 1)
        pc += 2 if code == 0x18 else 1
    return sorted(starts)


class BtfMixin:
    """BPF_BTF_LOAD and the BTF object fds of the emulated system."""

    def _btf_load(self, data: bytes, log_level: int) -> int:
        obj = BtfObject(self, btf_parse(data, log_level))
        obj.id = self.btf_idr_alloc(obj)
        return self.fd_install(obj)

    def btf_idr_alloc(self, obj: BtfObject) -> int:
        ids = self.__dict__.setdefault("_btf_ids", [0])
        ids[0] += 1
        return ids[0]

    def btf_get_by_fd(self, fd: int) -> BtfObject:
        """btf_get_by_fd: EBADF when not open, EINVAL when not a BTF object; a reference."""
        obj = self.fd_get(fd)
        if not isinstance(obj, BtfObject):
            raise KernelError(errno.EINVAL, f"fd {fd} is not a BTF object")
        obj.refcnt += 1
        return obj

    def btf_put(self, obj: BtfObject) -> None:
        obj.refcnt -= 1

    def _vmlinux_btf(self) -> bytes:
        return vmlinux_btf_types().to_bytes()

    def _kfunc_btf_id(self, name: str) -> int:
        try:
            return vmlinux_btf_types().find(name, Kind.FUNC)
        except KeyError:
            raise KernelError(errno.ENOENT, f"the emulated kernel has no kernel function "
                              f"{name!r}; the kfuncs it offers: {', '.join(KFUNCS)}") from None


# The packet headers of vmlinux.h (include/uapi/linux/if_ether.h, if_vlan.h, ip.h, in6.h,
# ipv6.h, tcp.h, udp.h, icmp.h, icmpv6.h, if_arp.h, and include/linux/if_vlan.h's
# vlan_ethhdr): a program that parses packets through bpftool's vmlinux.h reads each field
# through a CO-RE relocation (its structs are all preserve_access_index), so they must be
# here, laid out as 6.18's vmlinux lays them out.
PACKET_HEADERS = ("ethhdr", "vlan_hdr", "vlan_ethhdr", "iphdr", "in6_addr", "ipv6hdr",
                  "tcphdr", "udphdr", "icmphdr", "icmpv6_echo", "icmpv6_nd_advt",
                  "icmpv6_nd_ra", "icmp6hdr", "arphdr")


def _add_packet_headers(btf: Btf, int_id: int, uchar: int, u8: int, u16: int, u32: int,
                        be16: int, be32: int, sum16: int) -> None:
    """``PACKET_HEADERS`` and the anonymous types and arrays they use, each member as
    ``bpftool btf dump file /sys/kernel/btf/vmlinux format raw`` lists 6.18's: (name, type,
    bits_offset[, bitfield_size]); a struct with a bitfield has kind_flag set, as there, and
    an anonymous struct both named and unnamed in a union (``addrs``) is one type."""
    arrays: dict[tuple[int, int], int] = {}

    def array(elem: int, nelems: int) -> int:
        if (elem, nelems) not in arrays:
            arrays[elem, nelems] = btf.add(Array("", elem, int_id, nelems))
        return arrays[elem, nelems]

    def record(name: str, size: int, members: list[tuple], kind: type[Struct] = Struct) -> int:
        return btf.add(kind(name, size, tuple(Member(*m) for m in members),
                            kind_flag=any(len(m) == 4 for m in members)))

    def addrs(size: int, members: list[tuple]) -> int:
        """union { struct { members }; struct { members } addrs; } (struct_group)."""
        group = record("", size, members)
        return record("", size, [("", group, 0), ("addrs", group, 0)], Union)

    mac = array(uchar, 6)
    record("ethhdr", 14, [("h_dest", mac, 0), ("h_source", mac, 48), ("h_proto", be16, 96)])
    record("vlan_hdr", 4, [("h_vlan_TCI", be16, 0), ("h_vlan_encapsulated_proto", be16, 16)])
    record("vlan_ethhdr", 18, [
        ("", addrs(12, [("h_dest", mac, 0), ("h_source", mac, 48)]), 0),
        ("h_vlan_proto", be16, 96), ("h_vlan_TCI", be16, 112),
        ("h_vlan_encapsulated_proto", be16, 128)])
    record("iphdr", 20, [
        ("ihl", u8, 0, 4), ("version", u8, 4, 4), ("tos", u8, 8), ("tot_len", be16, 16),
        ("id", be16, 32), ("frag_off", be16, 48), ("ttl", u8, 64), ("protocol", u8, 72),
        ("check", sum16, 80), ("", addrs(8, [("saddr", be32, 0), ("daddr", be32, 32)]), 96)])
    in6_u = record("", 16, [("u6_addr8", array(u8, 16), 0), ("u6_addr16", array(be16, 8), 0),
                            ("u6_addr32", array(be32, 4), 0)], Union)
    in6_addr = record("in6_addr", 16, [("in6_u", in6_u, 0)])
    record("ipv6hdr", 40, [
        ("priority", u8, 0, 4), ("version", u8, 4, 4), ("flow_lbl", array(u8, 3), 8),
        ("payload_len", be16, 32), ("nexthdr", u8, 48), ("hop_limit", u8, 56),
        ("", addrs(32, [("saddr", in6_addr, 0), ("daddr", in6_addr, 128)]), 64)])
    record("tcphdr", 20, [
        ("source", be16, 0), ("dest", be16, 16), ("seq", be32, 32), ("ack_seq", be32, 64),
        ("ae", u16, 96, 1), ("res1", u16, 97, 3), ("doff", u16, 100, 4),
        *((flag, u16, 104 + i, 1) for i, flag in enumerate(
            ("fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"))),
        ("window", be16, 112), ("check", sum16, 128), ("urg_ptr", be16, 144)])
    record("udphdr", 8, [("source", be16, 0), ("dest", be16, 16), ("len", be16, 32),
                         ("check", sum16, 48)])
    u8x4 = array(u8, 4)
    record("icmphdr", 8, [
        ("type", u8, 0), ("code", u8, 8), ("checksum", sum16, 16),
        ("un", record("", 4, [
            ("echo", record("", 4, [("id", be16, 0), ("sequence", be16, 16)]), 0),
            ("gateway", be32, 0),
            ("frag", record("", 4, [("__unused", be16, 0), ("mtu", be16, 16)]), 0),
            ("reserved", u8x4, 0)], Union), 32)])
    echo = record("icmpv6_echo", 4, [("identifier", be16, 0), ("sequence", be16, 16)])
    nd_advt = record("icmpv6_nd_advt", 4, [
        ("reserved", u32, 0, 5), ("override", u32, 5, 1), ("solicited", u32, 6, 1),
        ("router", u32, 7, 1), ("reserved2", u32, 8, 24)])
    nd_ra = record("icmpv6_nd_ra", 4, [
        ("hop_limit", u8, 0), ("reserved", u8, 8, 3), ("router_pref", u8, 11, 2),
        ("home_agent", u8, 13, 1), ("other", u8, 14, 1), ("managed", u8, 15, 1),
        ("rt_lifetime", be16, 16)])
    record("icmp6hdr", 8, [
        ("icmp6_type", u8, 0), ("icmp6_code", u8, 8), ("icmp6_cksum", sum16, 16),
        ("icmp6_dataun", record("", 4, [
            ("un_data32", array(be32, 1), 0), ("un_data16", array(be16, 2), 0),
            ("un_data8", u8x4, 0), ("u_echo", echo, 0), ("u_nd_advt", nd_advt, 0),
            ("u_nd_ra", nd_ra, 0)], Union), 32)])
    record("arphdr", 8, [("ar_hrd", be16, 0), ("ar_pro", be16, 16), ("ar_hln", uchar, 32),
                         ("ar_pln", uchar, 40), ("ar_op", be16, 48)])


@functools.cache
def vmlinux_btf_types() -> Btf:
    """The BTF this backend describes itself with (see the module rules)."""
    btf = Btf()
    # the C integer types, and the typedefs of include/uapi/asm-generic/int-ll64.h and
    # linux/types.h over them, as vmlinux has them (a typedef for each __uN)
    uchar, ushort, uint, ulonglong = (btf.add(Int(name, size, 0, 0, 8 * size)) for name, size
                                      in (("unsigned char", 1), ("short unsigned int", 2),
                                          ("unsigned int", 4), ("long long unsigned int", 8)))
    int_id = btf.add(Int("int", 4, BTF_INT_SIGNED, 0, 32))
    u8, u16, u32, u64 = (btf.add(Typedef(name, type_id)) for name, type_id in (
        ("__u8", uchar), ("__u16", ushort), ("__u32", uint), ("__u64", ulonglong)))
    be16, be32, sum16 = (btf.add(Typedef(name, type_id)) for name, type_id in (
        ("__be16", u16), ("__be32", u32), ("__sum16", u16)))
    u32x4 = btf.add(Array("", u32, u32, 4))
    u32x5 = btf.add(Array("", u32, u32, 5))
    ptr = btf.add(Ptr(type_id=0))

    def struct(name: str, size: int, fields: list[tuple[str, int, int]]) -> None:
        btf.add(Struct(name, size, tuple(Member(n, t, 8 * off) for n, t, off in fields)))

    struct("xdp_md", XDP_MD_SIZE, [
        (name, u32, 4 * i) for i, name in enumerate(
            ("data", "data_end", "data_meta", "ingress_ifindex", "rx_queue_index",
             "egress_ifindex"))])
    struct("__sk_buff", SK_BUFF_SIZE, [
        ("len", u32, 0), ("pkt_type", u32, 4), ("mark", u32, 8), ("queue_mapping", u32, 12),
        ("protocol", u32, 16), ("vlan_present", u32, 20), ("vlan_tci", u32, 24),
        ("vlan_proto", u32, 28), ("priority", u32, 32), ("ingress_ifindex", u32, 36),
        ("ifindex", u32, 40), ("tc_index", u32, 44), ("cb", u32x5, 48), ("hash", u32, 68),
        ("tc_classid", u32, 72), ("data", u32, 76), ("data_end", u32, 80),
        ("napi_id", u32, 84), ("family", u32, 88), ("remote_ip4", u32, 92),
        ("local_ip4", u32, 96), ("remote_ip6", u32x4, 100), ("local_ip6", u32x4, 116),
        ("remote_port", u32, 132), ("local_port", u32, 136), ("data_meta", u32, 140),
        ("flow_keys", ptr, 144), ("tstamp", u64, 152), ("wire_len", u32, 160),
        ("gso_segs", u32, 164), ("sk", ptr, 168), ("gso_size", u32, 176),
        ("tstamp_type", u8, 180), ("hwtstamp", u64, 184)])
    struct("sk_msg_md", SK_MSG_MD_SIZE, [
        ("data", ptr, 0), ("data_end", ptr, 8), ("family", u32, 16), ("remote_ip4", u32, 20),
        ("local_ip4", u32, 24), ("remote_ip6", u32x4, 28), ("local_ip6", u32x4, 44),
        ("remote_port", u32, 60), ("local_port", u32, 64), ("size", u32, 68),
        ("sk", ptr, 72)])
    enums = {}
    for name, members in (("bpf_map_type", MapType), ("bpf_prog_type", ProgType),
                          ("bpf_attach_type", AttachType)):
        prefix = {"bpf_map_type": "BPF_MAP_TYPE_", "bpf_prog_type": "BPF_PROG_TYPE_",
                  "bpf_attach_type": "BPF_"}[name]
        enums[name] = btf.add(Enum(name, 4, tuple(EnumValue(prefix + m.name, int(m))
                                                  for m in members)))
    btf.add(Enum("xdp_action", 4, tuple(EnumValue(n, v) for v, n in enumerate(
        ("XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT")))))
    types = {"enum bpf_map_type": enums["bpf_map_type"], "u32": u32, "u64": u64,
             "int": int_id, "bool": btf.add(Int("_Bool", 1, BTF_INT_BOOL, 0, 8)),
             "char[16]": btf.add(Array("", btf.add(Int("char", 1, 0, 0, 8)), int_id, 16))}
    struct("bpf_map", BPF_MAP_SIZE,
           [(name, types[c_type], off) for name, c_type, off, _ in BPF_MAP_FIELDS])
    _add_packet_headers(btf, int_id, uchar, u8, u16, u32, be16, be32, sum16)
    # the kfuncs last, so that adding one moves no other type's id; a type only kfuncs use
    # (an iterator's struct, int *) comes with the first kfunc that uses it
    int_ptr_id = 0  # int *, added with the first kfunc that returns one
    iter_structs: dict[str, int] = {}  # struct bpf_iter_<type> { __u64 __opaque[1]; }
    for proto in KFUNCS.values():
        params = []
        for name, kind in proto.params:
            type_id = int_id
            if kind == KF_ARG_PTR_TO_CTX:
                type_id = btf.add(Ptr(type_id=btf.find(proto.ctx_struct)))
            elif kind == KF_ARG_PTR_TO_ITER:
                if proto.iter_struct not in iter_structs:
                    opaque = btf.add(Array("", u64, u32, 1))
                    iter_structs[proto.iter_struct] = btf.add(Struct(
                        proto.iter_struct, 8, (Member("__opaque", opaque, 0),)))
                type_id = btf.add(Ptr(type_id=iter_structs[proto.iter_struct]))
            params.append(Param(name, type_id))
        return_id = int_id
        if proto.ret == KF_RET_VOID:
            return_id = 0
        elif proto.ret == KF_RET_INT_PTR:
            int_ptr_id = int_ptr_id or btf.add(Ptr(type_id=int_id))
            return_id = int_ptr_id
        proto_id = btf.add(FuncProto(return_type_id=return_id, params=tuple(params)))
        btf.add(Func(proto.name, type_id=proto_id, linkage=BTF_FUNC_GLOBAL))
    return btf


@functools.cache
def vmlinux_kfuncs() -> dict[int, KfuncProto]:
    """The emulated kernel's kfuncs by the id of their FUNC in ``vmlinux_btf_types()``."""
    btf = vmlinux_btf_types()
    return {btf.find(name, Kind.FUNC): proto for name, proto in KFUNCS.items()}
