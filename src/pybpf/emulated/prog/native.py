"""The native engine (arch/x86/net/bpf_jit_comp.c): a program compiled to machine code through
LLVM (eBPF -> LLVM IR -> native code with llvmlite's MCJIT), for speed on ALU and stack work.

Rules this module keeps:
- Results are the reference interpreter's, instruction for instruction: registers, memory,
  ``rs.count`` (counted per basic block, a block also ending after a call), the budget
  (ELOOP at the instruction where the count passes it, with the interpreter's count) and
  faults. The tests run every engine on the same programs.
- Each frame's 512-byte stack lives in a per-run arena, with the region number the Python
  engines would give it (``rs.next_region``, one per frame), so ``r10`` holds the same value.
  ``r10 + constant`` accesses inside the stack compile to plain loads and stores; any other
  address is looked up among the live frames, then in the run's table of map values: a
  region a helper returned (a looked-up value) or the program's global data, once Python has
  seen it, is reached natively through its buffer's address (the buffer exported for the
  run, so it cannot move); so is a tracepoint's record (a bytes context), for reading only.
  What is none of these (other contexts, packets) goes through one C callback into
  Python's ``mem_load``/``mem_store``, as do helper and kfunc calls and legacy packet
  loads. During a callback the live frames are regions of ``rs.mem`` (views of the arena),
  so helpers read keys from the stack as usual.
- Atomics on an aligned word of native memory are hardware atomics, as the Python engines'
  (``ATOMIC_RMW``); others go through Python. Without the C accelerator the Python engines
  serialise atomics under a lock instead, so compiled code then leaves map values to Python.
- ``bpf_map_lookup_elem`` on a plain BPF_MAP_TYPE_ARRAY, PERCPU_ARRAY, HASH, PERCPU_HASH,
  LRU_HASH or LRU_PERCPU_HASH that R1 surely points to runs without Python: an array's
  lookup is inlined as the kernel's verifier inlines it (array_map_gen_lookup: the index read
  and bounds-checked natively; a per-CPU array's names the run's CPU's slot); a hash map's
  key is found in the map's table by one C-API dict lookup with the GIL taken (@htab_lookup;
  a per-CPU one's value is then the run's CPU's slot; an LRU map's element gets its
  reference bit, which decides evictions). The value's pointer then comes from a per-run
  cache, which the first lookup of a value in the run fills in C (pybpf_native_value,
  pybpf_native_array_value; through Python for an array element not made yet); the lookups
  done natively are counted into the map's access statistics (local or remote, as Python
  counts them) when the run ends.
- With modeled time (on the C cache model; with the Python one the lookups go through
  Python) a native lookup is charged as Python's helper charges it, by the C model's
  pybpf_native_charge with the GIL (which such a run keeps throughout): the scheduler's
  sync first (before a hash map's table is read: it may let other CPUs' tasks run), then,
  once the value is known to be cached, the costs Python would charge, in the same order (an
  array's lookup and value line; a hash map's lookup, jhash and walk of the key's bucket, an
  LRU map's reference bit and, not per-CPU, its line written). When deferred work waits on
  the CPU, Python does the whole lookup (its sync runs the work), so modeled figures are the
  Python engines' to the last nanosecond.
- ``bpf_get_smp_processor_id`` is inlined, as the kernel's verifier inlines it: the run's
  CPU; so are ``bpf_get_current_pid_tgid`` (the run's task, given at each run of a program
  that calls it) and ``bpf_get_prandom_u32`` (the run's CPU's generator, called from C:
  pybpf_native_prandom_u32), and ``bpf_probe_read_user`` of the machine's user memory into
  memory compiled code reaches is a copy in C (pybpf_native_probe_read_user; what faults,
  or reads nothing, is the Python helper's). With modeled time each call is charged as
  Python's helper charges it. Other helpers and kfuncs go through the callback; as in the
  JIT, a map helper on a map R1 surely points to calls the core bound to that map, and only
  what may run a callback gets the count.
- ``bpf_map_update_elem`` and ``bpf_map_delete_elem`` on a map R1 surely points to whose
  bound helper is its HtabCore's (a HASH, PERCPU_HASH or LRU_HASH map where the C extension
  is built, with modeled time on the C cache model or without it: _hashtab.c) skip Python
  when the key (and the value) lie in memory compiled code reaches (the live frames, the map
  values and global data in the run's table): compiled code calls the C model's
  pybpf_native_htab_op with the core, their addresses and R4, which does what the helper
  does with them (the scheduler's sync, then the bytes read and the op in C; what the core
  hands to Python, such as BPF_F_LOCK, bad flags or a value with special fields, it hands
  over from there), with the GIL taken; a KernelError is R0's -errno, anything else stops
  the run with it (the count through the call stored first, as for a callback; these helpers
  are not counted callbacks). A key or value elsewhere sends the helper through the
  callback. On a map the program found at run time (in a map of maps) the same is done with
  the core pybpf_native_map_core finds for R1 among the run's regions, where the map has one.
- A program the tier does not compile (a tail call, an unknown helper, a write to r10,
  recursion, a jump out of its subprogram) is refused once at load with a reason; core.py
  then runs it on the JIT.
- Without llvmlite nothing here is compiled: ``native_missing()`` says what to install.
"""

from __future__ import annotations

import ctypes
import functools
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from ...accelerator import (
    ACCEL,
    ATOMIC_RMW,
    BUFFER_ADDRESS,
    CACHE_MODEL,
    PROBE_READ_USER,
    SHM_MAPS,
)
from ...asm.opcodes import (
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
from ...errors import ProgramFault
from ...uapi import BPF_PSEUDO_CALL, BPF_PSEUDO_KFUNC_CALL, MAX_BPF_STACK, BpfFunc, MapType
from ..maps.arraymap import ArrayOfMaps, BpfArray, BpfPercpuArray
from ..maps.hashtab import BUCKET_SIZE, HtabLruMap, HtabLruPercpuMap, HtabMap, HtabPercpuMap
from ..maps.shared import (
    SharedArray,
    SharedHtab,
    SharedLpmTrie,
    SharedLruHtab,
    SharedLruPercpuHtab,
    SharedPercpuArray,
    SharedPercpuHtab,
    SharedSegmentMap,
)
from .bpf_iter import CALLBACK_HELPERS
from .bpf_trace import bpf_probe_read_user
from .helpers import (
    bpf_get_current_pid_tgid,
    bpf_get_prandom_u32,
    bpf_get_smp_processor_id,
    bpf_map_delete_elem,
    bpf_map_lookup_elem,
    bpf_map_update_elem,
    map_lookup_elem,
    map_lookup_elem_synced,
)
from .jit import FpOffsets, bound_helpers, bound_name, core_of, htab_core_of
from .memory import (
    BPF_MAX_LOOPS,
    CTX_REGION,
    DYNAMIC_REGION_BASE,
    M64,
    RunState,
    mem_load,
    mem_read,
    mem_store,
)
from .semantics import atomic_op, ld_abs

try:
    import llvmlite.binding as llvm
except ImportError:  # the pure-Python engines work without it
    llvm = None

if TYPE_CHECKING:
    from .executable import Executable

NATIVE_MAX_SLOTS = 20_000  # bigger programs run on the JIT (LLVM's compile time grows fast)
MAX_NATIVE_FRAMES = 64  # deeper static call chains run on the JIT

# The run state shared with the compiled code: an array of u64, with the words below; then
# the map values reached natively, a direct-mapped table of VALUE_SLOTS entries (region,
# address, length, READ_ONLY added for a context compiled code may only read) by region
# number; then the region number of each live frame by depth;
# then, per map whose lookups run natively, its local and remote lookups done natively, the
# entries in use of its cache, and that cache of LOOKUP_CACHE entries (tag, pointer, local),
# open addressing from the tag's home entry with linear probing: an array's tag is index + 1
# (its home the index), a hash map's the address of the value object (its home the address,
# Fibonacci-hashed), so 0 is empty. Python fills the tables; a run clears them. Once a map's
# cache is full its lookups go to Python for the rest of the run (a program that looks up
# many values once each gains nothing from the cache, and would pay for trying it).
# With modeled time, a run whose lookups are charged natively also holds what
# pybpf_native_charge reads: its machine's Timing, that Timing's C cache model, its CPU
# (an int object), that CPU's list of deferred work; always the run (whose ``error`` it and
# pybpf_native_htab_op set).
COUNT, BUDGET, NEXT_REGION, STATUS, FAULT_PC, DEPTH, ARENA, CALLBACK = range(8)
TIMING, MODEL, CPU, DEFERRED, RUN = range(8, 13)
THIS_CPU = 13  # the run's CPU: per-CPU slots, bpf_get_smp_processor_id
CHARGES = 14  # what charges a helper compiled inline: nothing, pybpf_native_charge, or Python
CHARGES_NONE, CHARGES_NATIVE, CHARGES_PYTHON = 0, 1, 2
# what pybpf_native_value reads: the run's rs.mem, rs.value_regions and exported values, and
# the node of its CPU
RS_MEM, RS_VALUE_REGIONS, EXPORTED, THIS_NODE = range(15, 19)
# what the helpers compiled inline read: the run's task (bpf_get_current_pid_tgid, set at each
# run of a program that calls it), its CPU's random generator's bound getrandbits
# (bpf_get_prandom_u32) and its machine (bpf_probe_read_user's user memory); 0 without one
PID_TGID, RANDOM_BITS, MACHINE = range(19, 22)
VALUE_TABLE, VALUE_SLOTS = 22, 32
READ_ONLY = 1 << 32  # in a value's length word: compiled code may read it, not write it
RECORD_SLOT = VALUE_TABLE + 3 * (CTX_REGION & (VALUE_SLOTS - 1))  # a tracepoint record's
FRAME_REGIONS = VALUE_TABLE + 3 * VALUE_SLOTS
LOOKUP_CACHE = 64  # a power of two
MAP_WORDS = 3 + 3 * LOOKUP_CACHE
# A hash map's cache entry is its tag's top bits after this multiplication (Fibonacci
# hashing): objects' addresses are multiples of their allocator's size classes.
FIBONACCI = 0x9E3779B97F4A7C15
STATUS_OK, STATUS_ELOOP, STATUS_RAISED = 0, 1, 2
# the words NativeEntry (_native.c) reads and writes, and the values it compares them with, in
# its order
_ENTRY_LAYOUT = (COUNT, BUDGET, NEXT_REGION, STATUS, FAULT_PC, DEPTH, RS_MEM, RS_VALUE_REGIONS,
                 PID_TGID, CHARGES, RECORD_SLOT, CHARGES_NATIVE, CTX_REGION, READ_ONLY,
                 STATUS_OK, VALUE_TABLE, VALUE_SLOTS, MAP_WORDS)
# what a run's end writes over the value table and each map's words (a slice assignment is
# a fifth of a ctypes.memset call)
_ZERO_VALUE_TABLE = memoryview(bytes(8 * 3 * VALUE_SLOTS)).cast("Q")
_ZERO_MAP_WORDS = memoryview(bytes(8 * MAP_WORDS)).cast("Q")
# Map values are reached natively only where atomics on them are hardware atomics in every
# engine (the C accelerator's ATOMIC_RMW; its BUFFER_ADDRESS says where a value is).
NATIVE_VALUES = ATOMIC_RMW is not None and BUFFER_ADDRESS is not None

# What the compiled code asks of Python through the callback (its first argument after the
# state): op, then up to six u64 arguments: a helper (its id, R1-R5), a map helper bound to the
# map R1 surely points to (its index among the program's bound helpers, R2-R5), a lookup
# (the map's region, R2); then, with the count handed over (``>= OP_CALLBACK_HELPER``: what
# may run a callback, which counts), a helper that runs callbacks, a kfunc, and last the
# memory ops (``>= OP_LOAD``).
OP_HELPER, OP_BOUND, OP_MAP_LOOKUP, OP_CALLBACK_HELPER, OP_KFUNC = range(5)
OP_LOAD, OP_STORE, OP_ATOMIC, OP_LD_ABS = range(5, 9)
# the maps whose lookups the tier inlines by index (array_map_gen_lookup,
# array_of_map_gen_lookup); an ARRAY_OF_MAPS's values are its inner maps, which a program
# hands to helpers and never reads as memory
ARRAYS = (BpfArray, BpfPercpuArray, ArrayOfMaps, SharedArray, SharedPercpuArray)
# the maps whose values are a slot per CPU, of which a run reads its CPU's
PERCPU_VALUES = (BpfPercpuArray, SharedPercpuArray, SharedPercpuHtab, SharedLruPercpuHtab)
# the hash maps and tries in a shared segment, whose lookups point into the segment's region
# (registered once per run) where pybpf_shm_lookup finds the value
SHARED_BY_PLACE = (SharedHtab, SharedPercpuHtab, SharedLruHtab, SharedLruPercpuHtab,
                   SharedLpmTrie)
# the classes of the maps whose lookups run natively, and the plain map type of each
_NATIVE_LOOKUPS = {BpfArray: MapType.ARRAY, BpfPercpuArray: MapType.PERCPU_ARRAY,
                   ArrayOfMaps: MapType.ARRAY_OF_MAPS, SharedArray: MapType.ARRAY,
                   SharedHtab: MapType.HASH, SharedPercpuArray: MapType.PERCPU_ARRAY,
                   SharedPercpuHtab: MapType.PERCPU_HASH, SharedLruHtab: MapType.LRU_HASH,
                   SharedLruPercpuHtab: MapType.LRU_PERCPU_HASH,
                   SharedLpmTrie: MapType.LPM_TRIE,
                   HtabMap: MapType.HASH, HtabPercpuMap: MapType.PERCPU_HASH,
                   HtabLruMap: MapType.LRU_HASH, HtabLruPercpuMap: MapType.LRU_PERCPU_HASH}
# pybpf_native_charge (_cache_model.c): what it does (its flags: the scheduler's sync,
# then an array's charge and its value's line, or a hash map's charge and walk), and its
# answers: charged; not (deferred work waits: Python does it all); failed (the run stops)
CHARGE_SYNC, CHARGE_ARRAY, CHARGE_ACCESS, CHARGE_HTAB, CHARGE_HELPER = 1, 2, 4, 8, 16
CHARGE_REF, CHARGE_REF_LINE, CHARGE_PROBE_READ = 32, 64, 128
NOT_CHARGED, CHARGED, CHARGE_FAILED = 0, 1, 2
CHARGE_SYMBOL = "pybpf_native_charge"
# _accel.c: a hash map's, and an array's, value's first lookup in a run
VALUE_SYMBOL, ARRAY_VALUE_SYMBOL = "pybpf_native_value", "pybpf_native_array_value"
HTAB_LOOKUP_SYMBOL = "pybpf_native_htab_lookup"  # _accel.c: a hash map's lookup
# _hashtab.c: the update or delete of an HtabCore's bound helper from machine code, its op
# (HELPER_UPDATE or HELPER_DELETE there) by the helper's name
HTAB_OP_SYMBOL = "pybpf_native_htab_op"
# _bpf_trace.c and _cache_model.c: bpf_probe_read_user's common case, bpf_get_prandom_u32
PROBE_READ_SYMBOL, PRANDOM_SYMBOL = "pybpf_native_probe_read_user", "pybpf_native_prandom_u32"
PROBE_SLOW = M64  # pybpf_native_probe_read_user did nothing: the helper through Python
HTAB_OPS = {"helper_update": 1, "helper_delete": 2}
# _lpm_trie.c: the lookup of an LpmCore's bound helper from machine code
LPM_LOOKUP_SYMBOL = "pybpf_native_lpm_lookup"
# _hashtab.c: the HtabCore of a map a program found at run time (write_dynamic_htab_op)
MAP_CORE_SYMBOL = "pybpf_native_map_core"
HTAB_UPDATE = HTAB_OPS["helper_update"]
# @htab_lookup's answers besides a value's address: absent, or ask Python
HTAB_ABSENT, HTAB_SLOW = 0, M64
# _shm_maps.c: a lookup (1 + where the value lies in the segment, 0: absent), and an update
# or delete (its op HTAB_OPS's), on a map in a shared segment, without the GIL; SHM_SLOW:
# the helper through Python
SHM_LOOKUP_SYMBOL, SHM_OP_SYMBOL, SHM_SLOW = "pybpf_shm_lookup", "pybpf_shm_op", HTAB_SLOW
SHM_MAP_OF_SYMBOL = "pybpf_shm_map_of"  # _shm_maps.c: a map found at run time, a segment's

# A program's entry is called without the GIL (compiled code touches only its run's state,
# arena and map values; @py_callback takes it back to call the run's ``_Run.callback``): by
# the C accelerator's call_native, or where that is not built, through ctypes. A program
# whose code makes calls that take the GIL every time (a helper through Python, a hash map's
# lookup, update or delete: _FunctionIR.calls_python) keeps it for the whole run, as a run
# charged from machine code does: taking it back at every call costs more than the run gives
# other threads. (Slow paths, such as a lookup the run's cache misses, do not count.)
CALL_NATIVE = getattr(ACCEL, "call_native", None)
# The C cache model's NativeEntry: a program's entry, its run's state filled and handed back in
# C (NativeProgram.python_entry, the reference, does the rest), and the words it uses
NATIVE_ENTRY = getattr(CACHE_MODEL, "NativeEntry", None)
_ENTRY_TYPE = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, *[ctypes.c_uint64] * 5)


@functools.lru_cache(maxsize=1024)
def _ctypes_entry(address: int) -> Callable[..., int]:
    return _ENTRY_TYPE(address)


def _ctypes_call(address: int, state: int, r1: int, r2: int, r3: int, r4: int, r5: int,
                 keep_gil: bool) -> int:
    """call_native through ctypes (which always lets the GIL go)."""
    return _ctypes_entry(address)(state, r1 & M64, r2 & M64, r3 & M64, r4 & M64, r5 & M64)


def native_missing() -> str | None:
    """Why the native engine cannot run here (None: it can)."""
    if llvm is None:
        return ("engine 'native' needs the llvmlite package: pip install llvmlite "
                "(or pip install 'pybpf[native]')")
    return None


def native_reach() -> str:
    """What the native tier runs in machine code with this build's C extensions (beside
    ALU, stack and control flow, always)."""
    if not NATIVE_VALUES:
        return "map values through Python (the C accelerator is not built)"
    reach = ("map values, atomics, array, map-in-map and hash lookups, "
             "bpf_get_smp_processor_id, bpf_get_current_pid_tgid")
    if _value_address() is None:
        reach += " (a value's first lookup in a run through Python)"
    if _cache_model_symbol(CHARGE_SYMBOL) is None:
        reach += "; with modeled time, lookups through Python (the C cache model is not built)"
    elif _cache_model_symbol(HTAB_OP_SYMBOL) is not None:
        reach += ("; hash map updates and deletes, bpf_get_prandom_u32, "
                  "bpf_probe_read_user")
    if _cache_model_symbol(LPM_LOOKUP_SYMBOL) is not None:
        reach += "; LPM trie lookups in C"
    return reach


class NativeRefused(Exception):  # noqa: N818 (a decision, not an error)
    """The program uses something the native tier does not compile; the reason says what."""


# -- IR generation -------------------------------------------------------------------------------
_ICMP = {JmpOp.JEQ: "eq", JmpOp.JNE: "ne", JmpOp.JGT: "ugt", JmpOp.JGE: "uge",
         JmpOp.JLT: "ult", JmpOp.JLE: "ule", JmpOp.JSGT: "sgt", JmpOp.JSGE: "sge",
         JmpOp.JSLT: "slt", JmpOp.JSLE: "sle"}
_PLAIN_ALU = {AluOp.ADD: "add", AluOp.SUB: "sub", AluOp.MUL: "mul", AluOp.OR: "or",
              AluOp.AND: "and", AluOp.XOR: "xor", AluOp.LSH: "shl", AluOp.RSH: "lshr",
              AluOp.ARSH: "ashr"}


def _const(value: int, bits: int) -> str:
    """``value`` as an LLVM integer literal of ``bits`` bits (LLVM reads them signed)."""
    value &= (1 << bits) - 1
    return str(value - (1 << bits) if value >> (bits - 1) else value)


def _jump_target(pc: int, insn: Instruction) -> int | None:
    info = OPCODES[insn.opcode]
    if info.kind is Kind.JA:
        return pc + (insn.imm if info.cls is Class.JMP32 else insn.off) + 1
    if info.kind in (Kind.JMP, Kind.JCOND):
        return pc + insn.off + 1
    return None


def _writes_r10(insn: Instruction) -> bool:
    kind = OPCODES[insn.opcode].kind
    if kind in (Kind.ALU, Kind.NEG, Kind.END, Kind.LDX, Kind.LDX_SX, Kind.LD_IMM64):
        return insn.dst == 10
    if kind is Kind.ATOMIC:
        fetches = insn.imm & ATOMIC_FETCH and insn.imm != AtomicOp.CMPXCHG
        return (insn.imm == AtomicOp.LOAD_ACQ and insn.dst == 10) or bool(fetches and
                                                                           insn.src == 10)
    return False


class _FunctionIR:
    """LLVM IR of one subprogram [start, end): registers in allocas (promoted by LLVM), one
    basic block per counting block."""

    def __init__(self, exe: Executable, start: int, end: int, maps: dict[int, int],
                 bound: dict[str, Callable]) -> None:
        self.exe = exe
        self.start = start
        self.end = end
        self.maps = maps  # region of a map whose lookups run natively -> its words' slot
        # jit.bound_name of a bound map helper -> its index; (HtabCore, op) of those whose
        # op compiled code calls natively
        self.bound = {name: k for k, name in enumerate(bound)}
        self.htab_ops = {name: op for name, func in bound.items()
                         if (op := htab_op_of(func)) is not None}
        self.lpm_lookups = {name: core for name, func in bound.items()
                            if (core := lpm_core_of(func)) is not None}
        self.lines: list[str] = []
        self.temps = 0
        self.terminated = False
        self.block_starts = self._block_starts()
        self.map_in_r1: int | None = None
        self.fp_offset = FpOffsets()  # the registers that surely hold a stack address
        self.calls_python = False  # a call that takes the GIL every time it runs

    def _block_starts(self) -> set[int]:
        """Where counting blocks begin: the entry, jump targets, and after a jump, an exit or
        a call (a callee's count starts where the caller's stops)."""
        starts = {self.start}
        pc = self.start
        while pc < self.end:
            insn = self.exe.slots[pc]
            kind = OPCODES[insn.opcode].kind
            target = _jump_target(pc, insn)
            if target is not None:
                if not self.start <= target < self.end or self.exe.slots[target] is None:
                    raise NativeRefused(f"insn {pc} jumps to {target}, outside its subprogram")
                starts.add(target)
            if target is not None or kind in (Kind.EXIT, Kind.CALL):
                starts.add(pc + insn.slots)
            pc += insn.slots
        last = self.exe.slots[self.end - 1] or self.exe.slots[self.end - 2]
        if OPCODES[last.opcode].kind not in (Kind.EXIT, Kind.JA):
            raise NativeRefused(f"subprogram {self.start} can run off its end")
        return starts

    # -- emission helpers
    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def tmp(self) -> str:
        self.temps += 1
        return f"%t{self.temps}"

    def op(self, expr: str) -> str:
        name = self.tmp()
        self.emit(f"{name} = {expr}")
        return name

    def label(self, name: str) -> None:
        if not self.terminated:
            self.emit(f"br label %{name}")
        self.lines.append(f"{name}:")
        self.terminated = False

    def branch(self, line: str) -> None:
        self.emit(line)
        self.terminated = True

    def slot(self, index: int) -> str:
        return self.op(f"getelementptr i64, ptr %st, i64 {index}")

    def get(self, reg: int) -> str:
        return "%fp" if reg == 10 else self.op(f"load i64, ptr %r{reg}")

    def put(self, reg: int, value: str) -> None:
        self.emit(f"store i64 {value}, ptr %r{reg}")

    def trunc(self, value: str, bits: int) -> str:
        return value if bits == 64 else self.op(f"trunc i64 {value} to i{bits}")

    def zext(self, value: str, bits: int) -> str:
        return value if bits == 64 else self.op(f"zext i{bits} {value} to i64")

    # -- the function
    def write(self) -> list[str]:
        self.lines.append(f"define internal i64 @F{self.start}(ptr %st, i64 %a1, i64 %a2, "
                          "i64 %a3, i64 %a4, i64 %a5) {")
        self.lines.append("entry:")
        for reg in range(10):
            self.emit(f"%r{reg} = alloca i64")
        self.emit("%n = alloca i64")
        self.emit("%may_goto = alloca i64")
        # the key and value sizes of a map found at run time (write_dynamic_htab_op): in the
        # entry block, as an alloca elsewhere would take new stack at every pass of a loop
        self.emit("%map_sizes = alloca [2 x i64]")
        for reg in range(10):
            self.put(reg, f"%a{reg}" if 1 <= reg <= 5 else "0")
        self.emit(f"store i64 {BPF_MAX_LOOPS}, ptr %may_goto")
        self.emit(f"%count0 = load i64, ptr {self.slot(COUNT)}")
        self.emit("store i64 %count0, ptr %n")
        # this frame: the next region number, the arena's stack at this depth, zeroed
        depth_slot = self.slot(DEPTH)
        self.emit(f"%depth = load i64, ptr {depth_slot}")
        self.emit(f"store i64 {self.op('add i64 %depth, 1')}, ptr {depth_slot}")
        region_slot = self.slot(NEXT_REGION)
        self.emit(f"%frame = load i64, ptr {region_slot}")
        self.emit(f"store i64 {self.op('add i64 %frame, 1')}, ptr {region_slot}")
        frame_index = self.op(f"add i64 %depth, {FRAME_REGIONS}")
        frame_slot = self.op(f"getelementptr i64, ptr %st, i64 {frame_index}")
        self.emit(f"store i64 %frame, ptr {frame_slot}")
        arena = self.op(f"load ptr, ptr {self.slot(ARENA)}")
        self.emit(f"%stack = getelementptr [{MAX_BPF_STACK} x i8], ptr {arena}, i64 %depth")
        self.emit(f"call void @llvm.memset.p0.i64(ptr %stack, i8 0, i64 {MAX_BPF_STACK}, i1 false)")
        self.emit(f"%fp = or i64 {self.op('shl i64 %frame, 32')}, {MAX_BPF_STACK}")
        pc = self.start
        while pc < self.end:
            insn = self.exe.slots[pc]
            if pc in self.block_starts:
                self.start_block(pc)
                self.map_in_r1 = None
                self.fp_offset.clear()
            self.write_insn(pc, insn)
            self.map_in_r1 = self.exe.map_in_r1_after(pc, self.map_in_r1)
            self.fp_offset.track(insn)
            pc += insn.slots
        self.lines.append("raised:")  # what Python raised is kept for the run
        self.emit(f"store i64 {STATUS_RAISED}, ptr {self.slot(STATUS)}")
        self.emit("br label %bail")
        self.lines.append("bail:")
        self.emit("ret i64 0")
        self.lines.append("}")
        return self.lines

    def start_block(self, pc: int) -> None:
        """Count the block's instructions; past the budget, stop with the count before it
        (Python finds the instruction that passed it)."""
        length = self.block_length(pc)
        self.label(f"L{pc}")
        before = self.op("load i64, ptr %n")
        after = self.op(f"add i64 {before}, {length}")
        # the budget is read where it is: a callback's run adds its count to it
        budget = self.op(f"load i64, ptr {self.slot(BUDGET)}")
        over = self.op(f"icmp ugt i64 {after}, {budget}")
        self.branch(f"br i1 {over}, label %over{pc}, label %L{pc}.run")
        self.lines.append(f"over{pc}:")
        self.emit(f"store i64 {before}, ptr {self.slot(COUNT)}")
        self.emit(f"store i64 {pc}, ptr {self.slot(FAULT_PC)}")
        self.emit(f"store i64 {STATUS_ELOOP}, ptr {self.slot(STATUS)}")
        self.branch("br label %bail")
        self.label(f"L{pc}.run")
        self.emit(f"store i64 {after}, ptr %n")
        self.block_pc = pc

    def block_length(self, pc: int) -> int:
        count = 0
        while True:
            insn = self.exe.slots[pc]
            count += 1
            pc += insn.slots
            if pc in self.block_starts or pc >= self.end:
                return count

    def insns_done(self, pc: int) -> int:
        """Instructions of the current block up to and including the one at ``pc``."""
        count, at = 0, self.block_pc
        while at <= pc:
            count += 1
            at += self.exe.slots[at].slots
        return count

    def store_count(self, pc: int) -> tuple[str, int]:
        """Store the count through the instruction at ``pc`` (what a call out of compiled
        code sees, and what a run it stops ends with): the count word's slot, and how many
        instructions of the block come after ``pc`` (counted in ``%n`` already)."""
        after = self.block_length(self.block_pc) - self.insns_done(pc)
        n = self.op("load i64, ptr %n")
        count_slot = self.slot(COUNT)
        self.emit(f"store i64 {self.op(f'sub i64 {n}, {after}')}, ptr {count_slot}")
        return count_slot, after

    def callback(self, pc: int, op: int, *args: str) -> str:
        """Call into Python for the instruction at ``pc`` with the count through it; leave
        the run when Python raised."""
        count_slot, after = self.store_count(pc)
        padded = [*args, *["0"] * (6 - len(args))]
        result = self.op(f"call i64 @py_callback(ptr %st, i64 {op}, "
                         + ", ".join(f"i64 {a}" for a in padded) + ")")
        self.check_status(pc)
        counted = self.op(f"load i64, ptr {count_slot}")
        self.emit(f"store i64 {self.op(f'add i64 {counted}, {after}')}, ptr %n")
        return result

    def check_status(self, pc: int, ok: str = "ok") -> None:
        """Leave the run when its status says so, else go on at label ``ok{pc}``."""
        status = self.op(f"load i64, ptr {self.slot(STATUS)}")
        failed = self.op(f"icmp ne i64 {status}, 0")
        self.branch(f"br i1 {failed}, label %bail, label %{ok}{pc}")
        self.label(f"{ok}{pc}")

    def write_insn(self, pc: int, insn: Instruction) -> None:
        info = OPCODES[insn.opcode]
        kind = info.kind
        bits = 64 if info.is64 else 32
        if kind is Kind.ALU:
            self.write_alu(insn, info, bits)
        elif kind is Kind.NEG:
            value = self.trunc(self.get(insn.dst), bits)
            self.put(insn.dst, self.zext(self.op(f"sub i{bits} 0, {value}"), bits))
        elif kind is Kind.END:
            self.write_end(pc, insn, info)
        elif kind is Kind.JA:
            self.branch(f"br label %L{_jump_target(pc, insn)}")
        elif kind is Kind.JCOND:
            left = self.op("load i64, ptr %may_goto")
            spent = self.op(f"icmp eq i64 {left}, 0")
            self.branch(f"br i1 {spent}, label %L{_jump_target(pc, insn)}, label %mg{pc}")
            self.label(f"mg{pc}")
            self.emit(f"store i64 {self.op(f'sub i64 {left}, 1')}, ptr %may_goto")
        elif kind is Kind.JMP:
            self.write_jmp(pc, insn, info, bits)
        elif kind is Kind.CALL:
            self.write_call(pc, insn)
        elif kind is Kind.EXIT:
            self.emit(f"store i64 {self.op('load i64, ptr %n')}, ptr {self.slot(COUNT)}")
            self.emit(f"store i64 %depth, ptr {self.slot(DEPTH)}")
            self.branch(f"ret i64 {self.get(0)}")
        elif kind is Kind.LD_IMM64:
            self.put(insn.dst, _const(self.exe.ld_imm[pc], 64))
        elif kind in (Kind.LDX, Kind.LDX_SX):
            size = info.nbytes
            value = self.write_load(pc, insn.src, insn.off, size)
            if kind is Kind.LDX_SX and size < 8:
                value = self.op(f"sext i{8 * size} {self.trunc(value, 8 * size)} to i64")
            self.put(insn.dst, value)
        elif kind in (Kind.ST, Kind.STX):
            value = self.get(insn.src) if kind is Kind.STX else _const(insn.imm, 64)
            self.write_store(pc, insn.dst, insn.off, info.nbytes, value)
        elif kind is Kind.ATOMIC:
            self.write_atomic(pc, insn, info.nbytes)
        elif kind is Kind.LD_ABS:
            self.calls_python = True
            self.put(0, self.callback(pc, OP_LD_ABS, _const(insn.imm, 64), str(info.nbytes)))
        elif kind is Kind.LD_IND:
            self.calls_python = True
            offset = self.op(f"add i64 {self.get(insn.src)}, {_const(insn.imm, 64)}")
            self.put(0, self.callback(pc, OP_LD_ABS, offset, str(info.nbytes)))
        else:  # pragma: no cover - every Kind is handled above
            raise NativeRefused(f"insn {pc}: {info.name} is not compiled")
        if kind in (Kind.EXIT, Kind.JA):
            self.terminated = True

    def write_alu(self, insn: Instruction, info: Any, bits: int) -> None:
        op, off = info.op, insn.off
        d = self.trunc(self.get(insn.dst), bits)
        if info.source is Source.X:
            s = self.trunc(self.get(insn.src), bits)
        else:
            s = _const(insn.imm, bits)
        t = f"i{bits}"
        if op is AluOp.MOV:
            if off not in (0, 8, 16, 32) or (off == 32 and bits == 32):
                raise NativeRefused(f"mov with off={off}")
            result = s if not off else self.op(
                f"sext i{off} {self.op(f'trunc {t} {s} to i{off}')} to {t}")
        elif op in (AluOp.LSH, AluOp.RSH, AluOp.ARSH):
            amount = self.op(f"and {t} {s}, {bits - 1}")
            result = self.op(f"{_PLAIN_ALU[op]} {t} {d}, {amount}")
        elif op in _PLAIN_ALU:
            result = self.op(f"{_PLAIN_ALU[op]} {t} {d}, {s}")
        elif op in (AluOp.DIV, AluOp.MOD):
            if off not in (0, 1):
                raise NativeRefused(f"div/mod with off={off}")
            result = self.division(op is AluOp.DIV, bool(off), t, d, s)
        else:
            raise NativeRefused(f"ALU op {op!r}")
        self.put(insn.dst, self.zext(result, bits))

    def division(self, divide: bool, signed: bool, t: str, d: str, s: str) -> str:
        """The kernel's rules: by zero, quotient 0 and remainder dst; signed by -1, -dst and 0
        (no trap on INT_MIN / -1)."""
        zero = self.op(f"icmp eq {t} {s}, 0")
        unsafe = zero
        if signed:
            minus_one = self.op(f"icmp eq {t} {s}, -1")
            unsafe = self.op(f"or i1 {zero}, {minus_one}")
        divisor = self.op(f"select i1 {unsafe}, {t} 1, {t} {s}")
        name = ("s" if signed else "u") + ("div" if divide else "rem")
        result = self.op(f"{name} {t} {d}, {divisor}")
        if signed:
            at_minus_one = self.op(f"sub {t} 0, {d}") if divide else "0"
            result = self.op(f"select i1 {minus_one}, {t} {at_minus_one}, {t} {result}")
        return self.op(f"select i1 {zero}, {t} {'0' if divide else d}, {t} {result}")

    def write_end(self, pc: int, insn: Instruction, info: Any) -> None:
        width = insn.imm
        if width not in (16, 32, 64):
            raise NativeRefused(f"insn {pc}: byte swap of {width} bits")
        value = self.trunc(self.get(insn.dst), width)
        if not (info.cls is Class.ALU and info.source is Source.K):  # to big endian / bswap
            value = self.op(f"call i{width} @llvm.bswap.i{width}(i{width} {value})")
        self.put(insn.dst, self.zext(value, width))

    def write_jmp(self, pc: int, insn: Instruction, info: Any, bits: int) -> None:
        d = self.trunc(self.get(insn.dst), bits)
        s = (self.trunc(self.get(insn.src), bits) if info.source is Source.X
             else _const(insn.imm, bits))
        if info.op is JmpOp.JSET:
            taken = self.op(f"icmp ne i{bits} {self.op(f'and i{bits} {d}, {s}')}, 0")
        else:
            taken = self.op(f"icmp {_ICMP[info.op]} i{bits} {d}, {s}")
        self.branch(f"br i1 {taken}, label %L{_jump_target(pc, insn)}, "
                    f"label %L{pc + 1}")

    def write_call(self, pc: int, insn: Instruction) -> None:
        if insn.src == BPF_PSEUDO_CALL:
            args = ", ".join(f"i64 {self.get(reg)}" for reg in range(1, 6))
            self.emit(f"store i64 {self.op('load i64, ptr %n')}, ptr {self.slot(COUNT)}")
            result = self.op(f"call i64 @F{pc + insn.imm + 1}(ptr %st, {args})")
            self.check_status(pc)
            self.emit(f"store i64 {self.op(f'load i64, ptr {self.slot(COUNT)}')}, ptr %n")
            self.put(0, result)
            return
        if insn.src == BPF_PSEUDO_KFUNC_CALL:
            if insn.imm not in self.exe.kfuncs:
                raise NativeRefused(f"insn {pc}: kfunc {insn.imm} is not bound")
            op = OP_KFUNC
        elif insn.imm == BpfFunc.tail_call:
            raise NativeRefused(f"insn {pc}: tail calls run on the JIT")
        elif insn.imm not in self.exe.helpers:
            raise NativeRefused(f"insn {pc}: helper {insn.imm} is not bound")
        elif insn.imm == BpfFunc.map_lookup_elem and self.map_in_r1 in self.maps:
            self.write_map_lookup(pc, self.map_in_r1)
            return
        elif _inlined(_unwrapped(self.exe.helpers[insn.imm])):
            self.write_inlined_helper(pc, insn, _unwrapped(self.exe.helpers[insn.imm]))
            return
        elif _unwrapped(self.exe.helpers[insn.imm]) in (PROBE_READ_USER, bpf_probe_read_user) \
                and _cache_model_symbol(PROBE_READ_SYMBOL) is not None:
            self.write_probe_read_user(pc, insn)
            return
        elif bound_name(insn.imm, self.map_in_r1) in self.bound:
            # R1 is a known map: the helper bound to it skips resolving the map pointer
            name = bound_name(insn.imm, self.map_in_r1)
            bpf_map = self.exe.static_regions[self.map_in_r1]
            helper = _unwrapped(self.exe.helpers[insn.imm])
            if isinstance(bpf_map, SharedSegmentMap) and helper in _DYNAMIC_HTAB_OPS \
                    and _shm_symbol(SHM_OP_SYMBOL) is not None:
                self.write_shm_op(pc, bpf_map, helper is bpf_map_update_elem,
                                  self.bound[name])
                return
            self.calls_python = True
            if name in self.htab_ops:
                self.write_htab_op(pc, *self.htab_ops[name], self.bound[name])
                return
            if name in self.lpm_lookups:
                self.write_lpm_lookup(pc, self.lpm_lookups[name], self.bound[name])
                return
            args = [self.get(reg) for reg in range(2, 6)]
            self.put(0, self.callback(pc, OP_BOUND, str(self.bound[name]), *args))
            return
        elif _unwrapped(self.exe.helpers[insn.imm]) in _DYNAMIC_HTAB_OPS \
                and _cache_model_symbol(HTAB_OP_SYMBOL) is not None and NATIVE_VALUES:
            self.calls_python = True
            self.write_dynamic_htab_op(pc, insn)
            return
        else:
            op = OP_CALLBACK_HELPER if insn.imm in CALLBACK_HELPERS else OP_HELPER
        self.calls_python = True
        args = [self.get(reg) for reg in range(1, 6)]
        self.put(0, self.callback(pc, op, str(insn.imm), *args))

    def write_htab_op(self, pc: int, core: Any, op: int, index: int) -> None:
        """The update or delete of an HtabCore's helper bound to the map R1 points to: with
        the key (and value) in memory compiled code reaches, by pybpf_native_htab_op, which
        does what the helper does with them; else the helper through Python."""
        bpf_map = self.exe.static_regions[self.map_in_r1]
        args = [self.get(reg) for reg in range(2, 6)]
        self.put(0, self.htab_op(pc, op, f"inttoptr (i64 {id(core)} to ptr)",
                                 str(bpf_map.key_size), str(bpf_map.value_size), "true",
                                 lambda: self.callback(pc, OP_BOUND, str(index), *args)))

    def write_lpm_lookup(self, pc: int, core: Any, index: int) -> None:
        """The lookup of an LpmCore's helper bound to the trie R1 points to: with the key in
        memory compiled code reaches, by pybpf_native_lpm_lookup, which does what the helper
        does with it and reaches the value natively; else the helper through Python."""
        bpf_map = self.exe.static_regions[self.map_in_r1]
        args = [self.get(reg) for reg in range(2, 6)]
        key_ptr = self.pointer_arg(2, str(bpf_map.key_size))
        self.put(0, self.direct_or_slow(
            pc, "l", self.op(f"icmp ne ptr {key_ptr}, null"),
            lambda run, cpu: (f"@{LPM_LOOKUP_SYMBOL}(ptr {self.slot(STATUS)}, "
                              f"i64 {STATUS_RAISED}, ptr {run}, ptr inttoptr (i64 {id(core)} "
                              f"to ptr), ptr {key_ptr}, i64 {cpu}, ptr %st, "
                              f"i64 {NEXT_REGION}, i64 {VALUE_TABLE}, i64 {VALUE_SLOTS})"),
            lambda: self.callback(pc, OP_BOUND, str(index), *args)))

    def write_shm_op(self, pc: int, bpf_map: SharedSegmentMap, update: bool,
                     index: int) -> None:
        """The update or delete of a map in a shared segment: with the key (and value) in
        memory compiled code reaches, _shm_maps.c's pybpf_shm_op, without the GIL; else (or
        where it says so) the helper through Python."""
        args = [self.get(reg) for reg in range(2, 6)]
        self.put(0, self.shm_op(pc, "s", f"inttoptr (i64 {id(bpf_map.shm)} to ptr)", "true",
                                str(bpf_map.key_size), str(bpf_map.value_size), update,
                                lambda: self.callback(pc, OP_BOUND, str(index), *args)))

    def shm_op(self, pc: int, tag: str, shm: str, has_map: str, key_size: str,
               value_size: str, update: bool, slow: Callable[[], str]) -> str:
        """R0 of an update or delete on the segment's map ``shm`` (a Map), whose keys and
        values have those sizes: pybpf_shm_op where ``has_map`` and the key (and value) lie
        in memory compiled code reaches, else (or where it says so) ``slow``'s code. ``tag``
        keeps its blocks' labels apart from another's at the same pc."""
        args = [self.get(reg) for reg in range(2, 6)]
        key_ptr = self.pointer_arg(2, key_size)
        native = self.op(f"and i1 {has_map}, {self.op(f'icmp ne ptr {key_ptr}, null')}")
        value_ptr = "null"
        if update:
            value_ptr = self.pointer_arg(3, value_size)
            native = self.op(f"and i1 {native}, {self.op(f'icmp ne ptr {value_ptr}, null')}")
        self.branch(f"br i1 {native}, label %{tag}d{pc}, label %{tag}b{pc}")
        self.label(f"{tag}d{pc}")
        op = HTAB_OPS["helper_update" if update else "helper_delete"]
        # the run's CPU: a per-CPU map's slot, an LRU map's lists
        cpu = self.op(f"load i64, ptr {self.slot(THIS_CPU)}")
        direct = self.op(f"call i64 @{SHM_OP_SYMBOL}(ptr {shm}, i64 {op}, ptr {key_ptr}, "
                         f"ptr {value_ptr}, i64 {args[2]}, i64 {cpu})")
        slow_op = self.op(f"icmp eq i64 {direct}, {_const(SHM_SLOW, 64)}")
        self.branch(f"br i1 {slow_op}, label %{tag}b{pc}, label %{tag}j{pc}")
        self.label(f"{tag}b{pc}")
        slow_r0 = slow()
        slow_block = self.current_block()
        self.branch(f"br label %{tag}j{pc}")
        self.label(f"{tag}j{pc}")
        return self.op(f"phi i64 [{direct}, %{tag}d{pc}], [{slow_r0}, %{slow_block}]")

    def write_dynamic_htab_op(self, pc: int, insn: Instruction) -> None:
        """bpf_map_update_elem or bpf_map_delete_elem on a map R1 points to that the program
        found at run time (in a map of maps): as write_htab_op on its HtabCore (and sizes)
        from pybpf_native_map_core, or as write_shm_op on its segment's Map from
        pybpf_shm_map_of; the helper through Python where the map has neither. A program
        whose own maps are a segment's asks for a segment's Map first (a system with a
        segment puts its hash maps there), another for a core first."""
        sizes = "%map_sizes"
        mem = self.op(f"load ptr, ptr {self.slot(RS_MEM)}")
        update = _unwrapped(self.exe.helpers[insn.imm]) is bpf_map_update_elem
        args = [self.get(reg) for reg in range(1, 6)]

        def found(symbol: str) -> tuple[str, str, str]:
            """The map ``symbol`` finds for R1 and its key and value sizes."""
            self.emit(f"store [2 x i64] zeroinitializer, ptr {sizes}")
            handle = self.op(f"call ptr @{symbol}(ptr {mem}, i64 {self.get(1)}, "
                             f"ptr {sizes})")
            key_size = self.op(f"load i64, ptr {sizes}")
            value_size = self.op(f"load i64, ptr "
                                 f"{self.op(f'getelementptr i64, ptr {sizes}, i64 1')}")
            return handle, key_size, value_size

        def core(slow: Callable[[], str]) -> str:
            handle, key_size, value_size = found(MAP_CORE_SYMBOL)
            return self.htab_op(pc, HTAB_OPS["helper_update" if update else "helper_delete"],
                                handle, key_size, value_size,
                                self.op(f"icmp ne ptr {handle}, null"), slow)

        def segment(slow: Callable[[], str]) -> str:
            if _shm_symbol(SHM_MAP_OF_SYMBOL) is None or _shm_symbol(SHM_OP_SYMBOL) is None:
                return slow()
            handle, key_size, value_size = found(SHM_MAP_OF_SYMBOL)
            return self.shm_op(pc, "g", handle, self.op(f"icmp ne ptr {handle}, null"),
                               key_size, value_size, update, slow)

        def python() -> str:
            return self.callback(pc, OP_HELPER, str(insn.imm), *args)

        in_segment = any(isinstance(bpf_map, SharedSegmentMap)
                         for bpf_map in self.exe.static_regions.values())
        first, second = (segment, core) if in_segment else (core, segment)
        self.put(0, first(lambda: second(python)))

    def htab_op(self, pc: int, op: int, core: str, key_size: str, value_size: str,
                has_core: str, slow: Callable[[], str]) -> str:
        """R0 of an HtabCore's update or delete (``op``) on the core ``core``, whose map has
        keys and values of those sizes: by pybpf_native_htab_op where ``has_core`` and the
        key (and value) lie in memory compiled code reaches, else by ``slow``'s code."""
        args = [self.get(reg) for reg in range(2, 6)]
        key_ptr = self.pointer_arg(2, key_size)
        native = self.op(f"and i1 {has_core}, {self.op(f'icmp ne ptr {key_ptr}, null')}")
        value_ptr = "null"
        if op == HTAB_UPDATE:
            value_ptr = self.pointer_arg(3, value_size)
            native = self.op(f"and i1 {native}, {self.op(f'icmp ne ptr {value_ptr}, null')}")
        return self.direct_or_slow(
            pc, "h", native,
            lambda run, cpu: (f"@{HTAB_OP_SYMBOL}(ptr {self.slot(STATUS)}, "
                              f"i64 {STATUS_RAISED}, ptr {run}, ptr {core}, i64 {op}, "
                              f"ptr {key_ptr}, ptr {value_ptr}, i64 {args[2]}, i64 {cpu})"),
            slow)

    def direct_or_slow(self, pc: int, tag: str, native: str, call: Callable[[str, str], str],
                       slow: Callable[[], str]) -> str:
        """R0 of a C function that does a helper's work where ``native`` holds (``call``:
        its name and arguments, given the run's _Run and CPU), leaving the run where it kept
        an error; else ``slow``'s code. ``tag`` keeps its blocks' labels apart."""
        self.branch(f"br i1 {native}, label %{tag}d{pc}, label %{tag}b{pc}")
        self.label(f"{tag}d{pc}")
        self.store_count(pc)
        run = self.op(f"load ptr, ptr {self.slot(RUN)}")
        # the run's CPU, as rs.cpu gives it to Python's helper (-1: a run without a machine)
        machine = self.op(f"load i64, ptr {self.slot(MACHINE)}")
        cpu = self.op(f"select i1 {self.op(f'icmp ne i64 {machine}, 0')}, "
                      f"i64 {self.op(f'load i64, ptr {self.slot(THIS_CPU)}')}, i64 -1")
        direct = self.op(f"call i64 {call(run, cpu)}")
        self.check_status(pc, f"{tag}dok")
        self.branch(f"br label %{tag}j{pc}")
        self.label(f"{tag}b{pc}")
        slow_r0 = slow()
        slow_block = self.current_block()
        self.branch(f"br label %{tag}j{pc}")
        self.label(f"{tag}j{pc}")
        return self.op(f"phi i64 [{direct}, %{tag}dok{pc}], [{slow_r0}, %{slow_block}]")

    def write_inlined_helper(self, pc: int, insn: Instruction, helper: Callable) -> None:
        """A helper compiled inline: bpf_get_smp_processor_id as the kernel's verifier
        inlines it, the run's CPU; bpf_get_current_pid_tgid, the run's task; and
        bpf_get_prandom_u32, the run's CPU's generator called from C. With modeled time its
        call is charged as Python's is (``charged``), by Python itself where the machine's
        caches are Python's."""
        mode = self.op(f"load i64, ptr {self.slot(CHARGES)}")
        # no native charge without the C cache model (a run's mode is never CHARGES_NATIVE
        # then), and no call of its symbol: MCJIT would leave every call unresolved
        native = _cache_model_symbol(CHARGE_SYMBOL) is not None
        cases = f"i64 {CHARGES_NONE}, label %hc{pc}" + (
            f" i64 {CHARGES_NATIVE}, label %hn{pc}" if native else "")
        self.branch(f"switch i64 {mode}, label %hp{pc} [{cases}]")
        if native:
            self.label(f"hn{pc}")
            self.charged(CHARGE_HELPER, "0", f"hc{pc}", f"hp{pc}")
        self.label(f"hc{pc}")
        if helper is bpf_get_prandom_u32:
            self.calls_python = True  # the generator is a Python object
            self.store_count(pc)
            bits = self.op(f"load ptr, ptr {self.slot(RANDOM_BITS)}")
            run = self.op(f"load ptr, ptr {self.slot(RUN)}")
            inline = self.op(f"call i64 @{PRANDOM_SYMBOL}(ptr {self.slot(STATUS)}, "
                             f"i64 {STATUS_RAISED}, ptr {run}, ptr {bits})")
            self.check_status(pc, "hcok")
        else:
            word = THIS_CPU if helper is bpf_get_smp_processor_id else PID_TGID
            inline = self.op(f"load i64, ptr {self.slot(word)}")
        self.or_through_python(pc, insn, inline)

    def or_through_python(self, pc: int, insn: Instruction, inline: str) -> None:
        """The end of a helper compiled inline, whose R0 is ``inline`` where the current
        block goes on: the block ``hp{pc}`` that the inline code branches to where it cannot
        do the call calls the helper through Python, and both join at ``hj{pc}``."""
        inline_block = self.current_block()
        self.branch(f"br label %hj{pc}")
        self.label(f"hp{pc}")
        args = [self.get(reg) for reg in range(1, 6)]
        python = self.callback(pc, OP_HELPER, str(insn.imm), *args)
        python_block = self.current_block()
        self.branch(f"br label %hj{pc}")
        self.label(f"hj{pc}")
        self.put(0, self.op(f"phi i64 [{inline}, %{inline_block}], "
                            f"[{python}, %{python_block}]"))

    def write_probe_read_user(self, pc: int, insn: Instruction) -> None:
        """bpf_probe_read_user where the destination is native memory and the bytes are the
        machine's user memory: pybpf_native_probe_read_user copies them (with modeled time,
        the call then charged as Python charges it first); anything else, and any run whose
        caches are Python's, is the helper through Python."""
        mode = self.op(f"load i64, ptr {self.slot(CHARGES)}")
        self.branch(f"switch i64 {mode}, label %hp{pc} [i64 {CHARGES_NONE}, label %hd{pc} "
                    f"i64 {CHARGES_NATIVE}, label %hd{pc}]")
        self.label(f"hd{pc}")
        size = self.op(f"and i64 {self.get(2)}, {0xFFFFFFFF}")
        dst = self.op(f"call ptr @mem_ptr(ptr %st, i64 {self.get(1)}, i64 {size}, i1 true)")
        machine = self.op(f"load ptr, ptr {self.slot(MACHINE)}")
        copied = self.op(f"call i64 @{PROBE_READ_SYMBOL}(ptr {machine}, ptr {dst}, "
                         f"i64 {size}, i64 {self.get(3)})")
        slow = self.op(f"icmp eq i64 {copied}, {_const(PROBE_SLOW, 64)}")
        self.branch(f"br i1 {slow}, label %hp{pc}, label %hm{pc}")
        self.label(f"hm{pc}")
        # the copy touched nothing the model sees: its charge may follow it
        charge = self.op(f"icmp eq i64 {mode}, {CHARGES_NATIVE}")
        self.branch(f"br i1 {charge}, label %hn{pc}, label %hc{pc}")
        self.label(f"hn{pc}")
        self.charged(CHARGE_PROBE_READ, "0", f"hc{pc}", f"hp{pc}")
        self.label(f"hc{pc}")
        self.or_through_python(pc, insn, "0")

    def write_map_lookup(self, pc: int, region: int) -> None:
        """bpf_map_lookup_elem without Python: R0 from the run's cache of the map's values
        when the value is there, 0 for an index past max_entries or an absent key, else the
        helper through Python (which fills the cache). With modeled time the lookup is
        charged as Python's helper charges it (``charged``): the scheduler's sync first (a
        hash map's before its table is read, and Python is then told so), the lookup's costs
        once it is known to stay native; Python does it all when deferred work waits."""
        bpf_map = self.exe.static_regions[region]
        modeled = bpf_map.timing.modeled
        array = type(bpf_map) in ARRAYS
        key = self.get(2)
        key_ptr = self.pointer_arg(2, str(bpf_map.key_size))
        readable = self.op(f"icmp ne ptr {key_ptr}, null")
        self.branch(f"br i1 {readable}, label %mr{pc}.k, label %ms{pc}")
        self.label(f"mr{pc}.k")
        # a map whose cache this run filled goes to Python (its values come and go)
        words = self.maps[region]
        filled = self.op(f"load i64, ptr {self.slot(words + 2)}")
        full = self.op(f"icmp uge i64 {filled}, {LOOKUP_CACHE}")
        self.branch(f"br i1 {full}, label %ms{pc}, label %mk{pc}")
        self.label(f"mk{pc}")
        python = f"ms{pc}"  # where Python takes over: before the sync, or (mq) after it
        if array:  # array_map_gen_lookup
            index = self.zext(self.op(f"load i32, ptr {key_ptr}, align 1"), 32)
            found = self.op(f"icmp ult i64 {index}, {bpf_map.max_entries}")
            tag = self.op(f"add i64 {index}, 1")
            entry = self.op(f"and i64 {index}, {LOOKUP_CACHE - 1}")
        elif type(bpf_map) in SHARED_BY_PLACE:  # the key in the segment, without the GIL:
            # the value is where it lies in the segment's region (one per run: tag 1), a
            # per-CPU map's this CPU's slot
            place = self.tag_or_python(pc, f"@{SHM_LOOKUP_SYMBOL}(ptr inttoptr (i64 "
                                       f"{id(bpf_map.shm)} to ptr), ptr {key_ptr})", python)
            found = self.op(f"icmp ne i64 {place}, 0")
            in_segment = self.op(f"sub i64 {place}, 1")
            if bpf_map.percpu:
                cpu = self.op(f"load i64, ptr {self.slot(THIS_CPU)}")
                in_segment = self.op(f"add i64 {in_segment}, "
                                     f"{self.op(f'mul i64 {cpu}, {bpf_map.stride}')}")
            tag, entry, index = "1", "0", "0"
        else:  # the key in the map's table, by @htab_lookup
            if modeled:
                self.charged(CHARGE_SYNC, "0", f"ml{pc}", python)
                self.label(f"ml{pc}")
                python = f"mq{pc}"
            slot = (self.op(f"load i64, ptr {self.slot(THIS_CPU)}") if bpf_map.percpu
                    else "-1")
            # an LRU map's lookup sets the element's reference bit: here without modeled
            # time, else where it is charged
            ref = int(bpf_map.lru and not modeled)
            self.calls_python = True
            tag = self.tag_or_python(pc, f"@{HTAB_LOOKUP_SYMBOL}(ptr inttoptr "
                                     f"(i64 {id(bpf_map.table)} to ptr), ptr {key_ptr}, "
                                     f"i64 {bpf_map.key_size}, i64 {slot}, i64 {ref})", python)
            found = self.op(f"icmp ne i64 {tag}, {HTAB_ABSENT}")
            hashed = self.op(f"mul i64 {tag}, {_const(FIBONACCI, 64)}")
            entry = self.op(f"lshr i64 {hashed}, {64 - LOOKUP_CACHE.bit_length() + 1}")
        miss = f"mo{pc}" if modeled else f"mz{pc}"
        self.branch(f"br i1 {found}, label %mc{pc}, label %{miss}")
        self.label(f"mc{pc}")
        tag_at = self.op(f"call ptr @cache_find(ptr %st, i64 {words + 3}, i64 {tag}, "
                         f"i64 {entry})")
        cached = self.op(f"icmp ne ptr {tag_at}, null")
        first = python if _value_address() is None else f"mv{pc}"
        self.branch(f"br i1 {cached}, label %mp{pc}, label %{first}")
        if first != python:
            self.label(first)
            if array or type(bpf_map) in SHARED_BY_PLACE:
                self.write_first_array_lookup(pc, bpf_map, index, words + 3, python)
            else:
                self.write_first_lookup(pc, bpf_map, key_ptr, slot, words + 3, entry, python)
        self.label(f"mp{pc}")
        if modeled and array:  # array_cost: the lookup, and (not per-CPU) the value's line
            addr = self.op(f"add i64 {self.op(f'mul i64 {index}, {bpf_map.elem_size}')}, "
                           f"{bpf_map.value_base}")
            line = 0 if type(bpf_map) is BpfPercpuArray else CHARGE_ACCESS
            self.charged(CHARGE_SYNC | CHARGE_ARRAY | line, addr, f"mh{pc}", python)
            self.label(f"mo{pc}")  # past max_entries: the sync only, then NULL
            self.charged(CHARGE_SYNC, "0", f"mz{pc}", python)
        elif modeled:  # _op_cost: found or not, the walk to the key; an LRU map's bit
            # (whose write a per-CPU LRU map does not charge)
            ref = (CHARGE_REF | (0 if bpf_map.percpu else CHARGE_REF_LINE)) if bpf_map.lru else 0
            self.charged(CHARGE_HTAB | ref, str(BUCKET_SIZE), f"mh{pc}", python, bpf_map,
                         key_ptr)
            self.label(f"mo{pc}")
            self.charged(CHARGE_HTAB, str(BUCKET_SIZE), f"mz{pc}", python, bpf_map, key_ptr)
        else:
            self.branch(f"br label %mh{pc}")
        self.label(f"mh{pc}")
        fast = self.op(f"load i64, ptr {self.op(f'getelementptr i64, ptr {tag_at}, i64 1')}")
        if type(bpf_map) in SHARED_BY_PLACE:
            fast = self.op(f"add i64 {fast}, {in_segment}")
        local = self.op(f"load i64, ptr {self.op(f'getelementptr i64, ptr {tag_at}, i64 2')}")
        # local lookups counted in the map's first word, remote ones in its second
        counter_at = self.op(f"getelementptr i64, ptr %st, i64 "
                             f"{self.op(f'sub i64 {words + 1}, {local}')}")
        counted = self.op(f"load i64, ptr {counter_at}")
        self.emit(f"store i64 {self.op(f'add i64 {counted}, 1')}, ptr {counter_at}")
        self.branch(f"br label %mj{pc}")
        self.label(f"mz{pc}")
        self.branch(f"br label %mj{pc}")
        if python != f"ms{pc}":
            self.label(f"mq{pc}")
            self.branch(f"br label %mr{pc}")
        self.label(f"ms{pc}")
        self.branch(f"br label %mr{pc}")
        self.label(f"mr{pc}")
        synced = (self.op(f"phi i64 [0, %ms{pc}], [1, %mq{pc}]") if python != f"ms{pc}"
                  else "0")
        slow = self.callback(pc, OP_MAP_LOOKUP, str(region), key, synced)
        slow_block = self.current_block()
        self.branch(f"br label %mj{pc}")
        self.label(f"mj{pc}")
        self.put(0, self.op(f"phi i64 [{fast}, %mh{pc}], [0, %mz{pc}], [{slow}, %{slow_block}]"))

    def tag_or_python(self, pc: int, call: str, python: str) -> str:
        """The tag a hash lookup's C function (``call``: its name and arguments) gives, the
        code going on at ``mf{pc}``; to ``python`` where it answers HTAB_SLOW (SHM_SLOW)."""
        tag = self.op(f"call i64 {call}")
        slow = self.op(f"icmp eq i64 {tag}, {_const(HTAB_SLOW, 64)}")
        self.branch(f"br i1 {slow}, label %{python}, label %mf{pc}")
        self.label(f"mf{pc}")
        return tag

    def write_first_lookup(self, pc: int, bpf_map: Any, key_ptr: str, slot: str, cache: int,
                           home: str, python: str) -> None:
        """A hash map value's first lookup in the run, into the map's cache (at word
        ``cache``) without Python (pybpf_native_value), then back to the cache (mc), which
        has it; to ``python`` when it could not."""
        node = self.op(f"load i64, ptr {self.slot(THIS_NODE)}")
        pointer = self.op(
            f"call i64 @{VALUE_SYMBOL}(ptr %st, ptr {self.slot(RS_MEM)}, "
            f"ptr inttoptr (i64 {id(bpf_map.table)} to ptr), ptr {key_ptr}, "
            f"i64 {bpf_map.key_size}, i64 {slot}, i64 {NEXT_REGION}, i64 {VALUE_TABLE}, "
            f"i64 {VALUE_SLOTS}, i64 {cache}, i64 {LOOKUP_CACHE}, "
            f"i64 {home}, i64 {node})")
        placed = self.op(f"icmp ne i64 {pointer}, 0")
        self.branch(f"br i1 {placed}, label %mc{pc}, label %{python}")

    def write_first_array_lookup(self, pc: int, bpf_map: Any, index: str, cache: int,
                                 python: str) -> None:
        """An array value's first lookup in the run, into the map's cache (at word ``cache``)
        without Python (pybpf_native_array_value) when the element exists, then back to the
        cache (mc); to ``python`` when it could not. A per-CPU array's slot is the run's
        CPU's, local; a plain one's value is on the map's node. An ARRAY_OF_MAPS's value is
        the inner map in its slot, given a region as Python's lookup gives it one (an empty
        slot goes to Python). A hash map or trie in a shared segment comes here for the
        segment's region (its ``segment_region``, index 0), where its values lie: one
        registration per run, whichever values it looks up."""
        if type(bpf_map) in SHARED_BY_PLACE:  # the segment's region: one value
            cpu, local = "-1", "1"
        elif type(bpf_map) in PERCPU_VALUES:
            cpu, local = self.op(f"load i64, ptr {self.slot(THIS_CPU)}"), "1"
        else:
            node = self.op(f"load i64, ptr {self.slot(THIS_NODE)}")
            cpu = "-1"
            local = self.zext(self.op(f"icmp eq i64 {node}, {bpf_map.numa_node}"), 1)
        maps = type(bpf_map) is ArrayOfMaps
        elems = bpf_map.ptrs if maps else bpf_map.segment_region \
            if type(bpf_map) in SHARED_BY_PLACE else bpf_map.elems
        pointer = self.op(
            f"call i64 @{ARRAY_VALUE_SYMBOL}(ptr %st, ptr {self.slot(RS_MEM)}, "
            f"ptr inttoptr (i64 {id(elems)} to ptr), i64 {index}, i64 {cpu}, "
            f"i64 {local}, i64 {int(not maps)}, i64 {NEXT_REGION}, i64 {VALUE_TABLE}, "
            f"i64 {VALUE_SLOTS}, i64 {cache}, i64 {LOOKUP_CACHE})")
        placed = self.op(f"icmp ne i64 {pointer}, 0")
        self.branch(f"br i1 {placed}, label %mc{pc}, label %{python}")

    def charged(self, what: int, addr: str, done: str, python: str, bpf_map: Any = None,
                key_ptr: str = "null") -> None:
        """pybpf_native_charge doing ``what``, then on to ``done``; to ``python`` when
        it did not charge, out of the run with what it raised when it failed."""
        map_ptr = f"inttoptr (i64 {id(bpf_map)} to ptr)" if bpf_map is not None else "null"
        key_size = bpf_map.key_size if bpf_map is not None else 0
        core = getattr(bpf_map, "_core", None)  # a hash map's HtabCore, alive with the map
        core_ptr = f"inttoptr (i64 {id(core)} to ptr)" if core is not None else "null"
        result = self.op(f"call i64 @{CHARGE_SYMBOL}(ptr {self.slot(TIMING)}, i64 {what}, "
                         f"i64 {addr}, ptr {map_ptr}, ptr {key_ptr}, i64 {key_size}, "
                         f"ptr {core_ptr})")
        self.branch(f"switch i64 {result}, label %raised [i64 {CHARGED}, label %{done}.c "
                    f"i64 {NOT_CHARGED}, label %{python}]")
        self.label(f"{done}.c")
        self.branch(f"br label %{done}")

    def stack_pointer(self, base: int, off: int, size: int) -> str | None:
        """The stack address of ``r{base} + off`` where the register surely holds one (r10,
        or r10 plus a constant in straight-line code: ``fp_offset``) and the whole access
        is inside this frame."""
        from_fp = 0 if base == 10 else self.fp_offset.get(base)
        if from_fp is None:
            return None
        at = MAX_BPF_STACK + from_fp + off
        if not 0 <= at <= MAX_BPF_STACK - size:
            return None
        return self.op(f"getelementptr i8, ptr %stack, i64 {at}")

    def pointer_arg(self, reg: int, size: str) -> str:
        """Where the ``size`` bytes a helper's argument R``reg`` points to lie, for the
        helper to read: their stack address where the register surely holds one, else
        mem_ptr's answer at run time (null: not memory compiled code reaches)."""
        pointer = self.stack_pointer(reg, 0, int(size)) if size.isdigit() else None
        return pointer or self.op(f"call ptr @mem_ptr(ptr %st, i64 {self.get(reg)}, "
                                  f"i64 {size}, i1 false)")

    def frame_or_python(self, pc: int, base: int, off: int, size: int,
                        write: bool) -> tuple[str, str]:
        """(address, pointer into native memory or null) for ``r{base} + off``, to read or
        (``write``) to write."""
        addr = self.op(f"add i64 {self.get(base)}, {_const(off, 64)}")
        return addr, self.op(f"call ptr @mem_ptr(ptr %st, i64 {addr}, i64 {size}, "
                             f"i1 {str(write).lower()})")

    def write_load(self, pc: int, base: int, off: int, size: int) -> str:
        t = f"i{8 * size}"
        pointer = self.stack_pointer(base, off, size)
        if pointer is not None:
            return self.zext(self.op(f"load {t}, ptr {pointer}, align 1"), 8 * size)
        addr, pointer = self.frame_or_python(pc, base, off, size, write=False)
        in_frame = self.op(f"icmp ne ptr {pointer}, null")
        self.branch(f"br i1 {in_frame}, label %fl{pc}, label %pl{pc}")
        self.label(f"fl{pc}")
        fast = self.zext(self.op(f"load {t}, ptr {pointer}, align 1"), 8 * size)
        self.branch(f"br label %jl{pc}")
        self.label(f"pl{pc}")
        slow = self.callback(pc, OP_LOAD, addr, str(size), str(pc))
        slow_block = self.current_block()
        self.branch(f"br label %jl{pc}")
        self.label(f"jl{pc}")
        return self.op(f"phi i64 [{fast}, %fl{pc}], [{slow}, %{slow_block}]")

    def current_block(self) -> str:
        for line in reversed(self.lines):
            if line.endswith(":") and not line.startswith(" "):
                return line[:-1]
        raise AssertionError("no block")  # pragma: no cover

    def write_store(self, pc: int, base: int, off: int, size: int, value: str) -> None:
        t = f"i{8 * size}"
        pointer = self.stack_pointer(base, off, size)
        if pointer is not None:
            self.emit(f"store {t} {self.trunc(value, 8 * size)}, ptr {pointer}, align 1")
            return
        addr, pointer = self.frame_or_python(pc, base, off, size, write=True)
        in_frame = self.op(f"icmp ne ptr {pointer}, null")
        self.branch(f"br i1 {in_frame}, label %fs{pc}, label %ps{pc}")
        self.label(f"fs{pc}")
        self.emit(f"store {t} {self.trunc(value, 8 * size)}, ptr {pointer}, align 1")
        self.branch(f"br label %js{pc}")
        self.label(f"ps{pc}")
        self.callback(pc, OP_STORE, addr, str(size), str(pc), value)
        self.label(f"js{pc}")

    def write_atomic(self, pc: int, insn: Instruction, size: int) -> None:
        """Read-modify-write atomics on an aligned word of native memory are hardware
        atomics; the rest go through semantics.atomic_op (the checked path)."""
        imm = insn.imm
        if imm == AtomicOp.LOAD_ACQ:
            addr = self.op(f"add i64 {self.get(insn.src)}, {_const(insn.off, 64)}")
            self.put(insn.dst, self.callback(pc, OP_ATOMIC, addr, str(size), str(imm), "0",
                                             "0", str(pc)))
            return
        if imm == AtomicOp.STORE_REL or size not in (4, 8):
            addr = self.op(f"add i64 {self.get(insn.dst)}, {_const(insn.off, 64)}")
            self.callback(pc, OP_ATOMIC, addr, str(size), str(imm), self.get(insn.src),
                          self.get(0), str(pc))
            return
        addr, pointer = self.frame_or_python(pc, insn.dst, insn.off, size,
                                             write=True)
        misaligned = self.op(f"and i64 {self.op(f'ptrtoint ptr {pointer} to i64')}, {size - 1}")
        native = self.op(f"and i1 {self.op(f'icmp ne ptr {pointer}, null')}, "
                         f"{self.op(f'icmp eq i64 {misaligned}, 0')}")
        self.branch(f"br i1 {native}, label %fa{pc}, label %pa{pc}")
        self.label(f"fa{pc}")
        fast = self.zext(self.native_atomic(imm, pointer, size, insn.src), 8 * size)
        self.branch(f"br label %ja{pc}")
        self.label(f"pa{pc}")
        slow = self.callback(pc, OP_ATOMIC, addr, str(size), str(imm), self.get(insn.src),
                             self.get(0), str(pc))
        slow_block = self.current_block()
        self.branch(f"br label %ja{pc}")
        self.label(f"ja{pc}")
        old = self.op(f"phi i64 [{fast}, %fa{pc}], [{slow}, %{slow_block}]")
        if imm == AtomicOp.CMPXCHG:
            self.put(0, old)
        elif imm & ATOMIC_FETCH:
            self.put(insn.src, old)

    def native_atomic(self, imm: int, pointer: str, size: int, src_reg: int) -> str:
        """The old value (i{8 * size}) of one hardware atomic at ``pointer``."""
        t = f"i{8 * size}"
        src = self.trunc(self.get(src_reg), 8 * size)
        if imm == AtomicOp.CMPXCHG:
            expected = self.trunc(self.get(0), 8 * size)
            pair = self.op(f"cmpxchg ptr {pointer}, {t} {expected}, {t} {src} seq_cst seq_cst, "
                           f"align {size}")
            return self.op(f"extractvalue {{ {t}, i1 }} {pair}, 0")
        op = "xchg" if imm == AtomicOp.XCHG else _ATOMICRMW_OPS[imm & ~ATOMIC_FETCH]
        return self.op(f"atomicrmw {op} ptr {pointer}, {t} {src} seq_cst, align {size}")


_ATOMICRMW_OPS = {AtomicOp.ADD: "add", AtomicOp.OR: "or", AtomicOp.AND: "and", AtomicOp.XOR: "xor"}

_FRAME_PTR = f"""
define internal ptr @frame_ptr(ptr %st, i64 %addr, i64 %size) alwaysinline {{
entry:
  %region = lshr i64 %addr, 32
  %off = and i64 %addr, 4294967295
  %end = add i64 %off, %size
  %inside = icmp ule i64 %end, {MAX_BPF_STACK}
  %depth_at = getelementptr i64, ptr %st, i64 {DEPTH}
  %depth = load i64, ptr %depth_at
  br i1 %inside, label %loop, label %none
loop:
  %k = phi i64 [0, %entry], [%next, %miss]
  %more = icmp ult i64 %k, %depth
  br i1 %more, label %look, label %none
look:
  %slot = add i64 %k, {FRAME_REGIONS}
  %at = getelementptr i64, ptr %st, i64 %slot
  %region_k = load i64, ptr %at
  %hit = icmp eq i64 %region_k, %region
  br i1 %hit, label %found, label %miss
miss:
  %next = add i64 %k, 1
  br label %loop
found:
  %arena_at = getelementptr i64, ptr %st, i64 {ARENA}
  %arena = load ptr, ptr %arena_at
  %frame = getelementptr [{MAX_BPF_STACK} x i8], ptr %arena, i64 %k
  %p = getelementptr i8, ptr %frame, i64 %off
  ret ptr %p
none:
  ret ptr null
}}

define internal ptr @cache_find(ptr %st, i64 %base, i64 %tag, i64 %home) alwaysinline {{
entry:
  br label %probe
probe:
  %k = phi i64 [0, %entry], [%next, %other]
  %more = icmp ult i64 %k, {LOOKUP_CACHE}
  br i1 %more, label %look, label %none
look:
  %at_entry = add i64 %home, %k
  %entry_k = and i64 %at_entry, {LOOKUP_CACHE - 1}
  %words = mul i64 %entry_k, 3
  %slot = add i64 %words, %base
  %at = getelementptr i64, ptr %st, i64 %slot
  %held = load i64, ptr %at
  %hit = icmp eq i64 %held, %tag
  br i1 %hit, label %found, label %empty
empty:
  %free = icmp eq i64 %held, 0
  br i1 %free, label %none, label %other
other:
  %next = add i64 %k, 1
  br label %probe
found:
  ret ptr %at
none:
  ret ptr null
}}

define internal ptr @mem_ptr(ptr %st, i64 %addr, i64 %size, i1 %write) alwaysinline {{
entry:
  %p = call ptr @frame_ptr(ptr %st, i64 %addr, i64 %size)
  %in_frame = icmp ne ptr %p, null
  br i1 %in_frame, label %frame, label %values
frame:
  ret ptr %p
values:
  %region = lshr i64 %addr, 32
  %off = and i64 %addr, 4294967295
  %index = and i64 %region, {VALUE_SLOTS - 1}
  %index3 = mul i64 %index, 3
  %slot = add i64 %index3, {VALUE_TABLE}
  %at = getelementptr i64, ptr %st, i64 %slot
  %tag = load i64, ptr %at
  %hit = icmp eq i64 %tag, %region
  br i1 %hit, label %check, label %none
check:
  %len_at = getelementptr i64, ptr %at, i64 2
  %len_word = load i64, ptr %len_at
  %len = and i64 %len_word, {READ_ONLY - 1}
  %read_only = icmp uge i64 %len_word, {READ_ONLY}
  %denied = and i1 %read_only, %write
  %limit = select i1 %denied, i64 0, i64 %len
  %end = add i64 %off, %size
  %inside = icmp ule i64 %end, %limit
  br i1 %inside, label %found, label %none
found:
  %base_at = getelementptr i64, ptr %at, i64 1
  %base = load ptr, ptr %base_at
  %q = getelementptr i8, ptr %base, i64 %off
  ret ptr %q
none:
  ret ptr null
}}

declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare i32 @PyGILState_Ensure()
declare void @PyGILState_Release(i32)
declare ptr @PyLong_FromUnsignedLongLong(i64)
declare i64 @PyLong_AsUnsignedLongLongMask(ptr)
declare ptr @PyObject_Vectorcall(ptr, ptr, i64, ptr)
declare void @Py_DecRef(ptr)
declare void @PyErr_WriteUnraisable(ptr)
declare i64 @{CHARGE_SYMBOL}(ptr, i64, i64, ptr, ptr, i64, ptr)
declare i64 @{VALUE_SYMBOL}(ptr, ptr, ptr, ptr, i64, i64, i64, i64, i64, i64, i64, i64, i64)
declare i64 @{HTAB_LOOKUP_SYMBOL}(ptr, ptr, i64, i64, i64)
declare i64 @{ARRAY_VALUE_SYMBOL}(ptr, ptr, ptr, i64, i64, i64, i64, i64, i64, i64, i64, i64)
declare i64 @{HTAB_OP_SYMBOL}(ptr, i64, ptr, ptr, i64, ptr, ptr, i64, i64)
declare i64 @{LPM_LOOKUP_SYMBOL}(ptr, i64, ptr, ptr, ptr, i64, ptr, i64, i64, i64)
declare i64 @{SHM_LOOKUP_SYMBOL}(ptr, ptr)
declare i64 @{SHM_OP_SYMBOL}(ptr, i64, ptr, ptr, i64, i64)
declare ptr @{MAP_CORE_SYMBOL}(ptr, i64, ptr)
declare ptr @{SHM_MAP_OF_SYMBOL}(ptr, i64, ptr)
declare i64 @{PROBE_READ_SYMBOL}(ptr, ptr, i64, i64)
declare i64 @{PRANDOM_SYMBOL}(ptr, i64, ptr, ptr)
declare i16 @llvm.bswap.i16(i16)
declare i32 @llvm.bswap.i32(i32)
declare i64 @llvm.bswap.i64(i64)
"""


def _py_callback_ir() -> str:
    """@py_callback(st, op, a..f): the run's ``_Run.callback`` (the bound method whose address
    is in the state's CALLBACK word) called with the GIL taken, as a vectorcall of seven ints
    (no ctypes on the way). It keeps what it raises for the run; a failure to call it at all
    (out of memory) is reported as unraisable and the run stops with STATUS_RAISED."""
    names = ["%op", *(f"%{a}" for a in "abcdef")]
    lines = ["define internal i64 @py_callback(ptr %st, i64 %op, i64 %a, i64 %b, i64 %c, "
             "i64 %d, i64 %e, i64 %f) noinline {",
             "entry:",
             "  %gil = call i32 @PyGILState_Ensure()",
             f"  %args = alloca [{len(names)} x ptr]",
             f"  %callable_at = getelementptr i64, ptr %st, i64 {CALLBACK}",
             "  %callable = load ptr, ptr %callable_at"]
    for k, name in enumerate(names):
        lines += [f"  %o{k} = call ptr @PyLong_FromUnsignedLongLong(i64 {name})",
                  f"  %p{k} = getelementptr [{len(names)} x ptr], ptr %args, i64 0, i64 {k}",
                  f"  store ptr %o{k}, ptr %p{k}"]
    lines.append(f"  %res = call ptr @PyObject_Vectorcall(ptr %callable, ptr %args, "
                 f"i64 {len(names)}, ptr null)")
    lines += [f"  call void @Py_DecRef(ptr %o{k})" for k in range(len(names))]
    lines += ["  %ok = icmp ne ptr %res, null",
              "  br i1 %ok, label %value, label %failed",
              "value:",
              "  %v = call i64 @PyLong_AsUnsignedLongLongMask(ptr %res)",
              "  call void @Py_DecRef(ptr %res)",
              "  br label %done",
              "failed:",
              "  call void @PyErr_WriteUnraisable(ptr %callable)",
              f"  %status_at = getelementptr i64, ptr %st, i64 {STATUS}",
              f"  store i64 {STATUS_RAISED}, ptr %status_at",
              "  br label %done",
              "done:",
              "  %r = phi i64 [%v, %value], [0, %failed]",
              "  call void @PyGILState_Release(i32 %gil)",
              "  ret i64 %r",
              "}"]
    return "\n".join(lines)


def native_lookup_maps(exe: Executable) -> list[int]:
    """The static regions of the maps whose lookups run without Python, where map values are
    native memory: plain BPF_MAP_TYPE_ARRAY, PERCPU_ARRAY, ARRAY_OF_MAPS, HASH, PERCPU_HASH
    and their LRU twins (a run stays on its CPU, so a key names one slot), on a machine
    without modeled time or whose caches are the C model, which charges lookups for machine
    code. A hash map's lookup is the C accelerator's pybpf_native_htab_lookup (a build
    without it leaves hash maps to Python)."""
    if not NATIVE_VALUES or exe.helpers.get(BpfFunc.map_lookup_elem) is not bpf_map_lookup_elem:
        return []
    hash_lookups = _symbol_address(ACCEL, HTAB_LOOKUP_SYMBOL) is not None
    shared_lookups = _shm_symbol(SHM_LOOKUP_SYMBOL) is not None
    return [region for region, obj in exe.static_regions.items()
            if type(obj) in _NATIVE_LOOKUPS and obj.map_type == _NATIVE_LOOKUPS[type(obj)]
            and (type(obj) in ARRAYS or (shared_lookups and obj.segment_region is not None
                                         if type(obj) in SHARED_BY_PLACE else hash_lookups))
            and (not obj.timing.modeled or (obj.timing.cache_model == "C"
                                            and _cache_model_symbol(CHARGE_SYMBOL) is not None))]


def map_words(frames: int, maps: list[int]) -> dict[int, int]:
    """Where each native-lookup map's words begin in the state of a run of ``frames``."""
    return {region: FRAME_REGIONS + frames + k * MAP_WORDS for k, region in enumerate(maps)}


def native_ir(exe: Executable, frames: int, maps: list[int],
              bound: dict[str, Callable]) -> tuple[str, bool]:
    """The LLVM IR of ``exe`` (which ``check_compilable`` accepted, with at most ``frames``
    frames), ``maps`` the regions of the maps whose lookups run without Python, ``bound``
    its bound map helpers (jit.bound_helpers, whose order gives each its index): one
    function per subprogram, an exported ``E<start>`` each; and whether its code calls into
    Python (``_FunctionIR.calls_python``), so that a run keeps the GIL."""
    parts = [_FRAME_PTR, _py_callback_ir()]
    words = map_words(frames, maps)
    calls_python = False
    for start in exe.subprogs:
        function = _FunctionIR(exe, start, exe.subprog_end(start), words, bound)
        parts.append("\n".join(function.write()))
        calls_python |= function.calls_python
        parts.append(f"define i64 @E{start}(ptr %st, i64 %a1, i64 %a2, i64 %a3, i64 %a4, "
                     f"i64 %a5) {{\n  %r = call i64 @F{start}(ptr %st, i64 %a1, i64 %a2, "
                     "i64 %a3, i64 %a4, i64 %a5)\n  ret i64 %r\n}")
    return "\n\n".join(parts), calls_python


def check_compilable(exe: Executable) -> int:
    """Refuse what the tier does not compile; returns the most frames a run can stack."""
    if len(exe.slots) > NATIVE_MAX_SLOTS:
        raise NativeRefused(f"{len(exe.slots)} slots: over {NATIVE_MAX_SLOTS}")
    callees: dict[int, set[int]] = {start: set() for start in exe.subprogs}
    for start in exe.subprogs:
        for pc in range(start, exe.subprog_end(start)):
            insn = exe.slots[pc]
            if insn is None:
                continue
            if insn.opcode not in OPCODES:
                raise NativeRefused(f"insn {pc}: unknown opcode {insn.opcode:#x}")
            if _writes_r10(insn):
                raise NativeRefused(f"insn {pc} writes r10 (its stack accesses would move)")
            if OPCODES[insn.opcode].kind is Kind.CALL and insn.src == BPF_PSEUDO_CALL:
                callees[start].add(pc + insn.imm + 1)
    depth_of: dict[int, int] = {}

    def frames(start: int, path: tuple[int, ...]) -> int:
        if start in path:
            raise NativeRefused(f"subprogram {start} is recursive")
        if start not in depth_of:
            depth_of[start] = 1 + max((frames(c, (*path, start)) for c in callees[start]),
                                      default=0)
        return depth_of[start]

    deepest = max(frames(start, ()) for start in exe.subprogs)
    if deepest > MAX_NATIVE_FRAMES:
        raise NativeRefused(f"{deepest} nested frames: over {MAX_NATIVE_FRAMES}")
    return deepest


# -- compiling and running -----------------------------------------------------------------------
# The run-time functions compiled code may call: the C library's, for the intrinsics LLVM
# lowers to calls (the frame's memset, copies), and libgcc's 128-bit division, which the
# optimizer's loop analysis may bring in (a trip count of a budgeted loop).
RUNTIME_SYMBOLS = ((None, ("memset", "memcpy", "memmove")),
                   ("libgcc_s.so.1", ("__udivti3", "__umodti3", "__divti3", "__modti3")))
# The C API @py_callback calls, from this interpreter.
PYTHON_SYMBOLS = ("PyGILState_Ensure", "PyGILState_Release", "PyLong_FromUnsignedLongLong",
                  "PyLong_AsUnsignedLongLongMask", "PyObject_Vectorcall", "Py_DecRef",
                  "PyErr_WriteUnraisable")


@functools.cache
def _register_runtime() -> None:
    """Give MCJIT the addresses of ``RUNTIME_SYMBOLS`` and ``PYTHON_SYMBOLS``. One it
    cannot resolve leaves the module's relocations unapplied, every external call a jump to
    address 0."""
    for name in PYTHON_SYMBOLS:
        llvm.add_symbol(name, ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value)
    for name, address in ((VALUE_SYMBOL, _value_address()),
                          (ARRAY_VALUE_SYMBOL, _symbol_address(ACCEL, ARRAY_VALUE_SYMBOL)),
                          (HTAB_LOOKUP_SYMBOL, _symbol_address(ACCEL, HTAB_LOOKUP_SYMBOL)),
                          (SHM_LOOKUP_SYMBOL, _shm_symbol(SHM_LOOKUP_SYMBOL)),
                          (SHM_OP_SYMBOL, _shm_symbol(SHM_OP_SYMBOL)),
                          (SHM_MAP_OF_SYMBOL, _shm_symbol(SHM_MAP_OF_SYMBOL)),
                          *((name, _cache_model_symbol(name)) for name in (
                              CHARGE_SYMBOL, HTAB_OP_SYMBOL, LPM_LOOKUP_SYMBOL, MAP_CORE_SYMBOL,
                              PROBE_READ_SYMBOL, PRANDOM_SYMBOL))):
        if address is not None:
            llvm.add_symbol(name, address)
    for library, names in RUNTIME_SYMBOLS:
        try:
            lib = ctypes.CDLL(library)
        except OSError:
            continue  # not on this system: the optimizer's calls to it stay unresolved
        for name in names:
            function = getattr(lib, name, None)
            if function is not None:
                llvm.add_symbol(name, ctypes.cast(function, ctypes.c_void_p).value)


def _symbol_address(module: Any, name: str) -> int | None:
    """Where the C function ``name`` of the extension ``module`` is (None: not built)."""
    if module is None:
        return None
    function = getattr(ctypes.PyDLL(module.__file__), name, None)
    return None if function is None else ctypes.cast(function, ctypes.c_void_p).value


def _unwrapped(helper: Callable) -> Callable:
    """The helper's own function: ``helpers.charged`` wraps it where time is modeled."""
    return getattr(helper, "__wrapped__", helper)


@functools.cache
def _shm_symbol(name: str) -> int | None:
    """Where _shm_maps.c's function ``name`` is (None: not built)."""
    return _symbol_address(SHM_MAPS, name)


@functools.cache
def _cache_model_symbol(name: str) -> int | None:
    """Where the C cache model's function ``name`` is (None: not built)."""
    return _symbol_address(CACHE_MODEL, name)


# the helpers compiled code calls pybpf_native_htab_op for on a map found at run time
_DYNAMIC_HTAB_OPS = (bpf_map_update_elem, bpf_map_delete_elem)


def _inlined(helper: Callable) -> bool:
    """Whether compiled code does ``helper`` inline (write_inlined_helper)."""
    if helper is bpf_get_prandom_u32:
        return _cache_model_symbol(PRANDOM_SYMBOL) is not None
    return helper is bpf_get_smp_processor_id or helper is bpf_get_current_pid_tgid


def htab_op_of(func: Callable) -> tuple[Any, int] | None:
    """(HtabCore, op) where ``func``, a map helper bound to a map, is an HtabCore's update or
    delete helper (helpers._binder's ``functools.partial(in_c, python)``), whose op compiled
    code then calls natively; else None (also where pybpf_native_htab_op is not built)."""
    core = htab_core_of(func)
    op = HTAB_OPS.get(getattr(getattr(func, "func", None), "__name__", None))
    if op is None or core is None or _cache_model_symbol(HTAB_OP_SYMBOL) is None:
        return None
    return core, op


def lpm_core_of(func: Callable) -> Any | None:
    """The LpmCore whose lookup helper ``func``, a map helper bound to a map, is (helpers.
    _binder's ``functools.partial(in_c, python)``), whose lookup compiled code then calls
    natively; else None (also where pybpf_native_lpm_lookup is not built)."""
    if _cache_model_symbol(LPM_LOOKUP_SYMBOL) is None:
        return None
    return core_of(func, "LpmCore")


@functools.cache
def _value_address() -> int | None:
    """Where the C accelerator's pybpf_native_value is (None: not built, or a build without
    pybpf_native_array_value, which came with it)."""
    if _symbol_address(ACCEL, ARRAY_VALUE_SYMBOL) is None:
        return None
    return _symbol_address(ACCEL, VALUE_SYMBOL)


def _machine() -> Any:
    """A target machine for the host (each MCJIT engine takes one for its own)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    _register_runtime()
    return llvm.Target.from_default_triple().create_target_machine(opt=2)


def _memory_op(rs: RunState, op: int, a: int, b: int, c: int, d: int, e: int, f: int) -> int:
    if op == OP_LOAD:
        return mem_load(rs, a, b, c)
    if op == OP_STORE:
        mem_store(rs, a, b, d, c)
        return 0
    if op == OP_ATOMIC:
        return atomic_op(rs, a, b, c, d, e, f) & M64
    return ld_abs(rs, a, b)


class _Run:
    """One run's state array (``words``: Python's view of it), frame arena, Python's views of
    the frames, and the map values it reaches natively."""

    # slots: NativeEntry reads and writes some where they lie
    __slots__ = ("maps", "state", "words", "arena", "arena_c", "views", "address", "entry",
                 "charging", "random_bits", "machine", "cpu", "rs", "exe", "bound",
                 "lookup_stats", "error", "registered", "deepest", "exported")

    def __init__(self, frames: int, maps: list[int]) -> None:
        self.maps = map_words(frames, maps)
        self.state = (ctypes.c_uint64 * (FRAME_REGIONS + frames + len(maps) * MAP_WORDS))()
        self.words = memoryview(self.state).cast("B").cast("Q")
        self.arena = bytearray(frames * MAX_BPF_STACK)
        self.arena_c = (ctypes.c_char * len(self.arena)).from_buffer(self.arena)
        self.views = [memoryview(self.arena)[k * MAX_BPF_STACK:(k + 1) * MAX_BPF_STACK]
                      for k in range(frames)]
        self.address = ctypes.addressof(self.state)
        self.words[ARENA] = ctypes.addressof(self.arena_c)
        self.entry = self.callback  # what @py_callback calls: kept alive with the run
        self.charging: tuple = ()  # what pybpf_native_charge reads (run_on)
        self.random_bits: Callable | None = None  # the generator's getrandbits (run_on)
        self.machine: Any = None  # the machine and CPU of the last run (run_on)
        self.cpu = -1
        self.words[CALLBACK] = id(self.entry)
        self.words[RUN] = id(self)  # whose ``error`` the C functions set
        self.rs: Any = None
        self.exe: Any = None
        self.bound: list[Callable] = []  # the program's bound map helpers
        self.lookup_stats: tuple = ()  # NativeProgram.lookup_stats
        self.error: BaseException | None = None
        self.registered: list[int] = []  # frame regions now in rs.mem
        self.deepest = 0  # the last of them (0: none)
        self.exported: dict[int, Any] = {}  # region -> its buffer's export, while it runs
        self.words[EXPORTED] = id(self.exported)

    def reach(self, region: int) -> bool:
        """Put map value ``region`` (a buffer a helper returned, or global data) in the
        table of memory compiled code reaches natively; False when it is not plain memory."""
        words = self.words
        slot = VALUE_TABLE + 3 * (region & (VALUE_SLOTS - 1))
        if words[slot] == region and region:
            return True
        buf = self.rs.mem.get(region)
        # a bytearray, or a writable view of a value in a shared segment (maps/shared.py)
        if not NATIVE_VALUES or not buf or not (
                type(buf) is bytearray
                or (type(buf) is memoryview and not buf.readonly and buf.c_contiguous)):
            return False
        if region not in self.exported:  # the export keeps the buffer where it is until
            self.exported[region] = memoryview(buf)  # the run ends (C's: a BufferPin)
        words[slot] = region
        words[slot + 1] = BUFFER_ADDRESS(buf)
        words[slot + 2] = len(buf)
        return True

    def reach_record(self, ctx: Any) -> None:
        """A tracepoint's record (bytes) as the run's context: compiled code reads it where
        it is (the verifier lets no program write it; a write would go to Python, which
        refuses it)."""
        if NATIVE_VALUES and type(ctx) is bytes and ctx:
            words = self.words
            words[RECORD_SLOT] = CTX_REGION
            words[RECORD_SLOT + 1] = BUFFER_ADDRESS(ctx)
            words[RECORD_SLOT + 2] = len(ctx) | READ_ONLY

    def map_lookup(self, region: int, key: int, synced: int) -> int:
        """bpf_map_lookup_elem on a map whose lookups compiled code does, through Python
        (``synced``: after the scheduler's sync, which compiled code did); the value found
        goes in the run's cache, where compiled code finds it next time."""
        rs, bpf_map = self.rs, self.exe.static_regions[region]
        cpu = bpf_map.machine.current.cpu
        if synced:  # Timing.sync's second half
            bpf_map.timing.run_deferred(cpu)
            r0 = map_lookup_elem_synced(bpf_map, rs, key)
        else:
            r0 = map_lookup_elem(bpf_map, rs, key)
        words, filled_at = self.words, self.maps[region] + 2
        # a value is reached as memory; an inner map (in an ARRAY_OF_MAPS) is not memory
        if not (r0 and (type(bpf_map) is ArrayOfMaps or self.reach(r0 >> 32))) \
                or words[filled_at] >= LOOKUP_CACHE:
            return r0
        key_bytes = mem_read(rs, key, bpf_map.key_size, "key (R2)")
        if type(bpf_map) in ARRAYS:  # a per-CPU slot is on its CPU's node
            index = int.from_bytes(key_bytes, "little")
            local = type(bpf_map) in PERCPU_VALUES \
                or bpf_map.access_stats.cpu_node[cpu] == bpf_map.numa_node
            tag, entry = index + 1, index & (LOOKUP_CACHE - 1)
        elif type(bpf_map) in SHARED_BY_PLACE:
            return r0  # compiled code registers the segment's region itself, not values
        else:
            elem = bpf_map.table.get(key_bytes)
            value = None if elem is None else elem.value[cpu] if bpf_map.percpu else elem.value
            if value is not rs.mem[r0 >> 32]:
                return r0  # gone or replaced meanwhile: nothing to remember
            tag = id(value)
            entry = (tag * FIBONACCI & M64) >> (64 - LOOKUP_CACHE.bit_length() + 1)
            # a CPU's own slot lives on its node
            local = bpf_map.percpu or bpf_map.access_stats.cpu_node[cpu] == elem.node
        at = self.cache_entry(region, tag, entry)
        words[at] = tag
        words[at + 1] = r0
        words[at + 2] = int(local)
        return r0

    def cache_entry(self, region: int, tag: int, home: int) -> int:
        """Where ``tag`` goes in the map's cache, which is not full: the first entry from
        ``home`` that holds it or is empty (then counted in use: the probes of @cache_find
        end at the tag or at an empty entry, and no entry empties during a run)."""
        words, filled_at = self.words, self.maps[region] + 2
        probe = home
        while True:
            at = filled_at + 1 + 3 * probe
            held = words[at]
            if held == tag:
                return at
            if not held:
                words[filled_at] += 1
                return at
            probe = (probe + 1) & (LOOKUP_CACHE - 1)

    def finish(self) -> None:
        """The run is over: count the lookups compiled code did into their maps' statistics
        and forget the map values (their region numbers are this run's)."""
        words = self.words
        for at, _machine, current, local, remote in self.lookup_stats:
            if not words[at + 2]:  # nothing in the map's cache: no lookups counted either
                continue
            done_local, done_remote = words[at], words[at + 1]
            if done_local or done_remote:
                cpu = current.cpu  # the map's machine's running CPU
                local[cpu] += done_local
                remote[cpu] += done_remote
            words[at:at + MAP_WORDS] = _ZERO_MAP_WORDS
        if words[RECORD_SLOT] == CTX_REGION:  # the record is this run's
            words[RECORD_SLOT] = 0
        if self.exported:
            words[VALUE_TABLE:VALUE_TABLE + 3 * VALUE_SLOTS] = _ZERO_VALUE_TABLE
            self.exported.clear()

    def run_on(self, machine: Any) -> None:
        """The run's CPU (0 without a machine), and with modeled time what charges the
        helpers compiled inline and the native lookups: pybpf_native_charge, reading what
        is kept here, alive, until the next run; or Python, where the caches are Python's
        (the lookups then run through Python: native_lookup_maps)."""
        cpu = 0 if machine is None else machine.current.cpu
        if machine is self.machine and cpu == self.cpu:
            return  # as the last run
        self.machine, self.cpu = machine, cpu
        words = self.words
        if machine is None:
            words[THIS_CPU] = words[THIS_NODE] = words[MACHINE] = words[RANDOM_BITS] = 0
            words[CHARGES] = CHARGES_NONE
            self.random_bits = None
            return
        timing = machine.timing
        words[THIS_CPU] = cpu
        words[THIS_NODE] = machine.topology.cpu_node[cpu]
        words[MACHINE] = id(machine)  # alive as self.machine
        self.random_bits = machine.prandom_source(cpu).getrandbits
        words[RANDOM_BITS] = id(self.random_bits)
        if not timing.modeled:
            words[CHARGES] = CHARGES_NONE
        elif timing.cache_model == "C" and _cache_model_symbol(CHARGE_SYMBOL) is not None:
            words[CHARGES] = CHARGES_NATIVE
            self.charging = (timing, timing._cache_model, cpu, timing.deferred_work(cpu), self)
            words[TIMING:RUN + 1] = array("Q", map(id, self.charging))
        else:
            words[CHARGES] = CHARGES_PYTHON

    def callback(self, op: int, a: int, b: int, c: int, d: int, e: int, f: int) -> int:
        """What compiled code asks of Python; an exception is kept for the run to raise.
        Memory outside the live frames needs neither them nor the count; anything else runs
        with the live frames as regions of ``rs.mem`` and the region numbers handed over (a
        helper may make regions), and what may run a callback (which counts and makes
        frames) with the count as well."""
        rs, words = self.rs, self.words
        try:
            if op >= OP_LOAD:
                # a fault (or an atomic on the stack) is done again with the frames, where it
                # is exact
                try:
                    result = _memory_op(rs, op, a, b, c, d, e, f)
                except ProgramFault:
                    pass
                else:
                    region = a >> 32  # a value known to this run, or global data: native next
                    if region in self.exported or region in self.exe.static_regions:
                        self.reach(region)
                    return result
            # the live frames are a stack whose region numbers only grow: the deepest one's
            # number says whether any changed
            depth = words[DEPTH]
            deepest = words[FRAME_REGIONS + depth - 1] if depth else 0
            if deepest != self.deepest:
                self.unregister()
                live = words[FRAME_REGIONS:FRAME_REGIONS + depth].tolist()
                mem = rs.mem
                for region, view in zip(live, self.views, strict=False):
                    mem[region] = view
                self.registered, self.deepest = live, deepest
            counted = op >= OP_CALLBACK_HELPER  # the JIT hands the count over for these too
            if counted:
                rs.count = words[COUNT]
            rs.next_region = words[NEXT_REGION]
            try:
                if op == OP_BOUND:
                    r0 = self.bound[a](rs, b, c, d, e) & M64
                elif op == OP_HELPER or op == OP_CALLBACK_HELPER:
                    r0 = self.exe.helpers[a](rs, b, c, d, e, f) & M64
                elif op == OP_MAP_LOOKUP:
                    return self.map_lookup(a, b, c)
                elif op == OP_KFUNC:
                    return self.exe.kfuncs[a](rs, b, c, d, e, f) & M64
                else:
                    return _memory_op(rs, op, a, b, c, d, e, f)
                region = r0 >> 32  # a pointer a helper made (a looked-up value), if any
                if region >= DYNAMIC_REGION_BASE and \
                        words[VALUE_TABLE + 3 * (region & (VALUE_SLOTS - 1))] != region:
                    self.reach(region)
                return r0
            finally:
                if counted:  # a callback's instructions come back counted, its budget added
                    words[COUNT] = rs.count
                    words[BUDGET] = rs.budget
                words[NEXT_REGION] = rs.next_region
        except BaseException as exc:  # noqa: BLE001 - re-raised by the run, unchanged
            self.error = exc
            words[STATUS] = STATUS_RAISED
            return 0

    def unregister(self) -> None:
        """Take the frames out of ``rs.mem`` (they stay between callbacks, where only
        compiled code runs, and are checked against the live ones at each)."""
        registered = self.registered
        if registered:  # (none: deepest is 0 too)
            mem = self.rs.mem
            for region in registered:
                mem.pop(region, None)
            self.registered, self.deepest = [], 0


class NativeProgram:
    """A program compiled to machine code; ``entry(start)`` runs a subprogram."""

    def __init__(self, exe: Executable) -> None:
        self.exe = exe
        self.frames = check_compilable(exe)
        self.maps = native_lookup_maps(exe)
        bound = bound_helpers(exe)
        self.bound = list(bound.values())
        ir, self.keeps_gil = native_ir(exe, self.frames, self.maps, bound)
        module = llvm.parse_assembly(ir)
        module.verify()
        machine = _machine()
        tuning = llvm.create_pipeline_tuning_options(speed_level=2)
        builder = llvm.create_pass_builder(machine, tuning)
        builder.getModulePassManager().run(module, builder)
        # MCJIT owns the module; the engine lives as long as this object (and exe)
        self.engine = llvm.create_mcjit_compiler(module, machine)
        self.engine.finalize_object()
        self.functions = {start: self.engine.get_function_address(f"E{start}")
                          for start in exe.subprogs}
        self.free: list[_Run] = []
        # per map whose lookups run natively: where its counts of them are in a run's words,
        # its machine and that machine's current task state (whose CPU they are counted to)
        # and its access statistics' C counts, local and remote (exported: they stay where they
        # are for C to add to), which _Run.finish adds them to
        words = map_words(self.frames, self.maps)
        lookup_maps = [exe.static_regions[region] for region in self.maps]
        self.lookup_stats = tuple(
            (words[region], bpf_map.machine, bpf_map.machine.current,
             memoryview(bpf_map.access_stats.c_local),
             memoryview(bpf_map.access_stats.c_remote))
            for region, bpf_map in zip(self.maps, lookup_maps, strict=True))
        # its runs give compiled code their task (PID_TGID) where it calls for it
        self.reads_task = any(
            insn is not None and OPCODES[insn.opcode].kind is Kind.CALL and insn.src == 0
            and _unwrapped(exe.helpers.get(insn.imm)) is bpf_get_current_pid_tgid
            for insn in exe.slots)

    def entry(self, start: int) -> Callable:
        """``f(rs, r1, r2, r3, r4, r5) -> r0`` running the subprogram at ``start``: the C
        cache model's NativeEntry, which hands what is not its common path to
        ``python_entry``'s function, or where that is not built, that function."""
        run_native = self.python_entry(start)
        if NATIVE_ENTRY is None:
            return run_native
        return NATIVE_ENTRY(self.functions[start], self.free, run_native, self.failed,
                            _ENTRY_LAYOUT, self.keeps_gil, self.reads_task, NATIVE_VALUES)

    def python_entry(self, start: int) -> Callable:
        """``entry``'s function in Python, the reference."""
        function = self.functions[start]
        free = self.free
        call = CALL_NATIVE or _ctypes_call
        keeps_gil, reads_task = self.keeps_gil, self.reads_task

        def run_native(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
            try:  # (another thread may take the last free state between a test and a pop)
                run = free.pop()
            except IndexError:  # a run of this program's: its exe and bound helpers are its
                run = _Run(self.frames, self.maps)
                run.exe, run.bound, run.lookup_stats = self.exe, self.bound, self.lookup_stats
            words = run.words
            words[COUNT] = rs.count
            words[BUDGET] = rs.budget
            words[NEXT_REGION] = rs.next_region
            words[STATUS] = STATUS_OK
            words[DEPTH] = 0
            run.rs = rs
            mem = rs.mem
            words[RS_MEM] = id(mem)
            words[RS_VALUE_REGIONS] = id(rs.value_regions)
            run.reach_record(mem.get(CTX_REGION))
            machine = rs.machine  # run_on, unless on the last run's machine and CPU
            if machine is not run.machine or \
                    (0 if machine is None else machine.current.cpu) != run.cpu:
                run.run_on(machine)
            if reads_task:
                words[PID_TGID] = 0 if machine is None else machine.current_pid_tgid()
            try:
                # a run charged from machine code needs the GIL for all its work, and one
                # calling into Python at every map op needs it often: they keep it
                r0 = call(function, run.address, r1, r2, r3, r4, r5,
                          keeps_gil or words[CHARGES] == CHARGES_NATIVE)
            finally:
                if run.registered:
                    run.unregister()
                run.finish()
                rs.count = words[COUNT]
                rs.next_region = words[NEXT_REGION]
                status, error = words[STATUS], run.error
                run.rs = run.error = None
                free.append(run)
            if status != STATUS_OK:
                self.failed(rs, status, error, words[FAULT_PC])
            return r0

        return run_native

    def failed(self, rs: RunState, status: int, error: BaseException | None,
               fault_pc: int) -> NoReturn:
        """Raise what stopped a run: what it raised (STATUS_RAISED), or the budget
        (STATUS_ELOOP, at the block of ``fault_pc``)."""
        if status == STATUS_RAISED:
            if error is None:  # @py_callback could not call Python at all
                raise MemoryError("the native tier could not call back into Python")
            raise error
        raise self.over_budget(rs, fault_pc)

    def over_budget(self, rs: RunState, block_pc: int) -> ProgramFault:
        """The interpreter's ELOOP: at the instruction of the block that passed the budget."""
        slots = self.exe.slots
        pc = block_pc
        for _ in range(rs.budget - rs.count):
            pc += slots[pc].slots
        rs.count = rs.budget + 1
        return rs.over_budget(pc)


def native_compile(exe: Executable) -> NativeProgram:
    """Compile ``exe`` (NativeRefused: run it on the JIT instead)."""
    missing = native_missing()
    if missing:
        raise ValueError(missing)
    return NativeProgram(exe)
