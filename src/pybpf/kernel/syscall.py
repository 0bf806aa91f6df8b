"""bpf(2) through ctypes: the attr layouts, the raw call, and the probes built on them.

Rules this module keeps:
- Each attr struct is one variant of the kernel's ``union bpf_attr`` (or ``struct
  bpf_map_info`` / ``bpf_prog_info``), byte for byte, field names as in
  include/uapi/linux/bpf.h; tests/kernel/test_attr_layout.py checks every offset against
  the header and against the running kernel's BTF.
- The size passed to bpf(2) is the struct's own size. A kernel with a smaller union accepts
  it as long as the bytes beyond its union are zero (``bpf_check_uarg_tail_zero``); fields a
  caller leaves alone stay zero.
- Pointer fields (the kernel's ``__aligned_u64``) are ``c_char_p``: assigning ``bytes``
  points the kernel at that object's buffer (it only reads it), an ``int`` is the address of
  a buffer the kernel writes, ``None`` is NULL. That makes pointers 8 bytes, so only 64-bit
  ABIs are supported; the syscall-number table lists them.
- The foreign function has no ``argtypes``: ctypes' per-argument conversion costs more than
  the call itself. Callers pass small ints and a prebuilt ``c_void_p`` of the attr address.
- Nothing here raises on import on a non-Linux system; ``probe_bpf`` answers False there.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import sys

from ..topology import SYS_CPU_POSSIBLE, parse_cpu_list
from ..uapi import BPF_OBJ_NAME_LEN, Cmd, MapType

u8 = ctypes.c_uint8
u16 = ctypes.c_uint16
u32 = ctypes.c_uint32
s32 = ctypes.c_int32
u64 = ctypes.c_uint64
# A user pointer in an __aligned_u64 slot (see the module rules).
uptr = ctypes.c_char_p

# bpf(2) and perf_event_open(2) numbers per 64-bit architecture (arch syscall tables;
# arm64, riscv64 and loongarch64 use the generic asm-generic/unistd.h numbers).
SYSCALL_NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {"bpf": 321, "perf_event_open": 298},
    "aarch64": {"bpf": 280, "perf_event_open": 241},
    "riscv64": {"bpf": 280, "perf_event_open": 241},
    "loongarch64": {"bpf": 280, "perf_event_open": 241},
}
_MACHINE_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def syscall_number(name: str, machine: str | None = None) -> int:
    """The number of syscall ``name`` on ``machine`` (default: this one).

    Raises OSError(ENOSYS) with a clear message for an architecture not in the table.
    """
    machine = machine or platform.machine()
    machine = _MACHINE_ALIASES.get(machine.lower(), machine.lower())
    try:
        return SYSCALL_NUMBERS[machine][name]
    except KeyError:
        known = ", ".join(sorted(SYSCALL_NUMBERS))
        raise OSError(errno.ENOSYS,
                      f"pybpf's kernel backend does not know the {name}(2) number on "
                      f"{machine!r} (known: {known}); use the emulated backend: "
                      "pybpf.system('emulated')") from None


# -- union bpf_attr variants -------------------------------------------------------------------

class MapCreateAttr(ctypes.Structure):
    """BPF_MAP_CREATE (LAST_FIELD excl_prog_hash_size, 6.18)."""

    _fields_ = [
        ("map_type", u32),
        ("key_size", u32),
        ("value_size", u32),
        ("max_entries", u32),
        ("map_flags", u32),
        ("inner_map_fd", u32),
        ("numa_node", u32),
        ("map_name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("map_ifindex", u32),
        ("btf_fd", u32),
        ("btf_key_type_id", u32),
        ("btf_value_type_id", u32),
        ("btf_vmlinux_value_type_id", u32),
        ("map_extra", u64),
        ("value_type_btf_obj_fd", s32),
        ("map_token_fd", s32),
        ("excl_prog_hash", uptr),
        ("excl_prog_hash_size", u32),
    ]


class MapElemAttr(ctypes.Structure):
    """*_ELEM, GET_NEXT_KEY (``value`` is ``next_key`` there) and MAP_FREEZE."""

    _fields_ = [
        ("map_fd", u32),
        ("key", uptr),
        ("value", uptr),
        ("flags", u64),
    ]


class MapBatchAttr(ctypes.Structure):
    """attr.batch of the four *_BATCH commands."""

    _fields_ = [
        ("in_batch", uptr),
        ("out_batch", uptr),
        ("keys", uptr),
        ("values", uptr),
        ("count", u32),
        ("map_fd", u32),
        ("elem_flags", u64),
        ("flags", u64),
    ]


class ObjPinAttr(ctypes.Structure):
    """BPF_OBJ_PIN / BPF_OBJ_GET."""

    _fields_ = [
        ("pathname", uptr),
        ("bpf_fd", u32),
        ("file_flags", u32),
        ("path_fd", s32),
    ]


class GetIdAttr(ctypes.Structure):
    """*_GET_NEXT_ID and *_GET_FD_BY_ID (``start_id`` is also prog_id/map_id/...)."""

    _fields_ = [
        ("start_id", u32),
        ("next_id", u32),
        ("open_flags", u32),
        ("fd_by_id_token_fd", s32),
    ]


class InfoAttr(ctypes.Structure):
    """attr.info of BPF_OBJ_GET_INFO_BY_FD."""

    _fields_ = [
        ("bpf_fd", u32),
        ("info_len", u32),
        ("info", uptr),
    ]


class ProgLoadAttr(ctypes.Structure):
    """BPF_PROG_LOAD (LAST_FIELD keyring_id, 6.18)."""

    _fields_ = [
        ("prog_type", u32),
        ("insn_cnt", u32),
        ("insns", uptr),
        ("license", uptr),
        ("log_level", u32),
        ("log_size", u32),
        ("log_buf", uptr),
        ("kern_version", u32),
        ("prog_flags", u32),
        ("prog_name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("prog_ifindex", u32),
        ("expected_attach_type", u32),
        ("prog_btf_fd", u32),
        ("func_info_rec_size", u32),
        ("func_info", uptr),
        ("func_info_cnt", u32),
        ("line_info_rec_size", u32),
        ("line_info", uptr),
        ("line_info_cnt", u32),
        ("attach_btf_id", u32),
        ("attach_prog_fd", u32),
        ("core_relo_cnt", u32),
        ("fd_array", uptr),
        ("core_relos", uptr),
        ("core_relo_rec_size", u32),
        ("log_true_size", u32),
        ("prog_token_fd", s32),
        ("fd_array_cnt", u32),
        ("signature", uptr),
        ("signature_size", u32),
        ("keyring_id", s32),
    ]


class BtfLoadAttr(ctypes.Structure):
    """BPF_BTF_LOAD."""

    _fields_ = [
        ("btf", uptr),
        ("btf_log_buf", uptr),
        ("btf_size", u32),
        ("btf_log_size", u32),
        ("btf_log_level", u32),
        ("btf_log_true_size", u32),
        ("btf_flags", u32),
        ("btf_token_fd", s32),
    ]


class RawTracepointAttr(ctypes.Structure):
    """BPF_RAW_TRACEPOINT_OPEN (``raw_tracepoint``)."""

    _fields_ = [
        ("name", uptr),
        ("prog_fd", u32),
        ("_pad", u32),
        ("cookie", u64),
    ]


class ProgAttachAttr(ctypes.Structure):
    """BPF_PROG_ATTACH / BPF_PROG_DETACH (6.6+: ``relative_fd`` and ``expected_revision``
    belong to mprog attachments, tcx and netkit; zero for everything else)."""

    _fields_ = [
        ("target_fd", u32),
        ("attach_bpf_fd", u32),
        ("attach_type", u32),
        ("attach_flags", u32),
        ("replace_bpf_fd", u32),
        ("relative_fd", u32),
        ("expected_revision", u64),
    ]


class MapElemTargetCpuAttr(ctypes.Structure):
    """The *_ELEM attr of the unmerged sockmap CPU-affinity patch (2024, v1): ``target_cpu``
    (a user pointer to a u64 CPU) after ``flags``. No kernel has it: the kernel finds a
    non-zero byte past the fields it knows and answers EINVAL."""

    _fields_ = [
        ("map_fd", u32),
        ("key", uptr),
        ("value", uptr),
        ("flags", u64),
        ("target_cpu", uptr),
    ]


class LinkCreateAttr(ctypes.Structure):
    """BPF_LINK_CREATE, its common head (``target_fd`` is ``target_ifindex`` for XDP)."""

    _fields_ = [
        ("prog_fd", u32),
        ("target_fd", u32),
        ("attach_type", u32),
        ("flags", u32),
        ("_target_args", u8 * 48),  # the per-attach-type union; XDP leaves it zero
    ]


class TestRunAttr(ctypes.Structure):
    """attr.test of BPF_PROG_TEST_RUN."""

    __test__ = False  # not a pytest test class despite the name

    _fields_ = [
        ("prog_fd", u32),
        ("retval", u32),
        ("data_size_in", u32),
        ("data_size_out", u32),
        ("data_in", uptr),
        ("data_out", uptr),
        ("repeat", u32),
        ("duration", u32),
        ("ctx_size_in", u32),
        ("ctx_size_out", u32),
        ("ctx_in", uptr),
        ("ctx_out", uptr),
        ("flags", u32),
        ("cpu", u32),
        ("batch_size", u32),
    ]


# -- info structs ------------------------------------------------------------------------------

class BpfMapInfo(ctypes.Structure):
    """struct bpf_map_info."""

    _fields_ = [
        ("type", u32),
        ("id", u32),
        ("key_size", u32),
        ("value_size", u32),
        ("max_entries", u32),
        ("map_flags", u32),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", u32),
        ("btf_vmlinux_value_type_id", u32),
        ("netns_dev", u64),
        ("netns_ino", u64),
        ("btf_id", u32),
        ("btf_key_type_id", u32),
        ("btf_value_type_id", u32),
        ("btf_vmlinux_id", u32),
        ("map_extra", u64),
        ("hash", uptr),
        ("hash_size", u32),
    ]


class BpfProgInfo(ctypes.Structure):
    """struct bpf_prog_info (``gpl_compatible`` is bit 0 of ``flags``)."""

    _fields_ = [
        ("type", u32),
        ("id", u32),
        ("tag", u8 * 8),
        ("jited_prog_len", u32),
        ("xlated_prog_len", u32),
        ("jited_prog_insns", uptr),
        ("xlated_prog_insns", uptr),
        ("load_time", u64),
        ("created_by_uid", u32),
        ("nr_map_ids", u32),
        ("map_ids", uptr),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", u32),
        ("flags", u32),
        ("netns_dev", u64),
        ("netns_ino", u64),
        ("nr_jited_ksyms", u32),
        ("nr_jited_func_lens", u32),
        ("jited_ksyms", uptr),
        ("jited_func_lens", uptr),
        ("btf_id", u32),
        ("func_info_rec_size", u32),
        ("func_info", uptr),
        ("nr_func_info", u32),
        ("nr_line_info", u32),
        ("line_info", uptr),
        ("jited_line_info", uptr),
        ("nr_jited_line_info", u32),
        ("line_info_rec_size", u32),
        ("jited_line_info_rec_size", u32),
        ("nr_prog_tags", u32),
        ("prog_tags", uptr),
        ("run_time_ns", u64),
        ("run_cnt", u64),
        ("recursion_misses", u64),
        ("verified_insns", u32),
        ("attach_btf_obj_id", u32),
        ("attach_btf_id", u32),
    ]


# -- the call ----------------------------------------------------------------------------------

def _load_libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_libc = _load_libc()
# libc's syscall(2), argtypes deliberately unset (module rules).
libc_syscall = _libc.syscall if _libc is not None else None

# Why bpf(2) cannot be called here, or None when it can.
UNAVAILABLE: OSError | None = None
NR_BPF = -1
if libc_syscall is None:
    UNAVAILABLE = OSError(errno.ENOSYS, "bpf(2) needs Linux; use the emulated backend: "
                                        "pybpf.system('emulated')")
else:
    try:
        NR_BPF = syscall_number("bpf")
    except OSError as exc:
        UNAVAILABLE = exc


get_errno = ctypes.get_errno


def bpf(cmd: int, attr: ctypes.Structure) -> int:
    """Issue bpf(cmd, &attr, sizeof(attr)); returns the result, or ``-errno`` on failure."""
    if UNAVAILABLE is not None:
        raise UNAVAILABLE
    ret = libc_syscall(NR_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if ret < 0:
        return -get_errno()
    return ret


def map_name_bytes(name: bytes | str) -> bytes:
    """A map or program name as the kernel's char[16] takes it (the kernel validates chars)."""
    if isinstance(name, str):
        name = name.encode()
    if len(name) > BPF_OBJ_NAME_LEN:
        raise ValueError(f"name {name!r} is {len(name)} bytes; the kernel's limit is "
                         f"{BPF_OBJ_NAME_LEN - 1} characters plus a NUL")
    return name


# -- probes and machine facts ------------------------------------------------------------------

def probe_bpf() -> bool:
    """True when bpf(2) works here: a tiny ARRAY map can be created (and is closed again).

    Never raises: a non-Linux system, an unknown architecture or a refusal all answer False.
    """
    if UNAVAILABLE is not None:
        return False
    try:
        return probe_map_create() == 0
    except Exception:
        return False


def probe_map_create() -> int:
    """Create and close a 1-entry ARRAY map: 0 when bpf(2) allows it, else the kernel's errno."""
    fd = bpf(Cmd.MAP_CREATE, MapCreateAttr(map_type=MapType.ARRAY, key_size=4, value_size=4,
                                           max_entries=1))
    if fd < 0:
        return -fd
    os.close(fd)
    return 0


@functools.cache
def possible_cpus() -> tuple[int, ...]:
    """The possible CPUs (per-CPU values have one slot each, in this order)."""
    try:
        with open(SYS_CPU_POSSIBLE) as f:
            return tuple(parse_cpu_list(f.read()))
    except OSError:
        return tuple(range(os.cpu_count() or 1))


def num_possible_cpus() -> int:
    """num_possible_cpus(): how many slots a per-CPU value has through the syscall."""
    return len(possible_cpus())
