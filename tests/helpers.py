"""Helpers the tests share. tests/conftest.py puts tests/ on ``sys.path``, so a test in any
directory imports them as ``from helpers import u32, err_of``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pybpf.asm import R0
from pybpf.asm import builder as b
from pybpf.emulated.prog.native import native_missing
from pybpf.errors import BPFError
from pybpf.programs import Program, ProgramSpec

# The emulated backend's engines, for tests run on each (native only where llvmlite is).
ENGINES = ["jit", "interp", pytest.param("native", marks=pytest.mark.skipif(
    native_missing() is not None, reason=str(native_missing())))]


def u32(i: int) -> bytes:
    """``i`` as a 4-byte little-endian key or value (an index, an fd, a CPU's qsize)."""
    return i.to_bytes(4, "little")


def err_of(fn: Callable, *args, **kwargs) -> int:
    """The errno ``fn`` fails with (the test fails if it succeeds)."""
    with pytest.raises(OSError) as info:
        fn(*args, **kwargs)
    return info.value.errno


def errno_of(fn: Callable, *args, **kwargs) -> int:
    """0 when ``fn`` succeeds, else the errno it raised."""
    try:
        fn(*args, **kwargs)
    except OSError as exc:
        return exc.errno
    return 0


def op_errno(op: Callable, *args) -> int:
    """0 when an emulated map op succeeds, else the errno of the KernelError it raised: the
    negated return value a program's helper call gets."""
    from pybpf.errors import KernelError

    try:
        op(*args)
    except KernelError as exc:
        return exc.errno
    return 0


def verdict(system, prog_type: int, insns: bytes, **kwargs) -> str:
    """A program load's verdict: "ok", or the name of the errno it failed with."""
    import errno

    try:
        fd = system.prog_load(prog_type, insns, **kwargs)
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    system.close(fd)
    return "ok"


def load(system, prog_type: int, items, maps=None, license: str = "GPL") -> Program:
    """``items`` (pybpf.asm) loaded on ``system`` as a ``prog_type`` program, its maps by
    name."""
    return Program.load(ProgramSpec(prog_type, items, license=license), system,
                        maps=maps or {})


def load_error(system, prog_type: int, items, license: str = "GPL") -> tuple[int, str]:
    """(errno, message) of loading ``items`` then ``r0 = 0; exit``; (0, "") where it loads."""
    try:
        load(system, prog_type, [*items, b.mov64(R0, 0), b.exit_()], license=license).close()
    except BPFError as exc:
        return exc.errno, str(exc)
    return 0, ""
