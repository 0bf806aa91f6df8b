"""The attr structs match include/uapi/linux/bpf.h byte for byte, and the running kernel.

Expected offsets are copied from the 6.18 uapi header; the BTF cross-check reads the running
kernel's own description of its types (/sys/kernel/btf/vmlinux) with pybpf.btf, and
the BTF reader itself is checked against bpftool where bpftool is installed.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import re
import shutil
import subprocess

import pytest

from pybpf.btf import VMLINUX, Btf, Kind
from pybpf.kernel import syscall as sc
from pybpf.kernel.perf_event import PerfEventAttr

# struct -> (sizeof, {field: (offset, size)}), from include/uapi/linux/bpf.h (6.18) and
# include/uapi/linux/perf_event.h.
EXPECTED = {
    sc.MapCreateAttr: (96, {
        "map_type": (0, 4), "key_size": (4, 4), "value_size": (8, 4), "max_entries": (12, 4),
        "map_flags": (16, 4), "inner_map_fd": (20, 4), "numa_node": (24, 4),
        "map_name": (28, 16), "map_ifindex": (44, 4), "btf_fd": (48, 4),
        "btf_key_type_id": (52, 4), "btf_value_type_id": (56, 4),
        "btf_vmlinux_value_type_id": (60, 4), "map_extra": (64, 8),
        "value_type_btf_obj_fd": (72, 4), "map_token_fd": (76, 4),
        "excl_prog_hash": (80, 8), "excl_prog_hash_size": (88, 4)}),
    sc.MapElemAttr: (32, {"map_fd": (0, 4), "key": (8, 8), "value": (16, 8),
                          "flags": (24, 8)}),
    sc.MapElemTargetCpuAttr: (40, {"map_fd": (0, 4), "key": (8, 8), "value": (16, 8),
                                   "flags": (24, 8), "target_cpu": (32, 8)}),
    sc.ProgAttachAttr: (32, {"target_fd": (0, 4), "attach_bpf_fd": (4, 4),
                             "attach_type": (8, 4), "attach_flags": (12, 4),
                             "replace_bpf_fd": (16, 4), "relative_fd": (20, 4),
                             "expected_revision": (24, 8)}),
    sc.MapBatchAttr: (56, {"in_batch": (0, 8), "out_batch": (8, 8), "keys": (16, 8),
                           "values": (24, 8), "count": (32, 4), "map_fd": (36, 4),
                           "elem_flags": (40, 8), "flags": (48, 8)}),
    sc.ObjPinAttr: (24, {"pathname": (0, 8), "bpf_fd": (8, 4), "file_flags": (12, 4),
                         "path_fd": (16, 4)}),
    sc.GetIdAttr: (16, {"start_id": (0, 4), "next_id": (4, 4), "open_flags": (8, 4),
                        "fd_by_id_token_fd": (12, 4)}),
    sc.InfoAttr: (16, {"bpf_fd": (0, 4), "info_len": (4, 4), "info": (8, 8)}),
    sc.ProgLoadAttr: (168, {
        "prog_type": (0, 4), "insn_cnt": (4, 4), "insns": (8, 8), "license": (16, 8),
        "log_level": (24, 4), "log_size": (28, 4), "log_buf": (32, 8),
        "kern_version": (40, 4), "prog_flags": (44, 4), "prog_name": (48, 16),
        "prog_ifindex": (64, 4), "expected_attach_type": (68, 4), "prog_btf_fd": (72, 4),
        "func_info_rec_size": (76, 4), "func_info": (80, 8), "func_info_cnt": (88, 4),
        "line_info_rec_size": (92, 4), "line_info": (96, 8), "line_info_cnt": (104, 4),
        "attach_btf_id": (108, 4), "attach_prog_fd": (112, 4), "core_relo_cnt": (116, 4),
        "fd_array": (120, 8), "core_relos": (128, 8), "core_relo_rec_size": (136, 4),
        "log_true_size": (140, 4), "prog_token_fd": (144, 4), "fd_array_cnt": (148, 4),
        "signature": (152, 8), "signature_size": (160, 4), "keyring_id": (164, 4)}),
    sc.BtfLoadAttr: (40, {
        "btf": (0, 8), "btf_log_buf": (8, 8), "btf_size": (16, 4), "btf_log_size": (20, 4),
        "btf_log_level": (24, 4), "btf_log_true_size": (28, 4), "btf_flags": (32, 4),
        "btf_token_fd": (36, 4)}),
    sc.RawTracepointAttr: (24, {"name": (0, 8), "prog_fd": (8, 4), "_pad": (12, 4),
                                "cookie": (16, 8)}),
    sc.LinkCreateAttr: (64, {"prog_fd": (0, 4), "target_fd": (4, 4), "attach_type": (8, 4),
                             "flags": (12, 4), "_target_args": (16, 48)}),
    sc.TestRunAttr: (80, {
        "prog_fd": (0, 4), "retval": (4, 4), "data_size_in": (8, 4), "data_size_out": (12, 4),
        "data_in": (16, 8), "data_out": (24, 8), "repeat": (32, 4), "duration": (36, 4),
        "ctx_size_in": (40, 4), "ctx_size_out": (44, 4), "ctx_in": (48, 8),
        "ctx_out": (56, 8), "flags": (64, 4), "cpu": (68, 4), "batch_size": (72, 4)}),
    sc.BpfMapInfo: (104, {
        "type": (0, 4), "id": (4, 4), "key_size": (8, 4), "value_size": (12, 4),
        "max_entries": (16, 4), "map_flags": (20, 4), "name": (24, 16), "ifindex": (40, 4),
        "btf_vmlinux_value_type_id": (44, 4), "netns_dev": (48, 8), "netns_ino": (56, 8),
        "btf_id": (64, 4), "btf_key_type_id": (68, 4), "btf_value_type_id": (72, 4),
        "btf_vmlinux_id": (76, 4), "map_extra": (80, 8), "hash": (88, 8),
        "hash_size": (96, 4)}),
    sc.BpfProgInfo: (232, {
        "type": (0, 4), "id": (4, 4), "tag": (8, 8), "jited_prog_len": (16, 4),
        "xlated_prog_len": (20, 4), "jited_prog_insns": (24, 8),
        "xlated_prog_insns": (32, 8), "load_time": (40, 8), "created_by_uid": (48, 4),
        "nr_map_ids": (52, 4), "map_ids": (56, 8), "name": (64, 16), "ifindex": (80, 4),
        "flags": (84, 4), "netns_dev": (88, 8), "netns_ino": (96, 8),
        "nr_jited_ksyms": (104, 4), "nr_jited_func_lens": (108, 4), "jited_ksyms": (112, 8),
        "jited_func_lens": (120, 8), "btf_id": (128, 4), "func_info_rec_size": (132, 4),
        "func_info": (136, 8), "nr_func_info": (144, 4), "nr_line_info": (148, 4),
        "line_info": (152, 8), "jited_line_info": (160, 8), "nr_jited_line_info": (168, 4),
        "line_info_rec_size": (172, 4), "jited_line_info_rec_size": (176, 4),
        "nr_prog_tags": (180, 4), "prog_tags": (184, 8), "run_time_ns": (192, 8),
        "run_cnt": (200, 8), "recursion_misses": (208, 8), "verified_insns": (216, 4),
        "attach_btf_obj_id": (220, 4), "attach_btf_id": (224, 4)}),
    PerfEventAttr: (136, {
        "type": (0, 4), "size": (4, 4), "config": (8, 8), "sample_period": (16, 8),
        "sample_type": (24, 8), "read_format": (32, 8), "flags": (40, 8),
        "wakeup_events": (48, 4), "bp_type": (52, 4), "config1": (56, 8),
        "config2": (64, 8), "branch_sample_type": (72, 8), "sample_regs_user": (80, 8),
        "sample_stack_user": (88, 4), "clockid": (92, 4), "sample_regs_intr": (96, 8),
        "aux_watermark": (104, 4), "sample_max_stack": (108, 2), "__reserved_2": (110, 2),
        "aux_sample_size": (112, 4), "aux_action": (116, 4), "sig_data": (120, 8),
        "config3": (128, 8)}),
}

# Where each struct lives in the kernel's BTF: (container, variant of union bpf_attr).
# A variant is named by its member name, or for anonymous ones by a field only it has.
BTF_HOME = {
    sc.MapCreateAttr: ("bpf_attr", "map_type"),
    sc.MapElemAttr: ("bpf_attr", "next_key"),
    sc.MapElemTargetCpuAttr: ("bpf_attr", "next_key"),  # target_cpu: past the kernel's
    sc.ProgAttachAttr: ("bpf_attr", "replace_bpf_fd"),
    sc.MapBatchAttr: ("bpf_attr", "batch"),
    sc.ObjPinAttr: ("bpf_attr", "pathname"),
    sc.GetIdAttr: ("bpf_attr", "fd_by_id_token_fd"),
    sc.InfoAttr: ("bpf_attr", "info"),
    sc.ProgLoadAttr: ("bpf_attr", "prog_type"),
    sc.TestRunAttr: ("bpf_attr", "test"),
    sc.BtfLoadAttr: ("bpf_attr", "btf"),
    sc.RawTracepointAttr: ("bpf_attr", "raw_tracepoint"),
    sc.LinkCreateAttr: ("bpf_attr", "link_create"),
    sc.BpfMapInfo: ("bpf_map_info", None),
    sc.BpfProgInfo: ("bpf_prog_info", None),
    PerfEventAttr: ("perf_event_attr", None),
}
# Our name for a bitfield word -> the kernel's first bitfield in it.
BITFIELD_WORDS = {sc.BpfProgInfo: {"flags": "gpl_compatible"},
                  PerfEventAttr: {"flags": "disabled"}}


def _layout(cls) -> dict[str, tuple[int, int]]:
    return {name: (getattr(cls, name).offset, getattr(cls, name).size)
            for name, *_ in cls._fields_}


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda c: c.__name__)
def test_struct_matches_uapi_header(cls):
    size, fields = EXPECTED[cls]
    assert ctypes.sizeof(cls) == size
    assert _layout(cls) == fields


@pytest.fixture(scope="module")
def vmlinux_btf() -> Btf:
    if not os.path.exists(VMLINUX):
        pytest.skip(f"{VMLINUX} is missing: this kernel was built without "
                    "CONFIG_DEBUG_INFO_BTF, so its own layouts cannot be read")
    return Btf.load()


def _kernel_variant(btf: Btf, container: str, variant: str | None) -> int:
    if variant is None:
        return btf.find(container)
    union = btf.find(container, Kind.UNION)
    for member in btf.members(union):
        if member.name == variant or (not member.name and
                                      variant in btf.flat_members(member.type_id)):
            return member.type_id
    raise AssertionError(f"no variant with {variant!r} in union {container}")


@pytest.mark.parametrize("cls", list(BTF_HOME), ids=lambda c: c.__name__)
def test_struct_matches_running_kernel_btf(cls, vmlinux_btf):
    type_id = _kernel_variant(vmlinux_btf, *BTF_HOME[cls])
    kernel = vmlinux_btf.flat_members(type_id)
    kernel_size = vmlinux_btf.size_of(type_id)
    aliases = BITFIELD_WORDS.get(cls, {})
    ours = _layout(cls)
    for name, (offset, size) in ours.items():
        if name.startswith("_"):  # padding or a union the kernel names otherwise
            continue
        member = kernel.get(aliases.get(name, name))
        if member is None:
            # A field newer than this kernel: it must lie past the kernel's variant, where
            # the kernel accepts zeros (bpf_check_uarg_tail_zero).
            assert offset >= kernel_size, f"{cls.__name__}.{name} unknown to this kernel"
            continue
        assert member.bit_offset == offset * 8, f"{cls.__name__}.{name} offset"
        if not member.bitfield_size:
            assert member.size == size, f"{cls.__name__}.{name} size"
    # Every kernel field inside our struct is covered by one of ours (no hole, no skip).
    for member in kernel.values():
        if member.offset < ctypes.sizeof(cls):
            assert any(o <= member.offset < o + s for o, s in ours.values()), \
                f"kernel field {member.name} at {member.offset} has no counterpart"
    if not any(name not in kernel and name not in aliases and not name.startswith("_")
               for name in ours):
        assert ctypes.sizeof(cls) == kernel_size


def test_every_attr_struct_fits_the_running_kernels_union(vmlinux_btf):
    # A longer struct would carry bytes past the kernel's union, which it only accepts
    # when they are zero: fine, but then some field of ours does not exist here.
    union_size = vmlinux_btf.size_of(vmlinux_btf.find("bpf_attr", Kind.UNION))
    assert union_size % 8 == 0
    for cls, (container, _variant) in BTF_HOME.items():
        if container == "bpf_attr":
            assert ctypes.sizeof(cls) <= union_size, cls.__name__


@functools.cache
def _bpftool_raw() -> str:
    return subprocess.run(["bpftool", "btf", "dump", "file", VMLINUX, "format", "raw"],
                          capture_output=True, text=True, check=True).stdout


def _bpftool_members(struct_name: str) -> dict[str, int]:
    block = _bpftool_raw().split(f"STRUCT '{struct_name}' ", 1)[1].split("\n[", 1)[0]
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"'(\w+)' type_id=\d+ bits_offset=(\d+)", block)}


@pytest.mark.parametrize("struct_name", ["bpf_map_info", "bpf_prog_info", "perf_event_attr"])
def test_btf_reader_agrees_with_bpftool(struct_name, vmlinux_btf):
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool is not installed (apt-get install bpftool)")
    expected = _bpftool_members(struct_name)
    direct = {m.name: m.bit_offset for m in vmlinux_btf.members(vmlinux_btf.find(struct_name))
              if m.name}
    assert direct == expected


# -- syscall numbers and machine facts ---------------------------------------------------------

@pytest.mark.parametrize("machine,name,number", [
    ("x86_64", "bpf", 321), ("x86_64", "perf_event_open", 298),
    ("amd64", "bpf", 321),
    ("aarch64", "bpf", 280), ("aarch64", "perf_event_open", 241),
    ("arm64", "bpf", 280),
    ("riscv64", "bpf", 280), ("loongarch64", "perf_event_open", 241),
])
def test_syscall_number_table(machine, name, number):
    assert sc.syscall_number(name, machine) == number


@pytest.mark.parametrize("machine", ["mips", "i686", "armv7l", "sparc64"])
def test_syscall_number_unknown_architecture_says_to_use_emulated(machine):
    with pytest.raises(OSError) as info:
        sc.syscall_number("bpf", machine)
    assert info.value.errno == errno.ENOSYS
    assert machine in str(info.value) and "emulated" in str(info.value)


@pytest.mark.parametrize("text,cpus", [
    ("0", [0]), ("0-3\n", [0, 1, 2, 3]), ("0-3,5", [0, 1, 2, 3, 5]),
    ("0,2-3,8-9", [0, 2, 3, 8, 9]), ("", []),
])
def test_parse_cpu_list(text, cpus):
    assert sc.parse_cpu_list(text) == cpus


def test_num_possible_cpus_reads_sysfs():
    with open("/sys/devices/system/cpu/possible") as f:
        assert sc.num_possible_cpus() == len(sc.parse_cpu_list(f.read()))
