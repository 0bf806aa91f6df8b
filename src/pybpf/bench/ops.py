"""Element and batch operation costs through pybpf, side by side with references.

``python -m pybpf.bench.ops [--backend kernel|emulated|both] [--n N] [--json]``

On one HASH map (4-byte keys, 8-byte values, ``--entries`` keys) it times lookup, update,
delete, and batch lookup / batch update per element, through:

- kernel backend: a C program using libbpf (``ops_ref.c``, compiled into a temporary
  directory when gcc and libbpf-dev are present; nothing is installed), a bare ctypes
  bpf(2) call, pybpf's ``System`` call, and ``Map`` with the C accelerator and with the
  pure-Python path (a child process with PYBPF_NO_ACCEL=1);
- emulated backend: a plain ``dict`` with the same keys, the ``System`` call, and ``Map``,
  with modeled time (emulated/machine/timing.py) and without it (``modeled_time=False``).

Every figure is the best of ``--repeat`` rounds of ``--n`` operations, in ns per operation
(per element for batches), with the spread of its rounds, ops/s and the ratio to the
reference (C for the kernel, the dict for the emulated backend). Ratios and the speed-target
verdicts follow ``report.Ratio``: no verdict, and no speed-up over the reference, beyond what
the rounds' noise allows. Nothing here is used by the tests: tests never time.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .. import maps as maps_mod
from ..backends import system as make_system
from ..commands import run_standalone
from ..errors import BPFError
from ..maps import HashMap
from ..system import System
from ..uapi import MapType
from .args import int_arg
from .report import Progress, Ratio, spread

OPS = ("lookup", "update", "delete", "batch_lookup", "batch_lookup_arrays", "batch_update")
UNMODELED_SYSTEM = "System (model off)"  # the emulated System call without modeled time
# Ops compared with another op of the reference (arrays=True against the plain batch).
REF_OP = {"batch_lookup_arrays": "batch_lookup"}
REF_SOURCE = Path(__file__).with_name("ops_ref.c")
# What fits: every path holds the keys as ints and bytes, and the emulated map's elements cost
# about 2 KB per key in all; a batch buffer is at most as large.
MAX_ENTRIES = 1 << 20
ENTRIES_WHY = "about 2 KB of memory per key"
MAX_OPS = 10**8
MAX_REPEAT = 100


def once_ns(run: Callable[[], int]) -> float:
    """ns per item of one ``run()`` (which returns how many items it did)."""
    t0 = time.perf_counter_ns()
    items = run()
    return (time.perf_counter_ns() - t0) / max(items, 1)


def per_op(lookup, update, delete, batch_lookup, batch_update, st: Setup,
           batch_lookup_arrays=None) -> dict[str, Callable[[], float | str]]:
    """One measurement per op: ns per op (``delete`` times itself and returns ns spent);
    a backend without a batch command gives a note instead."""
    ops = {"lookup": lambda: once_ns(lookup), "update": lambda: once_ns(update),
           "delete": lambda: delete() / (st.rounds * st.entries),
           "batch_lookup": _unless_unsupported(batch_lookup),
           "batch_update": _unless_unsupported(batch_update)}
    if batch_lookup_arrays is not None:
        ops["batch_lookup_arrays"] = _unless_unsupported(batch_lookup_arrays)
    return ops


def _unless_unsupported(run: Callable[[], int]) -> Callable[[], float | str]:
    def one() -> float | str:
        try:
            return once_ns(run)
        except BPFError as exc:
            return f"n/a ({exc.strerror.split(':')[0]})"
    return one


class Setup:
    def __init__(self, entries: int, n: int, chunk: int, repeat: int) -> None:
        self.entries = entries
        self.rounds = max(n // entries, 1)
        self.chunk = chunk
        self.repeat = repeat
        self.keys = list(range(entries))
        self.kbytes = [k.to_bytes(4, "little") for k in self.keys]
        self.vbytes = [k.to_bytes(8, "little") for k in self.keys]


# -- the paths ------------------------------------------------------------------------------

def bench_map(system: System, st: Setup) -> tuple[dict, Callable]:
    """pybpf Map with int codecs: m[k], m[k] = v, del m[k], batch_lookup, batch_update."""
    m = HashMap(st.entries, int, int, key_size=4, value_size=8, name="bench_ops",
                system=system)
    keys, rounds = st.keys, st.rounds
    try:
        m.batch_update(keys, keys)

        def lookup() -> int:
            for _ in range(rounds):
                for k in keys:
                    m[k]
            return rounds * len(keys)

        def update() -> int:
            for _ in range(rounds):
                for k in keys:
                    m[k] = k
            return rounds * len(keys)

        def delete() -> int:
            spent = 0
            for _ in range(rounds):
                m.batch_update(keys, keys)
                t0 = time.perf_counter_ns()
                for k in keys:
                    del m[k]
                spent += time.perf_counter_ns() - t0
            m.batch_update(keys, keys)
            return spent

        def batch_lookup(arrays: bool = False) -> int:
            seen = 0
            for _ in range(rounds):
                for ks, _vs in m.batch_lookup(chunk=st.chunk, arrays=arrays):
                    seen += len(ks)
            return seen

        def batch_update() -> int:
            for _ in range(rounds):
                m.batch_update(keys, keys)
            return rounds * len(keys)

        return (per_op(lookup, update, delete, batch_lookup, batch_update, st,
                       lambda: batch_lookup(arrays=True)), m.close)
    except BaseException:
        m.close()
        raise


def bench_system(system: System, st: Setup) -> tuple[dict, Callable]:
    """The System interface itself: bytes in, bytes out."""
    fd = system.map_create(MapType.HASH, 4, 8, st.entries, map_name=b"bench_sys")
    kb, vb, rounds = st.kbytes, st.vbytes, st.rounds
    lookup_elem, update_elem = system.map_lookup_elem, system.map_update_elem
    delete_elem = system.map_delete_elem
    try:
        def fill() -> None:
            for k, v in zip(kb, vb, strict=True):
                update_elem(fd, k, v, 0)

        fill()

        def lookup() -> int:
            for _ in range(rounds):
                for k in kb:
                    lookup_elem(fd, k)
            return rounds * len(kb)

        def update() -> int:
            for _ in range(rounds):
                for k, v in zip(kb, vb, strict=True):
                    update_elem(fd, k, v, 0)
            return rounds * len(kb)

        def delete() -> int:
            spent = 0
            for _ in range(rounds):
                fill()
                t0 = time.perf_counter_ns()
                for k in kb:
                    delete_elem(fd, k)
                spent += time.perf_counter_ns() - t0
            fill()
            return spent

        def batch_lookup() -> int:
            seen = 0
            for _ in range(rounds):
                token = None
                while True:
                    result = system.map_lookup_batch(fd, token, st.chunk)
                    seen += len(result.keys)
                    if result.end:
                        break
                    token = result.out_batch
            return seen

        def batch_update() -> int:
            for _ in range(rounds):
                system.map_update_batch(fd, kb, vb)
            return rounds * len(kb)

        return (per_op(lookup, update, delete, batch_lookup, batch_update, st),
                lambda: system.close(fd))
    except BaseException:
        system.close(fd)
        raise


class _ElemAttr(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("key", ctypes.c_char_p), ("value", ctypes.c_void_p),
                ("flags", ctypes.c_uint64)]


class _BatchAttr(ctypes.Structure):
    _fields_ = [("in_batch", ctypes.c_void_p), ("out_batch", ctypes.c_void_p),
                ("keys", ctypes.c_void_p), ("values", ctypes.c_void_p),
                ("count", ctypes.c_uint32), ("map_fd", ctypes.c_uint32),
                ("elem_flags", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


def bench_ctypes(system: System, st: Setup) -> tuple[dict, Callable]:
    """A bare ctypes bpf(2) call per op: one prebuilt attr, no decoding (the floor of any
    pure-Python binding)."""
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    nr = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine)
    if nr is None:
        raise RuntimeError(f"bpf(2) number unknown for {os.uname().machine}")
    fd = system.map_create(MapType.HASH, 4, 8, st.entries, map_name=b"bench_ctypes")
    kb, vb, rounds = st.kbytes, st.vbytes, st.rounds
    value = ctypes.create_string_buffer(8)
    attr = _ElemAttr(map_fd=fd, value=ctypes.addressof(value))
    ref, size = ctypes.byref(attr), ctypes.sizeof(attr)
    vbufs = [ctypes.create_string_buffer(v, 8) for v in vb]
    try:
        def fill() -> None:
            for k, v in zip(kb, vbufs, strict=True):
                attr.key = k
                attr.value = ctypes.addressof(v)
                syscall(nr, 2, ref, size)
            attr.value = ctypes.addressof(value)

        fill()

        def lookup() -> int:
            for _ in range(rounds):
                for k in kb:
                    attr.key = k
                    syscall(nr, 1, ref, size)
            return rounds * len(kb)

        def update() -> int:
            addr = ctypes.addressof(value)
            attr.value = addr
            for _ in range(rounds):
                for k in kb:
                    attr.key = k
                    syscall(nr, 2, ref, size)
            return rounds * len(kb)

        def delete() -> int:
            spent = 0
            for _ in range(rounds):
                fill()
                attr.value = None
                t0 = time.perf_counter_ns()
                for k in kb:
                    attr.key = k
                    syscall(nr, 3, ref, size)
                spent += time.perf_counter_ns() - t0
            fill()
            return spent

        keys_buf = ctypes.create_string_buffer(st.chunk * 4)
        values_buf = ctypes.create_string_buffer(st.chunk * 8)
        token_in, token_out = ctypes.c_uint32(), ctypes.c_uint32()
        battr = _BatchAttr(map_fd=fd, out_batch=ctypes.addressof(token_out))
        bref, bsize = ctypes.byref(battr), ctypes.sizeof(battr)

        def batch_lookup() -> int:
            # The addresses are taken here so the closure keeps the buffers alive.
            battr.keys = ctypes.addressof(keys_buf)
            battr.values = ctypes.addressof(values_buf)
            seen = 0
            for _ in range(rounds):
                battr.in_batch = None
                while True:
                    battr.count = st.chunk
                    ret = syscall(nr, 24, bref, bsize)
                    seen += battr.count
                    if ret < 0:
                        break  # ENOENT: the end
                    token_in.value = token_out.value
                    battr.in_batch = ctypes.addressof(token_in)
            return seen

        all_keys = ctypes.create_string_buffer(b"".join(kb), len(kb) * 4)
        all_values = ctypes.create_string_buffer(b"".join(vb), len(vb) * 8)
        uattr = _BatchAttr(map_fd=fd)
        uref = ctypes.byref(uattr)

        def batch_update() -> int:
            uattr.keys = ctypes.addressof(all_keys)
            uattr.values = ctypes.addressof(all_values)
            for _ in range(rounds):
                uattr.count = len(kb)
                syscall(nr, 26, uref, bsize)
            return rounds * len(kb)

        return (per_op(lookup, update, delete, batch_lookup, batch_update, st),
                lambda: system.close(fd))
    except BaseException:
        system.close(fd)
        raise


def bench_dict(st: Setup) -> tuple[dict, Callable]:
    """A plain dict with the same int keys: the floor for an emulated map."""
    keys, rounds = st.keys, st.rounds
    d = dict.fromkeys(keys, 0)

    def lookup() -> int:
        for _ in range(rounds):
            for k in keys:
                d[k]
        return rounds * len(keys)

    def update() -> int:
        for _ in range(rounds):
            for k in keys:
                d[k] = k
        return rounds * len(keys)

    def delete() -> int:
        spent = 0
        for _ in range(rounds):
            d.update(dict.fromkeys(keys, 0))
            t0 = time.perf_counter_ns()
            for k in keys:
                del d[k]
            spent += time.perf_counter_ns() - t0
        d.update(dict.fromkeys(keys, 0))
        return spent

    return ({"lookup": lambda: once_ns(lookup), "update": lambda: once_ns(update),
             "delete": lambda: delete() / (st.rounds * st.entries)}, lambda: None)


def bench_c_reference(st: Setup, tmp: str) -> tuple[dict, Callable] | str:
    """Compile ops_ref.c against libbpf into ``tmp``; a reason string when that cannot be
    done. Each round runs the program once."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        return "no C compiler (apt-get install gcc libbpf-dev)"
    exe = Path(tmp) / "ops_ref"
    build = subprocess.run([gcc, "-O2", "-o", str(exe), str(REF_SOURCE), "-lbpf"],
                           capture_output=True, text=True)
    if build.returncode:
        first = (build.stderr.strip().splitlines() or ["?"])[0]
        return f"cannot build the libbpf reference ({first}); apt-get install gcc libbpf-dev"

    def one(op: str) -> float | str:
        run = subprocess.run([str(exe), str(st.entries), str(st.rounds * st.entries),
                              str(st.chunk), "1", op], capture_output=True, text=True)
        if run.returncode:
            return f"the libbpf reference failed: {run.stderr.strip()}"
        return float(run.stdout.split()[1])

    ops = ("lookup", "update", "delete", "batch_lookup", "batch_update")
    return {op: functools.partial(one, op) for op in ops}, lambda: None


def bench_map_pure(backend: str, st: Setup) -> tuple[dict, Callable]:
    """``Map`` on the pure-Python path: each round is a child process with PYBPF_NO_ACCEL=1."""
    env = dict(os.environ, PYBPF_NO_ACCEL="1")
    cmd = [sys.executable, "-m", "pybpf.bench.ops", "--backend", backend, "--json",
           "--map-only", "--entries", str(st.entries), "--n", str(st.rounds * st.entries),
           "--chunk", str(st.chunk), "--repeat", "1"]

    latest: dict[str, float | str] = {}

    def one(op: str) -> float | str:
        # One child run per round gives every op: it runs when the round asks for lookup.
        if op == "lookup" or not latest:
            run = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if run.returncode:
                return f"child failed: {run.stderr.strip().splitlines()[-1:]}"
            latest.clear()
            latest.update((row["op"], row.get("ns", row.get("note")))
                          for row in json.loads(run.stdout))
        return latest.get(op, "n/a")

    return {op: functools.partial(one, op) for op in OPS}, lambda: None


# -- running and printing ---------------------------------------------------------------------

def run_backend(backend: str, st: Setup, map_only: bool, show_progress: bool) -> list[dict]:
    """Every path of one backend, interleaved op by op and round by round."""
    emulated = backend == "emulated"
    # The emulated paths say which machine they time: with modeled time, whatever
    # PYBPF_NO_MODELED_TIME says, and (below) without it.
    system = make_system(backend, **({"modeled_time": True} if emulated else {}))
    with tempfile.TemporaryDirectory(prefix="pybpf-ops-") as tmp:
        makers: list[tuple[str, Callable]] = []
        ref = None
        if not map_only and backend == "kernel":
            makers += [("C libbpf", lambda: bench_c_reference(st, tmp)),
                       ("raw ctypes", lambda: bench_ctypes(system, st))]
            ref = "C libbpf"
        elif not map_only:
            makers.append(("dict", lambda: bench_dict(st)))
            ref = "dict"
        if not map_only:
            makers.append(("System call", lambda: bench_system(system, st)))
        label = "Map (C accel)" if maps_mod.accelerated() else "Map (pure Python)"
        makers.append(("Map" if map_only else label, lambda: bench_map(system, st)))
        if maps_mod.accelerated() and not map_only:
            makers.append(("Map (pure Python)", lambda: bench_map_pure(backend, st)))
        if emulated and not map_only:
            unmodeled = make_system("emulated", modeled_time=False)
            makers += [(UNMODELED_SYSTEM, lambda: bench_system(unmodeled, st)),
                       ("Map (model off)", lambda: bench_map(unmodeled, st))]
        paths: dict[str, tuple | str] = {name: make() for name, make in makers}
        # path -> op -> the figure of each round (ns), or a note where the path cannot do it
        rounds: dict[str, dict[str, list[float] | str] | str] = {
            name: made if isinstance(made, str) else {} for name, made in paths.items()}
        steps = [(op, name) for op in OPS for name, made in paths.items()
                 if not isinstance(made, str) and op in made[0]]
        progress = Progress(f"bench ops ({backend}) figures", st.repeat * len(steps),
                            enabled=show_progress)
        try:
            # Op by op, every path in turn, round after round: load on the machine hits the
            # paths alike; each figure keeps every round, for its best and its spread.
            with progress:
                for r in range(st.repeat):
                    for op, name in steps:
                        note = f"round {r + 1}/{st.repeat}: {op} via {name}"
                        progress.update(progress.done, note)
                        value = paths[name][0][op]()
                        progress.advance(note=note)
                        seen = rounds[name].setdefault(op, [])
                        if isinstance(value, str):
                            rounds[name][op] = value
                        elif isinstance(seen, list):
                            seen.append(value)
        finally:
            for made in paths.values():
                if not isinstance(made, str):
                    made[1]()
    return _rows(backend, list(rounds.items()), ref)


def _rows(backend: str, paths: list[tuple[str, dict | str]], ref: str | None) -> list[dict]:
    refs = dict(paths).get(ref) if ref else None
    rows = []
    for op in OPS:
        for path, results in paths:
            row = {"backend": backend, "op": op, "path": path}
            value = results if isinstance(results, str) else results.get(op)
            if value is None:
                continue
            if isinstance(value, str):
                row["note"] = value
            else:
                best = min(value)
                row.update(ns=round(best, 1), ops_per_s=round(1e9 / best) if best else None,
                           spread=round(spread(value), 3), rounds=[round(v, 1) for v in value])
                ref_rounds = refs.get(REF_OP.get(op, op)) if isinstance(refs, dict) else None
                if path != ref and isinstance(ref_rounds, list) and min(ref_rounds) > 0:
                    ratio = Ratio.of(value, ref_rounds)
                    row.update(ref=ref, ratio=round(ratio.value, 2),
                               ratio_noise=round(ratio.noise, 3))
            rows.append(row)
    return rows


def row_ratio(row: dict) -> Ratio:
    return Ratio(row["ratio"], row["ratio_noise"])


def print_table(rows: list[dict], st: Setup, out=sys.stdout) -> None:
    print(f"pybpf ops benchmark: HASH map, 4-byte keys, 8-byte values, {st.entries} entries; "
          f"{st.rounds * st.entries} ops per figure, best of {st.repeat} rounds (\u00b1: how "
          f"far the median round is from the best); batch chunk {st.chunk}; ns per op (per "
          "element for batches); a path never beats its reference (C, dict) by more than the "
          "noise", file=out)
    backend = None
    for row in rows:
        if row["backend"] != backend:
            backend = row["backend"]
            print(f"\n{backend} backend", file=out)
            print(f"  {'op':<20}{'path':<20}{'ns/op':>10}{'':>6}{'ops/s':>13}   ratio",
                  file=out)
        if "note" in row:
            print(f"  {row['op']:<20}{row['path']:<20}{'-':>10}{'':>6}{'':>13}   "
                  f"{row['note']}", file=out)
            continue
        ratio = f"{row_ratio(row).describe(floor=1.0)} {row['ref']}" if "ratio" in row else ""
        noise = f"\u00b1{100 * row['spread']:.0f}%"
        print(f"  {row['op']:<20}{row['path']:<20}{row['ns']:>10.1f}{noise:>6}"
              f"{row['ops_per_s']:>13,}   {ratio}", file=out)


def summary(rows: list[dict]) -> list[str]:
    """The project's speed targets, from this run: a verdict only where the rounds' noise
    allows one (``report.Ratio``)."""
    by = {(r["backend"], r["op"], r["path"]): r.get("rounds") for r in rows}
    lines = []
    fast = "Map (C accel)" if maps_mod.accelerated() else "Map (pure Python)"
    # (mine, reference, target, what, floor: mine does the reference's work and more)
    checks = [(("kernel", "lookup", fast), ("kernel", "lookup", "C libbpf"), 1.3,
               "kernel m[k] vs C bpf_map_lookup_elem", 1.0),
              (("kernel", "batch_lookup", fast), ("kernel", "batch_lookup", "C libbpf"), 1.2,
               "kernel batch lookup per element vs C (lists of ints)", 1.0),
              (("kernel", "batch_lookup_arrays", fast), ("kernel", "batch_lookup", "C libbpf"),
               1.2, "kernel batch lookup per element vs C (arrays=True)", 1.0),
              (("emulated", "lookup", fast), ("emulated", "lookup", "dict"), 2.0,
               "emulated m[k] vs dict lookup", 1.0),
              (("emulated", "lookup", fast), ("kernel", "lookup", fast), 1.0,
               "emulated m[k] vs kernel m[k]", None),
              (("emulated", "update", UNMODELED_SYSTEM), ("kernel", "update", "System call"),
               1.0, "emulated update without modeled time vs kernel System call", None),
              (("emulated", "delete", UNMODELED_SYSTEM), ("kernel", "delete", "System call"),
               1.0, "emulated delete without modeled time vs kernel System call", None)]
    for mine, ref, target, what, floor in checks:
        a, b = by.get(mine), by.get(ref)
        if a and b and min(b) > 0:
            ratio = Ratio.of(a, b)
            lines.append(f"  {what}: {ratio.describe(floor)} "
                         f"({ratio.verdict(target, floor)} the {target}x target)")
    return lines


ABOUT = ("per-operation cost of lookup, update, delete and batches through Map, the System "
         "call and bare ctypes, beside C libbpf and a dict")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``pybpf bench ops``'s arguments."""
    parser.description = ABOUT
    parser.add_argument("--backend", choices=("kernel", "emulated", "both"), default="both")
    parser.add_argument("--n", type=int_arg("--n", 1, MAX_OPS, "minutes per figure"),
                        default=50_000, help="operations per figure and round (default 50000)")
    parser.add_argument("--entries", type=int_arg("--entries", 1, MAX_ENTRIES, ENTRIES_WHY),
                        default=1000, help="keys in the map")
    parser.add_argument("--chunk", type=int_arg("--chunk", 1, MAX_ENTRIES, ENTRIES_WHY),
                        default=256, help="batch size")
    parser.add_argument("--repeat", type=int_arg("--repeat", 1, MAX_REPEAT), default=5,
                        help="rounds; the best is kept")
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress lines on stderr")
    parser.add_argument("--map-only", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    st = Setup(args.entries, args.n, args.chunk, args.repeat)
    backends = ["kernel", "emulated"] if args.backend == "both" else [args.backend]

    rows: list[dict] = []
    for backend in backends:
        if backend == "kernel" and args.backend == "both":
            from ..backends import bpf_allowed

            if not bpf_allowed():
                print("kernel backend skipped: bpf(2) is not allowed here (--backend kernel "
                      "says why)", file=sys.stderr)
                continue
        rows.extend(run_backend(backend, st, args.map_only,
                                args.progress and not args.map_only))
    if args.json:
        json.dump(rows, sys.stdout, indent=None if args.map_only else 1)
        print()
        return 0
    print_table(rows, st)
    lines = summary(rows)
    if lines:
        print("\nspeed targets (time ratio, \u00b1 the noise of its rounds; a verdict only "
              "where the noise allows one)")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":  # `python -m pybpf.bench.ops` (README): `pybpf bench ops`
    sys.exit(run_standalone("pybpf bench ops", configure_parser, run))
