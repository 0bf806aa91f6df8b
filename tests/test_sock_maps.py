"""pybpf.sock_maps: the programs it builds (redirect verdicts, the length parser) and the
assembler's sockmap helpers by name; the maps themselves are in
tests/conformance/test_sockmap_progs.py."""

from __future__ import annotations

import pytest

from pybpf.asm import assemble_text, disassemble
from pybpf.asm import builder as b
from pybpf.programs import Program, ProgramSpec
from pybpf.sock_maps import SockHash, SockMap, len_parser, redirect_verdict
from pybpf.uapi import BPF_F_INGRESS, BpfFunc, ProgType


def helper_of(items) -> int:
    return next(i.imm for i in items if getattr(i, "opcode", None) == 0x85)


@pytest.mark.parametrize("helper", ["sk_redirect_map", "sk_redirect_hash", "msg_redirect_map",
                                    "msg_redirect_hash"])
def test_sockmap_redirect_helpers_assemble_by_name_and_disassemble(helper):
    insn = b.call(helper)
    assert insn.imm == BpfFunc[helper]
    assert assemble_text(f"call {helper}\nexit").instructions[0] == insn
    assert f"call bpf_{helper}#" in disassemble([insn])


@pytest.mark.parametrize("klass, msg, want", [
    (SockMap, False, "sk_redirect_map"), (SockHash, False, "sk_redirect_hash"),
    (SockMap, True, "msg_redirect_map"), (SockHash, True, "msg_redirect_hash")])
def test_redirect_verdict_calls_the_helper_of_the_map_and_loads(backend, klass, msg, want):
    m = klass(2, system=backend)
    items = redirect_verdict(m, 1, BPF_F_INGRESS, msg=msg)
    assert helper_of(items) == BpfFunc[want]
    prog_type = ProgType.SK_MSG if msg else ProgType.SK_SKB
    Program.load(ProgramSpec(prog_type, items), backend).close()


def test_sockhash_keys_of_any_size_are_put_on_the_stack(backend):
    m = SockHash(2, bytes, key_size=6, system=backend)
    items = redirect_verdict(m, b"\x01\x02\x03\x04\x05\x06")
    stores = [i for i in items if getattr(i, "opcode", None) in (0x62, 0x72)]  # st w, st b
    assert [(i.opcode, i.off, i.imm) for i in stores] == [
        (0x62, -8, 0x04030201), (0x72, -4, 5), (0x72, -3, 6)]
    Program.load(ProgramSpec(ProgType.SK_SKB, items), backend).close()
    assert redirect_verdict(m, 7)[0].imm == 7  # an int key takes the map's key_size


def test_redirect_verdict_by_map_name_needs_the_kind():
    with pytest.raises(TypeError, match="hash=True/False"):
        redirect_verdict("socks", 0)
    assert helper_of(redirect_verdict("socks", 0, hash=False)) == BpfFunc.sk_redirect_map
    with pytest.raises(TypeError, match="index"):
        redirect_verdict("socks", b"\x00", hash=False)
    with pytest.raises(TypeError, match="non-empty"):
        redirect_verdict("socks", b"", hash=True)


def test_len_parser_returns_skb_len_and_loads(backend):
    items = len_parser()
    assert items[0].opcode == 0x61 and items[0].off == 0  # r0 = *(u32 *)(r1 + 0)
    Program.load(ProgramSpec(ProgType.SK_SKB, items), backend).close()
