"""``pybpf bench cpumap``: XDP redirect to another CPU, GRO on and off, on both backends, beside
``xdp-bench redirect-cpu`` (issue 11; the GRO series' trafficgen UDP test,
shared/reference/patches-followups.md section 2).

Rules this module keeps:
- One setup per run, made fresh and always torn down (``pybpf.testing.veth``): a veth pair
  vA -> vB (a throw-away namespace on the kernel, the emulated machine's network otherwise),
  vB with GRO on or off, a native XDP program on vB redirecting every frame to a CPUMAP entry
  for ``--cpu`` (``--qsize`` 2048), a UDP socket with UDP_GRO on vB read by a thread, and raw
  tracepoint programs on ``xdp:xdp_cpumap_kthread`` and ``xdp:xdp_cpumap_enqueue`` adding
  processed and dropped frames into an ARRAY map: pybpf's own counting.
- Traffic is pybpf's own: BPF_PROG_TEST_RUN in live-frames mode of an XDP_TX program with
  ingress vA, batches of 64, from a thread pinned to ``--gen-cpu``. Each frame goes vA's
  ``ndo_xdp_xmit`` -> vB's ring -> vB's program -> the cpumap -> the kthread on ``--cpu``
  -> GRO -> UDP. The frame is Ethernet + IPv6 + UDP with an 18-byte payload and a valid
  checksum (80 bytes), the frame ``xdp-trafficgen -s 84`` makes for the reference.
- Figures of a run: kthread Mpps = frames the kthread took off its ring / generation time
  (the test run's wall time); offered Mpps = frames / generation time; ring drops; frames
  per skb reaching UDP = UDP segments read / datagrams read (the UDP_GRO segment size gives
  the segments).
- Rounds are interleaved (every row once per round, ``--runs`` rounds); a row reports the
  median and the spread of its rounds (report.spread). The reference (kernel only, when
  xdp-tools can run here) is xdp-trafficgen + xdp-bench on the same setup in the same round;
  pybpf's kernel rows are compared with it as a rate ratio within the noise (report.Ratio).
- The emulated rows run the same code on the emulated backend with fewer frames
  (``--emulated-frames``): the emulator's Python speed, and its counters (skb heads from the
  NAPI cache, GRO merges) that show the series' mechanism. Beside the host rate they give
  the modeled kthread Mpps of the machine ``--profile`` declares (bench/cpumap_model.py:
  the same setup's modeled time, the same on every run), labelled as such.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R6,
    R7,
    add64,
    atomic_add64,
    call,
    exit_,
    jeq,
    label,
    ld_map_fd,
    ldxdw,
    mov64,
    st,
)
from ..commands import CommandError
from ..maps import ArrayMap
from ..packet import udp_frame
from ..programs import Program, ProgramSpec
from ..redirect_maps import CpuMap, CpuMapEntry
from ..testing.veth import veth_pair
from ..uapi import BPF_F_TEST_XDP_LIVE_FRAMES, AttachType, ProgType, XdpAction
from . import report
from .args import U32_MAX, int_arg, plot_arg, profile_arg
from .cpumap_model import model_cpumap_rate
from .xdp_tools import ReferenceUnavailable, find_tools, run_reference

LIVE_BATCH = 64
UDP_PORT = 9000
PAYLOAD = b"\x5a" * 18
A_ADDR, B_ADDR = "fd00::1", "fd00::2"
GRO_STATES = (True, False)
# ARRAY map slots the counting programs add into (16 bytes each: processed, drops)
KTHREAD_SLOT, ENQUEUE_SLOT = 0, 1


# -- programs ---------------------------------------------------------------------------------
def redirect_program(cpumap: Any, cpu: int) -> list:
    """The XDP program on vB: every frame to the cpumap entry of ``cpu`` (no-touch)."""
    return [ld_map_fd(R1, cpumap), mov64(R2, cpu), mov64(R3, 0),
            call("redirect_map"), exit_()]


def generator_program() -> list:
    """The live-frames generator: XDP_TX, which a live test run turns into a redirect to the
    ingress device (vA), i.e. vA's ndo_xdp_xmit into vB."""
    return [mov64(R0, XdpAction.TX), exit_()]


def counting_program(counts: Any, slot: int) -> list:
    """A raw tracepoint program adding args[1] (processed) and args[2] (drops) into
    ``counts[slot]`` (patches-followups.md section 2.5's counting program)."""
    return [ldxdw(R6, R1, 8), ldxdw(R7, R1, 16), st(4, FP, -4, slot),
            mov64(R2, FP), add64(R2, -4), ld_map_fd(R1, counts), call("map_lookup_elem"),
            jeq(R0, 0, "out"), atomic_add64(R0, 0, R6), atomic_add64(R0, 8, R7),
            label("out"), mov64(R0, 0), exit_()]


# -- one run ----------------------------------------------------------------------------------
@dataclass
class Run:
    """What one run of one row measured."""

    frames: int
    seconds: float  # generation time
    kthread: int  # frames the kthread took off its ring
    enqueued: int  # frames flushed towards the ring
    ring_drops: int  # of which found it full
    datagrams: int  # skbs that reached UDP and were read
    segments: int  # the frames they carried
    counters: dict = field(default_factory=dict)  # emulated: the data path's own counters

    @property
    def kthread_mpps(self) -> float:
        return self.kthread / self.seconds / 1e6 if self.seconds else 0.0

    @property
    def offered_mpps(self) -> float:
        return self.frames / self.seconds / 1e6 if self.seconds else 0.0

    @property
    def frames_per_skb(self) -> float:
        return self.segments / self.datagrams if self.datagrams else 0.0


def measure(system: Any, *, gro: bool, frames: int, cpu: int, gen_cpu: int,
            qsize: int) -> Run:
    """One pybpf run on ``system`` (see the module rules)."""
    with veth_pair(system, a_addr=A_ADDR, b_addr=B_ADDR) as pair:
        pair.set_gro(pair.b, gro)
        receiver = pair.udp_receiver(UDP_PORT, gro=True, v6=True)
        cpumap = CpuMap(cpu + 1, system=system)
        counts = ArrayMap(2, value_size=16, system=system)
        redirect = Program.load(ProgramSpec(ProgType.XDP, redirect_program("c", cpu),
                                            expected_attach_type=AttachType.XDP),
                                system, maps={"c": cpumap})
        gen = Program.load(ProgramSpec(ProgType.XDP, generator_program()), system)
        counters = [Program.load(ProgramSpec(ProgType.RAW_TRACEPOINT,
                                             counting_program("n", slot)),
                                 system, maps={"n": counts})
                    for slot in (KTHREAD_SLOT, ENQUEUE_SLOT)]
        with pair.entered():
            cpumap[cpu] = CpuMapEntry(qsize)
            links = [redirect.attach_xdp(pair.ifindex(pair.b)),
                     counters[0].attach_raw_tracepoint("xdp_cpumap_kthread"),
                     counters[1].attach_raw_tracepoint("xdp_cpumap_enqueue")]
            frame = udp_frame(pair.mac(pair.b), pair.mac(pair.a), A_ADDR, B_ADDR, 1234,
                              UDP_PORT, PAYLOAD)
            ctx = struct.pack("<6I", 0, len(frame), 0, pair.ifindex(pair.a), 0, 0)
            seconds = _generate(system, gen, frame, ctx, frames, gen_cpu)
            kthread, enqueued, drops = _settle(counts)
        run_counters = _emulated_counters(system, cpumap)
        for link in links:
            link.close()
        receiver.stop()
        for obj in (redirect, gen, *counters, cpumap, counts):
            obj.close()
        return Run(frames, seconds, kthread, enqueued, drops, receiver.datagrams,
                   receiver.segments, run_counters)


def _generate(system: Any, gen: Any, frame: bytes, ctx: bytes, frames: int,
              gen_cpu: int) -> float:
    """The live-frames test run, on ``gen_cpu``; its wall time in seconds."""
    with system.on_cpu(gen_cpu):
        start = time.perf_counter()
        gen.test_run(frame, ctx=ctx, repeat=frames, flags=BPF_F_TEST_XDP_LIVE_FRAMES,
                     batch_size=LIVE_BATCH, data_size_out=0, ctx_size_out=0)
        return time.perf_counter() - start


def _settle(counts: Any, quiet: float = 0.3, limit: float = 30.0) -> tuple[int, int, int]:
    """Wait until the counts stop moving (the kthread has emptied its ring); (kthread
    processed, enqueue processed, enqueue drops)."""
    deadline = time.monotonic() + limit
    last = None
    while time.monotonic() < deadline:
        now = [counts[slot] for slot in (KTHREAD_SLOT, ENQUEUE_SLOT)]
        if now == last:
            break
        last = now
        time.sleep(quiet)
    kthread, _ = struct.unpack("<QQ", last[0])
    enqueued, drops = struct.unpack("<QQ", last[1])
    return kthread, enqueued, drops


def _emulated_counters(system: Any, cpumap: Any) -> dict:
    """The emulated data path's own counters for the entry and the skb heads (kernel: none)."""
    stats = getattr(system, "map_stats", None)
    if stats is None:
        return {}
    entries = stats(cpumap.fd).get("entries", {})
    return next(iter(entries.values()), {})


# -- the whole benchmark ----------------------------------------------------------------------
@dataclass
class Row:
    name: str  # "kernel", "emulated", "xdp-bench"
    gro: bool
    runs: list = field(default_factory=list)  # Run (or ReferenceRun) per round
    error: str = ""  # the reference: why it stopped being measured

    def mpps(self) -> list[float]:
        return [r.kthread_mpps for r in self.runs]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("--backend", choices=("kernel", "emulated", "both"), default="both",
                        help="which backends to measure (default both; the kernel rows need "
                             "bpf(2))")
    parser.add_argument("--runs", type=int_arg("--runs", 1, 100), default=5,
                        help="rounds; every row runs once per round (default 5)")
    parser.add_argument("--frames", type=int_arg("--frames", 1, U32_MAX,
                                                 "BPF_PROG_TEST_RUN's repeat is a u32"),
                        default=6_000_000, help="frames per kernel run, the reference's too "
                        "(default 6000000: a few seconds of traffic, so xdp-bench has whole "
                        "seconds to report)")
    parser.add_argument("--emulated-frames", type=int_arg("--emulated-frames", 1, U32_MAX),
                        default=4096, help="frames per emulated run (default 4096)")
    parser.add_argument("--cpu", type=int_arg("--cpu", 0, 4095), default=1,
                        help="the cpumap entry's CPU (default 1)")
    parser.add_argument("--gen-cpu", type=int_arg("--gen-cpu", 0, 4095), default=0,
                        help="the generator's CPU (default 0)")
    parser.add_argument("--qsize", type=int_arg("--qsize", 1, 16384, "cpumap's limit"),
                        default=2048, help="the cpumap entry's ring size (default 2048)")
    parser.add_argument("--xdp-bench", metavar="PATH", help="xdp-bench to run as the "
                        "reference (default: the one on PATH)")
    parser.add_argument("--xdp-trafficgen", metavar="PATH", help="xdp-trafficgen for the "
                        "reference's traffic (default: the one on PATH)")
    parser.add_argument("--no-reference", action="store_true",
                        help="skip xdp-bench even where it can run")
    parser.add_argument("--profile", type=profile_arg, default="host",
                        help="the machine the emulated rows' modeled Mpps are for (a shipped "
                             "profile or a TOML file; default host)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--plot", type=plot_arg, metavar="FILE",
                        help="a bar chart of the kthread rates")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress lines on stderr")


def run_from_args(ns: argparse.Namespace) -> int:
    """``pybpf bench cpumap``: every row, ``--runs`` times, the reference beside, the report."""
    import pybpf

    backends = ["kernel", "emulated"] if ns.backend == "both" else [ns.backend]
    systems: dict[str, Any] = {}
    notes = []
    for backend in backends:
        try:
            systems[backend] = pybpf.system(backend)
        except OSError as exc:
            if ns.backend != "both":
                raise CommandError(f"the {backend} backend cannot run here: {exc}") from None
            notes.append(f"{backend}: not measured ({exc})")
    if "emulated" in systems:  # every emulated run gets a machine of its own (fresh caches)
        emulated_cpus = systems["emulated"].num_possible_cpus
        systems["emulated"] = lambda: pybpf.system("emulated", cpus=emulated_cpus)
    for name, system in systems.items():
        system = system() if callable(system) else system
        for cpu in (ns.cpu, ns.gen_cpu):
            if cpu >= system.num_possible_cpus:
                raise CommandError(f"CPU {cpu} does not exist on the {name} backend "
                                   f"(CPUs 0-{system.num_possible_cpus - 1})")
    tools = None
    if "kernel" in systems and not ns.no_reference:
        try:
            tools = find_tools(ns.xdp_bench, ns.xdp_trafficgen)
        except ReferenceUnavailable as exc:
            notes.append(f"xdp-bench reference: not measured ({exc})")
    rows = [Row(name, gro) for name in systems for gro in GRO_STATES]
    ref_rows = [Row("xdp-bench", gro) for gro in GRO_STATES] if tools else []
    total = ns.runs * (len(rows) + len(ref_rows))
    with report.Progress("bench cpumap", total, enabled=ns.progress) as progress:
        for _ in range(ns.runs):
            for row in rows:
                frames = ns.frames if row.name == "kernel" else ns.emulated_frames
                progress.note = f"{row.name} GRO {'on' if row.gro else 'off'}"
                system = systems[row.name]
                row.runs.append(measure(system() if callable(system) else system, gro=row.gro,
                                        frames=frames, cpu=ns.cpu, gen_cpu=ns.gen_cpu,
                                        qsize=ns.qsize))
                progress.advance()
            for row in ref_rows:
                if not row.error:
                    progress.note = f"xdp-bench GRO {'on' if row.gro else 'off'}"
                    try:
                        row.runs.append(_reference_run(tools, row.gro, ns))
                    except ReferenceUnavailable as exc:
                        row.error = str(exc)
                progress.advance()
    modeled = {}
    if "emulated" in systems:
        for gro in GRO_STATES:
            try:
                modeled[gro] = model_cpumap_rate(ns.profile, gro=gro, cpu=ns.cpu,
                                                 producer_cpu=ns.gen_cpu).as_dict()
            except ValueError as exc:
                raise CommandError(f"modeled rate on {ns.profile}: {exc}") from None
    document = _document(rows, ref_rows, notes, ns, modeled)
    if ns.json:
        report.dump_json(document)
    else:
        print(_text(document))
    if ns.plot:
        _plot(ns.plot, document)
    return 0


def _reference_run(tools: tuple[str, str], gro: bool, ns: argparse.Namespace):
    from ..testing.veth import KernelVethPair

    frame_len = len(udp_frame(bytes(6), bytes(6), A_ADDR, B_ADDR, 1, 1, PAYLOAD))
    with KernelVethPair("vA", "vB", A_ADDR, B_ADDR) as pair:
        pair.set_gro(pair.b, gro)
        receiver = pair.udp_receiver(UDP_PORT, gro=True, v6=True)
        return run_reference(pair, tools, cpu=ns.cpu, gen_cpu=ns.gen_cpu, qsize=ns.qsize,
                             frames=ns.frames, frame_len=frame_len, receiver=receiver)


# -- reporting --------------------------------------------------------------------------------
def _summary(values: Sequence[float]) -> dict:
    return {"median": statistics.median(values), "spread": report.spread(values),
            "runs": list(values)} if values else {}


def _document(rows: list[Row], ref_rows: list[Row], notes: list[str],
              ns: argparse.Namespace, modeled: dict | None = None) -> dict:
    """The JSON document; an emulated row carries ``modeled`` (model_cpumap_rate's figures
    for ``--profile``: ``modeled["mpps"]`` is the modeled kthread Mpps)."""
    out_rows = []
    for row in rows:
        runs = row.runs
        out_rows.append({
            "backend": row.name, "gro": row.gro,
            "modeled": (modeled or {}).get(row.gro) if row.name == "emulated" else None,
            "kthread_mpps": _summary([r.kthread_mpps for r in runs]),
            "offered_mpps": _summary([r.offered_mpps for r in runs]),
            "frames_per_skb": _summary([r.frames_per_skb for r in runs]),
            "ring_drops": [r.ring_drops for r in runs],
            "counters": runs[-1].counters if runs else {},
            "runs": [asdict(r) for r in runs]})
    out_ref = [{"backend": "xdp-bench", "gro": row.gro, "error": row.error,
                "kthread_mpps": _summary([r.kthread_pps / 1e6 for r in row.runs]),
                "frames_per_skb": _summary([r.frames_per_skb for r in row.runs])}
               for row in ref_rows]
    ratios = {}
    for row in ref_rows:
        mine = next((r for r in rows if r.name == "kernel" and r.gro == row.gro), None)
        if mine and mine.runs and row.runs:
            ours, theirs = mine.mpps(), [r.kthread_pps / 1e6 for r in row.runs]
            ratios["gro on" if row.gro else "gro off"] = _rate_ratio(ours, theirs)
    config = {k: v for k, v in vars(ns).items()
              if isinstance(v, str | int | float | bool | type(None))}
    return {"config": config,
            "machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()},
            "rows": out_rows, "reference": out_ref, "ratios": ratios, "notes": notes}


def _rate_ratio(ours: Sequence[float], ref: Sequence[float], target: float = 0.9) -> dict:
    """median(ours) / median(ref) with the larger spread of the two as its noise, and the
    verdict against ``target`` only where the whole noise band is on one side of it."""
    value = statistics.median(ours) / statistics.median(ref)
    noise = max(report.spread(ours), report.spread(ref))
    if value / (1 + noise) >= target:
        verdict = "meets"
    elif value * (1 + noise) < target:
        verdict = "misses"
    else:
        verdict = "within noise of"
    return {"pybpf_over_xdp_bench": value, "noise": noise, "verdict": verdict}


def _text(doc: dict) -> str:
    def cell(summary: dict, digits: int = 3) -> str:
        if not summary:
            return "-"
        return f"{summary['median']:.{digits}f} ±{100 * summary['spread']:.0f}%"

    profile = doc["config"].get("profile")
    header = ["backend", "GRO", "kthread Mpps (host time)", f"modeled Mpps ({profile})",
              "offered Mpps", "frames/skb at UDP", "runs"]
    lines = []
    for row in doc["rows"] + doc["reference"]:
        model = row.get("modeled")
        lines.append([row["backend"], "on" if row["gro"] else "off", cell(row["kthread_mpps"]),
                      f"{model['mpps']:.2f}" if model else "-",
                      cell(row.get("offered_mpps", {})), cell(row["frames_per_skb"], 1),
                      len(row["kthread_mpps"].get("runs", []))])
    out = [report.format_table(header, lines)]
    for name, ratio in doc["ratios"].items():
        out.append(f"pybpf / xdp-bench kthread rate, {name}: {ratio['pybpf_over_xdp_bench']:.2f}x"
                   f" (noise ±{100 * ratio['noise']:.0f}%): {ratio['verdict']} 0.9x")
    for row in doc["rows"]:
        counters = row["counters"]
        if counters:
            out.append(f"emulated GRO {'on' if row['gro'] else 'off'}: skb heads "
                       f"{counters['skb_heads']}, recycled through the NAPI cache "
                       f"{counters['heads_recycled']}, GRO merged {counters['gro']['merged']}")
    if any(row.get("modeled") for row in doc["rows"]):
        out.append(f"modeled Mpps: a saturated cpumap kthread on profile {profile}, from the "
                   "emulated path's modeled time (bench/cpumap_model.py; the same on every "
                   "run); the kthread Mpps column is the emulator's speed on this host")
    load = doc["machine"]["loadavg"]
    out.append(f"machine: {doc['machine']['cpus']} CPUs, load average {load[0]:.2f} "
               f"{load[1]:.2f} {load[2]:.2f}")
    out += doc["notes"]
    return "\n".join(out)


def _plot(path: str, doc: dict) -> None:
    plt = report.require_matplotlib()
    rows = [r for r in doc["rows"] + doc["reference"] if r["kthread_mpps"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    names = [f"{r['backend']}\nGRO {'on' if r['gro'] else 'off'}" for r in rows]
    medians = [r["kthread_mpps"]["median"] for r in rows]
    runs = [r["kthread_mpps"]["runs"] for r in rows]
    errors = [[m - min(r) for m, r in zip(medians, runs, strict=True)],
              [max(r) - m for m, r in zip(medians, runs, strict=True)]]
    ax.bar(names, medians, yerr=errors, capsize=4)
    ax.set_ylabel("cpumap kthread Mpps (median; bars: slowest to fastest run)")
    ax.set_yscale("log")
    ax.set_title("XDP redirect to a CPU: GRO on and off")
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
