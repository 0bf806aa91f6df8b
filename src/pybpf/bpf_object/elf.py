"""A reader of the ELF relocatable objects clang writes for BPF (``clang -target bpf -c``).

Why the standard library (``struct``) and no ELF package: a BPF object needs only the
section table, one symbol table and REL relocations, about two hundred lines; the ELF
packages on PyPI (pyelftools, lief) are large, parse far more than this (DWARF, program
headers, dynamic sections), and would make pybpf's core depend on a third party for what
is a fixed, fully documented layout (the System V gABI, ELF64 only: BPF is a 64-bit
target). Both byte orders are read: ``-target bpfel`` and ``bpfeb``.

Rules this module keeps:
- Nothing in the file is trusted: every offset, size, count and index is checked before it
  is used, and a malformed file raises ``ElfError`` naming the section or symbol at fault,
  never ``IndexError`` or ``struct.error``.
- Records are frozen; section data are ``bytes`` copies (NOBITS sections have none but
  keep their size).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from ..strtab import string_at
from .errors import ElfError

ELFMAG = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB, ELFDATA2MSB = 1, 2
ET_REL = 1
EM_BPF = 247

# Section header types and flags (the ones BPF objects use).
SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA = 0, 1, 2, 3, 4
SHT_NOBITS, SHT_REL = 8, 9
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHF_COMPRESSED = 0x800

# Special section indices.
SHN_UNDEF, SHN_LORESERVE, SHN_ABS, SHN_COMMON, SHN_XINDEX = 0, 0xFF00, 0xFFF1, 0xFFF2, 0xFFFF

# Symbol types, bindings and visibilities.
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE = 0, 1, 2, 3, 4
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STV_DEFAULT, STV_INTERNAL, STV_HIDDEN, STV_PROTECTED = 0, 1, 2, 3


class RelocType(enum.IntEnum):
    """BPF relocation types (llvm/BinaryFormat/ELFRelocs/BPF.def)."""

    R_BPF_NONE = 0
    R_BPF_64_64 = 1          # lddw imm of a map or global variable
    R_BPF_64_ABS64 = 2       # 64-bit data (.maps inner-map/prog slots, DWARF)
    R_BPF_64_ABS32 = 3       # 32-bit data (DWARF, .BTF.ext section names)
    R_BPF_64_NODYLD32 = 4    # 32-bit data not resolved at load (.BTF DATASEC offsets)
    R_BPF_64_32 = 10         # call imm (bpf-to-bpf call into a function)


_EHDR = {"<": struct.Struct("<16sHHIQQQIHHHHHH"), ">": struct.Struct(">16sHHIQQQIHHHHHH")}
_SHDR = {"<": struct.Struct("<IIQQQQIIQQ"), ">": struct.Struct(">IIQQQQIIQQ")}
_SYM = {"<": struct.Struct("<IBBHQQ"), ">": struct.Struct(">IBBHQQ")}
_REL = {"<": struct.Struct("<QQ"), ">": struct.Struct(">QQ")}
_RELA = {"<": struct.Struct("<QQq"), ">": struct.Struct(">QQq")}


@dataclass(frozen=True)
class Section:
    """One section header and its contents (``data`` is empty for NOBITS; ``size`` is not)."""

    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int
    data: bytes

    @property
    def executable(self) -> bool:
        return bool(self.flags & SHF_EXECINSTR)

    def describe(self) -> str:
        return f"section #{self.index} '{self.name}'"


@dataclass(frozen=True)
class Symbol:
    """One symbol table entry; ``shndx`` is the section it is defined in (0: undefined)."""

    index: int
    name: str
    value: int
    size: int
    type: int
    bind: int
    visibility: int
    shndx: int

    @property
    def is_extern(self) -> bool:
        return self.shndx == SHN_UNDEF and self.bind in (STB_GLOBAL, STB_WEAK) \
            and bool(self.name)


@dataclass(frozen=True)
class Relocation:
    """A REL (or RELA) entry: patch ``offset`` of the target section for ``symbol``."""

    index: int
    offset: int
    type: int
    symbol: Symbol
    addend: int = 0

    @property
    def type_name(self) -> str:
        try:
            return RelocType(self.type).name
        except ValueError:
            return f"relocation type {self.type}"


class ElfFile:
    """A parsed ELF64 relocatable object.

    ``sections`` lists every section header by index (index 0 is the null section);
    ``symbols`` the symbol table; ``relocations(section)`` the REL/RELA entries that apply
    to a section. ``byteorder`` is ``"little"`` or ``"big"``.
    """

    def __init__(self, data: bytes | bytearray | memoryview, name: str = "<bytes>") -> None:
        self.name = name
        data = bytes(data)
        self._data = data
        if len(data) < 16 or data[:4] != ELFMAG:
            raise ElfError(f"{name}: not an ELF file (no \\x7fELF magic)")
        if data[4] != ELFCLASS64:
            raise ElfError(f"{name}: ELF class {data[4]} is not ELFCLASS64: BPF objects are "
                           "64-bit (compile with clang -target bpf)")
        if data[5] not in (ELFDATA2LSB, ELFDATA2MSB):
            raise ElfError(f"{name}: unknown ELF data encoding {data[5]} (neither little- "
                           "nor big-endian)")
        self.endian = "<" if data[5] == ELFDATA2LSB else ">"
        self.byteorder = "little" if self.endian == "<" else "big"
        header = self._unpack(_EHDR[self.endian], 0, "the ELF header")
        (_ident, self.e_type, self.machine, _version, _entry, _phoff, shoff, _flags,
         _ehsize, _phentsize, _phnum, shentsize, shnum, shstrndx) = header
        if self.e_type != ET_REL:
            raise ElfError(f"{name}: ELF type {self.e_type} is not a relocatable object "
                           "(ET_REL): load the .o that clang -c wrote, not a linked file")
        if self.machine != EM_BPF:
            raise ElfError(f"{name}: ELF machine {self.machine} is not BPF ({EM_BPF}): "
                           "compile with clang -target bpf")
        if shoff == 0:
            raise ElfError(f"{name}: the ELF file has no section header table")
        if shentsize != _SHDR[self.endian].size:
            raise ElfError(f"{name}: section header size {shentsize} is not "
                           f"{_SHDR[self.endian].size}")
        raw_headers = self._section_headers(shoff, shnum, shstrndx)
        self.sections = self._read_sections(raw_headers)
        self._by_name: dict[str, Section] = {}
        for section in self.sections:
            self._by_name.setdefault(section.name, section)

    # -- the tables ------------------------------------------------------------------------

    def _unpack(self, fmt: struct.Struct, offset: int, what: str) -> tuple:
        if offset < 0 or offset + fmt.size > len(self._data):
            raise ElfError(f"{self.name}: {what} at offset {offset} ({fmt.size} bytes) lies "
                           f"past the end of the file ({len(self._data)} bytes): truncated?")
        return fmt.unpack_from(self._data, offset)

    def _section_headers(self, shoff: int, shnum: int, shstrndx: int) -> list[tuple]:
        shdr = _SHDR[self.endian]
        if shnum == 0:  # extended numbering: the count is in section 0's sh_size
            shnum = self._unpack(shdr, shoff, "section header #0")[5]
        if shoff > len(self._data) or shnum * shdr.size > len(self._data) - shoff:
            raise ElfError(f"{self.name}: {shnum} section headers at offset {shoff} do not "
                           f"fit in the file ({len(self._data)} bytes): truncated?")
        headers = [self._unpack(shdr, shoff + i * shdr.size, f"section header #{i}")
                   for i in range(shnum)]
        if shstrndx == SHN_XINDEX:
            shstrndx = headers[0][6]
        if not 0 < shstrndx < shnum:
            raise ElfError(f"{self.name}: section name table index {shstrndx} is not a "
                           f"section (the file has {shnum})")
        self._shstrndx = shstrndx
        return headers

    def _section_bytes(self, index: int, sh_type: int, offset: int, size: int,
                       what: str) -> bytes:
        if sh_type in (SHT_NOBITS, SHT_NULL):
            return b""
        if offset + size > len(self._data):
            raise ElfError(f"{self.name}: {what}: contents at offset {offset}, {size} bytes, "
                           f"run past the end of the file ({len(self._data)} bytes)")
        return self._data[offset:offset + size]

    def _read_sections(self, headers: list[tuple]) -> list[Section]:
        name_hdr = headers[self._shstrndx]
        if name_hdr[1] != SHT_STRTAB:
            raise ElfError(f"{self.name}: section name table (section #{self._shstrndx}) is "
                           f"not a string table (type {name_hdr[1]})")
        names = self._section_bytes(self._shstrndx, SHT_STRTAB, name_hdr[4], name_hdr[5],
                                    f"section #{self._shstrndx} (section names)")
        sections = []
        for index, (sh_name, sh_type, flags, _addr, offset, size, link, info, align,
                    entsize) in enumerate(headers):
            name = _string(names, sh_name, f"{self.name}: name of section #{index}")
            what = f"section #{index} '{name}'"
            data = self._section_bytes(index, sh_type, offset, size, what)
            sections.append(Section(index, name, sh_type, flags, offset, size, link, info,
                                    align, entsize, data))
        return sections

    def section(self, name: str) -> Section | None:
        """The first section called ``name``, or None."""
        return self._by_name.get(name)

    def section_at(self, index: int, what: str) -> Section:
        """Section ``index``; ``what`` names the referrer in the error if there is none."""
        if not 0 <= index < len(self.sections):
            raise ElfError(f"{self.name}: {what} names section #{index}, but the file has "
                           f"{len(self.sections)} sections")
        return self.sections[index]

    @cached_property
    def symtab(self) -> Section:
        tables = [s for s in self.sections if s.type == SHT_SYMTAB]
        if not tables:
            raise ElfError(f"{self.name}: no symbol table (SHT_SYMTAB): a stripped object? "
                           "Compile with clang -c and do not strip it")
        if len(tables) > 1:
            raise ElfError(f"{self.name}: {len(tables)} symbol tables; an object has one")
        return tables[0]

    @cached_property
    def symbols(self) -> list[Symbol]:
        table = self.symtab
        sym = _SYM[self.endian]
        if table.entsize != sym.size or table.size % sym.size:
            raise ElfError(f"{self.name}: {table.describe()}: entry size {table.entsize} and "
                           f"size {table.size} do not make {sym.size}-byte symbols")
        strtab = self.section_at(table.link, f"{table.describe()} (its string table)")
        if strtab.type != SHT_STRTAB:
            raise ElfError(f"{self.name}: {table.describe()} links to {strtab.describe()}, "
                           "which is not a string table")
        symbols = []
        for index, (st_name, info, other, shndx, value, size) in enumerate(
                sym.iter_unpack(table.data)):
            name = _string(strtab.data, st_name, f"{self.name}: name of symbol #{index}")
            symbols.append(Symbol(index, name, value, size, info & 0xF, info >> 4, other & 3,
                                  shndx))
        return symbols

    def symbol_at(self, index: int, what: str) -> Symbol:
        symbols = self.symbols
        if not 0 <= index < len(symbols):
            raise ElfError(f"{self.name}: {what} names symbol #{index}, but the symbol table "
                           f"has {len(symbols)}")
        return symbols[index]

    def symbol_name(self, symbol: Symbol) -> str:
        """A symbol's name; a section symbol (static functions and data) is named by its
        section, as libbpf names it."""
        if symbol.type == STT_SECTION and not symbol.name and \
                0 <= symbol.shndx < len(self.sections):
            return self.sections[symbol.shndx].name
        return symbol.name

    @cached_property
    def _relocation_sections(self) -> dict[int, list[Section]]:
        targets: dict[int, list[Section]] = {}
        for section in self.sections:
            if section.type in (SHT_REL, SHT_RELA):
                self.section_at(section.info, f"{section.describe()} (the section it "
                                              "relocates)")
                targets.setdefault(section.info, []).append(section)
        return targets

    def relocation_sections(self, target: Section) -> list[Section]:
        """The REL/RELA sections that apply to ``target``."""
        return self._relocation_sections.get(target.index, [])

    def relocations(self, target: Section) -> list[Relocation]:
        """Every relocation of ``target`` (REL and RELA), in file order."""
        return [rel for section in self.relocation_sections(target)
                for rel in self._read_relocations(section, target)]

    def _read_relocations(self, section: Section, target: Section) -> Iterator[Relocation]:
        fmt = (_REL if section.type == SHT_REL else _RELA)[self.endian]
        if section.entsize != fmt.size or section.size % fmt.size:
            raise ElfError(f"{self.name}: {section.describe()}: entry size {section.entsize} "
                           f"and size {section.size} do not make {fmt.size}-byte relocations")
        for index, entry in enumerate(fmt.iter_unpack(section.data)):
            offset, info = entry[0], entry[1]
            what = f"{section.describe()} relocation #{index}"
            symbol = self.symbol_at(info >> 32, what)
            if target.type != SHT_NOBITS and offset >= target.size:
                raise ElfError(f"{self.name}: {what} patches offset {offset}, past the end "
                               f"of {target.describe()} ({target.size} bytes)")
            yield Relocation(index, offset, info & 0xFFFFFFFF, symbol,
                             entry[2] if len(entry) > 2 else 0)

    @classmethod
    def from_file(cls, path: str) -> ElfFile:
        with open(path, "rb") as f:
            return cls(f.read(), str(path))


def _string(table: bytes, offset: int, what: str) -> str:
    """The NUL-terminated string at ``offset`` of a string table."""
    if offset == 0 and not table:
        return ""
    try:
        return string_at(table, offset)
    except ValueError as exc:
        raise ElfError(f"{what}: {exc}") from None
