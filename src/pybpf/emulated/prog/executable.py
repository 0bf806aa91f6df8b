"""A loaded program in executable form, and ``run``: the entry both engines share.

``Executable`` resolves a program once (slots, subprogram starts, lddw immediates, static
regions); ``entry`` hands out the function that runs a subprogram on the reference
interpreter (interpreter.py) or the JIT to Python (jit.py), made once and cached.
"""

from __future__ import annotations

import errno
import itertools
from collections.abc import Callable
from typing import Any

from ...asm.opcodes import Class, Instruction, JmpOp
from ...errors import ProgramFault
from ...uapi import BPF_PSEUDO_CALL
from .bpf_iter import BpfCallback
from .interpreter import Interpreter
from .jit import JIT_MAX_SLOTS, jit_compile
from .memory import M64, RunState
from .semantics import RunAbort

# Static regions (map objects, global data) take numbers from one process-wide counter, so
# programs that tail-call each other never collide (region numbers: memory.py).
_static_regions = itertools.count(0x100)


class Executable:
    """Instructions by slot, subprogram starts, resolved lddw immediates, static regions.

    ``ld_imm`` maps the slot of every lddw to the value it loads: the plain immediate, or a
    pointer to a map object (BPF_PSEUDO_MAP_FD), into a map value (BPF_PSEUDO_MAP_VALUE) or
    to a callback (BPF_PSEUDO_FUNC: a ``bpf_iter.BpfCallback``, its subprogram an entry).
    ``helpers`` maps helper ids to callables ``f(rs, r1, r2, r3, r4, r5) -> r0``, ``kfuncs``
    the BTF ids of kfuncs (calls with src BPF_PSEUDO_KFUNC_CALL) to the same.
    """

    def __init__(self, insns: list[Instruction], helpers: dict[int, Callable],
                 pseudo: dict[int, tuple] | None = None, owner: Any = None,
                 kfuncs: dict[int, Callable] | None = None) -> None:
        self.insns = insns
        self.slots: list[Instruction | None] = []
        for insn in insns:
            self.slots.append(insn)
            if insn.opcode == 0x18:
                self.slots.append(None)
        self.helpers = helpers
        self.kfuncs = kfuncs or {}
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
            if kind == "func":  # a callback's address: a region naming its subprogram
                starts.add(obj)
                obj = BpfCallback(self, obj)
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
    """Run ``exe`` with R1 = ``ctx``; returns R0 (64 bits). ``engine``: "jit" or "interp".
    The instructions it executed are charged to the current CPU of the run's machine."""
    rs.engine = engine
    rs.mem.update(exe.static_regions)
    try:
        return exe.entry(engine)(rs, ctx, 0, 0, 0, 0)
    except RunAbort:
        return 0
    except RecursionError:
        raise ProgramFault(errno.EFAULT, "the call stack is too deep") from None
    finally:
        machine = getattr(rs.system, "machine", None)
        if machine is not None:
            machine.timing.charge(machine.current.cpu, "bpf_insn", rs.count)
