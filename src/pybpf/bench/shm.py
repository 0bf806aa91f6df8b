"""``python -m pybpf.bench.shm`` (``pybpf bench shm``): maps in shared memory (pybpf.shared).

Rules this module keeps:
- One HASH map shape everywhere (4-byte keys, 8-byte values, ``--entries`` keys present).
  In one process, op by op and round by round, interleaved: a Python dict, the shared map
  through its face (``m[k]``, int codecs) and raw (bytes, ``SharedMap.raw``), the emulated
  Python map without modeled time (``Map`` and the ``System`` call, ``modeled_time=False``)
  and, where bpf(2) is allowed, the kernel's (``Map`` and the ``System`` call). The paths
  other than the shared map's are ``bench.ops``'s own.
- Scaling: the raw shared map's lookup, update and delete in 1 and in 2 forked processes at
  once on one map of a named segment (each process its own keys), the 1- and 2-process runs
  alternating round by round; the aggregate rate is all processes' ops over the slowest one's
  time between a common start (a barrier) and its end.
- Every figure is the median of ``--repeat`` rounds with its range; ratios are of medians,
  with the larger spread of the two (``report.Ratio`` rules: no verdict beyond the noise).
- The stress run: ``--stress-ops`` operations by 2 processes racing on the same keys (BPF_NOEXIST
  inserts and lookup_and_delete takes) and on their own keys; every insert must be taken
  once or be there at the end, every own key there: it reports lost and duplicated elements,
  which must be 0 (exit status 1 otherwise).
- Nothing here is used by the tests to time anything.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable

from .. import shared
from ..backends import bpf_allowed
from ..backends import system as make_system
from ..commands import CommandError, run_standalone
from ..errors import KeyExistsError, KeyNotFoundError
from .args import int_arg
from .ops import Setup, bench_dict, bench_map, bench_system, once_ns
from .report import Ratio, format_table

OPS = ("lookup", "update", "delete")
DICT_LOOKUP = "dict lookup"  # the scaling runs' reference: a dict of each process's own
MAX_ENTRIES = 1 << 20
MAX_OPS = 10**9
MAX_REPEAT = 100
ABOUT = ("maps in shared memory (pybpf.shared): lookup, update and delete in 1 and 2 processes "
         "beside a dict, the emulated Python map and the kernel's syscall; a 10M-op "
         "two-process run counting lost and duplicated elements")


def _median_row(rounds: list[float]) -> tuple[float, float, float]:
    return statistics.median(rounds), min(rounds), max(rounds)


# -- one process: the shared map beside the references -----------------------------------------

def bench_shared(m: shared.SharedMap, st: Setup, raw: bool) -> dict[str, Callable[[], float]]:
    """lookup, update and delete of the shared map ``m`` (its keys present), through the face
    with int codecs or raw on bytes."""
    rounds = st.rounds
    if raw:
        r = m.raw
        keys, values = st.kbytes, st.vbytes
        get, put, remove = r.lookup, r.update, r.delete
    else:
        keys, values = st.keys, st.keys
        face = m

        def get(k):
            return face[k]

        put = face.__setitem__
        remove = face.__delitem__
    pairs = list(zip(keys, values, strict=True))

    def fill() -> None:
        for k, v in pairs:
            put(k, v)

    fill()

    def lookup() -> int:
        for _ in range(rounds):
            for k in keys:
                get(k)
        return rounds * len(keys)

    def update() -> int:
        for _ in range(rounds):
            for k, v in pairs:
                put(k, v)
        return rounds * len(keys)

    def delete() -> float:
        spent = 0
        for _ in range(rounds):
            fill()
            t0 = time.perf_counter_ns()
            for k in keys:
                remove(k)
            spent += time.perf_counter_ns() - t0
        fill()
        return spent / (rounds * len(keys))

    return {"lookup": lambda: once_ns(lookup), "update": lambda: once_ns(update),
            "delete": delete}


def one_process(st: Setup, seg: shared.Segment, with_kernel: bool) -> list[dict]:
    """Every path's ns/op, op by op, every path in turn, round after round."""
    paths: dict[str, dict[str, Callable[[], float]]] = {}
    closers: list[Callable[[], None]] = []
    m = seg.create_map("bench_one", "hash", 4, 8, st.entries, key=int, value=int)
    paths["dict"] = bench_dict(st)[0]
    paths["shared map m[k]"] = bench_shared(m, st, raw=False)
    paths["shared map raw"] = bench_shared(m, st, raw=True)
    unmodeled = make_system("emulated", modeled_time=False)
    for label, maker in (("emulated Map", bench_map), ("emulated System", bench_system)):
        ops, close = maker(unmodeled, st)
        paths[f"{label} (model off)"] = ops
        closers.append(close)
    if with_kernel:
        kernel = make_system("kernel")
        for label, maker in (("kernel Map", bench_map), ("kernel System", bench_system)):
            ops, close = maker(kernel, st)
            paths[label] = ops
            closers.append(close)
    figures: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(st.repeat):
            for op in OPS:
                for name, ops in paths.items():
                    figures.setdefault((op, name), []).append(ops[op]())
    finally:
        for close in closers:
            close()
    rows = []
    for op in OPS:
        ref = figures[(op, "dict")]
        for name in paths:
            ns = figures[(op, name)]
            med, lo, hi = _median_row(ns)
            ratio = _median_ratio(ns, ref)
            rows.append({"op": op, "path": name, "ns_median": round(med, 1),
                         "ns_min": round(lo, 1), "ns_max": round(hi, 1),
                         "ops_per_s": round(1e9 / med), "vs_dict": round(ratio.value, 2),
                         "vs_dict_noise": round(ratio.noise, 3),
                         "rounds": [round(v, 1) for v in ns]})
    return rows


def _median_ratio(mine: list[float], ref: list[float]) -> Ratio:
    """median(mine) / median(ref), with the larger relative range of the two as the noise."""
    def rel_range(xs: list[float]) -> float:
        med = statistics.median(xs)
        return (max(xs) - min(xs)) / med if med > 0 else 0.0
    return Ratio(statistics.median(mine) / statistics.median(ref),
                 max(rel_range(mine), rel_range(ref)))


# -- scaling: 1 process against 2 ------------------------------------------------------------

def _worker(name: str, map_name: str, op: str, worker: int, keys: int, rounds: int,
            barrier, out) -> None:
    """One process of a scaling run: its own keys, ``rounds`` passes of ``op``; puts
    (ops, ns) of the timed part."""
    seg = shared.Segment.attach(name)
    r = seg.open_map(map_name).raw
    kb = [(worker * keys + k).to_bytes(4, "little") for k in range(keys)]
    vb = bytes(8)
    for k in kb:
        r.update(k, vb)
    barrier.wait()
    spent = 0
    if op in (DICT_LOOKUP, "lookup"):
        # DICT_LOOKUP is the reference: what the host gives two processes sharing nothing
        get = dict.fromkeys(kb, vb).__getitem__ if op == DICT_LOOKUP else r.lookup
        t0 = time.perf_counter_ns()
        for _ in range(rounds):
            for k in kb:
                get(k)
        spent = time.perf_counter_ns() - t0
    elif op == "update":
        put = r.update
        t0 = time.perf_counter_ns()
        for _ in range(rounds):
            for k in kb:
                put(k, vb)
        spent = time.perf_counter_ns() - t0
    else:
        put, remove = r.update, r.delete
        for _ in range(rounds):
            for k in kb:
                put(k, vb)
            t0 = time.perf_counter_ns()
            for k in kb:
                remove(k)
            spent += time.perf_counter_ns() - t0
    out.put((rounds * keys, spent))
    seg.close()


def run_processes(ctx, target, args: list[tuple], what: str, timeout_s: float) -> list:
    """One process per ``args`` running ``target(*args, out)``; what each put on ``out``."""
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, out)) for a in args]
    for p in procs:
        p.start()
    results = [out.get(timeout=timeout_s) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise CommandError(f"a {what} worker failed (exit status {p.exitcode})")
    return results


def _run_procs(ctx, name: str, map_name: str, op: str, nprocs: int, keys: int,
               rounds: int) -> float:
    """Aggregate ops/s of ``nprocs`` processes doing ``op`` at once."""
    barrier = ctx.Barrier(nprocs)
    results = run_processes(ctx, _worker, [(name, map_name, op, w, keys, rounds, barrier)
                                            for w in range(nprocs)], "scaling", 600)
    ops = sum(n for n, _ in results)
    slowest = max(ns for _, ns in results)
    return ops / (slowest / 1e9)


def scaling(st: Setup, name: str, ops_per_process: int) -> list[dict]:
    ctx = multiprocessing.get_context("fork")
    keys = st.entries
    rounds = max(ops_per_process // keys, 1)
    rates: dict[tuple[str, int], list[float]] = {}
    with shared.Segment.attach(name) as seg:
        seg.create_map("bench_scale", "hash", 4, 8, 2 * keys)
        for _ in range(st.repeat):
            for op in (DICT_LOOKUP, *OPS):
                for nprocs in (1, 2):
                    rate = _run_procs(ctx, name, "bench_scale", op, nprocs, keys, rounds)
                    rates.setdefault((op, nprocs), []).append(rate)
    rows = []
    for op in (DICT_LOOKUP, *OPS):
        one, two = rates[(op, 1)], rates[(op, 2)]
        # A rate is higher-better: the time ratio of one over two is the speed-up.
        speedup = _median_ratio([1 / x for x in one], [1 / x for x in two])
        rows.append({"op": op, "one_process_ops_per_s": round(statistics.median(one)),
                     "one_min": round(min(one)), "one_max": round(max(one)),
                     "two_processes_ops_per_s": round(statistics.median(two)),
                     "two_min": round(min(two)), "two_max": round(max(two)),
                     "scaling": round(speedup.value, 2), "scaling_noise": round(speedup.noise, 3)})
    return rows


# -- the stress run ----------------------------------------------------------------------------

def _stress_worker(name: str, worker: int, keys: int, ops: int, barrier, out) -> None:
    """Own keys: insert, read back, delete; common keys: race the other worker to insert
    (BPF_NOEXIST) and to take (lookup_and_delete). Until ``ops`` operations are done."""
    seg = shared.Segment.attach(name)
    r = seg.open_map("bench_stress").raw
    own = [(worker * keys + k).to_bytes(4, "little") for k in range(keys)]
    common = [(2 * keys + k).to_bytes(4, "little") for k in range(keys)]
    tag = worker.to_bytes(8, "little")
    inserted = taken = done = 0
    foreign = 0  # values read back that are not what this worker wrote, or a stranger's tag
    barrier.wait()
    t0 = time.perf_counter()
    while done < ops:
        for k in own:
            r.update(k, k + k)  # the 4-byte key twice: an 8-byte value to check
        for k in own:
            if r.lookup(k) != k + k:
                foreign += 1
        for k in own:
            r.delete(k)
        for k in common:
            try:
                r.update(k, tag, 1)  # BPF_NOEXIST
                inserted += 1
            except KeyExistsError:
                pass
        for k in common:
            try:
                if r.lookup_and_delete(k) not in (b"\0" * 8, b"\1" + b"\0" * 7):
                    foreign += 1
                taken += 1
            except KeyNotFoundError:
                pass
        done += 5 * keys
    for k in own:  # left in for the final count
        r.update(k, k + k)
    out.put((inserted, taken, done + keys, foreign, time.perf_counter() - t0))
    seg.close()


def stress(name: str, total_ops: int, keys: int) -> dict:
    ctx = multiprocessing.get_context("fork")
    with shared.Segment.attach(name) as seg:
        m = seg.create_map("bench_stress", "hash", 4, 8, 3 * keys)
        barrier = ctx.Barrier(2)
        per = total_ops // 2
        results = run_processes(ctx, _stress_worker, [(name, w, keys, per, barrier)
                                                       for w in range(2)], "stress", 3600)
        listed = [int.from_bytes(k, "little") for k in _walk(m.raw)]
        inserted = sum(r[0] for r in results)
        taken = sum(r[1] for r in results)
        left = sum(1 for k in listed if k >= 2 * keys)
        own_found = sum(1 for k in set(listed) if k < 2 * keys)
        duplicated = len(listed) - len(set(listed)) + max(0, taken + left - inserted)
        lost = max(0, inserted - taken - left) + (2 * keys - own_found)
        return {"ops": sum(r[2] for r in results), "processes": 2, "keys_per_set": keys,
                "inserted": inserted, "taken": taken, "left": left,
                "count": m.count, "listed": len(listed), "lost": lost,
                "duplicated": duplicated, "foreign_values": sum(r[3] for r in results),
                "seconds": round(max(r[4] for r in results), 2)}


def _walk(raw) -> list[bytes]:
    keys, key = [], None
    while True:
        try:
            key = raw.get_next_key(key)
        except KeyNotFoundError:
            return keys
        keys.append(key)


# -- running and printing ---------------------------------------------------------------------

def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``pybpf bench shm``'s arguments."""
    parser.description = ABOUT
    parser.add_argument("--entries", type=int_arg("--entries", 1, MAX_ENTRIES), default=1000,
                        help="keys per map and process (default 1000)")
    parser.add_argument("--n", type=int_arg("--n", 1, MAX_OPS), default=100_000,
                        help="operations per figure and round (default 100000)")
    parser.add_argument("--repeat", type=int_arg("--repeat", 1, MAX_REPEAT), default=5,
                        help="rounds; the median is kept, with the range (default 5)")
    parser.add_argument("--scale-n", type=int_arg("--scale-n", 1, MAX_OPS), default=2_000_000,
                        help="operations per process and round of the scaling runs (default "
                        "2000000: long enough that starting the processes does not count)")
    parser.add_argument("--stress-ops", type=int_arg("--stress-ops", 0, MAX_OPS),
                        default=10_000_000, help="operations of the two-process stress run "
                        "(default 10000000; 0: none)")
    parser.add_argument("--segment-size", type=int_arg("--segment-size", 1 << 16, 1 << 40),
                        default=64 << 20, help="bytes of the shared segment (default 64 MiB)")
    parser.add_argument("--no-kernel", action="store_true",
                        help="leave out the kernel's paths even where bpf(2) is allowed")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    if not shared.available():
        raise CommandError(shared.INSTALL_HINT)
    st = Setup(args.entries, args.n, 256, args.repeat)
    with_kernel = not args.no_kernel and bpf_allowed()
    name = f"pybpf-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    seg = shared.Segment.create(name, args.segment_size)
    try:
        print("bench shm: one process ...", file=sys.stderr)
        single = one_process(st, seg, with_kernel)
        print("bench shm: 1 and 2 processes ...", file=sys.stderr)
        scale = scaling(st, name, args.scale_n)
        stressed = None
        if args.stress_ops:
            print(f"bench shm: stress run of {args.stress_ops:,} ops ...", file=sys.stderr)
            stressed = stress(name, args.stress_ops, st.entries)
    finally:
        seg.close()
        shared.unlink(name)
    document = {"entries": st.entries, "ops_per_figure": st.rounds * st.entries,
                "scale_ops_per_process": max(args.scale_n // st.entries, 1) * st.entries,
                "repeat": st.repeat, "kernel": with_kernel, "one_process": single,
                "scaling": scale, "stress": stressed, "host_cpus": os.cpu_count()}
    if args.json:
        json.dump(document, sys.stdout, indent=1)
        print()
    else:
        print_report(document, with_kernel)
    return 1 if stressed and (stressed["lost"] or stressed["duplicated"]
                              or stressed["foreign_values"]) else 0


def print_report(doc: dict, with_kernel: bool) -> None:
    print(f"pybpf bench shm: HASH map, 4-byte keys, 8-byte values, {doc['entries']} keys; "
          f"{doc['ops_per_figure']:,} ops per figure; median of {doc['repeat']} interleaved "
          f"rounds [min-max]; host CPUs: {doc['host_cpus']}")
    if not with_kernel:
        print("(kernel paths left out: bpf(2) not allowed here, or --no-kernel)")
    print("\none process: ns per op (ratio to the dict's median, \u00b1 the larger relative "
          "range of the two)")
    rows = [(r["op"], r["path"], r["ns_median"], f"[{r['ns_min']:.0f}-{r['ns_max']:.0f}]",
             r["ops_per_s"], f"{r['vs_dict']:.2f}x \u00b1{100 * r['vs_dict_noise']:.0f}%")
            for r in doc["one_process"]]
    print(format_table(("op", "path", "ns/op", "range", "ops/s", "vs dict"), rows))
    print(f"\nshared map (raw), one map, each process its own keys, "
          f"{doc['scale_ops_per_process']:,} ops per process: aggregate ops/s (first row, the "
          f"reference: each process a dict of its own, what this host gives two processes "
          f"that share nothing)")
    rows = [(r["op"], r["one_process_ops_per_s"], f"[{r['one_min']}-{r['one_max']}]",
             r["two_processes_ops_per_s"], f"[{r['two_min']}-{r['two_max']}]",
             f"{r['scaling']:.2f}x \u00b1{100 * r['scaling_noise']:.0f}%")
            for r in doc["scaling"]]
    print(format_table(("op", "1 process", "range", "2 processes", "range", "2 / 1"), rows))
    s = doc["stress"]
    if s:
        print(f"\nstress: {s['ops']:,} ops by 2 processes in {s['seconds']} s on one hash "
              f"(own keys, and BPF_NOEXIST inserts racing lookup_and_delete on common keys): "
              f"inserted {s['inserted']:,}, taken {s['taken']:,}, left {s['left']}; "
              f"lost {s['lost']}, duplicated {s['duplicated']}, foreign values "
              f"{s['foreign_values']}; count {s['count']} = listed {s['listed']}")


if __name__ == "__main__":  # `python -m pybpf.bench.shm`: `pybpf bench shm`
    sys.exit(run_standalone("pybpf bench shm", configure_parser, run))
