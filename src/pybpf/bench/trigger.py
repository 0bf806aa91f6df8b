"""Trigger loops for the syscall-tracepoint benchmarks: n syscalls, as cheaply as possible.

Two kinds, both standard library only:
- ``python``: the loop runs in C inside CPython (``deque(starmap(f, repeat(args, n)))``), so
  per event Python adds only the call of a builtin: about 30 ns for ``os.getuid``, but about
  190 ns for ``socket.connect_ex`` (argument parsing, the GIL released around the call).
- ``native`` (x86-64 Linux): the loop is 127 bytes of machine code (listed below, assembled
  from the source in the comment) mapped executable and called once through ctypes, so the
  syscalls are issued back to back exactly as a C loop issues them; Python is not in the
  loop at all. It is used where the per-call cost of Python would show in the figures.

``native_available()`` says whether the native kind works here (architecture, and a kernel
that lets this process map executable memory).
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import mmap
import os
import platform
import socket
import sys
import threading
from collections import deque

# x86-64 System V; syscall clobbers rcx and r11 only, rbx/r12/r13 are callee-saved.
#
# long syscall_loop(long n, long nr, long arg0)   -- n times syscall(nr, arg0); returns 0
#   0: push rbx; push r12; push r13; mov rbx,rdi; mov r12,rsi; mov r13,rdx
#   e: test rbx,rbx; je 20; mov rax,r12; mov rdi,r13; syscall; dec rbx; jmp e
#  20: xor eax,eax; pop r13; pop r12; pop rbx; ret
#
# long connect_loop(long n, void *sockaddr, unsigned limit)   -- at offset 0x28
#   n times connect(-1, sockaddr, 28); each must return -EBADF, else returns the calls left.
#   After each call the u32 at sockaddr + 24 (s6_addr32[3]) becomes +32, or 0 once it is
#   >= limit (the sample's start-key walk, limit = entries - 32 as unsigned).
#  28: push rbx; push r12; push r13; mov rbx,rdi; mov r12,rsi; mov r13,rdx
#  36: test rbx,rbx; je 72; mov eax,42; mov rdi,-1; mov rsi,r12; mov edx,28; syscall
#  51: cmp rax,-9; jne 76; mov eax,[r12+24]; cmp eax,r13d; jae 66; add eax,32; jmp 68
#  66: xor eax,eax
#  68: mov [r12+24],eax; dec rbx; jmp 36
#  72: xor eax,eax; jmp 79
#  76: mov rax,rbx
#  79: pop r13; pop r12; pop rbx; ret
X86_64_CODE = bytes.fromhex(
    "53415441554889fb4989f44989d54885db740d4c89e04c89ef0f0548ffcbebee31c0415d415c5bc3"
    "53415441554889fb4989f44989d54885db7437b82a00000048c7c7ffffffff4c89e6ba1c000000"
    "0f054883f8f7751f418b4424184439e8730583c020eb0231c0418944241848ffcbebc431c0eb03"
    "4889d8415d415c5bc3")
SYSCALL_LOOP_OFFSET = 0x00
CONNECT_LOOP_OFFSET = 0x28

# x86-64 syscall numbers of the triggers.
X86_64_NR = {"getuid": 102, "geteuid": 107, "getgid": 104, "getegid": 108, "gettid": 186,
             "getpgid": 121, "getppid": 110, "connect": 42}

_LOOP = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long)


class _NativeCode:
    """The machine code, mapped once per process."""

    def __init__(self) -> None:
        self.page = mmap.mmap(-1, mmap.PAGESIZE,
                              prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        self.page.write(X86_64_CODE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.page))
        self.syscall_loop = _LOOP(base + SYSCALL_LOOP_OFFSET)
        self.connect_loop = _LOOP(base + CONNECT_LOOP_OFFSET)


_code: _NativeCode | None = None
_unavailable: str | None = None


def native_code() -> _NativeCode:
    global _code, _unavailable
    if _code is None and _unavailable is None:
        if not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")):
            _unavailable = f"the native trigger is x86-64 Linux only (this is " \
                           f"{sys.platform}/{platform.machine()})"
        else:
            try:
                _code = _NativeCode()
            except (OSError, ValueError) as exc:
                _unavailable = f"cannot map executable memory here: {exc}"
    if _code is None:
        raise OSError(_unavailable)
    return _code


def native_available() -> bool:
    try:
        native_code()
    except OSError:
        return False
    return True


def native_unavailable_reason() -> str | None:
    return None if native_available() else _unavailable


def native_syscall_loop(syscall: str, arg0: int = 0):
    """``run(n)``: n x syscall(nr, arg0) in machine code."""
    code = native_code()
    nr = X86_64_NR[syscall]

    def run_n(n: int) -> None:
        code.syscall_loop(n, nr, arg0)

    return run_n


def native_connect_loop(sockaddr: bytes, limit: int):
    """``run(n)``: n x connect(-1, sockaddr, 28), each failing EBADF, walking the key."""
    code = native_code()
    if len(sockaddr) != 28:
        raise ValueError(f"sockaddr_in6 is 28 bytes, got {len(sockaddr)}")
    buf = ctypes.create_string_buffer(sockaddr, 28)
    address = ctypes.addressof(buf)
    limit &= 0xFFFFFFFF

    def run_n(n: int) -> None:
        left = code.connect_loop(n, address, limit)
        if left:
            raise AssertionError(f"connect(-1, ...) did not fail with EBADF ({left} calls "
                                 "were left)")

    run_n.sockaddr = buf  # the machine code writes the key into it
    return run_n


# -- the Python kind -----------------------------------------------------------------------

_PY_SYSCALLS = {
    "getuid": (os.getuid, ()),
    "geteuid": (os.geteuid, ()),
    "getgid": (os.getgid, ()),
    "getegid": (os.getegid, ()),
    "gettid": (threading.get_native_id, ()),  # a real gettid(2) on each call
    "getpgid": (os.getpgid, (0,)),
    "getppid": (os.getppid, ()),
}


def python_syscall_loop(syscall: str):
    """``run(n)``: n calls of the os function making ``syscall``, looped in C by itertools."""
    call, args = _PY_SYSCALLS[syscall]

    def run_n(n: int) -> None:
        deque(itertools.starmap(call, itertools.repeat(args, n)), maxlen=0)

    return run_n


def python_connect_loop(sockaddrs: list[bytes]):
    """``run(n)``: connect(-1, addr, 28) n times, cycling through ``sockaddrs`` (28-byte
    sockaddr_in6 images); every call must fail with EBADF.

    A socket object with its fd detached (-1) makes Python call connect(-1, ...), and
    connect_ex returns the errno instead of raising. Each address goes in as a 28-byte
    abstract AF_UNIX address holding the sockaddr_in6 bytes from sin6_port on: the programs
    read only addrlen and sin6_addr (offset 8), and the kernel fails the fd before it looks
    at the family, so the kernel's work is the sample's, while Python copies bytes instead of
    parsing an IPv6 text address (about 80 ns less per call).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.detach()
    addrs = [addr[2:] for addr in sockaddrs]
    connect_ex = sock.connect_ex

    def run_n(n: int) -> None:
        seen = set(map(connect_ex, itertools.islice(itertools.cycle(addrs), n)))
        if seen != {errno.EBADF}:
            raise AssertionError(f"connect(-1, ...) must fail with EBADF, got errnos {seen}")

    return run_n
