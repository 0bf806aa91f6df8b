"""The emulated kernel's own BTF (prog/btf.py's ``vmlinux_btf_types``): the kernel types it
models are laid out as the running kernel's vmlinux BTF lays them out, so a CO-RE relocation
resolves to the same offsets and sizes on both backends."""

from __future__ import annotations

import os

import pytest

from pybpf.btf import VMLINUX, Btf, Enum
from pybpf.emulated.prog.btf import BPF_MAP_FIELDS, BPF_MAP_SIZE, vmlinux_btf_types


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

