"""The ELF reader against llvm-readobj, on every object of the corpus, in both byte orders;
malformed files give only ElfError/ObjectError (hypothesis: truncation and bit flips)."""

from __future__ import annotations

import dataclasses
import re
import struct
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS, need_tool
from pybpf.bpf_object import ElfError, ObjectError, ObjectSpec
from pybpf.bpf_object.elf import SHT_REL, ElfFile, RelocType


def _readobj(path, *flags: str) -> str:
    return subprocess.run([need_tool("llvm-readobj"), *flags, str(path)], check=True,
                          capture_output=True, text=True).stdout


def _sections(path) -> list[tuple[int, str, int, int]]:
    text = _readobj(path, "--sections")
    return [(int(m[1]), m[2], int(m[3], 16), int(m[4]))
            for m in re.finditer(r"Index: (\d+)\n\s+Name: (\S*) \(\d+\)\n\s+Type: \S+ "
                                 r"\((0x[0-9A-Fa-f]+)\).*?Size: (\d+)", text, re.S)]


def _symbols(path) -> list[tuple[str, int, int]]:
    text = _readobj(path, "--symbols")
    return [(m[1], int(m[2], 16), int(m[3]))
            for m in re.finditer(r"Name: (\S*) \(\d+\)\n\s+Value: (0x[0-9A-Fa-f]+)\n\s+"
                                 r"Size: (\d+)", text)]


def _relocations(path) -> dict[str, list[tuple[int, str, str]]]:
    out: dict[str, list[tuple[int, str, str]]] = {}
    current = None
    for line in _readobj(path, "--relocations").splitlines():
        header = re.match(r"\s*Section \(\d+\) (\S+) \{", line)
        entry = re.match(r"\s*(0x[0-9A-Fa-f]+) (R_BPF_\w+) (\S*)", line)
        if header:
            current = out.setdefault(header[1], [])
        elif entry and current is not None:
            current.append((int(entry[1], 16), entry[2], entry[3]))
    return out


@pytest.mark.parametrize("target", ["bpfel", "bpfeb"])
@pytest.mark.parametrize("name", CORPUS)
def test_sections_symbols_relocations_match_llvm_readobj(build_object, name, target):
    path = build_object(name, target)
    elf = ElfFile.from_file(str(path))
    assert elf.byteorder == ("little" if target == "bpfel" else "big")
    assert [(s.index, s.name, s.type, s.size) for s in elf.sections] == _sections(path)
    assert [(elf.symbol_name(s), s.value, s.size) for s in elf.symbols] == _symbols(path)
    ours = {}
    for section in elf.sections:
        if section.type == SHT_REL:
            target_section = elf.sections[section.info]
            # llvm-readobj names a section symbol by its section, as symbol_name does.
            ours[section.name] = [(r.offset, r.type_name, elf.symbol_name(r.symbol))
                                  for r in elf.relocations(target_section)]
    assert ours == _relocations(path)


def test_every_relocation_type_of_clang_output_is_known(build_object):
    seen = set()
    for name in CORPUS:
        elf = ElfFile.from_file(str(build_object(name)))
        for section in elf.sections:
            seen.update(r.type for r in elf.relocations(section))
    assert seen <= set(RelocType)
    # A -g object has them all but NONE: map/global loads, calls, DWARF and BTF data.
    assert {RelocType.R_BPF_64_64, RelocType.R_BPF_64_ABS64, RelocType.R_BPF_64_ABS32,
            RelocType.R_BPF_64_NODYLD32, RelocType.R_BPF_64_32} <= seen


@pytest.mark.parametrize("name", ["subprogs", "map_in_map", "legacy_maps"])
def test_both_byte_orders_read_the_same_object(build_object, name):
    little = ObjectSpec.from_file(build_object(name, "bpfel"))
    big = ObjectSpec.from_file(build_object(name, "bpfeb"))
    assert little.byteorder == "little" and big.byteorder == "big"
    # The same maps; only the codecs differ, each decoding its object's byte order.
    def maps(spec):
        return [(n, dataclasses.replace(m.spec, key=None, value=None, inner_map=None),
                 m.slots) for n, m in spec.maps.items()]
    assert maps(little) == maps(big)
    # Instructions are re-encoded little-endian: the same programs either way (these
    # sources have no bitfields, whose layout does depend on the byte order).
    for prog_name, prog in little.programs.items():
        assert prog.insns == big.programs[prog_name].insns
        assert prog.relocations == big.programs[prog_name].relocations


def test_big_endian_globals_read_in_their_byte_order(build_object):
    little = ObjectSpec.from_file(build_object("globals", "bpfel"))
    big = ObjectSpec.from_file(build_object("globals", "bpfeb"))
    assert big.maps[".rodata"].data[:4] == (100).to_bytes(4, "big")
    # Bitfields included: each object's BTF says its byte order, and the values agree.
    assert dict(big.globals) == dict(little.globals)


def _header(**fields) -> bytes:
    values = dict(ident=b"\x7fELF\x02\x01\x01" + bytes(9), type=1, machine=247, version=1,
                  entry=0, phoff=0, shoff=64, flags=0, ehsize=64, phentsize=0, phnum=0,
                  shentsize=64, shnum=0, shstrndx=0)
    values.update(fields)
    return struct.pack("<16sHHIQQQIHHHHHH", *values.values())


@pytest.mark.parametrize("data,message", [
    (b"", "not an ELF file"),
    (b"MZ\x90\x00" + bytes(60), "not an ELF file"),
    (b"\x7fELF\x01\x01\x01" + bytes(57), "ELFCLASS64"),
    (b"\x7fELF\x02\x03\x01" + bytes(57), "data encoding"),
    (_header(type=2), "not a relocatable object"),
    (_header(machine=62), "is not BPF"),
    (_header(shoff=0), "no section header table"),
    (_header()[:40], "past the end of the file"),
    (_header(shnum=3), "do not fit in the file"),
])
def test_malformed_headers_are_elf_errors(data, message):
    with pytest.raises(ElfError, match=message):
        ElfFile(data, "bad.o")


def test_a_stripped_object_is_refused_with_a_reason(build_object):
    data = bytearray(build_object("legacy_maps").read_bytes())
    elf = ElfFile(bytes(data))
    symtab = elf.symtab
    # Turn the symbol table into a null section: what strip leaves behind.
    shoff = struct.unpack_from("<Q", data, 40)[0]
    struct.pack_into("<I", data, shoff + 64 * symtab.index + 4, 0)
    with pytest.raises(ObjectError, match="no symbol table"):
        ObjectSpec.from_bytes(bytes(data))


@pytest.fixture(scope="module")
def small_object(build_object) -> bytes:
    return build_object("map_in_map").read_bytes()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_truncated_objects_raise_only_object_errors(small_object, data):
    cut = data.draw(st.integers(0, len(small_object) - 1))
    with pytest.raises(ObjectError):
        ObjectSpec.from_bytes(small_object[:cut])


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bit_flipped_objects_parse_or_raise_only_object_errors(small_object, data):
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(small_object) - 1),
                                         st.integers(0, 7)), min_size=1, max_size=8))
    corrupt = bytearray(small_object)
    for pos, bit in flips:
        corrupt[pos] ^= 1 << bit
    try:
        spec = ObjectSpec.from_bytes(bytes(corrupt))
    except ObjectError:
        return
    # What parsed is usable: globals decode, programs have whole instructions.
    dict(spec.globals)
    assert all(len(p.insns) % 8 == 0 for p in spec.programs.values())
