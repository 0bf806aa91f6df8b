"""The System-level differential fuzz: seeded random calls (fuzz_calls.py) on two Systems side
by side, compared call by call.

Rules the fuzz keeps:
- Each call's result is compared: the errno (or success, or TypeError/ValueError), and on
  success the bytes where both backends must give the same ones (``Call.compare``: element
  lookups, ordered walks and batches, info fields but ids, test-run output). fds and ids
  never are: each backend has its own handle -> fd table.
- Any other exception, on either backend, is a failure of its own; so is a call slower than
  ``CALL_SECONDS`` (counts like 2**32-1 must answer at once) or one that grows the process's
  peak memory by more than ``GROWTH_BYTES``.
- A disagreement is (input class, kernel result, emulated result). One in ``ALLOWED`` (each a
  difference docs/emulated-differences.md states) is counted
  and the sequence goes on, unless one side did what the other refused; any other ends its
  sequence, since the states have diverged.
- Pins are names under a prefix of the sequence in /sys/fs/bpf, removed when it ends (the
  emulated backend's in its own namespace); every fd a sequence made is closed.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import resource
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import errno_name
from ...system import BatchLookup, System
from ...uapi import MapType, ProgType
from .fuzz_calls import Call, Fd, FdBytes, FuzzGen, IdOf, Insns, Pin, _lddw_map

CALL_SECONDS = 5.0          # a call slower than this is a hang
GROWTH_BYTES = 512 << 20    # a call growing the process's peak RSS by more is a runaway
CLOSED_FD = 999_999          # an fd number neither backend has open
BPFFS = "/sys/fs/bpf"
TRACEFS_EVENTS = "/sys/kernel/tracing/events"

# Program types the emulated backend loads (emulated/progs.py's LOADABLE_PROG_TYPES).
EMULATED_PROG_TYPES = ("socket_filter", "sched_cls", "sched_act", "cgroup_skb", "lwt_in",
                       "lwt_out", "lwt_xmit", "xdp", "tracepoint", "raw_tracepoint", "syscall",
                       "sk_skb", "sk_msg", "kprobe", "perf_event")
# (input class regex, kernel results ("*": any), emulated results) -> the words of
# docs/emulated-differences.md.
Rule = tuple[str, frozenset[str], frozenset[str]]
_ANY = frozenset({"*"})
_NOT_LOADED = "|".join(name.lower() for name in ProgType.__members__
                       if name.lower() not in EMULATED_PROG_TYPES)
# Map types the emulated backend has (emulated/bpf_types.py's MAP_OPS), by number.
EMULATED_MAP_TYPES = frozenset({1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14, 15, 16, 18, 22, 23, 25,
                                27, 30, 31})
_NOT_CREATED = "|".join(str(t) for t in range(1, 40) if t not in EMULATED_MAP_TYPES
                        and t in MapType._value2member_map_)
ALLOWED: dict[Rule, str] = {
    (rf"prog_load\[({_NOT_LOADED})\]", _ANY, frozenset({"EINVAL", "E2BIG"})):
        "program types the emulated backend does not load are refused there",
    (rf"map_create\[type({_NOT_CREATED})\]", _ANY, frozenset({"EINVAL"})):
        "map types the emulated backend does not have are refused there",
    (r"link_create\[.*attach:(?!xdp,)", _ANY, frozenset({"EINVAL"})):
        "the emulated backend makes XDP and sockmap links only",
    # the lookup program reads a u32 at offset 0 of what it found: in a map of maps, the
    # inner map's struct bpf_map (its ops pointer)
    (r"prog_load\[.*\]\(lookup:(array|hash)_of_maps", frozenset({"ok"}),
     frozenset({"ENOTSUPP"})):
        "a program's load of such a field through a map pointer (a map's own, or an inner "
        "map's from a lookup in a map of maps) is refused with ENOTSUPP",
    (r"obj_pin\[link\]", _ANY, frozenset({"EINVAL"})):
        "links are not pinned there",
    (r"map_update_(elem|batch)\[devmap", frozenset({"ok"}), frozenset({"EINVAL"})):
        "devmap entries name the emulated machine's devices, not the host's",
}
Outcome = tuple


def _errno(err: int) -> str:
    return "EOPNOTSUPP" if err == errno.EOPNOTSUPP else errno_name(err)


def kind(outcome: Outcome) -> str:
    """What a disagreement is told by: the errno or exception, or "ok"."""
    return outcome[1] if outcome[0] in ("err", "crash") else outcome[0]


def allowed(label: str, a: Outcome, b: Outcome) -> str | None:
    """The reason a disagreement is deliberate (``ALLOWED``), None if it is not."""
    for (pattern, ka, kb), reason in ALLOWED.items():
        if (ka == _ANY or kind(a) in ka) and kind(b) in kb and re.match(pattern, label):
            return reason
    return None


class _HostFds:
    """fds both backends see alike: /dev/null and a UDP socket."""

    def __init__(self) -> None:
        self.devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def fd(self, kind: str) -> int:
        return {"devnull": self.devnull, "socket": self.sock.fileno()}.get(kind, CLOSED_FD)

    def close(self) -> None:
        os.close(self.devnull)
        self.sock.close()


class Side:
    """One backend running a sequence: its handle -> fd table."""

    def __init__(self, system: System, host: _HostFds, prefix: str) -> None:
        self.sys = system
        self.host = host
        self.prefix = prefix
        self.fds: dict[Fd, int] = {}

    def resolve(self, arg: object) -> object:
        if isinstance(arg, Fd):
            if arg.kind in ("map", "prog", "link", "btf"):
                return self.fds.get(arg, CLOSED_FD)
            return self.host.fd(arg.kind)
        if isinstance(arg, IdOf):
            fd = self.fds.get(arg.fd)
            if fd is None:
                return 0
            get_info = self.sys.prog_get_info if arg.fd.kind == "prog" else self.sys.map_get_info
            try:
                return get_info(fd).id
            except Exception:  # setting up the call; info's own failures show as its calls
                return 0
        if isinstance(arg, Pin):
            path = arg.template.replace("{p}", self.prefix)
            return os.fsencode(path) if arg.as_bytes else path
        if isinstance(arg, FdBytes):
            fd = self.resolve(arg.fd)
            return struct.pack("<I", fd & 0xFFFF_FFFF if isinstance(fd, int) else 0)
        if isinstance(arg, Insns):
            return arg.head + _lddw_map(self.resolve(arg.map_fd)) + arg.tail  # type: ignore
        if isinstance(arg, list):
            return [self.resolve(item) for item in arg]
        return arg

    def call(self, call: Call) -> tuple[Outcome, float, object]:
        """(outcome, seconds, what came back) of ``call`` on this backend."""
        args = [self.resolve(a) for a in call.args]
        kwargs = {k: self.resolve(v) for k, v in call.kwargs}
        fn: Callable = getattr(self.sys, call.command)
        start = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
        except OSError as exc:
            took = time.perf_counter() - start
            if exc.errno is None:
                return ("crash", type(exc).__name__, str(exc)[:200]), took, None
            if call.compare == "ok_or_enoent" and exc.errno == errno.ENOENT:
                return ("ok_or_enoent",), took, None
            return ("err", _errno(exc.errno)), took, None
        except (TypeError, ValueError) as exc:
            return (type(exc).__name__,), time.perf_counter() - start, None
        except Exception as exc:  # a failure of its own, whatever the other backend says
            return ("crash", type(exc).__name__, str(exc)[:200]), \
                time.perf_counter() - start, None
        took = time.perf_counter() - start
        return _success(call.compare, out), took, out

    def close_all(self) -> None:
        for fd in self.fds.values():
            with contextlib.suppress(Exception):
                self.sys.close(fd)
        self.fds.clear()
        pins = glob.glob(f"{BPFFS}/{self.prefix}*") if self.sys.name == "kernel" else [
            f"{BPFFS}/{self.prefix}n{i}" for i in range(4)]
        for path in pins:
            with contextlib.suppress(OSError):
                self.sys.obj_unpin(path)


def _success(compare: str, out: object) -> Outcome:
    if compare == "bytes" and isinstance(out, bytes | bytearray):
        return ("ok", bytes(out).hex())
    if compare == "info":
        return ("ok", out.type, out.key_size, out.value_size, out.max_entries,  # type: ignore
                out.map_flags, out.name, out.map_extra)  # type: ignore
    if compare == "prog_info":
        return ("ok", out.type, out.name)  # type: ignore
    if compare in ("batch", "sorted_batch") and isinstance(out, BatchLookup):
        pairs = [(k.hex(), v.hex()) for k, v in zip(out.keys, out.values, strict=True)]
        if compare == "batch":
            return ("ok", tuple(pairs), out.out_batch and out.out_batch.hex(), out.end)
        # Unordered: which elements a partial batch holds depends on the hash seed.
        return ("ok", tuple(sorted(pairs)), out.end) if out.end else ("ok",)
    if compare == "test_run":
        return ("ok", out.retval, out.data_out.hex(), out.ctx_out.hex())  # type: ignore
    if compare == "ok_or_enoent":
        return ("ok_or_enoent",)
    return ("ok",)


@dataclass
class Disagreement:
    label: str
    a: Outcome
    b: Outcome
    call: Call
    seq: int
    index: int

    def format(self, a_name: str, b_name: str) -> str:
        return (f"{self.label}: {a_name} {_show(self.a)} vs {b_name} {_show(self.b)}\n"
                f"    sequence {self.seq} call {self.index}: {_show(self.call.args, 300)} "
                f"{_show(self.call.kwargs, 200)}")


def _show(thing: object, limit: int = 160) -> str:
    text = repr(thing)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class FuzzSummary:
    calls: int = 0
    sequences: int = 0
    classes: set[str] = field(default_factory=set)
    disagreements: dict[tuple[str, str, str], Disagreement] = field(default_factory=dict)
    allowed: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # crashes, hangs, runaway memory

    @property
    def ok(self) -> bool:
        return not self.disagreements and not self.failures

    def report(self, a_name: str, b_name: str, limit: int = 40) -> str:
        lines = [f"system fuzz {a_name} vs {b_name}: {self.sequences} sequences, {self.calls} "
                 f"calls, {len(self.classes)} input classes, {len(self.disagreements)} "
                 f"disagreements, {sum(self.allowed.values())} allowed "
                 f"({len(self.allowed)} kinds), "
                 f"{len(self.failures)} failures"]
        for reason, n in sorted(self.allowed.items()):
            lines.append(f"  allowed x{n}: {reason}")
        for d in list(self.disagreements.values())[:limit]:
            lines.append("  " + d.format(a_name, b_name))
        if len(self.disagreements) > limit:
            lines.append(f"  ... and {len(self.disagreements) - limit} more")
        lines += ["  FAILURE " + f for f in self.failures[:limit]]
        return "\n".join(lines)


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def fuzz(a: System, b: System, seed: int, sequences: int, calls: int = 40,
         a_name: str = "kernel", b_name: str = "emulated",
         progress: Callable[[str], None] | None = None,
         call_seconds: float = CALL_SECONDS) -> FuzzSummary:
    """Run ``sequences`` random sequences of ``calls`` calls on ``a`` and ``b`` (the kernel
    first: its results are the oracle's)."""
    if a.num_possible_cpus != b.num_possible_cpus:
        raise ValueError(f"the backends disagree on the CPU count ({a.num_possible_cpus} vs "
                         f"{b.num_possible_cpus}); give the emulated one cpus= to match")
    summary = FuzzSummary()
    host = _HostFds()
    try:
        for index in range(sequences):
            _run_sequence(a, b, host, seed, index, calls, (a_name, b_name), summary,
                          call_seconds)
            if progress is not None and (index + 1) % 50 == 0:
                progress(f"{index + 1}/{sequences} sequences, {summary.calls} calls, "
                         f"{len(summary.disagreements)} disagreements")
    finally:
        host.close()
    return summary


def _run_sequence(a: System, b: System, host: _HostFds, seed: int, index: int, calls: int,
                  names: tuple[str, str], summary: FuzzSummary, call_seconds: float) -> None:
    gen = FuzzGen(seed, index, a.num_possible_cpus, os.path.isdir(TRACEFS_EVENTS))
    # One prefix per side, of one length: two kernel sides share the real bpffs.
    sides = (Side(a, host, f"pyfz{os.getpid()}_{seed}_{index}_a_"),
             Side(b, host, f"pyfz{os.getpid()}_{seed}_{index}_b_"))
    summary.sequences += 1
    try:
        with a.on_cpu(0), b.on_cpu(0):
            for i, call in enumerate(gen.sequence(calls)):
                summary.calls += 1
                summary.classes.add(call.label)
                results = []
                for side, name in zip(sides, names, strict=True):
                    before = _peak_rss()
                    outcome, took, out = side.call(call)
                    grown = _peak_rss() - before
                    if outcome[0] == "crash":
                        summary.failures.append(f"{name}: {call.label}: {outcome[1]}: "
                                                f"{outcome[2]} (sequence {index} call {i})")
                    if took > call_seconds:
                        summary.failures.append(f"{name}: {call.label} took {took:.1f} s "
                                                f"(sequence {index} call {i})")
                    if grown > GROWTH_BYTES:
                        summary.failures.append(f"{name}: {call.label} grew the process by "
                                                f"{grown >> 20} MiB (sequence {index} call {i})")
                    results.append((outcome, out))
                (ra, out_a), (rb, out_b) = results
                _track(call, sides, (out_a, out_b), (ra, rb))
                if ra != rb:
                    reason = allowed(call.label, ra, rb)
                    if reason is not None:
                        summary.allowed[reason] += 1
                        if "ok" in (ra[0], rb[0]):  # done on one side only: states differ
                            return
                        continue
                    key = (call.label, kind(ra), kind(rb))
                    summary.disagreements.setdefault(
                        key, Disagreement(call.label, ra, rb, call, index, i))
                    return
    finally:
        for side in sides:
            side.close_all()


def _track(call: Call, sides: tuple[Side, Side], outs: tuple, results: tuple) -> None:
    """Keep the fds a call made (both or neither: a one-sided success is closed) and forget
    the ones it closed."""
    made = [isinstance(out, int) and not isinstance(out, bool) and r[0] == "ok"
            for out, r in zip(outs, results, strict=True)]
    if call.creates is not None:
        for side, out, ok in zip(sides, outs, made, strict=True):
            if ok and all(made):
                side.fds[call.creates] = out
            elif ok:
                with contextlib.suppress(Exception):
                    side.sys.close(out)
    if call.command == "close" and isinstance(call.args[0], Fd):
        for side, r in zip(sides, results, strict=True):
            if r[0] == "ok":
                side.fds.pop(call.args[0], None)
