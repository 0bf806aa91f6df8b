"""Typed maps for XDP redirects: ``CpuMap``, ``DevMap``, ``DevMapHash``.

Rules this module keeps:
- Keys are u32 ints: a CPU number (CpuMap), an index (DevMap), any u32 (DevMapHash, usually
  an ifindex).
- A value is written as ``struct bpf_cpumap_val {u32 qsize; s32 prog fd}`` or
  ``struct bpf_devmap_val {u32 ifindex; s32 prog fd}`` and read back with the program's id in
  place of the fd, as the kernel does; both are named tuples here
  (``CpuMapEntry(qsize, prog)``, ``DevMapEntry(ifindex, prog)``), where ``prog`` is a
  ``Program``, an fd or None on the way in and the program's id (0: none) on the way out.
  ``value_size=4`` maps carry no program.
- An entry's program must be an XDP program loaded with expected_attach_type BPF_XDP_CPUMAP
  or BPF_XDP_DEVMAP; the map holds it (the kernel answers a wrong one with ENOMEM for a
  cpumap, EINVAL for a devmap).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from .codecs import Codec
from .maps import _TypedMap
from .system import System
from .uapi import MapType


class CpuMapEntry(NamedTuple):
    """A CPUMAP value: the entry's ring size and its program (fd in, id out)."""

    qsize: int
    prog: Any = None


class DevMapEntry(NamedTuple):
    """A DEVMAP / DEVMAP_HASH value: the device and its program (fd in, id out)."""

    ifindex: int
    prog: Any = None


class _RedirectValueCodec(Codec):
    """``(u32, program)`` <-> bytes: a fd on the way in, an id on the way out."""

    def __init__(self, entry: type, size: int) -> None:
        self.entry = entry
        self.size = size

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, int) and not isinstance(obj, bool):
            obj = self.entry(obj)
        if not isinstance(obj, tuple) or not 1 <= len(obj) <= 2:
            raise TypeError(f"a {self.entry.__name__} (or a plain int) is expected, got "
                            f"{obj!r}")
        obj = self.entry(*obj)
        first, prog = obj
        fd = 0 if prog is None else getattr(prog, "fd", prog)
        if not isinstance(fd, int) or isinstance(fd, bool):
            raise TypeError(f"{self.entry.__name__}.prog must be a Program, an fd or None, "
                            f"got {prog!r}")
        if self.size == 4:
            if fd:
                raise ValueError("this map's values are 4 bytes: they hold no program "
                                 "(create it with value_size=8)")
            return struct.pack("<I", first)
        return struct.pack("<Ii", first, fd)

    def decode(self, data: bytes) -> Any:
        if self.size == 4:
            return self.entry(struct.unpack("<I", data)[0], 0)
        return self.entry(*struct.unpack("<II", data))

    def describe(self) -> str:
        return self.entry.__name__


class _RedirectMap(_TypedMap):
    fixed_key_size = 4
    entry: type = CpuMapEntry

    def __init__(self, max_entries: int, *, value_size: int = 8, flags: int = 0,
                 name: str = "", numa_node: int | str | None = None,
                 system: System | None = None) -> None:
        if value_size not in (4, 8):
            raise ValueError(f"value_size {value_size}: 4 (no program) or 8")
        super().__init__(max_entries, int, _RedirectValueCodec(self.entry, value_size),
                         flags=flags, name=name, numa_node=numa_node, system=system)


class CpuMap(_RedirectMap):
    """CPUMAP: ``m[cpu] = CpuMapEntry(qsize, prog)`` starts a kthread for ``cpu`` with a ring
    of ``qsize`` frames (and a program run there); ``m[cpu] = 0`` or ``del m[cpu]`` stops
    it. Programs redirect with ``bpf_redirect_map(m, cpu, flags)``."""

    map_type = MapType.CPUMAP
    entry = CpuMapEntry


class DevMap(_RedirectMap):
    """DEVMAP: ``m[i] = DevMapEntry(ifindex, prog)``; a redirect to ``i`` sends out of the
    device (``prog``, a BPF_XDP_DEVMAP program, runs first)."""

    map_type = MapType.DEVMAP
    entry = DevMapEntry


class DevMapHash(_RedirectMap):
    """DEVMAP_HASH: DevMap with any u32 key (usually the ifindex itself)."""

    map_type = MapType.DEVMAP_HASH
    entry = DevMapEntry
