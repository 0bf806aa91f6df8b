"""Load-time checks of the emulated backend: the kernel's verifier (kernel/bpf/verifier.c) as
far as it can be followed without value ranges.

Rules this module keeps:
- Checks run in the kernel's phases (``bpf_check``), so the same problem wins when a program
  has several: subprograms (call targets, jump ranges, last insn, on the raw slots); opcodes,
  lddw and map fds; the control-flow graph (unreachable insns, jumps into an lddw); then
  ``do_check`` (which also finds a call stack too deep, as it follows the calls).
- ``do_check`` walks every path as the kernel does: depth first, a conditional jump's
  fall-through first and its target pushed, bpf-to-bpf calls followed into the callee with
  a frame of their own. Each instruction's checks run in the kernel's order on an abstract
  state: per register its type (scalar, context, stack, map, map value, packet, socket) and,
  for a scalar, the bits known of it (``tnum.py``, the kernel's tnums); for a pointer its
  fixed offset and whether it may still be NULL; per stack slot the kernel's slot types and
  spilled register. A branch the known bits (or a non-NULL pointer) decide has one
  successor (``is_branch_taken``), so code behind it is never checked, as in the kernel. A
  state that an explored state at the same instruction covers is pruned; one equal to a
  state the same path had there is an endless loop; a loop still changing after LOOP_UNROLL
  rounds has what changes widened to unknown.
- It refuses only on facts the kernel has too (a known value, a register's type, an offset),
  never because a value is unknown: the kernel also tracks value ranges and packet bounds,
  which this module does not, so where the kernel proves a bound this module cannot, it
  accepts, and the interpreter catches a bad access at run time (``ProgramFault``) and an
  endless loop with its budget. Helper arguments are checked as the kernel checks them
  (``check_func_arg``, ``check_map_func_compatibility``), but for bounds that need a range.
- Messages and errnos are the kernel's (EINVAL mostly; EACCES for register, stack, context,
  packet and map access; E2BIG for a too-deep call stack or too many instructions walked;
  EBADF for an fd that is not open).
- The result keeps what loading changes: instructions with narrow context loads rewritten as
  ``convert_ctx_accesses`` does (``filter.narrow_load_offset``) and dead code as ``goto -1``
  (its fields were never checked), the maps by lddw slot, and ``max_ctx_offset``.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..asm.opcodes import (
    OPCODES,
    AluOp,
    AtomicOp,
    Class,
    Instruction,
    JmpOp,
    Kind,
    Size,
    Source,
)
from ..errors import KernelError
from ..uapi import (
    BPF_PSEUDO_BTF_ID,
    BPF_PSEUDO_CALL,
    BPF_PSEUDO_FUNC,
    BPF_PSEUDO_KFUNC_CALL,
    BPF_PSEUDO_MAP_FD,
    BPF_PSEUDO_MAP_IDX,
    BPF_PSEUDO_MAP_IDX_VALUE,
    BPF_PSEUDO_MAP_VALUE,
    MAX_BPF_STACK,
    AttachType,
    BpfFunc,
    MapType,
    ProgType,
    map_traits,
)
from . import filter as ctx_rules
from . import tnum
from .filter import (
    PTR_TO_PACKET,
    PTR_TO_PACKET_END,
    PTR_TO_PACKET_META,
    PTR_TO_SOCK_COMMON_OR_NULL,
    PTR_TO_SOCKET,
)
from .helpers import (
    ARG_ANYTHING,
    ARG_CONST_MAP_PTR,
    ARG_CONST_SIZE,
    ARG_CONST_SIZE_OR_ZERO,
    ARG_PTR_TO_CTX,
    ARG_PTR_TO_MAP_KEY,
    ARG_PTR_TO_MAP_VALUE,
    ARG_PTR_TO_MEM,
    ARG_PTR_TO_UNINIT_MAP_VALUE,
    ARG_PTR_TO_UNINIT_MEM,
    HELPERS,
)
from .memory import M32, M64
from .semantics import MAX_CALL_FRAMES
from .tnum import Tnum

LD_IMM64 = 0x18
EXIT = Class.JMP | JmpOp.EXIT
JA = Class.JMP | JmpOp.JA
GOTOL = Class.JMP32 | JmpOp.JA
# Program types that may use the legacy packet loads (may_access_skb).
LD_ABS_PROG_TYPES = frozenset({ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT})
# Maps whose values a program may address directly (map_direct_value_addr).
DIRECT_VALUE_MAP_TYPES = frozenset({MapType.ARRAY})
# Maps whose lookups with a constant in-range key cannot fail (can_elide_value_nullness).
ELIDE_NULL_MAP_TYPES = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY})
BPF_COMPLEXITY_LIMIT_INSNS = 1_000_000
BPF_MAX_VAR_OFF = 1 << 29
BPF_REG_SIZE = 8
BPF_ADDR_SPACE_CAST = 1
BPF_F_RDONLY_PROG = 0x80
BPF_F_WRONLY_PROG = 0x100
MAX_BPF_REG = 11
FP = 10
CALLER_SAVED = (0, 1, 2, 3, 4, 5)
# Explored states kept per instruction for pruning (fewer only means more walking).
STATES_PER_INSN = 8
# Rounds of a loop walked with exact values before what changes is widened to unknown.
LOOP_UNROLL = 1024
# Rounds back a path's state is compared with to find an endless loop.
LOOP_PERIOD = 8

_SLOT = struct.Struct("<BBhi")


class VerifierReject(KernelError):
    """The program is rejected; ``log`` is the verifier log."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(err, message)
        self.log = message + "\n"


@dataclass
class VerifiedProgram:
    """What loading keeps: instructions, map references by lddw slot, maps in use order."""

    insns: list[Instruction]
    pseudo: dict[int, tuple[str, Any, int]] = field(default_factory=dict)
    maps: list[Any] = field(default_factory=list)
    processed: int = 0
    max_ctx_offset: int = 0  # bytes of the context the program reads or writes (at most)


def _reject(err: int, message: str) -> VerifierReject:
    return VerifierReject(err, message)


def bpf_check(insns: bytes, prog_type: int, map_from_fd: Callable[[int], Any],
              gpl: bool = True, expected_attach_type: int = 0,
              check_attach_btf_id: Callable[[], None] | None = None) -> VerifiedProgram:
    """Verify ``insns`` for ``prog_type``; ``map_from_fd(fd)`` resolves lddw map fds (raises
    KernelError); ``gpl``: the license is GPL-compatible; ``check_attach_btf_id`` (the
    loader's checks of the program's kind: sleepable) runs where the kernel's does, after
    check_cfg. Returns the decoded program or raises ``VerifierReject``."""
    verifier = _Verifier(insns, prog_type, map_from_fd, gpl, expected_attach_type)
    verifier.check_attach_btf_id = check_attach_btf_id
    return verifier.run()


# -- the abstract state ------------------------------------------------------------------------
NOT_INIT, SCALAR, PTR_TO_CTX, PTR_TO_STACK = "?", "scalar", "ctx", "fp"
CONST_PTR_TO_MAP, PTR_TO_MAP_VALUE = "map_ptr", "map_value"
_PKT_TYPES = frozenset({PTR_TO_PACKET, PTR_TO_PACKET_META})
# Pointer types whose accesses are not checked here (sockets: their fields are not modelled).
_SOCKET_TYPES = frozenset({PTR_TO_SOCKET, "sock_common"})


class Reg(NamedTuple):
    """struct bpf_reg_state, the parts kept here."""

    type: str = NOT_INIT
    var: Tnum = tnum.UNKNOWN  # a scalar's known bits; a pointer's variable offset
    off: int = 0  # a pointer's fixed offset
    map: Any = None  # CONST_PTR_TO_MAP, PTR_TO_MAP_VALUE: the map (None: not known here)
    frame: int = 0  # PTR_TO_STACK: whose stack
    id: int = 0  # not 0: may be NULL (copies share the id until a NULL check)

    @property
    def is_pointer(self) -> bool:
        return self.type not in (SCALAR, NOT_INIT)

    @property
    def is_const(self) -> bool:
        return self.type == SCALAR and self.var.is_const

    def type_str(self) -> str:
        """reg_type_str: what the kernel's messages call this register's type."""
        if self.id and self.type == "sock_common":
            return PTR_TO_SOCK_COMMON_OR_NULL
        return self.type + ("_or_null" if self.id else "")


UNINIT = Reg()
UNKNOWN = Reg(SCALAR)


def scalar(value: int) -> Reg:
    return Reg(SCALAR, tnum.const(value))


# Stack slot types, by byte (kernel's STACK_INVALID / SPILL / MISC / ZERO); index i of a slot's
# 8 is slot_type[i], the byte at -(8 * spi + i + 1) from the frame pointer.
STACK_INVALID, STACK_SPILL, STACK_MISC, STACK_ZERO = "?", "s", "m", "z"


class Slot(NamedTuple):
    types: str = STACK_INVALID * BPF_REG_SIZE
    spilled: Reg = UNINIT


EMPTY_SLOT = Slot()


class Frame:
    """struct bpf_func_state: registers, stack slots and where the call returns to."""

    __slots__ = ("regs", "stack", "callsite", "frameno")

    def __init__(self, regs: list[Reg], stack: dict[int, Slot], callsite: int,
                 frameno: int) -> None:
        self.regs = regs
        self.stack = stack
        self.callsite = callsite
        self.frameno = frameno

    def copy(self) -> Frame:
        return Frame(list(self.regs), dict(self.stack), self.callsite, self.frameno)

    def key(self) -> tuple:
        return tuple(self.regs), tuple(sorted(self.stack.items())), self.callsite


class State:
    """struct bpf_verifier_state: the frames of the calls in progress, innermost last, and
    the references the program holds (acquired sockets not yet found NULL)."""

    __slots__ = ("frames", "refs")

    def __init__(self, frames: list[Frame], refs: set[int] | None = None) -> None:
        self.frames = frames
        self.refs = refs if refs is not None else set()

    @property
    def cur(self) -> Frame:
        return self.frames[-1]

    def copy(self) -> State:
        return State([f.copy() for f in self.frames], set(self.refs))

    def key(self) -> tuple:
        return tuple(f.key() for f in self.frames) + (tuple(sorted(self.refs)),)


def _covers(old: tuple, cur: tuple, live: int) -> bool:
    """is_state_visited's states_equal: every path from ``cur`` is one from ``old`` (which
    was explored, or is being), so ``cur`` needs no walk of its own. ``live``: registers of
    the innermost frame that may still be read."""
    if len(old) != len(cur) or len(old[-1]) != len(cur[-1]):
        return False  # other calls in progress, or other references held
    ids: dict[int, int] = {}
    frames = len(old) - 1
    for depth, ((old_regs, old_stack, old_call), (regs, stack, call)) in enumerate(
            zip(old[:frames], cur[:frames], strict=True)):
        if old_call != call:
            return False
        inner = depth == frames - 1
        for regno, (a, b) in enumerate(zip(old_regs, regs, strict=True)):
            if inner and not live >> regno & 1:
                continue
            if not _reg_covers(a, b, ids):
                return False
        cur_slots = dict(stack)
        for spi, slot in old_stack:
            if all(t in (STACK_INVALID, STACK_MISC) for t in slot.types):
                continue  # the old walk read nothing from here it could rely on
            other = cur_slots.get(spi, EMPTY_SLOT)
            if slot.types != other.types or not _reg_covers(slot.spilled, other.spilled, ids):
                return False
    return all(ids.get(ref, ref) in cur[-1] for ref in old[-1])


def _reg_covers(old: Reg, cur: Reg, ids: dict[int, int]) -> bool:
    """regsafe: ``old`` allows every value ``cur`` may have (maybe-NULL ids map one to one)."""
    if old.type == NOT_INIT:
        return True  # old never read it (a read would have failed), nor will cur's paths
    if old.type != cur.type:
        return False
    if old.type == SCALAR:
        return old.var.contains(cur.var)
    if (old.off, old.map, old.frame) != (cur.off, cur.map, cur.frame) \
            or not old.var.contains(cur.var):
        return False
    if bool(old.id) != bool(cur.id):
        return False
    return not old.id or ids.setdefault(old.id, cur.id) == cur.id


class _Verifier:
    def __init__(self, data: bytes, prog_type: int, map_from_fd: Callable[[int], Any],
                 gpl: bool = True, attach_type: int = 0) -> None:
        self.data = data
        self.gpl = gpl
        self.prog_type = prog_type
        self.attach_type = attach_type
        self.map_from_fd = map_from_fd
        self.check_attach_btf_id: Callable[[], None] | None = None
        self.n = len(data) // 8
        self.raw = [_SLOT.unpack_from(data, 8 * i) for i in range(self.n)]
        self.slots: list[Instruction | None] = []
        self.subprogs: list[int] = [0]
        self.pseudo_map: dict[int, Any] = {}  # lddw slot of a direct map value -> its map

    def run(self) -> VerifiedProgram:
        self.decode_slots()
        self.add_subprog_and_kfunc()
        self.check_subprogs()
        program = self.resolve_pseudo_ldimm64()
        self.check_cfg()
        if self.check_attach_btf_id is not None:
            self.check_attach_btf_id()
        self.do_check(program)
        program.insns = self.converted_insns()
        program.processed = self.processed
        program.max_ctx_offset = self.max_ctx
        return program

    def converted_insns(self) -> list[Instruction]:
        """What the engines get: dead code (never walked: no field of it was checked) as
        ``goto -1``, as sanitize_dead_code leaves it; narrow context loads reading where the
        kernel's rewrite (convert_ctx_accesses) reads."""
        insns = []
        for pc, insn in enumerate(self.slots):
            if insn is None:
                continue
            info = OPCODES[insn.opcode]
            if pc not in self.walked and info.kind is not Kind.LD_IMM64:
                insn = Instruction(JA, off=-1)
            elif self.ctx_insns.get(pc) and info.kind in (Kind.LDX, Kind.LDX_SX):
                insn = insn._replace(off=ctx_rules.narrow_load_offset(
                    self.prog_type, insn.off, info.nbytes))
            insns.append(insn)
        return insns

    # -- phase 1: slots, subprograms and kfuncs --------------------------------------------------
    def decode_slots(self) -> None:
        """Instructions by slot (None in lddw's second slot); nothing is checked yet."""
        pc = 0
        while pc < self.n:
            code, regs, off, imm = self.raw[pc]
            if code == LD_IMM64 and pc + 1 < self.n:
                _, _, _, imm2 = self.raw[pc + 1]
                imm = (imm & 0xFFFFFFFF) | (imm2 << 32)
                self.slots += [Instruction(code, regs & 0xF, regs >> 4, off, imm), None]
                pc += 2
                continue
            self.slots.append(Instruction(code, regs & 0xF, regs >> 4, off, imm))
            pc += 1

    def add_subprog_and_kfunc(self) -> None:
        starts = {0}
        for pc, insn in enumerate(self.slots):
            if insn is not None and insn.opcode == LD_IMM64 and insn.src == BPF_PSEUDO_FUNC:
                target = _callback_target(pc, insn)
                if not 0 <= target < self.n:
                    raise _reject(errno.EINVAL, "call to invalid destination")
                starts.add(target)  # a callback: a subprogram of its own
                continue
            if insn is None or insn.opcode != Class.JMP | JmpOp.CALL:
                continue
            if insn.src == BPF_PSEUDO_KFUNC_CALL:  # add_kfunc_call: no BTF is passed here
                if insn.off < 0:
                    raise _reject(errno.EINVAL, "negative offset disallowed for kernel module "
                                  "function call\nfailed to find BTF for kernel function")
                if insn.off > 0:
                    raise _reject(errno.EPROTO, "kfunc offset > 0 without fd_array is invalid"
                                  "\nfailed to find BTF for kernel function")
                raise _reject(errno.EINVAL, f"kernel btf_id {insn.imm} is not a function")
            if insn.src == BPF_PSEUDO_CALL:
                target = pc + insn.imm + 1
                if not 0 <= target < self.n:
                    raise _reject(errno.EINVAL, "call to invalid destination")
                starts.add(target)
        self.subprogs = sorted(starts)

    # -- phase 2: jumps stay in their subprogram, which ends in exit or ja -----------------------
    def check_subprogs(self) -> None:
        """On the raw slots, as the kernel does (before opcodes are checked)."""
        for i, start in enumerate(self.subprogs):
            end = self.subprogs[i + 1] if i + 1 < len(self.subprogs) else self.n
            for pc in range(start, end):
                code, _, off, imm = self.raw[pc]
                cls, op = code & 0x07, code & 0xF0
                if cls in (Class.JMP, Class.JMP32) and op not in (JmpOp.EXIT, JmpOp.CALL):
                    target = pc + (imm if cls == Class.JMP32 and op == JmpOp.JA else off) + 1
                    if not start <= target < end:
                        raise _reject(errno.EINVAL,
                                      f"jump out of range from insn {pc} to {target}")
            if self.raw[end - 1][0] not in (EXIT, JA, GOTOL):
                raise _reject(errno.EINVAL, "last insn is not an exit or jmp")

    # -- phase 3: opcodes, lddw, map fds ---------------------------------------------------------
    def resolve_pseudo_ldimm64(self) -> VerifiedProgram:
        insns: list[Instruction] = []
        pseudo: dict[int, tuple[str, Any, int]] = {}
        maps: list[Any] = []
        for pc, insn in enumerate(self.slots):
            if insn is None:
                continue
            insns.append(insn)
            info = OPCODES.get(insn.opcode)
            if info is None:
                raise _reject(errno.EINVAL, f"unknown opcode {insn.opcode:02x}")
            if info.kind in (Kind.LDX, Kind.LDX_SX) and insn.imm:
                raise _reject(errno.EINVAL, "BPF_LDX uses reserved fields")
            if insn.opcode != LD_IMM64:
                continue
            _, regs2, off2, _ = self.raw[pc + 1] if pc + 1 < self.n else (1, 0, 0, 0)
            code2 = self.raw[pc + 1][0] if pc + 1 < self.n else 1
            if pc + 1 >= self.n or code2 or regs2 or off2:
                raise _reject(errno.EINVAL, "invalid bpf_ld_imm64 insn")
            src = insn.src
            if src == 0:
                continue
            if src == BPF_PSEUDO_BTF_ID:
                raise _reject(errno.EINVAL, f"pseudo btf_id {insn.imm & 0xFFFFFFFF} in ldimm64: "
                              "the emulated backend has no kernel BTF")
            if src == BPF_PSEUDO_FUNC:
                continue  # refused by do_check, as the kernel does without BTF
            if src not in (BPF_PSEUDO_MAP_VALUE, BPF_PSEUDO_MAP_IDX_VALUE) \
                    and not (src in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_IDX) and not insn.imm >> 32):
                raise _reject(errno.EINVAL, "unrecognized bpf_ld_imm64 insn")
            if src in (BPF_PSEUDO_MAP_IDX, BPF_PSEUDO_MAP_IDX_VALUE):
                raise _reject(errno.EPROTO, "fd_idx without fd_array is invalid")
            fd = insn.imm & 0xFFFFFFFF
            fd = fd - (1 << 32) if fd >> 31 else fd
            try:
                bpf_map = self.map_from_fd(fd)
            except KernelError as exc:
                raise _reject(exc.errno, f"fd {fd} is not pointing to valid bpf_map") from None
            if bpf_map not in maps:
                maps.append(bpf_map)
            if src == BPF_PSEUDO_MAP_FD:
                pseudo[pc] = ("map", bpf_map, 0)
                continue
            off = (insn.imm >> 32) & 0xFFFFFFFF
            if bpf_map.map_type not in DIRECT_VALUE_MAP_TYPES:
                raise _reject(errno.EINVAL, "no direct value access support for this map type")
            if off >= bpf_map.value_size:
                raise _reject(errno.EINVAL, f"invalid access to map value pointer, value_size="
                              f"{bpf_map.value_size} off={off}")
            value = bpf_map.map_lookup_elem(b"\0\0\0\0")
            pseudo[pc] = ("map_value", value, off)
            self.pseudo_map[pc] = bpf_map
        return VerifiedProgram(insns, pseudo, maps)

    # -- phase 4: control flow -------------------------------------------------------------------
    def successors(self, pc: int) -> list[int]:
        insn = self.slots[pc]
        info = OPCODES[insn.opcode]
        if info.kind is Kind.EXIT:
            return []
        nxt = pc + insn.slots
        if info.kind is Kind.JA:
            return [_jump_target(pc, insn)]
        if info.kind in (Kind.JMP, Kind.JCOND):
            return [nxt, _jump_target(pc, insn)]
        if info.kind is Kind.CALL and insn.src == BPF_PSEUDO_CALL:
            return [nxt, pc + insn.imm + 1]
        if insn.opcode == LD_IMM64 and insn.src == BPF_PSEUDO_FUNC:
            return [nxt, _callback_target(pc, insn)]  # the callback is reached from here
        return [nxt]

    def check_cfg(self) -> None:
        """Every slot is reached, and no jump lands in an lddw's second slot (which, as in
        the kernel's walk, falls through to the next one)."""
        seen = [False] * self.n
        stack = [0]
        seen[0] = True
        while stack:
            pc = stack.pop()
            for succ in [pc + 1] if self.slots[pc] is None else self.successors(pc):
                if succ < self.n and not seen[succ]:
                    seen[succ] = True
                    stack.append(succ)
        pc = 0
        while pc < self.n:
            if not seen[pc]:
                raise _reject(errno.EINVAL, f"unreachable insn {pc}")
            if self.slots[pc].opcode == LD_IMM64:
                if seen[pc + 1]:
                    raise _reject(errno.EINVAL, f"jump into the middle of ldimm64 insn {pc}")
                pc += 1
            pc += 1

    def live_registers(self) -> list[int]:
        """compute_live_registers: per slot, the registers some path from it may read before
        writing (a bit set); pruning ignores the others."""
        live = [0] * self.n
        use_def = {pc: _use_def(insn) for pc, insn in enumerate(self.slots) if insn is not None}
        changed = True
        while changed:
            changed = False
            for pc in range(self.n - 1, -1, -1):
                if pc not in use_def:
                    continue
                use, define = use_def[pc]
                out = 0
                for succ in self.successors(pc):
                    if succ < self.n:
                        out |= live[succ]
                new = use | (out & ~define)
                if new != live[pc]:
                    live[pc], changed = new, True
        return live

    def prune_points(self) -> set[int]:
        """Where explored states are kept: jump targets, conditional jumps, calls and what
        follows them (the kernel's prune points)."""
        points = set(self.subprogs)
        for pc, insn in enumerate(self.slots):
            if insn is None:
                continue
            kind = OPCODES[insn.opcode].kind
            if kind in (Kind.JA, Kind.JMP, Kind.JCOND):
                points.add(_jump_target(pc, insn))
                if kind is not Kind.JA:
                    points.add(pc)
            elif kind is Kind.CALL:
                points.update((pc, pc + 1))
        return points

    # -- phase 5: every path, every instruction ----------------------------------------------
    def do_check(self, program: VerifiedProgram) -> None:
        """do_check_main: walk the paths from the program's entry (R1 the context, R10 the
        frame pointer), depth first as the kernel does. At a prune point a state equal to
        one this path is already walking from there is an endless loop; one an explored
        state covers needs no walk of its own. A loop that still changes its state after
        LOOP_UNROLL rounds has the values it changes widened to unknown (the kernel would
        walk on, and usually give up at its instruction limit)."""
        self.pseudo = program.pseudo
        self.id_gen = 0
        self.max_ctx = 0
        self.ctx_insns: dict[int, bool] = {}  # pc -> whether a load/store there used ctx
        self.walked: set[int] = set()
        live = self.live_registers()
        prune = self.prune_points()
        explored: dict[int, list[tuple]] = {}
        regs = [UNINIT] * MAX_BPF_REG
        regs[1] = Reg(PTR_TO_CTX, tnum.const(0))
        regs[FP] = Reg(PTR_TO_STACK, tnum.const(0))
        # (pc, state, this path's latest visit of each prune point)
        pending: list[tuple[int, State, dict[int, _Visit]]] = [
            (0, State([Frame(regs, {}, -1, 0)]), {})]
        processed = 0
        while pending:
            pc, state, visits = pending.pop()
            while pc is not None:
                if pc in prune:
                    key = state.key()
                    last = visits.get(pc)
                    _check_endless_loop(pc, key, last)
                    states = explored.setdefault(pc, [])
                    if key in states or any(_covers(old, key, live[pc]) for old in states):
                        break  # is_state_visited: a state explored here covers this one
                    widened = last is not None and last.count >= LOOP_UNROLL
                    if widened:
                        _widen(state, last.state)
                        key = state.key()
                        if key in states or any(_covers(old, key, live[pc]) for old in states):
                            break
                    states.append(key)
                    if len(states) > STATES_PER_INSN:
                        del states[0]
                    visits[pc] = _Visit(key, state.copy(), widened, last,
                                        last.count + 1 if last else 1)
                processed += 1
                self.walked.add(pc)
                if processed > BPF_COMPLEXITY_LIMIT_INSNS:
                    raise _reject(errno.E2BIG, f"BPF program is too large. Processed "
                                  f"{processed} insn")
                pc, pushed = self.do_check_insn(pc, state)
                pending.extend((target, other, dict(visits)) for target, other in pushed)
        self.processed = processed

    def do_check_insn(self, pc: int, state: State) -> tuple[int | None, list]:
        """One instruction's checks and effect on ``state``; returns the next pc (None: the
        path ended) and the (pc, state) pairs to walk later."""
        insn = self.slots[pc]
        info = OPCODES[insn.opcode]
        kind = info.kind
        regs = state.cur.regs
        if kind in (Kind.ALU, Kind.NEG, Kind.END):
            self.check_alu_op(insn, info, regs)
        elif kind in (Kind.LDX, Kind.LDX_SX):
            self.check_load_mem(pc, insn, info, state, kind is Kind.LDX_SX)
        elif kind is Kind.STX:
            if insn.imm:
                raise _reject(errno.EINVAL, "BPF_STX uses reserved fields")
            self.check_store_reg(pc, insn, info, state)
        elif kind is Kind.ATOMIC:
            self.check_atomic(pc, insn, info, state)
        elif kind is Kind.ST:
            if insn.src:
                raise _reject(errno.EINVAL, "BPF_ST uses reserved fields")
            self.check_reg_arg(regs, insn.dst, SRC_OP)
            self.check_mem_access(pc, insn, info, state, insn.dst, True, None, imm=insn.imm)
            self.save_aux_ptr_type(pc, regs[insn.dst])
        elif kind is Kind.CALL:
            if insn.src not in (0, BPF_PSEUDO_CALL, BPF_PSEUDO_KFUNC_CALL) or insn.dst \
                    or insn.off and insn.src != BPF_PSEUDO_KFUNC_CALL:
                raise _reject(errno.EINVAL, "BPF_CALL uses reserved fields")
            if insn.src == BPF_PSEUDO_CALL:
                return self.check_func_call(pc, insn, state), []
            self.check_helper_call(pc, insn, state)
        elif kind is Kind.JA:
            if insn.src or insn.dst or (insn.off if info.cls is Class.JMP32 else insn.imm):
                raise _reject(errno.EINVAL, "BPF_JA uses reserved fields")
            return _jump_target(pc, insn), []
        elif kind is Kind.EXIT:
            if insn.imm or insn.src or insn.dst:
                raise _reject(errno.EINVAL, "BPF_EXIT uses reserved fields")
            return self.process_exit(state), []
        elif kind in (Kind.JMP, Kind.JCOND):
            return self.check_cond_jmp_op(pc, insn, info, state)
        elif kind in (Kind.LD_ABS, Kind.LD_IND):
            self.check_ld_abs(insn, info, state)
        else:
            self.check_ld_imm(pc, insn, regs)
        return pc + insn.slots, []

    # -- registers ---------------------------------------------------------------------------
    @staticmethod
    def check_reg_arg(regs: list[Reg], regno: int, t: int) -> None:
        if regno >= MAX_BPF_REG:
            raise _reject(errno.EINVAL, f"R{regno} is invalid")
        if t == SRC_OP:
            if regs[regno].type == NOT_INIT:
                raise _reject(errno.EACCES, f"R{regno} !read_ok")
            return
        if regno == FP:
            raise _reject(errno.EACCES, "frame pointer is read only")
        if t == DST_OP:
            regs[regno] = UNKNOWN

    def new_id(self) -> int:
        self.id_gen += 1
        return self.id_gen

    # -- ALU ---------------------------------------------------------------------------------
    def check_alu_op(self, insn: Instruction, info, regs: list[Reg]) -> None:
        op, k = info.op, info.source is Source.K
        bits = 64 if info.is64 else 32
        dst = insn.dst
        if info.kind in (Kind.NEG, Kind.END):
            if info.kind is Kind.NEG:
                if not k or insn.src or insn.off or insn.imm:
                    raise _reject(errno.EINVAL, "BPF_NEG uses reserved fields")
            elif insn.src or insn.off or insn.imm not in (16, 32, 64) \
                    or (info.is64 and not k):
                raise _reject(errno.EINVAL, "BPF_END uses reserved fields")
            self.check_reg_arg(regs, dst, SRC_OP)
            if regs[dst].type != SCALAR:
                self.check_reg_arg(regs, dst, DST_OP)
                return
            self.check_reg_arg(regs, dst, DST_OP_NO_MARK)
            var = regs[dst].var
            if info.kind is Kind.NEG:
                var = tnum.cast(tnum.neg(var), bits // 8)
            elif k and not info.is64:  # le: the low bits, as they are on a little-endian CPU
                var = tnum.cast(var, insn.imm // 8)
            else:
                var = tnum.bswap(var, insn.imm)
            regs[dst] = Reg(SCALAR, var)
            return
        if op is AluOp.MOV:
            if not k:
                allowed = (0, 8, 16, 32) if info.is64 else (0, 8, 16)
                if info.is64 and insn.off == BPF_ADDR_SPACE_CAST:
                    if insn.imm not in (1, 1 << 16):
                        raise _reject(errno.EINVAL, "addr_space_cast insn can only convert "
                                      "between address space 1 and 0")
                    raise _reject(errno.EINVAL, "addr_space_cast insn can only be used in a "
                                  "program that has an associated arena")
                if insn.off not in allowed or insn.imm:
                    raise _reject(errno.EINVAL, "BPF_MOV uses reserved fields")
                self.check_reg_arg(regs, insn.src, SRC_OP)
            elif insn.src or insn.off:
                raise _reject(errno.EINVAL, "BPF_MOV uses reserved fields")
            self.check_reg_arg(regs, dst, DST_OP_NO_MARK)
            regs[dst] = _mov(insn, info, regs)
            return
        if op not in _ALU_TEXT:
            raise _reject(errno.EINVAL, f"invalid BPF_ALU opcode {op >> 4:x}")
        if not k and (insn.imm or insn.off not in (0, 1)) \
                or k and (insn.src or insn.off not in (0, 1)) \
                or insn.off == 1 and op not in (AluOp.DIV, AluOp.MOD):
            raise _reject(errno.EINVAL, "BPF_ALU uses reserved fields")
        if not k:
            self.check_reg_arg(regs, insn.src, SRC_OP)
        self.check_reg_arg(regs, dst, SRC_OP)
        if k and op in (AluOp.DIV, AluOp.MOD) and insn.imm == 0:
            raise _reject(errno.EINVAL, "div by zero")
        if k and op in (AluOp.LSH, AluOp.RSH, AluOp.ARSH) and not 0 <= insn.imm < bits:
            raise _reject(errno.EINVAL, f"invalid shift {insn.imm}")
        self.check_reg_arg(regs, dst, DST_OP_NO_MARK)
        src = scalar(insn.imm) if k else regs[insn.src]
        regs[dst] = self.adjust_reg_min_max_vals(insn, info, regs[dst], src)

    def adjust_reg_min_max_vals(self, insn: Instruction, info, dst: Reg, src: Reg) -> Reg:
        op = info.op
        if src.is_pointer:
            if dst.is_pointer:
                if op is AluOp.SUB:  # pointer difference (allowed: the loader may leak)
                    return UNKNOWN
                raise _reject(errno.EACCES, f"R{insn.dst} pointer {_ALU_TEXT[op]} pointer "
                              "prohibited")
            return self.adjust_ptr_min_max_vals(insn, info, src, dst, scalar_dst=True)
        if dst.is_pointer:
            return self.adjust_ptr_min_max_vals(insn, info, dst, src, scalar_dst=False)
        return Reg(SCALAR, _scalar_alu(op, dst.var, src.var, 64 if info.is64 else 32))

    def adjust_ptr_min_max_vals(self, insn: Instruction, info, ptr: Reg, off_reg: Reg,
                                scalar_dst: bool) -> Reg:
        dst, op = insn.dst, info.op
        known = off_reg.var.is_const
        if not info.is64:
            if op is AluOp.SUB:
                return UNKNOWN
            raise _reject(errno.EACCES, f"R{dst} 32-bit pointer arithmetic prohibited")
        if ptr.id:
            raise _reject(errno.EACCES, f"R{dst} pointer arithmetic on {ptr.type_str()} "
                          "prohibited, null-check it first")
        if ptr.type == CONST_PTR_TO_MAP and not (known and off_reg.var.value == 0
                                                 and op is AluOp.ADD) \
                or ptr.type in _SOCKET_TYPES or ptr.type == PTR_TO_PACKET_END:
            raise _reject(errno.EACCES, f"R{dst} pointer arithmetic on {ptr.type_str()} "
                          "prohibited")
        value = _s64(off_reg.var.value)
        if known and not -BPF_MAX_VAR_OFF < value < BPF_MAX_VAR_OFF:
            raise _reject(errno.EINVAL, f"math between {ptr.type_str()} pointer and {value} "
                          "is not allowed")
        if op is AluOp.ADD:
            if known:
                return _ptr_at(ptr, ptr.off + value)
            return ptr._replace(var=tnum.add(ptr.var, off_reg.var))
        if op is AluOp.SUB:
            if scalar_dst:
                raise _reject(errno.EACCES, f"R{dst} tried to subtract pointer from scalar")
            if ptr.type == PTR_TO_STACK:
                raise _reject(errno.EACCES, f"R{dst} subtraction from stack pointer "
                              "prohibited")
            if known:
                return _ptr_at(ptr, ptr.off - value)
            return ptr._replace(var=tnum.sub(ptr.var, off_reg.var))
        if op in (AluOp.AND, AluOp.OR, AluOp.XOR):
            raise _reject(errno.EACCES, f"R{dst} bitwise operator {_ALU_TEXT[op]} on pointer "
                          "prohibited")
        raise _reject(errno.EACCES, f"R{dst} pointer arithmetic with {_ALU_TEXT[op]} operator "
                      "prohibited")

    # -- memory ------------------------------------------------------------------------------
    def check_load_mem(self, pc: int, insn: Instruction, info, state: State,
                       ldsx: bool) -> None:
        regs = state.cur.regs
        self.check_reg_arg(regs, insn.src, SRC_OP)
        self.check_reg_arg(regs, insn.dst, DST_OP_NO_MARK)
        base = regs[insn.src]
        self.check_mem_access(pc, insn, info, state, insn.src, False, insn.dst, ldsx=ldsx)
        self.save_aux_ptr_type(pc, base)

    def check_store_reg(self, pc: int, insn: Instruction, info, state: State) -> None:
        regs = state.cur.regs
        self.check_reg_arg(regs, insn.src, SRC_OP)
        self.check_reg_arg(regs, insn.dst, SRC_OP)
        base = regs[insn.dst]
        self.check_mem_access(pc, insn, info, state, insn.dst, True, insn.src)
        self.save_aux_ptr_type(pc, base)

    def check_atomic(self, pc: int, insn: Instruction, info, state: State) -> None:
        regs = state.cur.regs
        imm = insn.imm
        if imm == AtomicOp.LOAD_ACQ:
            self.check_load_mem(pc, insn, info, state, False)
            if not _atomic_ptr_type_ok(regs[insn.src]):
                raise _reject(errno.EACCES, f"BPF_ATOMIC loads from R{insn.src} "
                              f"{regs[insn.src].type_str()} is not allowed")
            return
        if imm == AtomicOp.STORE_REL:
            self.check_store_reg(pc, insn, info, state)
            if not _atomic_ptr_type_ok(regs[insn.dst]):
                raise _reject(errno.EACCES, f"BPF_ATOMIC stores into R{insn.dst} "
                              f"{regs[insn.dst].type_str()} is not allowed")
            return
        if imm not in _ATOMIC_RMW:
            raise _reject(errno.EINVAL, f"BPF_ATOMIC uses invalid atomic opcode "
                          f"{imm & M32:02x}")
        if info.size not in (Size.W, Size.DW):
            raise _reject(errno.EINVAL, "invalid atomic operand size")
        self.check_reg_arg(regs, insn.src, SRC_OP)
        self.check_reg_arg(regs, insn.dst, SRC_OP)
        if imm == AtomicOp.CMPXCHG:
            self.check_reg_arg(regs, 0, SRC_OP)
        if not _atomic_ptr_type_ok(regs[insn.dst]):
            raise _reject(errno.EACCES, f"BPF_ATOMIC stores into R{insn.dst} "
                          f"{regs[insn.dst].type_str()} is not allowed")
        load_reg = None
        if imm & 1:  # fetch: the old value goes to src (to R0 for cmpxchg)
            load_reg = 0 if imm == AtomicOp.CMPXCHG else insn.src
            self.check_reg_arg(regs, load_reg, DST_OP)
        self.check_mem_access(pc, insn, info, state, insn.dst, False, load_reg, strict=True)
        self.check_mem_access(pc, insn, info, state, insn.dst, True, None, strict=True)

    def save_aux_ptr_type(self, pc: int, base: Reg) -> None:
        """The same instruction may not access the context on one path and other memory on
        another (its context accesses are rewritten)."""
        ctx = base.type == PTR_TO_CTX
        known = base.type in (PTR_TO_STACK, PTR_TO_MAP_VALUE, *_PKT_TYPES)
        if not ctx and not known:
            return
        if self.ctx_insns.setdefault(pc, ctx) != ctx:
            raise _reject(errno.EINVAL, "same insn cannot be used with different pointers")

    def check_mem_access(self, pc: int, insn: Instruction, info, state: State, regno: int,
                         write: bool, value_regno: int | None, *, ldsx: bool = False,
                         imm: int | None = None, strict: bool = False) -> None:
        """check_mem_access: ``regno`` + insn.off, ``info.nbytes`` bytes; a read's result
        goes to ``value_regno`` (None: none), a write's value comes from it (or ``imm``)."""
        regs = state.cur.regs
        reg = regs[regno]
        size = info.nbytes
        off = insn.off + reg.off
        if reg.type == PTR_TO_STACK or strict and reg.type in (PTR_TO_CTX, PTR_TO_MAP_VALUE):
            if reg.var.is_const and (reg.var.value + off) % size:
                desc = {PTR_TO_STACK: "stack ", PTR_TO_CTX: "context ",
                        PTR_TO_MAP_VALUE: "value "}[reg.type]
                raise _reject(errno.EACCES, f"misaligned {desc}access off "
                              f"{_tnum_str(reg.var)}+{reg.off}+{insn.off} size {size}")
        result = UNKNOWN
        if reg.type == PTR_TO_MAP_VALUE and not reg.id:
            self.check_map_value_access(regno, reg, off, size, write)
        elif reg.type == PTR_TO_CTX:
            result = self.check_ctx_access(regno, reg, off, size, write, ldsx)
        elif reg.type == PTR_TO_STACK:
            if not reg.var.is_const:
                result = UNKNOWN  # a variable offset: bounds are value ranges, not kept here
            else:
                off += _s64(reg.var.value)
                self.check_stack_access_within_bounds(regno, off, size, write)
                frame = state.frames[reg.frame]
                if write:
                    value = regs[value_regno] if value_regno is not None else None
                    self.check_stack_write(frame, state.cur, off, size, value, imm)
                else:
                    result = _stack_read(frame, off, size)
        elif reg.type in _PKT_TYPES:
            if write and self.prog_type not in DIRECT_WRITE_PROG_TYPES:
                raise _reject(errno.EACCES, "cannot write into packet")
        elif reg.type == SCALAR or reg.id or reg.type == PTR_TO_PACKET_END:
            raise _reject(errno.EACCES, f"R{regno} invalid mem access '{reg.type_str()}'")
        if write or value_regno is None:
            return
        if result.type == SCALAR and size < BPF_REG_SIZE:
            result = Reg(SCALAR, _coerce(result.var, size, ldsx))
        regs[value_regno] = result

    def check_map_value_access(self, regno: int, reg: Reg, off: int, size: int,
                               write: bool) -> None:
        bpf_map = reg.map
        if bpf_map is None:
            return
        flag = BPF_F_RDONLY_PROG if write else BPF_F_WRONLY_PROG
        if bpf_map.map_flags & flag:
            access = "write into" if write else "read from"
            raise _reject(errno.EACCES, f"{access} map forbidden, value_size="
                          f"{bpf_map.value_size} off={off} size={size}")
        if not reg.var.is_const:
            return  # a variable offset: its bounds are value ranges, not kept here
        off += _s64(reg.var.value)
        if off < 0 or off + size > bpf_map.value_size:
            raise _reject(errno.EACCES, f"invalid access to map value, value_size="
                          f"{bpf_map.value_size} off={off} size={size}\nR{regno} min value is "
                          "outside of the allowed memory range")

    def check_ctx_access(self, regno: int, reg: Reg, off: int, size: int, write: bool,
                         ldsx: bool) -> Reg:
        self.check_ctx_pointer(regno, reg)
        if not ctx_rules.is_valid_access(self.prog_type, off, size, write, ldsx,
                                         self.attach_type):
            raise _reject(errno.EACCES, f"invalid bpf_context access off={off} size={size}")
        self.max_ctx = max(self.max_ctx, off + size)
        ptr = ctx_rules.ctx_field_type(self.prog_type, off)
        if write or ptr is None:
            return UNKNOWN
        if ptr == PTR_TO_SOCK_COMMON_OR_NULL:
            return Reg("sock_common", tnum.const(0), id=self.new_id())
        return Reg(ptr, tnum.const(0))

    @staticmethod
    def check_stack_access_within_bounds(regno: int, off: int, size: int,
                                         write: bool) -> None:
        if off < -MAX_BPF_STACK or off + size > 0:
            access = "write to" if write else "read from"
            raise _reject(errno.EACCES, f"invalid {access} stack R{regno} off={off} "
                          f"size={size}")

    @staticmethod
    def check_stack_write(frame: Frame, cur: Frame, off: int, size: int, value: Reg | None,
                          imm: int | None) -> None:
        """check_stack_write_fixed_off: spill a register (or BPF_ST's immediate) to an
        aligned slot, or mark the bytes written as data (zeros when the value is 0)."""
        slot = -off - 1
        spi = slot // BPF_REG_SIZE
        old = frame.stack.get(spi, EMPTY_SLOT)
        if value is not None and off % BPF_REG_SIZE == 0 and value.type == SCALAR \
                or value is None and imm is not None and off % BPF_REG_SIZE == 0:
            frame.stack[spi] = _spill(old, value if value is not None else scalar(imm), size)
            return
        if value is not None and value.is_pointer:
            if size != BPF_REG_SIZE:
                raise _reject(errno.EACCES, "invalid size of register spill")
            if frame is not cur and value.type == PTR_TO_STACK:
                raise _reject(errno.EINVAL, "cannot spill pointers to stack into stack frame "
                              "of the caller")
            frame.stack[spi] = _spill(old, value, size)
            return
        zero = value.var == tnum.const(0) if value is not None else imm == 0
        types = list(old.types)
        if types[BPF_REG_SIZE - 1] == STACK_SPILL:  # the spill is gone: its bytes are data
            types = [t if t == STACK_INVALID else STACK_MISC for t in types]
        for i in range(size):
            types[(slot - i) % BPF_REG_SIZE] = STACK_ZERO if zero else STACK_MISC
        frame.stack[spi] = Slot("".join(types), UNINIT)

    # -- calls and exits ---------------------------------------------------------------------
    def check_helper_call(self, pc: int, insn: Instruction, state: State) -> None:
        func_id = insn.imm
        if func_id not in BpfFunc._value2member_map_ or func_id == 0:
            raise _reject(errno.EINVAL, f"invalid func unknown#{func_id}")
        proto = HELPERS.get(func_id)
        name = f"bpf_{BpfFunc(func_id).name}"
        if proto is None:
            raise _reject(errno.EINVAL, f"program of this type cannot use helper {name}#{func_id}"
                          " (the emulated backend does not implement it)")
        if proto.prog_types is not None and self.prog_type not in proto.prog_types:
            raise _reject(errno.EINVAL, f"program of this type cannot use helper {name}#{func_id}")
        if proto.gpl_only and not self.gpl:
            raise _reject(errno.EINVAL, "cannot call GPL-restricted function from non-GPL "
                          "compatible program")
        regs = state.cur.regs
        bpf_map = None  # meta->map_ptr: the map argument, once seen (None: not known here)
        for regno in range(1, len(proto.args) + 1):
            bpf_map = self.check_func_arg(state, func_id, proto.args, regno, bpf_map)
        if bpf_map is not None and func_id in _MAP_WRITING_HELPERS \
                and bpf_map.map_flags & BPF_F_RDONLY_PROG:
            raise _reject(errno.EACCES, "write into map forbidden")
        if bpf_map is not None:
            _check_map_func_compatibility(bpf_map, func_id, name)
        result = UNKNOWN
        if func_id in _VALUE_RETURNING_HELPERS:
            result = self.map_lookup_result(state, bpf_map, regs[2], func_id)
        elif func_id == BpfFunc.tail_call:
            result = UNINIT  # RET_VOID: R0 is not readable after a failed tail call
        self.clobber_helper_memory(state, func_id, bpf_map, regs)
        for regno in CALLER_SAVED:
            regs[regno] = UNINIT
        regs[0] = result

    def check_func_arg(self, state: State, func_id: int, args: tuple[str, ...], regno: int,
                       bpf_map: Any) -> Any:
        """check_func_arg: the argument is readable and of a type ``arg`` takes; memory it
        points to (a key, a value, a sized buffer) lies where the pointer may reach. Returns
        the map argument seen so far."""
        regs = state.cur.regs
        arg = args[regno - 1]
        self.check_reg_arg(regs, regno, SRC_OP)
        if arg == ARG_ANYTHING:
            return bpf_map
        reg = regs[regno]
        if bpf_map is not None and map_traits(bpf_map.map_type).sockets:
            if arg == ARG_PTR_TO_MAP_VALUE:  # resolve_map_arg_type: the value is a socket
                arg = _ARG_SOCK_COMMON
            elif arg not in (ARG_CONST_MAP_PTR, ARG_PTR_TO_MAP_KEY):
                raise _reject(errno.EINVAL, "invalid arg_type for sockmap/sockhash")
        expected = _ARG_TYPES[arg]
        if reg.id or reg.type not in expected:
            raise _reject(errno.EACCES, f"R{regno} type={reg.type_str()} expected="
                          + ", ".join(expected))
        if arg == ARG_PTR_TO_CTX:
            self.check_ctx_pointer(regno, reg)
        elif arg == ARG_CONST_MAP_PTR:
            bpf_map = reg.map
            if func_id == BpfFunc.tail_call and bpf_map is not None \
                    and bpf_map.map_type != MapType.PROG_ARRAY:
                raise _reject(errno.EINVAL, "expected prog array map for tail call")
        elif arg == ARG_PTR_TO_MAP_KEY and bpf_map is not None:
            self.check_helper_mem_access(state, regno, bpf_map.key_size, False, False)
        elif arg in (ARG_PTR_TO_MAP_VALUE, ARG_PTR_TO_UNINIT_MAP_VALUE) and bpf_map is not None:
            self.check_helper_mem_access(state, regno, bpf_map.value_size,
                                         arg == ARG_PTR_TO_UNINIT_MAP_VALUE, False)
        elif arg in (ARG_CONST_SIZE, ARG_CONST_SIZE_OR_ZERO) and reg.is_const:
            size = reg.var.value
            if not size and arg == ARG_CONST_SIZE:
                raise _reject(errno.EACCES, f"R{regno} invalid zero-sized read: u64=[0,0]")
            self.check_helper_mem_access(state, regno - 1, size,
                                         args[regno - 2] == ARG_PTR_TO_UNINIT_MEM, True)
        return bpf_map

    @staticmethod
    def check_helper_mem_access(state: State, regno: int, size: int, write: bool,
                                zero_size_allowed: bool) -> None:
        """The ``size`` bytes a helper reads or writes at a stack pointer or map value with a
        known offset are all there."""
        reg = state.cur.regs[regno]
        if not reg.var.is_const:
            return  # a variable offset: its bounds are value ranges, not kept here
        off = reg.off + _s64(reg.var.value)
        if reg.type == PTR_TO_STACK:
            if not size and not zero_size_allowed:
                raise _reject(errno.EACCES, "invalid zero-sized read")
            access = "write to" if write else "read from"
            if off < -MAX_BPF_STACK or off + size > 0:
                err = errno.EACCES if off < -MAX_BPF_STACK else errno.EINVAL
                raise _reject(err, f"invalid {access} stack R{regno} off={off} size={size}")
        elif reg.type == PTR_TO_MAP_VALUE and reg.map is not None and size:
            if off < 0 or off + size > reg.map.value_size:
                raise _reject(errno.EACCES, f"invalid access to map value, value_size="
                              f"{reg.map.value_size} off={off} size={size}")

    def check_ctx_pointer(self, regno: int, reg: Reg) -> None:
        """check_ptr_off_reg: the context is used only as it came, unmodified."""
        if reg.off < 0:
            raise _reject(errno.EACCES, f"negative offset ctx ptr R{regno} off={reg.off} "
                          "disallowed")
        if reg.off:
            raise _reject(errno.EACCES, f"dereference of modified ctx ptr R{regno} "
                          f"off={reg.off} disallowed")
        if reg.var != tnum.const(0):
            raise _reject(errno.EACCES, f"variable ctx access var_off={_tnum_str(reg.var)} "
                          "disallowed")

    def map_lookup_result(self, state: State, bpf_map: Any, key: Reg, func_id: int) -> Reg:
        """A map value pointer, which may be NULL unless the map is an array and the key a
        constant on the stack that is in range (the kernel elides the check)."""
        if bpf_map is not None and map_traits(bpf_map.map_type).map_in_map:
            return Reg(CONST_PTR_TO_MAP, tnum.const(0), id=self.new_id())
        if bpf_map is not None and map_traits(bpf_map.map_type).sockets:
            ref = self.new_id()  # a socket the program holds until it is NULL or released
            state.refs.add(ref)
            return Reg(PTR_TO_SOCKET, tnum.const(0), id=ref)
        if func_id == BpfFunc.map_lookup_elem and bpf_map is not None \
                and bpf_map.map_type in ELIDE_NULL_MAP_TYPES:
            value = _constant_map_key(state, key, bpf_map.key_size)
            if value is not None and 0 <= _s64(value) < bpf_map.max_entries:
                return Reg(PTR_TO_MAP_VALUE, tnum.const(0), map=bpf_map)
        return Reg(PTR_TO_MAP_VALUE, tnum.const(0), map=bpf_map, id=self.new_id())

    @staticmethod
    def clobber_helper_memory(state: State, func_id: int, bpf_map: Any,
                              regs: list[Reg]) -> None:
        """Helpers that write into stack memory leave data there the program does not know."""
        if func_id == BpfFunc.probe_read_user:
            buf, size = regs[1], regs[2].var.value if regs[2].is_const else None
        elif func_id in (BpfFunc.map_pop_elem, BpfFunc.map_peek_elem):
            buf, size = regs[2], bpf_map.value_size if bpf_map is not None else None
        else:
            return
        if buf.type != PTR_TO_STACK or not buf.var.is_const:
            return
        frame = state.frames[buf.frame]
        start = buf.off + _s64(buf.var.value)
        end = 0 if size is None else min(0, start + size)
        for byte in range(max(start, -MAX_BPF_STACK), end):
            slot = -byte - 1
            spi = slot // BPF_REG_SIZE
            old = frame.stack.get(spi, EMPTY_SLOT)
            types = list(old.types)
            types[slot % BPF_REG_SIZE] = STACK_MISC
            frame.stack[spi] = Slot("".join(types), UNINIT)

    def check_func_call(self, pc: int, insn: Instruction, state: State) -> int:
        """A bpf-to-bpf call: the callee runs in a frame of its own, with the caller's R1-R5;
        the caller's R1-R5 are not readable after it."""
        if len(state.frames) >= MAX_CALL_FRAMES:
            raise _reject(errno.E2BIG, f"the call stack of {len(state.frames) + 1} frames is "
                          "too deep")
        caller = state.cur
        regs = [UNINIT] * MAX_BPF_REG
        regs[1:6] = caller.regs[1:6]
        depth = len(state.frames)
        regs[FP] = Reg(PTR_TO_STACK, tnum.const(0), frame=depth)
        state.frames.append(Frame(regs, {}, pc, depth))
        for regno in range(1, 6):
            caller.regs[regno] = UNINIT
        return pc + insn.imm + 1

    def process_exit(self, state: State) -> int | None:
        """The main program's exit ends the path (R0 must be readable and, for some
        program types, a known value in range); a callee's returns to its caller."""
        insn_regs = state.cur.regs
        if len(state.frames) > 1:
            callee = state.frames.pop()
            r0 = callee.regs[0]
            if r0.type == PTR_TO_STACK:
                raise _reject(errno.EINVAL, "cannot return stack pointer to the caller")
            state.cur.regs[0] = r0
            return callee.callsite + 1
        if state.refs:
            raise _reject(errno.EINVAL, "BPF_EXIT instruction in main prog would lead to "
                          "reference leak")
        self.check_reg_arg(insn_regs, 0, SRC_OP)
        self.check_return_code(insn_regs[0])
        return None

    def check_return_code(self, r0: Reg) -> None:
        low, high = 0, 1
        if self.prog_type == ProgType.CGROUP_SKB:
            if self.attach_type == AttachType.CGROUP_INET_EGRESS:
                high = 3
        else:
            return
        if r0.type != SCALAR:
            raise _reject(errno.EINVAL, f"At program exit the register R0 is not a known value "
                          f"({r0.type_str()})")
        value = _s64(r0.var.value)
        if r0.var.is_const and not low <= value <= high:
            raise _reject(errno.EINVAL, f"At program exit the register R0 has smin={value} "
                          f"smax={value} should have been in [{low}, {high}]")

    # -- jumps -------------------------------------------------------------------------------
    def check_cond_jmp_op(self, pc: int, insn: Instruction, info,
                          state: State) -> tuple[int, list]:
        if info.kind is Kind.JCOND:
            if insn.src or insn.dst or insn.imm:
                raise _reject(errno.EINVAL, f"invalid may_goto imm {insn.imm}")
            return _jump_target(pc, insn), [(pc + 1, state.copy())]
        regs = state.cur.regs
        self.check_reg_arg(regs, insn.dst, SRC_OP)
        if info.source is Source.X:
            if insn.imm:
                raise _reject(errno.EINVAL, "BPF_JMP/JMP32 uses reserved fields")
            self.check_reg_arg(regs, insn.src, SRC_OP)
            src = regs[insn.src]
        else:
            if insn.src:
                raise _reject(errno.EINVAL, "BPF_JMP/JMP32 uses reserved fields")
            src = scalar(insn.imm)
        dst = regs[insn.dst]
        is_jmp32 = not info.is64
        target = pc + insn.off + 1
        taken = _is_branch_taken(dst, src, info.op, is_jmp32)
        if taken is not None:
            return (target if taken else pc + 1), []
        other = state.copy()
        other_regs = other.cur.regs
        if dst.type == SCALAR and src.type == SCALAR:
            _refine(other_regs, regs, insn, info.op, is_jmp32)
        if not is_jmp32 and info.source is Source.K and insn.imm == 0 \
                and info.op in (JmpOp.JEQ, JmpOp.JNE) and dst.id:
            _mark_ptr_or_null_regs(state, dst.id, is_null=info.op is JmpOp.JNE)
            _mark_ptr_or_null_regs(other, dst.id, is_null=info.op is JmpOp.JEQ)
        return pc + 1, [(target, other)]

    # -- legacy packet loads and 64-bit immediates -------------------------------------------
    def check_ld_abs(self, insn: Instruction, info, state: State) -> None:
        regs = state.cur.regs
        if self.prog_type not in LD_ABS_PROG_TYPES:
            raise _reject(errno.EINVAL, "BPF_LD_[ABS|IND] instructions not allowed for this "
                          "program type")
        if insn.dst or insn.off or info.kind is Kind.LD_ABS and insn.src:
            raise _reject(errno.EINVAL, "BPF_LD_[ABS|IND] uses reserved fields")
        if len(self.subprogs) > 1:
            raise _reject(errno.EINVAL, "BPF_LD_[ABS|IND] instructions cannot be mixed with "
                          "bpf-to-bpf calls")
        self.check_reg_arg(regs, 6, SRC_OP)
        if state.refs:
            raise _reject(errno.EINVAL, "BPF_LD_[ABS|IND] would lead to reference leak")
        if regs[6].type != PTR_TO_CTX:
            raise _reject(errno.EINVAL, "at the time of BPF_LD_ABS|IND R6 != pointer to skb")
        if info.kind is Kind.LD_IND:
            self.check_reg_arg(regs, insn.src, SRC_OP)
        if regs[6].off:
            raise _reject(errno.EACCES, f"dereference of modified ctx ptr R6 off={regs[6].off} "
                          "disallowed")
        for regno in CALLER_SAVED:
            regs[regno] = UNINIT
        regs[0] = UNKNOWN

    def check_ld_imm(self, pc: int, insn: Instruction, regs: list[Reg]) -> None:
        if insn.off:
            raise _reject(errno.EINVAL, "BPF_LD_IMM64 uses reserved fields")
        self.check_reg_arg(regs, insn.dst, DST_OP)
        if insn.src == 0:
            regs[insn.dst] = scalar(insn.imm)
            return
        if insn.src == BPF_PSEUDO_FUNC:
            # callbacks (bpf_loop, timers, ...) need BTF func_info, which loads here do not pass
            raise _reject(errno.EINVAL, "missing btf func_info")
        kind, target, off = self.pseudo[pc]
        if kind == "map":
            regs[insn.dst] = Reg(CONST_PTR_TO_MAP, tnum.const(0), map=target)
        else:
            regs[insn.dst] = Reg(PTR_TO_MAP_VALUE, tnum.const(0), off=off,
                                 map=self.pseudo_map[pc])


SRC_OP, DST_OP, DST_OP_NO_MARK = 0, 1, 2


class _Visit(NamedTuple):
    """A path's visit of a prune point, linked to its previous visit of the same one."""

    key: tuple
    state: State
    widened: bool
    previous: _Visit | None
    count: int


def _check_endless_loop(pc: int, key: tuple, visit: _Visit | None) -> None:
    """is_state_visited: this path is back at ``pc`` in a state it had there in one of the
    last LOOP_PERIOD rounds (and had not widened), so it would go round forever."""
    for _ in range(LOOP_PERIOD):
        if visit is None:
            return
        if not visit.widened and visit.key == key:
            raise _reject(errno.EINVAL, f"infinite loop detected at insn {pc}")
        visit = visit.previous


def _widen(state: State, before: State) -> None:
    """widen_imprecise_scalars: a scalar (or a pointer's offset) that differs from the
    previous round becomes unknown."""
    for frame, old in zip(state.frames, before.frames, strict=False):
        for regno, (reg, was) in enumerate(zip(frame.regs, old.regs, strict=True)):
            frame.regs[regno] = _widen_reg(reg, was)
        for spi, slot in frame.stack.items():
            was = old.stack.get(spi, EMPTY_SLOT).spilled
            frame.stack[spi] = slot._replace(spilled=_widen_reg(slot.spilled, was))


def _widen_reg(reg: Reg, was: Reg) -> Reg:
    if reg == was or reg.type != was.type or reg.type == NOT_INIT:
        return reg
    if reg.type == SCALAR:
        return UNKNOWN
    if reg.map is not was.map or reg.frame != was.frame:
        return reg
    return reg._replace(off=was.off, var=tnum.UNKNOWN)  # the change is in the unknown part


def _callback_target(pc: int, insn: Instruction) -> int:
    """The first slot of the subprogram a BPF_PSEUDO_FUNC lddw points to (low imm: offset)."""
    offset = insn.imm & 0xFFFFFFFF
    return pc + (offset - (1 << 32) if offset >> 31 else offset) + 1


def _jump_target(pc: int, insn: Instruction) -> int:
    if insn.opcode == GOTOL:
        return pc + insn.imm + 1
    return pc + insn.off + 1


# Program types that may write packet data directly (may_access_direct_pkt_data).
DIRECT_WRITE_PROG_TYPES = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.XDP,
                                     ProgType.LWT_XMIT, ProgType.SK_SKB, ProgType.SK_MSG})
_ALU_TEXT = {AluOp.ADD: "+=", AluOp.SUB: "-=", AluOp.MUL: "*=", AluOp.DIV: "/=",
             AluOp.OR: "|=", AluOp.AND: "&=", AluOp.LSH: "<<=", AluOp.RSH: ">>=",
             AluOp.MOD: "%=", AluOp.XOR: "^=", AluOp.ARSH: "s>>="}
_ATOMIC_RMW = frozenset(int(op) | fetch for op in (AtomicOp.ADD, AtomicOp.OR, AtomicOp.AND,
                                                    AtomicOp.XOR) for fetch in (0, 1)) \
    | {int(AtomicOp.XCHG), int(AtomicOp.CMPXCHG)}
_ARG_SOCK_COMMON = "sock_common"  # a sockmap's value argument (ARG_PTR_TO_BTF_ID_SOCK_COMMON)
_MEM_TYPES = (PTR_TO_STACK, PTR_TO_PACKET, PTR_TO_PACKET_META, "map_key", PTR_TO_MAP_VALUE,
              "mem", "ringbuf_mem", "buf", "trusted_ptr_")
# compatible_reg_types: the register types each argument type takes (the kernel's list, in
# its order, names the message prints; types this verifier never gives are names only)
_ARG_TYPES = {
    ARG_CONST_MAP_PTR: (CONST_PTR_TO_MAP,), ARG_PTR_TO_CTX: (PTR_TO_CTX,),
    ARG_PTR_TO_MAP_KEY: _MEM_TYPES, ARG_PTR_TO_MAP_VALUE: _MEM_TYPES,
    ARG_PTR_TO_UNINIT_MAP_VALUE: _MEM_TYPES, ARG_PTR_TO_MEM: _MEM_TYPES,
    ARG_PTR_TO_UNINIT_MEM: _MEM_TYPES, ARG_CONST_SIZE: (SCALAR,),
    ARG_CONST_SIZE_OR_ZERO: (SCALAR,),
    _ARG_SOCK_COMMON: ("sock_common", PTR_TO_SOCKET, "tcp_sock", "xdp_sock", "ptr_",
                       "trusted_ptr_"),
}
# check_map_func_compatibility: the helpers (of those emulated) a map type may be passed to,
# where it is restricted, and the map types a helper takes, where it is
_MAP_FUNCS = {
    MapType.PROG_ARRAY: {BpfFunc.tail_call}, MapType.PERF_EVENT_ARRAY: set(),
    MapType.RINGBUF: set(), MapType.CPUMAP: {BpfFunc.redirect_map},
    MapType.DEVMAP: {BpfFunc.redirect_map, BpfFunc.map_lookup_elem},
    MapType.DEVMAP_HASH: {BpfFunc.redirect_map, BpfFunc.map_lookup_elem},
    MapType.XSKMAP: {BpfFunc.redirect_map, BpfFunc.map_lookup_elem},
    MapType.QUEUE: {BpfFunc.map_push_elem, BpfFunc.map_pop_elem, BpfFunc.map_peek_elem},
    MapType.STACK: {BpfFunc.map_push_elem, BpfFunc.map_pop_elem, BpfFunc.map_peek_elem},
    MapType.BLOOM_FILTER: {BpfFunc.map_push_elem, BpfFunc.map_peek_elem},
    MapType.SOCKMAP: {BpfFunc.sk_redirect_map, BpfFunc.map_delete_elem,
                      BpfFunc.map_lookup_elem, BpfFunc.map_update_elem},
    MapType.SOCKHASH: {BpfFunc.sk_redirect_hash, BpfFunc.map_delete_elem,
                       BpfFunc.map_lookup_elem, BpfFunc.map_update_elem},
    MapType.ARRAY_OF_MAPS: {BpfFunc.map_lookup_elem},
    MapType.HASH_OF_MAPS: {BpfFunc.map_lookup_elem},
}
_FUNC_MAPS = {
    BpfFunc.redirect_map: {MapType.DEVMAP, MapType.DEVMAP_HASH, MapType.CPUMAP, MapType.XSKMAP},
    BpfFunc.sk_redirect_map: {MapType.SOCKMAP}, BpfFunc.sk_redirect_hash: {MapType.SOCKHASH},
    BpfFunc.map_lookup_percpu_elem: {MapType.PERCPU_HASH, MapType.PERCPU_ARRAY,
                                     MapType.LRU_PERCPU_HASH},
    BpfFunc.map_pop_elem: {MapType.QUEUE, MapType.STACK},
    BpfFunc.map_peek_elem: {MapType.QUEUE, MapType.STACK, MapType.BLOOM_FILTER},
    BpfFunc.map_push_elem: {MapType.QUEUE, MapType.STACK, MapType.BLOOM_FILTER},
}


def _check_map_func_compatibility(bpf_map: Any, func_id: int, name: str) -> None:
    funcs = _MAP_FUNCS.get(bpf_map.map_type)
    maps = _FUNC_MAPS.get(func_id)
    if funcs is not None and func_id not in funcs \
            or maps is not None and bpf_map.map_type not in maps:
        raise _reject(errno.EINVAL, f"cannot pass map_type {bpf_map.map_type} into func "
                      f"{name}#{func_id}")


_MAP_WRITING_HELPERS = frozenset({BpfFunc.map_update_elem, BpfFunc.map_delete_elem,
                                  BpfFunc.map_push_elem, BpfFunc.map_pop_elem})
_VALUE_RETURNING_HELPERS = frozenset({BpfFunc.map_lookup_elem,
                                      BpfFunc.map_lookup_percpu_elem})


def _s64(value: int) -> int:
    value &= M64
    return value - (1 << 64) if value >> 63 else value


def _tnum_str(var: Tnum) -> str:
    return str(_s64(var.value)) if var.is_const else f"(0x{var.value:x}; 0x{var.mask:x})"


def _ptr_at(ptr: Reg, off: int) -> Reg:
    if not -BPF_MAX_VAR_OFF < off < BPF_MAX_VAR_OFF:
        raise _reject(errno.EINVAL, f"{ptr.type_str()} pointer offset {off} is not allowed")
    return ptr._replace(off=off)


def _mov(insn: Instruction, info, regs: list[Reg]) -> Reg:
    """What a mov leaves in dst: the immediate, a copy of src, or src's low bits (sign- or
    zero-extended); the low 32 bits of a pointer are an unknown scalar."""
    if info.source is Source.K:
        return scalar(insn.imm if info.is64 else insn.imm & M32)
    src = regs[insn.src]
    if info.is64 and not insn.off:
        return src
    if src.type != SCALAR:
        return UNKNOWN if info.is64 else Reg(SCALAR, tnum.cast(tnum.UNKNOWN, 4))
    if not insn.off:
        return Reg(SCALAR, tnum.cast(src.var, 4))
    var = _coerce(src.var, insn.off // 8, True)
    return Reg(SCALAR, var if info.is64 else tnum.cast(var if var.is_const else tnum.UNKNOWN, 4))


def _coerce(var: Tnum, size: int, sign_extend: bool) -> Tnum:
    """A load's (or movsx's) ``size`` low bytes, zero- or sign-extended (coerce_reg_to_size,
    coerce_reg_to_size_sx)."""
    bits = 8 * size
    if not sign_extend:
        return tnum.cast(var, size)
    if var.is_const:
        return tnum.const(tnum._signed(var.value & ((1 << bits) - 1), bits))
    smin, smax = var.smin(), var.smax()
    if smin >> bits != smax >> bits:
        return tnum.UNKNOWN
    low = sorted(tnum._signed(v & ((1 << bits) - 1), bits) for v in (smin, smax))
    if (low[0] >= 0) != (low[1] >= 0):
        return tnum.UNKNOWN
    return tnum.tnum_range(low[0] & M64, low[1] & M64)


def _scalar_alu(op: AluOp, dst: Tnum, src: Tnum, bits: int) -> Tnum:
    """adjust_scalar_min_max_vals on the known bits: the kernel's tnum operations; a shift by
    an amount not known to be in range, a division or a modulo leave nothing known."""
    if op in (AluOp.LSH, AluOp.RSH, AluOp.ARSH):
        if not src.is_const or src.value >= bits:
            return tnum.UNKNOWN
        if op is AluOp.LSH:
            result = tnum.lshift(dst if bits == 64 else tnum.subreg(dst), src.value)
        elif op is AluOp.RSH:
            result = tnum.rshift(dst if bits == 64 else tnum.subreg(dst), src.value)
        else:
            result = tnum.arshift(dst if bits == 64 else tnum.subreg(dst), src.value, bits)
    elif op in (AluOp.DIV, AluOp.MOD):
        return tnum.UNKNOWN
    else:
        result = {AluOp.ADD: tnum.add, AluOp.SUB: tnum.sub, AluOp.MUL: tnum.mul,
                  AluOp.AND: tnum.and_, AluOp.OR: tnum.or_, AluOp.XOR: tnum.xor}[op](dst, src)
    return result if bits == 64 else tnum.subreg(result)


def _is_branch_taken(dst: Reg, src: Reg, op: JmpOp, is_jmp32: bool) -> bool | None:
    """is_branch_taken: True/False when the known bits (or a pointer known not to be NULL,
    compared with 0) decide the branch, None when both ways are possible."""
    if dst.is_pointer or src.is_pointer:
        ptr, other = (dst, src) if src.type == SCALAR else (src, dst)
        if other.type != SCALAR or not _const_in(other.var, is_jmp32) or ptr.id \
                or ptr.type not in _NOT_NULL_TYPES:
            return None
        if _low(other.var, is_jmp32).value:
            return None
        return {JmpOp.JEQ: False, JmpOp.JNE: True}.get(op)
    t1, t2 = _low(dst.var, is_jmp32), _low(src.var, is_jmp32)
    bits = 32 if is_jmp32 else 64
    if op in (JmpOp.JEQ, JmpOp.JNE):
        equal = None
        if t1.is_const and t2.is_const:
            equal = t1.value == t2.value
        elif (t1.value ^ t2.value) & ~(t1.mask | t2.mask) \
                or t1.umin() > t2.umax() or t1.umax() < t2.umin() \
                or t1.smin(bits) > t2.smax(bits) or t1.smax(bits) < t2.smin(bits):
            equal = False
        if equal is None:
            return None
        return equal if op is JmpOp.JEQ else not equal
    if op is JmpOp.JSET:
        if not t2.is_const:
            t1, t2 = t2, t1
        if not t2.is_const:
            return None
        if t1.value & t2.value:
            return True
        if not (t1.mask | t1.value) & t2.value:
            return False
        return None
    signed = op in (JmpOp.JSGT, JmpOp.JSGE, JmpOp.JSLT, JmpOp.JSLE)
    lo1, hi1 = (t1.smin(bits), t1.smax(bits)) if signed else (t1.umin(), t1.umax())
    lo2, hi2 = (t2.smin(bits), t2.smax(bits)) if signed else (t2.umin(), t2.umax())
    if op in (JmpOp.JGT, JmpOp.JSGT):
        return True if lo1 > hi2 else False if hi1 <= lo2 else None
    if op in (JmpOp.JGE, JmpOp.JSGE):
        return True if lo1 >= hi2 else False if hi1 < lo2 else None
    if op in (JmpOp.JLT, JmpOp.JSLT):
        return True if hi1 < lo2 else False if lo1 >= hi2 else None
    return True if hi1 <= lo2 else False if lo1 > hi2 else None  # JLE, JSLE


# reg_not_null: pointers that are never NULL (a map value once checked, a map, a socket)
_NOT_NULL_TYPES = frozenset({PTR_TO_MAP_VALUE, CONST_PTR_TO_MAP, *_SOCKET_TYPES})


def _low(var: Tnum, is_jmp32: bool) -> Tnum:
    return tnum.subreg(var) if is_jmp32 else var


def _const_in(var: Tnum, is_jmp32: bool) -> bool:
    return _low(var, is_jmp32).is_const


def _refine(taken: list[Reg], fallthrough: list[Reg], insn: Instruction, op: JmpOp,
            is_jmp32: bool) -> None:
    """regs_refine_cond_op, for the known bits: where a branch says two scalars are equal
    (JEQ taken, JNE not) both get the bits either has; where JSET with a constant says bits
    are clear, they are known 0, and where it says a single bit is set, that bit is 1."""
    dst, src_reg = insn.dst, insn.src if insn.opcode & Source.X else None

    def same(regs: list[Reg]) -> None:
        a = regs[dst].var
        b = regs[src_reg].var if src_reg is not None else tnum.const(_imm(insn, is_jmp32))
        if is_jmp32:
            both = tnum.intersect(tnum.subreg(a), tnum.subreg(b))
            regs[dst] = Reg(SCALAR, tnum.with_subreg(a, both))
            if src_reg is not None:
                regs[src_reg] = Reg(SCALAR, tnum.with_subreg(b, both))
        else:
            regs[dst] = Reg(SCALAR, tnum.intersect(a, b))
            if src_reg is not None:
                regs[src_reg] = regs[dst]

    def bits(regs: list[Reg], regno: int, combine, value: int) -> None:
        var = regs[regno].var
        if is_jmp32:
            var = tnum.with_subreg(var, combine(tnum.subreg(var), tnum.const(value & M32)))
        else:
            var = combine(var, tnum.const(value))
        regs[regno] = Reg(SCALAR, var)

    if op is JmpOp.JEQ:
        same(taken)
    elif op is JmpOp.JNE:
        same(fallthrough)
    elif op is JmpOp.JSET:
        regno, mask = dst, None  # the register tested against a constant mask
        if src_reg is None:
            mask = _imm(insn, is_jmp32)
        elif _const_in(fallthrough[src_reg].var, is_jmp32):
            mask = _low(fallthrough[src_reg].var, is_jmp32).value
        elif _const_in(fallthrough[dst].var, is_jmp32):
            regno, mask = src_reg, _low(fallthrough[dst].var, is_jmp32).value
        if mask is None:
            return
        if mask and not mask & (mask - 1):
            bits(taken, regno, tnum.or_, mask)
        bits(fallthrough, regno, tnum.and_, ~mask & M64)


def _imm(insn: Instruction, is_jmp32: bool) -> int:
    return insn.imm & (M32 if is_jmp32 else M64)


def _mark_ptr_or_null_regs(state: State, ptr_id: int, is_null: bool) -> None:
    """After a NULL check, every copy of the pointer is the scalar 0 (and a reference it
    held is gone), or not NULL."""
    if is_null:
        state.refs.discard(ptr_id)
    for frame in state.frames:
        for regno, reg in enumerate(frame.regs):
            if reg.id == ptr_id:
                frame.regs[regno] = scalar(0) if is_null else reg._replace(id=0)
        for spi, slot in frame.stack.items():
            if slot.spilled.id == ptr_id:
                spilled = scalar(0) if is_null else slot.spilled._replace(id=0)
                frame.stack[spi] = slot._replace(spilled=spilled)


def _atomic_ptr_type_ok(reg: Reg) -> bool:
    return reg.type not in (PTR_TO_CTX, *_PKT_TYPES, PTR_TO_PACKET_END, *_SOCKET_TYPES)


def _spill(old: Slot, value: Reg, size: int) -> Slot:
    """save_register_state: the top ``size`` bytes of the slot hold the spilled register;
    the bytes below keep what they were, but for spilled bytes, which become data."""
    types = list(old.types)
    for i in range(BPF_REG_SIZE - size, BPF_REG_SIZE):
        types[i] = STACK_SPILL
    for i in range(BPF_REG_SIZE - size):
        if types[i] not in (STACK_ZERO, STACK_INVALID):
            types[i] = STACK_MISC
    return Slot("".join(types), value)


def _stack_read(frame: Frame, off: int, size: int) -> Reg:
    """check_stack_read_fixed_off: a full spill comes back as it went in; a narrow read of a
    spilled scalar at its start, the scalar; zeros read as 0; anything else is unknown."""
    slot = -off - 1
    spi = slot // BPF_REG_SIZE
    old = frame.stack.get(spi, EMPTY_SLOT)
    types = old.types
    read = [types[(slot - i) % BPF_REG_SIZE] for i in range(size)]
    if types[BPF_REG_SIZE - 1] != STACK_SPILL:
        return scalar(0) if all(t == STACK_ZERO for t in read) else UNKNOWN
    spill_size = len(types) - len(types.rstrip(STACK_SPILL))
    if size == BPF_REG_SIZE and spill_size == BPF_REG_SIZE:
        return old.spilled
    if old.spilled.type != SCALAR:
        raise _reject(errno.EACCES, "invalid size of register fill")
    if size <= spill_size and off % BPF_REG_SIZE == 0:
        return old.spilled
    if all(t == STACK_SPILL for t in read) and old.spilled.var == tnum.const(0) \
            or all(t == STACK_ZERO for t in read):
        return scalar(0)
    return UNKNOWN


def _constant_map_key(state: State, key: Reg, key_size: int) -> int | None:
    """get_constant_map_key: the key's value when the stack holds it as zeros or as a
    spilled constant of exactly the key's size."""
    if key.type != PTR_TO_STACK or not key.var.is_const:
        return None
    off = key.off + _s64(key.var.value)
    slot = -off - 1
    if not 0 <= slot < MAX_BPF_STACK:
        return None
    stored = state.frames[key.frame].stack.get(slot // BPF_REG_SIZE, EMPTY_SLOT)
    below = stored.types[:slot % BPF_REG_SIZE + 1][::-1]  # from the key's first byte down
    if len(below) - len(below.lstrip(STACK_ZERO)) >= key_size:
        return 0
    if stored.types[BPF_REG_SIZE - 1] != STACK_SPILL or stored.spilled.type != SCALAR:
        return None
    if len(below) - len(below.lstrip(STACK_SPILL)) != key_size \
            or not stored.spilled.var.is_const:
        return None
    return stored.spilled.var.value


def _use_def(insn: Instruction) -> tuple[int, int]:
    """Registers an instruction may read, and those it surely writes (for liveness)."""
    info = OPCODES.get(insn.opcode)
    if info is None:
        return 0, 0
    kind, bit = info.kind, (lambda r: 1 << r if r < MAX_BPF_REG else 0)
    if kind is Kind.ALU:
        use = bit(insn.src) if info.source is Source.X else 0
        return use | (0 if info.op is AluOp.MOV else bit(insn.dst)), bit(insn.dst)
    if kind in (Kind.NEG, Kind.END):
        return bit(insn.dst), bit(insn.dst)
    if kind in (Kind.LDX, Kind.LDX_SX):
        return bit(insn.src), bit(insn.dst)
    if kind in (Kind.ST, Kind.STX, Kind.ATOMIC, Kind.JMP):
        return bit(insn.dst) | bit(insn.src) | bit(0), 0
    if kind is Kind.CALL:
        return 0b111110, 0b111111
    if kind is Kind.EXIT:
        return 1, 0
    if kind in (Kind.LD_ABS, Kind.LD_IND):
        return bit(6) | bit(insn.src), 0b111111
    if kind is Kind.LD_IMM64:
        return 0, bit(insn.dst)
    return 0, 0
