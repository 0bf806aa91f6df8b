"""Exceptions: OSError subclasses that keep the kernel's errno and say what went wrong.

Rules this module keeps:
- Every failure of a bpf(2)-shaped command is a ``BPFError`` (an ``OSError``) whose
  ``errno`` is exactly what the kernel returns for the same call, ENOTSUPP (524) included.
- Semantic subclasses can be caught by type: ``KeyNotFoundError`` (also a ``KeyError``, so
  ``m[k]`` behaves like a dict), ``KeyExistsError``, ``MapFullError``,
  ``NotSupportedError``, ``BPFPermissionError`` (also a ``PermissionError``).
- One function, ``bpf_error``, builds them, called at one boundary (``pybpf.system.System``),
  so the same failure reads the same whichever backend raised it.
- Backends raise the light ``KernelError(errno, detail)``; ``System`` turns it into a
  ``BPFError``, adding the command and the map.
"""

from __future__ import annotations

import errno as _errno
import os
from collections.abc import Callable

from .uapi import ENOTSUPP, MapType, ProgType, map_traits


class BPFError(OSError):
    """A bpf(2) command failed. ``errno`` is the kernel's; ``command`` names the command."""

    def __init__(self, err: int, message: str, *, command: str = "", map: str = "",
                 hint: str = "", count: int | None = None, detail: str = "") -> None:
        super().__init__(err, message)
        self.command = command
        self.map = map
        self.hint = hint
        # What exactly was wrong, where the backend could tell (e.g. which attribute).
        self.detail = detail
        # For batch commands: how many elements were processed before the error.
        self.count = count

    def __str__(self) -> str:
        return f"[Errno {self.errno}] {self.strerror}"

    def __reduce__(self):  # keep pickling (multiprocessing) working with keyword state
        return (_rebuild, (type(self), self.errno, self.strerror, self.command, self.map,
                           self.hint, self.count, self.detail))


def _rebuild(cls, err, message, command, map, hint, count, detail=""):
    return cls(err, message, command=command, map=map, hint=hint, count=count, detail=detail)


class KeyNotFoundError(BPFError, KeyError):
    """ENOENT from an element operation: the key is not in the map."""

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return BPFError.__str__(self)


class KeyExistsError(BPFError):
    """EEXIST: BPF_NOEXIST and the key is already there."""


class MapFullError(BPFError):
    """E2BIG on update: the map holds max_entries elements already."""


class NotSupportedError(BPFError):
    """ENOTSUPP (524) or EOPNOTSUPP: this map type does not do this command."""


class BPFPermissionError(BPFError, PermissionError):
    """EPERM / EACCES: not allowed (no privileges, read-only or frozen map)."""


class VerifierError(BPFError):
    """Program load rejected; ``log`` holds the verifier's log."""

    def __init__(self, err: int, message: str, *, log: str = "", **kw) -> None:
        super().__init__(err, message, **kw)
        self.log = log

    def __str__(self) -> str:
        text = BPFError.__str__(self)
        if self.log:
            text += "\nverifier log:\n" + self.log.rstrip()
        return text


class ProgramFault(BPFError):
    """The emulated backend stopped a running program: a memory access outside every region
    (EFAULT), a bad pointer given to a helper, or the run's instruction budget spent (ELOOP).
    The kernel's verifier rejects such programs at load; the emulator catches them as they run.
    ``pc`` is the faulting instruction's slot when known."""

    def __init__(self, err: int, message: str, *, pc: int | None = None, **kw) -> None:
        super().__init__(err, message, command=kw.pop("command", "prog_test_run"), **kw)
        self.pc = pc


class KernelError(Exception):
    """A backend's failure before the public boundary (``System``): the errno, a detail, and
    for batch commands ``count`` (elements done first), for program loads the verifier
    ``log`` (None when no verifier ran). ``System`` turns it into a ``BPFError`` naming the
    command and the object (a ``VerifierError`` when there is a log)."""

    __slots__ = ("errno", "detail", "count", "log")

    def __init__(self, err: int, detail: str = "", *, count: int | None = None,
                 log: str | None = None) -> None:
        self.errno = err
        self.detail = detail
        self.count = count
        self.log = log

    def __str__(self) -> str:
        return f"{errno_name(self.errno)}: {self.detail}"


def file_call(call: Callable[..., None], path: str, *args: int) -> None:
    """A file system call on ``path`` (unlink, mkdir, rmdir), an ``OSError`` from it the
    ``KernelError`` backends raise."""
    try:
        call(path, *args)
    except OSError as exc:
        raise KernelError(exc.errno, f"{path}: {exc.strerror}") from None


def errno_name(err: int) -> str:
    if err == ENOTSUPP:
        return "ENOTSUPP"
    return _errno.errorcode.get(err, f"errno {err}")


def strerror(err: int) -> str:
    if err == ENOTSUPP:
        return "Operation not supported by this map type"
    return os.strerror(err)


_ELEMENT_COMMANDS = {"map_lookup_elem", "map_update_elem", "map_delete_elem",
                     "map_get_next_key", "map_lookup_and_delete_elem",
                     "map_lookup_batch", "map_lookup_and_delete_batch",
                     "map_update_batch", "map_delete_batch"}

PERMISSION_HINT = ("run as root or with CAP_BPF (and CAP_NET_ADMIN / CAP_SYS_ADMIN for some "
                   "map types), or use the emulated backend: pybpf.system('emulated') or "
                   "PYBPF_BACKEND=emulated")


def _likely_cause(err: int, command: str, map_kind: str = "") -> tuple[type[BPFError], str]:
    """The exception class and a short hint for an errno from a command on a map of
    ``map_kind`` (a MapType name in lower case, or "")."""
    elem = command in _ELEMENT_COMMANDS
    kind = MapType.__members__.get(map_kind.upper())
    index_map = kind is not None and map_traits(kind).indexed
    if err == _errno.ENOENT:
        if command == "map_get_next_key":
            return KeyNotFoundError, "no next key: the iteration is at its end or the map is empty"
        if elem:
            return KeyNotFoundError, "key not found"
        return BPFError, "no such object"
    if err == _errno.EEXIST:
        return KeyExistsError, "key exists (BPF_NOEXIST was given)"
    if err == _errno.E2BIG:
        if command in ("map_update_elem", "map_update_batch") and index_map:
            return MapFullError, ("index out of range: this map's keys are 0 .. "
                                  "max_entries - 1")
        if command in ("map_update_elem", "map_update_batch"):
            return MapFullError, "map is full (max_entries reached); delete elements first"
        if command == "prog_load":
            return BPFError, ("the program has no instructions or more than the kernel allows "
                              "(1M, 4096 without CAP_BPF)")
        return BPFError, "an attribute is too big (sizes or max_entries over the kernel's limit)"
    if err in (ENOTSUPP, _errno.EOPNOTSUPP):
        return NotSupportedError, "this map type does not support the command"
    if err in (_errno.EPERM, _errno.EACCES):
        if elem or command == "map_freeze":
            return BPFPermissionError, ("the map is read-only, write-only or frozen for "
                                        "syscalls (or you lack privileges)")
        return BPFPermissionError, f"not permitted: {PERMISSION_HINT}"
    if err in (_errno.EBADF, _errno.EBADFD):
        return BPFError, "bad file descriptor: the fd is not open (was the map or program closed?)"
    if err == _errno.EINVAL and command in ("map_delete_elem", "map_delete_batch") \
            and map_kind in ("array", "percpu_array"):
        return BPFError, ("array elements cannot be deleted (they always exist): write a "
                          "zero value instead")
    if err == _errno.EINVAL and command == "map_update_elem" \
            and map_kind in ("array_of_maps", "hash_of_maps"):
        return BPFError, ("the value must be a map like the inner-map template (type, key and "
                          "value size, flags, max_entries unless BPF_F_INNER_MAP)")
    if err == _errno.EINVAL:
        return BPFError, "invalid argument: an attribute or flag is not accepted"
    if err == _errno.ENOMEM:
        return BPFError, "out of memory (or the LRU had no free node)"
    if err == _errno.ENOSPC:
        if command in ("map_update_elem", "map_update_batch"):
            # an LPM trie's full answer (trie_update_elem), where other maps give E2BIG
            return MapFullError, "map is full (max_entries reached); delete elements first"
        if command in ("map_lookup_batch", "map_lookup_and_delete_batch"):
            return BPFError, "no space: the batch buffer is too small for one bucket"
        if command == "map_lookup_elem" and map_kind in ("sockmap", "sockhash"):
            return BPFError, ("the value is too small for the socket's cookie: a lookup needs "
                              "value_size 8")
        return BPFError, "no space left"
    if err == _errno.EBUSY:
        return BPFError, "busy: already frozen, or the map is in use"
    return BPFError, ""


def map_description(map_type: int, name: str, map_id: int) -> str:
    """A map as errors name it (``map=`` below), e.g. ``hash map 'name' (id 7)``: the same
    text from both backends."""
    kind = MapType(map_type).name.lower() if map_type in MapType._value2member_map_ \
        else str(map_type)
    label = f" {name!r}" if name else ""
    return f"{kind} map{label} (id {map_id})"


def prog_description(prog_type: int, name: str, prog_id: int = 0) -> str:
    """A program as errors name it, e.g. ``xdp program 'count' (id 3)`` (no id before load)."""
    kind = ProgType(prog_type).name.lower() if prog_type in ProgType._value2member_map_ \
        else f"type {prog_type}"
    label = f" {name!r}" if name else ""
    return f"{kind} program{label}" + (f" (id {prog_id})" if prog_id else "")


def bpf_error(err: int, command: str, *, map: str = "", detail: str = "",
              count: int | None = None) -> BPFError:
    """Build the exception for ``err`` from ``command`` on ``map`` (a short description)."""
    cls, hint = _likely_cause(err, command, map.split(" ", 1)[0])
    parts = [command.replace("_", " ")]
    if map:
        parts.append(f"on {map}")
    text = " ".join(parts) + f": {strerror(err)} ({errno_name(err)})"
    if detail:
        text += f": {detail}"
    elif hint:
        text += f": {hint}"
    # EPERM from these is about the map or the path (frozen, read-only, not on bpffs), not
    # about privileges: the hint to run as root would mislead.
    not_privileges = command in _ELEMENT_COMMANDS or command in ("map_freeze", "obj_pin")
    if cls is BPFPermissionError and not not_privileges and PERMISSION_HINT not in text:
        text += f" ({PERMISSION_HINT})"
    return cls(err, text, command=command, map=map, hint=hint, count=count, detail=detail)
