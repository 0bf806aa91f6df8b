"""Functions, relocations and bpf-to-bpf linking: libbpf's program relocation, done once.

Steps, each libbpf's:
1. ``collect_functions`` (bpf_object__add_programs): every STT_FUNC symbol of an executable
   section is a function; those in ``.text`` are subprograms, the others entry programs.
   Instructions are kept in little-endian encoding (a ``bpfeb`` object is byte-swapped
   here, as libbpf swaps to the host's order for introspection).
2. ``record_relocations`` (bpf_object__record_reloc): each REL entry of a code section
   becomes a ``Reloc`` on the function that holds the instruction: a map (``.maps`` or
   legacy ``maps``), a global variable (a map value at an offset), a call or the address
   of a subprogram, or an extern: a kfunc (a call, or the address ``bpf_ksym_exists``
   takes, of a function in ``.ksyms``: resolved at load time), a kernel variable (a ksym,
   resolved at load time) or a ``__kconfig`` extern (a value of the ``.kconfig`` map at the
   extern's offset); any other extern is recorded and reported as unsupported when the
   program is loaded.
3. ``link`` (bpf_object__reloc_code): a program's code is its own instructions followed by
   every subprogram it calls or takes the address of (a callback of bpf_loop, timers, ...),
   directly or not, each appended once in first-call order, with call immediates rewritten
   to the new positions and a function's address made a BPF_PSEUDO_FUNC load of its
   callee's position (the verifier takes nothing else as a callback); map references become
   BPF_PSEUDO_MAP_FD / BPF_PSEUDO_MAP_VALUE loads (the fd is put in at load time). The
   .BTF.ext records (func_info, line_info, CO-RE) follow their instructions.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from ..btf import BtfExt, CoreRelo, FuncInfo, LineInfo
from ..uapi import BPF_PSEUDO_CALL, BPF_PSEUDO_FUNC, BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE
from .elf import STB_LOCAL, STT_FUNC, STT_SECTION, ElfFile, Relocation, Section
from .errors import ObjectError, RelocationError

INSN_SIZE = 8
CALL = 0x85        # BPF_JMP | BPF_CALL
LD_IMM64 = 0x18    # BPF_LD | BPF_IMM | BPF_DW
_INSN = struct.Struct("<BBhi")
_INSN_BE = struct.Struct(">BBhi")
KCONFIG_MAP = ".kconfig"  # the internal map of the __kconfig externs' values
# Where relocations may point that pybpf does not load: ELF section -> feature name.
UNSUPPORTED_SECTIONS = {".addr_space.1": "arena global data (__arena)",
                        ".jumptables": "jump tables (indirect jumps)"}


class RelocKind(enum.Enum):
    MAP_FD = "map"                 # lddw of a map (BPF_PSEUDO_MAP_FD)
    MAP_VALUE = "global data"      # lddw of a global variable (BPF_PSEUDO_MAP_VALUE)
    CALL = "call"                  # bpf-to-bpf call
    SUBPROG_ADDR = "subprog addr"  # lddw of a subprogram (callbacks, BPF_PSEUDO_FUNC)
    KFUNC_CALL = "kfunc call"      # call of an extern kernel function
    KFUNC_ADDR = "kfunc address"   # lddw of an extern kernel function (bpf_ksym_exists)
    KSYM = "ksym"                  # lddw of an extern kernel variable (.ksyms)
    EXTERN_LD64 = "extern"         # lddw of an extern pybpf cannot resolve


@dataclass(frozen=True)
class Reloc:
    """What instruction ``insn`` (an index into its function, or program) refers to."""

    insn: int
    kind: RelocKind
    target: str        # map name (MAP_FD, MAP_VALUE) or symbol name
    offset: int = 0    # MAP_VALUE: byte offset in the value; CALL/SUBPROG_ADDR: in .text


@dataclass
class Function:
    """A function of a code section (libbpf ``struct bpf_program`` before linking)."""

    name: str
    section: Section
    sec_insn_off: int
    insns: bytes
    is_global: bool
    relos: list[Reloc] = field(default_factory=list)
    func_info: list[tuple[int, FuncInfo]] = field(default_factory=list)
    line_info: list[tuple[int, LineInfo]] = field(default_factory=list)
    core_relos: list[tuple[int, CoreRelo]] = field(default_factory=list)

    @property
    def insn_cnt(self) -> int:
        return len(self.insns) // INSN_SIZE

    def contains(self, sec_insn: int) -> bool:
        return self.sec_insn_off <= sec_insn < self.sec_insn_off + self.insn_cnt


@dataclass
class Linked:
    """A program's final code and what it still needs at load time."""

    insns: bytes
    relos: list[Reloc]
    func_info: list[tuple[int, FuncInfo]]
    line_info: list[tuple[int, LineInfo]]
    core_relos: list[tuple[int, CoreRelo]]
    subprograms: list[str]


def collect_functions(elf: ElfFile) -> list[Function]:
    """Every function of every non-empty executable section, by section then offset."""
    functions = []
    for section in elf.sections:
        if not section.executable or section.size == 0:
            continue
        code = _host_order(section.data) if elf.byteorder == "big" else section.data
        for symbol in elf.symbols:
            if symbol.shndx != section.index or symbol.type != STT_FUNC:
                continue
            where = f"section '{section.name}': program '{symbol.name}'"
            if symbol.value % INSN_SIZE or symbol.size % INSN_SIZE or symbol.size == 0 \
                    or symbol.value + symbol.size > section.size:
                raise ObjectError(f"{where}: corrupted, offset {symbol.value}, size "
                                  f"{symbol.size} (section is {section.size} bytes)")
            if section.name != ".text" and symbol.bind == STB_LOCAL:
                raise ObjectError(f"{where} is static and not supported: only .text may "
                                  "hold static functions (subprograms)")
            functions.append(Function(symbol.name, section, symbol.value // INSN_SIZE,
                                      code[symbol.value:symbol.value + symbol.size],
                                      symbol.bind != STB_LOCAL))
    functions.sort(key=lambda f: (f.section.index, f.sec_insn_off))
    return functions


def _host_order(code: bytes) -> bytes:
    """Big-endian instructions re-encoded little-endian (register nibbles swapped too)."""
    out = bytearray()
    for opcode, regs, off, imm in _INSN_BE.iter_unpack(code[:len(code) // 8 * 8]):
        out += _INSN.pack(opcode, (regs >> 4) | (regs & 0xF) << 4, off, imm)
    return bytes(out)


def find_function(functions: list[Function], section: Section,
                  sec_insn: int) -> Function | None:
    return next((f for f in functions if f.section.index == section.index and
                 f.contains(sec_insn)), None)


def record_relocations(elf: ElfFile, functions: list[Function],
                       map_at: Callable[[int, int], str | None],
                       data_map: Callable[[int], str | None],
                       kfuncs: Collection[str] = (),
                       kconfig: Mapping[str, int] | None = None,
                       ksyms: Collection[str] = ()) -> None:
    """Attach every relocation of every code section to its function.

    ``map_at(shndx, offset)`` names the map defined there (``.maps``/``maps``);
    ``data_map(shndx)`` names the global data map of a section; ``kfuncs`` are the
    externs the object's BTF declares as kernel functions (FUNCs in ``.ksyms``),
    ``kconfig`` the ``__kconfig`` externs (each one's offset in the ``.kconfig`` map's
    value) and ``ksyms`` the kernel variables (VARs in ``.ksyms``).
    """
    externs = _Externs(kfuncs, kconfig or {}, ksyms)
    text = elf.section(".text")
    for section in {f.section.index: f.section for f in functions}.values():
        for rel in elf.relocations(section):
            what = f"section '{section.name}': relocation #{rel.index}"
            if rel.offset % INSN_SIZE:
                raise RelocationError(f"{what}: offset {rel.offset} is not at an instruction")
            sec_insn = rel.offset // INSN_SIZE
            function = find_function(functions, section, sec_insn)
            if function is None:
                continue  # libbpf: an overridden weak function; nothing loads it
            insn = sec_insn - function.sec_insn_off
            function.relos.append(_reloc(elf, rel, function, insn, text, map_at, data_map,
                                         externs))


@dataclass(frozen=True)
class _Externs:
    kfuncs: Collection[str]
    kconfig: Mapping[str, int]
    ksyms: Collection[str]


def _reloc(elf: ElfFile, rel: Relocation, function: Function, insn: int,
           text: Section | None, map_at: Callable[[int, int], str | None],
           data_map: Callable[[int], str | None], externs: _Externs) -> Reloc:
    """bpf_program__record_reloc()."""
    kfuncs = externs.kfuncs
    opcode, regs, _off, imm = _INSN.unpack_from(function.insns, insn * INSN_SIZE)
    symbol = rel.symbol
    name = elf.symbol_name(symbol)
    where = f"prog '{function.name}': relo for insn #{insn} against '{name}'"
    if opcode not in (CALL, LD_IMM64):
        raise RelocationError(f"{where}: the instruction (code {opcode:#04x}) is neither a "
                              "call nor a 64-bit load")
    if symbol.is_extern:
        if opcode == CALL and name not in kfuncs:
            raise RelocationError(f"{where}: a call of an extern the object's BTF does not "
                                  "declare as a kernel function: declare it __ksym and "
                                  "compile with clang -g")
        if opcode == CALL:
            return Reloc(insn, RelocKind.KFUNC_CALL, name)
        if name in externs.kconfig:  # RELO_EXTERN_LD64 of a kcfg extern: a .kconfig value
            return Reloc(insn, RelocKind.MAP_VALUE, KCONFIG_MAP, externs.kconfig[name])
        kind = RelocKind.KFUNC_ADDR if name in kfuncs else \
            RelocKind.KSYM if name in externs.ksyms else RelocKind.EXTERN_LD64
        return Reloc(insn, kind, name)
    if opcode == CALL:
        if regs >> 4 != BPF_PSEUDO_CALL:
            raise RelocationError(f"{where}: incorrect bpf_call opcode (src_reg {regs >> 4})")
        if text is None or symbol.shndx != text.index:
            raise RelocationError(f"{where}: bad call relo: the callee must be in .text")
        if symbol.value % INSN_SIZE:
            raise RelocationError(f"{where}: bad call relo at offset {symbol.value}")
        return Reloc(insn, RelocKind.CALL, name, symbol.value)
    section = elf.section_at(symbol.shndx, where)
    if symbol.shndx == 0 or symbol.shndx >= 0xFF00:
        raise RelocationError(f"{where}: symbol in special section {symbol.shndx:#x}; "
                              "forgot to initialize a global variable?")
    if text is not None and symbol.shndx == text.index and \
            symbol.type in (STT_FUNC, STT_SECTION):
        if symbol.value % INSN_SIZE or imm % INSN_SIZE:
            raise RelocationError(f"{where}: bad subprog addr relo at offset "
                                  f"{symbol.value}+{imm}")
        return Reloc(insn, RelocKind.SUBPROG_ADDR, name, symbol.value)
    if section.name in UNSUPPORTED_SECTIONS:
        return Reloc(insn, RelocKind.EXTERN_LD64, UNSUPPORTED_SECTIONS[section.name])
    map_name = map_at(symbol.shndx, symbol.value)
    if map_name is not None:
        return Reloc(insn, RelocKind.MAP_FD, map_name)
    map_name = data_map(symbol.shndx)
    if map_name is not None:
        # A global's symbol gives its offset; a static's is its section's, plus the imm.
        return Reloc(insn, RelocKind.MAP_VALUE, map_name, symbol.value + imm)
    if section.name in (".maps", "maps"):
        raise RelocationError(f"{where}: map relo failed to find a map in section "
                              f"'{section.name}' at offset {symbol.value}")
    raise RelocationError(f"{where}: bad data relo against section '{section.name}' (not a "
                          "map, global data or .text)")


def attach_btf_ext(functions: list[Function], ext: BtfExt) -> None:
    """Give each function the .BTF.ext records of its instructions (indices relative to
    the function)."""
    for records, target in ((ext.func_info, "func_info"), (ext.line_info, "line_info"),
                            (ext.core_relos, "core_relos")):
        for section_name, recs in records.items():
            for rec in recs:
                sec_insn = rec.insn_off // INSN_SIZE
                function = next((f for f in functions if f.section.name == section_name and
                                 f.contains(sec_insn)), None)
                if function is None or rec.insn_off % INSN_SIZE:
                    if target == "core_relos":
                        raise RelocationError(f"section '{section_name}': CO-RE relocation at "
                                              f"insn #{sec_insn} lies in no function")
                    continue
                getattr(function, target).append((sec_insn - function.sec_insn_off, rec))


def link(main: Function, functions: list[Function]) -> Linked:
    """``main``'s code with every subprogram it reaches appended and calls fixed."""
    code = bytearray(main.insns)
    placed: dict[int, int] = {id(main): 0}  # function -> its first instruction in ``code``
    order: list[Function] = [main]
    subprograms = [f for f in functions if f.section.name == ".text"]

    def reloc_code(function: Function) -> None:
        base = placed[id(function)]
        relos = {r.insn: r for r in function.relos}
        for insn in range(function.insn_cnt):
            pos = (base + insn) * INSN_SIZE
            opcode, regs, off, imm = _INSN.unpack_from(code, pos)
            relo = relos.get(insn)
            if relo is not None and relo.kind == RelocKind.SUBPROG_ADDR:
                # clang leaves a function's address a plain ld_imm64 (src_reg 0); libbpf
                # marks it BPF_PSEUDO_FUNC before relocating (bpf_object__relocate), and
                # the verifier takes only that as a callback (PTR_TO_FUNC).
                regs = BPF_PSEUDO_FUNC << 4 | regs & 0xF
            is_call = opcode == CALL and regs >> 4 == BPF_PSEUDO_CALL
            is_func = opcode == LD_IMM64 and regs >> 4 == BPF_PSEUDO_FUNC
            if not is_call and not is_func:
                continue
            if relo is not None and relo.kind == RelocKind.KFUNC_CALL:
                continue
            where = f"prog '{main.name}': insn #{insn} of '{function.name}'"
            if relo is not None and relo.kind not in (RelocKind.CALL, RelocKind.SUBPROG_ADDR):
                raise RelocationError(f"{where}: unexpected {relo.kind.value} relocation on a "
                                      "call")
            if relo is not None:
                target = relo.offset // INSN_SIZE + imm + 1 if relo.kind == RelocKind.CALL \
                    else (relo.offset + imm) // INSN_SIZE
            elif is_func:
                raise RelocationError(f"{where}: missing subprog addr relocation")
            elif function.section.name != ".text":
                raise RelocationError(f"{where}: a call with no relocation out of a "
                                      "program's own section: sub-programs must be in .text")
            else:
                target = function.sec_insn_off + insn + imm + 1
            callee = next((f for f in subprograms if f.contains(target)), None)
            if callee is None or callee.sec_insn_off != target:
                raise RelocationError(f"{where}: calls .text instruction #{target}, which "
                                      "starts no sub-program")
            if id(callee) not in placed:
                placed[id(callee)] = len(code) // INSN_SIZE
                order.append(callee)
                code.extend(callee.insns)
                reloc_code(callee)
            new_imm = placed[id(callee)] - (base + insn) - 1
            _INSN.pack_into(code, pos, opcode, regs, off, new_imm)

    reloc_code(main)
    linked = Linked(b"", [], [], [], [], [f.name for f in order[1:]])
    for function in order:
        base = placed[id(function)]
        linked.relos += [Reloc(r.insn + base, r.kind, r.target, r.offset)
                         for r in function.relos]
        linked.func_info += [(i + base, rec) for i, rec in function.func_info]
        linked.line_info += [(i + base, rec) for i, rec in function.line_info]
        linked.core_relos += [(i + base, rec) for i, rec in function.core_relos]
    for relo in linked.relos:
        if relo.kind in (RelocKind.MAP_FD, RelocKind.MAP_VALUE):
            _patch_map_load(code, relo, main.name)
    linked.insns = bytes(code)
    return linked


def _patch_map_load(code: bytearray, relo: Reloc, prog: str) -> None:
    """bpf_object__relocate_data(): a map fd load, or a map value load whose second slot
    carries the offset (the fd itself is put in at load time)."""
    pos = relo.insn * INSN_SIZE
    if pos + 2 * INSN_SIZE > len(code):
        raise RelocationError(f"prog '{prog}': insn #{relo.insn} against '{relo.target}' is "
                              "a 64-bit load cut short by the end of the program")
    opcode, regs, off, _imm = _INSN.unpack_from(code, pos)
    hi = _INSN.unpack_from(code, pos + INSN_SIZE)
    dst = regs & 0xF
    if relo.kind == RelocKind.MAP_FD:
        _INSN.pack_into(code, pos, opcode, BPF_PSEUDO_MAP_FD << 4 | dst, off, 0)
    else:
        _INSN.pack_into(code, pos, opcode, BPF_PSEUDO_MAP_VALUE << 4 | dst, off, 0)
        _INSN.pack_into(code, pos + INSN_SIZE, hi[0], hi[1], hi[2], _s32(relo.offset))


def _s32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value
