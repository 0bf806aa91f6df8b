"""The memory model of the emulated engines: regions, pointers, and the state of one run.

Rules this module keeps:
- Memory is a set of bounds-checked regions (each frame's stack, the context, packet data,
  map values, map objects). A pointer is an ordinary 64-bit register value,
  ``region << 32 | offset``, so pointer arithmetic and comparisons (``data + 14 > data_end``)
  are plain integer arithmetic. NULL (0) and anything outside a region faults with
  ``ProgramFault`` (EFAULT) naming the instruction; the host never sees a bad access.
- A run stops with ``ProgramFault`` (ELOOP) after ``budget`` instructions (the kernel's
  verifier proves termination; the emulator bounds it instead).
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import ProgramFault
from ..maps.bpf_map import BpfMap

if TYPE_CHECKING:
    from ..machine.machine import Machine

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1
SIGN64 = 1 << 63
SIGN32 = 1 << 31
OFF_MASK = M32  # low half of a pointer: the offset in its region

DEFAULT_BUDGET = 1_000_000  # instructions per run before ProgramFault(ELOOP)
# include/linux/bpf.h BPF_MAX_LOOPS: may_goto's budget per frame, bpf_loop's largest count
BPF_MAX_LOOPS = 8 * 1024 * 1024

# Region numbers (the high 32 bits of a pointer). Static regions (map objects, global data)
# take numbers from one process-wide counter (executable.py), so programs that tail-call each
# other never collide; regions made during a run (stack frames, looked-up values) count from
# the top half.
DYNAMIC_REGION_BASE = 1 << 31
CTX_REGION = 0x10
PACKET_REGION = 0x11
SOCK_REGION = 0x12  # a test run's skb->sk: a socket not modelled (no memory: loads fault)


# What a fast-path load or store raises when the address is not plain, in-bounds memory.
ACCESS_ERRORS = (KeyError, struct.error, TypeError)


# -- memory --------------------------------------------------------------------------------------
class CtxRegion:
    """A program context whose fields are not plain memory (``__sk_buff``, ``xdp_md``).

    ``buf`` holds the UAPI struct; ``pointers`` maps field offsets to the pointer values a
    4-byte load there yields (the verifier's ``convert_ctx_access`` turns ``ctx->data`` into a
    pointer load); ``writable`` lists the (offset, size) ranges a program may store to.
    """

    __slots__ = ("buf", "pointers", "writable", "name")

    def __init__(self, name: str, buf: bytearray, pointers: dict[int, int] | None = None,
                 writable: tuple[tuple[int, int], ...] = ()) -> None:
        self.name = name
        self.buf = buf
        self.pointers = pointers or {}
        self.writable = writable

    def load(self, off: int, size: int, pc: int) -> int:
        if off in self.pointers:
            if size != 4:
                raise ProgramFault(errno.EFAULT, f"insn {pc}: {self.name}: the pointer field at "
                                   f"offset {off} must be read with a 4-byte load", pc=pc)
            return self.pointers[off]
        if off + size > len(self.buf):
            raise ProgramFault(errno.EFAULT, f"insn {pc}: invalid bpf_context access off={off} "
                               f"size={size} ({self.name} is {len(self.buf)} bytes)", pc=pc)
        return int.from_bytes(self.buf[off:off + size], "little")

    def store(self, off: int, size: int, value: int, pc: int) -> None:
        if not any(start <= off and off + size <= start + length
                   for start, length in self.writable):
            raise ProgramFault(errno.EFAULT, f"insn {pc}: invalid bpf_context access off={off} "
                               f"size={size}: this {self.name} field is read-only", pc=pc)
        self.buf[off:off + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def _describe(addr: int) -> str:
    if addr == 0:
        return "NULL pointer"
    return f"address {addr:#x} (region {addr >> 32:#x}, offset {addr & OFF_MASK})"


def mem_load(rs: RunState, addr: int, size: int, pc: int) -> int:
    """Load ``size`` bytes at ``addr`` (little-endian, zero-extended): the checked slow path."""
    region = rs.mem.get(addr >> 32) if addr >= 0 else None
    off = addr & OFF_MASK
    if region is None:
        raise ProgramFault(errno.EFAULT, f"insn {pc}: invalid memory access: {size}-byte load "
                           f"from {_describe(addr)}, which points into no memory", pc=pc)
    if type(region) is CtxRegion:
        return region.load(off, size, pc)
    if isinstance(region, BpfMap):  # a field of its struct bpf_map, which the verifier let by
        return region.struct_bpf_map_load(off, size)
    if not isinstance(region, (bytes, bytearray, memoryview)):
        raise ProgramFault(errno.EFAULT, f"insn {pc}: invalid memory access: {size}-byte load "
                           f"through a map pointer ({_describe(addr)})", pc=pc)
    if off + size > len(region):
        raise ProgramFault(errno.EFAULT, f"insn {pc}: invalid memory access: {size}-byte load "
                           f"at offset {off} of a {len(region)}-byte region", pc=pc)
    return int.from_bytes(region[off:off + size], "little")


def _writable(region: Any) -> bool:
    """Plain memory a program may store to (bytes and read-only views are read-only)."""
    return type(region) is bytearray or (type(region) is memoryview and not region.readonly)


def mem_store(rs: RunState, addr: int, size: int, value: int, pc: int) -> None:
    """Store the low ``size`` bytes of ``value`` at ``addr``: the checked slow path."""
    region = rs.mem.get(addr >> 32) if addr >= 0 else None
    off = addr & OFF_MASK
    if region is None:
        raise ProgramFault(errno.EFAULT, f"insn {pc}: invalid memory access: {size}-byte store "
                           f"to {_describe(addr)}, which points into no memory", pc=pc)
    if type(region) is CtxRegion:
        region.store(off, size, value, pc)
        return
    if not _writable(region):
        what = "read-only memory" if isinstance(region, (bytes, memoryview)) else "a map pointer"
        raise ProgramFault(errno.EFAULT, f"insn {pc}: invalid memory access: {size}-byte store "
                           f"into {what} ({_describe(addr)})", pc=pc)
    if off + size > len(region):
        raise ProgramFault(errno.EFAULT, f"insn {pc}: invalid memory access: {size}-byte store "
                           f"at offset {off} of a {len(region)}-byte region", pc=pc)
    region[off:off + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def mem_read(rs: RunState, addr: int, size: int, what: str) -> bytes:
    """``size`` bytes at ``addr`` for a helper argument (a key, a value)."""
    region = rs.mem.get(addr >> 32) if addr >= 0 else None
    off = addr & OFF_MASK
    if not isinstance(region, (bytes, bytearray, memoryview)) or off + size > len(region):
        raise ProgramFault(errno.EFAULT, f"helper argument {what}: {size} bytes at "
                           f"{_describe(addr)} are not readable memory")
    return bytes(region[off:off + size])


def mem_write(rs: RunState, addr: int, data: bytes, what: str) -> None:
    """Write ``data`` at ``addr`` for a helper (a popped value into the program's buffer)."""
    region = rs.mem.get(addr >> 32) if addr >= 0 else None
    off = addr & OFF_MASK
    if not _writable(region) or off + len(data) > len(region):
        raise ProgramFault(errno.EFAULT, f"helper argument {what}: {len(data)} bytes at "
                           f"{_describe(addr)} are not writable memory")
    region[off:off + len(data)] = data


# Exact map classes seen so far (a fast type check for the hot helpers); filled lazily.
MAP_CLASSES: set[type] = set()


def bpf_map_of(rs: RunState, ptr: int, helper: str) -> BpfMap:
    """The map a map-pointer argument points to (a region holding the map object)."""
    obj = rs.mem.get(ptr >> 32) if ptr >= 0 else None
    if not isinstance(obj, BpfMap) or ptr & OFF_MASK:
        raise ProgramFault(errno.EFAULT, f"{helper}: R1 is not a map pointer ({ptr:#x})")
    MAP_CLASSES.add(type(obj))
    return obj


@dataclass(eq=False, slots=True)
class BpfDynptr:
    """struct bpf_dynptr_kern of a LOCAL dynptr: ``size`` bytes of ``data`` from ``offset``.
    A program holds only a pointer to it (a region of its own), which the verifier lets it
    pass to the dynptr helpers and nothing else."""

    data: bytearray
    offset: int
    size: int


# -- the state of one run ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RunEnv:
    """What a program run sees of the world beyond its own memory: the machine it runs on
    (its current CPU, clocks and charging; None: a bare run that charges nothing), its
    instruction budget, and the engine ("jit" or "interp"). The engine never sees a System."""

    machine: Machine | None = None
    insn_budget: int = DEFAULT_BUDGET
    engine: str = "jit"


class RunState:
    """One program run: its regions, instruction count and budget, tail calls, environment.

    What the helpers see of the world: ``machine`` (from the run's ``RunEnv``), the packet for
    LD_ABS, the redirect a helper recorded, and for a program a psock runs the psock of the
    skb's socket (what kfuncs find as ``sk_psock(skb->sk)``). ``entry_of(exe, start)`` gives
    the function running a subprogram on this run's engine (tail calls, callbacks); it is set
    by ``core.run_prog``.
    """

    __slots__ = ("env", "mem", "next_region", "value_regions", "count", "budget", "tail_calls",
                 "machine", "packet", "headers", "redirect", "entry_of", "trace", "retval",
                 "psock", "xdp_frags_size", "skb", "cpu")

    def __init__(self, env: RunEnv = RunEnv(),
                 packet: bytes | bytearray | memoryview = b"") -> None:
        self.env = env
        self.mem: dict[int, Any] = {}
        self.next_region = DYNAMIC_REGION_BASE
        self.value_regions: dict[int, int] = {}  # id(buffer) -> its pointer, for map values
        self.count = 0
        self.budget = env.insn_budget
        self.tail_calls = 0
        self.machine = env.machine  # every helper reads it: kept at hand
        self.packet = packet
        # (frame, MAC header offset, network header offset) of an skb whose headers the
        # run knows, for LD_ABS's negative offsets (SKF_LL_OFF, SKF_NET_OFF); None: unknown
        self.headers: tuple[Any, int, int] | None = None
        self.redirect: Any = None
        self.entry_of: Callable[[Any, int], Callable] | None = None
        self.trace: list[bytes] = []
        self.retval = 0  # R0 at exit, set by whoever runs the program
        self.psock: Any = None  # the SkPsock running the program (None: run outside one)
        self.xdp_frags_size = 0  # an XDP run's bytes in frags (skb_shared_info.xdp_frags_size)
        # the sk_buff of an skb program's run (filter.py's Skb: its buffer, headers, checksum),
        # which the helpers that change the packet change; None where the run has none
        self.skb: Any = None
        # the CPU the run is on, read once by core.run_prog (a program stays on the CPU it
        # began on: the kernel runs it with migration disabled); None before it begins
        self.cpu: int | None = None

    def region_of(self, buf: Any) -> int:
        """The pointer to the start of ``buf`` (a map value), giving it a region once."""
        key = id(buf)
        pointer = self.value_regions.get(key)
        if pointer is None:
            region = self.next_region
            self.next_region = region + 1
            self.mem[region] = buf  # also keeps buf alive, so its id stays unique
            pointer = self.value_regions[key] = region << 32
        return pointer

    def add_region(self, buf: Any) -> int:
        region = self.next_region
        self.next_region = region + 1
        self.mem[region] = buf
        return region << 32

    def over_budget(self, pc: int) -> ProgramFault:
        return ProgramFault(errno.ELOOP, f"insn {pc}: the program ran {self.count} instructions, "
                            f"over the budget of {self.budget} per run (an endless loop?)", pc=pc)

