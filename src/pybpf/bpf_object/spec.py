"""``ObjectSpec``: everything a clang-built BPF object says, read without loading anything.

Named as the ecosystem names it: libbpf's ``bpf_object`` before ``bpf_object__load``,
cilium/ebpf's ``CollectionSpec``. An ``ObjectSpec`` holds

- ``maps``: ``ObjectMap`` by name (BTF-defined, legacy, global data as libbpf names them:
  ``<obj>.data``, ``.data.custom``; ``maps[".data"]`` finds one by its section too);
- ``programs``: ``ObjectProgram`` by function name, linked (subprograms appended), with
  the relocations left for load time (map fds, kfuncs, ksyms, unsupported externs) and the CO-RE
  records;
- ``kfuncs``: ``KfuncExtern`` by name, the kernel functions the object declares ``__ksym``
  (FUNCs in the BTF's ``.ksyms``), resolved against the System's kernel BTF at load;
- ``kconfig`` and ``ksyms``: the extern variables (``KconfigExtern``, in the ``.kconfig``
  map, and ``KsymExtern``, kernel variables), filled and resolved at load (``externs``);
- ``globals``: the global variables by name, readable and writable before load;
- ``btf`` (fixed up as libbpf does before BTF_LOAD: DATASEC sizes and variable offsets
  from the ELF symbols), ``btf_ext``, ``license``, ``kern_version``.

Rules this module keeps:
- Parsing is pure and complete: a malformed or unsupported object raises ``ObjectError``
  (or a subclass) naming the section, map, program or relocation; nothing else escapes.
- Features pybpf cannot load (externs outside .kconfig and .ksyms, arena, struct_ops) do not
  stop parsing: they are listed in ``unsupported`` (per program and per object) so that
  loading fails naming them, and an object can still be inspected.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from dataclasses import dataclass, field

from ..btf import (
    Btf,
    BtfError,
    BtfExt,
    CoreRelo,
    Datasec,
    Func,
    FuncInfo,
    FuncProto,
    Int,
    LineInfo,
    Param,
    Var,
    VarSecinfo,
)
from ..btf.types import (
    BTF_FUNC_GLOBAL,
    BTF_INT_SIGNED,
    BTF_VAR_GLOBAL_ALLOCATED,
    BTF_VAR_GLOBAL_EXTERN,
    BTF_VAR_STATIC,
)
from ..system import System
from ..uapi import MapType, ProgType
from .elf import STB_GLOBAL, STB_WEAK, STT_OBJECT, STV_HIDDEN, STV_INTERNAL, ElfFile
from .errors import ObjectError
from .externs import KconfigExtern, KsymExtern, collect_externs, kconfig_map
from .linker import Reloc, RelocKind, attach_btf_ext, collect_functions, link, record_relocations
from .loader import DEFAULT_PIN_ROOT, Object, load_object
from .map_defs import (
    Globals,
    MapsByName,
    ObjectMap,
    btf_maps,
    data_map,
    is_data_section,
    legacy_maps,
    map_slots,
)
from .section_defs import SectionDef, find_section_def

_UNSUPPORTED_MAP_TYPES = {MapType.STRUCT_OPS: "struct_ops maps", MapType.ARENA: "arena maps"}
_STRUCT_OPS_SECTIONS = (".struct_ops", ".struct_ops.link", "?.struct_ops",
                        "?.struct_ops.link")


@dataclass(frozen=True)
class KfuncExtern:
    """A kernel function the object declares ``extern ... __ksym`` (libbpf's func ksym
    ``extern_desc``): ``proto_id`` is its FUNC_PROTO in the object's BTF; a ``weak`` one
    may be missing from the kernel (programs test it with ``bpf_ksym_exists``)."""

    name: str
    proto_id: int
    weak: bool


@dataclass(frozen=True)
class ObjectProgram:
    """An entry program of the object, linked and ready to be loaded.

    ``insns`` are the program's instructions followed by the subprograms it calls (little-
    endian encoding); map references are BPF_PSEUDO_MAP_FD / BPF_PSEUDO_MAP_VALUE loads
    whose fd ``relocations`` name. ``func_info``, ``line_info`` and ``core_relos`` pair an
    instruction index of ``insns`` with its .BTF.ext record.
    """

    name: str
    section: str
    prog_type: ProgType | int
    expected_attach_type: int
    prog_flags: int
    insns: bytes
    relocations: tuple[Reloc, ...] = ()
    func_info: tuple[tuple[int, FuncInfo], ...] = ()
    line_info: tuple[tuple[int, LineInfo], ...] = ()
    core_relos: tuple[tuple[int, CoreRelo], ...] = ()
    subprograms: tuple[str, ...] = ()
    autoload: bool = True
    sec_def: SectionDef | None = None
    license: str = ""
    kern_version: int = 0

    @property
    def attach_target(self) -> str:
        """What the section names to attach to (``syscalls/sys_enter_getpid``), or ""."""
        return self.sec_def.target(self.section) if self.sec_def else ""

    @property
    def maps(self) -> list[str]:
        """The maps the program uses, in order of first use."""
        return list(dict.fromkeys(r.target for r in self.relocations
                                  if r.kind in (RelocKind.MAP_FD, RelocKind.MAP_VALUE)))

    @property
    def unsupported(self) -> list[str]:
        """What pybpf cannot load in this program, each naming where it is."""
        problems = [f"{r.kind.value} '{r.target}' at insn #{r.insn}"
                    for r in self.relocations
                    if r.kind == RelocKind.EXTERN_LD64]
        if self.prog_type == ProgType.STRUCT_OPS:
            problems.append(f"struct_ops program (section '{self.section}')")
        return problems

    def instruction_count(self) -> int:
        return len(self.insns) // 8


@dataclass(repr=False)
class ObjectSpec:
    """A parsed BPF object file: maps, programs, globals, BTF (see the module doc)."""

    name: str
    byteorder: str
    maps: MapsByName[ObjectMap]
    programs: dict[str, ObjectProgram]
    license: str
    kern_version: int
    btf: Btf | None
    btf_ext: BtfExt | None
    unsupported: list[str]
    kfuncs: dict[str, KfuncExtern] = field(default_factory=dict)
    kconfig: dict[str, KconfigExtern] = field(default_factory=dict)
    ksyms: dict[str, KsymExtern] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def read(name: str) -> bytes:
            return bytes(self.maps[name].data or b"")

        def write(name: str, data: bytes) -> None:
            self.maps[name].data[:] = data

        self.globals = Globals(self.maps, read, write)

    def set_autoload(self, program: str, autoload: bool) -> None:
        """Load ``program`` with the others or not (libbpf's bpf_program__set_autoload;
        ``SEC("?...")`` starts a program with autoload off)."""
        if program not in self.programs:
            raise KeyError(f"no program {program!r}; the object has "
                           f"{', '.join(self.programs) or 'none'}")
        self.programs[program] = dataclasses.replace(self.programs[program], autoload=autoload)

    def load(self, system: System | None = None, *, pin_root_path: str = DEFAULT_PIN_ROOT,
             log_level: int = 0, kconfig: str | None = None) -> Object:
        """Create the maps and load the programs on ``system`` (default ``pybpf.system()``);
        the ``Object`` owns them. Pinned maps (LIBBPF_PIN_BY_NAME) live under
        ``pin_root_path``; ``log_level`` > 0 asks for verifier logs; ``kconfig``, lines
        of a kernel config (``CONFIG_HZ=1000``), is read before the kernel's own (libbpf's
        ``kconfig`` open option)."""
        return load_object(self, system, pin_root_path=pin_root_path, log_level=log_level,
                           kconfig=kconfig)

    def __repr__(self) -> str:
        return (f"<ObjectSpec {self.name!r}: maps {', '.join(self.maps) or '-'}; programs "
                f"{', '.join(self.programs) or '-'}>")

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> ObjectSpec:
        with open(path, "rb") as f:
            data = f.read()
        return cls.from_bytes(data, name=os.path.basename(os.fspath(path)).split(".")[0])

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, name: str = "") -> ObjectSpec:
        """Parse an object; ``name`` (libbpf: the file name up to its first dot) prefixes
        the kernel names of the .data/.rodata/.bss maps."""
        try:
            return _parse(ElfFile(data, name or "<bytes>"), name)
        except BtfError as exc:
            raise ObjectError(f"{name or 'object'}: BTF: {exc}") from None


def _parse(elf: ElfFile, obj_name: str) -> ObjectSpec:
    btf, btf_ext = _read_btf(elf)
    kfuncs = _kfunc_externs(elf, btf)
    externs = collect_externs(elf, btf)
    btf = externs.btf
    if btf is not None:
        btf = fixup_ksyms(btf)
    license = _license(elf)
    kern_version = _kern_version(elf)
    unsupported = [f"struct_ops (section '{name}')" for name in _STRUCT_OPS_SECTIONS
                   if elf.section(name) is not None]

    maps: dict[str, ObjectMap] = {}
    by_location: dict[tuple[int, int], str] = {}
    data_by_section: dict[int, str] = {}
    maps_section = elf.section(".maps")
    if maps_section is not None:
        if btf is None:
            raise ObjectError("section '.maps': BTF-defined maps need the object's BTF "
                              "(.BTF section): compile with clang -g")
        found = btf_maps(elf, btf, maps_section)
        for m in found:
            maps[m.name] = m
            by_location[(maps_section.index, m.offset)] = m.name
    legacy = elf.section("maps")
    if legacy is not None and legacy.size:
        for m in legacy_maps(elf, legacy):
            if m.name in maps:
                raise ObjectError(f"map '{m.name}' is defined twice ('.maps' and 'maps')")
            maps[m.name] = m
            by_location[(legacy.index, m.offset)] = m.name
    internal = []
    for section in elf.sections:
        if is_data_section(section):
            internal.append(data_map(elf, btf, section, obj_name))
            data_by_section[section.index] = section.name
    if externs.kconfig:
        internal.append(kconfig_map(btf, externs.kconfig, obj_name))
    for m in internal:
        maps[m.name] = m
    # Relocations name a global data map by its section, which finds it here.
    maps = MapsByName(maps, sections={m.section: m.name for m in internal})
    for m in maps.values():
        if m.spec.type in _UNSUPPORTED_MAP_TYPES:
            unsupported.append(f"{_UNSUPPORTED_MAP_TYPES[m.spec.type]} (map '{m.name}')")

    functions = collect_functions(elf)
    record_relocations(elf, functions, lambda shndx, off: by_location.get((shndx, off)),
                       data_by_section.get, kfuncs,
                       {name: ext.offset for name, ext in externs.kconfig.items()},
                       externs.ksyms)
    if btf_ext is not None:
        attach_btf_ext(functions, btf_ext)
    if maps_section is not None:
        programs_at = {(f.section.index, f.sec_insn_off * 8): f.name for f in functions
                       if f.section.name != ".text"}
        map_slots(elf, maps_section, [m for m in maps.values() if m.section == ".maps"],
                  lambda shndx, off: by_location.get((shndx, off)) or
                  programs_at.get((shndx, off)))

    programs: dict[str, ObjectProgram] = {}
    for function in functions:
        if function.section.name == ".text":
            continue
        programs[function.name] = _program(function, functions, license, kern_version)
    return ObjectSpec(obj_name, elf.byteorder, maps, programs, license, kern_version, btf,
                      btf_ext, unsupported, kfuncs, externs.kconfig, externs.ksyms)


def _kfunc_externs(elf: ElfFile, btf: Btf | None) -> dict[str, KfuncExtern]:
    """bpf_object__collect_externs(), for functions: each FUNC of the BTF's ``.ksyms``
    DATASEC whose ELF symbol is undefined; weak when the symbol is."""
    if btf is None:
        return {}
    undefined = {s.name: s for s in elf.symbols if s.is_extern}
    found = {}
    for type_id in range(1, len(btf)):
        record = btf[type_id]
        if not isinstance(record, Datasec) or record.name != ".ksyms":
            continue
        for info in record.vars:
            func = btf[info.type_id]
            if isinstance(func, Func) and func.name in undefined:
                found[func.name] = KfuncExtern(func.name, func.type_id,
                                               undefined[func.name].bind == STB_WEAK)
    return found


def _program(function, functions, license: str, kern_version: int) -> ObjectProgram:
    section = function.section.name
    autoload = not section.startswith("?")
    section = section.lstrip("?")
    sec_def = find_section_def(section)
    linked = link(function, functions)
    return ObjectProgram(
        function.name, section,
        sec_def.prog_type if sec_def else ProgType.UNSPEC,
        sec_def.expected_attach_type if sec_def else 0,
        sec_def.prog_flags if sec_def else 0,
        linked.insns, tuple(linked.relos), tuple(linked.func_info), tuple(linked.line_info),
        tuple(linked.core_relos), tuple(linked.subprograms), autoload, sec_def, license,
        kern_version)


def _read_btf(elf: ElfFile) -> tuple[Btf | None, BtfExt | None]:
    section = elf.section(".BTF")
    if section is None:
        return None, None
    try:
        btf = fixup_btf(elf, Btf.from_bytes(section.data))
    except BtfError as exc:
        raise ObjectError(f"section '.BTF': {exc}") from None
    ext_section = elf.section(".BTF.ext")
    if ext_section is None:
        return btf, None
    try:
        return btf, BtfExt.from_bytes(ext_section.data, btf)
    except BtfError as exc:
        raise ObjectError(f"section '.BTF.ext': {exc}") from None


def fixup_btf(elf: ElfFile, btf: Btf) -> Btf:
    """libbpf's btf_fixup_datasec(): clang leaves DATASEC sizes and variable offsets zero;
    take them from the ELF (section sizes, symbol values). A global variable with hidden
    visibility becomes static. Variables are sorted by offset."""
    globals_by_name = {s.name: s for s in elf.symbols
                       if s.type == STT_OBJECT and s.bind in (STB_GLOBAL, STB_WEAK)}
    updates = {}
    for type_id in range(1, len(btf)):
        record = btf[type_id]
        if not isinstance(record, Datasec):
            continue
        infos = list(record.vars)
        size = record.size
        var_updates = {}
        if record.name not in (".kconfig", ".ksyms"):
            fix_offsets = size == 0
            if fix_offsets:
                section = elf.section(record.name)
                if section is None or section.size == 0:
                    raise ObjectError(f"BTF DATASEC '{record.name}': no ELF section of that "
                                      "name to take its size from")
                size = section.size
            for i, info in enumerate(infos):
                var = btf[info.type_id]
                if not isinstance(var, Var):
                    raise ObjectError(f"BTF DATASEC '{record.name}': entry [{info.type_id}] "
                                      "is not a variable")
                if var.linkage in (BTF_VAR_STATIC, BTF_VAR_GLOBAL_EXTERN):
                    continue
                symbol = globals_by_name.get(var.name)
                if symbol is None:
                    raise ObjectError(f"BTF DATASEC '{record.name}': no ELF symbol for "
                                      f"variable '{var.name}'")
                if fix_offsets:
                    infos[i] = dataclasses.replace(info, offset=symbol.value)
                if symbol.visibility in (STV_HIDDEN, STV_INTERNAL):
                    var_updates[info.type_id] = dataclasses.replace(var, linkage=BTF_VAR_STATIC)
        infos.sort(key=lambda info: info.offset)
        updates[type_id] = dataclasses.replace(record, size=size, vars=tuple(infos))
        updates.update(var_updates)
    return btf.replace(updates) if updates else btf


def fixup_ksyms(btf: Btf) -> Btf:
    """bpf_object__collect_externs(), its BTF part: the kernel takes no extern FUNC and
    only VARs in a DATASEC, so each .ksyms entry becomes an int-sized slot of its own (a
    function's pointing to one ``dummy_ksym`` VAR), functions become global, their unnamed
    parameters named ``dummy_ksym``, and variables allocated ints."""
    ksyms = [i for i in range(1, len(btf))
             if isinstance(btf[i], Datasec) and btf[i].name == ".ksyms"]
    if not ksyms:
        return btf
    int_id = next((i for i in range(1, len(btf)) if isinstance(btf[i], Int) and
                   btf[i].size == 4 and btf[i].bits_offset == 0), 0)
    btf = btf.replace({})
    if not int_id:
        int_id = btf.add(Int("int", 4, BTF_INT_SIGNED, 0, 32))
    dummy_id = btf.add(Var("dummy_ksym", int_id, BTF_VAR_GLOBAL_ALLOCATED))
    updates = {}
    for sec_id in ksyms:
        infos = []
        for info in btf[sec_id].vars:
            record = btf[info.type_id]
            if isinstance(record, Func):
                proto = btf[record.type_id]
                if isinstance(proto, FuncProto):
                    updates[record.type_id] = dataclasses.replace(proto, params=tuple(
                        Param(p.name or ("dummy_ksym" if p.type_id else ""), p.type_id)
                        for p in proto.params))
                updates[info.type_id] = dataclasses.replace(record, linkage=BTF_FUNC_GLOBAL)
                entry_id = dummy_id
            else:
                updates[info.type_id] = dataclasses.replace(
                    record, type_id=int_id, linkage=BTF_VAR_GLOBAL_ALLOCATED)
                entry_id = info.type_id
            infos.append(VarSecinfo(entry_id, 4 * len(infos), 4))
        updates[sec_id] = dataclasses.replace(btf[sec_id], size=4 * len(infos),
                                              vars=tuple(infos))
    return btf.replace(updates)


def _license(elf: ElfFile) -> str:
    section = elf.section("license")
    if section is None:
        return ""
    return section.data.split(b"\0", 1)[0].decode(errors="replace")


def _kern_version(elf: ElfFile) -> int:
    section = elf.section("version")
    if section is None:
        return 0
    if len(section.data) != 4:
        raise ObjectError(f"section 'version': {len(section.data)} bytes, not a 4-byte "
                          "kernel version")
    return struct.unpack(("<" if elf.byteorder == "little" else ">") + "I", section.data)[0]


