"""The assembler, the encoding, the decoder and the disassembler (pybpf.asm)."""

from __future__ import annotations

import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from programs.strategies import any_instruction, instructions_of
from pybpf.asm import (
    FP,
    MNEMONICS,
    OPCODES,
    R0,
    R1,
    R2,
    R3,
    AluOp,
    Assembler,
    AssemblyError,
    Class,
    Instruction,
    InvalidInstruction,
    JmpOp,
    Kind,
    Mode,
    Size,
    Source,
    add64,
    assemble,
    assemble_text,
    call,
    call_kfunc,
    check,
    decode,
    disassemble,
    encode,
    exit_,
    format_insn,
    gotol,
    iter_decode,
    ja,
    jlt,
    label,
    ld_map_fd,
    ld_map_value,
    lddw,
    mnemonic,
    mov64,
    slot_table,
)
from pybpf.uapi import BpfFunc

# -- the opcode table ---------------------------------------------------------------------------

def test_opcode_table_has_every_isa_opcode():
    # 53 ALU/ALU64 + 49 JMP/JMP32 + 7 LD + 7 LDX + 4 ST + 4 STX + 4 atomic
    assert len(OPCODES) == 128
    assert OPCODES[0xB7].name == "mov64" and OPCODES[0xBC].name == "mov32"
    assert OPCODES[0x18].kind is Kind.LD_IMM64
    assert OPCODES[0x06].name == "gotol" and OPCODES[0x05].name == "ja"
    assert OPCODES[0xD7].name == "bswap" and OPCODES[0xDC].name == "be"
    assert OPCODES[0xDB].mode is Mode.ATOMIC and OPCODES[0xDB].size is Size.DW
    assert OPCODES[0x91].kind is Kind.LDX_SX and OPCODES[0x91].size is Size.B


def test_opcode_bytes_are_the_or_of_their_parts():
    for code, info in OPCODES.items():
        parts = [info.cls, info.op, info.source, info.size, info.mode]
        assert code == sum(int(p) for p in parts if p is not None) == info.code


def test_no_call_exit_or_may_goto_in_jmp32_and_no_neg_by_register():
    assert Class.JMP32 | JmpOp.CALL not in OPCODES
    assert Class.JMP32 | JmpOp.EXIT not in OPCODES
    assert Class.ALU64 | AluOp.NEG | Source.X not in OPCODES
    assert Class.ALU64 | AluOp.END | Source.X not in OPCODES
    assert Class.LD | Mode.ABS | Size.DW not in OPCODES


# -- encoding round trip over every opcode -------------------------------------------------------

@pytest.mark.parametrize("code", sorted(OPCODES), ids=lambda c: f"{c:#04x}-{OPCODES[c].name}")
@settings(max_examples=20)
@given(data=st.data())
def test_every_opcode_round_trips_encode_decode_encode(code, data):
    insn = data.draw(instructions_of(code))
    raw = encode([insn])
    assert len(raw) == 8 * insn.slots
    assert decode(raw) == [insn]
    assert encode(decode(raw)) == raw


@pytest.mark.parametrize("code", sorted(OPCODES), ids=lambda c: f"{c:#04x}-{OPCODES[c].name}")
@settings(max_examples=20)
@given(data=st.data())
def test_every_opcode_disassembles_and_reassembles_to_the_same_instruction(code, data):
    insn = data.draw(instructions_of(code))
    text = format_insn(insn)
    assert text.startswith(f"({code:02x}) ")
    assert assemble_text(text).instructions == [insn]
    assert mnemonic(insn) in MNEMONICS


@given(st.lists(any_instruction, max_size=20))
def test_programs_round_trip_and_slot_numbers_count_lddw_twice(insns):
    raw = encode(insns)
    decoded = list(iter_decode(raw))
    assert [i for _, i in decoded] == insns
    table = slot_table(insns)
    assert len(table) * 8 == len(raw)
    for pc, insn in decoded:
        assert table[pc] == insn
        if insn.slots == 2:
            assert table[pc + 1] is None
    assert encode(decode(raw)) == raw
    assert assemble_text(disassemble(raw)).instructions == insns


def test_encoding_is_little_endian_with_dst_in_the_low_nibble():
    raw = encode([Instruction(0x61, dst=1, src=2, off=-4, imm=0)])
    assert raw == bytes([0x61, 0x21]) + struct.pack("<h", -4) + bytes(4)


def test_lddw_splits_the_64_bit_immediate_over_two_slots():
    raw = lddw(R1, 0x1122334455667788).encode()
    assert raw == bytes.fromhex("1801000088776655" "0000000044332211")
    assert decode(raw)[0].imm == 0x1122334455667788
    assert decode(lddw(R1, 0xFFFFFFFFFFFFFFFF).encode())[0].imm == -1


# -- the decoder rejects what the kernel rejects ---------------------------------------------------

@pytest.mark.parametrize("raw, why", [
    (bytes(7), "whole number"),
    (bytes.fromhex("1801000001000000"), "second slot"),
    (bytes.fromhex("1801000001000000" "0001000000000000"), "second slot"),
    (bytes.fromhex("ff00000000000000"), "unknown opcode"),
    (bytes.fromhex("8f00000000000000"), "unknown opcode"),  # neg64 by register
    (bytes.fromhex("0710000001000000"), "src must be 0"),  # add64 K with src=1
    (bytes.fromhex("3f21020000000000"), "off must be one of"),  # div64 X off=2
    (bytes.fromhex("bc21200000000000"), "off must be one of"),  # movsx32 from 32 bits
    (bytes.fromhex("d401000008000000"), "16, 32 or 64"),  # le8
    (bytes.fromhex("db21000002000000"), "atomic operation"),  # atomic dw imm=2
    (bytes.fromhex("d321000000000000"), "atomic operation"),  # atomic add on u8
    (bytes.fromhex("9500000001000000"), "all fields must be 0"),  # exit with imm
    (bytes.fromhex("8501000001000000"), "dst must be 0"),
    (bytes.fromhex("8530000001000000"), "src must be 0"),  # call src=3
    (bytes.fromhex("b70b000000000000"), "register out of range"),  # r11
    (bytes.fromhex("1811000003000000" "0000000001000000"), "second slot's imm"),
])
def test_decode_rejects_malformed_instructions(raw, why):
    with pytest.raises(InvalidInstruction, match=why):
        decode(raw)


def test_check_names_the_instruction_and_slot():
    with pytest.raises(InvalidInstruction, match=r"insn 3: add64 \(0x07\)"):
        check(Instruction(0x07, 1, 2, 0, 1), 3)


# -- the assembler ---------------------------------------------------------------------------------

def test_labels_resolve_backward_and_forward_jumps():
    prog = assemble([
        mov64(R1, 0),
        label("loop"),
        add64(R1, 1),
        jlt(R1, 10, "loop"),
        ja("out"),
        mov64(R1, 7),
        label("out"),
        mov64(R0, R1),
        exit_(),
    ])
    assert prog.labels == {"loop": 1, "out": 5}
    assert prog.instructions[2].off == -2  # pc 2 -> 1: 1 - (2 + 1)
    assert prog.instructions[3].off == 1


def test_labels_count_lddw_as_two_slots():
    prog = assemble([ja("end"), lddw(R1, 1), label("end"), exit_()])
    assert prog.instructions[0].off == 2


def test_jump_out_of_16_bit_range_raises_and_gotol_reaches():
    body = [mov64(R0, 0)] * 40000
    with pytest.raises(AssemblyError, match="use gotol"):
        assemble([ja("far"), *body, label("far"), exit_()])
    prog = assemble([gotol("far"), *body, label("far"), exit_()])
    assert prog.instructions[0].imm == 40000


def test_unknown_and_duplicate_labels_raise():
    with pytest.raises(AssemblyError, match="unknown label 'nowhere'"):
        assemble([ja("nowhere"), exit_()])
    with pytest.raises(AssemblyError, match="defined twice"):
        assemble([label("a"), label("a"), exit_()])


def test_register_operand_selects_bpf_x_and_int_selects_bpf_k():
    assert add64(R1, R2) == Instruction(0x0F, 1, 2)
    assert add64(R1, 2) == Instruction(0x07, 1, 0, 0, 2)
    with pytest.raises(AssemblyError, match="must be a register"):
        add64(1, 2)


def test_jump_target_must_be_a_label_or_an_int_offset():
    assert jlt(R1, 10, 3).off == 3 and ja(-1).off == -1
    for target in (3.5, True, None):
        with pytest.raises(AssemblyError, match="jump target is a label name or an int"):
            ja(target)


def test_helpers_are_called_by_name_or_id():
    assert call("map_lookup_elem") == call("bpf_map_lookup_elem") == call(
        BpfFunc.map_lookup_elem) == Instruction(0x85, imm=1)
    with pytest.raises(AssemblyError, match="unknown helper"):
        call("no_such_helper")


def test_helper_ids_match_the_kernel_numbering():
    assert BpfFunc.map_lookup_elem == 1 and BpfFunc.tail_call == 12
    assert (BpfFunc.sk_redirect_map, BpfFunc.msg_redirect_map) == (52, 60)
    assert (BpfFunc.msg_redirect_hash, BpfFunc.sk_redirect_hash) == (71, 72)
    assert BpfFunc.ringbuf_output == 130 and BpfFunc.user_ringbuf_drain == 209
    assert BpfFunc.cgrp_storage_delete == 211
    assert list(BpfFunc) == sorted(BpfFunc)


class _FakeMap:
    fd = 42


def test_map_references_record_where_the_fd_goes():
    prog = assemble([mov64(R0, 0), ld_map_fd(R1, _FakeMap()), ld_map_value(R2, "counts", 8),
                     exit_()])
    assert [r.index for r in prog.map_refs] == [1, 2]
    assert prog.instructions[1].imm == 42 and prog.instructions[1].src == 1
    resolved = prog.with_map_fds(lambda m: 7 if m == "counts" else m.fd)
    assert resolved[2].imm == 7 | 8 << 32 and resolved[2].src == 2


def test_builder_appends_every_mnemonic():
    a = Assembler()
    a.mov64(R0, 0)
    a.label("top")
    a.atomic_fetch_add64(FP, -8, R1)
    a.jne(R0, 0, "top")
    a.exit_()
    assert [mnemonic(i) for i in a.assemble().instructions] == [
        "mov64", "atomic_fetch_add64", "jne", "exit_"]


# -- the disassembler ------------------------------------------------------------------------------

@pytest.mark.parametrize("insn, text", [
    (mov64(R0, 0), "(b7) r0 = 0"),
    (call("map_lookup_elem"), "(85) call bpf_map_lookup_elem#1"),
    (Instruction(0x18, 1, 1, 0, 5), "(18) r1 = map[fd:5]"),
    (exit_(), "(95) exit"),
    (Instruction(0x61, 0, 1, 4), "(61) r0 = *(u32 *)(r1 +4)"),
    (Instruction(0x63, 10, 1, -4), "(63) *(u32 *)(r10 -4) = r1"),
    (Instruction(0x15, 1, 0, 3, 5), "(15) if r1 == 0x5 goto pc+3"),
    (Instruction(0x5E, 1, 2, -1), "(5e) if w1 != w2 goto pc-1"),
    (Instruction(0xC4, 1, 0, 0, 3), "(c4) w1 s>>= 3"),
    (Instruction(0x3F, 1, 2, 1), "(3f) r1 s/= r2"),
    (Instruction(0xBF, 1, 2, 16), "(bf) r1 = (s16)r2"),
    (Instruction(0xDC, 1, 0, 0, 32), "(dc) r1 = be32 r1"),
    (Instruction(0xDB, 10, 1, -8, 0x01), "(db) r1 = atomic64_fetch_add((u64 *)(r10 -8), r1)"),
    (Instruction(0xC3, 10, 1, -8, 0x50), "(c3) lock *(u32 *)(r10 -8) &= r1"),
    (Instruction(0x85, 0, 1, 0, 4), "(85) call pc+4"),
])
def test_disassembly_reads_like_bpftool(insn, text):
    assert format_insn(insn) == text


def test_disassemble_listing_numbers_slots():
    listing = disassemble(encode([mov64(R0, 0), lddw(R1, 1), add64(R0, R3), exit_()]))
    assert listing.splitlines() == ["0: (b7) r0 = 0", "1: (18) r1 = 0x1",
                                    "3: (0f) r0 += r3", "4: (95) exit"]


def test_text_assembler_takes_labels_names_and_comments():
    prog = assemble_text("""
        r0 = 0            // counter
    loop:
        r0 += 1
        if r0 < 10 goto loop
        r1 = map[counts]
        call map_lookup_elem ; helper by name
        r2 = 5 ll
        exit
    """)
    assert prog.instructions[2] == Instruction(0xA5, 0, 0, -2, 10)
    assert prog.map_refs[0].map == "counts"
    assert prog.instructions[5] == lddw(R2, 5)


# -- text -> instruction -> text: no operand of the text is dropped ------------------------------
# Tokens of a disassembled statement that name an operand, and what each may become.
_TEXT_TOKENS = re.compile(r"\b[rw]\d+\b|\bu(?:8|16|32|64)\b|\(s(?:8|16|32)\)|atomic(?:64)?_"
                          r"|\b(?:le|be|bswap)(?:16|32|64)\b|bpf_\w+#|#\d+")
_REGS = [f"{w}{n}" for w in "rw" for n in range(11)]
_SIZES_TEXT = ["u8", "u16", "u32", "u64"]


def _other_tokens(token: str) -> list[str]:
    if re.fullmatch(r"[rw]\d+", token):
        return _REGS
    if token.startswith("u"):
        return _SIZES_TEXT
    if token.startswith("(s"):
        return ["(s8)", "(s16)", "(s32)"]
    if token.startswith("atomic"):
        return ["atomic_", "atomic64_"]
    if token.startswith("bpf_"):
        return ["bpf_map_lookup_elem#", "bpf_map_update_elem#", "bpf_ktime_get_ns#"]
    if token.startswith("#"):
        return ["#1", "#2", "#5"]
    return [f"{op}{bits}" for op in ("le", "be", "bswap") for bits in (16, 32, 64)]


@settings(max_examples=400)
@given(insn=any_instruction, data=st.data())
def test_text_with_any_operand_changed_assembles_to_exactly_that_text_or_raises(insn, data):
    """Change one operand token of a disassembled instruction (a register, a width, a helper,
    the atomic name): the assembler either refuses the text or gives an instruction that
    prints as that very text, so it can never drop an operand it was given."""
    text = format_insn(insn).split(" ", 1)[1]
    tokens = list(_TEXT_TOKENS.finditer(text))
    if tokens:
        token = data.draw(st.sampled_from(tokens))
        replacement = data.draw(st.sampled_from(_other_tokens(token[0])))
        text = text[:token.start()] + replacement + text[token.end():]
    try:
        assembled = assemble_text(text)
    except AssemblyError:
        return
    (got,) = assembled.instructions
    assert _numbers_as_values(format_insn(got).split(" ", 1)[1]) == _numbers_as_values(text)


def _numbers_as_values(text: str) -> str:
    """``text`` with each number written as its decimal value: "w0 = 0x0" (an lddw's
    printed immediate given to a 32-bit mov) is the text "w0 = 0", not a dropped operand."""
    return re.sub(r"-?0x[0-9a-fA-F]+|-?\b\d+\b", lambda m: str(int(m[0], 0)), text)


def test_a_hex_immediate_of_a_32_bit_move_keeps_its_value():
    """Found by the property above: lddw's "r0 = 0x0" with w0 for r0."""
    (insn,) = assemble_text("w0 = 0x0").instructions
    assert format_insn(insn).split(" ", 1)[1] == "w0 = 0"
    assert _numbers_as_values("w0 = 0x10, r10 #5") == "w0 = 16, r10 #5"


@given(insn=any_instruction, opcode=st.integers(0, 255))
def test_the_printed_opcode_must_be_the_instructions(insn, opcode):
    text = f"({opcode:02x}) " + format_insn(insn).split(" ", 1)[1]
    if opcode == insn.opcode:
        assert assemble_text(text).instructions == [insn]
    else:
        with pytest.raises(AssemblyError, match="the opcode must be the same"):
            assemble_text(text)


@pytest.mark.parametrize("text", [
    "r3 = atomic64_xchg((u64 *)(r1 +0), r4)", "r3 = atomic_fetch_or((u32 *)(r1 +0), r4)",
    "r1 = atomic64_fetch_add((u32 *)(r1 +0), r1)", "r1 = -r2", "w1 = -r1", "r1 = be16 r2",
    "r1 += w2", "if r1 > w2 goto +1", "r1 = (s8)w2", "call bpf_map_update_elem#1",
    "*(s32 *)(r1 +0) = r2",
])
def test_text_that_spells_one_operand_two_ways_is_refused(text):
    with pytest.raises(AssemblyError):
        assemble_text(text)


def test_text_assembler_reports_the_line_it_cannot_parse():
    with pytest.raises(AssemblyError, match="line 2: cannot parse 'r0 = = 1'"):
        assemble_text("r0 = 0\nr0 = = 1\nexit")


def test_instruction_record_is_immutable():
    insn = mov64(R3, 1)
    with pytest.raises(AttributeError):
        insn.imm = 2  # type: ignore[misc]
    assert insn._replace(imm=2).imm == 2 and insn.imm == 1


def test_disassembly_of_an_assembly_names_its_maps_and_reads_back():
    prog = assemble([ld_map_fd(R1, "counts"), ld_map_value(R2, "glob", 8), mov64(R0, 0),
                     exit_()])
    listing = disassemble(prog)
    assert listing.splitlines()[:2] == ["0: (18) r1 = map[counts]",
                                        "2: (18) r2 = map[glob][0]+8"]
    again = assemble_text(listing)
    assert again.instructions == prog.instructions
    assert [(r.index, r.map) for r in again.map_refs] == [(0, "counts"), (1, "glob")]


def test_a_kfunc_called_by_name_waits_for_its_btf_id_and_reads_back():
    prog = assemble([mov64(R2, 1), call_kfunc("bpf_sk_skb_set_redirect_cpu"), call_kfunc(7),
                     exit_()])
    assert [(r.index, r.name) for r in prog.kfunc_refs] == [(1, "bpf_sk_skb_set_redirect_cpu")]
    listing = disassemble(prog)
    assert listing.splitlines()[1:3] == [
        "1: (85) call kernel-function bpf_sk_skb_set_redirect_cpu",
        "2: (85) call kernel-function#7"]
    again = assemble_text(listing)
    assert again.instructions == prog.instructions and again.kfunc_refs == prog.kfunc_refs
    resolved = prog.with_kfunc_ids({"bpf_sk_skb_set_redirect_cpu": 42}.__getitem__)
    assert [insn.imm for insn in resolved[1:3]] == [42, 7]
    assert prog.instructions[1].imm == 0  # the assembly itself is left as it was
