"""What goes into bpf(2): the attr records ``System`` normalises its arguments into, and the
checks that make them.

Rules this module keeps: a value that cannot be put into its attr field is refused here with
``KernelError`` (EINVAL; an fd, EBADF), never wrapped or cut as ctypes would; the records hold
each field exactly as the kernel reads it, so both backends read one encoding (``numa_node``
is the u32 field, NUMA_NO_NODE 0xFFFFFFFF). Messages about lengths are written once, here.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import socket
from dataclasses import dataclass
from typing import Any

from .errors import KernelError, prog_description
from .uapi import BPF_OBJ_NAME_LEN, MapType, map_traits, syscall_value_size

U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
INT_MAX = (1 << 31) - 1
# The address the kernel backend passes for a buffer of the wrong length: above TASK_SIZE, so
# the kernel's copy from it fails with EFAULT (access_ok), after every check made before it.
UNREADABLE = 0xFFFF_FFFF_FFFF_F000


@dataclass(frozen=True)
class MapAttr:
    """The MAP_CREATE part of union bpf_attr, normalised by ``System.map_create``: every field
    as the kernel reads it. ``numa_node`` is the u32 field (NUMA_NO_NODE is 0xFFFFFFFF); the
    kernel reads it only with BPF_F_NUMA_NODE in ``map_flags`` (bpf_map_attr_numa_node)."""

    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int = 0
    inner_map_fd: int = 0
    numa_node: int = 0
    map_name: bytes = b""  # at most BPF_OBJ_NAME_LEN bytes; the kernel checks its characters
    map_extra: int = 0
    btf_fd: int = 0             # the BTF the key and value type ids are in (BTF_LOAD's fd)
    btf_key_type_id: int = 0
    btf_value_type_id: int = 0

    def create_args(self) -> dict[str, Any]:
        """Keyword arguments of ``System.map_create`` that make this map again."""
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """The map as a failed create names it: ``hash map 'name'``."""
        kind = MapType(self.map_type).name.lower() \
            if self.map_type in MapType._value2member_map_ else f"type {self.map_type}"
        name = self.map_name.split(b"\0", 1)[0].decode(errors="replace")
        return f"{kind} map" + (f" {name!r}" if name else "")


@dataclass(frozen=True)
class ProgAttr:
    """The BPF_PROG_LOAD part of union bpf_attr that pybpf sets, normalised by
    ``System.prog_load``: ``insns`` holds whole instructions, ``license`` and ``prog_name``
    are bytes as the kernel reads them (the license up to its first NUL)."""

    prog_type: int
    insns: bytes
    license: bytes = b"GPL"
    expected_attach_type: int = 0
    prog_name: bytes = b""
    prog_flags: int = 0
    log_level: int = 0
    kern_version: int = 0
    prog_btf_fd: int = 0        # the program's BTF; func_info and line_info refer to it
    func_info: bytes = b""      # func_info_rec_size-byte records, insn_off in instructions
    func_info_rec_size: int = 0
    line_info: bytes = b""
    line_info_rec_size: int = 0
    attach_btf_id: int = 0      # TRACING/LSM/EXT: the target's type id in vmlinux BTF

    def describe(self) -> str:
        return prog_description(self.prog_type, _text(self.prog_name.split(b"\0", 1)[0]))


@dataclass(frozen=True)
class TestRunRequest:
    """BPF_PROG_TEST_RUN's inputs, normalised by ``System.prog_test_run`` (``ctx_in`` b""
    when there is none; every integer an unsigned 32-bit attr field)."""

    __test__ = False  # not a pytest test class despite the name

    data_in: bytes
    data_size_out: int
    ctx_in: bytes
    ctx_size_out: int
    repeat: int
    flags: int
    cpu: int
    batch_size: int = 0  # live-frames XDP runs: frames per batch (0: the kernel's 64)


# -- normalisation: the part of each attr field Python could get wrong -------------------------

def unsigned(value: object, bits: int, what: str) -> int:
    """``value`` as an unsigned ``bits``-bit attr field, or KernelError(EINVAL)."""
    if isinstance(value, int) and 0 <= value < 1 << bits:
        return int(value)
    raise KernelError(errno.EINVAL, f"{what}={value!r} is not an unsigned {bits}-bit integer")


def fd_arg(fd: object, err: int = errno.EBADF) -> int:
    """An fd: an int (not a bool) that a process can have open, else KernelError(``err``)."""
    if isinstance(fd, int) and not isinstance(fd, bool) and -(1 << 31) <= fd < 1 << 31:
        return int(fd)
    raise KernelError(err, f"fd {fd!r} is not open" + (
        " (a closed Map or Program has fd -1)" if fd == -1 else ""))


def sock_fd_arg(sock: object) -> int:
    """A socket as its fd: a ``socket.socket`` (its fileno) or an fd (``fd_arg``)."""
    return fd_arg(sock.fileno() if isinstance(sock, socket.socket) else sock)


def timeout_arg(timeout: object) -> float | None:
    """Seconds to wait: None (for ever) or a finite number >= 0, else KernelError(EINVAL)."""
    if timeout is None or (isinstance(timeout, int | float) and 0 <= timeout < float("inf")):
        return timeout  # type: ignore[return-value]
    raise KernelError(errno.EINVAL, f"timeout={timeout!r} is not a number of seconds >= 0 "
                      "(or None)")


def bytes_arg(data: object, what: str) -> bytes:
    """Bytes of a bytes-like ``data`` (``bytes(5)`` would be five zeros: ints are refused)."""
    if data.__class__ is bytes:
        return data  # type: ignore[return-value]
    try:
        return memoryview(data).tobytes()  # type: ignore[arg-type]
    except TypeError:
        raise KernelError(errno.EINVAL, f"{what} must be bytes (or bytes-like), not "
                          f"{type(data).__name__}") from None


def key_arg(key: object) -> bytes | None:
    return None if key is None else bytes_arg(key, "key")


def name_arg(name: object, what: str) -> bytes:
    """A map or program name as the kernel's char[16] holds it (it checks the characters)."""
    if isinstance(name, str):
        name = name.encode()
    if not isinstance(name, bytes | bytearray):
        raise KernelError(errno.EINVAL, f"{what} must be bytes or str, got {name!r}")
    if len(name) > BPF_OBJ_NAME_LEN:
        raise KernelError(errno.EINVAL, f"{what} {bytes(name)!r} is longer than "
                          f"{BPF_OBJ_NAME_LEN} bytes (at most {BPF_OBJ_NAME_LEN - 1} "
                          "characters and a NUL)")
    return bytes(name)


def pin_path(path: object) -> str:
    """A pin path: str, bytes or os.PathLike; a NUL byte would cut it where the kernel reads."""
    try:
        text = os.fsdecode(path)  # type: ignore[arg-type]
    except TypeError:
        raise KernelError(errno.EINVAL, f"a pin path is a str, bytes or os.PathLike, got "
                          f"{path!r}") from None
    if "\0" in text:
        raise KernelError(errno.EINVAL, f"path {text!r} has a NUL byte: the kernel would read "
                          "only the part before it")
    return text


def _text(name: bytes) -> str:
    return name.decode(errors="replace")


def length_problem(what: str, got: int, size: int, unit: str = "") -> str:
    """The detail of a key, value or token of the wrong length (``unit`` says what the map's
    size is, e.g. "the map's key_size")."""
    return f"{what} is {got} bytes, {unit or 'the map takes'} {size}"


def value_layout(map_type: int, value_size: int, ncpus: int) -> str:
    """How a map's syscall value size comes about, for messages."""
    traits = map_traits(map_type)
    if traits.percpu:
        return f"round_up(value_size {value_size}, 8) x {ncpus} possible CPUs"
    if traits.fd_values:
        return "a 4-byte fd"
    return f"value_size {value_size}"


def value_problem(map_type: int, value_size: int, ncpus: int, what: str, got: int) -> str:
    """The detail of a value of the wrong length for a map of this type and value_size."""
    size = syscall_value_size(map_type, value_size, ncpus)
    return (f"{what} is {got} bytes, this map takes {size} "
            f"({value_layout(map_type, value_size, ncpus)})")
