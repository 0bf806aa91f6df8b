"""The emulated kernel's own BTF (prog/btf.py's ``vmlinux_btf_types``): the kernel types it
models are laid out as the running kernel's vmlinux BTF lays them out, so a CO-RE relocation
resolves to the same offsets and sizes on both backends."""

from __future__ import annotations

import os

import pytest

from pybpf.btf import VMLINUX, Array, Btf, Enum, Int, Kind, Struct, Typedef
from pybpf.emulated.prog.btf import (
    BPF_MAP_FIELDS,
    BPF_MAP_SIZE,
    PACKET_HEADERS,
    vmlinux_btf_types,
)


@pytest.fixture(scope="module")
def kernel_btf() -> Btf:
    if not os.path.exists(VMLINUX):
        pytest.skip(f"{VMLINUX} is missing: this kernel was built without "
                    "CONFIG_DEBUG_INFO_BTF, so its own layouts cannot be read")
    return Btf.load()


def test_struct_bpf_map_fields_lie_where_the_running_kernels_do(kernel_btf):
    emulated = vmlinux_btf_types()
    ours = emulated.flat_members(emulated.find("bpf_map"))
    theirs = kernel_btf.flat_members(kernel_btf.find("bpf_map"))
    assert kernel_btf.size_of(kernel_btf.find("bpf_map")) == BPF_MAP_SIZE
    assert [name for name, _, _, _ in BPF_MAP_FIELDS] == list(ours)
    for name, member in ours.items():
        kernel = theirs[name]
        assert (member.bit_offset, member.bitfield_size) == \
            (kernel.bit_offset, kernel.bitfield_size), name
        assert emulated.size_of(member.type_id) == kernel_btf.size_of(kernel.type_id), name
        kinds = {type(btf[btf.resolve(m.type_id)]) for btf, m in
                 ((emulated, member), (kernel_btf, kernel))}
        assert len(kinds) == 1, (name, kinds)  # an int for an int, an enum for an enum


def test_enum_bpf_map_type_holds_the_running_kernels_values(kernel_btf):
    """Every map type the kernel names has its value in the emulated enum (CO-RE's
    enum-value relocations), and the emulated one names no type the kernel lacks."""
    def values(btf: Btf) -> dict[str, int]:
        record = btf[btf.find("bpf_map_type", Enum.kind)]
        return {value.name: value.value for value in record.values}

    ours, theirs = values(vmlinux_btf_types()), values(kernel_btf)
    assert {name: value for name, value in ours.items() if name in theirs} == \
        {name: theirs[name] for name in ours if name in theirs}
    assert set(ours) <= set(theirs)



def _shape(btf: Btf, type_id: int) -> tuple:
    """A type as what CO-RE and a C compiler see of it: kinds, names, sizes, member offsets
    and bitfield widths, typedef chains and array dimensions, all the way down (ids apart)."""
    record = btf[type_id]
    if isinstance(record, Struct):
        return (record.kind, record.name, record.size, record.kind_flag,
                tuple((m.name, m.bit_offset, m.bitfield_size, _shape(btf, m.type_id))
                      for m in record.members))
    if isinstance(record, Array):
        return (record.kind, record.nelems, _shape(btf, record.type_id),
                _shape(btf, record.index_type_id))
    if isinstance(record, Int):
        return (record.kind, record.name, record.size, record.encoding, record.nr_bits)
    assert isinstance(record, Typedef), record
    return (record.kind, record.name, _shape(btf, record.type_id))


@pytest.mark.parametrize("name", PACKET_HEADERS)
def test_packet_headers_are_the_running_kernels_types(kernel_btf, name):
    """Each packet header is the kernel's type, member for member: bitfields (iphdr's ihl and
    version, tcphdr's flags), the anonymous unions of saddr/daddr and ``addrs``, in6_addr's
    union, and the typedefs (__be16, __sum16, __u8) down to the C integer types."""
    emulated = vmlinux_btf_types()
    assert _shape(emulated, emulated.find(name)) == _shape(kernel_btf, kernel_btf.find(name))


@pytest.mark.parametrize("name", ["__u8", "__u16", "__u32", "__u64", "__be16", "__be32",
                                  "__sum16"])
def test_integer_typedefs_are_typedefs_as_in_the_running_kernel(kernel_btf, name):
    """bpf_core_type_exists() of a typedef looks for a typedef: __u32 is one on both."""
    emulated = vmlinux_btf_types()
    assert _shape(emulated, emulated.find(name, Kind.TYPEDEF)) == \
        _shape(kernel_btf, kernel_btf.find(name, Kind.TYPEDEF))
