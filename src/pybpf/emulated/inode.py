"""bpffs (kernel/bpf/inode.c): the pins of one emulated system, with the VFS's path rules.

Rules this module keeps:
- The emulated bpffs is mounted at /sys/fs/bpf and has no subdirectories: a pin is a name in
  it. Other directories are the host's (a pin there is EPERM: not bpffs).
- Paths resolve as the VFS resolves them: relative to the working directory; "." , ".." and
  repeated slashes as usual, each directory checked as it is walked (a missing one ENOENT, a
  pin or a file ENOTDIR); a component over NAME_MAX bytes, or a path of PATH_MAX bytes,
  ENAMETOOLONG.
- Pinning over anything that exists (a pin, a directory) is EEXIST; a new name with a
  trailing slash ENOENT. Getting a pin with a trailing slash is ENOTDIR, a directory or a
  file EACCES (not a BPF object), nothing ENOENT.
- Callers hold their own lock; this module keeps no references (the system counts them).
"""

from __future__ import annotations

import errno
import os
import posixpath

from ..errors import KernelError

BPFFS_ROOT = "/sys/fs/bpf"
NAME_MAX = 255
PATH_MAX = 4096
_ROOT_AND_ABOVE = frozenset({"/", "/sys", "/sys/fs", BPFFS_ROOT})


class BpfFs:
    """The pins of one emulated bpffs: path -> object (a map or a program)."""

    def __init__(self) -> None:
        self.pins: dict[str, object] = {}

    def _walk(self, path: str) -> tuple[str, str, bool]:
        """(directory, last component, trailing slash) of ``path``, its directories walked."""
        if len(os.fsencode(path)) >= PATH_MAX:
            raise KernelError(errno.ENAMETOOLONG, f"the path is {len(path)} bytes: PATH_MAX "
                              f"is {PATH_MAX}")
        if not path:
            raise KernelError(errno.ENOENT, "an empty path names nothing")
        names = [name for name in os.path.join(os.getcwd(), path).split("/") if name]
        for name in names:
            if len(os.fsencode(name)) > NAME_MAX:
                raise KernelError(errno.ENAMETOOLONG, f"{name[:20]!r}... is longer than "
                                  f"NAME_MAX ({NAME_MAX} bytes)")
        directory = "/"
        for name in names[:-1]:
            if name == "..":
                directory = posixpath.dirname(directory)
            elif name != ".":
                kind = self._kind(posixpath.join(directory, name))
                if kind != "dir":
                    raise KernelError(errno.ENOENT if kind is None else errno.ENOTDIR,
                                      f"{path!r}: {posixpath.join(directory, name)} is "
                                      + ("missing" if kind is None else "not a directory"))
                directory = posixpath.join(directory, name)
        return directory, names[-1] if names else ".", path.endswith("/")

    def _kind(self, path: str) -> str | None:
        """"dir", "pin", "file" or None (nothing there)."""
        if path in _ROOT_AND_ABOVE:
            return "dir"
        if posixpath.dirname(path) == BPFFS_ROOT:
            return "pin" if path in self.pins else None
        if os.path.isdir(path):
            return "dir"
        return "file" if os.path.lexists(path) else None

    def _target(self, path: str) -> tuple[str, str | None, bool]:
        """(the path the last component names, what is there, trailing slash)."""
        directory, last, trailing = self._walk(path)
        if last in (".", ".."):
            target = directory if last == "." else posixpath.dirname(directory)
        else:
            target = posixpath.join(directory, last)
        return target, self._kind(target), trailing

    def pin(self, path: str, obj: object) -> None:
        """bpf_obj_pin_user: ``obj`` at ``path`` (the caller takes its reference)."""
        target, kind, trailing = self._target(path)
        if kind is not None:
            raise KernelError(errno.EEXIST, f"{path} exists already")
        if trailing:
            raise KernelError(errno.ENOENT, f"{path!r}: a new pin has no trailing slash")
        if posixpath.dirname(target) != BPFFS_ROOT:
            raise KernelError(errno.EPERM, f"{path!r} is not on bpffs: the emulated bpffs is "
                              f"mounted at {BPFFS_ROOT} (and has no subdirectories)")
        self.pins[target] = obj

    def get(self, path: str) -> object:
        """bpf_obj_get_user: the object pinned at ``path``."""
        target, kind, trailing = self._target(path)
        if kind is None:
            raise KernelError(errno.ENOENT, f"nothing is pinned at {path}")
        if kind != "pin":
            raise KernelError(errno.EACCES, f"{path} is a {'directory' if kind == 'dir' else kind}"
                              ", not a pinned BPF object")
        if trailing:
            raise KernelError(errno.ENOTDIR, f"{path!r}: a pin is not a directory")
        return self.pins[target]

    def unpin(self, path: str) -> object:
        """unlink(2) of a pin: the object whose pin reference the caller drops."""
        self.get(path)
        target, _, _ = self._target(path)
        return self.pins.pop(target)
