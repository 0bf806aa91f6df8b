"""The helpers of kernel/bpf/syscall.c that both halves of the emulated bpf(2) use (maps in
``system.py``, programs in ``progs.py``), and the checks of a program's kind that
bpf_prog_load and the verifier make around the walk (attach type, sleepable)."""

from __future__ import annotations

import errno
from typing import Any

from ..errors import KernelError
from ..uapi import (
    BPF_F_RDONLY,
    BPF_F_SLEEPABLE,
    BPF_F_WRONLY,
    BPF_OBJ_NAME_LEN,
    AttachType,
    MapType,
    ProgType,
)

# bpf_obj_name_cpy accepts isalnum() (the kernel's ctype is Latin-1: its letters count) and _ .
_NAME_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_."
                        + bytes(range(0xC0, 0xD7)) + bytes(range(0xD8, 0xF7))
                        + bytes(range(0xF8, 0x100)))
# BPF_OBJ_FLAG_MASK: the open flags GET_FD_BY_ID and OBJ_GET accept.
BPF_OBJ_FLAG_MASK = BPF_F_RDONLY | BPF_F_WRONLY


def bpf_get_file_flag(flags: int) -> int:
    """The fd's access (BPF_F_RDONLY / BPF_F_WRONLY bits of ``flags``); both -> EINVAL."""
    if flags & BPF_F_RDONLY and flags & BPF_F_WRONLY:
        raise KernelError(errno.EINVAL, "BPF_F_RDONLY and BPF_F_WRONLY exclude each other")
    return flags & BPF_OBJ_FLAG_MASK


def bpf_obj_file_flags(flags: int, what: str) -> int:
    """The open flags of GET_FD_BY_ID and OBJ_GET (``what``: the attr field): only RDONLY or
    WRONLY (BPF_OBJ_FLAG_MASK), then bpf_get_file_flag."""
    if flags & ~BPF_OBJ_FLAG_MASK:
        raise KernelError(errno.EINVAL, f"{what} {flags:#x}: only BPF_F_RDONLY or BPF_F_WRONLY "
                          "are accepted")
    return bpf_get_file_flag(flags)


def bpf_obj_name_cpy(name: bytes, field: str = "map_name") -> str:
    """The object's name: [A-Za-z0-9_.] (and Latin-1 letters) up to a NUL that must fit in
    16 bytes (``field`` names the attribute in messages: map_name, prog_name). The name reads
    back as the kernel backend reads a kernel name (undecodable bytes replaced)."""
    text, nul, _ = name.partition(b"\0")
    if not nul and len(text) == BPF_OBJ_NAME_LEN:
        raise KernelError(errno.EINVAL, f"{field} {name!r} must leave room for its NUL: "
                          f"at most {BPF_OBJ_NAME_LEN - 1} characters")
    bad = sorted({f"{c:#04x}" for c in text if c not in _NAME_CHARS})
    if bad:
        raise KernelError(errno.EINVAL, f"{field} {name!r} has bytes {bad} that are not "
                          "letters, digits, '_' or '.'")
    return text.decode(errors="replace")


# bpf_prog_load_check_attach, for the types loaded here: the expected_attach_type each takes
# (the others take any).
_EXPECTED_ATTACH_TYPES = {ProgType.CGROUP_SKB: (AttachType.CGROUP_INET_INGRESS,
                                                AttachType.CGROUP_INET_EGRESS),
                          ProgType.SYSCALL: (0,)}


def bpf_prog_load_check_attach(prog_type: int, expected_attach_type: int) -> None:
    allowed = _EXPECTED_ATTACH_TYPES.get(prog_type)
    if allowed is not None and expected_attach_type not in allowed:
        raise KernelError(errno.EINVAL, f"expected_attach_type {expected_attach_type} is not "
                          f"one a {ProgType(prog_type).name} program takes")


# can_be_sleepable, of the types loaded here (TRACING, LSM and STRUCT_OPS are not).
_SLEEPABLE_PROG_TYPES = frozenset({ProgType.KPROBE, ProgType.SYSCALL})


def check_sleepable(prog_type: int, prog_flags: int) -> None:
    """check_attach_btf_id's checks of BPF_F_SLEEPABLE (after check_cfg, as the kernel)."""
    sleepable = bool(prog_flags & BPF_F_SLEEPABLE)
    if prog_type == ProgType.SYSCALL and not sleepable:
        raise _verifier_log_reject("Syscall programs can only be sleepable")
    if sleepable and prog_type not in _SLEEPABLE_PROG_TYPES:
        raise _verifier_log_reject("Only fentry/fexit/fmod_ret, lsm, iter, uprobe, and struct_ops "
                               "programs can be sleepable")


# check_map_prog_compatibility: the maps a sleepable program may use.
_SLEEPABLE_MAP_TYPES = frozenset({
    MapType.HASH, MapType.LRU_HASH, MapType.ARRAY, MapType.PERCPU_HASH, MapType.PERCPU_ARRAY,
    MapType.LRU_PERCPU_HASH, MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS, MapType.RINGBUF,
    MapType.USER_RINGBUF, MapType.INODE_STORAGE, MapType.SK_STORAGE, MapType.TASK_STORAGE,
    MapType.CGRP_STORAGE, MapType.QUEUE, MapType.STACK, MapType.ARENA})


def sleepable_map_from_fd(map_from_fd: Any, fd: int) -> Any:
    """The map of an lddw in a sleepable program, checked as resolve_pseudo_ldimm64 does."""
    bpf_map = map_from_fd(fd)
    if bpf_map.map_type not in _SLEEPABLE_MAP_TYPES:
        raise _verifier_log_reject("Sleepable programs can only use array, hash, ringbuf and "
                               "local storage maps")
    return bpf_map


def _verifier_log_reject(message: str) -> KernelError:
    """A refusal the verifier writes to its log (EINVAL)."""
    return KernelError(errno.EINVAL, message, log=message + "\n")
