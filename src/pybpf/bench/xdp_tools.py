"""The reference the kernel's own developers use for cpumap: ``xdp-bench redirect-cpu`` on the
receiving end, ``xdp-trafficgen udp`` on the sending end (xdp-tools).

Rules this module keeps:
- Both tools run inside the pair's namespace, xdp-bench with ``-c CPU -q QSIZE -p no-touch
  -s -e -i 1`` (as in the GRO series' own measurements, with the per-step lines;
  line-buffered through stdbuf so its statistics are read as they come), xdp-trafficgen
  pinned to the generator CPU with ``-n FRAMES -t 1 -s LEN`` (its UDP is IPv6 only; a frame
  without payload never merges: UDP GRO needs one); a UDP socket with UDP_GRO on the
  receiving end.
- The reference rate is xdp-bench's own count: the median of its per-second ``kthread
  total`` rates over the seconds the generator was fully running (those whose receive rate
  is at least half the best one).
- A tool that is missing, or that starts and exits with an error (xdp-tools 1.3.1 from
  Debian bookworm cannot load its programs on 6.18: its object names the
  ``xdp_redirect_map_err`` tracepoint, which the kernel no longer has), makes
  ``ReferenceUnavailable`` with the tool's own words, never a made-up figure.
"""

from __future__ import annotations

import re
import shutil
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass

UDP_PORT = 9000
ETH_FCS_LEN = 4  # xdp-trafficgen's -s counts the frame check sequence
_SUMMARY = re.compile(r"\brx/s\b")
_RATE = re.compile(r"^\s*(receive|kthread)(?: total)?\s+([\d,]+)\s+pkt/s")


class ReferenceUnavailable(RuntimeError):
    """xdp-bench or xdp-trafficgen cannot run here; the message says why."""


@dataclass(frozen=True)
class ReferenceRun:
    kthread_pps: float  # xdp-bench's kthread rate while the generator ran
    receive_pps: float  # xdp-bench's XDP receive rate then
    frames_per_skb: float  # what the UDP socket saw
    seconds: int  # full-rate seconds the figure is the median of


def find_tools(xdp_bench: str | None, xdp_trafficgen: str | None) -> tuple[str, str]:
    """The two programs (given paths, else found on PATH); ReferenceUnavailable if not."""
    found = []
    for name, given in (("xdp-bench", xdp_bench), ("xdp-trafficgen", xdp_trafficgen)):
        path = given or shutil.which(name)
        if not path or not shutil.which(path):
            raise ReferenceUnavailable(f"{name} is not installed (apt-get install xdp-tools, or "
                                       f"pass --{name} PATH to a build of xdp-tools)")
        found.append(path)
    return found[0], found[1]


def parse_rates(output: str) -> tuple[list[float], list[float]]:
    """xdp-bench's per-interval (receive total, kthread total) rates, in order."""
    receive, kthread = [], []
    for line in output.splitlines():
        match = _RATE.match(line)
        if match:
            value = float(match.group(2).replace(",", ""))
            (receive if match.group(1) == "receive" else kthread).append(value)
    return receive, kthread


def full_rate_kthread(receive: list[float], kthread: list[float]) -> tuple[float, float, int]:
    """(median kthread rate, median receive rate, seconds) over the intervals whose receive
    rate is at least half the best one."""
    best = max(receive, default=0.0)
    busy = [i for i, rate in enumerate(receive[:len(kthread)]) if best and rate >= best / 2]
    if not busy:
        raise ReferenceUnavailable("xdp-bench saw no traffic (did xdp-trafficgen run?)")
    return (statistics.median(kthread[i] for i in busy),
            statistics.median(receive[i] for i in busy), len(busy))


def run_reference(pair, tools: tuple[str, str], *, cpu: int, gen_cpu: int, qsize: int,
                  frames: int, frame_len: int, receiver) -> ReferenceRun:
    """One reference run on ``pair`` (a KernelVethPair with IPv6 addresses, GRO already set
    on its receiving end, ``receiver`` draining the UDP port); ``frame_len`` bytes a frame
    (Ethernet to the end of the UDP payload)."""
    xdp_bench, trafficgen = tools
    ns = pair.ns
    bench = ns.popen(["stdbuf", "-oL", xdp_bench, "redirect-cpu", "-c", str(cpu), "-q", str(qsize),
                      "-p", "no-touch", "-s", "-e", "-i", "1", pair.b],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(bench.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        _wait_until_attached(bench, lines)
        gen = ns.run(["taskset", "-c", str(gen_cpu), trafficgen, "udp", pair.a,
                      "-m", pair.mac(pair.b).hex(":"), "-M", pair.mac(pair.a).hex(":"),
                      "-a", pair.b_addr, "-A", pair.a_addr, "-p", str(UDP_PORT),
                      "-s", str(frame_len + ETH_FCS_LEN), "-n", str(frames), "-t", "1"],
                     check=False, timeout=600)
        if gen.returncode and "xmit/s" not in gen.stdout + gen.stderr:
            # (1.3.x and later exit 1 after a run with -n even when every frame went out)
            raise ReferenceUnavailable(f"xdp-trafficgen failed ({gen.returncode}): "
                                       f"{_tail(gen.stdout + gen.stderr)}")
        time.sleep(2.2)  # two more intervals: the last full second is printed
    finally:
        if bench.poll() is None:
            bench.send_signal(signal.SIGINT)
        try:
            bench.wait(timeout=10)
        except subprocess.TimeoutExpired:
            bench.kill()
        reader.join(timeout=5)
    kthread, receive, seconds = full_rate_kthread(*parse_rates("".join(lines)))
    return ReferenceRun(kthread, receive, receiver.frames_per_skb, seconds)


def _wait_until_attached(bench: subprocess.Popen, lines: list[str]) -> None:
    """Until xdp-bench prints its first statistics (it has attached), or fails."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(_SUMMARY.search(line) for line in list(lines)):
            return
        if bench.poll() is not None:
            time.sleep(0.2)  # let the reader take the last words
            raise ReferenceUnavailable(f"xdp-bench exited ({bench.returncode}): "
                                       f"{_tail(''.join(lines))}")
        time.sleep(0.1)
    raise ReferenceUnavailable("xdp-bench printed no statistics within 20 s")


def _tail(text: str, lines: int = 4) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " / ".join(kept[-lines:]) or "(no output)"
