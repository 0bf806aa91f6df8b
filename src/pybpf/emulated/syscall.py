"""The helpers of kernel/bpf/syscall.c that both halves of the emulated bpf(2) use (maps in
``system.py``, programs in ``progs.py``)."""

from __future__ import annotations

import errno

from ..errors import KernelError
from ..uapi import BPF_F_RDONLY, BPF_F_WRONLY, BPF_OBJ_NAME_LEN

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
