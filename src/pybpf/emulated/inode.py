"""bpffs (kernel/bpf/inode.c): the pins and directories of one emulated system, with the VFS's
path rules.

Rules this module keeps:
- The emulated bpffs is mounted at /sys/fs/bpf: its pins and directories are this module's;
  other directories are the host's (a pin there is EPERM: not bpffs; a directory made or
  removed there is the host's, as on the kernel backend).
- Paths resolve as the VFS resolves them: relative to the working directory; "." , ".." and
  repeated slashes as usual, each directory checked as it is walked (a missing one ENOENT, a
  pin or a file ENOTDIR); a component over NAME_MAX bytes, or a path of PATH_MAX bytes,
  ENAMETOOLONG.
- Pinning over anything that exists (a pin, a directory) is EEXIST; a new name with a
  trailing slash ENOENT. Getting a pin with a trailing slash is ENOTDIR, a directory or a
  file EACCES (not a BPF object), nothing ENOENT.
- mkdir, rmdir and unlink answer as do_mkdirat, do_rmdir and do_unlinkat: mkdir of "." or
  ".." or of anything that exists EEXIST (a trailing slash is allowed); rmdir of "." EINVAL,
  of ".." ENOTEMPTY, of a mount point (/sys/fs/bpf, "/") EBUSY, of a pin ENOTDIR, of a
  directory that holds anything ENOTEMPTY; unlink of a directory (or "." or "..") EISDIR, of
  a pin with a trailing slash ENOTDIR.
- Callers hold their own lock; this module keeps no references (the system counts them).
"""

from __future__ import annotations

import errno
import os
import posixpath

from ..errors import KernelError, file_call

BPFFS_ROOT = "/sys/fs/bpf"
NAME_MAX = 255
PATH_MAX = 4096
_ROOT_AND_ABOVE = frozenset({"/", "/sys", "/sys/fs", BPFFS_ROOT})


class BpfFs:
    """The pins (path -> object, a map or a program) and directories of one emulated bpffs."""

    def __init__(self) -> None:
        self.pins: dict[str, object] = {}
        self.dirs: set[str] = set()  # below BPFFS_ROOT

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
        return directory, names[-1] if names else "/", path.endswith("/")

    def _on_bpffs(self, path: str) -> bool:
        return path.startswith(BPFFS_ROOT + "/")

    def _kind(self, path: str) -> str | None:
        """"dir", "pin", "file" or None (nothing there)."""
        if path in _ROOT_AND_ABOVE or path in self.dirs:
            return "dir"
        if self._on_bpffs(path):
            return "pin" if path in self.pins else None
        if os.path.isdir(path):
            return "dir"
        return "file" if os.path.lexists(path) else None

    def _target(self, path: str) -> tuple[str, str, str | None, bool]:
        """(the path the last component names, that component, what is there, trailing
        slash)."""
        directory, last, trailing = self._walk(path)
        if last in (".", ".."):
            target = directory if last == "." else posixpath.dirname(directory)
        else:
            target = posixpath.join(directory, last)
        return target, last, self._kind(target), trailing

    def _is_bpffs_dir(self, path: str) -> bool:
        return path == BPFFS_ROOT or path in self.dirs

    def new_pin(self, path: str) -> str:
        """bpf_obj_pin_user's checks of ``path``: where a new pin there goes."""
        target, _, kind, trailing = self._target(path)
        if kind is not None:
            raise KernelError(errno.EEXIST, f"{path} exists already")
        if trailing:
            raise KernelError(errno.ENOENT, f"{path!r}: a new pin has no trailing slash")
        if not self._is_bpffs_dir(posixpath.dirname(target)):
            raise KernelError(errno.EPERM, f"{path!r} is not on bpffs: the emulated bpffs is "
                              f"mounted at {BPFFS_ROOT}")
        return target

    def pin(self, path: str, obj: object) -> None:
        """bpf_obj_pin_user: ``obj`` at ``path`` (the caller takes its reference)."""
        self.pins[self.new_pin(path)] = obj

    def get(self, path: str) -> object:
        """bpf_obj_get_user: the object pinned at ``path``."""
        target, _, kind, trailing = self._target(path)
        if kind is None:
            raise KernelError(errno.ENOENT, f"nothing is pinned at {path}")
        if kind != "pin":
            raise KernelError(errno.EACCES, f"{path} is a {'directory' if kind == 'dir' else kind}"
                              ", not a pinned BPF object")
        if trailing:
            raise KernelError(errno.ENOTDIR, f"{path!r}: a pin is not a directory")
        return self.pins[target]

    def unlink(self, path: str) -> object:
        """do_unlinkat of a pin: the object whose pin reference the caller drops."""
        target, last, kind, trailing = self._target(path)
        if last in (".", "..", "/") or kind == "dir":
            raise KernelError(errno.EISDIR, f"{path} is a directory: rmdir removes it")
        if kind is None:
            raise KernelError(errno.ENOENT, f"nothing is pinned at {path}")
        if trailing:
            raise KernelError(errno.ENOTDIR, f"{path!r}: a pin is not a directory")
        if kind != "pin":
            raise KernelError(errno.EPERM, f"{path} is not on the emulated bpffs: it unlinks "
                              f"only what is pinned under {BPFFS_ROOT}")
        return self.pins.pop(target)

    def mkdir(self, path: str, mode: int) -> None:
        """do_mkdirat: a directory at ``path``; one outside bpffs is made on the host with
        ``mode`` (the emulated bpffs keeps no modes: it checks no permissions)."""
        target, last, kind, _ = self._target(path)
        if last in (".", "..", "/") or kind is not None:
            raise KernelError(errno.EEXIST, f"{path} exists already")
        if not self._is_bpffs_dir(posixpath.dirname(target)):
            file_call(os.mkdir, target, mode)
            return
        self.dirs.add(target)

    def rmdir(self, path: str) -> None:
        """do_rmdir: the empty directory at ``path``; one outside bpffs is the host's."""
        target, last, kind, _ = self._target(path)
        if last == ".":  # do_rmdir: LAST_DOT, LAST_DOTDOT and LAST_ROOT before the lookup
            raise KernelError(errno.EINVAL, f"{path!r}: rmdir of '.' (name the directory)")
        if last == "..":
            raise KernelError(errno.ENOTEMPTY, f"{path!r}: rmdir of '..' (its parent holds "
                              "this directory)")
        if last == "/":
            raise KernelError(errno.EBUSY, "/ is a mount point")
        if kind is None:
            raise KernelError(errno.ENOENT, f"{path}: no such directory")
        if kind != "dir":
            raise KernelError(errno.ENOTDIR, f"{path} is not a directory")
        if target in _ROOT_AND_ABOVE:
            raise KernelError(errno.EBUSY, f"{path} is a mount point")
        if target not in self.dirs:
            file_call(os.rmdir, target)
            return
        inside = target + "/"
        if any(p.startswith(inside) for p in self.pins) or \
                any(d.startswith(inside) for d in self.dirs):
            raise KernelError(errno.ENOTEMPTY, f"{path} is not empty")
        self.dirs.discard(target)

