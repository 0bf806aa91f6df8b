"""The conformance suite's shared fixtures: ``maps`` (on each backend in turn), ``kmaps``
and ``emaps`` (kernel and emulated, for differential tests), ``sys`` (the kernel and each
emulated engine, for programs), and the helpers the family files share."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest

from helpers import err_of
from pybpf.asm import R0, assemble, encode, exit_, mov64
from pybpf.btf import BTF_FUNC_GLOBAL, BTF_FUNC_STATIC, Btf, Func, FuncProto, Int, Param
from pybpf.emulated import native_missing
from pybpf.uapi import ProgType

KMALLOC_MAX_SIZE = 4 << 20


class Maps:
    """Creates maps on one backend and closes them when the test ends."""

    def __init__(self, sys) -> None:
        self.sys = sys
        self.fds: list[int] = []

    def create(self, map_type, key_size, value_size, max_entries, **kw) -> int:
        fd = self.sys.map_create(map_type, key_size, value_size, max_entries, **kw)
        self.fds.append(fd)
        return fd

    def create_errno(self, *args, **kw) -> int:
        return err_of(self.create, *args, **kw)

    def close(self) -> None:
        """Close every fd made here; each must still be open (no test closes them), so a
        failing close is a backend that lost or closed an fd behind the test's back."""
        failed = []
        for fd in self.fds:
            try:
                self.sys.close(fd)
            except OSError as exc:
                failed.append((fd, exc.errno))
        assert not failed, f"(fd, errno) of closes that failed: {failed}"


@pytest.fixture
def maps(backend):
    m = Maps(backend)
    yield m
    m.close()


@pytest.fixture
def kmaps(kernel):
    m = Maps(kernel)
    yield m
    m.close()


@pytest.fixture
def emaps(emulated):
    m = Maps(emulated)
    yield m
    m.close()


def load(m: Maps, prog_type: int, items, attach_type: int = 0, prog_flags: int = 0) -> int:
    insns = encode(assemble(items).instructions)
    fd = m.sys.prog_load(prog_type, insns, expected_attach_type=attach_type,
                         prog_flags=prog_flags)
    m.fds.append(fd)
    return fd


def returning(value: int):
    return [mov64(R0, value), exit_()]


# -- programs with callbacks (func_info) ------------------------------------------------------
LONG, MAIN_PROTO, CB_PROTO = 1, 2, 3
FUNC_BTF_TYPES = [Int("long", 8, 1, 0, 64), FuncProto("", LONG, (Param("ctx", LONG),)),
                  FuncProto("", LONG, (Param("index", LONG), Param("ctx", LONG)))]


@pytest.fixture(params=["kernel", "emulated-jit", "emulated-interp", "emulated-native"])
def sys(request):
    """Each backend, the emulated one on each of its engines."""
    if request.param == "kernel":
        return request.getfixturevalue("kernel")
    engine = request.param.split("-")[1]
    if engine == "native" and native_missing():
        pytest.skip(native_missing())
    system = request.getfixturevalue("emulated")
    system.bpf_engine = engine
    return system


def load_with_func_info(sys, items: Sequence, callbacks: dict[str, int] | None = None,
                        maps=None, func_info: bool = True, prog_type: int = ProgType.SCHED_CLS,
                        prog_flags: int = 0) -> int:
    """Load ``items`` as a program (default: SCHED_CLS) with BTF func_info: main (global) at
    0, and a subprogram at each label of ``callbacks`` with the BTF linkage given there
    (default: a static ``cb``); other labels are plain labels."""
    callbacks = {"cb": BTF_FUNC_STATIC} if callbacks is None else callbacks
    assembly = assemble(items)
    insns = assembly.with_map_fds(lambda name: maps[name])
    funcs = [Func("main", MAIN_PROTO, BTF_FUNC_GLOBAL)]
    funcs += [Func(name, CB_PROTO, linkage) for name, linkage in callbacks.items()]
    btf_fd = sys.btf_load(Btf(FUNC_BTF_TYPES + funcs).to_bytes())
    starts = [0] + [assembly.labels[name] for name in callbacks]
    first = len(FUNC_BTF_TYPES) + 1
    records = sorted(zip(starts, range(first, first + len(funcs)), strict=True))
    info = b"".join(struct.pack("<II", start, type_id) for start, type_id in records)
    try:
        return sys.prog_load(prog_type, encode(insns), prog_btf_fd=btf_fd,
                             func_info=info if func_info else b"", prog_flags=prog_flags)
    finally:
        sys.close(btf_fd)
