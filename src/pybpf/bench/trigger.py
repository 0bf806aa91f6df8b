"""Trigger loops for the syscall-tracepoint benchmarks: n syscalls, as cheaply as possible.

Two kinds, both standard library only:
- ``python``: the loop runs in C inside CPython (``deque(starmap(f, repeat(args, n)))``), so
  per event Python adds only the call of a builtin: about 30 ns for ``os.getuid``, but about
  200 ns for ``socket.connect_ex`` (argument parsing, the GIL released around the call).
- ``native`` (x86-64 Linux): the loop is a few bytes of machine code (listed below with the
  source they were assembled from) mapped executable and called once through ctypes. Like
  the C sample it calls glibc's ``syscall()`` / ``connect()`` each time, so the syscalls are
  issued exactly as map_perf_test issues them, and Python is not in the loop at all. (Raw
  ``syscall`` instructions would be faster than the sample: here, with a program attached,
  glibc's wrappers cost about 200 ns more per connect; matching the sample is the point.)

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

# x86-64 System V. rbx, rbp, r12-r14 are callee-saved; five pushes keep rsp 16-byte aligned
# at the calls.
#
# long syscall_loop(long n, void *syscall_fn, long nr, long arg0)  -- n x syscall(nr, arg0)
#   0: push rbp; push rbx; push r12; push r13; push r14
#   8: mov rbx,rdi; mov r12,rsi; mov r13,rdx; mov r14,rcx
#  14: test rbx,rbx; je 29; mov rdi,r13; mov rsi,r14; xor eax,eax (variadic); call r12
#  24: dec rbx; jmp 14
#  29: xor eax,eax; pop r14; pop r13; pop r12; pop rbx; pop rbp; ret
#
# long connect_loop(long n, void *connect_fn, void *sockaddr, unsigned limit)  -- at 0x34
#   n x connect(-1, sockaddr, 28); each must return -1 (EBADF), else returns the calls left.
#   After each call the u32 at sockaddr + 24 (s6_addr32[3]) becomes +32, or 0 once it is
#   >= limit (the sample's start-key walk, limit = entries - 32 as unsigned).
#  34: push rbp; push rbx; push r12; push r13; push r14
#  3c: mov rbx,rdi; mov r12,rsi; mov r13,rdx; mov r14,rcx
#  48: test rbx,rbx; je 7b; mov edi,-1; mov rsi,r13; mov edx,28; call r12
#  5d: cmp eax,-1; jne 7f; mov eax,[r13+24]; cmp eax,r14d; jae 70; add eax,32; jmp 72
#  70: xor eax,eax
#  72: mov [r13+24],eax; dec rbx; jmp 48
#  7b: xor eax,eax; jmp 82
#  7f: mov rax,rbx
#  82: pop r14; pop r13; pop r12; pop rbx; pop rbp; ret
X86_64_CODE = bytes.fromhex(
    "55534154415541564889fb4989f44989d54989ce4885db74104c89ef4c89f631c041ffd448ffcbebeb"
    "31c0415e415d415c5b5dc355534154415541564889fb4989f44989d54989ce4885db742ebfffffffff"
    "4c89eeba1c00000041ffd483f8ff751d418b45184439f0730583c020eb0231c04189451848ffcbebcd"
    "31c0eb034889d8415e415d415c5b5dc3")
SYSCALL_LOOP_OFFSET = 0x00
CONNECT_LOOP_OFFSET = 0x34

# x86-64 syscall numbers of the triggers.
X86_64_NR = {"getuid": 102, "geteuid": 107, "getgid": 104, "getegid": 108, "gettid": 186,
             "getpgid": 121, "getppid": 110, "connect": 42}

_LOOP = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_long,
                         ctypes.c_long)


class _NativeCode:
    """The machine code, mapped once per process."""

    def __init__(self) -> None:
        self.page = mmap.mmap(-1, mmap.PAGESIZE,
                              prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        self.page.write(X86_64_CODE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.page))
        self.syscall_loop = _LOOP(base + SYSCALL_LOOP_OFFSET)
        self.connect_loop = _LOOP(base + CONNECT_LOOP_OFFSET)
        libc = ctypes.CDLL(None)
        self.libc_syscall = ctypes.cast(libc.syscall, ctypes.c_void_p).value
        self.libc_connect = ctypes.cast(libc.connect, ctypes.c_void_p).value


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
    """``run(n)``: n x glibc syscall(nr, arg0), looped in machine code."""
    code = native_code()
    nr = X86_64_NR[syscall]

    def run_n(n: int) -> None:
        code.syscall_loop(n, code.libc_syscall, nr, arg0)

    return run_n


def native_connect_loop(sockaddr: bytes, limit: int):
    """``run(n)``: n x glibc connect(-1, sockaddr, 28), each failing, walking the key."""
    code = native_code()
    if len(sockaddr) != 28:
        raise ValueError(f"sockaddr_in6 is 28 bytes, got {len(sockaddr)}")
    buf = ctypes.create_string_buffer(sockaddr, 28)
    address = ctypes.addressof(buf)
    limit &= 0xFFFFFFFF

    def run_n(n: int) -> None:
        left = code.connect_loop(n, code.libc_connect, address, limit)
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
