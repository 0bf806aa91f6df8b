"""map-perf's results: one ``Result`` per test and CPU, the run's ``RunResult``, and what is
printed from them (the sample's lines, the NUMA and allocator tables, notes comparing with
the bare or the C trigger loop, JSON and the plot)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from .. import report
from ..report import Ratio
from .config import COMPARE_ROUNDS, EMULATED_LABEL, TESTS, Config, Test


@dataclass
class Result:
    """One test on one CPU."""

    cpu: int
    test: str
    line: str
    rate: int
    unit: str
    events: int
    elapsed_ns: int
    # NUMA test: the inner map's placement and (emulated) its accesses from this CPU.
    map_flags: int | None = None
    numa_node: int | None = None
    map_node: int | None = None
    local_accesses: int | None = None
    remote_accesses: int | None = None
    # emulated: ``rate`` is modeled events per second of the CPU's virtual clock on the
    # machine's profile (``elapsed_ns`` that modeled time); ``host_rate`` interpreter events
    # per second of the host CPU time its task ran, ``wall_rate`` per wall-clock second
    # while all workers ran; ``breakdown`` the modeled ns per event by cost. With modeled
    # time off, ``profile`` is None and ``rate`` is ``host_rate`` (``elapsed_ns`` that time).
    profile: str | None = None
    host_rate: int | None = None
    wall_rate: int | None = None
    breakdown: dict[str, float] | None = None
    # emulated: the modeled ns per event the CPU spent outside its task, by context
    # (softirq, ksoftirqd, hardirq); the rest of ``elapsed_ns`` is the task's
    contexts: dict[str, float] | None = None
    # --baseline (kernel): the same trigger loop with no program attached.
    baseline_rate: int | None = None
    # --c-trigger (kernel): best rates of the C and of pybpf's trigger loop, alternated, per
    # wall-clock second and per second of the process's own CPU time.
    c_trigger_rate: int | None = None
    pybpf_best_rate: int | None = None
    c_trigger_cpu_rate: int | None = None
    pybpf_best_cpu_rate: int | None = None
    # ... and how far the rounds of the two loops spread (report.Ratio's noise).
    c_trigger_noise: float | None = None
    c_trigger_cpu_noise: float | None = None

    @property
    def remote_share(self) -> float | None:
        if self.local_accesses is None or self.remote_accesses is None:
            return None
        total = self.local_accesses + self.remote_accesses
        return self.remote_accesses / total if total else 0.0


@dataclass
class LockTrace:
    """What one process of an emulated --processes run recorded of a test: its last lock
    holds (pybpf.shared.lock_trace: each lock's address, the ns it was taken and let go),
    how many older ones were not kept, what a clock read of the trace cost, and its
    events."""

    holds: list[tuple[int, int, int]]
    lost: int
    read_ns: float
    events: int


@dataclass
class RunResult:
    backend: str
    config: Config
    cpu_node: list[int]
    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trigger: str | None = None  # kernel: the trigger loop used (native or python)
    # Non-preallocated maps of the run: {name: counters} (emulated: the allocator's;
    # kernel: fdinfo's memlock), read when the workers are done.
    alloc_stats: dict[str, dict] = field(default_factory=dict)
    # Emulated: the machine's RCU over the run, (time, cpu, callbacks queued on it, bytes
    # held machine-wide) at each CPU's tick, and each grace period's (start, end), virtual ns.
    rcu_samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    grace_periods: list[tuple[float, float]] = field(default_factory=list)
    # Emulated --processes: {test: the events (lookups for the lookup tests) of all children
    # per second of wall time, from the test's common start to the last child's end}
    aggregate_rates: dict[str, int] = field(default_factory=dict)
    # Emulated --processes: {test: (locks, reads), what all children waited for on the
    # segment (pybpf.shared.waits): locks another held, lookups read again}
    waits: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Emulated --processes with Config.lock_trace: {test: [each child's LockTrace]}
    lock_traces: dict[str, list[LockTrace]] = field(default_factory=dict)

    def by_test(self) -> dict[str, list[Result]]:
        out: dict[str, list[Result]] = {}
        for r in sorted(self.results, key=lambda r: (Test[r.test].value, r.cpu)):
            out.setdefault(r.test, []).append(r)
        return out


def rate_of(events: int, elapsed_ns: int, per_event: int = 1) -> int:
    """The sample's integer arithmetic: events * 1e9 (* 64) / elapsed ns."""
    return events * 1_000_000_000 * per_event // max(1, elapsed_ns)


def result_line(res: Result, backend: str) -> str:
    """The sample's line; emulated lines say so (the rate is modeled on a profile; the host
    rate of the interpreter beside it), and NUMA ones add the remote share."""
    line = res.line
    if backend == "emulated":
        line += f" {EMULATED_LABEL}"
        if res.profile is not None:
            line += f" modeled on {res.profile}; host {res.host_rate} {res.unit}/s of CPU time"
        else:
            line += " modeled time off: per second of host CPU time"
        share = res.remote_share
        if share is not None:
            line += (f" remote {100 * share:.1f}% of "
                     f"{res.local_accesses + res.remote_accesses} accesses")
    return line


def emit(run_result: RunResult, cfg: Config) -> None:
    """Print the JSON document or the summary (the lines were printed as tests finished)."""
    if cfg.json:
        report.dump_json(to_json(run_result))
    else:
        for summary in (numa_summary(run_result), alloc_summary(run_result)):
            if summary:
                print(summary)
        for note in run_result.notes:
            print(f"# {note}")
    if cfg.plot:
        plot(run_result, cfg.plot)


def to_json(run_result: RunResult) -> dict:
    cfg = run_result.config
    return {
        "benchmark": "map_perf",
        "backend": run_result.backend,
        "emulated": run_result.backend == "emulated",
        "cpu_node": run_result.cpu_node,
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("json", "plot", "progress")},
        "tests": [t.name for t in cfg.tests],
        "results": [dict(asdict(r), remote_share=r.remote_share) for r in run_result.results],
        "lines": [result_line(r, run_result.backend) for r in
                  sorted(run_result.results, key=lambda r: (Test[r.test].value, r.cpu))],
        "notes": run_result.notes,
        "trigger": run_result.trigger,
        "alloc_stats": run_result.alloc_stats,
        "aggregate_rates": run_result.aggregate_rates,
        "waits": run_result.waits,
    }


def numa_summary(run_result: RunResult) -> str:
    """The NUMA test as a table: CPU, its node, its inner map's node, events/s, remote %."""
    rows = run_result.by_test().get(Test.INNER_LRU_HASH_PREALLOC.name)
    if not rows:
        return ""
    header = ["cpu", "cpu node", "map node", "map_flags", "events/s", "remote %"]
    table = []
    for r in rows:
        share = r.remote_share
        table.append([r.cpu, run_result.cpu_node[r.cpu] if r.cpu < len(run_result.cpu_node)
                      else "?", "?" if r.map_node is None else r.map_node,
                      "?" if r.map_flags is None else hex(r.map_flags), r.rate,
                      "n/a" if share is None else f"{100 * share:.1f}"])
    title = (f"inner_lru_hash_map placement (--numa-node {run_result.config.numa_node}, "
             f"{run_result.backend} backend)")
    return title + "\n" + report.format_table(header, table)


ALLOC_COUNTERS = ("mem_design", "alloc_calls", "free_calls", "call_rcu", "cache_hits",
                  "reused", "allocated", "freed", "waiting_for_rcu")


def allocator_counters(stats: dict) -> dict:
    return {k: stats[k] for k in ALLOC_COUNTERS if k in stats}


def alloc_summary(run_result: RunResult) -> str:
    """The allocator behind the kmalloc tests: why HASH_KMALLOC runs at the speed it does."""
    if not run_result.alloc_stats:
        return ""
    if run_result.backend == "kernel":
        return "\n".join(f"{name}: memlock {c['memlock']} bytes (fdinfo; this kernel's "
                         "non-preallocated maps use bpf_mem_alloc)"
                         for name, c in run_result.alloc_stats.items())
    header = ["map", *ALLOC_COUNTERS]
    rows = [[name, *(c.get(k, "-") for k in ALLOC_COUNTERS)]
            for name, c in run_result.alloc_stats.items()]
    return ("element allocator of the non-preallocated maps (emulated counters: call_rcu = "
            "RCU callbacks queued, cache_hits = allocations served by reusing freed "
            "elements from a per-CPU cache)\n" + report.format_table(header, rows))


def plot(run_result: RunResult, path: str) -> None:
    series: dict[str, dict[int, float]] = {}
    shares: dict[str, dict[int, float]] = {}
    for test, rows in run_result.by_test().items():
        label = TESTS[Test[test]].label
        series[label] = {r.cpu: r.rate for r in rows}
        known = {r.cpu: r.remote_share for r in rows if r.remote_share is not None}
        if known:
            shares[label] = known
    title = f"map_perf ({run_result.backend} backend)"
    if run_result.backend == "emulated":
        title += ": interpreter figures"
    report.plot_per_cpu(path, title, series, unit="events (or lookups) per sec",
                        remote_share=shares or None)


def c_trigger_notes(results: Sequence[Result], kind: str) -> list[str]:
    """pybpf's rate against the C trigger's, test by test, CPU by CPU, with the time ratio
    read within the rounds' noise (both loops make the same syscalls: pybpf is never reported
    faster than C beyond the noise)."""
    notes = []
    for r in sorted(results, key=lambda r: (Test[r.test].value, r.cpu)):
        if r.c_trigger_rate:
            wall = Ratio(r.c_trigger_rate / r.pybpf_best_rate, r.c_trigger_noise or 0.0)
            cpu = Ratio(r.c_trigger_cpu_rate / r.pybpf_best_cpu_rate,
                        r.c_trigger_cpu_noise or 0.0)
            notes.append(
                f"{r.cpu}:{r.test}: best of {COMPARE_ROUNDS}, pybpf ({kind} trigger) vs C: "
                f"{r.pybpf_best_rate} vs {r.c_trigger_rate} {r.unit}/s (time ratio "
                f"{wall.describe(1.0)}); per CPU-second {r.pybpf_best_cpu_rate} vs "
                f"{r.c_trigger_cpu_rate} (time ratio {cpu.describe(1.0)})")
    return notes


def overhead_notes(results: Sequence[Result]) -> list[str]:
    """How much of each event the trigger loop itself costs, from --baseline."""
    notes = []
    for r in sorted(results, key=lambda r: (Test[r.test].value, r.cpu)):
        if not r.baseline_rate:
            continue
        per_event = TESTS[Test[r.test]].per_event
        event_ns = 1e9 * per_event / r.rate
        empty_ns = 1e9 / r.baseline_rate
        notes.append(f"{r.cpu}:{r.test}: {event_ns:.0f} ns/event with the program, "
                     f"{empty_ns:.0f} ns/event for the bare trigger loop (no program attached)")
    return notes


