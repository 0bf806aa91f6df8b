"""Errors of reading and linking a BPF object file.

Every problem with an object file is an ``ObjectError`` (a ``ValueError``) whose message
names where it is (the ELF section, the program, the map, the relocation) and why, as
libbpf's warnings do. Subclasses say what kind of problem it is, so callers can tell a
malformed file from a feature pybpf does not support.
"""

from __future__ import annotations


class ObjectError(ValueError):
    """The object file cannot be used as it is: the message says where and why."""


class ElfError(ObjectError):
    """The ELF container is malformed (truncated, offsets out of range, bad tables)."""


class RelocationError(ObjectError):
    """A relocation cannot be applied: wrong target, unknown symbol, bad instruction."""


class UnsupportedError(ObjectError):
    """The object uses a feature pybpf does not support (kfunc calls, arena, struct_ops...)."""


class CoreRelocationError(RelocationError):
    """A CO-RE relocation cannot be resolved against the target BTF (the message names the
    program, the relocation number and its access, as libbpf prints it)."""
