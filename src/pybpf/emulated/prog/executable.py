"""A loaded program in executable form: what both engines read.

``Executable`` resolves a program once (slots, subprogram starts, lddw immediates, static
regions). It knows no engine: core.py makes and caches the engines' entries for it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ...asm.opcodes import OPCODES, Class, Instruction, JmpOp, Kind
from ...uapi import BPF_PSEUDO_CALL
from .bpf_iter import BpfCallback
from .memory import M64, OFF_MASK

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
        # what core.py makes of it once, per engine: the JIT's functions by subprogram, the
        # interpreter, the native code (or why the native tier refused it), and the entries
        # handed out
        self.jit_functions: dict[str, Callable] | None = None
        self.interpreter: Any = None
        self.native: Any = None
        self.native_refused: str | None = None
        self.entries: dict[tuple[str, int], Callable] = {}
        self.main_entries: dict[str, Callable] = {}  # engine -> entries[engine, 0], per run

    def map_in_r1_after(self, pc: int, before: int | None) -> int | None:
        """The static region R1 surely points to (at offset 0) after the instruction at
        ``pc``, given ``before``, following straight-line code: a lddw of a static object
        sets it; anything that may write R1 forgets it. Stores and other registers' ALU keep
        it. The engines bind map helpers to the map it names."""
        insn = self.slots[pc]
        kind = OPCODES[insn.opcode].kind
        if kind is Kind.LD_IMM64 and insn.dst == 1:
            pointer = self.ld_imm[pc]
            region = pointer >> 32
            return region if region in self.static_regions and not pointer & OFF_MASK else None
        if kind in (Kind.ST, Kind.STX) or (insn.dst != 1 and kind in (
                Kind.ALU, Kind.NEG, Kind.END, Kind.LDX, Kind.LDX_SX, Kind.LD_IMM64)):
            return before
        return None

    def subprog_end(self, start: int) -> int:
        later = [s for s in self.subprogs if s > start]
        return later[0] if later else len(self.slots)


def _is_local_call(insn: Instruction) -> bool:
    return insn.opcode == (Class.JMP | JmpOp.CALL) and insn.src == BPF_PSEUDO_CALL
