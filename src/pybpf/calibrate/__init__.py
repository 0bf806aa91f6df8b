"""``pybpf calibrate``: measure this host's costs on the kernel backend and write a profile.

What is measured (every probe once per round, rounds interleaved, pinned to one CPU; the figure
kept is the median over the rounds, with the spread written beside it):

- syscall loops in machine code (bench/trigger.py): getppid and connect(-1) with nothing
  attached, and getppid with an empty program on its entry tracepoint, per second of the
  thread's own CPU time (other processes taking the CPU do not count);
- BPF_PROG_TEST_RUN of small socket-filter programs, whose ``duration`` the kernel measures
  per run without the time the task was preempted: an empty program, 1024 instructions, 64
  helper calls, 64 array and hash lookups (4- and 64-byte keys), 64 updates of an existing key,
  10 x (update, lookup, delete) on a preallocated and on a BPF_F_NO_PREALLOC hash map, 64
  random-key LRU updates into a full map and into an empty one, 32 LPM trie lookups;
- memory, in machine code: a pointer chase through a random cycle of cache lines in a buffer
  of an eighth of the last-level cache (shared_hit) and of 128 MiB (dram_local; remote too,
  from memory first touched on another node, where the host has one), a locked add loop
  (atomic), and a line bounced between two CPUs (transfer_local);
- map_perf_test's tests 0, 2, 8 and 9 on one CPU (bench/map_perf.py), kept in the profile's
  [reference] section in ns per event: what the model on this profile should predict.

How each profile value follows from these is written into its ``source`` (``derive``): the
probes' own instructions are charged at the measured per-instruction cost and taken out, and a
map operation's cost is what is left after what the model charges separately (jhash per key
byte, one spinlock per bucket or free list taken, the allocator's fast path). What user space
cannot measure (irq save/restore, kmalloc, call_rcu, irq_work, grace periods, the [net]
receive path's CPU work) is estimated from measured values, the kernel's configuration or a
cited figure, and says so. No value is chosen by looking at the seed patches' published
results: those are the held-out check.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict
from pathlib import Path

from ..bench import report
from ..bench.args import int_arg, output_file_arg, profile_arg
from ..profiles import dump_profile, dumps_profile
from .check import CHECK_TOLERANCE, check
from .derive import host_profile, summary
from .measure import Calibration

DEFAULT_OUTPUT = "~/.config/pybpf/profiles/host.toml"
DEFAULT_ROUNDS = 5
MAX_ROUNDS = 100


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``pybpf calibrate``'s arguments."""
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("--output", "-o", default=DEFAULT_OUTPUT, type=output_file_arg,
                        help=f"profile to write (default {DEFAULT_OUTPUT}); use it with "
                             "--profile FILE")
    parser.add_argument("--rounds", type=int_arg("--rounds", 1, MAX_ROUNDS,
                                                 "about 10 s a round"),
                        default=DEFAULT_ROUNDS,
                        help=f"interleaved rounds of every probe (default {DEFAULT_ROUNDS})")
    cpus = os.cpu_count() or 1
    parser.add_argument("--cpu", type=int_arg("--cpu", 0, cpus - 1, "this host's CPUs"),
                        default=0, help="CPU to measure on (default 0)")
    parser.add_argument("--check", action="store_true",
                        help="the round trip, writing nothing: calibrate, then model "
                             "map_perf_test's tests 0, 2, 8 and 9 on that profile beside the "
                             "kernel's figures of the same rounds (exit status 1 when a "
                             f"modeled rate is off by more than {CHECK_TOLERANCE:.0%}%)")
    parser.add_argument("--profile", type=profile_arg, default=None,
                        help="--check: model with this profile (e.g. the shipped host) and "
                             "measure only the map_perf tests, instead of calibrating first")
    parser.add_argument("--json", action="store_true",
                        help="print the measurements and the profile as one JSON document")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress lines on stderr")


def run(ns: argparse.Namespace) -> int:
    """``pybpf calibrate``: measure and write the profile, or ``--check`` the round trip."""
    from ..backends import system

    calib = Calibration(system("kernel"), ns.cpu, ns.rounds, ns.progress)
    if ns.check:
        return check(calib, ns)
    samples = calib.measure()
    profile = host_profile(samples, calib.host)
    try:
        dump_profile(profile, ns.output, header=PROFILE_HEADER)
    except OSError as exc:  # the check at parsing passed, the write did not (e.g. in /proc)
        print(dumps_profile(profile, PROFILE_HEADER))
        print(f"pybpf calibrate: cannot write {ns.output}: {exc.strerror}; the profile is on "
              "standard output above: save it and pass it with --profile FILE", file=sys.stderr)
        return 1
    if ns.json:
        report.dump_json({"profile": str(Path(ns.output).expanduser()),
                          "host": calib.host,
                          "samples": {k: asdict(s) | {"median": s.median}
                                      for k, s in samples.items()},
                          "values": {k: v.value for k, v in profile.values.items()},
                          "reference": {k: v.value for k, v in profile.reference.items()}})
    else:
        print(summary(samples, profile))
        print(f"wrote {Path(ns.output).expanduser()}; use it with --profile "
              f"{Path(ns.output).expanduser()}")
    return 0



PROFILE_HEADER = """\
Written by `pybpf calibrate`: this host's costs, measured on the kernel backend.
Each value's source says how it was measured or derived; see pybpf/calibrate/derive.py."""
