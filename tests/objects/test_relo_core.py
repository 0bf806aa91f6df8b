"""CO-RE relocation resolution (libbpf relo_core.c): the corpus against the running kernel's
BTF (checked against bpftool), and every relocation kind on small hand-built BTFs."""

from __future__ import annotations

import os
import re
import struct
import subprocess

import pytest

from conftest import need_tool
from pybpf.bpf_object import ObjectSpec
from pybpf.bpf_object.errors import CoreRelocationError
from pybpf.bpf_object.relo_core import POISON_IMM, apply_core_relos, essential_name
from pybpf.btf import (
    VMLINUX,
    Array,
    Btf,
    CoreRelo,
    CoreReloKind,
    Enum,
    EnumValue,
    Int,
    Member,
    Ptr,
    Struct,
)

INSN = struct.Struct("<BBhi")
K = CoreReloKind
MOV64_IMM, LDXW, LDXDW, LDDW = 0xB7, 0x61, 0x79, 0x18


def insn(code: int, imm: int = 0, off: int = 0, regs: int = 0) -> bytes:
    return INSN.pack(code, regs, off, imm)


@pytest.fixture(scope="module")
def vmlinux() -> Btf:
    if not os.path.exists(VMLINUX):
        pytest.skip(f"{VMLINUX} is missing: this kernel has no CONFIG_DEBUG_INFO_BTF")
    return Btf.load()


@pytest.fixture(scope="module")
def bpftool_vmlinux() -> str:
    return subprocess.run([need_tool("bpftool"), "btf", "dump", "file", VMLINUX, "format",
                           "raw"], check=True, capture_output=True, text=True).stdout


def _bpftool_struct(raw: str, name: str) -> tuple[int, dict[str, int]]:
    block = re.search(rf"^\[\d+\] STRUCT '{name}' size=(\d+) vlen=\d+\n((?:\t.*\n)*)", raw,
                      re.M)
    members = {m[1]: int(m[2]) for m in re.finditer(r"'(\w+)' type_id=\d+ bits_offset=(\d+)",
                                                     block[2])}
    return int(block[1]), members


def _imm(code: bytes, index: int) -> int:
    return INSN.unpack_from(code, index * 8)[3]


def test_core_corpus_against_the_running_kernel(build_object, vmlinux, bpftool_vmlinux):
    spec = ObjectSpec.from_file(build_object("core"))
    prog = spec.programs["task_facts"]
    code, poisoned = apply_core_relos(prog.insns, prog.core_relos, spec.btf, vmlinux,
                                      prog.name)
    assert poisoned == []
    size, members = _bpftool_struct(bpftool_vmlinux, "task_struct")
    lpm = re.search(r"'BPF_MAP_TYPE_LPM_TRIE' val=(\d+)", bpftool_vmlinux)
    values = [_imm(code, i) if code[i * 8] != LDDW else
              _imm(code, i) | _imm(code, i + 1) << 32 for i, _ in prog.core_relos]
    assert values == [members["tgid"] // 8, 4, 0, 1, size, int(lpm[1])]


def test_core_context_fields_move_to_the_kernels_layout(build_object, vmlinux,
                                                         bpftool_vmlinux):
    spec = ObjectSpec.from_file(build_object("core"))
    prog = spec.programs["packet_length"]
    before = {INSN.unpack_from(prog.insns, i * 8)[2] for i, _ in prog.core_relos}
    code, _ = apply_core_relos(prog.insns, prog.core_relos, spec.btf, vmlinux, prog.name)
    after = {INSN.unpack_from(code, i * 8)[2] for i, _ in prog.core_relos}
    _size, members = _bpftool_struct(bpftool_vmlinux, "xdp_md")
    assert before == {4, 8}  # data_end, data as the program declared them
    assert after == {members["data_end"] // 8, members["data"] // 8}


# -- hand-built BTFs -----------------------------------------------------------------------

INT, U32, U64, S32 = 1, 2, 3, 4
BASE = [Int("int", 4, 1, 0, 32), Int("unsigned int", 4, 0, 0, 32),
        Int("unsigned long long", 8, 0, 0, 64), Int("signed", 4, 1, 0, 32)]


def btf(*records) -> Btf:
    return Btf([*BASE, *records])


LOCAL = btf(Struct("sample", 12, (Member("a", INT, 0), Member("b", U32, 32),
                                  Member("arr", 6, 64))),           # 5
            Array("", U32, U32, 1),                                  # 6
            Enum("colour___mine", 4, (EnumValue("RED___mine", 0), EnumValue("BLUE", 7))),  # 7
            Struct("", 4, (Member("x", INT, 0),)),                   # 8 (anonymous)
            Struct("flags", 4, (Member("lo", U32, 0, 3), Member("hi", U32, 3, 5)),
                   kind_flag=True))                                  # 9
TARGET = btf(Struct("sample", 32, (Member("pad", U64, 0), Member("b", U64, 64),
                                   Member("", 6, 128), Member("arr", 7, 192))),  # 5
             Struct("", 8, (Member("a", INT, 32),)),                 # 6: anonymous member
             Array("", U32, U32, 2),                                 # 7
             Enum("colour", 4, (EnumValue("BLUE", 1), EnumValue("RED", 9))),  # 8
             Struct("flags", 8, (Member("pad", U32, 0), Member("hi", U32, 32, 5),
                                 Member("lo", U32, 37, 3)), kind_flag=True))  # 9


def relo(type_id: int, access: str, kind: CoreReloKind) -> CoreRelo:
    return CoreRelo(0, type_id, 0, kind, access)


def apply(code: bytes, r: CoreRelo, local: Btf = LOCAL, target: Btf = TARGET):
    return apply_core_relos(code, [(0, r)], local, target, "prog")


@pytest.mark.parametrize("access,kind,before,after", [
    ("0:0", K.FIELD_BYTE_OFFSET, 0, 20),       # through the target's anonymous member
    ("0:1", K.FIELD_BYTE_OFFSET, 4, 8),
    ("0:2:0", K.FIELD_BYTE_OFFSET, 8, 24),     # an array element
    ("0:1", K.FIELD_BYTE_SIZE, 4, 8),
    ("0:0", K.FIELD_EXISTS, 1, 1),
    ("0:0", K.FIELD_SIGNED, 1, 1),
    ("0:1", K.FIELD_SIGNED, 0, 0),
    ("0", K.TYPE_EXISTS, 1, 1),
    ("0", K.TYPE_SIZE, 12, 32),
    ("0", K.TYPE_ID_TARGET, 5, 5),
    ("0", K.TYPE_ID_LOCAL, 5, 5),
])
def test_field_and_type_relocations(access, kind, before, after):
    code, poisoned = apply(insn(MOV64_IMM, before), relo(5, access, kind))
    assert _imm(code, 0) == after and poisoned == []


def test_enum_values_match_by_essential_name():
    code, _ = apply(insn(MOV64_IMM, 0), relo(7, "0", K.ENUMVAL_VALUE))
    assert _imm(code, 0) == 9  # RED___mine -> RED
    code, _ = apply(insn(MOV64_IMM, 7), relo(7, "1", K.ENUMVAL_VALUE))
    assert _imm(code, 0) == 1
    code, _ = apply(insn(MOV64_IMM, 1), relo(7, "0", K.ENUMVAL_EXISTS))
    assert _imm(code, 0) == 1


def test_bitfield_shifts_follow_the_target():
    # hi: 5 bits at bit 3 locally, at bit 32 of an 8-byte struct in the target.
    code, _ = apply(insn(MOV64_IMM, 56), relo(9, "0:1", K.FIELD_LSHIFT_U64))
    assert _imm(code, 0) == 64 - (32 + 5 - 32)
    code, _ = apply(insn(MOV64_IMM, 59), relo(9, "0:1", K.FIELD_RSHIFT_U64))
    assert _imm(code, 0) == 59
    code, _ = apply(insn(MOV64_IMM, 0), relo(9, "0:1", K.FIELD_BYTE_OFFSET))
    assert _imm(code, 0) == 4


def test_a_load_of_a_widened_unsigned_field_is_resized():
    code, _ = apply(insn(LDXW, off=4), relo(5, "0:1", K.FIELD_BYTE_OFFSET))
    opcode, _regs, off, _imm_ = INSN.unpack_from(code)
    assert (opcode, off) == (LDXDW, 8)


def test_a_missing_field_poisons_the_instruction():
    local = btf(Struct("sample", 4, (Member("gone", INT, 0),)))
    code, poisoned = apply(insn(LDXW, off=0), relo(5, "0:0", K.FIELD_BYTE_OFFSET), local)
    assert INSN.unpack_from(code) == (0x85, 0, 0, POISON_IMM)
    assert [(p.insn, p.relo_index) for p in poisoned] == [(0, 0)]
    assert "sample.gone" in poisoned[0].description
    # Existence checks answer 0 instead, and type checks on a missing type too.
    code, poisoned = apply(insn(MOV64_IMM, 1), relo(5, "0:0", K.FIELD_EXISTS), local)
    assert _imm(code, 0) == 0 and poisoned == []
    code, _ = apply(insn(MOV64_IMM, 1), relo(5, "0", K.TYPE_EXISTS), local, btf())
    assert _imm(code, 0) == 0


def test_a_64_bit_load_is_poisoned_in_both_slots():
    enum = btf(Enum("colour", 4, (EnumValue("GREEN", 3),)))
    code, _ = apply(insn(LDDW, 3) + insn(0), relo(5, "0", K.ENUMVAL_VALUE), enum)
    assert [INSN.unpack_from(code, i) for i in (0, 8)] == [(0x85, 0, 0, POISON_IMM)] * 2


def test_candidates_that_disagree_are_ambiguous():
    two = btf(Struct("sample", 8, (Member("b", U32, 0),)),
              Struct("sample___v2", 8, (Member("b", U32, 32),)))
    with pytest.raises(CoreRelocationError, match=r"relo #0: .*sample\.b .*field offset "
                                                  "ambiguity"):
        apply(insn(MOV64_IMM, 4), relo(5, "0:1", K.FIELD_BYTE_OFFSET), LOCAL, two)


def test_the_instruction_must_hold_the_local_value():
    with pytest.raises(CoreRelocationError, match=r"prog 'prog': relo #0: .*unexpected insn "
                                                  r"#0 \(ALU/ALU64\) value: got 99, exp 4"):
        apply(insn(MOV64_IMM, 99), relo(5, "0:1", K.FIELD_BYTE_OFFSET))


@pytest.mark.parametrize("type_id,access,message", [
    (5, "", "parsing"),
    (5, "0:9", "parsing"),
    (5, "x", "parsing"),
    (5, "1", "parsing"),  # type-based relocations take "0" only
    (8, "0:0", "doesn't support anonymous types"),
])
def test_bad_relocations_are_named(type_id, access, message):
    kind = K.TYPE_SIZE if access == "1" else K.FIELD_BYTE_OFFSET
    with pytest.raises(CoreRelocationError, match=message):
        apply(insn(MOV64_IMM), relo(type_id, access, kind))


def test_type_matches_compares_members_by_name():
    local = btf(Struct("pair", 8, (Member("k", U32, 0), Member("v", U32, 32))))
    same = btf(Struct("pair", 16, (Member("v", U32, 0), Member("k", U32, 64))))
    other = btf(Struct("pair", 8, (Member("k", U32, 0), Member("w", U32, 32))))
    assert _imm(apply(insn(MOV64_IMM, 1), relo(5, "0", K.TYPE_MATCHES), local, same)[0], 0) == 1
    assert _imm(apply(insn(MOV64_IMM, 1), relo(5, "0", K.TYPE_MATCHES), local, other)[0],
                0) == 0


def test_pointer_fields_are_compatible_whatever_they_point_to():
    local = btf(Struct("node", 8, (Member("next", 6, 0),)), Ptr(type_id=INT))
    target = btf(Struct("node", 16, (Member("pad", U64, 0), Member("next", 6, 64))),
                 Ptr(type_id=U64))
    code, _ = apply(insn(LDXDW, off=0), relo(5, "0:0", K.FIELD_BYTE_OFFSET), local, target)
    assert INSN.unpack_from(code)[2] == 8


@pytest.mark.parametrize("name,essential", [
    ("task_struct___v2", "task_struct"), ("a___b___c", "a___b"), ("plain", "plain"),
    ("x____y", "x____y"), ("___y", "___y")])
def test_essential_names(name, essential):
    assert essential_name(name) == essential
