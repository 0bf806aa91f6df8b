"""The conformance suite's shared fixtures: ``maps`` (on each backend in turn), ``kmaps``
and ``emaps`` (kernel and emulated, for differential tests), and the helpers the family
files share."""

from __future__ import annotations

import pytest

from helpers import err_of
from pybpf.asm import R0, assemble, encode, exit_, mov64

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


def load(m: Maps, prog_type: int, items, attach_type: int = 0) -> int:
    insns = encode(assemble(items).instructions)
    fd = m.sys.prog_load(prog_type, insns, expected_attach_type=attach_type)
    m.fds.append(fd)
    return fd


def returning(value: int):
    return [mov64(R0, value), exit_()]
