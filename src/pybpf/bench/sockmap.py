"""``pybpf bench sockmap``: client <-> proxy <-> server on loopback, the proxy in user space, in
the kernel's sockmap and in the emulated one, side by side (issue 10; the sockmap CPU-affinity
patch's iperf3 test, shared/reference/patches-followups.md sections 1.3-1.5).

Rules this module keeps:
- Everything runs in one network namespace the benchmark creates (lo up) and always removes,
  failure and Ctrl-C included (``pybpf.netns``); without CAP_SYS_ADMIN, on the host's loopback
  (and the RPS modes are not available).
- Modes (``--modes``): direct; user-copy and user-splice (a user-space proxy); kernel-egress,
  kernel-ingress and their -rps variants (a SOCKHASH with an SK_SKB verdict program that
  redirects; -rps: lo's receive work steered to the CPUs other than the client's);
  emulated, emulated-cpu and emulated-kfunc (the same program and System calls on the
  emulated backend, unbound, with the psocks' backlog work on ``--proxy-cpu`` by the map
  update's target_cpu, and by the 2025 series' kfunc: the verdict calls
  bpf_sk_skb_set_redirect_cpu(skb, proxy CPU) and the redirect takes the CPU to the target).
- Traffic: iperf3 (``-s -1`` and ``-c -t T -J``, pinned with taskset) when installed, else
  pybpf's own sender and receiver, which check every byte (sockmap_paths). An ingress redirect
  puts the receiving socket in the proxy's map, so it must live in this process: the ingress
  modes always run the builtin traffic, beside a builtin direct row for their ratio.
- Rounds are interleaved (each row once per round, ``--rounds``); a row reports the median
  Gbit/s, its spread (report.spread) and range, the ratio to direct (medians, noise: the
  larger spread), and per CPU the share of time in user, system and softirq over its runs
  (/proc/stat) and of its kworkers, which run the kernel's psock backlog work (their
  /proc/<pid>/stat times), plus the emulated workers' own counters per emulated CPU.
- Beside the measured rows, the modeled throughput of the emulated proxy on a declared
  machine (``--model-profile``, default sapphire-rapids-2s; bench/sockmap_model.py): direct,
  unbound and bound, each with its ratio to direct and per CPU where its time goes. These
  are timing-model figures, the same on every run, not measurements of this host.
- Every run has a deadline (``--timeout``); a run past it is a failed round with its reason,
  never a hang. A mode that cannot be set up (bpf(2) refused, the emulated backend without
  the psock data path) is one line with the reason, and the rest still runs.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from . import report
from .args import int_arg, plot_arg, profile_arg, seconds_arg
from .sockmap_model import PROFILE as MODEL_PROFILE
from .sockmap_model import model_sockmap, modeled_text
from .sockmap_paths import (
    DRAIN_SECONDS,
    BuiltinReceiver,
    CopyPath,
    Proxy,
    RunFailed,
    SockmapPath,
    builtin_run,
    counters_delta,
    cpu_busy,
    cpu_ticks,
    free_port,
    iperf3_run,
    kworker_busy,
    kworker_ticks,
    worker_counters,
)

PLOT_FORMATS = ("png", "svg", "pdf")
CPU_KINDS = ("user", "system", "softirq", "kworker")  # kworker: part of system and softirq


@dataclass(frozen=True)
class Mode:
    name: str
    about: str
    proxy: str = ""  # "", "copy", "splice", "sockmap"
    backend: str = ""  # a sockmap's: "kernel" or "emulated"
    ingress: bool = False
    rps: bool = False
    target_cpu: bool = False
    redirect_cpu: bool = False  # the verdict sets the proxy CPU with the kfunc


MODES = {m.name: m for m in (
    Mode("direct", "client -> server"),
    Mode("user-copy", "user-space proxy, recv_into + sendall threads", "copy"),
    Mode("user-splice", "user-space proxy, splice through a pipe", "splice"),
    Mode("kernel-egress", "kernel sockmap, egress redirect", "sockmap", "kernel"),
    Mode("kernel-egress-rps", "kernel sockmap, egress redirect, RPS on lo", "sockmap",
         "kernel", rps=True),
    Mode("kernel-ingress", "kernel sockmap, ingress redirect", "sockmap", "kernel",
         ingress=True),
    Mode("kernel-ingress-rps", "kernel sockmap, ingress redirect, RPS on lo", "sockmap",
         "kernel", ingress=True, rps=True),
    Mode("emulated", "emulated sockmap, egress redirect, unbound", "sockmap", "emulated"),
    Mode("emulated-cpu", "emulated sockmap, egress redirect, target_cpu = proxy CPU",
         "sockmap", "emulated", target_cpu=True),
    Mode("emulated-kfunc", "emulated sockmap, egress redirect, the verdict's "
         "bpf_sk_skb_set_redirect_cpu = proxy CPU", "sockmap", "emulated", redirect_cpu=True),
)}


class ModeUnavailable(Exception):
    """A mode that cannot be set up here: its reason (the row says so, the rest runs)."""


@dataclass
class Run:
    gbps: float  # received during the measured window
    bytes: int
    sent_gbps: float
    complete: bool  # everything sent arrived
    seconds: float
    cpu: dict  # cpu -> {"user", "system", "softirq", "kworker"}: percent of its time
    workers: dict = field(default_factory=dict)  # emulated cpu -> the workers' counters


@dataclass
class Row:
    mode: Mode
    traffic: str
    runs: list[Run] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    status: str = "ok"  # "ok", "refused", "not available"
    error: str = ""

    @property
    def label(self) -> str:
        return self.mode.name


@dataclass
class Context:
    """What every run shares: the namespace, pinning, traffic, the backends."""

    ns: Any
    client_cpu: int
    server_cpu: int
    proxy_cpu: int
    duration: float
    timeout: float
    iperf3: str | None
    rcvbuf: int = 0
    kernel: Any = None
    kernel_refusal: str = ""
    emulated: Any = None

    @property
    def rps_cpus(self) -> list[int]:
        return [c for c in sorted(os.sched_getaffinity(0)) if c != self.client_cpu] or \
            [self.client_cpu]


# -- one run ----------------------------------------------------------------------------------
def _path(row: Row, ctx: Context, receiver: BuiltinReceiver | None):
    mode = row.mode
    if mode.proxy in ("copy", "splice"):
        return CopyPath(ctx.ns, ctx.proxy_cpu, splice=mode.proxy == "splice")
    system = ctx.kernel if mode.backend == "kernel" else ctx.emulated
    try:
        return SockmapPath(system, ingress=mode.ingress, receiver=receiver,
                           target_cpu=ctx.proxy_cpu if mode.target_cpu else None,
                           redirect_cpu=ctx.proxy_cpu if mode.redirect_cpu else None)
    except OSError as exc:
        raise ModeUnavailable(str(exc)) from None


def measure(row: Row, ctx: Context) -> Run:
    """One run of ``row``: set up, move traffic for ``ctx.duration``, tear everything down
    (whatever happened). ModeUnavailable where the mode cannot be set up, RunFailed where the
    traffic did not complete."""
    mode = row.mode
    if mode.backend == "kernel" and ctx.kernel is None:
        raise ModeUnavailable(ctx.kernel_refusal)
    deadline = time.monotonic() + ctx.timeout
    receiver = proxy = None
    rps = False
    try:
        if mode.rps:
            if ctx.ns is None:
                raise ModeUnavailable("RPS is set in the benchmark's network namespace, which "
                                      "needs CAP_SYS_ADMIN")
            ctx.ns.set_rps("lo", ctx.rps_cpus)
            rps = True
        if row.traffic == "builtin":
            receiver = BuiltinReceiver(ctx.ns, ctx.server_cpu, deadline, ctx.rcvbuf)
            server_port = receiver.port
        else:
            server_port = free_port(ctx.ns)
        connect_port = server_port
        if mode.proxy:
            proxy = Proxy(ctx.ns, ctx.proxy_cpu, server_port, _path(row, ctx, receiver))
            connect_port = proxy.port
        watch = [proxy.worker] if proxy is not None else []  # a proxy that fails ends the run
        system = ctx.emulated if mode.backend == "emulated" else None
        workers_before = worker_counters(system)
        ticks_before, kworkers_before = cpu_ticks(), kworker_ticks()
        start = time.perf_counter()
        try:
            if receiver is not None:
                traffic = builtin_run(ctx.ns, receiver, connect_port, ctx.client_cpu,
                                      ctx.duration, deadline, watch)
            else:
                traffic = iperf3_run(ctx.ns, ctx.iperf3, server_port, connect_port,
                                     ctx.server_cpu, ctx.client_cpu,
                                     math.ceil(ctx.duration), deadline, watch)
        except RunFailed:
            if proxy is not None:
                proxy.check()  # the proxy's own failure explains a stalled stream better
            raise
        seconds = time.perf_counter() - start
        busy = cpu_busy(ticks_before, cpu_ticks())
        for cpu, share in kworker_busy(kworkers_before, kworker_ticks(), seconds).items():
            busy.setdefault(cpu, {})["kworker"] = share
        if proxy is not None:
            proxy.check()
        workers = counters_delta(workers_before, worker_counters(system))
        return Run(traffic.gbps, traffic.bytes, traffic.sent_gbps, traffic.complete, seconds,
                   busy, workers)
    finally:
        for part in (proxy, receiver):
            if part is not None:
                part.close()
        if rps:
            ctx.ns.set_rps("lo", [])


def run_rounds(rows: list[Row], ctx: Context, rounds: int, progress: report.Progress) -> None:
    for round_no in range(rounds):
        for row in rows:
            progress.note = f"round {round_no + 1}/{rounds}: {row.label} ({row.traffic})"
            if row.status == "ok":
                try:
                    row.runs.append(measure(row, ctx))
                except ModeUnavailable as exc:
                    row.status = "refused" if row.mode.backend == "kernel" and \
                        ctx.kernel is None else "not available"  # bpf(2) refused, or not here
                    row.error = str(exc)
                except (RunFailed, OSError) as exc:
                    row.failures.append(f"round {round_no + 1}: {exc}")
            progress.advance()


# -- arguments --------------------------------------------------------------------------------
def modes_arg(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"--modes: unknown mode {', '.join(map(repr, unknown)) or 'list (empty)'}; "
            f"choose from {','.join(MODES)}")
    return list(dict.fromkeys(names))


def sockmap_plot_arg(text: str) -> str:
    suffix = os.path.splitext(text)[1].lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: --plot writes {', '.join('.' + f for f in PLOT_FORMATS)} files")
    return plot_arg(text)


def traffic_arg(text: str) -> str:
    if text not in ("auto", "iperf3", "builtin"):
        raise argparse.ArgumentTypeError(f"--traffic: choose auto, iperf3 or builtin, got "
                                         f"{text!r}")
    if text == "iperf3" and shutil.which("iperf3") is None:
        raise argparse.ArgumentTypeError("--traffic iperf3: iperf3 is not installed (on "
                                         "PATH); use --traffic builtin")
    return text


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    last_cpu = (os.cpu_count() or 1) - 1
    cpu = "the CPUs of this host"
    parser.add_argument("--modes", type=modes_arg, default=list(MODES),
                        help=f"comma-separated modes (default all: {','.join(MODES)})")
    parser.add_argument("--rounds", type=int_arg("--rounds", 1, 100), default=3,
                        help="interleaved rounds; every mode runs once per round (default 3)")
    parser.add_argument("--duration", type=seconds_arg("--duration", zero_ok=False),
                        default=4.0, help="seconds of traffic per run (default 4; iperf3 "
                                          "runs whole seconds: -t rounds it up)")
    parser.add_argument("--timeout", type=seconds_arg("--timeout", zero_ok=False),
                        help="seconds one run may take, setup and teardown included, before "
                             "it counts as failed (default: duration + 30)")
    parser.add_argument("--traffic", type=traffic_arg, default="auto",
                        help="auto (iperf3 when installed, else builtin), iperf3 or builtin "
                             "(pybpf's own sender and receiver, every byte checked)")
    parser.add_argument("--client-cpu", type=int_arg("--client-cpu", 0, last_cpu, cpu),
                        default=0, help="the client's CPU (default 0)")
    parser.add_argument("--server-cpu", type=int_arg("--server-cpu", 0, last_cpu, cpu),
                        default=min(1, last_cpu), help="the server's CPU (default 1)")
    parser.add_argument("--proxy-cpu", type=int_arg("--proxy-cpu", 0, last_cpu, cpu),
                        default=min(1, last_cpu), help="the proxy's CPU, and the emulated "
                        "psocks' target_cpu in emulated-cpu and redirect CPU in "
                        "emulated-kfunc (default 1)")
    parser.add_argument("--rcvbuf", type=int_arg("--rcvbuf", 0, 2**31 - 1, "SO_RCVBUF is an "
                                                 "int"), default=0, metavar="BYTES",
                        help="builtin traffic: SO_RCVBUF of the receiving socket (default 0: "
                             "the kernel's default; an ingress redirect queues against it, "
                             "and the kernel doubles it, up to net.core.rmem_max)")
    parser.add_argument("--model-profile", type=profile_arg, default=MODEL_PROFILE,
                        metavar="NAME|FILE",
                        help="the declared machine of the modeled rows (default "
                             f"{MODEL_PROFILE}: a shipped profile or a TOML file)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--plot", type=sockmap_plot_arg, metavar="FILE",
                        help="Gbit/s per mode and per-CPU busy time (.png, .svg or .pdf)")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress lines on stderr")


def _rows(modes: Sequence[str], traffic: str) -> list[Row]:
    rows = [Row(MODES[name], "builtin" if MODES[name].ingress else traffic) for name in modes]
    if traffic != "builtin" and any(r.traffic == "builtin" for r in rows):
        rows.append(Row(MODES["direct"], "builtin"))  # the ingress rows' ratio
    return rows


def run_from_args(ns: argparse.Namespace) -> int:
    """``pybpf bench sockmap``: every mode, ``--rounds`` times, then the report."""
    from .. import netns
    from ..backends import bpf_allowed, system

    traffic = ns.traffic
    if traffic == "auto":
        traffic = "iperf3" if shutil.which("iperf3") else "builtin"
    notes = []
    namespace = None
    why_not = netns.unavailable()
    if why_not:
        notes.append(f"network namespace: not made ({why_not}); on the host's loopback")
    else:
        namespace = netns.NetNamespace()
    try:
        ctx = Context(namespace, ns.client_cpu, ns.server_cpu, ns.proxy_cpu, ns.duration,
                      ns.timeout or ns.duration + 30, shutil.which("iperf3"), ns.rcvbuf)
        rows = _rows(ns.modes, traffic)
        if any(r.mode.backend == "kernel" for r in rows):
            if bpf_allowed():
                ctx.kernel = system("kernel")
            else:
                ctx.kernel_refusal = "bpf(2) is not allowed here (needs root or CAP_BPF)"
                notes.append(f"kernel sockmap modes: refused: {ctx.kernel_refusal}")
        if any(r.mode.backend == "emulated" for r in rows):
            ctx.emulated = system("emulated")
        with report.Progress("bench sockmap", ns.rounds * len(rows),
                             enabled=ns.progress) as progress:
            run_rounds(rows, ctx, ns.rounds, progress)
    finally:
        if namespace is not None:
            namespace.close()
    notes.append(_setup_note(ctx, traffic, namespace is not None))
    document = _document(rows, notes, ns, traffic)
    document["modeled"] = modeled_block(ns.model_profile)
    if ns.json:
        report.dump_json(document)
    else:
        print(_text(document))
    if ns.plot:
        _plot(ns.plot, document)
    return 0


def modeled_block(profile: str) -> dict:
    """The modeled rows' document: the model's figures, or the reason there are none."""
    try:
        return model_sockmap(profile).as_dict()
    except (OSError, RuntimeError, ValueError) as exc:
        return {"profile": profile, "error": f"{type(exc).__name__}: {exc}"}


def _setup_note(ctx: Context, traffic: str, in_namespace: bool) -> str:
    where = "in a network namespace of its own" if in_namespace else "on the host"
    how = (f"iperf3 -t {math.ceil(ctx.duration)}" if traffic == "iperf3"
           else f"builtin traffic, {ctx.duration:g} s")
    return (f"setup: {how} on 127.0.0.1 {where}; client on CPU {ctx.client_cpu}, server on "
            f"CPU {ctx.server_cpu}, proxy on CPU {ctx.proxy_cpu}; RPS on lo: CPUs "
            f"{','.join(map(str, ctx.rps_cpus))}")


# -- reporting --------------------------------------------------------------------------------
def _summary(values: Sequence[float]) -> dict:
    if not values:
        return {}
    return {"median": statistics.median(values), "spread": report.spread(values),
            "min": min(values), "max": max(values), "runs": list(values)}


def _mean_busy(runs: Sequence[Run]) -> dict:
    cpus = sorted({cpu for run in runs for cpu in run.cpu})
    return {str(cpu): {kind: statistics.fmean(run.cpu.get(cpu, {}).get(kind, 0.0)
                                              for run in runs)
                       for kind in CPU_KINDS} for cpu in cpus}


def _workers(runs: Sequence[Run]) -> dict:
    total: dict[int, dict[str, int]] = {}
    for run in runs:
        for cpu, rec in run.workers.items():
            into = total.setdefault(cpu, {})
            for key, value in rec.items():
                into[key] = into.get(key, 0) + value
    seconds = sum(run.seconds for run in runs) or 1.0
    return {str(cpu): {**rec, "busy_percent": 100.0 * rec.get("busy_ns", 0) / 1e9 / seconds}
            for cpu, rec in sorted(total.items())}


def _document(rows: list[Row], notes: list[str], ns: argparse.Namespace,
              traffic: str) -> dict:
    direct = {r.traffic: [run.gbps for run in r.runs] for r in rows
              if r.mode.name == "direct" and r.runs}
    out = []
    for row in rows:
        gbps = [run.gbps for run in row.runs]
        ref = direct.get(row.traffic)
        ratio = None
        if gbps and ref:
            ratio = {"value": statistics.median(gbps) / statistics.median(ref),
                     "noise": max(report.spread(gbps), report.spread(ref))}
        out.append({"mode": row.mode.name, "about": row.mode.about, "traffic": row.traffic,
                    "status": row.status, "error": row.error, "failures": row.failures,
                    "gbps": _summary(gbps), "ratio_to_direct": ratio,
                    "sent_gbps": _summary([run.sent_gbps for run in row.runs]),
                    "complete": bool(row.runs) and all(run.complete for run in row.runs),
                    "cpu_busy": _mean_busy(row.runs), "workers": _workers(row.runs),
                    "runs": [asdict(run) for run in row.runs]})
    config = {k: v for k, v in vars(ns).items()
              if isinstance(v, str | int | float | bool | type(None))}
    config["modes"], config["traffic"] = list(ns.modes), traffic
    return {"config": config,
            "machine": {"cpus": os.cpu_count(), "loadavg": list(os.getloadavg())},
            "rows": out, "notes": notes}


def _text(doc: dict) -> str:
    cpus = sorted({cpu for row in doc["rows"] for cpu in row["cpu_busy"]}, key=int)
    header = ["mode", "traffic", "Gbit/s", "min-max", "x direct", "sent Gbit/s", "runs",
              *[f"cpu{c} usr/sys/si/kworker %" for c in cpus]]
    table, other = [], []
    for row in doc["rows"]:
        g = row["gbps"]
        if not g:
            reason = row["error"] or "; ".join(row["failures"]) or "no run completed"
            status = "failed" if row["status"] == "ok" else row["status"]
            other.append(f"{row['mode']} ({row['traffic']}): {status}: {reason}")
            continue
        ratio = row["ratio_to_direct"]
        busy = [("{user:.0f}/{system:.0f}/{softirq:.0f}/{kworker:.0f}".format(
                 **row["cpu_busy"][c])
                 if c in row["cpu_busy"] else "-") for c in cpus]
        table.append([row["mode"], row["traffic"], f"{g['median']:.2f}",
                      f"{g['min']:.2f}-{g['max']:.2f}",
                      f"{ratio['value']:.2f}x ±{100 * ratio['noise']:.0f}%" if ratio else "-",
                      f"{row['sent_gbps']['median']:.2f}",
                      f"{len(g['runs'])}", *busy])
    out = [report.format_table(header, table)] if table else []
    out += other
    for row in doc["rows"]:
        for failure in row["failures"] if row["gbps"] else ():
            out.append(f"{row['mode']} ({row['traffic']}): failed {failure}")
        if row["gbps"] and not row["complete"]:
            out.append(f"{row['mode']} ({row['traffic']}): more was sent than arrived within "
                       f"{DRAIN_SECONDS:g} s of the window's end (queued in the path; what "
                       "arrived was checked byte by byte)")
        if row["workers"]:
            parts = [f"cpu{cpu} busy {w['busy_percent']:.0f}% ({w['bytes'] / 1e9:.2f} GB, "
                     f"{w['verdicts']} verdicts, {w['backlog_runs']} backlog runs, "
                     f"{w['eagain_retries']} EAGAIN retries, {w['drops']} drops)"
                     for cpu, w in row["workers"].items()]
            out.append(f"{row['mode']} psock workers: " + ", ".join(parts))
    modeled = doc.get("modeled")
    if modeled is not None:
        out.append(f"modeled on {modeled['profile']}: not run: {modeled['error']}"
                   if "error" in modeled else modeled_text(modeled))
    load = doc["machine"]["loadavg"]
    out.append(f"machine: {doc['machine']['cpus']} CPUs, load average {load[0]:.2f} "
               f"{load[1]:.2f} {load[2]:.2f}")
    out += doc["notes"]
    return "\n".join(out)


def _plot(path: str, doc: dict) -> None:
    plt = report.require_matplotlib()
    rows = [r for r in doc["rows"] if r["gbps"]]
    names = [f"{r['mode']}\n({r['traffic']})" for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(10.0, 1.6 * len(rows)), 4.5))
    medians = [r["gbps"]["median"] for r in rows]
    left.bar(names, medians, yerr=[[m - r["gbps"]["min"] for m, r in zip(medians, rows,
                                                                      strict=True)],
                                   [r["gbps"]["max"] - m for m, r in zip(medians, rows,
                                                                      strict=True)]],
             capsize=4)
    left.set_ylabel("Gbit/s (median; bars: slowest to fastest run)")
    left.set_title("throughput through the proxy")
    cpus = sorted({c for r in rows for c in r["cpu_busy"]}, key=int)
    width = 0.8 / max(1, len(cpus))
    for i, cpu in enumerate(cpus):
        xs = [j + (i - (len(cpus) - 1) / 2) * width for j in range(len(rows))]
        bottom = [0.0] * len(rows)
        for kind, colour in (("user", "tab:blue"), ("system", "tab:orange"),
                             ("softirq", "tab:red")):
            values = [r["cpu_busy"].get(cpu, {}).get(kind, 0.0) for r in rows]
            right.bar(xs, values, width, bottom=bottom, color=colour, edgecolor="black",
                      label=kind if i == 0 else None)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    right.set_xticks(range(len(rows)), names)
    right.set_ylabel(f"% of each CPU's time (bars left to right: CPU {', '.join(cpus)})")
    right.set_title("where the work ran")
    right.legend(fontsize="small")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize="x-small", rotation=45)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
