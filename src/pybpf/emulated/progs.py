"""Programs on the emulated backend: load, info, ids, tracepoint attachment.

``ProgramsMixin`` is the part of ``EmulatedSystem`` that translates BPF_PROG_LOAD,
BPF_PROG_TEST_RUN (through test_run.py), prog info / get_fd_by_id and tracepoint attachment
(``pybpf.system.System`` normalised the arguments and owns the error boundary); it relies
on the system's fd table, id allocator and map references (``fd_install``, ``info_fd_get``,
``map_from_fd``, ``bpf_map_inc`` / ``bpf_map_put``, ``prog_idr_alloc``, ``bpf_prog_inc`` /
``bpf_prog_put``).

Rules this module keeps:
- Load checks follow kernel/bpf/syscall.c ``bpf_prog_load`` then the verifier: unknown flags
  and types -> EINVAL, 0 or > 1M insns -> E2BIG, a bad name -> EINVAL, then
  ``verifier.bpf_check`` (the kernel's messages, in a ``VerifierError`` with the log).
- A program holds a reference on every map it uses until it is released; each fd and each
  PROG_ARRAY slot holds a reference on the program.
- Test runs are test_run.py's (net/bpf/test_run.c). ``duration`` is modeled time: the mean
  per run over ``repeat`` of what the run cost on the machine's profile.
- Tracepoints: ``trigger_tracepoint`` runs the attached programs on the current CPU (each run
  costs ``tracepoint_entry``); ``enter_syscall`` is a task on the current CPU making a syscall:
  its entry cost, then its sys_enter tracepoint.
- The tag is the kernel's: the first 8 bytes of SHA-256 over the instructions with the
  immediates of map-referencing lddw zeroed.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

from ..accelerator import ENTER_SYSCALL_METHOD, FIRE_TRACEPOINT
from ..attrs import ProgAttr, TestRunRequest
from ..errors import KernelError, prog_description
from ..system import ProgInfo, TestRun
from ..uapi import (
    BPF_PSEUDO_MAP_FD,
    BPF_PSEUDO_MAP_VALUE,
    ProgType,
)
from .maps.bpf_map import MAPS_CONTAINING_PROGS, bpf_prog_map_compatible
from .net.netdev import net_of
from .prog.btf import check_btf_func, vmlinux_kfuncs
from .prog.core import ENGINES, bpf_prog_select_runtime, entry_of, run_prog
from .prog.executable import Executable
from .prog.helpers import helper_funcs
from .prog.kfuncs import kfunc_funcs
from .prog.log import bpf_vlog_init
from .prog.memory import (
    CTX_REGION,
    DEFAULT_BUDGET,
    PACKET_REGION,
    RunEnv,
    RunState,
)
from .prog.verifier import bpf_check
from .syscall import (
    bpf_obj_name_cpy,
    bpf_prog_load_check_attach,
    check_sleepable,
    sleepable_map_from_fd,
)
from .test_run import SKB_PROG_TYPES, bpf_prog_test_run

BPF_F_SLEEPABLE = 1 << 4
BPF_F_TOKEN_FD = 1 << 16
# prog_flags bpf_prog_load accepts: BPF_F_STRICT_ALIGNMENT .. BPF_F_TEST_REG_INVARIANTS (1 << 7)
# and BPF_F_TOKEN_FD.
_PROG_FLAGS = (1 << 8) - 1 | BPF_F_TOKEN_FD
BPF_COMPLEXITY_LIMIT_INSNS = 1_000_000

# Program types the emulated backend loads, and which of them have a test run.
LOADABLE_PROG_TYPES = SKB_PROG_TYPES | {ProgType.XDP, ProgType.TRACEPOINT,
                                        ProgType.RAW_TRACEPOINT, ProgType.SYSCALL,
                                        ProgType.SK_SKB, ProgType.SK_MSG, ProgType.KPROBE,
                                        ProgType.PERF_EVENT}
TRACEPOINT_PROG_TYPES = frozenset({ProgType.TRACEPOINT})

_GPL_COMPATIBLE = (b"GPL", b"GPL v2", b"GPL and additional rights", b"Dual BSD/GPL",
                   b"Dual MIT/GPL", b"Dual MPL/GPL")


def bpf_prog_calc_tag(insns: bytes) -> bytes:
    """The program tag: SHA-256 (6.18) over the insns, map lddw immediates zeroed."""
    data = bytearray(insns)
    pc = 0
    while pc < len(data) // 8:
        code, regs = data[8 * pc], data[8 * pc + 1]
        if code == 0x18 and (regs >> 4) in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE) \
                and pc + 1 < len(data) // 8:
            data[8 * pc + 4:8 * pc + 8] = bytes(4)
            data[8 * pc + 12:8 * pc + 16] = bytes(4)
            pc += 2
            continue
        pc += 1
    return hashlib.sha256(bytes(data)).digest()[:8]


class BpfProg:
    """struct bpf_prog: the loaded program, its maps, its compiled form."""

    def __init__(self, system: Any, prog_type: int, insns: bytes, verified, name: str,
                 expected_attach_type: int, prog_flags: int, gpl: bool) -> None:
        self.system = system
        self.prog_type = prog_type
        self.expected_attach_type = expected_attach_type
        self.prog_flags = prog_flags
        self.gpl_compatible = gpl
        self.insns = insns
        self.name = name
        self.tag = bpf_prog_calc_tag(insns)
        self.used_maps = list(verified.maps)
        self.max_ctx_offset = verified.max_ctx_offset
        self.executable = Executable(verified.insns,
                                     helper_funcs(prog_type, system.machine.timing.modeled),
                                     verified.pseudo,
                                     owner=self, kfuncs=kfunc_funcs(vmlinux_kfuncs()))
        self.refcnt = 0
        self.id = 0
        self.run_cnt = 0
        self.run_time_ns = 0

    def fd_release(self) -> None:
        """Closing one fd drops that fd's reference."""
        self.system.bpf_prog_put(self)

    def release(self) -> None:
        """The last reference is gone (bpf_prog_put -> __bpf_prog_put_noref): drop the maps."""
        maps, self.used_maps = self.used_maps, []
        for bpf_map in maps:
            self.system.bpf_map_put(bpf_map)

    def describe(self) -> str:
        return prog_description(self.prog_type, self.name, self.id)

    def run(self, ctx: Any, *, packet: Any = b"", engine: str | None = None) -> RunState:
        """Run once with ``ctx`` (a ``CtxRegion``, bytes (read-only) or a bytearray) as R1;
        the returned RunState has ``retval`` (R0, 64 bits) and what helpers recorded."""
        env = self.system.run_env  # what self.run_env gives, without the second property
        if engine is not None:
            env = dataclasses.replace(env, engine=engine)
        rs = RunState(env, packet)
        rs.mem[CTX_REGION] = ctx
        if type(packet) is not bytes and isinstance(packet, (bytearray, memoryview)):
            rs.mem[PACKET_REGION] = packet
        rs.retval = run_prog(self.executable, rs)
        return rs

    @property
    def run_env(self) -> RunEnv:
        """What a run of this program sees: its system's machine, budget and engine."""
        return self.system.run_env


_NO_TRACEPOINTS: dict = {}  # a system with none attached yet (never filled)


class _Tracepoint:
    """An attachment of a TRACEPOINT program (the perf event fd the kernel would give)."""

    def __init__(self, system: Any, prog: BpfProg, category: str, name: str) -> None:
        self.system = system
        self.prog = prog
        self.key = _tracepoint_key(category, name)

    def fd_release(self) -> None:
        self.system._detach_tracepoint(self)


class ProgramsMixin:
    """BPF_PROG_* commands of the emulated system (see the module docstring)."""

    _bpf_engine = "jit"
    _insn_budget = DEFAULT_BUDGET
    _run_env: RunEnv | None = None
    _run_state_proto: RunState | None = None
    # (category, name) -> attached links: the system's own dict once a program is attached
    _tracepoints: dict[tuple[str, str], tuple[_Tracepoint, ...]] = _NO_TRACEPOINTS

    @property
    def bpf_engine(self) -> str:
        """What runs the programs: "jit", "native" or "interp" (the reference interpreter)."""
        return self._bpf_engine

    @bpf_engine.setter
    def bpf_engine(self, engine: str) -> None:
        self._bpf_engine = engine
        self._run_env = self._run_state_proto = None

    @property
    def insn_budget(self) -> int:
        """The instructions one run may execute."""
        return self._insn_budget

    @insn_budget.setter
    def insn_budget(self, budget: int) -> None:
        self._insn_budget = budget
        self._run_env = self._run_state_proto = None

    @property
    def run_env(self) -> RunEnv:
        """The environment of this system's program runs (``prog/core.py``), made again only
        after the engine or the budget is set (every run asks for it)."""
        env = self._run_env
        if env is None:
            env = self._run_env = RunEnv(self.machine, self._insn_budget, self._bpf_engine)
        return env

    def _run_state(self) -> RunState:
        """The prototype RunState of ``run_env``, never run itself: each of a tracepoint's
        runs gets a copy of it (``trace_call_bpf``), made without RunState's __init__, with
        the engine's entry maker run_prog gives a run (which trace_call_bpf's runs of a native
        entry, without run_prog, need; run_prog says what an unknown engine is)."""
        proto = self._run_state_proto
        if proto is None:
            proto = self._run_state_proto = RunState(self.run_env)
            if self._bpf_engine in ENGINES:
                proto.entry_of = entry_of(self._bpf_engine)
        return proto

    # -- load --------------------------------------------------------------------------------
    def _prog_load(self, attr: ProgAttr) -> int:
        """bpf_prog_load's checks, then the verifier; a refusal with a log is the verifier's."""
        self.machine.bpf_syscall()
        if attr.prog_flags & ~_PROG_FLAGS:
            raise KernelError(errno.EINVAL, f"prog_flags {attr.prog_flags:#x} has unknown bits")
        if attr.prog_flags & BPF_F_TOKEN_FD:  # bpf_token_get_from_fd: no BPF tokens here
            raise KernelError(errno.EINVAL, "BPF_F_TOKEN_FD: prog_token_fd is not a BPF token "
                              "(the emulated backend has none)")
        count = len(attr.insns) // 8
        if count == 0 or count > BPF_COMPLEXITY_LIMIT_INSNS:
            raise KernelError(errno.E2BIG, f"{count} instructions: a program has 1 to "
                                           f"{BPF_COMPLEXITY_LIMIT_INSNS}")
        prog_type = attr.prog_type
        if prog_type not in LOADABLE_PROG_TYPES:
            raise KernelError(errno.EINVAL, f"program type {prog_type} cannot be loaded by the "
                              "emulated backend (it loads: " + ", ".join(
                                  sorted(ProgType(t).name for t in LOADABLE_PROG_TYPES)) + ")")
        bpf_prog_load_check_attach(prog_type, attr.expected_attach_type)
        name = bpf_obj_name_cpy(attr.prog_name, "prog_name")
        gpl = attr.license.split(b"\0", 1)[0] in _GPL_COMPATIBLE
        bpf_vlog_init(attr.log_level)
        func_info = None  # without it, no callbacks, and every subprogram is static
        if attr.prog_btf_fd or attr.func_info:
            btf = self.btf_get_by_fd(attr.prog_btf_fd)
            self.btf_put(btf)
            if attr.func_info:
                func_info = check_btf_func(attr.insns, btf.btf, attr.func_info,
                                           attr.func_info_rec_size)
        map_from_fd = self.map_from_fd
        if attr.prog_flags & BPF_F_SLEEPABLE:
            map_from_fd = functools.partial(sleepable_map_from_fd, self.map_from_fd)
        verified = bpf_check(attr.insns, prog_type, map_from_fd, gpl,
                             attr.expected_attach_type,
                             functools.partial(check_sleepable, prog_type, attr.prog_flags),
                             func_info, nr_cpu_ids=self.machine.num_cpus)
        prog = BpfProg(self, prog_type, attr.insns, verified, name, attr.expected_attach_type,
                       attr.prog_flags, gpl)
        # bpf_prog_select_runtime -> bpf_check_tail_call: after the verifier, no log
        if not all(bpf_prog_map_compatible(bpf_map, prog) for bpf_map in prog.used_maps
                   if bpf_map.map_type in MAPS_CONTAINING_PROGS):
            raise KernelError(errno.EINVAL, "a map of the program holds programs of another "
                              "type (its owner: the first program that used it)")
        for bpf_map in prog.used_maps:
            self.bpf_map_inc(bpf_map)
        # translate at load: a timed run times only the run
        bpf_prog_select_runtime(prog.executable, self.bpf_engine)
        prog.refcnt = 1
        prog.id = self.prog_idr_alloc(prog)
        return self.fd_install(prog)

    # -- info and ids ------------------------------------------------------------------------
    def _prog_get_info(self, fd: int) -> ProgInfo:
        self.machine.bpf_syscall()
        obj = self.info_fd_get(fd)
        if not isinstance(obj, BpfProg):
            raise KernelError(errno.EINVAL, f"fd {fd} is not a program")
        return ProgInfo(type=obj.prog_type, id=obj.id, tag=obj.tag, name=obj.name,
                        xlated_prog_len=len(obj.insns), jited_prog_len=0,
                        map_ids=tuple(m.id for m in obj.used_maps),
                        run_time_ns=obj.run_time_ns, run_cnt=obj.run_cnt)

    def _prog_get_fd_by_id(self, prog_id: int) -> int:
        self.machine.bpf_syscall()
        prog = self.prog_from_id(prog_id)
        self.bpf_prog_inc(prog)
        return self.fd_install(prog)

    # -- test run ----------------------------------------------------------------------------
    def _prog_test_run(self, prog_fd: int, req: TestRunRequest) -> TestRun:
        self.machine.bpf_syscall()
        return bpf_prog_test_run(self.prog_from_fd(prog_fd), req)

    # -- tracepoints -------------------------------------------------------------------------
    def _attach_tracepoint(self, prog_fd: int, category: str, name: str) -> int:
        self.machine.bpf_syscall()
        # The tracepoint's id is read (tracefs) and its perf event opened before the program
        # is set on it (PERF_EVENT_IOC_SET_BPF), as the kernel backend does.
        events = "/sys/kernel/tracing/events"
        if os.path.isdir(events) and not os.path.isdir(os.path.join(events, category, name)):
            raise KernelError(errno.ENOENT, f"no tracepoint {category}/{name} in {events}")
        prog = self.prog_from_fd(prog_fd)
        if prog.prog_type not in TRACEPOINT_PROG_TYPES:
            raise KernelError(errno.EINVAL, f"{prog.describe()} is not a TRACEPOINT program")
        return self._attach(prog, (category, name), once=True)

    def _raw_tracepoint_open(self, prog_fd: int, name: str) -> int:
        """BPF_RAW_TRACEPOINT_OPEN: a RAW_TRACEPOINT program on tracepoint ``name`` (any
        category: raw tracepoints are named without one)."""
        prog = self.prog_from_fd(prog_fd)
        if prog.prog_type not in (ProgType.RAW_TRACEPOINT, ProgType.RAW_TRACEPOINT_WRITABLE):
            raise KernelError(errno.EINVAL, "not a raw tracepoint program "
                              "(ProgType.RAW_TRACEPOINT)")
        events = "/sys/kernel/tracing/events"
        if os.path.isdir(events) and not any(
                os.path.isdir(os.path.join(events, category, name))
                for category in os.listdir(events)):
            raise KernelError(errno.ENOENT, f"no tracepoint named {name} in {events}")
        net_of(self.machine).add_trace_sink(self.trigger_raw_tracepoint)  # the data path's events
        return self._attach(prog, ("raw", name))

    def _attach(self, prog: BpfProg, key: tuple[str, str], once: bool = False) -> int:
        """``prog`` on tracepoint ``key``; ``once``: a perf event's program, which
        bpf_prog_array_copy refuses (EEXIST) where the tracepoint already has it (a raw
        tracepoint's link is a probe of its own each time)."""
        link = _Tracepoint(self, prog, *key)
        with _tracepoint_lock:
            tracepoints = self._tracepoint_links()
            links = tracepoints.get(link.key, ())
            if once and any(other.prog is prog for other in links):
                raise KernelError(errno.EEXIST, f"{prog.describe()} is attached to "
                                  f"{key[0]}/{key[1]} already: close that attachment first")
            self.bpf_prog_inc(prog)
            tracepoints[link.key] = (*links, link)
        return self.fd_install(link)

    def _tracepoint_links(self) -> dict[tuple[str, str], tuple[_Tracepoint, ...]]:
        """(category, name) -> attached links, kept on the system (the mixin has no __init__).
        Each tuple is replaced, never changed (under ``_tracepoint_lock``): a firing reads
        the one it finds without the lock."""
        return self.__dict__.setdefault("_tracepoints", {})

    def _detach_tracepoint(self, link: _Tracepoint) -> None:
        with _tracepoint_lock:
            tracepoints = self._tracepoint_links()
            links = tracepoints.get(link.key, ())
            if link in links:
                at = links.index(link)
                tracepoints[link.key] = links[:at] + links[at + 1:]
        self.bpf_prog_put(link.prog)

    def trigger_raw_tracepoint(self, name: str, args: Sequence[int] = ()) -> list[int]:
        """Fire raw tracepoint ``name`` with ``args`` (struct bpf_raw_tracepoint_args, one
        u64 each): every attached program runs once; their return values in order."""
        return self.trigger_tracepoint("raw", name, struct.pack(f"<{len(args)}Q", *args))

    def trigger_tracepoint(self, category: str, name: str, ctx: bytes = b"") -> list[int]:
        """Fire tracepoint ``category/name`` with the raw record ``ctx``: every attached
        program runs once on the current CPU; returns their return values (R0) in order."""
        return self._fire((category, name), ctx)

    def _fire(self, key: tuple[str, str], ctx: bytes) -> list[int]:
        """``trigger_tracepoint`` of tracepoint ``key``. The links are the tuple attached
        when it fires (attaching or detaching meanwhile makes a new one); without modeled
        time nothing is charged, so the charge calls are skipped (UnmodeledTiming's do
        nothing). In C where built (FIRE_TRACEPOINT, its runs trace_call_bpf's)."""
        if FIRE_TRACEPOINT is not None:
            return FIRE_TRACEPOINT(self, key, ctx)
        links = self._tracepoints.get(key, ())
        record = ctx if type(ctx) is bytes else bytes(ctx)
        if not links:
            return []
        timing = self.machine.timing
        cpu = self.machine.current.cpu if timing.modeled else None
        retvals = []
        for link in links:
            if cpu is not None:
                timing.charge(cpu, "tracepoint_entry")
            retvals.append(link.prog.run(record).retval)
        return retvals

    def enter_syscall(self, syscall: str, ctx: bytes = b"") -> list[int]:
        """A task on the current CPU makes ``syscall``: a modeled operation begins, the entry
        costs ``syscall_entry`` (``syscall_connect`` for connect), and tracepoint
        syscalls/sys_enter_<syscall> fires with the record ``ctx``."""
        key = _SYSCALL_TRACEPOINTS.get(syscall)
        if key is None:
            key = _SYSCALL_TRACEPOINTS[syscall] = ("syscalls", f"sys_enter_{syscall}")
        self.machine.bpf_syscall("syscall_connect" if syscall == "connect" else "syscall_entry")
        return self._fire(key, ctx)

    # the same in C where built, without a Python frame on the way (this one its reference)
    if ENTER_SYSCALL_METHOD is not None:
        _enter_syscall_reference = enter_syscall
        enter_syscall = ENTER_SYSCALL_METHOD


_tracepoint_lock = threading.Lock()
# syscall -> its tracepoint's key, ("syscalls", "sys_enter_<syscall>"), made once (here, by
# C's enter_syscall, which keeps its keys here too, or by an attach)
_SYSCALL_TRACEPOINTS: dict[str, tuple[str, str]] = {}


def _tracepoint_key(category: str, name: str) -> tuple[str, str]:
    """The key of tracepoint ``category/name``: for a syscall's entry the tuple its
    enter_syscall fires, so that the firing's lookup of the links finds its own key."""
    if category == "syscalls" and name.startswith("sys_enter_"):
        return _SYSCALL_TRACEPOINTS.setdefault(name.removeprefix("sys_enter_"),
                                               (category, name))
    return (category, name)
