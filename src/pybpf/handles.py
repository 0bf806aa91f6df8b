"""What every object that owns an fd (or another resource freed by ``close``) shares: it is a
context manager that closes it, and with an fd, ``closed`` once the fd is given back (-1)."""

from __future__ import annotations

from typing import Self


class Closable:
    """``with obj:`` closes ``obj`` at the end; ``close`` is the subclass's, idempotent."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FdHandle(Closable):
    """A Closable that owns ``fd``; ``close`` sets it to -1."""

    fd: int

    @property
    def closed(self) -> bool:
        return self.fd < 0
