"""The eBPF execution engines of the emulated backend: a reference interpreter and a JIT to Python.

Rules this module keeps:
- Semantics are the kernel's (kernel/bpf/core.c ``___bpf_prog_run`` after the verifier's
  rewrites): registers are unsigned 64-bit; 32-bit ALU results are zero-extended; unsigned
  division by zero gives 0 and modulo by zero leaves dst (32-bit: zero-extended); signed
  division (off=1) truncates toward zero and INT_MIN / -1 wraps to INT_MIN (INT_MIN % -1 = 0);
  shift amounts are masked (& 63 / & 31); bpf-to-bpf calls get their own 512-byte stack and
  keep R6-R9; tail calls replace the running frame, at most 33 per run.
- Memory is a set of bounds-checked regions (each frame's stack, the context, packet data,
  map values, map objects). A pointer is an ordinary 64-bit register value,
  ``region << 32 | offset``, so pointer arithmetic and comparisons (``data + 14 > data_end``)
  are plain integer arithmetic. NULL (0) and anything outside a region faults with
  ``ProgramFault`` (EFAULT) naming the instruction; the host never sees a bad access.
- A run stops with ``ProgramFault`` (ELOOP) after ``budget`` instructions (the kernel's
  verifier proves termination; the emulator bounds it instead).
- ``Interpreter`` is the reference: one instruction at a time, dispatched on the opcode
  table's ``Kind``. ``jit_compile`` translates a program once into Python source (registers as
  locals, masks inlined, loops as ``while`` loops, helpers as direct calls), compiles it and
  caches it on the ``Executable``; both must agree (tests compare them).
"""

from __future__ import annotations

import errno
import itertools
import re
import struct
import threading
from collections.abc import Callable
from typing import Any

from ..asm.opcodes import (
    ATOMIC_FETCH,
    OPCODES,
    AluOp,
    AtomicOp,
    Class,
    Instruction,
    JmpOp,
    Kind,
    Source,
)
from ..errors import ProgramFault
from ..uapi import BPF_PSEUDO_CALL, MAX_BPF_STACK, BpfFunc

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1
SIGN64 = 1 << 63
SIGN32 = 1 << 31
OFF_MASK = M32  # low half of a pointer: the offset in its region

DEFAULT_BUDGET = 1_000_000  # instructions per run before ProgramFault(ELOOP)
MAX_TAIL_CALL_CNT = 33
BPF_MAX_LOOPS = 8 * 1024 * 1024  # may_goto's budget per frame
MAX_CALL_FRAMES = 8

# Region numbers (the high 32 bits of a pointer). Static regions (map objects, global data)
# take numbers from one process-wide counter, so programs that tail-call each other never
# collide; regions made during a run (stack frames, looked-up values) count from the top half.
_static_regions = itertools.count(0x100)
DYNAMIC_REGION_BASE = 1 << 31
CTX_REGION = 0x10
PACKET_REGION = 0x11

_LOAD = {1: struct.Struct("<B"), 2: struct.Struct("<H"), 4: struct.Struct("<I"),
         8: struct.Struct("<Q")}


class _BytesAt(dict):
    """size -> ``unpack_from`` of that many bytes: ``BYTES_AT[size](mem, off)[0]`` copies a
    key or value out of program memory in one C call (a slice then ``bytes`` costs ~3x)."""

    def __missing__(self, size: int) -> Callable:
        unpack = self[size] = struct.Struct(f"{size}s").unpack_from
        return unpack


BYTES_AT = _BytesAt()

# What a fast-path load or store raises when the address is not plain, in-bounds memory.
ACCESS_ERRORS = (KeyError, struct.error, TypeError)


class RunAbort(Exception):  # noqa: N818 (control flow, not an error)
    """A legacy packet load (LD_ABS/LD_IND) fell outside the packet: the program returns 0."""


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


# -- the state of one run ------------------------------------------------------------------------
class RunState:
    """One program run: its regions, instruction count and budget, tail calls, environment.

    ``env`` is what the helpers see of the world: ``system`` (the EmulatedSystem, for the
    machine and the fd-less objects), the packet for LD_ABS, the redirect a helper recorded.
    """

    __slots__ = ("mem", "next_region", "value_regions", "count", "budget", "tail_calls",
                 "system", "packet", "redirect", "engine", "trace", "retval")

    def __init__(self, system: Any = None, budget: int = DEFAULT_BUDGET,
                 packet: bytes | bytearray | memoryview = b"") -> None:
        self.mem: dict[int, Any] = {}
        self.next_region = DYNAMIC_REGION_BASE
        self.value_regions: dict[int, int] = {}  # id(buffer) -> its pointer, for map values
        self.count = 0
        self.budget = budget
        self.tail_calls = 0
        self.system = system
        self.packet = packet
        self.redirect: Any = None
        self.engine = "jit"  # the engine of this run: callbacks and tail calls use it too
        self.trace: list[bytes] = []
        self.retval = 0  # R0 at exit, set by whoever runs the program

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


# -- a loaded program in executable form ---------------------------------------------------------
class Executable:
    """Instructions by slot, subprogram starts, resolved lddw immediates, static regions.

    ``ld_imm`` maps the slot of every lddw to the value it loads: the plain immediate, or a
    pointer to a map object (BPF_PSEUDO_MAP_FD) or into a map value (BPF_PSEUDO_MAP_VALUE).
    ``helpers`` maps helper ids to callables ``f(rs, r1, r2, r3, r4, r5) -> r0``.
    """

    def __init__(self, insns: list[Instruction], helpers: dict[int, Callable],
                 pseudo: dict[int, tuple] | None = None, owner: Any = None) -> None:
        self.insns = insns
        self.slots: list[Instruction | None] = []
        for insn in insns:
            self.slots.append(insn)
            if insn.opcode == 0x18:
                self.slots.append(None)
        self.helpers = helpers
        self.owner = owner  # the BpfProg, for tail calls and diagnostics
        self.static_regions: dict[int, Any] = {}
        self.ld_imm: dict[int, int] = {}
        starts = {0}
        regions_of: dict[int, int] = {}
        for pc, insn in enumerate(self.slots):
            if insn is not None and _is_local_call(insn):
                starts.add(pc + insn.imm + 1)
            if insn is None or insn.opcode != 0x18:
                continue
            ref = (pseudo or {}).get(pc)
            if ref is None:
                self.ld_imm[pc] = insn.imm & M64
                continue
            kind, obj, off = ref
            region = regions_of.get(id(obj))
            if region is None:
                region = next(_static_regions)
                regions_of[id(obj)] = region
                self.static_regions[region] = obj
            self.ld_imm[pc] = (region << 32) | off if kind == "map_value" else region << 32
        self.subprogs = sorted(starts)
        self._entries: dict[tuple[str, int], Callable] = {}
        self._jit_functions: dict[str, Callable] | None = None
        self._interpreter: Interpreter | None = None

    def entry(self, engine: str, start: int = 0) -> Callable:
        """The function ``f(rs, r1, r2, r3, r4, r5) -> r0`` that runs the subprogram at
        ``start`` on ``engine`` ("jit" or "interp"); the JIT translates the whole program the
        first time it is asked, then every entry is cached."""
        key = (engine, start)
        found = self._entries.get(key)
        if found is not None:
            return found
        if engine == "jit" and len(self.slots) <= JIT_MAX_SLOTS:
            if self._jit_functions is None:
                self._jit_functions = jit_compile(self)
            found = self._jit_functions[f"F{start}"]
        elif engine in ("jit", "interp"):
            if self._interpreter is None:
                self._interpreter = Interpreter(self)
            found = self._interpreter.entry_of(start)
        else:
            raise ValueError(f"unknown engine {engine!r}: choose 'jit' or 'interp'")
        self._entries[key] = found
        return found

    def prepare(self, engine: str) -> Callable:
        """Make (and cache) the entry of ``engine`` now rather than at the first run."""
        return self.entry(engine)

    def subprog_end(self, start: int) -> int:
        later = [s for s in self.subprogs if s > start]
        return later[0] if later else len(self.slots)


def _is_local_call(insn: Instruction) -> bool:
    return insn.opcode == (Class.JMP | JmpOp.CALL) and insn.src == BPF_PSEUDO_CALL


def run(exe: Executable, rs: RunState, ctx: int, engine: str = "jit") -> int:
    """Run ``exe`` with R1 = ``ctx``; returns R0 (64 bits). ``engine``: "jit" or "interp"."""
    rs.engine = engine
    rs.mem.update(exe.static_regions)
    try:
        return exe.entry(engine)(rs, ctx, 0, 0, 0, 0)
    except RunAbort:
        return 0
    except RecursionError:
        raise ProgramFault(errno.EFAULT, "the call stack is too deep") from None


# -- shared semantics (both engines call these for the rare, wide operations) --------------------
def sdiv(dst: int, src: int, bits: int) -> int:
    """Signed division truncating toward zero; by 0 gives 0; INT_MIN / -1 wraps."""
    mask = (1 << bits) - 1
    sign = 1 << (bits - 1)
    a = ((dst & mask) ^ sign) - sign
    b = ((src & mask) ^ sign) - sign
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return (-q if (a < 0) != (b < 0) else q) & mask


def smod(dst: int, src: int, bits: int) -> int:
    """Signed remainder with the dividend's sign; by 0 leaves dst (zero-extended)."""
    mask = (1 << bits) - 1
    sign = 1 << (bits - 1)
    a = ((dst & mask) ^ sign) - sign
    b = ((src & mask) ^ sign) - sign
    if b == 0:
        return dst & mask
    r = abs(a) % abs(b)
    return (-r if a < 0 else r) & mask


def bswap(value: int, bits: int) -> int:
    """Reverse the bytes of the low ``bits`` of ``value``."""
    nbytes = bits // 8
    return int.from_bytes((value & ((1 << bits) - 1)).to_bytes(nbytes, "little"), "big")


_atomic_lock = threading.Lock()


def atomic_op(rs: RunState, addr: int, size: int, imm: int, src: int, r0: int,
              pc: int) -> int:
    """BPF_STX | BPF_ATOMIC: returns the old value (for fetch / xchg / cmpxchg)."""
    if imm == AtomicOp.LOAD_ACQ:
        return mem_load(rs, addr, size, pc)
    mask = (1 << (8 * size)) - 1
    with _atomic_lock:
        if imm == AtomicOp.STORE_REL:
            mem_store(rs, addr, size, src, pc)
            return 0
        old = mem_load(rs, addr, size, pc)
        op = imm & ~ATOMIC_FETCH
        if imm == AtomicOp.CMPXCHG:
            if old == r0 & mask:
                mem_store(rs, addr, size, src, pc)
        elif imm == AtomicOp.XCHG:
            mem_store(rs, addr, size, src, pc)
        elif op == AtomicOp.ADD:
            mem_store(rs, addr, size, old + src, pc)
        elif op == AtomicOp.OR:
            mem_store(rs, addr, size, old | src, pc)
        elif op == AtomicOp.AND:
            mem_store(rs, addr, size, old & src, pc)
        elif op == AtomicOp.XOR:
            mem_store(rs, addr, size, old ^ src, pc)
        return old


def ld_abs(rs: RunState, offset: int, size: int) -> int:
    """Legacy packet load: big-endian ``size`` bytes at skb->data + offset, else abort with 0."""
    packet = rs.packet
    offset = ((offset & M32) ^ SIGN32) - SIGN32
    if offset < 0 or offset + size > len(packet):
        raise RunAbort
    return int.from_bytes(packet[offset:offset + size], "big")


def tail_call(rs: RunState, ctx: int, map_ptr: int, index: int) -> Executable | None:
    """bpf_tail_call: the program to continue with, or None to fall through."""
    prog_array = rs.mem.get(map_ptr >> 32)
    target_of = getattr(prog_array, "tail_call_target", None)
    if target_of is None:
        raise ProgramFault(errno.EFAULT, "bpf_tail_call: R2 is not a PROG_ARRAY map pointer")
    index &= M32
    if rs.tail_calls >= MAX_TAIL_CALL_CNT:
        return None
    prog = target_of(index)
    if prog is None:
        return None
    rs.tail_calls += 1
    exe = prog.executable
    rs.mem.update(exe.static_regions)
    return exe


# -- the reference interpreter -------------------------------------------------------------------
ALU_REF: dict[int, Callable[[int, int, int, int], int]] = {
    # (dst, src, off, bits) -> result within ``bits``; unsigned operands already masked
    AluOp.ADD: lambda d, s, off, bits: d + s,
    AluOp.SUB: lambda d, s, off, bits: d - s,
    AluOp.MUL: lambda d, s, off, bits: d * s,
    AluOp.DIV: lambda d, s, off, bits: sdiv(d, s, bits) if off else (d // s if s else 0),
    AluOp.OR: lambda d, s, off, bits: d | s,
    AluOp.AND: lambda d, s, off, bits: d & s,
    AluOp.LSH: lambda d, s, off, bits: d << (s & (bits - 1)),
    AluOp.RSH: lambda d, s, off, bits: d >> (s & (bits - 1)),
    AluOp.MOD: lambda d, s, off, bits: smod(d, s, bits) if off else (d % s if s else d),
    AluOp.XOR: lambda d, s, off, bits: d ^ s,
    AluOp.MOV: lambda d, s, off, bits: _sign_extend(s, off) if off else s,
    AluOp.ARSH: lambda d, s, off, bits: _signed(d, bits) >> (s & (bits - 1)),
}

JMP_REF: dict[int, Callable[[int, int, int], bool]] = {
    # (dst, src, bits) -> taken; operands unsigned within ``bits``
    JmpOp.JEQ: lambda d, s, bits: d == s,
    JmpOp.JNE: lambda d, s, bits: d != s,
    JmpOp.JGT: lambda d, s, bits: d > s,
    JmpOp.JGE: lambda d, s, bits: d >= s,
    JmpOp.JLT: lambda d, s, bits: d < s,
    JmpOp.JLE: lambda d, s, bits: d <= s,
    JmpOp.JSET: lambda d, s, bits: bool(d & s),
    JmpOp.JSGT: lambda d, s, bits: _signed(d, bits) > _signed(s, bits),
    JmpOp.JSGE: lambda d, s, bits: _signed(d, bits) >= _signed(s, bits),
    JmpOp.JSLT: lambda d, s, bits: _signed(d, bits) < _signed(s, bits),
    JmpOp.JSLE: lambda d, s, bits: _signed(d, bits) <= _signed(s, bits),
}


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _sign_extend(value: int, bits: int) -> int:
    return _signed(value, bits) & M64


class Interpreter:
    """The reference engine: decode-free stepping over ``Executable.slots``."""

    def __init__(self, exe: Executable) -> None:
        self.exe = exe
        # per slot: (info, kind, bits, mask, insn), looked up once rather than every step
        self.steps = [None if insn is None else (
            OPCODES[insn.opcode], OPCODES[insn.opcode].kind,
            64 if OPCODES[insn.opcode].is64 else 32, M64 if OPCODES[insn.opcode].is64 else M32,
            insn) for insn in exe.slots]

    def entry_of(self, start: int) -> Callable:
        """``f(rs, r1, r2, r3, r4, r5) -> r0`` running the subprogram at ``start``."""
        def entry(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
            return self.run_frame(rs, start, (r1, r2, r3, r4, r5))

        return entry

    def run_frame(self, rs: RunState, start: int, args: tuple[int, ...]) -> int:
        exe = self.exe
        steps = self.steps
        regs = [0] * 11
        regs[1:6] = args
        stack = bytearray(MAX_BPF_STACK)
        frame = rs.add_region(stack)
        regs[10] = frame | MAX_BPF_STACK
        may_goto = BPF_MAX_LOOPS
        pc = start
        try:
            while True:
                info, kind, bits, mask, insn = steps[pc]
                rs.count += 1
                if rs.count > rs.budget:
                    raise rs.over_budget(pc)
                _, dst, src, off, imm = insn
                if kind is Kind.ALU:
                    s = (regs[src] if info.source is Source.X else imm) & mask
                    regs[dst] = ALU_REF[info.op](regs[dst] & mask, s, off, bits) & mask
                elif kind is Kind.NEG:
                    regs[dst] = -regs[dst] & mask
                elif kind is Kind.END:
                    if info.cls is Class.ALU and info.source is Source.K:  # to little endian
                        regs[dst] &= (1 << imm) - 1
                    else:  # to big endian, or bswap
                        regs[dst] = bswap(regs[dst], imm)
                elif kind is Kind.JA:
                    pc += (imm if info.cls is Class.JMP32 else off) + 1
                    continue
                elif kind is Kind.JCOND:
                    if may_goto == 0:
                        pc += off + 1
                        continue
                    may_goto -= 1
                elif kind is Kind.JMP:
                    d = regs[dst] & mask
                    s = (regs[src] if info.source is Source.X else imm) & mask
                    if JMP_REF[info.op](d, s, bits):
                        pc += off + 1
                        continue
                elif kind is Kind.CALL:
                    if src == BPF_PSEUDO_CALL:
                        regs[0] = self.run_frame(rs, pc + imm + 1, tuple(regs[1:6]))
                    elif imm == BpfFunc.tail_call:
                        target = tail_call(rs, regs[1], regs[2], regs[3])
                        if target is not None:
                            return target.entry(rs.engine)(rs, regs[1], 0, 0, 0, 0)
                    else:
                        regs[0] = exe.helpers[imm](rs, *regs[1:6]) & M64
                elif kind is Kind.EXIT:
                    return regs[0]
                elif kind is Kind.LD_IMM64:
                    regs[dst] = exe.ld_imm[pc]
                    pc += 2
                    continue
                elif kind is Kind.LDX or kind is Kind.LDX_SX:
                    value = mem_load(rs, (regs[src] + off) & M64, info.nbytes, pc)
                    if kind is Kind.LDX_SX:
                        value = _sign_extend(value, 8 * info.nbytes)
                    regs[dst] = value
                elif kind is Kind.ST:
                    mem_store(rs, (regs[dst] + off) & M64, info.nbytes, imm & M64, pc)
                elif kind is Kind.STX:
                    mem_store(rs, (regs[dst] + off) & M64, info.nbytes, regs[src], pc)
                elif kind is Kind.ATOMIC:
                    addr = (regs[dst] + off) & M64
                    if imm == AtomicOp.LOAD_ACQ:
                        regs[dst] = atomic_op(rs, (regs[src] + off) & M64, info.nbytes, imm, 0,
                                              0, pc)
                    else:
                        old = atomic_op(rs, addr, info.nbytes, imm, regs[src], regs[0], pc)
                        if imm == AtomicOp.CMPXCHG:
                            regs[0] = old
                        elif imm & ATOMIC_FETCH:
                            regs[src] = old
                elif kind is Kind.LD_ABS:
                    regs[0] = ld_abs(rs, imm, info.nbytes)
                elif kind is Kind.LD_IND:
                    regs[0] = ld_abs(rs, regs[src] + imm, info.nbytes)
                else:  # pragma: no cover - every Kind is handled above
                    raise ProgramFault(errno.EINVAL, f"insn {pc}: cannot execute {info.name}",
                                       pc=pc)
                pc += 1
        finally:
            del rs.mem[frame >> 32]


# -- the JIT: one Python function per subprogram -------------------------------------------------
_ALU_JIT64 = {
    AluOp.ADD: "({d} + {s}) & M64",
    AluOp.SUB: "({d} - {s}) & M64",
    AluOp.MUL: "({d} * {s}) & M64",
    AluOp.OR: "{d} | {s}",
    AluOp.AND: "{d} & {s}",
    AluOp.XOR: "{d} ^ {s}",
    AluOp.MOV: "{s}",
}
_ALU_JIT32 = {
    AluOp.ADD: "({d} + {s}) & M32",
    AluOp.SUB: "({d} - {s}) & M32",
    AluOp.MUL: "({d} * {s}) & M32",
    AluOp.OR: "({d} | {s}) & M32",
    AluOp.AND: "{d} & {s} & M32",
    AluOp.XOR: "({d} ^ {s}) & M32",
    AluOp.MOV: "{s} & M32",
}
_JMP_JIT = {
    JmpOp.JEQ: "{d} == {s}", JmpOp.JNE: "{d} != {s}", JmpOp.JGT: "{d} > {s}",
    JmpOp.JGE: "{d} >= {s}", JmpOp.JLT: "{d} < {s}", JmpOp.JLE: "{d} <= {s}",
    JmpOp.JSET: "{d} & {s}",
}
_JMP_SIGNED = {JmpOp.JSGT: ">", JmpOp.JSGE: ">=", JmpOp.JSLT: "<", JmpOp.JSLE: "<="}

_MAX_NESTING = 40  # forward jumps nest as if/else up to this depth, then use ``continue``
JIT_MAX_SLOTS = 100_000  # bigger programs run on the reference interpreter (compile ~3 s)


class _FunctionWriter:
    """Python source of one subprogram [start, end): a block dispatch loop over its regions."""

    def __init__(self, exe: Executable, start: int, end: int,
                 bound: dict[str, Callable] | None = None) -> None:
        self.exe = exe
        self.start = start
        self.end = end
        self.bound = bound or {}
        self.map_in_r1: int | None = None  # region of the map R1 surely points to, if any
        self.lines: list[str] = []
        targets: set[int] = {start}
        block_starts: set[int] = {start}
        self.back_targets: set[int] = set()
        for pc in range(start, end):
            insn = exe.slots[pc]
            if insn is None:
                continue
            target = _jump_target(pc, insn)
            if target is not None:
                targets.add(target)
                block_starts.update((target, pc + 1))
                if target <= pc:
                    self.back_targets.add(target)
            elif insn.opcode == (Class.JMP | JmpOp.EXIT):
                block_starts.add(pc + 1)
        self.regions = sorted(t for t in targets if start <= t < end)
        self.block_starts = block_starts

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def write(self, name: str) -> list[str]:
        emit = self.emit
        emit(0, f"def {name}(rs, r1, r2, r3, r4, r5):")
        emit(1, "mem = rs.mem")
        emit(1, "frame = rs.next_region")
        emit(1, "rs.next_region = frame + 1")
        emit(1, "stack = bytearray(512)")
        emit(1, "mem[frame] = stack")
        emit(1, "r10 = (frame << 32) | 512")
        emit(1, "r0 = r6 = r7 = r8 = r9 = 0")
        emit(1, "n = rs.count")
        emit(1, "limit = rs.budget")
        emit(1, "may_goto = BPF_MAX_LOOPS")
        emit(1, f"b = {self.start}")
        emit(1, "while True:")
        for i, region in enumerate(self.regions):
            end = self.regions[i + 1] if i + 1 < len(self.regions) else self.end
            emit(2, f"if b == {region}:")
            self.write_region(region, end)
        # Only a jump that no region answers gets here without ``continue``: a verified
        # program never does, an unverified one faults instead of spinning.
        emit(2, f"if b not in {set(self.regions)!r}:")
        emit(3, "rs.count = n")
        emit(3, f"raise bad_jump(b, {self.start})")
        return self.lines

    def write_region(self, region: int, end: int) -> None:
        loops = any(self._target(pc) == region for pc in range(region, end))
        depth = 3
        if loops:
            self.emit(depth, "while True:")
            depth += 1
        pc = region
        while pc < end:
            insn = self.exe.slots[pc]
            if pc in self.block_starts or pc == region:
                self.map_in_r1 = None
                count = self._block_length(pc, end)
                self.emit(depth, f"n += {count}")
                if pc == region and region in self.back_targets:
                    self.emit(depth, f"if n > limit: rs.count = n; raise rs.over_budget({pc})")
            depth = self.write_insn(pc, insn, depth, region, loops)
            self.track_map_in_r1(pc, insn)
            if depth < 0:  # control does not reach the next instruction
                return
            pc += insn.slots
        # falls through into the next region
        if loops:
            self.emit(depth, f"b = {end}")
            self.emit(depth, "break")
        else:
            self.emit(depth, f"b = {end}")

    def track_map_in_r1(self, pc: int, insn: Instruction) -> None:
        """Follow R1 through straight-line code: a lddw of a map object sets it; anything that
        may write R1 (or leave the block) forgets it. Stores and other registers' ALU keep it."""
        kind = OPCODES[insn.opcode].kind
        if kind is Kind.LD_IMM64 and insn.dst == 1:
            pointer = self.exe.ld_imm[pc]
            region = pointer >> 32
            known = region in self.exe.static_regions and not pointer & OFF_MASK
            self.map_in_r1 = region if known else None
        elif not (kind in (Kind.ST, Kind.STX) or (insn.dst != 1 and kind in (
                Kind.ALU, Kind.NEG, Kind.END, Kind.LDX, Kind.LDX_SX, Kind.LD_IMM64))):
            self.map_in_r1 = None

    def _target(self, pc: int) -> int | None:
        insn = self.exe.slots[pc]
        return None if insn is None else _jump_target(pc, insn)

    def _block_length(self, pc: int, end: int) -> int:
        count = 0
        while pc < end:
            insn = self.exe.slots[pc]
            count += 1
            if _jump_target(pc, insn) is not None or insn.opcode == (Class.JMP | JmpOp.EXIT):
                break
            pc += insn.slots
            if pc in self.block_starts:
                break
        return count

    def jump(self, depth: int, target: int, region: int, loops: bool) -> None:
        """Code to go to ``target``; the caller stops or nests after it."""
        emit = self.emit
        if loops:
            if target == region:
                emit(depth, "continue")
            else:
                emit(depth, f"b = {target}")
                emit(depth, "break")
        else:
            emit(depth, f"b = {target}")
            if target <= region:
                emit(depth, "continue")

    def write_insn(self, pc: int, insn: Instruction, depth: int, region: int,
                   loops: bool) -> int:
        """Emit one instruction; returns the depth for the next, or -1 if it never runs."""
        info = OPCODES[insn.opcode]
        kind = info.kind
        emit = self.emit
        d = f"r{insn.dst}"
        src = f"r{insn.src}"
        imm = insn.imm
        bits = 64 if info.is64 else 32
        if kind is Kind.ALU:
            s = src if info.source is Source.X else str(imm & (M64 if bits == 64 else M32))
            emit(depth, f"{d} = {_alu_expr(info.op, insn.off, d, s, bits)}")
        elif kind is Kind.NEG:
            emit(depth, f"{d} = -{d} & {'M64' if bits == 64 else 'M32'}")
        elif kind is Kind.END:
            if info.cls is Class.ALU and info.source is Source.K:
                emit(depth, f"{d} &= {(1 << imm) - 1}")
            elif imm == 16:
                emit(depth, f"{d} = (({d} & 0xff) << 8) | (({d} >> 8) & 0xff)")
            else:
                emit(depth, f"{d} = bswap({d}, {imm})")
        elif kind is Kind.JA:
            target = _jump_target(pc, insn)
            self.jump(depth, target, region, loops)
            return -1
        elif kind is Kind.JCOND:
            emit(depth, "if may_goto == 0:")
            self.jump(depth + 1, _jump_target(pc, insn), region, loops)
            if not loops and _jump_target(pc, insn) > region:
                if depth < _MAX_NESTING:
                    emit(depth, "else:")
                    emit(depth + 1, "may_goto -= 1")
                    return depth + 1
                emit(depth + 1, "continue")
            emit(depth, "may_goto -= 1")
        elif kind is Kind.JMP:
            target = _jump_target(pc, insn)
            emit(depth, f"if {_cond_expr(info, insn, bits)}:")
            self.jump(depth + 1, target, region, loops)
            if not loops and target > region:
                if depth < _MAX_NESTING:
                    emit(depth, "else:")
                    return depth + 1
                emit(depth + 1, "continue")
        elif kind is Kind.CALL:
            if insn.src == BPF_PSEUDO_CALL:
                callee = pc + imm + 1
                emit(depth, "rs.count = n")
                emit(depth, f"r0 = F{callee}(rs, r1, r2, r3, r4, r5)")
                emit(depth, "n = rs.count")
            elif imm == BpfFunc.tail_call:
                emit(depth, "t = tail_call(rs, r1, r2, r3)")
                emit(depth, "if t is not None:")
                emit(depth + 1, "rs.count = n")
                emit(depth + 1, "del mem[frame]")
                emit(depth + 1, "return t.entry(rs.engine)(rs, r1, 0, 0, 0, 0)")
            elif bound_name(imm, self.map_in_r1) in self.bound:
                # R1 is a known map: the helper bound to it skips resolving the map pointer
                emit(depth, f"r0 = {bound_name(imm, self.map_in_r1)}(rs, r2, r3, r4, r5)")
            else:
                emit(depth, f"r0 = H{imm}(rs, r1, r2, r3, r4, r5)")
        elif kind is Kind.EXIT:
            emit(depth, "rs.count = n")
            emit(depth, "del mem[frame]")
            emit(depth, "return r0")
            return -1
        elif kind is Kind.LD_IMM64:
            emit(depth, f"{d} = {self.exe.ld_imm[pc]}")
        elif kind in (Kind.LDX, Kind.LDX_SX):
            self.write_load(pc, insn, info, depth)
        elif kind in (Kind.ST, Kind.STX):
            value = src if kind is Kind.STX else str(imm & M64)
            self.write_store(pc, insn, info, depth, value)
        elif kind is Kind.ATOMIC:
            size = info.nbytes
            if imm == AtomicOp.LOAD_ACQ:
                emit(depth, f"{d} = atomic_op(rs, {src} + {insn.off}, {size}, {imm}, 0, 0, {pc})")
            elif imm == AtomicOp.CMPXCHG:
                emit(depth, f"r0 = atomic_op(rs, {d} + {insn.off}, {size}, {imm}, {src}, r0, "
                            f"{pc})")
            elif imm == AtomicOp.STORE_REL:
                emit(depth, f"atomic_op(rs, {d} + {insn.off}, {size}, {imm}, {src}, r0, {pc})")
            else:
                self.write_atomic_rmw(pc, insn, size, depth)
        elif kind is Kind.LD_ABS:
            emit(depth, f"r0 = ld_abs(rs, {imm}, {info.nbytes})")
        elif kind is Kind.LD_IND:
            emit(depth, f"r0 = ld_abs(rs, {src} + {imm}, {info.nbytes})")
        else:  # pragma: no cover
            raise ValueError(f"insn {pc}: the JIT cannot translate {info.name}")
        return depth

    def write_atomic_rmw(self, pc: int, insn: Instruction, size: int, depth: int) -> None:
        """add/or/and/xor (with or without fetch) and xchg, inline under the atomic lock; a
        region that is not plain memory takes atomic_op's checked path."""
        emit = self.emit
        d, src, imm = f"r{insn.dst}", f"r{insn.src}", insn.imm
        mask = (1 << (8 * size)) - 1
        new = {AtomicOp.ADD: f"(old + {src}) & {mask}", AtomicOp.OR: f"old | ({src} & {mask})",
               AtomicOp.AND: f"old & {src}", AtomicOp.XOR: f"(old ^ {src}) & {mask}",
               AtomicOp.XCHG & ~ATOMIC_FETCH: f"{src} & {mask}"}[imm & ~ATOMIC_FETCH]
        emit(depth, "try:")
        emit(depth + 1, f"a = {_address(d, insn.off)}")
        emit(depth + 1, "m = mem[a >> 32]")
        emit(depth + 1, "o = a & 0xffffffff")
        emit(depth + 1, "with ATOMIC_LOCK:")
        emit(depth + 2, f"old = L{size}(m, o)[0]")
        emit(depth + 2, f"S{size}(m, o, {new})")
        emit(depth, "except ACCESS_ERRORS:")
        emit(depth + 1, f"old = atomic_op(rs, {d} + {insn.off}, {size}, {imm}, {src}, r0, {pc})")
        if imm & ATOMIC_FETCH:
            emit(depth, f"{src} = old")

    def write_load(self, pc: int, insn: Instruction, info, depth: int) -> None:
        emit = self.emit
        size = info.nbytes
        d = f"r{insn.dst}"
        sx = info.kind is Kind.LDX_SX
        sign = 1 << (8 * size - 1)
        fix = f"{d} = (({d} ^ {sign}) - {sign}) & M64" if sx else None
        off = MAX_BPF_STACK + insn.off
        if insn.src == 10 and 0 <= off <= MAX_BPF_STACK - size:
            # the frame pointer is constant: a fixed offset in this frame's stack
            emit(depth, f"{d} = L{size}(stack, {off})[0]")
        else:
            emit(depth, "try:")
            emit(depth + 1, f"a = {_address(f'r{insn.src}', insn.off)}")
            emit(depth + 1, f"{d} = L{size}(mem[a >> 32], a & 0xffffffff)[0]")
            emit(depth, "except ACCESS_ERRORS:")
            emit(depth + 1, f"{d} = mem_load(rs, r{insn.src} + {insn.off}, {size}, {pc})")
        if fix:
            emit(depth, fix)

    def write_store(self, pc: int, insn: Instruction, info, depth: int, value: str) -> None:
        emit = self.emit
        size = info.nbytes
        masked = value if size == 8 else (
            str(int(value) & ((1 << (8 * size)) - 1)) if value.isdigit()
            else f"{value} & {(1 << (8 * size)) - 1}")
        off = MAX_BPF_STACK + insn.off
        if insn.dst == 10 and 0 <= off <= MAX_BPF_STACK - size:
            emit(depth, f"S{size}(stack, {off}, {masked})")
        else:
            emit(depth, "try:")
            emit(depth + 1, f"a = {_address(f'r{insn.dst}', insn.off)}")
            emit(depth + 1, f"S{size}(mem[a >> 32], a & 0xffffffff, {masked})")
            emit(depth, "except ACCESS_ERRORS:")
            emit(depth + 1, f"mem_store(rs, r{insn.dst} + {insn.off}, {size}, {value}, {pc})")


def _address(reg: str, off: int) -> str:
    """The expression of ``reg + off`` (most accesses are at offset 0)."""
    return f"{reg} + {off}" if off else reg


def _jump_target(pc: int, insn: Instruction) -> int | None:
    """Where a jump goes (None for anything that is not a jump)."""
    info = OPCODES.get(insn.opcode)
    if info is None:
        return None
    if info.kind is Kind.JA:
        return pc + (insn.imm if info.cls is Class.JMP32 else insn.off) + 1
    if info.kind in (Kind.JMP, Kind.JCOND):
        return pc + insn.off + 1
    return None


def _alu_expr(op: AluOp, off: int, d: str, s: str, bits: int) -> str:
    """The Python expression of ``d op s`` for 64- or 32-bit ALU, result masked."""
    if bits == 64:
        if op in _ALU_JIT64 and not (op is AluOp.MOV and off):
            return _ALU_JIT64[op].format(d=d, s=s)
        if op is AluOp.MOV:
            sign = 1 << (off - 1)
            return f"((({s} & {(1 << off) - 1}) ^ {sign}) - {sign}) & M64"
        if op is AluOp.LSH:
            return f"({d} << ({s} & 63)) & M64"
        if op is AluOp.RSH:
            return f"{d} >> ({s} & 63)"
        if op is AluOp.ARSH:
            return f"((({d} ^ SIGN64) - SIGN64) >> ({s} & 63)) & M64"
        if op is AluOp.DIV:
            return f"sdiv({d}, {s}, 64)" if off else f"({d} // {s} if {s} else 0)"
        if op is AluOp.MOD:
            return f"smod({d}, {s}, 64)" if off else f"({d} % {s} if {s} else {d})"
    else:
        if op in _ALU_JIT32 and not (op is AluOp.MOV and off):
            return _ALU_JIT32[op].format(d=d, s=s)
        if op is AluOp.MOV:
            sign = 1 << (off - 1)
            return f"((({s} & {(1 << off) - 1}) ^ {sign}) - {sign}) & M32"
        if op is AluOp.LSH:
            return f"({d} << ({s} & 31)) & M32"
        if op is AluOp.RSH:
            return f"({d} & M32) >> ({s} & 31)"
        if op is AluOp.ARSH:
            return f"(((({d} & M32) ^ SIGN32) - SIGN32) >> ({s} & 31)) & M32"
        if op is AluOp.DIV:
            return (f"sdiv({d}, {s}, 32)" if off else
                    f"(({d} & M32) // ({s} & M32) if {s} & M32 else 0)")
        if op is AluOp.MOD:
            return (f"smod({d}, {s}, 32)" if off else
                    f"(({d} & M32) % ({s} & M32) if {s} & M32 else {d} & M32)")
    raise ValueError(f"no ALU expression for {op!r}")


def _cond_expr(info, insn: Instruction, bits: int) -> str:
    d = f"r{insn.dst}"
    if info.source is Source.X:
        s = f"r{insn.src}"
        if bits == 32:
            s = f"({s} & M32)"
    else:
        s = str(insn.imm & (M64 if bits == 64 else M32))
    if bits == 32:
        d = f"({d} & M32)"
    if info.op in _JMP_JIT:
        return _JMP_JIT[info.op].format(d=d, s=s)
    flip = "SIGN64" if bits == 64 else "SIGN32"
    if info.source is Source.K:
        s = str(int(s) ^ (SIGN64 if bits == 64 else SIGN32))
    else:
        s = f"({s} ^ {flip})"
    return f"({d} ^ {flip}) {_JMP_SIGNED[info.op]} {s}"


def bad_jump(target: int, subprog: int) -> ProgramFault:
    return ProgramFault(errno.EFAULT, f"jump to insn {target}, outside subprogram {subprog} "
                        "or off its end (the program was not verified?)", pc=target)


# Masks as literals: a constant load is cheaper than a global lookup in the hot loop.
_LITERALS = {"SIGN64": hex(SIGN64), "SIGN32": hex(SIGN32), "M64": hex(M64), "M32": hex(M32)}
_LITERAL_RE = re.compile(r"\b(SIGN64|SIGN32|M64|M32)\b")


def bound_name(helper_id: int, region: int | None) -> str:
    return f"H{helper_id}_{region:x}" if region is not None else ""


def bound_helpers(exe: Executable) -> dict[str, Callable]:
    """Map helpers bound to each map ``exe`` loads: a helper offers ``bind_map(bpf_map)``,
    which gives ``f(rs, r2, r3, r4, r5) -> r0`` (None for objects it does not take)."""
    bound: dict[str, Callable] = {}
    for helper_id, helper in exe.helpers.items():
        bind_map = getattr(helper, "bind_map", None)
        if bind_map is None:
            continue
        for region, obj in exe.static_regions.items():
            func = bind_map(obj)
            if func is not None:
                bound[bound_name(helper_id, region)] = func
    return bound


def jit_source(exe: Executable, bound: dict[str, Callable] | None = None) -> str:
    """The Python source the JIT makes of ``exe`` (one function per subprogram)."""
    if bound is None:
        bound = bound_helpers(exe)
    lines: list[str] = []
    for start in exe.subprogs:
        lines += _FunctionWriter(exe, start, exe.subprog_end(start), bound).write(f"F{start}")
        lines.append("")
    return _LITERAL_RE.sub(lambda m: _LITERALS[m.group(1)], "\n".join(lines))


def jit_compile(exe: Executable) -> dict[str, Callable]:
    """Translate ``exe`` to Python once; returns its functions (``F<start>`` per subprogram)."""
    bound = bound_helpers(exe)
    source = jit_source(exe, bound)
    namespace: dict[str, Any] = {
        "M64": M64, "M32": M32, "SIGN64": SIGN64, "SIGN32": SIGN32,
        "BPF_MAX_LOOPS": BPF_MAX_LOOPS, "ACCESS_ERRORS": ACCESS_ERRORS,
        "mem_load": mem_load, "mem_store": mem_store, "atomic_op": atomic_op,
        "ld_abs": ld_abs, "tail_call": tail_call, "bad_jump": bad_jump,
        "ATOMIC_LOCK": _atomic_lock,
        "sdiv": sdiv, "smod": smod, "bswap": bswap,
    }
    for size, fmt in _LOAD.items():
        namespace[f"L{size}"] = fmt.unpack_from
        namespace[f"S{size}"] = fmt.pack_into
    for helper_id, helper in exe.helpers.items():
        namespace[f"H{helper_id}"] = helper
    namespace.update(bound)
    code = compile(source, f"<bpf-jit {getattr(exe.owner, 'name', '') or 'prog'}>", "exec")
    exec(code, namespace)  # noqa: S102 - our own generated source
    return {f"F{start}": namespace[f"F{start}"] for start in exe.subprogs}
