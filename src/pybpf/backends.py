"""Choosing a backend: ``system()``, the default, and what only both backends together know.

This module stands above ``kernel/`` and ``emulated/`` (which never import each other): it
builds either, and lends the kernel backend the emulated one's words when the kernel refuses a
map without saying why (``explain_create_refusal``).

``system()`` picks a backend: ``PYBPF_BACKEND`` (kernel|emulated) if set, else the kernel when
bpf(2) is allowed here, else the emulated one.
"""

from __future__ import annotations

import errno
import os

from .attrs import MapAttr
from .errors import BPFError
from .system import System
from .uapi import ENOTSUPP

BACKENDS = ("kernel", "emulated")


def bpf_allowed() -> bool:
    """True when bpf(2) works here (a tiny array map can be created)."""
    from .kernel.syscall import probe_bpf

    return probe_bpf()


def default_backend() -> str:
    """``PYBPF_BACKEND`` if set, else "kernel" when bpf(2) is allowed here, else "emulated"."""
    return os.environ.get("PYBPF_BACKEND") or ("kernel" if bpf_allowed() else "emulated")


def system(backend: str | None = None, **kwargs) -> System:
    """A System: ``"kernel"``, ``"emulated"`` (kwargs: cpus=, nodes=), or None for the default.

    The default is ``PYBPF_BACKEND`` if set, else the kernel when bpf(2) is allowed, else the
    emulated backend.
    """
    if backend is None:
        backend = default_backend()
    if backend == "kernel":
        if kwargs:
            raise TypeError(f"the kernel backend takes no options, got {sorted(kwargs)}")
        from .kernel.system import KernelSystem

        kernel = KernelSystem()
        kernel.explain_create_refusal = explain_create_refusal
        return kernel
    if backend == "emulated":
        from .emulated.system import EmulatedSystem

        return EmulatedSystem(**kwargs)
    raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")


_default_system: System | None = None


def default_system() -> System:
    """``pybpf.system()`` made once and shared by every Map that is given no system."""
    global _default_system
    if _default_system is None:
        _default_system = system()
    return _default_system


def resolve_system(system: System | None) -> System:
    """``system``, or the shared default for None; anything else is a TypeError."""
    if system is None:
        return default_system()
    if not isinstance(system, System):
        raise TypeError(f"system must be a System, e.g. pybpf.system({system!r}) or "
                        f"pybpf.system('emulated'), got {type(system).__name__}"
                        if isinstance(system, str) else
                        f"system must be a System (pybpf.system(...)), got "
                        f"{type(system).__name__}")
    return system


def explain_create_refusal(err: int, attr: MapAttr) -> str:
    """Which attribute the kernel refused a map for: the emulated backend runs map_create's
    checks in the kernel's order, so when it refuses with the same errno, its detail names the
    attribute. "" when it cannot tell (another errno, an inner map it cannot see, or it would
    create the map)."""
    if err not in (errno.EINVAL, errno.E2BIG, ENOTSUPP) or attr.inner_map_fd or attr.btf_fd:
        return ""  # EPERM/ENOMEM are not about attributes; inner maps and BTF live in the kernel
    from .emulated.system import EmulatedSystem

    emulated = EmulatedSystem()  # this host's CPUs and NUMA nodes
    try:
        emulated.close(emulated.map_create(**attr.create_args()))
    except BPFError as exc:
        return exc.detail if exc.errno == err else ""
    return ""
