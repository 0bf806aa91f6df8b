"""pybpf.btf against bpftool and the running kernel: every type of every corpus object and
of /sys/kernel/btf/vmlinux reads as bpftool prints it and encodes back byte for byte;
.BTF.ext agrees with the ELF symbols and the C sources; malformed BTF is only BtfError."""

from __future__ import annotations

import functools
import os
import struct
import subprocess

import pytest
from btf_raw import raw_dump
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS, CORPUS_DIR, need_tool
from pybpf.bpf_object import ObjectSpec
from pybpf.bpf_object.elf import ElfFile
from pybpf.btf import (
    VMLINUX,
    Btf,
    BtfError,
    BtfExt,
    CoreReloKind,
    Datasec,
    Func,
    Int,
    Kind,
    Ptr,
    Struct,
    Typedef,
    Var,
)


def _bpftool_raw(path) -> list[str]:
    return subprocess.run([need_tool("bpftool"), "btf", "dump", "file", str(path), "format",
                           "raw"], check=True, capture_output=True, text=True
                          ).stdout.splitlines()


def _section_btf(path) -> Btf:
    return Btf.from_bytes(ElfFile.from_file(str(path)).section(".BTF").data)


@pytest.fixture(scope="module")
def vmlinux() -> Btf:
    if not os.path.exists(VMLINUX):
        pytest.skip(f"{VMLINUX} is missing: this kernel has no CONFIG_DEBUG_INFO_BTF")
    return Btf.load()


@pytest.mark.parametrize("name", CORPUS)
def test_object_btf_reads_as_bpftool_prints_it(build_object, name):
    path = build_object(name)
    assert raw_dump(_section_btf(path)) == _bpftool_raw(path)


@pytest.mark.parametrize("name", CORPUS)
def test_object_btf_encodes_back_byte_for_byte(build_object, name):
    data = ElfFile.from_file(str(build_object(name))).section(".BTF").data
    assert Btf.from_bytes(data).to_bytes() == data


def test_big_endian_btf_reads_the_same_types(build_object):
    little = _section_btf(build_object("globals", "bpfel"))
    big = _section_btf(build_object("globals", "bpfeb"))
    assert big.byteorder == "big"
    assert list(big) == list(little)
    assert Btf.from_bytes(big.to_bytes()).to_bytes() == big.to_bytes()


def test_vmlinux_reads_as_bpftool_prints_it(vmlinux):
    assert raw_dump(vmlinux) == _bpftool_raw(VMLINUX)


def test_vmlinux_encodes_back_byte_for_byte(vmlinux):
    with open(VMLINUX, "rb") as f:
        assert vmlinux.to_bytes() == f.read()


def test_vmlinux_has_every_kind_of_this_kernel(vmlinux):
    kinds = {t.kind for t in vmlinux}
    # DECL_TAG/TYPE_TAG/ENUM64 exist since 5.16-6.0; a 6.18 kernel describes itself with all
    # kinds but the ones only programs use (VAR/DATASEC appear for per-CPU variables).
    assert set(Kind) - {Kind.UNKN} <= kinds | {Kind.TYPE_TAG, Kind.DECL_TAG}


def test_resolution_of_vmlinux_types(vmlinux):
    task = vmlinux.find("task_struct")
    assert vmlinux.size_of(task) == vmlinux[task].size
    members = vmlinux.flat_members(task)
    assert members["pid"].size == 4
    u64 = vmlinux.find("__u64", Kind.TYPEDEF)
    assert isinstance(vmlinux[vmlinux.resolve(u64)], Int)
    assert vmlinux.size_of(u64) == 8
    assert vmlinux.describe(u64) == "__u64"
    assert vmlinux.describe(task) == "struct task_struct"
    with pytest.raises(KeyError, match="no STRUCT named 'no_such_struct_here'"):
        vmlinux.find("no_such_struct_here")


@pytest.fixture(scope="module")
def globals_btf(build_object) -> Btf:
    return ObjectSpec.from_file(build_object("globals")).btf


def test_fixed_up_datasecs_take_sizes_and_offsets_from_the_elf(build_object, globals_btf):
    elf = ElfFile.from_file(str(build_object("globals")))
    symbols = {s.name: s for s in elf.symbols}
    for type_id in range(1, len(globals_btf)):
        record = globals_btf[type_id]
        if not isinstance(record, Datasec) or record.name == "license":
            continue
        assert record.size == elf.section(record.name).size
        for info in record.vars:
            var = globals_btf[info.type_id]
            if var.name in symbols:  # static variables have no symbol: clang placed them
                assert info.offset == symbols[var.name].value
        assert [v.offset for v in record.vars] == sorted(v.offset for v in record.vars)


def test_fixed_up_btf_encodes_what_bpftool_reads(tmp_path, globals_btf):
    path = tmp_path / "fixed.btf"
    path.write_bytes(globals_btf.to_bytes())
    assert _bpftool_raw(path) == raw_dump(globals_btf)
    assert any("DATASEC '.bss' size=40" in line for line in _bpftool_raw(path))


def test_bitfields_and_kind_flag(globals_btf):
    settings_id = globals_btf.find("settings")
    record = globals_btf[settings_id]
    assert isinstance(record, Struct) and record.kind_flag
    bits = {m.name: (m.bit_offset, m.bitfield_size) for m in record.members}
    assert bits["enabled"] == (96, 1) and bits["mode"] == (97, 3)
    assert globals_btf.size_of(settings_id) == 20


# -- .BTF.ext -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", CORPUS)
def test_func_info_names_the_function_at_each_offset(build_object, name):
    elf = ElfFile.from_file(str(build_object(name)))
    btf = Btf.from_bytes(elf.section(".BTF").data)
    ext = BtfExt.from_bytes(elf.section(".BTF.ext").data, btf)
    functions = {(elf.sections[s.shndx].name, s.value): s.name for s in elf.symbols
                 if s.type == 2}
    assert ext.func_info
    for section, records in ext.func_info.items():
        for rec in records:
            func = btf[rec.type_id]
            assert isinstance(func, Func)
            assert functions[(section, rec.insn_off)] == func.name


@functools.cache
def _source_lines(name: str) -> list[str]:
    return (CORPUS_DIR / f"{name}.c").read_text().splitlines()


@pytest.mark.parametrize("name", CORPUS)
def test_line_info_points_into_the_c_source(build_object, name):
    elf = ElfFile.from_file(str(build_object(name)))
    btf = Btf.from_bytes(elf.section(".BTF").data)
    ext = BtfExt.from_bytes(elf.section(".BTF.ext").data, btf)
    lines = _source_lines(name)
    checked = 0
    for records in ext.line_info.values():
        for rec in records:
            assert rec.file_name.endswith(f"{name}.c")
            if rec.line:
                assert lines[rec.line_num - 1] == rec.line
                checked += 1
    assert checked


def test_core_relocation_records_of_the_corpus(build_object):
    elf = ElfFile.from_file(str(build_object("core")))
    btf = Btf.from_bytes(elf.section(".BTF").data)
    ext = BtfExt.from_bytes(elf.section(".BTF.ext").data, btf)
    relos = [(btf[r.type_id].name, r.access_str, r.kind)
             for r in ext.core_relos["raw_tp/sys_enter"]]
    assert relos == [
        ("task_struct", "0:1", CoreReloKind.FIELD_BYTE_OFFSET),
        ("task_struct", "0:2", CoreReloKind.FIELD_BYTE_SIZE),
        ("task_struct___old", "0:1", CoreReloKind.FIELD_EXISTS),
        ("task_struct", "0", CoreReloKind.TYPE_EXISTS),
        ("task_struct", "0", CoreReloKind.TYPE_SIZE),
        ("bpf_map_type___local", "1", CoreReloKind.ENUMVAL_VALUE),
    ]
    assert [r.index for r in ext.core_relos["raw_tp/sys_enter"]] == list(range(6))
    assert {r.access_str for r in ext.core_relos["xdp"]} == {"0:1", "0:2"}


# -- building, and malformed input -------------------------------------------------------

def test_btf_built_from_records_encodes_and_parses_back():
    btf = Btf([Int("unsigned int", 4, 0, 0, 32), Ptr(type_id=1), Typedef("u32", 1),
               Var("v", 3, 1)])
    again = Btf.from_bytes(btf.to_bytes())
    assert list(again) == list(btf)
    assert again.size_of(4) == 4 and again.describe(2) == "unsigned int *"


@pytest.mark.parametrize("mutate,message", [
    (lambda b: b"\x00\x00" + b[2:], "not BTF"),
    (lambda b: b[:10], "shorter than"),
    (lambda b: b[:2] + b"\x02" + b[3:], "version 2"),
    (lambda b: b[:-1], "runs past the end"),
    (lambda b: b[:24 + 4] + struct.pack("<I", 25 << 24) + b[32:], "unknown BTF kind 25"),
])
def test_malformed_btf_is_a_btf_error(mutate, message):
    data = Btf([Int("int", 4, 1, 0, 32)]).to_bytes()
    with pytest.raises(BtfError, match=message):
        Btf.from_bytes(mutate(data))


def test_out_of_range_ids_and_unsized_types_are_btf_errors():
    btf = Btf([Int("int", 4, 1, 0, 32), Func("f", 0, 0)])
    with pytest.raises(BtfError, match="type id 9 does not exist"):
        btf[9]
    with pytest.raises(BtfError, match="has no size"):
        btf.size_of(2)
    loop = Btf([Typedef("a", 2), Typedef("b", 1)])
    with pytest.raises(BtfError, match="loop"):
        loop.resolve(1)


@pytest.fixture(scope="module")
def object_btf_bytes(build_object) -> bytes:
    return ElfFile.from_file(str(build_object("globals"))).section(".BTF").data


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_corrupt_btf_raises_only_btf_errors(object_btf_bytes, data):
    corrupt = bytearray(object_btf_bytes)
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(corrupt) - 1))
        corrupt[pos] ^= 1 << data.draw(st.integers(0, 7))
    cut = data.draw(st.integers(len(corrupt) // 2, len(corrupt)))
    try:
        btf = Btf.from_bytes(bytes(corrupt[:cut]))
        for type_id in range(1, len(btf)):
            btf[type_id]
            btf.describe(type_id)
            try:
                btf.size_of(type_id)
            except BtfError:
                pass
        btf.to_bytes()
    except BtfError:
        pass
