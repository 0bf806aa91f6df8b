"""pybpf: the Linux BPF map subsystem in Python.

Two backends behind one bpf(2)-shaped interface (``pybpf.system``): the real kernel through
ctypes, and an emulation of the map subsystem in user space. ``pybpf.ObjectSpec`` reads a
clang-built BPF object; ``spec.load(system)`` makes an ``Object`` of its maps and programs.
"""

from .backends import system
from .bpf_object import Object, ObjectSpec
from .errors import (
    BPFError,
    BPFPermissionError,
    KeyExistsError,
    KeyNotFoundError,
    MapFullError,
    NotSupportedError,
    VerifierError,
)
from .redirect_maps import CpuMap, CpuMapEntry, DevMap, DevMapEntry, DevMapHash
from .sock_maps import SockHash, SockMap
from .system import System
from .uapi import MapFlags, MapType

__all__ = [
    "BPFError",
    "BPFPermissionError",
    "CpuMap",
    "CpuMapEntry",
    "DevMap",
    "DevMapEntry",
    "DevMapHash",
    "KeyExistsError",
    "KeyNotFoundError",
    "MapFlags",
    "MapFullError",
    "MapType",
    "NotSupportedError",
    "Object",
    "ObjectSpec",
    "SockHash",
    "SockMap",
    "System",
    "VerifierError",
    "system",
]

__version__ = "0.1.0"
